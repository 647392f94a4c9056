/* Selection kernels (see select.h): the radix-select top-k and the |x|
 * sums in plain C, their AVX-512 twins through target attributes, their
 * NEON twins on aarch64, and the family's tables indexed by the level
 * engine/cpu.h chose. */
#include "engine/select.h"

#include <math.h>
#include <string.h>

#include "engine/cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

// ----------------------------------------------------------------------------
// reference kernels

/* |x| as an integer that orders like the magnitude (sign bit cleared). */
static inline uint32_t mag_key(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	return u & 0x7fffffffu;
}

/* Radix select of the k-th largest key in two passes over the entries:
 * the exponent byte's histogram (which also fills key[]), then the bitmap
 * of the entries above the boundary exponent, gathering those in it.
 * The 23 mantissa bits are resolved among that gathered few, kept in
 * index order so that ties go to the lower index. Linear in n with no
 * worst case. */
void sf_select_topk_ref(const float *x, uint32_t n, uint32_t k, uint64_t *bits,
			uint32_t *scratch)
{
	uint32_t words = (n + 63) / 64;
	uint32_t *key = scratch, *cand = scratch + n;
	/* four histograms, so runs of one exponent do not chain their
	 * increments through memory */
	uint32_t hist[4][256] = { { 0 } };
	uint32_t need = k, ncand = 0;
	uint32_t b = 255;

	if (k == 0) {
		memset(bits, 0, (size_t)words * 8);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		key[i] = mag_key(x[i]);
		hist[i % 4][key[i] >> 23]++;
	}
	for (uint32_t h; (h = hist[0][b] + hist[1][b] + hist[2][b] + hist[3][b]) < need; b--)
		need -= h;
	for (uint32_t w = 0; w < words; w++) {
		uint32_t end = w * 64 + 64 < n ? w * 64 + 64 : n;
		uint64_t m = 0;
		for (uint32_t i = w * 64; i < end; i++) {
			uint32_t ex = key[i] >> 23;
			m |= (uint64_t)(ex > b) << (i % 64);
			cand[ncand] = i;
			ncand += ex == b;
		}
		bits[w] = m;
	}
	/* mantissa digits of 8, 8 and 7 bits: those above the boundary digit
	 * are in, those on it stay candidates */
	static const int shifts[] = { 15, 7, 0 };
	static const uint32_t digit[] = { 0xff, 0xff, 0x7f };
	for (int d = 0; d < 3 && need; d++) {
		uint32_t h[256] = { 0 }, kept = 0;
		for (uint32_t c = 0; c < ncand; c++)
			h[(key[cand[c]] >> shifts[d]) & digit[d]]++;
		uint32_t v = digit[d];
		while (h[v] < need) {
			need -= h[v];
			v--;
		}
		for (uint32_t c = 0; c < ncand; c++) {
			uint32_t i = cand[c], dv = (key[i] >> shifts[d]) & digit[d];
			if (dv > v)
				bits[i / 64] |= 1ull << (i % 64);
			cand[kept] = i;
			kept += dv == v;
		}
		ncand = kept;
	}
	/* the rest hold the boundary key itself: the lowest indices win */
	for (uint32_t c = 0; c < need; c++)
		bits[cand[c] / 64] |= 1ull << (cand[c] % 64);
}

/* |x|'s bits inverted: ascending keys are falling magnitudes */
static uint32_t falling_key(float x)
{
	uint32_t u;
	memcpy(&u, &x, sizeof(u));
	return ~(u & 0x7fffffffu);
}

void sf_select_rank(const float *x, uint32_t n, uint32_t *order, uint64_t *scratch)
{
	uint64_t *src = scratch, *dst = scratch + n;

	/* (key, index) pairs sorted a stable byte of the key at a time from
	 * the lowest, starting in index order: equal magnitudes keep it */
	for (uint32_t i = 0; i < n; i++)
		src[i] = (uint64_t)falling_key(x[i]) << 32 | i;
	for (int shift = 32; shift < 64; shift += 8) {
		uint32_t count[257] = { 0 };
		for (uint32_t i = 0; i < n; i++)
			count[((src[i] >> shift) & 0xff) + 1]++;
		if (count[((src[0] >> shift) & 0xff) + 1] == n)
			continue;	/* one value of this byte: the order stands */
		for (int b = 0; b < 256; b++)
			count[b + 1] += count[b];
		for (uint32_t i = 0; i < n; i++)
			dst[count[(src[i] >> shift) & 0xff]++] = src[i];
		uint64_t *t = src;
		src = dst;
		dst = t;
	}
	for (uint32_t i = 0; i < n; i++)
		order[i] = (uint32_t)src[i];
}

