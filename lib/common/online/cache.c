/* The bundle cache (see cache.h; man/sf-run.1): per group a slot arena,
 * an open-addressing index and intrusive FIFO/LRU lists over one node
 * table, so that lookups, admissions and evictions are O(1) and allocate
 * nothing. */

#include "online/cache.h"
#include "base/alloc.h"
#include "base/rng.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX

enum where { FREE, SMALL, MAIN, GHOST, LRU, PIN };

/* Nodes [0, cap) are the cached slots, [cap, cap + pin_cap) the pinned
 * ones (node i owns data slot i), then ghost_cap keys without data. */
struct node {
	uint64_t key;		/* layer << 32 | entry */
	uint32_t prev, next;
	uint8_t freq;		/* S3-FIFO: 0..3 */
	uint8_t where;
};

struct queue {
	uint32_t head, tail;	/* head newest, tail oldest */
	uint32_t count;
};

struct part {
	uint64_t bundle, stride;
	uint32_t cap, pin_cap, ghost_cap, main_cap;
	uint32_t npin;
	struct node *node;	/* (cap + pin_cap + ghost_cap) */
	char *data;		/* (cap + pin_cap, stride) */
	uint32_t *index;	/* (mask + 1) node numbers or NIL */
	uint64_t mask;
	struct queue small, main, ghost, lru;
	uint32_t free_slot, free_ghost;	/* singly linked through next */
	struct sf_cache_stats st;
};

struct sf_cache {
	enum sf_cache_policy policy;
	double seg_admit;
	uint64_t rng;
	struct part part[SF_NGROUPS];
};

void sf_cache_opts_default(struct sf_cache_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->policy = SF_CACHE_S3FIFO;
	o->seg_admit = SF_CACHE_DEFAULT_SEG_ADMIT;
	o->small_ratio = SF_CACHE_DEFAULT_SMALL_RATIO;
	o->seed = 1;
}

static const char *const policy_names[] = { "s3fifo", "lru", "none" };

const char *sf_cache_policy_name(enum sf_cache_policy p)
{
	return (unsigned)p < 3 ? policy_names[p] : "?";
}

int sf_cache_policy_parse(const char *name, enum sf_cache_policy *p)
{
	for (int k = 0; k < 3; k++)
		if (!strcmp(name, policy_names[k])) {
			*p = (enum sf_cache_policy)k;
			return 0;
		}
	return -EINVAL;
}

// ----------------------------------------------------------------------------
// Sizes

static uint64_t stride_of(uint64_t bundle)
{
	return (bundle + SF_CACHE_SLOT_ALIGN - 1) / SF_CACHE_SLOT_ALIGN * SF_CACHE_SLOT_ALIGN;
}

/* S3-FIFO's queues; ghost keys as many as the main queue holds (the
 * paper's choice). Other policies keep no ghost. */
static void queue_sizes(enum sf_cache_policy pol, uint32_t cap, double ratio, uint32_t *small,
			uint32_t *main_, uint32_t *ghost)
{
	uint32_t s = pol == SF_CACHE_S3FIFO ? (uint32_t)((double)cap * ratio) : 0;
	if (s == 0 && cap && pol == SF_CACHE_S3FIFO)
		s = 1;
	*small = s;
	*main_ = cap - s;
	*ghost = pol == SF_CACHE_S3FIFO ? *main_ : 0;
}

/* Index slots: a power of two at least twice the keys, so probes stay short. */
static uint64_t index_size(uint64_t keys)
{
	uint64_t n = 16;
	while (n < 2 * keys)
		n *= 2;
	return n;
}

uint64_t sf_cache_entry_bytes(uint64_t bundle_bytes)
{
	/* at most: the slot, its node, a ghost node, and up to four index
	 * words per node */
	return stride_of(bundle_bytes) + 2 * sizeof(struct node) + 8 * sizeof(uint32_t);
}

static uint64_t part_bytes(enum sf_cache_policy pol, uint64_t bundle, uint32_t cap,
			   uint32_t pin_cap, double ratio)
{
	uint32_t s, m, gh;
	queue_sizes(pol, cap, ratio, &s, &m, &gh);
	uint64_t nodes = (uint64_t)cap + pin_cap + gh;
	uint64_t stride = stride_of(bundle);
	uint64_t slots = (uint64_t)cap + pin_cap;
	if (!slots)
		return 0;
	if (stride && slots > UINT64_MAX / 2 / stride)
		return UINT64_MAX;
	return slots * stride + nodes * sizeof(struct node) +
	       index_size(nodes) * sizeof(uint32_t);
}

