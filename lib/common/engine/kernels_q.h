/* Column-accumulate over the quantized top tier's blocks (base/quant.h):
 * the sparse decoder's top-tier kernel for q8 and q4 images, one token or
 * a pass of T, with a portable _ref and AVX2, AVX-512 paths that give its
 * floats bit for bit (each weight dequantized to code * scale in f32, then
 * one fused multiply-add per weight and token, columns in order). */
#ifndef SF_KERNELS_Q_H
#define SF_KERNELS_Q_H

#include <stddef.h>
#include <stdint.h>

#include "base/vocab.h"

/* For rows j in [r0, r1) of the columns k < n: Y[t * ldy + j - r0] +=
 * X[k * ldx + t] * w(k, j) for each token t < T whose sel[k * ldx + t] is
 * ~0 (sel as sf_colaccum_batch's: ldx a multiple of SF_BATCH_PAD at least
 * T), or for the one token (T 1, ldx 1) when sel is NULL. Column k's
 * blocks start at byte (const char *)cols[k] + off; dt is SF_DTYPE_Q8 or
 * SF_DTYPE_Q4. Rows may start and end inside a block; a pass gives every
 * token the floats a one-token call gives it over its own columns. */
void sf_qcolaccum(float *Y, size_t ldy, size_t r0, size_t r1, const void *const *cols,
		  size_t off, enum sf_dtype dt, const float *X, const uint32_t *sel, size_t ldx,
		  size_t T, size_t n);
void sf_qcolaccum_ref(float *Y, size_t ldy, size_t r0, size_t r1, const void *const *cols,
		      size_t off, enum sf_dtype dt, const float *X, const uint32_t *sel,
		      size_t ldx, size_t T, size_t n);

/* The same over any top-tier dtype (the sparse decoder's one call): block
 * dtypes here, element dtypes through sf_colaccum (sel NULL) or
 * sf_colaccum_batch, their rows [r0, r1). */
void sf_colaccum_span(float *Y, size_t ldy, size_t r0, size_t r1, const void *const *cols,
		      size_t off, enum sf_dtype dt, const float *X, const uint32_t *sel,
		      size_t ldx, size_t T, size_t n);

#endif
