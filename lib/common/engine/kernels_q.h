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
#include "engine/cpu.h"
#include "engine/kernels.h"

/* For rows j in [r0, r1) of the columns k < n: Y[t * ldy + j - r0] +=
 * X[k * ldx + t] * w(k, j) for each token t < T whose sel[k * ldx + t] is
 * ~0 (sel as sf_colaccum_batch's: ldx a multiple of SF_BATCH_PAD at least
 * T), or for the one token (T 1, ldx 1) when sel is NULL. Column k, of
 * rows rows, starts at byte (const char *)cols[k] + off; dt is
 * SF_DTYPE_Q8 or SF_DTYPE_Q4. Rows may start and end inside a block; a
 * pass gives every token the floats a one-token call gives it over its
 * own columns. */
void sf_qcolaccum(float *Y, size_t ldy, size_t r0, size_t r1, size_t rows,
		  const void *const *cols, size_t off, enum sf_dtype dt, const float *X,
		  const uint32_t *sel, size_t ldx, size_t T, size_t n);
void sf_qcolaccum_ref(float *Y, size_t ldy, size_t r0, size_t r1, size_t rows,
		      const void *const *cols, size_t off, enum sf_dtype dt, const float *X,
		      const uint32_t *sel, size_t ldx, size_t T, size_t n);

/* The integer path for one token or a pass (the default for q8 and q4
 * images; the float path above stays its reference, sf-run --activations
 * f32). Column k's positions pos[k] ascend; a run is the columns whose
 * positions share pos / SF_QRUN (at most SF_QRUN of them, cut there
 * otherwise: sf_qrun_end). For row j of block b = j / 32 and token t,
 * per run in turn: v_k = X[k * ldx + t] * scale_k(b), amax = max |v_k|,
 * q_k = round(v_k * id) with id = 127 / amax where that is finite, else 0
 * (amax 0, or below about 2^-121: sf_q8_inv_scale), then
 * Y[t * ldy + j - r0] = fmaf(amax / 127, sum of q_k * code_k(j), Y[...]):
 * the block scales folded into the activations, which then multiply the
 * codes in integers (AVX-512 VNNI with VBMI, AVX2, and this _ref, equal
 * bit for bit). A token's inputs not selected are 0 in X (no sel): they
 * change neither amax nor the sum, so a pass gives each token the floats
 * of a one-token call over its own columns, cut into the same runs.
 * The paths agree for finite v; a non-finite v makes the _ref's Y
 * non-finite (its amax keeps it, sf_q8_amax, and no code is rounded from
 * it), the SIMD paths' Y is unspecified there; no path converts an
 * out-of-range float to an integer in C. */
#define SF_QRUN 32
size_t sf_qrun_end(const uint32_t *pos, size_t k0, size_t n);
void sf_qcolaccum_int(float *Y, size_t ldy, size_t r0, size_t r1, size_t rows,
		      const void *const *cols, const uint32_t *pos, size_t off, enum sf_dtype dt,
		      const float *X, size_t ldx, size_t T, size_t n);
void sf_qcolaccum_int_ref(float *Y, size_t ldy, size_t r0, size_t r1, size_t rows,
			  const void *const *cols, const uint32_t *pos, size_t off,
			  enum sf_dtype dt, const float *X, size_t ldx, size_t T, size_t n);
/* A slab: one matrix's q8/q4 columns at positions p < n held for the
 * integer path when a group is held in RAM whole, laid out as the
 * integer kernels stream it. Tiles of SF_QSLAB_BLOCKS blocks of rows; in a
 * tile, the positions' runs of SF_QRUN one after another (n rounded up,
 * the missing positions' bytes 0); in a run, its positions' block scales
 * (position by position, the tile's blocks each), then its codes block by
 * block, a block's quads of four positions one after another, each quad
 * interleaved by row: q4 64 bytes, byte 4r + c position c's byte r (rows r
 * and r + 16); q8 128 bytes, byte 64h + 4r + c position c's code of row
 * 16h + r. So a thread's rows are one stretch of memory read in order, and
 * a quad's block is one load. The same bytes as the columns, rounded up to
 * whole runs. Tiles of 16 blocks (512 rows), one AVX-512 pass of block
 * activations: with 32, two threads splitting a tile of a 1,152-row
 * matrix (Gemma 3 1B's) each read half of every run, and the pair
 * streamed it at 16 GB/s against 19-20 (qint, 1,152 x 6,912). */
#define SF_QSLAB_BLOCKS 16
/* Bytes of a slab: the columns' bytes of n rounded up to whole runs. */
size_t sf_qslab_bytes(enum sf_dtype dt, size_t rows, size_t n);
void sf_qslab_put(const struct sf_slab *s, size_t p, const uint8_t *col);
/* sf_qcolaccum_int over positions pos[0..k) (ascending) of a slab, X as
 * its: the same floats as over the same columns. */
void sf_qslab_int(float *Y, size_t ldy, size_t r0, size_t r1, const struct sf_slab *s,
		  const uint32_t *pos, size_t k, const float *X, size_t ldx, size_t T);
void sf_qslab_int_ref(float *Y, size_t ldy, size_t r0, size_t r1, const struct sf_slab *s,
		      const uint32_t *pos, size_t k, const float *X, size_t ldx, size_t T);

/* The level of the integer paths (here and engine/kernels_qrows.h):
 * sf_cpu_isa(), one below when AVX-512 lacks VNNI or VBMI. Read on every
 * call, so nothing is cached to race on. */
enum sf_isa sf_qint_isa(void);
/* The path sf_qcolaccum_int and sf_qslab_int take here: "avx512vnni",
 * "avx2", "dotprod" (SDOT), "neon" or "ref". */
const char *sf_qcolaccum_int_kernel(void);

/* A slab of any top-tier dtype (engine/kernels.h): its bytes; init sets
 * mem (and a q8/q4 slab's missing positions of its last run to 0); put
 * writes position p's column (rows s->rows, the column layout) into it;
 * accum is sf_colaccum_span over positions pos[0..k) of it (q8/q4: the
 * integer path, sf_qslab_int). */
size_t sf_slab_bytes(enum sf_dtype dt, size_t rows, size_t n);
void sf_slab_init(struct sf_slab *s, uint8_t *mem, enum sf_dtype dt, size_t rows, size_t n);
void sf_slab_put(const struct sf_slab *s, size_t p, const void *col);
void sf_slab_accum(float *Y, size_t ldy, size_t r0, size_t r1, const struct sf_slab *s,
		   const uint32_t *pos, size_t k, const float *X, const uint32_t *sel, size_t ldx,
		   size_t T);

/* The same over any top-tier dtype (the sparse decoder's one call): block
 * dtypes here, element dtypes through sf_colaccum (sel NULL) or
 * sf_colaccum_batch, their rows [r0, r1). */
void sf_colaccum_span(float *Y, size_t ldy, size_t r0, size_t r1, size_t rows,
		      const void *const *cols, size_t off, enum sf_dtype dt, const float *X,
		      const uint32_t *sel, size_t ldx, size_t T, size_t n);

#endif
