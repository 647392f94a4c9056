/* A model directory bound to the transformer's weights: config.json and
 * the safetensors, every tensor checked for presence, dtype and shape.
 * Weights stay in their file dtype (F32, F16 or BF16) in the mapping. */
#ifndef SF_MODEL_H
#define SF_MODEL_H

#include <stdint.h>

#include "formats/config.h"
#include "formats/safetensors.h"

/* A matrix in Hugging Face Linear layout: rows = out features, cols = in
 * features, row-major. A vector has cols == 1. */
struct sf_weight {
	const void *data;
	enum sf_dtype dtype;
	uint64_t rows, cols;
};

struct sf_layer_weights {
	struct sf_weight attn_norm;	/* (dim) */
	struct sf_weight wq;		/* (n_heads * head_dim, dim) */
	struct sf_weight wk;		/* (n_kv_heads * head_dim, dim) */
	struct sf_weight wv;		/* (n_kv_heads * head_dim, dim) */
	struct sf_weight wo;		/* (dim, n_heads * head_dim) */
	struct sf_weight bq, bk, bv;	/* biases when cfg.qkv_bias, else data NULL */
	struct sf_weight ffn_norm;	/* (dim) */
	struct sf_weight w_gate;	/* (hidden_dim, dim) */
	struct sf_weight w_up;		/* (hidden_dim, dim) */
	struct sf_weight w_down;	/* (dim, hidden_dim) */
};

#define SF_FINGERPRINT_LEN 16	/* hex digits */

struct sf_model {
	struct sf_config cfg;
	struct sf_safetensors st;
	struct sf_weight embed;		/* (vocab_size, dim) */
	struct sf_weight final_norm;	/* (dim) */
	struct sf_weight lm_head;	/* (vocab_size, dim): embed when tied */
	struct sf_layer_weights *layers;	/* (n_layers) */
	/* Hash of the config and every tensor's name, shape and dtype: stages
	 * refuse streams whose fingerprint differs. 64-bit FNV-1a of a
	 * canonical text (see model.c), 16 lowercase hex digits. Weight
	 * values do not enter it: two models of the same shape share it. */
	char fingerprint[SF_FINGERPRINT_LEN + 1];
};

/* Loads DIR/config.json and DIR's safetensors and binds every weight.
 * Refused: a tensor missing or of the wrong shape (SF_EMISMATCH), and a
 * tensor the config does not use (SF_EUNSUPPORTED: it would be silently
 * ignored), except *.rotary_emb.inv_freq and, when tied, lm_head.weight,
 * which Hugging Face ignores too. On failure *m is zeroed. */
int sf_model_open(struct sf_model *m, const char *dir, struct sf_err *e);
/* Binds a model to a tensor set that is not a directory's own (an
 * image's: tensors with data NULL stay on flash, their sf_weight has data
 * NULL and the forward pass must compute their group through an
 * sf_group_exec). st's tensors must be sorted by name, as the safetensors
 * reader sorts them; st is neither copied nor closed (m->st stays
 * zeroed), so it and the data it points to must outlive m. The checks
 * and the fingerprint are sf_model_open's. */
int sf_model_bind(struct sf_model *m, const struct sf_config *cfg, const struct sf_safetensors *st,
		  struct sf_err *e);
void sf_model_close(struct sf_model *m);	/* accepts a zeroed m */

/* Element i of w, and row `row` of w (cols elements), as float32: the
 * embedding lookup, norms' gains, biases. */
float sf_weight_at(const struct sf_weight *w, uint64_t i);
void sf_weight_row(float *out, const struct sf_weight *w, uint64_t row);

#endif
