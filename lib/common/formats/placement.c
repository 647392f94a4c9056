/* placement.json reader and writer (man/sf-formats.5, PLACEMENT): every
 * permutation checked before it is trusted. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonfile.h"
#include "base/outfile.h"
#include "formats/placement.h"

static const char *const method_names[] = { "identity", "frequency", "coact" };

const char *sf_place_method_name(enum sf_place_method m)
{
	return (unsigned)m < sizeof method_names / sizeof *method_names ? method_names[m] : "?";
}

int sf_place_method_parse(const char *name, enum sf_place_method *m)
{
	for (size_t i = 0; i < sizeof method_names / sizeof *method_names; i++)
		if (strcmp(name, method_names[i]) == 0) {
			*m = (enum sf_place_method)i;
			return 0;
		}
	return -1;
}

int sf_placement_init(struct sf_placement *pl, const struct sf_fingerprint *fingerprint, int ngroups,
		      struct sf_err *e)
{
	*pl = (struct sf_placement){ .ngroups = ngroups };
	pl->fingerprint = *fingerprint;
	pl->groups = calloc(ngroups > 0 ? (size_t)ngroups : 1, sizeof *pl->groups);
	if (!pl->groups)
		return sf_err_set(e, -ENOMEM, "placement of %d groups: out of memory", ngroups);
	return 0;
}

int sf_placement_set(struct sf_placement *pl, int i, int layer, enum sf_group g, uint32_t n,
		     enum sf_place_method method, json_t *options, uint64_t tokens,
		     double predicted_runs, double path_cost, const uint32_t *perm,
		     struct sf_err *e)
{
	struct sf_placement_group *G = &pl->groups[i];

	free(G->perm);
	json_decref(G->options);
	*G = (struct sf_placement_group){ layer, g, n, method, json_incref(options), tokens,
					  predicted_runs, path_cost, malloc(sizeof *perm * (n ? n : 1)) };
	if (!G->perm)
		return sf_err_set(e, -ENOMEM, "placement of %u entries: out of memory", n);
	memcpy(G->perm, perm, sizeof *perm * n);
	return 0;
}

void sf_placement_free(struct sf_placement *pl)
{
	for (int i = 0; pl->groups && i < pl->ngroups; i++) {
		free(pl->groups[i].perm);
		json_decref(pl->groups[i].options);
	}
	free(pl->groups);
	json_decref(pl->meta);
	*pl = (struct sf_placement){ 0 };
}

// --- writer

static json_t *group_json(const struct sf_placement_group *G)
{
	json_t *perm = json_array(), *o;

	for (uint32_t p = 0; perm && p < G->n; p++)
		if (json_array_append_new(perm, json_integer(G->perm[p]))) {
			json_decref(perm);
			return NULL;
		}
	o = json_pack("{s:i, s:s, s:I, s:s, s:O, s:I, s:f, s:f, s:o}", "layer", G->layer,
		      "group", sf_group_name(G->group), "entries", (json_int_t)G->n, "method",
		      sf_place_method_name(G->method), "options", G->options ? G->options : json_object(),
		      "tokens", (json_int_t)G->tokens, "predicted_runs_per_token", G->predicted_runs,
		      "path_cost", G->path_cost, "perm", perm);
	return o;
}

int sf_placement_write(const struct sf_placement *pl, const char *path, json_t *meta,
		       const char *const *inputs, struct sf_err *e)
{
	json_t *root, *groups = json_array();
	struct sf_outfile o;
	char *text = NULL;
	int ret = 0;

	root = json_pack("{s:s, s:i, s:s, s:s}", "format", SF_PLACEMENT_FORMAT, "version",
			 SF_PLACEMENT_VERSION, "fingerprint", pl->fingerprint.weights,
			 "shape_fingerprint", pl->fingerprint.shape);
	if (!root || !groups || (meta && json_object_update_missing(root, meta)))
		goto nomem;
	for (int i = 0; i < pl->ngroups; i++)
		if (json_array_append_new(groups, group_json(&pl->groups[i])))
			goto nomem;
	if (json_object_set(root, "groups", groups) ||
	    !(text = json_dumps(root, JSON_COMPACT)))
		goto nomem;
	if ((ret = sf_outfile_open(&o, path, 0, inputs, e)))
		goto out;
	if (fputs(text, o.f) == EOF || fputc('\n', o.f) == EOF) {
		ret = sf_err_set(e, -errno, "%s: write failed: %s", o.name, strerror(errno));
		sf_outfile_abort(&o);
		goto out;
	}
	ret = sf_outfile_commit(&o, e);
	goto out;
nomem:
	ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
out:
	free(text);
	json_decref(groups);
	json_decref(root);
	return ret;
}

// --- reader

int sf_placement_check_perm(const uint32_t *perm, size_t len, uint32_t n, const char *where,
			    struct sf_err *e)
{
	uint32_t *at = calloc(n ? n : 1, sizeof *at);	/* position + 1 of each index */
	uint64_t dup = UINT64_MAX, p1 = 0, p2 = 0, missing = UINT64_MAX;
	char extra[96] = "";

	if (!at)
		return sf_err_set(e, -ENOMEM, "%s: out of memory", where);
	for (size_t p = 0; p < len; p++) {
		if (perm[p] >= n) {
			free(at);
			return sf_err_set(e, SF_EFORMAT, "%s: perm[%zu] = %u is out of range: expected 0..%u",
					  where, p, perm[p], n - 1);
		}
		if (!at[perm[p]])
			at[perm[p]] = (uint32_t)p + 1;
		else if (dup == UINT64_MAX) {
			dup = perm[p];
			p1 = at[perm[p]] - 1;
			p2 = p;
		}
	}
	for (uint32_t i = 0; i < n && missing == UINT64_MAX; i++)
		if (!at[i])
			missing = i;
	free(at);
	if (len != n)
		snprintf(extra, sizeof extra, " (%zu indices for %u entries)", len, n);
	if (dup != UINT64_MAX && missing != UINT64_MAX)
		return sf_err_set(e, SF_EFORMAT, "%s: index %llu at positions %llu and %llu, index %llu "
				  "missing%s", where, (unsigned long long)dup, (unsigned long long)p1,
				  (unsigned long long)p2, (unsigned long long)missing, extra);
	if (dup != UINT64_MAX)
		return sf_err_set(e, SF_EFORMAT, "%s: index %llu at positions %llu and %llu%s", where,
				  (unsigned long long)dup, (unsigned long long)p1,
				  (unsigned long long)p2, extra);
	if (missing != UINT64_MAX)
		return sf_err_set(e, SF_EFORMAT, "%s: index %llu missing%s", where,
				  (unsigned long long)missing, extra);
	return 0;
}

