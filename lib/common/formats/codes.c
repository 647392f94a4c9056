/* Middle-tier codes: column records, the group encoder over the thread
 * pool, the decode-accumulate kernel (AVX-512 and AVX2 beside the plain C _ref,
 * bit-identical) and the .sfq reader and writer. Byte layout:
 * man/sf-formats.5 (codes). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/codes.h"
#include "base/guard.h"
#include "base/vocab.h"
#include "engine/cpu.h"
#include "engine/kernels.h"
#include "offline/trellis.h"
#include "offline/twoscale.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static const char *const method_names[] = { "trellis", "scalar" };

const char *sf_codes_method_name(enum sf_code_method m)
{
	return method_names[m];
}

int sf_codes_method_parse(const char *name, enum sf_code_method *m)
{
	for (int i = 0; i < 2; i++)
		if (strcmp(name, method_names[i]) == 0) {
			*m = (enum sf_code_method)i;
			return 0;
		}
	return -1;
}

// ----------------------------------------------------------------------------
// little-endian and big-endian helpers

static uint16_t get_le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_le64(const uint8_t *p) { return get_le32(p) | (uint64_t)get_le32(p + 4) << 32; }
static void put_le16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static void put_le64(uint8_t *p, uint64_t v)
{
	put_le32(p, (uint32_t)v);
	put_le32(p + 4, (uint32_t)(v >> 32));
}
static uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// ----------------------------------------------------------------------------
// column records

size_t sf_codes_scale_bytes(enum sf_code_method m)
{
	return m == SF_CODES_SCALAR ? 4 : 2;
}

size_t sf_codes_col_bytes(enum sf_code_method method, size_t m)
{
	return sf_codes_scale_bytes(method) + (m + 3) / 4;
}

void sf_codes_pack(const uint8_t *c, size_t m, uint8_t *out)
{
	memset(out, 0, (m + 3) / 4);
	for (size_t t = 0; t < m; t++)
		out[t / 4] |= (uint8_t)((c[t] & 3u) << (6 - 2 * (t % 4)));
}

void sf_codes_unpack(const uint8_t *in, size_t m, uint8_t *c)
{
	for (size_t t = 0; t < m; t++)
		c[t] = (in[t / 4] >> (6 - 2 * (t % 4))) & 3u;
}

static unsigned code_at(const uint8_t *codes, size_t t)
{
	return (codes[t / 4] >> (6 - 2 * (t % 4))) & 3u;
}

static float f16_round(float v)
{
	return sf_f16_to_f32(sf_f32_to_f16(v));
}

void sf_codes_decode(enum sf_code_method method, const float *cb, const uint8_t *rec, size_t m,
		     float *out)
{
	const uint8_t *codes = rec + sf_codes_scale_bytes(method);
	if (method == SF_CODES_TRELLIS) {
		float s = sf_f16_to_f32(get_le16(rec));
		uint32_t idx = 0;
		for (size_t t = 0; t < m; t++) {
			idx = ((idx << 2) | code_at(codes, t)) & 0xffffu;
			out[t] = cb[idx] * s;
		}
	} else {
		float s0 = sf_f16_to_f32(get_le16(rec)), s1 = sf_f16_to_f32(get_le16(rec + 2));
		for (size_t t = 0; t < m; t++)
			out[t] = sf_twoscale_level(code_at(codes, t), s0, s1);
	}
}

// ----------------------------------------------------------------------------
// encoder

struct sf_encoder {
	enum sf_code_method method;
	const float *cb;
	size_t mmax;
	struct sf_trellis_work *tw;		/* trellis only */
	float *x[SF_TRELLIS_LOCKSTEP];		/* (mmax) normalised column */
	uint8_t *c[SF_TRELLIS_LOCKSTEP];	/* (mmax) codes, one per byte */
	float *dec;				/* (mmax) decoded column */
};

uint64_t sf_encoder_bytes(enum sf_code_method method, size_t mmax)
{
	uint64_t b = (uint64_t)mmax * (SF_TRELLIS_LOCKSTEP * (sizeof(float) + 1) + sizeof(float));
	return b + (method == SF_CODES_TRELLIS ? sf_trellis_work_bytes(mmax) : 0);
}

void sf_encoder_free(struct sf_encoder *enc)
{
	if (!enc)
		return;
	sf_trellis_work_free(enc->tw);
	for (int k = 0; k < SF_TRELLIS_LOCKSTEP; k++) {
		free(enc->x[k]);
		free(enc->c[k]);
	}
	free(enc->dec);
	free(enc);
}

int sf_encoder_init(struct sf_encoder **out, enum sf_code_method method, const float *cb,
		    size_t mmax)
{
	struct sf_encoder *enc = calloc(1, sizeof(*enc));
	*out = NULL;
	if (!enc)
		return -ENOMEM;
	enc->method = method;
	enc->cb = cb;
	enc->mmax = mmax = mmax ? mmax : 1;
	if (method == SF_CODES_TRELLIS && sf_trellis_work_init(&enc->tw, cb, mmax))
		goto fail;
	for (int k = 0; k < SF_TRELLIS_LOCKSTEP; k++)
		if (!(enc->x[k] = malloc(mmax * sizeof(float))) || !(enc->c[k] = malloc(mmax)))
			goto fail;
	if (!(enc->dec = malloc(mmax * sizeof(float))))
		goto fail;
	*out = enc;
	return 0;
fail:
	sf_encoder_free(enc);
	return -ENOMEM;
}

int sf_encoder_run(struct sf_encoder *enc, const float *const *w, int n, size_t m,
		   uint8_t *const *rec, double *sse, uint64_t first_col, struct sf_err *e)
{
	size_t sb = sf_codes_scale_bytes(enc->method);
	if (m > enc->mmax || n < 1 || n > SF_TRELLIS_LOCKSTEP)
		return sf_err_set(e, -EINVAL, "encoder: %d columns of %zu weights: at most %d of %zu",
				  n, m, SF_TRELLIS_LOCKSTEP, enc->mmax);
	for (int k = 0; k < n; k++) {
		double ss = 0.0;
		for (size_t t = 0; t < m; t++) {
			if (!isfinite(w[k][t]))
				return sf_err_set(e, SF_EFORMAT, "column %" PRIu64 ": weight %zu is %g",
						  first_col + (uint64_t)k, t, (double)w[k][t]);
			ss += (double)w[k][t] * w[k][t];
		}
		if (enc->method == SF_CODES_SCALAR) {
			float s0, s1;
			sf_twoscale_fit(w[k], m, f16_round, &s0, &s1, enc->c[k]);
			if (!isfinite(s0))
				return sf_err_set(e, SF_ELIMIT, "column %" PRIu64 ": scale beyond f16",
						  first_col + (uint64_t)k);
			put_le16(rec[k], sf_f32_to_f16(s0));
			put_le16(rec[k] + 2, sf_f32_to_f16(s1));
			continue;
		}
		/* the search runs on the column divided by the stored (f16)
		 * scale, so its error is exactly the decoder's */
		float s = f16_round((float)sqrt(m ? ss / (double)m : 0.0));
		if (!isfinite(s))
			return sf_err_set(e, SF_ELIMIT, "column %" PRIu64 ": RMS %g beyond f16",
					  first_col + (uint64_t)k, sqrt(ss / (double)m));
		for (size_t t = 0; t < m; t++)
			enc->x[k][t] = s > 0.0f ? w[k][t] / s : 0.0f;
		put_le16(rec[k], sf_f32_to_f16(s));
	}
	if (enc->method == SF_CODES_TRELLIS)
		sf_trellis_encode((const float *const *)enc->x, n, m, enc->c, NULL, enc->tw);
	for (int k = 0; k < n; k++) {
		sf_codes_pack(enc->c[k], m, rec[k] + sb);
		if (!sse)
			continue;
		sf_codes_decode(enc->method, enc->cb, rec[k], m, enc->dec);
		double err = 0.0;
		for (size_t t = 0; t < m; t++) {
			double d = (double)w[k][t] - enc->dec[t];
			err += d * d;
		}
		sse[k] = err;
	}
	return 0;
}

