/* The transformer forward pass for one token with a KV cache: RMSNorm,
 * GQA attention with rotate-half RoPE, SwiGLU FFN, tied or separate head,
 * exactly as Hugging Face's Llama/Mistral/Qwen2/Qwen3 compute it in float32
 * (Qwen3: each head's q and k RMSNormed before RoPE), and the mixtures of
 * experts Mixtral, Qwen2-MoE, Qwen3-MoE and OLMoE (q and k RMSNormed
 * whole, clip_qkv): the FFN the top k of the router's softmax,
 * renormalised where the model says, plus Qwen2-MoE's gated shared expert.
 * The matrices of each layer are applied group by group (attn_in, attn_out,
 * ffn_in, ffn_out), the unit every sparse stage works in. */
#ifndef SF_FORWARD_H
#define SF_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "formats/model.h"
#include "base/pool.h"
#include "engine/kv.h"

/* Sees the input vectors of every group as the forward pass computes
 * them, in (T, n): the T tokens of a pass, T at most tokens (0 counts as
 * 1). sf-profile records activations here. In a mixture's layer, routes
 * (NULL: none) sees the router's choice instead of ffn_in and ffn_out:
 * route (T, n_experts), the weight of each token's picked experts and 0
 * for the others, as the experts' exec gets it. */
struct sf_observer {
	void (*fn)(void *ctx, int layer, enum sf_group g, const float *in, int T, size_t n);
	void (*routes)(void *ctx, int layer, const float *route, int T, size_t n_experts);
	void *ctx;
	int tokens;
};

/* Computes a group's outputs in place of the dense product: the sparse
 * decoder, tier calibration and --simulate apply their column selections
 * here. in is (T, n): the T tokens of a pass, T at most tokens (0 counts
 * as 1). w[i] is the dense weight of output i (q, k, v; o; gate, up;
 * down), out[i] its outputs (T, w[i]->rows). */
struct sf_group_exec {
	void (*fn)(void *ctx, int layer, enum sf_group g, const float *in, int T, size_t n,
		   int nout, float *const *out, const struct sf_weight *const *w);
	/* NULL, or: the embedding row of token into out (dim), and the
	 * head's logits (vocab) of the normed x (dim), computed as the dense
	 * product does, from weights that are not in memory */
	void (*embed)(void *ctx, int32_t token, float *out);
	void (*head)(void *ctx, const float *x, float *logits);
	/* NULL, or: a mixture's routed experts from weights not in memory.
	 * experts is given the layer's routes of the pass before any expert
	 * runs, route (T, n_experts) the weight of each token's picked
	 * experts and 0 for the others, so that every picked expert's read
	 * can be in flight; expert then gives each picked expert x in turn,
	 * in expert order, its weights (valid until the next call), or NULL
	 * when they cannot be had: the exec's failure, which it reports
	 * after the pass, and the expert adds nothing. */
	void (*experts)(void *ctx, int layer, const float *route, int T);
	const struct sf_expert_weights *(*expert)(void *ctx, int layer, int x);
	/* NULL, or: given before a layer's experts run, a guess at the next
	 * layer's picks (layer, the next one's index; route as experts',
	 * each token's likeliest expert there), so that their reads can
	 * start while this layer computes */
	void (*experts_ahead)(void *ctx, int layer, const float *route, int T);
	void *ctx;
	int tokens;
};

/* The dense products y[i] = w[i] x of a group's n matrices, rows split
 * over the pool (NULL: the caller): what the forward pass does without an
 * exec, for an exec's resident groups. */
void sf_group_dense(struct sf_pool *pool, const float *x, int n, float *const *y,
		    const struct sf_weight *const *w);

