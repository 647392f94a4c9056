/* The flash image: the writer behind sf-pack, the reader behind sf-run and
 * sf-pack --verify/--info, and the neurons.json reader of --keep. See
 * image.h; byte layout in man/sf-formats.5 (IMAGE). */
#include "formats/image.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/file.h"
#include "base/jsonfile.h"
#include "base/outfile.h"
#include "base/quant.h"
#include "base/vocab.h"

#define FORMAT_NAME "sparseflash-image"
#define TEXT_MAX ((uint64_t)256 << 20)	/* config and tokenizer files copied */
#define WBUF (4u << 20)			/* write buffer */
#define MAX_REGIONS (3 + 2 * SF_NGROUPS * 4096)

static const char *const kind_names[SF_REGION_NKINDS] = {
	"resident", "index", "codebook", "top", "mid",
};

const char *sf_image_kind_name(enum sf_image_kind k)
{
	return (unsigned)k < SF_REGION_NKINDS ? kind_names[k] : "?";
}

static int kind_parse(const char *s, enum sf_image_kind *k)
{
	for (int i = 0; i < SF_REGION_NKINDS; i++)
		if (!strcmp(s, kind_names[i])) {
			*k = (enum sf_image_kind)i;
			return 0;
		}
	return -1;
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

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

// ----------------------------------------------------------------------------
// neurons.json

void sf_image_keep_free(struct sf_image_keep *k)
{
	if (!k)
		return;
	free(k->kept);
	free(k->count);
	memset(k, 0, sizeof(*k));
}

int sf_image_keep_read(struct sf_image_keep *k, const char *path, const struct sf_model *m,
		       struct sf_err *e)
{
	json_error_t je;
	json_t *root = NULL, *v, *layers, *L;
	uint8_t *seen = NULL;
	size_t i;
	int ret;

	memset(k, 0, sizeof(*k));
	if (!(root = json_load_file(path, JSON_REJECT_DUPLICATES, &je))) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: %s", path, je.text);
		goto out;
	}
	v = json_object_get(root, "format");
	if (!json_is_string(v) || strcmp(json_string_value(v), SF_IMAGE_KEEP_FORMAT)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: \"format\" is not \"%s\"", path,
				 SF_IMAGE_KEEP_FORMAT);
		goto out;
	}
	v = json_object_get(root, "version");
	if (!json_is_integer(v) || json_integer_value(v) != SF_IMAGE_KEEP_VERSION) {
		ret = sf_fingerprint_version(path, "neurons", json_integer_value(v),
					     SF_IMAGE_KEEP_VERSION, e);
		goto out;
	}
	struct sf_fingerprint fp;
	if ((ret = sf_fingerprint_parse(&fp, root, path, e)) ||
	    (ret = sf_fingerprint_check(&fp, path, "neurons", &m->fingerprint, m->source, e)))
		goto out;
	layers = json_object_get(root, "layers");
	if (!json_is_array(layers)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: \"layers\" is not an array", path);
		goto out;
	}
	k->n_layers = m->cfg.n_layers;
	k->hidden = (uint32_t)m->cfg.hidden_dim;
	k->kept = malloc((size_t)k->n_layers * k->hidden);
	k->count = malloc((size_t)k->n_layers * sizeof(*k->count));
	seen = calloc((size_t)k->n_layers, 1);
	if (!k->kept || !k->count || !seen) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	memset(k->kept, 1, (size_t)k->n_layers * k->hidden);
	for (int l = 0; l < k->n_layers; l++)
		k->count[l] = k->hidden;
	json_array_foreach(layers, i, L) {
		json_t *lv = json_object_get(L, "layer"), *nv = json_object_get(L, "neurons"), *x;
		json_int_t l;
		size_t j;

		if (!json_is_integer(lv) || (l = json_integer_value(lv)) < 0 || l >= k->n_layers) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: layers[%zu]: \"layer\" is not 0..%d", path, i,
					 k->n_layers - 1);
			goto out;
		}
		if (seen[l]++) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: layer %d listed twice", path, (int)l);
			goto out;
		}
		if (!json_is_array(nv) || !json_array_size(nv)) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: layer %d: \"neurons\" is not a non-empty array",
					 path, (int)l);
			goto out;
		}
		uint8_t *kl = k->kept + (size_t)l * k->hidden;
		memset(kl, 0, k->hidden);
		json_array_foreach(nv, j, x) {
			json_int_t n = json_is_integer(x) ? json_integer_value(x) : -1;
			if (n < 0 || n >= (json_int_t)k->hidden) {
				ret = sf_err_set(e, SF_EFORMAT,
						 "%s: layer %d: neuron %s is out of range: expected 0..%u",
						 path, (int)l, json_is_integer(x) ? "" : "(not an integer)",
						 k->hidden - 1);
				if (json_is_integer(x))
					sf_err_set(e, SF_EFORMAT,
						   "%s: layer %d: neuron %" JSON_INTEGER_FORMAT
						   " is out of range: expected 0..%u", path, (int)l, n,
						   k->hidden - 1);
				goto out;
			}
			if (kl[n]) {
				ret = sf_err_set(e, SF_EFORMAT, "%s: layer %d: neuron %" JSON_INTEGER_FORMAT
						 " listed twice", path, (int)l, n);
				goto out;
			}
			kl[n] = 1;
		}
		k->count[l] = (uint32_t)json_array_size(nv);
	}
	ret = 0;
out:
	free(seen);
	json_decref(root);
	if (ret)
		sf_image_keep_free(k);
	return ret;
}

// ----------------------------------------------------------------------------
// writer: the plan

struct pmat {
	const struct sf_weight *w;
	char tensor[64];
	uint64_t rows;		/* in the bundle */
	enum sf_dtype dt;
	uint64_t off, mid_off, mid_bytes;
};

struct pgroup {
	int resident;
	uint32_t entries, source_entries;
	const char *method;
	uint32_t *perm;		/* (entries) */
	uint32_t *rows;		/* (mat[0].rows) or NULL: all */
	int nmat;
	struct pmat mat[SF_GROUP_MAX_MATRICES];
	uint64_t top_bytes, mid_bytes;
	uint64_t perm_off, rows_off;	/* in the index region */
	int top_region, mid_region;	/* -1: none */
	const struct sf_sfq_section *sec;
};

struct ptensor {
	char name[96];
	const struct sf_weight *w;
	enum sf_dtype dt;	/* stored: w's, or a block dtype its rows are quantized to */
	int ndim;
	uint64_t off, len;	/* in the resident region */
};

struct pregion {
	char name[32];
	enum sf_image_kind kind;
	int layer;
	enum sf_group g;
	uint64_t offset, length;
	uint32_t crc;
};

struct plan {
	const struct sf_image_pack_opts *o;
	int nl;
	struct pgroup *g;	/* (nl * SF_NGROUPS) */
	struct ptensor *t;
	size_t nt;
	struct pregion *r;
	size_t nr;
	uint64_t index_len;
	char *texts[3];		/* config.json, tokenizer.json, tokenizer_config.json */
	size_t text_len[3];
};

static void plan_free(struct plan *p)
{
	if (p->g)
		for (int i = 0; i < p->nl * SF_NGROUPS; i++) {
			free(p->g[i].perm);
			free(p->g[i].rows);
		}
	free(p->g);
	free(p->t);
	free(p->r);
	for (int i = 0; i < 3; i++)
		free(p->texts[i]);
}

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