// ----------------------------------------------------------------------------
// a layer's group over the pool

int sf_codes_group_matrices(const struct sf_model *m, int layer, enum sf_group g,
			    const struct sf_weight *w[SF_GROUP_MAX_MATRICES],
			    const char *names[SF_GROUP_MAX_MATRICES])
{
	const struct sf_layer_weights *L = &m->layers[layer];
	switch (g) {
	case SF_GROUP_ATTN_IN:
		w[0] = &L->wq; w[1] = &L->wk; w[2] = &L->wv;
		names[0] = "q"; names[1] = "k"; names[2] = "v";
		return 3;
	case SF_GROUP_ATTN_OUT:
		w[0] = &L->wo; names[0] = "o";
		return 1;
	case SF_GROUP_FFN_IN:
		w[0] = &L->w_gate; w[1] = &L->w_up;
		names[0] = "gate"; names[1] = "up";
		return 2;
	default:
		w[0] = &L->w_down; names[0] = "down";
		return 1;
	}
}

static float weight_at(const struct sf_weight *w, uint64_t i)
{
	const uint8_t *p = (const uint8_t *)w->data;
	switch (w->dtype) {
	case SF_DTYPE_BF16: return sf_bf16_to_f32(get_le16(p + 2 * i));
	case SF_DTYPE_F16: return sf_f16_to_f32(get_le16(p + 2 * i));
	default: {
		uint32_t u = get_le32(p + 4 * i);
		float f;
		memcpy(&f, &u, sizeof(f));
		return f;
	}
	}
}

struct group_task {
	const struct sf_weight *w[SF_GROUP_MAX_MATRICES];
	size_t matoff[SF_GROUP_MAX_MATRICES];	/* record offset inside an entry */
	size_t items_before[SF_GROUP_MAX_MATRICES + 1];	/* prefix sums of batches */
	const char *names[SF_GROUP_MAX_MATRICES];
	int nmat;
	size_t entry_bytes, cols;
	uint8_t *out;
	struct sf_encoder *const *enc;
	double *item_sse;	/* (items, SF_TRELLIS_LOCKSTEP) */
	float **colbuf;		/* (nth, SF_TRELLIS_LOCKSTEP * max rows) */
	atomic_size_t next;
	atomic_int failed;
	int *ret;		/* (nth) */
	struct sf_err *err;	/* (nth) */
};

static void group_worker(void *arg, int ith, int nth)
{
	struct group_task *T = arg;
	size_t items = T->items_before[T->nmat];
	(void)nth;
	for (;;) {
		if (atomic_load(&T->failed))
			return;
		size_t it = atomic_fetch_add(&T->next, 1);
		if (it >= items)
			return;
		int i = 0;
		while (it >= T->items_before[i + 1])
			i++;
		const struct sf_weight *w = T->w[i];
		size_t rows = (size_t)w->rows;
		size_t j0 = (it - T->items_before[i]) * SF_TRELLIS_LOCKSTEP;
		int n = (int)(T->cols - j0 < SF_TRELLIS_LOCKSTEP ? T->cols - j0 : SF_TRELLIS_LOCKSTEP);
		const float *cols[SF_TRELLIS_LOCKSTEP];
		uint8_t *rec[SF_TRELLIS_LOCKSTEP];
		for (int k = 0; k < n; k++) {
			float *c = T->colbuf[ith] + (size_t)k * rows;
			for (size_t r = 0; r < rows; r++)
				c[r] = weight_at(w, (uint64_t)r * T->cols + j0 + (size_t)k);
			cols[k] = c;
			rec[k] = T->out + (j0 + (size_t)k) * T->entry_bytes + T->matoff[i];
		}
		struct sf_err ce;
		int ret = sf_encoder_run(T->enc[ith], cols, n, rows, rec,
					 T->item_sse + it * SF_TRELLIS_LOCKSTEP, j0, &ce);
		if (ret) {
			T->ret[ith] = sf_err_set(&T->err[ith], ret, "%s %s", T->names[i], ce.msg);
			atomic_store(&T->failed, 1);
			return;
		}
	}
}

int sf_codes_encode_group(const struct sf_model *m, int layer, enum sf_group g,
			  struct sf_encoder *const *enc, struct sf_pool *pool, uint8_t *out,
			  struct sf_codes_stats *st, struct sf_err *e)
{
	struct group_task T = { .out = out, .enc = enc };
	int nth = pool ? sf_pool_size(pool) : 1, ret = 0;
	size_t maxrows = 0;

	T.nmat = sf_codes_group_matrices(m, layer, g, T.w, T.names);
	T.cols = (size_t)T.w[0]->cols;
	for (int i = 0; i < T.nmat; i++) {
		T.matoff[i] = T.entry_bytes;
		T.entry_bytes += sf_codes_col_bytes(enc[0]->method, (size_t)T.w[i]->rows);
		T.items_before[i + 1] = T.items_before[i] +
					(T.cols + SF_TRELLIS_LOCKSTEP - 1) / SF_TRELLIS_LOCKSTEP;
		if (T.w[i]->rows > maxrows)
			maxrows = (size_t)T.w[i]->rows;
	}
	size_t items = T.items_before[T.nmat];
	T.item_sse = calloc(items * SF_TRELLIS_LOCKSTEP, sizeof(double));
	T.colbuf = calloc((size_t)nth, sizeof(float *));
	T.ret = calloc((size_t)nth, sizeof(int));
	T.err = calloc((size_t)nth, sizeof(struct sf_err));
	if (!T.item_sse || !T.colbuf || !T.ret || !T.err) {
		ret = sf_err_set(e, -ENOMEM, "layer %d %s: %s", layer, sf_group_name(g),
				 strerror(ENOMEM));
		goto out;
	}
	for (int t = 0; t < nth; t++)
		if (!(T.colbuf[t] = malloc(SF_TRELLIS_LOCKSTEP * maxrows * sizeof(float)))) {
			ret = sf_err_set(e, -ENOMEM, "layer %d %s: %s", layer, sf_group_name(g),
					 strerror(ENOMEM));
			goto out;
		}
	atomic_init(&T.next, 0);
	atomic_init(&T.failed, 0);
	if (pool)
		sf_pool_run(pool, group_worker, &T);
	else
		group_worker(&T, 0, 1);
	for (int t = 0; t < nth; t++)
		if (T.ret[t]) {
			ret = sf_err_set(e, T.ret[t], "layer %d %s: %s", layer, sf_group_name(g),
					 T.err[t].msg);
			goto out;
		}
	if (st) {
		*st = (struct sf_codes_stats){ 0 };
		for (int i = 0; i < T.nmat; i++) {
			/* summed in column order: the same figure at any -t */
			for (size_t it = T.items_before[i]; it < T.items_before[i + 1]; it++)
				for (int k = 0; k < SF_TRELLIS_LOCKSTEP; k++)
					st->sse[i] += T.item_sse[it * SF_TRELLIS_LOCKSTEP + (size_t)k];
			uint64_t nw = T.w[i]->rows * T.w[i]->cols;
			for (uint64_t q = 0; q < nw; q++) {
				double v = weight_at(T.w[i], q);
				st->ss[i] += v * v;
			}
		}
	}
out:
	if (T.colbuf)
		for (int t = 0; t < nth; t++)
			free(T.colbuf[t]);
	free(T.colbuf);
	free(T.item_sse);
	free(T.ret);
	free(T.err);
	return ret;
}

