/* Placement methods and runs: every output a permutation, deterministic
 * for any thread count; the exact greedy equals a brute-force Algorithm 1
 * step for step; the scalable greedy within 1% of the exact one on
 * synthetic (n = 2,048) and real (mix4 ffn_out) statistics; planted
 * clusters recovered as contiguous stretches; the runs arithmetic. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/corpus.h"
#include "engine/forward.h"
#include "formats/model.h"
#include "offline/place.h"
#include "formats/placement.h"
#include "base/pool.h"
#include "online/runs.h"
#include "engine/tokenizer.h"
#include "unit.h"

static uint64_t rng_next(uint64_t *s)	/* splitmix64 */
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s)
{
	return (double)(rng_next(s) >> 11) * 0x1p-53;
}

// --- traces in memory: per token the ascending active entries

struct trace {
	uint32_t n;
	size_t tokens, len, cap;
	size_t *off;	/* (tokens + 1) */
	uint32_t *idx;	/* (off[tokens]) */
};

static void trace_free(struct trace *t)
{
	free(t->off);
	free(t->idx);
}

static void trace_init(struct trace *t, uint32_t n, size_t tokens)
{
	*t = (struct trace){ .n = n, .cap = 1024 };
	t->off = calloc(tokens + 1, sizeof *t->off);
	t->idx = malloc(t->cap * sizeof *t->idx);
	if (!t->off || !t->idx)
		abort();
}

/* Appends a token from a 0/1 mask over the entries. */
static void trace_token(struct trace *t, const uint8_t *mask)
{
	for (uint32_t i = 0; i < t->n; i++) {
		if (!mask[i])
			continue;
		if (t->len == t->cap && !(t->idx = realloc(t->idx, (t->cap *= 2) * sizeof *t->idx)))
			abort();
		t->idx[t->len++] = i;
	}
	t->off[++t->tokens] = t->len;
}

/* Counts, as sf-coact would: per-entry and pair counts. */
struct stats {
	struct sf_place_stats s;
	uint64_t *counts;
	uint32_t *pairs;
};

static void stats_free(struct stats *st)
{
	free(st->counts);
	free(st->pairs);
}

static void stats_count(struct stats *st, const struct trace *t)
{
	uint32_t n = t->n;
	st->counts = calloc(n, sizeof *st->counts);
	st->pairs = calloc((size_t)n * (n - 1) / 2 + 1, sizeof *st->pairs);
	if (!st->counts || !st->pairs)
		abort();
	for (size_t k = 0; k < t->tokens; k++) {
		const uint32_t *a = t->idx + t->off[k];
		size_t m = t->off[k + 1] - t->off[k];
		for (size_t x = 0; x < m; x++) {
			uint32_t *row = st->pairs + sf_place_pair_index(n, a[x], a[x] + 1);
			st->counts[a[x]]++;
			for (size_t y = x + 1; y < m; y++)
				row[a[y] - a[x] - 1]++;
		}
	}
	st->s = (struct sf_place_stats){ n, t->tokens, st->counts, st->pairs };
}

/* Planted clusters: the entries are dealt at random into clusters of size
 * cs; in each token a cluster fires with its own probability in
 * [0.08, 0.15], each member then active with probability 0.9, and every
 * entry also at random with probability 0.01. cluster[i] = i's cluster. */
static void planted_trace(struct trace *t, uint32_t n, uint32_t cs, size_t tokens, uint64_t seed,
			  uint32_t *cluster)
{
	uint32_t nc = n / cs, *deal = malloc(n * sizeof *deal);
	double *pc = malloc(nc * sizeof *pc);
	uint8_t *mask = malloc(n);
	uint64_t layout = 12345;	/* the same clusters for every seed */

	if (!deal || !pc || !mask)
		abort();
	for (uint32_t i = 0; i < n; i++)
		deal[i] = i;
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = (uint32_t)(rng_next(&layout) % i), v = deal[i - 1];
		deal[i - 1] = deal[j];
		deal[j] = v;
	}
	for (uint32_t i = 0; i < n; i++)
		cluster[deal[i]] = i / cs < nc ? i / cs : nc - 1;
	for (uint32_t c = 0; c < nc; c++)
		pc[c] = 0.08 + 0.07 * rng_unit(&layout);
	trace_init(t, n, tokens);
	for (size_t k = 0; k < tokens; k++) {
		for (uint32_t i = 0; i < n; i++)
			mask[i] = rng_unit(&seed) < 0.01;
		for (uint32_t c = 0; c < nc; c++)
			if (rng_unit(&seed) < pc[c])
				for (uint32_t i = c * cs; i < n && (i < (c + 1) * cs || c == nc - 1); i++)
					if (rng_unit(&seed) < 0.9)
						mask[deal[i]] = 1;
		trace_token(t, mask);
	}
	free(deal);
	free(pc);
	free(mask);
}

