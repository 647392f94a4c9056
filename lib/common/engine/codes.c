/* The middle tier's kernels: a record decoded, and decode-accumulate
 * (AVX-512, AVX2 and NEON beside the plain C _ref, bit-identical), dispatched
 * by the level engine/cpu.h names. See engine/codes.h; record layout in
 * man/sf-formats.5 (codes). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "base/bytes.h"
#include "base/vocab.h"
#include "engine/codes.h"
#include "engine/cpu.h"
#include "engine/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

// ----------------------------------------------------------------------------
// a record decoded

static uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static unsigned code_at(const uint8_t *codes, size_t t)
{
	return (codes[t / 4] >> (6 - 2 * (t % 4))) & 3u;
}

void sf_codes_decode(enum sf_code_method method, const float *cb, const uint8_t *rec, size_t m,
		     float *out)
{
	const uint8_t *codes = rec + sf_codes_scale_bytes(method);
	if (method == SF_CODES_TRELLIS) {
		float s = sf_f16_to_f32(sf_get_le16(rec));
		uint32_t idx = 0;
		for (size_t t = 0; t < m; t++) {
			idx = ((idx << 2) | code_at(codes, t)) & 0xffffu;
			out[t] = cb[idx] * s;
		}
	} else {
		float s0 = sf_f16_to_f32(sf_get_le16(rec)), s1 = sf_f16_to_f32(sf_get_le16(rec + 2));
		for (size_t t = 0; t < m; t++)
			out[t] = sf_twoscale_level(code_at(codes, t), s0, s1);
	}
}

float sf_codes_factors(enum sf_code_method method, const float *cb, const uint8_t *rec,
		       size_t m, float *out)
{
	const uint8_t *codes = rec + sf_codes_scale_bytes(method);
	if (method == SF_CODES_TRELLIS) {
		uint32_t idx = 0;
		for (size_t t = 0; t < m; t++) {
			idx = ((idx << 2) | code_at(codes, t)) & 0xffffu;
			out[t] = cb[idx];
		}
		return sf_f16_to_f32(sf_get_le16(rec));
	}
	float s0 = sf_f16_to_f32(sf_get_le16(rec)), s1 = sf_f16_to_f32(sf_get_le16(rec + 2));
	for (size_t t = 0; t < m; t++)
		out[t] = sf_twoscale_level(code_at(codes, t), s0, s1);
	return 1.0f;
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
		float xs = x * sf_f16_to_f32(sf_get_le16(rec));
		uint32_t idx = t0 ? window_at(codes, t0 - 1) : 0;
		for (size_t t = t0; t < t1; t++) {
			idx = ((idx << 2) | code_at(codes, t)) & 0xffffu;
			y[t] = fmaf(xs, v->codebook[idx], y[t]);
		}
	} else {
		float s0 = sf_f16_to_f32(sf_get_le16(rec)), s1 = sf_f16_to_f32(sf_get_le16(rec + 2));
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

void sf_codes_colaccum_batch_ref(float *Y, size_t ldy, const struct sf_codes_view *v,
				 size_t r0, size_t r1, const uint32_t *idx, const float *X,
				 const uint32_t *sel, size_t ldx, size_t T, size_t n)
{
	for (size_t k = 0; k < n; k++)
		for (size_t t = 0; t < T; t++)
			if (sel[k * ldx + t])
				accum_scalar_rows(Y + t * ldy, v, v->base + (size_t)idx[k] * v->stride,
						  X[k * ldx + t], r0, r1);
}

/* A SIMD path of one column's weights [t0, t1), t0 and t1 multiples of its
 * step: accumulated into y for input x (one token), or decoded into out
 * (trellis: the codebook values, before the record's scale). */
typedef void accum_fn(float *y, const struct sf_codes_view *v, const uint8_t *rec, float x,
		      size_t t0, size_t t1);
typedef void decode_fn(const struct sf_codes_view *v, const uint8_t *rec, size_t t0, size_t t1,
		       float *out);

#if defined(__x86_64__)
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define T256 __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline))

/* Trellis weights t..t+15, t a multiple of 16: their indices are 16-bit
 * windows of the 24 codes t-8..t+15, cut by two variable shifts of one
 * 48-bit word; the codebook values come by one gather. */
