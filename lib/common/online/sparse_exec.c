/* The sparse decoder's per-token work (sparse_impl.h): per flash group,
 * select the entries, subtract the cache, plan collapsed 4 KiB aligned
 * reads, read them through io_uring and compute on them in position
 * order as they complete, then admit what was read. Selective
 * computation's set is fixed here at the end of its prefill. man/sf-run.1. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/quant.h"
#include "engine/codes.h"
#include "engine/kernels_q.h"
#include "engine/select.h"
#include "formats/trace.h"
#include "online/runs.h"
#include "online/sparse_impl.h"
#include "online/uring.h"

/* Weights below which a batch runs on the caller: waking workers that
 * went to sleep during the I/O wait costs more (on mix4-5m, 1 << 16 made
 * compute at -t 2 1.6x that at -t 1). Any split gives the same sums.
 * Counted in top-tier weights; a middle-tier weight costs MID_COST_* of
 * them (decode-accumulate against the bf16 column-accumulate, measured
 * by tests/bench/encode.sh: about 9x for trellis codes, 2x for scalar). */
#define POOL_MIN_WEIGHTS (1u << 20)
#define MID_COST_TRELLIS 8
#define MID_COST_SCALAR 2
/* Selective computation: ffn_in rows of the set are computed in spans,
 * joined across gaps of up to this many rows (computed, then cleared):
 * fewer, longer kernel calls. */
#define ROW_GAP 8

// ----------------------------------------------------------------------------
// selective computation: the set chosen after the prefill

/* End of the prefill: the set chosen, as ffn_out allow bitmaps (within
 * what --keep left on flash) and ffn_in row spans. */
static void fix_set(struct sf_sparse *sp)
{
	const struct sf_image *img = sp->img;

	sf_select_compute_finish(sp->comp.sc);
	sp->comp.layers = 0;
	sp->comp.n_set = sp->comp.n_static = sp->comp.n_dynamic = 0;
	for (int l = 0; l < img->cfg.n_layers; l++) {
		const uint8_t *m = sp->comp.set_mask[l] = sf_select_compute_mask(sp->comp.sc, l);
		size_t at = (size_t)l * SF_NGROUPS + SF_GROUP_FFN_OUT;
		if (!m)
			continue;
		uint64_t *b = sp->comp.set_bits + (size_t)l * sp->tiers.words;
		const uint64_t *keep = sp->tiers.keep_allow[at];
		uint32_t n = (uint32_t)img->cfg.hidden_dim, cnt, ns, nd;
		memset(b, 0, sp->tiers.words * 8);
		for (uint32_t j = 0; j < n; j++)
			if (m[j] && (!keep || keep[j / 64] >> (j % 64) & 1))
				b[j / 64] |= 1ull << (j % 64);
		sp->tiers.allow[at] = b;

		const struct sf_image_group *G = sf_image_group(img, l, SF_GROUP_FFN_IN);
		struct sf_run *sv = sp->comp.spans + (size_t)l * sp->comp.rows_all;
		uint32_t k = 0;
		for (uint32_t r = 0; r < G->mat[0].rows; r++) {
			if (!m[G->rows ? G->rows[r] : r])
				continue;
			if (k && r - (sv[k - 1].start + sv[k - 1].len) <= ROW_GAP)
				sv[k - 1].len = r + 1 - sv[k - 1].start;
			else
				sv[k++] = (struct sf_run){ r, 1 };
		}
		sp->comp.nspans[l] = k;
		sf_select_compute_entries(sp->comp.sc, l, &cnt);
		sf_select_compute_split(sp->comp.sc, l, &ns, &nd);
		sp->comp.layers++;
		sp->comp.n_set += cnt;
		sp->comp.n_static += ns;
		sp->comp.n_dynamic += nd;
	}
	sp->comp.fixed = 1;
}

void sf_sparse_prefill(struct sf_sparse *sp, uint64_t tokens)
{
	if (!sp->comp.sc)
		return;
	sf_select_compute_reset(sp->comp.sc);
	for (int l = 0; l < sp->img->cfg.n_layers; l++) {
		size_t at = (size_t)l * SF_NGROUPS + SF_GROUP_FFN_OUT;
		sp->tiers.allow[at] = sp->tiers.keep_allow[at];
		sp->comp.set_mask[l] = NULL;
		sp->comp.nspans[l] = 0;
	}
	sp->comp.fixed = 0;
	sp->comp.prefill_left = tokens;
	sparse_pass_tokens(sp);
}

void sparse_pass_tokens(struct sf_sparse *sp)
{
	uint64_t left = sp->comp.sc && !sp->comp.fixed ? sp->comp.prefill_left : 0;
	sp->exec.tokens = left && left < (uint64_t)sp->s.tokens ? (int)left : sp->s.tokens;
}

const struct sf_select_compute *sf_sparse_compute(const struct sf_sparse *sp)
{
	return sp->comp.sc;
}

// ----------------------------------------------------------------------------
// the token: its figures closed, its collapse gap chosen

/* Closes the previous pass's figures (each of its tokens taking an equal
 * share of its time) and chooses this pass's gap; the pass holds T
 * tokens. */