int sf_codes_encode_sections(const struct sf_model *m, const struct sf_sfq *d,
			     struct sf_pool *pool,
			     int (*sink)(void *arg, size_t i, const uint8_t *data,
					 const struct sf_codes_stats *st, struct sf_err *e),
			     void *arg, struct sf_err *e)
{
	int nth = pool ? sf_pool_size(pool) : 1, made = 0, ret = 0;
	struct sf_encoder **enc = calloc((size_t)nth, sizeof(*enc));
	uint64_t maxbytes = 0, maxrows = 0;
	uint8_t *buf = NULL;

	for (size_t i = 0; i < d->nsections; i++) {
		const struct sf_sfq_section *s = &d->sections[i];
		if (s->bytes > maxbytes)
			maxbytes = s->bytes;
		for (int k = 0; k < s->nmat; k++)
			if (s->mat[k].rows > maxrows)
				maxrows = s->mat[k].rows;
	}
	if (!enc || maxbytes > SIZE_MAX || !(buf = malloc(maxbytes ? (size_t)maxbytes : 1))) {
		ret = sf_err_set(e, -ENOMEM, "encoding: %" PRIu64 " bytes: %s", maxbytes,
				 strerror(ENOMEM));
		goto out;
	}
	for (; made < nth; made++)
		if ((ret = sf_encoder_init(&enc[made], d->method, d->codebook, (size_t)maxrows))) {
			ret = sf_err_set(e, ret, "encoder for columns of %" PRIu64 " weights (%" PRIu64
					 " bytes): %s", maxrows,
					 sf_encoder_bytes(d->method, (size_t)maxrows), strerror(-ret));
			goto out;
		}
	for (size_t i = 0; i < d->nsections; i++) {
		const struct sf_sfq_section *s = &d->sections[i];
		struct sf_codes_stats st;
		if ((ret = sf_codes_encode_group(m, s->layer, s->group, enc, pool, buf, &st, e)) ||
		    (ret = sink(arg, i, buf, &st, e)))
			goto out;
	}
out:
	for (int i = 0; i < made; i++)
		sf_encoder_free(enc[i]);
	free(enc);
	free(buf);
	return ret;
}

// ----------------------------------------------------------------------------
// decode-accumulate

/* The 16-bit trellis index of weight t: the window of codes t-7..t. */
static uint32_t window_at(const uint8_t *codes, size_t t)
{
	uint32_t idx = 0;
	for (size_t u = t >= 7 ? t - 7 : 0; u <= t; u++)
		idx = ((idx << 2) | code_at(codes, u)) & 0xffffu;
	return idx;
}

/* Weights [t0, t1) of one column, scalar: the _ref path, and the SIMD
 * paths' head and tail. */
static void accum_scalar_rows(float *y, const struct sf_codes_view *v, const uint8_t *rec,
			      float x, size_t t0, size_t t1)
{
	const uint8_t *codes = rec + sf_codes_scale_bytes(v->method);
	if (t0 >= t1)
		return;
	if (v->method == SF_CODES_TRELLIS) {
		float xs = x * sf_f16_to_f32(get_le16(rec));
		uint32_t idx = t0 ? window_at(codes, t0 - 1) : 0;
		for (size_t t = t0; t < t1; t++) {
			idx = ((idx << 2) | code_at(codes, t)) & 0xffffu;
			y[t] = fmaf(xs, v->codebook[idx], y[t]);
		}
	} else {
		float s0 = sf_f16_to_f32(get_le16(rec)), s1 = sf_f16_to_f32(get_le16(rec + 2));
		float lut[4];
		for (unsigned c = 0; c < 4; c++)
			lut[c] = sf_twoscale_level(c, s0, s1);
		for (size_t t = t0; t < t1; t++)
			y[t] = fmaf(x, lut[code_at(codes, t)], y[t]);
	}
}

void sf_codes_colaccum_ref(float *y, const struct sf_codes_view *v, size_t r0, size_t r1,
			   const uint32_t *idx, const float *xv, size_t n)
{
	for (size_t k = 0; k < n; k++)
		accum_scalar_rows(y, v, v->base + (size_t)idx[k] * v->stride, xv[k], r0, r1);
}

#if defined(__x86_64__)
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

/* Weights [t0, t1) in steps of 16, t0 a multiple of 16: the indices of
 * weights t..t+15 are 16-bit windows of the 24 codes t-8..t+15, cut by
 * two variable shifts of one 48-bit word; the codebook values come by one
 * gather. */
static T512 void accum_trellis_avx512(float *y, const struct sf_codes_view *v,
				      const uint8_t *rec, float x, size_t t0, size_t t1)
{
	const uint8_t *codes = rec + 2;
	const __m512i sh_lo = _mm512_setr_epi64(30, 28, 26, 24, 22, 20, 18, 16);
	const __m512i sh_hi = _mm512_setr_epi64(14, 12, 10, 8, 6, 4, 2, 0);
	const __m512i low16 = _mm512_set1_epi32(0xffff);
	__m512 xs = _mm512_set1_ps(x * sf_f16_to_f32(get_le16(rec)));
	for (size_t t = t0; t < t1; t += 16) {
		/* codes before the column are zeros: for t == 0 the two bytes
		 * ahead of the window are not read */
		uint64_t word = t ? (uint64_t)get_be32(codes + t / 4 - 2) << 16 |
					    (uint64_t)codes[t / 4 + 2] << 8 | codes[t / 4 + 3]
				  : get_be32(codes);
		__m512i wv = _mm512_set1_epi64((long long)word);
		__m256i lo = _mm512_cvtepi64_epi32(_mm512_srlv_epi64(wv, sh_lo));
		__m256i hi = _mm512_cvtepi64_epi32(_mm512_srlv_epi64(wv, sh_hi));
		__m512i ix = _mm512_and_si512(
			_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), low16);
		__m512 cb = _mm512_i32gather_ps(ix, v->codebook, 4);
		_mm512_storeu_ps(y + t, _mm512_fmadd_ps(xs, cb, _mm512_loadu_ps(y + t)));
	}
}

/* Weights [t0, t1) in steps of 16, t0 a multiple of 16: 16 codes are one
 * 32-bit word; the level comes from a 4-entry table held in a register. */
