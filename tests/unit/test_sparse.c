/* Unit test of lib/common/online/sparse*.c on images of the embedded mix4-1m
 * (identity and shuffled placements, scalar codes, attention resident or
 * not): every group's sparse output against a plain double-precision
 * product over the same selection (top tier from the model's weights,
 * middle tier from the decoded codes); budget 1 against the dense
 * decoder; logits bit-identical between --simulate and reads, whatever
 * the cache, collapse, queue depth and threads; bytes counted against the
 * ring's; injected read errors and short reads; q8 and q4 top tiers
 * (budget 1 the dense decoder over the dequantized weights, their bytes,
 * passes); refused settings. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/codes.h"
#include "formats/codes.h"
#include "engine/forward.h"
#include "formats/image.h"
#include "imagetest.h"
#include "engine/kernels.h"
#include "engine/select.h"
#include "formats/model.h"
#include "formats/placement.h"
#include "online/sparse.h"
#include "formats/trace.h"
#include "unit.h"
#include "online/uring.h"
#include "base/quant.h"
#include "offline/encode.h"

#define T 10		/* positions run */
static uint64_t prefill = 4;	/* of them, the prefill of selective computation */

static char tmpdir[4096], model_dir[4096];
static struct sf_model M;
static struct sf_sfq Q;
static const int32_t tokens[T] = { 1, 57, 300, 12, 999, 4, 77, 512, 3, 130 };

// --- inputs (tests/unit/imagetest.h)

static uint64_t rng = 0x2545f4914f6cdd1dull;

static void pack(const char *name, const struct sf_placement *pl, const struct sf_sfq *q,
		 const struct sf_image_keep *k, unsigned resident)
{
	struct sf_err e = { 0 };
	CHECK(!imagetest_pack(tmpdir, name, &M, model_dir, pl, q, k, resident,
			      SF_IMAGE_DTYPE_KEEP, &e), "%s: %s", name, e.msg);
}

// --- the reference: the same selection, products in double

struct checker {
	const struct sf_group_exec *inner;
	struct sf_group_exec *wrap;	/* this one's, taking as many tokens as inner */
	double top, mid;	/* fractions, as the decoder was given them */
	const struct sf_image_keep *keep;	/* the image's --keep, or NULL */
	uint64_t leaks;		/* outputs of rows left out that are not exactly 0 */
	const struct sf_sparse *sp;	/* its selective computation, if any */
	double worst;		/* max |sparse - ref| / max |ref| over every group */
};

static float weight(const struct sf_weight *w, uint64_t r, uint64_t c)
{
	uint64_t i = r * w->cols + c;
	switch (w->dtype) {
	case SF_DTYPE_BF16: return sf_bf16_to_f32(((const uint16_t *)w->data)[i]);
	case SF_DTYPE_F16: return sf_f16_to_f32(((const uint16_t *)w->data)[i]);
	default: return ((const float *)w->data)[i];
	}
}

static void check_token(struct checker *ck, int layer, enum sf_group g, const float *in,
			size_t n, int nout, float *const *out)
{
	const struct sf_weight *mw[SF_GROUP_MAX_MATRICES];
	const char *names[SF_GROUP_MAX_MATRICES];
	uint32_t kt = (uint32_t)llround(ck->top * (double)n);
	uint32_t km = (uint32_t)llround(ck->mid * (double)n);
	size_t words = (n + 63) / 64;
	uint64_t *bt = calloc(words, 8), *ba = calloc(words, 8);
	uint32_t *scratch = calloc(2 * n, 4);
	const struct sf_sfq_section *sec = sf_sfq_find(&Q, layer, g);
	const uint8_t *kept = ck->keep && ck->keep->count[layer] < ck->keep->hidden ?
			      ck->keep->kept + (size_t)layer * ck->keep->hidden : NULL;
	const struct sf_select_compute *sc = sf_sparse_compute(ck->sp);
	const uint8_t *set = sc ? sf_select_compute_mask(sc, layer) : NULL;

	if (km > n - kt)
		km = (uint32_t)n - kt;
	sf_select_topk(in, (uint32_t)n, kt, bt, scratch);
	sf_select_topk(in, (uint32_t)n, kt + km, ba, scratch);
	sf_codes_group_matrices(&M, layer, g, mw, names);
	for (int i = 0; i < nout; i++) {
		size_t rows = (size_t)mw[i]->rows;
		double *ref = calloc(rows, sizeof(double)), big = 1e-9, diff = 0;
		float *dec = malloc(rows * sizeof(float));
		struct sf_codes_view v = sf_sfq_view(&Q, sec, i);
		for (size_t c = 0; c < n; c++) {
			int top = bt[c / 64] >> (c % 64) & 1, any = ba[c / 64] >> (c % 64) & 1;
			if (g == SF_GROUP_FFN_OUT && ((kept && !kept[c]) || (set && !set[c])))
				continue;	/* not on flash or not in the set: never computed */
			if (top)
				for (size_t r = 0; r < rows; r++)
					ref[r] += (double)in[c] * weight(mw[i], r, c);
			else if (any) {
				sf_codes_decode(v.method, v.codebook, v.base + c * v.stride, rows, dec);
				for (size_t r = 0; r < rows; r++)
					ref[r] += (double)in[c] * dec[r];
			}
		}
		for (size_t r = 0; r < rows; r++) {
			if (g == SF_GROUP_FFN_IN && ((kept && !kept[r]) || (set && !set[r]))) {
				ref[r] = 0;	/* the row is not on flash, or not computed */
				ck->leaks += out[i][r] != 0;
			}
			if (fabs(ref[r]) > big)
				big = fabs(ref[r]);
			if (fabs(ref[r] - out[i][r]) > diff)
				diff = fabs(ref[r] - out[i][r]);
		}
		if (diff / big > ck->worst)
			ck->worst = diff / big;
		free(ref);
		free(dec);
	}
	free(bt);
	free(ba);
	free(scratch);
}

