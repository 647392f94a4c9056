/* The bitshift trellis: the Viterbi encoder against brute force over every
 * code sequence of a tiny column, the SIMD path against _ref, lockstep
 * columns independent of each other, determinism, and the decoder giving
 * the error the encoder reported. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu.h"
#include "offline/trellis.h"
#include "unit.h"

static uint64_t rng = 12345;
static double uniform(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return ((double)(rng >> 11) + 0.5) * 0x1p-53;
}
static float gauss(void)
{
	return (float)(sqrt(-2.0 * log(uniform())) * cos(2.0 * M_PI * uniform()));
}

static double sse_of(const float *cb, const float *x, const uint8_t *c, size_t m)
{
	float *d = malloc(m * sizeof(float));
	sf_trellis_decode(cb, c, m, d);
	double e = 0.0;
	for (size_t t = 0; t < m; t++)
		e += ((double)x[t] - d[t]) * ((double)x[t] - d[t]);
	free(d);
	return e;
}

/* The search's metric as trellis.h defines it: v in 16-bit fixed point
 * with 12 fraction bits, clamped to +-32767 */
static int32_t q12(float v)
{
	float s = v * 4096.0f;
	s = s > 32767.0f ? 32767.0f : s < -32767.0f ? -32767.0f : s;
	return (int32_t)lrintf(s);
}

/* the fixed-point metric of codes c on x: the differences saturated to
 * 16 bits, squares truncated to 8 fraction bits */
static int64_t metric(const float *cb, const float *x, const uint8_t *c, size_t m)
{
	int64_t e = 0;
	uint32_t idx = 0;
	for (size_t t = 0; t < m; t++) {
		idx = ((idx << 2) | c[t]) & 0xffff;
		int32_t d = q12(x[t]) - q12(cb[idx]);
		d = d > 32767 ? 32767 : d < -32768 ? -32768 : d;
		e += (d * d) >> 16;
	}
	return e;
}

/* The least float error and the least fixed-point metric over all 4^m
 * code sequences, by enumeration. */
static double brute(const float *cb, const float *x, size_t m, int64_t *qbest)
{
	double best = INFINITY;
	uint8_t c[8];
	*qbest = INT64_MAX;
	for (uint32_t s = 0; s < (1u << (2 * m)); s++) {
		for (size_t t = 0; t < m; t++)
			c[t] = (s >> (2 * t)) & 3;
		double e = 0.0;
		uint32_t idx = 0;
		for (size_t t = 0; t < m; t++) {
			idx = ((idx << 2) | c[t]) & 0xffff;
			double d = (double)x[t] - cb[idx];
			e += d * d;
		}
		int64_t q = metric(cb, x, c, m);
		best = e < best ? e : best;
		*qbest = q < *qbest ? q : *qbest;
	}
	return best;
}

