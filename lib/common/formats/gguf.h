/* GGUF, llama.cpp's model file (versions 2 and 3): the metadata
 * key-value pairs and the tensor infos parsed and validated, the tensor
 * data memory-mapped and never copied. Layout and what is checked:
 * man/sf-formats.5 (GGUF). The tensor types and their dequantizers are
 * base/ggml.h. */
#ifndef SF_GGUF_H
#define SF_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/ggml.h"

#define SF_GGUF_MAX_DIMS 4		/* ggml's GGML_MAX_DIMS */
#define SF_GGUF_NAME_MAX 256		/* bytes of a key or tensor name */
#define SF_GGUF_DEFAULT_ALIGNMENT 32	/* when general.alignment is absent */
/* Llama 3's RoPE frequency factors, and Phi-3's LongRoPE ones: tensors
 * the config reads */
#define SF_GGUF_ROPE_FREQS "rope_freqs.weight"
#define SF_GGUF_ROPE_FACTORS_SHORT "rope_factors_short.weight"
#define SF_GGUF_ROPE_FACTORS_LONG "rope_factors_long.weight"

/* A metadata value's type, as the file numbers them. */
enum sf_gguf_vtype {
	SF_GGUF_U8, SF_GGUF_I8, SF_GGUF_U16, SF_GGUF_I16, SF_GGUF_U32, SF_GGUF_I32,
	SF_GGUF_F32, SF_GGUF_BOOL, SF_GGUF_STRING, SF_GGUF_ARRAY, SF_GGUF_U64, SF_GGUF_I64,
	SF_GGUF_F64, SF_GGUF_NVTYPES
};

/* One key-value pair. Values stay in the mapping, little-endian: read
 * them through the getters below. */
struct sf_gguf_kv {
	char *key;			/* NUL-terminated copy */
	enum sf_gguf_vtype type;
	enum sf_gguf_vtype elem_type;	/* an ARRAY's elements (never ARRAY) */
	uint64_t n;			/* an ARRAY's elements; 1 otherwise */
	const unsigned char *val;	/* the value (a STRING's 8-byte length
					 * first), an ARRAY's first element */
	const unsigned char **strs;	/* (n) an array of STRING's elements, each
					 * at its 8-byte length; else NULL */
};

struct sf_gguf_tensor {
	char *name;			/* NUL-terminated copy */
	enum sf_ggml_type type;		/* always one sf_ggml_type_supported */
	int n_dims;
	uint64_t ne[SF_GGUF_MAX_DIMS];	/* ggml's order: ne[0] elements per row,
					 * contiguous; unused dims 1 */
	uint64_t offset;		/* in the data section */
	uint64_t nbytes;
	const void *data;		/* inside the mapping */
};

struct sf_gguf {
	char *path;			/* for messages */
	const unsigned char *map;
	size_t map_size;
	uint32_t version;
	uint32_t alignment;		/* general.alignment, else 32 */
	uint64_t data_offset;		/* the data section's start in the file */
	struct sf_gguf_kv *kvs;		/* (nkvs), sorted by key */
	size_t nkvs;
	struct sf_gguf_tensor *tensors;	/* (ntensors), sorted by name */
	size_t ntensors;
};

/* Maps PATH read-only (registered with the SIGBUS guard, guard.h) and
 * validates it before anything is used: magic, version 2 or 3, every
 * count, string length and array size against the bytes left in the
 * file (and counts at most 2^20 tensors, 2^20 keys), keys and names
 * non-empty, printable and shorter than SF_GGUF_NAME_MAX, no key or
 * tensor name twice, value types known (arrays of arrays refused),
 * general.alignment a u32 power of two, tensor types handled (others
 * refused by name, "IQ2_XXS: tensor type not supported"), at most 4
 * dimensions whose product and byte size fit 64 bits, rows of whole
 * blocks, offsets multiples of the alignment, every tensor inside the
 * data section and none overlapping another. Returns 0, -errno, or
 * SF_EFORMAT / SF_EUNSUPPORTED / SF_ELIMIT with "PATH: what: why";
 * *g is zeroed on failure. */
int sf_gguf_open(struct sf_gguf *g, const char *path, struct sf_err *e);
void sf_gguf_close(struct sf_gguf *g);	/* accepts a zeroed g */
/* 1 when PATH is a file that starts with GGUF's magic (where a command
 * takes a model directory or a GGUF file), else 0. */
int sf_gguf_probe(const char *path);

/* NULL when absent. Binary search. */
const struct sf_gguf_kv *sf_gguf_find(const struct sf_gguf *g, const char *key);
const struct sf_gguf_tensor *sf_gguf_tensor(const struct sf_gguf *g, const char *name);

/* Typed getters by key: 0 and *out set; -ENOENT with "PATH: key 'K':
 * missing"; SF_EFORMAT with "PATH: key 'K': TYPE, expected ..." for a
 * value of another type or out of range. Integers of any integer type
 * are taken when the value fits (converters differ in widths); f32 takes
 * F32 or F64; a string is not NUL-terminated: *s and *len. */
int sf_gguf_get_u32(const struct sf_gguf *g, const char *key, uint32_t *out, struct sf_err *e);
int sf_gguf_get_i32(const struct sf_gguf *g, const char *key, int32_t *out, struct sf_err *e);
int sf_gguf_get_f32(const struct sf_gguf *g, const char *key, float *out, struct sf_err *e);
int sf_gguf_get_bool(const struct sf_gguf *g, const char *key, int *out, struct sf_err *e);
int sf_gguf_get_str(const struct sf_gguf *g, const char *key, const char **s, uint64_t *len,
		    struct sf_err *e);
/* An array whose elements are elem_type: *kv set (its n elements read
 * with the element getters); errors as above. */
int sf_gguf_get_arr(const struct sf_gguf *g, const char *key, enum sf_gguf_vtype elem_type,
		    const struct sf_gguf_kv **kv, struct sf_err *e);

/* Element i < kv->n of an array of that element type. */
int32_t sf_gguf_arr_i32(const struct sf_gguf_kv *kv, uint64_t i);
uint32_t sf_gguf_arr_u32(const struct sf_gguf_kv *kv, uint64_t i);
float sf_gguf_arr_f32(const struct sf_gguf_kv *kv, uint64_t i);
const char *sf_gguf_arr_str(const struct sf_gguf_kv *kv, uint64_t i, uint64_t *len);

/* The row of a llama-architecture GGUF's attn_q or attn_k weight that
 * holds row hf_row of Hugging Face's q_proj or k_proj: llama.cpp's
 * converters reorder each head's rows from rotate-half pairs (i, i +
 * head_dim / 2) to adjacent ones (2i, 2i + 1) for its RoPE, so row
 * h * head_dim + k * head_dim / 2 + i is stored at h * head_dim + 2i + k.
 * qwen2 files keep Hugging Face's order. */
static inline uint64_t sf_gguf_rope_row(uint64_t hf_row, uint64_t head_dim)
{
	uint64_t in_head = hf_row % head_dim, half = head_dim / 2;

	return hf_row - in_head + 2 * (in_head % half) + in_head / half;
}

/* "U32", "STRING", ...; "?" for a number outside the enum. */
const char *sf_gguf_vtype_name(uint32_t t);

#endif
