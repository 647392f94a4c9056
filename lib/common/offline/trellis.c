/* Bitshift-trellis codes: the exact Viterbi encoder (AVX-512 and AVX2
 * paths beside the plain C _ref, bit-identical, dispatched by the level
 * engine/cpu.h names) and the decoder of unpacked codes.
 * The code layout is documented in man/sf-formats.5 (codes). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu.h"
#include "offline/trellis.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// ----------------------------------------------------------------------------
// scratch
//
// The SIMD path searches 16 columns at once, one per lane: a vector holds
// one state's cost in every column, so the codebook entry of an edge is a
// scalar broadcast shared by all lanes and no lane ever moves. The cost
// array is updated in place: group q reads the four states (p << 12) | q
// and writes its four successors (q << 2) | c into the same four rows,
// which is consistent when state s of generation t lives at row rotr(s, 2t)
// (14-bit rotation): rotr((q << 2) | c, 2t + 2) = rotr((c << 12) | q, 2t).
// One array of 1 MiB then serves 16 columns, in L2.

#define NSTATES SF_TRELLIS_STATES
#define LANES SF_TRELLIS_LOCKSTEP

_Static_assert(LANES == 16, "one column per lane of a 512-bit float vector (two 256-bit halves)");

struct sf_trellis_work {
	const float *cb;	/* the caller's codebook */
	size_t mmax;
	float *cbg;		/* (NSTATES / 4, 4, 4): cb[(p << 14) | (q << 2) | c] at [q][p][c] */
	float *cost;		/* (NSTATES, LANES) SIMD rows; _ref: two arrays of NSTATES */
	float *fin;		/* (NSTATES) one column's final costs in state order */
	/* (mmax, NSTATES): bit k and bit 16 + k of word s are bits 0 and 1 of
	 * the predecessor p that column k chose for state s */
	uint32_t *trace;
};

uint64_t sf_trellis_work_bytes(size_t mmax)
{
	return ((uint64_t)NSTATES * (LANES + 1) + SF_TRELLIS_CODEBOOK) * sizeof(float) +
	       (uint64_t)mmax * NSTATES * sizeof(uint32_t);
}

void sf_trellis_work_free(struct sf_trellis_work *w)
{
	if (!w)
		return;
	free(w->cbg);
	free(w->cost);
	free(w->fin);
	free(w->trace);
	free(w);
}

int sf_trellis_work_init(struct sf_trellis_work **out, const float *cb, size_t mmax)
{
	struct sf_trellis_work *w = calloc(1, sizeof(*w));
	*out = NULL;
	if (!w || mmax == 0 || mmax > SIZE_MAX / (NSTATES * sizeof(uint32_t)))
		goto fail;
	w->cb = cb;
	w->mmax = mmax;
	if (posix_memalign((void **)&w->cbg, 64, SF_TRELLIS_CODEBOOK * sizeof(float)) ||
	    posix_memalign((void **)&w->cost, 64, (size_t)NSTATES * LANES * sizeof(float)) ||
	    !(w->fin = malloc(NSTATES * sizeof(float))) ||
	    posix_memalign((void **)&w->trace, 64, mmax * NSTATES * sizeof(uint32_t)))
		goto fail;
	for (uint32_t i = 0; i < SF_TRELLIS_CODEBOOK; i++)
		w->cbg[i] = cb[((i >> 2) & 3) << 14 | (i >> 4) << 2 | (i & 3)];
	*out = w;
	return 0;
fail:
	sf_trellis_work_free(w);
	return -ENOMEM;
}

// ----------------------------------------------------------------------------
// Viterbi. State s' (14 bits) = the last seven codes, newest in the low
// bits. Its four predecessors are s = (p << 12) | (s' >> 2) for p = 0..3,
// and the edge from p costs (x_t - cb[(p << 14) | s'])^2. The four costs
// are reduced as a tournament (0 against 1, 2 against 3, then the two
// winners; the lower p wins a tie), which both paths do identically.

