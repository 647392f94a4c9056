/* SelectInfer score files: the one reader (sf_scores_read/parse, every
 * field checked) and the writers (sf_scores_from_coact, sf_scores_merge).
 * See scores.h; the format is in man/sf-formats.5 (SCORES). */
#include "formats/scores.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/jsonfile.h"
#include "formats/trace.h"

// ----------------------------------------------------------------------------
// the reader

void sf_scores_free(struct sf_scores *s)
{
	if (!s)
		return;
	for (int i = 0; i < s->nslots; i++) {
		free(s->slots[i].score);
		free(s->slots[i].freq);
		json_decref(s->slots[i].tasks);
	}
	json_decref(s->selection);
	free(s->slots);
	free(s->task);
	memset(s, 0, sizeof(*s));
}

static int slot_cmp(const void *pa, const void *pb)
{
	const struct sf_scores_slot *a = pa, *b = pb;
	if (a->layer != b->layer)
		return a->layer < b->layer ? -1 : 1;
	return (a->group > b->group) - (a->group < b->group);
}

/* values[] of a slot: n finite numbers in [0, max]. */
static int read_values(const char *name, const struct sf_scores_slot *sl, json_t *o,
		       const char *key, double max, double *out, struct sf_err *e)
{
	json_t *a = json_object_get(o, key);
	const char *g = sf_group_name(sl->group);

	if (!json_is_array(a))
		return sf_err_set(e, SF_EFORMAT, "%s: layer %d %s: \"%s\" is not an array", name,
				  sl->layer, g, key);
	if (json_array_size(a) != sl->entries)
		return sf_err_set(e, SF_EFORMAT, "%s: layer %d %s: \"%s\" has %zu values, expected %u",
				  name, sl->layer, g, key, json_array_size(a), sl->entries);
	for (uint32_t i = 0; i < sl->entries; i++) {
		json_t *v = json_array_get(a, i);
		double x = json_is_number(v) ? json_number_value(v) : NAN;
		if (!json_is_number(v))
			return sf_err_set(e, SF_EFORMAT, "%s: layer %d %s: %s[%u] is not a number",
					  name, sl->layer, g, key, i);
		if (!isfinite(x) || x < 0 || x > max)
			return sf_err_set(e, SF_EFORMAT, "%s: layer %d %s: %s[%u] is %g: expected "
					  "0..%g", name, sl->layer, g, key, i, x, max);
		out[i] = x;
	}
	return 0;
}

static int parse_slot(struct sf_scores_slot *sl, json_t *o, size_t i, const char *name,
		      const struct sf_config *cfg, struct sf_err *e)
{
	json_t *v = json_object_get(o, "group"), *t;
	char where[SF_ERR_MAX];
	int64_t x;
	const char *k;
	int ret;

	if (!json_is_object(o))
		return sf_err_set(e, SF_EFORMAT, "%s: slots[%zu] is not an object", name, i);
	snprintf(where, sizeof(where), "%s: slots[%zu]", name, i);
	if ((ret = sf_json_int(o, "layer", 0, SF_TRACE_MAX_LAYERS - 1, &x, where, e)))
		return ret;
	sl->layer = (int)x;
	if (!json_is_string(v) || sf_group_parse(json_string_value(v), &sl->group))
		return sf_err_set(e, SF_EFORMAT, "%s: slots[%zu]: \"group\" is not attn_in, attn_out, "
				  "ffn_in or ffn_out", name, i);
	if ((ret = sf_json_int(o, "entries", 1, SF_TRACE_MAX_ENTRIES, &x, where, e)))
		return ret;
	sl->entries = (uint32_t)x;
	if (cfg && sl->layer >= cfg->n_layers)
		return sf_err_set(e, SF_EMISMATCH, "%s: slots[%zu]: layer %d: the model has %d layers",
				  name, i, sl->layer, cfg->n_layers);
	if (cfg && sl->entries != sf_group_entries(cfg, sl->group))
		return sf_err_set(e, SF_EMISMATCH, "%s: layer %d %s: %u entries, the model's %zu",
				  name, sl->layer, sf_group_name(sl->group), sl->entries,
				  sf_group_entries(cfg, sl->group));
	snprintf(where, sizeof(where), "%s: layer %d %s", name, sl->layer,
		 sf_group_name(sl->group));
	if ((ret = sf_json_int(o, "tokens", 0, INT64_MAX, &x, where, e)))
		return ret;
	sl->tokens = (uint64_t)x;
	t = json_object_get(o, "tasks");
	if (!json_is_object(t))
		return sf_err_set(e, SF_EFORMAT, "%s: layer %d %s: \"tasks\" is not an object", name,
				  sl->layer, sf_group_name(sl->group));
	json_object_foreach(t, k, v)
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return sf_err_set(e, SF_EFORMAT, "%s: layer %d %s: tasks \"%s\" is not a "
					  "count", name, sl->layer, sf_group_name(sl->group), k);
	sl->tasks = json_incref(t);
	if (!(sl->score = malloc((size_t)sl->entries * sizeof(double))) ||
	    !(sl->freq = malloc((size_t)sl->entries * sizeof(double))))
		return sf_err_set(e, -ENOMEM, "%s: %s", name, sf_strerror(-ENOMEM));
	ret = read_values(name, sl, o, "scores", HUGE_VAL, sl->score, e);
	return ret ? ret : read_values(name, sl, o, "frequency", 1.0, sl->freq, e);
}