static void token_begin(struct sf_sparse *sp, int T)
{
	double t = sf_now();
	int prev = sp->st.pass_tokens;

	if (prev) {
		for (int i = 0; i < prev && sp->st.nlat < sp->o.max_tokens; i++)
			sp->st.lat[sp->st.nlat++] = (t - sp->st.t_token) / prev;
		size_t w = (size_t)(sp->st.tokens % SF_SPARSE_AUTO_WINDOW);
		sp->collapse.win_bytes[w] = sp->st.tok_bytes;
		sp->collapse.win_span[w] = sp->st.tok_span;
		sp->st.tokens += (uint64_t)prev;
	}
	/* sparse_pass_tokens keeps a pass from running past the prefill */
	if (sp->comp.sc && !sp->comp.fixed) {
		if (sp->comp.prefill_left)
			sp->comp.prefill_left -= (uint64_t)T;
		else
			fix_set(sp);
	}
	sparse_pass_tokens(sp);
	sp->comp.passes += sp->comp.fixed ? (uint64_t)T : 0;
	sp->st.pass_tokens = T;
	sp->st.t_token = t;
	sp->st.tok_bytes = 0;
	sp->st.tok_span = 0;
	if (sp->o.collapse == SF_SPARSE_COLLAPSE_AUTO && sp->o.device_peak > 0) {
		uint64_t bytes = 0;
		double span = 0;
		for (int i = 0; i < SF_SPARSE_AUTO_WINDOW; i++) {
			bytes += sp->collapse.win_bytes[i];
			span += sp->collapse.win_span[i];
		}
		int bound = span > 0 && (double)bytes / span >= SF_SPARSE_BW_BOUND * sp->o.device_peak;
		sp->collapse.gap_bytes = bound ? 0 : sp->collapse.auto_gap_bytes;
	}
	if (sp->collapse.gap || sp->collapse.gap_bytes)
		sp->collapse.tokens_on += (uint64_t)T;
	else
		sp->collapse.tokens_off += (uint64_t)T;
}

// ----------------------------------------------------------------------------
// selection: the active entries, and --free-riders

/* The active entries of a bitmap (ascending), optionally only those in
 * another (and) and not in a third (minus). */
static size_t bits_entries(const uint64_t *bits, const uint64_t *and, const uint64_t *minus,
			   uint32_t n, uint32_t *out)
{
	size_t k = 0;
	for (uint32_t w = 0; w < (n + 63) / 64; w++) {
		uint64_t b = bits[w] & (and ? and[w] : ~0ull) & (minus ? ~minus[w] : ~0ull);
		while (b) {
			out[k++] = w * 64 + (uint32_t)__builtin_ctzll(b);
			b &= b - 1;
		}
	}
	return k;
}

/* --free-riders: the positions whose whole bundle lies in the 4 KiB
 * pages the top tier's positions tpos[0..*nt) touch join them (in
 * order), unless allow leaves them out; they leave the middle tier
 * mpos[0..*nm). Returns how many joined. */
static size_t add_riders(struct sf_sparse *sp, const struct sf_image_group *G,
			 const uint64_t *allow, size_t *nt, size_t *nm)
{
	const uint64_t s = G->top_bytes, P = SF_IMAGE_ALIGN;
	const uint64_t npages = sparse_round_up((uint64_t)G->entries * s) / P;
	uint64_t *pg = sp->tiers.pages;
	uint32_t *tpos = sp->s.tpos, *merged = sp->s.sel_scratch;
	size_t k = *nt, ti = 0, nout = 0, nr = 0;

	for (size_t i = 0; i < k; i++)
		for (uint64_t x = tpos[i] * s / P; x <= ((tpos[i] + 1) * s - 1) / P; x++)
			pg[x / 64] |= 1ull << (x % 64);
	for (uint64_t x = 0; x < npages;) {
		if (!(pg[x / 64] >> (x % 64) & 1)) {
			x++;
			continue;
		}
		uint64_t x1 = x;
		while (x1 + 1 < npages && pg[(x1 + 1) / 64] >> ((x1 + 1) % 64) & 1)
			x1++;
		/* q * s >= x * P and (q + 1) * s <= (x1 + 1) * P */
		uint64_t q1 = (x1 + 1) * P / s;
		for (uint64_t q = (x * P + s - 1) / s; q < q1 && q < G->entries; q++) {
			while (ti < k && tpos[ti] < q)
				merged[nout++] = tpos[ti++];
			if (ti < k && tpos[ti] == q) {
				merged[nout++] = tpos[ti++];
				continue;
			}
			uint32_t j = G->perm[q];
			if (allow && !(allow[j / 64] >> (j % 64) & 1))
				continue;
			merged[nout++] = (uint32_t)q;
			nr++;
		}
		x = x1 + 1;
	}
	while (ti < k)
		merged[nout++] = tpos[ti++];
	memset(pg, 0, (size_t)(npages + 63) / 64 * 8);
	if (!nr)
		return 0;
	memcpy(tpos, merged, nout * sizeof(*tpos));
	*nt = nout;
	size_t m = 0;
	for (size_t i = 0, t = 0; i < *nm; i++) {
		while (t < nout && tpos[t] < sp->s.mpos[i])
			t++;
		if (t == nout || tpos[t] != sp->s.mpos[i])
			sp->s.mpos[m++] = sp->s.mpos[i];
	}
	*nm = m;
	return nr;
}

