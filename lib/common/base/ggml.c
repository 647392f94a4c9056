/* ggml's tensor types: the table of names and block sizes, and one
 * dequantizer per handled type. Each follows gguf-py's quants.py operation
 * by operation (the scale products first, then code * scale, then the
 * minimum subtracted or added) so the floats are the same bits; see
 * ggml.h and man/sf-formats.5. */
#include "base/ggml.h"

#include <errno.h>
#include <string.h>

#include "base/bytes.h"
#include "base/vocab.h"

struct type_info {
	const char *name;
	uint32_t block_elems, block_bytes;
	int supported;
};

/* Block bytes of the types read, as ggml-common.h's structs add up */
#define QK SF_GGML_QK
#define QK_K SF_GGML_QK_K
#define Q8_0_BYTES (2 + QK)
#define Q4_0_BYTES (2 + QK / 2)
#define Q4_1_BYTES (2 + 2 + QK / 2)
#define Q5_0_BYTES (2 + 4 + QK / 2)
#define Q5_1_BYTES (2 + 2 + 4 + QK / 2)
#define Q2_K_BYTES (QK_K / 16 + QK_K / 4 + 2 + 2)
#define Q3_K_BYTES (QK_K / 8 + QK_K / 4 + 12 + 2)
#define Q4_K_BYTES (2 + 2 + 12 + QK_K / 2)
#define Q5_K_BYTES (2 + 2 + 12 + QK_K / 8 + QK_K / 2)
#define Q6_K_BYTES (QK_K / 2 + QK_K / 4 + QK_K / 16 + 2)
#define MXFP4_BYTES (1 + QK / 2)
_Static_assert(Q8_0_BYTES == 34 && Q4_0_BYTES == 18 && Q4_1_BYTES == 20 && Q5_0_BYTES == 22 &&
	       Q5_1_BYTES == 24 && Q2_K_BYTES == 84 && Q3_K_BYTES == 110 && Q4_K_BYTES == 144 &&
	       Q5_K_BYTES == 176 && Q6_K_BYTES == 210 && MXFP4_BYTES == 17,
	       "ggml's block sizes (gguf-py's GGML_QUANT_SIZES)");

/* ggml.h's GGML_TYPE_* and gguf-py's GGML_QUANT_SIZES; the gaps are types
 * ggml removed. */
static const struct type_info types[] = {
	[0] = { "F32", 1, 4, 1 },
	[1] = { "F16", 1, 2, 1 },
	[2] = { "Q4_0", QK, Q4_0_BYTES, 1 },
	[3] = { "Q4_1", QK, Q4_1_BYTES, 1 },
	[6] = { "Q5_0", QK, Q5_0_BYTES, 1 },
	[7] = { "Q5_1", QK, Q5_1_BYTES, 1 },
	[8] = { "Q8_0", QK, Q8_0_BYTES, 1 },
	[9] = { "Q8_1", 32, 4 + 4 + 32, 0 },
	[10] = { "Q2_K", QK_K, Q2_K_BYTES, 1 },
	[11] = { "Q3_K", QK_K, Q3_K_BYTES, 1 },
	[12] = { "Q4_K", QK_K, Q4_K_BYTES, 1 },
	[13] = { "Q5_K", QK_K, Q5_K_BYTES, 1 },
	[14] = { "Q6_K", QK_K, Q6_K_BYTES, 1 },
	[15] = { "Q8_K", 256, 4 + 256 + 256 / 8, 0 },
	[16] = { "IQ2_XXS", 256, 2 + 256 / 4, 0 },
	[17] = { "IQ2_XS", 256, 2 + 256 / 4 + 256 / 32, 0 },
	[18] = { "IQ3_XXS", 256, 2 + 256 / 4 + 256 / 8, 0 },
	[19] = { "IQ1_S", 256, 2 + 256 / 8 + 256 / 16, 0 },
	[20] = { "IQ4_NL", 32, 2 + 16, 0 },
	[21] = { "IQ3_S", 256, 2 + 256 / 4 + 256 / 8 + 256 / 32 + 4, 0 },
	[22] = { "IQ2_S", 256, 2 + 256 / 4 + 256 / 16, 0 },
	[23] = { "IQ4_XS", 256, 2 + 2 + 256 / 2 + 256 / 64, 0 },
	[24] = { "I8", 1, 1, 0 },
	[25] = { "I16", 1, 2, 0 },
	[26] = { "I32", 1, 4, 0 },
	[27] = { "I64", 1, 8, 0 },
	[28] = { "F64", 1, 8, 0 },
	[29] = { "IQ1_M", 256, 256 / 8 + 256 / 16 + 256 / 32, 0 },
	[30] = { "BF16", 1, 2, 1 },
	[34] = { "TQ1_0", 256, 2 + 4 * 13, 0 },
	[35] = { "TQ2_0", 256, 2 + 64, 0 },
	[39] = { "MXFP4", QK, MXFP4_BYTES, 1 },
	[40] = { "NVFP4", 64, 4 + 32, 0 },
	[41] = { "Q1_0", 128, 2 + 16, 0 },
	[42] = { "Q2_0", 64, 2 + 16, 0 },
};

