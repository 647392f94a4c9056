/* gpt-oss's fused experts as one tensor a matrix and expert
 * (model_gptoss.c), for sf_model_open; private to formats/. */
#ifndef SF_MODEL_GPTOSS_H
#define SF_MODEL_GPTOSS_H

#include "formats/config.h"
#include "formats/safetensors.h"

/* Replaces in st each layer's mlp.experts.gate_up_proj [n_experts, dim,
 * 2 * hidden_dim] (gate and up in alternate columns), gate_up_proj_bias
 * [n_experts, 2 * hidden_dim], down_proj [n_experts, hidden_dim, dim] and
 * down_proj_bias [n_experts, dim] (or in place of gate_up_proj and
 * down_proj their MXFP4 _blocks and _scales: sf-formats(5)) by every
 * expert's gate, up and down in Linear layout and their biases, under
 * sf_model_expert_tensor's names, sorted. The matrices are copied into
 * *converted (one 64-byte aligned allocation, the caller frees), F32,
 * F16 and BF16 in their dtype, MXFP4 as MXFP4 rows (base/quant.h: the
 * same codes and scales, four and a quarter bits a weight); down's bias
 * stays in the mapping. A fused tensor missing or of another shape, an
 * MXFP4 scale of 255 or a weight beyond f32's range, MXFP4 rows wider
 * than SF_MXFP4_COLS_MAX: SF_EMISMATCH, SF_EFORMAT or SF_EUNSUPPORTED
 * naming it, and st unchanged. */
int sf_gptoss_split_experts(struct sf_safetensors *st, void **converted,
			    const struct sf_config *cfg, struct sf_err *e);

#endif
