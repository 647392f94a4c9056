/* SelectInfer selection against brute-force recomputation on random
 * scores and activations with many ties: the pinning order (task part,
 * model fill, absent files, caps), the computed neuron sets (static,
 * dynamic, fill order, dense layers, reset), the neurons file, the
 * --dense-layers parser, and the score reader's refusals. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "online/selectinfer.h"
#include "unit.h"

static uint64_t seed = 42;
static const char *tmp;
static const char *FP = "0123456789abcdef";
static const struct sf_fingerprint FPS = { "0123456789abcdef", "0123456789abcdef" };

static uint32_t urand(uint32_t n)
{
	return (uint32_t)(sf_splitmix64(&seed) % n);
}

/* Scores with ties: a few distinct values. */
static void random_scores(double *s, uint32_t n, uint32_t levels)
{
	for (uint32_t i = 0; i < n; i++)
		s[i] = (double)urand(levels) * 0.25;
}

static uint32_t round_share(double x, uint32_t n)
{
	uint32_t v = (uint32_t)floor(x * n + 0.5);
	return v > n ? n : v;
}

/* The best unchosen entry by s: highest, then lowest index (one is left). */
static uint32_t best_unchosen(const double *s, const uint8_t *chosen, uint32_t n)
{
	uint32_t b = n - 1;
	for (uint32_t i = n; i-- > 0;)
		if (!chosen[i] && (chosen[b] || s[i] >= s[b]))
			b = i;
	return b;
}

// ----------------------------------------------------------------------------
// selective loading

static uint32_t brute_load(const double *task, const double *model, uint32_t n, double gamma,
			   double delta, uint32_t *order)
{
	uint8_t *chosen = calloc(n, 1);
	uint32_t want = round_share(gamma, n), first = round_share(delta, n), m = 0;

	if (!model)
		first = want;
	if (first > want)
		first = want;
	while (task && m < first) {
		order[m] = best_unchosen(task, chosen, n);
		chosen[order[m++]] = 1;
	}
	while (model && m < want) {
		order[m] = best_unchosen(model, chosen, n);
		chosen[order[m++]] = 1;
	}
	free(chosen);
	return m;
}

static void test_load_order(void)
{
	for (int trial = 0; trial < 400; trial++) {
		uint32_t n = 1 + urand(90);
		double *t = malloc(n * sizeof(double)), *mo = malloc(n * sizeof(double));
		uint32_t *got = malloc(n * sizeof(uint32_t)), *want = malloc(n * sizeof(uint32_t));
		uint32_t *scratch = malloc(2 * n * sizeof(uint32_t));
		double gamma = urand(11) / 10.0, delta = urand(11) / 10.0;
		int absent = trial % 4;	/* 0 both, 1 no task, 2 no model, 3 neither */
		const double *tp = absent == 1 || absent == 3 ? NULL : t;
		const double *mp = absent == 2 || absent == 3 ? NULL : mo;

		random_scores(t, n, 1 + urand(6));
		random_scores(mo, n, 1 + urand(6));
		uint32_t gn = sf_select_load_order(tp, mp, n, gamma, delta, got, scratch);
		uint32_t wn = brute_load(tp, mp, n, gamma, delta, want);
		CHECK(gn == wn, "trial %d: n %u gamma %g delta %g absent %d: %u entries, brute %u",
		      trial, n, gamma, delta, absent, gn, wn);
		CHECK(wn == (absent == 3 ? 0 : round_share(gamma, n)), "trial %d: gamma count", trial);
		for (uint32_t j = 0; j < gn && j < wn; j++)
			if (got[j] != want[j]) {
				CHECK(0, "trial %d: order[%u] = %u, brute %u", trial, j, got[j], want[j]);
				break;
			}
		free(t);
		free(mo);
		free(got);
		free(want);
		free(scratch);
	}
	/* ties: equal task scores go to the lower index; the model fills after */
	double t[6] = { 1, 2, 2, 0, 2, 0 }, m[6] = { 9, 0, 0, 9, 0, 1 };
	uint32_t o[6], sc[12];
	uint32_t k = sf_select_load_order(t, m, 6, 4.0 / 6, 2.0 / 6, o, sc);
	CHECK(k == 4 && o[0] == 1 && o[1] == 2 && o[2] == 0 && o[3] == 3,
	      "tie order: %u: %u %u %u %u", k, o[0], o[1], o[2], o[3]);
	CHECK(sf_select_count(0.5, 5) == 3 && sf_select_count(0.7, 384) == 269 &&
	      sf_select_count(1, 7) == 7 && sf_select_count(0, 7) == 0, "round(x n)");
}

