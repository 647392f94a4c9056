/* The quantized top tier's blocks (sf-pack --dtype q8|q4): a column of
 * rows is stored as blocks of SF_QBLOCK consecutive rows, each an f16
 * scale and the rows' signed codes, weight = code * scale (symmetric: the
 * weights of a column are centred on zero, so a minimum would spend two
 * bytes a block on nothing). Byte layout: man/sf-formats.5 (QUANTIZED
 * COLUMNS); the kernels over them: engine/kernels_q.h. */
#ifndef SF_QUANT_H
#define SF_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "base/vocab.h"

#define SF_QBLOCK 32		/* rows per block */
#define SF_Q8_BLOCK_BYTES 34	/* f16 scale, 32 int8 codes */
#define SF_Q4_BLOCK_BYTES 18	/* f16 scale, 16 bytes of 4-bit codes */
#define SF_Q8_MAX 127		/* codes -127..127 (rtn), -128 reachable by search */
#define SF_Q4_MAX 7		/* codes -8..7 stored as code + 8 */

/* q8: row i of the block is q[i]. */
struct sf_q8_block {
	uint8_t scale[2];	/* f16, little-endian */
	int8_t q[SF_QBLOCK];
};
/* q4: byte i holds row i in its low nibble and row i + 16 in its high
 * one, each code + 8 (so 16 bytes unpack to two runs of 16 rows). */
struct sf_q4_block {
	uint8_t scale[2];	/* f16, little-endian */
	uint8_t q[SF_QBLOCK / 2];
};
_Static_assert(sizeof(struct sf_q8_block) == SF_Q8_BLOCK_BYTES, "q8 block is 34 bytes");
_Static_assert(sizeof(struct sf_q4_block) == SF_Q4_BLOCK_BYTES, "q4 block is 18 bytes");
_Static_assert(offsetof(struct sf_q8_block, q) == 2 && offsetof(struct sf_q4_block, q) == 2,
	       "codes follow the scale");

/* How a block's scale is chosen: rtn, max |w| / SF_Qx_MAX rounded up to
 * an f16 (every code then rounds to nearest, error <= scale / 2); search,
 * the f16 scale among rtn's and 20 others about it (max |w| / d for d
 * within 1 of SF_Qx_MAX) with the least squared error of the block. */
enum sf_quant_method { SF_QUANT_RTN, SF_QUANT_SEARCH };
const char *sf_quant_method_name(enum sf_quant_method m);
/* 0 and *m set, or -1 for an unknown name ("rtn", "search"). */
int sf_quant_method_parse(const char *name, enum sf_quant_method *m);

/* Writes the sf_dtype_col_bytes(dt, rows) bytes of column w[0..rows) in
 * block dtype dt. 0, or -ERANGE when a weight is not finite or a block's
 * scale leaves f16's range (max |w| over 127 or 7 above 65504). */
int sf_quant_column(uint8_t *dst, enum sf_dtype dt, const float *w, size_t rows,
		    enum sf_quant_method m);
/* w[0..rows) = the column's weights, code * scale in f32 as the kernels
 * compute them. */
void sf_dequant_column(float *w, const uint8_t *src, enum sf_dtype dt, size_t rows);

/* A block's scale, and the code of its row i (0 <= i < SF_QBLOCK). */
float sf_quant_scale(const uint8_t *block);
static inline int sf_q8_code(const uint8_t *block, size_t i)
{
	return (int8_t)block[2 + i];
}
static inline int sf_q4_code(const uint8_t *block, size_t i)
{
	return (int)((block[2 + i % 16] >> (i / 16 * 4)) & 15) - 8;
}

#endif
