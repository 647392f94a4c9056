/* The quantized top tier's columns (sf-pack --dtype q8|q4): a column of
 * rows is cut into blocks of SF_QBLOCK consecutive rows, each an f16 scale
 * and the rows' signed codes, weight = code * scale (symmetric: the
 * weights of a column are centred on zero, so a minimum would spend two
 * bytes a block on nothing). The column holds every block's scale first,
 * then every block's codes: the integer kernels fold a block's scale into
 * the activation, so they load the scales of many blocks as one vector.
 * Byte layout: man/sf-formats.5 (QUANTIZED COLUMNS); the kernels over
 * them: engine/kernels_q.h. */
#ifndef SF_QUANT_H
#define SF_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "base/vocab.h"

#define SF_QBLOCK 32		/* rows per block */
#define SF_Q8_BLOCK_BYTES 34	/* a block's f16 scale and 32 int8 codes */
#define SF_Q4_BLOCK_BYTES 18	/* a block's f16 scale and 16 bytes of 4-bit codes */
#define SF_Q8_MAX 127		/* codes -127..127 (rtn), -128 reachable by search */
#define SF_Q4_MAX 7		/* codes -8..7 stored as code + 8 */

/* The blocks of a column of rows rows. */
static inline size_t sf_q_blocks(size_t rows)
{
	return (rows + SF_QBLOCK - 1) / SF_QBLOCK;
}

/* Bytes of one block's codes: q8, row i at byte i; q4, byte i holds row i
 * in its low nibble and row i + 16 in its high one, each code + 8 (so 16
 * bytes unpack to two runs of 16 rows). */
static inline size_t sf_q_code_bytes(enum sf_dtype dt)
{
	return dt == SF_DTYPE_Q8 ? SF_Q8_BLOCK_BYTES - 2 : SF_Q4_BLOCK_BYTES - 2;
}

/* Block b's scale (f16, little-endian) and codes in the column at col. */
static inline const uint8_t *sf_q_scale_at(const uint8_t *col, size_t b)
{
	return col + 2 * b;
}
static inline const uint8_t *sf_q_codes_at(const uint8_t *col, enum sf_dtype dt, size_t rows,
					   size_t b)
{
	return col + 2 * sf_q_blocks(rows) + b * sf_q_code_bytes(dt);
}

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

/* Block b's scale, and the code of row i (0 <= i < SF_QBLOCK) of the
 * block whose codes start at codes. */
float sf_quant_scale(const uint8_t *col, size_t b);
static inline int sf_q8_code(const uint8_t *codes, size_t i)
{
	return (int8_t)codes[i];
}
static inline int sf_q4_code(const uint8_t *codes, size_t i)
{
	return (int)((codes[i % 16] >> (i / 16 * 4)) & 15) - 8;
}
/* The weight of row r of the column at col: code * scale in f32, as every
 * kernel computes it. */
static inline float sf_q_weight(const uint8_t *col, enum sf_dtype dt, size_t rows, size_t r)
{
	const uint8_t *c = sf_q_codes_at(col, dt, rows, r / SF_QBLOCK);
	int code = dt == SF_DTYPE_Q8 ? sf_q8_code(c, r % SF_QBLOCK) : sf_q4_code(c, r % SF_QBLOCK);
	return (float)code * sf_quant_scale(col, r / SF_QBLOCK);
}

#endif
