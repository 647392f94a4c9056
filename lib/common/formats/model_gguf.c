/* A GGUF file as the tensor set of a model (sf_model_open of a .gguf):
 * llama.cpp's tensor names turned into Hugging Face's, each tensor in the
 * form the engine computes with. F32, F16 and BF16 stay in the mapping;
 * Q8_0 and Q4_0 rows are our Q8 and Q4 rows (base/quant.h) with the
 * same codes and scales, only the scales moved to the front of each row,
 * which the row products (engine/kernels_qrows.h) compute on as llama.cpp
 * does, the input rounded to int8 per block; MXFP4 rows (gpt-oss's
 * experts) our MXFP4 rows, the same codes; the other types, which no
 * kernel of ours reads yet, are requantized to Q8 rows (their at most
 * 6.6 bits a weight rounded to 8 per block of 32: 8.5 bits a weight in
 * RAM, near 1/254 of each block's largest weight added). With
 * element_only every quantized matrix but MXFP4 experts is widened to
 * F16 (MXFP4 to BF16, exact), for the commands that read weights by
 * column. */
#include "formats/model_gguf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/pool.h"
#include "base/quant.h"
#include "formats/model.h"

/* llama.cpp's name of a layer tensor, after "blk.N.", and Hugging
 * Face's, after "model.layers.N.". */
static const char *const layer_names[][2] = {
	{ "attn_norm.weight", "input_layernorm.weight" },
	{ "attn_q.weight", "self_attn.q_proj.weight" },
	{ "attn_k.weight", "self_attn.k_proj.weight" },
	{ "attn_v.weight", "self_attn.v_proj.weight" },
	{ "attn_qkv.weight", "self_attn.qkv_proj.weight" },	/* Phi-3's q, k and v rows */
	{ "attn_output.weight", "self_attn.o_proj.weight" },
	{ "attn_q.bias", "self_attn.q_proj.bias" },
	{ "attn_k.bias", "self_attn.k_proj.bias" },
	{ "attn_v.bias", "self_attn.v_proj.bias" },
	{ "attn_q_norm.weight", "self_attn.q_norm.weight" },
	{ "attn_k_norm.weight", "self_attn.k_norm.weight" },
	{ "ffn_norm.weight", "post_attention_layernorm.weight" },
	{ "post_attention_norm.weight", "post_attention_layernorm.weight" },	/* gpt-oss */
	{ "attn_output.bias", "self_attn.o_proj.bias" },
	{ "attn_sinks.weight", "self_attn.sinks" },
	{ "ffn_gate.weight", "mlp.gate_proj.weight" },
	{ "ffn_up.weight", "mlp.up_proj.weight" },
	{ "ffn_down.weight", "mlp.down_proj.weight" },
};
static const char *const model_names[][2] = {
	{ "token_embd.weight", "model.embed_tokens.weight" },
	{ "output_norm.weight", "model.norm.weight" },
	{ "output.weight", "lm_head.weight" },
};

/* A mixture's tensors in llama.cpp's names, after "blk.N.": its router
 * (and gpt-oss's bias of it), Qwen2-MoE's shared expert and the gate of
 * it, and the experts' three matrices, stacked (ffn_gate_exps: [n_experts,
 * rows, cols]; gpt-oss's biases ffn_gate_exps.bias [n_experts, rows]) or,
 * in files older than llama.cpp's stacking, one tensor an expert
 * (ffn_gate.E). */
static const char *const expert_mats[3] = { "gate", "up", "down" };

/* Hugging Face's name of GGUF tensor NAME (expert x of a stacked one, else
 * -1) into hf, or -1 when llama.cpp names no tensor of the architectures
 * we compute so. */