static int is_perm(const uint32_t *perm, uint32_t n)
{
	struct sf_err e = { 0 };
	return sf_placement_check_perm(perm, n, n, "perm", &e) == 0;
}

// --- Algorithm 1 by brute force: every step scans all pairs of ends

static void brute_greedy(const struct sf_place_stats *s, uint32_t *joins, uint32_t *perm)
{
	uint32_t n = s->n, *comp = malloc(n * sizeof *comp), *nb = malloc(2 * n * sizeof *nb);
	uint8_t *deg = calloc(n, 1);

	for (uint32_t i = 0; i < n; i++) {
		comp[i] = i;
		nb[2 * i] = nb[2 * i + 1] = UINT32_MAX;
	}
	for (uint32_t step = 0; step + 1 < n; step++) {
		double best = INFINITY;
		uint32_t bi = 0, bj = 0;
		for (uint32_t i = 0; i < n; i++)
			for (uint32_t j = i + 1; j < n; j++) {
				double d = 1.0 - (double)sf_place_pair(s, i, j) / (double)s->tokens;
				if (deg[i] < 2 && deg[j] < 2 && comp[i] != comp[j] && d < best) {
					best = d;
					bi = i;
					bj = j;
				}
			}
		joins[2 * step] = bi;
		joins[2 * step + 1] = bj;
		nb[2 * bi + deg[bi]++] = bj;
		nb[2 * bj + deg[bj]++] = bi;
		for (uint32_t i = 0, old = comp[bj]; i < n; i++)
			if (comp[i] == old)
				comp[i] = comp[bi];
	}
	uint32_t cur = 0, prev = UINT32_MAX;
	while (n > 1 && deg[cur] != 1)
		cur++;
	for (uint32_t p = 0; p < n; p++) {
		perm[p] = cur;
		uint32_t nx = nb[2 * cur] != prev ? nb[2 * cur] : nb[2 * cur + 1];
		prev = cur;
		cur = nx;
	}
	free(comp);
	free(nb);
	free(deg);
}

static void test_brute_force(void)
{
	uint64_t seed = 7;
	for (int trial = 0; trial < 300; trial++) {
		uint32_t n = 1 + (uint32_t)(rng_next(&seed) % 24);
		uint32_t range = 1 + (uint32_t)(rng_next(&seed) % 4);	/* small: many ties */
		size_t np = (size_t)n * (n - 1) / 2;
		uint32_t *pairs = malloc((np + 1) * sizeof *pairs);
		uint64_t *counts = calloc(n, sizeof *counts);
		uint32_t *j1 = malloc(2 * n * sizeof *j1), *j2 = malloc(2 * n * sizeof *j2);
		uint32_t *p1 = malloc(n * sizeof *p1), *p2 = malloc(n * sizeof *p2);
		struct sf_err e = { 0 };

		for (size_t i = 0; i < np; i++)
			pairs[i] = (uint32_t)(rng_next(&seed) % (range + 1));
		struct sf_place_stats s = { n, 10, counts, pairs };
		CHECK(sf_place_coact_exact(&s, p1, j1, &e) == 0, "%s", e.msg);
		brute_greedy(&s, j2, p2);
		for (uint32_t k = 0; k + 1 < n; k++)
			if (j1[2 * k] != j2[2 * k] || j1[2 * k + 1] != j2[2 * k + 1]) {
				CHECK(0, "trial %d n %u step %u: joined (%u, %u), brute force (%u, %u)",
				      trial, n, k, j1[2 * k], j1[2 * k + 1], j2[2 * k], j2[2 * k + 1]);
				break;
			}
		CHECK(memcmp(p1, p2, n * sizeof *p1) == 0, "trial %d: permutations differ", trial);
		CHECK(is_perm(p1, n), "trial %d: not a permutation", trial);
		/* with finish 0 every join goes through the candidate rounds */
		CHECK(sf_place_coact_topk(&s, 3, 0, NULL, p2, &e) == 0, "%s", e.msg);
		CHECK(is_perm(p2, n), "trial %d: topk: not a permutation", trial);
		free(pairs);
		free(counts);
		free(j1);
		free(j2);
		free(p1);
		free(p2);
	}
}

