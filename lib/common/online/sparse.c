/* The sparse decoder of sf-run IMAGE: per token and flash group, select,
 * subtract the cache, plan collapsed aligned reads, read through io_uring
 * and compute on them in position order as they complete, then admit.
 * See sparse.h; options and figures in man/sf-run.1. */
#include "online/sparse.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "engine/kernels.h"
#include "online/runs.h"
#include "formats/trace.h"
#include "online/uring.h"

#define MAX_READ (1u << 30)	/* bytes of one request: a u32 with room to align */
#define NO_READ UINT32_MAX
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

void sf_sparse_opts_default(struct sf_sparse_opts *o)
{
	*o = (struct sf_sparse_opts){
		.select = SF_SPARSE_BUDGET, .budget = 1.0, .collapse = SF_SPARSE_COLLAPSE_AUTO,
		.policy = SF_CACHE_S3FIFO, .seg_admit = SF_CACHE_DEFAULT_SEG_ADMIT,
		.cache_ratio = -1.0,
	};
}

/* One read request: [aoff, aoff + alen) of the file into buf. */
struct req {
	uint64_t aoff;
	uint32_t alen;
	int done;
	uint8_t *buf;
};

/* Consecutive selected entries computed from one memory range: the
 * bundle (or record) of position p0 at base, idx[first..first+n) = p - p0:
 * a cache slot (one entry), or the entries read (base the region's
 * mirror, p0 0). */
struct seg {
	const uint8_t *base;
	uint32_t req;		/* NO_READ for a cache slot */
	uint32_t p0, first, n;
};

/* Figures of one group kind summed over layers and tokens. */
struct gtally {
	uint64_t computed;	/* (layer, token) pairs computed from flash */
	uint64_t entries;	/* of those: source entries */
	uint64_t k_top, k_mid;
	double budget;		/* sum of Equation 5 */
	uint64_t hits, requests, bytes_moved, bytes_needed;
	uint64_t riders;	/* entries promoted by --free-riders */
};

struct sf_sparse {
	const struct sf_image *img;
	const struct sf_model *m;
	struct sf_pool *pool;
	struct sf_sparse_opts o;
	struct sf_group_exec exec;
	uint32_t *k_top, *k_mid;		/* (n_layers, SF_NGROUPS) */
	uint64_t col_top[SF_NGROUPS], col_mid[SF_NGROUPS];	/* bytes of one entry per tier */

	struct sf_uring *u;
	uint8_t *iobuf;
	size_t iobuf_bytes;
	uint8_t *flash;				/* simulate: file bytes [flash_base, ...) */
	uint64_t flash_base, flash_bytes;
	struct sf_cache *cache;
	int use_cache;				/* cached or pinned entries to look up */
	struct sf_sparse_memory mem;

	/* per-group scratch, sized for the largest group */
	uint32_t nmax;
	uint64_t *bits_top, *bits_all, *pscratch;
	uint32_t *sel_scratch, *ents, *tpos, *mpos, *tent, *treq, *mreq, *runlen, *idx;
	float *xv;
	uint64_t *pages;		/* --free-riders: (page_words) pages touched */
	size_t page_words;
	/* ffn_in with kept rows (--keep): the bundle's rows computed here,
	 * then scattered to the neurons they are; (SF_GROUP_MAX_MATRICES,
	 * rows_max) */
	float *yrows;
	uint64_t rows_max;
	/* (ng) NULL, or the entries of the group that may be computed at all
	 * (present on flash: --keep); allow_bits holds them, words each */
	uint64_t **allow, *allow_bits;
	uint64_t **keep_allow;		/* (ng) allow without the computation set */
	size_t words;

	/* selective computation */
	struct sf_select_compute *sc;
	int sc_fixed;				/* the set restricts the passes */
	uint64_t prefill_left;
	uint64_t *set_bits;			/* (n_layers, words) the set as ffn_out allow */
	const uint8_t **set_mask;		/* (n_layers) neurons computed; NULL: all */
	struct sf_run *spans;			/* (n_layers, rows_all) ffn_in row spans */
	uint32_t *nspans;			/* (n_layers) */
	uint64_t rows_all;			/* most ffn_in bundle rows of a layer */
	double rho;
	uint64_t c_passes, c_entries, c_rows, c_set, c_static, c_dynamic;
	int c_layers;
	uint64_t allow_bytes, compute_bytes;
	const void **slots;
	struct sf_run *runs;
	struct req *reqs;
	struct seg *segs;
	size_t nreq, nseg, nidx;

	int failed;
	struct sf_err err;

	uint64_t batch_weights;
	/* collapse */
	int gap;				/* entries */
	uint64_t gap_bytes, auto_gap_bytes;	/* bytes between requests read to join them */
	char collapse_desc[96];
	uint64_t win_bytes[SF_SPARSE_AUTO_WINDOW];
	double win_span[SF_SPARSE_AUTO_WINDOW];
	uint64_t tokens_collapsed, tokens_uncollapsed;

	/* statistics */
	uint64_t tokens;
	double t_token;				/* start of the current token, 0: none yet */
	double *lat;				/* (o.max_tokens) seconds */
	uint64_t nlat;
	uint64_t tok_bytes;
	double tok_span;
	double last_done;			/* time of the group's last completion */
	double compute_s, wait_s, span_s, exec_s;
	uint64_t requests, bytes_moved, bytes_needed, runs_total, runs_positions;
	uint64_t hist[SF_RUNS_NHIST];
	struct gtally g[SF_NGROUPS];
};

/* The resident set now (/proc/self/statm), 0 where it cannot be read. */
static uint64_t rss_bytes(void)
{
	unsigned long long size, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f && fscanf(f, "%llu %llu", &size, &res) != 2)
		res = 0;
	if (f)
		fclose(f);
	return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

static uint64_t round_up(uint64_t v)
{
	return (v + SF_IMAGE_ALIGN - 1) & ~(uint64_t)(SF_IMAGE_ALIGN - 1);
}

static int hist_bucket(uint32_t len)
{
	int b = 0;
	for (uint32_t lim = 1; b < SF_RUNS_NHIST - 1 && len > lim; lim *= 2)
		b++;
	return b;
}

// ----------------------------------------------------------------------------
// tier sizes

static int resolve_tiers(struct sf_sparse *sp, struct sf_err *e)
{
	const struct sf_image *img = sp->img;
	const struct sf_sparse_opts *o = &sp->o;
	size_t b = SIZE_MAX;

	if (o->select == SF_SPARSE_BUDGET && o->budget < 1.0) {
		char list[256] = "";
		size_t len = 0;
		for (size_t i = 0; i < img->nbudgets; i++) {
			if (fabs(img->budgets[i] - o->budget) < 1e-9)
				b = i;
			len += (size_t)snprintf(list + len, len < sizeof(list) ? sizeof(list) - len : 0,
						"%s%g", i ? ", " : "", img->budgets[i]);
		}
		if (b == SIZE_MAX)
			return sf_err_set(e, SF_EUNSUPPORTED, "%s: --budget %g: %s%s", img->path,
					  o->budget, img->nbudgets ? "not calibrated; the image has "
					  : "the image has no tier sizes (sf-pack --calib)", list);
	}
	for (int l = 0; l < img->cfg.n_layers; l++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			const struct sf_image_group *G = sf_image_group(img, l, (enum sf_group)g);
			uint64_t n = G->source_entries, kt = n, km = 0;
			size_t at = (size_t)l * SF_NGROUPS + (size_t)g;

			if (o->select == SF_SPARSE_BUDGET && b != SIZE_MAX) {
				sf_image_tier(img, b, l, (enum sf_group)g, &kt, &km);
			} else if (o->select == SF_SPARSE_DENSITY) {
				kt = sf_trace_density_k(o->density, (uint32_t)n);
			} else if (o->select == SF_SPARSE_FRACTIONS) {
				kt = (uint64_t)llround(o->top * (double)n);
				km = (uint64_t)llround(o->mid * (double)n);
				if (kt > n)
					kt = n;
				if (km > n - kt)
					km = n - kt;
			}
			if (kt + km > n)
				return sf_err_set(e, SF_EFORMAT, "%s: layer %d %s: tiers of %llu + %llu "
						  "entries, but the group has %llu", img->path, l,
						  sf_group_name((enum sf_group)g),
						  (unsigned long long)kt, (unsigned long long)km,
						  (unsigned long long)n);
			if (km && !G->resident && !G->mid)
				return sf_err_set(e, SF_EUNSUPPORTED, "%s: layer %d %s: %llu middle-tier "
						  "entries, but the image has no codes (sf-pack --codes)",
						  img->path, l, sf_group_name((enum sf_group)g),
						  (unsigned long long)km);
			sp->k_top[at] = (uint32_t)kt;
			sp->k_mid[at] = (uint32_t)km;
		}
	return 0;
}