static const struct type_info *info(uint32_t type)
{
	if (type >= sizeof(types) / sizeof(types[0]) || !types[type].name)
		return NULL;
	return &types[type];
}

const char *sf_ggml_type_name(uint32_t type)
{
	const struct type_info *t = info(type);
	return t ? t->name : NULL;
}

int sf_ggml_type_supported(uint32_t type)
{
	const struct type_info *t = info(type);
	return t && t->supported;
}

uint32_t sf_ggml_block_elems(uint32_t type)
{
	const struct type_info *t = info(type);
	return t ? t->block_elems : 0;
}

uint32_t sf_ggml_block_bytes(uint32_t type)
{
	const struct type_info *t = info(type);
	return t ? t->block_bytes : 0;
}

int sf_ggml_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes)
{
	const struct type_info *t = info(type);

	if (!t || n % t->block_elems)
		return -EINVAL;
	if (__builtin_mul_overflow(n / t->block_elems, (uint64_t)t->block_bytes, bytes))
		return -EOVERFLOW;
	return 0;
}

// --- one block of each type: b its bytes, y its elements

static float f16_at(const uint8_t *p)
{
	return sf_f16_to_f32(sf_get_le16(p));
}

/* MXFP4: e8m0 byte e, 16 bytes of codes as Q4_0's; y = d * kvalues[q]
 * with d = 2^(e - 128) (ggml's e8m0 to float halved, subnormal below 2)
 * and kvalues twice the e2m1 values. */
static void block_mxfp4(const uint8_t *b, float *y)
{
	static const int8_t kvalues[16] = { 0, 1, 2, 3, 4, 6, 8, 12,
					    0, -1, -2, -3, -4, -6, -8, -12 };
	uint32_t bits = b[0] < 2 ? 0x00200000u << b[0] : (uint32_t)(b[0] - 1) << 23;
	float d;

	memcpy(&d, &bits, 4);
	for (int i = 0; i < 16; i++) {
		y[i] = d * (float)kvalues[b[1 + i] & 15];
		y[i + 16] = d * (float)kvalues[b[1 + i] >> 4];
	}
}

/* Q4_0: f16 d, 16 bytes; element i < 16 the low nibble of byte i, i >= 16
 * the high nibble of byte i - 16; y = d * (q - 8). */
static void block_q4_0(const uint8_t *b, float *y)
{
	float d = f16_at(b);

	for (int i = 0; i < 16; i++) {
		y[i] = d * (float)((b[2 + i] & 15) - 8);
		y[i + 16] = d * (float)((b[2 + i] >> 4) - 8);
	}
}

/* Q4_1: f16 d, f16 m, then Q4_0's nibbles; y = d * q + m. */
static void block_q4_1(const uint8_t *b, float *y)
{
	float d = f16_at(b), m = f16_at(b + 2);

	for (int i = 0; i < 16; i++) {
		y[i] = d * (float)(b[4 + i] & 15) + m;
		y[i + 16] = d * (float)(b[4 + i] >> 4) + m;
	}
}

/* Q5_0: f16 d, a 32-bit little-endian word whose bit i is element i's
 * fifth bit, then Q4_0's nibbles; y = d * (q - 16). */
