/* Bitshift-trellis codes: the exact Viterbi encoder (AVX-512, AVX2 and
 * NEON paths beside the plain C _ref, bit-identical, dispatched by the
 * level engine/cpu.h names) and the decoder of unpacked codes.
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
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

// ----------------------------------------------------------------------------
// the metric
//
// The search minimises sum_t (xq_t - cq[idx_t])^2 in integers: the column
// and the codebook in 16-bit fixed point with 12 fraction bits (clamped to
// +-8, which N(0,1) data does not reach: the codebook's extremes are near
// +-4.5), the difference saturated to 16 bits, its square truncated to 8
// fraction bits by one multiply-high (0..16384), and path metrics as
// unsigned 16-bit saturating sums, renormalised every few steps (RENORM
// below) by subtracting each column's least metric, so that a metric
// reaches its ceiling (65535, 256 squared units) only when its path is far
// behind the best one. Integers give every path the same codes by
// construction, twice the lanes of f32 per vector, and a search that is
// exact for this metric; on N(0,1) columns its codes' float error is that
// of the float search to three digits (tests/bench/encode.sh).

#define NSTATES SF_TRELLIS_STATES
#define LANES SF_TRELLIS_LOCKSTEP
#define SAT 0xffffu	/* a path metric's ceiling, also "unreachable" */

_Static_assert(LANES == 32, "one column per 16-bit lane of a 512-bit vector (two 256-bit halves)");

/* v in 16-bit fixed point, 12 fraction bits, clamped to +-32767 */
static int16_t q12(float v)
{
	float s = v * 4096.0f;	/* exact: a power of two */
	s = s > 32767.0f ? 32767.0f : s < -32767.0f ? -32767.0f : s;
	return (int16_t)lrintf(s);
}

/* The squared difference of the fixed-point values a and b, as the SIMD
 * paths compute it: d saturated to int16, then (d * d) >> 16. */
static uint16_t sqdiff(int16_t a, int16_t b)
{
	int32_t d = (int32_t)a - b;
	d = d > 32767 ? 32767 : d < -32768 ? -32768 : d;
	return (uint16_t)((d * d) >> 16);
}

// ----------------------------------------------------------------------------
// scratch
//
// The SIMD path searches 32 columns at once, one per 16-bit lane: a vector
// holds one state's metric in every column, so the codebook entry of an
// edge is a scalar broadcast shared by all lanes and no lane ever moves.
// The metric array is updated in place: group q reads the four states
// (p << 12) | q and writes its four successors (q << 2) | c into the same
// four rows, which is consistent when state s of generation t lives at row
// rotr(s, 2t) (14-bit rotation): rotr((q << 2) | c, 2t + 2) =
// rotr((c << 12) | q, 2t). One array of 1 MiB then serves 32 columns.
// In a row, column k sits at lane k (AVX-512, and NEON's four vectors of
// eight) or lane pos_avx2(k) (AVX2: two halves, ordered so that packing
// their masks gives column order).

struct sf_trellis_work {
	const float *cb;	/* the caller's codebook */
	size_t mmax;
	int16_t *cq;		/* (SF_TRELLIS_CODEBOOK) cb in fixed point (q12) */
	/* (NSTATES / 4, 4, 4): cq[(p << 14) | (q << 2) | c] at [q][p][c], in
	 * both halves of the word, so one 32-bit broadcast fills 16-bit lanes */
	uint32_t *cbg;
	uint16_t *cost;		/* (NSTATES, LANES) SIMD rows; _ref: two arrays of NSTATES */
	/* (mmax, NSTATES): bit k and bit 32 + k of word s are bits 0 and 1 of
	 * the predecessor p that column k chose for state s */
	uint64_t *trace;
};

uint64_t sf_trellis_work_bytes(size_t mmax)
{
	return (uint64_t)NSTATES * LANES * sizeof(uint16_t) +
	       (uint64_t)SF_TRELLIS_CODEBOOK * (sizeof(int16_t) + sizeof(uint32_t)) +
	       (uint64_t)mmax * NSTATES * sizeof(uint64_t);
}

