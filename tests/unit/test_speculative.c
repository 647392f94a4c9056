/* Speculative decoding (engine/speculative.h): the acceptance rule keeps
 * the target's distribution, by chi-square against the exact one on a
 * small vocabulary and against plain sampling on the embedded mix4-1m;
 * greedy acceptance is the argmax's prefix; the adaptive n; and
 * sf_sampler_probs is what sf_sample draws from. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward.h"
#include "engine/kernels.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "engine/tokenizer.h"
#include "formats/model.h"
#include "unit.h"

#define V 6

/* The chi-square bound at p = 0.001 for df degrees of freedom
 * (Wilson-Hilferty). */
static double chi2_bound(int df)
{
	double k = 2.0 / (9.0 * df);
	return df * pow(1.0 - k + 3.09 * sqrt(k), 3.0);
}

/* softmax(logits / temp), the top_k largest kept and renormalised */
static void expected(const float *logits, float temp, int top_k, double *p)
{
	double sum = 0.0, kept = 0.0;
	top_k = top_k ? top_k : V;
	for (int i = 0; i < V; i++)
		sum += p[i] = exp((double)logits[i] / temp);
	for (int i = 0; i < V; i++) {
		int above = 0;
		for (int j = 0; j < V; j++)
			above += logits[j] > logits[i];
		p[i] = above < top_k ? p[i] / sum : 0.0;
		kept += p[i];
	}
	for (int i = 0; i < V; i++)
		p[i] /= kept;
}

static double chi2(const long *count, const double *p, long n, int *df)
{
	double x = 0.0;
	*df = -1;
	for (int i = 0; i < V; i++)
		if (p[i] > 0) {
			x += (count[i] - n * p[i]) * (count[i] - n * p[i]) / (n * p[i]);
			++*df;
		}
	return x;
}

static void init(struct sf_sampler *s, float temp, int top_k, uint64_t seed)
{
	struct sf_err e = { 0 };
	CHECK(sf_sampler_init(s, V, temp, 1.0f, seed, &e) == 0, "%s", e.msg);
	s->top_k = top_k;
}

/* Two proposals from a draft unlike the target, verified many times:
 * the first token has the target's first distribution, the second
 * (after an accepted first) its second; sf_sample and sf_sampler_probs
 * agree on the first. */
static void check_rule(float temp, int top_k)
{
	const float target[3][V] = { { 1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f },
				     { 0.0f, -0.5f, 2.5f, 1.0f, 1.0f, 0.2f },
				     { 0.3f, 0.3f, 0.3f, 0.3f, 0.3f, 3.0f } };
	const float draft[2][V] = { { 2.5f, 0.0f, 1.0f, 1.0f, -1.0f, 0.5f },
				    { 1.0f, 1.0f, 0.0f, 2.0f, 0.0f, 0.0f } };
	const long N = 20000;
	long first[V] = { 0 }, second[V] = { 0 }, plain[V] = { 0 }, n2 = 0;
	struct sf_sampler ts, ds, ps;
	struct sf_spec sp;
	struct sf_err e = { 0 };
	float logits[3 * V], dl[V];
	double p0[V], p1[V];
	int df;

	init(&ts, temp, top_k, 1);
	init(&ds, temp, top_k, 2);
	init(&ps, temp, top_k, 3);
	CHECK(sf_spec_init(&sp, V, 2, 0, 0.0, 0, &e) == 0, "%s", e.msg);
	for (long t = 0; t < N; t++) {
		int32_t d[2], next;
		int more;
		for (int i = 0; i < 2; i++) {
			memcpy(dl, draft[i], sizeof(dl));
			d[i] = sf_spec_propose(&sp, &ds, dl, i, &more);
		}
		memcpy(logits, target, sizeof(logits));
		int a = sf_spec_verify(&sp, &ts, d, 2, logits, &next);
		if (a < 0 || a > 2 || next < 0 || next >= V) {
			CHECK(0, "a %d next %d", a, next);
			break;
		}
		first[a >= 1 ? d[0] : next]++;
		if (a >= 1) {
			second[a >= 2 ? d[1] : next]++;
			n2++;
		}
		memcpy(dl, target[0], sizeof(dl));
		plain[sf_sample(&ps, dl)]++;
	}
	expected(target[0], temp, top_k, p0);
	expected(target[1], temp, top_k, p1);
	double x = chi2(first, p0, N, &df);
	CHECK(x < chi2_bound(df), "temp %g top-k %d: first token chi-square %g over %g", (double)temp,
	      top_k, x, chi2_bound(df));
	x = chi2(second, p1, n2, &df);
	CHECK(x < chi2_bound(df), "temp %g top-k %d: second token chi-square %g over %g (%ld)",
	      (double)temp, top_k, x, chi2_bound(df), n2);
	x = chi2(plain, p0, N, &df);
	CHECK(x < chi2_bound(df), "temp %g top-k %d: sf_sample chi-square %g over %g", (double)temp,
	      top_k, x, chi2_bound(df));
	CHECK(sp.passes == (uint64_t)N && sp.proposed == 2 * (uint64_t)N, "figures");
	/* the draft is unlike the target: some proposals rejected, some not */
	CHECK(sp.accepted > 0 && sp.accepted < sp.proposed, "accepted %llu of %llu",
	      (unsigned long long)sp.accepted, (unsigned long long)sp.proposed);
	sf_spec_free(&sp);
	sf_sampler_free(&ts);
	sf_sampler_free(&ds);
	sf_sampler_free(&ps);
}

