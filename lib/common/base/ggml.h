/* ggml's tensor types as GGUF files store them (llama.cpp's ggml.h,
 * GGML_TYPE_*): each type's name, block of elements and bytes per block,
 * and a plain C dequantizer of rows for the types sparseflash reads (F32,
 * F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, MXFP4). Block layouts:
 * man/sf-formats.5 (GGUF); each dequantizer computes what gguf-py's
 * quants module computes, in the same float operations, so the two agree
 * bit for bit (tests/unit/test_ggml.c). Here in base, beside our own
 * blocks (quant.h), so that kernels can read a file's blocks directly. */
#ifndef SF_GGML_H
#define SF_GGML_H

#include <stddef.h>
#include <stdint.h>

enum sf_ggml_type {
	SF_GGML_F32 = 0,
	SF_GGML_F16 = 1,
	SF_GGML_Q4_0 = 2,
	SF_GGML_Q4_1 = 3,
	SF_GGML_Q5_0 = 6,
	SF_GGML_Q5_1 = 7,
	SF_GGML_Q8_0 = 8,
	SF_GGML_Q2_K = 10,
	SF_GGML_Q3_K = 11,
	SF_GGML_Q4_K = 12,
	SF_GGML_Q5_K = 13,
	SF_GGML_Q6_K = 14,
	SF_GGML_BF16 = 30,
	SF_GGML_MXFP4 = 39,
};

#define SF_GGML_QK 32		/* elements per block of the _0 and _1 types */
#define SF_GGML_QK_K 256	/* elements per block of the K-quants */

/* Every ggml type a file may name, handled or not: its name ("Q4_K",
 * "IQ2_XXS"), or NULL for a number ggml does not define (removed ones,
 * such as 4 and 31, included). */
const char *sf_ggml_type_name(uint32_t type);
/* 1 when sf_ggml_dequant_row handles the type. */
int sf_ggml_type_supported(uint32_t type);
/* Elements and bytes of one block (1 and the element size for F32, F16
 * and BF16); 0 for a type ggml does not define. */
uint32_t sf_ggml_block_elems(uint32_t type);
uint32_t sf_ggml_block_bytes(uint32_t type);

/* Bytes of n elements of type into *bytes: 0, -EINVAL when n is not a
 * multiple of the type's block (or the type undefined), -EOVERFLOW past
 * 64 bits. */
int sf_ggml_row_bytes(uint32_t type, uint64_t n, uint64_t *bytes);

/* dst[0..n) = the n elements of a supported type at src (n a multiple of
 * the type's block, src any alignment), as f32. */
void sf_ggml_dequant_row(uint32_t type, const void *src, float *dst, size_t n);

#endif
