/* config.json of a Hugging Face causal LM: LlamaForCausalLM,
 * MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM
 * and the mixtures
 * of experts MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM,
 * OlmoeForCausalLM, Gemma2ForCausalLM and Gemma3ForCausalLM; or the llama,
 * qwen2, qwen3, phi3, gemma2 and gemma3 families from a GGUF's metadata. Anything we do
 * not implement is refused by name. See man/sparseflash.7 for the
 * supported fields. */
#ifndef SF_CONFIG_H
#define SF_CONFIG_H

#include "base/err.h"
#include "base/vocab.h"
#include "formats/gguf.h"

enum sf_arch {
	SF_ARCH_LLAMA, SF_ARCH_MISTRAL, SF_ARCH_QWEN2, SF_ARCH_QWEN3, SF_ARCH_MIXTRAL,
	SF_ARCH_QWEN2_MOE, SF_ARCH_QWEN3_MOE, SF_ARCH_OLMOE, SF_ARCH_GPT_OSS, SF_ARCH_PHI3,
	SF_ARCH_GEMMA2, SF_ARCH_GEMMA3
};

/* RMSNorm of q and k before RoPE: none; each head over its head_dim
 * elements (Qwen3, Qwen3-MoE: gains of head_dim); or the whole projection
 * before it is split into heads (OLMoE: gains of n_heads * head_dim for q,
 * n_kv_heads * head_dim for k). */
enum sf_qk_norm { SF_QK_NORM_NONE, SF_QK_NORM_HEAD, SF_QK_NORM_ALL };

#define SF_MAX_EOS 8
#define SF_ROPE_FREQS_MAX 512	/* head_dim / 2 at the largest head_dim */
#define SF_LAYERS_MAX 1024	/* num_hidden_layers at most */

struct sf_config {
	enum sf_arch arch;
	int dim;		/* hidden_size */
	int hidden_dim;		/* intermediate_size; of a mixture, each expert's
				 * (moe_intermediate_size in Qwen2/3-MoE) */
	int n_layers;
	int n_heads;
	int n_kv_heads;
	int head_dim;		/* head_dim, else dim / n_heads (Qwen3: 128) */
	int vocab_size;
	int max_seq_len;	/* max_position_embeddings, or sliding_window when
				 * that is smaller (so attention stays exact) */
	float norm_eps;
	float rope_theta;
	int rope_llama3;	/* rope_scaling of type llama3 */
	float rope_factor, rope_low_freq_factor, rope_high_freq_factor;
	int rope_orig_max_pos;	/* original_max_position_embeddings */
	/* rope_scaling of type yarn (gpt-oss's by default): the frequencies
	 * between the factor's and the plain ones by the ramp from beta_fast
	 * to beta_slow rotations over rope_orig_max_pos positions (its ends
	 * rounded out when truncate); every score times rope_attn_factor^2
	 * (its cos and sin scaled on both q and k) */
	int rope_yarn;
	float rope_beta_fast, rope_beta_slow, rope_attn_factor;
	int rope_truncate;
	/* rope_scaling of type longrope (Phi-3's; "su" its older name):
	 * frequency i divided by rope_freqs[i] (short_factor) in a context of
	 * at most rope_orig_max_pos positions, by rope_freqs_long[i]
	 * (long_factor) in a longer one (the choice llama.cpp makes by its
	 * context); every score times rope_attn_factor^2, as YaRN's */
	int rope_longrope;
	float rope_freqs_long[SF_ROPE_FREQS_MAX];
	/* the dimensions of each head RoPE turns: the first rope_dim, in
	 * pairs (i, i + rope_dim / 2); the rest pass unchanged (Phi-3's
	 * partial_rotary_factor times head_dim; head_dim elsewhere) */
	int rope_dim;
	float rope_linear;	/* rope_scaling of type linear: every frequency over
				 * it (Gemma 3: its global layers'); 0 when none */
	/* Gemma 2 and 3: each RMSNorm's gain norm_offset + w (1 from their
	 * checkpoints, which store the gains less one; 0 from a GGUF, whose
	 * converter adds it); the embeddings times embed_scale (0: not
	 * scaled); the scores times attn_scalar^-0.5 (query_pre_attn_scalar;
	 * 0: head_dim's); the sliding layers' RoPE on rope_theta_local,
	 * unscaled (0: the same as the others', Gemma 2's); GELU's
	 * tanh approximation in the FFN (act_gelu); and post_norms: the
	 * attention's output and the FFN's each normed (post_attention_layernorm,
	 * post_feedforward_layernorm) before it joins the residual, the FFN's
	 * input by pre_feedforward_layernorm */
	float norm_offset, embed_scale, attn_scalar, rope_theta_local;
	int act_gelu, post_norms;
	/* Gemma 2's soft-capping: each attention score s (scaled) becomes
	 * attn_softcap * tanh(s / attn_softcap) before the softmax, each logit
	 * the same with final_softcap; 0 when none */
	float attn_softcap, final_softcap;
	int tie_embeddings;
	int qkv_bias;		/* Qwen2; gpt-oss's attention_bias */
	int o_bias;		/* gpt-oss's attention_bias: o_proj's bias too */
	int attn_sinks;		/* gpt-oss: self_attn.sinks, one logit a head joined
				 * to the softmax's denominator */
	enum sf_qk_norm qk_norm;	/* Qwen3 and Qwen3-MoE per head, OLMoE whole */
	float clip_qkv;		/* OLMoE: q, k and v clamped to [-clip_qkv, clip_qkv]
				 * after the norms; 0 when none */
	int rope_interleaved;	/* a llama GGUF's q and k rows: each head's RoPE pairs
				 * adjacent (2i, 2i + 1), not (i, i + head_dim / 2) */
	/* a GGUF's rope_freqs.weight (Llama 3's rope_scaling as llama.cpp's
	 * converters store it), or longrope's short_factor: frequency i
	 * divided by rope_freqs[i]; n_rope_freqs is rope_dim / 2, or 0 */
	int n_rope_freqs;
	float rope_freqs[SF_ROPE_FREQS_MAX];
	int bos_id;		/* -1 when absent */
	int eos_ids[SF_MAX_EOS];
	int n_eos;
	int sliding_window;	/* Mistral, Mixtral, or Qwen2/3 with use_sliding_window;
				 * 0 when none; gpt-oss and Phi-3: the window of the
				 * layers layer_sliding marks */
	/* gpt-oss's and Gemma 3's layer_types: 1 where a layer is
	 * "sliding_attention" (its tokens see the sliding_window positions up
	 * to their own), 0 where "full_attention"; Phi-3's every layer when it
	 * has a sliding_window; all 0 in the other architectures */
	unsigned char layer_sliding[SF_LAYERS_MAX];
	int n_experts;		/* Mixtral's num_local_experts, the others'
				 * num_experts; 0: a dense FFN */
	int n_experts_used;	/* num_experts_per_tok: the top k of the router */
	int norm_topk;		/* the top k's probabilities renormalised to sum 1
				 * (Mixtral always, the others' norm_topk_prob) */
	int shared_hidden_dim;	/* Qwen2-MoE's shared_expert_intermediate_size:
				 * the shared expert every token takes, scaled by
				 * sigmoid(shared_expert_gate x); 0: none */
	int moe_bias;		/* gpt-oss: the router's and the experts' biases */
	/* gpt-oss's experts: gate clamped above at swiglu_limit, up to
	 * [-limit, limit], (up + 1) * gate * sigmoid(swiglu_alpha * gate);
	 * limit 0: silu(gate) * up */
	float swiglu_limit, swiglu_alpha;
};