/* A scores struct in memory: every layer, the given groups. */
static void make_scores(struct sf_scores *s, int is_task, int n_layers, const uint32_t *entries,
			unsigned groups)
{
	memset(s, 0, sizeof(*s));
	s->fingerprint = FPS;
	s->is_task = is_task;
	s->task = is_task ? strdup("kjv") : NULL;
	s->slots = calloc((size_t)n_layers * SF_NGROUPS, sizeof(*s->slots));
	for (int l = 0; l < n_layers; l++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			if (!(groups & (1u << g)))
				continue;
			struct sf_scores_slot *sl = &s->slots[s->nslots++];
			sl->layer = l;
			sl->group = (enum sf_group)g;
			sl->entries = entries[g];
			sl->tokens = 100;
			sl->score = malloc(entries[g] * sizeof(double));
			sl->freq = calloc(entries[g], sizeof(double));
			random_scores(sl->score, entries[g], 5);
		}
}

static void test_load_plan(void)
{
	struct sf_config cfg = { .dim = 32, .hidden_dim = 96, .n_layers = 3, .n_heads = 4,
				 .head_dim = 8 };
	uint32_t entries[SF_NGROUPS] = { 32, 32, 32, 96 };
	struct sf_scores task, model;
	struct sf_select_load l;
	struct sf_err e = { 0 };

	make_scores(&task, 1, 3, entries, 1u << SF_GROUP_FFN_OUT | 1u << SF_GROUP_ATTN_IN);
	make_scores(&model, 0, 3, entries, 1u << SF_GROUP_FFN_OUT | 1u << SF_GROUP_FFN_IN);
	CHECK(sf_select_load_plan(&l, &cfg, &task, "t.json", &model, "m.json", 0.7, 0.3, &e) == 0,
	      "%s", e.msg);
	for (int layer = 0; layer < 3; layer++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			const struct sf_scores_slot *t = sf_scores_find(&task, layer, (enum sf_group)g);
			const struct sf_scores_slot *m = sf_scores_find(&model, layer, (enum sf_group)g);
			uint32_t count, want[96], wn = 0;
			const uint32_t *got = sf_select_load_get(&l, layer, (enum sf_group)g, &count);
			if (t || m)
				wn = brute_load(t ? t->score : NULL, m ? m->score : NULL, entries[g], 0.7,
						0.3, want);
			CHECK(count == wn && (wn == 0) == (got == NULL), "layer %d %s: %u pinned, "
			      "brute %u", layer, sf_group_name((enum sf_group)g), count, wn);
			CHECK(!wn || !memcmp(got, want, wn * sizeof(*want)), "layer %d %s order",
			      layer, sf_group_name((enum sf_group)g));
		}
	sf_select_load_free(&l);
	sf_select_load_free(&l);	/* twice: the free zeroes */
	CHECK(sf_select_load_plan(&l, &cfg, &model, "m.json", NULL, NULL, 0.7, 0.3, &e) ==
	      SF_EMISMATCH && !strcmp(e.msg, "m.json: kind is \"model\": expected task-specific "
				      "scores (of one task)"), "model as task: %s", e.msg);
	CHECK(sf_select_load_plan(&l, &cfg, NULL, NULL, NULL, NULL, 0.7, 0.3, &e) == -EINVAL,
	      "no scores");
	CHECK(sf_select_load_plan(&l, &cfg, &task, "t.json", NULL, NULL, 1.5, 0.3, &e) == -EINVAL,
	      "gamma 1.5");
	memcpy(model.fingerprint.weights, "fedcba9876543210", SF_FINGERPRINT_LEN + 1);
	CHECK(sf_select_load_plan(&l, &cfg, &task, "t.json", &model, "m.json", 0.7, 0.3, &e) ==
	      SF_EMISMATCH && !strcmp(e.msg, "m.json: scores of a look-alike of t.json (same shapes, "
				      "other weights): fingerprint fedcba9876543210, expected "
				      "0123456789abcdef"), "fingerprints: %s", e.msg);
	cfg.hidden_dim = 95;
	CHECK(sf_select_load_plan(&l, &cfg, &task, "t.json", NULL, NULL, 0.7, 0.3, &e) ==
	      SF_EMISMATCH && !strcmp(e.msg, "t.json: layer 0 ffn_out: 96 entries, the model's 95"),
	      "sizes: %s", e.msg);
	CHECK(l.count == NULL && l.order == NULL, "zeroed on failure");

	/* neurons file: ffn_out layers, the gamma prefix ascending */
	json_t *doc = NULL;
	model.fingerprint = FPS;
	CHECK(sf_select_neurons_json(&doc, &task, "t.json", &model, "m.json", 0.5, 0.25, NULL, &e)
	      == 0, "%s", e.msg);
	json_t *layers = json_object_get(doc, "layers");
	CHECK(json_array_size(layers) == 3 && !strcmp(json_string_value(json_object_get(doc,
	      "format")), "sparseflash-neurons"), "neurons layers");
	for (size_t i = 0; i < json_array_size(layers); i++) {
		json_t *L = json_array_get(layers, i), *nv = json_object_get(L, "neurons");
		int layer = (int)json_integer_value(json_object_get(L, "layer"));
		uint32_t want[96], wn = brute_load(sf_scores_find(&task, layer, SF_GROUP_FFN_OUT)->score,
			sf_scores_find(&model, layer, SF_GROUP_FFN_OUT)->score, 96, 0.5, 0.25, want);
		uint8_t in[96] = { 0 };
		for (uint32_t j = 0; j < wn; j++)
			in[want[j]] = 1;
		CHECK(layer == (int)i && json_array_size(nv) == wn, "layer %zu: %zu neurons, want %u",
		      i, json_array_size(nv), wn);
		for (size_t j = 0, last = 0; j < json_array_size(nv); j++) {
			size_t x = (size_t)json_integer_value(json_array_get(nv, j));
			CHECK(x < 96 && in[x] && (j == 0 || x > last), "layer %zu neuron %zu", i, x);
			last = x;
		}
	}
	json_decref(doc);
	/* gamma so small it rounds to none still keeps the best one (sf-pack needs one) */
	uint32_t best[96];
	brute_load(sf_scores_find(&task, 0, SF_GROUP_FFN_OUT)->score, NULL, 96, 1, 0, best);
	CHECK(sf_select_neurons_json(&doc, &task, "t.json", NULL, NULL, 0.001, 0.25, NULL, &e) == 0,
	      "%s", e.msg);
	json_t *n0 = json_object_get(json_array_get(json_object_get(doc, "layers"), 0), "neurons");
	CHECK(json_array_size(n0) == 1 && json_integer_value(json_array_get(n0, 0)) == best[0],
	      "at least one neuron, the best %u", best[0]);
	json_decref(doc);
	struct sf_scores attn;
	make_scores(&attn, 1, 2, entries, 1u << SF_GROUP_ATTN_IN);
	CHECK(sf_select_neurons_json(&doc, &attn, "a.json", NULL, NULL, 0.5, 0.25, NULL, &e) ==
	      SF_EFORMAT && !strcmp(e.msg, "a.json: no ffn_out scores to select neurons from"),
	      "no ffn_out: %s", e.msg);
	sf_scores_free(&attn);
	sf_scores_free(&task);
	sf_scores_free(&model);
}