INL T512 __m512 trellis16(const struct sf_codes_view *v, const uint8_t *codes, size_t t)
{
	const __m512i sh_lo = _mm512_setr_epi64(30, 28, 26, 24, 22, 20, 18, 16);
	const __m512i sh_hi = _mm512_setr_epi64(14, 12, 10, 8, 6, 4, 2, 0);
	uint64_t word = t ? (uint64_t)get_be32(codes + t / 4 - 2) << 16 |
				    (uint64_t)codes[t / 4 + 2] << 8 | codes[t / 4 + 3]
			  : get_be32(codes);
	__m512i wv = _mm512_set1_epi64((long long)word);
	__m256i lo = _mm512_cvtepi64_epi32(_mm512_srlv_epi64(wv, sh_lo));
	__m256i hi = _mm512_cvtepi64_epi32(_mm512_srlv_epi64(wv, sh_hi));
	__m512i ix = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
				      _mm512_set1_epi32(0xffff));
	return _mm512_i32gather_ps(ix, v->codebook, 4);
}

/* Scalar weights t..t+15, t a multiple of 16: 16 codes are one 32-bit
 * word; the level comes from the 4-entry table lut. */
INL T512 __m512 scalar16(const uint8_t *codes, size_t t, __m512 lut)
{
	const __m512i sh = _mm512_setr_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6,
					     4, 2, 0);
	__m512i cw = _mm512_set1_epi32((int)get_be32(codes + t / 4));
	return _mm512_permutexvar_ps(_mm512_and_si512(_mm512_srlv_epi32(cw, sh),
						      _mm512_set1_epi32(3)), lut);
}

INL T512 __m512 levels512(const uint8_t *rec)
{
	float s0 = sf_f16_to_f32(sf_get_le16(rec)), s1 = sf_f16_to_f32(sf_get_le16(rec + 2));
	return _mm512_setr_ps(sf_twoscale_level(0, s0, s1), sf_twoscale_level(1, s0, s1),
			      sf_twoscale_level(2, s0, s1), sf_twoscale_level(3, s0, s1),
			      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}

static T512 void accum_trellis_avx512(float *y, const struct sf_codes_view *v,
				      const uint8_t *rec, float x, size_t t0, size_t t1)
{
	__m512 xs = _mm512_set1_ps(x * sf_f16_to_f32(sf_get_le16(rec)));
	for (size_t t = t0; t < t1; t += 16)
		_mm512_storeu_ps(y + t, _mm512_fmadd_ps(xs, trellis16(v, rec + 2, t),
							_mm512_loadu_ps(y + t)));
}

static T512 void accum_scalar_avx512(float *y, const struct sf_codes_view *v,
				     const uint8_t *rec, float x, size_t t0, size_t t1)
{
	(void)v;	/* the trellis kernel's signature */
	__m512 lut = levels512(rec), xb = _mm512_set1_ps(x);
	for (size_t t = t0; t < t1; t += 16)
		_mm512_storeu_ps(y + t, _mm512_fmadd_ps(xb, scalar16(rec + 4, t, lut),
							_mm512_loadu_ps(y + t)));
}

static T512 void decode_trellis_avx512(const struct sf_codes_view *v, const uint8_t *rec,
				       size_t t0, size_t t1, float *out)
{
	for (size_t t = t0; t < t1; t += 16)
		_mm512_store_ps(out + (t - t0), trellis16(v, rec + 2, t));
}

static T512 void decode_scalar_avx512(const struct sf_codes_view *v, const uint8_t *rec,
				      size_t t0, size_t t1, float *out)
{
	(void)v;
	__m512 lut = levels512(rec);
	for (size_t t = t0; t < t1; t += 16)
		_mm512_store_ps(out + (t - t0), scalar16(rec + 4, t, lut));
}

/* Trellis weights t..t+7, t a multiple of 8: their indices are 16-bit
 * windows of the 16 codes t-8..t+7, one 32-bit word cut by one variable
 * shift; the codebook values come by one gather. */
INL T256 __m256 trellis8(const struct sf_codes_view *v, const uint8_t *codes, size_t t)
{
	const __m256i sh = _mm256_setr_epi32(14, 12, 10, 8, 6, 4, 2, 0);
	uint32_t word = t ? get_be32(codes + t / 4 - 2) : (uint32_t)codes[0] << 8 | codes[1];
	__m256i ix = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)word), sh),
				      _mm256_set1_epi32(0xffff));
	return _mm256_i32gather_ps(v->codebook, ix, 4);
}

