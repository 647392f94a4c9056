/* Speculative decoding's proposals and acceptance: see speculative.h. */
#include "engine/speculative.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/kernels.h"

int sf_spec_init(struct sf_spec *sp, int vocab, int max, int min, double p_min, int adaptive,
		 struct sf_err *e)
{
	*sp = (struct sf_spec){ .vocab = vocab, .max = max, .min = min, .p_min = (float)p_min,
				.adaptive = adaptive, .n = max };
	if (vocab < 1 || max < 1 || max > SF_SPEC_MAX || min < 0 || min > max ||
	    !(p_min >= 0.0 && p_min <= 1.0))
		return sf_err_set(e, -EINVAL, "speculative decoding: %d proposals at most, %d at "
				  "least, p-min %g: expected 0 <= min <= max, 1 <= max <= %d, "
				  "p-min in [0, 1]", max, min, p_min, SF_SPEC_MAX);
	/* max * vocab floats: widened, both are ints */
	sp->q = malloc((size_t)max * (size_t)vocab * sizeof(*sp->q));
	sp->p = malloc((size_t)vocab * sizeof(*sp->p));
	sp->pass = malloc(((size_t)max + 1) * sizeof(*sp->pass));
	if (!sp->q || !sp->p || !sp->pass) {
		sf_spec_free(sp);
		return sf_err_set(e, -ENOMEM, "speculative decoding: %s", sf_strerror(-ENOMEM));
	}
	return 0;
}

void sf_spec_free(struct sf_spec *sp)
{
	free(sp->q);
	free(sp->p);
	free(sp->pass);
	sp->q = sp->p = NULL;
	sp->pass = NULL;
}

int32_t sf_spec_propose(struct sf_spec *sp, struct sf_sampler *draft, float *logits, int i,
			int *more)
{
	size_t V = (size_t)sp->vocab;
	float *q = sp->q + (size_t)i * V;
	int32_t t;

	if (draft->temperature == 0.0f) {
		/* greedy: the target checks the argmax alone; the softmax tells
		 * how sure the draft is */
		memcpy(q, logits, V * sizeof(*q));
		sf_softmax(q, V);
		t = sf_argmax(q, V);
	} else {
		sf_sampler_probs(draft, logits, q);
		t = sf_sampler_draw(draft, q);
	}
	*more = i + 1 < sp->min || q[t] >= sp->p_min;
	return t;
}

/* The token after a rejection of x: drawn from max(0, p - q) normalised
 * (the target's p, the draft's q); the target's p when rounding left
 * nothing there. */
static int32_t residual(struct sf_spec *sp, struct sf_sampler *target, const float *q)
{
	float *p = sp->p, sum = 0.0f;

	for (int j = 0; j < sp->vocab; j++)
		sum += p[j] > q[j] ? p[j] - q[j] : 0.0f;
	if (!(sum > 0.0f))
		return sf_sampler_draw(target, p);
	for (int j = 0; j < sp->vocab; j++)
		p[j] = p[j] > q[j] ? (p[j] - q[j]) / sum : 0.0f;
	return sf_sampler_draw(target, p);
}

int sf_spec_verify(struct sf_spec *sp, struct sf_sampler *target, const int32_t *d, int k,
		   float *logits, int32_t *next)
{
	size_t V = (size_t)sp->vocab;
	int a;

	*next = -1;
	for (a = 0; a < k && *next < 0; a++) {
		float *row = logits + (size_t)a * V;
		if (target->temperature == 0.0f) {
			int32_t t = sf_sample(target, row);
			if (t != d[a])
				*next = t;
		} else {
			const float *q = sp->q + (size_t)a * V;
			sf_sampler_probs(target, row, sp->p);
			/* accept with probability min(1, p/q) */
			if (!(sf_sampler_coin(target) * q[d[a]] < sp->p[d[a]]))
				*next = residual(sp, target, q);
		}
		if (*next < 0)
			sf_sampler_accept(target, d[a]);
	}
	if (*next >= 0)
		a--;	/* the loop counted the rejected one */
	else
		*next = sf_sample(target, logits + (size_t)k * V);
	sf_sampler_accept(target, *next);

	sp->passes++;
	sp->proposed += (uint64_t)k;
	sp->accepted += (uint64_t)a;
	return a;
}

void sf_spec_observe(struct sf_spec *sp, int k, int a, double pass_s, double draft_s)
{
	struct sf_spec_costs *c = &sp->costs;
	const double f = SF_SPEC_DECAY;

	if (k > 0) {	/* a plain pass says nothing of the draft */
		c->kept = f * c->kept + a;
		c->ended = f * c->ended + (a < k);
	}
	c->w = f * c->w + 1.0;
	c->k = f * c->k + k;
	c->kk = f * c->kk + (double)k * k;
	c->t = f * c->t + pass_s;
	c->kt = f * c->kt + k * pass_s;
	if (k > 0 && draft_s >= 0.0) {
		c->draft = f * c->draft + draft_s;
		c->draft_w = f * c->draft_w + 1.0;
	}
}