void sf_select_threshold(const float *x, uint32_t n, float threshold, uint64_t *bits)
{
	memset(bits, 0, (size_t)((n + 63) / 64) * 8);
	for (uint32_t i = 0; i < n; i++)
		if (fabsf(x[i]) > threshold)
			bits[i / 64] |= 1ull << (i % 64);
}

/* One branch-free pass. */
uint32_t sf_select_abs_sum_ref(const float *x, uint32_t n, double *sum)
{
	uint32_t worst = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t key = mag_key(x[i]);
		worst = key > worst ? key : worst;
		sum[i] += fabs((double)x[i]);
	}
	return worst;
}

// ----------------------------------------------------------------------------
// AVX-512 F: 16 keys a step, tails by masked loads

#if defined(__x86_64__)
#define T512 __attribute__((target("avx512f,popcnt")))

/* The keys of vector v of x[0..n), lanes past n zero (below any bound). */
static T512 inline __m512i keys16(const float *x, uint32_t n, uint32_t v, __mmask16 *lanes)
{
	uint32_t left = n - v * 16;
	*lanes = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
	__m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(*lanes, x + (size_t)v * 16));
	return _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
}

/* The k-th largest key bit by bit from the top, each bit one count of the
 * keys at or above a bound: the largest T with k keys >= T. The bits the
 * smallest and largest key share are T's already, and a bound that k keys
 * reach exactly ends the search (a lower bit cannot change which keys are
 * at or above it). Then the keys above T, and of those equal to T the
 * lowest indices. */
static T512 void topk_avx512(const float *x, uint32_t n, uint32_t k, uint64_t *bits)
{
	uint32_t nv = (n + 15) / 16, words = (n + 63) / 64;
	__m512i vmax = _mm512_setzero_si512(), vmin = _mm512_set1_epi32(0x7fffffff);
	__mmask16 lanes;

	for (uint32_t v = 0; v < nv; v++) {
		__m512i key = keys16(x, n, v, &lanes);
		vmax = _mm512_max_epu32(vmax, key);
		vmin = _mm512_mask_min_epu32(vmin, lanes, vmin, key);
	}
	uint32_t hi = _mm512_reduce_max_epu32(vmax), lo = _mm512_reduce_min_epu32(vmin);
	int top = hi == lo ? -1 : 31 - __builtin_clz(hi ^ lo);
	uint32_t thr = top < 0 ? hi : hi & ~((2u << top) - 1);
	for (int bit = top; bit >= 0; bit--) {
		__m512i bound = _mm512_set1_epi32((int)(thr | 1u << bit));
		uint32_t count = 0;
		for (uint32_t v = 0; v < nv; v++)
			count += (uint32_t)__builtin_popcount(
				_mm512_cmpge_epu32_mask(keys16(x, n, v, &lanes), bound));
		if (count >= k)
			thr |= 1u << bit;
		if (count == k)
			break;	/* the keys >= thr are the k: below, those > thr and the ties */
	}
	__m512i vthr = _mm512_set1_epi32((int)thr);
	uint32_t need = k;
	for (uint32_t w = 0; w < words; w++) {
		uint64_t m = 0;
		for (uint32_t v = w * 4; v < w * 4 + 4 && v < nv; v++)
			m |= (uint64_t)_mm512_cmpgt_epu32_mask(keys16(x, n, v, &lanes), vthr)
			     << (v % 4 * 16);
		bits[w] = m;
		need -= (uint32_t)__builtin_popcountll(m);
	}
	for (uint32_t v = 0; need && v < nv; v++) {
		__m512i key = keys16(x, n, v, &lanes);
		for (unsigned m = _mm512_mask_cmpeq_epu32_mask(lanes, key, vthr); need && m;
		     m &= m - 1, need--) {
			uint32_t i = v * 16 + (uint32_t)__builtin_ctz(m);
			bits[i / 64] |= 1ull << (i % 64);
		}
	}
}