static void block_q5_0(const uint8_t *b, float *y)
{
	float d = f16_at(b);
	uint32_t qh = sf_get_le32(b + 2);

	for (int i = 0; i < 16; i++) {
		int lo = (b[6 + i] & 15) | (int)((qh >> i) & 1) << 4;
		int hi = (b[6 + i] >> 4) | (int)((qh >> (i + 16)) & 1) << 4;
		y[i] = d * (float)(lo - 16);
		y[i + 16] = d * (float)(hi - 16);
	}
}

/* Q5_1: f16 d, f16 m, then Q5_0's high bits and nibbles; y = d * q + m. */
static void block_q5_1(const uint8_t *b, float *y)
{
	float d = f16_at(b), m = f16_at(b + 2);
	uint32_t qh = sf_get_le32(b + 4);

	for (int i = 0; i < 16; i++) {
		int lo = (b[8 + i] & 15) | (int)((qh >> i) & 1) << 4;
		int hi = (b[8 + i] >> 4) | (int)((qh >> (i + 16)) & 1) << 4;
		y[i] = d * (float)lo + m;
		y[i + 16] = d * (float)hi + m;
	}
}

/* Q8_0: f16 d, 32 int8 codes; y = q * d. */
static void block_q8_0(const uint8_t *b, float *y)
{
	float d = f16_at(b);

	for (int i = 0; i < 32; i++)
		y[i] = (float)(int8_t)b[2 + i] * d;
}

/* The 2-bit codes of Q2_K and Q3_K: element 128 h + 32 j + l is bits 2j
 * of byte 32 h + l. */
static int crumb(const uint8_t *qs, int i)
{
	return (qs[i / 128 * 32 + i % 32] >> (i % 128 / 32 * 2)) & 3;
}

/* Q2_K: 16 bytes of 4-bit scale (low) and min (high) per 16 elements, 64
 * bytes of 2-bit codes, f16 d, f16 dmin; y = (d * sc) * q - dmin * m. */
static void block_q2_k(const uint8_t *b, float *y)
{
	const uint8_t *sc = b, *qs = b + 16;
	float d = f16_at(b + 80), dmin = f16_at(b + 82);

	for (int s = 0; s < 16; s++) {
		float dl = d * (float)(sc[s] & 15), ml = dmin * (float)(sc[s] >> 4);
		for (int i = 16 * s; i < 16 * s + 16; i++)
			y[i] = dl * (float)crumb(qs, i) - ml;
	}
}

/* Q3_K: 32 bytes of high bits (element 32 j + l is bit j of byte l; a
 * clear bit subtracts 4), 64 bytes of 2-bit codes, 12 bytes of 6-bit
 * scales per 16 elements (low 4 bits: byte k or byte k - 8's high nibble;
 * high 2 bits: byte 8 + k % 4 at bit 2 (k / 4)), less 32, then f16 d;
 * y = (d * sc) * q. */
static void block_q3_k(const uint8_t *b, float *y)
{
	const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
	float d = f16_at(b + 108);

	for (int s = 0; s < 16; s++) {
		int lo = (s < 8 ? sc[s] : sc[s - 8] >> 4) & 15;
		int hi = (sc[8 + s % 4] >> (s / 4 * 2)) & 3;
		float dl = d * (float)((lo | hi << 4) - 32);

		for (int i = 16 * s; i < 16 * s + 16; i++) {
			int h = (hm[i % 32] >> (i / 32)) & 1;
			y[i] = dl * (float)(crumb(qs, i) - (h ? 0 : 4));
		}
	}
}

/* The 6-bit scale and min of sub-block s of Q4_K and Q5_K, packed in 12
 * bytes (ggml's get_scale_min_k4). */
static void scale_min_k4(const uint8_t *q, int s, int *sc, int *m)
{
	if (s < 4) {
		*sc = q[s] & 63;
		*m = q[s + 4] & 63;
	} else {
		*sc = (q[s + 4] & 15) | (q[s - 4] >> 6) << 4;
		*m = (q[s + 4] >> 4) | (q[s] >> 6) << 4;
	}
}