/* Scalar weights t..t+7, t a multiple of 8: 8 codes are one 16-bit word;
 * the level comes from the 4-entry table held in both halves of lut. */
INL T256 __m256 scalar8(const uint8_t *codes, size_t t, __m256 lut)
{
	const __m256i sh = _mm256_setr_epi32(14, 12, 10, 8, 6, 4, 2, 0);
	int word = (int)((uint32_t)codes[t / 4] << 8 | codes[t / 4 + 1]);
	return _mm256_permutevar_ps(lut, _mm256_and_si256(_mm256_srlv_epi32(
							     _mm256_set1_epi32(word), sh),
						     _mm256_set1_epi32(3)));
}

INL T256 __m256 levels256(const uint8_t *rec)
{
	float s0 = sf_f16_to_f32(sf_get_le16(rec)), s1 = sf_f16_to_f32(sf_get_le16(rec + 2));
	__m128 l = _mm_setr_ps(sf_twoscale_level(0, s0, s1), sf_twoscale_level(1, s0, s1),
			       sf_twoscale_level(2, s0, s1), sf_twoscale_level(3, s0, s1));
	return _mm256_set_m128(l, l);
}

static T256 void accum_trellis_avx2(float *y, const struct sf_codes_view *v,
				    const uint8_t *rec, float x, size_t t0, size_t t1)
{
	__m256 xs = _mm256_set1_ps(x * sf_f16_to_f32(sf_get_le16(rec)));
	for (size_t t = t0; t < t1; t += 8)
		_mm256_storeu_ps(y + t, _mm256_fmadd_ps(xs, trellis8(v, rec + 2, t),
							_mm256_loadu_ps(y + t)));
}

static T256 void accum_scalar_avx2(float *y, const struct sf_codes_view *v,
				   const uint8_t *rec, float x, size_t t0, size_t t1)
{
	(void)v;
	__m256 lut = levels256(rec), xb = _mm256_set1_ps(x);
	for (size_t t = t0; t < t1; t += 8)
		_mm256_storeu_ps(y + t, _mm256_fmadd_ps(xb, scalar8(rec + 4, t, lut),
							_mm256_loadu_ps(y + t)));
}

static T256 void decode_trellis_avx2(const struct sf_codes_view *v, const uint8_t *rec,
				     size_t t0, size_t t1, float *out)
{
	for (size_t t = t0; t < t1; t += 8)
		_mm256_store_ps(out + (t - t0), trellis8(v, rec + 2, t));
}

static T256 void decode_scalar_avx2(const struct sf_codes_view *v, const uint8_t *rec,
				    size_t t0, size_t t1, float *out)
{
	(void)v;
	__m256 lut = levels256(rec);
	for (size_t t = t0; t < t1; t += 8)
		_mm256_store_ps(out + (t - t0), scalar8(rec + 4, t, lut));
}

#endif

#if defined(__aarch64__)

/* NEON: 8 weights a step in two vectors; the trellis's codebook values
 * loaded one by one (no gather), the scalar levels by a table lookup. */

/* Trellis weights t..t+7, t a multiple of 8: their indices are 16-bit
 * windows of the 16 codes t-8..t+7, one 32-bit word cut by shifts. */
static inline void trellis8_n(const struct sf_codes_view *v, const uint8_t *codes, size_t t,
			      float32x4_t *w)
{
	static const int32_t sh[8] = { -14, -12, -10, -8, -6, -4, -2, 0 };
	uint32_t word = t ? get_be32(codes + t / 4 - 2) : (uint32_t)codes[0] << 8 | codes[1];
	uint32x4_t wv = vdupq_n_u32(word), m = vdupq_n_u32(0xffff);
	uint32_t ix[8];
	vst1q_u32(ix, vandq_u32(vshlq_u32(wv, vld1q_s32(sh)), m));
	vst1q_u32(ix + 4, vandq_u32(vshlq_u32(wv, vld1q_s32(sh + 4)), m));
	float f[8];
	for (int i = 0; i < 8; i++)
		f[i] = v->codebook[ix[i]];
	w[0] = vld1q_f32(f);
	w[1] = vld1q_f32(f + 4);
}

/* Scalar weights t..t+7, t a multiple of 8: 8 codes are one 16-bit word;
 * the level's four bytes come from the 4-entry table lut by TBL. */
