/* Binds a Hugging Face model directory to struct sf_model: config.json,
 * then every tensor by its Hugging Face name, checked for presence and
 * exact shape; then the fingerprints (man/sf-formats.5, FINGERPRINTS).
 * See model.h. */
#include "formats/model.h"

#include "base/quant.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/bytes.h"
#include "formats/model_gguf.h"
#include "formats/model_gptoss.h"

// --- fingerprint

/* The shape fingerprint: 64-bit FNV-1a (offset basis 0xcbf29ce484222325,
 * prime 0x100000001b3) over a canonical text: "sparseflash-fingerprint-1\n",
 * one "key=value\n" line per config field (floats as the hex of their IEEE
 * bits, so no locale or printf rounding enters), then per bound tensor, in
 * binding order, "name dtype d0xd1\n" ("tied" for a tied lm_head).
 * Changing this text changes every fingerprint and so invalidates every
 * stream.
 * The weights fingerprint: FNV-1a over the sampled bytes of every bound
 * tensor in binding order (sample_tensor), then the 16 characters of the
 * shape fingerprint. */

static void fnv_feed(uint64_t *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fnv_feed(uint64_t *h, const char *fmt, ...)
{
	char buf[SF_TENSOR_NAME_MAX + 128];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(buf))
		n = (int)sizeof(buf) - 1;	/* names are shorter than this */
	*h = sf_fnv64(*h, buf, (uint64_t)n);
}

/* A tensor of n bytes enters the weights fingerprint whole when n is at
 * most BLOCKS * BLOCK (64 KiB), else as BLOCKS blocks of BLOCK bytes,
 * block i at offset i * floor((n - BLOCK) / (BLOCKS - 1)): the first, the
 * last but a few bytes, and evenly between. A fixed 64 KiB per tensor
 * reads about 18 MiB of a 7B model (291 tensors) wherever it lies, so the
 * check costs well under 0.1 s where a full hash would read every byte once
 * more; a changed weight outside the blocks goes unseen, a fine-tune
 * (which changes every block) does not. */
static void sample_tensor(uint64_t *h, const unsigned char *p, uint64_t n)
{
	if (n <= (uint64_t)SF_FINGERPRINT_BLOCKS * SF_FINGERPRINT_BLOCK) {
		*h = sf_fnv64(*h, p, n);
		return;
	}
	uint64_t step = (n - SF_FINGERPRINT_BLOCK) / (SF_FINGERPRINT_BLOCKS - 1);
	for (uint64_t i = 0; i < SF_FINGERPRINT_BLOCKS; i++)
		*h = sf_fnv64(*h, p + i * step, SF_FINGERPRINT_BLOCK);
}

static uint32_t float_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

/* The window and the layers it slides in (gpt-oss, Gemma, Phi-3). */
static void feed_sliding(uint64_t *h, const struct sf_config *c)
{
	fnv_feed(h, "window=%d\nsliding=", c->sliding_window);
	for (int l = 0; l < c->n_layers; l++)
		fnv_feed(h, "%d", c->layer_sliding[l]);
	fnv_feed(h, "\n");
}

