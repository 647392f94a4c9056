/* Activation traces: the stream writer and its reader. See trace.h; the
 * bytes are in man/sf-formats.5 (TRACE). */
#include "formats/trace.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "formats/stream.h"
#include "base/jsonfile.h"
#include "base/vocab.h"

// ----------------------------------------------------------------------------
// what a trace records

uint32_t sf_trace_density_k(double density, uint32_t n)
{
	return (uint32_t)floor(density * (double)n + 0.5);
}

void sf_trace_model_entries(const struct sf_config *c, uint32_t entries[SF_NKINDS],
			    uint32_t *experts_used)
{
	for (int g = 0; g < SF_NGROUPS; g++)
		entries[g] = (uint32_t)sf_group_entries(c, (enum sf_group)g);
	entries[SF_GROUP_EXPERTS] = c->n_experts > 0 ? (uint32_t)c->n_experts : 0;
	*experts_used = c->n_experts > 0 ? (uint32_t)c->n_experts_used : 0;
}

unsigned sf_trace_model_groups(const struct sf_config *c)
{
	if (c->n_experts > 0)
		return 1u << SF_GROUP_ATTN_IN | 1u << SF_GROUP_ATTN_OUT | 1u << SF_GROUP_EXPERTS;
	return (1u << SF_NGROUPS) - 1;
}

/* Bitmaps unless the index list is smaller: a count plus k 32-bit indices
 * against ceil(n/64) words. Only density mode and the experts know k in
 * advance (the experts' count at most k). */
static enum sf_trace_encoding pick_encoding(uint32_t k, uint32_t words)
{
	if (k && 4 * ((uint64_t)k + 1) < 8 * (uint64_t)words)
		return SF_TRACE_INDEX;
	return SF_TRACE_BITMAP;
}

/* A token's count of active entries against the slot's selection:
 * exactly k in density mode, 1 to k of the experts, any under a
 * threshold (k 0). */
static int count_ok(const struct sf_trace_slot *sl, uint32_t count)
{
	if (sl->group == SF_GROUP_EXPERTS)
		return count >= 1 && count <= sl->k;
	return !sl->k || count == sl->k;
}

static const char *encoding_name(enum sf_trace_encoding enc)
{
	return enc == SF_TRACE_INDEX ? "index" : "bitmap";
}

/* info->slots from the layers, groups, entries and selection; checks each
 * on the way. name: the file in messages. */
static int build_slots(struct sf_trace_info *info, const char *name, struct sf_err *e)
{
	int ngroups = 0;

	if (info->n_layers < 1 || info->n_layers > SF_TRACE_MAX_LAYERS)
		return sf_err_set(e, SF_EFORMAT, "%s: %d layers: expected 1..%d", name,
				  info->n_layers, SF_TRACE_MAX_LAYERS);
	if (info->layer_lo < 0 || info->layer_hi < info->layer_lo ||
	    info->layer_hi >= info->n_layers)
		return sf_err_set(e, -EINVAL, "%s: layers %d-%d: the model has layers 0-%d", name,
				  info->layer_lo, info->layer_hi, info->n_layers - 1);
	if (!info->groups || info->groups >= 1u << SF_NKINDS)
		return sf_err_set(e, -EINVAL, "%s: no group to record", name);
	if ((info->groups & 1u << SF_GROUP_EXPERTS) && !info->entries[SF_GROUP_EXPERTS])
		return sf_err_set(e, -EINVAL, "%s: experts: the model is not a mixture of experts",
				  name);
	if (info->entries[SF_GROUP_EXPERTS] &&
	    (info->experts_used < 1 || info->experts_used > info->entries[SF_GROUP_EXPERTS]))
		return sf_err_set(e, SF_EFORMAT, "%s: %u experts used a token of %u: expected 1..%u",
				  name, info->experts_used, info->entries[SF_GROUP_EXPERTS],
				  info->entries[SF_GROUP_EXPERTS]);
	for (int g = SF_GROUP_FFN_IN; g <= SF_GROUP_FFN_OUT; g++)
		if (info->entries[SF_GROUP_EXPERTS] && (info->groups & 1u << g))
			return sf_err_set(e, -EINVAL, "%s: %s: a mixture of experts has no dense FFN "
					  "(its experts are recorded as experts)", name,
					  sf_group_name((enum sf_group)g));
	if (info->select == SF_TRACE_DENSITY &&
	    !(info->density > 0.0 && info->density <= 1.0))
		return sf_err_set(e, -EINVAL, "%s: density %g: expected a value in (0, 1]", name,
				  info->density);
	if (info->select == SF_TRACE_THRESHOLD &&
	    !(info->threshold >= 0.0 && isfinite(info->threshold)))
		return sf_err_set(e, -EINVAL, "%s: threshold %g: expected a finite value >= 0",
				  name, info->threshold);
	for (int g = 0; g < SF_NKINDS; g++) {
		if (!(info->groups & (1u << g)))
			continue;
		ngroups++;
		if (info->entries[g] < 1 || info->entries[g] > SF_TRACE_MAX_ENTRIES)
			return sf_err_set(e, SF_EFORMAT, "%s: %s has %u entries: expected 1..%u",
					  name, sf_group_name((enum sf_group)g), info->entries[g],
					  SF_TRACE_MAX_ENTRIES);
		if (info->select == SF_TRACE_DENSITY && g != SF_GROUP_EXPERTS &&
		    sf_trace_density_k(info->density, info->entries[g]) == 0)
			return sf_err_set(e, -EINVAL,
					  "%s: density %g selects no entry of %s (%u entries)", name,
					  info->density, sf_group_name((enum sf_group)g),
					  info->entries[g]);
	}
	info->nslots = (info->layer_hi - info->layer_lo + 1) * ngroups;
	info->slots = calloc((size_t)info->nslots, sizeof(*info->slots));
	if (!info->slots)
		return sf_err_set(e, -ENOMEM, "%s: %s", name, sf_strerror(-ENOMEM));
	int s = 0;
	for (int l = info->layer_lo; l <= info->layer_hi; l++) {
		for (int g = 0; g < SF_NKINDS; g++) {
			if (!(info->groups & (1u << g)))
				continue;
			struct sf_trace_slot *sl = &info->slots[s++];
			sl->layer = l;
			sl->group = (enum sf_group)g;
			sl->entries = info->entries[g];
			sl->words = (sl->entries + 63) / 64;
			sl->k = g == SF_GROUP_EXPERTS ? info->experts_used
				: info->select == SF_TRACE_DENSITY
					? sf_trace_density_k(info->density, sl->entries) : 0;
			sl->encoding = pick_encoding(sl->k, sl->words);
		}
	}
	return 0;
}