static T512 void accum_scalar_avx512(float *y, const struct sf_codes_view *v,
				     const uint8_t *rec, float x, size_t t0, size_t t1)
{
	(void)v;	/* the trellis kernel's signature */
	const uint8_t *codes = rec + 4;
	const __m512i sh = _mm512_setr_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6,
					     4, 2, 0);
	const __m512i three = _mm512_set1_epi32(3);
	float s0 = sf_f16_to_f32(get_le16(rec)), s1 = sf_f16_to_f32(get_le16(rec + 2));
	__m512 lut = _mm512_setr_ps(sf_twoscale_level(0, s0, s1), sf_twoscale_level(1, s0, s1),
				    sf_twoscale_level(2, s0, s1), sf_twoscale_level(3, s0, s1),
				    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
	__m512 xv = _mm512_set1_ps(x);
	for (size_t t = t0; t < t1; t += 16) {
		__m512i cw = _mm512_set1_epi32((int)get_be32(codes + t / 4));
		__m512i c = _mm512_and_si512(_mm512_srlv_epi32(cw, sh), three);
		__m512 l = _mm512_permutexvar_ps(c, lut);
		_mm512_storeu_ps(y + t, _mm512_fmadd_ps(xv, l, _mm512_loadu_ps(y + t)));
	}
}

#define T256 __attribute__((target("avx2,fma,f16c")))

/* Weights [t0, t1) in steps of 8, t0 a multiple of 8: the indices of
 * weights t..t+7 are 16-bit windows of the 16 codes t-8..t+7, one 32-bit
 * word cut by one variable shift; the codebook values come by one gather. */
static T256 void accum_trellis_avx2(float *y, const struct sf_codes_view *v,
				    const uint8_t *rec, float x, size_t t0, size_t t1)
{
	const uint8_t *codes = rec + 2;
	const __m256i sh = _mm256_setr_epi32(14, 12, 10, 8, 6, 4, 2, 0);
	const __m256i low16 = _mm256_set1_epi32(0xffff);
	__m256 xs = _mm256_set1_ps(x * sf_f16_to_f32(get_le16(rec)));
	for (size_t t = t0; t < t1; t += 8) {
		/* codes before the column are zeros: for t == 0 the two bytes
		 * ahead of the window are not read */
		uint32_t word = t ? get_be32(codes + t / 4 - 2) : (uint32_t)codes[0] << 8 | codes[1];
		__m256i ix = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)word), sh),
					      low16);
		__m256 cb = _mm256_i32gather_ps(v->codebook, ix, 4);
		_mm256_storeu_ps(y + t, _mm256_fmadd_ps(xs, cb, _mm256_loadu_ps(y + t)));
	}
}

/* Weights [t0, t1) in steps of 8, t0 a multiple of 8: 8 codes are one
 * 16-bit word; the level comes from a 4-entry table held in both halves
 * of a register. */
static T256 void accum_scalar_avx2(float *y, const struct sf_codes_view *v,
				   const uint8_t *rec, float x, size_t t0, size_t t1)
{
	(void)v;	/* the trellis kernel's signature */
	const uint8_t *codes = rec + 4;
	const __m256i sh = _mm256_setr_epi32(14, 12, 10, 8, 6, 4, 2, 0);
	const __m256i three = _mm256_set1_epi32(3);
	float s0 = sf_f16_to_f32(get_le16(rec)), s1 = sf_f16_to_f32(get_le16(rec + 2));
	__m256 lut = _mm256_setr_ps(sf_twoscale_level(0, s0, s1), sf_twoscale_level(1, s0, s1),
				    sf_twoscale_level(2, s0, s1), sf_twoscale_level(3, s0, s1),
				    sf_twoscale_level(0, s0, s1), sf_twoscale_level(1, s0, s1),
				    sf_twoscale_level(2, s0, s1), sf_twoscale_level(3, s0, s1));
	__m256 xv = _mm256_set1_ps(x);
	for (size_t t = t0; t < t1; t += 8) {
		int word = (int)((uint32_t)codes[t / 4] << 8 | codes[t / 4 + 1]);
		__m256i c = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(word), sh), three);
		__m256 l = _mm256_permutevar_ps(lut, c);
		_mm256_storeu_ps(y + t, _mm256_fmadd_ps(xv, l, _mm256_loadu_ps(y + t)));
	}
}

typedef void accum_fn(float *, const struct sf_codes_view *, const uint8_t *, float, size_t,
		      size_t);
#endif

void sf_codes_colaccum(float *y, const struct sf_codes_view *v, size_t r0, size_t r1,
		       const uint32_t *idx, const float *xv, size_t n)
{
#if defined(__x86_64__)
	/* one dispatch decision for every kernel: the level engine/cpu.h sets */
	const char *isa = sf_isa_name(sf_cpu_isa());
	int trellis = v->method == SF_CODES_TRELLIS;
	accum_fn *fn = NULL;
	size_t w = 0;	/* weights a SIMD step takes */
	if (strcmp(isa, "avx512") == 0) {
		fn = trellis ? accum_trellis_avx512 : accum_scalar_avx512;
		w = 16;
	} else if (strcmp(isa, "avx2") == 0) {
		fn = trellis ? accum_trellis_avx2 : accum_scalar_avx2;
		w = 8;
	}
	if (fn) {
		/* a scalar head up to a whole step, whole steps, a scalar tail */
		size_t a = (r0 + w - 1) / w * w;
		a = a < r1 ? a : r1;
		size_t b = a + (r1 - a) / w * w;
		for (size_t k = 0; k < n; k++) {
			const uint8_t *rec = v->base + (size_t)idx[k] * v->stride;
			accum_scalar_rows(y, v, rec, xv[k], r0, a);
			fn(y, v, rec, xv[k], a, b);
			accum_scalar_rows(y, v, rec, xv[k], b, r1);
		}
		return;
	}
#endif
	sf_codes_colaccum_ref(y, v, r0, r1, idx, xv, n);
}

// ----------------------------------------------------------------------------
// .sfq: shapes and sections

static const char *const mat_names[SF_NGROUPS][SF_GROUP_MAX_MATRICES] = {
	{ "q", "k", "v" }, { "o" }, { "gate", "up" }, { "down" },
};

void sf_sfq_shape_of(struct sf_sfq_shape *s, const struct sf_config *c)
{
	*s = (struct sf_sfq_shape){ c->dim, c->hidden_dim, c->n_layers, c->n_heads,
				    c->n_kv_heads, c->head_dim };
}

void sf_sfq_section_init(struct sf_sfq_section *sec, enum sf_code_method method,
			 const struct sf_sfq_shape *sh, int layer, enum sf_group g)
{
	uint64_t qd = (uint64_t)sh->n_heads * (uint64_t)sh->head_dim;
	uint64_t kvd = (uint64_t)sh->n_kv_heads * (uint64_t)sh->head_dim;
	uint64_t rows[SF_NGROUPS][SF_GROUP_MAX_MATRICES] = {
		{ qd, kvd, kvd }, { (uint64_t)sh->dim }, { (uint64_t)sh->hidden_dim,
		(uint64_t)sh->hidden_dim }, { (uint64_t)sh->dim },
	};
	static const int nmat[SF_NGROUPS] = { 3, 1, 2, 1 };
	uint64_t entries[SF_NGROUPS] = { (uint64_t)sh->dim, qd, (uint64_t)sh->dim,
					 (uint64_t)sh->hidden_dim };

	*sec = (struct sf_sfq_section){ .layer = layer, .group = g, .entries = entries[g],
					.nmat = nmat[g] };
	for (int i = 0; i < sec->nmat; i++) {
		snprintf(sec->mat[i].name, sizeof(sec->mat[i].name), "%s", mat_names[g][i]);
		sec->mat[i].rows = rows[g][i];
		sec->mat[i].col_bytes = sf_codes_col_bytes(method, (size_t)rows[g][i]);
		sec->entry_bytes += sec->mat[i].col_bytes;
	}
	sec->bytes = sec->entries * sec->entry_bytes;	/* shapes are bounded: no overflow */
}

