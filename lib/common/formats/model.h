/* A model directory bound to the transformer's weights: config.json and
 * the safetensors, every tensor checked for presence, dtype and shape.
 * Weights stay in their file dtype (F32, F16 or BF16) in the mapping. */
#ifndef SF_MODEL_H
#define SF_MODEL_H

#include <stdint.h>

#include <jansson.h>

#include "formats/config.h"
#include "formats/safetensors.h"

/* A matrix in Hugging Face Linear layout: rows = out features, cols = in
 * features, row-major. A vector has cols == 1. In a block dtype (an
 * image's quantized embedding and head) each row is one quantized vector
 * of cols elements (base/quant.h), sf_weight_row_bytes apart. */
struct sf_weight {
	const void *data;
	enum sf_dtype dtype;
	uint64_t rows, cols;
};

/* One of a mixture's experts (Mixtral's w1, w3 and w2, the others'
 * gate_proj, up_proj and down_proj, gpt-oss's slices of its fused
 * tensors: model_gptoss.h), or Qwen2-MoE's shared expert, whose width is
 * shared_hidden_dim in place of hidden_dim. */
struct sf_expert_weights {
	struct sf_weight w_gate;	/* (hidden_dim, dim) w1 */
	struct sf_weight w_up;		/* (hidden_dim, dim) w3 */
	struct sf_weight w_down;	/* (dim, hidden_dim) w2 */
	/* gpt-oss's biases (cfg.moe_bias), else data NULL */
	struct sf_weight b_gate, b_up;	/* (hidden_dim) */
	struct sf_weight b_down;	/* (dim) */
};

struct sf_layer_weights {
	struct sf_weight attn_norm;	/* (dim) */
	struct sf_weight wq;		/* (n_heads * head_dim, dim) */
	struct sf_weight wk;		/* (n_kv_heads * head_dim, dim) */
	struct sf_weight wv;		/* (n_kv_heads * head_dim, dim) */
	struct sf_weight wo;		/* (dim, n_heads * head_dim) */
	struct sf_weight bq, bk, bv;	/* biases when cfg.qkv_bias, else data NULL */
	struct sf_weight bo;		/* (dim) when cfg.o_bias, else data NULL */
	struct sf_weight sinks;		/* (n_heads) when cfg.attn_sinks, else data NULL */
	/* cfg.qk_norm's gains, else data NULL: (head_dim) each per head,
	 * (n_heads * head_dim) and (n_kv_heads * head_dim) over the whole */
	struct sf_weight q_norm, k_norm;
	/* (dim) the FFN's input norm: post_attention_layernorm, Gemma 3's
	 * pre_feedforward_layernorm */
	struct sf_weight ffn_norm;
	/* (dim) Gemma 3's (cfg.post_norms) post_attention_layernorm and
	 * post_feedforward_layernorm on each sublayer's output, else data NULL */
	struct sf_weight post_attn_norm, post_ffn_norm;
	/* the dense FFN; data NULL in a mixture of experts */
	struct sf_weight w_gate;	/* (hidden_dim, dim) */
	struct sf_weight w_up;		/* (hidden_dim, dim) */
	struct sf_weight w_down;	/* (dim, hidden_dim) */
	/* a mixture's (cfg.n_experts > 0) router and experts, else NULL data */
	struct sf_weight router;	/* (n_experts, dim) block_sparse_moe.gate, mlp.gate,
					 * gpt-oss's mlp.router */
	struct sf_weight router_bias;	/* (n_experts) when cfg.moe_bias, else data NULL */
	struct sf_expert_weights *experts;	/* (n_experts) */
	/* Qwen2-MoE's (cfg.shared_hidden_dim > 0), else NULL data */
	struct sf_expert_weights shared;	/* mlp.shared_expert */
	struct sf_weight shared_gate;	/* (1, dim) mlp.shared_expert_gate */
};

