/* SpAx calibration (step 1: greedy per-layer budget steps; step 2: grid
 * over the top/middle split at each group's budget) and TEAL's uniform
 * setting, measured through the forward pass's group hook. See calib.h,
 * man/sf-encode.1; the result is written by formats/calib.c. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/codes.h"
#include "engine/forward.h"
#include "engine/kernels.h"
#include "offline/calib.h"

/* The realised budget of a layer: its groups' bytes over their dense bytes. */
static double layer_budget(const struct sf_calib_sizes *s, const uint64_t *kt,
			   const uint64_t *km)
{
	double num = 0.0, den = 0.0;
	for (int g = 0; g < SF_NGROUPS; g++) {
		num += (double)kt[g] * (double)s[g].top_bytes + (double)km[g] * (double)s[g].mid_bytes;
		den += (double)s[g].entries * (double)s[g].top_bytes;
	}
	return num / den;
}

// ----------------------------------------------------------------------------
// evaluating one layer configuration through the forward pass

struct config {
	uint64_t k_top[SF_NGROUPS], k_mid[SF_NGROUPS];
};

enum { MODE_RECORD, MODE_EVAL };

/* One worker's evaluator: a run state and the scratch of the hook. */
struct evaluator {
	const struct sf_model *m;
	const struct sf_sfq *q;
	struct sf_runstate s;
	int mode, layer;
	struct config cfg;
	size_t tok;		/* token being run */
	float *dense;		/* (ntok, n_layers, dim) dense layer outputs: shared */
	float *delta;		/* (dim) this token's sparse layer output */
	float *xm;		/* (max entries) input with only top-tier entries */
	uint32_t *order;	/* (max entries) entries by falling magnitude */
	float *mxv;		/* (max entries) middle-tier inputs */
	const float *cur_in;	/* for the sort comparator */
	double err, ref;
};

static void dense_product(const float *in, int nout, float *const *out,
			  const struct sf_weight *const *w)
{
	for (int i = 0; i < nout; i++)
		sf_matvec_rows(out[i], w[i]->data, w[i]->dtype, (size_t)w[i]->cols, in, 0,
			       (size_t)w[i]->rows);
}

static int by_magnitude(const void *a, const void *b, void *arg)
{
	const float *x = arg;
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	float u = fabsf(x[i]), v = fabsf(x[j]);
	if (u != v)
		return u > v ? -1 : 1;
	return i < j ? -1 : i > j;	/* ties by index: one ranking, reproducible */
}

/* The three tiers of one group: the entries ranked by |x| (one ranking
 * for the whole group), the first k_top through the dense weights, the
 * next k_mid through the codes, the rest omitted. */
static void tiered_product(struct evaluator *E, int layer, enum sf_group g, const float *in,
			   size_t n, int nout, float *const *out, const struct sf_weight *const *w)
{
	uint64_t kt = E->cfg.k_top[g], km = E->cfg.k_mid[g];
	const struct sf_sfq_section *sec = sf_sfq_find(E->q, layer, g);

	for (uint32_t j = 0; j < n; j++)
		E->order[j] = j;
	qsort_r(E->order, n, sizeof(uint32_t), by_magnitude, (void *)in);
	memset(E->xm, 0, n * sizeof(float));
	for (uint64_t r = 0; r < kt; r++)
		E->xm[E->order[r]] = in[E->order[r]];
	dense_product(E->xm, nout, out, w);
	if (km == 0 || !sec)
		return;
	for (uint64_t r = 0; r < km; r++)
		E->mxv[r] = in[E->order[kt + r]];
	for (int i = 0; i < nout; i++) {
		struct sf_codes_view v = sf_sfq_view(E->q, sec, i);
		sf_codes_colaccum(out[i], &v, 0, v.m, E->order + kt, E->mxv, (size_t)km);
	}
}

static void hook(void *ctx, int layer, enum sf_group g, const float *in, int T, size_t n,
		 int nout, float *const *out, const struct sf_weight *const *w)
{
	struct evaluator *E = ctx;
	(void)T;	/* one token a call: the exec's tokens is 0 */
	size_t dim = (size_t)E->m->cfg.dim;
	int is_out = g == SF_GROUP_ATTN_OUT || g == SF_GROUP_FFN_OUT;

	if (E->mode == MODE_RECORD) {
		dense_product(in, nout, out, w);
		if (is_out) {
			float *d = E->dense + (E->tok * (size_t)E->m->cfg.n_layers + (size_t)layer) * dim;
			sf_axpy_f32(d, 1.0f, out[0], dim);
		}
		return;
	}
	if (layer < E->layer) {
		dense_product(in, nout, out, w);
		return;
	}
	if (layer > E->layer) {
		/* nothing after the layer under test matters */
		for (int i = 0; i < nout; i++)
			memset(out[i], 0, (size_t)w[i]->rows * sizeof(float));
		return;
	}
	tiered_product(E, layer, g, in, n, nout, out, w);
	if (g == SF_GROUP_ATTN_OUT)
		memcpy(E->delta, out[0], dim * sizeof(float));
	if (g == SF_GROUP_FFN_OUT) {
		const float *d = E->dense + (E->tok * (size_t)E->m->cfg.n_layers + (size_t)layer) * dim;
		for (size_t i = 0; i < dim; i++) {
			double diff = (double)E->delta[i] + out[0][i] - d[i];
			E->err += diff * diff;
			E->ref += (double)d[i] * d[i];
		}
	}
}

