/* The dense forward pass against the PyTorch oracle in reference.json:
 * 32-token greedy continuations equal exactly, last-position logits within
 * 1e-3 of max |logit|; and the same logits for 1 and 2 threads. mix4-1m and
 * mix4-5m always; the wide mix4-46m (hidden 1024) under make check-full
 * (SF_FULL=1), where its ids, text and perplexities are checked through
 * sf-run (tests/cli-full/reference.bats). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eval.h"
#include "engine/forward.h"
#include "base/pool.h"
#include "engine/sampler.h"
#include "unit.h"

static size_t ids_of(json_t *arr, int32_t *out, size_t cap)
{
	size_t i, n = json_array_size(arr);
	for (i = 0; i < n && i < cap; i++)
		out[i] = (int32_t)json_integer_value(json_array_get(arr, i));
	return i;
}

static void check_greedy(const char *dir, const struct sf_model *m, struct sf_runstate *s,
			 json_t *greedy)
{
	size_t gi;
	json_t *g;

	json_array_foreach(greedy, gi, g) {
		int32_t prompt[512], expect[512];
		size_t np = ids_of(json_object_get(g, "prompt_ids"), prompt, 512);
		size_t ne = ids_of(json_object_get(g, "ids"), expect, 512);
		int32_t token = prompt[0];
		size_t pos;
		int mismatch = -1;

		CHECK(np >= 1 && ne > np, "%s: greedy[%zu] malformed", dir, gi);
		for (pos = 0; pos + 1 < ne; pos++) {
			s->skip_logits = pos + 1 < np;
			float *logits = sf_forward(m, s, token, (int)pos);
			if (pos + 1 < np) {
				token = prompt[pos + 1];
				continue;
			}
			token = sf_argmax(logits, (size_t)m->cfg.vocab_size);
			if (token != expect[pos + 1]) {
				mismatch = (int)pos + 1;
				break;
			}
		}
		CHECK(mismatch < 0, "%s: greedy[%zu]: token %d is %d, expected %d", dir, gi,
		      mismatch, mismatch < 0 ? 0 : token, mismatch < 0 ? 0 : expect[mismatch]);
	}
}

static float *last_logits(const struct sf_model *m, struct sf_runstate *s, const int32_t *ids,
			  size_t n)
{
	float *logits = NULL;
	for (size_t pos = 0; pos < n; pos++) {
		s->skip_logits = pos + 1 < n;
		logits = sf_forward(m, s, ids[pos], (int)pos);
	}
	return logits;
}

static void check_logits(const char *dir, const struct sf_model *m, struct sf_runstate *s,
			 struct sf_runstate *s2, json_t *cases)
{
	size_t ci;
	json_t *c;
	size_t vocab = (size_t)m->cfg.vocab_size;

	json_array_foreach(cases, ci, c) {
		int32_t ids[512];
		size_t n = ids_of(json_object_get(c, "ids"), ids, 512);
		json_t *ref = json_object_get(c, "last_position_logits");
		float *logits = last_logits(m, s, ids, n);
		double maxabs = 0.0, maxdiff = 0.0;

		CHECK(json_array_size(ref) == vocab, "%s: logits[%zu]: %zu values", dir, ci,
		      json_array_size(ref));
		if (json_array_size(ref) != vocab)
			continue;
		for (size_t i = 0; i < vocab; i++) {
			double r = json_number_value(json_array_get(ref, i));
			if (fabs(r) > maxabs)
				maxabs = fabs(r);
			if (fabs(r - logits[i]) > maxdiff)
				maxdiff = fabs(r - logits[i]);
		}
		CHECK(maxdiff <= 1e-3 * maxabs, "%s: logits[%zu]: max diff %g, max |logit| %g", dir,
		      ci, maxdiff, maxabs);
		printf("%s: logits[%zu]: max diff %.3g (%.2g of max |logit|)\n", dir, ci, maxdiff,
		       maxdiff / maxabs);

		/* rows are split between threads, never a row's sum: bit-identical */
		float *l2 = last_logits(m, s2, ids, n);
		CHECK(memcmp(logits, l2, vocab * sizeof(float)) == 0,
		      "%s: logits[%zu] differ between 1 and 2 threads", dir, ci);
	}
}

