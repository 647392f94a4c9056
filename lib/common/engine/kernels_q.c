/* Column-accumulate over q8 and q4 blocks (see kernels_q.h): the _ref, and
 * AVX2 (strips of 16 rows, four tokens at a time) and AVX-512 (a whole
 * block of 32 rows, eight tokens at a time) paths compiled through target
 * attributes; rows outside whole strips go through the _ref, which gives
 * each row the same operations. */
#include "engine/kernels_q.h"

#include <math.h>

#include "base/quant.h"
#include "engine/cpu.h"
#include "engine/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* The weight of row j of the column at col: code * scale, as every path. */
static inline float q_weight(const uint8_t *col, enum sf_dtype dt, size_t j)
{
	if (dt == SF_DTYPE_Q8) {
		const uint8_t *b = col + j / SF_QBLOCK * SF_Q8_BLOCK_BYTES;
		return (float)sf_q8_code(b, j % SF_QBLOCK) * sf_quant_scale(b);
	}
	const uint8_t *b = col + j / SF_QBLOCK * SF_Q4_BLOCK_BYTES;
	return (float)sf_q4_code(b, j % SF_QBLOCK) * sf_quant_scale(b);
}

void sf_qcolaccum_ref(float *Y, size_t ldy, size_t r0, size_t r1, const void *C,
		      enum sf_dtype dt, size_t stride, const uint32_t *idx, const float *X,
		      const uint32_t *sel, size_t ldx, size_t T, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		const uint8_t *col = (const uint8_t *)C + (size_t)idx[k] * stride;
		for (size_t t = 0; t < T; t++) {
			if (sel && !sel[k * ldx + t])
				continue;
			float x = X[k * ldx + t], *y = Y + t * ldy - r0;
			for (size_t j = r0; j < r1; j++)
				y[j] = fmaf(x, q_weight(col, dt, j), y[j]);
		}
	}
}

/* The rows of [r0, r1) outside the whole strips [s0, s1) of a SIMD path. */
static void edges_ref(float *Y, size_t ldy, size_t r0, size_t r1, size_t s0, size_t s1,
		      const void *C, enum sf_dtype dt, size_t stride, const uint32_t *idx,
		      const float *X, const uint32_t *sel, size_t ldx, size_t T, size_t n)
{
	if (s0 >= s1) {
		sf_qcolaccum_ref(Y, ldy, r0, r1, C, dt, stride, idx, X, sel, ldx, T, n);
		return;
	}
	if (r0 < s0)
		sf_qcolaccum_ref(Y, ldy, r0, s0, C, dt, stride, idx, X, sel, ldx, T, n);
	if (s1 < r1)
		sf_qcolaccum_ref(Y + (s1 - r0), ldy, s1, r1, C, dt, stride, idx, X, sel, ldx, T, n);
}

/* Columns a strip's accumulators stay in registers for, their codes
 * in L1 across the token groups (as the float kernels' SF_STRIP_COLUMNS). */
#define QCOLUMNS 128

#if defined(__x86_64__)

#define INL static inline __attribute__((always_inline))

// ----------------------------------------------------------------------------
// AVX2: 16 rows (half a block) as two vectors of 8

#define T256 __attribute__((target("avx2,fma,f16c")))

/* The 16 weights of rows [16h, 16h + 16) of block b. */
INL T256 void deq16_256(const uint8_t *b, enum sf_dtype dt, size_t h, __m256 *w0, __m256 *w1)
{
	__m128i c;
	if (dt == SF_DTYPE_Q8) {
		c = _mm_loadu_si128((const __m128i *)(b + 2 + 16 * h));
	} else {
		c = _mm_loadu_si128((const __m128i *)(b + 2));
		if (h)
			c = _mm_srli_epi16(c, 4);
		c = _mm_sub_epi8(_mm_and_si128(c, _mm_set1_epi8(15)), _mm_set1_epi8(8));
	}
	__m256 s = _mm256_set1_ps(sf_quant_scale(b));
	*w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)), s);
	*w1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c, 8))), s);
}

