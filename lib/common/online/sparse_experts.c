/* A mixture's routed experts from flash (sparse_impl.h): the forward
 * pass's struct sf_group_exec experts/expert/experts_ahead hooks. Per
 * layer and pass the router's picks are known before any expert runs:
 * each picked expert is looked up in the RAM slots, and those missing
 * are read whole (one record, in requests of at most --read-size) into
 * the slots victim() gives, all in flight at once; each expert is then
 * computed, in expert order, as soon as its record has arrived, once
 * for all the tokens of the pass routed to it. With --prefetch, the
 * next layer's guessed picks are read too while this layer computes. An
 * expert is the cache's unit: a slot holds one record, byte for byte the
 * image's, so its products are the dense engine's. With --simulate the
 * records are those of the flash regions in RAM. man/sf-run.1. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "online/sparse_impl.h"

uint64_t sparse_experts_bytes(const struct sf_image *img, int slots)
{
	uint64_t ids = (uint64_t)img->cfg.n_layers * (uint64_t)img->experts.count;

	if (!img->experts.count)
		return 0;
	return (uint64_t)slots * (img->experts.record_bytes + sizeof(long) + 2 * 8) +
	       ids * sizeof(int) + (uint64_t)img->experts.count;
}

int sparse_experts_open(struct sf_sparse *sp, int slots)
{
	struct sparse_experts *x = &sp->xp;
	const struct sf_image *img = sp->img;
	size_t ids = (size_t)img->cfg.n_layers * (size_t)img->experts.count;

	if (!img->experts.count)
		return 0;
	x->n = img->experts.count;
	x->layers = img->cfg.n_layers;
	x->record = img->experts.record_bytes;
	x->slots = slots;
	x->ahead_layer = -1;
	sp->exec.experts = sparse_experts_plan;
	sp->exec.expert = sparse_expert;
	if (slots && sf_sparse_prefetch(sp) > 0)
		sp->exec.experts_ahead = sparse_experts_ahead;
	if (!(x->slot_of = malloc(ids * sizeof(*x->slot_of))) ||
	    !(x->picked = calloc((size_t)x->n, 1)) || !(x->ahead = calloc((size_t)x->n, 1)))
		return -ENOMEM;
	for (size_t i = 0; i < ids; i++)
		x->slot_of[i] = -1;
	if (!slots)
		return 0;	/* --simulate: the records are in the flash copy */
	/* huge pages: the row products walk four rows' pages at once */
	if (!(x->mem = sf_alloc_large((size_t)(x->record * (uint64_t)slots), SF_IMAGE_ALIGN)))
		return -ENOMEM;
	x->held = malloc((size_t)slots * sizeof(*x->held));
	x->stamp = calloc((size_t)slots, sizeof(*x->stamp));
	x->pending = calloc((size_t)slots, sizeof(*x->pending));
	if (!x->held || !x->stamp || !x->pending)
		return -ENOMEM;
	for (int s = 0; s < slots; s++)
		x->held[s] = -1;
	return 0;
}

void sparse_experts_close(struct sf_sparse *sp)
{
	free(sp->xp.mem);
	free(sp->xp.held);
	free(sp->xp.stamp);
	free(sp->xp.pending);
	free(sp->xp.slot_of);
	free(sp->xp.picked);
	free(sp->xp.ahead);
}

/* Slot s forgets its expert. */
static void forget(struct sparse_experts *x, int s)
{
	if (x->held[s] >= 0)
		x->slot_of[x->held[s]] = -1;
	x->held[s] = -1;
	x->stamp[s] = 0;
}

/* Slot s holds expert id, used now. */
static void bind(struct sparse_experts *x, int s, long id)
{
	x->held[s] = id;
	x->slot_of[id] = s;
	x->stamp[s] = ++x->clock;
}

int sparse_experts_load(struct sf_sparse *sp, struct sf_err *e)
{
	struct sparse_experts *x = &sp->xp;
	long all = (long)x->layers * x->n;
	int ret;

	if (!x->slots || x->slots < all || !sparse_hold_whole(&sp->o))
		return 0;
	for (long id = 0; id < all; id++) {
		uint64_t off, len;
		sf_image_expert_range(sp->img, (int)(id / x->n), (int)(id % x->n), &off, &len);
		if ((ret = sparse_pread_once(sp->img, x->mem + (uint64_t)id * x->record, len, off,
					     e)))
			return ret;
		bind(x, (int)id, id);
	}
	x->loaded = (uint64_t)all;
	sp->exec.experts_ahead = NULL;	/* nothing left to read */
	return 0;
}