void sf_trellis_work_free(struct sf_trellis_work *w)
{
	if (!w)
		return;
	free(w->cq);
	free(w->cbg);
	free(w->cost);
	free(w->trace);
	free(w);
}

int sf_trellis_work_init(struct sf_trellis_work **out, const float *cb, size_t mmax)
{
	struct sf_trellis_work *w = calloc(1, sizeof(*w));
	*out = NULL;
	if (!w || mmax == 0 || mmax > SIZE_MAX / (NSTATES * sizeof(uint64_t)))
		goto fail;
	w->cb = cb;
	w->mmax = mmax;
	if (!(w->cq = malloc(SF_TRELLIS_CODEBOOK * sizeof(int16_t))) ||
	    posix_memalign((void **)&w->cbg, 64, SF_TRELLIS_CODEBOOK * sizeof(uint32_t)) ||
	    posix_memalign((void **)&w->cost, 64, (size_t)NSTATES * LANES * sizeof(uint16_t)) ||
	    posix_memalign((void **)&w->trace, 64, mmax * NSTATES * sizeof(uint64_t)))
		goto fail;
	for (uint32_t i = 0; i < SF_TRELLIS_CODEBOOK; i++)
		w->cq[i] = q12(cb[i]);
	for (uint32_t i = 0; i < SF_TRELLIS_CODEBOOK; i++) {
		uint16_t v = (uint16_t)w->cq[((i >> 2) & 3) << 14 | (i >> 4) << 2 | (i & 3)];
		w->cbg[i] = (uint32_t)v << 16 | v;
	}
	*out = w;
	return 0;
fail:
	sf_trellis_work_free(w);
	return -ENOMEM;
}

// ----------------------------------------------------------------------------
// Viterbi. State s' (14 bits) = the last seven codes, newest in the low
// bits. Its four predecessors are s = (p << 12) | (s' >> 2) for p = 0..3,
// and the edge from p costs sqdiff(xq_t, cq[(p << 14) | s']). The four
// sums are reduced as a tournament (0 against 1, 2 against 3, then the two
// winners; the lower p wins a tie), which every path does identically.

static uint32_t rotr14(uint32_t v, unsigned r)
{
	return ((v >> r) | (v << (14 - r))) & (NSTATES - 1);
}

/* The metrics are renormalised every RENORM steps: step t subtracts base,
 * the least metric after step t - 1, when t % RENORM == 0, and step t
 * finds that least when t % RENORM == RENORM - 1. Between two, the best
 * path gains at most RENORM * 16384 = 65536: the ceiling is out of its
 * reach but for RENORM squares of 64 (weights 8 apart) in a row. */
#define RENORM 4
#define SUBTRACTS(t) ((t) % RENORM == 0)
#define TRACKS(t) ((t) % RENORM == RENORM - 1)

/* Where the trace word of the state s that generation t + 1 reached is:
 * the _ref path files it under s, the SIMD paths in the order they visit
 * the new states (group i, row u, writes 4 i + c for its state in row
 * u | c << h). */
static uint32_t trace_at(uint32_t s, size_t t, int rotated)
{
	if (!rotated)
		return s;
	unsigned h = 12 - (unsigned)(2 * t % 14);
	uint32_t row = rotr14(s, (unsigned)(2 * (t + 1) % 14)), u = row & ~(3u << h);
	uint32_t i = ((u >> (h + 2)) << h) | (u & ((1u << h) - 1));
	return i << 2 | ((row >> h) & 3);
}

/* The codes of columns 0..n-1, column k ending in state s[k], by
 * traceback (in lockstep, so the reads of the columns overlap), and the
 * float squared error of each on x (err may be NULL). */
