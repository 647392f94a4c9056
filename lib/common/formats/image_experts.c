/* The image's routed experts of a mixture: per layer one region of
 * n_experts records, each expert's gate, up and down row-major in the
 * model's dtype (F32, F16, BF16 or gpt-oss's MXFP4 rows), or quantized
 * by rows to sf-pack's block dtype (what the
 * row products of a GGUF's Q8_0 and Q4_0 take: an expert is read whole,
 * so its blocks run along the rows); man/sf-formats.5, IMAGE, "experts".
 * Planned, written and read back. See formats/image_impl.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonfile.h"
#include "formats/image_impl.h"

static const char *const mat_names[SF_IMAGE_EXPERT_MATRICES] = { "gate", "up", "down" };

/* Matrix i's shape in a record: gate and up (hidden_dim, dim), down
 * (dim, hidden_dim). */
static void mat_shape(const struct sf_config *c, int i, uint64_t *rows, uint64_t *cols)
{
	*rows = i == 2 ? (uint64_t)c->dim : (uint64_t)c->hidden_dim;
	*cols = i == 2 ? (uint64_t)c->hidden_dim : (uint64_t)c->dim;
}

/* Bytes of matrix i of a record in dt. */
static uint64_t mat_bytes(const struct sf_config *c, int i, enum sf_dtype dt)
{
	uint64_t rows, cols;

	mat_shape(c, i, &rows, &cols);
	/* < 2^62: config limits */
	return rows * (sf_dtype_is_block(dt) ? sf_dtype_col_bytes(dt, cols) : cols * sf_dtype_size(dt));
}

/* The record of dtype dt: each matrix on a multiple of
 * SF_IMAGE_TENSOR_ALIGN, the record a multiple of SF_IMAGE_ALIGN so that
 * each expert is its own aligned read. */
static uint64_t layout(const struct sf_config *c, enum sf_dtype dt,
		       uint64_t off[SF_IMAGE_EXPERT_MATRICES])
{
	uint64_t at = 0;

	for (int i = 0; i < SF_IMAGE_EXPERT_MATRICES; i++) {
		off[i] = align_up(at, SF_IMAGE_TENSOR_ALIGN);
		at = off[i] + mat_bytes(c, i, dt);
	}
	return align_up(at, SF_IMAGE_ALIGN);
}

uint64_t sf_image_expert_record_bytes(const struct sf_config *c, enum sf_dtype dt)
{
	uint64_t off[SF_IMAGE_EXPERT_MATRICES];
	return layout(c, dt, off);
}

/* Block rows need whole blocks: the row products take no partial one. */
static int block_rows_fit(const struct sf_config *c)
{
	return c->dim % SF_QBLOCK == 0 && c->hidden_dim % SF_QBLOCK == 0;
}

// ----------------------------------------------------------------------------
// writer

/* The placement's order of each layer's experts (sf-place on a trace's
 * experts slots), identity for a layer it does not place; none without
 * an experts group in it. */
static int plan_order(struct plan *p, struct sf_err *e)
{
	const struct sf_image_pack_opts *o = p->o;
	const size_t n = (size_t)p->x.count;
	int any = 0;

	for (int i = 0; o->placement && i < o->placement->ngroups; i++)
		any |= o->placement->groups[i].group == SF_GROUP_EXPERTS;
	if (!any)
		return 0;
	if (!(p->x.order = malloc((size_t)p->nl * n * sizeof(*p->x.order))))
		return sf_err_set(e, -ENOMEM, "out of memory");
	for (int l = 0; l < p->nl; l++) {
		const struct sf_placement_group *pg = NULL;
		for (int i = 0; i < o->placement->ngroups; i++)
			if (o->placement->groups[i].layer == l &&
			    o->placement->groups[i].group == SF_GROUP_EXPERTS)
				pg = &o->placement->groups[i];
		if (pg && !(pg = sf_placement_lookup(o->placement, o->placement_path, l,
						     SF_GROUP_EXPERTS, (uint32_t)n, "the model", e)))
			return e ? e->code : SF_EMISMATCH;
		for (size_t q = 0; q < n; q++)
			p->x.order[(size_t)l * n + q] = pg ? pg->perm[q] : (uint32_t)q;
	}
	return 0;
}

