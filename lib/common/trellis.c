/* Bitshift-trellis codes: the Gaussian codebook, the exact Viterbi encoder
 * (an AVX-512 path beside the plain C _ref, bit-identical) and the decoder.
 * The code layout is documented in man/sf-formats.5 (codes). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "trellis.h"
#include "rng.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define NSTATES SF_TRELLIS_STATES
#define NBLOCKS (NSTATES / 16)	/* 16 destination states per traceback word */

// ----------------------------------------------------------------------------
// codebook

void sf_trellis_codebook(float *cb, uint64_t seed)
{
	uint64_t s = seed;
	for (size_t i = 0; i < SF_TRELLIS_CODEBOOK; i += 2) {
		double u1 = sf_rng_unit(&s);
		double u2 = sf_rng_unit(&s);
		double r = sqrt(-2.0 * log(1.0 - u1));
		cb[i] = (float)(r * cos(2.0 * M_PI * u2));
		cb[i + 1] = (float)(r * sin(2.0 * M_PI * u2));
	}
}

// ----------------------------------------------------------------------------
// scratch

/* The SIMD path keeps the codebook quarters and the cost arrays in padded
 * layouts: at power-of-two strides the lines one block touches (four
 * quarters of the codebook, four predecessor runs per column) would all map
 * to the same cache set and evict each other. */
#define CB_STRIDE (16384 + 32)		/* floats between codebook quarters */
#define SEG (4096 + 16)			/* floats between cost quarters (p) */
#define COST_FLOATS (4 * SEG + 48)	/* one cost array, padded again so
					 * arrays of the columns do not alias */

struct sf_trellis_work {
	size_t mmax;
	float *cb;		/* (4, CB_STRIDE) padded codebook copy */
	float *cost;		/* (SF_TRELLIS_LOCKSTEP, 2, COST_FLOATS) */
	/* (mmax, NBLOCKS) per column: for the 16 states of a block, the low
	 * half holds bit 0 of the chosen predecessor p, the high half bit 1 */
	uint32_t *trace[SF_TRELLIS_LOCKSTEP];
};

uint64_t sf_trellis_work_bytes(size_t mmax)
{
	return (4ull * CB_STRIDE + 2ull * SF_TRELLIS_LOCKSTEP * COST_FLOATS) * sizeof(float) +
	       (uint64_t)SF_TRELLIS_LOCKSTEP * mmax * NBLOCKS * sizeof(uint32_t);
}

void sf_trellis_work_free(struct sf_trellis_work *w)
{
	if (!w)
		return;
	free(w->cb);
	free(w->cost);
	for (int k = 0; k < SF_TRELLIS_LOCKSTEP; k++)
		free(w->trace[k]);
	free(w);
}

int sf_trellis_work_init(struct sf_trellis_work **out, size_t mmax)
{
	struct sf_trellis_work *w = calloc(1, sizeof(*w));
	*out = NULL;
	if (!w || mmax == 0 || mmax > SIZE_MAX / (NBLOCKS * sizeof(uint32_t)))
		goto fail;
	w->mmax = mmax;
	if (posix_memalign((void **)&w->cb, 64, 4 * CB_STRIDE * sizeof(float)) ||
	    posix_memalign((void **)&w->cost, 64,
			   2 * SF_TRELLIS_LOCKSTEP * COST_FLOATS * sizeof(float)))
		goto fail;
	for (int k = 0; k < SF_TRELLIS_LOCKSTEP; k++)
		if (posix_memalign((void **)&w->trace[k], 64, mmax * NBLOCKS * sizeof(uint32_t)))
			goto fail;
	*out = w;
	return 0;
fail:
	sf_trellis_work_free(w);
	return -ENOMEM;
}

/* Cost array j (0, 1) of lockstep column k. */
static float *cost_array(const struct sf_trellis_work *w, int k, int j)
{
	return w->cost + ((size_t)k * 2 + (size_t)j) * COST_FLOATS;
}

// ----------------------------------------------------------------------------
// Viterbi. State s' (14 bits) = the last seven codes, newest in the low
// bits. Its four predecessors are s = (p << 12) | (s' >> 2) for p = 0..3,
// and the edge from p costs (x_t - cb[(p << 14) | s'])^2. The four costs
// are reduced as a tournament (0 against 1, 2 against 3, then the two
// winners; the lower p wins a tie), which both paths do identically.

