/* SelectInfer selection: the pinning order of selective loading, the
 * prefill observer of selective computation and the neurons file of
 * sf-pack --keep, from score files (formats/scores.c reads them). See
 * selectinfer.h; commands in man/sf-coact.1 and man/sf-run.1. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/parse.h"
#include "online/selectinfer.h"
#include "formats/image.h"
#include "formats/trace.h"
#include "engine/select.h"

// ----------------------------------------------------------------------------
// orders: a stable merge sort of entry ids under a "goes first" relation

typedef int before_fn(const void *ctx, uint32_t a, uint32_t b);

/* Sorts idx[0..m) so that before(ctx, idx[i], idx[i + 1]) or neither goes
 * first; tmp holds m ids. Bottom-up, so no recursion and no allocation. */
static void sort_ids(uint32_t *idx, uint32_t m, before_fn *before, const void *ctx,
		     uint32_t *tmp)
{
	uint32_t *src = idx, *dst = tmp;

	for (uint64_t w = 1; w < m; w *= 2) {
		for (uint64_t lo = 0; lo < m; lo += 2 * w) {
			uint64_t mid = lo + w < m ? lo + w : m, hi = lo + 2 * w < m ? lo + 2 * w : m;
			uint64_t a = lo, b = mid, o = lo;
			while (a < mid && b < hi)
				dst[o++] = before(ctx, src[b], src[a]) ? src[b++] : src[a++];
			while (a < mid)
				dst[o++] = src[a++];
			while (b < hi)
				dst[o++] = src[b++];
		}
		uint32_t *t = src;
		src = dst;
		dst = t;
	}
	if (src != idx)
		memcpy(idx, src, (size_t)m * sizeof(*idx));
}

/* Higher score first; equal scores keep the lower index first (stable). */
static int score_before(const void *ctx, uint32_t a, uint32_t b)
{
	const double *s = ctx;
	return s[a] > s[b];
}

/* The ids 0..n-1 in score order. */
static void score_order(const double *score, uint32_t n, uint32_t *idx, uint32_t *tmp)
{
	for (uint32_t i = 0; i < n; i++)
		idx[i] = i;
	sort_ids(idx, n, score_before, score, tmp);
}

uint32_t sf_select_count(double x, uint32_t n)
{
	if (!(x > 0))
		return 0;
	double v = floor(x * (double)n + 0.5);
	return v >= (double)n ? n : (uint32_t)v;
}

// ----------------------------------------------------------------------------
// selective loading

uint32_t sf_select_load_order(const double *task, const double *model, uint32_t n,
			      double gamma, double delta, uint32_t *order, uint32_t *scratch)
{
	uint32_t *idx = scratch, *tmp = scratch + n;
	uint32_t want = sf_select_count(gamma, n), m = 0;
	uint32_t first = model ? sf_select_count(delta, n) : want;

	if (first > want)
		first = want;
	if (task) {
		score_order(task, n, idx, tmp);
		memcpy(order, idx, (size_t)first * sizeof(*order));
		m = first;
	}
	if (model && m < want) {
		score_order(model, n, idx, tmp);
		/* tmp is free again: it marks what the task part chose */
		memset(tmp, 0, (size_t)n * sizeof(*tmp));
		for (uint32_t j = 0; j < m; j++)
			tmp[order[j]] = 1;
		for (uint32_t j = 0; j < n && m < want; j++)
			if (!tmp[idx[j]])
				order[m++] = idx[j];
	}
	return m;
}

/* The kinds and model of the two inputs of selective loading. */
static int check_pair(const struct sf_scores *task, const char *task_name,
		      const struct sf_scores *model, const char *model_name, struct sf_err *e)
{
	if (!task && !model)
		return sf_err_set(e, -EINVAL, "selective loading: no scores given");
	if (task && !task->is_task)
		return sf_err_set(e, SF_EMISMATCH, "%s: kind is \"model\": expected task-specific "
				  "scores (of one task)", task_name);
	if (model && model->is_task)
		return sf_err_set(e, SF_EMISMATCH, "%s: kind is \"task\": expected model-specific "
				  "scores (sf-coact --merge-scores)", model_name);
	if (task && model)
		return sf_fingerprint_check(&model->fingerprint, model_name, "scores",
					    &task->fingerprint, task_name, e);
	return 0;
}

static int check_ratios(double gamma, double delta, struct sf_err *e)
{
	if (!(gamma >= 0 && gamma <= 1) || !(delta >= 0 && delta <= 1))
		return sf_err_set(e, -EINVAL, "selective loading: gamma %g and delta %g must be "
				  "in 0..1", gamma, delta);
	return 0;
}

