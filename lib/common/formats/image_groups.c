/* The image's groups: per layer and group the top-tier bundles (columns
 * converted or quantized, in placement order), the middle-tier codes, the
 * permutations and kept rows of the index region, and the calibrated tier
 * sizes; planned, written and read back. See formats/image_impl.h. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/jsonfile.h"
#include "base/quant.h"
#include "formats/image_impl.h"

/* The Hugging Face names of a group's matrices, in sf_codes_group_matrices order. */
static void tensor_name(char *buf, size_t n, int layer, enum sf_group g, int i)
{
	static const char *const suffix[SF_NGROUPS][SF_GROUP_MAX_MATRICES] = {
		{ "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj" },
		{ "self_attn.o_proj" },
		{ "mlp.gate_proj", "mlp.up_proj" },
		{ "mlp.down_proj" },
	};
	snprintf(buf, n, "model.layers.%d.%s.weight", layer, suffix[g][i]);
}

/* One group's positions, rows, bundle layout and inputs. */
int image_plan_group(struct plan *p, int l, enum sf_group g, struct sf_err *e)
{
	const struct sf_image_pack_opts *o = p->o;
	const struct sf_model *m = o->model;
	struct pgroup *G = &p->g[l * SF_NGROUPS + g];
	const struct sf_weight *w[SF_GROUP_MAX_MATRICES];
	const char *names[SF_GROUP_MAX_MATRICES];
	const struct sf_placement_group *pg = NULL;
	const uint8_t *kept = NULL;
	uint32_t n = (uint32_t)sf_group_entries(&m->cfg, g);

	G->resident = (o->resident >> g) & 1;
	G->source_entries = G->entries = n;
	G->nmat = sf_codes_group_matrices(m, l, g, w, names);
	G->top_region = G->mid_region = -1;
	G->method = "identity";
	if (m->cfg.n_experts && (g == SF_GROUP_FFN_IN || g == SF_GROUP_FFN_OUT)) {
		/* a mixture's FFN is its experts (image_experts.c): no matrices */
		G->resident = 1;
		G->nmat = 0;
		return 0;
	}
	for (int i = 0; i < G->nmat; i++) {
		G->mat[i].w = w[i];
		G->mat[i].rows = w[i]->rows;
		G->mat[i].dt = o->dtype == SF_IMAGE_DTYPE_KEEP ? w[i]->dtype : (enum sf_dtype)o->dtype;
		if (G->resident && sf_dtype_is_block(G->mat[i].dt))
			G->mat[i].dt = w[i]->dtype;	/* resident tensors stay the model's */
		tensor_name(G->mat[i].tensor, sizeof(G->mat[i].tensor), l, g, i);
	}
	if (G->resident)
		return 0;
	if (o->placement) {
		for (int i = 0; i < o->placement->ngroups; i++)
			if (o->placement->groups[i].layer == l && o->placement->groups[i].group == g)
				pg = &o->placement->groups[i];
		if (pg && !(pg = sf_placement_lookup(o->placement, o->placement_path, l, g, n,
						     "the model", e)))
			return e ? e->code : SF_EMISMATCH;
		if (pg)
			G->method = sf_place_method_name(pg->method);
	}
	if (o->keep && o->keep->count[l] < o->keep->hidden)
		kept = o->keep->kept + (size_t)l * o->keep->hidden;
	if (!(G->perm = malloc((size_t)n * sizeof(*G->perm))))
		return sf_err_set(e, -ENOMEM, "out of memory");
	uint32_t np = 0;
	for (uint32_t q = 0; q < n; q++) {
		uint32_t j = pg ? pg->perm[q] : q;
		if (g == SF_GROUP_FFN_OUT && kept && !kept[j])
			continue;
		G->perm[np++] = j;
	}
	G->entries = np;
	if (g == SF_GROUP_FFN_IN && kept) {
		uint32_t K = o->keep->count[l], r = 0;
		if (!(G->rows = malloc((size_t)K * sizeof(*G->rows))))
			return sf_err_set(e, -ENOMEM, "out of memory");
		for (uint32_t j = 0; j < o->keep->hidden; j++)
			if (kept[j])
				G->rows[r++] = j;
		for (int i = 0; i < G->nmat; i++)
			G->mat[i].rows = K;
	}
	/* Each column starts on a multiple of its dtype's alignment (the
	 * element size; a block dtype's 2, its f16 scale) and the stride is a
	 * multiple of the largest, so every column of every bundle is aligned
	 * for its dtype; nothing else pads. */
	uint64_t off = 0, amax = 1;
	for (int i = 0; i < G->nmat; i++) {
		uint64_t a = sf_dtype_align(G->mat[i].dt);
		off = align_up(off, a);
		G->mat[i].off = off;
		off += sf_dtype_col_bytes(G->mat[i].dt, G->mat[i].rows);
		if (a > amax)
			amax = a;
	}
	G->top_bytes = align_up(off, amax);
	if (o->codes) {
		const struct sf_sfq_section *s = sf_sfq_find(o->codes, l, g);
		if (!s)
			return sf_err_set(e, SF_EMISMATCH, "%s: no codes for layer %d %s", o->codes_path,
					  l, sf_group_name(g));
		if (s->nmat != G->nmat || s->entries != n)
			return sf_err_set(e, SF_EMISMATCH, "%s: layer %d %s: %d matrices of %" PRIu64
					  " columns, the model has %d of %u", o->codes_path, l,
					  sf_group_name(g), s->nmat, s->entries, G->nmat, n);
		uint64_t mo = 0;
		for (int i = 0; i < G->nmat; i++) {
			if (s->mat[i].rows != w[i]->rows)
				return sf_err_set(e, SF_EMISMATCH, "%s: layer %d %s: matrix %s of %"
						  PRIu64 " rows, the model's has %" PRIu64,
						  o->codes_path, l, sf_group_name(g), s->mat[i].name,
						  s->mat[i].rows, w[i]->rows);
			G->mat[i].mid_off = mo;
			G->mat[i].mid_bytes = s->mat[i].col_bytes;
			mo += s->mat[i].col_bytes;
		}
		if (mo != s->entry_bytes)
			return sf_err_set(e, SF_EFORMAT, "%s: layer %d %s: entry_bytes %" PRIu64
					  ", the matrices add to %" PRIu64, o->codes_path, l,
					  sf_group_name(g), s->entry_bytes, mo);
		G->mid_bytes = mo;
		G->sec = s;
	}
	G->perm_off = p->index_len;
	p->index_len += (uint64_t)G->entries * 4;
	if (G->rows) {
		G->rows_off = p->index_len;
		p->index_len += G->mat[0].rows * 4;
	}
	return 0;
}

