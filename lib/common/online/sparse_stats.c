/* The sparse decoder's figures (sparse_impl.h): the --bench and --stats
 * JSON of man/sf-run.1, latency percentiles, the memory accounting beside
 * the peak resident set. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "engine/cpu.h"
#include "engine/kernels_q.h"
#include "online/sparse_impl.h"
#include "online/uring.h"

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double pct(const double *s, uint64_t n, double q)
{
	if (!n)
		return 0;
	uint64_t i = (uint64_t)ceil(q * (double)n);
	return s[i ? i - 1 : 0];
}

/* The --ram accounting beside what the kernel saw: peak resident set. */
static json_t *memory_json(const struct sf_sparse *sp)
{
	const struct sf_sparse_memory *m = &sp->mem;
	struct rusage ru;
	uint64_t peak = getrusage(RUSAGE_SELF, &ru) ? 0 : (uint64_t)ru.ru_maxrss * 1024;

	return json_pack("{s:I, s:I, s:I, s:I, s:i, s:I, s:I, s:I, s:i, s:I, s:I, s:I, s:I, s:I, "
			 "s:I, s:I}",
			 "process", (json_int_t)m->process, "resident", (json_int_t)m->resident,
			 "state", (json_int_t)m->state, "kv", (json_int_t)m->kv,
			 "kv_positions", (int)m->kv_positions,
			 "buffers", (json_int_t)m->buffers, "pinned", (json_int_t)m->pinned,
			 "held", (json_int_t)m->slabs, "held_groups", sp->slab.groups,
			 "cache", (json_int_t)m->cache, "experts", (json_int_t)m->experts,
			 "simulate", (json_int_t)m->simulate,
			 "total", (json_int_t)m->total, "least", (json_int_t)m->least,
			 "ram", (json_int_t)sp->o.ram,
			 "peak_rss", (json_int_t)peak);
}

/* Token latencies: percentiles of those recorded, and their mean; NULL
 * when out of memory. */
static json_t *latency_json(const struct sparse_stats *st)
{
	double *s = st->nlat ? malloc(st->nlat * sizeof(double)) : NULL, sum = 0;

	if (st->nlat && !s)
		return NULL;
	if (s) {
		memcpy(s, st->lat, st->nlat * sizeof(double));
		qsort(s, st->nlat, sizeof(double), cmp_double);
	}
	for (uint64_t i = 0; i < st->nlat; i++)
		sum += st->lat[i];
	json_t *j = json_pack("{s:f, s:f, s:f, s:f}", "p50", pct(s, st->nlat, 0.5),
			      "p90", pct(s, st->nlat, 0.9), "p99", pct(s, st->nlat, 0.99),
			      "mean", st->nlat ? sum / (double)st->nlat : 0.0);
	free(s);
	return j;
}

static json_t *cache_json(const struct sf_cache_stats *cs)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:f, s:I, s:I}",
			 "lookups", (json_int_t)cs->lookups, "hits", (json_int_t)cs->hits,
			 "admissions", (json_int_t)cs->admissions, "rejected", (json_int_t)cs->rejected,
			 "evictions", (json_int_t)cs->evictions,
			 "hit_rate", cs->lookups ? (double)cs->hits / (double)cs->lookups : 0.0,
			 "pinned", (json_int_t)cs->pinned, "pin_hits", (json_int_t)cs->pin_hits);
}

/* Per group kind computed from flash, its figures per (layer, token) or
 * per token (per: 1 / tokens); *budget the whole model's Equation 5,
 * weighted by each kind's source bytes; *riders the entries promoted. */
static json_t *groups_json(const struct sf_sparse *sp, double per, double *budget,
			   uint64_t *riders)
{
	json_t *groups = json_object();
	double budget_sum = 0, budget_den = 0;

	*riders = 0;
	for (int g = 0; g < SF_NGROUPS; g++) {
		const struct gtally *t = &sp->st.g[g];
		if (!t->computed)
			continue;
		double c = (double)t->computed;
		budget_sum += t->budget / c * (double)t->entries / c * (double)sp->tiers.col_top[g];
		budget_den += (double)t->entries / c * (double)sp->tiers.col_top[g];
		*riders += t->riders;
		double used = (double)t->ahead_used, need = used + (double)t->unread_needed;
		json_object_set_new(groups, sf_group_name((enum sf_group)g), json_pack(
			"{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
			"budget", t->budget / c, "free_riders", (double)t->riders / c,
			"k_top", (double)t->k_top / c, "k_mid", (double)t->k_mid / c,
			"cache_hits", (double)t->hits / c,
			"requests_per_token", (double)t->requests * per,
			"bytes_moved_per_token", (double)t->bytes_moved * per,
			"bytes_needed_per_token", (double)t->bytes_needed * per,
			"prefetch_bytes_per_token", (double)t->ahead_bytes * per,
			"prefetch_recall", need > 0 ? used / need : 0.0,
			"prefetch_overfetch", t->ahead_bytes ?
				1.0 - used / (double)t->ahead_bytes : 0.0,
			"predict_recall", t->pred_selected ?
				(double)t->pred_hits / (double)t->pred_selected : 0.0,
			"predict_precision", t->pred_entries ?
				(double)t->pred_hits / (double)t->pred_entries : 0.0));
	}
	*budget = budget_den > 0 ? budget_sum / budget_den : 0.0;
	return groups;
}