/* The order of one (layer, group) from whichever files hold it; *count 0
 * when neither does. Both must agree on the entries. */
static int group_order(const struct sf_scores_slot *t, const char *task_name,
		       const struct sf_scores_slot *m, const char *model_name, double gamma,
		       double delta, uint32_t **order, uint32_t *count, struct sf_err *e)
{
	uint32_t n = t ? t->entries : m ? m->entries : 0, *scratch;

	*order = NULL;
	*count = 0;
	if (!n)
		return 0;
	if (t && m && t->entries != m->entries)
		return sf_err_set(e, SF_EMISMATCH, "%s: layer %d %s has %u entries, %s %u",
				  model_name, m->layer, sf_group_name(m->group), m->entries,
				  task_name, t->entries);
	scratch = malloc(2 * (size_t)n * sizeof(*scratch));
	*order = malloc((size_t)n * sizeof(**order));
	if (!scratch || !*order) {
		free(scratch);
		free(*order);
		*order = NULL;
		return sf_err_set(e, -ENOMEM, "selective loading: %s", sf_strerror(-ENOMEM));
	}
	*count = sf_select_load_order(t ? t->score : NULL, m ? m->score : NULL, n, gamma, delta,
				      *order, scratch);
	free(scratch);
	if (!*count) {
		free(*order);
		*order = NULL;
	}
	return 0;
}

int sf_select_load_plan(struct sf_select_load *l, const struct sf_config *cfg,
			const struct sf_scores *task, const char *task_name,
			const struct sf_scores *model, const char *model_name,
			double gamma, double delta, struct sf_err *e)
{
	size_t cells = (size_t)cfg->n_layers * SF_NGROUPS;
	int ret;

	memset(l, 0, sizeof(*l));
	task_name = task_name ? task_name : "task scores";
	model_name = model_name ? model_name : "model scores";
	if ((ret = check_pair(task, task_name, model, model_name, e)) ||
	    (ret = check_ratios(gamma, delta, e)))
		return ret;
	l->n_layers = cfg->n_layers;
	l->count = calloc(cells, sizeof(*l->count));
	l->order = calloc(cells, sizeof(*l->order));
	if (!l->count || !l->order) {
		sf_select_load_free(l);
		return sf_err_set(e, -ENOMEM, "selective loading: %s", sf_strerror(-ENOMEM));
	}
	for (int layer = 0; layer < cfg->n_layers; layer++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			size_t c = (size_t)layer * SF_NGROUPS + (size_t)g;
			const struct sf_scores_slot *t = sf_scores_find(task, layer, (enum sf_group)g);
			const struct sf_scores_slot *m = sf_scores_find(model, layer, (enum sf_group)g);
			uint32_t want = (uint32_t)sf_group_entries(cfg, (enum sf_group)g);
			const struct sf_scores_slot *bad = t && t->entries != want ? t :
							   m && m->entries != want ? m : NULL;
			if (bad) {
				sf_select_load_free(l);
				return sf_err_set(e, SF_EMISMATCH, "%s: layer %d %s: %u entries, the "
						  "model's %u", bad == t ? task_name : model_name,
						  layer, sf_group_name((enum sf_group)g), bad->entries,
						  want);
			}
			if ((ret = group_order(t, task_name, m, model_name, gamma, delta,
					       &l->order[c], &l->count[c], e))) {
				sf_select_load_free(l);
				return ret;
			}
		}
	return 0;
}

const uint32_t *sf_select_load_get(const struct sf_select_load *l, int layer, enum sf_group g,
				   uint32_t *count)
{
	size_t c = (size_t)layer * SF_NGROUPS + (size_t)g;
	if (layer < 0 || layer >= l->n_layers || (int)g < 0 || g >= SF_NGROUPS) {
		*count = 0;
		return NULL;
	}
	*count = l->count[c];
	return l->order[c];
}

void sf_select_load_free(struct sf_select_load *l)
{
	if (!l)
		return;
	for (size_t c = 0; l->order && c < (size_t)l->n_layers * SF_NGROUPS; c++)
		free(l->order[c]);
	free(l->order);
	free(l->count);
	memset(l, 0, sizeof(*l));
}

// ----------------------------------------------------------------------------
// neurons.json

