/* The sparse decoder's figures (sparse_impl.h): the --bench and --stats
 * JSON of man/sf-run.1, latency percentiles, the memory accounting beside
 * the peak resident set. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

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

	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
			 "process", (json_int_t)m->process, "resident", (json_int_t)m->resident, "state", (json_int_t)m->state,
			 "buffers", (json_int_t)m->buffers, "pinned", (json_int_t)m->pinned,
			 "cache", (json_int_t)m->cache, "simulate", (json_int_t)m->simulate,
			 "total", (json_int_t)m->total, "ram", (json_int_t)sp->o.ram,
			 "peak_rss", (json_int_t)peak);
}

json_t *sf_sparse_stats_json(struct sf_sparse *sp)
{
	uint64_t tok = sp->st.tokens + (sp->st.t_token > 0);	/* the current one counts */
	double per = tok ? 1.0 / (double)tok : 0.0;
	double *s = sp->st.nlat ? malloc(sp->st.nlat * sizeof(double)) : NULL;
	struct sf_cache_stats cs = { 0 };
	struct sf_uring_stats us = { 0 };

	if (sp->st.nlat && !s)
		return NULL;
	if (s) {
		memcpy(s, sp->st.lat, sp->st.nlat * sizeof(double));
		qsort(s, sp->st.nlat, sizeof(double), cmp_double);
	}
	if (sp->cache.c)
		sf_cache_stats(sp->cache.c, SF_NGROUPS, &cs);
	if (sp->io.u)
		sf_uring_stats(sp->io.u, &us);

	json_t *hist = json_object(), *groups = json_object();
	for (int b = 0; b < SF_RUNS_NHIST; b++)
		json_object_set_new(hist, sf_runs_hist_names[b], json_integer((json_int_t)sp->st.hist[b]));
	double budget_sum = 0, budget_den = 0;
	uint64_t riders = 0;
	for (int g = 0; g < SF_NGROUPS; g++) {
		const struct gtally *t = &sp->st.g[g];
		if (!t->computed)
			continue;
		double c = (double)t->computed;
		budget_sum += t->budget / c * (double)t->entries / c * (double)sp->tiers.col_top[g];
		budget_den += (double)t->entries / c * (double)sp->tiers.col_top[g];
		riders += t->riders;
		json_object_set_new(groups, sf_group_name((enum sf_group)g), json_pack(
			"{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}",
			"budget", t->budget / c, "free_riders", (double)t->riders / c,
			"k_top", (double)t->k_top / c, "k_mid", (double)t->k_mid / c,
			"cache_hits", (double)t->hits / c,
			"requests_per_token", (double)t->requests * per,
			"bytes_moved_per_token", (double)t->bytes_moved * per,
			"bytes_needed_per_token", (double)t->bytes_needed * per));
	}
	json_t *j = json_pack(
		"{s:s, s:I, s:{s:f, s:f, s:f}, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
		"s:f, s:f, s:f, s:o, s:{s:I, s:I, s:I, s:I, s:I, s:f}, s:{s:s, s:I, s:I}, "
		"s:{s:I, s:I, s:I, s:I, s:I, s:I}, s:f, s:o}",
		"backend", sf_sparse_backend(sp), "tokens", (json_int_t)tok,
		"latency_seconds", "p50", pct(s, sp->st.nlat, 0.5), "p90", pct(s, sp->st.nlat, 0.9),
		"p99", pct(s, sp->st.nlat, 0.99),
		"compute_seconds", sp->st.compute_s, "io_wait_seconds", sp->st.wait_s,
		"io_span_seconds", sp->st.span_s, "sparse_seconds", sp->st.exec_s,
		"requests_per_token", (double)sp->st.requests * per,
		"bytes_moved_per_token", (double)sp->st.bytes_moved * per,
		"bytes_needed_per_token", (double)sp->st.bytes_needed * per,
		"bytes_moved_over_needed", sp->st.bytes_needed ?
			(double)sp->st.bytes_moved / (double)sp->st.bytes_needed : 0.0,
		"effective_bandwidth", sp->st.span_s > 0 ? (double)sp->st.bytes_needed / sp->st.span_s : 0.0,
		"raw_bandwidth", sp->st.span_s > 0 ? (double)sp->st.bytes_moved / sp->st.span_s : 0.0,
		"mean_read_length", sp->st.runs_total ?
			(double)sp->st.runs_positions / (double)sp->st.runs_total : 0.0,
		"runs_per_token", (double)sp->st.runs_total * per,
		"read_length_histogram", hist,
		"cache", "lookups", (json_int_t)cs.lookups, "hits", (json_int_t)cs.hits,
		"admissions", (json_int_t)cs.admissions, "rejected", (json_int_t)cs.rejected,
		"evictions", (json_int_t)cs.evictions,
		"hit_rate", cs.lookups ? (double)cs.hits / (double)cs.lookups : 0.0,
		"collapse", "setting", sp->collapse.desc,
		"tokens_on", (json_int_t)sp->collapse.tokens_on,
		"tokens_off", (json_int_t)sp->collapse.tokens_off,
		"uring", "requests", (json_int_t)us.requests, "reads", (json_int_t)us.reads,
		"bytes", (json_int_t)us.bytes, "short_reads", (json_int_t)us.short_reads,
		"fixed_reads", (json_int_t)us.fixed_reads, "submits", (json_int_t)us.submits,
		"budget", budget_den > 0 ? budget_sum / budget_den : 0.0,
		"groups", groups);
	free(s);
	if (j) {
		double sum = 0;
		for (uint64_t i = 0; i < sp->st.nlat; i++)
			sum += sp->st.lat[i];
		json_object_set_new(json_object_get(j, "latency_seconds"), "mean",
				    json_real(sp->st.nlat ? sum / (double)sp->st.nlat : 0.0));
		json_object_set_new(j, "bytes_moved", json_integer((json_int_t)sp->st.bytes_moved));
		json_t *cj = json_object_get(j, "cache");
		json_object_set_new(cj, "pinned", json_integer((json_int_t)cs.pinned));
		json_object_set_new(cj, "pin_hits", json_integer((json_int_t)cs.pin_hits));
		json_object_set_new(j, "memory", memory_json(sp));
		json_object_set_new(j, "free_riders", json_integer((json_int_t)riders));
		json_object_set_new(j, "free_riders_per_token", json_real((double)riders * per));
		if (sp->comp.sc) {
			double pp = sp->comp.passes ? 1.0 / (double)sp->comp.passes : 0.0;
			json_object_set_new(j, "compute", json_pack(
				"{s:f, s:i, s:I, s:I, s:I, s:I, s:f, s:f}",
				"rho", sp->comp.rho, "layers", sp->comp.layers,
				"set_entries", (json_int_t)sp->comp.n_set,
				"static", (json_int_t)sp->comp.n_static, "dynamic", (json_int_t)sp->comp.n_dynamic,
				"passes", (json_int_t)sp->comp.passes,
				"ffn_out_entries_per_pass", (double)sp->comp.entries * pp,
				"ffn_in_rows_per_pass", (double)sp->comp.rows * pp));
		}
		json_object_set_new(j, "requests", json_integer((json_int_t)sp->st.requests));
	}
	return j;
}