static void add_region(struct plan *p, enum sf_image_kind kind, int layer, enum sf_group g,
		       uint64_t length)
{
	struct pregion *r = &p->r[p->nr++];

	r->kind = kind;
	r->layer = layer;
	r->g = g;
	r->length = length;
	if (kind == SF_REGION_TOP || kind == SF_REGION_MID)
		snprintf(r->name, sizeof(r->name), "layer %d %s %s", layer, sf_group_name(g),
			 kind_names[kind]);
	else
		snprintf(r->name, sizeof(r->name), "%s", kind_names[kind]);
}

/* The resident tensors: everything that is not a flash group's matrix. */
static void plan_tensors(struct plan *p)
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
		T(ffn_norm, "post_attention_layernorm.weight", 1);
		if (m->cfg.qkv_bias) {
			T(bq, "self_attn.q_proj.bias", 1);
			T(bk, "self_attn.k_proj.bias", 1);
			T(bv, "self_attn.v_proj.bias", 1);
		}
#undef T
		for (int g = 0; g < SF_NGROUPS; g++) {
			struct pgroup *G = &p->g[l * SF_NGROUPS + g];
			if (G->resident)
				for (int i = 0; i < G->nmat; i++)
					add_tensor(p, G->mat[i].tensor, G->mat[i].w, 2, -1);
		}
	}
	uint64_t off = 0;
	for (size_t i = 0; i < p->nt; i++) {
		p->t[i].off = off;
		off = align_up(off + p->t[i].len, SF_IMAGE_TENSOR_ALIGN);
	}
	add_region(p, SF_REGION_RESIDENT, -1, 0, off);
}

/* One group's positions, rows, bundle layout and inputs. */
static int plan_group(struct plan *p, int l, enum sf_group g, struct sf_err *e)
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

