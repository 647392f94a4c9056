/* Column-accumulate over q8 and q4 blocks (see kernels_q.h): the _ref,
 * and AVX2 (strips of 16 rows) and AVX-512 (a whole block of 32 rows)
 * paths compiled through target attributes for one token; a pass of tokens
 * dequantizes a block of columns once, 16 rows at a time, and runs it
 * through sf_colaccum_strips (engine/kernels.h), as the float columns do.
 * Rows outside whole strips go through the _ref, which gives each row the
 * same operations. */
#include "engine/kernels_q.h"

#include <math.h>

#include "base/quant.h"
#include "engine/cpu.h"
#include "engine/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* The block that holds row j of the column at col. */
static inline const uint8_t *q_block(const uint8_t *col, enum sf_dtype dt, size_t j)
{
	return col + j / SF_QBLOCK * (dt == SF_DTYPE_Q8 ? SF_Q8_BLOCK_BYTES : SF_Q4_BLOCK_BYTES);
}

/* The weight of row j of the column at col: code * scale, as every path. */
static inline float q_weight(const uint8_t *col, enum sf_dtype dt, size_t j)
{
	const uint8_t *b = q_block(col, dt, j);
	int code = dt == SF_DTYPE_Q8 ? sf_q8_code(b, j % SF_QBLOCK) : sf_q4_code(b, j % SF_QBLOCK);
	return (float)code * sf_quant_scale(b);
}

void sf_qcolaccum_ref(float *Y, size_t ldy, size_t r0, size_t r1, const void *const *cols,
		      size_t off, enum sf_dtype dt, const float *X, const uint32_t *sel,
		      size_t ldx, size_t T, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		const uint8_t *col = (const uint8_t *)cols[k] + off;
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
		      const void *const *cols, size_t off, enum sf_dtype dt, const float *X,
		      const uint32_t *sel, size_t ldx, size_t T, size_t n)
{
	if (s0 >= s1) {
		sf_qcolaccum_ref(Y, ldy, r0, r1, cols, off, dt, X, sel, ldx, T, n);
		return;
	}
	if (r0 < s0)
		sf_qcolaccum_ref(Y, ldy, r0, s0, cols, off, dt, X, sel, ldx, T, n);
	if (s1 < r1)
		sf_qcolaccum_ref(Y + (s1 - r0), ldy, s1, r1, cols, off, dt, X, sel, ldx, T, n);
}

#if defined(__x86_64__)

/* Rows [j0, j0 + rows) of the column at col as f32 into w, j0 and rows
 * multiples of 16 (a SIMD path's dequantization). */
typedef void qwiden_fn(float *w, const uint8_t *col, enum sf_dtype dt, size_t j0, size_t rows);

struct q_columns {
	const void *const *cols;
	size_t off;
	enum sf_dtype dt;
	qwiden_fn *widen;
};

static void widen_q(const void *ctx, size_t k, size_t j0, size_t rows, float *w, float *xs)
{
	const struct q_columns *q = ctx;
	(void)xs;	/* the scales are in the weights */
	q->widen(w, (const uint8_t *)q->cols[k] + q->off, q->dt, j0, rows);
}

/* A pass (sel not NULL): the whole 16-row halves of blocks through the
 * strips' core (engine/kernels.h), each block of columns dequantized once;
 * the rows outside them through the _ref. */
static void qpass(float *Y, size_t ldy, size_t r0, size_t r1, const void *const *cols,
		  size_t off, enum sf_dtype dt, const float *X, const uint32_t *sel, size_t ldx,
		  size_t T, size_t n, qwiden_fn *widen)
{
	size_t s0 = (r0 + 15) / 16 * 16, s1 = r1 / 16 * 16;
	struct q_columns q = { cols, off, dt, widen };

	if (s0 < s1)
		sf_colaccum_strips(Y + (s0 - r0), ldy, s0, s1, widen_q, &q, 0, X, sel, ldx, T, n);
	edges_ref(Y, ldy, r0, r1, s0, s1, cols, off, dt, X, sel, ldx, T, n);
}

#define INL static inline __attribute__((always_inline))

/* The blocks of rows [s0, s1) of four columns asked of memory while the
 * four before them are computed: a column in a cache slot or a read
 * buffer is cold, and four short streams leave the prefetchers no time. */
static inline void q_prefetch(const void *const *cols, size_t off, enum sf_dtype dt, size_t s0,
			      size_t s1)
{
	for (int i = 0; i < 4; i++) {
		const uint8_t *c = (const uint8_t *)cols[i] + off;
		for (const uint8_t *p = q_block(c, dt, s0); p < q_block(c, dt, s1); p += 64)
			__builtin_prefetch(p);
	}
}

