/* The sparse decoder of sf-run IMAGE, set up and torn down: the tier
 * sizes, the memory budget and the cache sized to it, the buffers, the
 * ring (or --simulate's copy of the flash regions), the pinned set and
 * the collapse gap; then the device figures --collapse auto reads. The
 * per-token work is in sparse_exec.c, the figures in sparse_stats.c, the
 * state in sparse_impl.h. See sparse.h; options in man/sf-run.1. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "formats/trace.h"
#include "online/sparse_impl.h"
#include "online/uring.h"


void sf_sparse_opts_default(struct sf_sparse_opts *o)
{
	*o = (struct sf_sparse_opts){
		.select = SF_SPARSE_BUDGET, .budget = 1.0, .collapse = SF_SPARSE_COLLAPSE_AUTO,
		.policy = SF_CACHE_S3FIFO, .seg_admit = SF_CACHE_DEFAULT_SEG_ADMIT,
		.cache_ratio = -1.0, .prefetch = SF_SPARSE_PREFETCH,
		.predict = SF_SPARSE_PREDICT_RESIDUAL,
	};
}

static const char *const predict_names[] = { "none", "residual", "all" };

const char *sf_sparse_predict_name(enum sf_sparse_predict p)
{
	return predict_names[p];
}

int sf_sparse_predict_parse(const char *name, enum sf_sparse_predict *p)
{
	for (int i = 0; i < 3; i++)
		if (!strcmp(name, predict_names[i])) {
			*p = (enum sf_sparse_predict)i;
			return 0;
		}
	return -EINVAL;
}

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
			if (fabs(img->budgets[i] - o->budget) < SF_CALIB_SAME_BUDGET)
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
			sp->tiers.k_top[at] = (uint32_t)kt;
			sp->tiers.k_mid[at] = (uint32_t)km;
		}
	return 0;
}

// ----------------------------------------------------------------------------
// the groups on flash

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
		size_t a = sf_dtype_align(G->mat[i].dtype);
		if (G->top_bytes % a || G->mat[i].offset % a || G->mat[i].dtype != G->mat[0].dtype)
			return sf_err_set(e, SF_EUNSUPPORTED, "%s: layer %d %s: bundle stride %llu "
					  "is not a whole number of %s elements", img->path, G->layer,
					  sf_group_name(G->group), (unsigned long long)G->top_bytes,
					  G->mat[i].name);
	}
	return 0;
}

/* What the groups on flash need, gathered in one pass over them. */
struct flash_needs {
	uint64_t offloaded[SF_NGROUPS];	/* per group kind: top-tier bytes on flash */
	uint64_t slot[SF_NGROUPS];	/* the largest bundle, the cache's slot (--keep varies ffn_in's) */
	uint64_t entries[SF_NGROUPS];	/* entries on flash */
	uint64_t iobuf;			/* the largest group's mirrors: the read buffer */
	uint64_t experts;		/* a mixture's expert records on flash */
	uint64_t lo, hi;		/* the file span of every flash region (--simulate's copy) */
};

/* Checks each group on flash and gathers its needs; sets the scratch size
 * (s.nmax) and the bytes of one entry per tier. */
static int measure_groups(struct sf_sparse *sp, struct flash_needs *fn, struct sf_err *e)
{
	const struct sf_image *img = sp->img;
	size_t ng = (size_t)img->cfg.n_layers * SF_NGROUPS;
	int ret;

	*fn = (struct flash_needs){ .lo = UINT64_MAX };
	for (size_t i = 0; i < ng; i++) {
		const struct sf_image_group *G = &img->groups[i];
		if (G->resident)
			continue;
		if ((ret = check_layout(sp, G, e)))
			return ret;
		if (G->source_entries > sp->s.nmax)
			sp->s.nmax = G->source_entries;
		uint64_t t = sparse_round_up((uint64_t)G->entries * G->top_bytes);
		uint64_t mb = G->mid ? sparse_round_up((uint64_t)G->entries * G->mid_bytes) : 0;
		if (t + mb > fn->iobuf)
			fn->iobuf = t + mb;
		fn->offloaded[G->group] += (uint64_t)G->entries * G->top_bytes;
		fn->entries[G->group] += G->entries;
		if (G->top_bytes > fn->slot[G->group])
			fn->slot[G->group] = G->top_bytes;
		uint64_t mid = 0;
		for (int k = 0; k < G->nmat; k++)
			mid += G->mat[k].mid_bytes;
		sp->tiers.col_top[G->group] = sparse_col_bytes(G, 1);
		sp->tiers.col_mid[G->group] = mid;
		if (G->top->offset < fn->lo)
			fn->lo = G->top->offset;
		if (G->mid && G->mid->offset < fn->lo)
			fn->lo = G->mid->offset;
		uint64_t end = G->mid ? G->mid->offset + sparse_round_up(G->mid->length)
				      : G->top->offset + sparse_round_up(G->top->length);
		if (G->top->offset + sparse_round_up(G->top->length) > end)
			end = G->top->offset + sparse_round_up(G->top->length);
		if (end > fn->hi)
			fn->hi = end;
	}
	for (int l = 0; l < img->cfg.n_layers && img->experts.count; l++) {
		const struct sf_image_region *R = img->experts.layer[l];
		fn->experts += R->length;
		fn->lo = R->offset < fn->lo ? R->offset : fn->lo;
		fn->hi = R->offset + R->length > fn->hi ? R->offset + R->length : fn->hi;
	}
	return 0;
}