/* Reads PATH (DIR/config.json). Shape fields (hidden_size,
 * intermediate_size, num_hidden_layers, num_attention_heads, vocab_size,
 * max_position_embeddings) are required; the rest take Hugging Face's
 * defaults. Returns 0, -errno, or SF_EFORMAT / SF_EUNSUPPORTED /
 * SF_ELIMIT with the field named in e; *c is zeroed on failure. */
int sf_config_load(struct sf_config *c, const char *path, struct sf_err *e);
/* The same from config.json's text in memory (an image's header); name
 * stands for the file in messages. */
int sf_config_parse(struct sf_config *c, const char *name, const char *text, size_t len,
		    struct sf_err *e);
/* The same from a GGUF's metadata, llama.cpp's keys: general.architecture
 * llama, qwen2, qwen3, phi3, gemma2, gemma3, qwen2moe, qwen3moe, olmoe or gpt-oss (others
 * refused by name), ARCH.embedding_length,
 * feed_forward_length, block_count, attention.head_count and
 * context_length required; attention.head_count_kv, attention.key_length
 * (= value_length; rope.dimension_count at most it, even), vocab_size (else the length of
 * tokenizer.ggml.tokens), attention.layer_norm_rms_epsilon (1e-6),
 * rope.freq_base (10000) and tokenizer.ggml.bos/eos/eot_token_id
 * optional; tied embeddings when there is no output.weight tensor.
 * rope_freqs.weight (F32, head_dim / 2 finite factors above 0) read into
 * rope_freqs; phi3's rope_factors_short/long.weight (its LongRoPE) with
 * rope.scaling.original_context_length and attn_factor, and its
 * attention.sliding_window; gemma2's and gemma3's window, pattern and
 * rope.freq_base_swa, gemma2's attn_ and final_logit_softcapping;
 * a mixture's expert_* keys; rope.scaling.type none, linear or yarn
 * with its keys, as llama.cpp computes them; gpt-oss's sliding window
 * keys, and what its graph computes without a key (biases, sinks, the
 * clamped SwiGLU). Refused: other RoPE scaling, expert weight scales.
 * Returns 0 or an error naming the key; *c is zeroed on failure. */
int sf_config_from_gguf(struct sf_config *c, const struct sf_gguf *g, struct sf_err *e);
const char *sf_arch_name(enum sf_arch a);
/* The config.json key of c's expert count, for messages:
 * "num_local_experts" (Mixtral) or "num_experts". */
const char *sf_config_experts_key(const struct sf_config *c);
/* config.json's text for c (malloc'ed, NUL-terminated; NULL when out of
 * memory), which sf_config_parse reads back into c: the config of a
 * model that has none (a GGUF's, which an image embeds), with
 * "rope_interleaved": true for a llama GGUF's q and k rows and
 * "rope_freqs": [...] for its frequency factors, and what else the GGUF
 * path sets: the experts, YaRN, gpt-oss's layer types, window, biases and
 * SwiGLU's constants. */
char *sf_config_json(const struct sf_config *c);

/* The context the commands give c when -c leaves it to them: the
 * model's max_position_embeddings, or with longrope its pretrained
 * context (original_max_position_embeddings), where its short factors
 * hold as transformers computes a text that short; -c beyond it takes
 * the long factors (sf_state_init). */
int sf_config_default_ctx(const struct sf_config *c);

/* Entries of a group: the length of its input vector. */
size_t sf_group_entries(const struct sf_config *c, enum sf_group g);

#endif