uint64_t sf_cache_footprint(const struct sf_cache_opts *o)
{
	uint64_t sum = sizeof(struct sf_cache);
	for (int g = 0; g < SF_NGROUPS; g++) {
		uint32_t cap = o->policy == SF_CACHE_NONE ? 0 : o->slots[g];
		uint64_t b = part_bytes(o->policy, o->bundle_bytes[g], cap, o->pin_slots[g],
					o->small_ratio);
		if (b > UINT64_MAX - sum)
			return UINT64_MAX;
		sum += b;
	}
	return sum;
}

// ----------------------------------------------------------------------------
// Index: linear probing, deletion by backward shift (no tombstones)

static uint64_t hash(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	return k ^ (k >> 33);
}

static uint64_t make_key(uint32_t layer, uint32_t entry)
{
	return (uint64_t)layer << 32 | entry;
}

/* The index slot where key's probe starts. */
static uint64_t index_home(const struct part *p, uint64_t key)
{
	return hash(key) & p->mask;
}

/* The index slot holding key, or the empty slot where it would go. */
static uint64_t index_find(const struct part *p, uint64_t key)
{
	uint64_t i = index_home(p, key);
	while (p->index[i] != NIL && p->node[p->index[i]].key != key)
		i = (i + 1) & p->mask;
	return i;
}

/* The k-th entry of a run: entries[k], or entries[pos[k]]. */
static inline uint32_t entry_at(const uint32_t *entries, const uint32_t *pos, size_t k)
{
	return pos ? entries[pos[k]] : entries[k];
}

/* A lookup in a large cache is two dependent misses, the index slot and
 * then its node: a run of lookups asks for the slot of the entry
 * LOOKAHEAD ahead and, that slot come by then, for the node of the one
 * half as far ahead. */
#define LOOKAHEAD 16

static void index_prefetch(const struct part *p, uint32_t layer, const uint32_t *entries,
			   const uint32_t *pos, size_t k, size_t n)
{
	if (k == 0)
		for (size_t i = 0; i < LOOKAHEAD && i < n; i++)
			__builtin_prefetch(
				&p->index[index_home(p, make_key(layer, entry_at(entries, pos, i)))]);
	if (k + LOOKAHEAD < n)
		__builtin_prefetch(
			&p->index[index_home(p, make_key(layer, entry_at(entries, pos, k + LOOKAHEAD)))]);
	if (k + LOOKAHEAD / 2 < n) {
		uint32_t j = p->index[index_home(
			p, make_key(layer, entry_at(entries, pos, k + LOOKAHEAD / 2)))];
		if (j != NIL)
			__builtin_prefetch(&p->node[j]);
	}
}

static void index_del(struct part *p, uint64_t i)
{
	uint64_t j = i;
	for (;;) {
		j = (j + 1) & p->mask;
		if (p->index[j] == NIL)
			break;
		uint64_t home = index_home(p, p->node[p->index[j]].key);
		/* j's entry may move back to i unless its home lies in (i, j] */
		int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
		if (!stays) {
			p->index[i] = p->index[j];
			i = j;
		}
	}
	p->index[i] = NIL;
}

// ----------------------------------------------------------------------------
// Queues

static void q_push_head(struct part *p, struct queue *q, uint32_t i, enum where w)
{
	struct node *n = &p->node[i];
	n->prev = NIL;
	n->next = q->head;
	if (q->head != NIL)
		p->node[q->head].prev = i;
	else
		q->tail = i;
	q->head = i;
	q->count++;
	n->where = (uint8_t)w;
}

static void q_remove(struct part *p, struct queue *q, uint32_t i)
{
	struct node *n = &p->node[i];
	if (n->prev != NIL)
		p->node[n->prev].next = n->next;
	else
		q->head = n->next;
	if (n->next != NIL)
		p->node[n->next].prev = n->prev;
	else
		q->tail = n->prev;
	q->count--;
}

// ----------------------------------------------------------------------------
// Open and close

