/* Row products over q8, q6 and q4 rows (see kernels_qrows.h): the _ref,
 * AVX2 (a block a vector, two vectors of sums), AVX-512 with VNNI and
 * VBMI (two blocks a vector), and NEON with SDOT or without (a block two
 * vectors, four of sums). Tokens go a few at a time: their inputs
 * rounded once per call, each row's codes unpacked once for all of them. */
#include "engine/kernels_qrows.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/quant.h"
#include "engine/cpu.h"
#include "engine/kernels_q.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "engine/amx.h"
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

/* Rounded inputs live on the stack: at most this many bytes of codes, so
 * a call rounds 32 tokens of 2,048 inputs at once, and the widest rows a
 * config allows (65536) one at a time. The row kernels take them
 * QR_TOKENS at a time, over a span of rows of about QR_SPAN bytes, which
 * the caches keep while the span's tokens go by. */
#define QR_TOKENS 4
#define QR_CODES 65536
#define QR_SPAN 32768
#define QR_SUMS 16	/* float sums a row */
#define QR_AHEAD 4096	/* bytes the row kernels prefetch ahead (AVX2: 2 KiB was
			 * 6% slower on the Xeon where tiles gain by it) */

struct qr_store {
	int8_t q[QR_CODES];		/* (tokens, cols) */
	float d[QR_CODES / SF_QBLOCK];	/* (tokens, cols / 32) */
	int32_t s[QR_CODES / SF_QBLOCK];	/* (tokens, cols / 32) each block's sum of q */
};

/* nt <= QR_TOKENS (tiles: QT_TOKENS) tokens' rounded inputs: codes (nt,
 * cols), block scales and sums (nt, cols / 32). */
struct qr_input {
	const int8_t *q;
	const float *d;
	const int32_t *s;
	size_t nt;
	size_t ahead;	/* bytes the kernels prefetch ahead: rows QR_AHEAD, tiles
			 * sf_cpu_ahead() */
};

/* Tokens x_t (t < nt) rounded per block as kernels_qrows.h says, into
 * codes qs (nt, cols), scales ds and sums ss (nt, cols / 32) (fmaxf
 * and nearbyintf inline: libm's calls were a tenth of a prompt). */
static void qr_round_to(int8_t *qs, float *ds, int32_t *ss, const float *x, size_t ldx,
			size_t nt, size_t cols)
{
	size_t nb = cols / SF_QBLOCK;

	for (size_t t = 0; t < nt; t++)
		for (size_t b = 0; b < nb; b++) {
			const float *v = x + t * ldx + b * SF_QBLOCK;
			int8_t *q = qs + t * cols + b * SF_QBLOCK;
			float amax = 0.0f;
			int32_t sum = 0;
			int nan = 0;
			/* a plain maximum and a NaN test apart, the test of id
			 * out of the rounding loop: as sf_q8_amax and a test
			 * each code, -m Q4_0's prompt took 10% longer */
			for (size_t i = 0; i < SF_QBLOCK; i++) {
				float a = fabsf(v[i]);
				amax = a > amax ? a : amax;
				nan |= a != a;
			}
			amax = nan ? NAN : amax;
			/* id 0: codes 0; a non-finite input leaves d, and so
			 * the block's products, non-finite */
			float id = sf_q8_inv_scale(amax);
			if (id == 0.0f)
				memset(q, 0, SF_QBLOCK);
			else
				for (size_t i = 0; i < SF_QBLOCK; i++) {
					q[i] = (int8_t)sf_round_even(v[i] * id);
					sum += q[i];
				}
			ds[t * nb + b] = amax / 127.0f;
			ss[t * nb + b] = sum;
		}
}

/* sum[i] += sum[i + w] for w = 8, 4, 2, 1: sum[0]. */
static float qr_reduce_ref(float *sum)
{
	for (size_t w = QR_SUMS / 2; w; w /= 2)
		for (size_t i = 0; i < w; i++)
			sum[i] += sum[i + w];
	return sum[0];
}

static void qr_rows_ref(float *y, size_t ldy, const uint8_t *W, enum sf_dtype dt, size_t cols,
			const struct qr_input *in, size_t r0, size_t r1)
{
	size_t nb = cols / SF_QBLOCK, rb = (size_t)sf_dtype_col_bytes(dt, cols);

	for (size_t r = r0; r < r1; r++) {
		const uint8_t *row = W + r * rb;
		for (size_t t = 0; t < in->nt; t++) {
			const int8_t *q = in->q + t * cols;
			float sum[QR_SUMS] = { 0 };
			for (size_t b = 0; b < nb; b++) {
				const uint8_t *c = sf_q_codes_at(row, dt, cols, b);
				float s = sf_q_int_scale(row, dt, b) * in->d[t * nb + b];
				for (size_t g = 0; g < 8; g++) {
					int32_t isum = 0;
					for (size_t i = 4 * g; i < 4 * g + 4; i++)
						isum += sf_q_int_code(c, dt, i) * q[b * SF_QBLOCK + i];
					float *a = &sum[(b % 2) * 8 + g];
					*a = fmaf((float)isum, s, *a);
				}
			}
			y[t * ldy + r - r0] = qr_reduce_ref(sum);
		}
	}
}

typedef void qr_rows_fn(float *y, size_t ldy, const uint8_t *W, enum sf_dtype dt, size_t cols,
			const struct qr_input *in, size_t r0, size_t r1);

/* The tokens through fn: as many rounded at once as the store holds,
 * then span by span of rows, QR_TOKENS tokens at a time. */
static void qr_drive(qr_rows_fn *fn, float *y, size_t ldy, const void *W, enum sf_dtype dt,
		     size_t cols, const float *x, size_t ldx, size_t T, size_t r0, size_t r1)
{
	struct qr_store st;
	size_t step = QR_CODES / cols, nb = cols / SF_QBLOCK;
	size_t span = QR_SPAN / (size_t)sf_dtype_col_bytes(dt, cols) / 4 * 4;

	span = span ? span : 4;
	for (size_t t0 = 0; t0 < T; t0 += step) {
		size_t nt = T - t0 < step ? T - t0 : step;
		qr_round_to(st.q, st.d, st.s, x + t0 * ldx, ldx, nt, cols);
		for (size_t a = r0, b; a < r1; a = b) {
			b = nt <= QR_TOKENS || r1 - a < span ? r1 : a + span;
			for (size_t t = 0; t < nt; t += QR_TOKENS) {
				struct qr_input in = { st.q + t * cols, st.d + t * nb, st.s + t * nb,
						       nt - t < QR_TOKENS ? nt - t : QR_TOKENS,
						       QR_AHEAD };
				fn(y + (t0 + t) * ldy + (a - r0), ldy, W, dt, cols, &in, a, b);
			}
		}
	}
}

// ----------------------------------------------------------------------------
// tiles: SF_QTILE rows a vector, a block's integer sums whole, one fmaf
// a block

#define QT_TOKENS 4

/* The tile's SF_QTILE rows for the nt tokens: y[t * ldy + r]; dt Q8 or Q4. */
typedef void qt_tile_fn(float *y, size_t ldy, const uint8_t *tile, enum sf_dtype dt,
			size_t cols, const struct qr_input *in);