/* NT tokens at a time (1 without sel: the one-token call). A pass of
 * more tokens than NT dequantizes each strip of its block of columns once
 * into wb, which every group of tokens then reads from L1. */
INL T256 void qca256(float *Y, size_t ldy, size_t r0, size_t s0, size_t s1, const uint8_t *C,
		     enum sf_dtype dt, size_t stride, const uint32_t *idx, const float *X,
		     const uint32_t *sel, size_t ldx, size_t T, size_t n, const size_t NT)
{
	const size_t bb = dt == SF_DTYPE_Q8 ? SF_Q8_BLOCK_BYTES : SF_Q4_BLOCK_BYTES;
	const int buffered = NT > 1 && T > NT;
	float wb[QCOLUMNS][16] __attribute__((aligned(32)));

	for (size_t j0 = s0; j0 < s1; j0 += 16)
		for (size_t kb = 0; kb < n; kb += QCOLUMNS) {
			size_t ke = n - kb < QCOLUMNS ? n : kb + QCOLUMNS;
			for (size_t k = kb; buffered && k < ke; k++) {
				__m256 w0, w1;
				deq16_256(C + (size_t)idx[k] * stride + j0 / SF_QBLOCK * bb, dt, j0 / 16 % 2,
					  &w0, &w1);
				_mm256_store_ps(wb[k - kb], w0);
				_mm256_store_ps(wb[k - kb] + 8, w1);
			}
			for (size_t t0 = 0; t0 < T; t0 += NT) {
				__m256 a[4][2];
#pragma GCC unroll 4
				for (size_t t = 0; t < NT; t++) {
					const float *y = Y + (t0 + t) * ldy + (j0 - r0);
					a[t][0] = t0 + t < T ? _mm256_loadu_ps(y) : _mm256_setzero_ps();
					a[t][1] = t0 + t < T ? _mm256_loadu_ps(y + 8) : _mm256_setzero_ps();
				}
				for (size_t k = kb; k < ke; k++) {
					__m256 w0, w1;
					if (buffered) {
						w0 = _mm256_load_ps(wb[k - kb]);
						w1 = _mm256_load_ps(wb[k - kb] + 8);
					} else {
						deq16_256(C + (size_t)idx[k] * stride + j0 / SF_QBLOCK * bb, dt,
							  j0 / 16 % 2, &w0, &w1);
					}
#pragma GCC unroll 4
					for (size_t t = 0; t < NT; t++) {
						__m256 xb = _mm256_set1_ps(X[k * ldx + t0 + t]);
						__m256 f0 = _mm256_fmadd_ps(w0, xb, a[t][0]);
						__m256 f1 = _mm256_fmadd_ps(w1, xb, a[t][1]);
						if (sel) {
							__m256 mk = _mm256_castsi256_ps(
								_mm256_set1_epi32((int)sel[k * ldx + t0 + t]));
							f0 = _mm256_blendv_ps(a[t][0], f0, mk);
							f1 = _mm256_blendv_ps(a[t][1], f1, mk);
						}
						a[t][0] = f0;
						a[t][1] = f1;
					}
				}
				for (size_t t = 0; t < NT && t0 + t < T; t++) {
					float *y = Y + (t0 + t) * ldy + (j0 - r0);
					_mm256_storeu_ps(y, a[t][0]);
					_mm256_storeu_ps(y + 8, a[t][1]);
				}
			}
		}
}

static T256 void qcolaccum_avx2(float *Y, size_t ldy, size_t r0, size_t r1, const void *C,
				enum sf_dtype dt, size_t stride, const uint32_t *idx,
				const float *X, const uint32_t *sel, size_t ldx, size_t T,
				size_t n)
{
	size_t s0 = (r0 + 15) / 16 * 16, s1 = r1 / 16 * 16;

	if (s0 < s1) {
		if (!sel && dt == SF_DTYPE_Q8)
			qca256(Y, ldy, r0, s0, s1, C, SF_DTYPE_Q8, stride, idx, X, NULL, ldx, T, n, 1);
		else if (!sel)
			qca256(Y, ldy, r0, s0, s1, C, SF_DTYPE_Q4, stride, idx, X, NULL, ldx, T, n, 1);
		else if (dt == SF_DTYPE_Q8)
			qca256(Y, ldy, r0, s0, s1, C, SF_DTYPE_Q8, stride, idx, X, sel, ldx, T, n, 4);
		else
			qca256(Y, ldy, r0, s0, s1, C, SF_DTYPE_Q4, stride, idx, X, sel, ldx, T, n, 4);
	}
	edges_ref(Y, ldy, r0, r1, s0, s1, C, dt, stride, idx, X, sel, ldx, T, n);
}

