/* The decoder's RAM cache of entry bundles, keyed by (layer, group, entry):
 * S3-FIFO (Yang et al., SOSP'23), LRU or none, with Neuralink's
 * linking-aligned admission and SelectInfer's pinned set. man/sf-run.1,
 * --cache-policy, --seg-admit, --pin. */
#ifndef SF_CACHE_H
#define SF_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/forward.h"

enum sf_cache_policy {
	SF_CACHE_S3FIFO,
	SF_CACHE_LRU,
	SF_CACHE_NONE,		/* nothing cached; the pinned set still works */
};

/* Chosen by the cache study (tests/bench/study-cache.sh, docs/RESULTS.md):
 * on mix4-5m 0.2 moved the fewest bytes at every cache ratio and doubled
 * the hit rate of small caches against 1 (plain S3-FIFO). */
#define SF_CACHE_DEFAULT_SEG_ADMIT 0.2
#define SF_CACHE_DEFAULT_SMALL_RATIO 0.1	/* S3-FIFO's small queue: the paper's 10% */
#define SF_CACHE_MOVE_THRESHOLD 2	/* hits in the small queue that earn the main one */
#define SF_CACHE_SLOT_ALIGN 64	/* bundles start on cache lines, for the kernels */

/* Each group (attn_in .. ffn_out) is a partition of its own: one bundle
 * size, its own slots, queues and statistics, shared by every layer. */
struct sf_cache_opts {
	enum sf_cache_policy policy;
	uint64_t bundle_bytes[SF_NGROUPS];	/* bytes of one entry's bundle */
	uint32_t slots[SF_NGROUPS];		/* bundles cached */
	uint32_t pin_slots[SF_NGROUPS];		/* bundles pinned, never evicted */
	/* Probability that an entry fetched inside a run longer than 2 is
	 * admitted; outliers (runs of 1 or 2) always are. */
	double seg_admit;
	double small_ratio;	/* S3-FIFO small queue share of slots, in (0, 1) */
	uint64_t seed;		/* of the admission generator: runs are reproducible */
};

/* The defaults above, S3-FIFO, no slots, seed 1. */
void sf_cache_opts_default(struct sf_cache_opts *o);

/* Policy names for --cache-policy: "s3fifo", "lru", "none". */
const char *sf_cache_policy_name(enum sf_cache_policy p);
int sf_cache_policy_parse(const char *name, enum sf_cache_policy *p);	/* 0 or -EINVAL */

/* RAM one cached bundle of bundle_bytes costs, metadata included: a byte
 * budget B holds B / sf_cache_entry_bytes(b) slots. */
uint64_t sf_cache_entry_bytes(uint64_t bundle_bytes);
/* Everything sf_cache_open will allocate for o, for the --ram check;
 * UINT64_MAX when it overflows. */
uint64_t sf_cache_footprint(const struct sf_cache_opts *o);

struct sf_cache;

/* Allocates every slot up front: no allocation afterwards. 0, -EINVAL
 * (options out of range, message says which) or -ENOMEM; *c NULL on error. */
int sf_cache_open(struct sf_cache **c, const struct sf_cache_opts *o, struct sf_err *e);
void sf_cache_close(struct sf_cache *c);	/* accepts NULL */

/* Looks up a group's selected entries of one layer at once: slots[i] is
 * the bundle of entries[i], or NULL for a miss; the misses go in order to
 * miss[0..*nmiss) when miss is not NULL (what the decoder reads). Counts
 * as accesses (hits raise S3-FIFO frequency, refresh LRU). Returns the
 * number of hits. The pointers stay valid until the next sf_cache_insert
 * or sf_cache_pin on the same group. */
size_t sf_cache_lookup(struct sf_cache *c, uint32_t layer, enum sf_group g,
		       const uint32_t *entries, size_t n, const void **slots, uint32_t *miss,
		       size_t *nmiss);

/* Keeps in order those of the positions pos[0..n) whose entry
 * entry_of[pos[i]] has its bundle neither cached nor pinned (what a read
 * ahead reads), without counting accesses; returns how many. */
size_t sf_cache_keep_unheld(const struct sf_cache *c, uint32_t layer, enum sf_group g,
			    const uint32_t *entry_of, uint32_t *pos, size_t n);

/* Offers a fetched bundle of bytes (at most bundle_bytes[g]: the layers
 * of a group packed with --keep differ) to copy. in_run: it was
 * read inside a run of more than 2 entries, so it is admitted only with
 * probability seg_admit (linking-aligned admission: cached entries would
 * punch holes in continuous runs). An admitted entry goes where S3-FIFO
 * puts it (the main queue when its key is in the ghost queue, else the
 * small one) or to the head under LRU, evicting as needed. Returns 1 when
 * admitted, 0 when not (rejected, policy none, no slots, or already held). */
int sf_cache_insert(struct sf_cache *c, uint32_t layer, enum sf_group g, uint32_t entry,
		    const void *bundle, uint64_t bytes, int in_run);

/* Pins an entry: *slot receives its bundle's memory for the caller to fill
 * (SelectInfer reads the pinned set once at start). Pinned entries are
 * hits of every lookup and never evicted. 0, -ENOSPC (pin_slots[g] used
 * up) or -EEXIST (already pinned or cached). */
int sf_cache_pin(struct sf_cache *c, uint32_t layer, enum sf_group g, uint32_t entry,
		 void **slot);

struct sf_cache_stats {
	uint64_t lookups;	/* entries looked up */
	uint64_t hits;		/* pinned hits included */
	uint64_t pin_hits;
	uint64_t misses;
	uint64_t admissions;
	uint64_t rejected;	/* in-run entries refused by seg_admit */
	uint64_t evictions;
	uint64_t ghost_hits;	/* admissions straight to the main queue */
	uint64_t promotions;	/* small queue -> main queue */
	uint64_t resident;	/* bundles cached now */
	uint64_t pinned;	/* bundles pinned now */
};
/* One group's figures, or (g == SF_NGROUPS) their sums. */
void sf_cache_stats(const struct sf_cache *c, enum sf_group g, struct sf_cache_stats *s);
void sf_cache_stats_reset(struct sf_cache *c);	/* counters; resident and pinned stay */

#endif