static void qt_tile_ref(float *y, size_t ldy, const uint8_t *tile, enum sf_dtype dt,
			size_t cols, const struct qr_input *in)
{
	size_t nb = cols / SF_QBLOCK, bb = sf_qtile_block_bytes(dt);

	for (size_t t = 0; t < in->nt; t++)
		for (size_t r = 0; r < SF_QTILE; r++) {
			float sum = 0.0f;
			for (size_t b = 0; b < nb; b++) {
				const uint8_t *p = tile + b * bb;
				const int8_t *q = in->q + t * cols + b * SF_QBLOCK;
				int32_t isum = 0;
				for (size_t c = 0; c < SF_QBLOCK; c++)
					isum += sf_qtile_code(p + 2 * SF_QTILE, dt, r, c) * q[c];
				sum = fmaf((float)isum, sf_quant_scale(p + 2 * r, 0) * in->d[t * nb + b],
					   sum);
			}
			y[t * ldy + r] = sum;
		}
}

/* Q6's tiles keep its rows' floats (kernels_qrows.h): a level without a
 * kernel of its own for them unpacks each row of the tile and takes its
 * rows kernel, fn. */
static void q6t_rows(qr_rows_fn *fn, float *y, size_t ldy, const uint8_t *tile, size_t cols,
		     const struct qr_input *in)
{
	uint8_t row[QR_CODES / SF_QBLOCK * SF_Q6_BLOCK_BYTES];	/* cols <= QR_CODES */

	for (size_t r = 0; r < SF_QTILE; r++) {
		sf_qtile_unpack_row(row, tile, SF_DTYPE_Q6, cols, r);
		fn(y + r, ldy, row, SF_DTYPE_Q6, cols, in, 0, 1);
	}
}

#define Q6T_BY_ROWS(name, rows_fn)                                                              \
	static void name(float *y, size_t ldy, const uint8_t *tile, enum sf_dtype dt,             \
			 size_t cols, const struct qr_input *in)                                  \
	{                                                                                         \
		(void)dt;                                                                         \
		q6t_rows(rows_fn, y, ldy, tile, cols, in);                                        \
	}
Q6T_BY_ROWS(q6t_tile_ref, qr_rows_ref)

/* Where a driver rounds its tokens: room for codes bytes of codes (the
 * tokens times cols), their block scales and sums. */
struct qt_room {
	int8_t *q;
	float *d;
	int32_t *s;
	size_t codes;
};

/* The tokens through fn, at most group a call: as many rounded at once as
 * the room holds (a multiple of group where it holds a group, else one
 * token or more), then tile by tile, group tokens at a time while the
 * tile stays in the caches. A tile that [r0, r1) cuts is computed whole
 * aside, and its rows in the range copied. */
#define QT_GROUP_MAX 16
static void qt_drive(qt_tile_fn *fn, size_t group, const struct qt_room *room, float *y,
		     size_t ldy, const void *W, enum sf_dtype dt, size_t cols, const float *x,
		     size_t ldx, size_t T, size_t r0, size_t r1)
{
	const enum sf_dtype bt = sf_dtype_untiled(dt);
	size_t step = room->codes / cols, nb = cols / SF_QBLOCK;
	size_t tb = nb * sf_qtile_block_bytes(bt), ahead = sf_cpu_ahead();
	float part[QT_GROUP_MAX * SF_QTILE];

	step = step >= group ? step / group * group : step;
	for (size_t t0 = 0; t0 < T; t0 += step) {
		size_t nt = T - t0 < step ? T - t0 : step;
		qr_round_to(room->q, room->d, room->s, x + t0 * ldx, ldx, nt, cols);
		for (size_t i = r0 / SF_QTILE; i * SF_QTILE < r1; i++) {
			size_t a = i * SF_QTILE > r0 ? i * SF_QTILE : r0;
			size_t b = (i + 1) * SF_QTILE < r1 ? (i + 1) * SF_QTILE : r1;
			const uint8_t *tile = (const uint8_t *)W + i * tb;
			for (size_t t = 0; t < nt; t += group) {
				struct qr_input in = { room->q + t * cols, room->d + t * nb,
						       room->s + t * nb,
						       nt - t < group ? nt - t : group, ahead };
				float *yt = y + (t0 + t) * ldy + (a - r0);
				if (b - a == SF_QTILE) {
					fn(yt, ldy, tile, bt, cols, &in);
					continue;
				}
				fn(part, SF_QTILE, tile, bt, cols, &in);
				for (size_t u = 0; u < in.nt; u++)
					memcpy(yt + u * ldy, part + u * SF_QTILE + (a - i * SF_QTILE),
					       (b - a) * sizeof(float));
			}
		}
	}
}

/* qt_drive with QT_TOKENS a call, rounding into a qr_store. */
static void qt_drive_store(qt_tile_fn *fn, float *y, size_t ldy, const void *W, enum sf_dtype dt,
			   size_t cols, const float *x, size_t ldx, size_t T, size_t r0, size_t r1)
{
	struct qr_store st;
	const struct qt_room room = { st.q, st.d, st.s, QR_CODES };
	qt_drive(fn, QT_TOKENS, &room, y, ldy, W, dt, cols, x, ldx, T, r0, r1);
}

void sf_qmatmul_rows_ref(float *y, size_t ldy, const void *W, enum sf_dtype dt, size_t cols,
			 const float *x, size_t ldx, size_t T, size_t r0, size_t r1)
{
	if (dt == SF_DTYPE_Q6X16)
		qt_drive_store(q6t_tile_ref, y, ldy, W, dt, cols, x, ldx, T, r0, r1);
	else if (sf_dtype_untiled(dt) != dt)
		qt_drive_store(qt_tile_ref, y, ldy, W, dt, cols, x, ldx, T, r0, r1);
	else
		qr_drive(qr_rows_ref, y, ldy, W, dt, cols, x, ldx, T, r0, r1);
}

#if defined(__x86_64__)

#define INL static inline __attribute__((always_inline))

// ----------------------------------------------------------------------------
// AVX2: a block's 32 codes as signed bytes (less their bias), their
// absolute values times the inputs given their signs by vpmaddubsw, then
// vpmaddwd, give the eight runs' sums; blocks alternate between two
// vectors of sums

#define T256 __attribute__((target("avx2,fma,f16c")))

/* Block b's codes less sf_q_bias (MXFP4: sf_q_int_code's), as signed
 * bytes. */
INL T256 __m256i qr_unpack256(const uint8_t *c, enum sf_dtype dt)
{
	if (dt == SF_DTYPE_Q8)
		return _mm256_loadu_si256((const __m256i *)c);
	__m128i v = _mm_loadu_si128((const __m128i *)c);
	__m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v),
				     _mm256_set1_epi8(15));
	if (dt == SF_DTYPE_MXFP4)
		return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(
						   (const __m128i *)sf_e2m1_twice)), u);
	if (dt == SF_DTYPE_Q6) {
		int64_t h;
		memcpy(&h, c + 16, 8);
		__m256i hi = _mm256_srlv_epi64(_mm256_set1_epi64x(h),
					       _mm256_setr_epi64x(0, 2, 4, 6));
		u = _mm256_or_si256(u, _mm256_slli_epi16(_mm256_and_si256(hi, _mm256_set1_epi8(3)),
							 4));
	}
	return _mm256_sub_epi8(u, _mm256_set1_epi8((char)sf_q_bias(dt)));
}

/* Eight blocks' scales from block b0 of a row (sf_q_int_scale); past the
 * last scale the load reads codes (the row goes on), in lanes no block
 * uses. MXFP4's: 2^(e - 127) from its bits (e = 0, 2^-127, subnormal),
 * halved. */
INL T256 __m256 qr_scales256(const uint8_t *row, enum sf_dtype dt, size_t b0)
{
	if (dt != SF_DTYPE_MXFP4)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sf_q_scale_at(row, b0)));
	__m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + b0)));
	__m256i bits = _mm256_blendv_epi8(_mm256_slli_epi32(e, 23), _mm256_set1_epi32(0x00400000),
					  _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
	return _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0.5f));
}