struct sf_runstate {
	int seq_len;		/* positions the KV cache holds */
	int batch;		/* tokens one pass can take: the per-token buffers' first dimension */
	float *x;		/* (batch, dim) residual stream */
	float *xb;		/* (batch, dim) normed input of attn_in and ffn_in */
	float *q;		/* (batch, n_heads * head_dim) */
	float *k, *v;		/* (batch, n_kv_heads * head_dim), these positions */
	float *z;		/* (batch, n_heads * head_dim) attention output: attn_out's input */
	float *proj;		/* (batch, dim) output of o and down before the residual add */
	float *gate, *up;	/* (batch, max(hidden_dim, shared_hidden_dim)) */
	float *act;		/* (batch, the same) silu(gate) * up: ffn_out's input */
	float *att;		/* (n_heads, min(batch, 4), seq_len) scores of a head's tokens */
	float *logits;		/* (logit_rows, vocab_size) */
	int logit_rows;		/* batch, or 1 (sf_state_opts.last_logits) */
	/* the KV cache: rows of n_kv_heads * head_dim in kv_k and kv_v, k_row
	 * and v_row bytes, layer l's from row kv_first[l] (n_layers + 1 of
	 * them): seq_len rows, position p at row p; a sliding layer's (gpt-oss)
	 * sliding_window + batch - 1 when fewer, position p at row p % that,
	 * a ring that holds what its tokens see. Mapped anonymous, so that a
	 * page costs memory once a position is written in it */
	uint8_t *key_cache, *value_cache;
	size_t *kv_first;
	enum sf_kv_type kv_k, kv_v;
	size_t k_row, v_row;
	uint64_t k_map, v_map;	/* bytes of the mappings */
	/* x to logits, moe_in, moe_out and shared_gate: one anonymous
	 * mapping (resident as used), each buffer on a cache line */
	uint8_t *floats;
	uint64_t floats_map;	/* its bytes */
	float *inv_freq;	/* (head_dim / 2) RoPE inverse frequencies */
	float *inv_freq_local;	/* (head_dim / 2) Gemma 3's sliding layers', else NULL */
	/* a mixture of experts' FFN (cfg.n_experts > 0), else NULL */
	float *router;		/* (batch, n_experts) router logits, then probabilities */
	float *route;		/* (batch, n_experts) renormalised weight of a picked
				 * expert, 0 for the others */
	float *route_ahead;	/* (batch, n_experts) the same, guessed for the next
				 * layer's likeliest (exec->experts_ahead) */
	float *moe_in;		/* (batch, dim) the normed x of one expert's tokens */
	float *moe_out;		/* (batch, dim) their outputs of that expert */
	int *moe_tok;		/* (batch) which tokens of the pass they are */
	float *shared_gate;	/* (batch) the shared expert's gate logit (Qwen2-MoE),
				 * else NULL */

	struct sf_pool *pool;	/* workers; NULL runs on the caller */
	const struct sf_observer *observer;	/* NULL for none */
	const struct sf_group_exec *exec;	/* NULL: dense products */
	int skip_logits;	/* set during prefill: the head is not applied */
	int mxfp4_int8;		/* MXFP4 experts' inputs rounded to int8 a block as
				 * llama.cpp does (sf_qmatmul_rows); 0: times the f32
				 * inputs, each weight widened (the reference) */
	int release_weights;	/* each layer's weights leave the resident set after
				 * the layer (sf_model_release_layer): set for a
				 * model larger than memory, which then needs one
				 * layer of it at a time, not all */
	struct sf_err err;	/* the first failure of a pass, sticky: see sf_state_error */
};

/* Bytes sf_state_init will allocate for seq_len positions, so callers can
 * state their memory need before allocating; _batch for passes of up to
 * batch tokens (sf_forward_batch); both with an f32 KV cache, whose
 * sf_state_kv_bytes they include. */
uint64_t sf_state_bytes(const struct sf_config *c, int seq_len);
uint64_t sf_state_bytes_batch(const struct sf_config *c, int seq_len, int batch);
/* What a state holds besides the config's shapes (sf_state_init_opts). */
struct sf_state_opts {
	int seq_len;		/* positions the KV cache holds */
	int batch;		/* tokens one pass takes */
	enum sf_kv_type kv_k, kv_v;
	int last_logits;	/* 1: logits of a pass's last token only (one row, not
				 * batch: sf_forward_batch's all_logits refused) */
};
/* The KV cache's bytes for positions positions in types k and v, in a
 * state of passes of batch tokens (a sliding layer's ring holds at most
 * sliding_window + batch - 1); the state's bytes but its KV cache. */
uint64_t sf_state_kv_bytes(const struct sf_config *c, int positions, int batch,
			   enum sf_kv_type k, enum sf_kv_type v);
/* What the KV cache costs as its positions fill, in a state of passes of
 * batch tokens: bytes a position in the layers that hold every one, and in
 * the sliding layers, whose rings hold at most ring positions (0: none);
 * sf_kv_cost_bytes gives the bytes of positions positions. */
struct sf_kv_cost {
	uint64_t position, ring_position, ring;
};
void sf_state_kv_cost(const struct sf_config *c, int batch, enum sf_kv_type k,
		      enum sf_kv_type v, struct sf_kv_cost *cost);
uint64_t sf_kv_cost_bytes(const struct sf_kv_cost *cost, uint64_t positions);
uint64_t sf_state_buffer_bytes(const struct sf_config *c, const struct sf_state_opts *o);
int sf_state_init(struct sf_runstate *s, const struct sf_config *c, int seq_len,
		  struct sf_err *e);
#define SF_BATCH_MAX 4096
int sf_state_init_batch(struct sf_runstate *s, const struct sf_config *c, int seq_len,
			int batch, struct sf_err *e);
