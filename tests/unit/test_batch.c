/* The batched forward pass (sf_forward_batch) against the one-token one:
 * for blocks of T in {1, 2, 7, 64, 300} tokens after a prefix, at -t 1, 2
 * and 3, every token's logits and the whole KV cache are the same floats
 * bit for bit, on the embedded mix4-1m and the shared mix4-5m. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "base/rng.h"
#include "engine/forward.h"
#include "unit.h"

#define PREFIX 5

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
