/* The forward pass's recorder for activation traces: see profile.h and
 * sf-profile(1). */
#include "offline/profile.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/select.h"

struct sf_profile {
	struct sf_trace_writer *w;	/* not owned */
	const struct sf_trace_info *info;	/* the writer's */
	struct sf_pool *pool;	/* not owned; NULL: the caller */
	struct sf_observer observer;
	int tokens;		/* most tokens a pass records */
	/* The forward pass reuses its buffers within a pass, so recorded
	 * inputs are copied and selected together at the pass's end, when
	 * the pool's workers would otherwise wait. */
	float **staged;		/* (nslots) -> (tokens, entries) the recorded inputs */
	int T;			/* tokens of the current pass */
	int at;			/* the token of the pass being selected */
	unsigned char *seen;	/* (nslots) staged in the current pass */
	int *pending;		/* (npending) slots staged and not yet selected */
	uint64_t **rows;	/* (npending) the writer's rows they select into */
	int npending;
	uint32_t *bad;		/* (nslots) 1 + first non-finite entry, or 0 */
	uint32_t most;		/* largest entries of a slot */
	uint32_t *scratch;	/* (pool size, 2 * most) for the selections */
	int error;		/* sticky: a wrong length or a non-finite activation */
	char error_msg[SF_ERR_MAX];
};

static void observe_fn(void *ctx, int layer, enum sf_group g, const float *in, int T,
			size_t n)
{
	sf_profile_record(ctx, layer, g, in, T, n);
}

/* A mixture's routes are its experts slot's inputs: the weight of each
 * picked expert, 0 for the others. */
static void routes_fn(void *ctx, int layer, const float *route, int T, size_t n)
{
	sf_profile_record(ctx, layer, SF_GROUP_EXPERTS, route, T, n);
}

uint64_t sf_profile_bytes(const struct sf_trace_info *info, int tokens, int threads)
{
	uint64_t staged = 0, most = 0;
	for (int s = 0; s < info->nslots; s++) {
		staged += info->slots[s].entries;
		most = info->slots[s].entries > most ? info->slots[s].entries : most;
	}
	return staged * (uint64_t)(tokens > 1 ? tokens : 1) * sizeof(float) +
	       (uint64_t)threads * 2 * most * sizeof(uint32_t);
}

int sf_profile_open(struct sf_profile **out, struct sf_trace_writer *w, struct sf_pool *pool,
		    int tokens, struct sf_err *e)
{
	struct sf_profile *p = calloc(1, sizeof(*p));
	const struct sf_trace_info *info = sf_trace_writer_info(w);
	const char *name = sf_trace_writer_name(w);
	int ns = info->nslots, ret;

	*out = NULL;
	if (!p)
		return sf_err_set(e, -ENOMEM, "%s: %s", name, sf_strerror(-ENOMEM));
	p->w = w;
	p->info = info;
	p->pool = pool;
	p->tokens = tokens > 1 ? tokens : 1;
	p->observer = (struct sf_observer){ .fn = observe_fn, .routes = routes_fn, .ctx = p,
					    .tokens = p->tokens };
	p->staged = calloc((size_t)ns, sizeof(*p->staged));
	p->seen = calloc((size_t)ns, 1);
	p->pending = calloc((size_t)ns, sizeof(*p->pending));
	p->rows = calloc((size_t)ns, sizeof(*p->rows));
	p->bad = calloc((size_t)ns, sizeof(*p->bad));
	if (!p->staged || !p->seen || !p->pending || !p->rows || !p->bad)
		goto nomem;
	for (int s = 0; s < ns; s++) {
		uint32_t n = info->slots[s].entries;
		if (!(p->staged[s] = malloc((size_t)p->tokens * n * sizeof(float))))
			goto nomem;
		p->most = n > p->most ? n : p->most;
	}
	/* one selection's scratch per worker */
	size_t per = 2 * (size_t)p->most;
	if (!(p->scratch = malloc((size_t)sf_pool_size(pool) * per * sizeof(uint32_t)))) {
		ret = sf_err_set(e, -ENOMEM, "%s: selection buffers for %d threads: %s", name,
				 sf_pool_size(pool), sf_strerror(-ENOMEM));
		goto fail;
	}
	*out = p;
	return 0;
nomem:
	ret = sf_err_set(e, -ENOMEM, "%s: trace buffers: %s", name, sf_strerror(-ENOMEM));
fail:
	sf_profile_free(p);
	return ret;
}

void sf_profile_free(struct sf_profile *p)
{
	if (!p)
		return;
	for (int s = 0; p->staged && s < p->info->nslots; s++)
		free(p->staged[s]);
	free(p->staged);
	free(p->seen);
	free(p->pending);
	free(p->rows);
	free(p->bad);
	free(p->scratch);
	free(p);
}

const struct sf_observer *sf_profile_observer(struct sf_profile *p)
{
	return &p->observer;
}

