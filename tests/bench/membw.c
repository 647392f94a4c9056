/* membw: this machine's memory read bandwidth (a sum over a buffer far
 * larger than the caches, best of several passes), and with --matvec the
 * rate at which sf_matvec_rows streams weights, to compare the two.
 *
 *   membw [--threads N] [--size BYTES] [--passes N]
 *       one JSON line per thread count (1 and 2 unless --threads):
 *       {"threads":2,"bytes":...,"read_gbps":...}
 *   membw --matvec ROWS COLS DTYPE THREADS [--hot] [--passes N]
 *       {"rows":..,"cols":..,"dtype":"bf16","threads":2,"isa":"avx512",
 *        "copies":..,"matvec_gbps":..,"us_per_call":..}
 *       The matrix is replicated to fill --size (1 GiB) so every pass
 *       streams it from memory as a decoder does; --hot uses one copy. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/cli.h"
#include "engine/cpu.h"
#include "engine/kernels.h"
#include "base/pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define MEMBW_DEFAULT_SIZE (1ull << 30)
#define MEMBW_DEFAULT_PASSES 5

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Large buffers on 2 MiB boundaries with transparent huge pages asked
 * for, so TLB misses do not take a share of the bandwidth. */
static void *big_alloc(size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, 2u << 20, n))
		return NULL;
#ifdef MADV_HUGEPAGE
	madvise(p, n, MADV_HUGEPAGE);
#endif
	return p;
}

// ----------------------------------------------------------------------------
// raw read bandwidth

#if defined(__x86_64__)
/* Eight independent integer adds of 64-byte loads: nothing to wait on but
 * the loads themselves. n is a multiple of 512. */
__attribute__((target("avx512f"))) static uint64_t sum_avx512(const char *p, size_t n)
{
	__m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
	__m512i a4 = a0, a5 = a0, a6 = a0, a7 = a0;
	for (size_t i = 0; i < n; i += 512) {
		a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
		a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 64));
		a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 128));
		a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 192));
		a4 = _mm512_add_epi64(a4, _mm512_load_si512(p + i + 256));
		a5 = _mm512_add_epi64(a5, _mm512_load_si512(p + i + 320));
		a6 = _mm512_add_epi64(a6, _mm512_load_si512(p + i + 384));
		a7 = _mm512_add_epi64(a7, _mm512_load_si512(p + i + 448));
	}
	a0 = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
	a4 = _mm512_add_epi64(_mm512_add_epi64(a4, a5), _mm512_add_epi64(a6, a7));
	return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(a0, a4));
}

__attribute__((target("avx2"))) static uint64_t sum_avx2(const char *p, size_t n)
{
	__m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
	for (size_t i = 0; i < n; i += 128) {
		a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
		a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
		a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
		a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
	}
	a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
	uint64_t v[4];
	_mm256_storeu_si256((__m256i *)v, a0);
	return v[0] + v[1] + v[2] + v[3];
}
#endif

static uint64_t sum_scalar(const char *p, size_t n)
{
	const uint64_t *q = (const uint64_t *)p;
	uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
	for (size_t i = 0; i < n / 8; i += 4) {
		a0 += q[i];
		a1 += q[i + 1];
		a2 += q[i + 2];
		a3 += q[i + 3];
	}
	return a0 + a1 + a2 + a3;
}

static uint64_t (*sum_fn)(const char *p, size_t n) = sum_scalar;
static const char *sum_isa = "scalar";

static void pick_sum(void)
{
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f"))
		sum_fn = sum_avx512, sum_isa = "avx512";
	else if (__builtin_cpu_supports("avx2"))
		sum_fn = sum_avx2, sum_isa = "avx2";
#endif
}

struct read_task {
	const char *buf;
	size_t n;		/* a multiple of 512 */
	uint64_t sums[64];	/* per thread, kept so the loads are not dead */
};

static void read_worker(void *arg, int ith, int nth)
{
	struct read_task *t = arg;
	size_t lo, hi;
	sf_pool_split(t->n, 512, ith, nth, &lo, &hi);
	t->sums[ith] = sum_fn(t->buf + lo, hi - lo);
}

