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
#include "engine/select.h"
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

/* Tokens a forward pass of the calibration takes (at most the window):
 * each weight of a product serves that many tokens. */
#define CALIB_BATCH 64

/* The middle tier of the layer under test, decoded once for all its
 * candidates and tokens: per group and matrix, each column's values and
 * the factor its input is multiplied by first (sf_codes_factors), so a
 * column-accumulate over them takes decode-accumulate's steps. */
struct mid_layer {
	float *values[SF_NGROUPS][SF_GROUP_MAX_MATRICES];	/* (entries, rows) */
	float *factor[SF_NGROUPS][SF_GROUP_MAX_MATRICES];	/* (entries) */
};

/* One worker's evaluator: a run state and the scratch of the hook. */
struct evaluator {
	const struct sf_model *m;
	const struct sf_sfq *q;
	const struct mid_layer *mid;	/* shared */
	struct sf_runstate s;
	int mode, layer;
	int last;		/* MODE_RECORD: the pass stops after this layer */
	struct config cfg;
	size_t tok;		/* the pass's first token */
	float *dense;		/* (ntok, n_layers, dim) dense layer outputs: shared */
	float *xin;		/* (ntok, n_layers, dim) dense residual stream into each layer: shared */
	float *delta;		/* (batch, dim) the pass's attention outputs */
	float *xm;		/* (batch, n) inputs with only their top-tier entries */
	uint32_t *order;	/* (batch, n) each token's entries by falling magnitude */
	float *mxv;		/* (max entries) one token's middle-tier inputs */
	const void **mcol;	/* (max entries) and their columns */
	uint64_t *rank_scratch;	/* (2, max entries) */
	double err, ref;
};

/* The three tiers of one group for the T tokens of a pass, in (T, n):
 * each token's entries ranked by |x| (one ranking for the whole group),
 * the first k_top through the dense weights (one product for the pass),
 * the next k_mid through the codes, the rest omitted. */
static void tiered_product(struct evaluator *E, int layer, enum sf_group g, const float *in,
			   int T, size_t n, int nout, float *const *out,
			   const struct sf_weight *const *w)
{
	uint64_t kt = E->cfg.k_top[g], km = E->cfg.k_mid[g];
	const struct sf_sfq_section *sec = sf_sfq_find(E->q, layer, g);

	for (int t = 0; t < T; t++) {
		const float *x = in + (size_t)t * n;
		uint32_t *order = E->order + (size_t)t * n;
		float *xm = E->xm + (size_t)t * n;
		sf_select_rank(x, (uint32_t)n, order, E->rank_scratch);
		memset(xm, 0, n * sizeof(float));
		for (uint64_t r = 0; r < kt; r++)
			xm[order[r]] = x[order[r]];
	}
	sf_group_dense_batch(NULL, E->xm, n, T, nout, out, w);
	if (km == 0 || !sec)
		return;
	for (int t = 0; t < T; t++) {
		const float *x = in + (size_t)t * n;
		const uint32_t *order = E->order + (size_t)t * n + kt;
		for (int i = 0; i < nout; i++) {
			const float *f = E->mid->factor[g][i];
			size_t rows = (size_t)w[i]->rows;
			for (uint64_t r = 0; r < km; r++) {
				E->mxv[r] = x[order[r]] * f[order[r]];
				E->mcol[r] = E->mid->values[g][i] + (size_t)order[r] * rows;
			}
			sf_colaccum(out[i] + (size_t)t * rows, rows, E->mcol, 0, SF_DTYPE_F32,
				    E->mxv, (size_t)km);
		}
	}
}

/* Decodes layer l's middle tier into M, allocated at its first use (every
 * layer has the same shapes). */
static int decode_mid(struct mid_layer *M, const struct sf_sfq *q, int l, struct sf_err *e)
{
	for (int g = 0; g < SF_NGROUPS; g++) {
		const struct sf_sfq_section *sec = sf_sfq_find(q, l, (enum sf_group)g);
		for (int i = 0; sec && i < sec->nmat; i++) {
			struct sf_codes_view v = sf_sfq_view(q, sec, i);
			if (!M->values[g][i] &&
			    (!(M->values[g][i] = malloc(sec->entries * v.m * sizeof(float))) ||
			     !(M->factor[g][i] = malloc(sec->entries * sizeof(float)))))
				return sf_err_set(e, -ENOMEM, "calibration: the middle tier of a "
						  "layer as floats: %s", strerror(ENOMEM));
			for (uint64_t c = 0; c < sec->entries; c++)
				M->factor[g][i][c] = sf_codes_factors(v.method, v.codebook,
								      v.base + c * v.stride, v.m,
								      M->values[g][i] + c * v.m);
		}
	}
	return 0;
}

