/* The transformer forward pass for one token with a KV cache: RMSNorm,
 * GQA attention with rotate-half RoPE, SwiGLU FFN, tied or separate head,
 * exactly as Hugging Face's Llama/Mistral/Qwen2 compute it in float32.
 * The matrices of each layer are applied group by group (attn_in, attn_out,
 * ffn_in, ffn_out), the unit every sparse stage works in. */
#ifndef SF_FORWARD_H
#define SF_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "formats/model.h"
#include "base/pool.h"

/* Sees the input vector of every group as the forward pass computes it:
 * sf-profile records activations here. */
struct sf_observer {
	void (*fn)(void *ctx, int layer, enum sf_group g, const float *in, size_t n);
	void *ctx;
};

/* Computes a group's outputs in place of the dense product: the sparse
 * decoder, tier calibration and --simulate apply their column selections
 * here. w[i] is the dense weight of output i (q, k, v; o; gate, up; down),
 * out[i] its output vector (w[i]->rows floats). */
struct sf_group_exec {
	void (*fn)(void *ctx, int layer, enum sf_group g, const float *in, size_t n,
		   int nout, float *const *out, const struct sf_weight *const *w);
	void *ctx;
};

/* The dense products y[i] = w[i] x of a group's n matrices, rows split
 * over the pool (NULL: the caller): what the forward pass does without an
 * exec, for an exec's resident groups. */
void sf_group_dense(struct sf_pool *pool, const float *x, int n, float *const *y,
		    const struct sf_weight *const *w);

struct sf_runstate {
	int seq_len;		/* positions the KV cache holds */
	float *x;		/* (dim) residual stream */
	float *xb;		/* (dim) normed input of attn_in and ffn_in */
	float *q;		/* (n_heads * head_dim) */
	float *k, *v;		/* (n_kv_heads * head_dim), this position */
	float *z;		/* (n_heads * head_dim) attention output: attn_out's input */
	float *proj;		/* (dim) output of o and down before the residual add */
	float *gate, *up;	/* (hidden_dim) */
	float *act;		/* (hidden_dim) silu(gate) * up: ffn_out's input */
	float *att;		/* (n_heads, seq_len) attention scores */
	float *logits;		/* (vocab_size) */
	float *key_cache;	/* (n_layers, seq_len, n_kv_heads * head_dim) */
	float *value_cache;	/* (n_layers, seq_len, n_kv_heads * head_dim) */
	float *inv_freq;	/* (head_dim / 2) RoPE inverse frequencies */

	struct sf_pool *pool;	/* workers; NULL runs on the caller */
	const struct sf_observer *observer;	/* NULL for none */
	const struct sf_group_exec *exec;	/* NULL: dense products */
	int skip_logits;	/* set during prefill: the head is not applied */
};

/* Bytes sf_state_init will allocate for seq_len positions, so callers can
 * state their memory need before allocating. */
uint64_t sf_state_bytes(const struct sf_config *c, int seq_len);
int sf_state_init(struct sf_runstate *s, const struct sf_config *c, int seq_len,
		  struct sf_err *e);
void sf_state_free(struct sf_runstate *s);	/* accepts a zeroed s */

/* Runs token at position pos (0 <= pos < seq_len; positions before pos
 * must already be in the cache) and returns the logits, or NULL when
 * skip_logits is set. */
float *sf_forward(const struct sf_model *m, struct sf_runstate *s, int32_t token, int pos);

#endif