struct sf_codes_view sf_sfq_view(const struct sf_sfq *q, const struct sf_sfq_section *sec, int i)
{
	size_t off = 0;
	for (int k = 0; k < i; k++)
		off += (size_t)sec->mat[k].col_bytes;
	return (struct sf_codes_view){ q->method, q->codebook, (size_t)sec->mat[i].rows,
				       sec->data + off, (size_t)sec->entry_bytes };
}

const struct sf_sfq_section *sf_sfq_find(const struct sf_sfq *q, int layer, enum sf_group g)
{
	for (size_t i = 0; i < q->nsections; i++)
		if (q->sections[i].layer == layer && q->sections[i].group == g)
			return &q->sections[i];
	return NULL;
}

int sf_sfq_check_model(const struct sf_sfq *q, const char *path, const struct sf_model *m,
		       struct sf_err *e)
{
	if (strcmp(q->fingerprint, m->fingerprint) != 0)
		return sf_err_set(e, SF_EMISMATCH,
				  "%s: codes of another model: fingerprint %s, the model's is %s",
				  path, q->fingerprint, m->fingerprint);
	return 0;
}

uint64_t sf_sfq_fnv64(const void *p, uint64_t n)
{
	const uint8_t *b = p;
	uint64_t h = 0xcbf29ce484222325ull;
	for (uint64_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

static uint64_t align_up(uint64_t v)
{
	return (v + SF_SFQ_ALIGN - 1) / SF_SFQ_ALIGN * SF_SFQ_ALIGN;
}

#define PREFIX_BYTES 24	/* magic, version, flags, header length */
#define CODEBOOK_BYTES ((uint64_t)SF_TRELLIS_CODEBOOK * 4)

static int cmp_section(const struct sf_sfq_section *a, const struct sf_sfq_section *b)
{
	if (a->layer != b->layer)
		return a->layer < b->layer ? -1 : 1;
	return a->group < b->group ? -1 : a->group > b->group;
}

// ----------------------------------------------------------------------------
// .sfq reader

void sf_sfq_close(struct sf_sfq *q)
{
	if (!q)
		return;
	json_decref(q->producer);
	free(q->codebook);
	free(q->sections);
	if (q->map) {
		sf_guard_unmap(q->map);
		munmap(q->map, q->map_size);
	}
	free(q->map_path);
	free(q->buf);
	memset(q, 0, sizeof(*q));
}

/* A pipe is read to its end; a regular file is mapped, and the mapping
 * registered with the SIGBUS guard under the path. */
static int load_file(struct sf_sfq *q, const char *path, const unsigned char **data,
		     uint64_t *size, struct sf_err *e)
{
	int fd = strcmp(path, "-") == 0 ? 0 : open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	int ret = 0;
	if (fd < 0)
		return sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0) {
		ret = sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (S_ISREG(st.st_mode) && st.st_size > 0) {
		q->map_size = (size_t)st.st_size;
		q->map = mmap(NULL, q->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (q->map == MAP_FAILED) {
			q->map = NULL;
			ret = sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
			goto out;
		}
		if (!(q->map_path = strdup(path))) {
			ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
			goto out;
		}
		if ((ret = sf_guard_map(q->map, q->map_size, q->map_path, e)))
			goto out;
		*data = q->map;
		*size = q->map_size;
		goto out;
	}
	size_t cap = 1 << 16, n = 0;
	for (;;) {
		if (n == cap || !q->buf) {
			unsigned char *nb = realloc(q->buf, cap *= 2);
			if (!nb) {
				ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
				goto out;
			}
			q->buf = nb;
		}
		ssize_t got = read(fd, q->buf + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			ret = sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
			goto out;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	*data = q->buf;
	*size = n;
out:
	if (fd > 0)
		close(fd);
	return ret;
}

static int get_int(const char *path, json_t *o, const char *key, int64_t min, int64_t max,
		   int64_t *out, struct sf_err *e)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_integer(v))
		return sf_err_set(e, SF_EFORMAT, "%s: header: \"%s\" missing or not an integer",
				  path, key);
	*out = json_integer_value(v);
	if (*out < min || *out > max)
		return sf_err_set(e, SF_EFORMAT, "%s: header: \"%s\" is %" PRId64
				  ": expected %" PRId64 "..%" PRId64, path, key, *out, min, max);
	return 0;
}

#define MAX_DIM ((int64_t)1 << 20)

static int parse_shape(const char *path, json_t *o, struct sf_sfq_shape *s, struct sf_err *e)
{
	const char *keys[] = { "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
			       "head_dim" };
	int *fields[] = { &s->dim, &s->hidden_dim, &s->n_layers, &s->n_heads, &s->n_kv_heads,
			  &s->head_dim };
	if (!json_is_object(o))
		return sf_err_set(e, SF_EFORMAT, "%s: header: \"model\" missing or not an object",
				  path);
	for (int i = 0; i < 6; i++) {
		int64_t v;
		int ret = get_int(path, o, keys[i], 1, i == 2 ? 65536 : MAX_DIM, &v, e);
		if (ret)
			return ret;
		*fields[i] = (int)v;
	}
	if (s->n_heads * (int64_t)s->head_dim > MAX_DIM)
		return sf_err_set(e, SF_EFORMAT, "%s: header: n_heads * head_dim %" PRId64
				  " beyond %" PRId64, path, s->n_heads * (int64_t)s->head_dim,
				  MAX_DIM);
	return 0;
}

static int parse_section(const char *path, const struct sf_sfq *q, json_t *o, size_t i,
			 struct sf_sfq_section *sec, struct sf_err *e)
{
	int64_t layer, v;
	enum sf_group g;
	int ret;
	json_t *gn = json_object_get(o, "group"), *mats = json_object_get(o, "matrices");

	if (!json_is_object(o))
		return sf_err_set(e, SF_EFORMAT, "%s: header: section %zu is not an object", path, i);
	if ((ret = get_int(path, o, "layer", 0, q->shape.n_layers - 1, &layer, e)))
		return ret;
	if (!json_is_string(gn) || sf_group_parse(json_string_value(gn), &g))
		return sf_err_set(e, SF_EFORMAT, "%s: header: section %zu: unknown group", path, i);
	sf_sfq_section_init(sec, q->method, &q->shape, (int)layer, g);
	if ((ret = get_int(path, o, "entries", 0, INT64_MAX, &v, e)))
		return ret;
	if ((uint64_t)v != sec->entries)
		return sf_err_set(e, SF_EFORMAT, "%s: layer %" PRId64 " %s: %" PRId64
				  " entries, the model shape has %" PRIu64, path, layer,
				  sf_group_name(g), v, sec->entries);
	if (!json_is_array(mats) || json_array_size(mats) != (size_t)sec->nmat)
		return sf_err_set(e, SF_EFORMAT, "%s: layer %" PRId64 " %s: expected %d matrices",
				  path, layer, sf_group_name(g), sec->nmat);
	for (int k = 0; k < sec->nmat; k++) {
		json_t *mo = json_array_get(mats, (size_t)k);
		json_t *nm = json_object_get(mo, "name");
		int64_t rows, cb;
		if (!json_is_string(nm) || strcmp(json_string_value(nm), sec->mat[k].name) != 0)
			return sf_err_set(e, SF_EFORMAT, "%s: layer %" PRId64 " %s: matrix %d is "
					  "not %s", path, layer, sf_group_name(g), k, sec->mat[k].name);
		if ((ret = get_int(path, mo, "rows", 0, INT64_MAX, &rows, e)) ||
		    (ret = get_int(path, mo, "col_bytes", 0, INT64_MAX, &cb, e)))
			return ret;
		if ((uint64_t)rows != sec->mat[k].rows || (uint64_t)cb != sec->mat[k].col_bytes)
			return sf_err_set(e, SF_EFORMAT, "%s: layer %" PRId64 " %s %s: %" PRId64
					  " rows in %" PRId64 " bytes, expected %" PRIu64 " in %"
					  PRIu64, path, layer, sf_group_name(g), sec->mat[k].name,
					  rows, cb, sec->mat[k].rows, sec->mat[k].col_bytes);
	}
	if ((ret = get_int(path, o, "entry_bytes", 0, INT64_MAX, &v, e)))
		return ret;
	if ((uint64_t)v != sec->entry_bytes)
		return sf_err_set(e, SF_EFORMAT, "%s: layer %" PRId64 " %s: entry_bytes %" PRId64
				  ", expected %" PRIu64, path, layer, sf_group_name(g), v,
				  sec->entry_bytes);
	if ((ret = get_int(path, o, "bytes", 0, INT64_MAX, &v, e)))
		return ret;
	if ((uint64_t)v != sec->bytes)
		return sf_err_set(e, SF_EFORMAT, "%s: layer %" PRId64 " %s: bytes %" PRId64
				  ", expected %" PRIu64, path, layer, sf_group_name(g), v, sec->bytes);
	if ((ret = get_int(path, o, "offset", 0, INT64_MAX, &v, e)))
		return ret;
	sec->offset = (uint64_t)v;
	return 0;
}

int sf_sfq_open(struct sf_sfq *q, const char *path, struct sf_err *e)
{
	const unsigned char *d = NULL;
	uint64_t size = 0;
	json_t *h = NULL;
	json_error_t je;
	int64_t v;
	int ret;

	memset(q, 0, sizeof(*q));
	if ((ret = load_file(q, path, &d, &size, e)))
		goto out;
	if (size < PREFIX_BYTES || memcmp(d, SF_SFQ_MAGIC, 8) != 0) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: not a .sfq file (bad magic)", path);
		goto out;
	}
	uint32_t version = get_le32(d + 8), flags = get_le32(d + 12);
	uint64_t hlen = get_le64(d + 16);
	if (version != SF_SFQ_VERSION) {
		ret = sf_err_set(e, SF_EUNSUPPORTED, "%s: version %u, expected %d", path, version,
				 SF_SFQ_VERSION);
		goto out;
	}
	if (flags != 0) {
		ret = sf_err_set(e, SF_EUNSUPPORTED, "%s: flags 0x%x, expected 0", path, flags);
		goto out;
	}
	if (hlen > SF_SFQ_MAX_HEADER || hlen > size - PREFIX_BYTES) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header of %" PRIu64 " bytes in a file of %"
				 PRIu64, path, hlen, size);
		goto out;
	}
	if (!(h = json_loadb((const char *)d + PREFIX_BYTES, (size_t)hlen, JSON_REJECT_DUPLICATES,
			     &je)) || !json_is_object(h)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: %s", path,
				 h ? "not a JSON object" : je.text);
		goto out;
	}
	uint64_t data_start = align_up(PREFIX_BYTES + hlen);
	uint64_t data_size = size > data_start ? size - data_start : 0;

	json_t *fp = json_object_get(h, "fingerprint"), *me = json_object_get(h, "method");
	if (!json_is_string(fp) || strlen(json_string_value(fp)) != SF_FINGERPRINT_LEN ||
	    strspn(json_string_value(fp), "0123456789abcdef") != SF_FINGERPRINT_LEN) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: \"fingerprint\" is not %d hex digits",
				 path, SF_FINGERPRINT_LEN);
		goto out;
	}
	memcpy(q->fingerprint, json_string_value(fp), SF_FINGERPRINT_LEN + 1);
	if (!json_is_string(me) || sf_codes_method_parse(json_string_value(me), &q->method)) {
		ret = sf_err_set(e, SF_EUNSUPPORTED, "%s: header: unknown method %s", path,
				 json_is_string(me) ? json_string_value(me) : "(missing)");
		goto out;
	}
	if ((ret = get_int(path, h, "seed", 0, INT64_MAX, &v, e)) ||
	    (ret = parse_shape(path, json_object_get(h, "model"), &q->shape, e)))
		goto out;
	q->seed = (uint64_t)v;
	q->producer = json_incref(json_object_get(h, "producer"));

	json_t *cbo = json_object_get(h, "codebook");
	if (q->method == SF_CODES_TRELLIS) {
		int64_t off, bytes;
		if ((ret = get_int(path, cbo, "offset", 0, INT64_MAX, &off, e)) ||
		    (ret = get_int(path, cbo, "bytes", 0, INT64_MAX, &bytes, e)))
			goto out;
		if ((uint64_t)bytes != CODEBOOK_BYTES || off % SF_SFQ_ALIGN ||
		    (uint64_t)off > data_size || CODEBOOK_BYTES > data_size - (uint64_t)off) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: codebook of %" PRId64 " bytes at %" PRId64
					 ": expected %" PRIu64 " aligned bytes inside the %" PRIu64
					 " data bytes", path, bytes, off, CODEBOOK_BYTES, data_size);
			goto out;
		}
		if (posix_memalign((void **)&q->codebook, 64, CODEBOOK_BYTES)) {
			q->codebook = NULL;
			ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
			goto out;
		}
		const unsigned char *p = d + data_start + off;
		for (size_t i = 0; i < SF_TRELLIS_CODEBOOK; i++) {
			uint32_t u = get_le32(p + 4 * i);
			memcpy(&q->codebook[i], &u, 4);
			if (!isfinite(q->codebook[i])) {
				ret = sf_err_set(e, SF_EFORMAT, "%s: codebook entry %zu is not finite",
						 path, i);
				goto out;
			}
		}
	} else if (cbo && !json_is_null(cbo)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: a codebook with scalar codes", path);
		goto out;
	}

	json_t *secs = json_object_get(h, "sections");
	if (!json_is_array(secs) ||
	    json_array_size(secs) > (size_t)q->shape.n_layers * SF_NGROUPS) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: \"sections\" missing or longer than "
				 "layers * groups", path);
		goto out;
	}
	q->nsections = json_array_size(secs);
	if (q->nsections && !(q->sections = calloc(q->nsections, sizeof(*q->sections)))) {
		ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
		goto out;
	}
	uint64_t end = q->codebook ? CODEBOOK_BYTES : 0;
	for (size_t i = 0; i < q->nsections; i++) {
		struct sf_sfq_section *s = &q->sections[i];
		if ((ret = parse_section(path, q, json_array_get(secs, i), i, s, e)))
			goto out;
		if (i && cmp_section(&q->sections[i - 1], s) >= 0) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: layer %d %s: sections out of order or "
					 "repeated", path, s->layer, sf_group_name(s->group));
			goto out;
		}
		if (s->offset % SF_SFQ_ALIGN || s->offset < end || s->offset > data_size ||
		    s->bytes > data_size - s->offset) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: layer %d %s: %" PRIu64 " bytes at %"
					 PRIu64 ": not aligned, overlapping, or beyond the %" PRIu64
					 " data bytes (truncated?)", path, s->layer,
					 sf_group_name(s->group), s->bytes, s->offset, data_size);
			goto out;
		}
		s->data = d + data_start + s->offset;
		end = s->offset + s->bytes;
	}