/* cost of state s lives at (s >> 12) * seg + (s & 4095) */
static void start(float *cost, size_t seg)
{
	for (size_t p = 0; p < 4; p++)
		for (size_t i = 0; i < 4096; i++)
			cost[p * seg + i] = INFINITY;
	cost[0] = 0.0f;	/* idx_{-1} = 0: the codes before the column are zeros */
}

/* Argmin of the final costs (first on ties), then the codes by traceback. */
static double finish(const float *cost, size_t seg, const uint32_t *trace, size_t m,
		     uint8_t *codes)
{
	uint32_t s = 0;
	float best = cost[0];
	for (uint32_t i = 1; i < NSTATES; i++) {
		float c = cost[(i >> 12) * seg + (i & 4095)];
		if (c < best) {
			best = c;
			s = i;
		}
	}
	for (size_t t = m; t-- > 0;) {
		uint32_t word = trace[t * NBLOCKS + s / 16];
		uint32_t p = ((word >> (s % 16)) & 1) | (((word >> (16 + s % 16)) & 1) << 1);
		codes[t] = (uint8_t)(s & 3);
		s = (p << 12) | (s >> 2);
	}
	return best;
}

static void step_ref(const float *cb, float x, const float *prev, float *cur, uint32_t *trace)
{
	for (uint32_t b = 0; b < NBLOCKS; b++) {
		uint32_t lo = 0, hi = 0;
		for (uint32_t i = 0; i < 16; i++) {
			uint32_t s = b * 16 + i;
			float e[4];
			for (uint32_t p = 0; p < 4; p++) {
				float d = x - cb[(p << 14) | s];
				e[p] = fmaf(d, d, prev[(p << 12) | (s >> 2)]);
			}
			int m01 = e[1] < e[0], m23 = e[3] < e[2];
			float a = m01 ? e[1] : e[0], c = m23 ? e[3] : e[2];
			int mab = c < a;
			cur[s] = mab ? c : a;
			lo |= (uint32_t)(mab ? m23 : m01) << i;
			hi |= (uint32_t)mab << i;
		}
		trace[b] = lo | hi << 16;
	}
}

void sf_trellis_encode_ref(const float *cb, const float *const *x, int n, size_t m,
			   uint8_t *const *codes, double *err, struct sf_trellis_work *w)
{
	for (int k = 0; k < n; k++) {
		float *c0 = cost_array(w, k, 0), *c1 = cost_array(w, k, 1);
		start(c0, 4096);
		for (size_t t = 0; t < m; t++) {
			step_ref(cb, x[k][t], c0, c1, w->trace[k] + t * NBLOCKS);
			float *tmp = c0; c0 = c1; c1 = tmp;
		}
		double e = finish(c0, 4096, w->trace[k], m, codes[k]);
		if (err)
			err[k] = e;
	}
}

#if defined(__x86_64__)

#define T512 __attribute__((target("avx512f,avx512bw,avx512dq,fma")))

/* One step for N columns: the four codebook vectors of a block are loaded
 * once and serve every column. The predecessor costs of 16 consecutive
 * states are 4 consecutive values each used four times: one permute. */