// ----------------------------------------------------------------------------
// compute: in position order as the reads complete, in batches

struct compute_task {
	const struct sf_sparse *sp;
	const struct sf_image_group *G;
	int T;				/* tokens of the pass */
	float *y[SF_GROUP_MAX_MATRICES];	/* (T, ld[i]) */
	size_t ld[SF_GROUP_MAX_MATRICES];
	uint64_t total_rows;
	const struct sf_run *spans;	/* rows computed (bundle rows); NULL: all */
	uint32_t nspans;
	unsigned weight_cost;		/* top-tier weights one weight costs */
	const struct sf_slab *slab;	/* (nmat) the group held whole; NULL: columns */
	const float *slab_x;		/* its batch's inputs: s.xv, or s.xt (below) */
};

/* Worker ith of nth's share of the output rows of every matrix of the
 * group taken in turn: rows [a[i], b[i]) of matrix i, empty when
 * a[i] >= b[i]. Each row sums its columns in order, so any split gives
 * the same sums. */
static void worker_rows(const struct compute_task *t, int ith, int nth, size_t *a, size_t *b)
{
	size_t lo, hi, base = 0;

	/* whole blocks of a q8/q4 column where the matrices' rows allow */
	sf_pool_split(t->total_rows, SF_QBLOCK, ith, nth, &lo, &hi);
	for (int i = 0; i < t->G->nmat; i++) {
		size_t rows = (size_t)t->G->mat[i].rows;
		a[i] = lo > base ? lo - base : 0;
		b[i] = hi <= base ? 0 : hi - base < rows ? hi - base : rows;
		base += rows;
	}
}

/* Top tier: every column of a segment accumulated over the worker's rows
 * (those of the computation set's spans, when there are any). */
static void top_worker(void *arg, int ith, int nth)
{
	const struct compute_task *t = arg;
	const struct sf_sparse *sp = t->sp;
	const struct sf_image_group *G = t->G;
	size_t a[SF_GROUP_MAX_MATRICES], b[SF_GROUP_MAX_MATRICES];

	worker_rows(t, ith, nth, a, b);
	for (int i = 0; i < G->nmat; i++) {
		if (a[i] >= b[i])
			continue;
		const struct sf_run all = { (uint32_t)a[i], (uint32_t)(b[i] - a[i]) };
		const struct sf_run *sv = t->spans ? t->spans : &all;
		uint32_t ns = t->spans ? t->nspans : 1;
		for (uint32_t k = 0; k < ns; k++) {
			size_t r0 = sv[k].start > a[i] ? sv[k].start : a[i];
			size_t r1 = sv[k].start + sv[k].len < b[i] ? sv[k].start + sv[k].len : b[i];
			if (r0 >= r1)
				continue;
			size_t rows = (size_t)G->mat[i].rows, off = (size_t)G->mat[i].offset;
			if (t->slab)
				sf_slab_accum(t->y[i] + r0, t->ld[i], r0, r1, &t->slab[i], sp->s.idx,
					      sp->s.nidx, t->slab_x, sp->s.sel, sp->s.ldx, (size_t)t->T);
			else if (sf_dtype_is_block(G->mat[i].dtype) && !sp->o.f32_activations)
				sf_qcolaccum_int(t->y[i] + r0, t->ld[i], r0, r1, rows, sp->s.cols,
						 sp->s.idx, off, G->mat[i].dtype, sp->s.xv,
						 sp->s.ldx, (size_t)t->T, sp->s.nidx);
			else
				sf_colaccum_span(t->y[i] + r0, t->ld[i], r0, r1, rows, sp->s.cols,
						 off, G->mat[i].dtype, sp->s.xv,
						 t->T == 1 ? NULL : sp->s.sel, sp->s.ldx,
						 (size_t)t->T, sp->s.nidx);
		}
	}
}

/* Middle tier: the same rows (a trellis record decodes from any row, its
 * window rebuilt there). */
static void mid_worker(void *arg, int ith, int nth)
{
	const struct compute_task *t = arg;
	const struct sf_sparse *sp = t->sp;
	size_t a[SF_GROUP_MAX_MATRICES], b[SF_GROUP_MAX_MATRICES];

	worker_rows(t, ith, nth, a, b);
	for (int i = 0; i < t->G->nmat; i++) {
		if (a[i] >= b[i])
			continue;
		struct sf_codes_view v = sf_image_mid_view(sp->img, t->G, i, sp->s.mirror);
		if (t->T == 1)
			sf_codes_colaccum(t->y[i], &v, a[i], b[i], sp->s.idx, sp->s.xv, sp->s.nidx);
		else
			sf_codes_colaccum_batch(t->y[i], t->ld[i], &v, a[i], b[i], sp->s.idx,
						sp->s.xv, sp->s.sel, sp->s.ldx, (size_t)t->T,
						sp->s.nidx);
	}
}