/* sf_quant_scale by the F16C instruction (exact, as the library's
 * conversion): no call in the loops, which would spill the sums. */
#define QSCALE(b) _cvtsh_ss((unsigned short)((b)[0] | (b)[1] << 8))

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
	__m256 s = _mm256_set1_ps(QSCALE(b));
	*w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)), s);
	*w1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c, 8))), s);
}

/* One token, NC columns (4 or 1) a sweep down the rows: each column is
 * read in order, so the prefetchers follow NC streams, and y is loaded
 * and stored once a strip for the NC of them. Every row still takes the
 * columns in turn. */
INL T256 void qca256_cols(float *y, size_t r0, size_t s0, size_t s1, const void *const *cols,
			  size_t off, enum sf_dtype dt, const float *X, const int NC)
{
	const uint8_t *col[4];
	__m256 xb[4];
#pragma GCC unroll 4
	for (int i = 0; i < NC; i++)
		col[i] = (const uint8_t *)cols[i] + off, xb[i] = _mm256_set1_ps(X[i]);
	for (size_t j0 = s0; j0 < s1; j0 += 16) {
		__m256 a0 = _mm256_loadu_ps(y + (j0 - r0)), a1 = _mm256_loadu_ps(y + (j0 - r0) + 8);
#pragma GCC unroll 4
		for (int i = 0; i < NC; i++) {
			__m256 w0, w1;
			deq16_256(q_block(col[i], dt, j0), dt, j0 / 16 % 2, &w0, &w1);
			a0 = _mm256_fmadd_ps(w0, xb[i], a0);
			a1 = _mm256_fmadd_ps(w1, xb[i], a1);
		}
		_mm256_storeu_ps(y + (j0 - r0), a0);
		_mm256_storeu_ps(y + (j0 - r0) + 8, a1);
	}
}

INL T256 void qca256(float *y, size_t r0, size_t s0, size_t s1, const void *const *cols,
		     size_t off, enum sf_dtype dt, const float *X, size_t n)
{
	size_t k = 0;
	for (; k + 4 <= n; k += 4) {
		if (k + 8 <= n)
			q_prefetch(cols + k + 4, off, dt, s0, s1);
		qca256_cols(y, r0, s0, s1, cols + k, off, dt, X + k, 4);
	}
	for (; k < n; k++)
		qca256_cols(y, r0, s0, s1, cols + k, off, dt, X + k, 1);
}

static T256 void qwiden_avx2(float *w, const uint8_t *col, enum sf_dtype dt, size_t j0,
			     size_t rows)
{
	for (size_t j = j0; j < j0 + rows; j += 16) {
		__m256 w0, w1;
		deq16_256(q_block(col, dt, j), dt, j / 16 % 2, &w0, &w1);
		_mm256_store_ps(w + (j - j0), w0);
		_mm256_store_ps(w + (j - j0) + 8, w1);
	}
}

static T256 void qcolaccum_avx2(float *Y, size_t ldy, size_t r0, size_t r1,
				const void *const *cols, size_t off, enum sf_dtype dt,
				const float *X, const uint32_t *sel, size_t ldx, size_t T,
				size_t n)
{
	if (sel) {
		qpass(Y, ldy, r0, r1, cols, off, dt, X, sel, ldx, T, n, qwiden_avx2);
		return;
	}
	size_t s0 = (r0 + 15) / 16 * 16, s1 = r1 / 16 * 16;
	if (s0 < s1 && dt == SF_DTYPE_Q8)
		qca256(Y, r0, s0, s1, cols, off, SF_DTYPE_Q8, X, n);
	else if (s0 < s1)
		qca256(Y, r0, s0, s1, cols, off, SF_DTYPE_Q4, X, n);
	edges_ref(Y, ldy, r0, r1, s0, s1, cols, off, dt, X, sel, ldx, T, n);
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
	__m512 s = _mm512_set1_ps(QSCALE(b));
	*w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c0)), s);
	*w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c1)), s);
}

