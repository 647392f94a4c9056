/* The batched forward pass (sf_forward_batch) against the one-token one:
 * for blocks of T in {1, 2, 7, 64, 300} tokens after a prefix, at -t 1, 2
 * and 3, every token's logits and the whole KV cache are the same floats
 * bit for bit, on the embedded mix4-1m and the shared mix4-5m. And one
 * layer run alone (sf_forward_layer) on the residual stream the whole
 * pass gave it: the same output and KV cache. A pass that releases each
 * layer's weights (release_weights): the same logits, and the weights'
 * mapping holds less resident than after a pass that keeps them. */
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "base/rng.h"
#include "engine/forward.h"
#include "formats/model.h"
#include "unit.h"

#define PREFIX 5

/* The residual stream into every layer of a pass, (n_layers, T, dim),
 * taken where attn_in's input is observed. */
struct streams {
	const struct sf_runstate *s;
	float *x;
	size_t per_layer;	/* T * dim */
};

static void take_stream(void *ctx, int layer, enum sf_group g, const float *in, int T,
			size_t n)
{
	struct streams *S = ctx;
	(void)in;
	(void)n;
	(void)T;
	if (g == SF_GROUP_ATTN_IN)
		memcpy(S->x + (size_t)layer * S->per_layer, S->s->x, S->per_layer * sizeof(float));
}

/* Each layer alone on the stream the whole pass of T tokens gave it
 * gives the stream the pass gave the next layer (the last: the pass's
 * output), and the same KV cache. */
static void check_layers(const struct sf_model *m, const int32_t *ids, int T)
{
	struct sf_err e = { 0 };
	struct sf_runstate whole, alone;
	int L = m->cfg.n_layers, bad = -1;
	size_t per = (size_t)T * (size_t)m->cfg.dim;
	struct streams S = { .s = &whole, .x = malloc((size_t)L * per * sizeof(float)),
			     .per_layer = per };
	struct sf_observer obs = { .fn = take_stream, .ctx = &S, .tokens = T };

	CHECK(sf_state_init_batch(&whole, &m->cfg, T, T, &e) == 0, "%s", e.msg);
	CHECK(sf_state_init_batch(&alone, &m->cfg, T, T, &e) == 0, "%s", e.msg);
	whole.observer = &obs;
	whole.skip_logits = 1;
	sf_forward_batch(m, &whole, ids, T, 0, 0);
	for (int l = 0; l < L; l++) {
		memcpy(alone.x, S.x + (size_t)l * per, per * sizeof(float));
		CHECK(sf_forward_layer(m, &alone, l, T, 0) == 0, "layer %d alone failed", l);
		const float *want = l + 1 < L ? S.x + (size_t)(l + 1) * per : whole.x;
		if (bad < 0 && memcmp(alone.x, want, per * sizeof(float)))
			bad = l;
	}
	CHECK(bad < 0, "%d tokens: layer %d alone gives another output", T, bad);
	size_t kv = (size_t)L * T * m->cfg.n_kv_heads * m->cfg.head_dim;
	CHECK(!memcmp(whole.key_cache, alone.key_cache, kv * sizeof(float)) &&
	      !memcmp(whole.value_cache, alone.value_cache, kv * sizeof(float)),
	      "%d tokens: the layers alone leave other KV caches", T);
	CHECK(sf_forward_layer(m, &alone, L, 1, 0) == -1 && sf_state_error(&alone, &e) == -EINVAL,
	      "layer %d of %d: not refused", L, L);
	sf_state_free(&whole);
	sf_state_free(&alone);
	free(S.x);
}

/* Resident kB of the mapping that holds p (/proc/self/smaps), -1 when
 * it is not found. */
static long mapping_rss_kb(const void *p)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	long rss = -1;
	int in = 0;

	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
		else if (in && sscanf(line, "Rss: %ld kB", &rss) == 1)
			break;
	}
	if (f)
		fclose(f);
	return rss;
}