// ----------------------------------------------------------------------------
// what each group may compute: --keep, --free-riders, selective computation

/* The entries present on flash of groups packed with --keep, and the
 * row buffer of kept-row bundles. */
static int setup_allow(struct sf_sparse *sp)
{
	const struct sf_image *img = sp->img;
	size_t ng = (size_t)img->cfg.n_layers * SF_NGROUPS, nr = 0;
	uint64_t rows = 0;

	sp->tiers.words = ((size_t)sp->s.nmax + 63) / 64;
	for (size_t i = 0; i < ng; i++) {
		const struct sf_image_group *G = &img->groups[i];
		nr += !G->resident && G->entries < G->source_entries;
		for (int m = 0; !G->resident && m < G->nmat; m++)
			if (sparse_staged(G, m, sp->s.tokens) && G->mat[m].rows > rows)
				rows = G->mat[m].rows;
	}
	sp->s.ldy = rows + (rows && rows % 1024 == 0 ? 16 : 0);
	if (!(sp->tiers.allow = calloc(ng, sizeof(*sp->tiers.allow))) ||
	    !(sp->tiers.keep_allow = calloc(ng, sizeof(*sp->tiers.keep_allow))))
		return -ENOMEM;
	/* on cache lines, and untouched until used: the resident set that
	 * fixed_memory measures next must not hold it besides its figure */
	if (rows && posix_memalign((void **)&sp->s.yrows, 64, SF_GROUP_MAX_MATRICES *
				   (size_t)sp->s.tokens * sp->s.ldy * sizeof(float)))
		return -ENOMEM;
	if (!nr)
		return 0;
	sp->tiers.allow_bytes = (uint64_t)nr * sp->tiers.words * 8;
	if (!(sp->tiers.allow_bits = calloc(nr * sp->tiers.words, 8)))
		return -ENOMEM;
	for (size_t i = 0, k = 0; i < ng; i++) {
		const struct sf_image_group *G = &img->groups[i];
		if (G->resident || G->entries == G->source_entries)
			continue;
		uint64_t *b = sp->tiers.allow_bits + k++ * sp->tiers.words;
		sp->tiers.allow[i] = sp->tiers.keep_allow[i] = b;
		for (uint32_t p = 0; p < G->entries; p++)
			b[G->perm[p] / 64] |= 1ull << (G->perm[p] % 64);
	}
	return 0;
}

/* --free-riders: the page bitmap, for the group with the most top-tier
 * pages. */
static int setup_riders(struct sf_sparse *sp)
{
	const struct sf_image *img = sp->img;
	size_t ng = (size_t)img->cfg.n_layers * SF_NGROUPS;
	uint64_t most = 0;

	for (size_t i = 0; i < ng; i++) {
		const struct sf_image_group *G = &img->groups[i];
		uint64_t pg = G->resident ? 0 : sparse_round_up((uint64_t)G->entries * G->top_bytes) /
						 SF_IMAGE_ALIGN;
		most = pg > most ? pg : most;
	}
	sp->tiers.page_words = (size_t)(most + 63) / 64;
	sp->tiers.pages = calloc(sp->tiers.page_words ? sp->tiers.page_words : 1, 8);
	return sp->tiers.pages ? 0 : -ENOMEM;
}

/* Selective computation: the selection state and the per-layer set
 * buffers; the FFN groups must be on flash. */
static int setup_compute(struct sf_sparse *sp, struct sf_err *e)
{
	const struct sf_image *img = sp->img;
	int L = img->cfg.n_layers, ret;
	uint32_t n = (uint32_t)img->cfg.hidden_dim;

	if (img->experts.count)
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: --compute-ratio: a mixture of experts, "
				  "whose experts are read whole (no neurons chosen inside them "
				  "yet)", img->path);
	for (int l = 0; l < L; l++) {
		const struct sf_image_group *fi = sf_image_group(img, l, SF_GROUP_FFN_IN);
		const struct sf_image_group *fo = sf_image_group(img, l, SF_GROUP_FFN_OUT);
		if (fi->resident || fo->resident)
			return sf_err_set(e, SF_EUNSUPPORTED, "%s: --compute-ratio: layer %d's FFN "
					  "is resident (sf-pack --resident): its neurons cannot be "
					  "restricted", img->path, l);
		if (fi->mat[0].rows > sp->comp.rows_all)
			sp->comp.rows_all = fi->mat[0].rows;
	}
	if ((ret = sf_select_compute_open(&sp->comp.sc, L, n, sp->o.compute, sp->o.compute_static,
					  sp->o.compute_static_name, e)))
		return ret;
	sp->comp.rho = sp->o.compute->rho;
	sp->comp.set_bits = calloc((size_t)L * sp->tiers.words, 8);
	sp->comp.set_mask = calloc((size_t)L, sizeof(*sp->comp.set_mask));
	sp->comp.spans = calloc((size_t)L * sp->comp.rows_all, sizeof(*sp->comp.spans));
	sp->comp.nspans = calloc((size_t)L, sizeof(*sp->comp.nspans));
	if (!sp->comp.set_bits || !sp->comp.set_mask || !sp->comp.spans || !sp->comp.nspans)
		return sf_err_set(e, -ENOMEM, "%s: selective computation: %s", img->path,
				  strerror(ENOMEM));
	/* the selection's own state: counts, sums, masks, orders per neuron */
	sp->comp.bytes = (uint64_t)L * sp->tiers.words * 8 + (uint64_t)L * sp->comp.rows_all *
			    sizeof(*sp->comp.spans) + (uint64_t)L * n * 24 + (uint64_t)n * 24;
	return 0;
}

