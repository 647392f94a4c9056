/* SpAx calibration on mix4-1m: budgets add up as Equation 5 says (per
 * group, per layer, per model), errors fall as the budget grows, step 2
 * never loses to step 1, dense layers stay dense, calib.json round trips;
 * against a q4 top tier the accounting counts q4 bytes. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/calib.h"
#include "offline/calib.h"
#include "offline/encode.h"
#include "engine/corpus.h"
#include "engine/tokenizer.h"
#include "unit.h"

struct mem {
	struct sf_sfq *q;
	unsigned char *buf;
};

static int to_memory(void *arg, size_t i, const uint8_t *data, const struct sf_codes_stats *st,
		     struct sf_err *e)
{
	struct mem *M = arg;
	(void)st;
	(void)e;
	memcpy(M->buf + M->q->sections[i].offset, data, M->q->sections[i].bytes);
	M->q->sections[i].data = M->buf + M->q->sections[i].offset;
	return 0;
}

/* What the progress callback saw. */
struct steps {
	int calls, monotone, mid_layer;
	struct sf_calib_progress last;
};

static void on_step(void *arg, const struct sf_calib_progress *p)
{
	struct steps *st = arg;
	if (st->calls == 0)
		st->monotone = 1;
	else if (p->configs < st->last.configs || p->fraction < st->last.fraction)
		st->monotone = 0;
	if (p->layers_done == 0 && p->fraction > 0 && p->fraction < 0.5)
		st->mid_layer = 1;
	st->calls++;
	st->last = *p;
}

/* Equation 5 in every group, layer and the model, of C.sizes' bytes;
 * each layer that is not dense at most its target, short of it only by
 * rounding k down. */
static void check_accounting(const struct sf_calib *C, const double *budgets, size_t nb,
			     const uint8_t *dense)
{
	for (size_t b = 0; b < nb; b++) {
		double num = 0, den = 0;
		for (int l = 0; l < 4; l++) {
			const struct sf_calib_layer *L = sf_calib_at(C, b, l);
			double ln = 0, ld = 0;
			for (int g = 0; g < SF_NGROUPS; g++) {
				const struct sf_calib_sizes *s = &C->sizes[g];
				const struct sf_calib_group *G = &L->g[g];
				double top = (double)G->k_top * s->top_bytes;
				double mid = (double)G->k_mid * s->mid_bytes;
				double all = (double)s->entries * s->top_bytes;
				CHECK(G->k_top + G->k_mid <= s->entries, "k_top + k_mid > entries");
				CHECK(fabs(G->budget - (top + mid) / all) < 1e-12,
				      "group budget %g is not Equation 5", G->budget);
				ln += top + mid;
				ld += all;
				if (dense[l])
					CHECK(G->k_top == s->entries && G->k_mid == 0, "dense layer %d", l);
			}
			CHECK(fabs(L->budget - ln / ld) < 1e-12, "layer budget %g, bytes say %g",
			      L->budget, ln / ld);
			if (!dense[l]) {
				/* at most the target, short of it only by rounding k down */
				CHECK(L->budget <= budgets[b] + 1e-9 && L->budget > budgets[b] - 0.01,
				      "budget %g layer %d realised %g", budgets[b], l, L->budget);
				CHECK(L->error <= L->step1_error + 1e-15, "step 2 lost to step 1");
			}
			num += ln;
			den += ld;
		}
		CHECK(fabs(C->realised[b] - num / den) < 1e-12, "model budget %g, bytes say %g",
		      C->realised[b], num / den);
	}
}