static void traceback(const float *cb, const float *const *x, const uint64_t *trace, int n,
		      size_t m, uint32_t *s, uint8_t *const *codes, double *err, int rotated)
{
	for (size_t t = m; t-- > 0;)
		for (int k = 0; k < n; k++) {
			uint64_t word = trace[t * NSTATES + trace_at(s[k], t, rotated)];
			uint32_t p = (uint32_t)((word >> k) & 1) | (uint32_t)((word >> (32 + k)) & 1) << 1;
			codes[k][t] = (uint8_t)(s[k] & 3);
			s[k] = (p << 12) | (s[k] >> 2);
		}
	for (int k = 0; err && k < n; k++) {
		double e = 0.0;
		uint32_t idx = 0;
		for (size_t t = 0; t < m; t++) {
			idx = ((idx << 2) | codes[k][t]) & 0xffffu;
			double d = (double)x[k][t] - cb[idx];
			e += d * d;
		}
		err[k] = e;
	}
}

/* One generation for one column; returns the least new metric. */
static uint16_t step_ref(const int16_t *cq, int16_t xq, const uint16_t *prev, uint16_t base,
			 uint16_t *cur, uint64_t *trace, int k)
{
	uint16_t least = SAT;
	for (uint32_t s = 0; s < NSTATES; s++) {
		uint32_t e[4];
		for (uint32_t p = 0; p < 4; p++) {
			uint32_t v = prev[(p << 12) | (s >> 2)];
			v = (v > base ? v - base : 0) + sqdiff(xq, cq[(p << 14) | s]);
			e[p] = v > SAT ? SAT : v;
		}
		int m01 = e[1] < e[0], m23 = e[3] < e[2];
		uint32_t a = m01 ? e[1] : e[0], c = m23 ? e[3] : e[2];
		int mab = c < a;
		cur[s] = (uint16_t)(mab ? c : a);
		least = cur[s] < least ? cur[s] : least;
		trace[s] |= (uint64_t)(mab ? m23 : m01) << k | (uint64_t)mab << (32 + k);
	}
	return least;
}

void sf_trellis_encode_ref(const float *const *x, int n, size_t m, uint8_t *const *codes,
			   double *err, struct sf_trellis_work *w)
{
	uint32_t last[LANES];
	memset(w->trace, 0, m * NSTATES * sizeof(uint64_t));
	for (int k = 0; k < n; k++) {
		uint16_t *c0 = w->cost, *c1 = w->cost + NSTATES, base = 0;
		for (uint32_t s = 0; s < NSTATES; s++)
			c0[s] = SAT;
		c0[0] = 0;	/* idx_{-1} = 0: the codes before the column are zeros */
		for (size_t t = 0; t < m; t++) {
			uint16_t least = step_ref(w->cq, q12(x[k][t]), c0, SUBTRACTS(t) ? base : 0, c1,
						  w->trace + t * NSTATES, k);
			base = TRACKS(t) ? least : base;
			uint16_t *tmp = c0; c0 = c1; c1 = tmp;
		}
		last[k] = 0;	/* the least final metric, first in state order */
		for (uint32_t s = 1; s < NSTATES; s++)
			last[k] = c0[s] < c0[last[k]] ? s : last[k];
	}
	traceback(w->cb, x, w->trace, n, m, last, codes, err, 0);
}

#if defined(__x86_64__) || defined(__aarch64__)

#define INLINE __attribute__((always_inline)) inline

static uint32_t rotl14(uint32_t v, unsigned r)
{
	return rotr14(v, (14 - r) % 14);
}

/* Group i of a step of rotation r: its row u (bits h and h + 1 clear, h
 * = 12 - r) of cost returned, its codebook entries cbg's at *cg. */
static INLINE uint16_t *group_at(uint16_t *cost, const uint32_t *cbg, uint32_t i, unsigned r,
				 const uint32_t **cg)
{
	unsigned h = 12 - r;
	uint32_t u = ((i >> h) << (h + 2)) | (i & ((1u << h) - 1));
	*cg = cbg + (size_t)rotl14(u, r) * 16;
	return cost + (size_t)u * LANES;
}