/* The work gathered for the next batch, in top-tier weights of one
 * token (when to compute it) or of them all (whether to wake the
 * workers for it). */
static uint64_t batch_work(const struct sf_sparse *sp, const struct compute_task *t)
{
	return (uint64_t)sp->s.nidx * t->total_rows * t->weight_cost;
}

static uint64_t batch_work_all(const struct sf_sparse *sp, const struct compute_task *t)
{
	return batch_work(sp, t) * (uint64_t)t->T;
}

static void flush(struct sf_sparse *sp, void (*fn)(void *, int, int), struct compute_task *t)
{
	if (!sp->s.nidx)
		return;
	double t0 = sf_now(), dt;
	if (sp->pool && batch_work_all(sp, t) >= POOL_MIN_WEIGHTS)
		sf_pool_run(sp->pool, fn, t);
	else
		fn(t, 0, 1);
	dt = sf_now() - t0;
	sp->st.compute_s += dt;
	sp->st.overlap_s += sp->io.inflight ? dt : 0;
	sp->s.nidx = 0;
}

/* A pass's inputs in (T, n) to s.xt by position (entry j at G->pos[j]),
 * (positions, ldx). The threads take the entries in stretches: alone, a
 * prompt's pass waited on it 8% of its time. */
struct transpose_task {
	struct sparse_scratch *s;
	const struct sf_image_group *G;
	const float *in;
	size_t n, T;
};

static void transpose_worker(void *arg, int ith, int nth)
{
	const struct transpose_task *tt = arg;
	size_t lo, hi;
	sf_pool_split(tt->n, 16, ith, nth, &lo, &hi);
	if (lo < hi)
		sf_transpose_columns(tt->s->xt, tt->s->ldx, tt->G->pos + lo, tt->in + lo, tt->n,
				     tt->T, hi - lo, tt->s->ldx);
}

static void transpose_inputs(struct sf_sparse *sp, const struct sf_image_group *G,
			     const float *in, size_t n, size_t T)
{
	struct transpose_task tt = { .s = &sp->s, .G = G, .in = in, .n = n, .T = T };
	sf_pool_run(sp->pool, transpose_worker, &tt);
}

/* The inputs of position p, whose entry is j, into the batch's next
 * row: the one token's, or per token its input where its selection of
 * the tier (tbits: (T, words) positions; NULL: each token's is the
 * union) holds p, else 0 and not selected (the padding too). Inlined: a
 * call a position, on the caller between groups, kept the other threads
 * waiting. */
static inline __attribute__((always_inline)) void
gather_inputs(struct sf_sparse *sp, const struct compute_task *t, const float *in,
	      const uint64_t *tbits, uint32_t p, uint32_t j)
{
	struct sparse_scratch *s = &sp->s;
	float *x = s->xv + s->nidx * s->ldx;
	uint32_t *sel = s->sel + s->nidx * s->ldx;
	const float *xt = s->xt + (size_t)p * s->ldx;

	if (t->T == 1) {
		x[0] = in[j];
		return;
	}
	if (!tbits) {
		memcpy(x, xt, s->ldx * sizeof(float));
		for (size_t k = 0; k < s->ldx; k++)
			sel[k] = k < (size_t)t->T ? ~0u : 0;
		return;
	}
	for (size_t k = 0; k < s->ldx; k++) {
		int on = k < (size_t)t->T &&
			 tbits[k * sp->tiers.words + p / 64] >> (p % 64) & 1;
		x[k] = on ? xt[k] : 0.0f;
		sel[k] = on ? ~0u : 0;
	}
}

/* Computes positions pos[0..k) of tier t in order as their pages
 * arrive in buffer b (NULL: simulate, all there), each from its cache
 * slot or else from the tier's mirror (stride bytes a position): available
 * ones are gathered into a batch, computed once it holds
 * sp->o.batch_weights at the end of a run of SF_QRUN positions (and at
 * the end). After each batch the completed reads are taken
 * without waiting, so the ring is refilled from the queued requests
 * while a long run of arrived columns is computed. in is the one token's
 * inputs (a pass's are in s.xt); with several tokens pos is the union of
 * their selections, tbits each one's. */
static int compute_tier(struct sf_sparse *sp, const struct sf_image_group *G, const float *in,
			const uint64_t *tbits, const uint32_t *pos, size_t k, const struct iobuf *b,
			const struct sparse_tier *tier, const void *const *slots,
			const uint8_t *mirror, uint64_t stride,
			void (*fn)(void *, int, int), struct compute_task *t)
{
	size_t i = 0;

	sp->s.mirror = mirror;

	while (i < k) {
		for (; i < k; i++) {
			const void *slot = slots ? slots[i] : NULL;
			if (!slot && b && !sparse_arrived(b, tier->lay + (uint64_t)pos[i] * tier->stride,
							  tier->stride))
				break;
			sp->s.idx[sp->s.nidx] = pos[i];
			sp->s.cols[sp->s.nidx] = slot ? slot : mirror + (uint64_t)pos[i] * stride;
			gather_inputs(sp, t, in, tbits, pos[i], G->perm[pos[i]]);
			sp->s.nidx++;
			/* a batch ends with a run of sf_qcolaccum_int, whose
			 * inputs share a scale; with no reads to take, one
			 * batch (each batch streams the outputs once more) */
			if (sp->io.inflight && batch_work(sp, t) >= sp->o.batch_weights &&
			    (i + 1 == k || pos[i + 1] / SF_QRUN != pos[i] / SF_QRUN)) {
				flush(sp, fn, t);
				int ret = sparse_reap(sp, 0);
				if (ret)
					return ret;
			}
		}
		if (i < k) {
			int ret = sparse_reap(sp, 1);
			if (ret)
				return ret;
		}
	}
	flush(sp, fn, t);
	return 0;
}

