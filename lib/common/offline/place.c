/* Placement methods: identity, frequency and Neuralink's greedy shortest
 * path by joining link ends (priority queue + disjoint set), exact on all
 * pairs or scalable on top-K candidate partners. man/sf-place.1. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "offline/place.h"

#define NONE UINT32_MAX

void sf_place_identity(uint32_t n, uint32_t *perm)
{
	for (uint32_t i = 0; i < n; i++)
		perm[i] = i;
}

static int freq_cmp(const void *pa, const void *pb, void *ctx)
{
	const uint64_t *counts = ctx;
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
	if (counts[a] != counts[b])
		return counts[a] > counts[b] ? -1 : 1;
	return a < b ? -1 : a > b;
}

void sf_place_frequency(const struct sf_place_stats *s, uint32_t *perm)
{
	sf_place_identity(s->n, perm);
	qsort_r(perm, s->n, sizeof *perm, freq_cmp, (void *)s->counts);
}

// --- the priority queue of candidate joins

struct edge {
	uint32_t c;	/* pair count: the larger, the nearer */
	uint32_t a, b;	/* entries, a < b */
};

/* The greedy's order: nearest first, then (a, b) ascending. */
static int edge_before(const struct edge *x, const struct edge *y)
{
	if (x->c != y->c)
		return x->c > y->c;
	if (x->a != y->a)
		return x->a < y->a;
	return x->b < y->b;
}

static void heap_sift(struct edge *h, size_t m, size_t i)
{
	struct edge v = h[i];
	for (;;) {
		size_t k = 2 * i + 1;
		if (k >= m)
			break;
		if (k + 1 < m && edge_before(&h[k + 1], &h[k]))
			k++;
		if (!edge_before(&h[k], &v))
			break;
		h[i] = h[k];
		i = k;
	}
	h[i] = v;
}

// --- paths: link ends joined under a disjoint set

struct paths {
	uint32_t n;
	uint32_t joined;	/* joins made; one path when n - 1 */
	uint32_t *parent;	/* (n) disjoint-set forest */
	uint32_t *size;		/* (n) set sizes at roots */
	uint32_t *link;		/* (n, 2) path neighbours, NONE when absent */
	uint8_t *deg;		/* (n) neighbours: 2 means no longer an end */
	uint32_t *joins;	/* (n - 1, 2) the pairs in join order, or NULL */
};

static void paths_free(struct paths *P)
{
	free(P->parent);
	free(P->size);
	free(P->link);
	free(P->deg);
}

static int paths_init(struct paths *P, uint32_t n, uint32_t *joins)
{
	*P = (struct paths){ .n = n, .joins = joins };
	P->parent = malloc(sizeof *P->parent * (size_t)n);
	P->size = malloc(sizeof *P->size * (size_t)n);
	P->link = malloc(sizeof *P->link * 2 * (size_t)n);
	P->deg = calloc(n, 1);
	if (!P->parent || !P->size || !P->link || !P->deg) {
		paths_free(P);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		P->parent[i] = i;
		P->size[i] = 1;
		P->link[2 * i] = P->link[2 * i + 1] = NONE;
	}
	return 0;
}

static uint32_t paths_find(struct paths *P, uint32_t i)
{
	while (P->parent[i] != i) {
		P->parent[i] = P->parent[P->parent[i]];	/* path halving */
		i = P->parent[i];
	}
	return i;
}

/* Joins ends a and b of two different paths; 0 when that is not allowed
 * (either is inside a path, or both are ends of the same one: a cycle). */
static int paths_join(struct paths *P, uint32_t a, uint32_t b)
{
	uint32_t ra, rb;

	if (P->deg[a] >= 2 || P->deg[b] >= 2)
		return 0;
	ra = paths_find(P, a);
	rb = paths_find(P, b);
	if (ra == rb)
		return 0;
	if (P->size[ra] < P->size[rb]) {
		uint32_t t = ra;
		ra = rb;
		rb = t;
	}
	P->parent[rb] = ra;
	P->size[ra] += P->size[rb];
	P->link[2 * a + P->deg[a]++] = b;
	P->link[2 * b + P->deg[b]++] = a;
	if (P->joins) {
		P->joins[2 * (size_t)P->joined] = a;
		P->joins[2 * (size_t)P->joined + 1] = b;
	}
	P->joined++;
	return 1;
}

/* Pops the queue in order, joining what may be joined, until one path
 * remains or the queue is empty. A join once refused stays refused (ends
 * only ever close, paths only ever merge), so this equals scanning for the
 * globally nearest allowed pair at every step. */