INL T256 float qr_reduce256(__m256 a0, __m256 a1)
{
	__m256 a = _mm256_add_ps(a0, a1);
	__m128 v = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
	v = _mm_add_ps(v, _mm_movehl_ps(v, v));
	return _mm_cvtss_f32(_mm_add_ss(v, _mm_shuffle_ps(v, v, 1)));
}

/* One row for the nt tokens: eight blocks' scales times each token's
 * input scales at a time (the _ref's products), then per block and
 * token one integer dot product, exact: each |code - bias| * |q| pair
 * stays below 2^15. */
INL T256 void qr_row256(float *y, size_t ldy, const uint8_t *row, enum sf_dtype dt,
			size_t cols, const struct qr_input *in, size_t nt)
{
	const size_t nb = cols / SF_QBLOCK;
	const __m256i ones = _mm256_set1_epi16(1);
	__m256 acc[QR_TOKENS][2];
	float s8[QR_TOKENS][8];

	for (size_t t = 0; t < nt; t++)
		acc[t][0] = acc[t][1] = _mm256_setzero_ps();
	for (size_t b0 = 0; b0 < nb; b0 += 8) {
		size_t n8 = nb - b0 < 8 ? nb - b0 : 8;
		__m256i k8 = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n8),
						_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
		__m256 ws = qr_scales256(row, dt, b0);
		for (size_t t = 0; t < nt; t++)
			_mm256_storeu_ps(s8[t], _mm256_mul_ps(ws, _mm256_maskload_ps(
							in->d + t * nb + b0, k8)));
		for (size_t i = 0; i < n8; i++) {
			size_t b = b0 + i;
			const uint8_t *c = sf_q_codes_at(row, dt, cols, b);
			/* the rows stream: ask for the bytes a row ahead */
			_mm_prefetch((const char *)c + in->ahead, _MM_HINT_T0);
			__m256i w = qr_unpack256(c, dt), aw = _mm256_abs_epi8(w);
			for (size_t t = 0; t < nt; t++) {
				__m256i q = _mm256_loadu_si256((const __m256i *)(in->q + t * cols +
										   b * SF_QBLOCK));
				__m256i isum = _mm256_madd_epi16(
					_mm256_maddubs_epi16(aw, _mm256_sign_epi8(q, w)), ones);
				acc[t][b % 2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
								_mm256_set1_ps(s8[t][i]), acc[t][b % 2]);
			}
		}
	}
	for (size_t t = 0; t < nt; t++)
		y[t * ldy] = qr_reduce256(acc[t][0], acc[t][1]);
}

static T256 void qr_rows_avx2(float *y, size_t ldy, const uint8_t *W, enum sf_dtype dt,
			      size_t cols, const struct qr_input *in, size_t r0, size_t r1)
{
	size_t rb = (size_t)sf_dtype_col_bytes(dt, cols);

	for (size_t r = r0; r < r1; r++) {
		if (in->nt == 1)
			qr_row256(y + r - r0, ldy, W + r * rb, dt, cols, in, 1);
		else
			qr_row256(y + r - r0, ldy, W + r * rb, dt, cols, in, in->nt);
	}
}

/* A tile as two halves of eight rows, a lane a row: per group of four
 * columns one vpmaddubsw of the group's codes (q8: their absolute values,
 * the inputs given their signs) and the token's four inputs broadcast,
 * then vpmaddwd; q4's codes + 8, the bias's share taken off first. */
INL T256 void qt_tile256(float *y, size_t ldy, const uint8_t *tile, const enum sf_dtype dt,
			 size_t cols, const struct qr_input *in, size_t nt)
{
	const size_t nb = cols / SF_QBLOCK, bb = sf_qtile_block_bytes(dt);
	const __m256i ones = _mm256_set1_epi16(1), nib = _mm256_set1_epi8(15);

	for (size_t h = 0; h < 2; h++) {
		__m256 acc[QT_TOKENS];
		for (size_t t = 0; t < nt; t++)
			acc[t] = _mm256_setzero_ps();
		for (size_t b = 0; b < nb; b++) {
			const uint8_t *p = tile + b * bb, *c = p + 2 * SF_QTILE + 32 * h;
			_mm_prefetch((const char *)p + in->ahead, _MM_HINT_T0);
			_mm_prefetch((const char *)p + in->ahead + 64 * (1 + 2 * h), _MM_HINT_T0);
			__m256 ws = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
			__m256i w[8];
#pragma GCC unroll 4
			for (int g = 0; g < 4; g++) {
				if (dt == SF_DTYPE_Q8) {
					w[g] = _mm256_loadu_si256((const __m256i *)(c + 64 * g));
					w[g + 4] = _mm256_loadu_si256((const __m256i *)(c + 64 * g + 256));
					continue;
				}
				__m256i v = _mm256_loadu_si256((const __m256i *)(c + 64 * g));
				w[g] = _mm256_and_si256(v, nib);
				w[g + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
			}
			for (size_t t = 0; t < nt; t++) {
				const int8_t *q = in->q + t * cols + b * SF_QBLOCK;
				int32_t quad[8];
				memcpy(quad, q, sizeof(quad));
				__m256i isum = _mm256_set1_epi32(dt == SF_DTYPE_Q8 ? 0
								 : -8 * in->s[t * nb + b]);
				/* q4's eight products in 16 bits (a pair at most
				 * 2 * 15 * 127, eight 30,480), widened once */
				__m256i s16 = _mm256_setzero_si256();
#pragma GCC unroll 8
				for (int g = 0; g < 8; g++) {
					__m256i qb = _mm256_set1_epi32(quad[g]);
					if (dt == SF_DTYPE_Q8)
						isum = _mm256_add_epi32(isum, _mm256_madd_epi16(
							_mm256_maddubs_epi16(_mm256_abs_epi8(w[g]),
									     _mm256_sign_epi8(qb, w[g])),
							ones));
					else
						s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(w[g], qb));
				}
				if (dt == SF_DTYPE_Q4)
					isum = _mm256_add_epi32(isum, _mm256_madd_epi16(s16, ones));
				__m256 d = _mm256_mul_ps(ws, _mm256_set1_ps(in->d[t * nb + b]));
				acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), d, acc[t]);
			}
		}
		for (size_t t = 0; t < nt; t++)
			_mm256_storeu_ps(y + t * ldy + 8 * h, acc[t]);
	}
}

static T256 void qt_tiles_avx2(float *y, size_t ldy, const uint8_t *tile, enum sf_dtype dt,
			       size_t cols, const struct qr_input *in)
{
	if (dt == SF_DTYPE_Q8)
		qt_tile256(y, ldy, tile, SF_DTYPE_Q8, cols, in, in->nt);
	else
		qt_tile256(y, ldy, tile, SF_DTYPE_Q4, cols, in, in->nt);
}

/* Q6's tiles: sixteen sums a row do not fit AVX2's sixteen registers */
Q6T_BY_ROWS(q6t_tile_avx2, qr_rows_avx2)

// ----------------------------------------------------------------------------
// AVX-512 with VNNI and VBMI: two blocks' 64 codes a vector, unpacked with
// vpermb, plus their bias (q8: 128), and vpdpbusd; the bias's share,
// vpdpbusd of the bias on the same inputs, taken off

#define T512I __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni," \
					  "avx512vbmi,fma,f16c")))

/* What MXFP4's integer codes (sf_e2m1_twice, -12 to 12) are made
 * unsigned by, and that table so biased: a constant, where adding the
 * bias in qr_unpack512 cost its row kernel 7% (not hoisted). */