static void check_release(const struct sf_model *m, const int32_t *ids)
{
	struct sf_runstate keep, rel;
	struct sf_err e = { 0 };
	size_t vocab = (size_t)m->cfg.vocab_size, layers = 0;
	const void *w = m->layers[0].w_up.data;

	for (int l = 0; l < m->cfg.n_layers; l++) {
		const struct sf_layer_weights *L = &m->layers[l];
		const struct sf_weight *big[] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate,
						  &L->w_up, &L->w_down };
		for (int i = 0; i < 7; i++)
			layers += (size_t)sf_weight_bytes(big[i]);
	}
	CHECK(sf_state_init_batch(&keep, &m->cfg, 64, 64, &e) == 0 &&
	      sf_state_init_batch(&rel, &m->cfg, 64, 64, &e) == 0, "%s", e.msg);
	rel.release_weights = 1;
	float *a = sf_forward_batch(m, &keep, ids, 64, 0, 1);
	long kept = mapping_rss_kb(w);
	float *b = sf_forward_batch(m, &rel, ids, 64, 0, 1);
	long released = mapping_rss_kb(w);
	CHECK(a && b && !memcmp(a, b, 64 * vocab * sizeof(float)),
	      "release_weights: other logits");
	CHECK(kept >= 0 && released >= 0 && kept - released > (long)(layers / 1024 / 2),
	      "release_weights: the mapping keeps %ld kB resident against %ld kB after a pass "
	      "that keeps the weights (layers: %zu kB)", released, kept, layers / 1024);
	sf_state_free(&keep);
	sf_state_free(&rel);
}

/* Continuous batching: three sequences, each with its own KV cache and
 * prefix (of different lengths, in f16 and f32 caches), a token of each
 * in one pass: each row the logits a one-token pass of that sequence
 * gives, and its KV cache the same, for several passes in turn. */
static void check_multi(const struct sf_model *m, const int32_t *ids, int nth)
{
	enum { N = 3, STEPS = 5 };
	static const int prefix[N] = { 1, 9, 4 };
	struct sf_runstate alone[N], seq[N], pass;
	struct sf_runstate *seqs[N];
	struct sf_pool *pool = NULL;
	struct sf_err e = { 0 };
	size_t vocab = (size_t)m->cfg.vocab_size;
	int seq_len = 32, pos[N];
	int32_t tok[N];

	CHECK(sf_pool_create(&pool, nth) == 0, "pool of %d", nth);
	for (int i = 0; i < N; i++) {
		struct sf_state_opts o = { .seq_len = seq_len, .batch = 4, .last_logits = 1,
					   .kv_k = i == 1 ? SF_KV_F32 : SF_KV_F16,
					   .kv_v = i == 1 ? SF_KV_F32 : SF_KV_F16 };
		CHECK(sf_state_init_opts(&alone[i], &m->cfg, &o, &e) == 0, "%s", e.msg);
		CHECK(sf_state_init_opts(&seq[i], &m->cfg, &o, &e) == 0, "%s", e.msg);
		alone[i].pool = seq[i].pool = pool;
		seqs[i] = &seq[i];
		for (int p = 0; p < prefix[i]; p++) {
			sf_forward(m, &alone[i], ids[i * 40 + p], p);
			sf_forward(m, &seq[i], ids[i * 40 + p], p);
		}
		pos[i] = prefix[i];
	}
	struct sf_state_opts po = { .seq_len = seq_len, .batch = N };
	CHECK(sf_state_init_opts(&pass, &m->cfg, &po, &e) == 0, "%s", e.msg);
	pass.pool = pool;
	for (int step = 0; step < STEPS; step++) {
		for (int i = 0; i < N; i++)
			tok[i] = ids[i * 40 + pos[i]];
		/* every sequence, then the last two alone */
		int first = step == STEPS - 1 ? 1 : 0;
		float *lm = sf_forward_multi(m, &pass, seqs + first, tok + first, pos + first,
					     N - first);
		CHECK(lm != NULL, "-t %d step %d: the pass failed", nth, step);
		for (int i = first; lm && i < N; i++) {
			float *l1 = sf_forward(m, &alone[i], tok[i], pos[i]);
			CHECK(!memcmp(l1, lm + (size_t)(i - first) * vocab, vocab * sizeof(float)),
			      "-t %d step %d: sequence %d's logits differ", nth, step, i);
			pos[i]++;
		}
	}
	for (int i = 0; i < N; i++) {
		size_t kv = (size_t)m->cfg.n_layers * (size_t)seq_len * seq[i].k_row;
		CHECK(!memcmp(alone[i].key_cache, seq[i].key_cache, kv) &&
		      !memcmp(alone[i].value_cache, seq[i].value_cache, kv),
		      "-t %d: sequence %d's KV cache differs", nth, i);
	}
	/* more sequences than the pass holds, a position past a cache: refused */
	CHECK(!sf_forward_multi(m, &pass, seqs, tok, pos, N + 1) &&
	      sf_state_error(&pass, &e) == -EINVAL, "%d sequences in a pass of %d", N + 1, N);
	for (int i = 0; i < N; i++) {
		sf_state_free(&alone[i]);
		sf_state_free(&seq[i]);
	}
	sf_state_free(&pass);
	sf_pool_destroy(pool);
}