static inline __attribute__((always_inline)) T512 void
step_avx512(const float *cb, int N, const float *xs, float *const *prev, float *const *cur,
	    uint32_t *const *trace)
{
	const __m512i spread = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
	__m512 xv[SF_TRELLIS_LOCKSTEP];
	for (int k = 0; k < N; k++)
		xv[k] = _mm512_set1_ps(xs[k]);
	for (uint32_t b = 0; b < NBLOCKS; b++) {
		__m512 c0 = _mm512_load_ps(cb + 0 * CB_STRIDE + b * 16);
		__m512 c1 = _mm512_load_ps(cb + 1 * CB_STRIDE + b * 16);
		__m512 c2 = _mm512_load_ps(cb + 2 * CB_STRIDE + b * 16);
		__m512 c3 = _mm512_load_ps(cb + 3 * CB_STRIDE + b * 16);
#pragma GCC unroll 4
		for (int k = 0; k < N; k++) {
			const float *pv = prev[k] + b * 4;
			__m512 p0 = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_loadu_ps(pv)));
			__m512 p1 = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_loadu_ps(pv + SEG)));
			__m512 p2 = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_loadu_ps(pv + 2 * SEG)));
			__m512 p3 = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_loadu_ps(pv + 3 * SEG)));
			__m512 d0 = _mm512_sub_ps(xv[k], c0), d1 = _mm512_sub_ps(xv[k], c1);
			__m512 d2 = _mm512_sub_ps(xv[k], c2), d3 = _mm512_sub_ps(xv[k], c3);
			__m512 e0 = _mm512_fmadd_ps(d0, d0, p0), e1 = _mm512_fmadd_ps(d1, d1, p1);
			__m512 e2 = _mm512_fmadd_ps(d2, d2, p2), e3 = _mm512_fmadd_ps(d3, d3, p3);
			__mmask16 m01 = _mm512_cmp_ps_mask(e1, e0, _CMP_LT_OQ);
			__mmask16 m23 = _mm512_cmp_ps_mask(e3, e2, _CMP_LT_OQ);
			__m512 a = _mm512_mask_blend_ps(m01, e0, e1);
			__m512 c = _mm512_mask_blend_ps(m23, e2, e3);
			__mmask16 mab = _mm512_cmp_ps_mask(c, a, _CMP_LT_OQ);
			_mm512_store_ps(cur[k] + (b >> 8) * SEG + (b & 255) * 16,
					_mm512_mask_blend_ps(mab, a, c));
			/* the bit arithmetic in general registers: mask-register
			 * logic would compete with the vector ports */
			uint32_t u01 = _cvtmask16_u32(m01), u23 = _cvtmask16_u32(m23);
			uint32_t uab = _cvtmask16_u32(mab);
			trace[k][b] = (((uab & u23) | (~uab & u01)) & 0xffff) | uab << 16;
		}
	}
}

static T512 void encode_avx512_n(const float *cb, const float *const *x, int N, size_t m,
				 uint8_t *const *codes, double *err, struct sf_trellis_work *w)
{
	float *prev[SF_TRELLIS_LOCKSTEP], *cur[SF_TRELLIS_LOCKSTEP];
	uint32_t *tr[SF_TRELLIS_LOCKSTEP];
	for (int p = 0; p < 4; p++)
		memcpy(w->cb + p * CB_STRIDE, cb + ((size_t)p << 14), 16384 * sizeof(float));
	for (int k = 0; k < N; k++) {
		prev[k] = cost_array(w, k, 0);
		cur[k] = cost_array(w, k, 1);
		start(prev[k], SEG);
	}
	for (size_t t = 0; t < m; t++) {
		float xs[SF_TRELLIS_LOCKSTEP];
		for (int k = 0; k < N; k++) {
			xs[k] = x[k][t];
			tr[k] = w->trace[k] + t * NBLOCKS;
		}
		/* constant N so the column loop unrolls and xv stays in registers */
		switch (N) {
		case 1: step_avx512(w->cb, 1, xs, prev, cur, tr); break;
		case 2: step_avx512(w->cb, 2, xs, prev, cur, tr); break;
		case 3: step_avx512(w->cb, 3, xs, prev, cur, tr); break;
		default: step_avx512(w->cb, 4, xs, prev, cur, tr); break;
		}
		for (int k = 0; k < N; k++) {
			float *tmp = prev[k]; prev[k] = cur[k]; cur[k] = tmp;
		}
	}
	for (int k = 0; k < N; k++) {
		double e = finish(prev[k], SEG, w->trace[k], m, codes[k]);
		if (err)
			err[k] = e;
	}
}

_Static_assert(SF_TRELLIS_LOCKSTEP == 4, "encode_avx512_n instantiates N = 1..4");

/* One dispatch decision for every kernel: sf_kernels_isa honours SF_REF
 * and sf_kernels_select. */
static int simd_ok(void)
{
	return strcmp(sf_kernels_isa(), "avx512") == 0;
}
#endif

void sf_trellis_encode(const float *cb, const float *const *x, int n, size_t m,
		       uint8_t *const *codes, double *err, struct sf_trellis_work *w)
{
#if defined(__x86_64__)
	if (simd_ok()) {
		encode_avx512_n(cb, x, n, m, codes, err, w);
		return;
	}
#endif
	sf_trellis_encode_ref(cb, x, n, m, codes, err, w);
}

// ----------------------------------------------------------------------------
// decoder

void sf_trellis_decode(const float *cb, const uint8_t *c, size_t m, float *out)
{
	uint32_t idx = 0;
	for (size_t t = 0; t < m; t++) {
		idx = ((idx << 2) | (c[t] & 3u)) & 0xffffu;
		out[t] = cb[idx];
	}
}