int sf_scores_parse(struct sf_scores *s, json_t *doc, const char *name,
		    const struct sf_fingerprint *fingerprint, const char *model,
		    const struct sf_config *cfg, struct sf_err *e)
{
	json_t *v, *slots;
	int ret;

	memset(s, 0, sizeof(*s));
	if (!json_is_object(doc))
		return sf_err_set(e, SF_EFORMAT, "%s: not a JSON object", name);
	v = json_object_get(doc, "format");
	if (!json_is_string(v) || strcmp(json_string_value(v), SF_SCORES_FORMAT))
		return sf_err_set(e, SF_EFORMAT, "%s: \"format\" is not \"%s\"", name,
				  SF_SCORES_FORMAT);
	v = json_object_get(doc, "version");
	if (!json_is_integer(v) || json_integer_value(v) != SF_SCORES_VERSION)
		return sf_fingerprint_version(name, "scores", json_integer_value(v),
					      SF_SCORES_VERSION, e);
	if ((ret = sf_fingerprint_parse(&s->fingerprint, doc, name, e)) ||
	    (fingerprint && (ret = sf_fingerprint_check(&s->fingerprint, name, "scores",
							fingerprint, model, e))))
		return ret;
	v = json_object_get(doc, "kind");
	if (!json_is_string(v) || (strcmp(json_string_value(v), "task") &&
				   strcmp(json_string_value(v), "model")))
		return sf_err_set(e, SF_EFORMAT, "%s: \"kind\" is not \"task\" or \"model\"", name);
	s->is_task = strcmp(json_string_value(v), "task") == 0;
	v = json_object_get(doc, "task");
	if (s->is_task && !json_is_string(v))
		return sf_err_set(e, SF_EFORMAT, "%s: kind \"task\" without a \"task\" name", name);
	if (s->is_task && !(s->task = strdup(json_string_value(v))))
		goto nomem;
	s->selection = json_incref(json_object_get(doc, "selection"));
	slots = json_object_get(doc, "slots");
	if (!json_is_array(slots) || !json_array_size(slots)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: \"slots\" is not a non-empty array", name);
		goto fail;
	}
	if (json_array_size(slots) > (size_t)SF_TRACE_MAX_LAYERS * SF_NGROUPS) {
		ret = sf_err_set(e, SF_ELIMIT, "%s: %zu slots, more than the limit of %d", name,
				 json_array_size(slots), SF_TRACE_MAX_LAYERS * SF_NGROUPS);
		goto fail;
	}
	if (!(s->slots = calloc(json_array_size(slots), sizeof(*s->slots))))
		goto nomem;
	for (size_t i = 0; i < json_array_size(slots); i++) {
		s->nslots++;
		if ((ret = parse_slot(&s->slots[i], json_array_get(slots, i), i, name, cfg, e)))
			goto fail;
	}
	qsort(s->slots, (size_t)s->nslots, sizeof(*s->slots), slot_cmp);
	for (int i = 1; i < s->nslots; i++)
		if (!slot_cmp(&s->slots[i - 1], &s->slots[i])) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: layer %d %s listed twice", name,
					 s->slots[i].layer, sf_group_name(s->slots[i].group));
			goto fail;
		}
	return 0;
nomem:
	ret = sf_err_set(e, -ENOMEM, "%s: %s", name, sf_strerror(-ENOMEM));
fail:
	sf_scores_free(s);
	return ret;
}