static int read_group(struct sf_placement *pl, int i, json_t *o, const char *path,
		      struct sf_err *e)
{
	struct sf_placement_group *G = &pl->groups[i];
	char where[256];
	int64_t layer, n, tokens;
	json_t *perm, *opts;
	const char *gname, *mname;
	size_t len;
	int ret;

	snprintf(where, sizeof where, "%s: groups[%d]", path, i);
	if (!json_is_object(o))
		return sf_err_set(e, SF_EFORMAT, "%s: not an object", where);
	if ((ret = sf_json_int(o, "layer", 0, SF_PLACEMENT_MAX_LAYERS - 1, &layer, where, e)))
		return ret;
	gname = json_string_value(json_object_get(o, "group"));
	if (!gname || sf_kind_parse(gname, &G->group))
		return sf_err_set(e, SF_EFORMAT, "%s: \"group\" is not attn_in, attn_out, ffn_in, "
				  "ffn_out or experts", where);
	G->layer = (int)layer;
	snprintf(where, sizeof where, "%s: layer %d %s", path, G->layer, gname);
	for (int k = 0; k < i; k++)
		if (pl->groups[k].layer == G->layer && pl->groups[k].group == G->group)
			return sf_err_set(e, SF_EFORMAT, "%s: given twice", where);
	if ((ret = sf_json_int(o, "entries", 1, SF_PLACEMENT_MAX_ENTRIES, &n, where, e)) ||
	    (ret = sf_json_int(o, "tokens", 0, INT64_MAX, &tokens, where, e)))
		return ret;
	G->n = (uint32_t)n;
	G->tokens = (uint64_t)tokens;
	mname = json_string_value(json_object_get(o, "method"));
	if (!mname || sf_place_method_parse(mname, &G->method))
		return sf_err_set(e, SF_EFORMAT, "%s: \"method\" is not identity, frequency or coact",
				  where);
	opts = json_object_get(o, "options");
	if (!json_is_object(opts))
		return sf_err_set(e, SF_EFORMAT, "%s: \"options\" missing or not an object", where);
	G->options = json_incref(opts);
	G->predicted_runs = json_number_value(json_object_get(o, "predicted_runs_per_token"));
	G->path_cost = json_number_value(json_object_get(o, "path_cost"));
	perm = json_object_get(o, "perm");
	len = json_array_size(perm);
	if (!json_is_array(perm) || len > (size_t)G->n + SF_PLACEMENT_MAX_ENTRIES)
		return sf_err_set(e, SF_EFORMAT, "%s: \"perm\" missing or not an array of %u indices",
				  where, G->n);
	if (!(G->perm = malloc(sizeof *G->perm * (len ? len : 1))))
		return sf_err_set(e, -ENOMEM, "%s: out of memory", where);
	for (size_t p = 0; p < len; p++) {
		json_t *v = json_array_get(perm, p);
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) >= (json_int_t)G->n)
			return sf_err_set(e, SF_EFORMAT, "%s: perm[%zu] is not an index in 0..%u", where,
					  p, G->n - 1);
		G->perm[p] = (uint32_t)json_integer_value(v);
	}
	return sf_placement_check_perm(G->perm, len, G->n, where, e);
}

