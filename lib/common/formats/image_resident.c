/* The image's resident blob: the tensors sf-run holds in RAM (embedding,
 * norms, head, biases, resident groups), planned, written (the embedding's
 * and head's rows quantized on request), read back and bound to the
 * model. See formats/image_impl.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonfile.h"
#include "base/quant.h"
#include "formats/image_impl.h"

/* f32 rows converted at a time for the threads to quantize */
#define ROWS_CHUNK_BYTES (8u << 20)

static int is_block_dt(int dt)
{
	return dt >= 0 && sf_dtype_is_block((enum sf_dtype)dt);
}

/* A resident tensor, its rows quantized to dt when that is a block dtype
 * and they are whole blocks; else in its own dtype. */
static void add_tensor(struct plan *p, const char *name, const struct sf_weight *w, int ndim,
		       int dt)
{
	struct ptensor *t = &p->t[p->nt++];

	snprintf(t->name, sizeof(t->name), "%s", name);
	t->w = w;
	t->ndim = ndim;
	t->dt = is_block_dt(dt) && w->cols % SF_QBLOCK == 0 ? (enum sf_dtype)dt : w->dtype;
	t->len = w->rows * sf_dtype_col_bytes(t->dt, w->cols);
}

/* The resident tensors: everything that is not a flash group's matrix. */
void image_plan_tensors(struct plan *p)
{
	const struct sf_model *m = p->o->model;
	char n[80];

	const struct sf_image_pack_opts *o = p->o;

	add_tensor(p, "model.embed_tokens.weight", &m->embed, 2, o->embed_dtype);
	add_tensor(p, "model.norm.weight", &m->final_norm, 1, -1);
	if (!m->cfg.tie_embeddings)
		add_tensor(p, "lm_head.weight", &m->lm_head, 2, o->head_dtype);
	for (int l = 0; l < p->nl; l++) {
		const struct sf_layer_weights *L = &m->layers[l];
#define T(field, suffix, nd) do { \
		snprintf(n, sizeof(n), "model.layers.%d.%s", l, suffix); \
		add_tensor(p, n, &L->field, nd, -1); \
	} while (0)
		T(attn_norm, "input_layernorm.weight", 1);
		if (m->cfg.post_norms) {	/* Gemma 3's sandwich */
			T(post_attn_norm, "post_attention_layernorm.weight", 1);
			T(ffn_norm, "pre_feedforward_layernorm.weight", 1);
			T(post_ffn_norm, "post_feedforward_layernorm.weight", 1);
		} else {
			T(ffn_norm, "post_attention_layernorm.weight", 1);
		}
		if (m->cfg.qkv_bias) {
			T(bq, "self_attn.q_proj.bias", 1);
			T(bk, "self_attn.k_proj.bias", 1);
			T(bv, "self_attn.v_proj.bias", 1);
		}
		if (m->cfg.o_bias)
			T(bo, "self_attn.o_proj.bias", 1);
		if (m->cfg.attn_sinks)
			T(sinks, "self_attn.sinks", 1);
		if (m->cfg.qk_norm) {
			T(q_norm, "self_attn.q_norm.weight", 1);
			T(k_norm, "self_attn.k_norm.weight", 1);
		}
		for (int g = 0; g < SF_NGROUPS; g++) {
			struct pgroup *G = &p->g[l * SF_NGROUPS + g];
			if (G->resident)
				for (int i = 0; i < G->nmat; i++)
					add_tensor(p, G->mat[i].tensor, G->mat[i].w, 2, -1);
		}
		/* a mixture's router and shared expert run every token; gpt-oss's
		 * biases of the router and of each expert are resident beside
		 * the experts' records on flash */
		if (m->cfg.n_experts) {
			sf_model_router_tensor(&m->cfg, l, 0, n, sizeof(n));
			add_tensor(p, n, &L->router, 2, -1);
		}
		if (m->cfg.moe_bias) {
			sf_model_router_tensor(&m->cfg, l, 1, n, sizeof(n));
			add_tensor(p, n, &L->router_bias, 1, -1);
			for (int x = 0; x < m->cfg.n_experts; x++) {
				const struct sf_expert_weights *X = &L->experts[x];
				const struct sf_weight *b[3] = { &X->b_gate, &X->b_up, &X->b_down };
				for (int i = 0; i < 3; i++) {
					sf_model_expert_tensor(&m->cfg, l, x, 3 + i, n, sizeof(n));
					add_tensor(p, n, b[i], 1, -1);
				}
			}
		}
		if (m->cfg.shared_hidden_dim) {
			T(shared.w_gate, "mlp.shared_expert.gate_proj.weight", 2);
			T(shared.w_up, "mlp.shared_expert.up_proj.weight", 2);
			T(shared.w_down, "mlp.shared_expert.down_proj.weight", 2);
			T(shared_gate, "mlp.shared_expert_gate.weight", 2);
		}
#undef T
	}
	uint64_t off = 0;
	for (size_t i = 0; i < p->nt; i++) {
		p->t[i].off = off;
		off = align_up(off + p->t[i].len, SF_IMAGE_TENSOR_ALIGN);
	}
	image_add_region(p, SF_REGION_RESIDENT, -1, 0, off);
}