int image_check_inputs(const struct sf_image_pack_opts *o, struct sf_err *e)
{
	const struct sf_model *m = o->model;
	int ret;

	/* a mixture's experts are whole records: no traces, codes, tiers or
	 * kept neurons of experts yet */
	if (m->cfg.n_experts) {
		const char *what = o->codes ? o->codes_path : o->calib ? o->calib_path :
				   o->keep ? o->keep_path : NULL;
		if (what)
			return sf_err_set(e, SF_EUNSUPPORTED, "%s: %s of a mixture of experts: its "
					  "experts are packed whole (no codes, tiers or --keep of "
					  "experts yet)", what, o->codes ? "codes" : o->calib ?
					  "tier sizes" : "kept neurons");
		if (o->resident & (1u << SF_GROUP_FFN_IN | 1u << SF_GROUP_FFN_OUT))
			return sf_err_set(e, SF_EUNSUPPORTED, "%s: --resident ffn_in or ffn_out: a "
					  "mixture's FFN is its experts, which stay on flash",
					  m->source);
	}

	if (o->placement && (ret = sf_fingerprint_check(&o->placement->fingerprint,
							o->placement_path, "placement",
							&m->fingerprint, m->source, e)))
		return ret;
	if (o->placement)
		for (int i = 0; i < o->placement->ngroups; i++)
			if (o->placement->groups[i].layer >= m->cfg.n_layers)
				return sf_err_set(e, SF_EMISMATCH, "%s: layer %d: the model has %d layers",
						  o->placement_path, o->placement->groups[i].layer,
						  m->cfg.n_layers);
	if (o->codes && (ret = sf_sfq_check_model(o->codes, o->codes_path, m, e)))
		return ret;
	if (o->calib) {
		const struct sf_calib *c = o->calib;
		if ((ret = sf_fingerprint_check(&c->fingerprint, o->calib_path, "tier sizes",
						&m->fingerprint, m->source, e)))
			return ret;
		if (c->n_layers != m->cfg.n_layers)
			return sf_err_set(e, SF_EMISMATCH, "%s: %d layers, the model has %d",
					  o->calib_path, c->n_layers, m->cfg.n_layers);
		if (o->codes && c->method != o->codes->method)
			return sf_err_set(e, SF_EMISMATCH, "%s: calibrated for %s codes, %s holds %s",
					  o->calib_path, sf_codes_method_name(c->method), o->codes_path,
					  sf_codes_method_name(o->codes->method));
		/* budgets count the image's own top-tier bytes (a q4 image's, q4) */
		struct sf_calib_sizes sz[SF_NGROUPS];
		_Static_assert(SF_IMAGE_DTYPE_KEEP == SF_CALIB_DTYPE_MODEL, "one keep");
		sf_calib_sizes_of(sz, m, c->method, o->dtype);
		for (int g = 0; g < SF_NGROUPS; g++)
			if (!((o->resident >> g) & 1) && sz[g].top_bytes != c->sizes[g].top_bytes)
				return sf_err_set(e, SF_EMISMATCH, "%s: %s: budgets of %" PRIu64 " top-tier "
						  "bytes an entry, the image's %s top tier has %" PRIu64
						  " (sf-encode --calibrate --dtype as sf-pack's)",
						  o->calib_path, sf_group_name((enum sf_group)g),
						  c->sizes[g].top_bytes,
						  sf_dtype_name(o->dtype == SF_IMAGE_DTYPE_KEEP ?
								m->layers[0].wq.dtype :
								(enum sf_dtype)o->dtype),
						  sz[g].top_bytes);
		for (size_t b = 0; b < c->nbudgets; b++)
			for (int l = 0; l < c->n_layers; l++)
				for (int g = 0; g < SF_NGROUPS; g++) {
					const struct sf_calib_group *cg = &sf_calib_at(c, b, l)->g[g];
					if (cg->k_top + cg->k_mid > sf_group_entries(&m->cfg, (enum sf_group)g))
						return sf_err_set(e, SF_EMISMATCH,
								  "%s: budget %g layer %d %s: %" PRIu64
								  " entries in tiers, the model has %zu",
								  o->calib_path, c->budgets[b], l,
								  sf_group_name((enum sf_group)g),
								  cg->k_top + cg->k_mid,
								  sf_group_entries(&m->cfg, (enum sf_group)g));
					if (cg->k_mid && !o->codes && !((o->resident >> g) & 1))
						return sf_err_set(e, SF_EMISMATCH,
								  "%s: budget %g layer %d %s: %" PRIu64
								  " middle-tier entries, but no --codes",
								  o->calib_path, c->budgets[b], l,
								  sf_group_name((enum sf_group)g), cg->k_mid);
				}
	}
	if (o->keep && o->codes)
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: --keep with codes: the codes of ffn_in hold "
				  "whole columns, dropped neurons' rows included", o->keep_path);
	if (o->keep && (o->resident & (1u << SF_GROUP_FFN_IN | 1u << SF_GROUP_FFN_OUT)))
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: --keep with a resident FFN group: resident "
				  "matrices are stored whole", o->keep_path);
	return 0;
}