static void hash_config(uint64_t *h, const struct sf_config *c)
{
	fnv_feed(h, "sparseflash-fingerprint-1\n");
	fnv_feed(h, "arch=%s\ndim=%d\nhidden_dim=%d\nn_layers=%d\nn_heads=%d\nn_kv_heads=%d\n",
		 sf_arch_name(c->arch), c->dim, c->hidden_dim, c->n_layers, c->n_heads,
		 c->n_kv_heads);
	fnv_feed(h, "head_dim=%d\nvocab_size=%d\nmax_seq_len=%d\nnorm_eps=%08" PRIx32 "\n",
		 c->head_dim, c->vocab_size, c->max_seq_len, float_bits(c->norm_eps));
	fnv_feed(h, "rope_theta=%08" PRIx32 "\nrope_llama3=%d\n", float_bits(c->rope_theta),
		 c->rope_llama3);
	if (c->rope_llama3)
		fnv_feed(h, "rope_factor=%08" PRIx32 "\nrope_low=%08" PRIx32 "\nrope_high=%08" PRIx32
			 "\nrope_orig_max_pos=%d\n", float_bits(c->rope_factor),
			 float_bits(c->rope_low_freq_factor), float_bits(c->rope_high_freq_factor),
			 c->rope_orig_max_pos);
	fnv_feed(h, "tie=%d\nqkv_bias=%d\nbos=%d\neos=", c->tie_embeddings, c->qkv_bias, c->bos_id);
	for (int i = 0; i < c->n_eos; i++)
		fnv_feed(h, "%s%d", i ? "," : "", c->eos_ids[i]);
	fnv_feed(h, "\n");
	if (c->n_experts)	/* mixtures only: every other fingerprint stays */
		fnv_feed(h, "experts=%d\nexperts_used=%d\nnorm_topk=%d\n", c->n_experts,
			 c->n_experts_used, c->norm_topk);
	if (c->shared_hidden_dim)	/* Qwen2-MoE's */
		fnv_feed(h, "shared_hidden_dim=%d\n", c->shared_hidden_dim);
	if (c->clip_qkv > 0.0f)	/* OLMoE's */
		fnv_feed(h, "clip_qkv=%08" PRIx32 "\n", float_bits(c->clip_qkv));
	if (c->rope_yarn)
		fnv_feed(h, "rope_yarn=%08" PRIx32 ",%08" PRIx32 ",%08" PRIx32 ",%08" PRIx32
			 ",%d,%d\n", float_bits(c->rope_factor), float_bits(c->rope_beta_fast),
			 float_bits(c->rope_beta_slow), float_bits(c->rope_attn_factor),
			 c->rope_orig_max_pos, c->rope_truncate);
	if (c->arch == SF_ARCH_GPT_OSS) {	/* its own, every other fingerprint stays */
		fnv_feed(h, "o_bias=%d\nsinks=%d\nmoe_bias=%d\nswiglu=%08" PRIx32 ",%08" PRIx32
			 "\n", c->o_bias, c->attn_sinks, c->moe_bias,
			 float_bits(c->swiglu_limit), float_bits(c->swiglu_alpha));
		feed_sliding(h, c);
	}
	if (c->rope_linear > 0)
		fnv_feed(h, "rope_linear=%08" PRIx32 "\n", float_bits(c->rope_linear));
	if (c->arch == SF_ARCH_GEMMA2 || c->arch == SF_ARCH_GEMMA3) {	/* their own */
		fnv_feed(h, "norm_offset=%08" PRIx32 "\nembed_scale=%08" PRIx32 "\nattn_scalar=%08"
			 PRIx32 "\nrope_local=%08" PRIx32 "\n",
			 float_bits(c->norm_offset), float_bits(c->embed_scale),
			 float_bits(c->attn_scalar), float_bits(c->rope_theta_local));
		if (c->arch == SF_ARCH_GEMMA2)
			fnv_feed(h, "softcap=%08" PRIx32 ",%08" PRIx32 "\n",
				 float_bits(c->attn_softcap), float_bits(c->final_softcap));
		feed_sliding(h, c);
	}
	if (c->arch == SF_ARCH_PHI3) {	/* its own, every other fingerprint stays */
		fnv_feed(h, "rope_dim=%d\n", c->rope_dim);
		feed_sliding(h, c);
	}
	if (c->rope_longrope) {
		fnv_feed(h, "rope_longrope=%08" PRIx32 ",%d\n", float_bits(c->rope_attn_factor),
			 c->rope_orig_max_pos);
		for (int i = 0; i < c->n_rope_freqs; i++)
			fnv_feed(h, "rope_freq_long=%08" PRIx32 "\n",
				 float_bits(c->rope_freqs_long[i]));
	}
	if (c->rope_interleaved)	/* a llama GGUF's only */
		fnv_feed(h, "rope_interleaved=1\n");
	for (int i = 0; i < c->n_rope_freqs; i++)	/* a GGUF's rope_freqs.weight */
		fnv_feed(h, "rope_freq=%08" PRIx32 "\n", float_bits(c->rope_freqs[i]));
}

// --- binding

struct binder {
	struct sf_model *m;
	const struct sf_safetensors *st;	/* the tensors bound */
	const char *source;	/* file to name when a tensor is missing */
	unsigned char *used;	/* (st.ntensors) 1 when bound */
	uint64_t hash;		/* shape fingerprint */
	uint64_t weights;	/* weights fingerprint, before the shape's digits */
	int sample;		/* 1: every tensor has its bytes, hash them */
	int block_rows;		/* 1: any matrix may have a block dtype (a GGUF's) */
	int wrap;		/* gemma3_wraps' index, or -1 */
};

/* Gemma3ForConditionalGeneration checkpoints (Gemma 3 4B and up) hold the
 * text model's tensors under a prefix: transformers' older one for
 * "model." and for the rest, its newer one; their vision tower and
 * projector (prefixes in gemma3_unread) are not read. */
static const char *const gemma3_wraps[][2] = {
	{ "language_model.model.", "language_model." },
	{ "model.language_model.", "" },
};
static const char *const gemma3_unread[] = {
	"vision_tower.", "multi_modal_projector.", "model.vision_tower.",
	"model.multi_modal_projector.",
};

/* bind's flags: the tensor may be absent; its rows may be quantized
 * vectors (an image's embedding, head and experts, sf_dtype_is_block). */
#define BIND_OPTIONAL 1
#define BIND_ROWS_QUANTIZED 2
/* its shape follows head_dim: a mismatch names it, since a head_dim
 * that disagrees with the tensors shows first there */
#define BIND_HEAD_DIM 4
/* its shape follows the expert count */
#define BIND_EXPERTS 8