static int check_inputs(const struct sf_image_pack_opts *o, struct sf_err *e)
{
	const struct sf_model *m = o->model;

	int ret;

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

static int plan_build(struct plan *p, const struct sf_image_pack_opts *o, struct sf_err *e)
{
	static const char *const files[3] = { "config.json", "tokenizer.json", "tokenizer_config.json" };
	int ret;

	memset(p, 0, sizeof(*p));
	p->o = o;
	p->nl = o->model->cfg.n_layers;
	if ((ret = check_inputs(o, e)))
		return ret;
	for (int i = 0; i < 3; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/%s", o->model_dir, files[i]);
		if ((ret = sf_file_read(path, TEXT_MAX, SF_FILE_REGULAR | (i == 2 ? SF_FILE_OPTIONAL : 0),
					&p->texts[i], &p->text_len[i], e)))
			return ret;
	}
	size_t ng = (size_t)p->nl * SF_NGROUPS;
	p->g = calloc(ng, sizeof(*p->g));
	p->t = calloc(3 + (size_t)p->nl * (5 + 7), sizeof(*p->t));
	p->r = calloc(3 + 2 * ng, sizeof(*p->r));
	if (!p->g || !p->t || !p->r)
		return sf_err_set(e, -ENOMEM, "out of memory");
	for (int l = 0; l < p->nl; l++)
		for (int g = 0; g < SF_NGROUPS; g++)
			if ((ret = plan_group(p, l, (enum sf_group)g, e)))
				return ret;
	plan_tensors(p);
	add_region(p, SF_REGION_INDEX, -1, 0, p->index_len);
	if (o->codes && o->codes->method == SF_CODES_TRELLIS)
		add_region(p, SF_REGION_CODEBOOK, -1, 0, (uint64_t)SF_TRELLIS_CODEBOOK * 4);
	for (int l = 0; l < p->nl; l++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			struct pgroup *G = &p->g[l * SF_NGROUPS + g];
			if (G->resident)
				continue;
			G->top_region = (int)p->nr;
			add_region(p, SF_REGION_TOP, l, (enum sf_group)g, G->entries * G->top_bytes);
			if (G->sec) {
				G->mid_region = (int)p->nr;
				add_region(p, SF_REGION_MID, l, (enum sf_group)g,
					   G->entries * G->mid_bytes);
			}
		}
	return 0;
}

// ----------------------------------------------------------------------------
// writer: the header

static json_t *ju(uint64_t v)
{
	return json_integer((json_int_t)v);
}

static json_t *header_json(const struct plan *p)
{
	const struct sf_image_pack_opts *o = p->o;
	json_t *h = json_object(), *a, *x;
	char crc[9];

	json_object_set_new(h, "format", json_string(FORMAT_NAME));
	json_object_set_new(h, "version", json_integer(SF_IMAGE_VERSION));
	sf_fingerprint_put(h, &o->model->fingerprint);
	json_object_set(h, "producer", o->producer ? o->producer : json_null());
	json_object_set_new(h, "config", json_stringn(p->texts[0], p->text_len[0]));
	json_object_set_new(h, "tokenizer", json_stringn(p->texts[1], p->text_len[1]));
	json_object_set_new(h, "tokenizer_config", p->texts[2] ?
			    json_stringn(p->texts[2], p->text_len[2]) : json_null());
	if (o->codes)
		json_object_set_new(h, "codes", json_pack("{s:s, s:I}", "method",
				    sf_codes_method_name(o->codes->method), "seed",
				    (json_int_t)o->codes->seed));
	else
		json_object_set_new(h, "codes", json_null());
	if (o->calib) {
		const struct sf_calib *c = o->calib;
		json_t *bs = json_array();
		for (size_t b = 0; b < c->nbudgets; b++) {
			json_t *ks = json_array();
			for (int l = 0; l < c->n_layers; l++) {
				json_t *kl = json_array();
				for (int g = 0; g < SF_NGROUPS; g++) {
					const struct sf_calib_group *cg = &sf_calib_at(c, b, l)->g[g];
					json_array_append_new(kl, ju(cg->k_top));
					json_array_append_new(kl, ju(cg->k_mid));
				}
				json_array_append_new(ks, kl);
			}
			json_array_append_new(bs, json_pack("{s:f, s:f, s:o}", "budget", c->budgets[b],
							    "realised", c->realised[b], "k", ks));
		}
		json_object_set_new(h, "tiers", json_pack("{s:s, s:o}", "method",
				    sf_codes_method_name(c->method), "budgets", bs));
	} else {
		json_object_set_new(h, "tiers", json_null());
	}
	a = json_array();
	for (size_t i = 0; i < p->nr; i++) {
		const struct pregion *r = &p->r[i];
		snprintf(crc, sizeof(crc), "%08" PRIx32, r->crc);
		x = json_pack("{s:s, s:s, s:o, s:o, s:s}", "name", r->name, "kind",
			      kind_names[r->kind], "offset", ju(r->offset), "length", ju(r->length),
			      "crc32c", crc);
		json_array_append_new(a, x);
	}
	json_object_set_new(h, "regions", a);
	a = json_array();
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
	json_object_set_new(h, "tensors", a);
	a = json_array();
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
	json_object_set_new(h, "groups", a);
	return h;
}

/* Renders the header with the region offsets it implies: offsets depend
 * on the header's length and the length on the offsets' digits, so lay
 * out until the two agree (CRCs are fixed-width hex, so filling them in
 * later keeps the length). */
static char *render_header(struct plan *p, uint64_t *hlen)
{
	uint64_t start = SF_IMAGE_ALIGN;

	for (int iter = 0; iter < 16; iter++) {
		uint64_t off = start;
		for (size_t i = 0; i < p->nr; i++) {
			p->r[i].offset = off;
			off = align_up(off + p->r[i].length, SF_IMAGE_ALIGN);
		}
		json_t *h = header_json(p);
		char *text = h ? json_dumps(h, JSON_COMPACT) : NULL;
		json_decref(h);
		if (!text)
			return NULL;
		*hlen = strlen(text);
		uint64_t need = align_up(SF_IMAGE_PREAMBLE + *hlen, SF_IMAGE_ALIGN);
		if (need == start)
			return text;
		free(text);
		start = need;
	}
	return NULL;
}

// ----------------------------------------------------------------------------
// writer: the bytes

struct wr {
	int fd;
	const char *name;	/* the temporary, for messages */
	uint64_t pos;		/* file offset of buf[0] + n */
	uint8_t *buf;
	size_t n;
	uint32_t crc;
	const struct sf_image_pack_opts *o;
	uint64_t total;
};

static int wr_flush(struct wr *w, struct sf_err *e)
{
	size_t done = 0;

	while (done < w->n) {
		ssize_t k = pwrite(w->fd, w->buf + done, w->n - done,
				   (off_t)(w->pos - w->n + done));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return sf_err_set(e, -errno, "%s: write: %s", w->name, strerror(errno));
		done += (size_t)k;
	}
	/* Start writeback now: with gigabytes of RAM the kernel would hold
	 * the whole image dirty until the final fsync, so the disk would sit
	 * idle while the CPU transposes and the CPU idle while it writes. */
	if (w->n)
		sync_file_range(w->fd, (off_t)(w->pos - w->n), (off_t)w->n, SYNC_FILE_RANGE_WRITE);
	w->n = 0;
	return 0;
}

/* Appends bytes to the file; crc: whether they enter the region's CRC. */
static int wr_put(struct wr *w, const void *data, size_t len, int crc, struct sf_err *e)
{
	const uint8_t *d = data;
	int ret;

	static const uint8_t zeros[SF_IMAGE_ALIGN];

	if (crc && d)
		w->crc = sf_crc32c(w->crc, d, len);
	for (size_t z = len; crc && !d && z; ) {
		size_t k = z < sizeof(zeros) ? z : sizeof(zeros);
		w->crc = sf_crc32c(w->crc, zeros, k);
		z -= k;
	}
	while (len) {
		size_t k = WBUF - w->n < len ? WBUF - w->n : len;
		if (d)
			memcpy(w->buf + w->n, d, k);
		else
			memset(w->buf + w->n, 0, k);
		w->n += k;
		w->pos += k;
		len -= k;
		if (d)
			d += k;
		if (w->n == WBUF && (ret = wr_flush(w, e)))
			return ret;
	}
	return 0;
}

static int wr_pad(struct wr *w, struct sf_err *e)
{
	return wr_put(w, NULL, align_up(w->pos, SF_IMAGE_ALIGN) - w->pos, 0, e);
}

static int wr_u32(struct wr *w, uint32_t v, struct sf_err *e)
{
	unsigned char b[4];

	sf_put_le32(b, v);
	return wr_put(w, b, 4, 1, e);
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
 * rows floats), each column quantized into t. */
static int quantize(const struct pgroup *G, const struct pmat *M, float *f, uint8_t *t,
		    enum sf_quant_method qm, struct sf_err *e)
{
	struct pmat F = *M;
	uint64_t cb = sf_dtype_col_bytes(M->dt, M->rows);
	int ret;

	F.dt = SF_DTYPE_F32;
	if ((ret = transpose(G, &F, (uint8_t *)f, e)))
		return ret;
	for (uint64_t j = 0; j < M->w->cols; j++)
		if (sf_quant_column(t + j * cb, M->dt, f + j * M->rows, (size_t)M->rows, qm))
			return sf_err_set(e, SF_ELIMIT, "%s: column %" PRIu64 ": a weight not "
					  "finite or a block's scale beyond the F16 range",
					  M->tensor, j);
	return 0;
}

/* A resident tensor's rows quantized to its block dtype, one at a time. */
static int write_quantized(struct wr *w, const struct ptensor *t, enum sf_quant_method quant,
			   struct sf_err *e)
{
	size_t cols = (size_t)t->w->cols, rb = (size_t)sf_dtype_col_bytes(t->dt, cols);
	float *f = malloc(cols * sizeof(float));
	uint8_t *q = malloc(rb);
	int ret = 0;

	if (!f || !q)
		ret = sf_err_set(e, -ENOMEM, "%s: %s", t->name, sf_strerror(-ENOMEM));
	for (uint64_t r = 0; r < t->w->rows && !ret; r++) {
		sf_weight_row(f, t->w, r);
		if (sf_quant_column(q, t->dt, f, cols, quant))
			ret = sf_err_set(e, SF_ELIMIT, "%s: row %" PRIu64 ": a weight not finite or a "
					 "block's scale beyond the F16 range", t->name, r);
		else
			ret = wr_put(w, q, rb, 1, e);
	}
	free(f);
	free(q);
	return ret;
}

/* A group's bundles; each matrix leaves the resident set once read (a
 * model larger than memory is packed one matrix at a time). */
static int write_top(struct wr *w, const struct sf_model *m, const struct pgroup *G,
		     enum sf_quant_method qm, struct sf_err *e)
{
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
			ret = quantize(G, M, f, t[i], qm, e);
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
		if ((ret = wr_put(w, bundle, (size_t)G->top_bytes, 1, e)))
			goto out;
	}
out:
	for (int i = 0; i < G->nmat; i++)
		free(t[i]);
	free(bundle);
	free(f);
	return ret;
}