// ----------------------------------------------------------------------------
// AVX-512: a whole block of 32 rows as two vectors of 16

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

INL T512 void deq32_512(const uint8_t *b, enum sf_dtype dt, __m512 *w0, __m512 *w1)
{
	__m128i c0, c1;
	if (dt == SF_DTYPE_Q8) {
		c0 = _mm_loadu_si128((const __m128i *)(b + 2));
		c1 = _mm_loadu_si128((const __m128i *)(b + 18));
	} else {
		__m128i c = _mm_loadu_si128((const __m128i *)(b + 2));
		__m128i m = _mm_set1_epi8(15), e = _mm_set1_epi8(8);
		c0 = _mm_sub_epi8(_mm_and_si128(c, m), e);
		c1 = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(c, 4), m), e);
	}
	__m512 s = _mm512_set1_ps(sf_quant_scale(b));
	*w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c0)), s);
	*w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c1)), s);
}

/* As qca256, a whole block at a time. */
INL T512 void qca512(float *Y, size_t ldy, size_t r0, size_t s0, size_t s1, const uint8_t *C,
		     enum sf_dtype dt, size_t stride, const uint32_t *idx, const float *X,
		     const uint32_t *sel, size_t ldx, size_t T, size_t n, const size_t NT)
{
	const size_t bb = dt == SF_DTYPE_Q8 ? SF_Q8_BLOCK_BYTES : SF_Q4_BLOCK_BYTES;
	const int buffered = NT > 1 && T > NT;
	float wb[QCOLUMNS][SF_QBLOCK] __attribute__((aligned(64)));

	for (size_t j0 = s0; j0 < s1; j0 += SF_QBLOCK)
		for (size_t kb = 0; kb < n; kb += QCOLUMNS) {
			size_t ke = n - kb < QCOLUMNS ? n : kb + QCOLUMNS;
			for (size_t k = kb; buffered && k < ke; k++) {
				__m512 w0, w1;
				deq32_512(C + (size_t)idx[k] * stride + j0 / SF_QBLOCK * bb, dt, &w0, &w1);
				_mm512_store_ps(wb[k - kb], w0);
				_mm512_store_ps(wb[k - kb] + 16, w1);
			}
			for (size_t t0 = 0; t0 < T; t0 += NT) {
				__m512 a[8][2];
#pragma GCC unroll 8
				for (size_t t = 0; t < NT; t++) {
					const float *y = Y + (t0 + t) * ldy + (j0 - r0);
					a[t][0] = t0 + t < T ? _mm512_loadu_ps(y) : _mm512_setzero_ps();
					a[t][1] = t0 + t < T ? _mm512_loadu_ps(y + 16) : _mm512_setzero_ps();
				}
				for (size_t k = kb; k < ke; k++) {
					__m512 w0, w1;
					if (buffered) {
						w0 = _mm512_load_ps(wb[k - kb]);
						w1 = _mm512_load_ps(wb[k - kb] + 16);
					} else {
						deq32_512(C + (size_t)idx[k] * stride + j0 / SF_QBLOCK * bb, dt,
							  &w0, &w1);
					}
#pragma GCC unroll 8
					for (size_t t = 0; t < NT; t++) {
						__m512 xb = _mm512_set1_ps(X[k * ldx + t0 + t]);
						__mmask16 mk = sel ? (__mmask16)sel[k * ldx + t0 + t] : 0xffff;
						a[t][0] = _mm512_mask3_fmadd_ps(w0, xb, a[t][0], mk);
						a[t][1] = _mm512_mask3_fmadd_ps(w1, xb, a[t][1], mk);
					}
				}
				for (size_t t = 0; t < NT && t0 + t < T; t++) {
					float *y = Y + (t0 + t) * ldy + (j0 - r0);
					_mm512_storeu_ps(y, a[t][0]);
					_mm512_storeu_ps(y + 16, a[t][1]);
				}
			}
		}
}