// ----------------------------------------------------------------------------
// selective computation

struct brute {
	uint32_t n, *count;
	double *sum;
};

/* The expected set of one layer, built as a priority sequence. */
static void brute_compute(const struct brute *b, const double *stat, const struct
			  sf_select_compute_opts *o, uint8_t *mask, uint32_t *nst, uint32_t *ndyn)
{
	uint32_t n = b->n, cap = round_share(o->rho, n), m = 0;
	uint8_t *used = calloc(n, 1);
	uint32_t *freq = malloc(n * sizeof(uint32_t));

	memset(mask, 0, n);
	/* frequency order by selection sort */
	for (uint32_t j = 0; j < n; j++) {
		uint32_t best = UINT32_MAX;
		for (uint32_t i = 0; i < n; i++) {
			if (used[i])
				continue;
			if (best == UINT32_MAX || b->count[i] > b->count[best] ||
			    (b->count[i] == b->count[best] && b->sum[i] > b->sum[best]))
				best = i;
		}
		used[best] = 1;
		freq[j] = best;
	}
	memset(used, 0, n);
	for (uint32_t j = 0; stat && j < round_share(o->delta, n); j++) {
		uint32_t i = best_unchosen(stat, used, n);
		used[i] = 1;
		if (m < cap) {
			mask[i] = 1;
			m++;
		}
	}
	*nst = m;
	*ndyn = 0;
	for (uint32_t j = 0; j < n && *ndyn < round_share(o->beta, n) && m < cap; j++) {
		uint32_t i = freq[j];
		if (b->count[i] && !mask[i]) {
			mask[i] = 1;
			m++;
			(*ndyn)++;
		}
	}
	for (uint32_t j = 0; j < n && m < cap; j++)
		if (b->count[freq[j]] && !mask[freq[j]]) {
			mask[freq[j]] = 1;
			m++;
		}
	memset(used, 0, n);
	for (uint32_t j = 0; stat && j < n && m < cap; j++) {
		uint32_t i = best_unchosen(stat, used, n);
		used[i] = 1;
		if (!mask[i]) {
			mask[i] = 1;
			m++;
		}
	}
	for (uint32_t j = 0; j < n && m < cap; j++)
		if (!mask[freq[j]]) {
			mask[freq[j]] = 1;
			m++;
		}
	free(used);
	free(freq);
}