/* The decoder's pass, then each of its tokens against the reference. */
static void check_exec(void *ctx, int layer, enum sf_group g, const float *in, int ntok,
		       size_t n, int nout, float *const *out, const struct sf_weight *const *w)
{
	struct checker *ck = ctx;

	ck->inner->fn(ck->inner->ctx, layer, g, in, ntok, n, nout, out, w);
	ck->wrap->tokens = ck->inner->tokens;
	if (w[0]->data)		/* resident: dense, nothing to compare */
		return;
	for (int k = 0; k < ntok; k++) {
		float *o[SF_GROUP_MAX_MATRICES];
		for (int i = 0; i < nout; i++)
			o[i] = out[i] + (size_t)k * w[i]->rows;
		check_token(ck, layer, g, in + (size_t)k * n, n, nout, o);
	}
}

// --- one decoding run over tokens[]

struct result {
	float logits[T][1024];
	uint64_t bytes_moved, uring_bytes, requests, uring_requests, hits, set_entries;
	double out_entries;	/* ffn_out entries computed per pass under the set */
	double budget;
};

/* Tokens a forward pass gives the decoder (sf_forward_batch). */
static int pass = 1;

/* q8/q4 images decode on the float path (the reference the dense checks
 * hold exactly) when set, else on the integer path */
static int f32_activations;

static int decode(const char *name, const struct sf_sparse_opts *o, int threads,
		  struct checker *ck, struct result *r, struct sf_err *e)
{
	struct sf_sparse_opts ob = *o;
	char path[4200];

	ob.f32_activations |= f32_activations;
	struct sf_image img = { 0 };
	struct sf_model m = { 0 };
	struct sf_pool *pool = NULL;
	struct sf_runstate s = { 0 };
	struct sf_sparse *sp = NULL;
	struct sf_group_exec wrap;
	int ret;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	memset(r, 0, sizeof(*r));
	if ((ret = sf_image_open(&img, path, e)) || (ret = sf_image_model(&img, &m, e)) ||
	    (ret = sf_pool_create(&pool, threads)) ||
	    (ret = sf_state_init_batch(&s, &m.cfg, T, pass, e)))
		goto out;
	s.pool = pool;
	ob.tokens = pass;
	if ((ret = sf_sparse_open(&sp, &img, &m, pool, &ob, e)))
		goto out;
	s.exec = sf_sparse_exec(sp);
	sf_sparse_prefill(sp, prefill);
	if (ck) {
		ck->sp = sp;
		ck->inner = s.exec;
		wrap = (struct sf_group_exec){ .fn = check_exec, .ctx = ck,
					       .tokens = ck->inner->tokens };
		ck->wrap = &wrap;
		s.exec = &wrap;
	}
	for (int p = 0; p < T; p += pass) {
		int np = T - p < pass ? T - p : pass;
		const float *l = sf_forward_batch(&m, &s, tokens + p, np, p, 1);
		if ((ret = sf_sparse_error(sp, e)))
			goto out;
		memcpy(r->logits[p], l, (size_t)np * sizeof(r->logits[p]));
	}
	json_t *j = sf_sparse_stats_json(sp);
	CHECK(j != NULL, "stats");
	json_unpack(j, "{s:I, s:I, s:F, s:{s:I, s:I}, s:{s:I}}", "bytes_moved", &r->bytes_moved,
		    "requests", &r->requests, "budget", &r->budget, "uring", "bytes",
		    &r->uring_bytes, "requests", &r->uring_requests, "cache", "hits", &r->hits);
	json_t *cj = json_object_get(j, "compute");
	r->set_entries = cj ? (uint64_t)json_integer_value(json_object_get(cj, "set_entries")) : 0;
	r->out_entries = cj ? json_real_value(json_object_get(cj, "ffn_out_entries_per_pass")) : 0;
	json_decref(j);
out:
	sf_sparse_close(sp);
	sf_state_free(&s);
	sf_pool_destroy(pool);
	sf_model_close(&m);
	sf_image_close(&img);
	return ret;
}

static struct sf_sparse_opts fractions(double top, double mid)
{
	struct sf_sparse_opts o;
	sf_sparse_opts_default(&o);
	o.select = SF_SPARSE_FRACTIONS;
	o.top = top;
	o.mid = mid;
	return o;
}