static void part_free(struct part *p)
{
	free(p->node);
	free(p->data);
	free(p->index);
}

static int part_init(struct part *p, enum sf_cache_policy pol, uint64_t bundle, uint32_t cap,
		     uint32_t pin_cap, double ratio)
{
	uint64_t nodes, slots;
	uint32_t small_cap;	/* implied: S3-FIFO evicts from small unless main is over */

	queue_sizes(pol, cap, ratio, &small_cap, &p->main_cap, &p->ghost_cap);
	p->bundle = bundle;
	p->stride = stride_of(bundle);
	p->cap = cap;
	p->pin_cap = pin_cap;
	p->small = p->main = p->ghost = p->lru = (struct queue){ NIL, NIL, 0 };
	p->free_slot = p->free_ghost = NIL;
	nodes = (uint64_t)cap + pin_cap + p->ghost_cap;
	slots = (uint64_t)cap + pin_cap;
	if (!slots)
		return 0;
	if (nodes >= NIL || slots > SIZE_MAX / p->stride)
		return -ENOMEM;
	p->mask = index_size(nodes) - 1;
	/* aligned for O_DIRECT and from 2 MiB on huge pages: the lookups
	 * touch the index and nodes at random, and a first touch of 4 KiB
	 * pages costs a fault each (a fifth of the first tokens' time with a
	 * 400 MB cache in a VM) */
	p->node = sf_alloc_large((size_t)nodes * sizeof(*p->node), SF_CACHE_SLOT_ALIGN);
	p->index = sf_alloc_large((size_t)(p->mask + 1) * sizeof(*p->index), SF_CACHE_SLOT_ALIGN);
	p->data = sf_alloc_large((size_t)(slots * p->stride), SF_CACHE_SLOT_ALIGN);
	if (!p->node || !p->index || !p->data)
		return -ENOMEM;
	memset(p->node, 0, (size_t)nodes * sizeof(*p->node));
	memset(p->index, 0xff, (size_t)(p->mask + 1) * sizeof(*p->index));
	for (uint32_t i = cap; i-- > 0;) {
		p->node[i].next = p->free_slot;
		p->free_slot = i;
	}
	for (uint32_t i = (uint32_t)nodes; i-- > cap + pin_cap;) {
		p->node[i].next = p->free_ghost;
		p->free_ghost = i;
	}
	return 0;
}

int sf_cache_open(struct sf_cache **cp, const struct sf_cache_opts *o, struct sf_err *e)
{
	struct sf_cache *c;
	int ret = 0;

	*cp = NULL;
	if ((unsigned)o->policy > SF_CACHE_NONE)
		return sf_err_set(e, -EINVAL, "cache: policy %d: expected s3fifo, lru or none",
				  (int)o->policy);
	if (!(o->seg_admit >= 0 && o->seg_admit <= 1))
		return sf_err_set(e, -EINVAL, "cache: seg-admit %g: expected 0 to 1", o->seg_admit);
	if (o->policy == SF_CACHE_S3FIFO && !(o->small_ratio > 0 && o->small_ratio < 1))
		return sf_err_set(e, -EINVAL, "cache: small queue ratio %g: expected in (0, 1)",
				  o->small_ratio);
	for (int g = 0; g < SF_NGROUPS; g++)
		if (!o->bundle_bytes[g] && (o->slots[g] || o->pin_slots[g]))
			return sf_err_set(e, -EINVAL, "cache: %s: %u slots, %u pinned of 0-byte "
					  "bundles: expected a bundle size", sf_group_name(g),
					  o->slots[g], o->pin_slots[g]);
	c = calloc(1, sizeof(*c));
	if (!c)
		return sf_err_set(e, -ENOMEM, "cache: %s", strerror(ENOMEM));
	c->policy = o->policy;
	c->seg_admit = o->seg_admit;
	c->rng = o->seed;
	for (int g = 0; g < SF_NGROUPS && !ret; g++)
		if ((ret = part_init(&c->part[g], o->policy, o->bundle_bytes[g],
				     o->policy == SF_CACHE_NONE ? 0 : o->slots[g], o->pin_slots[g],
				     o->small_ratio)) < 0)
			sf_err_set(e, ret, "cache: %s: %u slots of %llu bytes: %s", sf_group_name(g),
				   o->slots[g], (unsigned long long)o->bundle_bytes[g],
				   strerror(-ret));
	if (ret < 0) {
		sf_cache_close(c);
		return ret;
	}
	*cp = c;
	return 0;
}