/* The whole search, one instance per ISA (the steps inlined with their
 * renormalisation flags constant), then the traceback; FENCE makes the
 * trace's stores visible to it. Column k's lane in a row: itself for
 * AVX-512 and NEON; for AVX2 (SWAP34), half (k >> 3) & 1, lane
 * (k & 7) | (k & 16) >> 1 of it, i.e. bits 3 and 4 of k swapped. */
#define ENCODE_SIMD(NAME, TARGET, STEP, SWAP34, FENCE)                                       \
	static TARGET void NAME(const float *const *x, int n, size_t m, uint8_t *const *codes,  \
				double *err, struct sf_trellis_work *w)                          \
	{                                                                                      \
		uint16_t base[LANES] = { 0 };                                                  \
		uint32_t last[LANES];                                                          \
		uint16_t least[LANES];                                                         \
		unsigned lane[LANES];                                                          \
		for (int k = 0; k < LANES; k++) {                                              \
			unsigned q = (unsigned)k;                                              \
			lane[k] = SWAP34 ? (q & 7) | (q & 8) << 1 | (q & 16) >> 1 : q;         \
		}                                                                              \
		/* idx_{-1} = 0: only state 0 starts at 0 */                                   \
		for (uint32_t s = 0; s < NSTATES; s++)                                         \
			for (int k = 0; k < LANES; k++)                                        \
				w->cost[(size_t)s * LANES + (size_t)k] = s ? SAT : 0;          \
		for (size_t t = 0; t < m; t++) {                                               \
			int16_t xs[LANES] = { 0 }; /* unused lanes search a zero column */     \
			for (int k = 0; k < n; k++)                                            \
				xs[lane[k]] = q12(x[k][t]);                                    \
			unsigned r = (unsigned)(2 * t % 14);                                   \
			uint64_t *tr = w->trace + t * NSTATES;                                 \
			if (SUBTRACTS(t) && TRACKS(t))                                         \
				STEP(w->cbg, xs, w->cost, tr, r, base, 1, 1);                  \
			else if (SUBTRACTS(t))                                                 \
				STEP(w->cbg, xs, w->cost, tr, r, base, 1, 0);                  \
			else if (TRACKS(t))                                                    \
				STEP(w->cbg, xs, w->cost, tr, r, base, 0, 1);                  \
			else                                                                   \
				STEP(w->cbg, xs, w->cost, tr, r, base, 0, 0);                  \
		}                                                                              \
		FENCE;                                                                         \
		/* the least final metric of each column, first in state order */              \
		unsigned r = (unsigned)(2 * m % 14);                                           \
		for (int k = 0; k < n; k++) {                                                  \
			last[k] = 0;                                                           \
			least[k] = w->cost[(size_t)rotr14(0, r) * LANES + lane[k]];            \
		}                                                                              \
		for (uint32_t s = 1; s < NSTATES; s++) {                                       \
			const uint16_t *row = w->cost + (size_t)rotr14(s, r) * LANES;          \
			for (int k = 0; k < n; k++)                                            \
				if (row[lane[k]] < least[k]) {                                 \
					least[k] = row[lane[k]];                               \
					last[k] = s;                                           \
				}                                                              \
		}                                                                              \
		traceback(w->cb, x, w->trace, n, m, last, codes, err, 1);                      \
	}

#endif

#if defined(__x86_64__)
/* the streamed trace is visible to the traceback */
#define X86_FENCE() (_mm_sfence(), _mm256_zeroupper())

#define T512 __attribute__((target("avx512f,avx512bw,avx512dq,avx,fma")))
#define T256 __attribute__((target("avx2,fma")))

/* Generation t to t + 1 (r = 2t mod 14) for 32 columns, xq[k] in lane k;
 * sub: subtract base[k] from column k's metrics first; track: store the
 * least new metric of column k in base[k]. The rotation of p << 12 is
 * p << h: the groups are visited in the order of their rows u (bits h and
 * h + 1 clear), so the four row streams run forward; the trace words of a
 * step are written in that order too. */