static int hf_name(const char *name, const struct sf_config *cfg, int x, char *hf, size_t cap)
{
	char gguf[64], *out = hf;
	size_t out_cap = cap;
	int l, used = 0, n;

	for (size_t i = 0; x < 0 && i < sizeof(model_names) / sizeof(model_names[0]); i++)
		if (!strcmp(name, model_names[i][0]))
			return snprintf(hf, cap, "%s", model_names[i][1]) < (int)cap ? 0 : -1;
	if (sscanf(name, "blk.%d.%n", &l, &used) != 1 || !used || l < 0 || l >= cfg->n_layers)
		return -1;
	name += used;
	n = snprintf(hf, cap, "model.layers.%d.", l);
	hf += n;
	cap -= (size_t)n;
	if (cfg->arch == SF_ARCH_PHI3 && !strcmp(name, "ffn_up.weight"))	/* gate rows, then up */
		return snprintf(hf, cap, "mlp.gate_up_proj.weight") < (int)cap ? 0 : -1;
	/* Gemma's sandwich: ffn_norm is its pre_feedforward_layernorm */
	if (cfg->post_norms && !strcmp(name, "ffn_norm.weight"))
		return snprintf(hf, cap, "pre_feedforward_layernorm.weight") < (int)cap ? 0 : -1;
	if (cfg->post_norms && !strcmp(name, "post_ffw_norm.weight"))
		return snprintf(hf, cap, "post_feedforward_layernorm.weight") < (int)cap ? 0 : -1;
	for (size_t i = 0; x < 0 && i < sizeof(layer_names) / sizeof(layer_names[0]); i++)
		if (!strcmp(name, layer_names[i][0]))
			return snprintf(hf, cap, "%s", layer_names[i][1]) < (int)cap ? 0 : -1;
	if (!cfg->n_experts)
		return -1;
	/* the experts' matrices (i 0-2) and gpt-oss's biases of them (3-5) */
	for (int i = 0; i < 6; i++) {
		int e = -1;
		snprintf(gguf, sizeof(gguf), "ffn_%s_exps.%s", expert_mats[i % 3],
			 i < 3 ? "weight" : "bias");
		if (x >= 0 && !strcmp(name, gguf))
			e = x;
		used = 0;
		snprintf(gguf, sizeof(gguf), "ffn_%s.%%d.weight%%n", expert_mats[i % 3]);
		if (x < 0 && i < 3 && sscanf(name, gguf, &e, &used) == 1 && (!used || name[used]))
			e = -1;
		if (e >= 0 && e < cfg->n_experts) {
			sf_model_expert_tensor(cfg, l, e, i, out, out_cap);
			return 0;
		}
		snprintf(gguf, sizeof(gguf), "ffn_%s_shexp.weight", expert_mats[i % 3]);
		if (x < 0 && i < 3 && cfg->shared_hidden_dim && !strcmp(name, gguf))
			return snprintf(hf, cap, "mlp.shared_expert.%s_proj.weight", expert_mats[i % 3]) <
			       (int)cap ? 0 : -1;
	}
	for (int bias = 0; x < 0 && bias < 2; bias++)
		if (!strcmp(name, bias ? "ffn_gate_inp.bias" : "ffn_gate_inp.weight")) {
			sf_model_router_tensor(cfg, l, bias, out, out_cap);
			return 0;
		}
	if (x < 0 && cfg->shared_hidden_dim && !strcmp(name, "ffn_gate_inp_shexp.weight"))
		return snprintf(hf, cap, "mlp.shared_expert_gate.weight") < (int)cap ? 0 : -1;
	return -1;
}

/* A tensor of every expert: [n_experts, rows, cols] matrices, or gpt-oss's
 * biases [n_experts, rows]. */
static int stacked(const struct sf_gguf_tensor *t)
{
	size_t n = strlen(t->name);

	return t->n_dims == 3 || (t->n_dims == 2 && n > 10 && !strcmp(t->name + n - 10, "_exps.bias"));
}