/* One token's top k by |a|, ties to the lower index, by repeated scans. */
static void brute_topk(const float *a, uint32_t n, uint32_t k, uint8_t *top)
{
	memset(top, 0, n);
	for (uint32_t j = 0; j < k; j++) {
		uint32_t b = UINT32_MAX;
		for (uint32_t i = 0; i < n; i++)
			if (!top[i] && (b == UINT32_MAX || fabsf(a[i]) > fabsf(a[b])))
				b = i;
		top[b] = 1;
	}
}

static void test_compute(void)
{
	for (int trial = 0; trial < 120; trial++) {
		int L = 1 + (int)urand(6);
		uint32_t n = 1 + urand(70), ntok = urand(12);
		uint32_t entries[SF_NGROUPS] = { 8, 8, 8, n };
		struct sf_select_compute_opts o;
		struct sf_scores stat;
		struct sf_select_compute *c = NULL;
		struct sf_err e = { 0 };
		uint8_t *dense = calloc((size_t)L, 1), *top = malloc(n), *want = malloc(n);
		int use_stat = trial % 3 != 0;
		struct brute *b = calloc((size_t)L, sizeof(*b));
		float *a = malloc(n * sizeof(float));

		sf_select_compute_defaults(&o, urand(11) / 10.0);
		o.delta = urand(11) / 10.0;
		o.alpha = urand(11) / 10.0;
		o.beta = urand(11) / 10.0;
		for (int l = 0; l < L; l++)
			dense[l] = urand(4) == 0;
		o.dense = dense;
		make_scores(&stat, 1, L, entries, 1u << SF_GROUP_FFN_OUT);
		CHECK(sf_select_compute_open(&c, L, n, &o, use_stat ? &stat : NULL, "s.json", &e) == 0,
		      "%s", e.msg);
		if (!c)
			break;
		for (int l = 0; l < L; l++) {
			b[l].n = n;
			b[l].count = calloc(n, sizeof(uint32_t));
			b[l].sum = calloc(n, sizeof(double));
		}
		/* an early prompt forgotten by reset */
		for (int l = 0; l < L; l++) {
			for (uint32_t i = 0; i < n; i++)
				a[i] = 9.0f;
			sf_select_compute_observe(c, l, a);
		}
		sf_select_compute_finish(c);
		sf_select_compute_reset(c);
		for (uint32_t t = 0; t < ntok; t++)
			for (int l = 0; l < L; l++) {
				for (uint32_t i = 0; i < n; i++)
					a[i] = (float)((int)urand(5) - 2) * 0.5f;
				sf_select_compute_observe(c, l, a);
				brute_topk(a, n, round_share(o.alpha, n), top);
				for (uint32_t i = 0; i < n; i++) {
					b[l].count[i] += top[i];
					b[l].sum[i] += fabsf(a[i]);
				}
			}
		sf_select_compute_finish(c);
		sf_select_compute_observe(c, 0, a);	/* after finish: ignored */
		for (int l = 0; l < L; l++) {
			uint32_t count, nst, ndyn, wst, wdyn;
			const uint32_t *ent = sf_select_compute_entries(c, l, &count);
			const uint8_t *mask = sf_select_compute_mask(c, l);
			CHECK(sf_select_compute_is_dense(c, l) == dense[l], "trial %d layer %d dense",
			      trial, l);
			if (dense[l]) {
				CHECK(!ent && !mask && count == n, "trial %d: dense layer %d", trial, l);
				continue;
			}
			brute_compute(&b[l], use_stat ? stat.slots[l].score : NULL, &o, want, &wst,
				      &wdyn);
			sf_select_compute_split(c, l, &nst, &ndyn);
			CHECK(count == round_share(o.rho, n), "trial %d layer %d: %u entries", trial, l,
			      count);
			CHECK(mask && !memcmp(mask, want, n), "trial %d layer %d (n %u rho %g delta %g "
			      "alpha %g beta %g, %u tokens, static %d): mask differs", trial, l, n, o.rho,
			      o.delta, o.alpha, o.beta, ntok, use_stat);
			CHECK(nst == wst && ndyn == wdyn, "trial %d layer %d: split %u+%u, brute %u+%u",
			      trial, l, nst, ndyn, wst, wdyn);
			for (uint32_t j = 0; ent && j < count; j++)
				CHECK(ent[j] < n && want[ent[j]] && (j == 0 || ent[j] > ent[j - 1]),
				      "trial %d layer %d: entries[%u] = %u", trial, l, j, ent[j]);
		}
		for (int l = 0; l < L; l++) {
			free(b[l].count);
			free(b[l].sum);
		}
		free(b);
		free(a);
		free(top);
		free(want);
		free(dense);
		sf_select_compute_close(c);
		sf_scores_free(&stat);
	}

	/* a worked case: rho 0.5 of 8, delta 0.25 static, beta 0.25 dynamic */
	uint32_t entries[SF_NGROUPS] = { 8, 8, 8, 8 };
	struct sf_scores stat;
	struct sf_select_compute_opts o;
	struct sf_select_compute *c;
	struct sf_err e = { 0 };
	make_scores(&stat, 1, 1, entries, 1u << SF_GROUP_FFN_OUT);
	memcpy(stat.slots[0].score, (double[]){ 0, 5, 0, 0, 0, 0, 0, 4 }, 8 * sizeof(double));
	sf_select_compute_defaults(&o, 0.5);
	o.delta = 0.25;
	o.beta = 0.25;
	o.alpha = 0.25;
	CHECK(sf_select_compute_open(&c, 1, 8, &o, &stat, "s.json", &e) == 0, "%s", e.msg);
	/* top 2 per token: {3, 4}, {3, 1}, {4, 5}: counts 3:2, 4:2, 1:1, 5:1; 3 and 4 tie
	 * on count, 4 has the larger sum */
	sf_select_compute_observe(c, 0, (float[]){ 0, 0, 0, 3, 2, 0, 0, 0 });
	sf_select_compute_observe(c, 0, (float[]){ 0, 1, 0, -3, 0, 0, 0, 0 });
	sf_select_compute_observe(c, 0, (float[]){ 0, 0, 0, 0, 9, 1, 0, 0 });
	sf_select_compute_finish(c);
	uint32_t count;
	const uint32_t *ent = sf_select_compute_entries(c, 0, &count);
	CHECK(count == 4 && ent[0] == 1 && ent[1] == 3 && ent[2] == 4 && ent[3] == 7,
	      "worked case: %u: %u %u %u %u", count, ent[0], ent[1], ent[2], ent[3]);
	sf_select_compute_close(c);
	sf_select_compute_close(NULL);

	/* every non-dense layer needs its ffn_out scores */
	uint8_t dense[3] = { 1, 0, 0 };
	o.dense = dense;
	CHECK(sf_select_compute_open(&c, 3, 8, &o, &stat, "s.json", &e) == SF_EMISMATCH &&
	      !strcmp(e.msg, "s.json: no ffn_out scores for layer 1"), "missing layer: %s", e.msg);
	dense[1] = dense[2] = 1;
	CHECK(sf_select_compute_open(&c, 3, 8, &o, &stat, "s.json", &e) == 0, "dense rest: %s",
	      e.msg);
	sf_select_compute_close(c);
	o.dense = NULL;
	CHECK(sf_select_compute_open(&c, 1, 9, &o, &stat, "s.json", &e) == SF_EMISMATCH &&
	      !strcmp(e.msg, "s.json: layer 0 ffn_out: 8 entries, the model's 9"), "size: %s",
	      e.msg);
	o.rho = NAN;
	CHECK(sf_select_compute_open(&c, 1, 8, &o, &stat, "s.json", &e) == -EINVAL && !c,
	      "rho NaN");
	sf_scores_free(&stat);
}