static int write_region(struct wr *w, struct plan *p, struct pregion *r, struct sf_err *e)
{
	const struct sf_image_pack_opts *o = p->o;
	int ret = 0;

	if (w->pos != r->offset)
		return sf_err_set(e, -EIO, "%s: region '%s' at %" PRIu64 ", planned at %" PRIu64,
				  w->name, r->name, w->pos, r->offset);
	w->crc = 0;
	if (o->skeleton && (r->kind == SF_REGION_TOP || r->kind == SF_REGION_MID)) {
		if ((ret = wr_flush(w, e)))	/* a hole: nothing written */
			return ret;
		w->pos = align_up(r->offset + r->length, SF_IMAGE_ALIGN);
		r->crc = 0;
		return 0;
	}
	switch (r->kind) {
	case SF_REGION_RESIDENT:
		for (size_t i = 0; i < p->nt && !ret; i++) {
			const struct ptensor *t = &p->t[i];
			if ((ret = wr_put(w, NULL, t->off - (w->pos - r->offset), 1, e)))
				break;
			if (t->dt == t->w->dtype)
				ret = wr_put(w, t->w->data, (size_t)t->len, 1, e);
			else
				ret = write_quantized(w, t, o->quant, e);
			sf_model_release(o->model, t->w);
		}
		if (!ret)
			ret = wr_put(w, NULL, r->length - (w->pos - r->offset), 1, e);
		break;
	case SF_REGION_INDEX:
		for (int i = 0; i < p->nl * SF_NGROUPS && !ret; i++) {
			const struct pgroup *G = &p->g[i];
			for (uint32_t q = 0; q < G->entries && !G->resident && !ret; q++)
				ret = wr_u32(w, G->perm[q], e);
			for (uint64_t q = 0; G->rows && q < G->mat[0].rows && !ret; q++)
				ret = wr_u32(w, G->rows[q], e);
		}
		break;
	case SF_REGION_CODEBOOK:
		for (uint32_t i = 0; i < SF_TRELLIS_CODEBOOK && !ret; i++) {
			uint32_t u;
			memcpy(&u, &o->codes->codebook[i], 4);
			ret = wr_u32(w, u, e);
		}
		break;
	case SF_REGION_TOP:
		ret = write_top(w, o->model, &p->g[r->layer * SF_NGROUPS + (int)r->g], o->quant, e);
		break;
	case SF_REGION_MID: {
		const struct pgroup *G = &p->g[r->layer * SF_NGROUPS + (int)r->g];
		for (uint32_t q = 0; q < G->entries && !ret; q++)
			ret = wr_put(w, G->sec->data + (size_t)G->perm[q] * G->mid_bytes,
				     (size_t)G->mid_bytes, 1, e);
		break;
	}
	default:
		break;
	}
	if (ret)
		return ret;
	if (w->pos - r->offset != r->length)
		return sf_err_set(e, -EIO, "%s: region '%s' of %" PRIu64 " bytes, planned %" PRIu64,
				  w->name, r->name, w->pos - r->offset, r->length);
	r->crc = w->crc;
	if ((ret = wr_pad(w, e)))
		return ret;
	if (o->progress)
		o->progress(o->progress_arg, w->pos, w->total);
	return 0;
}

int sf_image_pack_estimate(const struct sf_image_pack_opts *o, struct sf_image_estimate *est,
			   struct sf_err *e)
{
	struct plan p;
	uint64_t hlen = 0;
	char *text = NULL;
	int ret;

	memset(est, 0, sizeof(*est));
	if ((ret = plan_build(&p, o, e)))
		goto out;
	if (!(text = render_header(&p, &hlen))) {
		ret = sf_err_set(e, -ENOMEM, "%s: cannot lay out the header", o->model_dir);
		goto out;
	}
	est->header = align_up(SF_IMAGE_PREAMBLE + hlen, SF_IMAGE_ALIGN);
	est->bytes = p.nr ? align_up(p.r[p.nr - 1].offset + p.r[p.nr - 1].length, SF_IMAGE_ALIGN)
			  : est->header;
	for (size_t i = 0; i < p.nr; i++)
		*(p.r[i].kind == SF_REGION_TOP || p.r[i].kind == SF_REGION_MID ? &est->flash
		  : &est->resident) += p.r[i].length;
out:
	free(text);
	plan_free(&p);
	return ret;
}

int sf_image_pack(const char *path, const struct sf_image_pack_opts *o, uint64_t *written,
		  struct sf_err *e)
{
	struct plan p;
	struct wr w = { .fd = -1, .name = path, .o = o };
	struct sf_outfile out;
	const struct sf_safetensors *st = &o->model->st;
	const char *const given[] = { o->placement_path, o->codes_path, o->calib_path,
				      o->keep_path, st->index_path };
	const size_t ngiven = sizeof(given) / sizeof(given[0]);
	/* every file this run reads, NULL-terminated: the model's too */
	const char **inputs = calloc(ngiven + st->nfiles + 1, sizeof(*inputs));
	char *text = NULL;
	uint64_t hlen = 0;
	size_t ni = 0;
	int ret;

	memset(&p, 0, sizeof(p));
	if (!inputs)
		return sf_err_set(e, -ENOMEM, "%s: out of memory", path);
	for (size_t i = 0; i < ngiven; i++)
		if (given[i])
			inputs[ni++] = given[i];
	for (size_t i = 0; i < st->nfiles; i++)
		inputs[ni++] = st->paths[i];
	/* written with pwrite: a regular file or a new name, never an input */
	ret = sf_outfile_open(&out, path, SF_OUT_BINARY | SF_OUT_SEEKABLE, inputs, e);
	free(inputs);
	if (ret)
		return ret;
	if ((ret = plan_build(&p, o, e)))
		goto out;
	if (!(text = render_header(&p, &hlen))) {
		ret = sf_err_set(e, -ENOMEM, "%s: cannot lay out the header", path);
		goto out;
	}
	if (hlen > SF_IMAGE_MAX_HEADER) {
		ret = sf_err_set(e, SF_ELIMIT, "%s: header of %" PRIu64 " bytes, over the limit of %"
				 PRIu64, path, hlen, SF_IMAGE_MAX_HEADER);
		goto out;
	}
	w.fd = out.fd;
	if (!(w.buf = malloc(WBUF))) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	w.pos = p.nr ? p.r[0].offset : align_up(SF_IMAGE_PREAMBLE + hlen, SF_IMAGE_ALIGN);
	w.total = align_up(p.r[p.nr - 1].offset + p.r[p.nr - 1].length, SF_IMAGE_ALIGN);
	for (size_t i = 0; i < p.nr; i++)
		if ((ret = write_region(&w, &p, &p.r[i], e)))
			goto out;
	if ((ret = wr_flush(&w, e)))
		goto out;
	uint64_t end = w.pos;
	if (o->skeleton && ftruncate(w.fd, (off_t)end)) {	/* a hole at the end too */
		ret = sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
		goto out;
	}
	/* the CRCs are in: the header keeps its length (fixed-width hex) */
	free(text);
	json_t *h = header_json(&p);
	text = h ? json_dumps(h, JSON_COMPACT) : NULL;
	json_decref(h);
	if (!text || strlen(text) != hlen) {
		ret = sf_err_set(e, -ENOMEM, "%s: cannot render the header", path);
		goto out;
	}
	unsigned char pre[SF_IMAGE_PREAMBLE] = { 0 };
	memcpy(pre, SF_IMAGE_MAGIC, 8);
	sf_put_le32(pre + 8, SF_IMAGE_VERSION);
	sf_put_le32(pre + 12, 0);
	sf_put_le64(pre + 16, hlen);
	sf_put_le32(pre + 24, sf_crc32c(0, text, (size_t)hlen));
	w.pos = 0;
	if ((ret = wr_put(&w, pre, sizeof(pre), 0, e)) ||
	    (ret = wr_put(&w, text, (size_t)hlen, 0, e)) || (ret = wr_pad(&w, e)) ||
	    (ret = wr_flush(&w, e)))
		goto out;
	if ((ret = sf_outfile_commit(&out, e)))
		goto out;
	if (written)
		*written = end;
out:
	sf_outfile_abort(&out);
	free(w.buf);
	free(text);
	plan_free(&p);
	return ret;
}

// ----------------------------------------------------------------------------
// reader

void sf_image_close(struct sf_image *img)
{
	if (!img)
		return;
	if (img->fd >= 0 && img->path)
		close(img->fd);
	free(img->map);
	json_decref(img->header);
	free(img->regions);
	free(img->groups);
	free(img->budgets);
	free(img->realised);
	free(img->k);
	free(img->tensors.tensors);
	free(img->u32);
	free(img->cb);
	free(img->path);
	memset(img, 0, sizeof(*img));
	img->fd = -1;
}