/* A resident tensor's rows quantized to its block dtype, one at a time. */
json_t *image_tensors_json(const struct plan *p)
{
	json_t *a = json_array();
	for (size_t i = 0; i < p->nt; i++) {
		const struct ptensor *t = &p->t[i];
		json_t *shape = json_array();
		json_array_append_new(shape, ju(t->w->rows));
		if (t->ndim == 2)
			json_array_append_new(shape, ju(t->w->cols));
		json_array_append_new(a, json_pack("{s:s, s:s, s:s, s:o, s:o, s:o}", "name", t->name,
						   "dtype", sf_dtype_name(t->dt), "source_dtype",
						   sf_dtype_name(t->w->dtype), "shape", shape,
						   "offset", ju(t->off), "length", ju(t->len)));
	}
	return a;
}

int image_write_rows_quantized(struct wr *w, const char *name, const struct sf_weight *src,
			       enum sf_dtype dt, const struct sf_image_pack_opts *o,
			       struct sf_err *e)
{
	enum sf_dtype bt = sf_dtype_untiled(dt);
	size_t cols = (size_t)src->cols, rb = (size_t)sf_dtype_col_bytes(bt, cols), bad;
	size_t chunk = (ROWS_CHUNK_BYTES / (cols * sizeof(float)) / SF_QTILE + 1) * SF_QTILE;
	float *f = malloc(chunk * cols * sizeof(float));
	uint8_t *q = malloc(chunk * rb), *t = bt != dt ? malloc(chunk * rb) : q;
	int ret = 0;

	if (!f || !q || !t)
		ret = sf_err_set(e, -ENOMEM, "%s: %s", name, sf_strerror(-ENOMEM));
	for (uint64_t r0 = 0; r0 < src->rows && !ret; r0 += chunk) {
		size_t n = src->rows - r0 < chunk ? (size_t)(src->rows - r0) : chunk;
		for (size_t i = 0; i < n; i++)
			sf_weight_row(f + i * cols, src, r0 + i);
		if (sf_quant_columns(q, bt, f, cols, cols, n, o->quant, o->pool, &bad)) {
			ret = sf_err_set(e, SF_ELIMIT, "%s: row %" PRIu64 ": a weight not finite or a "
					 "block's scale beyond the F16 range", name, r0 + bad);
			break;
		}
		if (t != q)
			sf_qtile_pack(t, q, n, bt, cols);
		ret = image_wr_put(w, t, n * rb, 1, e);
	}
	if (t != q)
		free(t);
	free(f);
	free(q);
	return ret;
}

static int tensor_addr_cmp(const void *a, const void *b)
{
	const uint8_t *x = ((const struct sf_tensor *)a)->data, *y = ((const struct sf_tensor *)b)->data;
	return x < y ? -1 : x > y;
}