static void paths_greedy(struct paths *P, struct edge *h, size_t m)
{
	for (size_t i = m / 2; i-- > 0;)
		heap_sift(h, m, i);
	while (m > 0 && P->joined + 1 < P->n) {
		struct edge top = h[0];
		h[0] = h[--m];
		heap_sift(h, m, 0);
		paths_join(P, top.a, top.b);
	}
}

/* The joins left at distance 1 (pair count 0), in (a, b) order over the
 * open ends ends[0..m) (ascending): a doubly linked list skips closed ends,
 * so each end looks at few others. */
static int paths_finish(struct paths *P, const uint32_t *ends, uint32_t m)
{
	uint32_t *next, *prev;

	if (P->joined + 1 >= P->n)
		return 0;
	next = malloc(sizeof *next * ((size_t)m + 1));
	prev = malloc(sizeof *prev * ((size_t)m + 1));
	if (!next || !prev) {
		free(next);
		free(prev);
		return -ENOMEM;
	}
	/* node m is the list head */
	for (uint32_t x = 0; x < m; x++) {
		next[x] = x + 1;
		prev[x] = x ? x - 1 : m;
	}
	next[m] = m ? 0 : m;
	prev[m] = m ? m - 1 : m;
#define UNLINK(x) (next[prev[x]] = next[x], prev[next[x]] = prev[x])
	for (uint32_t x = next[m]; x != m && P->joined + 1 < P->n;) {
		uint32_t a = ends[x];
		for (uint32_t y = next[x]; y != m && P->deg[a] < 2; y = next[y])
			if (paths_join(P, a, ends[y]) && P->deg[ends[y]] >= 2)
				UNLINK(y);
		uint32_t nx = next[x];
		if (P->deg[a] >= 2)
			UNLINK(x);
		x = nx;
	}
#undef UNLINK
	free(next);
	free(prev);
	return 0;
}

/* The permutation: the path walked from its end with the smaller index. */
static void paths_walk(const struct paths *P, uint32_t *perm)
{
	uint32_t start = 0, prev = NONE, cur;

	while (P->n > 1 && P->deg[start] != 1)
		start++;
	cur = start;
	for (uint32_t p = 0; p < P->n; p++) {
		uint32_t nx = P->link[2 * cur] != prev ? P->link[2 * cur] : P->link[2 * cur + 1];
		perm[p] = cur;
		prev = cur;
		cur = nx;
	}
}

// --- the exact greedy

uint64_t sf_place_exact_bytes(uint32_t n)
{
	return (uint64_t)n * (n - (n > 0)) / 2 * sizeof(struct edge) + (uint64_t)n * 29;
}

/* Every allowed pair among ends[0..m) with a positive count. Pairs of the
 * same path (froot equal) could never be joined and are left out. */
static size_t pair_edges(const struct sf_place_stats *s, const uint32_t *ends,
			 const uint32_t *froot, uint32_t m, struct edge *h)
{
	size_t k = 0;
	for (uint32_t x = 0; x + 1 < m; x++) {
		uint32_t a = ends[x];
		const uint32_t *row = s->pairs + sf_place_pair_index(s->n, a, a + 1);
		for (uint32_t y = x + 1; y < m; y++) {
			uint32_t b = ends[y], c;
			if (froot && froot[x] == froot[y])
				continue;
			if ((c = row[b - a - 1]))
				h[k++] = (struct edge){ c, a, b };
		}
	}
	return k;
}

int sf_place_coact_exact(const struct sf_place_stats *s, uint32_t *perm, uint32_t *joins,
			 struct sf_err *e)
{
	uint32_t n = s->n, *all = NULL;
	uint64_t npairs = (uint64_t)n * (n - (n > 0)) / 2;
	struct edge *h = NULL;
	struct paths P;
	int ret;

	if (npairs > SIZE_MAX / sizeof *h)
		return sf_err_set(e, -ENOMEM, "exact placement of %u entries: %llu pairs do not fit in memory",
				  n, (unsigned long long)npairs);
	if ((ret = paths_init(&P, n, joins)))
		return sf_err_set(e, ret, "exact placement of %u entries: out of memory", n);
	h = malloc(sizeof *h * (size_t)(npairs ? npairs : 1));
	all = malloc(sizeof *all * ((size_t)n + 1));
	if (!h || !all) {
		ret = sf_err_set(e, -ENOMEM, "exact placement of %u entries: %llu bytes: out of memory",
				 n, (unsigned long long)sf_place_exact_bytes(n));
		goto out;
	}
	sf_place_identity(n, all);
	paths_greedy(&P, h, pair_edges(s, all, NULL, n, h));
	free(h);
	h = NULL;
	if ((ret = paths_finish(&P, all, n))) {
		ret = sf_err_set(e, ret, "exact placement of %u entries: out of memory", n);
		goto out;
	}
	paths_walk(&P, perm);
out:
	free(h);
	free(all);
	paths_free(&P);
	return ret;
}