/* Q4_K and Q5_K: f16 d, f16 dmin, 12 bytes of scales and mins per 32
 * elements; Q5_K's 32 bytes of fifth bits (element 32 s + l is bit s of
 * byte l; qh NULL for Q4_K), then 128 bytes of nibbles (element 64 c +
 * 32 h + l: nibble h of byte 32 c + l); y = (d * sc) * q - dmin * m. */
static void block_k4(const uint8_t *b, const uint8_t *qh, const uint8_t *qs, float *y)
{
	float d = f16_at(b), dmin = f16_at(b + 2);

	for (int s = 0; s < 8; s++) {
		int sc, m;
		scale_min_k4(b + 4, s, &sc, &m);
		float ds = d * (float)sc, dm = dmin * (float)m;
		const uint8_t *q = qs + s / 2 * 32;
		int shift = s % 2 * 4;

		for (int l = 0; l < 32; l++) {
			int v = (q[l] >> shift) & 15;
			if (qh)
				v |= ((qh[l] >> s) & 1) << 4;
			y[32 * s + l] = ds * (float)v - dm;
		}
	}
}

static void block_q4_k(const uint8_t *b, float *y)
{
	block_k4(b, NULL, b + 16, y);
}

static void block_q5_k(const uint8_t *b, float *y)
{
	block_k4(b, b + 16, b + 48, y);
}

/* Q6_K: 128 bytes of low nibbles (element 128 c + 64 h + l: nibble h of
 * byte 64 c + l), 64 bytes of high 2 bits (element 128 c + 32 j + l: bits
 * 2j of byte 32 c + l), 16 int8 scales per 16 elements, f16 d;
 * y = (d * sc) * (q - 32). */
static void block_q6_k(const uint8_t *b, float *y)
{
	const uint8_t *ql = b, *qh = b + 128, *sc = b + 192;
	float d = f16_at(b + 208);

	for (int s = 0; s < 16; s++) {
		float dl = d * (float)(int8_t)sc[s];

		for (int i = 16 * s; i < 16 * s + 16; i++) {
			int c = i / 128, r = i % 128;
			int lo = (ql[64 * c + r % 64] >> (r / 64 * 4)) & 15;
			int hi = (qh[32 * c + r % 32] >> (r / 32 * 2)) & 3;
			y[i] = dl * (float)((lo | hi << 4) - 32);
		}
	}
}

void sf_ggml_dequant_row(uint32_t type, const void *src, float *dst, size_t n)
{
	const uint8_t *b = src;
	void (*block)(const uint8_t *, float *) = NULL;

	switch (type) {
	case SF_GGML_F32:
		for (size_t i = 0; i < n; i++) {
			uint32_t u = sf_get_le32(b + 4 * i);
			memcpy(&dst[i], &u, 4);
		}
		return;
	case SF_GGML_F16:
		for (size_t i = 0; i < n; i++)
			dst[i] = sf_f16_to_f32(sf_get_le16(b + 2 * i));
		return;
	case SF_GGML_BF16:
		for (size_t i = 0; i < n; i++)
			dst[i] = sf_bf16_to_f32(sf_get_le16(b + 2 * i));
		return;
	case SF_GGML_Q4_0: block = block_q4_0; break;
	case SF_GGML_Q4_1: block = block_q4_1; break;
	case SF_GGML_Q5_0: block = block_q5_0; break;
	case SF_GGML_Q5_1: block = block_q5_1; break;
	case SF_GGML_Q8_0: block = block_q8_0; break;
	case SF_GGML_Q2_K: block = block_q2_k; break;
	case SF_GGML_Q3_K: block = block_q3_k; break;
	case SF_GGML_Q4_K: block = block_q4_k; break;
	case SF_GGML_Q5_K: block = block_q5_k; break;
	case SF_GGML_Q6_K: block = block_q6_k; break;
	case SF_GGML_MXFP4: block = block_mxfp4; break;
	default:
		return;
	}
	uint32_t elems = types[type].block_elems, bytes = types[type].block_bytes;
	for (size_t i = 0; i < n / elems; i++)
		block(b + i * bytes, dst + i * elems);
}
