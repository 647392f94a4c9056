/* Placement of a group's entries on flash (man/sf-place.1): identity
 * (LLMFlash), frequency (Neuralink-S) and Neuralink's co-activation greedy
 * path, exact or scalable, on statistics given as plain arrays. */
#ifndef SF_PLACE_H
#define SF_PLACE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/pool.h"
#include "formats/placement.h"	/* enum sf_place_method: the methods placement.json names */

/* Co-activation statistics of one layer and group. Pair counts form the
 * strict upper triangle in row-major order: the pair (i, j), i < j, is at
 * sf_place_pair_index(n, i, j). */
struct sf_place_stats {
	uint32_t n;		/* entries */
	uint64_t tokens;	/* tokens counted */
	const uint64_t *counts;	/* (n) tokens in which entry i is active */
	const uint32_t *pairs;	/* (n * (n - 1) / 2) tokens in which i and j both are */
};

static inline uint64_t sf_place_pair_index(uint32_t n, uint32_t i, uint32_t j)
{
	/* rows 0..i-1 hold n-1, n-2, ..., n-i pairs; 64-bit so n^2 cannot overflow */
	return (uint64_t)i * (2 * (uint64_t)n - i - 1) / 2 + (j - i - 1);
}

static inline uint32_t sf_place_pair(const struct sf_place_stats *s, uint32_t i, uint32_t j)
{
	return i < j ? s->pairs[sf_place_pair_index(s->n, i, j)]
		     : s->pairs[sf_place_pair_index(s->n, j, i)];
}

/* Candidate partners per entry and round of the scalable greedy. */
#define SF_PLACE_DEFAULT_TOPK 16
/* At or below this many open ends the scalable greedy finishes exactly
 * on every pair of ends: the last paths are joined as the exact greedy
 * would join them. */
#define SF_PLACE_DEFAULT_FINISH 1024
/* Without --exact or --topk, groups up to this many entries use the exact
 * greedy. */
#define SF_PLACE_EXACT_AUTO_MAX 4096

/* perm[p] = entry at flash position p. */
void sf_place_identity(uint32_t n, uint32_t *perm);
/* Descending activation count, ties by entry index. */
void sf_place_frequency(const struct sf_place_stats *s, uint32_t *perm);

/* Neuralink's Algorithm 1. dist(i, j) = 1 - P(ij) with P(ij) = pairs(i, j) /
 * tokens, the probability that i and j are active in the same token. Every
 * entry starts as a path of one; each step joins the ends of two different
 * paths at the least distance (largest pair count; ties: the pair (i, j),
 * i < j, smallest in (i, j) order), until one path remains. The path is
 * read from its end with the smaller index. joins (NULL, or 2 * (n - 1)
 * values) receives the pairs in the order joined. Memory: the bytes
 * sf_place_exact_bytes states. Returns 0 or -ENOMEM. */
int sf_place_coact_exact(const struct sf_place_stats *s, uint32_t *perm, uint32_t *joins,
			 struct sf_err *e);
uint64_t sf_place_exact_bytes(uint32_t n);

/* The same greedy on candidate edges: in each round every open end keeps
 * its topk most co-activated partners among the other paths' open ends,
 * the greedy joins what it can, and the rounds repeat on the ends left
 * until at most finish remain, which are finished exactly. Deterministic
 * for any number of threads (pool may be NULL). Returns 0 or -ENOMEM. */
int sf_place_coact_topk(const struct sf_place_stats *s, uint32_t topk, uint32_t finish,
			struct sf_pool *pool, uint32_t *perm, struct sf_err *e);
uint64_t sf_place_topk_bytes(uint32_t n, uint32_t topk, uint32_t finish, int nthreads);

/* Sum of dist over consecutive positions: (n - 1) - sum P(perm[p-1], perm[p]). */
double sf_place_path_cost(const struct sf_place_stats *s, const uint32_t *perm);
/* Runs per token the placement gives on these statistics (no collapse):
 * active entries minus active neighbour pairs, per token. Exact, because
 * a run starts at each active position whose predecessor is inactive. */
double sf_place_expected_runs(const struct sf_place_stats *s, const uint32_t *perm);

#endif
