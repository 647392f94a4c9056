/* The vocabulary every part of sparseflash speaks (DESIGN.md): the
 * weight dtypes with their conversions to and from f32, and the groups of
 * a layer. Depends on nothing; formats and engine both use it. */
#ifndef SF_VOCAB_H
#define SF_VOCAB_H

#include <stddef.h>
#include <stdint.h>

// --- weight dtypes

enum sf_dtype { SF_DTYPE_F32, SF_DTYPE_F16, SF_DTYPE_BF16 };

/* Bytes of one element; names as safetensors spells them ("BF16"). */
size_t sf_dtype_size(enum sf_dtype dt);
const char *sf_dtype_name(enum sf_dtype dt);
/* 0 and *dt set, or -1 for a name we do not know. */
int sf_dtype_parse(const char *name, enum sf_dtype *dt);

/* bf16/f16 <-> f32 scalar conversions (round to nearest even on the way down). */
float sf_bf16_to_f32(uint16_t h);
uint16_t sf_f32_to_bf16(float f);
float sf_f16_to_f32(uint16_t h);
uint16_t sf_f32_to_f16(float f);

// --- groups

/* The matrices of a layer that share one input vector (DESIGN.md). */
enum sf_group {
	SF_GROUP_ATTN_IN,	/* q, k, v on the normed hidden state */
	SF_GROUP_ATTN_OUT,	/* o on the attention output */
	SF_GROUP_FFN_IN,	/* gate, up on the normed residual */
	SF_GROUP_FFN_OUT,	/* down on silu(gate) * up */
	SF_NGROUPS
};

const char *sf_group_name(enum sf_group g);
/* 0 and *g set, or -1 for an unknown name. */
int sf_group_parse(const char *name, enum sf_group *g);

#endif