// --- the scalable greedy: top-K candidates per open end

struct cand {
	uint32_t c;	/* pair count */
	uint32_t p;	/* partner: a position in the ends array */
};

/* Candidate order: larger count, then smaller partner. */
static int cand_before(struct cand x, struct cand y)
{
	return x.c != y.c ? x.c > y.c : x.p < y.p;
}

/* Offers x to a bounded heap h (root = the worst kept) of *cnt of k. */
static void cand_offer(struct cand *h, uint32_t *cnt, uint32_t k, struct cand x)
{
	size_t i;

	if (*cnt < k) {
		for (i = (*cnt)++; i > 0 && cand_before(h[(i - 1) / 2], x); i = (i - 1) / 2)
			h[i] = h[(i - 1) / 2];
		h[i] = x;
		return;
	}
	if (!cand_before(x, h[0]))
		return;
	for (i = 0;;) {
		size_t c = 2 * i + 1;
		if (c >= k)
			break;
		if (c + 1 < k && cand_before(h[c], h[c + 1]))
			c++;
		if (!cand_before(x, h[c]))
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = x;
}

struct topk_job {
	const struct sf_place_stats *s;
	const uint32_t *ends, *froot;	/* (m) open ends ascending, their paths */
	uint32_t m, k;
	struct cand *heaps;	/* (nth, m, k) */
	uint32_t *cnt;		/* (nth, m) kept per heap */
	uint32_t *worst;	/* (nth, m) count of the worst kept once full, else 0 */
};

/* Worker ith scans rows [lo, hi) of the triangle over the ends, chosen so
 * each worker sees as many pairs, and offers each pair to both ends' heaps. */
static void topk_scan(void *arg, int ith, int nth)
{
	struct topk_job *J = arg;
	const struct sf_place_stats *s = J->s;
	uint64_t m = J->m, total = m * (m - (m > 0)) / 2;
	uint64_t want_lo = total * (uint64_t)ith / (uint64_t)nth;
	uint64_t want_hi = total * (uint64_t)(ith + 1) / (uint64_t)nth;
	uint32_t k = J->k, lo = 0, hi = 0;
	struct cand *heaps = J->heaps + (size_t)ith * m * k;
	uint32_t *cnt = J->cnt + (size_t)ith * m, *worst = J->worst + (size_t)ith * m;
	uint64_t before = 0;

	/* row x holds m - 1 - x pairs */
	for (uint32_t x = 0; x < m; x++) {
		if (before < want_lo)
			lo = x + 1;
		if (before < want_hi)
			hi = x + 1;
		before += m - 1 - x;
	}
	if (ith == nth - 1)
		hi = J->m;
	memset(cnt, 0, sizeof *cnt * m);
	memset(worst, 0, sizeof *worst * m);
	for (uint32_t x = lo; x < hi && x + 1 < m; x++) {
		uint32_t a = J->ends[x], fa = J->froot[x];
		const uint32_t *row = s->pairs + sf_place_pair_index(s->n, a, a + 1);
		for (uint32_t y = x + 1; y < m; y++) {
			uint32_t c = row[J->ends[y] - a - 1];
			if (c == 0 || J->froot[y] == fa)
				continue;
			/* worst[] rejects most pairs without touching the heaps */
			if (c >= worst[x]) {
				cand_offer(heaps + (size_t)x * k, &cnt[x], k, (struct cand){ c, y });
				if (cnt[x] == k)
					worst[x] = heaps[(size_t)x * k].c;
			}
			if (c >= worst[y]) {
				cand_offer(heaps + (size_t)y * k, &cnt[y], k, (struct cand){ c, x });
				if (cnt[y] == k)
					worst[y] = heaps[(size_t)y * k].c;
			}
		}
	}
}

uint64_t sf_place_topk_bytes(uint32_t n, uint32_t topk, uint32_t finish, int nthreads)
{
	uint64_t heaps = (uint64_t)nthreads * n * (topk * sizeof(struct cand) + 8) + topk * sizeof(struct cand);
	uint64_t edges = (uint64_t)n * topk * sizeof(struct edge);
	uint64_t full = (uint64_t)finish * (finish - (finish > 0)) / 2 * sizeof(struct edge);
	return heaps + (edges > full ? edges : full) + (uint64_t)n * 37;
}

int sf_place_coact_topk(const struct sf_place_stats *s, uint32_t topk, uint32_t finish,
			struct sf_pool *pool, uint32_t *perm, struct sf_err *e)
{
	uint32_t n = s->n, m = n, k = topk ? topk : 1;
	int nth = pool ? sf_pool_size(pool) : 1, ret = 0;
	uint64_t full_pairs = (uint64_t)finish * (finish - (finish > 0)) / 2;
	uint64_t nedges = (uint64_t)n * k > full_pairs ? (uint64_t)n * k : full_pairs;
	struct topk_job J = { .s = s, .k = k };
	uint32_t *ends = NULL, *froot = NULL;
	struct cand *merged = NULL;
	struct edge *h = NULL;
	struct paths P;

	if ((uint64_t)nth * n * k > SIZE_MAX / sizeof(struct cand) || nedges > SIZE_MAX / sizeof *h)
		return sf_err_set(e, -ENOMEM, "placement of %u entries with --topk %u: too large", n, k);
	if ((ret = paths_init(&P, n, NULL)))
		return sf_err_set(e, ret, "placement of %u entries: out of memory", n);
	ends = malloc(sizeof *ends * ((size_t)n + 1));
	froot = malloc(sizeof *froot * ((size_t)n + 1));
	h = malloc(sizeof *h * (size_t)nedges);
	J.heaps = malloc(sizeof *J.heaps * (size_t)nth * n * k);
	J.cnt = malloc(sizeof *J.cnt * (size_t)nth * n + 1);
	J.worst = malloc(sizeof *J.worst * (size_t)nth * n + 1);
	merged = malloc(sizeof *merged * k);
	if (!ends || !froot || !h || !J.heaps || !J.cnt || !J.worst || !merged) {
		ret = sf_err_set(e, -ENOMEM, "placement of %u entries with --topk %u: %llu bytes: out of memory",
				 n, k, (unsigned long long)sf_place_topk_bytes(n, k, finish, nth));
		goto out;
	}
	sf_place_identity(n, ends);
	while (P.joined + 1 < n) {
		uint32_t before = P.joined, x, w;
		size_t ne = 0;

		for (x = 0; x < m; x++)
			froot[x] = paths_find(&P, ends[x]);
		if (m <= finish) {
			paths_greedy(&P, h, pair_edges(s, ends, froot, m, h));
			break;
		}
		J.ends = ends;
		J.froot = froot;
		J.m = m;
		if (pool)
			sf_pool_run(pool, topk_scan, &J);
		else
			topk_scan(&J, 0, 1);
		/* each end's best k over the workers' heaps; a pair found from both
		 * sides enters twice, and the second is refused as a cycle */
		for (x = 0; x < m; x++) {
			uint32_t c = 0;
			for (int t = 0; t < nth; t++) {
				const struct cand *ht = J.heaps + ((size_t)t * m + x) * k;
				for (uint32_t i = 0; i < J.cnt[(size_t)t * m + x]; i++)
					cand_offer(merged, &c, k, ht[i]);
			}
			for (uint32_t i = 0; i < c; i++) {
				uint32_t a = ends[x], b = ends[merged[i].p];
				h[ne++] = a < b ? (struct edge){ merged[i].c, a, b }
						: (struct edge){ merged[i].c, b, a };
			}
		}
		paths_greedy(&P, h, ne);
		if (P.joined == before)
			break;	/* no positive pair left between paths */
		for (x = w = 0; x < m; x++)
			if (P.deg[ends[x]] < 2)
				ends[w++] = ends[x];
		m = w;
	}
	{
		uint32_t w = 0;
		for (uint32_t x = 0; x < m; x++)
			if (P.deg[ends[x]] < 2)
				ends[w++] = ends[x];
		m = w;
	}
	if ((ret = paths_finish(&P, ends, m))) {
		ret = sf_err_set(e, ret, "placement of %u entries: out of memory", n);
		goto out;
	}
	paths_walk(&P, perm);
out:
	free(ends);
	free(froot);
	free(h);
	free(J.heaps);
	free(J.cnt);
	free(J.worst);
	free(merged);
	paths_free(&P);
	return ret;
}

// --- costs

static uint64_t path_pairs(const struct sf_place_stats *s, const uint32_t *perm)
{
	uint64_t sum = 0;
	for (uint32_t p = 1; p < s->n; p++)
		sum += sf_place_pair(s, perm[p - 1], perm[p]);
	return sum;
}

double sf_place_path_cost(const struct sf_place_stats *s, const uint32_t *perm)
{
	if (s->n < 2)
		return 0.0;
	return (double)(s->n - 1) - (s->tokens ? (double)path_pairs(s, perm) / (double)s->tokens : 0.0);
}

double sf_place_expected_runs(const struct sf_place_stats *s, const uint32_t *perm)
{
	uint64_t active = 0;

	if (!s->tokens)
		return 0.0;
	for (uint32_t i = 0; i < s->n; i++)
		active += s->counts[i];
	return (double)(active - path_pairs(s, perm)) / (double)s->tokens;
}