static uint32_t rotr14(uint32_t v, unsigned r)
{
	return ((v >> r) | (v << (14 - r))) & (NSTATES - 1);
}

/* Argmin of column k's final costs (state order, first on ties), then its
 * codes by traceback. */
static double finish(const float *cost, const uint32_t *trace, int k, size_t m, uint8_t *codes,
		     int rotated)
{
	uint32_t s = 0;
	float best = cost[0];
	for (uint32_t i = 1; i < NSTATES; i++)
		if (cost[i] < best) {
			best = cost[i];
			s = i;
		}
	for (size_t t = m; t-- > 0;) {
		/* the SIMD path files a word under its state's row */
		uint32_t row = rotated ? rotr14(s, (unsigned)(2 * (t + 1) % 14)) : s;
		uint32_t word = trace[t * NSTATES + row];
		uint32_t p = ((word >> k) & 1) | (((word >> (16 + k)) & 1) << 1);
		codes[t] = (uint8_t)(s & 3);
		s = (p << 12) | (s >> 2);
	}
	return best;
}

static void step_ref(const float *cb, float x, const float *prev, float *cur, uint32_t *trace,
		     int k)
{
	for (uint32_t s = 0; s < NSTATES; s++) {
		float e[4];
		for (uint32_t p = 0; p < 4; p++) {
			float d = x - cb[(p << 14) | s];
			e[p] = fmaf(d, d, prev[(p << 12) | (s >> 2)]);
		}
		int m01 = e[1] < e[0], m23 = e[3] < e[2];
		float a = m01 ? e[1] : e[0], c = m23 ? e[3] : e[2];
		int mab = c < a;
		cur[s] = mab ? c : a;
		trace[s] |= (uint32_t)(mab ? m23 : m01) << k | (uint32_t)mab << (16 + k);
	}
}

void sf_trellis_encode_ref(const float *const *x, int n, size_t m, uint8_t *const *codes,
			   double *err, struct sf_trellis_work *w)
{
	memset(w->trace, 0, m * NSTATES * sizeof(uint32_t));
	for (int k = 0; k < n; k++) {
		float *c0 = w->cost, *c1 = w->cost + NSTATES;
		for (uint32_t s = 0; s < NSTATES; s++)
			c0[s] = INFINITY;
		c0[0] = 0.0f;	/* idx_{-1} = 0: the codes before the column are zeros */
		for (size_t t = 0; t < m; t++) {
			step_ref(w->cb, x[k][t], c0, c1, w->trace + t * NSTATES, k);
			float *tmp = c0; c0 = c1; c1 = tmp;
		}
		double e = finish(c0, w->trace, k, m, codes[k], 0);
		if (err)
			err[k] = e;
	}
}

#if defined(__x86_64__)

#define T512 __attribute__((target("avx512f,avx512bw,avx512dq,avx,fma")))
#define T256 __attribute__((target("avx2,fma")))

static uint32_t rotl14(uint32_t v, unsigned r)
{
	return rotr14(v, (14 - r) % 14);
}


/* Generation t to t + 1 (r = 2t mod 14) for 16 columns, x[k] in lane k.
 * The rotation of p << 12 is p << h: the groups are visited in the order
 * of their rows u (bits h and h + 1 clear), so the four row streams run
 * forward; each new state's trace word goes to its row too. */