int image_plan_experts(struct plan *p, struct sf_err *e)
{
	const struct sf_model *m = p->o->model;
	const struct sf_config *c = &m->cfg;

	if (!c->n_experts)
		return 0;
	p->x.count = c->n_experts;
	p->x.dt = p->x.source_dt = m->layers[0].experts[0].w_gate.dtype;
	for (int l = 0; l < p->nl; l++)
		for (int x = 0; x < c->n_experts; x++) {
			const struct sf_expert_weights *w = &m->layers[l].experts[x];
			const struct sf_weight *mw[3] = { &w->w_gate, &w->w_up, &w->w_down };
			for (int i = 0; i < 3; i++)
				if (mw[i]->dtype != p->x.dt || (sf_dtype_is_block(mw[i]->dtype) &&
								  mw[i]->dtype != SF_DTYPE_MXFP4)) {
					char name[SF_TENSOR_NAME_MAX];
					sf_model_expert_tensor(c, l, x, i, name, sizeof(name));
					return sf_err_set(e, SF_EUNSUPPORTED, "%s: %s: %s, the first "
							  "expert's %s: an image holds every expert in "
							  "one of F32, F16, BF16, MXFP4", m->source, name,
							  sf_dtype_name(mw[i]->dtype),
							  sf_dtype_name(p->x.dt));
				}
		}
	/* a block dtype for the top tier quantizes the experts' rows too,
	 * but for MXFP4 ones: they keep the model's own 4-bit codes */
	if (p->o->dtype != SF_IMAGE_DTYPE_KEEP && sf_dtype_is_block((enum sf_dtype)p->o->dtype) &&
	    p->x.source_dt != SF_DTYPE_MXFP4) {
		if (!block_rows_fit(c))
			return sf_err_set(e, SF_EUNSUPPORTED, "%s: --dtype %s: the experts' rows of "
					  "%d and %d weights are not whole blocks of %d", m->source,
					  sf_dtype_name((enum sf_dtype)p->o->dtype), c->dim,
					  c->hidden_dim, SF_QBLOCK);
		/* from version 6 Q8 and Q4 rows lie in tiles, the row products'
		 * fastest layout (their rows are whole blocks, so whole tiles) */
		p->x.dt = sf_dtype_tiled((enum sf_dtype)p->o->dtype);
	}
	p->x.record_bytes = layout(c, p->x.dt, p->x.off);
	if (!(p->x.region = calloc((size_t)p->nl, sizeof(*p->x.region))))
		return sf_err_set(e, -ENOMEM, "out of memory");
	return plan_order(p, e);
}

json_t *image_experts_json(const struct plan *p)
{
	const struct sf_config *c = &p->o->model->cfg;
	json_t *mats, *regions;
	uint64_t rows, cols;

	if (!p->x.count)
		return json_null();
	mats = json_array();
	regions = json_array();
	for (int i = 0; i < SF_IMAGE_EXPERT_MATRICES; i++) {
		mat_shape(c, i, &rows, &cols);
		json_array_append_new(mats, json_pack("{s:s, s:[o, o], s:o}", "name", mat_names[i],
						      "shape", ju(rows), ju(cols), "offset",
						      ju(p->x.off[i])));
	}
	for (int l = 0; l < p->nl; l++)
		json_array_append_new(regions, json_integer(p->x.region[l]));
	json_t *x = json_pack("{s:i, s:s, s:s, s:o, s:o, s:o}", "count", p->x.count, "dtype",
			      sf_dtype_name(sf_dtype_untiled(p->x.dt)), "source_dtype",
			      sf_dtype_name(p->x.source_dt),
			      "record_bytes", ju(p->x.record_bytes), "matrices", mats,
			      "regions", regions);
	if (x && p->x.order) {
		json_t *order = json_array();
		for (int l = 0; l < p->nl; l++) {
			json_t *perm = json_array();
			for (int q = 0; q < p->x.count; q++)
				json_array_append_new(perm, json_integer(
					p->x.order[(size_t)l * (size_t)p->x.count + (size_t)q]));
			json_array_append_new(order, perm);
		}
		json_object_set_new(x, "order", order);
	}
	return x;
}