/* engine_dtype's choice before the tiles. */
static enum sf_dtype block_dtype(const struct sf_gguf_tensor *t, int element_only)
{
	switch (t->type) {
	case SF_GGML_F32: return SF_DTYPE_F32;
	case SF_GGML_F16: return SF_DTYPE_F16;
	case SF_GGML_BF16: return SF_DTYPE_BF16;
	default: break;
	}
	if (t->n_dims == 1)
		return SF_DTYPE_F32;
	/* experts are read whole, never by column: kept; BF16 holds every
	 * MXFP4 weight */
	if (t->type == SF_GGML_MXFP4)
		return !element_only || strstr(t->name, "_exps.") ? SF_DTYPE_MXFP4 : SF_DTYPE_BF16;
	if (element_only)
		return SF_DTYPE_F16;
	return t->type == SF_GGML_Q4_0 ? SF_DTYPE_Q4 : SF_DTYPE_Q8;
}

/* The rows a matrix is bound in stretches of: Phi-3's fused attn_qkv
 * holds q's, k's and v's rows, its ffn_up gate's and up's (model.c binds
 * each a slice); every other tensor one stretch. */
static uint64_t stretch_rows(const struct sf_gguf_tensor *t, const struct sf_config *cfg)
{
	size_t n = strlen(t->name);
	uint64_t kv = (uint64_t)cfg->n_kv_heads * (uint64_t)cfg->head_dim;

	if (cfg->arch == SF_ARCH_PHI3 && n > 16 && !strcmp(t->name + n - 16, ".attn_qkv.weight"))
		return kv;	/* q's rows are n_heads / n_kv_heads times kv */
	if (cfg->arch == SF_ARCH_PHI3 && n > 14 && !strcmp(t->name + n - 14, ".ffn_up.weight"))
		return (uint64_t)cfg->hidden_dim;
	return t->ne[1];
}

/* What a tensor becomes: float types as they are, a vector of blocks
 * F32 (norms and biases are read by element); for the engine, other
 * matrices Q4 (from Q4_0) or Q8, in tiles when their rows (each stretch
 * of them) allow, but the embedding, whose rows are looked up one by one. */
static enum sf_dtype engine_dtype(const struct sf_gguf_tensor *t, const struct sf_config *cfg,
				  int element_only)
{
	enum sf_dtype dt = block_dtype(t, element_only);

	if (element_only || t->ne[1] % SF_QTILE || stretch_rows(t, cfg) % SF_QTILE ||
	    !strcmp(t->name, "token_embd.weight"))
		return dt;
	return sf_dtype_tiled(dt);
}

static int in_place(const struct sf_gguf_tensor *t)
{
	return t->type == SF_GGML_F32 || t->type == SF_GGML_F16 || t->type == SF_GGML_BF16;
}

/* One row of cols elements of a Q8_0, Q4_0 or MXFP4 tensor as our row:
 * the blocks' scales first (f16, MXFP4's e8m0 byte), then their codes,
 * the same bytes. 0, or -ERANGE for an MXFP4 scale of 255 or a weight
 * past f32's range. */
static int repack_row(uint8_t *dst, const uint8_t *src, enum sf_ggml_type type, size_t cols)
{
	size_t nb = cols / SF_GGML_QK, bb = sf_ggml_block_bytes(type);
	size_t sb = type == SF_GGML_MXFP4 ? 1 : 2, cb = bb - sb;

	for (size_t b = 0; b < nb; b++) {
		const uint8_t *blk = src + b * bb;
		for (size_t i = 0; type == SF_GGML_MXFP4 && i < SF_GGML_QK; i++)
			if (!sf_mxfp4_finite(blk[0], sf_mxfp4_code(blk + 1, i)))
				return -ERANGE;
		memcpy(dst + sb * b, blk, sb);
		memcpy(dst + sb * nb + b * cb, blk + sb, cb);
	}
	return 0;
}

/* Rows [r0, r1) of tensor t (ne[1] rows of ne[0] elements), converted
 * into dst (row r0's place) in dt, not tiled, sf_dtype_col_bytes(dt, ne[0])
 * bytes a row; row is room for ne[0] floats. 0, or -ERANGE for a row q8
 * cannot hold (sf_quant_column). */