int image_open_tensors(struct sf_image *img, size_t nflash, struct sf_err *e)
{
	const char *path = img->path;
	const struct sf_image_region *R = &img->regions[0];
	json_t *a = json_object_get(img->header, "tensors"), *t;
	size_t i;
	int ret;

	if (!json_is_array(a) || json_array_size(a) > ((size_t)1 << 20))
		return sf_err_set(e, SF_EFORMAT, "%s: header: \"tensors\" is not an array", path);
	size_t n = json_array_size(a);
	img->tensors.tensors = calloc(n + nflash + 1, sizeof(struct sf_tensor));
	if (!img->tensors.tensors)
		return sf_err_set(e, -ENOMEM, "%s: out of memory", path);
	json_array_foreach(a, i, t) {
		struct sf_tensor *T = &img->tensors.tensors[i];
		const char *name, *dt;
		json_t *shape = json_object_get(t, "shape");
		char where[SF_ERR_MAX];
		uint64_t off, len, elems = 1;

		snprintf(where, sizeof(where), "%s: header: tensors[%zu]", path, i);
		json_t *sdt = json_object_get(t, "source_dtype");
		if (sf_json_str(t, "name", &name, where, e) || strlen(name) >= SF_TENSOR_NAME_MAX ||
		    sf_json_str(t, "dtype", &dt, where, e) || sf_dtype_parse_any(dt, &T->dtype) ||
		    !json_is_array(shape) || json_array_size(shape) < 1 || json_array_size(shape) > 2)
			return sf_err_set(e, SF_EFORMAT, "%s: name, dtype or shape missing or malformed",
					  where);
		/* a quantized matrix names the model's dtype, which the shape
		 * fingerprint hashes; an element dtype is the model's */
		T->source_dtype = T->dtype;
		if ((sdt || sf_dtype_is_block(T->dtype)) &&
		    (!json_is_string(sdt) || sf_dtype_parse(json_string_value(sdt), &T->source_dtype) ||
		     (!sf_dtype_is_block(T->dtype) && T->source_dtype != T->dtype) ||
		     (sf_dtype_is_block(T->dtype) && json_array_size(shape) != 2)))
			return sf_err_set(e, SF_EFORMAT, "%s: dtype %s with source_dtype %s: expected "
					  "the model's dtype, or a matrix's block dtype and the "
					  "model's", where, dt, json_is_string(sdt) ?
					  json_string_value(sdt) : "missing");
		strcpy(T->name, name);
		T->ndim = (int)json_array_size(shape);
		for (int d = 0; d < T->ndim; d++) {
			json_t *v = json_array_get(shape, (size_t)d);
			if (!json_is_integer(v) || json_integer_value(v) < 1 ||
			    json_integer_value(v) > (json_int_t)1 << 32)
				return sf_err_set(e, SF_EFORMAT, "%s: bad shape", where);
			T->shape[d] = (uint64_t)json_integer_value(v);
			elems *= T->shape[d];	/* two factors of at most 2^32 */
		}
		if ((ret = sf_json_u64(t, "offset", R->length, &off, where, e)) ||
		    (ret = sf_json_u64(t, "length", R->length, &len, where, e)))
			return ret;
		uint64_t bytes = T->ndim == 2 ? T->shape[0] * sf_dtype_col_bytes(T->dtype, T->shape[1])
					      : elems * sf_dtype_size(T->dtype);
		if (elems > UINT64_MAX / 4 || len != bytes ||
		    off % SF_IMAGE_TENSOR_ALIGN || off > R->length - len)
			return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': %" PRIu64 " bytes at %"
					  PRIu64 ": not its shape's size, misaligned or outside the "
					  "resident region (%" PRIu64 " bytes)", path, name, len, off,
					  R->length);
		T->nbytes = len;
		T->data = (const uint8_t *)img->map + R->offset + off;
	}
	/* no two tensors share bytes: by offset, each ends before the next */
	struct sf_tensor *ts = img->tensors.tensors;
	qsort(ts, n, sizeof(*ts), tensor_addr_cmp);
	for (size_t x = 1; x < n; x++)
		if ((const uint8_t *)ts[x - 1].data + ts[x - 1].nbytes > (const uint8_t *)ts[x].data)
			return sf_err_set(e, SF_EFORMAT, "%s: tensors '%s' and '%s' overlap", path,
					  ts[x - 1].name, ts[x].name);
	img->tensors.ntensors = n;
	return 0;
}