#define QR_MXFP4_BIAS 12
static const uint8_t qr_e2m1_biased[16] = { 12, 13, 14, 15, 16, 18, 20, 24,
					    12, 11, 10, 9, 8, 6, 4, 0 };

/* What the unsigned bytes of qr_unpack512 are, the codes plus. */
INL T512I __m512i qr_bias512(enum sf_dtype dt)
{
	return _mm512_set1_epi8((char)(dt == SF_DTYPE_Q8 ? 0x80 : dt == SF_DTYPE_MXFP4
							? QR_MXFP4_BIAS : sf_q_bias(dt)));
}

/* Sixteen blocks' scales from block b0 of a row (the blocks of k16), as
 * qr_scales256. */
INL T512I __m512 qr_scales512(const uint8_t *row, enum sf_dtype dt, size_t b0, __mmask16 k16)
{
	if (dt != SF_DTYPE_MXFP4)
		return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k16, sf_q_scale_at(row, b0)));
	__m512i e = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k16, row + b0));
	__m512i bits = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
					       _mm512_slli_epi32(e, 23),
					       _mm512_set1_epi32(0x00400000));
	return _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(0.5f));
}

/* Blocks b and b + 1 (only b when !two) as 64 unsigned bytes. */
INL T512I __m512i qr_unpack512(const uint8_t *c, enum sf_dtype dt, int two)
{
	const size_t cb = sf_q_code_bytes(dt);
	__m512i v = _mm512_maskz_loadu_epi8(two ? ~0ull >> (64 - 2 * cb) : ~0ull >> (64 - cb), c);

	if (dt == SF_DTYPE_Q8)
		return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
	/* each block's 16 nibble bytes twice, the second copy shifted by 4 */
	__m512i idx = dt != SF_DTYPE_Q6
		? _mm512_set_epi8(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
				  31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
				  15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
				  15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
		: _mm512_set_epi8(39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24,
				  39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24,
				  15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0,
				  15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
	__m512i p = _mm512_permutexvar_epi8(idx, v);
	__m512i u = _mm512_and_si512(_mm512_mask_blend_epi8(0xffff0000ffff0000ull, p,
							    _mm512_srli_epi16(p, 4)),
				     _mm512_set1_epi8(15));
	if (dt == SF_DTYPE_Q4)
		return u;
	if (dt == SF_DTYPE_MXFP4)
		return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128(
						   (const __m128i *)qr_e2m1_biased)), u);
	/* q6: element e of a block takes bits 2k of high byte e % 8, k = e / 8 */
	__m512i hidx = _mm512_set_epi8(47, 46, 45, 44, 43, 42, 41, 40, 47, 46, 45, 44, 43, 42, 41, 40,
				       47, 46, 45, 44, 43, 42, 41, 40, 47, 46, 45, 44, 43, 42, 41, 40,
				       23, 22, 21, 20, 19, 18, 17, 16, 23, 22, 21, 20, 19, 18, 17, 16,
				       23, 22, 21, 20, 19, 18, 17, 16, 23, 22, 21, 20, 19, 18, 17, 16);
	__m512i sh = _mm512_set_epi16(6, 6, 6, 6, 4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0,
				      6, 6, 6, 6, 4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0);
	__m512i h = _mm512_srlv_epi16(_mm512_permutexvar_epi8(hidx, v), sh);
	h = _mm512_slli_epi16(_mm512_and_si512(h, _mm512_set1_epi8(3)), 4);
	return _mm512_or_si512(u, h);
}

INL T512I float qr_reduce512(__m512 a)
{
	__m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
	__m128 v = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
	v = _mm_add_ps(v, _mm_movehl_ps(v, v));
	return _mm_cvtss_f32(_mm_add_ss(v, _mm_shuffle_ps(v, v, 1)));
}

INL T512I void qr_row512(float *y, size_t ldy, const uint8_t *row, enum sf_dtype dt,
			 size_t cols, const struct qr_input *in, size_t nt)
{
	const size_t nb = cols / SF_QBLOCK, cb = sf_q_code_bytes(dt);
	const __m512i bias = qr_bias512(dt);
	const uint8_t *codes = sf_q_codes_at(row, dt, cols, 0);
	__m512 acc[QR_TOKENS];

	for (size_t t = 0; t < nt; t++)
		acc[t] = _mm512_setzero_ps();
	for (size_t b0 = 0; b0 < nb; b0 += 16) {
		size_t n16 = nb - b0 < 16 ? nb - b0 : 16;
		__mmask16 k16 = (__mmask16)(0xffffu >> (16 - n16));
		__m512 ws = qr_scales512(row, dt, b0, k16);
		__m512 s16[QR_TOKENS];
		for (size_t t = 0; t < nt; t++)
			s16[t] = _mm512_mul_ps(ws, _mm512_maskz_loadu_ps(k16, in->d + t * nb + b0));
		for (size_t i = 0; i < n16; i += 2) {
			size_t b = b0 + i;
			int two = i + 1 < n16;
			/* the rows stream: ask for the bytes a row ahead */
			_mm_prefetch((const char *)(codes + b * cb) + in->ahead, _MM_HINT_T0);
			__m512i u = qr_unpack512(codes + b * cb, dt, two);
			__m512i pick = _mm512_castsi256_si512(_mm256_set1_epi32((int)i));
			pick = _mm512_inserti32x8(pick, _mm256_set1_epi32((int)i + 1), 1);
			__mmask64 kq = two ? ~0ull : ~0ull >> 32;
			for (size_t t = 0; t < nt; t++) {
				__m512i q = _mm512_maskz_loadu_epi8(kq, in->q + t * cols + b * SF_QBLOCK);
				__m512i isum = _mm512_sub_epi32(
					_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, q),
					_mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, q));
				acc[t] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(isum),
							       _mm512_permutexvar_ps(pick, s16[t]),
							       acc[t], two ? 0xffff : 0x00ff);
			}
		}
	}
	for (size_t t = 0; t < nt; t++)
		y[t * ldy] = qr_reduce512(acc[t]);
}

/* QR_ROWS rows from row0 (rb bytes apart) for NT tokens: each pair of
 * blocks' codes unpacked once a row for the tokens, and each token's
 * inputs, with their bias's share (the same for every row), once for the
 * rows. A row's floats are qr_row512's: the same integer sums, and the
 * same scale times input scale. */