static void evaluator_free(struct evaluator *E)
{
	sf_state_free(&E->s);
	free(E->delta);
	free(E->xm);
	free(E->order);
	free(E->mxv);
}

static int evaluator_init(struct evaluator *E, const struct sf_model *m, const struct sf_sfq *q,
			  int window, float *dense, struct sf_err *e)
{
	size_t mx = (size_t)m->cfg.hidden_dim;
	size_t qd = (size_t)m->cfg.n_heads * (size_t)m->cfg.head_dim;
	if ((size_t)m->cfg.dim > mx)
		mx = (size_t)m->cfg.dim;
	if (qd > mx)
		mx = qd;
	memset(E, 0, sizeof(*E));
	E->m = m;
	E->q = q;
	E->dense = dense;
	int ret = sf_state_init(&E->s, &m->cfg, window, e);
	if (ret)
		return ret;
	E->s.skip_logits = 1;
	if (!(E->delta = malloc((size_t)m->cfg.dim * sizeof(float))) ||
	    !(E->xm = malloc(mx * sizeof(float))) || !(E->order = malloc(mx * sizeof(uint32_t))) ||
	    !(E->mxv = malloc(mx * sizeof(float)))) {
		evaluator_free(E);
		return sf_err_set(e, -ENOMEM, "calibration: %s", strerror(ENOMEM));
	}
	return 0;
}

/* Runs every window through the forward pass with the hook. */
static void run_tokens(struct evaluator *E, const int32_t *tokens, size_t n, int window)
{
	struct sf_group_exec ex = { .fn = hook, .ctx = E };
	E->s.exec = &ex;
	E->err = E->ref = 0.0;
	for (size_t w0 = 0; w0 < n; w0 += (size_t)window) {
		size_t len = n - w0 < (size_t)window ? n - w0 : (size_t)window;
		for (size_t p = 0; p < len; p++) {
			E->tok = w0 + p;
			sf_forward(E->m, &E->s, tokens[w0 + p], (int)p);
		}
	}
	E->s.exec = NULL;
}

// ----------------------------------------------------------------------------
// candidates evaluated in parallel, one evaluator per worker

struct batch {
	struct evaluator *ev;		/* (nth) */
	const int32_t *tokens;
	size_t ntok;
	int window, layer;
	const struct config *cand;
	double *err;
	size_t n;
};

static void batch_worker(void *arg, int ith, int nth)
{
	struct batch *B = arg;
	struct evaluator *E = &B->ev[ith];
	for (size_t c = (size_t)ith; c < B->n; c += (size_t)nth) {
		E->mode = MODE_EVAL;
		E->layer = B->layer;
		E->cfg = B->cand[c];
		run_tokens(E, B->tokens, B->ntok, B->window);
		B->err[c] = E->ref > 0.0 ? E->err / E->ref : 0.0;
	}
}

static void evaluate(struct sf_pool *pool, struct batch *B, const struct config *cand,
		     double *err, size_t n)
{
	B->cand = cand;
	B->err = err;
	B->n = n;
	if (pool)
		sf_pool_run(pool, batch_worker, B);
	else
		batch_worker(B, 0, 1);
}

static void config_of(struct config *c, const struct sf_calib_sizes *sz, const double *b)
{
	for (int g = 0; g < SF_NGROUPS; g++) {
		/* the small slack keeps 0.45 * 128 = 57.6 from becoming 57.59999 */
		double k = floor(b[g] * (double)sz[g].entries + 1e-9);
		c->k_top[g] = k < 0 ? 0 : (uint64_t)k;
		c->k_mid[g] = 0;
	}
}

/* SpAx step 2 for one target: at each group's budget, in group order, the
 * top/middle split of least layer error with the others as chosen so far.
 * The grid runs k_top over [lo, units] with k_mid = (units - k_top) / rho,
 * lo being the least k_top whose rest still fits in the middle tier, so
 * every point spends the group's whole budget (k_top + rho k_mid = units,
 * up to rounding down). */