/* The resident tensor named name (the table is not sorted yet), or NULL. */
static struct sf_tensor *resident_tensor(struct sf_image *img, const char *name)
{
	for (size_t k = 0; k < img->tensors.ntensors; k++)
		if (!strcmp(img->tensors.tensors[k].name, name))
			return &img->tensors.tensors[k];
	return NULL;
}

/* SF_IMAGE_OPEN_TILE_HEAD: the head bound as Q6X16 from here on, its rows
 * to tile once read, where they are Q6 in multiples of SF_QTILE and no
 * byte of them is left on flash. */
static void head_to_tile(struct sf_image *img)
{
	struct sf_tensor *T = resident_tensor(img, img->cfg.tie_embeddings ?
					      "model.embed_tokens.weight" : "lm_head.weight");
	uint64_t a = T ? sf_image_offset(img, T->data) : 0, b = T ? a + T->nbytes : 0;

	if (!T || T->dtype != SF_DTYPE_Q6 || T->ndim != 2 || T->shape[0] % SF_QTILE)
		return;
	for (int i = 0; i < img->n_on_flash; i++)
		if (img->on_flash[i][0] < b && img->on_flash[i][1] > a)
			return;
	T->dtype = SF_DTYPE_Q6X16;
	img->tile_head.data = (void *)T->data;
	img->tile_head.rows = T->shape[0];
	img->tile_head.cols = T->shape[1];
}

/* The head's rows, read, as the tiles they make, a tile at a time
 * through a copy of its rows. */
static int tile_head(struct sf_image *img, struct sf_err *e)
{
	size_t cols = (size_t)img->tile_head.cols;
	size_t rb = (size_t)sf_dtype_col_bytes(SF_DTYPE_Q6, cols);
	uint8_t *rows = malloc(SF_QTILE * rb), *p = img->tile_head.data;

	if (!rows)
		return sf_err_set(e, -ENOMEM, "%s: the output head's tiles: %s", img->path,
				  sf_strerror(-ENOMEM));
	for (uint64_t r = 0; r < img->tile_head.rows; r += SF_QTILE) {
		memcpy(rows, p + r * rb, SF_QTILE * rb);
		sf_qtile_pack(p + r * rb, rows, SF_QTILE, SF_DTYPE_Q6, cols);
	}
	free(rows);
	img->tile_head.rows = 0;
	return 0;
}

/* The resident region's ranges to read: whole, or with flags the 4 KiB
 * pages wholly inside the embedding (and output head) left on flash;
 * read now unless flags defer it (sf_image_load_resident). */
int image_read_resident(struct sf_image *img, unsigned flags, struct sf_err *e)
{
	const struct sf_image_region *R = &img->regions[0];
	const char *names[2] = { "model.embed_tokens.weight", "lm_head.weight" };
	int n = 0;

	for (int i = 0; i < 2 && (flags & SF_IMAGE_OPEN_EMBED_ON_FLASH); i++) {
		const struct sf_tensor *T = resident_tensor(img, names[i]);
		if (!T || (i == 1 && !(flags & SF_IMAGE_OPEN_HEAD_ON_FLASH)))
			continue;
		if (i == 0 && img->cfg.tie_embeddings && !(flags & SF_IMAGE_OPEN_HEAD_ON_FLASH))
			continue;	/* tied: the head in RAM is the embedding */
		uint64_t off = (uint64_t)((const uint8_t *)T->data - (const uint8_t *)img->map);
		uint64_t a = align_up(off, SF_IMAGE_ALIGN);
		uint64_t b = (off + T->nbytes) & ~(uint64_t)(SF_IMAGE_ALIGN - 1);
		if (b > a) {
			img->on_flash[n][0] = a;
			img->on_flash[n++][1] = b;
		}
	}
	if (n == 2 && img->on_flash[1][0] < img->on_flash[0][0]) {
		uint64_t t0 = img->on_flash[0][0], t1 = img->on_flash[0][1];
		img->on_flash[0][0] = img->on_flash[1][0];
		img->on_flash[0][1] = img->on_flash[1][1];
		img->on_flash[1][0] = t0;
		img->on_flash[1][1] = t1;
	}
	img->n_on_flash = n;
	for (int i = 0; i < n; i++)
		img->left_on_flash += img->on_flash[i][1] - img->on_flash[i][0];
	if (flags & SF_IMAGE_OPEN_TILE_HEAD)
		head_to_tile(img);
	img->resident_unread = img->regions[1].offset - R->offset - img->left_on_flash;
	return flags & SF_IMAGE_OPEN_DEFER_RESIDENT ? 0 : sf_image_load_resident(img, e);
}