int sf_select_neurons_json(json_t **out, const struct sf_scores *task, const char *task_name,
			   const struct sf_scores *model, const char *model_name, double gamma,
			   double delta, json_t *meta, struct sf_err *e)
{
	const struct sf_scores *any = task ? task : model;
	json_t *layers = NULL, *neurons = NULL;
	uint32_t *order = NULL;
	uint8_t *kept = NULL;
	int ret;

	*out = NULL;
	task_name = task_name ? task_name : "task scores";
	model_name = model_name ? model_name : "model scores";
	if ((ret = check_pair(task, task_name, model, model_name, e)) ||
	    (ret = check_ratios(gamma, delta, e)))
		return ret;
	if (!(layers = json_array()))
		goto nomem;
	/* layers in ascending order: the union of both files' ffn_out slots */
	for (int layer = 0; layer < SF_TRACE_MAX_LAYERS; layer++) {
		const struct sf_scores_slot *t = sf_scores_find(task, layer, SF_GROUP_FFN_OUT);
		const struct sf_scores_slot *m = sf_scores_find(model, layer, SF_GROUP_FFN_OUT);
		uint32_t count, n;
		if (!t && !m)
			continue;
		n = t ? t->entries : m->entries;
		/* sf-pack refuses a listed layer that keeps no neuron: the best one */
		double g = sf_select_count(gamma, n) ? gamma : 1.0 / n;
		if ((ret = group_order(t, task_name, m, model_name, g, delta, &order, &count, e)))
			goto out;
		if (!(kept = calloc(n, 1)) || !(neurons = json_array()))
			goto nomem;
		for (uint32_t j = 0; j < count; j++)
			kept[order[j]] = 1;
		for (uint32_t i = 0; i < n; i++)
			if (kept[i] && json_array_append_new(neurons, json_integer(i)))
				goto nomem;
		if (json_array_append_new(layers, json_pack("{s:i, s:o}", "layer", layer,
							    "neurons", neurons))) {
			neurons = NULL;
			goto nomem;
		}
		neurons = NULL;
		free(order);
		free(kept);
		order = NULL;
		kept = NULL;
	}
	if (!json_array_size(layers)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: no ffn_out scores to select neurons from",
				 task ? task_name : model_name);
		goto out;
	}
	*out = json_pack("{s:s, s:i, s:s, s:s, s:O?, s:o}", "format", SF_IMAGE_KEEP_FORMAT,
			 "version", SF_IMAGE_KEEP_VERSION, "fingerprint", any->fingerprint.weights,
			 "shape_fingerprint", any->fingerprint.shape, "source", meta, "layers",
			 layers);
	layers = NULL;
	if (!*out)
		goto nomem;
	goto out;
nomem:
	ret = sf_err_set(e, -ENOMEM, "neurons: %s", sf_strerror(-ENOMEM));
out:
	json_decref(neurons);
	json_decref(layers);
	free(order);
	free(kept);
	return ret;
}

// ----------------------------------------------------------------------------
// selective computation

struct sf_select_compute {
	int n_layers;
	uint32_t n;			/* ffn_out neurons of a layer */
	uint32_t k_alpha, k_delta, k_beta, k_rho;
	uint8_t *dense;			/* (n_layers) */
	uint32_t *static_order;		/* (n_layers, n) by static score; NULL: no file */
	uint32_t *counts;		/* (n_layers, n) prefill tokens in the top alpha */
	double *sums;			/* (n_layers, n) prefill sum of |a| */
	uint64_t *bits;			/* (ceil(n / 64)) one token's top alpha */
	uint32_t *topk_scratch;		/* (2n) for sf_select_topk */
	uint32_t *idx, *tmp;		/* (n) each: the count order at finish */
	uint32_t *entries;		/* (n_layers, k_rho) ascending */
	uint8_t *mask;			/* (n_layers, n) */
	uint32_t *nstatic, *ndynamic;	/* (n_layers) */
	int finished;
};

void sf_select_compute_defaults(struct sf_select_compute_opts *o, double rho)
{
	*o = (struct sf_select_compute_opts){
		.rho = rho, .delta = SF_SELECT_DEFAULT_COMPUTE_DELTA,
		.alpha = SF_SELECT_DEFAULT_ALPHA, .beta = SF_SELECT_DEFAULT_BETA,
	};
}

void sf_select_dense_default(int n_layers, uint8_t *dense)
{
	uint32_t L = (uint32_t)n_layers;
	uint32_t first = sf_select_count((double)SF_SELECT_DENSE_FIRST_NUM / SF_SELECT_DENSE_DEN, L);
	uint32_t last = sf_select_count((double)SF_SELECT_DENSE_LAST_NUM / SF_SELECT_DENSE_DEN, L);

	first = first ? first : 1;
	last = last ? last : 1;
	for (uint32_t l = 0; l < L; l++)
		dense[l] = l < first || l + last >= L;
}

