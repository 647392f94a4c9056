/* The KV cache's rows: each position's keys (or values) of one layer, in
 * f32, f16 or q8_0 as llama.cpp stores them (sf-run -ctk, -ctv), stored
 * once per token and widened to f32 a head at a time for attention's dot
 * products and sums (engine/kernels.h, sf_dot_rows and sf_axpy_rows). The
 * widening has a portable _ref and AVX2, AVX-512 paths that give its
 * floats exactly. */
#ifndef SF_KV_H
#define SF_KV_H

#include <stddef.h>
#include <stdint.h>

/* q8_0: blocks of SF_KV_Q8_0_BLOCK elements, each an f16 scale d =
 * max |x| / 127 and the elements' codes round(x / d), int8 (llama.cpp's
 * Q8_0: 34 bytes a block, scale first); element = f32(d) * code. Codes
 * are 0 where 1 / d is not finite, and a non-finite x makes d so (the
 * block reads back non-finite, NaN or infinity times 0). */
enum sf_kv_type { SF_KV_F32, SF_KV_F16, SF_KV_Q8_0 };
#define SF_KV_Q8_0_BLOCK 32
#define SF_KV_Q8_0_BYTES 34

/* "f32", "f16", "q8_0"; parse: 0 and *t set, or -1. */
const char *sf_kv_type_name(enum sf_kv_type t);
int sf_kv_type_parse(const char *name, enum sf_kv_type *t);
/* Whether heads of head_dim elements can be stored in t: q8_0 needs
 * whole blocks. */
int sf_kv_type_fits(enum sf_kv_type t, size_t head_dim);
/* Bytes of a row of n elements (n a multiple of the block for q8_0). */
size_t sf_kv_row_bytes(enum sf_kv_type t, size_t n);

/* x[0..n) stored as a row of t (f16 rounds to nearest even). */
void sf_kv_put(void *row, enum sf_kv_type t, const float *x, size_t n);
/* out[p * d + i] = element off + i of row p, for the n rows ld bytes
 * apart from rows (off and d whole blocks for q8_0). */
void sf_kv_widen(float *out, const void *rows, enum sf_kv_type t, size_t ld, size_t off,
		 size_t n, size_t d);
void sf_kv_widen_ref(float *out, const void *rows, enum sf_kv_type t, size_t ld, size_t off,
		     size_t n, size_t d);

#endif