// ----------------------------------------------------------------------------
// one group, step by step

static void fail_group(struct sf_sparse *sp, int ret, int T, int nout, float *const *out,
		       const struct sf_weight *const *w)
{
	if (!sp->failed)
		sp->failed = ret;
	sparse_reads_drain(sp);
	for (int i = 0; i < nout; i++)
		memset(out[i], 0, (size_t)T * w[i]->rows * sizeof(float));
}

/* One group's pass through the steps: what each leaves for the next. */
struct group_pass {
	long gid;			/* layer * SF_NGROUPS + g */
	int layer;
	enum sf_group g;
	const struct sf_image_group *G;
	const float *in;		/* (T, n) the group's inputs */
	int T;				/* tokens of the pass */
	size_t n;			/* source entries */
	uint32_t kt, km;		/* tier sizes, in source entries */
	const uint64_t *allow;		/* (words) the entries that may be computed; NULL: all */
	/* selected: top tier at s.tpos, middle at s.mpos (with several
	 * tokens: their unions, each one's in s.tok_top and s.tok_mid, and
	 * whether every token's is the union) */
	size_t nt, nm;
	int top_alike, mid_alike;
	size_t riders;			/* of nt, those --free-riders added */
	/* over the tokens: entries per tier, riders, Equation 5's budget */
	uint64_t sum_nt, sum_nm, sum_riders;
	double sum_budget;
	size_t hits, nmiss;		/* of nt, in the cache; not, their positions at s.ents */
	const void *const *slots;	/* (nt) per top entry its cache slot or NULL; NULL: no cache */
	struct iobuf *b;		/* the buffer the group is read into */
	struct sparse_tier top, mid;	/* where its tiers lie */
	uint8_t *tmir, *mmir;		/* the tiers' regions as in the file */
};

/* 1. The entries of each tier by the input's magnitude, as positions in
 * ascending order. Entries outside allow (not on flash, or not in the
 * computation set) are never computed; kt and km count the group's source
 * entries, so they are taken first. */
static void select_entries(struct sf_sparse *sp, struct group_pass *gp)
{
	const struct sf_image_group *G = gp->G;
	const float *in = gp->in;
	uint32_t n = (uint32_t)gp->n, kt = gp->kt, km = gp->km;
	const uint64_t *allow = gp->allow;

	gp->nm = 0;
	if (kt == n && !allow) {
		gp->nt = n;
		for (uint32_t p = 0; p < n; p++)
			sp->s.tpos[p] = p;
	} else {
		if (kt == n)
			gp->nt = bits_entries(allow, NULL, NULL, n, sp->s.ents);
		else {
			sf_select_topk(in, n, kt, sp->s.bits_top, sp->s.sel_scratch);
			gp->nt = bits_entries(sp->s.bits_top, allow, NULL, n, sp->s.ents);
		}
		sf_runs_positions(G->pos, n, sp->s.ents, gp->nt, sp->s.pscratch, sp->s.tpos);
		if (km) {
			sf_select_topk(in, n, kt + km, sp->s.bits_all, sp->s.sel_scratch);
			gp->nm = bits_entries(sp->s.bits_all, allow, sp->s.bits_top, n, sp->s.ents);
			sf_runs_positions(G->pos, n, sp->s.ents, gp->nm, sp->s.pscratch, sp->s.mpos);
		}
	}
	gp->riders = sp->o.free_riders && kt < n ? add_riders(sp, G, allow, &gp->nt, &gp->nm) : 0;
}

/* 2. The top tier's entries held in the cache; the misses' positions, in
 * order, into s.ents. */
static void lookup_cache(struct sf_sparse *sp, struct group_pass *gp)
{
	const struct sf_image_group *G = gp->G;

	gp->hits = gp->nmiss = 0;
	gp->slots = NULL;
	if (sparse_held(sp, gp->gid)) {
		gp->hits = gp->nt;
		return;
	}
	if (sp->cache.use) {
		for (size_t i = 0; i < gp->nt; i++)
			sp->cache.tent[i] = G->perm[sp->s.tpos[i]];
		gp->hits = sf_cache_lookup(sp->cache.c, (uint32_t)gp->layer, gp->g, sp->cache.tent,
					   gp->nt, sp->cache.slots, NULL, NULL);
		gp->slots = sp->cache.slots;
	}
	for (size_t i = 0; i < gp->nt; i++)
		if (!gp->slots || !gp->slots[i])
			sp->s.ents[gp->nmiss++] = sp->s.tpos[i];
}