void sf_profile_record(struct sf_profile *p, int layer, enum sf_group g, const float *in,
		       int T, size_t n)
{
	int s = sf_trace_slot_index(p->info, layer, g);
	if (s < 0 || p->error)
		return;
	const struct sf_trace_slot *sl = &p->info->slots[s];

	T = T > 1 ? T : 1;
	if (T > p->tokens || (p->npending && T != p->T)) {
		p->error = SF_ELIMIT;
		snprintf(p->error_msg, sizeof(p->error_msg),
			 "layer %d %s: a pass of %d tokens, the recorder takes %d", layer,
			 sf_group_name(g), T, p->npending ? p->T : p->tokens);
		return;
	}
	if (n != sl->entries) {
		p->error = SF_EMISMATCH;
		snprintf(p->error_msg, sizeof(p->error_msg),
			 "layer %d %s: %zu entries, the trace has %u", layer, sf_group_name(g), n,
			 sl->entries);
		return;
	}
	memcpy(p->staged[s], in, (size_t)T * n * sizeof(float));
	p->T = T;
	if (!p->seen[s])
		p->pending[p->npending++] = s;
	p->seen[s] = 1;
}

/* Pending input i's |value| sums and active set for token p->at of the
 * pass; a non-finite value is left in p->bad[s] for the caller to report.
 * Touches slot s only, so slots run on any workers in any order give the
 * same trace. */
static void select_slot(struct sf_profile *p, int i, uint32_t *scratch)
{
	int s = p->pending[i];
	const struct sf_trace_slot *sl = &p->info->slots[s];
	uint32_t n = sl->entries;
	const float *in = p->staged[s] + (size_t)p->at * n;

	/* the rare non-finite value is looked for only when the largest
	 * magnitude says so */
	if (sf_select_abs_sum(in, n, sf_trace_writer_sums(p->w, s)) >= 0x7f800000u) {
		uint32_t j = 0;
		while (isfinite(in[j]))
			j++;
		p->bad[s] = j + 1;
		return;
	}
	if (sl->group == SF_GROUP_EXPERTS)	/* the experts that run: weight above 0 */
		sf_select_threshold(in, n, 0.0f, p->rows[i]);
	else if (p->info->select == SF_TRACE_DENSITY)
		sf_select_topk(in, n, sl->k, p->rows[i], scratch);
	else
		sf_select_threshold(in, n, (float)p->info->threshold, p->rows[i]);
}

/* The pending slots, taken one at a time by whichever worker is free:
 * their cost differs by group and a shared machine slows workers unevenly. */
struct select_task {
	struct sf_profile *p;
	_Atomic int next;
};

static void select_worker(void *arg, int ith, int nth)
{
	struct select_task *t = arg;
	struct sf_profile *p = t->p;
	uint32_t *scratch = p->scratch + (size_t)ith * 2 * p->most;
	(void)nth;

	for (int i; (i = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed)) <
		    p->npending;)
		select_slot(p, i, scratch);
}

/* Selects the pending slots of token p->at (one slot: on the caller) and
 * reports the first non-finite input in slot order, as the forward pass
 * met them. */
static void select_token(struct sf_profile *p, uint64_t token)
{
	struct select_task t = { .p = p };

	/* the writer's rows taken here, on one thread */
	for (int i = 0; i < p->npending; i++)
		p->rows[i] = sf_trace_writer_row(p->w, p->pending[i]);
	if (p->npending == 1)
		select_worker(&t, 0, 1);
	else if (p->npending > 1)
		sf_pool_run(p->pool, select_worker, &t);
	for (int s = 0; s < p->info->nslots && !p->error; s++) {
		if (!p->bad[s])
			continue;
		const struct sf_trace_slot *sl = &p->info->slots[s];
		p->error = SF_EFORMAT;
		snprintf(p->error_msg, sizeof(p->error_msg),
			 "layer %d %s entry %u: non-finite activation at token %llu", sl->layer,
			 sf_group_name(sl->group), p->bad[s] - 1, (unsigned long long)token);
	}
}

int sf_profile_tokens(struct sf_profile *p, int T, struct sf_err *e)
{
	int ret = 0;

	T = T > 1 ? T : 1;
	if (!p->error && p->npending && T != p->T) {
		p->error = -EINVAL;
		snprintf(p->error_msg, sizeof(p->error_msg),
			 "a pass of %d tokens ended as %d tokens", p->T, T);
	}
	/* token by token, in order: each slot's sums add up as a token at a
	 * time would, so the trace does not depend on the pass's size */
	for (p->at = 0; p->at < T && !ret; p->at++) {
		if (!p->error)
			select_token(p, sf_trace_writer_tokens(p->w));
		if (p->error)
			ret = sf_err_set(e, p->error, "%s: %s", sf_trace_writer_name(p->w),
					 p->error_msg);
		else
			ret = sf_trace_writer_token(p->w, e);
	}
	p->npending = 0;
	memset(p->seen, 0, (size_t)p->info->nslots);
	return ret;
}
