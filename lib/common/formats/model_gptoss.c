/* gpt-oss's experts as the engine binds a mixture's: transformers' fused
 * GptOssExperts tensors (gate_up_proj [experts, dim, 2 * hidden] with gate
 * and up in alternate columns, down_proj [experts, hidden, dim], both
 * input-major, and their biases), or the released checkpoints' MXFP4
 * _blocks and _scales of them (output-major), become each expert's
 * gate, up and down in Linear layout (out, in), MXFP4 kept as MXFP4 rows,
 * and its three biases, named as sf_model_expert_tensor names them. See
 * model_gptoss.h and sf-formats(5), MXFP4. */
#include "formats/model_gptoss.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/quant.h"
#include "formats/model.h"

/* The fused tensors of one layer: gate_up and down, each as a float
 * tensor or MXFP4 blocks and scales, and the two biases. */
enum { GATE_UP, DOWN, NFUSED };

struct fused {
	const struct sf_tensor *w[NFUSED];	/* float, or NULL when MXFP4 */
	const struct sf_tensor *blocks[NFUSED], *scales[NFUSED];
	const struct sf_tensor *bias[NFUSED];
};

#define MXFP4_BLOCK 32		/* values a scale covers: 16 bytes of two codes */

/* Tensor PREFIX+SUFFIX of shape want (ndim dimensions) and, when float,
 * an element dtype, else of U8; *out NULL when absent and optional. */
static int find(const struct sf_safetensors *st, const struct sf_config *c, const char *prefix,
		const char *suffix, int ndim, const uint64_t *want, int u8, int optional,
		const struct sf_tensor **out, struct sf_err *e)
{
	char name[SF_TENSOR_NAME_MAX], got[160], exp[160];
	const struct sf_tensor *t;

	snprintf(name, sizeof(name), "%s%s", prefix, suffix);
	*out = t = sf_safetensors_find(st, name);
	if (!t)
		return optional ? 0 : sf_err_set(e, SF_EMISMATCH, "%s: tensor '%s': missing",
						 sf_safetensors_source(st), name);
	if (t->ndim != ndim || memcmp(t->shape, want, (size_t)ndim * sizeof(*want)))
		return sf_err_set(e, SF_EMISMATCH, "%s: tensor '%s': shape %s, expected %s "
				  "(num_local_experts %d)", st->paths[t->file], name,
				  sf_shape_str(got, sizeof(got), t->ndim, t->shape),
				  sf_shape_str(exp, sizeof(exp), ndim, want), c->n_experts);
	if ((t->dtype == SF_DTYPE_U8) != u8)
		return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': dtype %s, expected %s",
				  st->paths[t->file], name, sf_dtype_name(t->dtype),
				  u8 ? "U8" : "F32, F16 or BF16");
	return 0;
}

/* Layer l's fused tensors, each checked against the config: a float
 * gate_up_proj / down_proj, else their _blocks and _scales. */
static int find_layer(const struct sf_safetensors *st, const struct sf_config *c, int l,
		      struct fused *f, struct sf_err *e)
{
	uint64_t n = (uint64_t)c->n_experts, dim = (uint64_t)c->dim, hid = (uint64_t)c->hidden_dim;
	/* float shapes input-major; MXFP4's output-major in blocks of 32 */
	const uint64_t w[NFUSED][3] = { { n, dim, 2 * hid }, { n, hid, dim } };
	const uint64_t out[NFUSED] = { 2 * hid, dim }, in[NFUSED] = { dim, hid };
	const uint64_t bias[NFUSED][2] = { { n, 2 * hid }, { n, dim } };
	static const char *const names[NFUSED] = { "gate_up_proj", "down_proj" };
	char p[96], s[64];
	int ret;

	memset(f, 0, sizeof(*f));
	snprintf(p, sizeof(p), "model.layers.%d.mlp.experts.", l);
	for (int i = 0; i < NFUSED; i++) {
		uint64_t blocks[4] = { n, out[i], in[i] / MXFP4_BLOCK, MXFP4_BLOCK / 2 };

		snprintf(s, sizeof(s), "%s_blocks", names[i]);
		if ((ret = find(st, c, p, s, 4, blocks, 1, 1, &f->blocks[i], e)))
			return ret;
		if (f->blocks[i] && in[i] % MXFP4_BLOCK)
			return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s%s': MXFP4 rows of %llu, "
					  "expected a multiple of %d", st->paths[f->blocks[i]->file],
					  p, s, (unsigned long long)in[i], MXFP4_BLOCK);
		if (f->blocks[i] && in[i] > SF_MXFP4_COLS_MAX)
			return sf_err_set(e, SF_EUNSUPPORTED, "%s: tensor '%s%s': MXFP4 rows of "
					  "%llu, more than the %d the kernels take",
					  st->paths[f->blocks[i]->file], p, s,
					  (unsigned long long)in[i], SF_MXFP4_COLS_MAX);
		snprintf(s, sizeof(s), "%s_scales", names[i]);
		if (f->blocks[i] && (ret = find(st, c, p, s, 3, blocks, 1, 0, &f->scales[i], e)))
			return ret;
		if (!f->blocks[i] && (ret = find(st, c, p, names[i], 3, w[i], 0, 0, &f->w[i], e)))
			return ret;
		snprintf(s, sizeof(s), "%s_bias", names[i]);
		if ((ret = find(st, c, p, s, 2, bias[i], 0, 0, &f->bias[i], e)))
			return ret;
	}
	return 0;
}