/* One combination of the settings that must not change the output: cache
 * policy and ratio, admission, collapse gap, queue depth, threads, the
 * weights computed per batch while reads are in flight (1: after every
 * completion), and the device figures --collapse auto takes its gap in
 * bytes from (peak / iops; 0: none). */
struct setting {
	enum sf_cache_policy pol;
	double ratio, seg;
	int gap;
	unsigned qd;
	int th;
	uint64_t batch;
	double peak, iops;
};

static void apply_setting(struct sf_sparse_opts *o, const struct setting *s)
{
	o->policy = s->pol;
	o->cache_ratio = s->ratio;
	o->seg_admit = s->seg;
	o->collapse = s->gap;
	o->qd = s->qd;
	o->batch_weights = s->batch;
	o->device_peak = s->peak;
	o->device_iops = s->iops;
}

static int same(const struct result *a, const struct result *b)
{
	return memcmp(a->logits, b->logits, sizeof(a->logits)) == 0;
}

static int argmax(const float *x, int n)
{
	int b = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[b])
			b = i;
	return b;
}

/* The dense decoder's logits of tokens[]. */
static void dense(struct result *r)
{
	struct sf_runstate s = { 0 };
	struct sf_err e = { 0 };

	CHECK(!sf_state_init(&s, &M.cfg, T, &e), "%s", e.msg);
	for (int p = 0; p < T; p++)
		memcpy(r->logits[p], sf_forward(&M, &s, tokens[p], p), sizeof(r->logits[p]));
	sf_state_free(&s);
}

