/* placebench: search time and peak memory of the scalable co-activation
 * greedy (and the exact one when asked) on synthetic statistics of
 * realistic density, for tests/bench/place.sh.
 * Usage: placebench N THREADS TOPK [exact]
 * Statistics: 65,536 tokens; entry i active with probability p_i drawn
 * from [0.02, 0.4] (mean about 0.2, as at densities 0.1-0.3); entries fall
 * in latent clusters of 16 whose pairs co-activate 4x more often than
 * independence gives; counts carry +-10% hashed noise. Prints JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "offline/place.h"
#include "base/pool.h"

#define TOKENS 65536u

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double unit(uint64_t h)
{
	return (double)(h >> 11) * 0x1p-53;
}

struct gen {
	uint32_t n;
	const double *p;
	const uint32_t *cluster;
	uint32_t *pairs;
};

static void gen_rows(void *arg, int ith, int nth)
{
	struct gen *G = arg;
	for (uint32_t i = (uint32_t)ith; i < G->n; i += (uint32_t)nth) {
		uint32_t *row = G->pairs + sf_place_pair_index(G->n, i, i + 1 < G->n ? i + 1 : i);
		for (uint32_t j = i + 1; j < G->n; j++) {
			double q = G->p[i] * G->p[j] * (G->cluster[i] == G->cluster[j] ? 4.0 : 1.0);
			double noise = 0.9 + 0.2 * unit(mix(((uint64_t)i << 32) | j));
			double v = q * noise * TOKENS;
			double cap = (G->p[i] < G->p[j] ? G->p[i] : G->p[j]) * TOKENS;
			row[j - i - 1] = (uint32_t)(v < cap ? v : cap);
		}
	}
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long peak_kib(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

int main(int argc, char **argv)
{
	if (argc < 4)
		return fprintf(stderr, "usage: placebench N THREADS TOPK [exact]\n"), 2;
	uint32_t n = (uint32_t)strtoul(argv[1], NULL, 10), k = (uint32_t)strtoul(argv[3], NULL, 10);
	int nth = atoi(argv[2]), exact = argc > 4;
	uint64_t npairs = (uint64_t)n * (n - 1) / 2;
	double *p = malloc(sizeof *p * n);
	uint32_t *cluster = malloc(sizeof *cluster * n), *perm = malloc(sizeof *perm * n);
	uint64_t *counts = malloc(sizeof *counts * n);
	uint32_t *pairs = malloc(sizeof *pairs * npairs);
	struct sf_pool *pool = NULL;
	struct sf_err e = { 0 };

	if (!p || !cluster || !perm || !counts || !pairs || sf_pool_create(&pool, nth))
		return fprintf(stderr, "placebench: out of memory\n"), 1;
	for (uint32_t i = 0; i < n; i++) {
		p[i] = 0.02 + 0.38 * unit(mix(0x5eed0000ull + i));
		cluster[i] = (uint32_t)(mix(0xc1u + i) % (n / 16));
		counts[i] = (uint64_t)(p[i] * TOKENS);
	}
	struct gen G = { n, p, cluster, pairs };
	sf_pool_run(pool, gen_rows, &G);
	struct sf_place_stats s = { n, TOKENS, counts, pairs };
	long before = peak_kib();
	double t0 = now();
	int ret = exact ? sf_place_coact_exact(&s, perm, NULL, &e)
			: sf_place_coact_topk(&s, k, SF_PLACE_DEFAULT_FINISH, pool, perm, &e);
	double t = now() - t0;
	if (ret)
		return fprintf(stderr, "placebench: %s\n", e.msg), 1;
	uint32_t *id = malloc(sizeof *id * n);
	sf_place_identity(n, id);
	printf("{\"n\": %u, \"threads\": %d, \"search\": \"%s\", \"topk\": %u, \"seconds\": %.3f, "
	       "\"stats_bytes\": %llu, \"peak_rss_bytes\": %lld, \"search_extra_bytes\": %lld, "
	       "\"stated_bytes\": %llu, \"path_cost\": %.3f, \"runs_per_token\": %.3f, "
	       "\"identity_runs_per_token\": %.3f}\n", n, nth, exact ? "exact" : "topk", k, t,
	       (unsigned long long)(npairs * 4 + (uint64_t)n * 8), (long long)peak_kib() * 1024,
	       (long long)(peak_kib() - before) * 1024,
	       (unsigned long long)(exact ? sf_place_exact_bytes(n) : sf_place_topk_bytes(n, k, SF_PLACE_DEFAULT_FINISH, nth)),
	       sf_place_path_cost(&s, perm), sf_place_expected_runs(&s, perm),
	       sf_place_expected_runs(&s, id));
	free(id);
	free(p);
	free(cluster);
	free(perm);
	free(counts);
	free(pairs);
	sf_pool_destroy(pool);
	return 0;
}