int sf_select_dense_parse(const char *spec, int n_layers, uint8_t *dense, struct sf_err *e)
{
	int ret = sf_parse_layers("--dense-layers", spec, n_layers, SF_LAYERS_MODEL, dense, e);

	if (ret)	/* the format's codes: not a layer list, or past the model */
		ret = e->code = ret == -EINVAL ? SF_EFORMAT : SF_ELIMIT;
	return ret;
}

void sf_select_compute_close(struct sf_select_compute *c)
{
	if (!c)
		return;
	free(c->dense);
	free(c->static_order);
	free(c->counts);
	free(c->sums);
	free(c->bits);
	free(c->topk_scratch);
	free(c->idx);
	free(c->tmp);
	free(c->entries);
	free(c->mask);
	free(c->nstatic);
	free(c->ndynamic);
	free(c);
}

int sf_select_compute_open(struct sf_select_compute **out, int n_layers, uint32_t n,
			   const struct sf_select_compute_opts *o, const struct sf_scores *stat,
			   const char *stat_name, struct sf_err *e)
{
	const double r[] = { o->rho, o->delta, o->alpha, o->beta };
	static const char *const rn[] = { "rho", "delta", "alpha", "beta" };
	struct sf_select_compute *c;
	size_t cells = (size_t)n_layers * n;

	*out = NULL;
	stat_name = stat_name ? stat_name : "static scores";
	for (int i = 0; i < 4; i++)
		if (!(r[i] >= 0 && r[i] <= 1))
			return sf_err_set(e, -EINVAL, "selective computation: %s %g is not in 0..1",
					  rn[i], r[i]);
	if (n_layers < 1 || n < 1 || n > SF_TRACE_MAX_ENTRIES)
		return sf_err_set(e, -EINVAL, "selective computation: %d layers of %u neurons",
				  n_layers, n);
	if (!(c = calloc(1, sizeof(*c))))
		return sf_err_set(e, -ENOMEM, "selective computation: %s", sf_strerror(-ENOMEM));
	c->n_layers = n_layers;
	c->n = n;
	c->k_rho = sf_select_count(o->rho, n);
	c->k_delta = sf_select_count(o->delta, n);
	c->k_alpha = sf_select_count(o->alpha, n);
	c->k_beta = sf_select_count(o->beta, n);
	c->dense = calloc((size_t)n_layers, 1);
	c->counts = calloc(cells, sizeof(*c->counts));
	c->sums = calloc(cells, sizeof(*c->sums));
	c->bits = calloc(((size_t)n + 63) / 64, sizeof(*c->bits));
	c->topk_scratch = malloc(2 * (size_t)n * sizeof(*c->topk_scratch));
	c->idx = malloc((size_t)n * sizeof(*c->idx));
	c->tmp = malloc((size_t)n * sizeof(*c->tmp));
	c->entries = malloc(((size_t)n_layers * c->k_rho + 1) * sizeof(*c->entries));
	c->mask = calloc(cells, 1);
	c->nstatic = calloc((size_t)n_layers, sizeof(*c->nstatic));
	c->ndynamic = calloc((size_t)n_layers, sizeof(*c->ndynamic));
	if (stat)
		c->static_order = malloc(cells * sizeof(*c->static_order));
	if (!c->dense || !c->counts || !c->sums || !c->bits || !c->topk_scratch || !c->idx ||
	    !c->tmp || !c->entries || !c->mask || !c->nstatic || !c->ndynamic ||
	    (stat && !c->static_order)) {
		sf_select_compute_close(c);
		return sf_err_set(e, -ENOMEM, "selective computation: %s", sf_strerror(-ENOMEM));
	}
	if (o->dense)
		memcpy(c->dense, o->dense, (size_t)n_layers);
	for (int l = 0; stat && l < n_layers; l++) {
		const struct sf_scores_slot *s = sf_scores_find(stat, l, SF_GROUP_FFN_OUT);
		if (c->dense[l])
			continue;
		if (!s || s->entries != n) {
			sf_select_compute_close(c);
			return s ? sf_err_set(e, SF_EMISMATCH, "%s: layer %d ffn_out: %u entries, the "
					      "model's %u", stat_name, l, s->entries, n)
				 : sf_err_set(e, SF_EMISMATCH, "%s: no ffn_out scores for layer %d",
					      stat_name, l);
		}
		score_order(s->score, n, c->static_order + (size_t)l * n, c->tmp);
	}
	*out = c;
	return 0;
}