static double rel(double a, double b)
{
	return fabs(a - b) / fabs(b);
}

/* The scalable greedy against the exact one: path cost within 1%, and
 * the same permutation on 1 and 2 threads. */
static void compare_scalable(const char *what, const struct sf_place_stats *s, uint32_t topk,
			     uint32_t finish, struct sf_pool *pool)
{
	uint32_t n = s->n, *ex = malloc(n * sizeof *ex), *t1 = malloc(n * sizeof *t1),
		 *t2 = malloc(n * sizeof *t2);
	struct sf_err e = { 0 };

	CHECK(sf_place_coact_exact(s, ex, NULL, &e) == 0, "%s", e.msg);
	CHECK(sf_place_coact_topk(s, topk, finish, NULL, t1, &e) == 0, "%s", e.msg);
	CHECK(sf_place_coact_topk(s, topk, finish, pool, t2, &e) == 0, "%s", e.msg);
	CHECK(is_perm(ex, n) && is_perm(t1, n), "%s: not a permutation", what);
	CHECK(memcmp(t1, t2, n * sizeof *t1) == 0, "%s: 1 and 2 threads differ", what);
	double ce = sf_place_path_cost(s, ex), ct = sf_place_path_cost(s, t1);
	double re = sf_place_expected_runs(s, ex), rt = sf_place_expected_runs(s, t1);
	printf("%s: n %u topk %u finish %u: path cost exact %.4f scalable %.4f (%+.4f%%), "
	       "runs/token exact %.3f scalable %.3f (%+.3f%%)\n", what, n, topk, finish, ce, ct,
	       100 * (ct - ce) / ce, re, rt, 100 * (rt - re) / re);
	CHECK(rel(ct, ce) <= 0.01, "%s: path cost %.4f vs exact %.4f", what, ct, ce);
	CHECK(rel(rt, re) <= 0.01, "%s: runs/token %.4f vs exact %.4f", what, rt, re);
	free(ex);
	free(t1);
	free(t2);
}

static void tally_trace(struct sf_runs_tally *t, const struct trace *tr, const uint32_t *perm,
			uint64_t entry_bytes)
{
	uint32_t n = tr->n, *inv = malloc(n * sizeof *inv), *pos = malloc(n * sizeof *pos);
	uint64_t *bits = calloc((n + 63) / 64, sizeof *bits);
	struct sf_run *runs = malloc(n * sizeof *runs);

	memset(t, 0, sizeof *t);
	sf_runs_inverse(perm, n, inv);
	for (size_t k = 0; k < tr->tokens; k++) {
		size_t m = sf_runs_positions(inv, n, tr->idx + tr->off[k], tr->off[k + 1] - tr->off[k],
					     bits, pos);
		sf_runs_tally_add(t, pos, m, entry_bytes, runs);
	}
	free(inv);
	free(pos);
	free(bits);
	free(runs);
}