int sf_image_load_resident(struct sf_image *img, struct sf_err *e)
{
	uint64_t at = img->regions[0].offset, end = img->regions[1].offset;
	int ret;

	if (!img->resident_unread)
		return 0;
	for (int i = 0; i <= img->n_on_flash; i++) {
		uint64_t stop = i < img->n_on_flash ? img->on_flash[i][0] : end;
		if (stop > at && (ret = image_read_at(img->fd, (uint8_t *)img->map + at,
						  (size_t)(stop - at), (off_t)at, img->path, e)))
			return ret;
		if (i < img->n_on_flash)
			at = img->on_flash[i][1];
	}
	img->resident_unread = 0;
	return img->tile_head.rows ? tile_head(img, e) : 0;
}

uint64_t sf_image_offset(const struct sf_image *img, const void *p)
{
	return (uint64_t)((const uint8_t *)p - (const uint8_t *)img->map);
}

int sf_image_model(const struct sf_image *img, struct sf_model *m, struct sf_err *e)
{
	int ret = sf_model_bind(m, &img->cfg, &img->tensors, e);

	if (ret)
		return ret;
	/* a resident group's matrices must have their bytes, a flash group's
	 * none (a mixture's FFN groups have none: its experts are on flash) */
	for (int l = 0; l < img->cfg.n_layers; l++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			const struct sf_image_group *G = sf_image_group(img, l, (enum sf_group)g);
			const struct sf_weight *w[SF_GROUP_MAX_MATRICES];
			const char *names[SF_GROUP_MAX_MATRICES];
			sf_codes_group_matrices(m, l, (enum sf_group)g, w, names);
			for (int i = 0; i < G->nmat; i++)
				if (!w[i]->data != !G->resident) {
					ret = sf_err_set(e, SF_EFORMAT, "%s: %s: %s", img->path,
							 G->mat[i].tensor, G->resident ?
							 "of a resident group but on flash" :
							 "on flash and resident");
					goto out;
				}
		}
	/* the weights are on flash, in placement order and perhaps another
	 * dtype: the header's weights fingerprint stands for them (the
	 * header's CRC, and --verify the regions') */
	if (strcmp(m->fingerprint.shape, img->fingerprint.shape)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: shape fingerprint %s in the header, the tensors "
				 "give %s", img->path, img->fingerprint.shape, m->fingerprint.shape);
		goto out;
	}
	memcpy(m->fingerprint.weights, img->fingerprint.weights, sizeof(m->fingerprint.weights));
	return 0;
out:
	sf_model_close(m);
	return ret;
}


/* The resident region: each tensor at its offset, in its stored dtype. */
int image_write_resident(struct wr *w, const struct plan *p, const struct pregion *r,
			 struct sf_err *e)
{
	const struct sf_image_pack_opts *o = p->o;
	int ret = 0;

	for (size_t i = 0; i < p->nt && !ret; i++) {
		const struct ptensor *t = &p->t[i];
		if ((ret = image_wr_put(w, NULL, t->off - (w->pos - r->offset), 1, e)))
			break;
		if (t->dt == t->w->dtype)
			ret = image_wr_put(w, t->w->data, (size_t)t->len, 1, e);
		else
			ret = image_write_rows_quantized(w, t->name, t->w, t->dt, o, e);
		sf_model_release(o->model, t->w);
	}
	if (!ret)
		ret = image_wr_put(w, NULL, r->length - (w->pos - r->offset), 1, e);
	return ret;
}
