/* A GGUF's tensors as a model's tensor set (model_gguf.c), for
 * sf_model_open; private to formats/. */
#ifndef SF_MODEL_GGUF_H
#define SF_MODEL_GGUF_H

#include "formats/config.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"

/* Fills st with g's tensors under Hugging Face's names, sorted, in the
 * dtype the engine computes with: F32, F16 and BF16 in the mapping; the
 * other types converted into *converted (one 64-byte aligned allocation,
 * the caller frees): with element_only clear, Q8_0 and Q4_0 matrices as
 * Q8 and Q4 rows and every other block type's as Q8 rows; set, F16; a
 * vector F32. g's mapping passes
 * to st (st->maps[0]: sf_safetensors_close unmaps it), so g must be
 * closed after. A tensor llama.cpp does not name for cfg's architecture
 * is refused by name. On failure st is zeroed and g still owns its
 * mapping. */
int sf_gguf_model_tensors(struct sf_safetensors *st, void **converted, struct sf_gguf *g,
			  const struct sf_config *cfg, int element_only, struct sf_err *e);

#endif
