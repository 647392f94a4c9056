/* batch: prompt processing against decoding of the dense forward pass,
 * and this machine's f32 FMA peak, for tests/bench/prefill.sh.
 *
 *   batch MODEL_DIR THREADS TOKENS BATCH
 *       {"threads":..,"tokens":..,"batch":..,"decode_tps":..,
 *        "prompt_tps":..,"flops_per_token":..,"prompt_gflops":..}
 *       decode: TOKENS one-token passes; prompt: the same TOKENS in
 *       passes of BATCH (sf_forward_batch, last logits only).
 *   batch --fma THREADS
 *       {"threads":..,"fma_gflops":..}: independent FMA chains on
 *       registers at the best level this CPU has (AVX-512 or AVX2).
 *   batch --colaccum ROWS COLS TOKENS DENSITY
 *       {"tokens":..,"one_gflops":..,"batch_gflops":..}: the sparse
 *       decoder's top-tier product on one thread (CPU time), bf16 columns
 *       of ROWS, each token selecting DENSITY of the COLS at random: a
 *       token at a time (sf_colaccum) against the pass (sf_colaccum_batch),
 *       each the least CPU time of five runs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/pool.h"
#include "engine/cpu.h"
#include "engine/forward.h"
#include "engine/kernels.h"

#include <time.h>

/* CPU seconds of the process: with -t 1 a rate that other load on the
 * machine barely moves (the bench is also run on an idle machine). */
static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define FMA_ITERS 20000000L
#define COLACCUM_REPEATS 5	/* the least CPU time of five */