out:
	json_decref(h);
	if (ret)
		sf_sfq_close(q);
	return ret;
}

// ----------------------------------------------------------------------------
// .sfq writer

struct sf_sfq_writer {
	FILE *f;
	char *path, *tmp;	/* tmp NULL: standard output */
	size_t nsections, next;
	uint64_t *offsets, *bytes;
	uint64_t pos;		/* bytes of the data region written */
	int failed;
};

static json_t *header_json(const struct sf_sfq *d, const uint64_t *offsets)
{
	json_t *h = json_object(), *secs = json_array(), *cb = json_null();
	if (d->method == SF_CODES_TRELLIS)
		cb = json_pack("{s:I,s:I,s:s,s:I}", "offset", (json_int_t)0, "bytes",
			       (json_int_t)CODEBOOK_BYTES, "dtype", "F32", "entries",
			       (json_int_t)SF_TRELLIS_CODEBOOK);
	json_object_set_new(h, "format", json_string("sparseflash codes"));
	json_object_set_new(h, "fingerprint", json_string(d->fingerprint));
	json_object_set_new(h, "method", json_string(sf_codes_method_name(d->method)));
	json_object_set_new(h, "seed", json_integer((json_int_t)d->seed));
	json_object_set_new(h, "scale_dtype", json_string("F16"));
	json_object_set_new(h, "model",
			    json_pack("{s:i,s:i,s:i,s:i,s:i,s:i}", "dim", d->shape.dim,
				      "hidden_dim", d->shape.hidden_dim, "n_layers",
				      d->shape.n_layers, "n_heads", d->shape.n_heads, "n_kv_heads",
				      d->shape.n_kv_heads, "head_dim", d->shape.head_dim));
	json_object_set(h, "producer", d->producer ? d->producer : json_null());
	json_object_set_new(h, "codebook", cb);
	for (size_t i = 0; i < d->nsections; i++) {
		const struct sf_sfq_section *s = &d->sections[i];
		json_t *mats = json_array();
		for (int k = 0; k < s->nmat; k++)
			json_array_append_new(mats, json_pack("{s:s,s:I,s:I}", "name", s->mat[k].name,
							      "rows", (json_int_t)s->mat[k].rows,
							      "col_bytes",
							      (json_int_t)s->mat[k].col_bytes));
		json_array_append_new(secs, json_pack("{s:i,s:s,s:I,s:o,s:I,s:I,s:I}", "layer",
						      s->layer, "group", sf_group_name(s->group),
						      "entries", (json_int_t)s->entries, "matrices",
						      mats, "entry_bytes", (json_int_t)s->entry_bytes,
						      "offset", (json_int_t)offsets[i], "bytes",
						      (json_int_t)s->bytes));
	}
	json_object_set_new(h, "sections", secs);
	return h;
}