static void test_planted(struct sf_pool *pool)
{
	const uint32_t n = 2048, cs = 8;
	uint32_t *cluster = malloc(n * sizeof *cluster);
	uint32_t *perm[3], *again = malloc(n * sizeof *again);
	struct trace prof, test;
	struct stats st;
	struct sf_err e = { 0 };
	double rl[3];

	planted_trace(&prof, n, cs, 3000, 1, cluster);
	planted_trace(&test, n, cs, 1000, 2, cluster);
	stats_count(&st, &prof);
	for (int m = 0; m < 3; m++)
		perm[m] = malloc(n * sizeof *perm[m]);
	sf_place_identity(n, perm[0]);
	sf_place_frequency(&st.s, perm[1]);
	CHECK(sf_place_coact_exact(&st.s, perm[2], NULL, &e) == 0, "%s", e.msg);
	CHECK(sf_place_coact_exact(&st.s, again, NULL, &e) == 0, "%s", e.msg);
	CHECK(memcmp(perm[2], again, n * sizeof *again) == 0, "exact: not deterministic");
	sf_place_frequency(&st.s, again);
	CHECK(memcmp(perm[1], again, n * sizeof *again) == 0, "frequency: not deterministic");
	for (int m = 0; m < 3; m++)
		CHECK(is_perm(perm[m], n), "method %d: not a permutation", m);
	for (uint32_t p = 1; p < n; p++)
		CHECK(st.counts[perm[1][p - 1]] >= st.counts[perm[1][p]], "frequency: not descending");

	/* every cluster a contiguous stretch, exact and scalable */
	for (int v = 0; v < 2; v++) {
		uint32_t *pl = perm[2], lo[256], hi[256], bad = 0;
		if (v == 1) {
			CHECK(sf_place_coact_topk(&st.s, 16, 64, pool, again, &e) == 0, "%s", e.msg);
			pl = again;
		}
		for (uint32_t c = 0; c < n / cs; c++) {
			lo[c] = UINT32_MAX;
			hi[c] = 0;
		}
		for (uint32_t p = 0; p < n; p++) {
			uint32_t c = cluster[pl[p]];
			lo[c] = p < lo[c] ? p : lo[c];
			hi[c] = p > hi[c] ? p : hi[c];
		}
		for (uint32_t c = 0; c < n / cs; c++)
			bad += hi[c] - lo[c] + 1 != cs;
		CHECK(bad == 0, "%s: %u of %u clusters not contiguous", v ? "topk" : "exact", bad, n / cs);
	}

	/* read length on the held-out trace; and the predicted runs are exact
	 * on the profile itself */
	for (int m = 0; m < 3; m++) {
		struct sf_runs_tally t;
		tally_trace(&t, &prof, perm[m], 512);
		double want = sf_place_expected_runs(&st.s, perm[m]);
		CHECK(fabs((double)t.runs[0] / (double)t.tokens - want) < 1e-9 * want,
		      "method %d: runs/token %.6f on the profile, predicted %.6f", m,
		      (double)t.runs[0] / (double)t.tokens, want);
		tally_trace(&t, &test, perm[m], 512);
		rl[m] = (double)t.active / (double)t.runs[0];
		printf("planted n %u: %s: mean read length %.3f, runs/token %.2f, bytes/token %.0f "
		       "(gap 16: %.0f)\n", n, sf_place_method_name((enum sf_place_method)m), rl[m],
		       (double)t.runs[0] / (double)t.tokens, (double)t.bytes[0] / (double)t.tokens,
		       (double)t.bytes[5] / (double)t.tokens);
	}
	CHECK(rl[2] > 2 * rl[0] && rl[2] > 2 * rl[1], "coact read length %.3f vs identity %.3f, "
	      "frequency %.3f", rl[2], rl[0], rl[1]);

	compare_scalable("synthetic planted", &st.s, 16, 64, pool);
	compare_scalable("synthetic planted", &st.s, 8, 256, pool);
	stats_free(&st);
	trace_free(&prof);
	trace_free(&test);
	for (int m = 0; m < 3; m++)
		free(perm[m]);
	free(again);
	free(cluster);
}

/* Real statistics: ffn_out (the widest group) of every layer of mix4-5m,
 * active = the top fraction by |value|, over the first tokens of a genre's
 * profile split. */
struct record {
	uint32_t n, k;
	int layers;
	uint8_t *mask;		/* (n) scratch */
	uint32_t *order;	/* (n) scratch */
	const float *x;
	struct trace *t;	/* (layers) */
};

static const float *sort_x;
static int by_magnitude(const void *pa, const void *pb)
{
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
	float fa = fabsf(sort_x[a]), fb = fabsf(sort_x[b]);
	return fa != fb ? (fa > fb ? -1 : 1) : (a < b ? -1 : a > b);
}