/* Binds rows [r0, r0 + rows) of tensor NAME, which must have shape
 * [all, cols], or [all] when cols == 0 (a vector, stored with cols = 1),
 * into the fingerprints as tensor AS of those rows alone: a projection's
 * slice of Phi-3's fused qkv_proj or gate_up_proj fingerprints as the
 * tensor an image of it holds. */
static int bind_part(struct binder *b, struct sf_weight *w, const char *name, uint64_t all,
		     uint64_t r0, uint64_t rows, uint64_t cols, unsigned flags, const char *as,
		     struct sf_err *e)
{
	const struct sf_safetensors *st = b->st;
	char wrapped[SF_TENSOR_NAME_MAX];
	int ndim = cols ? 2 : 1;

	if (b->wrap >= 0) {	/* its name in a Gemma 3 wrapper's checkpoint */
		int model = !strncmp(name, "model.", 6);
		snprintf(wrapped, sizeof(wrapped), "%s%s", gemma3_wraps[b->wrap][!model],
			 name + (model ? 6 : 0));
		name = wrapped;
	}
	const struct sf_tensor *t = sf_safetensors_find(st, name);

	if (!t) {
		if (flags & BIND_OPTIONAL)
			return 0;
		return sf_err_set(e, SF_EMISMATCH, "%s: tensor '%s': missing", b->source, name);
	}
	if (t->ndim != ndim || t->shape[0] != all || (cols && t->shape[1] != cols)) {
		char got[160], want[64];

		sf_shape_str(got, sizeof(got), t->ndim, t->shape);
		if (cols)
			snprintf(want, sizeof(want), "[%llu, %llu]", (unsigned long long)all,
				 (unsigned long long)cols);
		else
			snprintf(want, sizeof(want), "[%llu]", (unsigned long long)all);
		if (flags & BIND_HEAD_DIM)
			return sf_err_set(e, SF_EMISMATCH, "%s: tensor '%s': shape %s, expected %s "
					  "(head_dim %d)", st->paths[t->file], name, got, want,
					  b->m->cfg.head_dim);
		if (flags & BIND_EXPERTS)
			return sf_err_set(e, SF_EMISMATCH, "%s: tensor '%s': shape %s, expected %s "
					  "(%s %d)", st->paths[t->file], name, got, want,
					  sf_config_experts_key(&b->m->cfg), b->m->cfg.n_experts);
		return sf_err_set(e, SF_EMISMATCH, "%s: tensor '%s': shape %s, expected %s",
				  st->paths[t->file], name, got, want);
	}
	/* The safetensors reader admits only F32, F16 and BF16, which
	 * every kernel takes; an image's reader block dtypes too, which the
	 * row products and lookups take on whole blocks, and a GGUF's in any
	 * matrix. */
	if (t->dtype == SF_DTYPE_U8)
		return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': dtype U8, expected F32, F16 or "
				  "BF16", st->paths[t->file], name);
	if (sf_dtype_is_block(t->dtype) &&
	    (!(flags & BIND_ROWS_QUANTIZED || (b->block_rows && cols)) || cols % SF_QBLOCK))
		return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': dtype %s: only the embedding "
				  "and output head may have a block dtype, with rows a multiple "
				  "of %d", st->paths[t->file], name, sf_dtype_name(t->dtype),
				  SF_QBLOCK);
	/* a GGUF's tiles interleave SF_QTILE rows: a slice takes whole ones */
	if (sf_dtype_untiled(t->dtype) != t->dtype && (r0 % SF_QTILE || rows % SF_QTILE))
		return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': rows %llu to %llu of tiles of %d",
				  st->paths[t->file], name, (unsigned long long)r0,
				  (unsigned long long)(r0 + rows), SF_QTILE);
	w->dtype = t->dtype;
	w->rows = rows;
	w->cols = cols ? cols : 1;
	w->data = t->data;
	if (r0)
		w->data = (const uint8_t *)t->data + r0 * sf_weight_row_bytes(w);
	b->used[t - st->tensors] = 1;
	if (b->sample)
		sample_tensor(&b->weights, w->data, rows == all ? t->nbytes : sf_weight_bytes(w));
	fnv_feed(&b->hash, "%s %s %llux%llu\n", as, sf_dtype_name(t->source_dtype),
		 (unsigned long long)rows, (unsigned long long)w->cols);
	return 0;
}

static int bind(struct binder *b, struct sf_weight *w, const char *name, uint64_t rows,
		uint64_t cols, unsigned flags, struct sf_err *e)
{
	return bind_part(b, w, name, rows, 0, rows, cols, flags, name, e);
}