/* 3. The requests of both tiers, into the group's buffer, of the pages
 * not read ahead: the middle tier first, its reads an eighth of the
 * bytes, so that they come in early and its decoding overlaps the top
 * tier's reads. Then all of them submitted in one call (with --simulate
 * the bytes are there already). */
static int plan_group(struct sf_sparse *sp, struct group_pass *gp)
{
	const struct sf_image_group *G = gp->G;
	struct gtally *gt = &sp->st.g[gp->g];
	int ret;

	sparse_tiers_of(G, &gp->top, &gp->mid);
	if (sp->o.simulate) {
		gp->tmir = sp->io.flash + (G->top->offset - sp->io.flash_base);
		gp->mmir = G->mid ? sp->io.flash + (G->mid->offset - sp->io.flash_base) : NULL;
	} else {
		gp->tmir = gp->b->mem;
		gp->mmir = G->mid ? gp->b->mem + gp->mid.lay : NULL;
	}
	gt->bytes_needed += (uint64_t)gp->nm * G->mid_bytes + (uint64_t)gp->nmiss * G->top_bytes;
	if (gp->nm && (ret = sparse_plan(sp, gp->b, &gp->mid, sp->s.mpos, gp->nm, NULL, 0, gt)))
		return ret;
	if ((ret = sparse_plan(sp, gp->b, &gp->top, sp->s.ents, gp->nmiss, sp->s.runlen, 0, gt)))
		return ret;
	return sparse_submit(sp);
}

/* The top tier of a group held whole: every selected position from its
 * slabs in one batch, a thread's rows one stretch of memory. A pass whose
 * tokens all take every position, in order, of q8/q4 slabs (which read
 * no sel) computes from s.xt itself: its batch would be a copy of it,
 * made on one thread while the others waited. */
static void compute_held(struct sf_sparse *sp, const struct group_pass *gp,
			 struct compute_task *t, const uint64_t *tbits)
{
	const uint32_t *perm = gp->G->perm;
	int in_place = gp->T > 1 && !tbits && gp->nt && sp->s.tpos[gp->nt - 1] == gp->nt - 1;
	t->slab = sp->slab.mat + (size_t)gp->gid * SF_GROUP_MAX_MATRICES;
	for (int i = 0; i < gp->G->nmat; i++)
		in_place &= sf_dtype_is_block(t->slab[i].dt);
	t->slab_x = in_place ? sp->s.xt : sp->s.xv;
	for (size_t i = 0; i < gp->nt; i++) {
		uint32_t p = sp->s.tpos[i];
		sp->s.idx[sp->s.nidx] = p;
		if (!in_place)
			gather_inputs(sp, t, gp->in, tbits, p, perm[p]);
		sp->s.nidx++;
	}
	flush(sp, top_worker, t);
	t->slab = NULL;
}

/* The staged matrices' outputs of a group pass: cleared before its
 * tiers, then copied to out (kept rows to their neurons); the threads
 * take the tokens in turn (alone, a prompt's pass waited on these copies
 * of T rows each). */
struct stage_task {
	const struct group_pass *gp;
	const struct compute_task *t;
	float *const *out;
	const struct sf_weight *const *w;
	const uint8_t *cm;		/* the computation set's rows; NULL: all */
};

static void stage_clear(void *ctx, size_t k)
{
	const struct stage_task *st = ctx;
	for (int i = 0; i < st->gp->G->nmat; i++)
		if (sparse_staged(st->gp->G, i, st->gp->T))
			memset(st->t->y[i] + (size_t)k * st->t->ld[i], 0,
			       st->t->ld[i] * sizeof(float));
}

/* Token k's staged rows to out; rows outside the set (span gaps, whole
 * middle-tier records) cleared. Neurons left out stay 0, and silu(0) * 0
 * makes their ffn_out entry 0. */
static void stage_out(void *ctx, size_t k)
{
	const struct stage_task *st = ctx;
	const struct sf_image_group *G = st->gp->G;
	const uint8_t *cm = st->cm;
	for (int i = 0; i < G->nmat; i++) {
		int staged = sparse_staged(G, i, st->gp->T);
		if (!staged && !cm)
			continue;
		float *o = st->out[i] + (size_t)k * st->w[i]->rows;
		const float *yr = staged ? st->t->y[i] + (size_t)k * st->t->ld[i] : o;
		if (staged && !G->rows && !cm) {
			memcpy(o, yr, G->mat[i].rows * sizeof(float));
			continue;
		}
		for (uint64_t r = 0; r < G->mat[i].rows; r++) {
			uint32_t nr = G->rows ? G->rows[r] : (uint32_t)r;
			o[nr] = cm && !cm[nr] ? 0.0f : yr[r];
		}
	}
}

/* 5. Both tiers computed in position order as their reads complete,
 * middle then top, into out (sparse_staged matrices first into s.yrows). */