#define QR_ROWS 4
INL T512I void qr_tile512(float *y, size_t ldy, const uint8_t *row0, size_t rb,
			  enum sf_dtype dt, size_t cols, const struct qr_input *in, const int NT)
{
	const size_t nb = cols / SF_QBLOCK;
	const __m512i bias = qr_bias512(dt);
	__m512 acc[QR_ROWS][QR_TOKENS];

#pragma GCC unroll 4
	for (int r = 0; r < QR_ROWS; r++)
#pragma GCC unroll 4
		for (int t = 0; t < NT; t++)
			acc[r][t] = _mm512_setzero_ps();
	for (size_t b0 = 0; b0 < nb; b0 += 16) {
		size_t n16 = nb - b0 < 16 ? nb - b0 : 16;
		__mmask16 k16 = (__mmask16)(0xffffu >> (16 - n16));
		__m512 ws[QR_ROWS], d16[QR_TOKENS];
#pragma GCC unroll 4
		for (int r = 0; r < QR_ROWS; r++)
			ws[r] = qr_scales512(row0 + r * rb, dt, b0, k16);
#pragma GCC unroll 4
		for (int t = 0; t < NT; t++)
			d16[t] = _mm512_maskz_loadu_ps(k16, in->d + (size_t)t * nb + b0);
		for (size_t i = 0; i < n16; i += 2) {
			size_t b = b0 + i;
			int two = i + 1 < n16;
			__m512i pick = _mm512_castsi256_si512(_mm256_set1_epi32((int)i));
			pick = _mm512_inserti32x8(pick, _mm256_set1_epi32((int)i + 1), 1);
			__mmask64 kq = two ? ~0ull : ~0ull >> 32;
			__mmask16 kf = two ? 0xffff : 0x00ff;
			__m512i u[QR_ROWS];
			__m512 wp[QR_ROWS];
#pragma GCC unroll 4
			for (int r = 0; r < QR_ROWS; r++) {
				const uint8_t *c = sf_q_codes_at(row0 + r * rb, dt, cols, b);
				_mm_prefetch((const char *)c + QR_ROWS * rb, _MM_HINT_T0);
				u[r] = qr_unpack512(c, dt, two);
				wp[r] = _mm512_permutexvar_ps(pick, ws[r]);
			}
#pragma GCC unroll 4
			for (int t = 0; t < NT; t++) {
				__m512i q = _mm512_maskz_loadu_epi8(kq, in->q + (size_t)t * cols +
									b * SF_QBLOCK);
				__m512i off = _mm512_sub_epi32(_mm512_setzero_si512(),
					_mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, q));
				__m512 dp = _mm512_permutexvar_ps(pick, d16[t]);
#pragma GCC unroll 4
				for (int r = 0; r < QR_ROWS; r++) {
					__m512i isum = _mm512_dpbusd_epi32(off, u[r], q);
					acc[r][t] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(isum),
									  _mm512_mul_ps(wp[r], dp),
									  acc[r][t], kf);
				}
			}
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < QR_ROWS; r++)
#pragma GCC unroll 4
		for (int t = 0; t < NT; t++)
			y[(size_t)t * ldy + (size_t)r] = qr_reduce512(acc[r][t]);
}

static T512I void qr_rows_avx512(float *y, size_t ldy, const uint8_t *W, enum sf_dtype dt,
				 size_t cols, const struct qr_input *in, size_t r0, size_t r1)
{
	size_t rb = (size_t)sf_dtype_col_bytes(dt, cols), r = r0;

	/* one token streams row by row: four rows at once read slower */
	for (; in->nt > 1 && r + QR_ROWS <= r1; r += QR_ROWS) {
		const uint8_t *w = W + r * rb;
		switch (in->nt) {
		case 2: qr_tile512(y + r - r0, ldy, w, rb, dt, cols, in, 2); break;
		case 3: qr_tile512(y + r - r0, ldy, w, rb, dt, cols, in, 3); break;
		default: qr_tile512(y + r - r0, ldy, w, rb, dt, cols, in, 4); break;
		}
	}
	for (; r < r1; r++) {
		if (in->nt == 1)
			qr_row512(y + r - r0, ldy, W + r * rb, dt, cols, in, 1);
		else
			qr_row512(y + r - r0, ldy, W + r * rb, dt, cols, in, in->nt);
	}
}

/* A tile a vector, a lane a row: per group of four columns one vpdpbusd
 * of its 64 codes (q8 + 128, q4 + 8) and the token's four inputs
 * broadcast, in two chains; the bias's share, bias times the block's sum
 * of inputs, taken off at the start. */
INL T512I void qt_tile512(float *y, size_t ldy, const uint8_t *tile, const enum sf_dtype dt,
			  size_t cols, const struct qr_input *in, const int NT)
{
	const size_t nb = cols / SF_QBLOCK, bb = sf_qtile_block_bytes(dt);
	const int bias = dt == SF_DTYPE_Q8 ? 128 : 8;
	const __m512i nib = _mm512_set1_epi8(15), flip = _mm512_set1_epi8((char)0x80);
	__m512 acc[QT_TOKENS];

#pragma GCC unroll 4
	for (int t = 0; t < NT; t++)
		acc[t] = _mm512_setzero_ps();
	for (size_t b = 0; b < nb; b++) {
		const uint8_t *p = tile + b * bb, *c = p + 2 * SF_QTILE;
		/* the tiles stream: ask for a block's bytes ahead */
		for (size_t at = 0; at < bb; at += 64)
			_mm_prefetch((const char *)p + in->ahead + at, _MM_HINT_T0);
		__m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
		__m512i w[8];
#pragma GCC unroll 4
		for (int g = 0; g < 4; g++) {
			if (dt == SF_DTYPE_Q8) {
				w[g] = _mm512_xor_si512(_mm512_loadu_si512(c + 64 * g), flip);
				w[g + 4] = _mm512_xor_si512(_mm512_loadu_si512(c + 64 * g + 256), flip);
				continue;
			}
			__m512i v = _mm512_loadu_si512(c + 64 * g);
			w[g] = _mm512_and_si512(v, nib);
			w[g + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
		}
#pragma GCC unroll 4
		for (int t = 0; t < NT; t++) {
			const int8_t *q = in->q + (size_t)t * cols + b * SF_QBLOCK;
			int32_t quad[8];
			memcpy(quad, q, sizeof(quad));
			__m512i s0 = _mm512_set1_epi32(-bias * in->s[(size_t)t * nb + b]);
			__m512i s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
			for (int g = 0; g < 4; g++) {
				s0 = _mm512_dpbusd_epi32(s0, w[g], _mm512_set1_epi32(quad[g]));
				s1 = _mm512_dpbusd_epi32(s1, w[g + 4], _mm512_set1_epi32(quad[g + 4]));
			}
			__m512 d = _mm512_mul_ps(ws, _mm512_set1_ps(in->d[(size_t)t * nb + b]));
			acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), d, acc[t]);
		}
	}
#pragma GCC unroll 4
	for (int t = 0; t < NT; t++)
		_mm512_storeu_ps(y + (size_t)t * ldy, acc[t]);
}

INL T512I void qt_tiles512(float *y, size_t ldy, const uint8_t *tile, const enum sf_dtype dt,
			   size_t cols, const struct qr_input *in)
{
	switch (in->nt) {
	case 1: qt_tile512(y, ldy, tile, dt, cols, in, 1); break;
	case 2: qt_tile512(y, ldy, tile, dt, cols, in, 2); break;
	case 3: qt_tile512(y, ldy, tile, dt, cols, in, 3); break;
	default: qt_tile512(y, ldy, tile, dt, cols, in, 4); break;
	}
}

static T512I void qt_tiles_avx512(float *y, size_t ldy, const uint8_t *tile, enum sf_dtype dt,
				  size_t cols, const struct qr_input *in)
{
	if (dt == SF_DTYPE_Q8)
		qt_tiles512(y, ldy, tile, SF_DTYPE_Q8, cols, in);
	else
		qt_tiles512(y, ldy, tile, SF_DTYPE_Q4, cols, in);
}

/* Q6's tiles, a lane a row, in its rows' float order: block b's run g of
 * four columns into sum (b % 2) * 8 + g of each row, the sixteen sums of
 * the tile's rows in sixteen vectors. A run's integer sum is one vpdpbusd
 * of its 64 codes (code + 32: the low nibbles of Q4's chunks, the high
 * bits moved to bits 4 and 5) and the token's four inputs broadcast,
 * started at -32 times their sum; the float steps qr_row512's. */