static int bind_layer(struct binder *b, int l, struct sf_err *e)
{
	const struct sf_config *c = &b->m->cfg;
	struct sf_layer_weights *w = &b->m->layers[l];
	uint64_t dim = (uint64_t)c->dim, hid = (uint64_t)c->hidden_dim;
	/* int * int can overflow int; 64-bit products of values bounded by
	 * the config limits cannot. */
	uint64_t q = (uint64_t)c->n_heads * (uint64_t)c->head_dim;
	uint64_t kv = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim;
	char p[64], n[SF_TENSOR_NAME_MAX];
	int ret;

	snprintf(p, sizeof(p), "model.layers.%d.", l);
#define B(field, suffix, rows, cols, flags) do { \
		snprintf(n, sizeof(n), "%s%s", p, suffix); \
		if ((ret = bind(b, &w->field, n, rows, cols, flags, e))) \
			return ret; \
	} while (0)
	char as[SF_TENSOR_NAME_MAX];
#define R(field, suffix, all, r0, rows, cols, flags, alone) do { \
		snprintf(n, sizeof(n), "%s%s", p, suffix); \
		snprintf(as, sizeof(as), "%s%s", p, alone); \
		if ((ret = bind_part(b, &w->field, n, all, r0, rows, cols, flags, as, e))) \
			return ret; \
	} while (0)
	B(attn_norm, "input_layernorm.weight", dim, 0, 0);
	/* Phi-3's checkpoints fuse q, k and v rows in one tensor, gate and up
	 * rows in another; an image of one holds them apart */
	snprintf(n, sizeof(n), "%sself_attn.qkv_proj.weight", p);
	if (c->arch == SF_ARCH_PHI3 && sf_safetensors_find(b->st, n)) {
		R(wq, "self_attn.qkv_proj.weight", q + 2 * kv, 0, q, dim, BIND_HEAD_DIM,
		  "self_attn.q_proj.weight");
		R(wk, "self_attn.qkv_proj.weight", q + 2 * kv, q, kv, dim, BIND_HEAD_DIM,
		  "self_attn.k_proj.weight");
		R(wv, "self_attn.qkv_proj.weight", q + 2 * kv, q + kv, kv, dim, BIND_HEAD_DIM,
		  "self_attn.v_proj.weight");
	} else {
		B(wq, "self_attn.q_proj.weight", q, dim, BIND_HEAD_DIM);
		B(wk, "self_attn.k_proj.weight", kv, dim, BIND_HEAD_DIM);
		B(wv, "self_attn.v_proj.weight", kv, dim, BIND_HEAD_DIM);
	}
	B(wo, "self_attn.o_proj.weight", dim, q, BIND_HEAD_DIM);
	if (c->qkv_bias) {
		B(bq, "self_attn.q_proj.bias", q, 0, BIND_HEAD_DIM);
		B(bk, "self_attn.k_proj.bias", kv, 0, BIND_HEAD_DIM);
		B(bv, "self_attn.v_proj.bias", kv, 0, BIND_HEAD_DIM);
	}
	if (c->o_bias)
		B(bo, "self_attn.o_proj.bias", dim, 0, 0);
	if (c->attn_sinks)
		B(sinks, "self_attn.sinks", (uint64_t)c->n_heads, 0, 0);
	if (c->qk_norm == SF_QK_NORM_HEAD) {
		B(q_norm, "self_attn.q_norm.weight", (uint64_t)c->head_dim, 0, BIND_HEAD_DIM);
		B(k_norm, "self_attn.k_norm.weight", (uint64_t)c->head_dim, 0, BIND_HEAD_DIM);
	} else if (c->qk_norm == SF_QK_NORM_ALL) {
		B(q_norm, "self_attn.q_norm.weight", q, 0, BIND_HEAD_DIM);
		B(k_norm, "self_attn.k_norm.weight", kv, 0, BIND_HEAD_DIM);
	}
	if (c->post_norms) {	/* Gemma 3's sandwich */
		B(post_attn_norm, "post_attention_layernorm.weight", dim, 0, 0);
		B(ffn_norm, "pre_feedforward_layernorm.weight", dim, 0, 0);
		B(post_ffn_norm, "post_feedforward_layernorm.weight", dim, 0, 0);
	} else {
		B(ffn_norm, "post_attention_layernorm.weight", dim, 0, 0);
	}
	snprintf(n, sizeof(n), "%smlp.gate_up_proj.weight", p);
	if (c->arch == SF_ARCH_PHI3 && sf_safetensors_find(b->st, n)) {	/* gate's rows, up's */
		R(w_gate, "mlp.gate_up_proj.weight", 2 * hid, 0, hid, dim, 0, "mlp.gate_proj.weight");
		R(w_up, "mlp.gate_up_proj.weight", 2 * hid, hid, hid, dim, 0, "mlp.up_proj.weight");
		B(w_down, "mlp.down_proj.weight", dim, hid, 0);
		return 0;
	}
	if (!c->n_experts) {
		B(w_gate, "mlp.gate_proj.weight", hid, dim, 0);
		B(w_up, "mlp.up_proj.weight", hid, dim, 0);
		B(w_down, "mlp.down_proj.weight", dim, hid, 0);
		return 0;
	}
	{
		/* names from the layer's prefix on, as B takes them */
		char full[SF_TENSOR_NAME_MAX];
		size_t skip = (size_t)snprintf(full, sizeof(full), "model.layers.%d.", l);

		sf_model_router_tensor(c, l, 0, full, sizeof(full));
		B(router, full + skip, (uint64_t)c->n_experts, dim, BIND_EXPERTS);
		if (c->moe_bias) {
			sf_model_router_tensor(c, l, 1, full, sizeof(full));
			B(router_bias, full + skip, (uint64_t)c->n_experts, 0, BIND_EXPERTS);
		}
		w->experts = b->m->experts + (size_t)l * (size_t)c->n_experts;
		for (int x = 0; x < c->n_experts; x++) {
			struct sf_expert_weights *xw = &w->experts[x];
			struct sf_weight *mw[6] = { &xw->w_gate, &xw->w_up, &xw->w_down,
						    &xw->b_gate, &xw->b_up, &xw->b_down };
			for (int i = 0; i < (c->moe_bias ? 6 : 3); i++) {
				sf_model_expert_tensor(c, l, x, i, full, sizeof(full));
				if ((ret = bind(b, mw[i], full, i % 3 == 2 ? dim : hid,
						i >= 3 ? 0 : i == 2 ? hid : dim,
						i >= 3 ? 0 : BIND_ROWS_QUANTIZED, e)))
					return ret;
			}
		}
	}
	if (c->shared_hidden_dim) {
		uint64_t sh = (uint64_t)c->shared_hidden_dim;

		B(shared.w_gate, "mlp.shared_expert.gate_proj.weight", sh, dim, 0);
		B(shared.w_up, "mlp.shared_expert.up_proj.weight", sh, dim, 0);
		B(shared.w_down, "mlp.shared_expert.down_proj.weight", dim, sh, 0);
		B(shared_gate, "mlp.shared_expert_gate.weight", 1, dim, 0);
	}