json_t *image_groups_json(const struct plan *p)
{
	json_t *a = json_array(), *x;
	for (int l = 0; l < p->nl; l++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			const struct pgroup *G = &p->g[l * SF_NGROUPS + g];
			json_t *mats = json_array();
			for (int i = 0; i < G->nmat; i++) {
				const struct pmat *M = &G->mat[i];
				json_array_append_new(mats, json_pack(
					"{s:s, s:s, s:o, s:o, s:s, s:s, s:o, s:o, s:o}",
					"name", (const char *[]){ "q", "k", "v", "o", "gate", "up", "down" }
						[g == 0 ? i : g == 1 ? 3 : g == 2 ? 4 + i : 6],
					"tensor", M->tensor, "rows", ju(M->rows), "source_rows",
					ju(M->w->rows), "dtype", sf_dtype_name(M->dt), "source_dtype",
					sf_dtype_name(M->w->dtype), "offset", ju(M->off), "mid_offset",
					ju(M->mid_off), "mid_bytes", ju(M->mid_bytes)));
			}
			x = json_pack("{s:i, s:s, s:b, s:o, s:o, s:s, s:o, s:o, s:o, s:o}", "layer", l,
				      "group", sf_group_name((enum sf_group)g), "resident", G->resident,
				      "entries", ju(G->entries), "source_entries", ju(G->source_entries),
				      "method", G->method, "top_bytes", ju(G->resident ? 0 : G->top_bytes),
				      "mid_bytes", ju(G->resident ? 0 : G->mid_bytes), "matrices", mats,
				      "perm", G->resident ? json_null() : ju(G->perm_off));
			json_object_set_new(x, "rows", G->rows ? ju(G->rows_off) : json_null());
			json_object_set_new(x, "top_region", G->top_region < 0 ? json_null() :
					    json_integer(G->top_region));
			json_object_set_new(x, "mid_region", G->mid_region < 0 ? json_null() :
					    json_integer(G->mid_region));
			json_array_append_new(a, x);
		}
	return a;
}

static float load_elem(const uint8_t *s, enum sf_dtype dt)
{
	uint32_t u;
	float f;

	switch (dt) {
	case SF_DTYPE_BF16: return sf_bf16_to_f32((uint16_t)(s[0] | s[1] << 8));
	case SF_DTYPE_F16: return sf_f16_to_f32((uint16_t)(s[0] | s[1] << 8));
	default:
		u = sf_get_le32(s);
		memcpy(&f, &u, 4);
		return f;
	}
}

/* Stores f in dtype dt; SF_ELIMIT when a finite value leaves F16's range. */
static int store_elem(uint8_t *d, enum sf_dtype dt, float f)
{
	uint32_t u;
	uint16_t h;

	if (dt == SF_DTYPE_F32) {
		memcpy(&u, &f, 4);
		sf_put_le32(d, u);
		return 0;
	}
	h = dt == SF_DTYPE_BF16 ? sf_f32_to_bf16(f) : sf_f32_to_f16(f);
	d[0] = (uint8_t)h;
	d[1] = (uint8_t)(h >> 8);
	return dt == SF_DTYPE_F16 && isfinite(f) && (h & 0x7c00) == 0x7c00 ? SF_ELIMIT : 0;
}