void sf_select_compute_observe(struct sf_select_compute *c, int layer, const float *a)
{
	if (c->finished || layer < 0 || layer >= c->n_layers || c->dense[layer])
		return;
	uint32_t *cnt = c->counts + (size_t)layer * c->n;
	double *sum = c->sums + (size_t)layer * c->n;
	for (uint32_t i = 0; i < c->n; i++)
		if (!isnan(a[i]))
			sum[i] += fabsf(a[i]);
	if (!c->k_alpha)
		return;
	sf_select_topk(a, c->n, c->k_alpha, c->bits, c->topk_scratch);
	for (uint32_t w = 0; w < (c->n + 63) / 64; w++)
		for (uint64_t b = c->bits[w]; b; b &= b - 1)
			cnt[w * 64 + (uint32_t)__builtin_ctzll(b)]++;
}

struct count_key {
	const uint32_t *count;
	const double *sum;
};

/* More prefill tokens first, then the larger sum of |a|, then (stable) the
 * lower index. */
static int count_before(const void *ctx, uint32_t a, uint32_t b)
{
	const struct count_key *k = ctx;
	if (k->count[a] != k->count[b])
		return k->count[a] > k->count[b];
	return k->sum[a] > k->sum[b];
}

/* Adds entry i to the set unless it is in or the set is full. */
static void take(uint8_t *mask, uint32_t i, uint32_t *m, uint32_t cap)
{
	if (!mask[i] && *m < cap) {
		mask[i] = 1;
		(*m)++;
	}
}

void sf_select_compute_finish(struct sf_select_compute *c)
{
	if (c->finished)
		return;
	for (int l = 0; l < c->n_layers; l++) {
		uint32_t n = c->n, cap = c->k_rho, m = 0, dyn = 0;
		uint8_t *mask = c->mask + (size_t)l * n;
		const uint32_t *cnt = c->counts + (size_t)l * n;
		const uint32_t *so = c->static_order ? c->static_order + (size_t)l * n : NULL;
		struct count_key key = { cnt, c->sums + (size_t)l * n };
		uint32_t *ent = c->entries + (size_t)l * cap, *idx = c->idx;

		if (c->dense[l])
			continue;
		memset(mask, 0, n);
		for (uint32_t j = 0; so && j < c->k_delta; j++)
			take(mask, so[j], &m, cap);
		c->nstatic[l] = m;
		for (uint32_t i = 0; i < n; i++)
			idx[i] = i;
		sort_ids(idx, n, count_before, &key, c->tmp);
		for (uint32_t j = 0; j < n && dyn < c->k_beta && m < cap && cnt[idx[j]]; j++)
			if (!mask[idx[j]]) {
				take(mask, idx[j], &m, cap);
				dyn++;
			}
		c->ndynamic[l] = dyn;
		/* short of rho: the other counted neurons, the static order, the rest */
		for (uint32_t j = 0; j < n && m < cap && cnt[idx[j]]; j++)
			take(mask, idx[j], &m, cap);
		for (uint32_t j = 0; so && j < n && m < cap; j++)
			take(mask, so[j], &m, cap);
		for (uint32_t j = 0; j < n && m < cap; j++)
			take(mask, idx[j], &m, cap);
		for (uint32_t i = 0, k = 0; i < n; i++)
			if (mask[i])
				ent[k++] = i;
	}
	c->finished = 1;
}

void sf_select_compute_reset(struct sf_select_compute *c)
{
	size_t cells = (size_t)c->n_layers * c->n;
	memset(c->counts, 0, cells * sizeof(*c->counts));
	memset(c->sums, 0, cells * sizeof(*c->sums));
	c->finished = 0;
}

int sf_select_compute_is_dense(const struct sf_select_compute *c, int layer)
{
	return layer >= 0 && layer < c->n_layers && c->dense[layer];
}

const uint32_t *sf_select_compute_entries(const struct sf_select_compute *c, int layer,
					  uint32_t *count)
{
	if (!c->finished || layer < 0 || layer >= c->n_layers || c->dense[layer]) {
		*count = c->n;
		return NULL;
	}
	*count = c->k_rho;
	return c->entries + (size_t)layer * c->k_rho;
}

const uint8_t *sf_select_compute_mask(const struct sf_select_compute *c, int layer)
{
	if (!c->finished || layer < 0 || layer >= c->n_layers || c->dense[layer])
		return NULL;
	return c->mask + (size_t)layer * c->n;
}

void sf_select_compute_split(const struct sf_select_compute *c, int layer, uint32_t *nstatic,
			     uint32_t *ndynamic)
{
	int ok = c->finished && layer >= 0 && layer < c->n_layers && !c->dense[layer];
	*nstatic = ok ? c->nstatic[layer] : 0;
	*ndynamic = ok ? c->ndynamic[layer] : 0;
}