/* Greedy: the prefix the argmax agrees with, then the argmax; verifying
 * leaves n to sf_spec_step. */
static void check_greedy(void)
{
	struct sf_sampler ts, ds;
	struct sf_spec sp;
	struct sf_err e = { 0 };
	float logits[4 * V] = { 0 }, dl[V] = { 0 };
	int32_t next;
	int more;

	init(&ts, 0.0f, 0, 1);
	init(&ds, 0.0f, 0, 2);
	CHECK(sf_spec_init(&sp, V, 5, 2, 0.9, 1, &e) == 0, "%s", e.msg);
	CHECK(sp.n == 5, "n starts at max: %d", sp.n);
	/* greedy's distribution: all on the argmax */
	float probs[V];
	dl[2] = 1.0f;
	sf_sampler_probs(&ts, dl, probs);
	CHECK(probs[2] == 1.0f && probs[0] == 0.0f && probs[5] == 0.0f, "greedy probs");
	dl[2] = 0.0f;
	/* p-min stops only after min proposals */
	dl[3] = 0.1f;
	CHECK(sf_spec_propose(&sp, &ds, dl, 0, &more) == 3 && more, "first proposal");
	dl[3] = 0.1f;
	CHECK(sf_spec_propose(&sp, &ds, dl, 1, &more) == 3 && !more, "second proposal stops");
	dl[4] = 9.0f;
	CHECK(sf_spec_propose(&sp, &ds, dl, 2, &more) == 4 && more, "a sure proposal goes on");

	const int32_t d[3] = { 1, 2, 3 };
	logits[0 * V + 1] = logits[1 * V + 2] = logits[2 * V + 5] = logits[3 * V + 0] = 1.0f;
	CHECK(sf_spec_verify(&sp, &ts, d, 3, logits, &next) == 2 && next == 5, "next %d", next);
	logits[2 * V + 3] = 2.0f;
	CHECK(sf_spec_verify(&sp, &ts, d, 3, logits, &next) == 3 && next == 0, "next %d", next);
	CHECK(sf_spec_verify(&sp, &ts, d, 0, logits, &next) == 0 && next == 1, "no proposals");
	logits[0] = 5.0f;
	CHECK(sf_spec_verify(&sp, &ts, d, 1, logits, &next) == 0 && next == 0, "next %d", next);
	CHECK(sp.n == 5 && sp.passes == 4 && sp.proposed == 7 && sp.accepted == 5,
	      "n %d, %llu passes, %llu proposed, %llu accepted", sp.n,
	      (unsigned long long)sp.passes, (unsigned long long)sp.proposed,
	      (unsigned long long)sp.accepted);
	sf_spec_free(&sp);
	CHECK(sf_spec_init(&sp, V, 3, 4, 0.5, 1, &e) == -EINVAL, "min over max refused");
	sf_sampler_free(&ts);
	sf_sampler_free(&ds);
}