#undef R
#undef B
	return 0;
}

uint64_t sf_model_bytes(const struct sf_model *m)
{
	uint64_t n = 0;
	for (size_t i = 0; i < m->st.ntensors; i++)
		n += m->st.tensors[i].nbytes;
	return n;
}

/* Layer l's tensors but its routed experts'; those a model lacks have
 * data NULL. */
#define LAYER_TENSORS 24
static void layer_tensors(const struct sf_model *m, int l, const struct sf_weight **all)
{
	const struct sf_layer_weights *w = &m->layers[l];
	const struct sf_weight *t[LAYER_TENSORS] = { &w->attn_norm, &w->wq, &w->wk, &w->wv,
						     &w->wo, &w->bq, &w->bk, &w->bv, &w->bo,
						     &w->sinks, &w->router_bias,
						     &w->q_norm, &w->k_norm, &w->ffn_norm,
						     &w->post_attn_norm, &w->post_ffn_norm,
						     &w->w_gate, &w->w_up, &w->w_down,
						     &w->router, &w->shared.w_gate,
						     &w->shared.w_up, &w->shared.w_down,
						     &w->shared_gate };
	memcpy(all, t, sizeof(t));
}

/* Expert x's three matrices in layer l and their biases (data NULL
 * when it has none). */
#define EXPERT_TENSORS 6
static void expert_tensors(const struct sf_model *m, int l, int x, const struct sf_weight **all)
{
	const struct sf_expert_weights *w = &m->layers[l].experts[x];

	all[0] = &w->w_gate;
	all[1] = &w->w_up;
	all[2] = &w->w_down;
	all[3] = &w->b_gate;
	all[4] = &w->b_up;
	all[5] = &w->b_down;
}

uint64_t sf_weight_bytes(const struct sf_weight *w)
{
	return w->data ? w->rows * sf_weight_row_bytes(w) : 0;
}

uint64_t sf_weight_row_bytes(const struct sf_weight *w)
{
	return sf_dtype_col_bytes(w->dtype, w->cols);
}

uint64_t sf_model_layer_bytes(const struct sf_model *m, int l)
{
	const struct sf_weight *all[LAYER_TENSORS];
	uint64_t n = 0;

	layer_tensors(m, l, all);
	for (int i = 0; i < LAYER_TENSORS; i++)
		n += sf_weight_bytes(all[i]);
	for (int x = 0; x < m->cfg.n_experts; x++) {
		expert_tensors(m, l, x, all);
		for (int i = 0; i < EXPERT_TENSORS; i++)
			n += sf_weight_bytes(all[i]);
	}
	return n;
}

uint64_t sf_model_pass_bytes(const struct sf_model *m)
{
	uint64_t n = sf_model_bytes(m), most = 0;
	for (int l = 0; l < m->cfg.n_layers; l++) {
		uint64_t b = sf_model_layer_bytes(m, l);
		n -= b < n ? b : n;
		most = b > most ? b : most;
	}
	return n + most;
}

