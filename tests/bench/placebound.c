/* placebound: how far the coact placement is from the best order its own
 * statistics allow (tests/bench/study-placement-real.sh, docs/RESULTS.md).
 * Per layer and group of a .sfc, the expected runs per token (active
 * entries minus active neighbour pairs) of identity, frequency and coact
 * (the exact greedy of offline/place.c); of coact followed by a 2-opt
 * local search ("refined"), to see whether the greedy leaves much; and two
 * lower bounds on the runs of any order: "bound", each entry beside its
 * two best partners (loose where hubs, active in most tokens, are every
 * entry's best partner), and "held_karp", Held and Karp's Lagrangian
 * bound, which charges hubs for their extra neighbours.
 * Mean read length = active / runs.
 * Usage: placebound COACT.sfc [STEPS (100)] [K (16)]: Held-Karp steps,
 * local search partners per entry; one JSON line per group. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/coact.h"
#include "offline/place.h"

/* a partner and its pair count; best first: larger count, smaller index */
struct cand {
	uint32_t c, p;
};

static int cand_cmp(const void *pa, const void *pb)
{
	const struct cand *x = pa, *y = pb;
	if (x->c != y->c)
		return x->c > y->c ? -1 : 1;
	return (x->p > y->p) - (x->p < y->p);
}

/* The greedy joins the nearest ends first and never undoes a join; this
 * tests whether that leaves much behind. Each round visits every entry
 * x and each of its k most co-activated partners c and tries the moves that
 * put x beside c: the two segment reversals (2-opt) that do, and taking x
 * out and putting it on either side of c; a move is kept when the sum of
 * adjacent pair counts (the expected runs it saves) grows. Deterministic:
 * entries in index order, candidates in decreasing count. */

struct refine {
	const struct sf_place_stats *s;
	uint32_t n;
	uint32_t *perm;		/* (n) entry at position */
	uint32_t *pos;		/* (n) position of entry */
};

/* pair count of the entries at positions p and q; 0 off either end */
static int64_t rw(const struct refine *R, int64_t p, int64_t q)
{
	if (p < 0 || q < 0 || p >= R->n || q >= R->n)
		return 0;
	return sf_place_pair(R->s, R->perm[p], R->perm[q]);
}

/* gain of reversing positions [i, j], i < j */
static int64_t rev_gain(const struct refine *R, int64_t i, int64_t j)
{
	return rw(R, i - 1, j) + rw(R, i, j + 1) - rw(R, i - 1, i) - rw(R, j, j + 1);
}

static void rev_apply(struct refine *R, uint32_t i, uint32_t j)
{
	for (; i < j; i++, j--) {
		uint32_t t = R->perm[i];
		R->perm[i] = R->perm[j];
		R->perm[j] = t;
		R->pos[R->perm[i]] = i;
		R->pos[R->perm[j]] = j;
	}
	if (i == j)
		R->pos[R->perm[i]] = i;
}

/* gain of moving the entry at a to sit between positions b and b + side
 * (side -1 or +1), neither being a */
static int64_t move_gain(const struct refine *R, int64_t a, int64_t b, int side)
{
	int64_t d = b + side;
	return rw(R, a - 1, a + 1) - rw(R, a - 1, a) - rw(R, a, a + 1) +
	       rw(R, b, a) + rw(R, a, d) - rw(R, b, d);
}

static void move_apply(struct refine *R, uint32_t a, uint32_t b, int side)
{
	uint32_t x = R->perm[a], lo, hi, to;

	/* the target slot once x is out: beside b on the chosen side */
	if (a < b) {
		to = side > 0 ? b : b - 1;
		memmove(R->perm + a, R->perm + a + 1, sizeof *R->perm * (to - a));
		lo = a;
		hi = to;
	} else {
		to = side > 0 ? b + 1 : b;
		memmove(R->perm + to + 1, R->perm + to, sizeof *R->perm * (a - to));
		lo = to;
		hi = a;
	}
	R->perm[to] = x;
	for (uint32_t p = lo; p <= hi; p++)
		R->pos[R->perm[p]] = p;
}