static int wr(struct sf_sfq_writer *w, const void *p, size_t n, struct sf_err *e)
{
	if (n && fwrite(p, 1, n, w->f) != n) {
		w->failed = 1;
		return sf_err_set(e, -errno ? -errno : -EIO, "%s: %s", w->path,
				  strerror(errno ? errno : EIO));
	}
	return 0;
}

static int pad_to(struct sf_sfq_writer *w, uint64_t target, struct sf_err *e)
{
	static const unsigned char zeros[SF_SFQ_ALIGN];
	while (w->pos < target) {
		size_t n = target - w->pos < sizeof(zeros) ? (size_t)(target - w->pos) : sizeof(zeros);
		int ret = wr(w, zeros, n, e);
		if (ret)
			return ret;
		w->pos += n;
	}
	return 0;
}

void sf_sfq_writer_abort(struct sf_sfq_writer *w)
{
	if (!w)
		return;
	if (w->f && w->f != stdout)
		fclose(w->f);
	if (w->tmp) {
		unlink(w->tmp);
		sf_guard_untmp(w->tmp);
	}
	free(w->tmp);
	free(w->path);
	free(w->offsets);
	free(w->bytes);
	free(w);
}

int sf_sfq_writer_open(struct sf_sfq_writer **out, const char *path, const struct sf_sfq *d,
		       struct sf_err *e)
{
	struct sf_sfq_writer *w = calloc(1, sizeof(*w));
	json_t *h = NULL;
	char *text = NULL;
	int ret = 0;

	*out = NULL;
	if (!w || !(w->path = strdup(path)) ||
	    !(w->offsets = calloc(d->nsections + 1, sizeof(uint64_t))) ||
	    !(w->bytes = calloc(d->nsections + 1, sizeof(uint64_t)))) {
		ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
		goto out;
	}
	w->nsections = d->nsections;
	uint64_t pos = d->method == SF_CODES_TRELLIS ? CODEBOOK_BYTES : 0;
	for (size_t i = 0; i < d->nsections; i++) {
		w->offsets[i] = pos = align_up(pos);
		w->bytes[i] = d->sections[i].bytes;
		pos += w->bytes[i];
	}
	if (strcmp(path, "-") == 0) {
		if (isatty(STDOUT_FILENO)) {
			ret = sf_err_set(e, -EINVAL, "refusing to write binary codes to a terminal");
			goto out;
		}
		w->f = stdout;
	} else {
		size_t n = strlen(path) + sizeof(".tmp.XXXXXX");
		int fd;
		if (!(w->tmp = malloc(n))) {
			ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
			goto out;
		}
		snprintf(w->tmp, n, "%s.tmp.XXXXXX", path);
		if ((fd = mkstemp(w->tmp)) < 0) {
			ret = sf_err_set(e, -errno, "%s: %s", w->tmp, strerror(errno));
			free(w->tmp);
			w->tmp = NULL;
			goto out;
		}
		if ((ret = sf_guard_tmp(w->tmp, e))) {
			close(fd);
			unlink(w->tmp);
			free(w->tmp);
			w->tmp = NULL;
			goto out;
		}
		fchmod(fd, 0644);
		if (!(w->f = fdopen(fd, "wb"))) {
			ret = sf_err_set(e, -errno, "%s: %s", w->tmp, strerror(errno));
			close(fd);
			goto out;
		}
	}
	h = header_json(d, w->offsets);
	if (!h || !(text = json_dumps(h, JSON_COMPACT))) {
		ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
		goto out;
	}
	uint64_t hlen = strlen(text);
	uint8_t prefix[PREFIX_BYTES];
	memcpy(prefix, SF_SFQ_MAGIC, 8);
	put_le32(prefix + 8, SF_SFQ_VERSION);
	put_le32(prefix + 12, 0);
	put_le64(prefix + 16, hlen);
	w->pos = 0;
	if ((ret = wr(w, prefix, sizeof(prefix), e)) || (ret = wr(w, text, hlen, e)))
		goto out;
	/* pad the header to the data region, counting from the file start */
	w->pos = PREFIX_BYTES + hlen;
	if ((ret = pad_to(w, align_up(w->pos), e)))
		goto out;
	w->pos = 0;
	if (d->method == SF_CODES_TRELLIS) {
		uint8_t buf[4096];
		for (size_t i = 0; i < SF_TRELLIS_CODEBOOK; i += 1024) {
			for (size_t k = 0; k < 1024; k++) {
				uint32_t u;
				memcpy(&u, &d->codebook[i + k], 4);
				put_le32(buf + 4 * k, u);
			}
			if ((ret = wr(w, buf, sizeof(buf), e)))
				goto out;
		}
		w->pos = CODEBOOK_BYTES;
	}
out:
	free(text);
	json_decref(h);
	if (ret)
		sf_sfq_writer_abort(w);
	else
		*out = w;
	return ret;
}