void sf_cache_close(struct sf_cache *c)
{
	if (!c)
		return;
	for (int g = 0; g < SF_NGROUPS; g++)
		part_free(&c->part[g]);
	free(c);
}

// ----------------------------------------------------------------------------
// Lookup, admission, eviction

size_t sf_cache_lookup(struct sf_cache *c, uint32_t layer, enum sf_group g,
		       const uint32_t *entries, size_t n, const void **slots, uint32_t *miss,
		       size_t *nmiss)
{
	struct part *p = &c->part[g];
	size_t hits = 0, misses = 0;

	for (size_t k = 0; k < n; k++) {
		if (p->node)
			index_prefetch(p, layer, entries, NULL, k, n);
		uint32_t i = p->node ? p->index[index_find(p, make_key(layer, entries[k]))] : NIL;
		struct node *nd = i == NIL ? NULL : &p->node[i];
		if (!nd || nd->where == GHOST) {
			slots[k] = NULL;
			if (miss)
				miss[misses] = entries[k];
			misses++;
			continue;
		}
		slots[k] = p->data + (uint64_t)i * p->stride;
		hits++;
		if (nd->where == PIN) {
			p->st.pin_hits++;
		} else if (nd->where == LRU) {
			q_remove(p, &p->lru, i);
			q_push_head(p, &p->lru, i, LRU);
		} else if (nd->freq < 3) {
			nd->freq++;	/* 2-bit counter */
		}
	}
	p->st.lookups += n;
	p->st.hits += hits;
	p->st.misses += misses;
	if (nmiss)
		*nmiss = misses;
	return hits;
}

size_t sf_cache_keep_unheld(const struct sf_cache *c, uint32_t layer, enum sf_group g,
			    const uint32_t *entry_of, uint32_t *pos, size_t n)
{
	const struct part *p = &c->part[g];
	size_t kept = 0;

	if (!p->node)
		return n;
	for (size_t k = 0; k < n; k++) {
		index_prefetch(p, layer, entry_of, pos, k, n);
		uint32_t i = p->index[index_find(p, make_key(layer, entry_of[pos[k]]))];
		if (i == NIL || p->node[i].where == GHOST)
			pos[kept++] = pos[k];
	}
	return kept;
}

/* Drops cached node i: its key leaves the index, its slot the queues. */
static void drop(struct part *p, struct queue *q, uint32_t i)
{
	q_remove(p, q, i);
	index_del(p, index_find(p, p->node[i].key));
	p->node[i].where = FREE;
	p->node[i].next = p->free_slot;
	p->free_slot = i;
	p->st.evictions++;
}

static void ghost_add(struct part *p, uint64_t key)
{
	uint32_t i;

	if (!p->ghost_cap)
		return;
	if (p->ghost.count == p->ghost_cap) {
		i = p->ghost.tail;
		q_remove(p, &p->ghost, i);
		index_del(p, index_find(p, p->node[i].key));
	} else {
		i = p->free_ghost;
		p->free_ghost = p->node[i].next;
	}
	p->node[i].key = key;
	q_push_head(p, &p->ghost, i, GHOST);
	p->index[index_find(p, key)] = i;
}

static void ghost_remove(struct part *p, uint64_t at)
{
	uint32_t i = p->index[at];
	q_remove(p, &p->ghost, i);
	index_del(p, at);
	p->node[i].where = FREE;
	p->node[i].next = p->free_ghost;
	p->free_ghost = i;
}

/* The small queue's oldest: to the main queue when hit often enough while
 * there, else out, its key to the ghost queue. Stops after one eviction. */
static void evict_small(struct part *p)
{
	while (p->small.count) {
		uint32_t i = p->small.tail;
		if (p->node[i].freq >= SF_CACHE_MOVE_THRESHOLD) {
			q_remove(p, &p->small, i);
			p->node[i].freq = 0;
			q_push_head(p, &p->main, i, MAIN);
			p->st.promotions++;
		} else {
			uint64_t key = p->node[i].key;
			drop(p, &p->small, i);
			ghost_add(p, key);
			return;
		}
	}
}