static json_t *slots_json(const struct sf_trace_info *info)
{
	json_t *a = json_array();
	for (int s = 0; a && s < info->nslots; s++) {
		const struct sf_trace_slot *sl = &info->slots[s];
		if (json_array_append_new(a, json_pack("{s:i, s:s, s:I, s:I, s:s}", "layer",
						       sl->layer, "group", sf_group_name(sl->group),
						       "entries", (json_int_t)sl->entries, "k",
						       (json_int_t)sl->k, "encoding",
						       encoding_name(sl->encoding)))) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

json_t *sf_trace_selection_json(enum sf_trace_select select, double value)
{
	return select == SF_TRACE_DENSITY
		       ? json_pack("{s:s, s:f}", "mode", "density", "density", value)
		       : json_pack("{s:s, s:f}", "mode", "threshold", "threshold", value);
}

int sf_trace_selection_parse(json_t *sel, enum sf_trace_select *select, double *value)
{
	json_t *mode = json_object_get(sel, "mode");

	if (json_is_string(mode) && strcmp(json_string_value(mode), "density") == 0 &&
	    json_is_number(json_object_get(sel, "density"))) {
		*select = SF_TRACE_DENSITY;
		*value = json_number_value(json_object_get(sel, "density"));
	} else if (json_is_string(mode) && strcmp(json_string_value(mode), "threshold") == 0 &&
		   json_is_number(json_object_get(sel, "threshold"))) {
		*select = SF_TRACE_THRESHOLD;
		*value = json_number_value(json_object_get(sel, "threshold"));
	} else {
		return -1;
	}
	return 0;
}

static json_t *header_json(const struct sf_trace_info *info, json_t *meta)
{
	json_t *entries = json_object(), *groups = json_array(), *sel;
	json_t *h = NULL;

	/* a dense model's header as version 2 wrote it: no experts */
	for (int g = 0; entries && groups && g < SF_NKINDS; g++) {
		if (g == SF_GROUP_EXPERTS && !info->entries[g])
			continue;
		json_object_set_new(entries, sf_group_name((enum sf_group)g),
				    json_integer(info->entries[g]));
		if (info->groups & (1u << g))
			json_array_append_new(groups, json_string(sf_group_name((enum sf_group)g)));
	}
	sel = sf_trace_selection_json(info->select, info->select == SF_TRACE_DENSITY
							    ? info->density : info->threshold);
	if (entries && groups && sel)
		h = json_pack("{s:s, s:i, s:s, s:s, s:i, s:o, s:[i, i], s:o, s:o, s:i, s:o*}",
			      "format", "sparseflash-trace", "version", SF_TRACE_VERSION,
			      "fingerprint", info->fingerprint.weights, "shape_fingerprint",
			      info->fingerprint.shape, "n_layers", info->n_layers, "entries", entries,
			      "layers", info->layer_lo, info->layer_hi, "groups", groups,
			      "selection", sel, "block_tokens", (int)info->block_tokens, "slots",
			      slots_json(info));
	else {
		json_decref(entries);
		json_decref(groups);
		json_decref(sel);
	}
	if (h && info->experts_used &&
	    json_object_set_new(h, "experts_used", json_integer(info->experts_used))) {
		json_decref(h);
		h = NULL;
	}
	if (h && meta && json_object_update_missing(h, meta)) {
		json_decref(h);
		h = NULL;
	}
	return h;
}

static void info_set_task(struct sf_trace_info *info)
{
	json_t *t = json_object_get(info->header, "task");
	info->task = json_is_string(t) ? json_string_value(t) : NULL;
}

int sf_trace_info_init(struct sf_trace_info *info, const struct sf_fingerprint *fingerprint,
		       int n_layers, const uint32_t entries[SF_NKINDS], uint32_t experts_used,
		       int layer_lo, int layer_hi, unsigned groups, enum sf_trace_select select,
		       double value, json_t *meta, struct sf_err *e)
{
	int ret;

	memset(info, 0, sizeof(*info));
	info->fingerprint = *fingerprint;
	info->n_layers = n_layers;
	memcpy(info->entries, entries, sizeof(info->entries));
	info->experts_used = experts_used;
	info->layer_lo = layer_lo;
	info->layer_hi = layer_hi;
	info->groups = groups;
	info->select = select;
	if (select == SF_TRACE_DENSITY)
		info->density = value;
	else
		info->threshold = value;
	info->block_tokens = SF_TRACE_BLOCK_TOKENS;
	if ((ret = build_slots(info, "trace", e)))
		goto fail;
	if (!(info->header = header_json(info, meta))) {
		ret = sf_err_set(e, -ENOMEM, "trace header: %s", sf_strerror(-ENOMEM));
		goto fail;
	}
	info_set_task(info);
	return 0;
fail:
	sf_trace_info_free(info);
	return ret;
}

void sf_trace_info_free(struct sf_trace_info *info)
{
	free(info->slots);
	json_decref(info->header);
	memset(info, 0, sizeof(*info));
}

static int info_copy(struct sf_trace_info *dst, const struct sf_trace_info *src,
		     struct sf_err *e)
{
	*dst = *src;
	dst->slots = malloc((size_t)src->nslots * sizeof(*src->slots));
	dst->header = json_deep_copy(src->header);
	if (!dst->slots || !dst->header) {
		free(dst->slots);
		json_decref(dst->header);
		memset(dst, 0, sizeof(*dst));
		return sf_err_set(e, -ENOMEM, "trace header: %s", sf_strerror(-ENOMEM));
	}
	memcpy(dst->slots, src->slots, (size_t)src->nslots * sizeof(*src->slots));
	info_set_task(dst);
	return 0;
}

int sf_trace_slot_index(const struct sf_trace_info *info, int layer, enum sf_group g)
{
	if (layer < info->layer_lo || layer > info->layer_hi || !(info->groups & (1u << g)))
		return -1;
	int per_layer = __builtin_popcount(info->groups);
	int before = __builtin_popcount(info->groups & ((1u << g) - 1));
	return (layer - info->layer_lo) * per_layer + before;
}

// ----------------------------------------------------------------------------
// active sets

static uint32_t row_popcount(const uint64_t *row, uint32_t words)
{
	uint32_t c = 0;
	for (uint32_t w = 0; w < words; w++)
		c += (uint32_t)__builtin_popcountll(row[w]);
	return c;
}

/* Bits past n in the last word must be clear. */
static uint64_t tail_mask(uint32_t n)
{
	return n % 64 ? ~0ull << (n % 64) : 0;
}

/* A token's active set of the wrong size, at "token N" (the writer) or
 * "block N" (the reader). */
static int count_error(struct sf_err *e, int code, const char *name, const char *at,
		       unsigned long long n, const struct sf_trace_info *info,
		       const struct sf_trace_slot *sl, uint32_t count)
{
	if (sl->group == SF_GROUP_EXPERTS)
		return sf_err_set(e, code, "%s: %s %llu: layer %d experts: %u picked, the router "
				  "picks 1 to %u", name, at, n, sl->layer, count, sl->k);
	return sf_err_set(e, code, "%s: %s %llu: layer %d %s: %u active entries, density %g "
			  "selects %u", name, at, n, sl->layer, sf_group_name(sl->group), count,
			  info->density, sl->k);
}

// ----------------------------------------------------------------------------
// writer

struct sf_trace_writer {
	FILE *f;
	const char *name;
	struct sf_trace_info info;
	uint64_t **rows;	/* (nslots) -> (block_tokens, words) bitmaps of the block */
	unsigned char *recorded;	/* (nslots) row handed out in the current token */
	double **sums;		/* (nslots) -> (entries) sum of |value| */
	uint32_t ntok;		/* tokens in the current block */
	uint64_t tokens;	/* tokens written or buffered */
	unsigned char *buf;	/* encoded payload */
	size_t buf_cap;
};

int sf_trace_writer_open(struct sf_trace_writer **out, FILE *f, const char *name,
			 const struct sf_trace_info *info, struct sf_err *e)
{
	struct sf_trace_writer *w = calloc(1, sizeof(*w));
	int ret;

	if (!w)
		return sf_err_set(e, -ENOMEM, "%s: %s", name, sf_strerror(-ENOMEM));
	w->f = f;
	w->name = name;
	if ((ret = info_copy(&w->info, info, e)))
		goto fail;
	int ns = info->nslots;
	w->rows = calloc((size_t)ns, sizeof(*w->rows));
	w->sums = calloc((size_t)ns, sizeof(*w->sums));
	w->recorded = calloc((size_t)ns, 1);
	uint64_t payload = 0;
	for (int s = 0; w->rows && w->sums && s < ns; s++) {
		const struct sf_trace_slot *sl = &info->slots[s];
		uint64_t row_bytes = (uint64_t)sl->words * 8;
		w->rows[s] = calloc(info->block_tokens, row_bytes);
		w->sums[s] = calloc(sl->entries, sizeof(double));
		if (!w->rows[s] || !w->sums[s])
			goto nomem;
		/* an index row (count + k) is never longer than a bitmap row */
		payload += info->block_tokens * row_bytes;
	}
	if (!w->rows || !w->sums || !w->recorded)
		goto nomem;
	/* the trailer holds every slot's sums at once */
	uint64_t trailer = 8;
	for (int s = 0; s < ns; s++)
		trailer += (uint64_t)info->slots[s].entries * 8;
	w->buf_cap = (size_t)(payload > trailer ? payload : trailer);
	if (!(w->buf = malloc(w->buf_cap)))
		goto nomem;

	char *text = json_dumps(info->header, JSON_COMPACT | JSON_REAL_PRECISION(17));
	if (!text)
		goto nomem;
	size_t hlen = strlen(text);
	unsigned char pre[16] = { 0 };
	memcpy(pre, SF_TRACE_MAGIC, 8);
	sf_put_le32(pre + 8, SF_TRACE_VERSION);
	sf_put_le32(pre + 12, (uint32_t)hlen);
	int bad = hlen > SF_TRACE_MAX_HEADER || fwrite(pre, 1, 16, f) != 16 ||
		  fwrite(text, 1, hlen, f) != hlen;
	free(text);
	if (bad) {
		ret = hlen > SF_TRACE_MAX_HEADER
			      ? sf_err_set(e, SF_ELIMIT, "%s: header of %zu bytes: at most %u",
					   name, hlen, SF_TRACE_MAX_HEADER)
			      : sf_err_set(e, -EIO, "%s: write error: %s", name, strerror(errno));
		goto fail;
	}
	*out = w;
	return 0;
nomem:
	ret = sf_err_set(e, -ENOMEM, "%s: trace buffers: %s", name, sf_strerror(-ENOMEM));
fail:
	sf_trace_writer_free(w);
	return ret;
}

const struct sf_trace_info *sf_trace_writer_info(const struct sf_trace_writer *w)
{
	return &w->info;
}

const char *sf_trace_writer_name(const struct sf_trace_writer *w)
{
	return w->name;
}

uint64_t *sf_trace_writer_row(struct sf_trace_writer *w, int slot)
{
	w->recorded[slot] = 1;
	return w->rows[slot] + (size_t)w->ntok * w->info.slots[slot].words;
}

double *sf_trace_writer_sums(struct sf_trace_writer *w, int slot)
{
	return w->sums[slot];
}

static int write_block(struct sf_trace_writer *w, uint32_t kind, uint32_t ntokens,
		       size_t payload, struct sf_err *e)
{
	unsigned char hdr[SF_TRACE_BLOCK_HEADER] = { 0 };

	sf_put_le32(hdr, kind);
	sf_put_le32(hdr + 4, ntokens);
	sf_put_le64(hdr + 8, payload);
	sf_put_le32(hdr + 16, sf_crc32c(0, w->buf, payload));
	if (fwrite(hdr, 1, sizeof(hdr), w->f) != sizeof(hdr) ||
	    fwrite(w->buf, 1, payload, w->f) != payload)
		return sf_err_set(e, -EIO, "%s: write error: %s", w->name,
				  errno ? strerror(errno) : "short write");
	return 0;
}

static int flush_tokens(struct sf_trace_writer *w, struct sf_err *e)
{
	unsigned char *p = w->buf;

	if (!w->ntok)
		return 0;
	for (int s = 0; s < w->info.nslots; s++) {
		const struct sf_trace_slot *sl = &w->info.slots[s];
		for (uint32_t t = 0; t < w->ntok; t++) {
			uint64_t *row = w->rows[s] + (size_t)t * sl->words;
			if (sl->encoding == SF_TRACE_BITMAP) {
				for (uint32_t i = 0; i < sl->words; i++, p += 8)
					sf_put_le64(p, row[i]);
				continue;
			}
			sf_put_le32(p, row_popcount(row, sl->words));
			p += 4;
			for (uint32_t i = 0; i < sl->words; i++)
				for (uint64_t b = row[i]; b; b &= b - 1, p += 4)
					sf_put_le32(p, i * 64 + (uint32_t)__builtin_ctzll(b));
		}
		memset(w->rows[s], 0, (size_t)w->ntok * sl->words * 8);
	}
	uint32_t ntok = w->ntok;
	w->ntok = 0;
	return write_block(w, SF_TRACE_KIND_TOKENS, ntok, (size_t)(p - w->buf), e);
}

int sf_trace_writer_token(struct sf_trace_writer *w, struct sf_err *e)
{
	for (int s = 0; s < w->info.nslots; s++) {
		const struct sf_trace_slot *sl = &w->info.slots[s];
		const uint64_t *row = w->rows[s] + (size_t)w->ntok * sl->words;
		if (!w->recorded[s])
			return sf_err_set(e, -EINVAL, "%s: token %llu: layer %d %s not recorded",
					  w->name, (unsigned long long)w->tokens, sl->layer,
					  sf_group_name(sl->group));
		if (row[sl->words - 1] & tail_mask(sl->entries))
			return sf_err_set(e, -EINVAL, "%s: token %llu: layer %d %s: bit beyond "
					  "entry %u", w->name, (unsigned long long)w->tokens,
					  sl->layer, sf_group_name(sl->group), sl->entries);
		if (!count_ok(sl, row_popcount(row, sl->words)))
			return count_error(e, -EINVAL, w->name, "token", w->tokens, &w->info, sl,
					   row_popcount(row, sl->words));
		w->recorded[s] = 0;
	}
	w->tokens++;
	if (++w->ntok == w->info.block_tokens)
		return flush_tokens(w, e);
	return 0;
}

int sf_trace_writer_finish(struct sf_trace_writer *w, struct sf_err *e)
{
	unsigned char *p = w->buf;
	int ret;

	if ((ret = flush_tokens(w, e)))
		return ret;
	sf_put_le64(p, w->tokens);
	p += 8;
	for (int s = 0; s < w->info.nslots; s++)
		for (uint32_t i = 0; i < w->info.slots[s].entries; i++, p += 8)
			sf_put_f64(p, w->sums[s][i]);
	if ((ret = write_block(w, SF_TRACE_KIND_SUMS, 0, (size_t)(p - w->buf), e)))
		return ret;
	if (fflush(w->f))
		return sf_err_set(e, -EIO, "%s: write error: %s", w->name, strerror(errno));
	return 0;
}

uint64_t sf_trace_writer_tokens(const struct sf_trace_writer *w)
{
	return w->tokens;
}

void sf_trace_writer_free(struct sf_trace_writer *w)
{
	if (!w)
		return;
	for (int s = 0; s < w->info.nslots; s++) {
		if (w->rows)
			free(w->rows[s]);
		if (w->sums)
			free(w->sums[s]);
	}
	free(w->rows);
	free(w->sums);
	free(w->recorded);
	free(w->buf);
	sf_trace_info_free(&w->info);
	free(w);
}

// ----------------------------------------------------------------------------
// reader

struct sf_trace_reader {
	struct sf_stream in;
	struct sf_trace_info info;
	uint64_t blocks;	/* blocks read */
	uint64_t tokens;
	uint64_t **rows;	/* (nslots) -> (block_tokens, words) */
	double **sums;		/* (nslots) -> (entries), after the trailer */
	unsigned char *buf;
	size_t buf_cap;
	int done;
};

/* The header's fields into r->info, every one checked, and its slot list
 * against the one the fields imply. */
static int parse_header(struct sf_trace_reader *r, json_t *h, struct sf_err *e)
{
	struct sf_trace_info *info = &r->info;
	const char *name = r->in.name;
	json_t *v, *layers, *groups, *slots;
	char where[SF_ERR_MAX];
	int64_t x;
	int ret;

	info->header = h;
	snprintf(where, sizeof(where), "%s: header", name);
	v = json_object_get(h, "format");
	if (!json_is_string(v) || strcmp(json_string_value(v), "sparseflash-trace") != 0)
		return sf_err_set(e, SF_EFORMAT, "%s: header: \"format\" is not "
				  "\"sparseflash-trace\"", name);
	if ((ret = sf_fingerprint_parse(&info->fingerprint, h, where, e)))
		return ret;
	if ((ret = sf_json_int(h, "n_layers", 1, SF_TRACE_MAX_LAYERS, &x, where, e)))
		return ret;
	info->n_layers = (int)x;
	if ((ret = sf_json_int(h, "block_tokens", 1, SF_TRACE_MAX_BLOCK_TOKENS, &x, where, e)))
		return ret;
	info->block_tokens = (uint32_t)x;
	snprintf(where, sizeof(where), "%s: header: \"entries\"", name);
	v = json_object_get(h, "entries");
	for (int g = 0; g < SF_NGROUPS; g++) {
		if ((ret = sf_json_int(v, sf_group_name((enum sf_group)g), 1, SF_TRACE_MAX_ENTRIES,
				       &x, where, e)))
			return ret;
		info->entries[g] = (uint32_t)x;
	}
	/* version 3: a mixture's n_experts and experts a token; a dense
	 * model's header has neither */
	if (r->in.version >= 3 && sf_json_has(v, "experts")) {
		if ((ret = sf_json_int(v, "experts", 1, SF_TRACE_MAX_ENTRIES, &x, where, e)))
			return ret;
		info->entries[SF_GROUP_EXPERTS] = (uint32_t)x;
		snprintf(where, sizeof(where), "%s: header", name);
		if ((ret = sf_json_int(h, "experts_used", 1, x, &x, where, e)))
			return ret;
		info->experts_used = (uint32_t)x;
	}
	layers = json_object_get(h, "layers");
	if (!json_is_array(layers) || json_array_size(layers) != 2 ||
	    !json_is_integer(json_array_get(layers, 0)) ||
	    !json_is_integer(json_array_get(layers, 1)))
		return sf_err_set(e, SF_EFORMAT, "%s: header: \"layers\" is not [first, last]", name);
	info->layer_lo = (int)json_integer_value(json_array_get(layers, 0));
	info->layer_hi = (int)json_integer_value(json_array_get(layers, 1));
	if (json_integer_value(json_array_get(layers, 0)) != info->layer_lo ||
	    json_integer_value(json_array_get(layers, 1)) != info->layer_hi)
		return sf_err_set(e, SF_EFORMAT, "%s: header: \"layers\" out of range", name);
	groups = json_object_get(h, "groups");
	if (!json_is_array(groups))
		return sf_err_set(e, SF_EFORMAT, "%s: header: \"groups\" is not an array", name);
	for (size_t i = 0; i < json_array_size(groups); i++) {
		enum sf_group g;
		v = json_array_get(groups, i);
		if (!json_is_string(v) || sf_kind_parse(json_string_value(v), &g) ||
		    (info->groups & (1u << g)))
			return sf_err_set(e, SF_EFORMAT, "%s: header: \"groups\"[%zu] is not a "
					  "group or repeated", name, i);
		info->groups |= 1u << g;
	}
	double value;
	if (sf_trace_selection_parse(json_object_get(h, "selection"), &info->select, &value))
		return sf_err_set(e, SF_EFORMAT, "%s: header: \"selection\" is neither density "
				  "nor threshold", name);
	if (info->select == SF_TRACE_DENSITY)
		info->density = value;
	else
		info->threshold = value;
	if ((ret = build_slots(info, name, e))) {
		if (e && ret == -EINVAL)
			e->code = SF_EFORMAT;	/* a bad header, not a bad request */
		return ret == -EINVAL ? SF_EFORMAT : ret;
	}
	slots = json_object_get(h, "slots");
	json_t *want = slots_json(info);
	int same = want && json_equal(slots, want);
	json_decref(want);
	if (!same)
		return sf_err_set(e, SF_EFORMAT, "%s: header: \"slots\" does not match the layers, "
				  "groups, entries and selection", name);
	info_set_task(info);
	return 0;
}

static const struct sf_stream_kind trace_kind = {
	SF_TRACE_MAGIC, SF_TRACE_VERSION, SF_TRACE_MAX_HEADER, 1, "trace", SF_TRACE_MIN_VERSION,
};

int sf_trace_open(struct sf_trace_reader **out, const char *path, struct sf_err *e)
{
	struct sf_trace_reader *r = calloc(1, sizeof(*r));
	json_t *h;
	int ret;

	if (!r)
		return sf_err_set(e, -ENOMEM, "%s: %s", path, sf_strerror(-ENOMEM));
	if ((ret = sf_stream_open(&r->in, path, &trace_kind, &h, e))) {
		free(r);
		return ret;
	}
	if ((ret = parse_header(r, h, e)))
		goto fail;

	const struct sf_trace_info *info = &r->info;
	uint64_t payload = 0, trailer = 8;
	for (int s = 0; s < info->nslots; s++) {
		payload += (uint64_t)info->block_tokens * info->slots[s].words * 8;
		trailer += (uint64_t)info->slots[s].entries * 8;
	}
	/* rows, sums and the read buffer: a header alone must not commit the
	 * reader to more memory than real models need */
	uint64_t need = payload + trailer + (payload > trailer ? payload : trailer);
	if (need > SF_TRACE_MAX_BUFFERS) {
		ret = sf_err_set(e, SF_ELIMIT, "%s: header: %u tokens per block over %d slots need "
				 "%llu bytes of buffers: at most %llu", r->in.name, info->block_tokens,
				 info->nslots, (unsigned long long)need,
				 (unsigned long long)SF_TRACE_MAX_BUFFERS);
		goto fail;
	}
	r->rows = calloc((unsigned)info->nslots, sizeof(*r->rows));
	r->sums = calloc((unsigned)info->nslots, sizeof(*r->sums));
	for (int s = 0; r->rows && r->sums && s < info->nslots; s++) {
		r->rows[s] = malloc((size_t)info->block_tokens * info->slots[s].words * 8);
		r->sums[s] = calloc(info->slots[s].entries, sizeof(double));
		if (!r->rows[s] || !r->sums[s])
			break;
	}
	r->buf_cap = (size_t)(payload > trailer ? payload : trailer);
	r->buf = r->rows && r->sums ? malloc(r->buf_cap) : NULL;
	if (!r->buf || !r->rows[info->nslots - 1] || !r->sums[info->nslots - 1]) {
		ret = sf_err_set(e, -ENOMEM, "%s: trace buffers: %s", r->in.name, sf_strerror(-ENOMEM));
		goto fail;
	}
	*out = r;
	return 0;
fail:
	sf_trace_close(r);
	return ret;
}

void sf_trace_close(struct sf_trace_reader *r)
{
	if (!r)
		return;
	sf_stream_close(&r->in);
	for (int s = 0; s < r->info.nslots; s++) {
		if (r->rows)
			free(r->rows[s]);
		if (r->sums)
			free(r->sums[s]);
	}
	free(r->rows);
	free(r->sums);
	free(r->buf);
	sf_trace_info_free(&r->info);
	free(r);
}

const struct sf_trace_info *sf_trace_reader_info(const struct sf_trace_reader *r)
{
	return &r->info;
}

const char *sf_trace_reader_name(const struct sf_trace_reader *r)
{
	return r->in.name;
}

/* Decodes a tokens block's payload into the row buffers, checking every
 * active set against the selection. */
static int decode_tokens(struct sf_trace_reader *r, uint32_t ntok, size_t len,
			 struct sf_err *e)
{
	const unsigned char *p = r->buf, *end = r->buf + len;
	unsigned long long blk = (unsigned long long)r->blocks;

	for (int s = 0; s < r->info.nslots; s++) {
		const struct sf_trace_slot *sl = &r->info.slots[s];
		for (uint32_t t = 0; t < ntok; t++) {
			uint64_t *row = r->rows[s] + (size_t)t * sl->words;
			if (sl->encoding == SF_TRACE_BITMAP) {
				if ((size_t)(end - p) < (size_t)sl->words * 8)
					goto short_payload;
				for (uint32_t i = 0; i < sl->words; i++, p += 8)
					row[i] = sf_get_le64(p);
				if (row[sl->words - 1] & tail_mask(sl->entries))
					return sf_err_set(e, SF_EFORMAT, "%s: block %llu: layer %d %s: "
							  "bit beyond entry %u", r->in.name, blk,
							  sl->layer, sf_group_name(sl->group),
							  sl->entries);
			} else {
				if (end - p < 4)
					goto short_payload;
				uint32_t cnt = sf_get_le32(p);
				p += 4;
				if (!count_ok(sl, cnt))
					goto wrong_count;
				if ((size_t)(end - p) < (size_t)cnt * 4)
					goto short_payload;
				memset(row, 0, (size_t)sl->words * 8);
				uint32_t prev = 0;
				for (uint32_t i = 0; i < cnt; i++, p += 4) {
					uint32_t idx = sf_get_le32(p);
					if (idx >= sl->entries || (i && idx <= prev))
						return sf_err_set(e, SF_EFORMAT, "%s: block %llu: layer "
								  "%d %s: index %u out of order or "
								  "range", r->in.name, blk, sl->layer,
								  sf_group_name(sl->group), idx);
					row[idx / 64] |= 1ull << (idx % 64);
					prev = idx;
				}
			}
			if (!count_ok(sl, row_popcount(row, sl->words)))
				goto wrong_count;
			continue;
wrong_count:
			return count_error(e, SF_EFORMAT, r->in.name, "block", blk, &r->info, sl,
					   row_popcount(row, sl->words));
		}
	}
	if (p != end)
		return sf_err_set(e, SF_EFORMAT, "%s: block %llu: %zu bytes of payload, %zu used",
				  r->in.name, blk, len, (size_t)(p - r->buf));
	return 0;
short_payload:
	return sf_err_set(e, SF_EFORMAT, "%s: block %llu: payload of %zu bytes ends inside an "
			  "active set", r->in.name, blk, len);
}

static int decode_sums(struct sf_trace_reader *r, size_t len, struct sf_err *e)
{
	const unsigned char *p = r->buf;
	size_t want = 8;

	for (int s = 0; s < r->info.nslots; s++)
		want += (size_t)r->info.slots[s].entries * 8;
	if (len != want)
		return sf_err_set(e, SF_EFORMAT, "%s: sums trailer of %zu bytes: expected %zu",
				  r->in.name, len, want);
	if (sf_get_le64(p) != r->tokens)
		return sf_err_set(e, SF_EFORMAT, "%s: sums trailer counts %llu tokens, the "
				  "blocks hold %llu", r->in.name, (unsigned long long)sf_get_le64(p),
				  (unsigned long long)r->tokens);
	p += 8;
	for (int s = 0; s < r->info.nslots; s++) {
		for (uint32_t i = 0; i < r->info.slots[s].entries; i++, p += 8) {
			double v = sf_get_f64(p);
			if (!(v >= 0.0) || !isfinite(v))
				return sf_err_set(e, SF_EFORMAT, "%s: sums trailer: layer %d %s entry "
						  "%u: %g is not a finite sum of magnitudes", r->in.name,
						  r->info.slots[s].layer,
						  sf_group_name(r->info.slots[s].group), i, v);
			r->sums[s][i] = v;
		}
	}
	return 0;
}

int sf_trace_next(struct sf_trace_reader *r, uint32_t *ntokens, struct sf_err *e)
{
	unsigned char hdr[SF_TRACE_BLOCK_HEADER];
	char what[64];
	int ret;

	if (r->done)
		return 0;
	snprintf(what, sizeof(what), "block %llu", (unsigned long long)r->blocks);
	if ((ret = sf_stream_read(&r->in, hdr, sizeof(hdr), what, e)))
		return ret;
	uint32_t kind = sf_get_le32(hdr), ntok = sf_get_le32(hdr + 4);
	uint64_t len = sf_get_le64(hdr + 8);
	uint32_t crc = sf_get_le32(hdr + 16);
	unsigned long long blk = (unsigned long long)r->blocks;

	if (sf_get_le32(hdr + 20) != 0)
		return sf_err_set(e, SF_EFORMAT, "%s: block %llu: reserved word is not 0", r->in.name, blk);
	if (kind == SF_TRACE_KIND_TOKENS) {
		if (ntok < 1 || ntok > r->info.block_tokens)
			return sf_err_set(e, SF_EFORMAT, "%s: block %llu: %u tokens: expected 1..%u",
					  r->in.name, blk, ntok, r->info.block_tokens);
	} else if (kind == SF_TRACE_KIND_SUMS) {
		if (ntok != 0)
			return sf_err_set(e, SF_EFORMAT, "%s: sums trailer: %u tokens: expected 0",
					  r->in.name, ntok);
	} else {
		return sf_err_set(e, SF_EFORMAT, "%s: block %llu: kind %u: expected %d or %d",
				  r->in.name, blk, kind, SF_TRACE_KIND_TOKENS, SF_TRACE_KIND_SUMS);
	}
	if (len > r->buf_cap)
		return sf_err_set(e, SF_EFORMAT, "%s: block %llu: payload of %llu bytes: at most %zu",
				  r->in.name, blk, (unsigned long long)len, r->buf_cap);
	if ((ret = sf_stream_read(&r->in, r->buf, (size_t)len, what, e)))
		return ret;
	if (sf_crc32c(0, r->buf, (size_t)len) != crc)
		return sf_err_set(e, SF_EFORMAT, "%s: block %llu: checksum 0x%08x, the block says "
				  "0x%08x", r->in.name, blk, sf_crc32c(0, r->buf, (size_t)len), crc);
	r->blocks++;
	if (kind == SF_TRACE_KIND_SUMS) {
		if ((ret = decode_sums(r, (size_t)len, e)))
			return ret;
		if (fgetc(r->in.f) != EOF)
			return sf_err_set(e, SF_EFORMAT, "%s: data after the sums trailer at byte %llu",
					  r->in.name, (unsigned long long)r->in.offset);
		r->done = 1;
		return 0;
	}
	if ((ret = decode_tokens(r, ntok, (size_t)len, e)))
		return ret;
	r->tokens += ntok;
	*ntokens = ntok;
	return 1;
}

const uint64_t *sf_trace_rows(const struct sf_trace_reader *r, int slot)
{
	return r->rows[slot];
}

const double *sf_trace_sums(const struct sf_trace_reader *r, int slot)
{
	return r->sums[slot];
}

uint64_t sf_trace_tokens(const struct sf_trace_reader *r)
{
	return r->tokens;
}