#if defined(__x86_64__)
/* 12 independent chains cover the FMA latency on two ports */
__attribute__((target("avx512f"))) static float fma512(long n)
{
	__m512 a[12], x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
#pragma GCC unroll 12
	for (int i = 0; i < 12; i++)
		a[i] = _mm512_set1_ps((float)i);
	for (long k = 0; k < n; k++)
#pragma GCC unroll 12
		for (int i = 0; i < 12; i++)
			a[i] = _mm512_fmadd_ps(a[i], x, y);
	__m512 s = a[0];
	for (int i = 1; i < 12; i++)
		s = _mm512_add_ps(s, a[i]);
	return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float fma256(long n)
{
	__m256 a[12], x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
#pragma GCC unroll 12
	for (int i = 0; i < 12; i++)
		a[i] = _mm256_set1_ps((float)i);
	for (long k = 0; k < n; k++)
#pragma GCC unroll 12
		for (int i = 0; i < 12; i++)
			a[i] = _mm256_fmadd_ps(a[i], x, y);
	float out[8], s = 0;
	__m256 t = a[0];
	for (int i = 1; i < 12; i++)
		t = _mm256_add_ps(t, a[i]);
	_mm256_storeu_ps(out, t);
	for (int i = 0; i < 8; i++)
		s += out[i];
	return s;
}
#endif

static volatile float sink;

static void fma_worker(void *arg, int ith, int nth)
{
	(void)arg, (void)ith, (void)nth;
#if defined(__x86_64__)
	sink = sf_cpu_isa() == SF_ISA_AVX512 ? fma512(FMA_ITERS) : fma256(FMA_ITERS);
#endif
}

static int fma_peak(int threads)
{
	struct sf_pool *pool;
	if (sf_pool_create(&pool, threads))
		return 1;
	double t0 = sf_now(), c0 = cpu_now();
	sf_pool_run(pool, fma_worker, NULL);
	double dt = sf_now() - t0, dc = cpu_now() - c0;
	int lanes = sf_cpu_isa() == SF_ISA_AVX512 ? 16 : 8;
	double flops = 2.0 * 12 * lanes * FMA_ITERS * threads;
	printf("{\"threads\":%d,\"isa\":\"%s\",\"fma_gflops\":%.2f,\"fma_gflops_cpu\":%.2f}\n",
	       threads, sf_isa_name(sf_cpu_isa()), flops / dt / 1e9, flops / dc * threads / 1e9);
	sf_pool_destroy(pool);
	return 0;
}

static int colaccum_rate(size_t rows, size_t cols, size_t T, double density)
{
	size_t ldx = (T + SF_BATCH_PAD - 1) / SF_BATCH_PAD * SF_BATCH_PAD, pairs = 0;
	uint16_t *C = malloc(rows * cols * sizeof(uint16_t));
	float *Y = calloc(T * rows, sizeof(float)), *X = calloc(cols * ldx, sizeof(float));
	float *xv = malloc(cols * sizeof(float));
	uint32_t *sel = calloc(cols * ldx, 4);
	const void **col = malloc(cols * sizeof(*col)), **tcol = malloc(cols * sizeof(*tcol));
	uint64_t r = 88172645463325252ull;

	for (size_t i = 0; i < rows * cols; i++) {
		r ^= r << 13, r ^= r >> 7, r ^= r << 17;
		C[i] = (uint16_t)(0x3c00 | (r & 0x3ff));	/* bf16 in [1, 2) */
	}
	for (size_t k = 0; k < cols; k++) {
		col[k] = C + k * rows;
		for (size_t t = 0; t < T; t++) {
			r ^= r << 13, r ^= r >> 7, r ^= r << 17;
			if ((double)(r % 1000000) < density * 1e6) {
				sel[k * ldx + t] = ~0u;
				X[k * ldx + t] = 0.001f;
				pairs++;
			}
		}
	}
	double one = 1e30, batch = 1e30;
	for (int rep = 0; rep < COLACCUM_REPEATS; rep++) {
		double c0 = cpu_now();
		for (size_t t = 0; t < T; t++) {
			size_t n = 0;
			for (size_t k = 0; k < cols; k++)
				if (sel[k * ldx + t]) {
					tcol[n] = col[k];
					xv[n++] = X[k * ldx + t];
				}
			sf_colaccum(Y + t * rows, rows, tcol, 0, SF_DTYPE_BF16, xv, n);
		}
		double c1 = cpu_now();
		sf_colaccum_batch(Y, rows, rows, col, 0, SF_DTYPE_BF16, X, sel, ldx, T, cols);
		double c2 = cpu_now();
		one = c1 - c0 < one ? c1 - c0 : one;
		batch = c2 - c1 < batch ? c2 - c1 : batch;
	}
	double flops = 2.0 * (double)pairs * (double)rows;
	printf("{\"rows\":%zu,\"cols\":%zu,\"tokens\":%zu,\"density\":%g,\"isa\":\"%s\","
	       "\"one_gflops\":%.2f,\"batch_gflops\":%.2f}\n", rows, cols, T, density,
	       sf_isa_name(sf_cpu_isa()), flops / one / 1e9, flops / batch / 1e9);
	free(C), free(Y), free(X), free(xv), free(sel), free(col), free(tcol);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--fma"))
		return fma_peak(atoi(argv[2]));
	if (argc == 6 && !strcmp(argv[1], "--colaccum"))
		return colaccum_rate((size_t)atol(argv[2]), (size_t)atol(argv[3]),
				     (size_t)atol(argv[4]), atof(argv[5]));
	if (argc != 5) {
		fprintf(stderr, "usage: batch MODEL_DIR THREADS TOKENS BATCH | batch --fma THREADS | "
			"batch --colaccum ROWS COLS TOKENS DENSITY\n");
		return 2;
	}
	int threads = atoi(argv[2]), n = atoi(argv[3]), batch = atoi(argv[4]);
	struct sf_model m;
	struct sf_runstate s;
	struct sf_pool *pool;
	struct sf_err e = { 0 };

	if (sf_model_open(&m, argv[1], &e) || sf_state_init_batch(&s, &m.cfg, n, batch, &e) ||
	    sf_pool_create(&pool, threads)) {
		fprintf(stderr, "batch: %s\n", e.msg);
		return 1;
	}
	s.pool = pool;
	int32_t *ids = malloc((size_t)n * sizeof(*ids));
	for (int i = 0; i < n; i++)
		ids[i] = (int32_t)((i * 7919u + 13u) % (unsigned)m.cfg.vocab_size);

	double t0 = sf_now();
	for (int i = 0; i < n; i++)
		sf_forward(&m, &s, ids[i], i);
	double decode = sf_now() - t0;
	t0 = sf_now();
	double c0 = cpu_now();
	for (int i = 0; i < n; i += batch)
		sf_forward_batch(&m, &s, ids + i, n - i < batch ? n - i : batch, i, 0);
	double prompt = sf_now() - t0, prompt_cpu = cpu_now() - c0;

	/* a multiply and an add per weight of the layers; the head once a pass */
	const struct sf_config *c = &m.cfg;
	double per_layer = (double)c->dim * (c->n_heads + 2.0 * c->n_kv_heads) * c->head_dim +
			   (double)c->n_heads * c->head_dim * c->dim + 3.0 * c->dim * c->hidden_dim;
	double flops = 2.0 * per_layer * c->n_layers;
	printf("{\"threads\":%d,\"tokens\":%d,\"batch\":%d,\"decode_tps\":%.2f,\"prompt_tps\":%.2f,"
	       "\"flops_per_token\":%.0f,\"prompt_gflops\":%.2f,\"prompt_gflops_cpu\":%.2f}\n",
	       threads, n, batch, n / decode, n / prompt, flops, flops * n / prompt / 1e9,
	       flops * n / prompt_cpu * threads / 1e9);
	free(ids);
	sf_state_free(&s);
	sf_pool_destroy(pool);
	sf_model_close(&m);
	return 0;
}