static int convert(uint8_t *dst, const struct sf_gguf_tensor *t, enum sf_dtype dt, float *row,
		   size_t r0, size_t r1)
{
	size_t cols = (size_t)t->ne[0];
	size_t src_row = (size_t)(t->nbytes / t->ne[1]), dst_row = (size_t)sf_dtype_col_bytes(dt, cols);
	const uint8_t *src = (const uint8_t *)t->data + r0 * src_row;

	for (size_t r = r0; r < r1; r++, src += src_row, dst += dst_row) {
		if ((t->type == SF_GGML_Q8_0 && dt == SF_DTYPE_Q8) ||
		    (t->type == SF_GGML_Q4_0 && dt == SF_DTYPE_Q4) ||
		    (t->type == SF_GGML_MXFP4 && dt == SF_DTYPE_MXFP4)) {
			if (repack_row(dst, src, t->type, cols))
				return -ERANGE;
			continue;
		}
		sf_ggml_dequant_row(t->type, src, row, cols);
		if (dt == SF_DTYPE_Q8) {
			/* at most 6.6 bits a weight rounded to 8 per block of 32 */
			if (sf_quant_column(dst, dt, row, cols, SF_QUANT_RTN))
				return -ERANGE;
			continue;
		}
		if (dt == SF_DTYPE_F32) {
			memcpy(dst, row, cols * sizeof(*row));
			continue;
		}
		for (size_t i = 0; i < cols; i++) {
			uint16_t h = dt == SF_DTYPE_BF16 ? sf_f32_to_bf16(row[i]) : sf_f32_to_f16(row[i]);
			memcpy(dst + 2 * i, &h, 2);
		}
	}
	return 0;
}

#define SF_GGUF_CONVERT_THREADS 64

/* One tensor converted by the pool's threads, each on its rows. */
struct conversion {
	uint8_t *dst;
	const struct sf_gguf_tensor *t;
	enum sf_dtype dt;
	float *rows;		/* (nth * cols) */
	uint8_t *tiles;		/* (nth * tile_bytes) a tile's rows before they interleave */
	size_t cols, tile_bytes;
	int ret[SF_GGUF_CONVERT_THREADS];
};

static void convert_worker(void *arg, int ith, int nth)
{
	struct conversion *c = arg;
	enum sf_dtype bt = sf_dtype_untiled(c->dt);
	size_t r0, r1, rb = (size_t)sf_dtype_col_bytes(bt, (size_t)c->t->ne[0]);
	float *row = c->rows + (size_t)ith * c->cols;

	if (bt == c->dt) {
		sf_pool_split((size_t)c->t->ne[1], 1, ith, nth, &r0, &r1);
		c->ret[ith] = convert(c->dst + r0 * rb, c->t, bt, row, r0, r1);
		return;
	}
	uint8_t *scratch = c->tiles + (size_t)ith * c->tile_bytes;
	int ret = 0;
	sf_pool_split((size_t)c->t->ne[1], SF_QTILE, ith, nth, &r0, &r1);
	for (size_t r = r0; r < r1 && !ret; r += SF_QTILE)
		if (!(ret = convert(scratch, c->t, bt, row, r, r + SF_QTILE)))
			sf_qtile_pack(c->dst + r * rb, scratch, SF_QTILE, bt, (size_t)c->t->ne[0]);
	c->ret[ith] = ret;
}