#define SF_FINGERPRINT_LEN 16	/* hex digits */
#define SF_FINGERPRINT_BLOCK 4096	/* bytes of a sampled block */
#define SF_FINGERPRINT_BLOCKS 16	/* blocks sampled per tensor */

/* What binds an artifact to the model it was made from (man/sf-formats.5,
 * FINGERPRINTS): each 64-bit FNV-1a as 16 lowercase hex digits.
 * shape: the config and every tensor's name, dtype and shape; two models
 * of the same shape (a base and its fine-tune) share it.
 * weights: SF_FINGERPRINT_BLOCKS fixed blocks of SF_FINGERPRINT_BLOCK
 * bytes of every tensor (all of a smaller tensor), then the shape
 * fingerprint; it tells such look-alikes apart while reading at most
 * 64 KiB per tensor, whatever the model's size. */
struct sf_fingerprint {
	char weights[SF_FINGERPRINT_LEN + 1];	/* "fingerprint" in every format */
	char shape[SF_FINGERPRINT_LEN + 1];	/* "shape_fingerprint" */
};

struct sf_model {
	struct sf_config cfg;
	struct sf_safetensors st;
	struct sf_weight embed;		/* (vocab_size, dim) */
	struct sf_weight final_norm;	/* (dim) */
	struct sf_weight lm_head;	/* (vocab_size, dim): embed when tied */
	struct sf_layer_weights *layers;	/* (n_layers) */
	struct sf_expert_weights *experts;	/* (n_layers * n_experts): layers[l].experts
						 * point in */
	/* Stages refuse artifacts whose fingerprint differs (see model.c).
	 * sf_model_bind leaves weights empty: its caller supplies it. */
	struct sf_fingerprint fingerprint;
	const char *source;	/* the weights' file, for messages: the safetensors
				 * (index) of a directory, st's source when bound */
	void *converted;	/* a GGUF's tensors that are not in the mapping as
				 * the engine reads them (model_gguf.h), else NULL */
};

/* Loads DIR/config.json and DIR's safetensors and binds every weight.
 * Refused: a tensor missing or of the wrong shape (SF_EMISMATCH), and a
 * tensor the config does not use (SF_EUNSUPPORTED: it would be silently
 * ignored), except *.rotary_emb.inv_freq and, when tied, lm_head.weight,
 * which Hugging Face ignores too. On failure *m is zeroed.
 * PATH may also be a GGUF file (told by its magic): the config from its
 * metadata (sf_config_from_gguf), its tensors under Hugging Face's names,
 * F32/F16/BF16 in the mapping, Q8_0 and Q4_0 matrices as Q8 and Q4 rows
 * (the same codes and scales, which the row products take), every other
 * type requantized to Q8 rows in memory; its fingerprints are over the file's own
 * tensors, so that each open below agrees. */
int sf_model_open(struct sf_model *m, const char *path, struct sf_err *e);
/* The same with every weight in an element dtype (a GGUF's Q8_0 and Q4_0
 * widened to F16 too): for the commands that read weights by column. */
int sf_model_open_elements(struct sf_model *m, const char *path, struct sf_err *e);
/* Binds a model to a tensor set that is not a directory's own (an
 * image's: tensors with data NULL stay on flash, their sf_weight has data
 * NULL and the forward pass must compute their group through an
 * sf_group_exec). st's tensors must be sorted by name, as the safetensors
 * reader sorts them; st is neither copied nor closed (m->st stays
 * zeroed), so it and the data it points to must outlive m. The checks
 * and the shape fingerprint are sf_model_open's; the weights fingerprint
 * is left empty (the bytes may be on flash, or converted), for the caller
 * to fill from what it trusts (an image's header). */
int sf_model_bind(struct sf_model *m, const struct sf_config *cfg, const struct sf_safetensors *st,
		  struct sf_err *e);
void sf_model_close(struct sf_model *m);	/* accepts a zeroed m */
/* 0, or SF_EUNSUPPORTED naming DIR when m is a mixture of experts: what
 * works on a layer's four groups alone (codes) takes a dense FFN only,
 * where sf-run --model, images and traces take both. */