static void check_model(const char *dir)
{
	static const int blocks[] = { 1, 2, 7, 64, 300 };
	struct sf_model m;
	struct sf_err e = { 0 };

	if (sf_model_open(&m, dir, &e)) {
		CHECK(0, "%s: %s", dir, e.msg);
		return;
	}
	size_t vocab = (size_t)m.cfg.vocab_size;
	int seq = PREFIX + 300;
	int32_t *ids = malloc((size_t)seq * sizeof(*ids));
	uint64_t rng = 11;
	for (int i = 0; i < seq; i++)
		ids[i] = (int32_t)(sf_rng_unit(&rng) * (double)vocab);

	for (int nth = 1; nth <= 3; nth++) {
		struct sf_pool *pool = NULL;
		struct sf_runstate one, bat;
		CHECK(sf_pool_create(&pool, nth) == 0, "pool of %d", nth);
		CHECK(sf_state_init(&one, &m.cfg, seq, &e) == 0, "%s", e.msg);
		CHECK(sf_state_init_batch(&bat, &m.cfg, seq, 300, &e) == 0, "%s", e.msg);
		one.pool = bat.pool = pool;
		for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
			int T = blocks[b], bad = -1;
			/* the prefix one token at a time in both, then the block */
			for (int p = 0; p < PREFIX; p++) {
				sf_forward(&m, &one, ids[p], p);
				sf_forward(&m, &bat, ids[p], p);
			}
			float *lb = sf_forward_batch(&m, &bat, ids + PREFIX, T, PREFIX, 1);
			for (int t = 0; t < T; t++) {
				float *l1 = sf_forward(&m, &one, ids[PREFIX + t], PREFIX + t);
				if (bad < 0 && memcmp(l1, lb + (size_t)t * vocab, vocab * sizeof(float)))
					bad = t;
			}
			CHECK(bad < 0, "%s -t %d block %d: token %d's logits differ", dir, nth, T, bad);
			size_t kv = (size_t)m.cfg.n_layers * seq * m.cfg.n_kv_heads * m.cfg.head_dim;
			CHECK(!memcmp(one.key_cache, bat.key_cache, kv * sizeof(float)) &&
			      !memcmp(one.value_cache, bat.value_cache, kv * sizeof(float)),
			      "%s -t %d block %d: KV caches differ", dir, nth, T);
			/* the last token's logits alone */
			bat.skip_logits = 0;
			float *last = sf_forward_batch(&m, &bat, ids + PREFIX, T, PREFIX, 0);
			float *l1 = sf_forward(&m, &one, ids[PREFIX + T - 1], PREFIX + T - 1);
			CHECK(!memcmp(last, l1, vocab * sizeof(float)),
			      "%s -t %d block %d: last logits differ", dir, nth, T);
		}
		sf_state_free(&one);
		sf_state_free(&bat);
		sf_pool_destroy(pool);
	}
	check_multi(&m, ids, 1);
	check_multi(&m, ids, 2);
	check_layers(&m, ids, 1);
	check_layers(&m, ids, 37);
	check_release(&m, ids);
	/* a pass larger than the state's batch, or past its context: refused */
	struct sf_runstate small;
	if (sf_state_init_batch(&small, &m.cfg, 8, 2, &e) == 0) {
		CHECK(!sf_forward_batch(&m, &small, ids, 3, 0, 0) &&
		      sf_state_error(&small, &e) == -EINVAL, "%s: 3 tokens in a batch of 2", dir);
		sf_state_free(&small);
	}
	if (sf_state_init_batch(&small, &m.cfg, 8, 2, &e) == 0) {
		CHECK(!sf_forward_batch(&m, &small, ids, 2, 7, 0) &&
		      sf_state_error(&small, &e) == -EINVAL, "%s: 2 tokens at 7 of 8", dir);
		sf_state_free(&small);
	}
	free(ids);
	sf_model_close(&m);
}

int main(void)
{
	char dir[4096];
	const char *root = unit_env("SF_ROOT", "."), *shared = unit_env("SF_SHARED", "../shared");

	snprintf(dir, sizeof(dir), "%s/models/mix4-1m", root);
	check_model(dir);
	snprintf(dir, sizeof(dir), "%s/models/mix4-5m", shared);
	FILE *f = fopen(dir, "r");
	if (f) {
		fclose(f);
		check_model(dir);
	} else {
		printf("%s absent: only the embedded model checked\n", dir);
	}
	return unit_exit();
}