// ----------------------------------------------------------------------------
// the memory budget and the cache sized to it

static uint64_t scratch_bytes(uint64_t n, uint64_t max_tokens, uint64_t tokens)
{
	uint64_t words = (n + 63) / 64;
	uint64_t ldx = sparse_ldx((int)tokens);
	return words * 8 * (5 + 2 * tokens) + n * 4 * 10 + ldx * n * (4 + 2 * sizeof(float)) +
	       2 * n * sizeof(void *) + n * sizeof(struct sf_run) +
	       max_tokens * sizeof(double);
}

/* --prefetch-predict's state (struct sparse_predict). */
static uint64_t predict_bytes(const struct sf_sparse *sp)
{
	uint64_t n = (uint64_t)sp->img->cfg.dim, L = (uint64_t)sp->img->cfg.n_layers;
	uint64_t words = sp->tiers.words;

	if (!sp->o.prefetch)
		return 0;
	if (sp->o.predict == SF_SPARSE_PREDICT_NONE)
		return 3 * (uint64_t)sp->s.nmax * 4;
	return (2 * n + L * 2 * n) * sizeof(float) + 2 * words * 8 + 3 * (uint64_t)sp->s.nmax * 4 +
	       (sp->o.predict == SF_SPARSE_PREDICT_ALL ? L * SF_NGROUPS * 2 * words * 8 : 0);
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

/* The cache's options: one slot size per group kind, and the pinned set's
 * slots (pinned[g] of them) and memory. Sums the offloaded bytes. */
static void cache_opts(struct sf_sparse *sp, const struct flash_needs *fn,
		       struct sf_cache_opts *co, uint64_t *pinned)
{
	const struct sf_sparse_opts *o = &sp->o;

	sf_cache_opts_default(co);
	co->policy = o->policy;
	co->seg_admit = o->seg_admit;
	sp->mem.offloaded = fn->experts;
	for (int g = 0; g < SF_NGROUPS; g++) {
		sp->mem.offloaded += fn->offloaded[g];
		co->bundle_bytes[g] = fn->slot[g] ? fn->slot[g] : 1;
	}
	if (o->pin && !o->simulate) {
		pin_counts(sp, pinned);
		for (int g = 0; g < SF_NGROUPS; g++)
			co->pin_slots[g] = (uint32_t)pinned[g];
		uint64_t none = sf_cache_footprint(&(struct sf_cache_opts){ .policy = o->policy });
		sp->mem.pinned = sf_cache_footprint(co) - none;
	}
}

/* The memory besides the cache: the process, the resident regions, the
 * caller's state, the buffers and --simulate's copy. Returns their sum. */
static uint64_t fixed_memory(struct sf_sparse *sp, const struct flash_needs *fn)
{
	const struct sf_image *img = sp->img;
	const struct sf_sparse_opts *o = &sp->o;
	uint64_t ng = (uint64_t)img->cfg.n_layers * SF_NGROUPS;
	/* the resident set already holds the image's header and resident
	 * regions (read into memory at open, or all but the deferred resident
	 * region), counted as resident below */
	uint64_t rss = rss_bytes();

	sp->mem.resident = img->map_size - img->left_on_flash;
	uint64_t in_rss = sp->mem.resident - img->resident_unread;
	sp->mem.process = (rss > in_rss ? rss - in_rss : 0) + SF_SPARSE_LATER_BYTES;
	sp->mem.state = o->state_bytes;
	sp->mem.buffers = sparse_reads_bytes(fn->iobuf, o->simulate ? 1 : 1 + o->prefetch,
					     sp->tiers.words);
	sp->mem.buffers -= o->simulate ? fn->iobuf : 0;	/* bitmaps only */
	sp->mem.buffers += predict_bytes(sp) + ng * (sizeof(long) + sizeof(size_t)) +
			   sparse_head_bytes(sp);
	sp->mem.buffers += scratch_bytes(sp->s.nmax, o->max_tokens, (uint64_t)sp->s.tokens) +
			   2 * ng * 4 +
			   2 * ng * sizeof(*sp->tiers.allow) + sp->tiers.allow_bytes + sp->comp.bytes +
			   sp->tiers.page_words * 8 +
			   SF_GROUP_MAX_MATRICES * (uint64_t)sp->s.tokens * sp->s.ldy * sizeof(float);
	sp->mem.simulate = o->simulate && fn->hi > fn->lo ? fn->hi - fn->lo : 0;
	/* a mixture's experts: a slot for each expert a token picks at least,
	 * so that one token's reads are in flight together */
	sp->mem.experts = sparse_experts_bytes(img, o->simulate ? 0 : img->cfg.n_experts_used);
	return sp->mem.process + sp->mem.resident + sp->mem.state + sp->mem.buffers +
	       sp->mem.simulate + sp->mem.experts;
}

/* The KV cache's positions --ram must leave room for (kv_least, 0: all). */
static uint64_t kv_least(const struct sf_sparse_opts *o)
{
	return o->kv_least && o->kv_least < o->kv_positions ? o->kv_least : o->kv_positions;
}

/* The most KV cache positions that bytes hold (at most want). */
static uint64_t kv_fit(const struct sf_kv_cost *kv, uint64_t bytes, uint64_t want)
{
	uint64_t both = kv->position + kv->ring_position, ring = kv->ring ? kv->ring : want;

	if (bytes < ring * both)
		return bytes / both;
	/* past the ring only the layers holding every position grow */
	if (!kv->position)
		return want;
	return ring + (bytes - ring * both) / kv->position;
}

/* The KV cache's positions and bytes (sf_sparse_opts.kv_cost says how they
 * are granted) beside the fixed memory and an empty cache. */
static void size_kv(struct sf_sparse *sp, uint64_t fixed, uint64_t empty)
{
	const struct sf_sparse_opts *o = &sp->o;
	uint64_t want = o->kv_positions, n = want, least = kv_least(o);

	if (o->ram && o->cache_ratio < 0 && o->kv_cost.position + o->kv_cost.ring_position) {
		/* a quarter: at the 7B shape in 1 GB the cache then keeps the
		 * speed of -c 512 (half of it cost a fifth, issue 32) */
		uint64_t share = o->ram > fixed + empty ?
				 kv_fit(&o->kv_cost, (o->ram - fixed - empty) / 4, want) : 0;
		n = want <= share ? want : share > least ? share : least;
	}
	sp->mem.kv_positions = (uint32_t)n;
	sp->mem.kv = sf_kv_cost_bytes(&o->kv_cost, n);
}

/* A mixture's expert slots with bytes of the cache's share: the
 * experts a token picks at least (in the fixed memory), at most every
 * expert. */
static int expert_slots(const struct sf_sparse *sp, uint64_t bytes)
{
	const struct sf_image *img = sp->img;
	uint64_t all = (uint64_t)img->cfg.n_layers * (uint64_t)img->experts.count;
	uint64_t least = (uint64_t)img->cfg.n_experts_used, more;

	/* a dense image's slots cost nothing: no division by their bytes */
	if (!img->experts.count || sp->o.simulate)
		return 0;
	more = bytes / (sparse_experts_bytes(img, 2) - sparse_experts_bytes(img, 1));
	return (int)(least + more < all ? least + more : all);
}

/* The cache's slots per group kind (co->slots), each kind's share of the
 * bytes --cache-ratio gives or --ram leaves after fixed, and mem.cache and
 * mem.total with them; a mixture's expert slots (sp->xp.slots) take the
 * experts' share. */
static void size_cache(struct sf_sparse *sp, const struct flash_needs *fn,
		       struct sf_cache_opts *co, const uint64_t *pinned, uint64_t fixed)
{
	const struct sf_sparse_opts *o = &sp->o;
	uint64_t cache_bytes = 0, empty = sf_cache_footprint(co);
	int fill = o->cache_ratio < 0 && o->ram;	/* the cache takes what is left */
	uint64_t least = sp->mem.experts;	/* the least expert slots, in fixed */

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
			double share = (double)fn->offloaded[g] / (double)sp->mem.offloaded;
			uint64_t slots = (uint64_t)((double)cache_bytes * share) /
					 sf_cache_entry_bytes(co->bundle_bytes[g]);
			uint64_t most = fn->entries[g] - pinned[g];	/* the rest of the entries */
			co->slots[g] = (uint32_t)(slots < most ? slots : most);
		}
		uint64_t all = sf_cache_footprint(co);
		sp->xp.slots = sp->mem.offloaded ? expert_slots(sp, (uint64_t)((double)cache_bytes *
					(double)fn->experts / (double)sp->mem.offloaded)) : 0;
		uint64_t xb = sparse_experts_bytes(sp->img, sp->xp.slots);
		sp->mem.cache = all - sp->mem.pinned;
		sp->mem.total = fixed + all + (xb > least ? xb - least : 0);
		if (!fill || !cache_bytes || sp->mem.total <= o->ram)
			break;
		cache_bytes = cache_bytes / 10 * 9;
	}
	if (sp->mem.experts < sparse_experts_bytes(sp->img, sp->xp.slots))
		sp->mem.experts = sparse_experts_bytes(sp->img, sp->xp.slots);
	sp->mem.expert_slots = (uint32_t)sp->xp.slots;
}