static int compute_group(struct sf_sparse *sp, const struct group_pass *gp, float *const *out,
			 const struct sf_weight *const *w)
{
	const struct sf_image_group *G = gp->G;
	const uint8_t *cm = gp->g == SF_GROUP_FFN_IN && sp->comp.sc ? sp->comp.set_mask[gp->layer]
								      : NULL;
	struct compute_task t = { .sp = sp, .G = G, .T = gp->T };
	sp->s.ldx = sparse_ldx(gp->T);
	if (gp->T > 1)
		transpose_inputs(sp, G, gp->in, gp->n, (size_t)gp->T);
	const uint64_t *ttop = gp->T > 1 && !gp->top_alike ? sp->s.tok_top : NULL;
	const uint64_t *tmid = gp->T > 1 && !gp->mid_alike ? sp->s.tok_mid : NULL;
	size_t ldy = (size_t)sp->s.ldy;
	int ret;

	if (cm) {
		t.spans = sp->comp.spans + (size_t)gp->layer * sp->comp.rows_all;
		t.nspans = sp->comp.nspans[gp->layer];
		for (uint32_t k = 0; k < t.nspans; k++)
			sp->comp.rows += (uint64_t)gp->T * t.spans[k].len;
	}
	for (int i = 0; i < G->nmat; i++) {
		t.total_rows += G->mat[i].rows;
		if (sparse_staged(G, i, gp->T)) {
			t.y[i] = sp->s.yrows + (size_t)i * (size_t)gp->T * ldy;
			t.ld[i] = ldy;
		} else {
			t.y[i] = out[i];
			t.ld[i] = (size_t)w[i]->rows;
		}
	}
	struct stage_task st = { .gp = gp, .t = &t, .out = out, .w = w, .cm = cm };
	sf_pool_for(sp->pool, (size_t)gp->T, stage_clear, &st);
	t.weight_cost = sp->img->codes_method == SF_CODES_TRELLIS ? MID_COST_TRELLIS
								  : MID_COST_SCALAR;
	const struct iobuf *b = sp->o.simulate ? NULL : gp->b;
	if (gp->nm && (ret = compute_tier(sp, G, gp->in, tmid, sp->s.mpos, gp->nm, b,
					  &gp->mid, NULL, gp->mmir, G->mid_bytes, mid_worker, &t)))
		return ret;
	t.weight_cost = 1;
	if (sparse_held(sp, gp->gid))
		compute_held(sp, gp, &t, ttop);
	else if ((ret = compute_tier(sp, G, gp->in, ttop, sp->s.tpos, gp->nt, b, &gp->top,
				     gp->slots, gp->tmir, G->top_bytes, top_worker, &t)))
		return ret;
	sf_pool_for(sp->pool, (size_t)gp->T, stage_out, &st);
	if (gp->g == SF_GROUP_FFN_OUT && sp->comp.sc && sp->comp.set_mask[gp->layer])
		sp->comp.entries += gp->sum_nt + gp->sum_nm;
	return 0;
}

/* 6. What was read offered to the cache (long runs marked as such). */
static void admit(struct sf_sparse *sp, const struct group_pass *gp)
{
	const struct sf_image_group *G = gp->G;

	if (!gp->slots)
		return;
	for (size_t i = 0, j = 0; i < gp->nt; i++) {
		if (gp->slots[i])
			continue;
		uint32_t p = sp->s.tpos[i];
		sf_cache_insert(sp->cache.c, (uint32_t)gp->layer, gp->g, G->perm[p],
				gp->tmir + (uint64_t)p * G->top_bytes, G->top_bytes,
				sp->s.runlen[j++] > 2);
	}
}

/* The group kind's figures per (layer, token): tiers, riders, Equation
 * 5's budget; hits and bytes of the pass. */
static void tally(struct sf_sparse *sp, const struct group_pass *gp)
{
	const struct sf_image_group *G = gp->G;
	struct gtally *gt = &sp->st.g[gp->g];

	gt->computed += (uint64_t)gp->T;
	gt->entries += (uint64_t)gp->T * gp->n;
	gt->k_top += gp->sum_nt;
	gt->k_mid += gp->sum_nm;
	gt->hits += gp->hits;
	gt->riders += gp->sum_riders;
	gt->budget += gp->sum_budget;
	sp->st.bytes_needed += (uint64_t)gp->nmiss * G->top_bytes + (uint64_t)gp->nm * G->mid_bytes;
}

/* An ascending position list into a bitmap over positions, a word at a
 * time (a bit at a time, each waited on the one before in memory). */
static void set_bits(uint64_t *bits, const uint32_t *pos, size_t k)
{
	for (size_t i = 0; i < k;) {
		size_t w = pos[i] / 64;
		uint64_t m = 0;
		for (; i < k && pos[i] / 64 == w; i++)
			m |= 1ull << (pos[i] % 64);
		bits[w] |= m;
	}
}

/* Whether each of T selections (T, words) is the union any. */
static int alike(const uint64_t *tok, const uint64_t *any, size_t words, int T)
{
	for (int k = 0; k < T; k++)
		if (memcmp(tok + (size_t)k * words, any, words * 8))
			return 0;
	return 1;
}