int sf_image_unchanged(const struct sf_image *img, struct sf_err *e)
{
	struct stat st;

	if (fstat(img->fd, &st))
		return sf_err_set(e, -errno, "%s: %s", img->path, strerror(errno));
	if ((uint64_t)st.st_size != img->file_size)
		return sf_err_set(e, SF_EFORMAT, "%s: %llu bytes, %" PRIu64 " when opened: the "
				  "file changed while open", img->path,
				  (unsigned long long)st.st_size, img->file_size);
	if ((int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec != img->mtime_ns)
		return sf_err_set(e, SF_EFORMAT, "%s: modified since it was opened: the file "
				  "changed while open (rewritten in place?)", img->path);
	return 0;
}

static int read_at(int fd, void *buf, size_t len, uint64_t off, const char *path, struct sf_err *e)
{
	size_t done = 0;

	while (done < len) {
		ssize_t k = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return sf_err_set(e, -errno, "%s: read: %s", path, strerror(errno));
		if (!k)
			return sf_err_set(e, SF_EFORMAT, "%s: ends at byte %" PRIu64 " while reading",
					  path, off + done);
		done += (size_t)k;
	}
	return 0;
}

static int open_regions(struct sf_image *img, uint64_t data_start, struct sf_err *e)
{
	const char *path = img->path;
	json_t *a = json_object_get(img->header, "regions"), *r;
	uint64_t prev_end = data_start;
	size_t i;
	int ret;

	if (!json_is_array(a) || json_array_size(a) < 2 || json_array_size(a) > MAX_REGIONS)
		return sf_err_set(e, SF_EFORMAT, "%s: header: \"regions\" is not an array of 2..%d",
				  path, MAX_REGIONS);
	img->nregions = json_array_size(a);
	if (!(img->regions = calloc(img->nregions, sizeof(*img->regions))))
		return sf_err_set(e, -ENOMEM, "%s: out of memory", path);
	json_array_foreach(a, i, r) {
		struct sf_image_region *R = &img->regions[i];
		char where[SF_ERR_MAX];
		const char *name, *kind, *crc;

		snprintf(where, sizeof(where), "%s: header: regions[%zu]", path, i);
		if (sf_json_str(r, "name", &name, where, e) || strlen(name) >= sizeof(R->name) ||
		    sf_json_str(r, "kind", &kind, where, e) || kind_parse(kind, &R->kind) ||
		    sf_json_str(r, "crc32c", &crc, where, e) || strlen(crc) != 8 ||
		    strspn(crc, "0123456789abcdef") != 8)
			return sf_err_set(e, SF_EFORMAT, "%s: name, kind or crc32c missing or malformed",
					  where);
		strcpy(R->name, name);
		R->crc32c = (uint32_t)strtoul(crc, NULL, 16);
		R->layer = -1;
		if ((ret = sf_json_u64(r, "offset", INT64_MAX, &R->offset, where, e)) ||
		    (ret = sf_json_u64(r, "length", INT64_MAX, &R->length, where, e)))
			return ret;
		if (R->offset % SF_IMAGE_ALIGN)
			return sf_err_set(e, SF_EFORMAT, "%s: region '%s': offset %" PRIu64
					  " is not a multiple of %d", path, R->name, R->offset,
					  SF_IMAGE_ALIGN);
		if (R->offset < prev_end)
			return sf_err_set(e, SF_EFORMAT, "%s: region '%s': offset %" PRIu64
					  " overlaps the %s ending at %" PRIu64, path, R->name, R->offset,
					  i ? "previous region" : "header", prev_end);
		if (R->length > img->file_size || R->offset > img->file_size - R->length)
			return sf_err_set(e, SF_EFORMAT, "%s: region '%s' (bytes %" PRIu64 "..%" PRIu64
					  ") extends past the end of the file (%" PRIu64
					  " bytes): truncated?", path, R->name, R->offset,
					  R->offset + R->length, img->file_size);
		/* the resident, index and codebook regions come first, in that
		 * order: they are mapped together */
		enum sf_image_kind want = i == 0 ? SF_REGION_RESIDENT : i == 1 ? SF_REGION_INDEX :
					  R->kind;
		if (R->kind != want || (i > 2 && R->kind < SF_REGION_TOP) ||
		    (i == 2 && R->kind == SF_REGION_RESIDENT) || (i == 2 && R->kind == SF_REGION_INDEX))
			return sf_err_set(e, SF_EFORMAT, "%s: region '%s': kind %s at index %zu out of "
					  "order", path, R->name, kind, i);
		prev_end = R->offset + R->length;
	}
	if (img->file_size != align_up(prev_end, SF_IMAGE_ALIGN))
		return sf_err_set(e, SF_EFORMAT, "%s: %" PRIu64 " bytes, expected %" PRIu64
				  " from the region table", path, img->file_size,
				  align_up(prev_end, SF_IMAGE_ALIGN));
	return 0;
}

static int crc_mismatch(const struct sf_image *img, const struct sf_image_region *R, uint32_t crc,
			struct sf_err *e)
{
	return sf_err_set(e, SF_EFORMAT, "%s: region '%s' (%" PRIu64 " bytes at %" PRIu64
			  "): CRC-32C %08" PRIx32 ", expected %08" PRIx32 ": the image is damaged",
			  img->path, R->name, R->length, R->offset, crc, R->crc32c);
}

static int tensor_cmp(const void *a, const void *b)
{
	return strcmp(((const struct sf_tensor *)a)->name, ((const struct sf_tensor *)b)->name);
}

static int tensor_addr_cmp(const void *a, const void *b)
{
	const uint8_t *x = ((const struct sf_tensor *)a)->data, *y = ((const struct sf_tensor *)b)->data;
	return x < y ? -1 : x > y;
}

static int open_tensors(struct sf_image *img, size_t nflash, struct sf_err *e)
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

/* The permutation (or kept rows) at byte offset off of the index region:
 * count u32 values each below limit and none twice. */
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

static int open_group(struct sf_image *img, json_t *o, int l, enum sf_group g, uint32_t **u32,
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
					  path, what, ri, kind_names[kind]);
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
static int check_keep(struct sf_image *img, int l, struct sf_err *e)
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

static int open_tiers(struct sf_image *img, struct sf_err *e)
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

/* The resident region read into the map: whole, or with flags the
 * 4 KiB pages wholly inside the embedding (and output head) left out. */
static int read_resident(struct sf_image *img, unsigned flags, struct sf_err *e)
{
	const struct sf_image_region *R = &img->regions[0];
	const char *names[2] = { "model.embed_tokens.weight", "lm_head.weight" };
	uint64_t at = R->offset, end = img->regions[1].offset;
	int n = 0, ret;

	for (int i = 0; i < 2 && (flags & SF_IMAGE_OPEN_EMBED_ON_FLASH); i++) {
		const struct sf_tensor *T = NULL;
		for (size_t k = 0; k < img->tensors.ntensors; k++)
			if (!strcmp(img->tensors.tensors[k].name, names[i]))
				T = &img->tensors.tensors[k];
		if (!T || (i == 1 && !(flags & SF_IMAGE_OPEN_HEAD_ON_FLASH)))
			continue;
		if (i == 0 && img->cfg.tie_embeddings && !(flags & SF_IMAGE_OPEN_HEAD_ON_FLASH))
			continue;	/* tied: the head in RAM is the embedding */
		uint64_t off = (uint64_t)((const uint8_t *)T->data - (const uint8_t *)img->map);
		uint64_t a = align_up(off, SF_IMAGE_ALIGN), b = (off + T->nbytes) & ~(uint64_t)(SF_IMAGE_ALIGN - 1);
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
	for (int i = 0; i <= n; i++) {
		uint64_t stop = i < n ? img->on_flash[i][0] : end;
		if (stop > at && (ret = read_at(img->fd, (uint8_t *)img->map + at, (size_t)(stop - at),
						  (off_t)at, img->path, e)))
			return ret;
		if (i < n) {
			img->left_on_flash += img->on_flash[i][1] - img->on_flash[i][0];
			at = img->on_flash[i][1];
		}
	}
	return 0;
}

uint64_t sf_image_offset(const struct sf_image *img, const void *p)
{
	return (uint64_t)((const uint8_t *)p - (const uint8_t *)img->map);
}

int sf_image_open(struct sf_image *img, const char *path, struct sf_err *e)
{
	return sf_image_open_flags(img, path, 0, e);
}

int sf_image_open_flags(struct sf_image *img, const char *path, unsigned open_flags,
			struct sf_err *e)
{
	unsigned char pre[SF_IMAGE_PREAMBLE];
	char *htext = NULL;
	uint8_t *seen = NULL;
	int *refs = NULL;
	json_error_t je;
	struct stat st;
	json_t *v;
	int ret;

	memset(img, 0, sizeof(*img));
	img->fd = -1;
	if (!(img->path = strdup(path))) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	if ((img->fd = sf_file_open_regular(path, 0, &st, e)) < 0) {
		ret = img->fd;
		goto out;
	}
	img->file_size = (uint64_t)st.st_size;
	img->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	if (img->file_size < SF_IMAGE_PREAMBLE) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: %" PRIu64 " bytes: too short for an image",
				 path, img->file_size);
		goto out;
	}
	if ((ret = read_at(img->fd, pre, sizeof(pre), 0, path, e)))
		goto out;
	if (memcmp(pre, SF_IMAGE_MAGIC, 8)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: not a sparseflash image (bad magic)", path);
		goto out;
	}
	uint32_t version = sf_get_le32(pre + 8), flags = sf_get_le32(pre + 12);
	uint64_t hlen = sf_get_le64(pre + 16);
	if (version == 2) {
		ret = sf_err_set(e, SF_EUNSUPPORTED, "%s: image format version 2, expected %d: made "
				 "before q8 and q4 columns held their scales first; pack it again",
				 path, SF_IMAGE_VERSION);
		goto out;
	}
	if (version < SF_IMAGE_VERSION_MIN || version > SF_IMAGE_VERSION) {
		ret = sf_fingerprint_version(path, "image format", version, SF_IMAGE_VERSION, e);
		goto out;
	}
	img->version = (int)version;
	if (flags || sf_get_le32(pre + 28)) {
		ret = sf_err_set(e, SF_EUNSUPPORTED, "%s: flags 0x%x, expected 0", path, flags);
		goto out;
	}
	if (hlen > SF_IMAGE_MAX_HEADER || hlen > img->file_size - SF_IMAGE_PREAMBLE) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header of %" PRIu64 " bytes in a file of %" PRIu64
				 ": truncated?", path, hlen, img->file_size);
		goto out;
	}
	if (!(htext = malloc(hlen ? hlen : 1))) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	if ((ret = read_at(img->fd, htext, (size_t)hlen, SF_IMAGE_PREAMBLE, path, e)))
		goto out;
	if (sf_crc32c(0, htext, (size_t)hlen) != sf_get_le32(pre + 24)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: CRC-32C 0x%08" PRIx32 ", expected 0x%08"
				 PRIx32 ": the image is damaged", path, sf_crc32c(0, htext, (size_t)hlen),
				 sf_get_le32(pre + 24));
		goto out;
	}
	if (!(img->header = json_loadb(htext, (size_t)hlen, JSON_REJECT_DUPLICATES, &je)) ||
	    !json_is_object(img->header)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: %s", path,
				 img->header ? "not a JSON object" : je.text);
		goto out;
	}
	free(htext);
	htext = NULL;
	const char *fmt;
	if (sf_json_str(img->header, "format", &fmt, path, e) || strcmp(fmt, FORMAT_NAME)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: \"format\" is not \"%s\"", path,
				 FORMAT_NAME);
		goto out;
	}
	char where[SF_ERR_MAX];
	snprintf(where, sizeof(where), "%s: header", path);
	if ((ret = sf_fingerprint_parse(&img->fingerprint, img->header, where, e)))
		goto out;
	v = json_object_get(img->header, "config");
	json_t *tk = json_object_get(img->header, "tokenizer"),
	       *tc = json_object_get(img->header, "tokenizer_config");
	if (!json_is_string(v) || !json_is_string(tk) || (!json_is_string(tc) && !json_is_null(tc))) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: config, tokenizer or tokenizer_config "
				 "missing", path);
		goto out;
	}
	img->config_text = json_string_value(v);
	img->config_len = json_string_length(v);
	img->tokenizer_text = json_string_value(tk);
	img->tokenizer_len = json_string_length(tk);
	if (json_is_string(tc)) {
		img->tokenizer_config_text = json_string_value(tc);
		img->tokenizer_config_len = json_string_length(tc);
	}
	char cname[4200];
	snprintf(cname, sizeof(cname), "%s: config.json", path);
	if ((ret = sf_config_parse(&img->cfg, cname, img->config_text, img->config_len, e)))
		goto out;
	v = json_object_get(img->header, "codes");
	if (v && !json_is_null(v)) {
		char where[SF_ERR_MAX];
		const char *me;
		snprintf(where, sizeof(where), "%s: header: codes", path);
		if (sf_json_str(v, "method", &me, where, e) ||
		    sf_codes_method_parse(me, &img->codes_method)) {
			ret = sf_err_set(e, SF_EFORMAT, "%s.method: unknown", where);
			goto out;
		}
		if ((ret = sf_json_u64(v, "seed", INT64_MAX, &img->codes_seed, where, e)))
			goto out;
		img->has_codes = 1;
	}
	if ((ret = open_regions(img, align_up(SF_IMAGE_PREAMBLE + hlen, SF_IMAGE_ALIGN), e)))
		goto out;
	int want_cb = img->has_codes && img->codes_method == SF_CODES_TRELLIS;
	int has_cb = img->nregions > 2 && img->regions[2].kind == SF_REGION_CODEBOOK;
	if (want_cb != has_cb) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: %s", path, want_cb ? "trellis codes without a "
				 "codebook region" : "a codebook region without trellis codes");
		goto out;
	}
	const struct sf_image_region *last = &img->regions[has_cb ? 2 : 1];
	/* read, not mapped: a file truncated under a running decoder must give
	 * an error from the flash reads, not SIGBUS on a resident page */
	img->map_size = (size_t)(last->offset + last->length);
	if (posix_memalign(&img->map, SF_IMAGE_ALIGN, img->map_size ? img->map_size : 1)) {
		img->map = NULL;
		ret = sf_err_set(e, -ENOMEM, "%s: %zu bytes of header and resident regions: %s", path,
				 img->map_size, strerror(ENOMEM));
		goto out;
	}
	/* the resident region is read once the tensors in it are known */
	if ((ret = read_at(img->fd, img->map, (size_t)img->regions[0].offset, 0, path, e)) ||
	    (ret = read_at(img->fd, (uint8_t *)img->map + img->regions[1].offset,
			   img->map_size - (size_t)img->regions[1].offset,
			   (off_t)img->regions[1].offset, path, e)))
		goto out;
	/* the index and codebook are decoded now, so their checksums are too
	 * (they are small); the resident blob's waits for sf_image_verify */
	for (size_t i = 1; i < (has_cb ? 3u : 2u); i++) {
		const struct sf_image_region *R = &img->regions[i];
		uint32_t crc = sf_crc32c(0, (const uint8_t *)img->map + R->offset, (size_t)R->length);
		if (crc != R->crc32c) {
			ret = crc_mismatch(img, R, crc, e);
			goto out;
		}
	}
	if (has_cb) {
		const uint8_t *c = (const uint8_t *)img->map + last->offset;
		if (last->length != (uint64_t)SF_TRELLIS_CODEBOOK * 4) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: region 'codebook': %" PRIu64 " bytes, "
					 "expected %u", path, last->length, SF_TRELLIS_CODEBOOK * 4);
			goto out;
		}
		if (posix_memalign((void **)&img->cb, 64, SF_TRELLIS_CODEBOOK * sizeof(float))) {
			img->cb = NULL;
			ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
			goto out;
		}
		for (uint32_t i = 0; i < SF_TRELLIS_CODEBOOK; i++) {
			uint32_t u = sf_get_le32(c + 4 * i);
			memcpy(&img->cb[i], &u, 4);
		}
		img->codebook = img->cb;
	}
	/* groups */
	json_t *ga = json_object_get(img->header, "groups");
	int nl = img->cfg.n_layers;
	size_t ng = (size_t)nl * SF_NGROUPS, nu32 = 0, nflash = 0;
	if (!json_is_array(ga) || json_array_size(ga) != ng) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: \"groups\" is not an array of %zu", path,
				 ng);
		goto out;
	}
	for (int g = 0; g < SF_NGROUPS; g++)
		nu32 += 3 * sf_group_entries(&img->cfg, (enum sf_group)g);
	nu32 = nu32 * (size_t)nl + (size_t)nl * (size_t)img->cfg.hidden_dim;
	img->groups = calloc(ng, sizeof(*img->groups));
	img->u32 = malloc(nu32 * sizeof(uint32_t));
	seen = malloc((size_t)(img->cfg.hidden_dim > img->cfg.dim ? img->cfg.hidden_dim :
			       img->cfg.dim) + (size_t)img->cfg.n_heads * (size_t)img->cfg.head_dim);
	refs = calloc(img->nregions, sizeof(*refs));
	if (!img->groups || !img->u32 || !seen || !refs) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	uint32_t *u = img->u32;
	for (int l = 0; l < nl; l++) {
		for (int g = 0; g < SF_NGROUPS; g++) {
			if ((ret = open_group(img, json_array_get(ga, (size_t)l * SF_NGROUPS + (size_t)g),
					      l, (enum sf_group)g, &u, seen, refs, e)))
				goto out;
			if (!img->groups[(size_t)l * SF_NGROUPS + (size_t)g].resident)
				nflash += (size_t)img->groups[(size_t)l * SF_NGROUPS + (size_t)g].nmat;
		}
		if ((ret = check_keep(img, l, e)))
			goto out;
	}
	for (size_t i = 0; i < img->nregions; i++)
		if (img->regions[i].kind >= SF_REGION_TOP && !refs[i]) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: region '%s' belongs to no group", path,
					 img->regions[i].name);
			goto out;
		}
	if ((ret = open_tensors(img, nflash, e)) || (ret = open_tiers(img, e)) ||
	    (ret = read_resident(img, open_flags, e)))
		goto out;
	/* the flash matrices join the tensor table without data, so binding
	 * the model checks names, shapes and the shape fingerprint over all */
	struct sf_tensor *T = img->tensors.tensors + img->tensors.ntensors;
	for (size_t i = 0; i < ng; i++) {
		const struct sf_image_group *G = &img->groups[i];
		for (int x = 0; x < G->nmat && !G->resident; x++, T++) {
			strcpy(T->name, G->mat[x].tensor);
			T->dtype = T->source_dtype = G->mat[x].source_dtype;
			T->ndim = 2;
			T->shape[0] = G->mat[x].source_rows;
			T->shape[1] = G->mat[x].cols;
		}
	}
	img->tensors.ntensors += nflash;
	qsort(img->tensors.tensors, img->tensors.ntensors, sizeof(struct sf_tensor), tensor_cmp);
	for (size_t i = 1; i < img->tensors.ntensors; i++)
		if (!strcmp(img->tensors.tensors[i].name, img->tensors.tensors[i - 1].name)) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: tensor '%s' twice", path,
					 img->tensors.tensors[i].name);
			goto out;
		}
	img->tensors.nfiles = 1;
	img->tensors.paths = &img->path;
	struct sf_model m;
	if ((ret = sf_image_model(img, &m, e)))
		goto out;
	sf_model_close(&m);
	ret = 0;