static int refine(const struct sf_place_stats *s, uint32_t k, uint32_t max_rounds,
		    uint32_t *perm, uint64_t *gain, uint32_t *rounds, struct sf_err *e)
{
	uint32_t n = s->n, *cnt = NULL, round = 0;
	struct cand *cand = NULL, *all = NULL;
	size_t m = 0;
	struct refine R = { .s = s, .n = n, .perm = perm };
	uint64_t total = 0;
	int ret = 0;

	if (gain)
		*gain = 0;
	if (rounds)
		*rounds = 0;
	if (n < 3 || k == 0 || max_rounds == 0)
		return 0;
	if ((uint64_t)n * k > SIZE_MAX / sizeof *cand)
		return sf_err_set(e, -ENOMEM, "refining the placement of %u entries: too large", n);
	R.pos = malloc(sizeof *R.pos * (size_t)n);
	cnt = calloc(n, sizeof *cnt);
	cand = malloc(sizeof *cand * (size_t)n * k);
	all = malloc(sizeof *all * (size_t)n);
	if (!R.pos || !cnt || !cand || !all) {
		ret = sf_err_set(e, -ENOMEM, "refining the placement of %u entries: out of memory", n);
		goto out;
	}
	for (uint32_t p = 0; p < n; p++)
		R.pos[perm[p]] = p;
	/* each entry's k most co-activated partners, best first */
	for (uint32_t i = 0; i < n; i++) {
		struct cand *h = cand + (size_t)i * k;
		for (uint32_t j = 0; j < n; j++) {
			uint32_t c = j == i ? 0 : sf_place_pair(s, i, j);
			if (c)
				all[m++] = (struct cand){ c, j };
		}
		qsort(all, m, sizeof *all, cand_cmp);
		cnt[i] = m < k ? m : k;
		memcpy(h, all, sizeof *h * cnt[i]);
		m = 0;
	}
	while (round < max_rounds) {
		uint64_t before = total;
		for (uint32_t x = 0; x < n; x++)
			for (uint32_t q = 0; q < cnt[x]; q++) {
				uint32_t c = cand[(size_t)x * k + q].p;
				int64_t a = R.pos[x], b = R.pos[c], g, best = 0;
				int kind = 0;

				if (a - b == 1 || b - a == 1)
					continue;
				/* the two reversals that make x and c neighbours */
				int64_t i1 = a < b ? a + 1 : b + 1, j1 = a < b ? b : a;
				int64_t i2 = a < b ? a : b, j2 = a < b ? b - 1 : a - 1;
				if ((g = rev_gain(&R, i1, j1)) > best) {
					best = g;
					kind = 1;
				}
				if ((g = rev_gain(&R, i2, j2)) > best) {
					best = g;
					kind = 2;
				}
				/* x taken out and put beside c */
				if (b - 1 != a && (g = move_gain(&R, a, b, -1)) > best) {
					best = g;
					kind = 3;
				}
				if (b + 1 != a && (g = move_gain(&R, a, b, +1)) > best) {
					best = g;
					kind = 4;
				}
				if (kind == 1)
					rev_apply(&R, (uint32_t)i1, (uint32_t)j1);
				else if (kind == 2)
					rev_apply(&R, (uint32_t)i2, (uint32_t)j2);
				else if (kind == 3 || kind == 4)
					move_apply(&R, (uint32_t)a, (uint32_t)b, kind == 3 ? -1 : +1);
				total += (uint64_t)best;
			}
		round++;
		if (total == before)
			break;
	}
	if (gain)
		*gain = total;
	if (rounds)
		*rounds = round;
out:
	free(R.pos);
	free(cnt);
	free(cand);
	free(all);
	return ret;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double two_best(const struct sf_place_stats *s)
{
	double sum = 0.0;
	for (uint32_t i = 0; i < s->n; i++) {
		uint32_t b1 = 0, b2 = 0;
		for (uint32_t j = 0; j < s->n; j++) {
			uint32_t c;
			if (j == i)
				continue;
			c = sf_place_pair(s, i, j);
			if (c > b1) {
				b2 = b1;
				b1 = c;
			} else if (c > b2) {
				b2 = c;
			}
		}
		sum += (double)b1 + (double)b2;
	}
	return sum / 2.0;
}

/* Held and Karp's bound, for a path and a maximum: any order is a spanning
 * tree with every degree at most 2, so for any lambda >= 0 its adjacent
 * pair sum is at most the maximum spanning tree under w(i, j) - lambda_i -
 * lambda_j plus 2 * sum lambda. Subgradient steps raise lambda on entries
 * of degree above 2 (hubs, which everyone wants beside them) and lower it
 * elsewhere; the least bound seen is returned. Dense n x n weights, Prim's
 * algorithm O(n^2) a step. best: the pair sum of a known order (Polyak's
 * step). Returns the bound in pair counts, or -1 without memory. */
static double held_karp(const struct sf_place_stats *s, double best, int steps)
{
	uint32_t n = s->n;
	float *w = malloc(sizeof *w * (size_t)n * n);
	double *lam = calloc(n, sizeof *lam), *key = malloc(sizeof *key * n);
	uint32_t *from = malloc(sizeof *from * n), *deg = malloc(sizeof *deg * n);
	unsigned char *in = malloc(n);
	double least = -1.0, theta = 2.0;
	int stale = 0;

	if (!w || !lam || !key || !from || !deg || !in) {
		least = -1.0;
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		w[(size_t)i * n + i] = 0.0f;
		for (uint32_t j = i + 1; j < n; j++)
			w[(size_t)i * n + j] = w[(size_t)j * n + i] = (float)sf_place_pair(s, i, j);
	}
	for (int it = 0; it < steps; it++) {
		double tree = 0.0, lsum = 0.0, norm = 0.0, bound;
		for (uint32_t i = 0; i < n; i++) {
			key[i] = -1e300;
			in[i] = 0;
			deg[i] = 0;
			lsum += lam[i];
		}
		key[0] = 0.0;
		from[0] = UINT32_MAX;
		for (uint32_t k = 0; k < n; k++) {
			uint32_t u = UINT32_MAX;
			for (uint32_t i = 0; i < n; i++)
				if (!in[i] && (u == UINT32_MAX || key[i] > key[u]))
					u = i;
			in[u] = 1;
			if (from[u] != UINT32_MAX) {
				tree += key[u];
				deg[u]++;
				deg[from[u]]++;
			}
			const float *row = w + (size_t)u * n;
			for (uint32_t i = 0; i < n; i++) {
				double v = (double)row[i] - lam[u] - lam[i];
				if (!in[i] && v > key[i]) {
					key[i] = v;
					from[i] = u;
				}
			}
		}
		bound = tree + 2.0 * lsum;
		if (least < 0 || bound < least - 1e-9 * least) {
			least = least < 0 || bound < least ? bound : least;
			stale = 0;
		} else if (++stale >= 5) {
			theta /= 2.0;
			stale = 0;
		}
		for (uint32_t i = 0; i < n; i++) {
			double g = (double)deg[i] - 2.0;
			if (lam[i] > 0 || g > 0)
				norm += g * g;
		}
		if (norm == 0.0 || bound <= best)
			break;
		for (uint32_t i = 0; i < n; i++) {
			lam[i] += theta * (bound - best) / norm * ((double)deg[i] - 2.0);
			if (lam[i] < 0)
				lam[i] = 0;
		}
	}
out:
	free(w);
	free(lam);
	free(key);
	free(from);
	free(deg);
	free(in);
	return least;
}

int main(int argc, char **argv)
{
	struct sf_coact c = { 0 };
	struct sf_err e = { 0 };
	int steps = argc > 2 ? atoi(argv[2]) : 100;
	uint32_t rk = argc > 3 ? (uint32_t)atoi(argv[3]) : 16;

	if (argc < 2 || argc > 4 || steps < 1) {
		fprintf(stderr, "usage: placebound COACT.sfc [STEPS] [K]\n");
		return 2;
	}
	if (sf_coact_load(&c, argv[1], 0, 1 << 30, &e)) {
		fprintf(stderr, "placebound: %s\n", e.msg);
		return 1;
	}
	for (int k = 0; k < c.nslots; k++) {
		const struct sf_coact_slot *sl = &c.slots[k];
		struct sf_place_stats s = { sl->entries, sl->tokens, sl->counts, sl->pairs };
		uint32_t *perm = malloc(sizeof *perm * sl->entries);
		double active = 0.0, runs[4], bound, hkruns, t0;
		uint32_t rounds = 0;

		if (!perm || !sl->tokens) {
			fprintf(stderr, "placebound: layer %d: %s\n", sl->layer,
				perm ? "no tokens" : "out of memory");
			return 1;
		}
		for (uint32_t i = 0; i < s.n; i++)
			active += (double)s.counts[i];
		active /= (double)s.tokens;
		sf_place_identity(s.n, perm);
		runs[0] = sf_place_expected_runs(&s, perm);
		sf_place_frequency(&s, perm);
		runs[1] = sf_place_expected_runs(&s, perm);
		if (sf_place_coact_exact(&s, perm, NULL, &e)) {
			fprintf(stderr, "placebound: %s\n", e.msg);
			return 1;
		}
		runs[2] = sf_place_expected_runs(&s, perm);
		t0 = now();
		if (refine(&s, rk, 50, perm, NULL, &rounds, &e)) {
			fprintf(stderr, "placebound: %s\n", e.msg);
			return 1;
		}
		runs[3] = sf_place_expected_runs(&s, perm);
		t0 = now() - t0;
		bound = active - two_best(&s) / (double)s.tokens;
		{
			double best = (active - runs[3]) * (double)s.tokens;
			double hk = held_karp(&s, best, steps);
			if (hk < 0) {
				fprintf(stderr, "placebound: out of memory\n");
				return 1;
			}
			hkruns = active - hk / (double)s.tokens;
		}
		printf("{\"layer\": %d, \"group\": %d, \"entries\": %u, \"tokens\": %llu, "
		       "\"active_per_token\": %.3f, \"runs_per_token\": {\"identity\": %.3f, "
		       "\"frequency\": %.3f, \"coact\": %.3f, \"refined\": %.3f, \"bound\": %.3f, \"held_karp\": %.3f}, "
		       "\"mean_read_length\": {\"identity\": %.4f, \"frequency\": %.4f, "
		       "\"coact\": %.4f, \"refined\": %.4f, \"bound\": %.4f, \"held_karp\": %.4f}, "
		       "\"refine_rounds\": %u, \"refine_seconds\": %.3f}\n",
		       sl->layer, (int)sl->group, sl->entries, (unsigned long long)sl->tokens, active,
		       runs[0], runs[1], runs[2], runs[3], bound, hkruns, active / runs[0],
		       active / runs[1], active / runs[2], active / runs[3],
		       bound > 0 ? active / bound : 0.0, hkruns > 0 ? active / hkruns : 0.0, rounds, t0);
		free(perm);
	}
	sf_coact_free(&c);
	return 0;
}