static T512 void qcolaccum_avx512(float *Y, size_t ldy, size_t r0, size_t r1, const void *C,
				  enum sf_dtype dt, size_t stride, const uint32_t *idx,
				  const float *X, const uint32_t *sel, size_t ldx, size_t T,
				  size_t n)
{
	size_t s0 = (r0 + SF_QBLOCK - 1) / SF_QBLOCK * SF_QBLOCK, s1 = r1 / SF_QBLOCK * SF_QBLOCK;

	if (s0 < s1) {
		if (!sel && dt == SF_DTYPE_Q8)
			qca512(Y, ldy, r0, s0, s1, C, SF_DTYPE_Q8, stride, idx, X, NULL, ldx, T, n, 1);
		else if (!sel)
			qca512(Y, ldy, r0, s0, s1, C, SF_DTYPE_Q4, stride, idx, X, NULL, ldx, T, n, 1);
		else if (dt == SF_DTYPE_Q8)
			qca512(Y, ldy, r0, s0, s1, C, SF_DTYPE_Q8, stride, idx, X, sel, ldx, T, n, 8);
		else
			qca512(Y, ldy, r0, s0, s1, C, SF_DTYPE_Q4, stride, idx, X, sel, ldx, T, n, 8);
	}
	edges_ref(Y, ldy, r0, r1, s0, s1, C, dt, stride, idx, X, sel, ldx, T, n);
}

#endif /* __x86_64__ */

// ----------------------------------------------------------------------------
// the family's table, indexed by enum sf_isa (engine/cpu.h)

typedef void qcolaccum_fn(float *Y, size_t ldy, size_t r0, size_t r1, const void *C,
			  enum sf_dtype dt, size_t stride, const uint32_t *idx, const float *X,
			  const uint32_t *sel, size_t ldx, size_t T, size_t n);

static qcolaccum_fn *const qcolaccum_table[SF_NISA] = {
	[SF_ISA_REF] = sf_qcolaccum_ref,
#if defined(__x86_64__)
	[SF_ISA_AVX2] = qcolaccum_avx2,
	[SF_ISA_AVX512] = qcolaccum_avx512,
#else
	[SF_ISA_AVX2] = sf_qcolaccum_ref,
	[SF_ISA_AVX512] = sf_qcolaccum_ref,
#endif
};

void sf_qcolaccum(float *Y, size_t ldy, size_t r0, size_t r1, const void *C, enum sf_dtype dt,
		  size_t stride, const uint32_t *idx, const float *X, const uint32_t *sel,
		  size_t ldx, size_t T, size_t n)
{
	if (r0 < r1 && n && T)
		qcolaccum_table[sf_cpu_isa()](Y, ldy, r0, r1, C, dt, stride, idx, X, sel, ldx, T, n);
}

void sf_colaccum_span(float *Y, size_t ldy, size_t r0, size_t r1, const void *C,
		      enum sf_dtype dt, size_t stride, const uint32_t *idx, const float *X,
		      const uint32_t *sel, size_t ldx, size_t T, size_t n)
{
	if (sf_dtype_is_block(dt)) {
		sf_qcolaccum(Y, ldy, r0, r1, C, dt, stride, idx, X, sel, ldx, T, n);
		return;
	}
	size_t es = sf_dtype_size(dt);
	const uint8_t *c = (const uint8_t *)C + r0 * es;
	if (!sel)
		sf_colaccum(Y, r1 - r0, c, dt, stride / es, idx, X, n);
	else
		sf_colaccum_batch(Y, ldy, r1 - r0, c, dt, stride / es, idx, X, sel, ldx, T, n);
}