static void mid_free(struct mid_layer *M)
{
	for (int g = 0; g < SF_NGROUPS; g++)
		for (int i = 0; i < SF_GROUP_MAX_MATRICES; i++) {
			free(M->values[g][i]);
			free(M->factor[g][i]);
		}
}

static void hook(void *ctx, int layer, enum sf_group g, const float *in, int T, size_t n,
		 int nout, float *const *out, const struct sf_weight *const *w)
{
	struct evaluator *E = ctx;
	size_t dim = (size_t)E->m->cfg.dim, L = (size_t)E->m->cfg.n_layers;
	int is_out = g == SF_GROUP_ATTN_OUT || g == SF_GROUP_FFN_OUT;

	if (E->mode == MODE_RECORD) {
		/* the residual stream into the layer is the forward pass's own */
		for (int t = 0; g == SF_GROUP_ATTN_IN && t < T; t++)
			memcpy(E->xin + ((E->tok + (size_t)t) * L + (size_t)layer) * dim,
			       E->s.x + (size_t)t * dim, dim * sizeof(float));
		sf_group_dense_batch(NULL, in, n, T, nout, out, w);
		for (int t = 0; is_out && t < T; t++)
			sf_axpy_f32(E->dense + ((E->tok + (size_t)t) * L + (size_t)layer) * dim, 1.0f,
				    out[0] + (size_t)t * dim, dim);
		return;
	}
	/* MODE_EVAL: only the layer under test runs (sf_forward_layer) */
	tiered_product(E, layer, g, in, T, n, nout, out, w);
	if (g == SF_GROUP_ATTN_OUT)
		memcpy(E->delta, out[0], (size_t)T * dim * sizeof(float));
	if (g != SF_GROUP_FFN_OUT)
		return;
	for (int t = 0; t < T; t++) {
		const float *d = E->dense + ((E->tok + (size_t)t) * L + (size_t)layer) * dim;
		const float *delta = E->delta + (size_t)t * dim, *o = out[0] + (size_t)t * dim;
		for (size_t i = 0; i < dim; i++) {
			double diff = (double)delta[i] + o[i] - d[i];
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
	free(E->mcol);
	free(E->rank_scratch);
}

static int evaluator_init(struct evaluator *E, const struct sf_model *m, const struct sf_sfq *q,
			  const struct mid_layer *mid, int window, float *dense, float *xin,
			  struct sf_err *e)
{
	size_t mx = (size_t)m->cfg.hidden_dim;
	size_t qd = (size_t)m->cfg.n_heads * (size_t)m->cfg.head_dim;
	int batch = window < CALIB_BATCH ? window : CALIB_BATCH;
	if ((size_t)m->cfg.dim > mx)
		mx = (size_t)m->cfg.dim;
	if (qd > mx)
		mx = qd;
	memset(E, 0, sizeof(*E));
	E->m = m;
	E->q = q;
	E->mid = mid;
	E->dense = dense;
	E->xin = xin;
	int ret = sf_state_init_batch(&E->s, &m->cfg, window, batch, e);
	if (ret)
		return ret;
	E->s.skip_logits = 1;
	if (!(E->delta = malloc((size_t)batch * (size_t)m->cfg.dim * sizeof(float))) ||
	    !(E->xm = malloc((size_t)batch * mx * sizeof(float))) ||
	    !(E->order = malloc((size_t)batch * mx * sizeof(uint32_t))) ||
	    !(E->mxv = malloc(mx * sizeof(float))) ||
	    !(E->mcol = malloc(mx * sizeof(*E->mcol))) ||
	    !(E->rank_scratch = malloc(2 * mx * sizeof(uint64_t)))) {
		evaluator_free(E);
		return sf_err_set(e, -ENOMEM, "calibration: %s", strerror(ENOMEM));
	}
	return 0;
}

/* Runs every window in passes of the state's batch: the model up to the
 * last layer calibrated (MODE_RECORD, from the tokens) or only the layer under test (MODE_EVAL,
 * from the residual stream recorded into it, which the layers before it
 * would compute again). */
static void run_tokens(struct evaluator *E, const int32_t *tokens, size_t n, int window)
{
	struct sf_group_exec ex = { .fn = hook, .ctx = E, .tokens = E->s.batch };
	size_t dim = (size_t)E->m->cfg.dim, L = (size_t)E->m->cfg.n_layers;

	E->s.exec = &ex;
	E->err = E->ref = 0.0;
	for (size_t w0 = 0; w0 < n; w0 += (size_t)window) {
		size_t len = n - w0 < (size_t)window ? n - w0 : (size_t)window;
		for (size_t p = 0, T; p < len; p += T) {
			T = len - p < (size_t)E->s.batch ? len - p : (size_t)E->s.batch;
			E->tok = w0 + p;
			if (E->mode == MODE_RECORD) {
				/* the layers after the last calibrated do not matter */
				sf_forward_layers(E->m, &E->s, tokens + E->tok, (int)T, (int)p,
						  E->last + 1);
				continue;
			}
			for (size_t t = 0; t < T; t++)
				memcpy(E->s.x + t * dim,
				       E->xin + ((E->tok + t) * L + (size_t)E->layer) * dim,
				       dim * sizeof(float));
			sf_forward_layer(E->m, &E->s, E->layer, (int)T, (int)p);
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
	/* progress: configurations scored in all and in this layer, the
	 * estimate of this layer's count */
	const struct sf_calib_opts *o;
	struct sf_calib_progress p;
	uint64_t layer_configs;
	double layer_estimate;
};

static void report(struct batch *B)
{
	double f = B->layer_estimate > 0 ? (double)B->layer_configs / B->layer_estimate : 0.0;
	if (!B->o->progress)
		return;
	if (f > 0.99)	/* more than estimated: not done before the layer ends */
		f = 0.99;
	B->p.fraction = B->p.layers ? (B->p.layers_done + f) / B->p.layers : 1.0;
	if (B->p.fraction > 1.0)
		B->p.fraction = 1.0;
	B->o->progress(B->o->progress_arg, &B->p);
}

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
	B->p.configs += n;
	B->layer_configs += n;
	report(B);
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

uint64_t sf_calib_bytes(const struct sf_model *m, size_t n, const struct sf_calib_opts *o,
			int threads)
{
	const struct sf_config *c = &m->cfg;
	uint64_t L = (uint64_t)c->n_layers, dim = (uint64_t)c->dim, mx = (uint64_t)c->hidden_dim;
	uint64_t qd = (uint64_t)c->n_heads * (uint64_t)c->head_dim, flash = 0;
	int batch = o->window < CALIB_BATCH ? o->window : CALIB_BATCH;

	mx = dim > mx ? dim : mx;
	mx = qd > mx ? qd : mx;
	for (int l = 0; l < c->n_layers; l++) {
		const struct sf_layer_weights *w = &m->layers[l];
		flash += w->wq.rows * w->wq.cols + w->wk.rows * w->wk.cols + w->wv.rows * w->wv.cols +
			 w->wo.rows * w->wo.cols + w->w_gate.rows * w->w_gate.cols +
			 w->w_up.rows * w->w_up.cols + w->w_down.rows * w->w_down.cols;
	}
	/* per worker: a run state and the evaluator's buffers; shared: the
	 * dense outputs and inputs of every layer, one layer's middle tier as
	 * floats, and a quantized top tier as floats */
	uint64_t worker = sf_state_bytes_batch(c, o->window, batch) +
			  (uint64_t)batch * (dim + 2 * mx) * 4 + mx * (4 + 8 + 16);
	return (uint64_t)threads * worker + 2 * (uint64_t)n * L * dim * 4 + flash / L * 4 +
	       (sf_dtype_is_block(o->top_dtype) ? flash * 4 : 0);
}

int sf_calib_run(struct sf_calib *C, const struct sf_model *m, const struct sf_sfq *q,
		 const int32_t *tokens, size_t n, const struct sf_calib_opts *o,
		 struct sf_pool *pool, struct sf_err *e)
{
	int L = m->cfg.n_layers, nth = pool ? sf_pool_size(pool) : 1, ret = 0, made = 0;
	size_t dim = (size_t)m->cfg.dim, order[SF_CALIB_MAX_BUDGETS];
	struct evaluator *ev = calloc((size_t)nth, sizeof(*ev));
	struct sf_top_model tm = { 0 };
	struct mid_layer mid = { 0 };
	float *dense = NULL, *xin = NULL;

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
	/* a quantized top tier: every evaluation computes with its weights */
	if (sf_dtype_is_block(o->top_dtype)) {
		if ((ret = sf_top_model_init(&tm, m, o->top_dtype, o->quant, e)))
			goto out;
		m = &tm.m;
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
	sf_calib_sizes_of(C->sizes, m, q->method, sf_dtype_is_block(o->top_dtype) ?
			  (int)o->top_dtype : SF_CALIB_DTYPE_MODEL);
	if (!(C->layers = calloc(o->nbudgets * (size_t)L, sizeof(*C->layers))) ||
	    !(dense = calloc(n * (size_t)L * dim, sizeof(float))) ||
	    !(xin = malloc(n * (size_t)L * dim * sizeof(float))) ||
	    (o->layers && !(C->part = malloc((size_t)L)))) {
		ret = sf_err_set(e, -ENOMEM, "calibration: %s", strerror(ENOMEM));
		goto out;
	}
	if (o->layers)
		memcpy(C->part, o->layers, (size_t)L);
	for (; made < nth; made++)
		if ((ret = evaluator_init(&ev[made], m, q, &mid, o->window, dense, xin, e)))
			goto out;

	/* the dense layer outputs every configuration is measured against */
	ev[0].mode = MODE_RECORD;
	ev[0].s.release_weights = o->release_weights;
	for (int l = 0; l < L; l++)
		if (!o->layers || o->layers[l])
			ev[0].last = l;
	run_tokens(&ev[0], tokens, n, o->window);
	struct sf_err why;
	if ((ret = sf_state_error(&ev[0].s, &why))) {	/* NaN or Inf weights */
		ret = sf_err_set(e, ret, "calibration: %s", why.msg);
		goto out;
	}

	for (size_t i = 0; i < o->nbudgets; i++)
		order[i] = i;
	qsort_r(order, o->nbudgets, sizeof(size_t), by_budget_desc, (void *)o->budgets);
	struct batch B = { .ev = ev, .tokens = tokens, .ntok = n, .window = o->window, .o = o };
	/* the first layer's configurations, estimated: step 1 lowers the
	 * layer from 1 to the lowest target by steps of SF_CALIB_STEP of one
	 * group (a quarter of the layer on average), each scoring every group;
	 * at each target step 2's grid per group, step 1's rounding and TEAL */
	double lowest = 1.0;
	for (size_t i = 0; i < o->nbudgets; i++)
		lowest = o->budgets[i] < lowest ? o->budgets[i] : lowest;
	B.layer_estimate = (1.0 - lowest) / (SF_CALIB_STEP / SF_NGROUPS) * SF_NGROUPS +
			   (double)o->nbudgets * (2 + SF_NGROUPS * SF_CALIB_GRID);
	for (int l = 0; l < L; l++)
		B.p.layers += !(o->layers && !o->layers[l]) && !(o->dense_layers && o->dense_layers[l]);
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
			if ((ret = decode_mid(&mid, q, l, e)))
				goto out;
			B.layer_configs = 0;
			calibrate_layer(C, l, order, pool, &B);
			B.p.layers_done++;
			B.layer_estimate = (double)B.layer_configs;	/* the next is alike */
			B.layer_configs = 0;
			report(&B);
		}
	}
	if (!C->part)
		sf_calib_realise(C);
out:
	for (int i = 0; i < made; i++)
		evaluator_free(&ev[i]);
	free(ev);
	free(dense);
	free(xin);
	mid_free(&mid);
	sf_top_model_free(&tm);
	if (ret)
		sf_calib_free(C);
	return ret;
}