INL T512I void q6t_block512(__m512 *acc, const uint8_t *p, const int8_t *q, float d,
			    size_t ahead)
{
	const uint8_t *lo = p + 2 * SF_QTILE, *hi = lo + 4 * 64;
	const __m512i nib = _mm512_set1_epi8(15), top = _mm512_set1_epi8(0x30);
	int32_t quad[8], off[8];

	/* the tiles stream: ask for a block's bytes ahead */
	for (size_t at = 0; at < SF_QTILE * SF_Q6_BLOCK_BYTES; at += 64)
		_mm_prefetch((const char *)p + ahead + at, _MM_HINT_T0);
	__m512 sd = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)),
				  _mm512_set1_ps(d));
	__m256i qv = _mm256_loadu_si256((const __m256i *)q);
	memcpy(quad, q, sizeof(quad));
	_mm256_storeu_si256((__m256i *)off, _mm256_sub_epi32(_mm256_setzero_si256(),
		_mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(32), qv)));
	__m512i h[2] = { _mm512_loadu_si512(hi), _mm512_loadu_si512(hi + 64) };
#pragma GCC unroll 8
	for (int g = 0; g < 8; g++) {
		__m512i v = _mm512_loadu_si512(lo + 64 * (g % 4));
		v = g < 4 ? v : _mm512_srli_epi16(v, 4);
		/* group g's high bits at bits 2 (g % 4) of chunk g / 4, to 4 and 5 */
		__m512i x = h[g / 4];
		x = g % 4 < 2 ? _mm512_slli_epi16(x, 4 - 2 * (g % 4))
		  : g % 4 == 3 ? _mm512_srli_epi16(x, 2) : x;
		/* (v & 15) | (x & 0x30) */
		__m512i w = _mm512_ternarylogic_epi32(v, nib, _mm512_and_si512(x, top), 0xea);
		__m512i isum = _mm512_dpbusd_epi32(_mm512_set1_epi32(off[g]), w,
						   _mm512_set1_epi32(quad[g]));
		acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), sd, acc[g]);
	}
}

static T512I void q6t_tiles_avx512(float *y, size_t ldy, const uint8_t *tile, enum sf_dtype dt,
				   size_t cols, const struct qr_input *in)
{
	const size_t nb = cols / SF_QBLOCK, bb = sf_qtile_block_bytes(SF_DTYPE_Q6);

	(void)dt;
	for (size_t t = 0; t < in->nt; t++) {
		const int8_t *q = in->q + t * cols;
		const float *d = in->d + t * nb;
		__m512 acc[QR_SUMS];
		size_t b = 0;
#pragma GCC unroll 16
		for (int i = 0; i < QR_SUMS; i++)
			acc[i] = _mm512_setzero_ps();
		for (; b + 1 < nb; b += 2) {
			q6t_block512(acc, tile + b * bb, q + b * SF_QBLOCK, d[b], in->ahead);
			q6t_block512(acc + 8, tile + (b + 1) * bb, q + (b + 1) * SF_QBLOCK, d[b + 1],
				     in->ahead);
		}
		if (b < nb)
			q6t_block512(acc, tile + b * bb, q + b * SF_QBLOCK, d[b], in->ahead);
		/* qr_reduce_ref's adds, lane by lane */
#pragma GCC unroll 8
		for (int w = QR_SUMS / 2; w; w /= 2)
#pragma GCC unroll 8
			for (int i = 0; i < w; i++)
				acc[i] = _mm512_add_ps(acc[i], acc[i + w]);
		_mm512_storeu_ps(y + t * ldy, acc[0]);
	}
}

// ----------------------------------------------------------------------------
// AMX (inside the AVX-512 level, where the CPU has it): a pass's tiles 16
// tokens at a time, each block's int8 products of the 16 tokens by the
// tile's 16 rows in one TDPBSSD. Its sums are the vpdpbusd chains' own
// (exact integers), and each token's float steps qt_tile512's, in its
// order: the same floats as the AVX-512 tiles.

#define QT_AMX_TOKENS 16
#define QT_AMX_COLS 16384	/* wider rows take the AVX-512 tiles alone */
_Static_assert(QT_AMX_TOKENS <= QT_GROUP_MAX, "qt_drive's part holds a group");

/* A q4 tile's block b as TDPBSSD's second operand: eight rows of 64
 * signed bytes, row g byte 4r + c row r's code of column 4g + c (the
 * tile's groups, its nibbles split and their bias taken off; a q8
 * tile's block is that already). */
INL SF_TAMX void qt_amx_q4(int8_t (*w)[64], const uint8_t *c)
{
	const __m512i nib = _mm512_set1_epi8(15), eight = _mm512_set1_epi8(8);
	for (int g = 0; g < 4; g++) {
		__m512i v = _mm512_loadu_si512(c + 64 * g);
		_mm512_store_si512(w[g], _mm512_sub_epi8(_mm512_and_si512(v, nib), eight));
		_mm512_store_si512(w[g + 4], _mm512_sub_epi8(
			_mm512_and_si512(_mm512_srli_epi16(v, 4), nib), eight));
	}
}

/* The tile's 16 rows for in's 16 tokens (qt_tile_fn): y[t * ldy + r].
 * Tiles 0 (sums), 1 (codes), 2 (weights) as qt_amx_drive configured
 * them. */
static SF_TAMX void qt_tile_amx(float *y, size_t ldy, const uint8_t *tile, enum sf_dtype dt,
				size_t cols, const struct qr_input *in)
{
	const size_t nb = cols / SF_QBLOCK, bb = sf_qtile_block_bytes(dt), ahead = in->ahead;
	const int8_t *q = in->q;
	const float *d = in->d;
	int8_t w[8][64] __attribute__((aligned(64)));
	int32_t sums[QT_AMX_TOKENS][SF_QTILE] __attribute__((aligned(64)));
	__m512 acc[QT_AMX_TOKENS];

#pragma GCC unroll 16
	for (int t = 0; t < QT_AMX_TOKENS; t++)
		acc[t] = _mm512_setzero_ps();
	for (size_t b = 0; b < nb; b++) {
		const uint8_t *p = tile + b * bb;
		for (size_t at = 0; at < bb; at += 64)
			_mm_prefetch((const char *)p + ahead + at, _MM_HINT_T0);
		_tile_zero(0);
		_tile_loadd(1, q + b * SF_QBLOCK, cols);
		if (dt == SF_DTYPE_Q8) {
			_tile_loadd(2, p + 2 * SF_QTILE, 64);
		} else {
			qt_amx_q4(w, p + 2 * SF_QTILE);
			_tile_loadd(2, w, 64);
		}
		_tile_dpbssd(0, 1, 2);
		_tile_stored(0, sums, 64);
		__m512 ws = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
#pragma GCC unroll 16
		for (int t = 0; t < QT_AMX_TOKENS; t++) {
			__m512 dt_ = _mm512_mul_ps(ws, _mm512_set1_ps(d[(size_t)t * nb + b]));
			acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[t])), dt_,
						 acc[t]);
		}
	}
#pragma GCC unroll 16
	for (int t = 0; t < QT_AMX_TOKENS; t++)
		_mm512_storeu_ps(y + (size_t)t * ldy, acc[t]);
}

/* Tokens [0, T - T % 16) of a tiled matrix's rows [r0, r1) through
 * qt_drive, 16 a call; returns the tokens done, 0 where AMX is not to be
 * had. */
