/* Products of a matrix whose rows are quantized vectors (base/quant.h:
 * an image's q8, q6 or q4 embedding and output head, a GGUF's Q8_0 and
 * Q4_0 matrices, gpt-oss's MXFP4 experts), llama.cpp's way:
 * each token's input rounded to int8 per block of 32 with its own scale,
 * then per block one integer dot product of codes and inputs. A portable
 * _ref and AVX2, AVX-512 (VNNI with VBMI; AMX tiles for a pass's tiled
 * matrices) paths that give its floats bit for bit. sf_matmul_rows (engine/kernels.h) sends block dtypes here. */
#ifndef SF_KERNELS_QROWS_H
#define SF_KERNELS_QROWS_H

#include <stddef.h>

#include "base/vocab.h"

/* y[t * ldy + r - r0] = W[r] . x_t for rows r in [r0, r1) and tokens
 * t < T (x_t at x + t * ldx), W's rows of cols elements in block dtype dt
 * (Q8, Q6, Q4 or MXFP4: its codes and scales as sf_q_int_code and
 * sf_q_int_scale give them), each sf_dtype_col_bytes(dt, cols) bytes, cols a
 * multiple of SF_QBLOCK. For token t and block b of x_t: amax = max |x|,
 * d_b = amax / 127, q = round(x * (127 / amax)) (0 when 127 / amax is not
 * finite: amax 0 or below about 2^-121; a non-finite x keeps amax, so d_b
 * and the products, non-finite, its codes 0: sf_q8_amax). Per
 * row, 16 float sums start at 0; block b's eight runs of four elements,
 * g = 0..7, in block order, each do sum[(b % 2) * 8 + g] = fmaf((float)
 * (the run's sum of code * q), scale_b * d_b, sum[...]); then sum[i] +=
 * sum[i + w] for w = 8, 4, 2, 1 and i < w, and sum[0] is the product. A
 * token's floats depend on no other token and no other row. */
void sf_qmatmul_rows(float *y, size_t ldy, const void *W, enum sf_dtype dt, size_t cols,
		     const float *x, size_t ldx, size_t T, size_t r0, size_t r1);
void sf_qmatmul_rows_ref(float *y, size_t ldy, const void *W, enum sf_dtype dt, size_t cols,
			 const float *x, size_t ldx, size_t T, size_t r0, size_t r1);
/* For the tiled dtypes Q8X16 and Q4X16 (base/quant.h's tiles: rows a
 * multiple of SF_QTILE, W's tiles one after another) the inputs are
 * rounded the same way, and per row and token one float sum starts at 0;
 * block by block in order, sum = fmaf((float)(the block's integer sum of
 * code * q), scale_b * d_b, sum): llama.cpp's order, one rounding a block
 * where the rows above take eight, and with the tiles' interleaving one
 * load of codes feeds SF_QTILE rows. Any [r0, r1) within the rows. At the
 * AVX-512 level a CPU with AMX (sf_cpu_has_feature "amx-int8") takes a
 * pass's tiles 16 tokens at a time, each block's integer sums of the 16
 * tokens by a tile's 16 rows in one TDPBSSD: the same integers, the same
 * float steps, so the same floats. */
/* For Q6X16 (an image's Q6 output head tiled where it is held) the
 * floats are its rows', bit for bit: per row sixteen sums as above. The
 * AVX-512 level has a kernel of its own for them (a lane a row, one load
 * of codes for the tile's sixteen rows); the others unpack each row and
 * take their rows kernel, so sf_qmatmul_rows_q6_tiles says where tiling
 * the head pays: 1 at the AVX-512 level. */
int sf_qmatmul_rows_q6_tiles(void);
/* The path sf_qmatmul_rows takes here: "avx512vnni", "avx2", "dotprod",
 * "neon" or "ref". */
const char *sf_qmatmul_rows_kernel(void);

#endif
