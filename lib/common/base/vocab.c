/* The vocabulary: see vocab.h. */
#include "base/vocab.h"

#include "base/quant.h"

#include <string.h>

// --- weight dtypes


size_t sf_dtype_size(enum sf_dtype dt)
{
	switch (dt) {
	case SF_DTYPE_F32: return 4;
	case SF_DTYPE_F16: return 2;
	case SF_DTYPE_BF16: return 2;
	case SF_DTYPE_U8: return 1;
	case SF_DTYPE_Q8:
	case SF_DTYPE_Q4:
	case SF_DTYPE_Q6:
	case SF_DTYPE_Q8X16:
	case SF_DTYPE_Q4X16:
	case SF_DTYPE_Q6X16:
	case SF_DTYPE_MXFP4: break;
	}
	return 0;
}

const char *sf_dtype_name(enum sf_dtype dt)
{
	switch (dt) {
	case SF_DTYPE_F32: return "F32";
	case SF_DTYPE_F16: return "F16";
	case SF_DTYPE_BF16: return "BF16";
	case SF_DTYPE_Q8: return "Q8";
	case SF_DTYPE_Q4: return "Q4";
	case SF_DTYPE_Q6: return "Q6";
	case SF_DTYPE_U8: return "U8";
	case SF_DTYPE_Q8X16: return "Q8x16";
	case SF_DTYPE_Q4X16: return "Q4x16";
	case SF_DTYPE_Q6X16: return "Q6x16";
	case SF_DTYPE_MXFP4: return "MXFP4";
	}
	return "?";
}

int sf_dtype_parse_any(const char *name, enum sf_dtype *dt)
{
	static const enum sf_dtype all[] = { SF_DTYPE_F32, SF_DTYPE_F16, SF_DTYPE_BF16,
					     SF_DTYPE_Q8, SF_DTYPE_Q4, SF_DTYPE_Q6,
					     SF_DTYPE_MXFP4 };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (!strcmp(name, sf_dtype_name(all[i]))) {
			*dt = all[i];
			return 0;
		}
	return -1;
}

int sf_dtype_parse(const char *name, enum sf_dtype *dt)
{
	enum sf_dtype d;

	if (sf_dtype_parse_any(name, &d) || sf_dtype_is_block(d))
		return -1;
	*dt = d;
	return 0;
}

int sf_dtype_is_block(enum sf_dtype dt)
{
	return dt == SF_DTYPE_Q8 || dt == SF_DTYPE_Q4 || dt == SF_DTYPE_Q6 ||
	       dt == SF_DTYPE_Q8X16 || dt == SF_DTYPE_Q4X16 || dt == SF_DTYPE_Q6X16 ||
	       dt == SF_DTYPE_MXFP4;
}

enum sf_dtype sf_dtype_untiled(enum sf_dtype dt)
{
	return dt == SF_DTYPE_Q8X16 ? SF_DTYPE_Q8 : dt == SF_DTYPE_Q4X16 ? SF_DTYPE_Q4
	     : dt == SF_DTYPE_Q6X16 ? SF_DTYPE_Q6 : dt;
}

enum sf_dtype sf_dtype_tiled(enum sf_dtype dt)
{
	return dt == SF_DTYPE_Q8 ? SF_DTYPE_Q8X16 : dt == SF_DTYPE_Q4 ? SF_DTYPE_Q4X16
	     : dt == SF_DTYPE_Q6 ? SF_DTYPE_Q6X16 : dt;
}

int sf_dtype_is_top(enum sf_dtype dt)
{
	return dt != SF_DTYPE_Q6 && dt != SF_DTYPE_MXFP4 && dt == sf_dtype_untiled(dt);
}

uint64_t sf_dtype_col_bytes(enum sf_dtype dt, uint64_t rows)
{
	uint64_t blocks = (rows + SF_QBLOCK - 1) / SF_QBLOCK;

	switch (sf_dtype_untiled(dt)) {
	case SF_DTYPE_Q8: return blocks * SF_Q8_BLOCK_BYTES;
	case SF_DTYPE_Q4: return blocks * SF_Q4_BLOCK_BYTES;
	case SF_DTYPE_MXFP4: return blocks * SF_MXFP4_BLOCK_BYTES;
	case SF_DTYPE_Q6: return blocks * SF_Q6_BLOCK_BYTES;
	default: return rows * sf_dtype_size(dt);
	}
}

size_t sf_dtype_align(enum sf_dtype dt)
{
	return sf_dtype_is_block(dt) ? 2 : sf_dtype_size(dt);
}

float sf_bf16_to_f32(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

uint16_t sf_f32_to_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	/* Rounding would carry a NaN's payload into the exponent and could
	 * make it infinity; keep it a (quiet) NaN with its sign instead. */
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x0040u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

float sf_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
	float f;

	if (e == 0) {
		/* zero or subnormal: m * 2^-24 is exact in float */
		f = (float)m * 0x1p-24f;
		return sign ? -f : f;
	}
	if (e == 31)
		u = sign | 0x7f800000u | (m << 13);
	else
		u = sign | ((e + 112u) << 23) | (m << 13);
	memcpy(&f, &u, sizeof(f));
	return f;
}

uint16_t sf_f32_to_f16(float f)
{
	uint32_t u, sign, e, q;
	memcpy(&u, &f, sizeof(u));
	sign = (u >> 16) & 0x8000u;
	u &= 0x7fffffffu;
	e = u >> 23;

	if (u > 0x7f800000u)	/* NaN: quiet, top payload bits kept */
		return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
	if (e >= 113) {
		/* normal range: rebias and round the 13 dropped bits to even;
		 * a carry runs into the exponent and past 30 gives infinity */
		uint32_t rem = u & 0x1fffu;
		if (e >= 143)
			return (uint16_t)(sign | 0x7c00u);
		q = (u >> 13) - (112u << 10);
		if (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))
			q++;
		return (uint16_t)(sign | (q >= 0x7c00u ? 0x7c00u : q));
	}
	/* f16 subnormal (or zero): count units of 2^-24; a carry to 0x400
	 * is exactly the smallest normal */
	{
		uint32_t mm = (u & 0x7fffffu) | 0x800000u, s = 126 - e, rem, half;
		if (s > 24)
			return (uint16_t)sign;
		q = mm >> s;
		rem = mm & ((1u << s) - 1u);
		half = 1u << (s - 1);
		if (rem > half || (rem == half && (q & 1u)))
			q++;
		return (uint16_t)(sign | q);
	}
}

// --- groups

static const char *const group_names[SF_NKINDS] = {
	"attn_in", "attn_out", "ffn_in", "ffn_out", "experts",
};

const char *sf_group_name(enum sf_group g)
{
	return (unsigned)g < SF_NKINDS ? group_names[g] : "?";
}

static int kind_parse(const char *name, int nkinds, enum sf_group *g)
{
	for (int i = 0; i < nkinds; i++) {
		if (strcmp(name, group_names[i]) == 0) {
			*g = (enum sf_group)i;
			return 0;
		}
	}
	return -1;
}

int sf_group_parse(const char *name, enum sf_group *g)
{
	return kind_parse(name, SF_NGROUPS, g);
}

int sf_kind_parse(const char *name, enum sf_group *g)
{
	return kind_parse(name, SF_NKINDS, g);
}