/* SF_ELIMIT with every figure when the total exceeds --ram. */
static int check_ram(const struct sf_sparse *sp, struct sf_err *e)
{
	const struct sf_sparse_opts *o = &sp->o;
	int ret;

	if (!o->ram || sp->mem.total <= o->ram)
		return 0;
	ret = sf_err_set(e, SF_ELIMIT, "%s: --ram %llu: %llu bytes needed: process %llu, "
			 "resident %llu, state %llu, KV cache %llu (%u positions), buffers %llu, "
			 "pinned %llu, held groups %llu, cache %llu%s", sp->img->path,
			 (unsigned long long)o->ram, (unsigned long long)sp->mem.total,
			 (unsigned long long)sp->mem.process,
			 (unsigned long long)sp->mem.resident,
			 (unsigned long long)sp->mem.state, (unsigned long long)sp->mem.kv,
			 sp->mem.kv_positions,
			 (unsigned long long)sp->mem.buffers,
			 (unsigned long long)sp->mem.pinned,
			 (unsigned long long)sp->mem.slabs,
			 (unsigned long long)sp->mem.cache,
			 o->simulate ? ", --simulate copy" : "");
	if (sp->img->experts.count) {
		char tail[64];
		snprintf(tail, sizeof(tail), ", experts %llu (%d slots)",
			 (unsigned long long)sp->mem.experts, sp->xp.slots);
		strncat(e->msg, tail, sizeof(e->msg) - strlen(e->msg) - 1);
	}
	if (o->simulate) {
		char tail[48];
		snprintf(tail, sizeof(tail), " %llu", (unsigned long long)sp->mem.simulate);
		strncat(e->msg, tail, sizeof(e->msg) - strlen(e->msg) - 1);
	}
	/* the total is with the cache already shrunk to its least (or as
	 * --cache-ratio fixes it): the least budget these options run in, the
	 * process's own part as measured now, which the next run's may pass */
	char least[64];
	snprintf(least, sizeof(least), "; give --ram %llu or more",
		 (unsigned long long)sp->mem.total + SF_SPARSE_RUN_TO_RUN_BYTES);
	strncat(e->msg, least, sizeof(e->msg) - strlen(e->msg) - 1);
	return ret;
}