/* n passes of k proposals, each keeping the first of every run of
 * `kept` + 1 (acceptance kept / (kept + 1)), the model's pass costing c0 +
 * c1 k seconds and the draft d per proposal: the n sf_spec_best_n picks. */
static int best_after(int max, int min, int kept, double c0, double c1, double d)
{
	struct sf_spec sp;
	struct sf_err e = { 0 };
	int n = -1;

	if (sf_spec_init(&sp, V, max, min, 0.0, 1, &e) == 0) {
		for (int i = 0; i < 60; i++) {
			int k = 1 + i % max;	/* counts that vary, as the probes make them */
			int a = k < kept + 1 ? k : kept;
			sf_spec_observe(&sp, k, a, c0 + c1 * k, d);
		}
		n = sf_spec_best_n(&sp);
		sf_spec_free(&sp);
	}
	return n;
}

/* The adaptive n against the expected tokens per second worked by hand:
 * at acceptance a a pass of k yields (1 - a^(k+1)) / (1 - a) tokens. */
static void check_costs(void)
{
	struct sf_spec sp;
	struct sf_err e = { 0 };

	CHECK(sf_spec_init(&sp, V, 8, 0, 0.0, 1, &e) == 0, "%s", e.msg);
	CHECK(sf_spec_best_n(&sp) == 8, "nothing measured: max, %d", sf_spec_best_n(&sp));
	sf_spec_free(&sp);
	/* a flat pass (reads bound it) and a cheap draft: every proposal pays */
	CHECK(best_after(8, 0, 3, 1e-2, 0.0, 1e-5) == 8, "flash bound: %d",
	      best_after(8, 0, 3, 1e-2, 0.0, 1e-5));
	/* compute bound, a near 0.8, the draft a tenth of a pass a proposal:
	 * at 0.1 of a pass more a proposal the best is about 4 (tokens per
	 * cost 1.87, 1.90, 1.89 at k = 3, 4, 5), at 0.4 about 2 (1.21, 1.23,
	 * 1.20 at k = 1, 2, 3); a dearer proposal, fewer, but some */
	int cheap = best_after(8, 0, 3, 1e-3, 1e-4, 1e-4);
	int dear = best_after(8, 0, 3, 1e-3, 4e-4, 1e-4);
	CHECK(0 < dear && dear < cheap && cheap < 8, "compute bound: %d and %d", cheap, dear);
	/* a draft that never agrees: plain passes, unless --draft-min says no */
	CHECK(best_after(8, 0, 0, 1e-3, 2.5e-4, 1e-4) == 0, "no agreement: %d",
	      best_after(8, 0, 0, 1e-3, 2.5e-4, 1e-4));
	CHECK(best_after(8, 2, 0, 1e-3, 2.5e-4, 1e-4) == 2, "no agreement, min 2: %d",
	      best_after(8, 2, 0, 1e-3, 2.5e-4, 1e-4));
}

/* On mix4-1m drafting for itself at another temperature (so that many
 * proposals are rejected): the three tokens after the first of many
 * short samples against as many of plain sampling, by a two-sample
 * chi-square over the tokens seen at least 10 times (the rest one bin). */