/* Column col of a row-major matrix src (in, out) of elements of es
 * bytes into dst (in): of an input-major matrix, a row of the Linear
 * layout. */
static void gather_row(uint8_t *dst, const uint8_t *src, size_t es, uint64_t in, uint64_t out,
		       uint64_t col)
{
	for (uint64_t k = 0; k < in; k++)
		memcpy(dst + k * es, src + (k * out + col) * es, es);
}

/* Output row `row` of an MXFP4 matrix (rows of in / 32 blocks of 16
 * bytes and one e8m0 scale each; byte j of a block holds value 2j in its
 * low nibble, 2j + 1 in its high one) as an MXFP4 row (base/quant.h:
 * the scale bytes, then each block's byte j holding values j and
 * j + 16). 0, or -1 for a scale of 255 (not a number) or a weight past
 * f32's range (scale 254 with a code of 2 or more). */
static int convert_row(uint8_t *dst, const uint8_t *blocks, const uint8_t *scales, uint64_t row,
		       uint64_t in)
{
	uint64_t nb = in / MXFP4_BLOCK;
	uint8_t *codes = dst + nb;

	memset(codes, 0, nb * (MXFP4_BLOCK / 2));
	for (uint64_t b = 0; b < nb; b++) {
		const uint8_t *q = blocks + (row * nb + b) * (MXFP4_BLOCK / 2);
		uint8_t ex = scales[row * nb + b];
		dst[b] = ex;
		for (int j = 0; j < MXFP4_BLOCK; j++) {
			int c = (q[j / 2] >> (j % 2 * 4)) & 15;
			if (!sf_mxfp4_finite(ex, c))
				return -1;
			codes[b * (MXFP4_BLOCK / 2) + (uint64_t)j % 16] |= (uint8_t)(c << (j / 16 * 4));
		}
	}
	return 0;
}

/* Expert x's matrix i (0 gate, 1 up, 2 down) in Linear layout into dst:
 * rows 2r (gate) and 2r + 1 (up) of gate_up's output, down's rows. */
static int split_matrix(uint8_t *dst, const struct fused *f, const struct sf_config *c, int x,
			int i)
{
	int fi = i == 2 ? DOWN : GATE_UP;
	uint64_t rows = i == 2 ? (uint64_t)c->dim : (uint64_t)c->hidden_dim;
	uint64_t in = i == 2 ? (uint64_t)c->hidden_dim : (uint64_t)c->dim;
	uint64_t out = i == 2 ? rows : 2 * rows;

	for (uint64_t r = 0; r < rows; r++) {
		uint64_t col = i == 2 ? r : 2 * r + (uint64_t)i;
		if (f->w[fi]) {
			size_t es = sf_dtype_size(f->w[fi]->dtype);
			gather_row(dst + r * in * es, (const uint8_t *)f->w[fi]->data +
				   (uint64_t)x * in * out * es, es, in, out, col);
		} else if (convert_row(dst + r * sf_dtype_col_bytes(SF_DTYPE_MXFP4, in),
				       (const uint8_t *)f->blocks[fi]->data + (uint64_t)x * out * in / 2,
				       (const uint8_t *)f->scales[fi]->data +
				       (uint64_t)x * out * (in / MXFP4_BLOCK), col, in)) {
			return -1;
		}
	}
	return 0;
}

/* The tensor for expert x's piece i of layer l: a matrix (0-2) converted
 * at *at, gate's and up's bias (3, 4) gathered there, down's (5) in
 * place. */
static int split_one(struct sf_tensor *t, uint8_t **at, const struct sf_safetensors *st,
		     const struct fused *f, const struct sf_config *c, int l, int x, int i,
		     struct sf_err *e)
{
	int fi = i % 3 == 2 ? DOWN : GATE_UP;
	const struct sf_tensor *src = i >= 3 ? f->bias[fi] : f->w[fi] ? f->w[fi] : f->blocks[fi];
	uint64_t rows = i % 3 == 2 ? (uint64_t)c->dim : (uint64_t)c->hidden_dim;
	uint64_t cols = i == 2 ? (uint64_t)c->hidden_dim : (uint64_t)c->dim;
	enum sf_dtype dt = f->w[fi] || i >= 3 ? src->dtype : SF_DTYPE_MXFP4;
	size_t es = sf_dtype_size(dt);