int sf_model_releases(const struct sf_model *m)
{
	return sf_model_bytes(m) > SF_RELEASE_WEIGHTS_BYTES;
}

void sf_model_release(const struct sf_model *m, const struct sf_weight *w)
{
	if (w->data)
		sf_safetensors_release(&m->st, w->data, (size_t)sf_weight_bytes(w));
}

void sf_model_release_layer(const struct sf_model *m, int l)
{
	const struct sf_weight *all[LAYER_TENSORS];

	layer_tensors(m, l, all);
	for (int i = 0; i < LAYER_TENSORS; i++)
		sf_model_release(m, all[i]);
	for (int x = 0; x < m->cfg.n_experts; x++) {
		expert_tensors(m, l, x, all);
		for (int i = 0; i < EXPERT_TENSORS; i++)
			sf_model_release(m, all[i]);
	}
}

/* A tensor we did not bind would be silently ignored (an o_proj bias, an
 * extra norm): refuse it, except what Hugging Face itself ignores. */
static int check_unused(struct binder *b, struct sf_err *e)
{
	const struct sf_safetensors *st = b->st;
	static const char inv_freq[] = ".rotary_emb.inv_freq";
	char head[SF_TENSOR_NAME_MAX];

	snprintf(head, sizeof(head), "%slm_head.weight", b->wrap >= 0 ? gemma3_wraps[b->wrap][1] : "");
	for (size_t i = 0; i < st->ntensors; i++) {
		const char *name = st->tensors[i].name;
		size_t len = strlen(name);

		if (b->used[i])
			continue;
		if (len >= sizeof(inv_freq) - 1 &&
		    !strcmp(name + len - (sizeof(inv_freq) - 1), inv_freq))
			continue;	/* recomputed from rope_theta */
		if (!strcmp(name, head) && b->m->cfg.tie_embeddings)
			continue;	/* tied: Hugging Face uses the embeddings */
		int unread = 0;
		for (size_t k = 0; b->wrap >= 0 && k < sizeof(gemma3_unread) / sizeof(*gemma3_unread);
		     k++)
			unread |= !strncmp(name, gemma3_unread[k], strlen(gemma3_unread[k]));
		if (unread)
			continue;	/* Gemma 3's vision: text only here */
		return sf_err_set(e, SF_EUNSUPPORTED,
				  "%s: tensor '%s': not part of a %s with this config.json",
				  st->paths[st->tensors[i].file], name, sf_arch_name(b->m->cfg.arch));
	}
	return 0;
}

/* memcpy, because safetensors packs tensors without padding: an F32
 * tensor may start at any byte. */
float sf_weight_at(const struct sf_weight *w, uint64_t i)
{
	const unsigned char *p = w->data;
	uint16_t h;
	float f;

	switch (w->dtype) {
	case SF_DTYPE_F32:
		memcpy(&f, p + i * 4, 4);
		return f;
	case SF_DTYPE_F16:
		memcpy(&h, p + i * 2, 2);
		return sf_f16_to_f32(h);
	case SF_DTYPE_BF16:
		memcpy(&h, p + i * 2, 2);
		return sf_bf16_to_f32(h);
	case SF_DTYPE_Q8:
	case SF_DTYPE_Q4:
	case SF_DTYPE_Q6:
	case SF_DTYPE_Q8X16:
	case SF_DTYPE_Q4X16:
	case SF_DTYPE_Q6X16:
	case SF_DTYPE_MXFP4:
		break;	/* vectors only (sf_weight_row) */
	case SF_DTYPE_U8:
		break;	/* never bound */
	}
	return 0.0f;
}

void sf_weight_row(float *out, const struct sf_weight *w, uint64_t row)
{
	enum sf_dtype bt = sf_dtype_untiled(w->dtype);

	if (bt != w->dtype) {
		uint64_t tile = row / SF_QTILE * SF_QTILE;
		sf_qtile_dequant_row(out, (const uint8_t *)w->data + tile * sf_weight_row_bytes(w), bt,
				     w->cols, row - tile);
		return;
	}
	if (sf_dtype_is_block(w->dtype)) {
		sf_dequant_column(out, (const uint8_t *)w->data + row * sf_weight_row_bytes(w),
				  w->dtype, w->cols);
		return;
	}
	uint64_t base = row * w->cols;
	for (uint64_t c = 0; c < w->cols; c++)
		out[c] = sf_weight_at(w, base + c);
}

void sf_model_close(struct sf_model *m)
{
	if (!m)
		return;
	sf_safetensors_close(&m->st);
	free(m->layers);
	free(m->experts);
	free(m->converted);
	memset(m, 0, sizeof(*m));
}

/* Binds every weight of m->cfg from st, then the shape fingerprint, and
 * with sample the weights fingerprint. */