int sf_spec_best_n(const struct sf_spec *sp)
{
	const struct sf_spec_costs *c = &sp->costs;
	/* half a kept and half a rejected proposal of prior: a = 1/2 at first */
	double a = (c->kept + 0.5) / (c->kept + c->ended + 1.0);
	double var = c->w > 0.0 ? c->kk / c->w - (c->k / c->w) * (c->k / c->w) : 0.0;
	/* the line through the passes; flat (reads bound the pass) until the
	 * counts have varied */
	double c1 = var > 1e-3 ? (c->kt / c->w - (c->k / c->w) * (c->t / c->w)) / var : 0.0;
	c1 = c1 > 0.0 ? c1 : 0.0;
	double c0 = c->w > 0.0 ? c->t / c->w - c1 * c->k / c->w : 0.0;
	double d = c->draft_w > 0.0 ? c->draft / c->draft_w : 0.0;
	int best = sp->max;
	double best_rate = -1.0, tokens = 1.0, ak = 1.0;

	if (!(c0 > 0.0))	/* nothing measured yet */
		return sp->max;
	for (int k = 0; k <= sp->max; k++) {
		if (k) {
			ak *= a;
			tokens += ak;
		}
		double rate = tokens / (c0 + (c1 + d) * k);
		if (k >= sp->min && rate > best_rate * (1.0 + 1e-9)) {
			best_rate = rate;
			best = k;
		}
	}
	return best;
}

/* Feeds the draft what it has not seen of text[0, upto] in passes of up
 * to its batch: the logits after text[upto], or NULL when a pass failed. */
static float *draft_feed(struct sf_spec *sp, const struct sf_spec_model *d, const int32_t *text,
			 int upto)
{
	float *logits = NULL;

	while (sp->draft_pos <= upto) {
		int T = upto + 1 - sp->draft_pos;
		T = T < d->s->batch ? T : d->s->batch;
		d->s->skip_logits = sp->draft_pos + T <= upto;
		logits = sf_forward_batch(d->m, d->s, text + sp->draft_pos, T, sp->draft_pos, 0);
		sp->draft_pos += T;
	}
	return logits;
}

/* Up to k proposals after text[0, pos] into sp->pass[1, ...]: how many,
 * or -1 when a pass of the draft failed. */
static int propose(struct sf_spec *sp, const struct sf_spec_model *d, const int32_t *text,
		   int pos, int k)
{
	float *logits = k ? draft_feed(sp, d, text, pos) : NULL;
	int made = 0, more = 1;

	if (k && !logits)
		return -1;
	while (made < k && more) {
		sp->pass[1 + made] = sf_spec_propose(sp, d->sampler, logits, made, &more);
		if (++made < k && more &&
		    !(logits = sf_forward(d->m, d->s, sp->pass[made], sp->draft_pos++)))
			return -1;
	}
	return made;
}

int sf_spec_step(struct sf_spec *sp, const struct sf_spec_model *target,
		 const struct sf_spec_model *draft, const int32_t *text, int pos, int k,
		 int32_t *out, struct sf_err *e)
{
	int unseen = pos + 1 - sp->draft_pos;	/* what the draft is fed first */
	double t0 = sf_now();
	int n = propose(sp, draft, text, pos, k < sp->n ? k : sp->n);
	double t1 = sf_now();

	sp->draft_seconds += t1 - t0;
	if (n < 0)
		return sf_state_error(draft->s, e);
	sp->pass[0] = text[pos];
	target->s->skip_logits = 0;
	float *logits = sf_forward_batch(target->m, target->s, sp->pass, n + 1, pos, 1);
	if (!logits)
		return sf_state_error(target->s, e);
	double t2 = sf_now();
	int32_t next;
	int a = sf_spec_verify(sp, target->sampler, sp->pass + 1, n, logits, &next);
	if (sp->adaptive) {
		/* greedy, the text is the same at any n, so n follows the
		 * measured times; sampled, the text depends on n, and nominal
		 * costs keep a seed's text */
		if (target->sampler->temperature == 0.0f)
			sf_spec_observe(sp, n, a, t2 - t1, n && unseen <= 1 ? (t1 - t0) / n : -1.0);
		else
			sf_spec_observe(sp, n, a, 1.0 + SF_SPEC_NOMINAL * n, SF_SPEC_NOMINAL);
		sp->n = sf_spec_best_n(sp);
		if (sp->passes % SF_SPEC_PROBE == 0)
			sp->n += sp->n < sp->max ? 1 : sp->n > sp->min ? -1 : 0;
	}
	memcpy(out, sp->pass + 1, (size_t)a * sizeof(*out));
	out[a] = next;
	/* the draft's cache holds the proposals; those after the accepted
	 * ones are overwritten when fed again */
	if (sp->draft_pos > pos + a + 1)
		sp->draft_pos = pos + a + 1;
	return a + 1;
}