/* Layer l's records: each expert's matrices byte for byte from the
 * model or quantized by rows, zero between them; each leaves the resident
 * set once written. */
int image_write_experts(struct wr *w, const struct plan *p, int l, struct sf_err *e)
{
	const struct sf_model *m = p->o->model;
	int ret = 0;

	for (int q = 0; q < p->x.count && !ret; q++) {
		int x = p->x.order ? (int)p->x.order[(size_t)l * (size_t)p->x.count + (size_t)q] : q;
		const struct sf_expert_weights *ew = &m->layers[l].experts[x];
		const struct sf_weight *mw[3] = { &ew->w_gate, &ew->w_up, &ew->w_down };
		uint64_t at = 0;
		for (int i = 0; i < 3 && !ret; i++) {
			uint64_t len = mat_bytes(&m->cfg, i, p->x.dt);
			char name[SF_TENSOR_NAME_MAX];
			sf_model_expert_tensor(&m->cfg, l, x, i, name, sizeof(name));
			if ((ret = image_wr_put(w, NULL, (size_t)(p->x.off[i] - at), 1, e)))
				break;
			if (p->x.dt != p->x.source_dt)
				ret = image_write_rows_quantized(w, name, mw[i], p->x.dt, p->o, e);
			else
				ret = image_wr_put(w, mw[i]->data, (size_t)len, 1, e);
			at = p->x.off[i] + len;
			sf_model_release(m, mw[i]);
		}
		if (!ret)
			ret = image_wr_put(w, NULL, (size_t)(p->x.record_bytes - at), 1, e);
	}
	return ret;
}

// ----------------------------------------------------------------------------
// reader

size_t image_expert_tensors(const struct sf_config *c)
{
	return (size_t)c->n_layers * (size_t)c->n_experts * SF_IMAGE_EXPERT_MATRICES;
}

void image_add_expert_tensors(const struct sf_image *img, struct sf_tensor *t)
{
	const struct sf_config *c = &img->cfg;

	for (int l = 0; l < c->n_layers && img->experts.count; l++)
		for (int x = 0; x < c->n_experts; x++)
			for (int i = 0; i < SF_IMAGE_EXPERT_MATRICES; i++, t++) {
				sf_model_expert_tensor(c, l, x, i, t->name, sizeof(t->name));
				t->dtype = img->experts.dtype;
				t->source_dtype = img->experts.source_dtype;
				t->ndim = 2;
				mat_shape(c, i, &t->shape[0], &t->shape[1]);
			}
}

/* "order": absent or null (each layer's records in id order), or per
 * layer a permutation of the experts (record s holds expert order[l][s]),
 * kept inverted as img->experts.slot. */
static int open_order(struct sf_image *img, const json_t *order, const char *where,
		      struct sf_err *e)
{
	const size_t n = (size_t)img->experts.count, nl = (size_t)img->cfg.n_layers;