/* As qca256_cols, a whole block of rows at a time. */
INL T512 void qca512_cols(float *y, size_t r0, size_t s0, size_t s1, const void *const *cols,
			  size_t off, enum sf_dtype dt, const float *X, const int NC)
{
	const uint8_t *col[4];
	__m512 xb[4];
#pragma GCC unroll 4
	for (int i = 0; i < NC; i++)
		col[i] = (const uint8_t *)cols[i] + off, xb[i] = _mm512_set1_ps(X[i]);
	for (size_t j0 = s0; j0 < s1; j0 += SF_QBLOCK) {
		__m512 a0 = _mm512_loadu_ps(y + (j0 - r0)), a1 = _mm512_loadu_ps(y + (j0 - r0) + 16);
#pragma GCC unroll 4
		for (int i = 0; i < NC; i++) {
			__m512 w0, w1;
			deq32_512(q_block(col[i], dt, j0), dt, &w0, &w1);
			a0 = _mm512_fmadd_ps(w0, xb[i], a0);
			a1 = _mm512_fmadd_ps(w1, xb[i], a1);
		}
		_mm512_storeu_ps(y + (j0 - r0), a0);
		_mm512_storeu_ps(y + (j0 - r0) + 16, a1);
	}
}

INL T512 void qca512(float *y, size_t r0, size_t s0, size_t s1, const void *const *cols,
		     size_t off, enum sf_dtype dt, const float *X, size_t n)
{
	size_t k = 0;
	for (; k + 4 <= n; k += 4) {
		if (k + 8 <= n)
			q_prefetch(cols + k + 4, off, dt, s0, s1);
		qca512_cols(y, r0, s0, s1, cols + k, off, dt, X + k, 4);
	}
	for (; k < n; k++)
		qca512_cols(y, r0, s0, s1, cols + k, off, dt, X + k, 1);
}

/* Each block that meets [j0, j0 + rows) dequantized once, the halves
 * inside stored. */
static T512 void qwiden_avx512(float *w, const uint8_t *col, enum sf_dtype dt, size_t j0,
			       size_t rows)
{
	for (size_t j = j0 / SF_QBLOCK * SF_QBLOCK; j < j0 + rows; j += SF_QBLOCK) {
		__m512 half[2];
		deq32_512(q_block(col, dt, j), dt, &half[0], &half[1]);
		for (size_t h = 0; h < 2; h++)
			if (j + 16 * h >= j0 && j + 16 * h < j0 + rows)
				_mm512_store_ps(w + (j + 16 * h - j0), half[h]);
	}
}

static T512 void qcolaccum_avx512(float *Y, size_t ldy, size_t r0, size_t r1,
				  const void *const *cols, size_t off, enum sf_dtype dt,
				  const float *X, const uint32_t *sel, size_t ldx, size_t T,
				  size_t n)
{
	if (sel) {
		qpass(Y, ldy, r0, r1, cols, off, dt, X, sel, ldx, T, n, qwiden_avx512);
		return;
	}
	size_t s0 = (r0 + SF_QBLOCK - 1) / SF_QBLOCK * SF_QBLOCK, s1 = r1 / SF_QBLOCK * SF_QBLOCK;
	if (s0 < s1 && dt == SF_DTYPE_Q8)
		qca512(Y, r0, s0, s1, cols, off, SF_DTYPE_Q8, X, n);
	else if (s0 < s1)
		qca512(Y, r0, s0, s1, cols, off, SF_DTYPE_Q4, X, n);
	edges_ref(Y, ldy, r0, r1, s0, s1, cols, off, dt, X, sel, ldx, T, n);
}

#endif /* __x86_64__ */

// ----------------------------------------------------------------------------
// the family's table, indexed by enum sf_isa (engine/cpu.h)

typedef void qcolaccum_fn(float *Y, size_t ldy, size_t r0, size_t r1, const void *const *cols,
			  size_t off, enum sf_dtype dt, const float *X, const uint32_t *sel,
			  size_t ldx, size_t T, size_t n);

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

void sf_qcolaccum(float *Y, size_t ldy, size_t r0, size_t r1, const void *const *cols,
		  size_t off, enum sf_dtype dt, const float *X, const uint32_t *sel, size_t ldx,
		  size_t T, size_t n)
{
	if (r0 < r1 && n && T)
		qcolaccum_table[sf_cpu_isa()](Y, ldy, r0, r1, cols, off, dt, X, sel, ldx, T, n);
}

void sf_colaccum_span(float *Y, size_t ldy, size_t r0, size_t r1, const void *const *cols,
		      size_t off, enum sf_dtype dt, const float *X, const uint32_t *sel,
		      size_t ldx, size_t T, size_t n)
{
	if (sf_dtype_is_block(dt)) {
		sf_qcolaccum(Y, ldy, r0, r1, cols, off, dt, X, sel, ldx, T, n);
		return;
	}
	off += r0 * sf_dtype_size(dt);
	if (!sel)
		sf_colaccum(Y, r1 - r0, cols, off, dt, X, n);
	else
		sf_colaccum_batch(Y, ldy, r1 - r0, cols, off, dt, X, sel, ldx, T, n);
}