out:
	free(htext);
	free(seen);
	free(refs);
	if (ret)
		sf_image_close(img);
	return ret;
}

int sf_image_model(const struct sf_image *img, struct sf_model *m, struct sf_err *e)
{
	int ret = sf_model_bind(m, &img->cfg, &img->tensors, e);

	if (ret)
		return ret;
	/* a resident group's matrices must have their bytes, a flash group's none */
	for (int l = 0; l < img->cfg.n_layers; l++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			const struct sf_image_group *G = sf_image_group(img, l, (enum sf_group)g);
			const struct sf_weight *w[SF_GROUP_MAX_MATRICES];
			const char *names[SF_GROUP_MAX_MATRICES];
			int n = sf_codes_group_matrices(m, l, (enum sf_group)g, w, names);
			for (int i = 0; i < n; i++)
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

// ----------------------------------------------------------------------------
// verify and info

/* CRC of [off, off + len) with crc, or a check that it is all zero. */
static int scan(const struct sf_image *img, uint64_t off, uint64_t len, uint8_t *buf, size_t cap,
		uint32_t *crc, const char *what, struct sf_err *e)
{
	while (len) {
		size_t k = len < cap ? (size_t)len : cap;
		int ret = read_at(img->fd, buf, k, off, img->path, e);
		if (ret)
			return ret;
		if (crc) {
			*crc = sf_crc32c(*crc, buf, k);
		} else {
			for (size_t i = 0; i < k; i++)
				if (buf[i])
					return sf_err_set(e, SF_EFORMAT, "%s: byte %" PRIu64 " in the padding "
							  "after %s is not zero: the image is damaged",
							  img->path, off + i, what);
		}
		off += k;
		len -= k;
	}
	return 0;
}

int sf_image_verify(const struct sf_image *img, struct sf_err *e)
{
	const size_t cap = 4u << 20;
	uint8_t *buf = malloc(cap);
	uint64_t hlen = 0;
	int ret = 0;

	if (!buf)
		return sf_err_set(e, -ENOMEM, "%s: out of memory", img->path);
	if ((ret = sf_image_unchanged(img, e)))
		goto out;
	unsigned char pre[SF_IMAGE_PREAMBLE];
	if ((ret = read_at(img->fd, pre, sizeof(pre), 0, img->path, e)))
		goto out;
	hlen = sf_get_le64(pre + 16);
	uint64_t prev = SF_IMAGE_PREAMBLE + hlen;
	const char *prev_name = "the header";
	for (size_t i = 0; i < img->nregions; i++) {
		const struct sf_image_region *R = &img->regions[i];
		uint32_t crc = 0;
		if ((ret = scan(img, prev, R->offset - prev, buf, cap, NULL, prev_name, e)) ||
		    (ret = scan(img, R->offset, R->length, buf, cap, &crc, R->name, e)))
			goto out;
		if (crc != R->crc32c) {
			ret = crc_mismatch(img, R, crc, e);
			goto out;
		}
		prev = R->offset + R->length;
		prev_name = R->name;
	}
	ret = scan(img, prev, img->file_size - prev, buf, cap, NULL, prev_name, e);
out:
	free(buf);
	return ret;
}

int sf_image_top_dtype(const struct sf_image *img)
{
	for (int i = 0; i < img->cfg.n_layers * SF_NGROUPS; i++)
		if (!img->groups[i].resident)
			return (int)img->groups[i].mat[0].dtype;
	return -1;
}

json_t *sf_image_info_json(const struct sf_image *img)
{
	uint64_t by_kind[SF_REGION_NKINDS] = { 0 }, in_regions = 0;
	json_t *o = json_object(), *sizes = json_object(), *regions = json_array(),
	       *groups = json_array(), *methods = json_object(), *dtypes = json_array(),
	       *top_by_dtype = json_object();

	for (size_t i = 0; i < img->nregions; i++) {
		const struct sf_image_region *R = &img->regions[i];
		char crc[9];
		snprintf(crc, sizeof(crc), "%08" PRIx32, R->crc32c);
		by_kind[R->kind] += R->length;
		in_regions += R->length;
		json_array_append_new(regions, json_pack("{s:s, s:s, s:I, s:I, s:s}", "name", R->name,
				      "kind", kind_names[R->kind], "offset", (json_int_t)R->offset,
				      "length", (json_int_t)R->length, "crc32c", crc));
	}
	uint64_t hlen = img->regions[0].offset;	/* preamble, header and its padding */
	json_object_set_new(sizes, "file", ju(img->file_size));
	json_object_set_new(sizes, "header", ju(hlen));
	for (int k = 0; k < SF_REGION_NKINDS; k++)
		json_object_set_new(sizes, kind_names[k], ju(by_kind[k]));
	json_object_set_new(sizes, "padding", ju(img->file_size - hlen - in_regions));
	for (int l = 0; l < img->cfg.n_layers; l++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			const struct sf_image_group *G = sf_image_group(img, l, (enum sf_group)g);
			json_t *x = json_pack("{s:i, s:s, s:b, s:I, s:I}", "layer", l, "group",
					      sf_group_name((enum sf_group)g), "resident", G->resident,
					      "entries", (json_int_t)G->entries, "source_entries",
					      (json_int_t)G->source_entries);
			json_t *md = json_array();
			for (int i = 0; i < G->nmat; i++) {
				const char *dn = sf_dtype_name(G->resident ? G->mat[i].source_dtype :
							       G->mat[i].dtype);
				json_array_append_new(md, json_string(dn));
				size_t j, n = json_array_size(dtypes);
				for (j = 0; j < n; j++)
					if (!strcmp(json_string_value(json_array_get(dtypes, j)), dn))
						break;
				if (!G->resident && j == n)
					json_array_append_new(dtypes, json_string(dn));
			}
			json_object_set_new(x, "dtypes", md);
			if (!G->resident) {
				/* a group's matrices share one dtype (sf-pack --dtype) */
				const char *dn = sf_dtype_name(G->mat[0].dtype);
				json_t *tb = json_object_get(top_by_dtype, dn);
				json_object_set_new(top_by_dtype, dn, ju((tb ? (uint64_t)json_integer_value(tb)
								  : 0) + (uint64_t)G->entries *
								 G->top_bytes));
				json_object_set_new(x, "method", json_string(G->method));
				json_object_set_new(x, "top_bytes", ju(G->top_bytes));
				json_object_set_new(x, "mid_bytes", ju(G->mid_bytes));
				json_t *c = json_object_get(methods, G->method);
				json_object_set_new(methods, G->method,
						    json_integer(c ? json_integer_value(c) + 1 : 1));
			}
			json_array_append_new(groups, x);
		}
	json_object_set_new(o, "file", json_string(img->path));
	json_object_set_new(o, "format", json_string(FORMAT_NAME));
	json_object_set_new(o, "version", json_integer(img->version));
	sf_fingerprint_put(o, &img->fingerprint);
	json_object_set(o, "producer", json_object_get(img->header, "producer"));
	json_object_set_new(o, "model", json_pack("{s:s, s:i, s:i, s:i, s:i}", "arch",
			    sf_arch_name(img->cfg.arch), "layers", img->cfg.n_layers, "dim",
			    img->cfg.dim, "hidden_dim", img->cfg.hidden_dim, "vocab_size",
			    img->cfg.vocab_size));
	/* the resident matrices sf-pack may quantize (their rows) */
	const char *names[2] = { "model.embed_tokens.weight",
				 img->cfg.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight" };
	for (int i = 0; i < 2; i++) {
		const struct sf_tensor *T = sf_safetensors_find(&img->tensors, names[i]);
		json_t *x = T ? json_pack("{s:s, s:s, s:I}", "dtype", sf_dtype_name(T->dtype),
					  "source_dtype", sf_dtype_name(T->source_dtype), "bytes",
					  (json_int_t)T->nbytes) : json_null();
		if (i == 1 && T)
			json_object_set_new(x, "tied", json_boolean(img->cfg.tie_embeddings));
		json_object_set_new(o, i ? "output" : "token_embedding", x);
	}
	json_object_set_new(sizes, "top_by_dtype", top_by_dtype);
	json_object_set_new(o, "sizes", sizes);
	json_object_set_new(o, "top_dtypes", dtypes);
	json_object_set_new(o, "placement_methods", methods);
	json_object_set_new(o, "codes", img->has_codes ?
			    json_pack("{s:s, s:I}", "method", sf_codes_method_name(img->codes_method),
				      "seed", (json_int_t)img->codes_seed) : json_null());
	if (img->nbudgets) {
		json_t *b = json_array(), *r = json_array();
		for (size_t i = 0; i < img->nbudgets; i++) {
			json_array_append_new(b, json_real(img->budgets[i]));
			json_array_append_new(r, json_real(img->realised[i]));
		}
		json_object_set_new(o, "tiers", json_pack("{s:o, s:o}", "budgets", b, "realised", r));
	} else {
		json_object_set_new(o, "tiers", json_null());
	}
	json_object_set_new(o, "neurons", json_pack("{s:I, s:I}", "kept",
			    (json_int_t)img->kept_neurons, "total",
			    (json_int_t)img->cfg.n_layers * img->cfg.hidden_dim));
	json_object_set_new(o, "groups", groups);
	json_object_set_new(o, "regions", regions);
	return o;
}