static int bind_all(struct sf_model *m, const struct sf_safetensors *st, int sample,
		    int block_rows, struct sf_err *e)
{
	struct binder b = { .m = m, .st = st, .hash = SF_FNV64_BASIS, .weights = SF_FNV64_BASIS,
			    .sample = sample, .block_rows = block_rows, .wrap = -1 };
	uint64_t vocab, dim;
	int ret;

	for (int w = 0; m->cfg.arch == SF_ARCH_GEMMA3 && w < 2; w++) {
		char n[SF_TENSOR_NAME_MAX];
		snprintf(n, sizeof(n), "%sembed_tokens.weight", gemma3_wraps[w][0]);
		if (sf_safetensors_find(st, n))
			b.wrap = w;
	}

	b.source = sf_safetensors_source(st);
	m->source = b.source;
	b.used = calloc(st->ntensors ? st->ntensors : 1, 1);
	m->layers = calloc((size_t)m->cfg.n_layers, sizeof(*m->layers));
	/* at most LAYERS_MAX * EXPERTS_MAX (2^20) of them */
	if (m->cfg.n_experts)
		m->experts = calloc((size_t)m->cfg.n_layers * (size_t)m->cfg.n_experts,
				    sizeof(*m->experts));
	if (!b.used || !m->layers || (m->cfg.n_experts && !m->experts)) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory", b.source);
		goto out;
	}
	hash_config(&b.hash, &m->cfg);
	vocab = (uint64_t)m->cfg.vocab_size;
	dim = (uint64_t)m->cfg.dim;
	if ((ret = bind(&b, &m->embed, "model.embed_tokens.weight", vocab, dim,
			BIND_ROWS_QUANTIZED, e)))
		goto out;
	for (int l = 0; l < m->cfg.n_layers; l++)
		if ((ret = bind_layer(&b, l, e)))
			goto out;
	if ((ret = bind(&b, &m->final_norm, "model.norm.weight", dim, 0, 0, e)))
		goto out;
	if (m->cfg.tie_embeddings) {
		m->lm_head = m->embed;
		fnv_feed(&b.hash, "lm_head.weight tied\n");
	} else if ((ret = bind(&b, &m->lm_head, "lm_head.weight", vocab, dim, BIND_ROWS_QUANTIZED,
			       e))) {
		goto out;
	}
	if ((ret = check_unused(&b, e)))
		goto out;
	snprintf(m->fingerprint.shape, sizeof(m->fingerprint.shape), "%016" PRIx64, b.hash);
	if (sample) {
		b.weights = sf_fnv64(b.weights, m->fingerprint.shape, SF_FINGERPRINT_LEN);
		snprintf(m->fingerprint.weights, sizeof(m->fingerprint.weights), "%016" PRIx64,
			 b.weights);
	}
	ret = 0;
out:
	free(b.used);
	return ret;
}

/* A GGUF's weights fingerprint samples the file's own tensors, whatever
 * the engine computes them as, so that every open of one file agrees (the
 * shape fingerprint names each tensor's element dtype: model_gguf.c). */
static void gguf_fingerprint(struct sf_model *m, const struct sf_gguf *g)
{
	uint64_t weights = SF_FNV64_BASIS;

	for (size_t i = 0; i < g->ntensors; i++)
		sample_tensor(&weights, g->tensors[i].data, g->tensors[i].nbytes);
	weights = sf_fnv64(weights, m->fingerprint.shape, SF_FINGERPRINT_LEN);
	snprintf(m->fingerprint.weights, sizeof(m->fingerprint.weights), "%016" PRIx64, weights);
}

static int open_gguf(struct sf_model *m, const char *path, int element_only, struct sf_err *e)
{
	struct sf_gguf g;
	int ret;

	if ((ret = sf_gguf_open(&g, path, e)))
		return ret;
	if (!(ret = sf_config_from_gguf(&m->cfg, &g, e)) &&
	    !(ret = sf_gguf_model_tensors(&m->st, &m->converted, &g, &m->cfg, element_only, e)) &&
	    !(ret = bind_all(m, &m->st, 0, 1, e)))
		gguf_fingerprint(m, &g);	/* st holds the mapping g's tensors point in */
	sf_gguf_close(&g);
	return ret;
}