static T512 void step_avx512(const float *cbg, const float *xs, float *cost, uint32_t *trace,
			     unsigned r)
{
	unsigned h = 12 - r;
	__m512 xv = _mm512_loadu_ps(xs);
	for (uint32_t i = 0; i < NSTATES / 4; i++) {
		uint32_t u = ((i >> h) << (h + 2)) | (i & ((1u << h) - 1));
		const float *cq = cbg + (size_t)rotl14(u, r) * 16;
		float *row = cost + (size_t)u * LANES;
		__m512 pv[4];
#pragma GCC unroll 4
		for (uint32_t p = 0; p < 4; p++)
			pv[p] = _mm512_load_ps(row + ((size_t)p << h) * LANES);
#pragma GCC unroll 4
		for (uint32_t c = 0; c < 4; c++) {
			__m512 d0 = _mm512_sub_ps(xv, _mm512_set1_ps(cq[0 + c]));
			__m512 d1 = _mm512_sub_ps(xv, _mm512_set1_ps(cq[4 + c]));
			__m512 d2 = _mm512_sub_ps(xv, _mm512_set1_ps(cq[8 + c]));
			__m512 d3 = _mm512_sub_ps(xv, _mm512_set1_ps(cq[12 + c]));
			__m512 e0 = _mm512_fmadd_ps(d0, d0, pv[0]), e1 = _mm512_fmadd_ps(d1, d1, pv[1]);
			__m512 e2 = _mm512_fmadd_ps(d2, d2, pv[2]), e3 = _mm512_fmadd_ps(d3, d3, pv[3]);
			/* min(a, b) is a < b ? a : b: the tournament's choices */
			__m512 a = _mm512_min_ps(e1, e0), b = _mm512_min_ps(e3, e2);
			__m512 best = _mm512_min_ps(b, a);
			_mm512_store_ps(row + ((size_t)c << h) * LANES, best);
			/* bit 1 of p: b < a, the pair; bit 0: the pair's odd member
			 * won, i.e. the minimum is below the even one (e0 or e2).
			 * Both strict, so the lower p wins a tie as in the
			 * tournament, with one blend and two compares in all */
			__mmask16 hi = _mm512_cmp_ps_mask(b, a, _CMP_LT_OQ);
			__mmask16 lo = _mm512_cmp_ps_mask(best, _mm512_mask_blend_ps(hi, e0, e2),
							  _CMP_LT_OQ);
			trace[u | c << h] = _cvtmask32_u32(_mm512_kunpackw(hi, lo));
		}
	}
	/* the compiler leaves the upper vector state dirty (zmm16-31), which
	 * slows every SSE instruction after it (libm, the traceback, the
	 * caller) by a wide margin until cleared */
	_mm256_zeroupper();
}

/* The same step with 256-bit vectors: each row of 16 lanes is two
 * halves, searched with the same float operations in the same order. */
static T256 void step_avx2(const float *cbg, const float *xs, float *cost, uint32_t *trace,
			   unsigned r)
{
	unsigned h = 12 - r;
	__m256 xv[2] = { _mm256_loadu_ps(xs), _mm256_loadu_ps(xs + 8) };
	for (uint32_t i = 0; i < NSTATES / 4; i++) {
		uint32_t u = ((i >> h) << (h + 2)) | (i & ((1u << h) - 1));
		const float *cq = cbg + (size_t)rotl14(u, r) * 16;
		float *row = cost + (size_t)u * LANES;
		__m256 pv[4][2];
#pragma GCC unroll 4
		for (uint32_t p = 0; p < 4; p++) {
			pv[p][0] = _mm256_load_ps(row + ((size_t)p << h) * LANES);
			pv[p][1] = _mm256_load_ps(row + ((size_t)p << h) * LANES + 8);
		}
#pragma GCC unroll 4
		for (uint32_t c = 0; c < 4; c++) {
			__m256 b0 = _mm256_broadcast_ss(cq + 0 + c), b1 = _mm256_broadcast_ss(cq + 4 + c);
			__m256 b2 = _mm256_broadcast_ss(cq + 8 + c), b3 = _mm256_broadcast_ss(cq + 12 + c);
			uint32_t hi = 0, lo = 0;
#pragma GCC unroll 2
			for (int v = 0; v < 2; v++) {
				__m256 d0 = _mm256_sub_ps(xv[v], b0), d1 = _mm256_sub_ps(xv[v], b1);
				__m256 d2 = _mm256_sub_ps(xv[v], b2), d3 = _mm256_sub_ps(xv[v], b3);
				__m256 e0 = _mm256_fmadd_ps(d0, d0, pv[0][v]);
				__m256 e1 = _mm256_fmadd_ps(d1, d1, pv[1][v]);
				__m256 e2 = _mm256_fmadd_ps(d2, d2, pv[2][v]);
				__m256 e3 = _mm256_fmadd_ps(d3, d3, pv[3][v]);
				__m256 a = _mm256_min_ps(e1, e0), b = _mm256_min_ps(e3, e2);
				__m256 best = _mm256_min_ps(b, a);
				_mm256_store_ps(row + ((size_t)c << h) * LANES + 8 * v, best);
				/* the choice bits as in step_avx512 */
				__m256 mhi = _mm256_cmp_ps(b, a, _CMP_LT_OQ);
				__m256 mlo = _mm256_cmp_ps(best, _mm256_blendv_ps(e0, e2, mhi), _CMP_LT_OQ);
				hi |= (uint32_t)_mm256_movemask_ps(mhi) << (8 * v);
				lo |= (uint32_t)_mm256_movemask_ps(mlo) << (8 * v);
			}
			trace[u | c << h] = hi << 16 | lo;
		}
	}
}