int sf_model_dense_ffn(const struct sf_model *m, const char *dir, struct sf_err *e);
/* The Hugging Face name of matrix i (0 gate, 1 up, 2 down) of routed
 * expert x in layer l of a mixture of c's family: Mixtral's
 * block_sparse_moe.experts.X.w1/w3/w2, the others'
 * mlp.experts.X.gate_proj/up_proj/down_proj.weight; i 3, 4, 5: the bias
 * of 0, 1, 2 (.bias). gpt-oss's checkpoints hold its experts fused
 * (model_gptoss.h): these are the names of their slices. */
void sf_model_expert_tensor(const struct sf_config *c, int l, int x, int i, char *buf, size_t n);
/* The name of layer l's router (bias: its bias): Mixtral's
 * block_sparse_moe.gate, gpt-oss's mlp.router, the others' mlp.gate. */
void sf_model_router_tensor(const struct sf_config *c, int l, int bias, char *buf, size_t n);
/* The bytes of m's tensors (0 for a model bound to another's), of one
 * weight (0 when it has no data), of layer l's tensors, and of the
 * weights a pass that releases each layer after it holds at most: all
 * but the layers, and the largest layer. */
uint64_t sf_model_bytes(const struct sf_model *m);
uint64_t sf_weight_bytes(const struct sf_weight *w);
uint64_t sf_weight_row_bytes(const struct sf_weight *w);
uint64_t sf_model_layer_bytes(const struct sf_model *m, int l);
uint64_t sf_model_pass_bytes(const struct sf_model *m);
/* w's pages out of the process's resident set when they are m's mapping
 * (sf_safetensors_release; nothing for a model bound to another's
 * tensors), and all of layer l's: a pass over a model larger than memory
 * holds one layer of it, a writer the tensor at hand. */
void sf_model_release(const struct sf_model *m, const struct sf_weight *w);
void sf_model_release_layer(const struct sf_model *m, int l);
/* Whether the commands' passes over m release each layer after it
 * (sf_runstate.release_weights): above SF_RELEASE_WEIGHTS_BYTES of
 * tensors, a 1B-parameter model in BF16 and up, whose pages the page
 * cache keeps anyway when memory allows. */
#define SF_RELEASE_WEIGHTS_BYTES (1ull << 31)
int sf_model_releases(const struct sf_model *m);

/* Element i of w (an element dtype), and row `row` of w (cols elements,
 * any dtype), as float32: the embedding lookup, norms' gains, biases. */
float sf_weight_at(const struct sf_weight *w, uint64_t i);
void sf_weight_row(float *out, const struct sf_weight *w, uint64_t row);

/* Reads "fingerprint" and "shape_fingerprint" of obj, each 16 lowercase
 * hex digits, else SF_EFORMAT naming WHERE ("PATH" or "PATH: header"). */
int sf_fingerprint_parse(struct sf_fingerprint *f, const json_t *obj, const char *where,
			 struct sf_err *e);
/* Sets both keys of obj; -ENOMEM when jansson cannot. */
int sf_fingerprint_put(json_t *obj, const struct sf_fingerprint *f);
/* 0 when got (of PATH, a WHAT: "codes", "placement") is want (of
 * WANT_PATH), else SF_EMISMATCH in one line naming both files and saying
 * whether the shapes differ or only the weights (a look-alike model). */
int sf_fingerprint_check(const struct sf_fingerprint *got, const char *path, const char *what,
			 const struct sf_fingerprint *want, const char *want_path,
			 struct sf_err *e);
/* SF_EUNSUPPORTED "WHERE: WHAT version FOUND, expected EXPECTED", saying
 * for an older version that it predates the weights fingerprint (every
 * format that stores one took a new version with it). */
int sf_fingerprint_version(const char *where, const char *what, long long found, int expected,
			   struct sf_err *e);

#endif