static void record_fn(void *ctx, int layer, enum sf_group g, const float *in, int T,
			size_t n)
{
	struct record *R = ctx;
	(void)T;	/* one token a call: the observer's tokens is 0 */
	if (g != SF_GROUP_FFN_OUT)
		return;
	sf_place_identity(R->n, R->order);
	sort_x = in;
	qsort(R->order, n, sizeof *R->order, by_magnitude);
	memset(R->mask, 0, n);
	for (uint32_t i = 0; i < R->k; i++)
		R->mask[R->order[i]] = 1;
	trace_token(&R->t[layer], R->mask);
}

static void test_real(struct sf_pool *pool)
{
	const char *shared = unit_env("SF_SHARED", "../shared");
	char dir[4096], text[4096];
	struct sf_model m = { 0 };
	struct sf_tokenizer *tok = NULL;
	struct sf_runstate rs = { 0 };
	struct sf_corpus *corpus = NULL;
	struct sf_err e = { 0 };
	struct record R = { 0 };
	int32_t *ids = NULL;
	size_t nids = 0, want = 384;
	const char *doc;
	size_t len;

	snprintf(dir, sizeof dir, "%s/models/mix4-5m", shared);
	snprintf(text, sizeof text, "%s/data/mix4/gcide.profile.txt", shared);
	if (sf_model_open(&m, dir, &e)) {
		printf("real statistics not checked: %s\n", e.msg);
		return;
	}
	CHECK(sf_tokenizer_open(&tok, dir, &e) == 0, "%s", e.msg);
	CHECK(sf_state_init(&rs, &m.cfg, (int)want, &e) == 0, "%s", e.msg);
	CHECK(sf_corpus_open(&corpus, text, &e) == 0, "%s", e.msg);
	if (unit_failures)
		goto out;
	R.n = (uint32_t)m.cfg.hidden_dim;
	R.layers = m.cfg.n_layers;
	R.mask = malloc(R.n);
	R.order = malloc(R.n * sizeof *R.order);
	R.t = calloc((size_t)R.layers, sizeof *R.t);
	for (int l = 0; l < R.layers; l++)
		trace_init(&R.t[l], R.n, want);
	/* documents joined until the context is full */
	while (nids < want && sf_corpus_next(corpus, &doc, &len, &e) == 1) {
		int32_t *d;
		size_t nd;
		if (sf_tokenizer_encode(tok, doc, len, 1, &d, &nd, &e))
			break;
		if (!(ids = realloc(ids, (nids + nd) * sizeof *ids)))
			abort();
		memcpy(ids + nids, d, nd * sizeof *d);
		nids += nd;
		free(d);
	}
	nids = nids < want ? nids : want;
	CHECK(nids == want, "%s: only %zu tokens", text, nids);
	for (double density = 0.1; density < 0.35; density += 0.2) {
		struct sf_observer obs = { .fn = record_fn, .ctx = &R };
		R.k = (uint32_t)lround(density * R.n);
		for (int l = 0; l < R.layers; l++)
			R.t[l].tokens = R.t[l].len = 0;
		rs.observer = &obs;
		rs.skip_logits = 1;
		rs.pool = pool;
		for (size_t p = 0; p < nids; p++)
			sf_forward(&m, &rs, ids[p], (int)p);
		for (int l = 0; l < R.layers; l += 2) {
			struct stats st;
			char what[64];
			stats_count(&st, &R.t[l]);
			snprintf(what, sizeof what, "mix4-5m layer %d ffn_out density %.1f", l, density);
			compare_scalable(what, &st.s, 16, 128, pool);
			stats_free(&st);
		}
	}
out:
	for (int l = 0; R.t && l < R.layers; l++)
		trace_free(&R.t[l]);
	free(R.t);
	free(R.mask);
	free(R.order);
	free(ids);
	sf_corpus_close(corpus);
	sf_state_free(&rs);
	sf_tokenizer_close(tok);
	sf_model_close(&m);
}