int sf_scores_read(struct sf_scores *s, const char *path, const struct sf_fingerprint *fingerprint,
		   const char *model, const struct sf_config *cfg, struct sf_err *e)
{
	json_t *doc;
	int ret;

	memset(s, 0, sizeof(*s));
	if ((ret = sf_json_load(&doc, path, SF_SCORES_MAX_BYTES, e)))
		return ret;
	ret = sf_scores_parse(s, doc, path, fingerprint, model, cfg, e);
	json_decref(doc);
	return ret;
}

const struct sf_scores_slot *sf_scores_find(const struct sf_scores *s, int layer, enum sf_group g)
{
	struct sf_scores_slot key = { .layer = layer, .group = g };
	if (!s || !s->nslots)
		return NULL;
	return bsearch(&key, s->slots, (size_t)s->nslots, sizeof(*s->slots), slot_cmp);
}

// ----------------------------------------------------------------------------
// the writers

/* "kind" and "task" of a set of per-slot task maps: one task covering
 * every token of every slot, or a mix. */
static const char *single_task(const struct sf_coact *c)
{
	const char *task = NULL;
	for (int s = 0; s < c->nslots; s++) {
		json_t *t = c->slots[s].tasks;
		const char *k;
		json_t *v;
		if (json_object_size(t) != 1)
			return NULL;
		json_object_foreach(t, k, v) {
			if (json_integer_value(v) != (json_int_t)c->slots[s].tokens ||
			    (task && strcmp(task, k) != 0))
				return NULL;
			task = k;
		}
	}
	return task;
}

static json_t *real_array(const double *v, uint32_t n)
{
	json_t *a = json_array();
	for (uint32_t i = 0; a && i < n; i++)
		if (json_array_append_new(a, json_real(v[i]))) {
			json_decref(a);
			return NULL;
		}
	return a;
}

static json_t *scores_doc(const struct sf_fingerprint *fingerprint, json_t *selection,
			  const char *task, json_t *slots)
{
	return json_pack("{s:s, s:i, s:s, s:s, s:s, s:s?, s:o, s:o}", "format", SF_SCORES_FORMAT,
			 "version", SF_SCORES_VERSION, "fingerprint", fingerprint->weights,
			 "shape_fingerprint", fingerprint->shape, "kind",
			 task ? "task" : "model", "task", task, "selection", selection, "slots",
			 slots);
}

json_t *sf_scores_from_coact(const struct sf_coact *c, struct sf_err *e)
{
	json_t *slots = json_array();
	double *tmp = NULL;
	uint32_t most = 0;

	for (int s = 0; s < c->nslots; s++)
		most = c->slots[s].entries > most ? c->slots[s].entries : most;
	if (!slots || !(tmp = malloc(2 * (size_t)most * sizeof(double))))
		goto nomem;
	for (int s = 0; s < c->nslots; s++) {
		const struct sf_coact_slot *sl = &c->slots[s];
		double t = sl->tokens ? (double)sl->tokens : 1.0;
		if (sl->group == SF_GROUP_EXPERTS)
			continue;	/* experts are routed, not scored */
		for (uint32_t i = 0; i < sl->entries; i++) {
			tmp[i] = sl->sums[i] / t;
			tmp[most + i] = (double)sl->counts[i] / t;
		}
		if (json_array_append_new(slots, json_pack("{s:i, s:s, s:I, s:I, s:O, s:o, s:o}",
				"layer", sl->layer, "group", sf_group_name(sl->group), "entries",
				(json_int_t)sl->entries, "tokens", (json_int_t)sl->tokens, "tasks",
				sl->tasks, "scores", real_array(tmp, sl->entries), "frequency",
				real_array(tmp + most, sl->entries))))
			goto nomem;
	}
	free(tmp);
	json_t *doc = scores_doc(&c->fingerprint, sf_trace_selection_json(c->select, c->value),
				 single_task(c), slots);
	if (!doc)
		sf_err_set(e, -ENOMEM, "scores: %s", sf_strerror(-ENOMEM));
	return doc;
nomem:
	free(tmp);
	json_decref(slots);
	sf_err_set(e, -ENOMEM, "scores: %s", sf_strerror(-ENOMEM));
	return NULL;
}

/* One (layer, group) of merged scores: token-weighted sums. */
struct merged {
	int layer;
	enum sf_group group;
	uint32_t entries;
	uint64_t tokens;
	double *score, *freq;	/* (entries) sums of value * tokens */
	json_t *tasks;
};

int sf_scores_merge(json_t *const *in, const char *const *names, int n, json_t **out,
		    struct sf_err *e)
{
	struct merged *m = NULL;
	struct sf_scores first = { 0 }, cur = { 0 };
	int nm = 0, ret = 0;
	json_t *slots = NULL;