/* The main queue's oldest: reinserted with one less while its counter is
 * above 0 (clock with 2 bits), else out. */
static void evict_main(struct part *p)
{
	while (p->main.count) {
		uint32_t i = p->main.tail;
		if (p->node[i].freq) {
			p->node[i].freq--;
			q_remove(p, &p->main, i);
			q_push_head(p, &p->main, i, MAIN);
		} else {
			drop(p, &p->main, i);
			return;
		}
	}
}

static void evict(struct sf_cache *c, struct part *p)
{
	if (c->policy == SF_CACHE_LRU)
		drop(p, &p->lru, p->lru.tail);
	else if (p->main.count > p->main_cap || !p->small.count)
		evict_main(p);
	else
		evict_small(p);
}

int sf_cache_insert(struct sf_cache *c, uint32_t layer, enum sf_group g, uint32_t entry,
		    const void *bundle, uint64_t bytes, int in_run)
{
	struct part *p = &c->part[g];
	uint64_t key = make_key(layer, entry), at;
	int to_main = 0;
	uint32_t i;

	if (!p->cap || bytes > p->bundle)
		return 0;
	at = index_find(p, key);
	if (p->index[at] != NIL && p->node[p->index[at]].where != GHOST)
		return 0;
	/* a draw for every in-run offer, so the sequence depends only on the
	 * offers and not on seg_admit's value */
	if (in_run && !(sf_rng_unit(&c->rng) < c->seg_admit)) {
		p->st.rejected++;
		return 0;
	}
	if (p->index[at] != NIL) {
		ghost_remove(p, at);
		to_main = c->policy == SF_CACHE_S3FIFO;
	}
	while (p->small.count + p->main.count + p->lru.count >= p->cap)
		evict(c, p);
	i = p->free_slot;
	p->free_slot = p->node[i].next;
	p->node[i].key = key;
	p->node[i].freq = 0;
	if (c->policy == SF_CACHE_LRU)
		q_push_head(p, &p->lru, i, LRU);
	else
		q_push_head(p, to_main ? &p->main : &p->small, i, to_main ? MAIN : SMALL);
	p->index[index_find(p, key)] = i;
	memcpy(p->data + (uint64_t)i * p->stride, bundle, (size_t)bytes);
	p->st.admissions++;
	p->st.ghost_hits += (uint64_t)to_main;
	return 1;
}

int sf_cache_pin(struct sf_cache *c, uint32_t layer, enum sf_group g, uint32_t entry,
		 void **slot)
{
	struct part *p = &c->part[g];
	uint64_t key = make_key(layer, entry), at;
	uint32_t i;

	if (!p->pin_cap)
		return -ENOSPC;
	at = index_find(p, key);
	if (p->index[at] != NIL && p->node[p->index[at]].where != GHOST)
		return -EEXIST;
	if (p->npin >= p->pin_cap)
		return -ENOSPC;
	if (p->index[at] != NIL) {
		ghost_remove(p, at);
		at = index_find(p, key);
	}
	i = p->cap + p->npin++;
	p->node[i] = (struct node){ .key = key, .prev = NIL, .next = NIL, .where = PIN };
	p->index[at] = i;
	*slot = p->data + (uint64_t)i * p->stride;
	return 0;
}

void sf_cache_stats(const struct sf_cache *c, enum sf_group g, struct sf_cache_stats *s)
{
	memset(s, 0, sizeof(*s));
	for (int k = 0; k < SF_NGROUPS; k++) {
		const struct part *p = &c->part[k];
		if (g != SF_NGROUPS && k != (int)g)
			continue;
		s->lookups += p->st.lookups;
		s->hits += p->st.hits;
		s->pin_hits += p->st.pin_hits;
		s->misses += p->st.misses;
		s->admissions += p->st.admissions;
		s->rejected += p->st.rejected;
		s->evictions += p->st.evictions;
		s->ghost_hits += p->st.ghost_hits;
		s->promotions += p->st.promotions;
		s->resident += p->small.count + p->main.count + p->lru.count;
		s->pinned += p->npin;
	}
}

void sf_cache_stats_reset(struct sf_cache *c)
{
	for (int k = 0; k < SF_NGROUPS; k++)
		memset(&c->part[k].st, 0, sizeof(c->part[k].st));
}