// ----------------------------------------------------------------------------
// buffers, reads, the pinned set, the collapse gap

static int alloc_scratch(struct sf_sparse *sp)
{
	size_t n = sp->s.nmax, words = (n + 63) / 64;

	sp->s.bits_top = calloc(words, 8);
	sp->s.bits_all = calloc(words, 8);
	sp->s.pscratch = calloc(words, 8);
	sp->s.sel_scratch = calloc(2 * n, 4);
	sp->s.ents = calloc(n, 4);
	sp->s.tpos = calloc(n, 4);
	sp->s.mpos = calloc(n, 4);
	sp->cache.tent = calloc(n, 4);
	sp->s.runlen = calloc(n, 4);
	sp->s.idx = calloc(n, 4);
	size_t ldx = sparse_ldx(sp->s.tokens);
	sp->s.xv = sf_calloc_lines(ldx * n, sizeof(float));
	sp->s.sel = calloc(ldx * n, 4);
	sp->s.xt = sf_calloc_lines(ldx * n, sizeof(float));
	sp->s.tok_top = calloc((size_t)sp->s.tokens * words, 8);
	sp->s.tok_mid = calloc((size_t)sp->s.tokens * words, 8);
	sp->s.any_top = calloc(words, 8);
	sp->s.any_mid = calloc(words, 8);
	sp->cache.slots = calloc(n, sizeof(*sp->cache.slots));
	sp->s.runs = calloc(n, sizeof(*sp->s.runs));
	sp->s.cols = calloc(n, sizeof(*sp->s.cols));
	if (sp->o.max_tokens)
		sp->st.lat = calloc(sp->o.max_tokens, sizeof(double));
	const struct sparse_scratch *s = &sp->s;
	if (!s->bits_top || !s->bits_all || !s->pscratch || !s->sel_scratch || !s->ents ||
	    !s->tpos || !s->mpos || !sp->cache.tent || !s->runlen ||
	    !s->idx || !s->xv || !s->sel || !s->xt || !s->tok_top || !s->tok_mid ||
	    !s->any_top || !s->any_mid || !sp->cache.slots || !s->runs || !s->cols ||
	    (sp->o.max_tokens && !sp->st.lat))
		return -ENOMEM;
	return 0;
}

/* Simulate: the flash regions once into RAM through the image's buffered fd. */
static int read_flash(struct sf_sparse *sp, struct sf_err *e)
{
	const struct sf_image *img = sp->img;
	uint64_t off = 0;

	while (off < sp->io.flash_bytes) {
		size_t k = sp->io.flash_bytes - off < ((size_t)1 << 26)
				   ? (size_t)(sp->io.flash_bytes - off) : (size_t)1 << 26;
		ssize_t r = pread(img->fd, sp->io.flash + off, k, (off_t)(sp->io.flash_base + off));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return sf_err_set(e, r < 0 ? -errno : -EIO, "%s: reading the flash regions "
					  "at %llu: %s", img->path,
					  (unsigned long long)(sp->io.flash_base + off),
					  r < 0 ? strerror(errno) : "unexpected end of file");
		off += (uint64_t)r;
	}
	return 0;
}

/* The flash groups in the order a pass runs them, which --prefetch reads
 * ahead in (cyclic: after the last comes the next pass's first). */