void sparse_experts_drain(struct sf_sparse *sp)
{
	struct sparse_experts *x = &sp->xp;

	/* a record whose reads were cut short holds no expert */
	for (int s = 0; s < x->slots; s++)
		if (x->pending[s]) {
			x->pending[s] = 0;
			forget(x, s);
		}
}

/* Layers until layer m's turn comes again after layer l's: the layers
 * run in a cycle, a token after a token, so an expert's next use is no
 * sooner than its layer's next turn (layer l's own: a whole cycle). */
static int turn_after(const struct sparse_experts *x, int l, int m)
{
	return m == l ? x->layers : (m - l + x->layers) % x->layers;
}

/* The slot to take for layer l: a free one, else of those not holding an
 * expert of layer l still to run in this pass the one whose layer's turn
 * comes last, least recently used among those. Least recently used alone
 * evicts in the order the layers come back: with fewer slots than a
 * token's picks it held nothing a next token could use. */
static int victim(const struct sparse_experts *x, int l)
{
	int best = -1, best_turn = -1;

	for (int s = 0; s < x->slots; s++) {
		long id = x->held[s];
		int turn = id < 0 ? x->layers + 1 : turn_after(x, l, (int)(id / x->n));
		if (id >= 0 && id / x->n == l && x->picked[id % x->n])
			continue;
		if (turn > best_turn || (turn == best_turn && x->stamp[s] < x->stamp[best])) {
			best = s;
			best_turn = turn;
		}
	}
	return best;
}

/* When every slot holds an expert of layer l still to run (a pass picks
 * more experts than there are slots, and the slots kept those picked
 * again): the one that runs last, after e (those before e have run and
 * left their slots), its reads done; it is read again at its turn. */
static int evict_latest(struct sf_sparse *sp, int l, int e)
{
	struct sparse_experts *x = &sp->xp;
	int best = -1, ret;

	for (int s = 0; s < x->slots; s++)
		if (x->held[s] / x->n == l && x->held[s] % x->n > e &&
		    (best < 0 || x->held[s] > x->held[best]))
			best = s;
	while (best >= 0 && x->pending[best])
		if ((ret = sparse_reap(sp, 1)))
			return ret;
	return best < 0 ? -ENOBUFS : best;
}

/* Expert x of layer l into slot s: its record's reads queued (those of
 * the slot's last record, read ahead and not picked, done first). */
static int read_into(struct sf_sparse *sp, int s, int l, int e)
{
	struct sparse_experts *x = &sp->xp;
	long id = (long)l * x->n + e;
	uint64_t off, len;
	int ret;

	while (x->pending[s])
		if ((ret = sparse_reap(sp, 1)))
			return ret;
	forget(x, s);
	sf_image_expert_range(sp->img, l, e, &off, &len);
	if ((ret = sparse_read_record(sp, (uint32_t)s, x->mem + (uint64_t)s * x->record, off, len,
				      &x->pending[s])))
		return ret;
	bind(x, s, id);
	x->bytes += len;
	sp->st.bytes_needed += len;
	return 0;
}

static void fail(struct sf_sparse *sp, int ret)
{
	if (!sp->failed)
		sp->failed = ret;
	sparse_reads_drain(sp);
}

/* mark[e] = whether any of the T tokens' routes (T, n) picks expert e;
 * returns the (token, expert) picks. */
static uint64_t picks_of(const struct sparse_experts *x, const float *route, int T,
			 uint8_t *mark)
{
	uint64_t routed = 0;

	memset(mark, 0, (size_t)x->n);
	for (int t = 0; t < T; t++)
		for (int e = 0; e < x->n; e++)
			if (route[(size_t)t * (size_t)x->n + (size_t)e] != 0.0f) {
				routed++;
				mark[e] = 1;
			}
	return routed;
}

void sparse_experts_plan(void *ctx, int l, const float *route, int T)
{
	struct sf_sparse *sp = ctx;
	struct sparse_experts *x = &sp->xp;
	int ret;

	x->tokens_routed += picks_of(x, route, T, x->picked);
	for (int e = 0; e < x->n; e++) {
		int held = x->slot_of[(long)l * x->n + e] >= 0;
		x->uses += x->picked[e];
		if (x->ahead_layer == l && x->picked[e]) {
			x->ahead_used += x->ahead[e] && held;
			x->ahead_missed += !held;
		}
	}
	x->ahead_layer = -1;
	if (sp->failed || !x->slots)
		return;
	/* hits stay; misses take the slots victim() gives, in expert order
	 * (the order they run in), while there are slots to take */
	for (int e = 0; e < x->n; e++) {
		long id = (long)l * x->n + e;
		int s;
		if (!x->picked[e])
			continue;
		if ((s = x->slot_of[id]) >= 0) {
			x->hits++;
			x->stamp[s] = ++x->clock;
			continue;
		}
		if ((s = victim(x, l)) < 0)
			break;
		if ((ret = read_into(sp, s, l, e))) {
			fail(sp, ret);
			return;
		}
		x->misses++;
	}
	if ((ret = sparse_submit(sp)))
		fail(sp, ret);
}