int main(void)
{
	const char *root = unit_env("SF_ROOT", ".");
	static struct result ref, a, b;
	struct sf_err e = { 0 };
	struct sf_placement pl;
	struct sf_sparse_opts o;
	const unsigned ATTN = 1u << SF_GROUP_ATTN_IN | 1u << SF_GROUP_ATTN_OUT;
	int ret;

	snprintf(model_dir, sizeof(model_dir), "%s/models/mix4-1m", root);
	mkdir(unit_env("SF_TMP", "/tmp"), 0777);
	snprintf(tmpdir, sizeof(tmpdir), "%s/test_sparse.XXXXXX", unit_env("SF_TMP", "/tmp"));
	if (!mkdtemp(tmpdir)) {
		perror(tmpdir);
		return 1;
	}
	if (sf_model_open(&M, model_dir, &e)) {
		fprintf(stderr, "%s\n", e.msg);
		return 1;
	}
	CHECK(M.cfg.vocab_size == 1024, "vocab %d", M.cfg.vocab_size);
	imagetest_shuffled(&M, &rng, &pl);
	imagetest_codes(&M, &Q, SF_CODES_SCALAR, (1u << SF_NGROUPS) - 1);
	pack("id.sfimg", NULL, &Q, NULL, 0);
	pack("sh.sfimg", &pl, &Q, NULL, 0);
	pack("shr.sfimg", &pl, &Q, NULL, ATTN);
	pack("plain.sfimg", NULL, NULL, NULL, 0);

	/* O_DIRECT on SF_TMP, or skip */
	{
		char path[4200];
		struct sf_uring *u = NULL;
		snprintf(path, sizeof(path), "%s/id.sfimg", tmpdir);
		ret = sf_uring_open(&u, path, &(struct sf_uring_opts){ 0 }, &e);
		sf_uring_close(u);
		if (ret == -EINVAL)
			unit_skip("O_DIRECT refused on $SF_TMP (tmpfs?): sparse reads not tested");
		CHECK(ret == 0, "%s", e.msg);
	}

	/* budget 1 is the dense decoder: same tokens, logits within rounding */
	dense(&ref);
	const char *all[] = { "id.sfimg", "sh.sfimg", "shr.sfimg", "plain.sfimg" };
	for (int i = 0; i < 4; i++) {
		sf_sparse_opts_default(&o);
		CHECK(!(ret = decode(all[i], &o, 2, NULL, &a, &e)), "%s: %s", all[i], e.msg);
		for (int p = 0; p < T && !ret; p++) {
			CHECK(argmax(a.logits[p], 1024) == argmax(ref.logits[p], 1024),
			      "%s: position %d: token %d, dense %d", all[i], p,
			      argmax(a.logits[p], 1024), argmax(ref.logits[p], 1024));
			for (int t = 0; t < 1024; t++)
				if (fabsf(a.logits[p][t] - ref.logits[p][t]) > 1e-3f) {
					CHECK(0, "%s: position %d logit %d: %g, dense %g", all[i], p,
					      t, a.logits[p][t], ref.logits[p][t]);
					break;
				}
		}
		CHECK(fabs(a.budget - 1.0) < 1e-12, "%s: budget %g", all[i], a.budget);
	}

	/* two tiers: every group's output is the selection's product */
	for (int i = 0; i < 3; i++) {
		struct checker ck = { .top = 0.3, .mid = 0.25 };
		o = fractions(0.3, 0.25);
		o.cache_ratio = 0.2;
		CHECK(!decode(all[i], &o, 2, &ck, &a, &e), "%s: %s", all[i], e.msg);
		CHECK(ck.worst < 1e-4, "%s: sparse against reference: relative error %g", all[i],
		      ck.worst);
		CHECK(a.budget > 0.3 && a.budget < 0.55, "%s: budget %g", all[i], a.budget);
	}
	{
		struct checker ck = { .top = 0.2, .mid = 0 };
		sf_sparse_opts_default(&o);
		o.select = SF_SPARSE_DENSITY;
		o.density = 0.2;
		CHECK(!decode("sh.sfimg", &o, 1, &ck, &a, &e), "%s", e.msg);
		CHECK(ck.worst < 1e-4, "TEAL against reference: relative error %g", ck.worst);
	}

	/* bit-identical: simulate, cache, collapse, queue depth, threads */
	o = fractions(0.3, 0.25);
	o.simulate = 1;
	CHECK(!decode("sh.sfimg", &o, 1, NULL, &ref, &e), "%s", e.msg);
	CHECK(ref.uring_bytes == 0 && ref.bytes_moved > 0, "simulate: %llu bytes read",
	      (unsigned long long)ref.uring_bytes);
	const struct setting v[] = {
		{ SF_CACHE_NONE, -1, 1, 0, 1, 1, 0, 0, 0 },
		{ SF_CACHE_NONE, -1, 1, 0, 2, 2, 1, 0, 0 },
		{ SF_CACHE_S3FIFO, 0.3, 1, SF_SPARSE_COLLAPSE_AUTO, 0, 2, 0, 0, 0 },
		{ SF_CACHE_S3FIFO, 0.5, 0.1, 16, 2, 2, 1, 0, 0 },
		{ SF_CACHE_LRU, 0.1, 1, 3, 64, 1, 4096, 0, 0 },
		{ SF_CACHE_LRU, 1.0, 1, 0, 7, 2, 0, 0, 0 },
		{ SF_CACHE_NONE, -1, 1, SF_SPARSE_COLLAPSE_AUTO, 0, 1, 0, 1e12, 1e7 },
		{ SF_CACHE_S3FIFO, 0.3, 0.2, SF_SPARSE_COLLAPSE_AUTO, 3, 2, 4096, 1e12, 1e8 },
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		o = fractions(0.3, 0.25);
		apply_setting(&o, &v[i]);
		CHECK(!decode("sh.sfimg", &o, v[i].th, NULL, &a, &e), "case %zu: %s", i, e.msg);
		CHECK(same(&a, &ref), "case %zu: logits differ from --simulate", i);
		CHECK(a.bytes_moved == a.uring_bytes && a.requests == a.uring_requests,
		      "case %zu: counted %llu bytes in %llu requests, the ring %llu in %llu", i,
		      (unsigned long long)a.bytes_moved, (unsigned long long)a.requests,
		      (unsigned long long)a.uring_bytes, (unsigned long long)a.uring_requests);
		CHECK(v[i].ratio < 0.5 || a.hits > 0, "case %zu: no cache hits", i);
	}
	/* collapse reads fewer requests, more bytes */
	o = fractions(0.3, 0.25);
	o.collapse = 0;
	CHECK(!decode("sh.sfimg", &o, 1, NULL, &a, &e), "%s", e.msg);
	o.collapse = 64;
	CHECK(!decode("sh.sfimg", &o, 1, NULL, &b, &e), "%s", e.msg);
	CHECK(b.requests < a.requests && b.bytes_moved >= a.bytes_moved,
	      "collapse 64: %llu requests %llu bytes; 0: %llu, %llu",
	      (unsigned long long)b.requests, (unsigned long long)b.bytes_moved,
	      (unsigned long long)a.requests, (unsigned long long)a.bytes_moved);
	/* so does auto's gap in bytes, from a device that is never
	 * bandwidth-bound here: 100,000 bytes, 24 pages */
	o.collapse = SF_SPARSE_COLLAPSE_AUTO;
	o.device_peak = 1e12;
	o.device_iops = 1e7;
	CHECK(!decode("sh.sfimg", &o, 1, NULL, &b, &e), "%s", e.msg);
	CHECK(b.requests < a.requests && b.bytes_moved > a.bytes_moved,
	      "collapse auto, 98304 bytes: %llu requests %llu bytes; 0: %llu, %llu",
	      (unsigned long long)b.requests, (unsigned long long)b.bytes_moved,
	      (unsigned long long)a.requests, (unsigned long long)a.bytes_moved);

	/* short reads change nothing; an injected error stops decoding */
	o = fractions(0.3, 0.25);
	o.fault.short_cap = 4096;
	CHECK(!decode("sh.sfimg", &o, 2, NULL, &a, &e), "%s", e.msg);
	CHECK(same(&a, &ref), "short reads: logits differ");
	o.fault = (struct sf_uring_fault){ .eio_nth = 3 };
	ret = decode("sh.sfimg", &o, 2, NULL, &a, &e);
	CHECK(ret == -EIO && strstr(e.msg, "Input/output error") && !strchr(e.msg, '\n'),
	      "eio: %d '%s'", ret, e.msg);

	/* --keep: the neurons left out are never computed; the rest are the
	 * selection's product; reads equal --simulate; keeping every neuron
	 * is the full image */
	{
		struct sf_image_keep k = { 0 }, all = { 0 };
		imagetest_keep_random(&M, &rng, 6, &k);
		imagetest_keep_random(&M, &rng, 10, &all);
		pack("keep.sfimg", &pl, NULL, &k, 0);
		pack("keepall.sfimg", NULL, NULL, &all, 0);
		double fr[][2] = { { 1, 0 }, { 0.3, 0 }, { 0.6, 0 } };
		for (size_t i = 0; i < 3; i++) {
			struct checker ck = { .top = fr[i][0], .keep = &k };
			o = fractions(fr[i][0], 0);
			o.cache_ratio = 0.2;
			CHECK(!decode("keep.sfimg", &o, 2, &ck, &a, &e), "keep: %s", e.msg);
			CHECK(ck.worst < 1e-4 && ck.leaks == 0, "keep %g: relative error %g, %llu "
			      "left-out rows not 0", fr[i][0], ck.worst, (unsigned long long)ck.leaks);
			o.simulate = 1;
			CHECK(!decode("keep.sfimg", &o, 1, NULL, &b, &e), "keep: %s", e.msg);
			CHECK(same(&a, &b), "keep %g: logits differ from --simulate", fr[i][0]);
		}
		CHECK(a.budget < 0.6 * 0.95, "keep: budget %g with 60%% of the neurons", a.budget);
		sf_sparse_opts_default(&o);
		CHECK(!decode("plain.sfimg", &o, 2, NULL, &a, &e), "%s", e.msg);
		CHECK(!decode("keepall.sfimg", &o, 2, NULL, &b, &e), "%s", e.msg);
		CHECK(same(&a, &b), "every neuron kept: logits differ from the full image");
		sf_image_keep_free(&k);
		sf_image_keep_free(&all);
	}

	/* free riders: deterministic whatever the cache, collapse, queue
	 * depth and threads; more entries computed than without */
	{
		o = fractions(0.3, 0.25);
		o.free_riders = 1;
		o.simulate = 1;
		CHECK(!decode("sh.sfimg", &o, 1, NULL, &ref, &e), "riders: %s", e.msg);
		o = fractions(0.3, 0.25);
		o.simulate = 1;
		CHECK(!decode("sh.sfimg", &o, 1, NULL, &b, &e), "%s", e.msg);
		CHECK(!same(&ref, &b) && ref.budget > b.budget, "riders: budget %g, without %g",
		      ref.budget, b.budget);
		for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
			o = fractions(0.3, 0.25);
			o.free_riders = 1;
			apply_setting(&o, &v[i]);
			CHECK(!decode("sh.sfimg", &o, v[i].th, NULL, &a, &e), "riders %zu: %s", i, e.msg);
			CHECK(same(&a, &ref), "riders, case %zu: logits differ from --simulate", i);
		}
	}

	/* selective computation: after the prefill the ffn_out entries and
	 * ffn_in rows are the set's only; = --simulate; rho 1 is the plain run */
	{
		struct sf_scores st = { .nslots = M.cfg.n_layers };
		uint32_t H = (uint32_t)M.cfg.hidden_dim;
		st.slots = calloc((size_t)st.nslots, sizeof(*st.slots));
		for (int l = 0; l < st.nslots; l++) {
			st.slots[l] = (struct sf_scores_slot){ .layer = l, .group = SF_GROUP_FFN_OUT,
							       .entries = H, .tokens = 1 };
			st.slots[l].score = calloc(H, sizeof(double));
			for (uint32_t j = 0; j < H; j++)
				st.slots[l].score[j] = imagetest_rnd(&rng, 1000);
		}
		uint8_t none[64] = { 0 }, dflt[64];
		sf_select_dense_default(M.cfg.n_layers, dflt);
		struct sf_select_compute_opts co;
		sf_select_compute_defaults(&co, 0.4);
		co.dense = dflt;
		struct checker ck = { .top = 0.6, .mid = 0.25 };
		o = fractions(0.6, 0.25);
		o.compute = &co;
		o.compute_static = &st;
		o.cache_ratio = 0.3;
		CHECK(!decode("sh.sfimg", &o, 2, &ck, &a, &e), "compute: %s", e.msg);
		CHECK(ck.worst < 1e-4 && ck.leaks == 0, "compute: relative error %g, %llu rows "
		      "outside the set not 0", ck.worst, (unsigned long long)ck.leaks);
		/* 4 layers: the first and the last dense, round(0.4 * 384) in the others */
		CHECK(a.set_entries == 2 * 154, "compute: %llu entries in the set",
		      (unsigned long long)a.set_entries);
		CHECK(a.out_entries > 0 && a.out_entries <= 2 * 154, "compute: %g ffn_out entries "
		      "per pass", a.out_entries);
		o.simulate = 1;
		CHECK(!decode("sh.sfimg", &o, 1, NULL, &b, &e), "compute: %s", e.msg);
		CHECK(same(&a, &b), "compute: logits differ from --simulate");
		o = fractions(0.6, 0.25);
		CHECK(!decode("sh.sfimg", &o, 1, NULL, &b, &e), "%s", e.msg);
		CHECK(!same(&a, &b), "compute: the set changed nothing");
		co.rho = 1;
		co.dense = none;
		o.compute = &co;
		CHECK(!decode("sh.sfimg", &o, 2, NULL, &a, &e), "compute: %s", e.msg);
		CHECK(same(&a, &b) && a.set_entries == 4 * 384, "rho 1: logits differ from the plain run");
		/* with --keep: the set within the neurons on flash */
		struct sf_image_keep k = { 0 };
		imagetest_keep_random(&M, &rng, 7, &k);
		pack("keepc.sfimg", NULL, NULL, &k, 0);
		co.rho = 0.4;
		co.dense = dflt;
		struct checker ck2 = { .top = 1, .keep = &k };
		sf_sparse_opts_default(&o);
		o.compute = &co;
		o.compute_static = &st;
		CHECK(!decode("keepc.sfimg", &o, 2, &ck2, &a, &e), "compute + keep: %s", e.msg);
		CHECK(ck2.worst < 1e-4 && ck2.leaks == 0, "compute + keep: relative error %g, %llu",
		      ck2.worst, (unsigned long long)ck2.leaks);
		CHECK(a.out_entries < 2 * 154, "compute + keep: %g entries per pass", a.out_entries);
		sf_image_keep_free(&k);
		sf_scores_free(&st);
	}

	/* passes of several tokens (sf_forward_batch): each token's logits
	 * bit-identical to the one-token run, whatever the settings; budget 1
	 * reads the flash regions once a pass */
	{
		static struct result one, sc_one, keep_one, comp_one;
		struct sf_image_keep k = { 0 };
		imagetest_keep_random(&M, &rng, 5, &k);
		pack("keepb.sfimg", &pl, NULL, &k, 0);
		struct sf_select_compute_opts co;
		uint8_t dflt[64];
		sf_select_dense_default(M.cfg.n_layers, dflt);
		sf_select_compute_defaults(&co, 0.4);
		co.dense = dflt;
		struct sf_sparse_opts ocomp = fractions(0.5, 0.25);
		ocomp.compute = &co;
		ocomp.simulate = 1;
		struct sf_sparse_opts okeep = fractions(0.4, 0);
		okeep.free_riders = 1;
		okeep.simulate = 1;
		pass = 1;
		sf_sparse_opts_default(&o);
		o.prefetch = 0;
		CHECK(!decode("sh.sfimg", &o, 1, NULL, &one, &e), "%s", e.msg);
		o = fractions(0.3, 0.25);
		o.simulate = 1;
		CHECK(!decode("sh.sfimg", &o, 1, NULL, &sc_one, &e), "%s", e.msg);
		CHECK(!decode("keepb.sfimg", &okeep, 2, NULL, &keep_one, &e), "%s", e.msg);
		CHECK(!decode("sh.sfimg", &ocomp, 2, NULL, &comp_one, &e), "%s", e.msg);
		static const int passes[] = { 2, 7, 10 };
		for (int q = 0; q < 3; q++) {
			pass = passes[q];
			for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
				o = fractions(0.3, 0.25);
				apply_setting(&o, &v[i]);
				o.free_riders = i & 1;
				CHECK(!decode("sh.sfimg", &o, v[i].th, NULL, &a, &e), "pass %d case %zu: "
				      "%s", pass, i, e.msg);
				CHECK(same(&a, (i & 1) ? &ref : &sc_one), "pass %d case %zu: logits "
				      "differ from one token a pass", pass, i);
			}
			struct checker ck = { .top = 0.3, .mid = 0.25 };
			o = fractions(0.3, 0.25);
			o.cache_ratio = 0.2;
			CHECK(!decode("shr.sfimg", &o, 2, &ck, &a, &e), "%s", e.msg);
			CHECK(ck.worst < 1e-4, "pass %d: sparse against reference: relative error %g",
			      pass, ck.worst);
			okeep.simulate = q & 1;
			CHECK(!decode("keepb.sfimg", &okeep, 2, NULL, &a, &e), "%s", e.msg);
			CHECK(same(&a, &keep_one), "pass %d: keep, riders: logits differ", pass);
			ocomp.simulate = q & 1;
			CHECK(!decode("sh.sfimg", &ocomp, 2, NULL, &a, &e), "%s", e.msg);
			CHECK(same(&a, &comp_one), "pass %d: selective computation: logits differ",
			      pass);
			sf_sparse_opts_default(&o);
			o.prefetch = 0;
			CHECK(!decode("sh.sfimg", &o, 1, NULL, &a, &e), "%s", e.msg);
			CHECK(same(&a, &one), "pass %d: budget 1: logits differ", pass);
			uint64_t passes_run = (uint64_t)(T + pass - 1) / (uint64_t)pass;
			CHECK(a.bytes_moved * T == one.bytes_moved * passes_run,
			      "pass %d: budget 1 read %llu bytes, one token a pass %llu", pass,
			      (unsigned long long)a.bytes_moved, (unsigned long long)one.bytes_moved);
		}
		pass = 1;
		sf_image_keep_free(&k);
	}

	/* q8 and q4 top tiers (with scalar codes beneath): on the float path
	 * budget 1 is the dense decoder over the dequantized weights and
	 * reads 34/64, 18/64 of the BF16 image's bytes; two tiers are the
	 * selection's product (top tier dequantized); the integer path near
	 * the float path's logits; on both, reads, cache, threads and passes
	 * of 2, 7 and 10 tokens give --simulate's logits, one token a pass; a
	 * budget counts the image's own top-tier bytes */
	for (f32_activations = 1; f32_activations >= 0; f32_activations--) {
		static const enum sf_dtype qd[2] = { SF_DTYPE_Q8, SF_DTYPE_Q4 };
		static const char *const qn[2] = { "q8.sfimg", "q4.sfimg" };
		static struct result bf1, bfs, qref, q1, qs, q1f[2];
		struct sf_layer_weights *saved = M.layers;
		struct sf_top_model tm;
		pass = 1;
		sf_sparse_opts_default(&o);
		o.prefetch = 0;
		CHECK(!decode("sh.sfimg", &o, 2, NULL, &bf1, &e), "%s", e.msg);
		o = fractions(0.3, 0.25);
		o.simulate = 1;
		CHECK(!decode("sh.sfimg", &o, 1, NULL, &bfs, &e), "%s", e.msg);
		/* the BF16 image's groups held whole (engine/kernels.h's float
		 * slabs): the same floats, one token and passes, nothing read */
		for (pass = 1; f32_activations && pass <= 7; pass += 6) {
			struct result h;
			sf_sparse_opts_default(&o);
			o.prefetch = 0;
			o.ram = 1ull << 30;
			CHECK(!decode("sh.sfimg", &o, 2, NULL, &h, &e), "%s", e.msg);
			CHECK(same(&h, &bf1) && h.uring_bytes == 0, "sh.sfimg pass %d: groups held: "
			      "logits differ, or %llu bytes read", pass,
			      (unsigned long long)h.uring_bytes);
			o = fractions(0.3, 0.25);
			o.ram = 1ull << 30;
			CHECK(!decode("sh.sfimg", &o, 2, NULL, &h, &e), "%s", e.msg);
			CHECK(same(&h, &bfs), "sh.sfimg pass %d: groups held, two tiers: logits differ",
			      pass);
		}
		pass = 1;
		for (int d = 0; d < 2; d++) {
			const char *nm = qn[d];
			CHECK(!imagetest_pack(tmpdir, nm, &M, model_dir, &pl, &Q, NULL, 0, qd[d], &e),
			      "%s: %s", nm, e.msg);
			/* the checker and dense() then use the image's weights */
			CHECK(!sf_top_model_init(&tm, &M, qd[d], SF_QUANT_RTN, &e), "%s", e.msg);
			M.layers = tm.m.layers;
			dense(&qref);
			pass = 1;
			sf_sparse_opts_default(&o);
			o.prefetch = 0;
			CHECK(!decode(nm, &o, 2, NULL, &q1, &e), "%s: %s", nm, e.msg);
			if (!f32_activations) {
				double d2 = 0.0, n2 = 0.0;
				for (int p = 0; p < T; p++)
					for (int t = 0; t < 1024; t++) {
						double df = (double)q1.logits[p][t] - q1f[d].logits[p][t];
						d2 += df * df;
						n2 += (double)q1f[d].logits[p][t] * q1f[d].logits[p][t];
					}
				CHECK(d2 <= 1e-3 * n2, "%s: integer path: relative squared error %g "
				      "against the float path", nm, d2 / n2);
			} else
				q1f[d] = q1;
			for (int p = 0; f32_activations && p < T; p++) {
				CHECK(argmax(q1.logits[p], 1024) == argmax(qref.logits[p], 1024),
				      "%s: position %d: token %d, dense %d", nm, p,
				      argmax(q1.logits[p], 1024), argmax(qref.logits[p], 1024));
				for (int t = 0; t < 1024; t++)
					if (fabsf(q1.logits[p][t] - qref.logits[p][t]) > 1e-3f) {
						CHECK(0, "%s: position %d logit %d: %g, dense over the "
						      "dequantized weights %g", nm, p, t, q1.logits[p][t],
						      qref.logits[p][t]);
						break;
					}
			}
			double share = (double)q1.bytes_moved / (double)bf1.bytes_moved,
			       want = (d ? SF_Q4_BLOCK_BYTES : SF_Q8_BLOCK_BYTES) / 64.0;
			CHECK(fabs(q1.budget - 1.0) < 1e-12 && share > want - 0.02 && share < want + 0.03,
			      "%s: budget %g reads %.4f of BF16's bytes, expected about %.4f", nm,
			      q1.budget, share, want);
			struct checker ck = { .top = 0.3, .mid = 0.25 };
			o = fractions(0.3, 0.25);
			o.cache_ratio = 0.2;
			CHECK(!decode(nm, &o, 2, f32_activations ? &ck : NULL, &a, &e), "%s: %s", nm,
			      e.msg);
			CHECK(!f32_activations || ck.worst < 1e-4,
			      "%s: sparse against reference: relative error %g", nm, ck.worst);
			o = fractions(0.3, 0.25);
			o.simulate = 1;
			CHECK(!decode(nm, &o, 1, NULL, &qs, &e), "%s: %s", nm, e.msg);
			/* Equation 5 in the image's bytes: the top share the same, the
			 * codes' share grown by BF16's column bytes over these */
			double mid_q = (bfs.budget - 0.3) / want;
			CHECK(fabs(qs.budget - 0.3 - mid_q) < 0.1 * mid_q, "%s: budget %g, expected "
			      "0.3 + %g (BF16's %g)", nm, qs.budget, mid_q, bfs.budget);
			for (size_t i = 2; i < 4; i++) {
				o = fractions(0.3, 0.25);
				apply_setting(&o, &v[i]);
				CHECK(!decode(nm, &o, v[i].th, NULL, &a, &e), "%s: %s", nm, e.msg);
				CHECK(same(&a, &qs), "%s case %zu: logits differ from --simulate", nm, i);
			}
			static const int passes[] = { 2, 7, 10 };
			for (int q = 0; q < 3; q++) {
				pass = passes[q];
				o = fractions(0.3, 0.25);
				o.cache_ratio = 0.2;
				CHECK(!decode(nm, &o, 2, NULL, &a, &e), "%s: %s", nm, e.msg);
				CHECK(same(&a, &qs), "%s pass %d: logits differ from one token a pass",
				      nm, pass);
				sf_sparse_opts_default(&o);
				o.prefetch = 0;
				CHECK(!decode(nm, &o, 1, NULL, &a, &e), "%s: %s", nm, e.msg);
				CHECK(same(&a, &q1), "%s pass %d: budget 1: logits differ", nm, pass);
				/* --ram for the whole image: every group held, read at
				 * open, the same floats (the integer path's slabs) */
				o.ram = 1ull << 30;
				CHECK(!decode(nm, &o, 2, NULL, &a, &e), "%s: %s", nm, e.msg);
				CHECK(same(&a, &q1), "%s pass %d: groups held: logits differ", nm, pass);
				CHECK(f32_activations || a.uring_bytes == 0,
				      "%s pass %d: groups held, yet %llu bytes read", nm, pass,
				      (unsigned long long)a.uring_bytes);
				o = fractions(0.3, 0.25);
				o.ram = 1ull << 30;
				CHECK(!decode(nm, &o, 2, NULL, &a, &e), "%s: %s", nm, e.msg);
				CHECK(same(&a, &qs), "%s pass %d: groups held, two tiers: logits differ",
				      nm, pass);
			}
			pass = 1;
			M.layers = saved;
			sf_top_model_free(&tm);
		}
		/* --keep: ffn_in columns of the kept rows only, their last block
		 * partly empty; reads equal --simulate, in passes too */
		struct sf_image_keep k = { 0 };
		imagetest_keep_random(&M, &rng, 6, &k);
		CHECK(!imagetest_pack(tmpdir, "q4keep.sfimg", &M, model_dir, &pl, NULL, &k, 0,
				      SF_DTYPE_Q4, &e), "q4keep: %s", e.msg);
		o = fractions(0.5, 0);
		o.simulate = 1;
		CHECK(!decode("q4keep.sfimg", &o, 1, NULL, &qs, &e), "q4keep: %s", e.msg);
		for (pass = 1; pass <= 7; pass += 6) {
			o = fractions(0.5, 0);
			o.cache_ratio = 0.3;
			CHECK(!decode("q4keep.sfimg", &o, 2, NULL, &a, &e), "q4keep: %s", e.msg);
			CHECK(same(&a, &qs), "q4keep pass %d: logits differ from --simulate", pass);
		}
		pass = 1;
		sf_image_keep_free(&k);
	}
	f32_activations = 0;

	/* refused settings */
	sf_sparse_opts_default(&o);
	o.budget = 0.5;
	ret = decode("sh.sfimg", &o, 1, NULL, &a, &e);
	CHECK(ret == SF_EUNSUPPORTED && strstr(e.msg, "--budget 0.5: the image has no tier sizes"),
	      "%d '%s'", ret, e.msg);
	o = fractions(0.3, 0.2);
	ret = decode("plain.sfimg", &o, 1, NULL, &a, &e);
	CHECK(ret == SF_EUNSUPPORTED && strstr(e.msg, "middle-tier entries, but the image has no codes"),
	      "%d '%s'", ret, e.msg);
	o = fractions(0.3, 0);
	o.ram = 100000;
	ret = decode("sh.sfimg", &o, 1, NULL, &a, &e);
	CHECK(ret == SF_ELIMIT && strstr(e.msg, "--ram 100000: ") && strstr(e.msg, "bytes needed: process "),
	      "%d '%s'", ret, e.msg);

	sf_placement_free(&pl);
	sf_sfq_close(&Q);
	sf_model_close(&M);
	if (!unit_failures) {
		const char *names[] = { "id.sfimg", "sh.sfimg", "shr.sfimg", "plain.sfimg",
					"keep.sfimg", "keepall.sfimg", "keepc.sfimg", "keepb.sfimg",
					"q8.sfimg", "q4.sfimg", "q4keep.sfimg" };
		char path[4300];
		for (int i = 0; i < 11; i++) {
			snprintf(path, sizeof(path), "%s/%s", tmpdir, names[i]);
			unlink(path);
		}
		rmdir(tmpdir);
	}
	return unit_exit();
}