static SF_TAMX size_t qt_amx_drive(float *y, size_t ldy, const void *W, enum sf_dtype dt,
				   size_t cols, const float *x, size_t ldx, size_t T, size_t r0,
				   size_t r1)
{
	struct {	/* 320 KiB of the stack, as qr_store's 80 */
		int8_t q[QT_AMX_TOKENS * QT_AMX_COLS];
		float d[QT_AMX_TOKENS * QT_AMX_COLS / SF_QBLOCK];
		int32_t s[QT_AMX_TOKENS * QT_AMX_COLS / SF_QBLOCK];
	} st;
	/* 16 tokens rounded at a time, their codes in L1 while every tile
	 * goes by: rounding 128 at once (in L2) ran 5-10% slower */
	const struct qt_room room = { st.q, st.d, st.s, QT_AMX_TOKENS * cols };
	struct sf_amx_config cfg = { .palette = 1 };
	size_t done = T / QT_AMX_TOKENS * QT_AMX_TOKENS;

	if (!done || cols > QT_AMX_COLS || !sf_cpu_has_feature("amx-int8"))
		return 0;
	cfg.rows[0] = QT_AMX_TOKENS, cfg.colsb[0] = 4 * SF_QTILE;
	cfg.rows[1] = QT_AMX_TOKENS, cfg.colsb[1] = SF_QBLOCK;
	cfg.rows[2] = SF_QBLOCK / 4, cfg.colsb[2] = 4 * SF_QTILE;
	sf_amx_load_config(&cfg);
	qt_drive(qt_tile_amx, QT_AMX_TOKENS, &room, y, ldy, W, dt, cols, x, ldx, done, r0, r1);
	_tile_release();
	return done;
}

#endif /* __x86_64__ */

#if defined(__aarch64__)

// ----------------------------------------------------------------------------
// NEON: a block's 32 codes as two vectors of signed bytes; SDOT (the
// dot-product level) or widening multiplies (plain NEON) give the eight
// runs' sums; blocks alternate between two pairs of vectors of sums

#define INL static inline __attribute__((always_inline))
#define TDOT __attribute__((target("arch=armv8.2-a+dotprod")))

/* Block b's codes (at c), rows 0-15 into *lo, 16-31 into *hi. */
INL void qr_unpack_n(const uint8_t *c, enum sf_dtype dt, int8x16_t *lo, int8x16_t *hi)
{
	if (dt == SF_DTYPE_Q8) {
		*lo = vld1q_s8((const int8_t *)c);
		*hi = vld1q_s8((const int8_t *)c + 16);
		return;
	}
	uint8x16_t v = vld1q_u8(c), l = vandq_u8(v, vdupq_n_u8(15)), h = vshrq_n_u8(v, 4);
	if (dt == SF_DTYPE_MXFP4) {
		int8x16_t lut = vld1q_s8(sf_e2m1_twice);
		*lo = vqtbl1q_s8(lut, l);
		*hi = vqtbl1q_s8(lut, h);
		return;
	}
	if (dt == SF_DTYPE_Q6) {
		/* row i's high bits: bits 2 * (i / 8) of byte 16 + i % 8 */
		static const int8_t shl[16] = { 0, 0, 0, 0, 0, 0, 0, 0, -2, -2, -2, -2, -2, -2, -2, -2 };
		static const int8_t shh[16] = { -4, -4, -4, -4, -4, -4, -4, -4,
						-6, -6, -6, -6, -6, -6, -6, -6 };
		uint8x8_t h8 = vld1_u8(c + 16);
		uint8x16_t hv = vcombine_u8(h8, h8), three = vdupq_n_u8(3);
		l = vorrq_u8(l, vshlq_n_u8(vandq_u8(vshlq_u8(hv, vld1q_s8(shl)), three), 4));
		h = vorrq_u8(h, vshlq_n_u8(vandq_u8(vshlq_u8(hv, vld1q_s8(shh)), three), 4));
	}
	int8x16_t bias = vdupq_n_s8((int8_t)sf_q_bias(dt));
	*lo = vsubq_s8(vreinterpretq_s8_u8(l), bias);
	*hi = vsubq_s8(vreinterpretq_s8_u8(h), bias);
}

static TDOT int32x4_t qr_sdot(int8x16_t w, int8x16_t q)
{
	return vdotq_s32(vdupq_n_s32(0), w, q);
}

/* The sums of the four runs of four bytes of w times q: by SDOT, or by
 * widening multiplies whose pairs fit int16. */
INL int32x4_t qr_dot4(int8x16_t w, int8x16_t q, const int dot)
{
	if (dot)
		return qr_sdot(w, q);
	int16x8_t p = vpaddq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(q)), vmull_high_s8(w, q));
	return vpaddlq_s16(p);
}

/* The _ref's tree: sum[i] += sum[i + 8], + 4, + 2, + 1. */
INL float qr_reduce_n(const float32x4_t *a)
{
	float32x4_t s = vaddq_f32(vaddq_f32(a[0], a[2]), vaddq_f32(a[1], a[3]));
	float32x2_t h = vadd_f32(vget_low_f32(s), vget_high_f32(s));
	return vget_lane_f32(h, 0) + vget_lane_f32(h, 1);
}

/* One row for the nt tokens: acc[t][2 * (b % 2) + h], runs 4h to 4h + 3
 * of the blocks of b's parity, as the _ref's sum[(b % 2) * 8 + g]. */
INL void qr_row_n(float *y, size_t ldy, const uint8_t *row, enum sf_dtype dt, size_t cols,
		  const struct qr_input *in, size_t nt, const int dot)
{
	const size_t nb = cols / SF_QBLOCK;
	float32x4_t acc[QR_TOKENS][4];

	for (size_t t = 0; t < nt; t++)
		acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = vdupq_n_f32(0.0f);
	for (size_t b = 0; b < nb; b++) {
		const uint8_t *c = sf_q_codes_at(row, dt, cols, b);
		/* the rows stream: ask for the bytes a row ahead */
		__builtin_prefetch(c + in->ahead);
		int8x16_t lo, hi;
		qr_unpack_n(c, dt, &lo, &hi);
		float ws = sf_q_int_scale(row, dt, b);
		for (size_t t = 0; t < nt; t++) {
			const int8_t *q = in->q + t * cols + b * SF_QBLOCK;
			float s = ws * in->d[t * nb + b];
			float32x4_t *a = acc[t] + 2 * (b % 2);
			a[0] = vfmaq_n_f32(a[0], vcvtq_f32_s32(qr_dot4(lo, vld1q_s8(q), dot)), s);
			a[1] = vfmaq_n_f32(a[1], vcvtq_f32_s32(qr_dot4(hi, vld1q_s8(q + 16), dot)), s);
		}
	}
	for (size_t t = 0; t < nt; t++)
		y[t * ldy] = qr_reduce_n(acc[t]);
}

INL void qr_rows_n(float *y, size_t ldy, const uint8_t *W, enum sf_dtype dt, size_t cols,
		   const struct qr_input *in, size_t r0, size_t r1, const int dot)
{
	size_t rb = (size_t)sf_dtype_col_bytes(dt, cols);

	for (size_t r = r0; r < r1; r++) {
		if (in->nt == 1)
			qr_row_n(y + r - r0, ldy, W + r * rb, dt, cols, in, 1, dot);
		else
			qr_row_n(y + r - r0, ldy, W + r * rb, dt, cols, in, in->nt, dot);
	}
}

static void qr_rows_neon(float *y, size_t ldy, const uint8_t *W, enum sf_dtype dt, size_t cols,
			 const struct qr_input *in, size_t r0, size_t r1)
{
	qr_rows_n(y, ldy, W, dt, cols, in, r0, r1, 0);
}

static TDOT void qr_rows_dotprod(float *y, size_t ldy, const uint8_t *W, enum sf_dtype dt,
				 size_t cols, const struct qr_input *in, size_t r0, size_t r1)
{
	qr_rows_n(y, ldy, W, dt, cols, in, r0, r1, 1);
}