/* Tokens beyond the embedding never reach it: the pass returns NULL, the
 * state keeps why, and later passes refuse at once; --ppl's targets too. */
static void check_bad_tokens(const char *dir)
{
	struct sf_err e = { 0 };
	struct sf_model m = { 0 };
	struct sf_runstate s = { 0 };
	struct sf_ppl acc = { 0 };
	int32_t stream[3] = { 1, 5, 0 };

	CHECK(sf_model_open(&m, dir, &e) == 0, "%s", e.msg);
	CHECK(sf_state_init(&s, &m.cfg, 16, &e) == 0, "%s", e.msg);
	if (unit_failures)
		return;
	CHECK(sf_state_error(&s, &e) == 0, "a fresh state has an error");
	CHECK(sf_forward(&m, &s, 1, 0) != NULL, "token 1");
	CHECK(sf_forward(&m, &s, m.cfg.vocab_size, 1) == NULL, "token vocab_size went through");
	CHECK(sf_state_error(&s, &e) == SF_ELIMIT && strcmp(e.msg, "token id 1024 at position 1: "
	      "beyond the model's 1024 embedding rows (vocab_size)") == 0, "message: %s", e.msg);
	CHECK(sf_forward(&m, &s, 1, 1) == NULL, "a pass after a failure went through");
	sf_state_free(&s);
	CHECK(sf_state_init(&s, &m.cfg, 16, &e) == 0, "%s", e.msg);
	stream[2] = -3;	/* a target only: never an input */
	sf_ppl_add(&m, &s, stream, 3, 8, &acc);
	CHECK(acc.scored == 0 && sf_state_error(&s, &e) == SF_ELIMIT, "target -3 scored");
	CHECK(strcmp(e.msg, "token id -3 at position 2: beyond the model's 1024 embedding rows "
		     "(vocab_size)") == 0, "message: %s", e.msg);
	sf_state_free(&s);
	sf_model_close(&m);
}

static void check_model(const char *dir)
{
	struct sf_err e = { 0 };
	struct sf_model m = { 0 };
	struct sf_runstate s = { 0 }, s2 = { 0 };
	struct sf_pool *pool = NULL;
	char path[4096];
	json_error_t je;
	json_t *ref;

	snprintf(path, sizeof(path), "%s/reference.json", dir);
	ref = json_load_file(path, 0, &je);
	CHECK(ref != NULL, "%s: %s", path, je.text);
	CHECK(sf_model_open(&m, dir, &e) == 0, "%s", e.msg);
	CHECK(sf_state_init(&s, &m.cfg, 512, &e) == 0, "%s", e.msg);
	CHECK(sf_state_init(&s2, &m.cfg, 512, &e) == 0, "%s", e.msg);
	CHECK(sf_pool_create(&pool, 2) == 0, "pool");
	if (ref && !unit_failures) {
		s2.pool = pool;
		check_greedy(dir, &m, &s, json_object_get(ref, "greedy"));
		check_logits(dir, &m, &s, &s2, json_object_get(ref, "logits"));
	}
	sf_pool_destroy(pool);
	sf_state_free(&s);
	sf_state_free(&s2);
	sf_model_close(&m);
	json_decref(ref);
}

int main(void)
{
	char dir[4096];
	const char *shared = unit_env("SF_SHARED", "../shared");

	snprintf(dir, sizeof(dir), "%s/models/mix4-1m", unit_env("SF_ROOT", "."));
	check_model(dir);
	check_bad_tokens(dir);
	snprintf(dir, sizeof(dir), "%s/models", shared);
	FILE *f = fopen(dir, "r");
	if (!f && unit_failures)
		return unit_exit();
	if (!f)
		unit_skip("../shared/models absent: only the embedded mix4-1m was checked");
	fclose(f);
	snprintf(dir, sizeof(dir), "%s/models/mix4-1m", shared);
	check_model(dir);
	snprintf(dir, sizeof(dir), "%s/models/mix4-5m", shared);
	check_model(dir);
	if (getenv("SF_FULL")) {
		snprintf(dir, sizeof(dir), "%s/models/mix4-46m", shared);
		check_model(dir);
	}
	return unit_exit();
}