static void check_model(const char *dir)
{
	enum { SAMPLES = 300, TOKENS = 3, MAXN = 4 };
	struct sf_model m;
	struct sf_tokenizer *tok = NULL;
	struct sf_runstate ts = { 0 }, dstate = { 0 };
	struct sf_sampler tsamp, dsamp, psamp;
	struct sf_spec sp = { 0 };
	struct sf_err e = { 0 };
	int32_t *prompt = NULL, text[64], out[MAXN + 1];
	size_t np = 0;

	if (sf_model_open(&m, dir, &e)) {
		CHECK(0, "%s", e.msg);
		return;
	}
	int nv = m.cfg.vocab_size;
	long *ca = calloc((size_t)nv, sizeof(long)), *cb = calloc((size_t)nv, sizeof(long));
	float *first = malloc((size_t)nv * sizeof(float));
	CHECK(ca && cb && first, "memory");
	int before = unit_failures;
	CHECK(sf_tokenizer_open_model(&tok, dir, nv, &e) == 0, "%s", e.msg);
	CHECK(tok && sf_tokenizer_encode(tok, "In the beginning", 16, 1, &prompt, &np, &e) == 0,
	      "%s", e.msg);
	CHECK(sf_state_init_batch(&ts, &m.cfg, 64, 16, &e) == 0, "%s", e.msg);
	CHECK(sf_state_init_batch(&dstate, &m.cfg, 64, 8, &e) == 0, "%s", e.msg);
	CHECK(sf_sampler_init(&tsamp, nv, 0.8f, 0.95f, 7, &e) == 0, "%s", e.msg);
	CHECK(sf_sampler_init(&dsamp, nv, 1.3f, 1.0f, 8, &e) == 0, "%s", e.msg);
	CHECK(sf_sampler_init(&psamp, nv, 0.8f, 0.95f, 9, &e) == 0, "%s", e.msg);
	CHECK(sf_spec_init(&sp, nv, MAXN, 0, 0.0, 1, &e) == 0, "%s", e.msg);
	if (unit_failures > before || np + TOKENS + 1 > 64)
		goto out;
	memcpy(text, prompt, np * sizeof(*text));
	float *lg = sf_forward_batch(&m, &ts, prompt, (int)np, 0, 0);
	CHECK(lg != NULL, "prompt");
	if (!lg)
		goto out;
	memcpy(first, lg, (size_t)nv * sizeof(float));
	const struct sf_spec_model target = { &m, &ts, &tsamp }, draft = { &m, &dstate, &dsamp };
	for (int s = 0; s < SAMPLES && unit_failures == before; s++) {
		/* speculative: the first token plainly, then passes */
		memcpy(ts.logits, first, (size_t)nv * sizeof(float));
		text[np] = sf_sample(&tsamp, ts.logits);
		int pos = (int)np, made = 0;
		if (sp.draft_pos > pos)
			sp.draft_pos = pos;	/* a new sample: the prompt is still there */
		while (made < TOKENS) {
			int r = sf_spec_step(&sp, &target, &draft, text, pos, TOKENS - made, out, &e);
			CHECK(r >= 1 && r <= TOKENS - made + 1, "step %d: %s", r, e.msg);
			if (r < 1)
				break;
			for (int i = 0; i < r && made < TOKENS; i++, made++)
				ca[out[i]]++;
			memcpy(text + pos + 1, out, (size_t)r * sizeof(*out));
			pos += r;
		}
		/* plain */
		memcpy(ts.logits, first, (size_t)nv * sizeof(float));
		int32_t t = sf_sample(&psamp, ts.logits);
		for (int i = 0; i < TOKENS; i++) {
			float *l = sf_forward(&m, &ts, t, (int)np + i);
			t = sf_sample(&psamp, l);
			cb[t]++;
		}
	}
	double x = 0.0;
	long ra = 0, rb = 0;
	int df = 0;
	for (int i = 0; i < nv; i++) {
		if (ca[i] + cb[i] >= 10) {
			x += (double)(ca[i] - cb[i]) * (ca[i] - cb[i]) / (double)(ca[i] + cb[i]);
			df++;
		} else {
			ra += ca[i];
			rb += cb[i];
		}
	}
	if (ra + rb)
		x += (double)(ra - rb) * (ra - rb) / (double)(ra + rb);
	CHECK(df >= 5, "only %d tokens seen 10 times", df);
	CHECK(x < chi2_bound(df), "mix4-1m: chi-square %g over %g (%d bins)", x, chi2_bound(df), df);
	CHECK(sp.accepted > 0 && sp.accepted < sp.proposed, "accepted %llu of %llu",
	      (unsigned long long)sp.accepted, (unsigned long long)sp.proposed);
out:
	sf_spec_free(&sp);
	sf_sampler_free(&tsamp);
	sf_sampler_free(&dsamp);
	sf_sampler_free(&psamp);
	sf_state_free(&ts);
	sf_state_free(&dstate);
	sf_tokenizer_close(tok);
	free(prompt);
	free(ca);
	free(cb);
	free(first);
	sf_model_close(&m);
}

int main(void)
{
	char dir[4096];

	check_rule(1.0f, 0);
	check_rule(0.9f, 3);
	check_greedy();
	check_costs();
	snprintf(dir, sizeof(dir), "%s/models/mix4-1m", unit_env("SF_ROOT", "."));
	check_model(dir);
	return unit_exit();
}