/* A tile as four quarters of four rows, a lane a row: per group of four
 * columns the sums of its 16 codes (less their bias) with the token's
 * four inputs repeated, by qr_dot4. */
INL void qt_tile_n(float *y, size_t ldy, const uint8_t *tile, enum sf_dtype dt, size_t cols,
		   const struct qr_input *in, const int dot)
{
	const size_t nb = cols / SF_QBLOCK, bb = sf_qtile_block_bytes(dt);

	for (size_t j = 0; j < SF_QTILE / 4; j++) {
		float32x4_t acc[QT_TOKENS];
		for (size_t t = 0; t < in->nt; t++)
			acc[t] = vdupq_n_f32(0.0f);
		for (size_t b = 0; b < nb; b++) {
			const uint8_t *p = tile + b * bb, *c = p + 2 * SF_QTILE + 16 * j;
			__builtin_prefetch(p + in->ahead);
			float32x4_t ws = vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(p + 8 * j)));
			int8x16_t w[8];
			for (int g = 0; g < 4; g++) {
				if (dt == SF_DTYPE_Q8) {
					w[g] = vld1q_s8((const int8_t *)c + 64 * g);
					w[g + 4] = vld1q_s8((const int8_t *)c + 64 * g + 256);
					continue;
				}
				uint8x16_t v = vld1q_u8(c + 64 * g);
				w[g] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(15))),
						vdupq_n_s8(8));
				w[g + 4] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(v, 4)), vdupq_n_s8(8));
			}
			for (size_t t = 0; t < in->nt; t++) {
				const int8_t *q = in->q + t * cols + b * SF_QBLOCK;
				int32_t quad[8];
				memcpy(quad, q, sizeof(quad));
				int32x4_t isum = vdupq_n_s32(0);
				for (int g = 0; g < 8; g++)
					isum = vaddq_s32(isum, qr_dot4(w[g], vreinterpretq_s8_s32(
									 vdupq_n_s32(quad[g])), dot));
				acc[t] = vfmaq_f32(acc[t], vcvtq_f32_s32(isum),
						   vmulq_n_f32(ws, in->d[t * nb + b]));
			}
		}
		for (size_t t = 0; t < in->nt; t++)
			vst1q_f32(y + t * ldy + 4 * j, acc[t]);
	}
}

static void qt_tiles_neon(float *y, size_t ldy, const uint8_t *tile, enum sf_dtype dt,
			  size_t cols, const struct qr_input *in)
{
	qt_tile_n(y, ldy, tile, dt, cols, in, 0);
}

static TDOT void qt_tiles_dotprod(float *y, size_t ldy, const uint8_t *tile, enum sf_dtype dt,
				  size_t cols, const struct qr_input *in)
{
	qt_tile_n(y, ldy, tile, dt, cols, in, 1);
}

Q6T_BY_ROWS(q6t_tile_neon, qr_rows_neon)
Q6T_BY_ROWS(q6t_tile_dotprod, qr_rows_dotprod)

#endif /* __aarch64__ */

// ----------------------------------------------------------------------------
// the family's table, indexed by enum sf_isa (engine/cpu.h), at the level
// of the integer column products (sf_qint_isa). The i8mm level keeps the
// dot-product rows: the _ref rounds each run of four products' sum into
// its float sums on its own, and SMMLA adds eight; bit for bit it would
// have to zero half of each operand, SDOT's products for more work.

static qr_rows_fn *const qr_table[SF_NISA] = {
	[SF_ISA_REF] = qr_rows_ref,
#if defined(__x86_64__)
	[SF_ISA_AVX2] = qr_rows_avx2,
	[SF_ISA_AVX512] = qr_rows_avx512,
#else
	[SF_ISA_AVX2] = qr_rows_ref,
	[SF_ISA_AVX512] = qr_rows_ref,
#endif
#if defined(__aarch64__)
	[SF_ISA_NEON] = qr_rows_neon,
	[SF_ISA_DOTPROD] = qr_rows_dotprod,
	[SF_ISA_I8MM] = qr_rows_dotprod,
#else
	[SF_ISA_NEON] = qr_rows_ref,
	[SF_ISA_DOTPROD] = qr_rows_ref,
	[SF_ISA_I8MM] = qr_rows_ref,
#endif
};

static qt_tile_fn *const qt_table[SF_NISA] = {
	[SF_ISA_REF] = qt_tile_ref,
#if defined(__x86_64__)
	[SF_ISA_AVX2] = qt_tiles_avx2,
	[SF_ISA_AVX512] = qt_tiles_avx512,
#else
	[SF_ISA_AVX2] = qt_tile_ref,
	[SF_ISA_AVX512] = qt_tile_ref,
#endif
#if defined(__aarch64__)
	[SF_ISA_NEON] = qt_tiles_neon,
	[SF_ISA_DOTPROD] = qt_tiles_dotprod,
	[SF_ISA_I8MM] = qt_tiles_dotprod,
#else
	[SF_ISA_NEON] = qt_tile_ref,
	[SF_ISA_DOTPROD] = qt_tile_ref,
	[SF_ISA_I8MM] = qt_tile_ref,
#endif
};

static qt_tile_fn *const q6t_table[SF_NISA] = {
	[SF_ISA_REF] = q6t_tile_ref,
#if defined(__x86_64__)
	[SF_ISA_AVX2] = q6t_tile_avx2,
	[SF_ISA_AVX512] = q6t_tiles_avx512,
#else
	[SF_ISA_AVX2] = q6t_tile_ref,
	[SF_ISA_AVX512] = q6t_tile_ref,
#endif
#if defined(__aarch64__)
	[SF_ISA_NEON] = q6t_tile_neon,
	[SF_ISA_DOTPROD] = q6t_tile_dotprod,
	[SF_ISA_I8MM] = q6t_tile_dotprod,
#else
	[SF_ISA_NEON] = q6t_tile_ref,
	[SF_ISA_DOTPROD] = q6t_tile_ref,
	[SF_ISA_I8MM] = q6t_tile_ref,
#endif
};

int sf_qmatmul_rows_q6_tiles(void)
{
	return sf_qint_isa() == SF_ISA_AVX512;
}

void sf_qmatmul_rows(float *y, size_t ldy, const void *W, enum sf_dtype dt, size_t cols,
		     const float *x, size_t ldx, size_t T, size_t r0, size_t r1)
{
	if (r0 >= r1 || !T)
		return;
	if (sf_dtype_untiled(dt) == dt) {
		qr_drive(qr_table[sf_qint_isa()], y, ldy, W, dt, cols, x, ldx, T, r0, r1);
		return;
	}
	if (dt == SF_DTYPE_Q6X16) {
		qt_drive_store(q6t_table[sf_qint_isa()], y, ldy, W, dt, cols, x, ldx, T, r0, r1);
		return;
	}
	size_t done = 0;
#if defined(__x86_64__)
	/* a pass's tokens 16 at a time on AMX, the rest the level's tiles */
	if (sf_qint_isa() == SF_ISA_AVX512)
		done = qt_amx_drive(y, ldy, W, dt, cols, x, ldx, T, r0, r1);
#endif
	qt_drive_store(qt_table[sf_qint_isa()], y + done * ldy, ldy, W, dt, cols, x + done * ldx,
		       ldx, T - done, r0, r1);
}

const char *sf_qmatmul_rows_kernel(void)
{
	/* the i8mm level's rows are the dot-product level's (qr_table) */
	if (sf_qint_isa() == SF_ISA_I8MM)
		return sf_isa_name(SF_ISA_DOTPROD);
	return sf_qcolaccum_int_kernel();
}