static void test_dense(void)
{
	uint8_t d[40];
	struct sf_err e = { 0 };
	int first, last;

	sf_select_dense_default(28, d);
	for (first = 0; d[first]; first++)
		;
	for (last = 0; d[27 - last]; last++)
		;
	CHECK(first == 5 && last == 2, "28 layers: first %d last %d (the paper's 5 and 2)", first,
	      last);
	sf_select_dense_default(4, d);
	CHECK(d[0] && !d[1] && !d[2] && d[3], "4 layers: %d%d%d%d", d[0], d[1], d[2], d[3]);
	sf_select_dense_default(2, d);
	CHECK(d[0] && d[1], "2 layers: all dense");
	CHECK(sf_select_dense_parse("5:2", 28, d, &e) == 0 && d[4] && !d[5] && !d[25] && d[26] &&
	      d[27], "5:2 %s", e.msg);
	CHECK(sf_select_dense_parse("0-1,3", 6, d, &e) == 0 && d[0] && d[1] && !d[2] && d[3] &&
	      !d[4] && !d[5], "list %s", e.msg);
	CHECK(sf_select_dense_parse("none", 6, d, &e) == 0 && !memchr(d, 1, 6), "none");
	CHECK(sf_select_dense_parse("0-6", 6, d, &e) == SF_ELIMIT &&
	      !strcmp(e.msg, "--dense-layers: layer 6 is out of range: the model has layers 0..5"), "%s", e.msg);
	CHECK(sf_select_dense_parse("2-1", 6, d, &e) == SF_EFORMAT, "2-1");
	CHECK(sf_select_dense_parse("1,", 6, d, &e) == SF_EFORMAT, "trailing comma");
	CHECK(sf_select_dense_parse("7:0", 6, d, &e) == SF_ELIMIT, "7:0");
	CHECK(sf_select_dense_parse("x:1", 6, d, &e) == SF_EFORMAT, "x:1");
}

