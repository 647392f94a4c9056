/* The vocabulary every part of sparseflash speaks (DESIGN.md): the
 * weight dtypes with their conversions to and from f32, and the groups of
 * a layer. Depends on nothing; formats and engine both use it. */
#ifndef SF_VOCAB_H
#define SF_VOCAB_H

#include <stddef.h>
#include <stdint.h>

// --- weight dtypes

/* F32, F16 and BF16 are element dtypes (a model's tensors, the resident
 * blob, a top tier). Q8, Q6 and Q4 are block dtypes: a vector stored as
 * blocks of SF_QBLOCK consecutive elements, each an f16 scale and the
 * elements' 8-, 6- or 4-bit codes (base/quant.h, sf-formats(5)); Q8 and
 * Q4 for a top tier's columns and the rows of the embedding and output
 * head, Q6 for those rows only (the head of a q4 image). U8: bytes that
 * a reader decodes before any weight is bound (gpt-oss's MXFP4 blocks
 * and scales as its checkpoints store them, formats/model_gptoss.h),
 * never a weight's dtype. MXFP4: rows of gpt-oss's experts as the OCP
 * Microscaling format's blocks of 32 e2m1 values and a power-of-two
 * scale, in the block layout of Q4 (base/quant.h); the float kernels
 * widen them. Q8X16,
 * Q4X16 and Q6X16 exist in memory only: the rows of a Q8, Q4 or Q6
 * matrix interleaved in tiles of 16 (engine/kernels_qrows.h), as sf-run's
 * engine holds a GGUF's matrices, an image's experts and its Q6 output
 * head in RAM; no file names them and no name parses to them. */
enum sf_dtype { SF_DTYPE_F32, SF_DTYPE_F16, SF_DTYPE_BF16, SF_DTYPE_Q8, SF_DTYPE_Q4,
		SF_DTYPE_Q6, SF_DTYPE_U8, SF_DTYPE_Q8X16, SF_DTYPE_Q4X16, SF_DTYPE_MXFP4,
		SF_DTYPE_Q6X16 };

/* Bytes of one element; 0 for a block dtype. Names as safetensors spells
 * them ("BF16"), and "Q8", "Q6", "Q4", "MXFP4". */
size_t sf_dtype_size(enum sf_dtype dt);
const char *sf_dtype_name(enum sf_dtype dt);
/* 0 and *dt set for an element dtype's name, or -1 (a block dtype's name
 * included: no model tensor is one). */
int sf_dtype_parse(const char *name, enum sf_dtype *dt);
/* The same over every dtype, block dtypes included (an image's top tier). */
int sf_dtype_parse_any(const char *name, enum sf_dtype *dt);
/* 1 for Q8, Q6, Q4, their tiles and MXFP4. */
int sf_dtype_is_block(enum sf_dtype dt);
/* The block dtype a tiled one interleaves (Q8X16: Q8), dt itself for the
 * rest; and back, the tiles of Q8, Q4 or Q6 (dt itself for the rest). */
enum sf_dtype sf_dtype_untiled(enum sf_dtype dt);
enum sf_dtype sf_dtype_tiled(enum sf_dtype dt);
/* 1 for the dtypes a top tier's columns may have: all but Q6, MXFP4 and
 * tiles. */
int sf_dtype_is_top(enum sf_dtype dt);
/* Bytes of one column of `rows` rows: rows elements, or whole blocks (the
 * last one's unused rows zero codes); 64 bits since rows * size can pass
 * size_t on 32-bit hosts. */
uint64_t sf_dtype_col_bytes(enum sf_dtype dt, uint64_t rows);
/* The alignment a column of dt needs: its element size, 2 (the f16
 * scale) for a block dtype. */
size_t sf_dtype_align(enum sf_dtype dt);

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

/* The slots of traces, co-activation statistics and placements know one
 * kind beyond the groups: a mixture's layer's experts, n_experts entries,
 * active the ones the router picks for the token (sf-profile(1)). Never
 * a group of the image or the sparse decoder, whose tables stay
 * SF_NGROUPS a layer. */
#define SF_GROUP_EXPERTS ((enum sf_group)SF_NGROUPS)
#define SF_NKINDS (SF_NGROUPS + 1)

/* "attn_in" .. "ffn_out", and "experts" for SF_GROUP_EXPERTS. */
const char *sf_group_name(enum sf_group g);
/* 0 and *g set, or -1 for an unknown name; sf_group_parse takes the
 * groups only, sf_kind_parse "experts" too. */
int sf_group_parse(const char *name, enum sf_group *g);
int sf_kind_parse(const char *name, enum sf_group *g);

#endif