static void test_runs(void)
{
	const uint32_t pos[] = { 0, 1, 2, 5, 6, 9, 20 };
	struct sf_run runs[7];
	size_t r = sf_runs_plan(pos, 7, 0, runs);

	CHECK(r == 4 && runs[0].start == 0 && runs[0].len == 3 && runs[1].start == 5 &&
	      runs[1].len == 2 && runs[2].start == 9 && runs[3].start == 20, "gap 0: %zu runs", r);
	/* 1000-byte entries: blocks 0; 1; 2; 4-5 */
	CHECK(sf_runs_bytes(runs, r, 1000, 4096) == 5 * 4096, "gap 0 bytes %llu",
	      (unsigned long long)sf_runs_bytes(runs, r, 1000, 4096));
	r = sf_runs_plan(pos, 7, 2, runs);
	CHECK(r == 2 && runs[0].len == 10 && runs[1].start == 20 && runs[1].len == 1,
	      "gap 2: %zu runs", r);
	r = sf_runs_plan(pos, 7, 1, runs);	/* no gap of one position */
	CHECK(r == 4, "gap 1: %zu runs", r);
	/* a block two runs share is read once */
	const uint32_t near[] = { 0, 2 };
	r = sf_runs_plan(near, 2, 0, runs);
	CHECK(r == 2 && sf_runs_bytes(runs, r, 512, 4096) == 4096, "shared block");
	CHECK(sf_runs_plan(pos, 0, 0, runs) == 0 && sf_runs_bytes(runs, 0, 512, 4096) == 0, "empty");

	const uint32_t perm[] = { 3, 0, 4, 1, 2 }, act[] = { 4, 3, 1 };
	uint32_t inv[5], out[3];
	uint64_t bits[1] = { 0 };
	sf_runs_inverse(perm, 5, inv);
	CHECK(sf_runs_positions(inv, 5, act, 3, bits, out) == 3 && out[0] == 0 && out[1] == 2 &&
	      out[2] == 3 && bits[0] == 0, "positions %u %u %u", out[0], out[1], out[2]);

	struct sf_config c = { .dim = 256, .hidden_dim = 768, .n_heads = 8, .n_kv_heads = 4,
			       .head_dim = 32 };
	CHECK(sf_runs_bundle_bytes(&c, SF_GROUP_ATTN_IN, SF_DTYPE_BF16) == (256 + 2 * 128) * 2, "attn_in");
	CHECK(sf_runs_bundle_bytes(&c, SF_GROUP_FFN_IN, SF_DTYPE_BF16) == 2 * 768 * 2, "ffn_in");
	CHECK(sf_runs_bundle_bytes(&c, SF_GROUP_FFN_OUT, SF_DTYPE_F32) == 256 * 4, "ffn_out");

	const uint32_t bad[] = { 0, 2, 2, 3 }, range[] = { 3, 1, 0, 4 }, good[] = { 2, 0, 1 };
	struct sf_err e = { 0 };
	CHECK(sf_placement_check_perm(bad, 4, 4, "x", &e) == SF_EFORMAT &&
	      strcmp(e.msg, "x: index 2 at positions 1 and 2, index 1 missing") == 0, "dup: %s", e.msg);
	CHECK(sf_placement_check_perm(range, 4, 4, "x", &e) == SF_EFORMAT &&
	      strcmp(e.msg, "x: perm[3] = 4 is out of range: expected 0..3") == 0, "range: %s", e.msg);
	CHECK(sf_placement_check_perm(good, 3, 4, "x", &e) == SF_EFORMAT &&
	      strcmp(e.msg, "x: index 3 missing (3 indices for 4 entries)") == 0, "short: %s", e.msg);
	CHECK(sf_placement_check_perm(bad, 3, 3, "x", &e) == SF_EFORMAT &&
	      strcmp(e.msg, "x: index 2 at positions 1 and 2, index 1 missing") == 0, "dup: %s", e.msg);
	CHECK(sf_placement_check_perm(good, 3, 3, "x", &e) == 0, "a permutation refused: %s", e.msg);
}

int main(void)
{
	struct sf_pool *pool = NULL;

	CHECK(sf_pool_create(&pool, 2) == 0, "pool");
	test_runs();
	test_brute_force();
	test_planted(pool);
	test_real(pool);
	sf_pool_destroy(pool);
	return unit_exit();
}