/* Runs the search of n columns with the ISA's step, then the traceback. */
static void encode_simd(const float *const *x, int n, size_t m, uint8_t *const *codes,
			double *err, struct sf_trellis_work *w, int avx512)
{
	for (uint32_t s = 0; s < NSTATES; s++)
		for (int k = 0; k < LANES; k++)
			w->cost[(size_t)s * LANES + (size_t)k] = s ? INFINITY : 0.0f;
	/* idx_{-1} = 0: only state 0 starts at cost 0 */
	for (size_t t = 0; t < m; t++) {
		float xs[LANES] = { 0 };	/* unused lanes search a zero column */
		for (int k = 0; k < n; k++)
			xs[k] = x[k][t];
		unsigned r = (unsigned)(2 * t % 14);
		if (avx512)
			step_avx512(w->cbg, xs, w->cost, w->trace + t * NSTATES, r);
		else
			step_avx2(w->cbg, xs, w->cost, w->trace + t * NSTATES, r);
	}
	unsigned r = (unsigned)(2 * m % 14);
	for (int k = 0; k < n; k++) {
		for (uint32_t s = 0; s < NSTATES; s++)
			w->fin[s] = w->cost[(size_t)rotr14(s, r) * LANES + (size_t)k];
		double e = finish(w->fin, w->trace, k, m, codes[k], 1);
		if (err)
			err[k] = e;
	}
}
#endif

#if defined(__x86_64__)
static void encode_avx2(const float *const *x, int n, size_t m, uint8_t *const *codes,
			double *err, struct sf_trellis_work *w)
{
	encode_simd(x, n, m, codes, err, w, 0);
}

static void encode_avx512(const float *const *x, int n, size_t m, uint8_t *const *codes,
			  double *err, struct sf_trellis_work *w)
{
	encode_simd(x, n, m, codes, err, w, 1);
}
#endif

typedef void encode_fn(const float *const *x, int n, size_t m, uint8_t *const *codes,
		       double *err, struct sf_trellis_work *w);

/* The dispatch table (engine/cpu.h); a level without its own path
 * repeats the one below. */
static encode_fn *const encode_paths[SF_NISA] = {
	[SF_ISA_REF] = sf_trellis_encode_ref,
#if defined(__x86_64__)
	[SF_ISA_AVX2] = encode_avx2,
	[SF_ISA_AVX512] = encode_avx512,
#else
	[SF_ISA_AVX2] = sf_trellis_encode_ref,
	[SF_ISA_AVX512] = sf_trellis_encode_ref,
#endif
};

void sf_trellis_encode(const float *const *x, int n, size_t m, uint8_t *const *codes,
		       double *err, struct sf_trellis_work *w)
{
	encode_paths[sf_cpu_isa()](x, n, m, codes, err, w);
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