/* The same sums: a float's conversion to double is exact and each entry
 * is added alone, so the bits agree with sf_select_abs_sum_ref. */
static T512 uint32_t abs_sum_avx512(const float *x, uint32_t n, double *sum)
{
	__m512i worst = _mm512_setzero_si512();

	for (uint32_t i = 0; i < n; i += 16) {
		__mmask16 lanes = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
		__mmask8 lo = (__mmask8)lanes, hi = (__mmask8)(lanes >> 8);
		__m512i u = _mm512_and_si512(_mm512_maskz_loadu_epi32(lanes, x + i),
					     _mm512_set1_epi32(0x7fffffff));
		worst = _mm512_max_epu32(worst, u);
		__m512d a = _mm512_cvtps_pd(_mm256_castsi256_ps(_mm512_castsi512_si256(u)));
		__m512d b = _mm512_cvtps_pd(_mm256_castsi256_ps(_mm512_extracti64x4_epi64(u, 1)));
		_mm512_mask_storeu_pd(sum + i, lo, _mm512_add_pd(_mm512_maskz_loadu_pd(lo, sum + i), a));
		_mm512_mask_storeu_pd(sum + i + 8, hi,
				      _mm512_add_pd(_mm512_maskz_loadu_pd(hi, sum + i + 8), b));
	}
	return _mm512_reduce_max_epu32(worst);
}

/* The bound search needs a key to find: k == 0 takes the reference. */
static void topk_avx512_k(const float *x, uint32_t n, uint32_t k, uint64_t *bits,
			  uint32_t *scratch)
{
	if (k)
		topk_avx512(x, n, k, bits);
	else
		sf_select_topk_ref(x, n, k, bits, scratch);
}
#endif

// ----------------------------------------------------------------------------
// NEON: 4 keys a step, the tail of n % 4 in plain C

#if defined(__aarch64__)

/* The keys of x[i..i + 4). */
static inline uint32x4_t keys4(const float *x, uint32_t i)
{
	return vandq_u32(vreinterpretq_u32_f32(vld1q_f32(x + i)), vdupq_n_u32(0x7fffffff));
}

/* How many keys of x[0..n) are >= bound. */
static uint32_t count_ge_neon(const float *x, uint32_t n, uint32_t bound)
{
	uint32x4_t cnt = vdupq_n_u32(0), b = vdupq_n_u32(bound);
	uint32_t i = 0, c;
	for (; i + 4 <= n; i += 4)
		cnt = vsubq_u32(cnt, vcgeq_u32(keys4(x, i), b));	/* true is ~0: -1 */
	c = vaddvq_u32(cnt);
	for (; i < n; i++)
		c += mag_key(x[i]) >= bound;
	return c;
}

/* topk_avx512's bound search with vectors of four: the largest T with k
 * keys >= T, bit by bit from the bits the smallest and largest key do not
 * share; then the keys above T, and of those equal to T the lowest
 * indices. */
static void topk_neon_k(const float *x, uint32_t n, uint32_t k, uint64_t *bits,
			uint32_t *scratch)
{
	uint32_t words = (n + 63) / 64, i = 0;

	if (!k) {	/* the search needs a key to find */
		sf_select_topk_ref(x, n, k, bits, scratch);
		return;
	}
	uint32x4_t vmax = vdupq_n_u32(0), vmin = vdupq_n_u32(0x7fffffff);
	for (; i + 4 <= n; i += 4) {
		uint32x4_t key = keys4(x, i);
		vmax = vmaxq_u32(vmax, key);
		vmin = vminq_u32(vmin, key);
	}
	uint32_t hi = vmaxvq_u32(vmax), lo = vminvq_u32(vmin);
	for (; i < n; i++) {
		uint32_t key = mag_key(x[i]);
		hi = key > hi ? key : hi;
		lo = key < lo ? key : lo;
	}
	int top = hi == lo ? -1 : 31 - __builtin_clz(hi ^ lo);
	uint32_t thr = top < 0 ? hi : hi & ~((2u << top) - 1);
	for (int bit = top; bit >= 0; bit--) {
		uint32_t count = count_ge_neon(x, n, thr | 1u << bit);
		if (count >= k)
			thr |= 1u << bit;
		if (count == k)
			break;	/* the keys >= thr are the k: below, those > thr and the ties */
	}
	uint32_t need = k;
	memset(bits, 0, (size_t)words * 8);
	for (i = 0; i < n; i++)
		if (mag_key(x[i]) > thr) {
			bits[i / 64] |= 1ull << (i % 64);
			need--;
		}
	for (i = 0; need && i < n; i++)
		if (mag_key(x[i]) == thr) {
			bits[i / 64] |= 1ull << (i % 64);
			need--;
		}
}