/* 1, for every token of the pass: its selection, observed (--prefetch's
 * prediction, selective computation) and scored against the prediction
 * made for buffer b; with several tokens each one's positions kept in
 * s.tok_top and s.tok_mid, and their unions left as the selection. */
static void select_tokens(struct sf_sparse *sp, struct group_pass *gp, const struct iobuf *b)
{
	const struct sf_image_group *G = gp->G;
	const float *in = gp->in;
	size_t words = sp->tiers.words;
	double per = (double)sparse_col_bytes(G, 0), mid = (double)sp->tiers.col_mid[gp->g];
	double dense = (double)gp->n * (double)sp->tiers.col_top[gp->g];

	gp->allow = sp->tiers.allow[gp->gid];
	/* a budget that takes every entry into the top tier: each token's
	 * selection is token 0's (made once: n positions a token took a
	 * prompt's pass 5% of its time, the other thread waiting) */
	const int every = gp->kt == gp->n && !gp->km && !gp->allow;
	gp->sum_nt = gp->sum_nm = gp->sum_riders = 0;
	gp->sum_budget = 0;
	if (gp->T > 1) {
		memset(sp->s.any_top, 0, words * 8);
		memset(sp->s.any_mid, 0, words * 8);
	}
	for (int k = 0; k < gp->T; k++) {
		gp->in = in + (size_t)k * gp->n;
		if (gp->g == SF_GROUP_FFN_OUT && sp->comp.sc && !sp->comp.fixed)
			sf_select_compute_observe(sp->comp.sc, gp->layer, gp->in);
		if (!every || k == 0)
			select_entries(sp, gp);
		if (gp->kt < gp->n) {
			const uint64_t *sel = gp->km ? sp->s.bits_all : sp->s.bits_top;
			sparse_observe(sp, gp->layer, gp->g, gp->in, gp->n, sp->s.bits_top, sel);
			sparse_score_prediction(b, sel, (uint32_t)gp->n, &sp->st.g[gp->g]);
		} else
			sparse_observe(sp, gp->layer, gp->g, gp->in, gp->n, NULL, NULL);
		gp->sum_nt += gp->nt;
		gp->sum_nm += gp->nm;
		gp->sum_riders += gp->riders;
		gp->sum_budget += ((double)gp->nt * per + (double)gp->nm * mid) / dense;
		if (gp->T > 1 && (!every || k == 0)) {
			uint64_t *top = sp->s.tok_top + (size_t)k * words;
			uint64_t *md = sp->s.tok_mid + (size_t)k * words;
			memset(top, 0, words * 8);
			memset(md, 0, words * 8);
			set_bits(top, sp->s.tpos, gp->nt);
			set_bits(md, sp->s.mpos, gp->nm);
			for (size_t x = 0; x < words; x++) {
				sp->s.any_top[x] |= top[x];
				sp->s.any_mid[x] |= md[x];
			}
		}
	}
	gp->in = in;
	if (gp->T > 1) {
		gp->nt = bits_entries(sp->s.any_top, NULL, NULL, G->entries, sp->s.tpos);
		gp->nm = bits_entries(sp->s.any_mid, NULL, NULL, G->entries, sp->s.mpos);
		gp->top_alike = every || alike(sp->s.tok_top, sp->s.any_top, words, gp->T);
		gp->mid_alike = every || alike(sp->s.tok_mid, sp->s.any_mid, words, gp->T);
	}
}

void sf_sparse_group_exec(void *ctx, int layer, enum sf_group g, const float *in, int T,
			  size_t n, int nout, float *const *out, const struct sf_weight *const *w)
{
	struct sf_sparse *sp = ctx;
	long gid = (long)layer * SF_NGROUPS + (long)g;
	struct group_pass gp = {
		.gid = gid, .layer = layer, .g = g, .G = sf_image_group(sp->img, layer, g), .in = in, .T = T,
		.n = n, .kt = sp->tiers.k_top[gid], .km = sp->tiers.k_mid[gid],
	};
	double t0 = sf_now();
	int ret;

	if (layer == 0 && g == SF_GROUP_ATTN_IN)
		token_begin(sp, T);
	if (sp->failed) {
		fail_group(sp, sp->failed, T, nout, out, w);
		return;
	}
	if (gp.G->resident) {
		for (int k = 0; k < T; k++)
			sparse_observe(sp, layer, g, in + (size_t)k * n, n, NULL, NULL);
		sf_group_dense_batch(sp->pool, in, n, T, nout, out, w);
		return;
	}
	for (int i = 0; i < nout; i++)
		memset(out[i], 0, (size_t)T * w[i]->rows * sizeof(float));

	if ((ret = sparse_buffer(sp, gid, &gp.b)))
		goto fail;
	select_tokens(sp, &gp, gp.b);
	lookup_cache(sp, &gp);
	if ((ret = plan_group(sp, &gp)) ||
	    (ret = sparse_prefetch(sp, gid)) || (ret = compute_group(sp, &gp, out, w)))
		goto fail;
	admit(sp, &gp);
	tally(sp, &gp);
	sp->st.exec_s += sf_now() - t0;
	return;
fail:
	fail_group(sp, ret, T, nout, out, w);
}