int sf_sfq_writer_section(struct sf_sfq_writer *w, const void *data, uint64_t len,
			  struct sf_err *e)
{
	int ret;
	if (w->next >= w->nsections || len != w->bytes[w->next])
		return sf_err_set(e, -EINVAL, "%s: section %zu of %" PRIu64 " bytes not expected",
				  w->path, w->next, len);
	if ((ret = pad_to(w, w->offsets[w->next], e)) || (ret = wr(w, data, (size_t)len, e)))
		return ret;
	w->pos += len;
	w->next++;
	return 0;
}

int sf_sfq_writer_close(struct sf_sfq_writer *w, struct sf_err *e)
{
	int ret = 0;
	if (w->next != w->nsections) {
		ret = sf_err_set(e, -EINVAL, "%s: %zu of %zu sections written", w->path, w->next,
				 w->nsections);
		goto out;
	}
	if (fflush(w->f) != 0 || ferror(w->f)) {
		ret = sf_err_set(e, -errno ? -errno : -EIO, "%s: %s", w->path,
				 strerror(errno ? errno : EIO));
		goto out;
	}
	if (w->tmp) {
		FILE *f = w->f;
		w->f = NULL;
		if (fsync(fileno(f)) < 0 && errno != EINVAL) {
			ret = sf_err_set(e, -errno, "%s: %s", w->tmp, strerror(errno));
			fclose(f);
			goto out;
		}
		if (fclose(f) != 0) {
			ret = sf_err_set(e, -errno, "%s: %s", w->tmp, strerror(errno));
			goto out;
		}
		if (rename(w->tmp, w->path) < 0) {
			ret = sf_err_set(e, -errno, "%s: %s", w->path, strerror(errno));
			goto out;
		}
		sf_guard_untmp(w->tmp);
		free(w->tmp);
		w->tmp = NULL;
	}
out:
	sf_sfq_writer_abort(w);
	return ret;
}

// ----------------------------------------------------------------------------
// merge

struct merge_src {
	const struct sf_sfq_section *sec;
	const void *data;
};

static int cmp_src(const void *a, const void *b)
{
	return cmp_section(((const struct merge_src *)a)->sec, ((const struct merge_src *)b)->sec);
}

int sf_sfq_merge(const char *path, const char *const *inputs, size_t n, json_t *producer,
		 struct sf_err *e)
{
	struct sf_sfq *in = calloc(n, sizeof(*in));
	struct merge_src *src = NULL;
	struct sf_sfq out = { 0 };
	struct sf_sfq_writer *w = NULL;
	size_t total = 0, opened = 0;
	int ret = 0;

	if (!in) {
		ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
		goto out;
	}
	for (; opened < n; opened++) {
		struct sf_sfq *a = &in[opened], *f = &in[0];
		if ((ret = sf_sfq_open(a, inputs[opened], e)))
			goto out;
		if (opened == 0)
			goto counted;
		if (strcmp(a->fingerprint, f->fingerprint) != 0) {
			ret = sf_err_set(e, SF_EMISMATCH, "%s: codes of another model: fingerprint %s,"
					 " %s has %s", inputs[opened], a->fingerprint, inputs[0],
					 f->fingerprint);
			goto out;
		}
		if (a->method != f->method || a->seed != f->seed ||
		    (a->codebook && memcmp(a->codebook, f->codebook, CODEBOOK_BYTES) != 0)) {
			ret = sf_err_set(e, SF_EMISMATCH, "%s: %s codes with seed %" PRIu64 ", %s has "
					 "%s with seed %" PRIu64, inputs[opened],
					 sf_codes_method_name(a->method), a->seed, inputs[0],
					 sf_codes_method_name(f->method), f->seed);
			goto out;
		}
counted:
		total += a->nsections;
	}
	if (!(src = calloc(total + 1, sizeof(*src))) ||
	    !(out.sections = calloc(total + 1, sizeof(*out.sections)))) {
		ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
		goto out;
	}
	total = 0;
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < in[i].nsections; k++)
			src[total++] = (struct merge_src){ &in[i].sections[k], in[i].sections[k].data };
	qsort(src, total, sizeof(*src), cmp_src);
	for (size_t i = 0; i < total; i++) {
		if (i && cmp_section(src[i - 1].sec, src[i].sec) == 0) {
			ret = sf_err_set(e, SF_EMISMATCH, "%s: layer %d %s is in two inputs", path,
					 src[i].sec->layer, sf_group_name(src[i].sec->group));
			goto out;
		}
		out.sections[i] = *src[i].sec;
	}
	memcpy(out.fingerprint, in[0].fingerprint, sizeof(out.fingerprint));
	out.method = in[0].method;
	out.seed = in[0].seed;
	out.shape = in[0].shape;
	out.codebook = in[0].codebook;
	out.producer = producer;
	out.nsections = total;
	if ((ret = sf_sfq_writer_open(&w, path, &out, e)))
		goto out;
	for (size_t i = 0; i < total; i++)
		if ((ret = sf_sfq_writer_section(w, src[i].data, src[i].sec->bytes, e)))
			goto out;
	ret = sf_sfq_writer_close(w, e);
	w = NULL;
out:
	sf_sfq_writer_abort(w);
	free(out.sections);
	free(src);
	for (size_t i = 0; i < opened && in; i++)
		sf_sfq_close(&in[i]);
	free(in);
	return ret;
}

json_t *sf_sfq_info_json(const struct sf_sfq *q)
{
	json_t *o = json_object(), *secs = json_array();
	json_object_set_new(o, "fingerprint", json_string(q->fingerprint));
	json_object_set_new(o, "method", json_string(sf_codes_method_name(q->method)));
	json_object_set_new(o, "seed", json_integer((json_int_t)q->seed));
	json_object_set(o, "producer", q->producer ? q->producer : json_null());
	if (q->codebook) {
		char hex[17];
		snprintf(hex, sizeof(hex), "%016" PRIx64,
			 sf_sfq_fnv64(q->codebook, CODEBOOK_BYTES));
		json_object_set_new(o, "codebook_fnv64", json_string(hex));
	}
	for (size_t i = 0; i < q->nsections; i++) {
		const struct sf_sfq_section *s = &q->sections[i];
		char hex[17];
		snprintf(hex, sizeof(hex), "%016" PRIx64, sf_sfq_fnv64(s->data, s->bytes));
		json_array_append_new(secs, json_pack("{s:i,s:s,s:I,s:I,s:s}", "layer", s->layer,
						      "group", sf_group_name(s->group), "entries",
						      (json_int_t)s->entries, "bytes",
						      (json_int_t)s->bytes, "fnv64", hex));
	}
	json_object_set_new(o, "sections", secs);
	return o;
}