static int flash_order(struct sf_sparse *sp)
{
	size_t ng = (size_t)sp->img->cfg.n_layers * SF_NGROUPS;

	if (!(sp->io.order = calloc(ng, sizeof(*sp->io.order))) ||
	    !(sp->io.seq = calloc(ng, sizeof(*sp->io.seq))))
		return -ENOMEM;
	for (size_t i = 0; i < ng; i++)
		if (!sp->img->groups[i].resident) {
			sp->io.seq[i] = sp->io.norder;
			sp->io.order[sp->io.norder++] = (long)i;
		}
	return 0;
}

/* --prefetch's positions, and --prefetch-predict's state. */
static int open_predict(struct sf_sparse *sp)
{
	struct sparse_predict *pr = &sp->pred;
	const struct sf_image *img = sp->img;
	uint32_t n = (uint32_t)img->cfg.dim;
	size_t L = (size_t)img->cfg.n_layers, words = sp->tiers.words, nmax = sp->s.nmax;

	pr->x_layer = -1;
	if (!sp->o.prefetch)
		return 0;
	pr->ents = calloc(nmax, 4);
	pr->tpos = calloc(nmax, 4);
	pr->mpos = calloc(nmax, 4);
	if (!pr->ents || !pr->tpos || !pr->mpos)
		return -ENOMEM;
	if (sp->o.predict == SF_SPARSE_PREDICT_NONE)
		return 0;
	pr->n = n;
	pr->x = calloc(n, sizeof(float));
	pr->score = calloc(n, sizeof(float));
	pr->gain = calloc(L * 2 * n, sizeof(float));
	pr->top = calloc(words, 8);
	pr->all = calloc(words, 8);
	if (sp->o.predict == SF_SPARSE_PREDICT_ALL)
		pr->history = calloc(L * SF_NGROUPS * 2 * words, 8);
	if (!pr->x || !pr->score || !pr->gain || !pr->top || !pr->all ||
	    (sp->o.predict == SF_SPARSE_PREDICT_ALL && !pr->history))
		return -ENOMEM;
	for (size_t l = 0; l < L; l++) {
		for (uint32_t j = 0; j < n; j++) {
			/* Gemma 3's gains stored less one (sf_config.norm_offset) */
			float off = sp->m->cfg.norm_offset;
			pr->gain[l * 2 * n + j] = off + sf_weight_at(&sp->m->layers[l].attn_norm, j);
			pr->gain[(l * 2 + 1) * n + j] = off + sf_weight_at(&sp->m->layers[l].ffn_norm, j);
		}
	}
	return 0;
}

/* Where the reads come from: nothing when every group is resident; with
 * --simulate the flash regions read into RAM once; else the read buffer
 * and the ring. */
static int open_reads(struct sf_sparse *sp, const struct flash_needs *fn, struct sf_err *e)
{
	const struct sf_image *img = sp->img;
	const struct sf_sparse_opts *o = &sp->o;
	int ret;

	if (sp->s.nmax == 0 && !img->left_on_flash && !img->experts.count)
		return 0;	/* every group resident, no experts: nothing to read */
	if (o->simulate && img->left_on_flash)
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: --simulate with the embedding left on "
				  "flash (sf_image_open_flags)", img->path);
	sp->io.read_size = o->read_size ? o->read_size : SF_SPARSE_READ_SIZE;
	if ((ret = flash_order(sp)))
		return sf_err_set(e, ret, "%s: read buffers: %s", img->path, strerror(-ret));
	if (o->simulate) {
		sp->io.flash_base = fn->lo;
		sp->io.flash_bytes = fn->hi - fn->lo;
		if (!(sp->io.flash = malloc(sp->io.flash_bytes)) ||
		    sparse_reads_open(sp, fn->iobuf, 1, 0))
			return sf_err_set(e, -ENOMEM, "%s: --simulate: %llu bytes: %s", img->path,
					  (unsigned long long)sp->io.flash_bytes, strerror(ENOMEM));
		return read_flash(sp, e);
	}
	uint64_t buf = fn->iobuf ? fn->iobuf : SF_IMAGE_ALIGN;	/* none: the head's reads only */
	if ((ret = sparse_reads_open(sp, buf, 1 + o->prefetch, 1)) || (ret = open_predict(sp)))
		return sf_err_set(e, ret, "%s: %d read buffers of %llu bytes: %s", img->path,
				  1 + o->prefetch, (unsigned long long)buf, strerror(-ret));
	struct sf_uring_opts uo = { .qd = o->qd, .buffered = o->buffered, .arena = sp->io.arena,
				    .arena_bytes = (size_t)buf * (size_t)(1 + o->prefetch),
				    .fault = o->fault };
	if ((ret = sf_uring_open(&sp->io.u, img->path, &uo, e)))
		return ret;
	if ((ret = sparse_head_open(sp)))
		return sf_err_set(e, ret, "%s: embedding and head read buffers: %s", img->path,
				  strerror(-ret));
	return 0;
}