static int run_read(struct read_task *t, int threads, int passes)
{
	struct sf_pool *pool;
	int rc = sf_pool_create(&pool, threads);
	if (rc) {
		sf_error("creating %d threads: %s", threads, strerror(-rc));
		return -1;
	}
	double best = 1e30;
	sf_pool_run(pool, read_worker, t);	/* warm the threads up */
	for (int i = 0; i < passes; i++) {
		double t0 = now_s();
		sf_pool_run(pool, read_worker, t);
		double dt = now_s() - t0;
		if (dt < best)
			best = dt;
	}
	sf_pool_destroy(pool);
	uint64_t s = 0;
	for (int i = 0; i < threads; i++)
		s += t->sums[i];
	printf("{\"threads\":%d,\"bytes\":%zu,\"isa\":\"%s\",\"read_gbps\":%.2f,\"check\":%llu}\n",
	       threads, t->n, sum_isa, (double)t->n / best / 1e9, (unsigned long long)(s & 0xff));
	return 0;
}

// ----------------------------------------------------------------------------
// matvec rate

struct mv_task {
	const char *W;		/* (rows, cols) in dt */
	enum sf_dtype dt;
	size_t rows, cols;
	const float *x;		/* (cols) */
	float *y;		/* (rows) */
};

static void mv_worker(void *arg, int ith, int nth)
{
	const struct mv_task *t = arg;
	size_t lo, hi;
	sf_pool_split(t->rows, 16, ith, nth, &lo, &hi);
	if (lo < hi)
		sf_matvec_rows(t->y + lo, t->W, t->dt, t->cols, t->x, lo, hi);
}

static uint64_t rng = 0x2545f4914f6cdd1du;

static uint32_t rnd32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

/* random weights of magnitude 2^-8..1 in any dtype, without per-element
 * conversion so that filling a GiB stays quick */
static void fill_random(char *p, size_t nelem, enum sf_dtype dt)
{
	if (dt == SF_DTYPE_F32) {
		for (size_t i = 0; i < nelem; i++) {
			uint32_t u = (rnd32() & 0x807fffffu) | ((119u + rnd32() % 8u) << 23);
			memcpy(p + 4 * i, &u, 4);
		}
	} else {
		for (size_t i = 0; i < nelem; i++) {
			uint32_t r = rnd32();
			uint16_t h = dt == SF_DTYPE_BF16
				? (uint16_t)((r & 0x807fu) | ((119u + (r >> 16) % 8u) << 7))
				: (uint16_t)((r & 0x83ffu) | ((7u + (r >> 16) % 8u) << 10));
			memcpy(p + 2 * i, &h, 2);
		}
	}
}

static int run_matvec(size_t rows, size_t cols, enum sf_dtype dt, const char *dtname,
		      int threads, int hot, size_t size, int passes)
{
	size_t es = dt == SF_DTYPE_F32 ? 4 : 2;
	/* 64-bit products: a 128k x 16k matrix passes 2^32 elements */
	uint64_t mbytes = (uint64_t)rows * cols * es;
	size_t stride = (size_t)((mbytes + 4095) & ~(uint64_t)4095);
	size_t copies = hot ? 1 : (size + stride - 1) / stride;
	if (copies < 1)
		copies = 1;
	char *W = big_alloc(copies * stride);
	float *x = malloc(cols * sizeof(float)), *y = malloc(rows * sizeof(float));
	struct sf_pool *pool = NULL;
	int ret = -1, rc;

	if (!W || !x || !y) {
		sf_error("allocating %zu x %zu bytes: %s", copies, stride, strerror(ENOMEM));
		goto out;
	}
	for (size_t c = 0; c < copies; c++)
		fill_random(W + c * stride, rows * cols, dt);
	for (size_t i = 0; i < cols; i++)
		x[i] = (float)(rnd32() % 2001) / 1000.0f - 1.0f;
	rc = sf_pool_create(&pool, threads);
	if (rc) {
		sf_error("creating %d threads: %s", threads, strerror(-rc));
		goto out;
	}

	struct mv_task t = { .dt = dt, .rows = rows, .cols = cols, .x = x, .y = y };
	double best = 1e30;
	/* each pass goes once through every copy; pass 0 warms up */
	for (int p = 0; p <= passes; p++) {
		double t0 = now_s();
		for (size_t c = 0; c < copies; c++) {
			t.W = W + c * stride;
			sf_pool_run(pool, mv_worker, &t);
		}
		double dt_s = now_s() - t0;
		if (p > 0 && dt_s < best)
			best = dt_s;
	}
	printf("{\"rows\":%zu,\"cols\":%zu,\"dtype\":\"%s\",\"threads\":%d,\"isa\":\"%s\","
	       "\"copies\":%zu,\"matvec_gbps\":%.2f,\"us_per_call\":%.1f,\"check\":%.3g}\n",
	       rows, cols, dtname, threads, sf_isa_name(sf_cpu_isa()), copies,
	       (double)mbytes * (double)copies / best / 1e9, best / (double)copies * 1e6,
	       (double)y[rows / 2]);
	ret = 0;
out:
	sf_pool_destroy(pool);
	free(W), free(x), free(y);
	return ret;
}