/* The same as o says (sf_state_init_batch: an f32 KV cache, every
 * token's logits); a KV type that cannot hold the model's heads is
 * SF_EUNSUPPORTED. The KV cache's memory is taken as positions fill it. */
int sf_state_init_opts(struct sf_runstate *s, const struct sf_config *c,
		       const struct sf_state_opts *o, struct sf_err *e);
void sf_state_free(struct sf_runstate *s);	/* accepts a zeroed s */

/* Runs token at position pos (0 <= pos < seq_len; positions before pos
 * must already be in the cache) and returns the logits, or NULL when
 * skip_logits is set. A token outside the embedding's rows is refused
 * before it is looked up, and a hidden state or logits that are not
 * finite (NaN or Inf weights) stop the pass: both return NULL and are
 * kept for sf_state_error, and every later pass returns NULL at once. */
float *sf_forward(const struct sf_model *m, struct sf_runstate *s, int32_t token, int pos);

/* Runs tokens[0, T) at positions pos .. pos + T - 1 (1 <= T <= s->batch,
 * pos + T <= seq_len) in one pass over the weights, with causal attention
 * inside the block, and returns the logits: (T, vocab_size) when
 * all_logits, else the last token's (vocab_size); NULL when skip_logits.
 * Every token gets the floats T calls of sf_forward would give it (the
 * KV cache too). With an observer or an exec set, the pass is split into
 * passes of as many tokens as the hooks take (their tokens field). */
float *sf_forward_batch(const struct sf_model *m, struct sf_runstate *s, const int32_t *tokens,
			int T, int pos, int all_logits);

/* Continuous batching: one pass over the weights for the next token of
 * T distinct sequences, each with its own KV cache: token t at position
 * pos[t] of the sequence whose state is seqs[t] (its positions before
 * pos[t] in that cache; pos[t] < its seq_len), the keys and values written
 * there and attended there. s holds the pass's buffers: T within its
 * batch and its rows of logits (a state without last_logits), its own
 * KV cache unused. Returns the logits (T, vocab_size), each row the
 * floats sf_forward(m, seqs[t], tokens[t], pos[t]) gives (the products
 * of a pass are per token, attention is each token's alone); from an
 * image, each group reads the union of the T tokens' columns once. NULL
 * on failure, kept for sf_state_error(s). */
float *sf_forward_multi(const struct sf_model *m, struct sf_runstate *s,
			struct sf_runstate *const *seqs, const int32_t *tokens, const int *pos,
			int T);

/* Runs layer l alone on the residual stream the caller put in s->x
 * (T, dim), for tokens at positions pos .. pos + T - 1 (T within s->batch
 * and what the hooks take; layer l's KV cache must hold the positions
 * before pos), and leaves the layer's output in s->x: the floats
 * sf_forward_batch computes in that layer from that input. For measuring
 * one layer without running the others (tier calibration). 0, or -1 with
 * the failure kept for sf_state_error. */
int sf_forward_layer(const struct sf_model *m, struct sf_runstate *s, int l, int T, int pos);
/* The first nlayers layers (1 to n_layers) of a pass of tokens[0, T) at
 * positions pos on, without the head, T within s->batch and what the
 * hooks take: the residual stream after them in s->x and their KV cache,
 * the floats sf_forward_batch computes there; each layer released after
 * it with release_weights. For the layers before one under measurement
 * (calibration). 0, or -1 with the failure kept for sf_state_error. */
int sf_forward_layers(const struct sf_model *m, struct sf_runstate *s, const int32_t *tokens,
		      int T, int pos, int nlayers);

/* The first failure of a pass since sf_state_init, its message in e:
 * SF_ELIMIT "token id N at position P: beyond the model's M embedding
 * rows (vocab_size)", or SF_EFORMAT "layer L: non-finite hidden state at
 * position P" or "output head: non-finite logits at position P". 0 when
 * every pass went through. */
int sf_state_error(const struct sf_runstate *s, struct sf_err *e);
/* The token check of the forward pass for tokens[0, n) at positions pos
 * on: SF_ELIMIT, kept in s->err, for the first outside the embedding. */
int sf_state_check_tokens(struct sf_runstate *s, const struct sf_config *c,
			  const int32_t *tokens, size_t n, int pos);

/* sf_group_dense for T tokens: x (T, ldx), y[i] (T, w[i]->rows); each
 * (row, token) as sf_group_dense gives it for that token alone (MXFP4
 * matrices widened to f32: the forward pass's experts follow
 * sf_runstate.mxfp4_int8). */
void sf_group_dense_batch(struct sf_pool *pool, const float *x, size_t ldx, int T, int n,
			  float *const *y, const struct sf_weight *const *w);

#endif