int sf_placement_read(struct sf_placement *pl, const char *path, struct sf_err *e)
{
	json_t *root, *v, *groups;
	const char *s;
	int ret;

	*pl = (struct sf_placement){ 0 };
	if ((ret = sf_json_load(&root, path, SF_PLACEMENT_MAX_FILE, e)))
		return ret;
	if (!json_is_object(root) || !(s = json_string_value(json_object_get(root, "format"))) ||
	    strcmp(s, SF_PLACEMENT_FORMAT) != 0) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: not a placement: \"format\" is not \"%s\"", path,
				 SF_PLACEMENT_FORMAT);
		goto out;
	}
	v = json_object_get(root, "version");
	if (!json_is_integer(v) || json_integer_value(v) != SF_PLACEMENT_VERSION) {
		ret = sf_fingerprint_version(path, "placement", json_integer_value(v),
					     SF_PLACEMENT_VERSION, e);
		goto out;
	}
	struct sf_fingerprint fp;
	if ((ret = sf_fingerprint_parse(&fp, root, path, e)))
		goto out;
	groups = json_object_get(root, "groups");
	if (!json_is_array(groups) || json_array_size(groups) == 0 ||
	    json_array_size(groups) > (size_t)SF_PLACEMENT_MAX_LAYERS * SF_NGROUPS) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: \"groups\" missing, empty or longer than %d", path,
				 SF_PLACEMENT_MAX_LAYERS * SF_NGROUPS);
		goto out;
	}
	if ((ret = sf_placement_init(pl, &fp, (int)json_array_size(groups), e)))
		goto out;
	for (int i = 0; i < pl->ngroups && !ret; i++)
		ret = read_group(pl, i, json_array_get(groups, (size_t)i), path, e);
	if (!ret && (pl->meta = json_deep_copy(root)))
		for (const char *const *k = (const char *const[]){ "format", "version", "fingerprint",
								   "shape_fingerprint", "groups", NULL }; *k; k++)
			json_object_del(pl->meta, *k);
out:
	if (ret)
		sf_placement_free(pl);
	json_decref(root);
	return ret;
}

const struct sf_placement_group *sf_placement_lookup(const struct sf_placement *pl,
						     const char *path, int layer, enum sf_group g,
						     uint32_t n, const char *other, struct sf_err *e)
{
	for (int i = 0; i < pl->ngroups; i++) {
		const struct sf_placement_group *G = &pl->groups[i];
		if (G->layer != layer || G->group != g)
			continue;
		if (G->n != n) {
			sf_err_set(e, SF_EMISMATCH, "%s: layer %d %s: %u entries, %s has %u", path, layer,
				   sf_group_name(g), G->n, other, n);
			return NULL;
		}
		return G;
	}
	sf_err_set(e, SF_EMISMATCH, "%s: no permutation for layer %d %s of %s", path, layer,
		   sf_group_name(g), other);
	return NULL;
}