// ----------------------------------------------------------------------------
// the reader

static const char *write_file(const char *name, const char *text)
{
	static char path[4096];
	snprintf(path, sizeof(path), "%s/%s", tmp, name);
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) == EOF || fclose(f)) {
		fprintf(stderr, "%s: cannot write\n", path);
		exit(1);
	}
	return path;
}

/* A valid file's text: 2 layers of ffn_out (3 entries), attn_in (2). */
static char *valid_text(const char *fp, const char *ffn_scores, const char *extra)
{
	static char buf[4096];
	snprintf(buf, sizeof(buf),
		 "{\"format\": \"sparseflash-scores\", \"version\": 2, \"fingerprint\": \"%s\", "
		 "\"shape_fingerprint\": \"%s\", \"kind\": \"task\", \"task\": \"kjv\", \"selection\": {\"density\": 0.5}, "
		 "\"slots\": ["
		 "{\"layer\": 0, \"group\": \"attn_in\", \"entries\": 2, \"tokens\": 4, "
		 "\"tasks\": {\"kjv\": 4}, \"scores\": [0.5, 1], \"frequency\": [0.25, 1]},"
		 "{\"layer\": 1, \"group\": \"ffn_out\", \"entries\": 3, \"tokens\": 4, "
		 "\"tasks\": {\"kjv\": 4}, \"scores\": %s, \"frequency\": [0, 0.5, 1]},"
		 "{\"layer\": 0, \"group\": \"ffn_out\", \"entries\": 3, \"tokens\": 4, "
		 "\"tasks\": {\"kjv\": 4}, \"scores\": [3, 2, 1], \"frequency\": [0, 0.5, 1]}%s]}",
		 fp, fp, ffn_scores, extra);
	return buf;
}