/* Matrix M of a group transposed to (cols, rows) in the top-tier dtype:
 * the bundle's column of entry j is t[j * rows * es ..]. Tiled so that
 * both the source rows and the destination columns stay in cache; the
 * same-dtype case moves bits (exact, NaN payloads included). */
static int transpose(const struct pgroup *G, const struct pmat *M, uint8_t *t, struct sf_err *e)
{
	const uint64_t cols = M->w->cols, R = M->rows, es = sf_dtype_size(M->dt),
		       ss = sf_dtype_size(M->w->dtype);
	const uint8_t *data = M->w->data;
	enum { TILE = 64 };

	for (uint64_t r0 = 0; r0 < R; r0 += TILE)
		for (uint64_t j0 = 0; j0 < cols; j0 += TILE) {
			uint64_t r1 = r0 + TILE < R ? r0 + TILE : R;
			uint64_t j1 = j0 + TILE < cols ? j0 + TILE : cols;
			for (uint64_t r = r0; r < r1; r++) {
				uint64_t src_row = G->rows ? G->rows[r] : r;
				const uint8_t *src = data + (src_row * cols + j0) * ss;
				uint8_t *dst = t + (j0 * R + r) * es;
				if (M->dt == M->w->dtype && es == 2) {
					for (uint64_t j = j0; j < j1; j++, src += 2, dst += R * 2)
						memcpy(dst, src, 2);
					continue;
				}
				if (M->dt == M->w->dtype) {
					for (uint64_t j = j0; j < j1; j++, src += 4, dst += R * 4)
						memcpy(dst, src, 4);
					continue;
				}
				for (uint64_t j = j0; j < j1; j++, src += ss, dst += R * es)
					if (store_elem(dst, M->dt, load_elem(src, M->w->dtype)))
						return sf_err_set(e, SF_ELIMIT,
								  "%s: row %" PRIu64 " column %" PRIu64
								  ": value beyond the F16 range",
								  M->tensor, src_row, j);
			}
		}
	return 0;
}

/* Matrix M's columns in its block dtype: transposed to f32 in f (cols *
 * rows floats), the columns quantized into t over o's pool. */
static int quantize(const struct pgroup *G, const struct pmat *M, float *f, uint8_t *t,
		    const struct sf_image_pack_opts *o, struct sf_err *e)
{
	struct pmat F = *M;
	size_t bad;
	int ret;

	F.dt = SF_DTYPE_F32;
	if ((ret = transpose(G, &F, (uint8_t *)f, e)))
		return ret;
	if (sf_quant_columns(t, M->dt, f, (size_t)M->rows, (size_t)M->rows, (size_t)M->w->cols,
			     o->quant, o->pool, &bad))
		return sf_err_set(e, SF_ELIMIT, "%s: column %zu: a weight not finite or a block's "
				  "scale beyond the F16 range", M->tensor, bad);
	return 0;
}

/* A group's bundles; each matrix leaves the resident set once read (a
 * model larger than memory is packed one matrix at a time). */
int image_write_top(struct wr *w, const struct sf_image_pack_opts *o, const struct pgroup *G,
		    struct sf_err *e)
{
	const struct sf_model *m = o->model;
	uint8_t *t[SF_GROUP_MAX_MATRICES] = { 0 }, *bundle = NULL;
	float *f = NULL;
	int ret = 0;