	if (!order || json_is_null(order))
		return 0;
	if (!json_is_array(order) || json_array_size(order) != nl)
		return sf_err_set(e, SF_EFORMAT, "%s: \"order\" is not an array of %zu", where, nl);
	if (!(img->experts.slot = malloc(nl * n * sizeof(*img->experts.slot))))
		return sf_err_set(e, -ENOMEM, "%s: out of memory", img->path);
	for (size_t l = 0; l < nl; l++) {
		const json_t *perm = json_array_get(order, l);
		uint32_t *slot = img->experts.slot + l * n;
		if (!json_is_array(perm) || json_array_size(perm) != n)
			return sf_err_set(e, SF_EFORMAT, "%s: order[%zu] is not an array of %zu",
					  where, l, n);
		for (size_t x = 0; x < n; x++)
			slot[x] = UINT32_MAX;
		for (size_t q = 0; q < n; q++) {
			const json_t *v = json_array_get(perm, q);
			json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
			if (x < 0 || (size_t)x >= n || slot[x] != UINT32_MAX)
				return sf_err_set(e, SF_EFORMAT, "%s: order[%zu][%zu]: not an expert "
						  "below %zu, or one named twice", where, l, q, n);
			slot[x] = (uint32_t)q;
		}
	}
	return 0;
}