/* Selective computation: the set and the passes it restricted. */
static json_t *compute_json(const struct sparse_compute *c)
{
	double pp = c->passes ? 1.0 / (double)c->passes : 0.0;

	return json_pack("{s:f, s:i, s:I, s:I, s:I, s:I, s:f, s:f}",
			 "rho", c->rho, "layers", c->layers, "set_entries", (json_int_t)c->n_set,
			 "static", (json_int_t)c->n_static, "dynamic", (json_int_t)c->n_dynamic,
			 "passes", (json_int_t)c->passes,
			 "ffn_out_entries_per_pass", (double)c->entries * pp,
			 "ffn_in_rows_per_pass", (double)c->rows * pp);
}

uint64_t sf_sparse_bytes_moved(const struct sf_sparse *sp)
{
	return sp->st.bytes_moved;
}

void sf_sparse_cache_counts(const struct sf_sparse *sp, uint64_t *lookups, uint64_t *hits)
{
	struct sf_cache_stats cs = { 0 };

	if (sp->cache.c)
		sf_cache_stats(sp->cache.c, SF_NGROUPS, &cs);
	*lookups = cs.lookups;
	*hits = cs.hits;
}

json_t *sf_sparse_stats_json(struct sf_sparse *sp)
{
	const struct sparse_stats *st = &sp->st;
	uint64_t tok = st->tokens + (uint64_t)st->pass_tokens;	/* the current pass counts */
	double per = tok ? 1.0 / (double)tok : 0.0, budget;
	struct sf_cache_stats cs = { 0 };
	struct sf_uring_stats us = { 0 };
	uint64_t riders;

	/* the reads ahead still in flight, counted as asked for: waited for,
	 * so the ring's figures agree */
	while (!sp->failed && sp->io.inflight && !sparse_reap(sp, 1))
		;
	if (sp->cache.c)
		sf_cache_stats(sp->cache.c, SF_NGROUPS, &cs);
	if (sp->io.u)
		sf_uring_stats(sp->io.u, &us);
	json_t *hist = json_object();
	for (int b = 0; b < SF_RUNS_NHIST; b++)
		json_object_set_new(hist, sf_runs_hist_names[b], json_integer((json_int_t)st->hist[b]));
	json_t *groups = groups_json(sp, per, &budget, &riders);

	json_t *j = json_pack(
		"{s:s, s:I, s:o, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:o, "
		"s:o, s:{s:s, s:I, s:I}, s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:f, s:o, s:I, s:o, "
		"s:I, s:f}",
		"backend", sf_sparse_backend(sp), "tokens", (json_int_t)tok,
		"latency_seconds", latency_json(st),
		"compute_seconds", st->compute_s, "overlap_seconds", st->overlap_s,
		"io_wait_seconds", st->wait_s,
		"io_span_seconds", st->span_s, "sparse_seconds", st->exec_s,
		"requests_per_token", (double)st->requests * per,
		"bytes_moved_per_token", (double)st->bytes_moved * per,
		"bytes_needed_per_token", (double)st->bytes_needed * per,
		"bytes_moved_over_needed", st->bytes_needed ?
			(double)st->bytes_moved / (double)st->bytes_needed : 0.0,
		"effective_bandwidth", st->span_s > 0 ? (double)st->bytes_needed / st->span_s : 0.0,
		"raw_bandwidth", st->span_s > 0 ? (double)st->bytes_moved / st->span_s : 0.0,
		"mean_read_length", st->runs_total ?
			(double)st->runs_positions / (double)st->runs_total : 0.0,
		"runs_per_token", (double)st->runs_total * per,
		"read_length_histogram", hist,
		"cache", cache_json(&cs),
		"collapse", "setting", sp->collapse.desc,
		"tokens_on", (json_int_t)sp->collapse.tokens_on,
		"tokens_off", (json_int_t)sp->collapse.tokens_off,
		"uring", "requests", (json_int_t)us.requests, "reads", (json_int_t)us.reads,
		"bytes", (json_int_t)us.bytes, "short_reads", (json_int_t)us.short_reads,
		"fixed_reads", (json_int_t)us.fixed_reads, "submits", (json_int_t)us.submits,
		"budget", budget, "groups", groups,
		"bytes_moved", (json_int_t)st->bytes_moved, "memory", memory_json(sp),
		"free_riders", (json_int_t)riders, "free_riders_per_token", (double)riders * per);
	if (j && sp->comp.sc)
		json_object_set_new(j, "compute", compute_json(&sp->comp));
	if (j && sp->xp.n)
		json_object_set_new(j, "experts", sparse_experts_json(sp, per));
	if (j)
		json_object_set_new(j, "requests", json_integer((json_int_t)st->requests));
	int dt = sf_image_top_dtype(sp->img);
	if (j)
		json_object_set_new(j, "top_dtype", dt < 0 ? json_null() :
				    json_string(sf_dtype_name((enum sf_dtype)dt)));
	if (j && dt >= 0 && sf_dtype_is_block((enum sf_dtype)dt))
		json_object_set_new(j, "activations", json_pack("{s:s, s:s}",
			"type", sp->o.f32_activations ? "f32" : "q8",
			"kernel", sp->o.f32_activations ? sf_isa_name(sf_cpu_isa()) :
							  sf_qcolaccum_int_kernel()));
	if (j)
		json_object_set_new(j, "reads", json_pack("{s:i, s:i, s:s, s:f}",
			"read_size", (int)sp->io.read_size, "prefetch", sp->o.prefetch,
			"predict", sf_sparse_predict_name(sp->o.predict),
			"bytes_per_request", st->requests ?
				(double)st->bytes_moved / (double)st->requests : 0.0));
	return j;
}
