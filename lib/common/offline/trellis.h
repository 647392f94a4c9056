/* The bitshift trellis of SpAx's middle tier (after QTIP): a column of m
 * weights is m 2-bit codes; weight t reads codebook[idx_t] with
 * idx_t = ((idx_{t-1} << 2) | c_t) & 0xFFFF and idx_{-1} = 0. The encoder
 * is an exact Viterbi search over the 2^14 states (the last seven codes),
 * four predecessors each, with 2-bit traceback per state per step, of an
 * integer metric: the squared error in 16-bit fixed point (trellis.c). The
 * codebook and its generator are the format's (formats/codes.h,
 * man/sf-formats.5 (codes)). */
#ifndef SF_TRELLIS_H
#define SF_TRELLIS_H

#include <stddef.h>
#include <stdint.h>

#include "formats/codes.h"

#define SF_TRELLIS_STATES (1u << 14)	/* the last seven codes */
#define SF_TRELLIS_LOCKSTEP 32	/* columns one encoder call searches at once (one per lane) */

/* Scratch of one encoding thread for columns up to mmax long, tied to the
 * codebook cb (kept by pointer, and copied in fixed point for the search):
 * 1.4 MiB of metrics and codebook, and the traceback, 128 KiB per step (2
 * bits per state for each of the SF_TRELLIS_LOCKSTEP columns). */
struct sf_trellis_work;
uint64_t sf_trellis_work_bytes(size_t mmax);
/* 0 or -ENOMEM */
int sf_trellis_work_init(struct sf_trellis_work **w, const float *cb, size_t mmax);
void sf_trellis_work_free(struct sf_trellis_work *w);	/* accepts NULL */

/* Encodes n columns (1 <= n <= SF_TRELLIS_LOCKSTEP) of m values each,
 * x[i][0..m) (finite, already divided by the column's scale), into
 * codes[i][0..m) (one code 0..3 per byte), minimising sum_t (x[i][t] -
 * cb[idx_t])^2 over w's codebook with x and cb in 16-bit fixed point (12
 * fraction bits, clamped to +-8), the differences saturated to 16 bits,
 * the squares truncated to 8 fraction bits and the sums saturating at 256
 * above the best path's: an exact search of that metric, whose codes are
 * within a fraction of a percent of the float optimum's error on N(0,1)
 * data. err[i] gets
 * the float squared error of the codes found (may be NULL). The n columns
 * are searched in lockstep, one per SIMD lane, so each codebook load
 * serves them all (fewer than 32 cost as much as 32); the result of a
 * column does not depend on the others. m <= mmax of w. The _ref path
 * gives bit-identical codes (integer arithmetic). */
void sf_trellis_encode(const float *const *x, int n, size_t m, uint8_t *const *codes,
		       double *err, struct sf_trellis_work *w);
void sf_trellis_encode_ref(const float *const *x, int n, size_t m, uint8_t *const *codes,
			   double *err, struct sf_trellis_work *w);

/* out[t] = cb[idx_t] for the codes c[0..m). */
void sf_trellis_decode(const float *cb, const uint8_t *c, size_t m, float *out);

#endif
