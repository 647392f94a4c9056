/* The quantized top tier's columns (sf-pack --dtype q8|q4), and the rows
 * of a quantized embedding and output head (q8, q6, q4): a vector (a
 * column of rows rows, or a row of cols elements: "rows" below) is cut
 * into blocks of SF_QBLOCK consecutive rows, each an f16 scale
 * and the rows' signed codes, weight = code * scale (symmetric: the
 * weights of a column are centred on zero, so a minimum would spend two
 * bytes a block on nothing). The column holds every block's scale first,
 * then every block's codes: the integer kernels fold a block's scale into
 * the activation, so they load the scales of many blocks as one vector.
 * Byte layout: man/sf-formats.5 (QUANTIZED BLOCKS); the kernels over
 * them: engine/kernels_q.h. */
#ifndef SF_QUANT_H
#define SF_QUANT_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/vocab.h"

#define SF_QBLOCK 32		/* rows per block */
#define SF_Q8_BLOCK_BYTES 34	/* a block's f16 scale and 32 int8 codes */
#define SF_Q4_BLOCK_BYTES 18	/* a block's f16 scale and 16 bytes of 4-bit codes */
#define SF_Q8_MAX 127		/* codes -127..127 (rtn), -128 reachable by search */
#define SF_Q4_MAX 7		/* codes -8..7 stored as code + 8 */
#define SF_Q6_BLOCK_BYTES 26	/* a block's f16 scale and 24 bytes of 6-bit codes */
#define SF_Q6_MAX 31		/* codes -32..31 stored as code + 32 */
#define SF_MXFP4_BLOCK_BYTES 17	/* a block's e8m0 scale byte and 16 bytes of e2m1 codes */

/* nearbyintf(x) in the default rounding mode, inline: adding 1.5 * 2^23
 * leaves a float whose unit is 1, so the sum rounds x to an integer, ties
 * to even (libm's call per weight was most of a search's time, and a
 * tenth of a prompt's rounding of its inputs). */
static inline float sf_round_even(float x)
{
	const float magic = 12582912.0f;

	return fabsf(x) < 4194304.0f ? (x + magic) - magic : nearbyintf(x);
}

/* 127 / amax, the factor that rounds activations whose largest magnitude
 * is amax to int8 codes; 0 where it is not finite: amax 0, amax below
 * about 2^-121 (the quotient overflows: a code from x * inf would be an
 * out-of-range int conversion), NaN. An infinite amax gives 0 too. */
static inline float sf_q8_inv_scale(float amax)
{
	float id = 127.0f / amax;

	return id <= FLT_MAX ? id : 0.0f;
}

/* max(amax, |x|), infinite or NaN for good once x is: a block with a
 * non-finite input is known by its amax, never rounded to codes. */
static inline float sf_q8_amax(float amax, float x)
{
	float a = fabsf(x);

	return a > amax || a != a ? a : amax;
}

/* The blocks of a column of rows rows. */
static inline size_t sf_q_blocks(size_t rows)
{
	return (rows + SF_QBLOCK - 1) / SF_QBLOCK;
}

/* Bytes of one block's codes: q8, row i at byte i; q4, byte i holds row i
 * in its low nibble and row i + 16 in its high one, each code + 8 (so 16
 * bytes unpack to two runs of 16 rows); q6, the low 4 bits of code + 32
 * as q4's 16 bytes, then 8 bytes whose byte j holds the high 2 bits of
 * rows j, j + 8, j + 16 and j + 24 at bits 0, 2, 4 and 6 (so a 64-bit
 * shift by 2k lines up the run of rows 8k..8k+7). */
static inline size_t sf_q_code_bytes(enum sf_dtype dt)
{
	return dt == SF_DTYPE_Q8 ? SF_Q8_BLOCK_BYTES - 2
	     : dt == SF_DTYPE_Q6 ? SF_Q6_BLOCK_BYTES - 2 : SF_Q4_BLOCK_BYTES - 2;
}
/* The largest code of a block dtype, and what its codes are stored plus
 * (0 for q8's two's complement bytes). */