int sf_gguf_model_tensors(struct sf_safetensors *st, void **converted, struct sf_gguf *g,
			  const struct sf_config *cfg, int element_only, struct sf_err *e)
{
	uint64_t total = 0, cols_max = 1;
	uint8_t *arena = NULL, *at;
	const struct sf_gguf_tensor **src = NULL;	/* (st->ntensors) each one's own */
	struct sf_gguf_tensor *slices = NULL;	/* the stacked experts' one by one */
	struct sf_gguf_tensor *slices_all = NULL;
	int *xs = NULL;				/* (st->ntensors) each one's expert */
	size_t nall = 0;
	struct conversion c = { 0 };
	struct sf_pool *pool = NULL;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int nth = ncpu < 1 ? 1 : ncpu > SF_GGUF_CONVERT_THREADS ? SF_GGUF_CONVERT_THREADS : (int)ncpu;
	int ret;

	memset(st, 0, sizeof(*st));
	*converted = NULL;
	/* a stacked expert tensor [n_experts, rows, cols] is n_experts
	 * matrices, each a stretch of its bytes */
	for (size_t i = 0; i < g->ntensors; i++)
		nall += stacked(&g->tensors[i]) ? (size_t)g->tensors[i].ne[g->tensors[i].n_dims - 1]
						: 1;
	st->tensors = calloc(nall ? nall : 1, sizeof(*st->tensors));
	st->maps = calloc(1, sizeof(*st->maps));
	st->map_sizes = calloc(1, sizeof(*st->map_sizes));
	st->paths = calloc(1, sizeof(*st->paths));
	src = calloc(nall ? nall : 1, sizeof(*src));
	slices = slices_all = calloc(nall ? nall : 1, sizeof(*slices));
	xs = calloc(nall ? nall : 1, sizeof(*xs));
	if (!st->tensors || !st->maps || !st->map_sizes || !st->paths || !src || !slices || !xs ||
	    !(st->paths[0] = strdup(g->path))) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory", g->path);
		goto fail;
	}
	st->nfiles = 1;
	/* the matrices: a stacked one's experts in turn, each a view of its
	 * stretch of the bytes (x: its expert; -1 for the rest);
	 * the RoPE factors are the config's (sf_config_from_gguf) */
	for (size_t i = 0; i < g->ntensors; i++) {
		const struct sf_gguf_tensor *gt = &g->tensors[i];
		if (!strcmp(gt->name, SF_GGUF_ROPE_FREQS) ||
		    !strcmp(gt->name, SF_GGUF_ROPE_FACTORS_SHORT) ||
		    !strcmp(gt->name, SF_GGUF_ROPE_FACTORS_LONG))
			continue;
		int last = gt->n_dims - 1;
		if (!stacked(gt)) {
			xs[st->ntensors] = -1;
			src[st->ntensors++] = gt;
			continue;
		}
		if (gt->ne[last] != (uint64_t)cfg->n_experts) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': %llu experts, expected "
					 "'expert_count' %d", g->path, gt->name,
					 (unsigned long long)gt->ne[last], cfg->n_experts);
			goto fail;
		}
		for (int x = 0; x < cfg->n_experts; x++) {
			struct sf_gguf_tensor *sl = &slices[x];
			*sl = *gt;
			sl->n_dims = last;
			sl->ne[last] = 1;
			sl->nbytes = gt->nbytes / gt->ne[last];
			sl->data = (const uint8_t *)gt->data + (size_t)x * sl->nbytes;
			xs[st->ntensors] = x;
			src[st->ntensors++] = sl;
		}
		slices += cfg->n_experts;
	}
	/* names, shapes and what each matrix becomes, before any byte moves */
	for (size_t k = 0; k < st->ntensors; k++) {
		const struct sf_gguf_tensor *gt = src[k];
		struct sf_tensor *t = &st->tensors[k];
		enum sf_dtype dt = engine_dtype(gt, cfg, element_only);

		if (hf_name(gt->name, cfg, xs[k], t->name, sizeof(t->name))) {
			ret = sf_err_set(e, SF_EUNSUPPORTED, "%s: tensor '%s': not one %s computes",
					 g->path, gt->name, sf_arch_name(cfg->arch));
			goto fail;
		}
		if (gt->n_dims > 2 || !gt->ne[0] || !gt->ne[1]) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': %d dimensions of [%llu, %llu], "
					 "expected 1 or 2 of at least 1", g->path, gt->name, gt->n_dims,
					 (unsigned long long)gt->ne[0], (unsigned long long)gt->ne[1]);
			goto fail;
		}
		if (dt == SF_DTYPE_MXFP4 && gt->ne[0] > SF_MXFP4_COLS_MAX) {
			ret = sf_err_set(e, SF_EUNSUPPORTED, "%s: tensor '%s': MXFP4 rows of %llu, "
					 "more than the %d the kernels take", g->path, gt->name,
					 (unsigned long long)gt->ne[0], SF_MXFP4_COLS_MAX);
			goto fail;
		}
		/* ggml's ne[0] is the contiguous one: Hugging Face's last. The
		 * shared expert's gate is a vector in llama.cpp, [1, dim] in
		 * Hugging Face */
		t->ndim = gt->n_dims;
		t->shape[0] = gt->n_dims == 2 ? gt->ne[1] : gt->ne[0];
		t->shape[1] = gt->n_dims == 2 ? gt->ne[0] : 0;
		if (strstr(gt->name, ".ffn_gate_inp_shexp.")) {
			t->ndim = 2;
			t->shape[0] = gt->ne[1];
			t->shape[1] = gt->ne[0];
		}
		/* the shape fingerprint names what every open of the file
		 * agrees on, and an image packed from it holds */
		t->dtype = dt;
		t->source_dtype = engine_dtype(gt, cfg, 1);
		t->file = 0;
		if (in_place(gt)) {
			t->data = gt->data;
			t->nbytes = gt->nbytes;
			continue;
		}
		t->nbytes = sf_dtype_col_bytes(dt, gt->ne[0]) * gt->ne[1];
		total += (t->nbytes + 63) / 64 * 64;
		if (gt->ne[0] > cols_max)
			cols_max = gt->ne[0];
	}
	c.cols = (size_t)cols_max;
	c.tile_bytes = SF_QTILE * (size_t)sf_dtype_col_bytes(SF_DTYPE_Q8, cols_max);
	if (total && (!(arena = aligned_alloc(64, (size_t)total)) ||
		      !(c.rows = malloc((size_t)nth * c.cols * sizeof(*c.rows))) ||
		      !(c.tiles = malloc((size_t)nth * c.tile_bytes)))) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory converting %llu bytes of tensors",
				 g->path, (unsigned long long)total);
		goto fail;
	}
	/* a pool of the machine's threads: a 7B Q4_K_M is minutes on one */
	if (total && (ret = sf_pool_create(&pool, nth))) {
		ret = sf_err_set(e, ret, "%s: %d threads to convert tensors: %s", g->path, nth,
				 strerror(-ret));
		goto fail;
	}
	at = arena;
	for (size_t k = 0; k < st->ntensors; k++) {
		struct sf_tensor *t = &st->tensors[k];
		if (t->data)
			continue;
		c.dst = at;
		c.t = src[k];
		c.dt = t->dtype;
		sf_pool_run(pool, convert_worker, &c);
		for (int x = 0; x < nth; x++)
			if (c.ret[x]) {
				ret = sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': weights not finite, "
						 "beyond what q8 blocks with an f16 scale hold, or an "
						 "MXFP4 scale of 255", g->path, src[k]->name);
				goto fail;
			}
		t->data = at;
		at += (t->nbytes + 63) / 64 * 64;
	}
	free(c.rows);
	free(c.tiles);
	free(src);
	free(slices_all);
	free(xs);
	sf_pool_destroy(pool);
	/* the mapping passes to st, whose release and close serve it; the
	 * converted tensors' file pages are not needed again */
	st->maps[0] = (void *)g->map;
	st->map_sizes[0] = g->map_size;
	g->map = NULL;
	for (size_t i = 0; i < g->ntensors; i++)
		if (!in_place(&g->tensors[i]))
			sf_safetensors_release(st, g->tensors[i].data, (size_t)g->tensors[i].nbytes);
	/* names differ as llama.cpp's do: the mapping is one to one */
	sf_safetensors_sort(st);
	*converted = arena;
	return 0;
fail:
	free(c.rows);
	free(c.tiles);
	free(src);
	free(slices_all);
	free(xs);
	sf_pool_destroy(pool);
	free(arena);
	sf_safetensors_close(st);
	return ret;
}