static T512 INLINE void step_avx512(const uint32_t *cbg, const int16_t *xs, uint16_t *cost,
				    uint64_t *trace, unsigned r, uint16_t *base, int sub, int track)
{
	unsigned h = 12 - r;
	__m512i xv = _mm512_loadu_si512(xs), bv = _mm512_loadu_si512(base);
	__m512i least = _mm512_set1_epi16(-1);
	_Alignas(64) uint64_t line[8];	/* the trace words of two groups */
	for (uint32_t i = 0; i < NSTATES / 4; i++) {
		const uint32_t *cg;
		uint16_t *row = group_at(cost, cbg, i, r, &cg);
		__m512i pv[4];
#pragma GCC unroll 4
		for (uint32_t p = 0; p < 4; p++) {
			pv[p] = _mm512_load_si512(row + ((size_t)p << h) * LANES);
			if (sub)
				pv[p] = _mm512_subs_epu16(pv[p], bv);
		}
#pragma GCC unroll 4
		for (uint32_t c = 0; c < 4; c++) {
			__m512i e[4];
#pragma GCC unroll 4
			for (uint32_t p = 0; p < 4; p++) {
				__m512i d = _mm512_subs_epi16(xv, _mm512_set1_epi32((int)cg[4 * p + c]));
				e[p] = _mm512_adds_epu16(pv[p], _mm512_mulhi_epi16(d, d));
			}
			__m512i a = _mm512_min_epu16(e[1], e[0]), b = _mm512_min_epu16(e[3], e[2]);
			__m512i best = _mm512_min_epu16(b, a);
			_mm512_store_si512(row + ((size_t)c << h) * LANES, best);
			if (track)
				least = _mm512_min_epu16(least, best);
			/* bit 1 of p: b < a, the pair; bit 0: the pair's odd member
			 * won, i.e. the minimum is below the even one (e0 or e2).
			 * Both strict, so the lower p wins a tie as in the
			 * tournament */
			__mmask32 hi = _mm512_cmplt_epu16_mask(b, a);
			__mmask32 lo = _mm512_cmplt_epu16_mask(best, _mm512_mask_blend_epi16(hi, e[0], e[2]));
			line[(i & 1) << 2 | c] = (uint64_t)hi << 32 | lo;
		}
		/* the trace is written once and read once per column by the
		 * traceback: whole lines past the caches, which keep the metrics */
		if (i & 1)
			_mm512_stream_si512((void *)(trace + ((i - 1) << 2)), _mm512_load_si512(line));
	}
	if (track)
		_mm512_storeu_si512(base, least);
}

/* The same step with 256-bit vectors: each row of 32 lanes is two
 * halves, searched with the same integer operations; the choice bits come
 * from equality (b < a exactly when min(b, a) != a), and packing the two
 * halves' masks to bytes puts them in column order. */