/* The same sums as the _ref: each float widened exactly and added alone. */
static uint32_t abs_sum_neon(const float *x, uint32_t n, double *sum)
{
	uint32x4_t worst = vdupq_n_u32(0);
	uint32_t i = 0, w;
	for (; i + 4 <= n; i += 4) {
		uint32x4_t u = keys4(x, i);
		float32x4_t a = vreinterpretq_f32_u32(u);
		worst = vmaxq_u32(worst, u);
		vst1q_f64(sum + i, vaddq_f64(vld1q_f64(sum + i), vcvt_f64_f32(vget_low_f32(a))));
		vst1q_f64(sum + i + 2, vaddq_f64(vld1q_f64(sum + i + 2), vcvt_high_f64_f32(a)));
	}
	w = vmaxvq_u32(worst);
	uint32_t tail = sf_select_abs_sum_ref(x + i, n - i, sum + i);
	return tail > w ? tail : w;
}
#endif

// ----------------------------------------------------------------------------
// the family's tables, indexed by enum sf_isa (engine/cpu.h); AVX2 has no
// path of its own and repeats the reference

static void (*const topk_table[SF_NISA])(const float *, uint32_t, uint32_t, uint64_t *,
					  uint32_t *) = {
	[SF_ISA_REF] = sf_select_topk_ref,
	[SF_ISA_AVX2] = sf_select_topk_ref,
#if defined(__x86_64__)
	[SF_ISA_AVX512] = topk_avx512_k,
#else
	[SF_ISA_AVX512] = sf_select_topk_ref,
#endif
#if defined(__aarch64__)
	[SF_ISA_NEON] = topk_neon_k,
	[SF_ISA_DOTPROD] = topk_neon_k,
	[SF_ISA_I8MM] = topk_neon_k,
#else
	[SF_ISA_NEON] = sf_select_topk_ref,
	[SF_ISA_DOTPROD] = sf_select_topk_ref,
	[SF_ISA_I8MM] = sf_select_topk_ref,
#endif
};

static uint32_t (*const abs_sum_table[SF_NISA])(const float *, uint32_t, double *) = {
	[SF_ISA_REF] = sf_select_abs_sum_ref,
	[SF_ISA_AVX2] = sf_select_abs_sum_ref,
#if defined(__x86_64__)
	[SF_ISA_AVX512] = abs_sum_avx512,
#else
	[SF_ISA_AVX512] = sf_select_abs_sum_ref,
#endif
#if defined(__aarch64__)
	[SF_ISA_NEON] = abs_sum_neon,
	[SF_ISA_DOTPROD] = abs_sum_neon,
	[SF_ISA_I8MM] = abs_sum_neon,
#else
	[SF_ISA_NEON] = sf_select_abs_sum_ref,
	[SF_ISA_DOTPROD] = sf_select_abs_sum_ref,
	[SF_ISA_I8MM] = sf_select_abs_sum_ref,
#endif
};

void sf_select_topk(const float *x, uint32_t n, uint32_t k, uint64_t *bits,
		    uint32_t *scratch)
{
	topk_table[sf_cpu_isa()](x, n, k, bits, scratch);
}

uint32_t sf_select_abs_sum(const float *x, uint32_t n, double *sum)
{
	return abs_sum_table[sf_cpu_isa()](x, n, sum);
}