static inline void scalar8_n(const uint8_t *codes, size_t t, uint8x16_t lut, float32x4_t *w)
{
	static const int32_t sh[8] = { -14, -12, -10, -8, -6, -4, -2, 0 };
	uint32x4_t wv = vdupq_n_u32((uint32_t)codes[t / 4] << 8 | codes[t / 4 + 1]);
	for (int h = 0; h < 2; h++) {
		uint32x4_t c = vandq_u32(vshlq_u32(wv, vld1q_s32(sh + 4 * h)), vdupq_n_u32(3));
		/* bytes 4c .. 4c + 3 of the table: the level's float */
		uint32x4_t ix = vmlaq_n_u32(vdupq_n_u32(0x03020100), c, 0x04040404);
		w[h] = vreinterpretq_f32_u8(vqtbl1q_u8(lut, vreinterpretq_u8_u32(ix)));
	}
}

static inline uint8x16_t levels_n(const uint8_t *rec)
{
	float s0 = sf_f16_to_f32(sf_get_le16(rec)), s1 = sf_f16_to_f32(sf_get_le16(rec + 2));
	float l[4] = { sf_twoscale_level(0, s0, s1), sf_twoscale_level(1, s0, s1),
		       sf_twoscale_level(2, s0, s1), sf_twoscale_level(3, s0, s1) };
	return vreinterpretq_u8_f32(vld1q_f32(l));
}

static void accum_trellis_neon(float *y, const struct sf_codes_view *v, const uint8_t *rec,
			       float x, size_t t0, size_t t1)
{
	float xs = x * sf_f16_to_f32(sf_get_le16(rec));
	for (size_t t = t0; t < t1; t += 8) {
		float32x4_t w[2];
		trellis8_n(v, rec + 2, t, w);
		vst1q_f32(y + t, vfmaq_n_f32(vld1q_f32(y + t), w[0], xs));
		vst1q_f32(y + t + 4, vfmaq_n_f32(vld1q_f32(y + t + 4), w[1], xs));
	}
}

static void accum_scalar_neon(float *y, const struct sf_codes_view *v, const uint8_t *rec,
			      float x, size_t t0, size_t t1)
{
	(void)v;	/* the trellis kernel's signature */
	uint8x16_t lut = levels_n(rec);
	for (size_t t = t0; t < t1; t += 8) {
		float32x4_t w[2];
		scalar8_n(rec + 4, t, lut, w);
		vst1q_f32(y + t, vfmaq_n_f32(vld1q_f32(y + t), w[0], x));
		vst1q_f32(y + t + 4, vfmaq_n_f32(vld1q_f32(y + t + 4), w[1], x));
	}
}

static void decode_trellis_neon(const struct sf_codes_view *v, const uint8_t *rec, size_t t0,
				size_t t1, float *out)
{
	for (size_t t = t0; t < t1; t += 8) {
		float32x4_t w[2];
		trellis8_n(v, rec + 2, t, w);
		vst1q_f32(out + (t - t0), w[0]);
		vst1q_f32(out + (t - t0) + 4, w[1]);
	}
}

static void decode_scalar_neon(const struct sf_codes_view *v, const uint8_t *rec, size_t t0,
			       size_t t1, float *out)
{
	(void)v;
	uint8x16_t lut = levels_n(rec);
	for (size_t t = t0; t < t1; t += 8) {
		float32x4_t w[2];
		scalar8_n(rec + 4, t, lut, w);
		vst1q_f32(out + (t - t0), w[0]);
		vst1q_f32(out + (t - t0) + 4, w[1]);
	}
}

#endif /* __aarch64__ */

/* The dispatch table (engine/cpu.h): per level a column's accumulate
 * and decode per method, and the weights a SIMD step takes; step 0 is the
 * _ref. A level without its own paths repeats the one below. */