static T256 INLINE void step_avx2(const uint32_t *cbg, const int16_t *xs, uint16_t *cost,
				  uint64_t *trace, unsigned r, uint16_t *base, int sub, int track)
{
	unsigned h = 12 - r;
	__m256i xv[2] = { _mm256_loadu_si256((const void *)xs), _mm256_loadu_si256((const void *)(xs + 16)) };
	__m256i bv[2] = { _mm256_loadu_si256((const void *)base), _mm256_loadu_si256((const void *)(base + 16)) };
	__m256i least[2] = { _mm256_set1_epi16(-1), _mm256_set1_epi16(-1) };
	_Alignas(32) uint64_t line[4];	/* the trace words of one group */
	for (uint32_t i = 0; i < NSTATES / 4; i++) {
		const uint32_t *cg;
		uint16_t *row = group_at(cost, cbg, i, r, &cg);
		__m256i pv[4][2];
#pragma GCC unroll 4
		for (uint32_t p = 0; p < 4; p++)
			for (int v = 0; v < 2; v++) {
				pv[p][v] = _mm256_load_si256((const void *)(row + ((size_t)p << h) * LANES + 16 * v));
				if (sub)
					pv[p][v] = _mm256_subs_epu16(pv[p][v], bv[v]);
			}
#pragma GCC unroll 4
		for (uint32_t c = 0; c < 4; c++) {
			__m256i cv[4], eqa[2], eqs[2];
#pragma GCC unroll 4
			for (uint32_t p = 0; p < 4; p++)
				cv[p] = _mm256_set1_epi32((int)cg[4 * p + c]);
#pragma GCC unroll 2
			for (int v = 0; v < 2; v++) {
				__m256i e[4];
#pragma GCC unroll 4
				for (uint32_t p = 0; p < 4; p++) {
					__m256i d = _mm256_subs_epi16(xv[v], cv[p]);
					e[p] = _mm256_adds_epu16(pv[p][v], _mm256_mulhi_epi16(d, d));
				}
				__m256i a = _mm256_min_epu16(e[1], e[0]), b = _mm256_min_epu16(e[3], e[2]);
				__m256i best = _mm256_min_epu16(b, a);
				_mm256_store_si256((void *)(row + ((size_t)c << h) * LANES + 16 * v), best);
				if (track)
					least[v] = _mm256_min_epu16(least[v], best);
				/* the complements of step_avx512's choice bits */
				eqa[v] = _mm256_cmpeq_epi16(best, a);
				eqs[v] = _mm256_cmpeq_epi16(best, _mm256_blendv_epi8(e[2], e[0], eqa[v]));
			}
			uint32_t nhi = (uint32_t)_mm256_movemask_epi8(_mm256_packs_epi16(eqa[0], eqa[1]));
			uint32_t nlo = (uint32_t)_mm256_movemask_epi8(_mm256_packs_epi16(eqs[0], eqs[1]));
			line[c] = ~((uint64_t)nhi << 32 | nlo);
		}
		_mm256_stream_si256((void *)(trace + (i << 2)), _mm256_load_si256((const void *)line));
	}
	if (track) {
		_mm256_storeu_si256((void *)base, least[0]);
		_mm256_storeu_si256((void *)(base + 16), least[1]);
	}
}

ENCODE_SIMD(encode_avx512, T512, step_avx512, 0, X86_FENCE())
ENCODE_SIMD(encode_avx2, T256, step_avx2, 1, X86_FENCE())
#endif /* __x86_64__ */

#if defined(__aarch64__)

/* The columns' bits of four vectors of 16-bit masks lo and hi (lane k of
 * vector v: column 8v + k) as one trace word, lo's in bits 0-31 and hi's
 * in 32-63: each mask's low byte weighted by its bit in its byte, then
 * three rounds of pairwise sums gather eight columns a byte. */
static INLINE uint64_t choice_word_n(const uint16x8_t *lo, const uint16x8_t *hi)
{
	static const uint8_t bit[16] = { 1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128 };
	const uint8x16_t w = vld1q_u8(bit);
	uint8x16_t m[4];
	for (int i = 0; i < 2; i++) {
		m[i] = vandq_u8(vuzp1q_u8(vreinterpretq_u8_u16(lo[2 * i]),
					  vreinterpretq_u8_u16(lo[2 * i + 1])), w);
		m[2 + i] = vandq_u8(vuzp1q_u8(vreinterpretq_u8_u16(hi[2 * i]),
					      vreinterpretq_u8_u16(hi[2 * i + 1])), w);
	}
	uint8x16_t s = vpaddq_u8(vpaddq_u8(m[0], m[1]), vpaddq_u8(m[2], m[3]));
	s = vpaddq_u8(s, s);
	return vgetq_lane_u64(vreinterpretq_u64_u8(s), 0);
}

/* (d * d) >> 16 of each lane, as _mm512_mulhi_epi16: the high halves of
 * the 32-bit squares (SQDMULH would double and saturate d = -32768). */
static INLINE uint16x8_t sq_hi_n(int16x8_t d)
{
	int32x4_t lo = vmull_s16(vget_low_s16(d), vget_low_s16(d)), hi = vmull_high_s16(d, d);
	return vreinterpretq_u16_s16(vuzp2q_s16(vreinterpretq_s16_s32(lo), vreinterpretq_s16_s32(hi)));
}

