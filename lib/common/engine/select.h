/* Selection kernels: the active set of an activation vector as a bitmap,
 * by top-k of |x| (the trace's density mode, the sparse decoder's and
 * SelectInfer's selection) or by threshold, and the running |x| sums a
 * trace records beside them (man/sf-formats.5, TRACE). A portable _ref
 * for each, AVX-512 paths at that level of engine/cpu.h; every path sets
 * the same bits and adds the same sums. */
#ifndef SF_SELECT_H
#define SF_SELECT_H

#include <stdint.h>

/* The active set of x[0..n) as a bitmap (ceil(n/64) words, bit i%64 of
 * word i/64): the k entries of largest |x|, ties to the lower index.
 * Exactly k bits are set (k <= n). scratch: 2 * n words. */
void sf_select_topk(const float *x, uint32_t n, uint32_t k, uint64_t *bits,
		    uint32_t *scratch);
void sf_select_topk_ref(const float *x, uint32_t n, uint32_t k, uint64_t *bits,
			uint32_t *scratch);
/* The entries of x[0..n) by falling |x|, ties to the lower index, into
 * order[0..n) (its first k are the set sf_select_topk selects): a stable
 * radix sort of |x|'s bits, NaN first. scratch: 2 * n. */
void sf_select_rank(const float *x, uint32_t n, uint32_t *order, uint64_t *scratch);
/* Entries with |x| > threshold. */
void sf_select_threshold(const float *x, uint32_t n, float threshold, uint64_t *bits);

/* sum[i] += |x[i]| in float64 for i < n; returns the largest |x[i]| as
 * its bits with the sign cleared, so that a result >= 0x7f800000 says
 * some entry is not finite. */
uint32_t sf_select_abs_sum(const float *x, uint32_t n, double *sum);
uint32_t sf_select_abs_sum_ref(const float *x, uint32_t n, double *sum);

#endif