static void step2(struct sf_pool *pool, struct batch *B, const struct sf_calib_sizes *sz,
		  struct config *best, double *best_err)
{
	struct config cand[SF_CALIB_GRID];
	double err[SF_CALIB_GRID];
	for (int g = 0; g < SF_NGROUPS; g++) {
		double units = (double)best->k_top[g];	/* budget in top-tier entries */
		double n = (double)sz[g].entries;
		double rho = (double)sz[g].mid_bytes / (double)sz[g].top_bytes;
		double lo = (units - rho * n) / (1.0 - rho);
		if (lo < 0.0)
			lo = 0.0;
		for (int i = 0; i < SF_CALIB_GRID; i++) {
			double kt = ceil(lo + (units - lo) * i / (SF_CALIB_GRID - 1) - 1e-9);
			if (kt > units)
				kt = units;
			double km = floor((units - kt) / rho + 1e-9);
			if (km > n - kt)
				km = n - kt;
			cand[i] = *best;
			cand[i].k_top[g] = (uint64_t)kt;
			cand[i].k_mid[g] = (uint64_t)km;
		}
		evaluate(pool, B, cand, err, SF_CALIB_GRID);
		for (int i = 0; i < SF_CALIB_GRID; i++)
			if (err[i] < *best_err) {
				*best_err = err[i];
				*best = cand[i];
			}
	}
}

static void record(struct sf_calib_layer *L, const struct sf_calib_sizes *sz,
		   const struct config *c, double err, double step1_err)
{
	L->error = err;
	L->step1_error = step1_err;
	L->budget = layer_budget(sz, c->k_top, c->k_mid);
	for (int g = 0; g < SF_NGROUPS; g++) {
		L->g[g].k_top = c->k_top[g];
		L->g[g].k_mid = c->k_mid[g];
		L->g[g].budget = sf_calib_group_budget(&sz[g], c->k_top[g], c->k_mid[g]);
		L->g[g].error = err;
	}
}

/* Step 1 for one layer down the targets in falling order: from dense, each
 * move lowers the one group whose lowering by SF_CALIB_STEP (or by what is
 * left to reach the target, when a whole step would pass it) gives the
 * least layer error; at each target, step 2 and the TEAL setting. */
static void calibrate_layer(struct sf_calib *C, int l, const size_t *order,
			    struct sf_pool *pool, struct batch *B)
{
	const struct sf_calib_sizes *sz = C->sizes;
	double b[SF_NGROUPS] = { 1, 1, 1, 1 }, D[SF_NGROUPS], total = 0.0;
	for (int g = 0; g < SF_NGROUPS; g++)
		total += D[g] = (double)sz[g].entries * (double)sz[g].top_bytes;
	double cur = 1.0;

	B->layer = l;
	for (size_t t = 0; t < C->nbudgets; t++) {
		size_t bi = order[t];
		double target = C->budgets[bi];
		while (cur > target + 1e-12) {
			struct config cand[SF_NGROUPS];
			double nb[SF_NGROUPS][SF_NGROUPS], err[SF_NGROUPS];
			int nc = 0;
			for (int g = 0; g < SF_NGROUPS; g++) {
				if (b[g] <= 0.0)
					continue;
				double step = b[g] < SF_CALIB_STEP ? b[g] : SF_CALIB_STEP;
				if (cur - step * D[g] / total < target)
					step = (cur - target) * total / D[g];
				memcpy(nb[nc], b, sizeof(b));
				nb[nc][g] = b[g] - step;
				config_of(&cand[nc], sz, nb[nc]);
				nc++;
			}
			evaluate(pool, B, cand, err, (size_t)nc);
			int best = 0;
			for (int i = 1; i < nc; i++)
				if (err[i] < err[best])
					best = i;
			memcpy(b, nb[best], sizeof(b));
			cur = 0.0;
			for (int g = 0; g < SF_NGROUPS; g++)
				cur += b[g] * D[g] / total;
		}
		struct config c;
		double e1 = 0.0, e2 = 0.0;
		config_of(&c, sz, b);
		if (cur < 1.0 - 1e-12) {	/* at target 1 the layer stays dense */
			evaluate(pool, B, &c, &e1, 1);	/* the rounded k's of step 1 */
			e2 = e1;
			step2(pool, B, sz, &c, &e2);
		}
		record(sf_calib_at(C, bi, l), sz, &c, e2, e1);
		struct config tc;
		double tb[SF_NGROUPS] = { target, target, target, target }, te = 0.0;
		config_of(&tc, sz, tb);
		if (target < 1.0)
			evaluate(pool, B, &tc, &te, 1);
		struct sf_calib_layer *L = sf_calib_at(C, bi, l);
		L->teal_error = te;
		for (int g = 0; g < SF_NGROUPS; g++)
			L->teal_k_top[g] = tc.k_top[g];
	}
}

static int by_budget_desc(const void *a, const void *b, void *arg)
{
	const double *bud = arg;
	double u = bud[*(const size_t *)a], v = bud[*(const size_t *)b];
	return u > v ? -1 : u < v;
}