	memset(t, 0, sizeof(*t));
	sf_model_expert_tensor(c, l, x, i, t->name, sizeof(t->name));
	t->dtype = t->source_dtype = dt;
	t->ndim = i >= 3 ? 1 : 2;
	t->shape[0] = rows;
	t->shape[1] = i >= 3 ? 0 : cols;
	t->nbytes = dt == SF_DTYPE_MXFP4 ? rows * sf_dtype_col_bytes(dt, cols)
					 : rows * (i >= 3 ? 1 : cols) * es;
	t->file = src->file;
	if (i == 5) {
		t->data = (const uint8_t *)src->data + (uint64_t)x * rows * es;
		return 0;
	}
	t->data = *at;
	if (i >= 3)	/* gate's the even columns, up's the odd ones */
		gather_row(*at, (const uint8_t *)src->data + (uint64_t)x * 2 * rows * es, es, rows,
			   2, (uint64_t)i - 3);
	else if (split_matrix(*at, f, c, x, i))
		return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': expert %d: an MXFP4 scale of "
				  "255 (not a number), or of 254 with a weight past f32's range",
				  st->paths[src->file], src->name, x);
	*at += (t->nbytes + 63) / 64 * 64;
	return 0;
}

int sf_gptoss_split_experts(struct sf_safetensors *st, void **converted,
			    const struct sf_config *c, struct sf_err *e)
{
	int nl = c->n_layers, nx = c->n_experts;
	struct fused *f = calloc((size_t)nl, sizeof(*f));
	struct sf_tensor *all = NULL;
	uint64_t total = 0;
	uint8_t *arena = NULL, *at;
	size_t n = 0, nfused = 0;
	int ret;

	*converted = NULL;
	if (!f)
		return sf_err_set(e, -ENOMEM, "%s: out of memory", sf_safetensors_source(st));
	for (int l = 0; l < nl; l++) {
		if ((ret = find_layer(st, c, l, &f[l], e)))
			goto fail;
		for (int i = 0; i < NFUSED; i++) {
			nfused += f[l].w[i] ? 2 : 3;
			/* the three matrices and gate's and up's biases, each
			 * on 64 bytes: < 2^62 by the config's limits */
			uint64_t in = i == DOWN ? (uint64_t)c->hidden_dim : (uint64_t)c->dim;
			uint64_t rows = i == DOWN ? (uint64_t)c->dim : (uint64_t)c->hidden_dim;
			uint64_t mat = f[l].w[i] ? sf_dtype_size(f[l].w[i]->dtype) * in * rows
						 : sf_dtype_col_bytes(SF_DTYPE_MXFP4, in) * rows;
			total += (uint64_t)nx * ((mat + 63) / 64 * 64 * (i == GATE_UP ? 2 : 1));
		}
		total += 2 * (uint64_t)nx * ((sf_dtype_size(f[l].bias[GATE_UP]->dtype) *
					      (uint64_t)c->hidden_dim + 63) / 64 * 64);
	}
	n = st->ntensors - nfused + (size_t)nl * (size_t)nx * 6;
	all = calloc(n, sizeof(*all));
	arena = total ? aligned_alloc(64, (size_t)total) : NULL;
	if (!all || (total && !arena)) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory splitting %llu bytes of experts",
				 sf_safetensors_source(st), (unsigned long long)total);
		goto fail;
	}
	/* every tensor but the fused ones, then each expert's six */
	n = 0;
	for (size_t k = 0; k < st->ntensors; k++) {
		const struct sf_tensor *t = &st->tensors[k];
		int fused = 0;
		for (int l = 0; l < nl && !fused; l++)
			for (int i = 0; i < NFUSED; i++)
				fused |= t == f[l].w[i] || t == f[l].blocks[i] ||
					 t == f[l].scales[i] || t == f[l].bias[i];
		if (!fused)
			all[n++] = *t;
	}
	at = arena;
	for (int l = 0; l < nl; l++)
		for (int x = 0; x < nx; x++)
			for (int i = 0; i < 6; i++)
				if ((ret = split_one(&all[n++], &at, st, &f[l], c, l, x, i, e)))
					goto fail;
	/* the fused bytes are not read again: only down's bias stays */
	for (int l = 0; l < nl; l++)
		for (int i = 0; i < NFUSED; i++) {
			const struct sf_tensor *t = f[l].w[i] ? f[l].w[i] : f[l].blocks[i];
			sf_safetensors_release(st, t->data, (size_t)t->nbytes);
		}
	free(st->tensors);
	st->tensors = all;
	st->ntensors = n;
	sf_safetensors_sort(st);
	*converted = arena;
	free(f);
	return 0;
fail:
	free(f);
	free(all);
	free(arena);
	return ret;
}