int main(void)
{
	const char *root = unit_env("SF_ROOT", "."), *shared = unit_env("SF_SHARED", "../shared");
	const char *tmp = unit_env("SF_TMP", "/tmp");
	char dir[4096], corpus[4096], out[4096];
	struct sf_model m;
	struct sf_tokenizer *tok;
	struct sf_corpus *c;
	struct sf_err e;

	snprintf(corpus, sizeof(corpus), "%s/data/mix4/kjv.calib.txt", shared);
	if (access(corpus, R_OK) != 0)
		unit_skip("../shared absent: no calibration corpus");
	snprintf(dir, sizeof(dir), "%s/models/mix4-1m", root);
	if (sf_model_open(&m, dir, &e) || sf_tokenizer_open(&tok, dir, &e) ||
	    sf_corpus_open(&c, corpus, &e)) {
		fprintf(stderr, "%s\n", e.msg);
		return 1;
	}
	/* 48 tokens of real text, documents with BOS */
	int32_t tokens[48];
	size_t n = 0;
	const char *doc;
	size_t len;
	while (n < 48 && sf_corpus_next(c, &doc, &len, &e) == 1) {
		int32_t *ids;
		size_t k;
		CHECK(sf_tokenizer_encode(tok, doc, len, 1, &ids, &k, &e) == 0, "encode");
		for (size_t i = 0; i < k && n < 48; i++)
			tokens[n++] = ids[i];
		free(ids);
	}
	CHECK(n == 48 && tokens[0] == sf_tokenizer_bos(tok), "tokens");

	/* scalar codes of layers 1 and 2 in memory (layers 0 and 3 stay dense) */
	struct sf_sfq q = { 0 };
	struct sf_sfq_section secs[8];
	q.fingerprint = m.fingerprint;
	q.method = SF_CODES_SCALAR;
	sf_sfq_shape_of(&q.shape, &m.cfg);
	uint64_t total = 0;
	for (int l = 1; l <= 2; l++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			struct sf_sfq_section *s = &secs[q.nsections++];
			sf_sfq_section_init(s, q.method, &q.shape, l, (enum sf_group)g);
			s->offset = total;
			total += s->bytes;
		}
	q.sections = secs;
	struct mem M = { &q, malloc(total) };
	CHECK(sf_codes_encode_sections(&m, &q, NULL, to_memory, &M, &e) == 0, "codes: %s", e.msg);

	double budgets[] = { 0.7, 0.4, 1.0 };
	uint8_t dense[4] = { 1, 0, 0, 1 };
	struct steps st = { 0 };
	struct sf_calib_opts o = { .budgets = budgets, .nbudgets = 3, .dense_layers = dense, .window = 24,
				   .progress = on_step, .progress_arg = &st };
	struct sf_calib C;
	struct sf_pool *pool;
	CHECK(sf_pool_create(&pool, 2) == 0, "pool");
	int ret = sf_calib_run(&C, &m, &q, tokens, n, &o, pool, &e);
	CHECK(ret == 0, "calibration: %s", e.msg);
	if (ret)
		return unit_exit();
	/* progress per step: many reports within each of the 2 layers, the
	 * configurations rising, the fraction never falling, 1 at the end */
	CHECK(st.calls > 10 && st.monotone && st.last.layers == 2 && st.last.layers_done == 2 &&
	      st.last.fraction == 1.0 && st.last.configs >= 2 * 3 * (2 + SF_NGROUPS * SF_CALIB_GRID),
	      "progress: %d calls, monotone %d, layers %d of %d, fraction %g, %llu configurations",
	      st.calls, st.monotone, st.last.layers_done, st.last.layers, st.last.fraction,
	      (unsigned long long)st.last.configs);
	CHECK(st.mid_layer, "progress: no report inside the first layer");

	check_accounting(&C, budgets, 3, dense);
	for (int l = 1; l <= 2; l++) {
		const struct sf_calib_layer *a = sf_calib_at(&C, 1, l), *b = sf_calib_at(&C, 0, l);
		const struct sf_calib_layer *d = sf_calib_at(&C, 2, l);
		CHECK(a->error > b->error && b->error > d->error, "layer %d errors %g %g %g do not "
		      "fall with budget 0.4 0.7 1", l, a->error, b->error, d->error);
		CHECK(d->error == 0.0, "budget 1 error %g", d->error);
		CHECK(a->teal_error > b->teal_error, "TEAL errors do not fall");
		CHECK(a->error < a->teal_error, "layer %d: SpAx %g worse than TEAL %g at 0.4", l,
		      a->error, a->teal_error);
	}

	double bf16_error = sf_calib_at(&C, 1, 1)->error;
	snprintf(out, sizeof(out), "%s/test_calib.%d.json", tmp, (int)getpid());
	CHECK(sf_calib_write(&C, out, NULL, &e) == 0, "write: %s", e.msg);
	struct sf_calib R;
	CHECK(sf_calib_load(&R, out, &e) == 0, "load: %s", e.msg);
	CHECK(R.nbudgets == 3 && R.n_layers == 4, "loaded shape");
	for (size_t b = 0; b < 3 && R.nbudgets == 3; b++)
		for (int l = 0; l < 4; l++)
			for (int g = 0; g < SF_NGROUPS; g++)
				CHECK(sf_calib_at(&R, b, l)->g[g].k_top == sf_calib_at(&C, b, l)->g[g].k_top &&
				      sf_calib_at(&R, b, l)->g[g].k_mid == sf_calib_at(&C, b, l)->g[g].k_mid,
				      "round trip differs");
	unlink(out);
	sf_calib_free(&R);
	sf_calib_free(&C);

	/* against a q4 top tier: its bytes (ceil(rows / 32) * 18 a column)
	 * in the accounting, the weights quantized (another choice of k) */
	o.top_dtype = SF_DTYPE_Q4;
	CHECK(sf_calib_run(&C, &m, &q, tokens, n, &o, pool, &e) == 0, "q4: %s", e.msg);
	CHECK(C.sizes[SF_GROUP_FFN_OUT].top_bytes == (uint64_t)m.cfg.dim / 32 * 18 &&
	      C.sizes[SF_GROUP_FFN_IN].top_bytes == (uint64_t)m.cfg.hidden_dim / 32 * 36,
	      "q4 sizes %llu %llu", (unsigned long long)C.sizes[SF_GROUP_FFN_OUT].top_bytes,
	      (unsigned long long)C.sizes[SF_GROUP_FFN_IN].top_bytes);
	check_accounting(&C, budgets, 3, dense);
	CHECK(sf_calib_at(&C, 2, 1)->error == 0.0 && sf_calib_at(&C, 1, 1)->error != bf16_error,
	      "q4: error %g at budget 1 (measured against q4's own dense outputs: 0), %g at 0.4 "
	      "as BF16's", sf_calib_at(&C, 2, 1)->error, sf_calib_at(&C, 1, 1)->error);
	sf_calib_free(&C);
	o.top_dtype = SF_DTYPE_F32;

	/* a budget outside (0, 1] */
	double badb[] = { 1.5 };
	struct sf_calib_opts bo = { .budgets = badb, .nbudgets = 1, .dense_layers = dense, .window = 24 };
	CHECK(sf_calib_run(&C, &m, &q, tokens, n, &bo, NULL, &e) == -EINVAL, "budget 1.5 accepted");
	CHECK(strcmp(e.msg, "calibration: budget 1.5 outside (0, 1]") == 0, "message: %s", e.msg);

	free(M.buf);
	sf_pool_destroy(pool);
	sf_corpus_close(c);
	sf_tokenizer_close(tok);
	sf_model_close(&m);
	return unit_exit();
}