int main(void)
{
	float *cb;
	struct sf_trellis_work *w;
	CHECK(posix_memalign((void **)&cb, 64, SF_TRELLIS_CODEBOOK * sizeof(float)) == 0, "alloc");
	sf_trellis_codebook(cb, SF_TRELLIS_DEFAULT_SEED);
	enum { M = 300, MMAX = 4096, N = SF_TRELLIS_LOCKSTEP };
	CHECK(sf_trellis_work_init(&w, cb, MMAX) == 0, "work");

	/* the codebook: standard normal, and reproducible from the seed */
	double mean = 0, var = 0;
	for (size_t i = 0; i < SF_TRELLIS_CODEBOOK; i++) {
		mean += cb[i];
		var += (double)cb[i] * cb[i];
	}
	mean /= SF_TRELLIS_CODEBOOK;
	var = var / SF_TRELLIS_CODEBOOK - mean * mean;
	CHECK(fabs(mean) < 0.02 && fabs(var - 1.0) < 0.03, "codebook mean %g var %g", mean, var);
	float *cb2 = malloc(SF_TRELLIS_CODEBOOK * sizeof(float));
	sf_trellis_codebook(cb2, SF_TRELLIS_DEFAULT_SEED);
	CHECK(memcmp(cb, cb2, SF_TRELLIS_CODEBOOK * sizeof(float)) == 0, "codebook not reproducible");
	sf_trellis_codebook(cb2, 2);
	CHECK(memcmp(cb, cb2, SF_TRELLIS_CODEBOOK * sizeof(float)) != 0, "seed ignored");
	free(cb2);

	/* Viterbi equals brute force on tiny columns (every length 1..8): the
	 * least fixed-point metric exactly, and the float error within the
	 * metric's rounding of the float optimum */
	for (size_t m = 1; m <= 8; m++) {
		for (int rep = 0; rep < (m == 8 ? 3 : 5); rep++) {
			float x[8];
			uint8_t c[8];
			const float *xp[1] = { x };
			uint8_t *cp[1] = { c };
			double err;
			for (size_t t = 0; t < m; t++)
				x[t] = gauss();
			sf_trellis_encode(xp, 1, m, cp, &err, w);
			int64_t qb;
			double b = brute(cb, x, m, &qb), mine = sse_of(cb, x, c, m);
			CHECK(metric(cb, x, c, m) == qb, "m %zu: viterbi metric %lld, brute force %lld",
			      m, (long long)metric(cb, x, c, m), (long long)qb);
			CHECK(mine <= b + 1e-3 * (double)m, "m %zu: viterbi %g, brute force %g", m, mine,
			      b);
			CHECK(fabs(err - mine) <= 1e-4 * (1 + mine), "m %zu: reported %g, decoded %g", m,
			      err, mine);
		}
	}

	/* each SIMD path the machine has and _ref: identical codes and
	 * errors on random columns of several lengths (every rotation of the
	 * SIMD layout at the end: 2m mod 14 takes 2, 10, 0, 4, 12, 6, 8, 2
	 * here), the last with every phase of the renormalisation, and with
	 * scale 6 weights past the fixed point's +-8 and metrics at their
	 * ceiling; _ref is slow (a plain loop over 2^16 edges per weight), so
	 * fewer columns when long */
	static const struct { size_t m; int n; float scale; } runs[] = {
		{ 1, N, 1 }, { 5, N, 1 }, { 7, N, 1 }, { 9, 3, 1 }, { 20, 2, 1 }, { 255, 2, 1 },
		{ 67, N, 6 }, { MMAX, 1, 1 },
	};
	float *x[N];
	uint8_t *c[N], *r[N];
	double err[N], rerr[N];
	for (int k = 0; k < N; k++) {
		x[k] = malloc(MMAX * sizeof(float));
		c[k] = malloc(MMAX);
		r[k] = malloc(MMAX);
	}
	int simd_paths = 0;
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		size_t m = runs[i].m;
		int n = runs[i].n;
		for (int k = 0; k < n; k++)
			for (size_t t = 0; t < m; t++)
				x[k][t] = runs[i].scale * gauss();
		CHECK(sf_cpu_use(SF_ISA_REF) == 0, "select ref");
		sf_trellis_encode((const float *const *)x, n, m, r, rerr, w);
		for (enum sf_isa a = SF_ISA_REF + 1; a < SF_NISA; a++) {
			if (!sf_cpu_has(a) || sf_cpu_use(a) != 0)
				continue;	/* not on this machine */
			simd_paths += i == 0;
			sf_trellis_encode((const float *const *)x, n, m, c, err, w);
			for (int k = 0; k < n; k++) {
				CHECK(memcmp(c[k], r[k], m) == 0,
				      "%s, m %zu column %d: SIMD and _ref codes differ", sf_isa_name(a), m,
				      k);
				CHECK(err[k] == rerr[k], "%s, m %zu column %d: errors %g and %g",
				      sf_isa_name(a), m, k, err[k], rerr[k]);
			}
		}
		sf_cpu_use_best();
	}
	printf("# trellis: %d SIMD path(s) checked against _ref\n", simd_paths);

	/* lockstep columns: the reported error is the decoded one, each
	 * column alone gives the same codes, and a second run the same again */
	for (int k = 0; k < N; k++)
		for (size_t t = 0; t < M; t++)
			x[k][t] = gauss();
	sf_trellis_encode((const float *const *)x, N, M, c, err, w);
	double total = 0.0;
	for (int k = 0; k < N; k++) {
		double e = sse_of(cb, x[k], c[k], M);
		CHECK(fabs(e - err[k]) <= 1e-4 * e, "column %d: reported %g decoded %g", k, err[k], e);
		CHECK(e / M < 0.1, "column %d: MSE %g", k, e / M);
		total += e;
	}
	CHECK(total / (N * M) < 0.08, "MSE %g over %d columns", total / (N * M), N);
	sf_trellis_encode((const float *const *)x, N, M, r, rerr, w);
	for (int k = 0; k < N; k++)
		CHECK(memcmp(c[k], r[k], M) == 0 && err[k] == rerr[k], "column %d: not deterministic", k);
	for (int k = 0; k < N; k += 5) {
		const float *xp[1] = { x[k] };
		uint8_t *cp[1] = { r[0] };
		sf_trellis_encode(xp, 1, M, cp, NULL, w);
		CHECK(memcmp(r[0], c[k], M) == 0, "column %d alone differs from lockstep", k);
	}
	/* a column of zeros: every code reachable; codes decode near zero */
	memset(x[0], 0, M * sizeof(float));
	sf_trellis_encode((const float *const *)x, 1, M, c, err, w);
	CHECK(err[0] < 0.01 * M, "zero column error %g", err[0]);

	for (int k = 0; k < N; k++) {
		free(x[k]);
		free(c[k]);
		free(r[k]);
	}
	sf_trellis_work_free(w);
	sf_trellis_work_free(NULL);
	free(cb);
	return unit_exit();
}