	*out = NULL;
	for (int k = 0; k < n && !ret; k++) {
		struct sf_scores *s = k ? &cur : &first;
		sf_scores_free(&cur);
		if ((ret = sf_scores_parse(s, in[k], names[k], k ? &first.fingerprint : NULL,
					   names[0], NULL, e)))
			break;
		if (k && (first.selection || s->selection) &&
		    !json_equal(first.selection, s->selection)) {
			ret = sf_err_set(e, SF_EMISMATCH, "%s: selection differs from %s's", names[k],
					 names[0]);
			break;
		}
		for (int i = 0; i < s->nslots && !ret; i++) {
			const struct sf_scores_slot *sl = &s->slots[i];
			int at = 0;
			while (at < nm && (m[at].layer != sl->layer || m[at].group != sl->group))
				at++;
			if (at == nm) {
				struct merged *p = realloc(m, (size_t)(nm + 1) * sizeof(*m));
				if (!p)
					goto nomem;
				m = p;
				m[nm] = (struct merged){ .layer = sl->layer, .group = sl->group,
							 .entries = sl->entries,
							 .score = calloc(sl->entries, sizeof(double)),
							 .freq = calloc(sl->entries, sizeof(double)),
							 .tasks = json_object() };
				nm++;
				if (!m[at].score || !m[at].freq || !m[at].tasks)
					goto nomem;
			} else if (m[at].entries != sl->entries) {
				ret = sf_err_set(e, SF_EMISMATCH, "%s: layer %d %s has %u entries, "
						 "earlier files %u", names[k], sl->layer,
						 sf_group_name(sl->group), sl->entries, m[at].entries);
				break;
			}
			if (sl->tokens > (uint64_t)INT64_MAX - m[at].tokens) {
				ret = sf_err_set(e, SF_ELIMIT, "%s: layer %d %s: more than %lld tokens "
						 "in all", names[k], sl->layer, sf_group_name(sl->group),
						 (long long)INT64_MAX);
				break;
			}
			for (uint32_t j = 0; j < sl->entries; j++) {
				m[at].score[j] += sl->score[j] * (double)sl->tokens;
				m[at].freq[j] += sl->freq[j] * (double)sl->tokens;
			}
			m[at].tokens += sl->tokens;
			const char *task;
			json_t *v;
			json_object_foreach(sl->tasks, task, v)
				if (sf_coact_add_task(m[at].tasks, task, (uint64_t)json_integer_value(v)))
					goto nomem;
		}
	}
	if (!ret && !nm)
		ret = sf_err_set(e, SF_EFORMAT, "%s: no slots to merge", names[0]);
	if (ret)
		goto out;
	/* in layer, group order, as every other stream */
	for (int a = 1; a < nm; a++)
		for (int b = a; b > 0 && (m[b].layer < m[b - 1].layer ||
					  (m[b].layer == m[b - 1].layer && m[b].group < m[b - 1].group)); b--) {
			struct merged t = m[b];
			m[b] = m[b - 1];
			m[b - 1] = t;
		}
	if (!(slots = json_array()))
		goto nomem;
	for (int a = 0; a < nm; a++) {
		double t = m[a].tokens ? (double)m[a].tokens : 1.0;
		for (uint32_t j = 0; j < m[a].entries; j++) {
			m[a].score[j] /= t;
			m[a].freq[j] /= t;
		}
		if (json_array_append_new(slots, json_pack("{s:i, s:s, s:I, s:I, s:O, s:o, s:o}",
				"layer", m[a].layer, "group", sf_group_name(m[a].group), "entries",
				(json_int_t)m[a].entries, "tokens", (json_int_t)m[a].tokens, "tasks",
				m[a].tasks, "scores", real_array(m[a].score, m[a].entries),
				"frequency", real_array(m[a].freq, m[a].entries))))
			goto nomem;
	}
	*out = scores_doc(&first.fingerprint, json_deep_copy(first.selection), NULL, slots);
	slots = NULL;
	if (!*out)
		goto nomem;
	goto out;
nomem:
	ret = sf_err_set(e, -ENOMEM, "scores: %s", sf_strerror(-ENOMEM));
out:
	json_decref(slots);
	for (int a = 0; a < nm; a++) {
		free(m[a].score);
		free(m[a].freq);
		json_decref(m[a].tasks);
	}
	free(m);
	sf_scores_free(&first);
	sf_scores_free(&cur);
	return ret;
}