static void expect_error(const char *name, const char *text, const struct sf_config *cfg,
			 int code, const char *msg_tail)
{
	struct sf_scores s;
	struct sf_err e = { 0 };
	const char *path = write_file(name, text);
	char want[SF_ERR_MAX + 4200];
	int ret = sf_scores_read(&s, path, &FPS, "m.sfimg", cfg, &e);

	snprintf(want, sizeof(want), "%s: %s", path, msg_tail);
	CHECK(ret == code, "%s: returned %d, expected %d (%s)", name, ret, code, e.msg);
	CHECK(msg_tail[0] == '\0' || !strcmp(e.msg, want), "%s: message '%s', expected '%s'",
	      name, e.msg, want);
	CHECK(s.slots == NULL && s.nslots == 0, "%s: zeroed after failure", name);
}

static void test_reader(void)
{
	struct sf_config cfg = { .dim = 2, .hidden_dim = 3, .n_layers = 2, .n_heads = 1,
				 .head_dim = 2 };
	struct sf_scores s;
	struct sf_err e = { 0 };
	const char *path = write_file("ok.json", valid_text(FP, "[0, 0.25, 7]", ""));

	CHECK(sf_scores_read(&s, path, &FPS, "m.sfimg", &cfg, &e) == 0, "valid: %s", e.msg);
	CHECK(s.is_task && s.task && !strcmp(s.task, "kjv") && s.nslots == 3, "valid: header");
	const struct sf_scores_slot *sl = sf_scores_find(&s, 1, SF_GROUP_FFN_OUT);
	CHECK(sl && sl->entries == 3 && sl->tokens == 4 && sl->score[2] == 7 && sl->freq[1] == 0.5,
	      "valid: layer 1 ffn_out");
	CHECK(s.slots[0].layer == 0 && s.slots[0].group == SF_GROUP_ATTN_IN &&
	      s.slots[1].group == SF_GROUP_FFN_OUT && s.slots[2].layer == 1, "sorted slots");
	CHECK(!sf_scores_find(&s, 1, SF_GROUP_ATTN_OUT), "absent slot");
	sf_scores_free(&s);
	sf_scores_free(&s);
	CHECK(sf_scores_read(&s, path, NULL, NULL, NULL, &e) == 0, "no model to check: %s", e.msg);
	sf_scores_free(&s);

	expect_error("fp.json", valid_text("fedcba9876543210", "[0, 0, 0]", ""), &cfg,
		     SF_EMISMATCH, "scores of another model than m.sfimg: shape fingerprint "
		     "fedcba9876543210, expected 0123456789abcdef");
	char *t = valid_text(FP, "[0, 0, 0]", "");
	t[strlen(t) / 2] = '\0';
	expect_error("truncated.json", t, &cfg, SF_EFORMAT, "");
	expect_error("short.json", valid_text(FP, "[0, 0]", ""), &cfg, SF_EFORMAT,
		     "layer 1 ffn_out: \"scores\" has 2 values, expected 3");
	expect_error("nan.json", valid_text(FP, "[0, NaN, 0]", ""), &cfg, SF_EFORMAT, "");
	expect_error("neg.json", valid_text(FP, "[0, -1, 0]", ""), &cfg, SF_EFORMAT,
		     "layer 1 ffn_out: scores[1] is -1: expected 0..inf");
	expect_error("str.json", valid_text(FP, "[0, \"x\", 0]", ""), &cfg, SF_EFORMAT,
		     "layer 1 ffn_out: scores[1] is not a number");
	expect_error("huge.json", valid_text(FP, "[0, 1e999, 0]", ""), &cfg, SF_EFORMAT, "");
	expect_error("dup.json", valid_text(FP, "[0, 0, 0]", ", {\"layer\": 1, \"group\": "
		     "\"ffn_out\", \"entries\": 3, \"tokens\": 4, \"tasks\": {}, \"scores\": [1, 1, 1],"
		     " \"frequency\": [0, 0, 0]}"), &cfg, SF_EFORMAT, "layer 1 ffn_out listed twice");
	expect_error("freq.json", valid_text(FP, "[0, 0, 0]", ", {\"layer\": 1, \"group\": "
		     "\"attn_in\", \"entries\": 2, \"tokens\": 4, \"tasks\": {}, \"scores\": [1, 1],"
		     " \"frequency\": [0, 1.5]}"), &cfg, SF_EFORMAT,
		     "layer 1 attn_in: frequency[1] is 1.5: expected 0..1");
	expect_error("layer.json", valid_text(FP, "[0, 0, 0]", ", {\"layer\": 2, \"group\": "
		     "\"attn_in\", \"entries\": 2, \"tokens\": 4, \"tasks\": {}, \"scores\": [1, 1],"
		     " \"frequency\": [0, 1]}"), &cfg, SF_EMISMATCH,
		     "slots[3]: layer 2: the model has 2 layers");
	cfg.hidden_dim = 4;
	expect_error("size.json", valid_text(FP, "[0, 0, 0]", ""), &cfg, SF_EMISMATCH,
		     "layer 1 ffn_out: 3 entries, the model's 4");
	cfg.hidden_dim = 3;
	expect_error("format.json", "{\"format\": \"sparseflash-neurons\"}", &cfg, SF_EFORMAT,
		     "\"format\" is not \"sparseflash-scores\"");
	expect_error("array.json", "[1, 2]", &cfg, SF_EFORMAT, "not a JSON object");
	expect_error("version.json", "{\"format\": \"sparseflash-scores\", \"version\": 3}", &cfg,
		     SF_EUNSUPPORTED, "scores version 3, expected 2");
	expect_error("version1.json", "{\"format\": \"sparseflash-scores\", \"version\": 1}", &cfg,
		     SF_EUNSUPPORTED, "scores version 1, expected 2: made before fingerprints covered "
		     "the weights; make it again");
	expect_error("noslots.json", "{\"format\": \"sparseflash-scores\", \"version\": 2, "
		     "\"fingerprint\": \"0123456789abcdef\", \"shape_fingerprint\": "
		     "\"0123456789abcdef\", \"kind\": \"model\", \"slots\": []}",
		     &cfg, SF_EFORMAT, "\"slots\" is not a non-empty array");
	expect_error("kind.json", "{\"format\": \"sparseflash-scores\", \"version\": 2, "
		     "\"fingerprint\": \"0123456789abcdef\", \"shape_fingerprint\": "
		     "\"0123456789abcdef\", \"kind\": \"mix\", \"slots\": []}",
		     &cfg, SF_EFORMAT, "\"kind\" is not \"task\" or \"model\"");
	expect_error("group.json", valid_text(FP, "[0, 0, 0]", ", {\"layer\": 1, \"group\": "
		     "\"mlp\", \"entries\": 2}"), &cfg, SF_EFORMAT,
		     "slots[3]: \"group\" is not attn_in, attn_out, ffn_in or ffn_out");

	CHECK(sf_scores_read(&s, "/nonexistent/x.json", &FPS, "m.sfimg", &cfg, &e) == -ENOENT,
	      "missing file: %s", e.msg);
}

int main(void)
{
	tmp = unit_env("SF_TMP", "/tmp");
	test_load_order();
	test_load_plan();
	test_compute();
	test_dense();
	test_reader();
	return unit_exit();
}