// ----------------------------------------------------------------------------

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: membw [--threads N] [--size BYTES] [--passes N]\n"
		"       membw --matvec ROWS COLS DTYPE THREADS [--hot] [--size BYTES] [--passes N]\n"
		"Memory read bandwidth, or sf_matvec_rows weight streaming rate, as JSON lines.\n"
		"  --threads N   threads for the read test (default: 1, then 2)\n"
		"  --size BYTES  buffer size, K/M/G suffixes (default 1G)\n"
		"  --passes N    timed passes, the best is reported (default %d)\n"
		"  --matvec      time sf_matvec_rows on ROWS x COLS in f32, f16 or bf16\n"
		"  --hot         one copy of the matrix (cache-resident when it fits)\n"
		"SF_REF=1 times the scalar reference kernel.\n",
		MEMBW_DEFAULT_PASSES);
}

int main(int argc, char **argv)
{
	uint64_t threads = 0, size = MEMBW_DEFAULT_SIZE, passes = MEMBW_DEFAULT_PASSES;
	uint64_t rows = 0, cols = 0, mvthreads = 0;
	const char *dtname = NULL;
	enum sf_dtype dt = SF_DTYPE_BF16;
	int matvec = 0, hot = 0;

	sf_cli_start("membw");	/* SF_REF=1 selects the reference */
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return sf_close_stdout() ? SF_EXIT_FAIL : SF_EXIT_OK;
		} else if (!strcmp(a, "--threads") && i + 1 < argc) {
			threads = sf_opt_u64("--threads", argv[++i], 1, 64);
		} else if (!strcmp(a, "--size") && i + 1 < argc) {
			size = sf_opt_u64("--size", argv[++i], 1 << 20, 1ull << 40);
		} else if (!strcmp(a, "--passes") && i + 1 < argc) {
			passes = sf_opt_u64("--passes", argv[++i], 1, 1000);
		} else if (!strcmp(a, "--hot")) {
			hot = 1;
		} else if (!strcmp(a, "--matvec") && i + 4 < argc) {
			matvec = 1;
			rows = sf_opt_u64("ROWS", argv[++i], 1, 1u << 24);
			cols = sf_opt_u64("COLS", argv[++i], 1, 1u << 24);
			dtname = argv[++i];
			mvthreads = sf_opt_u64("THREADS", argv[++i], 1, 64);
		} else {
			sf_usage_error("unknown option or missing value: '%s'", a);
		}
	}
	if (matvec) {
		if (!strcmp(dtname, "f32") || !strcmp(dtname, "F32"))
			dt = SF_DTYPE_F32;
		else if (!strcmp(dtname, "f16") || !strcmp(dtname, "F16"))
			dt = SF_DTYPE_F16;
		else if (!strcmp(dtname, "bf16") || !strcmp(dtname, "BF16"))
			dt = SF_DTYPE_BF16;
		else
			sf_usage_error("DTYPE: '%s' is not f32, f16 or bf16", dtname);
		if (run_matvec((size_t)rows, (size_t)cols, dt, dtname, (int)mvthreads, hot,
			       (size_t)size, (int)passes))
			return SF_EXIT_FAIL;
		return sf_close_stdout() ? SF_EXIT_FAIL : SF_EXIT_OK;
	}

	pick_sum();
	struct read_task *t = calloc(1, sizeof(*t));
	size_t n = (size_t)size & ~(size_t)511;
	char *buf = big_alloc(n);
	if (!t || !buf) {
		sf_error("allocating %zu bytes: %s", n, strerror(ENOMEM));
		return SF_EXIT_FAIL;
	}
	/* touch every page (and give the sum something to read) */
	for (size_t i = 0; i < n; i += 4096)
		memset(buf + i, (int)(i >> 12), n - i < 4096 ? n - i : 4096);
	t->buf = buf;
	t->n = n;
	int status = SF_EXIT_OK;
	for (int k = 1; k <= 2 && status == SF_EXIT_OK; k++) {
		int nt = threads ? (int)threads : k;
		if (run_read(t, nt, (int)passes))
			status = SF_EXIT_FAIL;
		if (threads)
			break;
	}
	free(buf);
	free(t);
	return sf_close_stdout() ? SF_EXIT_FAIL : status;
}