int sparse_pread(const struct sf_image *img, uint8_t *buf, uint64_t len, uint64_t off,
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

int sparse_pread_once(const struct sf_image *img, uint8_t *buf, uint64_t len, uint64_t off,
		      struct sf_err *e)
{
	int ret = sparse_pread(img, buf, len, off, e);

	if (!ret)
		(void)posix_fadvise(img->fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
	return ret;
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
					sp->s.ents[np++] = ids[i];
			sf_runs_positions(G->pos, G->source_entries, sp->s.ents, np, sp->s.pscratch,
					  sp->s.tpos);
			size_t nruns = sf_runs_plan(sp->s.tpos, np, 0, sp->s.runs);
			for (size_t r = 0, i = 0; r < nruns; r++) {
				const struct sf_run *run = &sp->s.runs[r];
				uint64_t off, len;
				sf_image_top_range(G, run->start, run->start + run->len, &off, &len);
				if ((ret = sparse_pread(img, sp->io.arena, len, off, e)))
					return ret;
				for (; i < np && sp->s.tpos[i] < run->start + run->len; i++) {
					void *slot;
					uint32_t p = sp->s.tpos[i];
					if ((ret = sf_cache_pin(sp->cache.c, (uint32_t)l, (enum sf_group)g,
								G->perm[p], &slot)))
						return sf_err_set(e, ret, "%s: pinning layer %d %s entry "
								  "%u: %s", img->path, l,
								  sf_group_name((enum sf_group)g),
								  G->perm[p], strerror(-ret));
					memcpy(slot, sp->io.arena + (uint64_t)(p - run->start) * G->top_bytes,
					       (size_t)G->top_bytes);
				}
			}
		}
	return 0;
}

/* The collapse gap to start with, and how it was chosen. */
static void choose_collapse(struct sf_sparse *sp)
{
	const struct sf_sparse_opts *o = &sp->o;
	struct sparse_collapse *c = &sp->collapse;

	if (o->collapse != SF_SPARSE_COLLAPSE_AUTO) {
		c->gap = o->collapse;
		snprintf(c->desc, sizeof(c->desc), "%d (fixed)", c->gap);
		return;
	}
	c->auto_gap_bytes = o->device_peak > 0 && o->device_iops > 0
				    ? (uint64_t)(o->device_peak / o->device_iops) / SF_IMAGE_ALIGN *
					      SF_IMAGE_ALIGN
				    : SF_SPARSE_AUTO_GAP_BYTES;
	c->gap_bytes = c->auto_gap_bytes;
	if (o->device_peak > 0)
		snprintf(c->desc, sizeof(c->desc),
			 "auto: %llu bytes, off while above %.0f%% of the device peak %.0f MB/s",
			 (unsigned long long)c->auto_gap_bytes, SF_SPARSE_BW_BOUND * 100,
			 o->device_peak / 1e6);
	else
		snprintf(c->desc, sizeof(c->desc),
			 "auto without device figures (sf-run --probe-device): %llu bytes",
			 (unsigned long long)c->auto_gap_bytes);
}

// ----------------------------------------------------------------------------
// open and close

int sf_sparse_open(struct sf_sparse **spp, const struct sf_image *img, const struct sf_model *m,
		   struct sf_pool *pool, const struct sf_sparse_opts *o, struct sf_err *e)
{
	struct sf_sparse *sp = calloc(1, sizeof(*sp));
	size_t ng = (size_t)img->cfg.n_layers * SF_NGROUPS;
	struct flash_needs fn;
	struct sf_cache_opts co;
	uint64_t pinned[SF_NGROUPS] = { 0 };
	int ret;

	*spp = NULL;
	if (!sp)
		return sf_err_set(e, -ENOMEM, "%s: sparse decoder: %s", img->path, strerror(ENOMEM));
	sp->img = img;
	sp->m = m;
	sp->pool = pool;
	sp->o = *o;
	sp->o.batch_weights = o->batch_weights ? o->batch_weights : SF_SPARSE_BATCH_WEIGHTS;
	sp->o.prefetch = o->simulate ? 0 : o->prefetch;	/* nothing to read */
	sp->s.tokens = o->tokens > 1 ? o->tokens : 1;
	sp->exec = (struct sf_group_exec){ .fn = sf_sparse_group_exec, .ctx = sp,
					   .tokens = sp->s.tokens };
	sp->tiers.k_top = calloc(ng, 4);
	sp->tiers.k_mid = calloc(ng, 4);
	if (!sp->tiers.k_top || !sp->tiers.k_mid) {
		ret = sf_err_set(e, -ENOMEM, "%s: sparse decoder: %s", img->path, strerror(ENOMEM));
		goto out;
	}
	if ((ret = resolve_tiers(sp, e)) || (ret = measure_groups(sp, &fn, e)))
		goto out;
	if (o->free_riders && (ret = setup_riders(sp))) {
		ret = sf_err_set(e, ret, "%s: sparse decoder: %s", img->path, strerror(-ret));
		goto out;
	}
	if ((ret = setup_allow(sp))) {
		ret = sf_err_set(e, ret, "%s: sparse decoder: %s", img->path, strerror(-ret));
		goto out;
	}
	if (o->compute && (ret = setup_compute(sp, e)))
		goto out;

	cache_opts(sp, &fn, &co, pinned);
	uint64_t fixed = fixed_memory(sp, &fn), empty = sf_cache_footprint(&co);
	/* read-ahead's buffers are the first thing a budget too small for them
	 * beside the least KV cache gives up (--prefetch 0) */
	uint64_t least_kv = sf_kv_cost_bytes(&o->kv_cost, kv_least(o));
	int prefetch = sp->o.prefetch;
	sp->o.prefetch = 0;
	sp->mem.least = fixed_memory(sp, &fn) + least_kv + empty;
	sp->o.prefetch = prefetch;
	if (o->ram && prefetch && fixed + least_kv + empty > o->ram)
		sp->o.prefetch = 0;
	fixed = fixed_memory(sp, &fn);
	/* the KV cache first, then whole groups from what --ram leaves, then the cache */
	size_kv(sp, fixed, empty);
	fixed += sp->mem.kv;
	sp->mem.slabs = sparse_slabs_plan(sp, o->ram > fixed + empty ? o->ram - fixed - empty : 0,
					  fn.offloaded, fn.entries);
	size_cache(sp, &fn, &co, pinned, fixed + sp->mem.slabs);
	if ((ret = check_ram(sp, e)))
		goto out;
	if (img->resident_unread) {	/* its figures only: no decoding on zeros */
		ret = sf_err_set(e, -EINVAL, "%s: the resident region is not read "
				 "(sf_image_load_resident)", img->path);
		goto out;
	}

	if ((ret = alloc_scratch(sp))) {
		ret = sf_err_set(e, ret, "%s: sparse decoder buffers: %s", img->path, strerror(ENOMEM));
		goto out;
	}
	if ((ret = sf_cache_open(&sp->cache.c, &co, e)))
		goto out;
	sp->cache.use = !o->simulate && (o->policy != SF_CACHE_NONE || sp->mem.pinned);
	if ((ret = open_reads(sp, &fn, e)) || (ret = sparse_slabs_load(sp, sp->mem.slabs, e)))
		goto out;
	if ((ret = sparse_experts_open(sp, sp->xp.slots))) {
		ret = sf_err_set(e, ret, "%s: %d expert slots of %llu bytes: %s", img->path,
				 sp->xp.slots, (unsigned long long)img->experts.record_bytes,
				 strerror(-ret));
		goto out;
	}
	if ((ret = sparse_experts_load(sp, e)))
		goto out;
	if (sp->mem.pinned && (ret = load_pins(sp, e)))
		goto out;
	/* borrowed for the set-up only */
	sp->o.pin = NULL;
	sp->o.compute = NULL;
	sp->o.compute_static = NULL;
	sp->o.compute_static_name = NULL;
	choose_collapse(sp);
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
	free(sp->tiers.k_top);
	free(sp->tiers.k_mid);
	free(sp->tiers.allow);
	free(sp->tiers.keep_allow);
	free(sp->tiers.allow_bits);
	free(sp->tiers.pages);
	sf_uring_close(sp->io.u);
	sparse_reads_close(sp);
	sparse_head_close(sp);
	sparse_slabs_free(sp);
	sparse_experts_close(sp);
	free(sp->io.order);
	free(sp->io.seq);
	free(sp->io.flash);
	free(sp->pred.x);
	free(sp->pred.gain);
	free(sp->pred.score);
	free(sp->pred.history);
	free(sp->pred.top);
	free(sp->pred.all);
	free(sp->pred.ents);
	free(sp->pred.tpos);
	free(sp->pred.mpos);
	sf_cache_close(sp->cache.c);
	free(sp->cache.slots);
	free(sp->cache.tent);
	free(sp->s.bits_top);
	free(sp->s.bits_all);
	free(sp->s.pscratch);
	free(sp->s.sel_scratch);
	free(sp->s.ents);
	free(sp->s.tpos);
	free(sp->s.mpos);
	free(sp->s.runlen);
	free(sp->s.idx);
	free(sp->s.xv);
	free(sp->s.xt);
	free(sp->s.sel);
	free(sp->s.tok_top);
	free(sp->s.tok_mid);
	free(sp->s.any_top);
	free(sp->s.any_mid);
	free(sp->s.runs);
	free(sp->s.cols);
	free(sp->s.yrows);
	sf_select_compute_close(sp->comp.sc);
	free(sp->comp.set_bits);
	free(sp->comp.set_mask);
	free(sp->comp.spans);
	free(sp->comp.nspans);
	free(sp->st.lat);
	free(sp);
}

const struct sf_group_exec *sf_sparse_exec(struct sf_sparse *sp)
{
	return &sp->exec;
}

int sf_sparse_error(struct sf_sparse *sp, struct sf_err *e)
{
	/* after each pass: a rewrite in place would have fed it other bytes */
	if (!sp->failed)
		sp->failed = sf_image_unchanged(sp->img, &sp->err);
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
	return sp->collapse.desc;
}

const char *sf_sparse_backend(const struct sf_sparse *sp)
{
	if (sp->o.simulate)
		return "simulate";
	return sp->io.u ? sf_uring_backend_name(sf_uring_backend(sp->io.u, NULL)) : "none";
}

int sf_sparse_prefetch(const struct sf_sparse *sp)
{
	return sp->o.prefetch;
}