// ----------------------------------------------------------------------------
// set-up

static int check_layout(const struct sf_sparse *sp, const struct sf_image_group *G,
			struct sf_err *e)
{
	const struct sf_image *img = sp->img;

	/* sf-pack refuses --keep with codes: middle records cover whole
	 * columns, and a bundle of kept rows has no record to match */
	if (G->rows && G->mid)
		return sf_err_set(e, SF_EFORMAT, "%s: layer %d %s: kept rows (--keep) and "
				  "middle-tier codes together", img->path, G->layer,
				  sf_group_name(G->group));
	for (int i = 0; i < G->nmat; i++) {
		size_t es = sf_dtype_size(G->mat[i].dtype);
		if (G->top_bytes % es || G->mat[i].offset % es || G->mat[i].dtype != G->mat[0].dtype)
			return sf_err_set(e, SF_EUNSUPPORTED, "%s: layer %d %s: bundle stride %llu "
					  "is not a whole number of %s elements", img->path, G->layer,
					  sf_group_name(G->group), (unsigned long long)G->top_bytes,
					  G->mat[i].name);
	}
	return 0;
}

/* Bytes of one entry's columns: the rows the image holds, or (source) the
 * model's, which the budget is a share of. */
static uint64_t col_bytes(const struct sf_image_group *G, int source)
{
	uint64_t b = 0;
	for (int k = 0; k < G->nmat; k++)
		b += (source ? G->mat[k].source_rows : G->mat[k].rows) *
		     sf_dtype_size(G->mat[k].dtype);
	return b;
}

static int alloc_scratch(struct sf_sparse *sp)
{
	size_t n = sp->nmax, words = (n + 63) / 64;

	sp->bits_top = calloc(words, 8);
	sp->bits_all = calloc(words, 8);
	sp->pscratch = calloc(words, 8);
	sp->sel_scratch = calloc(2 * n, 4);
	sp->ents = calloc(n, 4);
	sp->tpos = calloc(n, 4);
	sp->mpos = calloc(n, 4);
	sp->tent = calloc(n, 4);
	sp->treq = calloc(n, 4);
	sp->mreq = calloc(n, 4);
	sp->runlen = calloc(n, 4);
	sp->idx = calloc(n, 4);
	sp->xv = calloc(n, sizeof(float));
	sp->slots = calloc(n, sizeof(*sp->slots));
	sp->runs = calloc(n, sizeof(*sp->runs));
	sp->reqs = calloc(2 * n, sizeof(*sp->reqs));
	sp->segs = calloc(n, sizeof(*sp->segs));
	if (sp->o.max_tokens)
		sp->lat = calloc(sp->o.max_tokens, sizeof(double));
	if (!sp->bits_top || !sp->bits_all || !sp->pscratch || !sp->sel_scratch || !sp->ents ||
	    !sp->tpos || !sp->mpos || !sp->tent || !sp->treq || !sp->mreq || !sp->runlen ||
	    !sp->idx || !sp->xv || !sp->slots || !sp->runs || !sp->reqs || !sp->segs ||
	    (sp->o.max_tokens && !sp->lat))
		return -ENOMEM;
	return 0;
}

static uint64_t scratch_bytes(uint64_t n, uint64_t max_tokens)
{
	uint64_t words = (n + 63) / 64;
	return words * 8 * 3 + n * 4 * 11 + n * sizeof(float) + n * sizeof(void *) +
	       n * sizeof(struct sf_run) + 2 * n * sizeof(struct req) + n * sizeof(struct seg) +
	       max_tokens * sizeof(double);
}

/* Simulate: the flash regions once into RAM through the image's buffered fd. */
static int read_flash(struct sf_sparse *sp, struct sf_err *e)
{
	const struct sf_image *img = sp->img;
	uint64_t off = 0;

	while (off < sp->flash_bytes) {
		size_t k = sp->flash_bytes - off < ((size_t)1 << 26) ? (size_t)(sp->flash_bytes - off)
								     : (size_t)1 << 26;
		ssize_t r = pread(img->fd, sp->flash + off, k, (off_t)(sp->flash_base + off));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return sf_err_set(e, r < 0 ? -errno : -EIO, "%s: reading the flash regions "
					  "at %llu: %s", img->path,
					  (unsigned long long)(sp->flash_base + off),
					  r < 0 ? strerror(errno) : "unexpected end of file");
		off += (uint64_t)r;
	}
	return 0;
}

/* Entries of the pinned set per group kind, those --keep left out not counted. */
static void pin_counts(const struct sf_sparse *sp, uint64_t *count)
{
	const struct sf_image *img = sp->img;

	for (int l = 0; l < img->cfg.n_layers; l++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			const struct sf_image_group *G = sf_image_group(img, l, (enum sf_group)g);
			uint32_t k;
			const uint32_t *ids = sf_select_load_get(sp->o.pin, l, (enum sf_group)g, &k);
			for (uint32_t i = 0; !G->resident && i < k; i++)
				count[g] += ids[i] < G->source_entries &&
					    G->pos[ids[i]] != SF_IMAGE_ABSENT;
		}
}