static inline int sf_q_max(enum sf_dtype dt)
{
	return dt == SF_DTYPE_Q8 ? SF_Q8_MAX : dt == SF_DTYPE_Q6 ? SF_Q6_MAX : SF_Q4_MAX;
}
static inline int sf_q_bias(enum sf_dtype dt)
{
	return dt == SF_DTYPE_Q8 ? 0 : sf_q_max(dt) + 1;
}

/* Block b's scale (f16, little-endian) and codes in the column at col. */
static inline const uint8_t *sf_q_scale_at(const uint8_t *col, size_t b)
{
	return col + 2 * b;
}
static inline const uint8_t *sf_q_codes_at(const uint8_t *col, enum sf_dtype dt, size_t rows,
					   size_t b)
{
	size_t scale_bytes = dt == SF_DTYPE_MXFP4 ? 1 : 2;

	return col + scale_bytes * sf_q_blocks(rows) + b * sf_q_code_bytes(dt);
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
 * scale leaves f16's range (max |w| over the largest code above 65504). */
int sf_quant_column(uint8_t *dst, enum sf_dtype dt, const float *w, size_t rows,
		    enum sf_quant_method m);
struct sf_pool;
/* n columns of rows weights, column j at w + j * ld, into dst + j *
 * sf_dtype_col_bytes(dt, rows), split over pool's threads (NULL: the
 * caller alone; the bytes do not depend on the threads). 0, or -ERANGE
 * with *bad the first column sf_quant_column refuses. */
int sf_quant_columns(uint8_t *dst, enum sf_dtype dt, const float *w, size_t ld, size_t rows,
		     size_t n, enum sf_quant_method m, struct sf_pool *pool, size_t *bad);
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
static inline int sf_q6_code(const uint8_t *codes, size_t i)
{
	int lo = (codes[i % 16] >> (i / 16 * 4)) & 15, hi = (codes[16 + i % 8] >> (i / 8 * 2)) & 3;
	return (lo | hi << 4) - 32;
}
static inline int sf_q_code(const uint8_t *codes, enum sf_dtype dt, size_t i)
{
	return dt == SF_DTYPE_Q8 ? sf_q8_code(codes, i)
	     : dt == SF_DTYPE_Q6 ? sf_q6_code(codes, i) : sf_q4_code(codes, i);
}

/* MXFP4 (vocab.h): a row in Q4's block layout but for the scales, one
 * byte a block, the OCP format's e8m0 byte e (scale 2^(e - 127)), and
 * the codes, each the index of an e2m1 value (sign, two exponent bits,
 * one mantissa bit): weight = sf_e2m1[code] * scale, exact in f32 (two
 * significant bits): the bytes of a GGUF's MXFP4 blocks, the scales
 * moved to the front. e = 255 (not a number) has no scale; a weight past
 * f32's range is the reader's to refuse. */
extern const float sf_e2m1[16];
/* The widest MXFP4 row the kernels take (they widen rows four at a time
 * on the stack); readers refuse wider ones. */
#define SF_MXFP4_COLS_MAX 16384
/* The scale of e8m0 byte e < 255: 2^(e - 127), from its bits (2^-127 is
 * subnormal). */
static inline float sf_mxfp4_scale(uint8_t e)
{
	uint32_t u = e ? (uint32_t)e << 23 : 0x00400000u;
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}
/* 1 when e8m0 byte e with code c gives a float32 weight: e < 255, and
 * at 254 a code of magnitude below 2 (2 * 2^127 passes f32's range). */
static inline int sf_mxfp4_finite(uint8_t e, int c)
{
	return e < 254 || (e == 254 && (c & 7) < 4);
}
static inline int sf_mxfp4_code(const uint8_t *codes, size_t i)
{
	return (codes[i % 16] >> (i / 16 * 4)) & 15;
}

/* The integer products' view of a row's blocks (engine/kernels_qrows.h):
 * q8, q6 and q4 their codes and f16 scales; MXFP4 twice its e2m1 value
 * (an integer, |c| <= 12: sf_e2m1_twice) and half its scale (exact: a
 * power of two), the same weights. */
extern const int8_t sf_e2m1_twice[16];
static inline int sf_q_int_code(const uint8_t *codes, enum sf_dtype dt, size_t i)
{
	return dt == SF_DTYPE_MXFP4 ? sf_e2m1_twice[sf_mxfp4_code(codes, i)]
				    : sf_q_code(codes, dt, i);
}
float sf_q_int_scale(const uint8_t *row, enum sf_dtype dt, size_t b);

/* The weight of row r of the column at col: code * scale in f32, as every
 * kernel computes it. */
static inline float sf_q_weight(const uint8_t *col, enum sf_dtype dt, size_t rows, size_t r)
{
	const uint8_t *c = sf_q_codes_at(col, dt, rows, r / SF_QBLOCK);
	if (dt == SF_DTYPE_MXFP4)
		return sf_e2m1[sf_mxfp4_code(c, r % SF_QBLOCK)] * sf_mxfp4_scale(col[r / SF_QBLOCK]);
	return (float)sf_q_code(c, dt, r % SF_QBLOCK) * sf_quant_scale(col, r / SF_QBLOCK);
}

/* Tiles (vocab.h's Q8X16, Q4X16 and Q6X16): SF_QTILE rows of a Q8, Q4
 * or Q6 row matrix, each row cols elements (a multiple of SF_QBLOCK)
 * stored as a column is (its blocks' f16 scales, then their codes),
 * interleaved in the same bytes so that one load of codes holds all the
 * rows: block by block, block b's SF_QTILE scales in row order, then its
 * codes in groups of four columns, each group 64 bytes row by row (byte
 * 4r + c: row r's code of column 4g + c). Q8: eight groups of the stored
 * bytes (code as int8). Q4: four chunks of 64 bytes, byte 4r + c of chunk
 * h holding column 4h + c + 8 in its low nibble and column 16 + 4h + c + 8
 * in its high one (groups h and h + 4). Q6: the low four bits of code +
 * 32 as Q4's four chunks, then two chunks of their high two bits, byte 4r
 * + c of chunk k holding those of group 4k + j's column at bits 2j (j =
 * 0..3). So a tile's chunk h is bytes 4h..4h+3 of each row's codes as
 * they lie, but for Q6's high bits. A block of a tile takes SF_QTILE *
 * (2 + code bytes) bytes, its rows' bytes exactly. */
#define SF_QTILE 16
static inline size_t sf_qtile_block_bytes(enum sf_dtype dt)
{
	return SF_QTILE * (2 + sf_q_code_bytes(dt));
}
/* Where row r's code of column c (< SF_QBLOCK) lies in a tile's block
 * of codes: its byte, and for q4 the nibble's shift; the code itself. */
static inline size_t sf_qtile_byte(enum sf_dtype dt, size_t r, size_t c, int *shift)
{
	size_t g = c / 4, at = 4 * r + c % 4;

	*shift = dt != SF_DTYPE_Q8 && g >= 4 ? 4 : 0;
	return 64 * (dt == SF_DTYPE_Q8 ? g : g % 4) + at;
}
static inline int sf_qtile_code(const uint8_t *codes, enum sf_dtype dt, size_t r, size_t c)
{
	int shift;
	uint8_t byte = codes[sf_qtile_byte(dt, r, c, &shift)];

	if (dt == SF_DTYPE_Q8)
		return (int8_t)byte;
	if (dt == SF_DTYPE_Q4)
		return ((byte >> shift) & 15) - 8;
	uint8_t high = codes[256 + 64 * (c / 16) + 4 * r + c % 4];
	return (((byte >> shift) & 15) | ((high >> (c / 4 % 4 * 2)) & 3) << 4) - 32;
}
/* n rows of dt (Q8, Q4 or Q6) one after another, n a multiple of
 * SF_QTILE, as the n / SF_QTILE tiles they make, in the same bytes
 * elsewhere; and back, row r (< SF_QTILE) of a tile as its row's bytes. */
void sf_qtile_pack(uint8_t *tiles, const uint8_t *rows, size_t n, enum sf_dtype dt, size_t cols);
void sf_qtile_unpack_row(uint8_t *row, const uint8_t *tile, enum sf_dtype dt, size_t cols, size_t r);
/* Row r (< SF_QTILE) of a tile of dt (Q8, Q4 or Q6) as floats, code *
 * scale as sf_dequant_column gives them. */
void sf_qtile_dequant_row(float *w, const uint8_t *tile, enum sf_dtype dt, size_t cols, size_t r);

#endif