static const struct accum_path {
	accum_fn *trellis, *scalar;
	decode_fn *decode_trellis, *decode_scalar;
	size_t step;
} accum_paths[SF_NISA] = {
	[SF_ISA_REF] = { NULL, NULL, NULL, NULL, 0 },
#if defined(__x86_64__)
	[SF_ISA_AVX2] = { accum_trellis_avx2, accum_scalar_avx2, decode_trellis_avx2,
			  decode_scalar_avx2, 8 },
	[SF_ISA_AVX512] = { accum_trellis_avx512, accum_scalar_avx512, decode_trellis_avx512,
			    decode_scalar_avx512, 16 },
#else
	[SF_ISA_AVX2] = { NULL, NULL, NULL, NULL, 0 },
	[SF_ISA_AVX512] = { NULL, NULL, NULL, NULL, 0 },
#endif
#if defined(__aarch64__)
	[SF_ISA_NEON] = { accum_trellis_neon, accum_scalar_neon, decode_trellis_neon,
			  decode_scalar_neon, 8 },
	[SF_ISA_DOTPROD] = { accum_trellis_neon, accum_scalar_neon, decode_trellis_neon,
			     decode_scalar_neon, 8 },
	[SF_ISA_I8MM] = { accum_trellis_neon, accum_scalar_neon, decode_trellis_neon,
			  decode_scalar_neon, 8 },
#else
	[SF_ISA_NEON] = { NULL, NULL, NULL, NULL, 0 },
	[SF_ISA_DOTPROD] = { NULL, NULL, NULL, NULL, 0 },
	[SF_ISA_I8MM] = { NULL, NULL, NULL, NULL, 0 },
#endif
};

/* The SIMD paths' rows: a scalar head [r0, *a) up to a whole step, whole
 * steps [*a, *b), a scalar tail [*b, r1). */
static void simd_rows(size_t w, size_t r0, size_t r1, size_t *a, size_t *b)
{
	*a = (r0 + w - 1) / w * w;
	*a = *a < r1 ? *a : r1;
	*b = *a + (r1 - *a) / w * w;
}

void sf_codes_colaccum(float *y, const struct sf_codes_view *v, size_t r0, size_t r1,
		       const uint32_t *idx, const float *xv, size_t n)
{
	const struct accum_path *P = &accum_paths[sf_cpu_isa()];
	accum_fn *fn = v->method == SF_CODES_TRELLIS ? P->trellis : P->scalar;
	size_t a, b;

	if (!fn) {
		sf_codes_colaccum_ref(y, v, r0, r1, idx, xv, n);
		return;
	}
	simd_rows(P->step, r0, r1, &a, &b);
	for (size_t k = 0; k < n; k++) {
		const uint8_t *rec = v->base + (size_t)idx[k] * v->stride;
		accum_scalar_rows(y, v, rec, xv[k], r0, a);
		fn(y, v, rec, xv[k], a, b);
		accum_scalar_rows(y, v, rec, xv[k], b, r1);
	}
}

struct code_columns {
	const struct sf_codes_view *v;
	const uint32_t *idx;	/* the k-th column's record */
	decode_fn *decode;
};

/* A strip of a column decoded (trellis: with the record's scale as its
 * inputs' factor, as the one-token path multiplies them). */
static void decode_column(const void *ctx, size_t k, size_t j0, size_t rows, float *w, float *xs)
{
	const struct code_columns *c = ctx;
	const uint8_t *rec = c->v->base + (size_t)c->idx[k] * c->v->stride;
	c->decode(c->v, rec, j0, j0 + rows, w);
	*xs = c->v->method == SF_CODES_TRELLIS ? sf_f16_to_f32(sf_get_le16(rec)) : 1.0f;
}

/* The SIMD steps through the strips' core (engine/kernels.h), each block
 * of columns decoded once; the head and tail rows through the _ref. */
void sf_codes_colaccum_batch(float *Y, size_t ldy, const struct sf_codes_view *v, size_t r0,
			     size_t r1, const uint32_t *idx, const float *X, const uint32_t *sel,
			     size_t ldx, size_t T, size_t n)
{
	const struct accum_path *P = &accum_paths[sf_cpu_isa()];
	int trellis = v->method == SF_CODES_TRELLIS;
	struct code_columns c = { v, idx, trellis ? P->decode_trellis : P->decode_scalar };
	size_t a, b;

	if (!c.decode) {
		sf_codes_colaccum_batch_ref(Y, ldy, v, r0, r1, idx, X, sel, ldx, T, n);
		return;
	}
	simd_rows(P->step, r0, r1, &a, &b);
	sf_codes_colaccum_batch_ref(Y, ldy, v, r0, a, idx, X, sel, ldx, T, n);
	sf_codes_colaccum_batch_ref(Y, ldy, v, b, r1, idx, X, sel, ldx, T, n);
	sf_colaccum_strips(Y + a, ldy, a, b, decode_column, &c, trellis, X, sel, ldx, T, n);
}