/* pread of [off, off + len) of the image, whole. */
static int pread_all(const struct sf_image *img, uint8_t *buf, uint64_t len, uint64_t off,
		     struct sf_err *e)
{
	for (uint64_t done = 0; done < len;) {
		ssize_t r = pread(img->fd, buf + done, (size_t)(len - done), (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return sf_err_set(e, r < 0 ? -errno : -EIO, "%s: reading %llu bytes at %llu: %s",
					  img->path, (unsigned long long)(len - done),
					  (unsigned long long)(off + done),
					  r < 0 ? strerror(errno) : "unexpected end of file");
		done += (uint64_t)r;
	}
	return 0;
}

/* Reads the pinned set into the cache's pinned slots: per group its
 * positions in order, one read per run of consecutive positions (through
 * the buffered descriptor: this happens once). */
static int load_pins(struct sf_sparse *sp, struct sf_err *e)
{
	const struct sf_image *img = sp->img;
	int ret;

	for (int l = 0; l < img->cfg.n_layers; l++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			const struct sf_image_group *G = sf_image_group(img, l, (enum sf_group)g);
			uint32_t k;
			const uint32_t *ids = sf_select_load_get(sp->o.pin, l, (enum sf_group)g, &k);
			size_t np = 0;
			if (G->resident || !k)
				continue;
			for (uint32_t i = 0; i < k; i++)
				if (ids[i] < G->source_entries && G->pos[ids[i]] != SF_IMAGE_ABSENT)
					sp->ents[np++] = ids[i];
			sf_runs_positions(G->pos, G->source_entries, sp->ents, np, sp->pscratch,
					  sp->tpos);
			size_t nruns = sf_runs_plan(sp->tpos, np, 0, sp->runs);
			for (size_t r = 0, i = 0; r < nruns; r++) {
				const struct sf_run *run = &sp->runs[r];
				uint64_t off, len;
				sf_image_top_range(G, run->start, run->start + run->len, &off, &len);
				if ((ret = pread_all(img, sp->iobuf, len, off, e)))
					return ret;
				for (; i < np && sp->tpos[i] < run->start + run->len; i++) {
					void *slot;
					uint32_t p = sp->tpos[i];
					if ((ret = sf_cache_pin(sp->cache, (uint32_t)l, (enum sf_group)g,
								G->perm[p], &slot)))
						return sf_err_set(e, ret, "%s: pinning layer %d %s entry "
								  "%u: %s", img->path, l,
								  sf_group_name((enum sf_group)g),
								  G->perm[p], strerror(-ret));
					memcpy(slot, sp->iobuf + (uint64_t)(p - run->start) * G->top_bytes,
					       (size_t)G->top_bytes);
				}
			}
		}
	return 0;
}

/* The entries present on flash of groups packed with --keep, and the
 * row buffer of kept-row bundles. */
static int setup_allow(struct sf_sparse *sp)
{
	const struct sf_image *img = sp->img;
	size_t ng = (size_t)img->cfg.n_layers * SF_NGROUPS, nr = 0;

	sp->words = ((size_t)sp->nmax + 63) / 64;
	for (size_t i = 0; i < ng; i++) {
		const struct sf_image_group *G = &img->groups[i];
		nr += !G->resident && G->entries < G->source_entries;
		if (!G->resident && G->rows && G->mat[0].rows > sp->rows_max)
			sp->rows_max = G->mat[0].rows;
	}
	if (!(sp->allow = calloc(ng, sizeof(*sp->allow))) ||
	    !(sp->keep_allow = calloc(ng, sizeof(*sp->keep_allow))))
		return -ENOMEM;
	if (sp->rows_max &&
	    !(sp->yrows = malloc(SF_GROUP_MAX_MATRICES * sp->rows_max * sizeof(float))))
		return -ENOMEM;
	if (!nr)
		return 0;
	sp->allow_bytes = (uint64_t)nr * sp->words * 8;
	if (!(sp->allow_bits = calloc(nr * sp->words, 8)))
		return -ENOMEM;
	for (size_t i = 0, k = 0; i < ng; i++) {
		const struct sf_image_group *G = &img->groups[i];
		if (G->resident || G->entries == G->source_entries)
			continue;
		uint64_t *b = sp->allow[i] = sp->keep_allow[i] = sp->allow_bits + k++ * sp->words;
		for (uint32_t p = 0; p < G->entries; p++)
			b[G->perm[p] / 64] |= 1ull << (G->perm[p] % 64);
	}
	return 0;
}

/* Selective computation: the selection state and the per-layer set
 * buffers; the FFN groups must be on flash. */
static int setup_compute(struct sf_sparse *sp, struct sf_err *e)
{
	const struct sf_image *img = sp->img;
	int L = img->cfg.n_layers, ret;
	uint32_t n = (uint32_t)img->cfg.hidden_dim;

	for (int l = 0; l < L; l++) {
		const struct sf_image_group *fi = sf_image_group(img, l, SF_GROUP_FFN_IN);
		const struct sf_image_group *fo = sf_image_group(img, l, SF_GROUP_FFN_OUT);
		if (fi->resident || fo->resident)
			return sf_err_set(e, SF_EUNSUPPORTED, "%s: --compute-ratio: layer %d's FFN "
					  "is resident (sf-pack --resident): its neurons cannot be "
					  "restricted", img->path, l);
		if (fi->mat[0].rows > sp->rows_all)
			sp->rows_all = fi->mat[0].rows;
	}
	if ((ret = sf_select_compute_open(&sp->sc, L, n, sp->o.compute, sp->o.compute_static,
					  sp->o.compute_static_name, e)))
		return ret;
	sp->rho = sp->o.compute->rho;
	sp->set_bits = calloc((size_t)L * sp->words, 8);
	sp->set_mask = calloc((size_t)L, sizeof(*sp->set_mask));
	sp->spans = calloc((size_t)L * sp->rows_all, sizeof(*sp->spans));
	sp->nspans = calloc((size_t)L, sizeof(*sp->nspans));
	if (!sp->set_bits || !sp->set_mask || !sp->spans || !sp->nspans)
		return sf_err_set(e, -ENOMEM, "%s: selective computation: %s", img->path,
				  strerror(ENOMEM));
	/* the selection's own state: counts, sums, masks, orders per neuron */
	sp->compute_bytes = (uint64_t)L * sp->words * 8 + (uint64_t)L * sp->rows_all *
			    sizeof(*sp->spans) + (uint64_t)L * n * 24 + (uint64_t)n * 24;
	return 0;
}

/* End of the prefill: the set chosen, as ffn_out allow bitmaps (within
 * what --keep left on flash) and ffn_in row spans. */
static void fix_set(struct sf_sparse *sp)
{
	const struct sf_image *img = sp->img;

	sf_select_compute_finish(sp->sc);
	sp->c_layers = 0;
	sp->c_set = sp->c_static = sp->c_dynamic = 0;
	for (int l = 0; l < img->cfg.n_layers; l++) {
		const uint8_t *m = sp->set_mask[l] = sf_select_compute_mask(sp->sc, l);
		size_t at = (size_t)l * SF_NGROUPS + SF_GROUP_FFN_OUT;
		if (!m)
			continue;
		uint64_t *b = sp->set_bits + (size_t)l * sp->words;
		const uint64_t *keep = sp->keep_allow[at];
		uint32_t n = (uint32_t)img->cfg.hidden_dim, cnt, ns, nd;
		memset(b, 0, sp->words * 8);
		for (uint32_t j = 0; j < n; j++)
			if (m[j] && (!keep || keep[j / 64] >> (j % 64) & 1))
				b[j / 64] |= 1ull << (j % 64);
		sp->allow[at] = b;

		const struct sf_image_group *G = sf_image_group(img, l, SF_GROUP_FFN_IN);
		struct sf_run *sv = sp->spans + (size_t)l * sp->rows_all;
		uint32_t k = 0;
		for (uint32_t r = 0; r < G->mat[0].rows; r++) {
			if (!m[G->rows ? G->rows[r] : r])
				continue;
			if (k && r - (sv[k - 1].start + sv[k - 1].len) <= ROW_GAP)
				sv[k - 1].len = r + 1 - sv[k - 1].start;
			else
				sv[k++] = (struct sf_run){ r, 1 };
		}
		sp->nspans[l] = k;
		sf_select_compute_entries(sp->sc, l, &cnt);
		sf_select_compute_split(sp->sc, l, &ns, &nd);
		sp->c_layers++;
		sp->c_set += cnt;
		sp->c_static += ns;
		sp->c_dynamic += nd;
	}
	sp->sc_fixed = 1;
}

void sf_sparse_prefill(struct sf_sparse *sp, uint64_t tokens)
{
	if (!sp->sc)
		return;
	sf_select_compute_reset(sp->sc);
	for (int l = 0; l < sp->img->cfg.n_layers; l++) {
		size_t at = (size_t)l * SF_NGROUPS + SF_GROUP_FFN_OUT;
		sp->allow[at] = sp->keep_allow[at];
		sp->set_mask[l] = NULL;
		sp->nspans[l] = 0;
	}
	sp->sc_fixed = 0;
	sp->prefill_left = tokens;
}

const struct sf_select_compute *sf_sparse_compute(const struct sf_sparse *sp)
{
	return sp->sc;
}

static void group_exec(void *ctx, int layer, enum sf_group g, const float *in, size_t n,
		       int nout, float *const *out, const struct sf_weight *const *w);

int sf_sparse_open(struct sf_sparse **spp, const struct sf_image *img, const struct sf_model *m,
		   struct sf_pool *pool, const struct sf_sparse_opts *o, struct sf_err *e)
{
	struct sf_sparse *sp = calloc(1, sizeof(*sp));
	size_t ng = (size_t)img->cfg.n_layers * SF_NGROUPS;
	uint64_t off_g[SF_NGROUPS] = { 0 }, top_g[SF_NGROUPS] = { 0 }, ent_g[SF_NGROUPS] = { 0 };
	uint64_t lo = UINT64_MAX, hi = 0, iobuf = 0;
	int ret;

	*spp = NULL;
	if (!sp)
		return sf_err_set(e, -ENOMEM, "%s: sparse decoder: %s", img->path, strerror(ENOMEM));
	sp->img = img;
	sp->m = m;
	sp->pool = pool;
	sp->o = *o;
	sp->batch_weights = o->batch_weights ? o->batch_weights : SF_SPARSE_BATCH_WEIGHTS;
	sp->exec = (struct sf_group_exec){ .fn = group_exec, .ctx = sp };
	sp->k_top = calloc(ng, 4);
	sp->k_mid = calloc(ng, 4);
	if (!sp->k_top || !sp->k_mid) {
		ret = sf_err_set(e, -ENOMEM, "%s: sparse decoder: %s", img->path, strerror(ENOMEM));
		goto out;
	}
	if ((ret = resolve_tiers(sp, e)))
		goto out;

	for (size_t i = 0; i < ng; i++) {
		const struct sf_image_group *G = &img->groups[i];
		if (G->resident)
			continue;
		if ((ret = check_layout(sp, G, e)))
			goto out;
		if (G->source_entries > sp->nmax)
			sp->nmax = G->source_entries;
		uint64_t t = round_up((uint64_t)G->entries * G->top_bytes);
		uint64_t mb = G->mid ? round_up((uint64_t)G->entries * G->mid_bytes) : 0;
		if (t + mb > iobuf)
			iobuf = t + mb;
		off_g[G->group] += (uint64_t)G->entries * G->top_bytes;
		ent_g[G->group] += G->entries;
		/* the cache's slot: the largest bundle (--keep varies ffn_in's) */
		if (G->top_bytes > top_g[G->group])
			top_g[G->group] = G->top_bytes;
		uint64_t mid = 0;
		for (int k = 0; k < G->nmat; k++)
			mid += G->mat[k].mid_bytes;
		sp->col_top[G->group] = col_bytes(G, 1);
		sp->col_mid[G->group] = mid;
		if (G->top->offset < lo)
			lo = G->top->offset;
		if (G->mid && G->mid->offset < lo)
			lo = G->mid->offset;
		uint64_t end = G->mid ? G->mid->offset + round_up(G->mid->length)
				      : G->top->offset + round_up(G->top->length);
		if (G->top->offset + round_up(G->top->length) > end)
			end = G->top->offset + round_up(G->top->length);
		if (end > hi)
			hi = end;
	}

	if (o->free_riders) {
		uint64_t most = 0;
		for (size_t i = 0; i < ng; i++) {
			const struct sf_image_group *G = &img->groups[i];
			uint64_t pg = G->resident ? 0 : round_up((uint64_t)G->entries * G->top_bytes) /
							 SF_IMAGE_ALIGN;
			most = pg > most ? pg : most;
		}
		sp->page_words = (size_t)(most + 63) / 64;
		if (!(sp->pages = calloc(sp->page_words ? sp->page_words : 1, 8))) {
			ret = sf_err_set(e, -ENOMEM, "%s: sparse decoder: %s", img->path,
					 strerror(ENOMEM));
			goto out;
		}
	}
	if ((ret = setup_allow(sp))) {
		ret = sf_err_set(e, ret, "%s: sparse decoder: %s", img->path, strerror(-ret));
		goto out;
	}
	if (o->compute && (ret = setup_compute(sp, e)))
		goto out;

	/* memory */
	struct sf_cache_opts co;
	sf_cache_opts_default(&co);
	co.policy = o->policy;
	co.seg_admit = o->seg_admit;
	for (int g = 0; g < SF_NGROUPS; g++) {
		sp->mem.offloaded += off_g[g];
		co.bundle_bytes[g] = top_g[g] ? top_g[g] : 1;
	}
	uint64_t pinned_g[SF_NGROUPS] = { 0 };
	if (o->pin && !o->simulate) {
		pin_counts(sp, pinned_g);
		for (int g = 0; g < SF_NGROUPS; g++)
			co.pin_slots[g] = (uint32_t)pinned_g[g];
		uint64_t none = sf_cache_footprint(&(struct sf_cache_opts){ .policy = o->policy });
		sp->mem.pinned = sf_cache_footprint(&co) - none;
	}
	/* the resident set already holds the image's header and resident
	 * regions (read into memory at open), counted as resident below */
	uint64_t rss = rss_bytes();
	sp->mem.process = (rss > img->map_size ? rss - img->map_size : 0) + SF_SPARSE_LATER_BYTES;
	sp->mem.resident = img->map_size;
	sp->mem.state = o->state_bytes;
	sp->mem.buffers = o->simulate ? 0 : iobuf;
	sp->mem.buffers += scratch_bytes(sp->nmax, o->max_tokens) + 2 * ng * 4 +
			   2 * ng * sizeof(*sp->allow) + sp->allow_bytes + sp->compute_bytes +
			   sp->page_words * 8 +
			   SF_GROUP_MAX_MATRICES * sp->rows_max * sizeof(float);
	sp->mem.simulate = o->simulate && sp->nmax ? hi - lo : 0;
	uint64_t fixed = sp->mem.process + sp->mem.resident + sp->mem.state + sp->mem.buffers +
			 sp->mem.simulate;
	uint64_t cache_bytes = 0, empty = sf_cache_footprint(&co);
	int fill = o->cache_ratio < 0 && o->ram;	/* the cache takes what is left */
	if (o->policy != SF_CACHE_NONE && !o->simulate) {
		if (o->cache_ratio >= 0)
			cache_bytes = (uint64_t)(o->cache_ratio * (double)sp->mem.offloaded);
		else if (o->ram > fixed + empty)
			cache_bytes = o->ram - fixed - empty;
	}
	/* the figure checked is what sf_cache_open allocates; when the cache
	 * fills the budget, shrink it until its metadata fits too */
	for (;;) {
		for (int g = 0; g < SF_NGROUPS && sp->mem.offloaded; g++) {
			double share = (double)off_g[g] / (double)sp->mem.offloaded;
			uint64_t slots = (uint64_t)((double)cache_bytes * share) /
					 sf_cache_entry_bytes(co.bundle_bytes[g]);
			uint64_t most = ent_g[g] - pinned_g[g];	/* the rest of the entries */
			co.slots[g] = (uint32_t)(slots < most ? slots : most);
		}
		uint64_t all = sf_cache_footprint(&co);
		sp->mem.cache = all - sp->mem.pinned;
		sp->mem.total = fixed + all;
		if (!fill || !cache_bytes || sp->mem.total <= o->ram)
			break;
		cache_bytes = cache_bytes / 10 * 9;
	}
	if (o->ram && sp->mem.total > o->ram) {
		ret = sf_err_set(e, SF_ELIMIT, "%s: --ram %llu: %llu bytes needed: process %llu, "
				 "resident %llu, KV cache and state %llu, buffers %llu, pinned %llu, "
				 "cache %llu%s", img->path, (unsigned long long)o->ram,
				 (unsigned long long)sp->mem.total,
				 (unsigned long long)sp->mem.process,
				 (unsigned long long)sp->mem.resident,
				 (unsigned long long)sp->mem.state,
				 (unsigned long long)sp->mem.buffers,
				 (unsigned long long)sp->mem.pinned,
				 (unsigned long long)sp->mem.cache,
				 o->simulate ? ", --simulate copy" : "");
		if (o->simulate) {
			char tail[48];
			snprintf(tail, sizeof(tail), " %llu", (unsigned long long)sp->mem.simulate);
			strncat(e->msg, tail, sizeof(e->msg) - strlen(e->msg) - 1);
		}
		goto out;
	}

	if ((ret = alloc_scratch(sp))) {
		ret = sf_err_set(e, ret, "%s: sparse decoder buffers: %s", img->path, strerror(ENOMEM));
		goto out;
	}
	if ((ret = sf_cache_open(&sp->cache, &co, e)))
		goto out;
	sp->use_cache = !o->simulate && (o->policy != SF_CACHE_NONE || sp->mem.pinned);

	if (sp->nmax == 0) {
		/* every group resident: nothing to read */
	} else if (o->simulate) {
		sp->flash_base = lo;
		sp->flash_bytes = hi - lo;
		if (!(sp->flash = malloc(sp->flash_bytes))) {
			ret = sf_err_set(e, -ENOMEM, "%s: --simulate: %llu bytes: %s", img->path,
					 (unsigned long long)sp->flash_bytes, strerror(ENOMEM));
			goto out;
		}
		if ((ret = read_flash(sp, e)))
			goto out;
	} else {
		sp->iobuf_bytes = iobuf;
		if ((ret = posix_memalign((void **)&sp->iobuf, SF_URING_ALIGN, iobuf))) {
			sp->iobuf = NULL;
			ret = sf_err_set(e, -ret, "%s: read buffer of %llu bytes: %s", img->path,
					 (unsigned long long)iobuf, strerror(ret));
			goto out;
		}
		struct sf_uring_opts uo = { .qd = o->qd, .buffered = o->buffered,
					    .arena = sp->iobuf, .arena_bytes = iobuf,
					    .fault = o->fault };
		if ((ret = sf_uring_open(&sp->u, img->path, &uo, e)))
			goto out;
	}

	if (sp->mem.pinned && (ret = load_pins(sp, e)))
		goto out;
	/* borrowed for the set-up only */
	sp->o.pin = NULL;
	sp->o.compute = NULL;
	sp->o.compute_static = NULL;
	sp->o.compute_static_name = NULL;

	if (o->collapse != SF_SPARSE_COLLAPSE_AUTO) {
		sp->gap = o->collapse;
		snprintf(sp->collapse_desc, sizeof(sp->collapse_desc), "%d (fixed)", sp->gap);
	} else if (o->device_peak > 0 && o->device_iops > 0) {
		sp->auto_gap_bytes = (uint64_t)(o->device_peak / o->device_iops) /
				     SF_IMAGE_ALIGN * SF_IMAGE_ALIGN;
		sp->gap_bytes = sp->auto_gap_bytes;
		snprintf(sp->collapse_desc, sizeof(sp->collapse_desc),
			 "auto: %llu bytes, off while above %.0f%% of the device peak %.0f MB/s",
			 (unsigned long long)sp->auto_gap_bytes, SF_SPARSE_BW_BOUND * 100,
			 o->device_peak / 1e6);
	} else if (o->device_peak > 0) {
		sp->gap = SF_SPARSE_AUTO_GAP;
		snprintf(sp->collapse_desc, sizeof(sp->collapse_desc),
			 "auto: %d, off while above %.0f%% of the device peak %.0f MB/s",
			 SF_SPARSE_AUTO_GAP, SF_SPARSE_BW_BOUND * 100, o->device_peak / 1e6);
	} else {
		sp->gap = SF_SPARSE_AUTO_GAP;
		snprintf(sp->collapse_desc, sizeof(sp->collapse_desc),
			 "auto without a device peak (sf-run --probe-device): fixed gap %d",
			 SF_SPARSE_AUTO_GAP);
	}
	*spp = sp;
	return 0;
out:
	sf_sparse_close(sp);
	return ret;
}

void sf_sparse_close(struct sf_sparse *sp)
{
	if (!sp)
		return;
	sf_uring_close(sp->u);
	free(sp->iobuf);
	free(sp->flash);
	sf_cache_close(sp->cache);
	free(sp->k_top);
	free(sp->k_mid);
	free(sp->bits_top);
	free(sp->bits_all);
	free(sp->pscratch);
	free(sp->sel_scratch);
	free(sp->ents);
	free(sp->tpos);
	free(sp->mpos);
	free(sp->tent);
	free(sp->treq);
	free(sp->mreq);
	free(sp->runlen);
	free(sp->idx);
	free(sp->xv);
	free(sp->pages);
	free(sp->yrows);
	free(sp->allow);
	free(sp->keep_allow);
	free(sp->allow_bits);
	sf_select_compute_close(sp->sc);
	free(sp->set_bits);
	free(sp->set_mask);
	free(sp->spans);
	free(sp->nspans);
	free(sp->slots);
	free(sp->runs);
	free(sp->reqs);
	free(sp->segs);
	free(sp->lat);
	free(sp);
}

const struct sf_group_exec *sf_sparse_exec(struct sf_sparse *sp)
{
	return &sp->exec;
}

int sf_sparse_error(const struct sf_sparse *sp, struct sf_err *e)
{
	if (!sp->failed)
		return 0;
	*e = sp->err;
	return sp->failed;
}

void sf_sparse_memory(const struct sf_sparse *sp, struct sf_sparse_memory *mem)
{
	*mem = sp->mem;
}

const char *sf_sparse_collapse_desc(const struct sf_sparse *sp)
{
	return sp->collapse_desc;
}

const char *sf_sparse_backend(const struct sf_sparse *sp)
{
	if (sp->o.simulate)
		return "simulate";
	return sp->u ? sf_uring_backend_name(sf_uring_backend(sp->u, NULL)) : "none";
}

// ----------------------------------------------------------------------------
// per token

/* Closes the previous token's figures and chooses this token's gap. */
static void token_begin(struct sf_sparse *sp)
{
	double t = sf_now();

	if (sp->t_token > 0) {
		if (sp->nlat < sp->o.max_tokens)
			sp->lat[sp->nlat++] = t - sp->t_token;
		size_t w = (size_t)(sp->tokens % SF_SPARSE_AUTO_WINDOW);
		sp->win_bytes[w] = sp->tok_bytes;
		sp->win_span[w] = sp->tok_span;
		sp->tokens++;
	}
	if (sp->sc && !sp->sc_fixed) {
		if (sp->prefill_left)
			sp->prefill_left--;
		else
			fix_set(sp);
	}
	sp->c_passes += sp->sc_fixed;
	sp->t_token = t;
	sp->tok_bytes = 0;
	sp->tok_span = 0;
	if (sp->o.collapse == SF_SPARSE_COLLAPSE_AUTO && sp->o.device_peak > 0) {
		uint64_t bytes = 0;
		double span = 0;
		for (int i = 0; i < SF_SPARSE_AUTO_WINDOW; i++) {
			bytes += sp->win_bytes[i];
			span += sp->win_span[i];
		}
		int bound = span > 0 && (double)bytes / span >= SF_SPARSE_BW_BOUND * sp->o.device_peak;
		if (sp->auto_gap_bytes)
			sp->gap_bytes = bound ? 0 : sp->auto_gap_bytes;
		else
			sp->gap = bound ? 0 : SF_SPARSE_AUTO_GAP;
	}
	if (sp->gap || sp->gap_bytes)
		sp->tokens_collapsed++;
	else
		sp->tokens_uncollapsed++;
}

/* Plans the reads of positions pos[0..k) (ascending) of a region at
 * file offset base with stride bytes per position: runs joined across at
 * most sp->gap positions, each rounded out to 4 KiB, requests merged when
 * their blocks overlap, touch, or lie at most sp->gap_bytes apart. Every
 * request lands in mirror, which holds the region as it lies in the file
 * (cap bytes), so position p is at mirror + p * stride whichever request
 * read it and one kernel call covers them all. req_of[i] gets the request of pos[i];
 * runlen (may be NULL) its run's length. */
static int plan(struct sf_sparse *sp, const uint32_t *pos, size_t k, uint64_t base,
		uint64_t stride, uint8_t *mirror, uint64_t cap, uint32_t *req_of, uint32_t *runlen,
		struct gtally *gt)
{
	size_t nruns = sf_runs_plan(pos, k, (uint32_t)sp->gap, sp->runs), i = 0;
	size_t first = sp->nreq;

	for (size_t r = 0; r < nruns; r++) {
		const struct sf_run *run = &sp->runs[r];
		uint64_t aoff, alen;
		sf_image_align(base + (uint64_t)run->start * stride, (uint64_t)run->len * stride,
			       &aoff, &alen);
		if (alen > MAX_READ)
			return sf_err_set(&sp->err, -EFBIG, "%s: a run of %u positions: %llu bytes, "
					  "more than one request reads", sp->img->path, run->len,
					  (unsigned long long)alen);
		struct req *q = sp->nreq > first ? &sp->reqs[sp->nreq - 1] : NULL;
		if (q && aoff <= q->aoff + q->alen + sp->gap_bytes && aoff + alen - q->aoff <= MAX_READ) {
			uint64_t end = aoff + alen > q->aoff + q->alen ? aoff + alen : q->aoff + q->alen;
			q->alen = (uint32_t)(end - q->aoff);
		} else {
			q = &sp->reqs[sp->nreq++];
			*q = (struct req){ .aoff = aoff, .alen = (uint32_t)alen,
					   .buf = mirror + (aoff - base) };
		}
		if (q->aoff + q->alen - base > cap)
			return sf_err_set(&sp->err, -EOVERFLOW, "%s: a read to %llu bytes into the "
					  "region overflows its buffer of %llu", sp->img->path,
					  (unsigned long long)(q->aoff + q->alen - base),
					  (unsigned long long)cap);
		for (; i < k && pos[i] < run->start + run->len; i++) {
			req_of[i] = (uint32_t)(q - sp->reqs);
			if (runlen)
				runlen[i] = run->len;
		}
		sp->hist[hist_bucket(run->len)]++;
		sp->runs_total++;
		sp->runs_positions += run->len;
	}
	for (size_t r = first; r < sp->nreq; r++) {
		gt->bytes_moved += sp->reqs[r].alen;
		gt->requests++;
	}
	gt->bytes_needed += (uint64_t)k * stride;
	return 0;
}

struct compute_task {
	const struct sf_sparse *sp;
	const struct sf_image_group *G;
	float *const *y;
	uint64_t total_rows;
	const struct sf_run *spans;	/* rows computed (bundle rows); NULL: all */
	uint32_t nspans;
	unsigned weight_cost;		/* top-tier weights one weight costs */
};

/* Worker ith of nth's share of the output rows of every matrix of the
 * group taken in turn: rows [a[i], b[i]) of matrix i, empty when
 * a[i] >= b[i]. Each row sums its columns in order, so any split gives
 * the same sums. */
static void worker_rows(const struct compute_task *t, int ith, int nth, size_t *a, size_t *b)
{
	size_t lo, hi, base = 0;

	sf_pool_split(t->total_rows, 16, ith, nth, &lo, &hi);
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
		size_t es = sf_dtype_size(G->mat[i].dtype);
		const struct sf_run all = { (uint32_t)a[i], (uint32_t)(b[i] - a[i]) };
		const struct sf_run *sv = t->spans ? t->spans : &all;
		uint32_t ns = t->spans ? t->nspans : 1;
		for (size_t s = 0; s < sp->nseg; s++) {
			const struct seg *sg = &sp->segs[s];
			for (uint32_t k = 0; k < ns; k++) {
				size_t r0 = sv[k].start > a[i] ? sv[k].start : a[i];
				size_t r1 = sv[k].start + sv[k].len < b[i] ? sv[k].start + sv[k].len : b[i];
				if (r0 >= r1)
					continue;
				sf_colaccum(t->y[i] + r0, r1 - r0, sg->base + G->mat[i].offset + r0 * es,
					    G->mat[i].dtype, (size_t)(G->top_bytes / es),
					    sp->idx + sg->first, sp->xv + sg->first, sg->n);
			}
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
	for (int i = 0; i < t->G->nmat; i++)
		for (size_t s = 0; a[i] < b[i] && s < sp->nseg; s++) {
			const struct seg *sg = &sp->segs[s];
			struct sf_codes_view v = sf_image_mid_view(sp->img, t->G, i, sg->base);
			sf_codes_colaccum(t->y[i], &v, a[i], b[i], sp->idx + sg->first,
					  sp->xv + sg->first, sg->n);
		}
}

/* The work gathered for the next batch, in top-tier weights. */
static uint64_t batch_work(const struct sf_sparse *sp, const struct compute_task *t)
{
	return (uint64_t)sp->nidx * t->total_rows * t->weight_cost;
}

static void flush(struct sf_sparse *sp, void (*fn)(void *, int, int), struct compute_task *t)
{
	if (!sp->nseg)
		return;
	double t0 = sf_now();
	if (sp->pool && batch_work(sp, t) >= POOL_MIN_WEIGHTS)
		sf_pool_run(sp->pool, fn, t);
	else
		fn(t, 0, 1);
	sp->compute_s += sf_now() - t0;
	sp->nseg = 0;
	sp->nidx = 0;
}

/* Waits for one request (wait 1), then takes every other that has
 * completed, which refills the ring from the queued ones; on error
 * records it. */
static int reap_some(struct sf_sparse *sp, int wait)
{
	uint64_t tag;
	struct sf_err e = { 0 };
	double t0 = sf_now();
	int ret = sf_uring_reap(sp->u, &tag, wait, &e);

	if (!wait && ret == 0)
		return 0;
	sp->last_done = sf_now();
	if (wait)
		sp->wait_s += sp->last_done - t0;
	if (ret == 0)
		return sf_err_set(&sp->err, -EIO, "%s: reads ended before the group's data came",
				  sp->img->path);
	while (ret == 1) {
		sp->reqs[tag].done = 1;
		ret = sf_uring_reap(sp->u, &tag, 0, &e);
	}
	if (ret == 0)
		return 0;
	if (e.msg[0])	/* names the file, offset and length */
		return sf_err_set(&sp->err, ret, "%s", e.msg);
	const struct req *q = &sp->reqs[tag < sp->nreq ? tag : 0];
	return sf_err_set(&sp->err, ret, "%s: read of %u bytes at %llu: %s", sp->img->path,
			  q->alen, (unsigned long long)q->aoff, sf_strerror(ret));
}

/* Computes positions pos[0..k) in order as their requests complete:
 * available ones are gathered into segments, computed once they hold
 * sp->batch_weights (and at the end). After each batch the completed
 * reads are taken without waiting, so the ring is refilled from the
 * queued requests while a long run of arrived columns is computed. */
static int compute_tier(struct sf_sparse *sp, const struct sf_image_group *G, const float *in,
			const uint32_t *pos, size_t k, const uint32_t *req_of,
			const void *const *slots, const uint8_t *mirror,
			void (*fn)(void *, int, int), struct compute_task *t)
{
	size_t i = 0;

	while (i < k) {
		for (; i < k; i++) {
			const void *slot = slots ? slots[i] : NULL;
			uint32_t r = slot ? NO_READ : req_of[i];
			if (!slot && !sp->reqs[r].done)
				break;
			struct seg *last = sp->nseg ? &sp->segs[sp->nseg - 1] : NULL;
			if (!last || slot || last->req == NO_READ) {
				last = &sp->segs[sp->nseg++];
				*last = (struct seg){
					.base = slot ? slot : mirror, .req = r,
					.p0 = slot ? pos[i] : 0, .first = (uint32_t)sp->nidx,
				};
			}
			sp->idx[sp->nidx] = pos[i] - last->p0;
			sp->xv[sp->nidx++] = in[G->perm[pos[i]]];
			last->n++;
			if (batch_work(sp, t) >= sp->batch_weights) {
				flush(sp, fn, t);
				int ret = sp->u && sf_uring_outstanding(sp->u) ? reap_some(sp, 0) : 0;
				if (ret)
					return ret;
			}
		}
		if (i < k) {
			int ret = reap_some(sp, 1);
			if (ret)
				return ret;
		}
	}
	flush(sp, fn, t);
	return 0;
}

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

static void fail_group(struct sf_sparse *sp, int ret, int nout, float *const *out,
		       const struct sf_weight *const *w)
{
	if (!sp->failed)
		sp->failed = ret;
	if (sp->u)
		while (sf_uring_outstanding(sp->u)) {
			uint64_t tag;
			struct sf_err e;
			if (sf_uring_reap(sp->u, &tag, 1, &e) == 0)
				break;
		}
	for (int i = 0; i < nout; i++)
		memset(out[i], 0, (size_t)w[i]->rows * sizeof(float));
}

/* --free-riders: the positions whose whole bundle lies in the 4 KiB
 * pages the top tier's positions tpos[0..*nt) touch join them (in
 * order), unless allow leaves them out; they leave the middle tier
 * mpos[0..*nm). Returns how many joined. */
static size_t add_riders(struct sf_sparse *sp, const struct sf_image_group *G,
			 const uint64_t *allow, size_t *nt, size_t *nm)
{
	const uint64_t s = G->top_bytes, P = SF_IMAGE_ALIGN;
	const uint64_t npages = round_up((uint64_t)G->entries * s) / P;
	uint64_t *pg = sp->pages;
	uint32_t *tpos = sp->tpos, *merged = sp->sel_scratch;
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
		while (t < nout && tpos[t] < sp->mpos[i])
			t++;
		if (t == nout || tpos[t] != sp->mpos[i])
			sp->mpos[m++] = sp->mpos[i];
	}
	*nm = m;
	return nr;
}

static void group_exec(void *ctx, int layer, enum sf_group g, const float *in, size_t n,
		       int nout, float *const *out, const struct sf_weight *const *w)
{
	struct sf_sparse *sp = ctx;
	const struct sf_image_group *G = sf_image_group(sp->img, layer, g);
	struct gtally *gt = &sp->g[g];
	size_t at_k = (size_t)layer * SF_NGROUPS + (size_t)g;
	uint32_t kt = sp->k_top[at_k], km = sp->k_mid[at_k];
	double t0 = sf_now();
	int ret = 0;

	if (layer == 0 && g == SF_GROUP_ATTN_IN)
		token_begin(sp);
	if (sp->failed) {
		fail_group(sp, sp->failed, nout, out, w);
		return;
	}
	if (G->resident) {
		sf_group_dense(sp->pool, in, nout, out, w);
		return;
	}
	for (int i = 0; i < nout; i++)
		memset(out[i], 0, (size_t)w[i]->rows * sizeof(float));

	// 1. select
	if (g == SF_GROUP_FFN_OUT && sp->sc && !sp->sc_fixed)
		sf_select_compute_observe(sp->sc, layer, in);
	/* entries outside allow (not on flash, or not in the computation
	 * set) are never computed; kt and km count the group's source
	 * entries, so they are taken first */
	const uint64_t *allow = sp->allow[at_k];
	size_t nt, nm = 0;
	if (kt == n && !allow) {
		nt = n;
		for (uint32_t p = 0; p < n; p++)
			sp->tpos[p] = p;
	} else {
		if (kt == n)
			nt = bits_entries(allow, NULL, NULL, (uint32_t)n, sp->ents);
		else {
			sf_trace_select_topk(in, (uint32_t)n, kt, sp->bits_top, sp->sel_scratch);
			nt = bits_entries(sp->bits_top, allow, NULL, (uint32_t)n, sp->ents);
		}
		sf_runs_positions(G->pos, (uint32_t)n, sp->ents, nt, sp->pscratch, sp->tpos);
		if (km) {
			sf_trace_select_topk(in, (uint32_t)n, kt + km, sp->bits_all, sp->sel_scratch);
			nm = bits_entries(sp->bits_all, allow, sp->bits_top, (uint32_t)n, sp->ents);
			sf_runs_positions(G->pos, (uint32_t)n, sp->ents, nm, sp->pscratch, sp->mpos);
		}
	}

	size_t riders = sp->o.free_riders && kt < n ? add_riders(sp, G, allow, &nt, &nm) : 0;

	// 2. cache
	size_t hits = 0, nmiss = 0;
	const void *const *slots = NULL;
	if (sp->use_cache) {
		for (size_t i = 0; i < nt; i++)
			sp->tent[i] = G->perm[sp->tpos[i]];
		hits = sf_cache_lookup(sp->cache, (uint32_t)layer, g, sp->tent, nt, sp->slots, NULL,
				       NULL);
		slots = sp->slots;
	}
	/* the misses' positions, in order, reuse ents */
	for (size_t i = 0; i < nt; i++)
		if (!slots || !slots[i])
			sp->ents[nmiss++] = sp->tpos[i];

	// 3. plan, into the mirrors of the group's regions
	uint64_t tcap = round_up((uint64_t)G->entries * G->top_bytes);
	uint64_t mcap = G->mid ? round_up((uint64_t)G->entries * G->mid_bytes) : 0;
	uint8_t *tmir = sp->o.simulate ? sp->flash + (G->top->offset - sp->flash_base) : sp->iobuf;
	uint8_t *mmir = !G->mid ? NULL : sp->o.simulate ? sp->flash + (G->mid->offset - sp->flash_base)
						      : sp->iobuf + tcap;
	/* the middle tier first: its reads are an eighth of the bytes and come
	 * in early, so its decoding overlaps the top tier's reads */
	sp->nreq = 0;
	if (nm && (ret = plan(sp, sp->mpos, nm, G->mid->offset, G->mid_bytes, mmir, mcap, sp->mreq,
			      NULL, gt)))
		goto fail;
	if ((ret = plan(sp, sp->ents, nmiss, G->top->offset, G->top_bytes, tmir, tcap,
			sp->sel_scratch, sp->runlen, gt)))
		goto fail;
	/* per selected top entry: its request, or NO_READ for a hit */
	for (size_t i = 0, j = 0; i < nt; i++)
		sp->treq[i] = slots && slots[i] ? NO_READ : sp->sel_scratch[j++];

	// 4. read
	double ts = sf_now();
	sp->last_done = ts;
	if (sp->o.simulate) {
		for (size_t r = 0; r < sp->nreq; r++)
			sp->reqs[r].done = 1;
	} else if (sp->nreq) {
		for (size_t r = 0; r < sp->nreq; r++)
			if ((ret = sf_uring_queue(sp->u, sp->reqs[r].aoff, sp->reqs[r].alen,
						  sp->reqs[r].buf, r, &sp->err)))
				goto fail;
		if ((ret = sf_uring_submit(sp->u, &sp->err)) < 0)
			goto fail;
	}

	// 5. compute in position order as reads complete: middle, then top
	float *yr[SF_GROUP_MAX_MATRICES];
	const uint8_t *cm = g == SF_GROUP_FFN_IN && sp->sc ? sp->set_mask[layer] : NULL;
	struct compute_task t = { .sp = sp, .G = G, .y = G->rows ? yr : out };
	if (cm) {
		t.spans = sp->spans + (size_t)layer * sp->rows_all;
		t.nspans = sp->nspans[layer];
		for (uint32_t k = 0; k < t.nspans; k++)
			sp->c_rows += t.spans[k].len;
	}
	for (int i = 0; i < G->nmat; i++) {
		t.total_rows += G->mat[i].rows;
		if (G->rows) {
			yr[i] = sp->yrows + (size_t)i * sp->rows_max;
			memset(yr[i], 0, (size_t)G->mat[i].rows * sizeof(float));
		}
	}
	t.weight_cost = sp->img->codes_method == SF_CODES_TRELLIS ? MID_COST_TRELLIS
								  : MID_COST_SCALAR;
	if (nm && (ret = compute_tier(sp, G, in, sp->mpos, nm, sp->mreq, NULL, mmir, mid_worker,
				      &t)))
		goto fail;
	t.weight_cost = 1;
	if ((ret = compute_tier(sp, G, in, sp->tpos, nt, sp->treq, slots, tmir, top_worker, &t)))
		goto fail;
	/* kept rows to their neurons; rows outside the set (span gaps, whole
	 * middle-tier records) cleared. Neurons left out stay 0, and silu(0)
	 * * 0 makes their ffn_out entry 0 */
	for (int i = 0; (G->rows || cm) && i < G->nmat; i++)
		for (uint64_t r = 0; r < G->mat[i].rows; r++) {
			uint32_t nr = G->rows ? G->rows[r] : (uint32_t)r;
			out[i][nr] = cm && !cm[nr] ? 0.0f : G->rows ? yr[i][r] : out[i][nr];
		}
	if (g == SF_GROUP_FFN_OUT && sp->sc && sp->set_mask[layer])
		sp->c_entries += nt + nm;
	if (!sp->o.simulate && sp->u && sf_uring_outstanding(sp->u)) {
		ret = sf_err_set(&sp->err, -EIO, "%s: reads left outstanding", sp->img->path);
		goto fail;
	}
	uint64_t moved = 0;
	for (size_t r = 0; r < sp->nreq; r++)
		moved += sp->reqs[r].alen;
	/* the I/O span: from the submit to the last completion */
	sp->tok_span += sp->last_done - ts;
	sp->span_s += sp->last_done - ts;
	sp->tok_bytes += moved;
	sp->requests += sp->nreq;
	sp->bytes_moved += moved;

	// 6. admit what was read
	if (slots)
		for (size_t i = 0, j = 0; i < nt; i++) {
			if (slots[i])
				continue;
			uint32_t p = sp->tpos[i];
			sf_cache_insert(sp->cache, (uint32_t)layer, g, G->perm[p],
					tmir + (uint64_t)p * G->top_bytes, G->top_bytes,
					sp->runlen[j++] > 2);
		}

	gt->computed++;
	gt->entries += n;
	gt->k_top += nt;
	gt->k_mid += nm;
	gt->hits += hits;
	gt->riders += riders;
	gt->budget += ((double)nt * (double)col_bytes(G, 0) + (double)nm * (double)sp->col_mid[g]) /
		      ((double)n * (double)sp->col_top[g]);
	sp->bytes_needed += (uint64_t)nmiss * G->top_bytes + (uint64_t)nm * G->mid_bytes;
	sp->exec_s += sf_now() - t0;
	return;
fail:
	fail_group(sp, ret, nout, out, w);
}

// ----------------------------------------------------------------------------
// figures

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
	uint64_t tok = sp->tokens + (sp->t_token > 0);	/* the current one counts */
	double per = tok ? 1.0 / (double)tok : 0.0;
	double *s = sp->nlat ? malloc(sp->nlat * sizeof(double)) : NULL;
	struct sf_cache_stats cs = { 0 };
	struct sf_uring_stats us = { 0 };

	if (sp->nlat && !s)
		return NULL;
	if (s) {
		memcpy(s, sp->lat, sp->nlat * sizeof(double));
		qsort(s, sp->nlat, sizeof(double), cmp_double);
	}
	if (sp->cache)
		sf_cache_stats(sp->cache, SF_NGROUPS, &cs);
	if (sp->u)
		sf_uring_stats(sp->u, &us);

	json_t *hist = json_object(), *groups = json_object();
	for (int b = 0; b < SF_RUNS_NHIST; b++)
		json_object_set_new(hist, sf_runs_hist_names[b], json_integer((json_int_t)sp->hist[b]));
	double budget_sum = 0, budget_den = 0;
	uint64_t riders = 0;
	for (int g = 0; g < SF_NGROUPS; g++) {
		const struct gtally *t = &sp->g[g];
		if (!t->computed)
			continue;
		double c = (double)t->computed;
		budget_sum += t->budget / c * (double)t->entries / c * (double)sp->col_top[g];
		budget_den += (double)t->entries / c * (double)sp->col_top[g];
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
		"latency_seconds", "p50", pct(s, sp->nlat, 0.5), "p90", pct(s, sp->nlat, 0.9),
		"p99", pct(s, sp->nlat, 0.99),
		"compute_seconds", sp->compute_s, "io_wait_seconds", sp->wait_s,
		"io_span_seconds", sp->span_s, "sparse_seconds", sp->exec_s,
		"requests_per_token", (double)sp->requests * per,
		"bytes_moved_per_token", (double)sp->bytes_moved * per,
		"bytes_needed_per_token", (double)sp->bytes_needed * per,
		"bytes_moved_over_needed", sp->bytes_needed ?
			(double)sp->bytes_moved / (double)sp->bytes_needed : 0.0,
		"effective_bandwidth", sp->span_s > 0 ? (double)sp->bytes_needed / sp->span_s : 0.0,
		"raw_bandwidth", sp->span_s > 0 ? (double)sp->bytes_moved / sp->span_s : 0.0,
		"mean_read_length", sp->runs_total ?
			(double)sp->runs_positions / (double)sp->runs_total : 0.0,
		"runs_per_token", (double)sp->runs_total * per,
		"read_length_histogram", hist,
		"cache", "lookups", (json_int_t)cs.lookups, "hits", (json_int_t)cs.hits,
		"admissions", (json_int_t)cs.admissions, "rejected", (json_int_t)cs.rejected,
		"evictions", (json_int_t)cs.evictions,
		"hit_rate", cs.lookups ? (double)cs.hits / (double)cs.lookups : 0.0,
		"collapse", "setting", sp->collapse_desc,
		"tokens_on", (json_int_t)sp->tokens_collapsed,
		"tokens_off", (json_int_t)sp->tokens_uncollapsed,
		"uring", "requests", (json_int_t)us.requests, "reads", (json_int_t)us.reads,
		"bytes", (json_int_t)us.bytes, "short_reads", (json_int_t)us.short_reads,
		"fixed_reads", (json_int_t)us.fixed_reads, "submits", (json_int_t)us.submits,
		"budget", budget_den > 0 ? budget_sum / budget_den : 0.0,
		"groups", groups);
	free(s);
	if (j) {
		double sum = 0;
		for (uint64_t i = 0; i < sp->nlat; i++)
			sum += sp->lat[i];
		json_object_set_new(json_object_get(j, "latency_seconds"), "mean",
				    json_real(sp->nlat ? sum / (double)sp->nlat : 0.0));
		json_object_set_new(j, "bytes_moved", json_integer((json_int_t)sp->bytes_moved));
		json_t *cj = json_object_get(j, "cache");
		json_object_set_new(cj, "pinned", json_integer((json_int_t)cs.pinned));
		json_object_set_new(cj, "pin_hits", json_integer((json_int_t)cs.pin_hits));
		json_object_set_new(j, "memory", memory_json(sp));
		json_object_set_new(j, "free_riders", json_integer((json_int_t)riders));
		json_object_set_new(j, "free_riders_per_token", json_real((double)riders * per));
		if (sp->sc) {
			double pp = sp->c_passes ? 1.0 / (double)sp->c_passes : 0.0;
			json_object_set_new(j, "compute", json_pack(
				"{s:f, s:i, s:I, s:I, s:I, s:I, s:f, s:f}",
				"rho", sp->rho, "layers", sp->c_layers,
				"set_entries", (json_int_t)sp->c_set,
				"static", (json_int_t)sp->c_static, "dynamic", (json_int_t)sp->c_dynamic,
				"passes", (json_int_t)sp->c_passes,
				"ffn_out_entries_per_pass", (double)sp->c_entries * pp,
				"ffn_in_rows_per_pass", (double)sp->c_rows * pp));
		}
		json_object_set_new(j, "requests", json_integer((json_int_t)sp->requests));
	}
	return j;
}