/* Layer l's guessed picks (route as the plan's) not held read into the
 * slots victim() gives for the layer before, whose picks still to run
 * keep theirs, after its own reads: they start while it computes. */
void sparse_experts_ahead(void *ctx, int l, const float *route, int T)
{
	struct sf_sparse *sp = ctx;
	struct sparse_experts *x = &sp->xp;
	int ret, queued = 0;

	picks_of(x, route, T, x->ahead);	/* then only those read ahead */
	x->ahead_layer = l;
	for (int e = 0; e < x->n; e++) {
		long id = (long)l * x->n + e;
		int s;
		if (!x->ahead[e])
			continue;
		x->ahead[e] = 0;
		if (sp->failed || x->slot_of[id] >= 0 || (s = victim(x, l - 1)) < 0)
			continue;
		if ((ret = read_into(sp, s, l, e))) {
			fail(sp, ret);
			continue;
		}
		x->ahead[e] = 1;
		x->ahead_reads++;
		queued = 1;
	}
	if (queued && !sp->failed && (ret = sparse_submit(sp)))
		fail(sp, ret);
}

const struct sf_expert_weights *sparse_expert(void *ctx, int l, int e)
{
	struct sf_sparse *sp = ctx;
	struct sparse_experts *x = &sp->xp;
	long id = (long)l * x->n + e;
	const uint8_t *rec;
	int s, ret;

	if (sp->failed)
		return NULL;
	if (!x->slots) {	/* --simulate */
		uint64_t off, len;
		sf_image_expert_range(sp->img, l, e, &off, &len);
		rec = sp->io.flash + (off - sp->io.flash_base);
	} else {
		/* not read ahead for want of slots: the ones before it are done */
		if ((s = x->slot_of[id]) < 0) {
			if (((s = victim(x, l)) < 0 && (s = evict_latest(sp, l, e)) < 0) ||
			    (ret = read_into(sp, s, l, e)) || (ret = sparse_submit(sp))) {
				fail(sp, s < 0 ? s : ret);
				return NULL;
			}
			x->misses++;
		}
		while (x->pending[s])
			if ((ret = sparse_reap(sp, 1))) {
				fail(sp, ret);
				return NULL;
			}
		rec = x->mem + (uint64_t)s * x->record;
	}
	x->picked[e] = 0;
	sf_image_expert_weights(sp->img, rec, &x->w);
	return &x->w;
}

void sparse_experts_arrived(struct sf_sparse *sp, uint32_t slot)
{
	sp->xp.pending[slot]--;
}

json_t *sparse_experts_json(const struct sf_sparse *sp, double per)
{
	const struct sparse_experts *x = &sp->xp;
	uint64_t looked = x->hits + x->misses;

	uint64_t wanted = x->ahead_used + x->ahead_missed;

	return json_pack("{s:i, s:i, s:I, s:i, s:I, s:I, s:I, s:I, s:I, s:f, s:I, s:f, s:f,"
			 " s:I, s:I, s:f, s:f}",
			 "count", x->n, "used", sp->img->cfg.n_experts_used,
			 "record_bytes", (json_int_t)x->record, "slots", x->slots,
			 "loaded", (json_int_t)x->loaded,
			 "uses", (json_int_t)x->uses, "tokens_routed", (json_int_t)x->tokens_routed,
			 "hits", (json_int_t)x->hits, "misses", (json_int_t)x->misses,
			 "hit_rate", looked ? (double)x->hits / (double)looked : 0.0,
			 "bytes_read", (json_int_t)x->bytes,
			 "reads_per_token", (double)x->misses * per,
			 "uses_per_token", (double)x->uses * per,
			 "read_ahead", (json_int_t)x->ahead_reads,
			 "read_ahead_used", (json_int_t)x->ahead_used,
			 "ahead_precision",
			 x->ahead_reads ? (double)x->ahead_used / (double)x->ahead_reads : 0.0,
			 "ahead_recall", wanted ? (double)x->ahead_used / (double)wanted : 0.0);
}
