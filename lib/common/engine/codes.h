/* The middle tier's kernels: a column record decoded to its weights, and
 * decode-accumulate, the sparse decoder's product with the codes of the
 * selected columns (AVX-512 and AVX2 beside the plain C _ref,
 * bit-identical; dispatched by engine/cpu.h). Record layout:
 * formats/codes.h and man/sf-formats.5 (codes). */
#ifndef SF_ENGINE_CODES_H
#define SF_ENGINE_CODES_H

#include <stddef.h>
#include <stdint.h>

#include "formats/codes.h"

/* out[0..m) = the weights a record decodes to: trellis cb[idx_t] * scale,
 * scalar sf_twoscale_level(c_t, s0, s1). cb: the trellis codebook (unused
 * for scalar). Exactly the values the encoder measured its error on. */
void sf_codes_decode(enum sf_code_method method, const float *cb, const uint8_t *rec, size_t m,
		     float *out);

/* The two factors of each weight's multiply-add in decode-accumulate:
 * out[0..m) the values (trellis cb[idx_t], scalar the levels) and the
 * return value what an input is multiplied by first (trellis the scale,
 * scalar 1), so that y[t] = fmaf(x * factor, out[t], y[t]) is exactly
 * the step sf_codes_colaccum takes for this column: a column decoded
 * once can serve many products with the same floats. */
float sf_codes_factors(enum sf_code_method method, const float *cb, const uint8_t *rec,
		       size_t m, float *out);

/* y[t] += sum_k xv[k] * decode(column idx[k])[t] for the rows t in
 * [r0, r1) (r1 <= m), columns in order, so any split of the rows gives
 * the same sums: one table lookup and one multiply-add per weight
 * (trellis: the 16-bit index from the code window, a gather from the
 * codebook; scalar: a 4-entry level table). */
void sf_codes_colaccum(float *y, const struct sf_codes_view *v, size_t r0, size_t r1,
		       const uint32_t *idx, const float *xv, size_t n);
void sf_codes_colaccum_ref(float *y, const struct sf_codes_view *v, size_t r0, size_t r1,
			   const uint32_t *idx, const float *xv, size_t n);

/* The same for T tokens sharing the columns (X, sel, ldx as
 * sf_colaccum_batch in engine/kernels.h): each step of a column is
 * decoded once for all the tokens that selected it, and every token gets
 * the floats sf_codes_colaccum gives it over its own columns. */
void sf_codes_colaccum_batch(float *Y, size_t ldy, const struct sf_codes_view *v, size_t r0,
			     size_t r1, const uint32_t *idx, const float *X, const uint32_t *sel,
			     size_t ldx, size_t T, size_t n);
void sf_codes_colaccum_batch_ref(float *Y, size_t ldy, const struct sf_codes_view *v,
				 size_t r0, size_t r1, const uint32_t *idx, const float *X,
				 const uint32_t *sel, size_t ldx, size_t T, size_t n);

#endif