int sf_calib_run(struct sf_calib *C, const struct sf_model *m, const struct sf_sfq *q,
		 const int32_t *tokens, size_t n, const struct sf_calib_opts *o,
		 struct sf_pool *pool, struct sf_err *e)
{
	int L = m->cfg.n_layers, nth = pool ? sf_pool_size(pool) : 1, ret = 0, made = 0;
	size_t dim = (size_t)m->cfg.dim, order[SF_CALIB_MAX_BUDGETS];
	struct evaluator *ev = calloc((size_t)nth, sizeof(*ev));
	float *dense = NULL;

	memset(C, 0, sizeof(*C));
	if (!ev || o->nbudgets == 0 || o->nbudgets > SF_CALIB_MAX_BUDGETS || n == 0 ||
	    o->window < 1 || o->window > m->cfg.max_seq_len) {
		ret = sf_err_set(e, ev ? -EINVAL : -ENOMEM, "calibration: %zu budgets, %zu tokens, "
				 "window %d: expected 1..%d budgets, some tokens, window 1..%d",
				 o->nbudgets, n, o->window, SF_CALIB_MAX_BUDGETS, m->cfg.max_seq_len);
		goto out;
	}
	for (size_t i = 0; i < o->nbudgets; i++)
		if (!(o->budgets[i] > 0.0 && o->budgets[i] <= 1.0)) {
			ret = sf_err_set(e, -EINVAL, "calibration: budget %g outside (0, 1]",
					 o->budgets[i]);
			goto out;
		}
	for (int l = 0; l < L; l++)
		if (!(o->dense_layers && o->dense_layers[l]) && !(o->layers && !o->layers[l]))
			for (int g = 0; g < SF_NGROUPS; g++)
				if (!sf_sfq_find(q, l, (enum sf_group)g)) {
					ret = sf_err_set(e, SF_EMISMATCH, "codes: no layer %d %s "
							 "(encode every layer that is not dense)",
							 l, sf_group_name((enum sf_group)g));
					goto out;
				}
	C->fingerprint = m->fingerprint;
	C->method = q->method;
	C->n_layers = L;
	C->nbudgets = o->nbudgets;
	C->tokens = n;
	C->window = o->window;
	memcpy(C->budgets, o->budgets, o->nbudgets * sizeof(double));
	sf_calib_sizes_of(C->sizes, m, q->method);
	if (!(C->layers = calloc(o->nbudgets * (size_t)L, sizeof(*C->layers))) ||
	    !(dense = calloc(n * (size_t)L * dim, sizeof(float))) ||
	    (o->layers && !(C->part = malloc((size_t)L)))) {
		ret = sf_err_set(e, -ENOMEM, "calibration: %s", strerror(ENOMEM));
		goto out;
	}
	if (o->layers)
		memcpy(C->part, o->layers, (size_t)L);
	for (; made < nth; made++)
		if ((ret = evaluator_init(&ev[made], m, q, o->window, dense, e)))
			goto out;

	/* the dense layer outputs every configuration is measured against */
	ev[0].mode = MODE_RECORD;
	run_tokens(&ev[0], tokens, n, o->window);
	struct sf_err why;
	if ((ret = sf_state_error(&ev[0].s, &why))) {	/* NaN or Inf weights */
		ret = sf_err_set(e, ret, "calibration: %s", why.msg);
		goto out;
	}

	for (size_t i = 0; i < o->nbudgets; i++)
		order[i] = i;
	qsort_r(order, o->nbudgets, sizeof(size_t), by_budget_desc, (void *)o->budgets);
	struct batch B = { .ev = ev, .tokens = tokens, .ntok = n, .window = o->window };
	for (int l = 0; l < L; l++) {
		if (o->layers && !o->layers[l])
			continue;	/* another part's */
		if (o->dense_layers && o->dense_layers[l]) {
			for (size_t b = 0; b < o->nbudgets; b++) {
				struct sf_calib_layer *Ly = sf_calib_at(C, b, l);
				Ly->dense = 1;
				Ly->budget = 1.0;
				for (int g = 0; g < SF_NGROUPS; g++) {
					Ly->g[g] = (struct sf_calib_group){ C->sizes[g].entries, 0, 1.0, 0.0 };
					Ly->teal_k_top[g] = C->sizes[g].entries;
				}
			}
		} else {
			calibrate_layer(C, l, order, pool, &B);
		}
		if (o->progress)
			o->progress(o->progress_arg, l + 1, L);
	}
	if (!C->part)
		sf_calib_realise(C);
out:
	for (int i = 0; i < made; i++)
		evaluator_free(&ev[i]);
	free(ev);
	free(dense);
	if (ret)
		sf_calib_free(C);
	return ret;
}