	for (int i = 0; i < G->nmat; i++) {
		const struct pmat *M = &G->mat[i];
		size_t sz = (size_t)(M->w->cols * sf_dtype_col_bytes(M->dt, M->rows));
		if (!(t[i] = malloc(sz ? sz : 1))) {
			ret = sf_err_set(e, -ENOMEM, "%s: out of memory", M->tensor);
			goto out;
		}
		if (!sf_dtype_is_block(M->dt)) {
			ret = transpose(G, M, t[i], e);
		} else {
			free(f);
			if (!(f = malloc((size_t)(M->w->cols * M->rows * sizeof(float)) + 1))) {
				ret = sf_err_set(e, -ENOMEM, "%s: out of memory", M->tensor);
				goto out;
			}
			ret = quantize(G, M, f, t[i], o, e);
		}
		if (ret)
			goto out;
		sf_model_release(m, M->w);
	}
	if (!(bundle = calloc(1, (size_t)G->top_bytes))) {
		ret = sf_err_set(e, -ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t p = 0; p < G->entries; p++) {
		for (int i = 0; i < G->nmat; i++) {
			size_t col = (size_t)sf_dtype_col_bytes(G->mat[i].dt, G->mat[i].rows);
			memcpy(bundle + G->mat[i].off, t[i] + (size_t)G->perm[p] * col, col);
		}
		if ((ret = image_wr_put(w, bundle, (size_t)G->top_bytes, 1, e)))
			goto out;
	}
out:
	for (int i = 0; i < G->nmat; i++)
		free(t[i]);
	free(bundle);
	free(f);
	return ret;
}

/* The permutation (or kept rows) at byte offset off of the index region:
 * count u32 values each below limit and none twice. */
/* The index region: per group its permutation, then its kept rows. */
int image_write_index(struct wr *w, const struct plan *p, struct sf_err *e)
{
	int ret = 0;

	for (int i = 0; i < p->nl * SF_NGROUPS && !ret; i++) {
		const struct pgroup *G = &p->g[i];
		for (uint32_t q = 0; q < G->entries && !G->resident && !ret; q++)
			ret = image_wr_u32(w, G->perm[q], e);
		for (uint64_t q = 0; G->rows && q < G->mat[0].rows && !ret; q++)
			ret = image_wr_u32(w, G->rows[q], e);
	}
	return ret;
}

/* A group's middle-tier region: its codes records in placement order. */
int image_write_mid(struct wr *w, const struct pgroup *G, struct sf_err *e)
{
	int ret = 0;

	for (uint32_t q = 0; q < G->entries && !ret; q++)
		ret = image_wr_put(w, G->sec->data + (size_t)G->perm[q] * G->mid_bytes,
				   (size_t)G->mid_bytes, 1, e);
	return ret;
}

static int read_index(struct sf_image *img, const char *what, uint64_t off, uint64_t count,
		      uint32_t limit, uint32_t *out, uint8_t *seen, struct sf_err *e)
{
	const struct sf_image_region *R = &img->regions[1];
	const uint8_t *p = (const uint8_t *)img->map + R->offset;

	if (off % 4 || count > R->length / 4 || off > R->length - count * 4)
		return sf_err_set(e, SF_EFORMAT, "%s: %s: %" PRIu64 " indices at %" PRIu64
				  " outside the index region (%" PRIu64 " bytes)", img->path, what,
				  count, off, R->length);
	memset(seen, 0, limit);
	for (uint64_t q = 0; q < count; q++) {
		uint32_t v = sf_get_le32(p + off + 4 * q);
		if (v >= limit)
			return sf_err_set(e, SF_EFORMAT, "%s: %s: [%" PRIu64 "] = %u is out of range: "
					  "expected 0..%u", img->path, what, q, v, limit - 1);
		if (seen[v]++)
			return sf_err_set(e, SF_EFORMAT, "%s: %s: index %u given twice", img->path, what,
					  v);
		out[q] = v;
	}
	return 0;
}

int image_open_group(struct sf_image *img, json_t *o, int l, enum sf_group g, uint32_t **u32,
		     uint8_t *seen, int *refs, struct sf_err *e)
{
	const char *path = img->path;
	struct sf_image_group *G = &img->groups[(size_t)l * SF_NGROUPS + g];
	char where[SF_ERR_MAX], what[64];
	uint64_t v, entries;
	json_t *mats = json_object_get(o, "matrices"), *m;
	const char *method, *gn;
	int ret;

	snprintf(where, sizeof(where), "%s: header: groups[%d]", path, l * SF_NGROUPS + (int)g);
	snprintf(what, sizeof(what), "layer %d %s", l, sf_group_name(g));
	if ((ret = sf_json_u64(o, "layer", INT32_MAX, &v, where, e)))
		return ret;
	enum sf_group gg;
	if ((int)v != l || sf_json_str(o, "group", &gn, where, e) || sf_group_parse(gn, &gg) ||
	    gg != g)
		return sf_err_set(e, SF_EFORMAT, "%s: expected layer %d %s", where, l,
				  sf_group_name(g));
	G->layer = l;
	G->group = g;
	G->resident = json_is_true(json_object_get(o, "resident"));
	G->source_entries = (uint32_t)sf_group_entries(&img->cfg, g);
	if ((ret = sf_json_u64(o, "source_entries", UINT32_MAX, &v, where, e)))
		return ret;
	if (v != G->source_entries)
		return sf_err_set(e, SF_EFORMAT, "%s: %s: %" PRIu64 " source entries, the config "
				  "gives %u", path, what, v, G->source_entries);
	if ((ret = sf_json_u64(o, "entries", G->source_entries, &entries, where, e)))
		return ret;
	G->entries = (uint32_t)entries;
	if (sf_json_str(o, "method", &method, where, e) || strlen(method) >= sizeof(G->method))
		return sf_err_set(e, SF_EFORMAT, "%s: \"method\" missing", where);
	strcpy(G->method, method);
	const struct sf_weight *w[SF_GROUP_MAX_MATRICES];
	const char *names[SF_GROUP_MAX_MATRICES];
	struct sf_model shape = { .cfg = img->cfg };
	struct sf_layer_weights lw;
	/* the matrices' shapes from the config: a model with no data */
	uint64_t q = (uint64_t)img->cfg.n_heads * (uint64_t)img->cfg.head_dim,
		 kv = (uint64_t)img->cfg.n_kv_heads * (uint64_t)img->cfg.head_dim,
		 dim = (uint64_t)img->cfg.dim, hid = (uint64_t)img->cfg.hidden_dim;
	memset(&lw, 0, sizeof(lw));
	lw.wq.rows = q; lw.wk.rows = kv; lw.wv.rows = kv; lw.wo.rows = dim;
	lw.w_gate.rows = hid; lw.w_up.rows = hid; lw.w_down.rows = dim;
	shape.layers = &lw;
	G->nmat = sf_codes_group_matrices(&shape, 0, g, w, names);
	if (img->cfg.n_experts && (g == SF_GROUP_FFN_IN || g == SF_GROUP_FFN_OUT)) {
		/* a mixture's FFN is its experts: the group is an empty resident one */
		G->nmat = 0;
		if (!G->resident)
			return sf_err_set(e, SF_EFORMAT, "%s: %s: on flash in a mixture of experts "
					  "(its experts hold the FFN): expected resident with no "
					  "matrices", path, what);
	}
	if (!json_is_array(mats) || json_array_size(mats) != (size_t)G->nmat)
		return sf_err_set(e, SF_EFORMAT, "%s: %s: \"matrices\" is not an array of %d", path,
				  what, G->nmat);
	uint64_t top_end = 0, amax = 1, mid = 0;
	size_t i;
	json_array_foreach(mats, i, m) {
		struct sf_image_matrix *M = &G->mat[i];
		const char *name, *tensor, *dt, *sdt;
		char mw[SF_ERR_MAX + 32], want_tensor[64];

		snprintf(mw, sizeof(mw), "%s.matrices[%zu]", where, i);
		tensor_name(want_tensor, sizeof(want_tensor), l, g, (int)i);
		if (sf_json_str(m, "name", &name, mw, e) || strcmp(name, names[i]) ||
		    sf_json_str(m, "tensor", &tensor, mw, e) || strcmp(tensor, want_tensor) ||
		    sf_json_str(m, "dtype", &dt, mw, e) || sf_dtype_parse_any(dt, &M->dtype) ||
		    !sf_dtype_is_top(M->dtype) || sf_json_str(m, "source_dtype", &sdt, mw, e) ||
		    sf_dtype_parse(sdt, &M->source_dtype))
			return sf_err_set(e, SF_EFORMAT, "%s: %s: matrix %zu: expected %s (%s) with "
					  "dtypes", path, what, i, names[i], want_tensor);
		strcpy(M->name, name);
		strcpy(M->tensor, tensor);
		M->source_rows = w[i]->rows;
		M->cols = G->source_entries;
		if ((ret = sf_json_u64(m, "source_rows", UINT32_MAX, &v, mw, e)))
			return ret;
		if (v != M->source_rows)
			return sf_err_set(e, SF_EFORMAT, "%s: %s %s: %" PRIu64 " source rows, the "
					  "config gives %" PRIu64, path, what, M->name, v, M->source_rows);
		if ((ret = sf_json_u64(m, "rows", M->source_rows, &M->rows, mw, e)) ||
		    (ret = sf_json_u64(m, "offset", UINT32_MAX, &M->offset, mw, e)) ||
		    (ret = sf_json_u64(m, "mid_offset", UINT32_MAX, &M->mid_offset, mw, e)) ||
		    (ret = sf_json_u64(m, "mid_bytes", UINT32_MAX, &M->mid_bytes, mw, e)))
			return ret;
		if (M->rows != M->source_rows && (g != SF_GROUP_FFN_IN || G->resident || !M->rows ||
						  M->rows != G->mat[0].rows))
			return sf_err_set(e, SF_EFORMAT, "%s: %s %s: %" PRIu64 " rows of %" PRIu64
					  ": only ffn_in on flash drops rows", path, what, M->name,
					  M->rows, M->source_rows);
		if (G->resident && sf_dtype_is_block(M->dtype))
			return sf_err_set(e, SF_EFORMAT, "%s: %s %s: resident in block dtype %s",
					  path, what, M->name, sf_dtype_name(M->dtype));
		if (G->resident)
			continue;	/* not in bundles: no layout to check */
		uint64_t a = sf_dtype_align(M->dtype);
		top_end = align_up(top_end, a);
		if (M->offset != top_end)
			return sf_err_set(e, SF_EFORMAT, "%s: %s %s: bundle offset %" PRIu64
					  ", expected %" PRIu64, path, what, M->name, M->offset, top_end);
		top_end += sf_dtype_col_bytes(M->dtype, M->rows);
		if (a > amax)
			amax = a;
		if (M->mid_offset != mid)
			return sf_err_set(e, SF_EFORMAT, "%s: %s %s: middle offset %" PRIu64
					  ", expected %" PRIu64, path, what, M->name, M->mid_offset, mid);
		mid += M->mid_bytes;
	}
	if (G->entries != G->source_entries && (g != SF_GROUP_FFN_OUT || G->resident || !G->entries))
		return sf_err_set(e, SF_EFORMAT, "%s: %s: %u entries of %u: only ffn_out on flash "
				  "drops entries", path, what, G->entries, G->source_entries);
	if (G->resident)
		return 0;
	if ((ret = sf_json_u64(o, "top_bytes", UINT32_MAX, &G->top_bytes, where, e)) ||
	    (ret = sf_json_u64(o, "mid_bytes", UINT32_MAX, &G->mid_bytes, where, e)))
		return ret;
	if (G->top_bytes != align_up(top_end, amax))
		return sf_err_set(e, SF_EFORMAT, "%s: %s: top_bytes %" PRIu64 ", expected %" PRIu64,
				  path, what, G->top_bytes, align_up(top_end, amax));
	if (G->mid_bytes != mid || (!!mid != img->has_codes))
		return sf_err_set(e, SF_EFORMAT, "%s: %s: mid_bytes %" PRIu64 " (matrices: %" PRIu64
				  ")%s", path, what, G->mid_bytes, mid,
				  img->has_codes ? "" : " without codes");
	if (img->has_codes)
		for (int x = 0; x < G->nmat; x++)
			if (G->mat[x].mid_bytes != sf_codes_col_bytes(img->codes_method,
								      G->mat[x].source_rows))
				return sf_err_set(e, SF_EFORMAT, "%s: %s %s: mid_bytes %" PRIu64
						  ", expected %zu", path, what, G->mat[x].name,
						  G->mat[x].mid_bytes,
						  sf_codes_col_bytes(img->codes_method,
								     G->mat[x].source_rows));
	/* the regions */
	for (int t = 0; t < 2; t++) {
		json_t *rv = json_object_get(o, t ? "mid_region" : "top_region");
		const struct sf_image_region **dst = t ? &G->mid : &G->top;
		enum sf_image_kind kind = t ? SF_REGION_MID : SF_REGION_TOP;
		if (t && !img->has_codes) {
			if (rv && !json_is_null(rv))
				return sf_err_set(e, SF_EFORMAT, "%s: %s: a mid region without codes",
						  path, what);
			continue;
		}
		if (!json_is_integer(rv) || json_integer_value(rv) < 0 ||
		    (size_t)json_integer_value(rv) >= img->nregions)
			return sf_err_set(e, SF_EFORMAT, "%s: %s: %s missing or out of range", path,
					  what, t ? "mid_region" : "top_region");
		size_t ri = (size_t)json_integer_value(rv);
		struct sf_image_region *R = &img->regions[ri];
		uint64_t stride = t ? G->mid_bytes : G->top_bytes;
		if (R->kind != kind || refs[ri]++)
			return sf_err_set(e, SF_EFORMAT, "%s: %s: region %zu is not its own %s region",
					  path, what, ri, sf_image_kind_name(kind));
		if (R->length != (uint64_t)G->entries * stride)
			return sf_err_set(e, SF_EFORMAT, "%s: region '%s': %" PRIu64 " bytes, expected %u "
					  "entries of %" PRIu64, path, R->name, R->length, G->entries,
					  stride);
		R->layer = l;
		R->group = g;
		*dst = R;
	}
	/* permutation, positions, rows */
	if ((ret = sf_json_u64(o, "perm", INT64_MAX, &v, where, e)))
		return ret;
	uint32_t *perm = *u32, *pos = perm + G->entries;
	char pw[80];
	snprintf(pw, sizeof(pw), "%s perm", what);
	if ((ret = read_index(img, pw, v, G->entries, G->source_entries, perm, seen, e)))
		return ret;
	for (uint32_t j = 0; j < G->source_entries; j++)
		pos[j] = SF_IMAGE_ABSENT;
	for (uint32_t p = 0; p < G->entries; p++)
		pos[perm[p]] = p;
	G->perm = perm;
	G->pos = pos;
	*u32 = pos + G->source_entries;
	json_t *rv = json_object_get(o, "rows");
	if (rv && !json_is_null(rv)) {
		if ((ret = sf_json_u64(o, "rows", INT64_MAX, &v, where, e)))
			return ret;
		if (g != SF_GROUP_FFN_IN || G->mat[0].rows == G->mat[0].source_rows)
			return sf_err_set(e, SF_EFORMAT, "%s: %s: a row list, but every row is there",
					  path, what);
		snprintf(pw, sizeof(pw), "%s rows", what);
		if ((ret = read_index(img, pw, v, G->mat[0].rows, (uint32_t)G->mat[0].source_rows, *u32,
				      seen, e)))
			return ret;
		for (uint64_t r = 1; r < G->mat[0].rows; r++)
			if ((*u32)[r] <= (*u32)[r - 1])
				return sf_err_set(e, SF_EFORMAT, "%s: %s: not ascending at %" PRIu64,
						  path, pw, r);
		G->rows = *u32;
		*u32 += G->mat[0].rows;
	} else if (G->mat[0].rows != G->mat[0].source_rows) {
		return sf_err_set(e, SF_EFORMAT, "%s: %s: rows dropped without a row list", path, what);
	}
	return 0;
}

/* With --keep, ffn_in's rows and ffn_out's entries are the same neurons. */
int image_check_keep(struct sf_image *img, int l, struct sf_err *e)
{
	const struct sf_image_group *in = sf_image_group(img, l, SF_GROUP_FFN_IN),
				    *out = sf_image_group(img, l, SF_GROUP_FFN_OUT);
	uint64_t kept = out->entries;

	if (in->rows || out->entries != out->source_entries) {
		if (!in->rows || in->mat[0].rows != out->entries)
			return sf_err_set(e, SF_EFORMAT, "%s: layer %d: ffn_in keeps %" PRIu64
					  " rows, ffn_out %u entries", img->path, l,
					  in->rows ? in->mat[0].rows : in->mat[0].source_rows,
					  out->entries);
		for (uint64_t r = 0; r < in->mat[0].rows; r++)
			if (out->pos[in->rows[r]] == SF_IMAGE_ABSENT)
				return sf_err_set(e, SF_EFORMAT, "%s: layer %d: neuron %u in ffn_in's "
						  "rows, not in ffn_out's entries", img->path, l,
						  in->rows[r]);
	}
	img->kept_neurons += kept;
	return 0;
}

int image_open_tiers(struct sf_image *img, struct sf_err *e)
{
	json_t *t = json_object_get(img->header, "tiers"), *bs, *b;
	size_t i;
	int nl = img->cfg.n_layers;

	if (!t || json_is_null(t))
		return 0;
	bs = json_object_get(t, "budgets");
	if (!json_is_array(bs) || !json_array_size(bs) || json_array_size(bs) > SF_CALIB_MAX_BUDGETS)
		return sf_err_set(e, SF_EFORMAT, "%s: header: tiers.budgets is not an array of 1..%d",
				  img->path, SF_CALIB_MAX_BUDGETS);
	img->nbudgets = json_array_size(bs);
	img->budgets = calloc(img->nbudgets, sizeof(double));
	img->realised = calloc(img->nbudgets, sizeof(double));
	img->k = calloc(img->nbudgets * (size_t)nl * SF_NGROUPS * 2, sizeof(uint64_t));
	if (!img->budgets || !img->realised || !img->k)
		return sf_err_set(e, -ENOMEM, "%s: out of memory", img->path);
	json_array_foreach(bs, i, b) {
		json_t *bv = json_object_get(b, "budget"), *rv = json_object_get(b, "realised"),
		       *ks = json_object_get(b, "k");
		if (!json_is_number(bv) || !(json_number_value(bv) > 0) || json_number_value(bv) > 1 ||
		    !json_is_number(rv) || !json_is_array(ks) || json_array_size(ks) != (size_t)nl)
			return sf_err_set(e, SF_EFORMAT, "%s: header: tiers.budgets[%zu]: budget in "
					  "(0, 1], realised and k of %d layers expected", img->path, i,
					  nl);
		img->budgets[i] = json_number_value(bv);
		img->realised[i] = json_number_value(rv);
		for (size_t d = 0; d < i; d++)
			if (fabs(img->budgets[d] - img->budgets[i]) < SF_CALIB_SAME_BUDGET)
				return sf_err_set(e, SF_EFORMAT, "%s: header: tiers: budget %g listed "
						  "twice", img->path, img->budgets[i]);
		for (int l = 0; l < nl; l++) {
			json_t *kl = json_array_get(ks, (size_t)l);
			if (!json_is_array(kl) || json_array_size(kl) != 2 * SF_NGROUPS)
				return sf_err_set(e, SF_EFORMAT, "%s: header: tiers.budgets[%zu].k[%d]: "
						  "expected %d integers", img->path, i, l,
						  2 * SF_NGROUPS);
			for (int g = 0; g < SF_NGROUPS; g++) {
				uint64_t *k = img->k + ((i * (size_t)nl + (size_t)l) * SF_NGROUPS +
							(size_t)g) * 2;
				json_t *a = json_array_get(kl, 2 * (size_t)g), *c = json_array_get(kl, 2 * (size_t)g + 1);
				uint64_t n = sf_group_entries(&img->cfg, (enum sf_group)g);
				if (!json_is_integer(a) || !json_is_integer(c) || json_integer_value(a) < 0 ||
				    json_integer_value(c) < 0 ||
				    (uint64_t)json_integer_value(a) + (uint64_t)json_integer_value(c) > n)
					return sf_err_set(e, SF_EFORMAT, "%s: header: tiers: budget %g "
							  "layer %d %s: k_top + k_mid over %" PRIu64
							  " entries", img->path, img->budgets[i], l,
							  sf_group_name((enum sf_group)g), n);
				k[0] = (uint64_t)json_integer_value(a);
				k[1] = (uint64_t)json_integer_value(c);
			}
		}
	}
	return 0;
}

struct sf_codes_view sf_image_mid_view(const struct sf_image *img, const struct sf_image_group *g,
				       int i, const uint8_t *buf)
{
	struct sf_codes_view v = {
		.method = img->codes_method,
		.codebook = img->codebook,
		.m = (size_t)g->mat[i].source_rows,
		.base = buf + g->mat[i].mid_offset,
		.stride = (size_t)g->mid_bytes,
	};
	return v;
}

int sf_image_top_dtype(const struct sf_image *img)
{
	for (int i = 0; i < img->cfg.n_layers * SF_NGROUPS; i++)
		if (!img->groups[i].resident)
			return (int)img->groups[i].mat[0].dtype;
	return -1;
}