static int open_any(struct sf_model *m, const char *path, int element_only, struct sf_err *e)
{
	char *cfg = NULL;
	size_t plen = strlen(path) + sizeof("/config.json");
	int ret;

	memset(m, 0, sizeof(*m));
	/* a path that is not there is named itself, not as a directory's
	 * config.json (a mistyped GGUF file's name) */
	struct stat st;
	if (stat(path, &st)) {
		ret = sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (sf_gguf_probe(path)) {
		ret = open_gguf(m, path, element_only, e);
		goto out;
	}
	cfg = malloc(plen);
	if (!cfg) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	snprintf(cfg, plen, "%s/config.json", path);
	if ((ret = sf_config_load(&m->cfg, cfg, e)))
		goto out;
	if ((ret = sf_safetensors_open(&m->st, path, e)))
		goto out;
	/* gpt-oss's experts fused in its checkpoints, one tensor a matrix
	 * and expert as the engine binds them */
	if (m->cfg.arch == SF_ARCH_GPT_OSS &&
	    (ret = sf_gptoss_split_experts(&m->st, &m->converted, &m->cfg, e)))
		goto out;
	ret = bind_all(m, &m->st, 1, 0, e);
out:
	free(cfg);
	if (ret)
		sf_model_close(m);
	return ret;
}

int sf_model_open(struct sf_model *m, const char *path, struct sf_err *e)
{
	return open_any(m, path, 0, e);
}

int sf_model_open_elements(struct sf_model *m, const char *path, struct sf_err *e)
{
	return open_any(m, path, 1, e);
}

int sf_model_bind(struct sf_model *m, const struct sf_config *cfg, const struct sf_safetensors *st,
		  struct sf_err *e)
{
	int ret;

	memset(m, 0, sizeof(*m));
	m->cfg = *cfg;
	if ((ret = bind_all(m, st, 0, 0, e)))
		sf_model_close(m);
	return ret;
}

void sf_model_expert_tensor(const struct sf_config *c, int l, int x, int i, char *buf, size_t n)
{
	static const char *const mixtral[3] = { "w1", "w3", "w2" };
	static const char *const others[3] = { "gate_proj", "up_proj", "down_proj" };
	int mx = c->arch == SF_ARCH_MIXTRAL;

	snprintf(buf, n, "model.layers.%d.%s.experts.%d.%s.%s", l,
		 mx ? "block_sparse_moe" : "mlp", x, (mx ? mixtral : others)[i % 3],
		 i < 3 ? "weight" : "bias");
}

void sf_model_router_tensor(const struct sf_config *c, int l, int bias, char *buf, size_t n)
{
	snprintf(buf, n, "model.layers.%d.%s.%s", l,
		 c->arch == SF_ARCH_MIXTRAL ? "block_sparse_moe.gate"
		 : c->arch == SF_ARCH_GPT_OSS ? "mlp.router" : "mlp.gate", bias ? "bias" : "weight");
}

int sf_model_dense_ffn(const struct sf_model *m, const char *dir, struct sf_err *e)
{
	if (!m->cfg.n_experts)
		return 0;
	return sf_err_set(e, SF_EUNSUPPORTED, "%s: %s: a mixture of experts, which "
			  "sf-encode does not take yet (no codes of experts)", dir,
			  sf_arch_name(m->cfg.arch));
}

// --- fingerprints in artifacts

static int is_fingerprint(const char *s)
{
	return s && strlen(s) == SF_FINGERPRINT_LEN &&
	       strspn(s, "0123456789abcdef") == SF_FINGERPRINT_LEN;
}

int sf_fingerprint_parse(struct sf_fingerprint *f, const json_t *obj, const char *where,
			 struct sf_err *e)
{
	static const char *const keys[2] = { "fingerprint", "shape_fingerprint" };
	char *dst[2] = { f->weights, f->shape };

	for (int i = 0; i < 2; i++) {
		const char *s = json_string_value(json_object_get(obj, keys[i]));
		if (!is_fingerprint(s))
			return sf_err_set(e, SF_EFORMAT, "%s: \"%s\" missing or not %d lowercase hex "
					  "digits", where, keys[i], SF_FINGERPRINT_LEN);
		memcpy(dst[i], s, SF_FINGERPRINT_LEN + 1);
	}
	return 0;
}

int sf_fingerprint_put(json_t *obj, const struct sf_fingerprint *f)
{
	if (json_object_set_new(obj, "fingerprint", json_string(f->weights)) ||
	    json_object_set_new(obj, "shape_fingerprint", json_string(f->shape)))
		return -ENOMEM;
	return 0;
}

int sf_fingerprint_check(const struct sf_fingerprint *got, const char *path, const char *what,
			 const struct sf_fingerprint *want, const char *want_path,
			 struct sf_err *e)
{
	if (strcmp(got->shape, want->shape))
		return sf_err_set(e, SF_EMISMATCH, "%s: %s of another model than %s: shape "
				  "fingerprint %s, expected %s", path, what, want_path, got->shape,
				  want->shape);
	if (strcmp(got->weights, want->weights))
		return sf_err_set(e, SF_EMISMATCH, "%s: %s of a look-alike of %s (same shapes, other "
				  "weights): fingerprint %s, expected %s", path, what, want_path,
				  got->weights, want->weights);
	return 0;
}

int sf_fingerprint_version(const char *where, const char *what, long long found, int expected,
			   struct sf_err *e)
{
	return sf_err_set(e, SF_EUNSUPPORTED, "%s: %s version %lld, expected %d%s", where, what,
			  found, expected, found < expected ? ": made before fingerprints covered "
			  "the weights; make it again" : "");
}