int image_open_experts(struct sf_image *img, int *refs, struct sf_err *e)
{
	const struct sf_config *c = &img->cfg;
	json_t *o = json_object_get(img->header, "experts"), *mats, *regions;
	char where[SF_ERR_MAX];
	const char *dt;
	uint64_t v, off[SF_IMAGE_EXPERT_MATRICES];
	int ret;

	snprintf(where, sizeof(where), "%s: header: experts", img->path);
	if (!o || json_is_null(o)) {
		if (c->n_experts)
			return sf_err_set(e, SF_EFORMAT, "%s: a mixture of %d experts (config.json) "
					  "without experts in the image%s", img->path, c->n_experts,
					  img->version < 5 ? ": image format version below 5" : "");
		return 0;
	}
	if (!c->n_experts || img->version < 5)
		return sf_err_set(e, SF_EFORMAT, "%s: experts in an image of %s", where,
				  c->n_experts ? "format version below 5" : "a dense model (config.json)");
	if ((ret = sf_json_u64(o, "count", UINT32_MAX, &v, where, e)))
		return ret;
	if (v != (uint64_t)c->n_experts)
		return sf_err_set(e, SF_EFORMAT, "%s: count %" PRIu64 ", the config gives %d (%s)",
				  where, v, c->n_experts, sf_config_experts_key(c));
	img->experts.count = c->n_experts;
	if (sf_json_str(o, "dtype", &dt, where, e) || sf_dtype_parse_any(dt, &img->experts.dtype) ||
	    (sf_dtype_is_block(img->experts.dtype) && !block_rows_fit(c)))
		return sf_err_set(e, SF_EFORMAT, "%s: dtype missing, or not F32, F16, BF16, MXFP4, "
				  "or Q8, Q6 or Q4 over whole blocks", where);
	/* the model's dtype: kept, or quantized to a block dtype */
	if (sf_json_str(o, "source_dtype", &dt, where, e) ||
	    sf_dtype_parse_any(dt, &img->experts.source_dtype) ||
	    (sf_dtype_is_block(img->experts.source_dtype) &&
	     img->experts.source_dtype != SF_DTYPE_MXFP4) ||
	    (img->experts.source_dtype != img->experts.dtype &&
	     (!sf_dtype_is_block(img->experts.dtype) || img->experts.dtype == SF_DTYPE_MXFP4)))
		return sf_err_set(e, SF_EFORMAT, "%s: source_dtype missing, or not F32, F16, BF16 or "
				  "MXFP4 (dtype's own unless dtype is Q8, Q6 or Q4)", where);
	if (img->version >= 6)
		img->experts.dtype = sf_dtype_tiled(img->experts.dtype);
	img->experts.record_bytes = layout(c, img->experts.dtype, off);
	if ((ret = sf_json_u64(o, "record_bytes", INT64_MAX, &v, where, e)))
		return ret;
	if (v != img->experts.record_bytes)
		return sf_err_set(e, SF_EFORMAT, "%s: record_bytes %" PRIu64 ", expected %" PRIu64,
				  where, v, img->experts.record_bytes);
	mats = json_object_get(o, "matrices");
	if (!json_is_array(mats) || json_array_size(mats) != SF_IMAGE_EXPERT_MATRICES)
		return sf_err_set(e, SF_EFORMAT, "%s: \"matrices\" is not an array of %d", where,
				  SF_IMAGE_EXPERT_MATRICES);
	for (int i = 0; i < SF_IMAGE_EXPERT_MATRICES; i++) {
		json_t *m = json_array_get(mats, (size_t)i), *sh = json_object_get(m, "shape");
		uint64_t rows, cols;
		const char *name;
		mat_shape(c, i, &rows, &cols);
		if (sf_json_str(m, "name", &name, where, e) || strcmp(name, mat_names[i]) ||
		    !json_is_array(sh) || json_array_size(sh) != 2 ||
		    json_integer_value(json_array_get(sh, 0)) != (json_int_t)rows ||
		    json_integer_value(json_array_get(sh, 1)) != (json_int_t)cols ||
		    sf_json_u64(m, "offset", INT64_MAX, &v, where, e) || v != off[i])
			return sf_err_set(e, SF_EFORMAT, "%s: matrices[%d]: expected %s of shape "
					  "[%" PRIu64 ", %" PRIu64 "] at offset %" PRIu64, where, i,
					  mat_names[i], rows, cols, off[i]);
		img->experts.off[i] = off[i];
	}
	regions = json_object_get(o, "regions");
	if (!json_is_array(regions) || json_array_size(regions) != (size_t)c->n_layers)
		return sf_err_set(e, SF_EFORMAT, "%s: \"regions\" is not an array of %d", where,
				  c->n_layers);
	if (!(img->experts.layer = calloc((size_t)c->n_layers, sizeof(*img->experts.layer))))
		return sf_err_set(e, -ENOMEM, "%s: out of memory", img->path);
	for (int l = 0; l < c->n_layers; l++) {
		json_t *rv = json_array_get(regions, (size_t)l);
		if (!json_is_integer(rv) || json_integer_value(rv) < 0 ||
		    (size_t)json_integer_value(rv) >= img->nregions)
			return sf_err_set(e, SF_EFORMAT, "%s: regions[%d] missing or out of range",
					  where, l);
		size_t ri = (size_t)json_integer_value(rv);
		struct sf_image_region *R = &img->regions[ri];
		if (R->kind != SF_REGION_EXPERTS || refs[ri]++)
			return sf_err_set(e, SF_EFORMAT, "%s: regions[%d]: region %zu is not layer "
					  "%d's own experts region", where, l, ri, l);
		/* count * record_bytes: at most 2^10 records of under 2^62 bytes
		 * each would overflow, so compare by division */
		if (R->length % img->experts.record_bytes ||
		    R->length / img->experts.record_bytes != (uint64_t)c->n_experts)
			return sf_err_set(e, SF_EFORMAT, "%s: region '%s': %" PRIu64 " bytes, expected "
					  "%d experts of %" PRIu64, img->path, R->name, R->length,
					  c->n_experts, img->experts.record_bytes);
		R->layer = l;
		img->experts.layer[l] = R;
	}
	return open_order(img, json_object_get(o, "order"), where, e);
}

void sf_image_expert_weights(const struct sf_image *img, const uint8_t *rec,
			     struct sf_expert_weights *w)
{
	struct sf_weight *mw[3] = { &w->w_gate, &w->w_up, &w->w_down };

	for (int i = 0; i < SF_IMAGE_EXPERT_MATRICES; i++) {
		mat_shape(&img->cfg, i, &mw[i]->rows, &mw[i]->cols);
		mw[i]->dtype = img->experts.dtype;
		mw[i]->data = rec + img->experts.off[i];
	}
}