/* The metrics of the four states p << h of a group's row (p = 0..3), a
 * row four vectors of eight columns, less base's where sub. */
static INLINE void prev_rows_n(uint16x8_t (*pv)[4], const uint16_t *row, unsigned h, int sub,
			       const uint16x8_t *bv)
{
#pragma GCC unroll 16
	for (int k = 0; k < 16; k++) {
		uint16x8_t m = vld1q_u16(row + ((size_t)(k >> 2) << h) * LANES + 8 * (k & 3));
		pv[k >> 2][k & 3] = sub ? vqsubq_u16(m, bv[k & 3]) : m;
	}
}

/* step_avx512 with a row as four vectors of eight columns (plain NEON,
 * every aarch64 core): the same saturating integer operations, the
 * choice bits by strict compares and gathered by choice_word_n. The trace
 * words go to memory by ordinary stores, in the SIMD paths' order. */
static INLINE void step_neon(const uint32_t *cbg, const int16_t *xs, uint16_t *cost,
			     uint64_t *trace, unsigned r, uint16_t *base, int sub, int track)
{
	unsigned h = 12 - r;
	int16x8_t xv[4];
	uint16x8_t bv[4], least[4];
	for (int v = 0; v < 4; v++) {
		xv[v] = vld1q_s16(xs + 8 * v);
		bv[v] = vld1q_u16(base + 8 * v);
		least[v] = vdupq_n_u16(0xffff);
	}
	for (uint32_t i = 0; i < NSTATES / 4; i++) {
		const uint32_t *cg;
		uint16_t *row = group_at(cost, cbg, i, r, &cg);
		uint16x8_t pv[4][4];
		prev_rows_n(pv, row, h, sub, bv);
#pragma GCC unroll 4
		for (uint32_t c = 0; c < 4; c++) {
			int16x8_t cv[4];
			uint16x8_t hi[4], lo[4];
#pragma GCC unroll 4
			for (uint32_t p = 0; p < 4; p++)
				cv[p] = vreinterpretq_s16_u32(vdupq_n_u32(cg[4 * p + c]));
#pragma GCC unroll 4
			for (int v = 0; v < 4; v++) {
				uint16x8_t e[4];
#pragma GCC unroll 4
				for (uint32_t p = 0; p < 4; p++)
					e[p] = vqaddq_u16(pv[p][v], sq_hi_n(vqsubq_s16(xv[v], cv[p])));
				uint16x8_t a = vminq_u16(e[1], e[0]), b = vminq_u16(e[3], e[2]);
				uint16x8_t best = vminq_u16(b, a);
				vst1q_u16(row + ((size_t)c << h) * LANES + 8 * v, best);
				if (track)
					least[v] = vminq_u16(least[v], best);
				/* step_avx512's choice bits: b < a, and the
				 * minimum below the even one of the pair */
				hi[v] = vcltq_u16(b, a);
				lo[v] = vcltq_u16(best, vbslq_u16(hi[v], e[2], e[0]));
			}
			trace[(i << 2) | c] = choice_word_n(lo, hi);
		}
	}
	if (track)
		for (int v = 0; v < 4; v++)
			vst1q_u16(base + 8 * v, least[v]);
}

/* plain stores, read back by this thread: nothing to fence */
ENCODE_SIMD(encode_neon, , step_neon, 0, (void)0)
#endif /* __aarch64__ */

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
#if defined(__aarch64__)
	[SF_ISA_NEON] = encode_neon,
	[SF_ISA_DOTPROD] = encode_neon,
	[SF_ISA_I8MM] = encode_neon,
#else
	[SF_ISA_NEON] = sf_trellis_encode_ref,
	[SF_ISA_DOTPROD] = sf_trellis_encode_ref,
	[SF_ISA_I8MM] = sf_trellis_encode_ref,
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
