/* Middle-tier benchmarks: mean squared error per weight on i.i.d.
 * standard normal columns, trellis encode throughput over the pool, and
 * decode-accumulate throughput against the bf16 column-accumulate, beside
 * the q8 and q4 top tier's.
 * Usage: codes mse COLUMNS | codes encode THREADS [COLUMNS] | codes decode;
 * SF_ISA=avx2 (or ref) runs a lower level than the CPU's best.
 * Prints JSON lines; run by tests/bench/encode.sh. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/pool.h"
#include "engine/codes.h"
#include "engine/cpu.h"
#include "engine/kernels.h"
#include "engine/kernels_q.h"
#include "base/quant.h"
#include "formats/codes.h"
#include "offline/encode.h"

static double clock_s(clockid_t id)
{
	struct timespec t;
	clock_gettime(id, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double now(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

/* CPU seconds of every thread of the process: on a shared machine the
 * rate per CPU second is steadier than the wall clock rate */
static double cpu_now(void)
{
	return clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* column j's values: a splitmix64 stream started at a hash of j, through
 * Box-Muller, so every thread count sees the same independent columns */
static void column(float *x, size_t m, uint64_t j)
{
	uint64_t s = mix(0x5eed0000ull ^ mix(j + 1));
	for (size_t t = 0; t < m; t += 2) {
		uint64_t z1 = mix(s += 0x9e3779b97f4a7c15ull), z2 = mix(s += 0x9e3779b97f4a7c15ull);
		double u1 = ((double)(z1 >> 11) + 0.5) * 0x1p-53, u2 = (double)(z2 >> 11) * 0x1p-53;
		double r = sqrt(-2.0 * log(u1));
		x[t] = (float)(r * cos(2 * M_PI * u2));
		if (t + 1 < m)
			x[t + 1] = (float)(r * sin(2 * M_PI * u2));
	}
}

struct job {
	enum sf_code_method method;
	const float *cb;
	size_t m, ncols;
	struct sf_encoder **enc;
	atomic_size_t next;
	double *sse;	/* (ncols) */
	double *ss;	/* (ncols) */
};

static void worker(void *arg, int ith, int nth)
{
	struct job *J = arg;
	float *x[SF_TRELLIS_LOCKSTEP];
	uint8_t *rec[SF_TRELLIS_LOCKSTEP];
	struct sf_err e;
	(void)nth;
	for (int k = 0; k < SF_TRELLIS_LOCKSTEP; k++) {
		x[k] = malloc(J->m * sizeof(float));
		rec[k] = malloc(sf_codes_col_bytes(J->method, J->m));
	}
	for (;;) {
		size_t j0 = atomic_fetch_add(&J->next, SF_TRELLIS_LOCKSTEP);
		if (j0 >= J->ncols)
			break;
		int n = (int)(J->ncols - j0 < SF_TRELLIS_LOCKSTEP ? J->ncols - j0 : SF_TRELLIS_LOCKSTEP);
		for (int k = 0; k < n; k++) {
			column(x[k], J->m, j0 + (size_t)k);
			double ss = 0;
			for (size_t t = 0; t < J->m; t++)
				ss += (double)x[k][t] * x[k][t];
			J->ss[j0 + (size_t)k] = ss;
		}
		if (sf_encoder_run(J->enc[ith], (const float *const *)x, n, J->m, rec, J->sse + j0, j0, &e))
			fprintf(stderr, "codes: %s\n", e.msg), exit(1);
	}
	for (int k = 0; k < SF_TRELLIS_LOCKSTEP; k++) {
		free(x[k]);
		free(rec[k]);
	}
}

/* One batch of zero columns through each encoder before the clock
 * starts: the first touch of an encoder's scratch (the trellis traceback,
 * 4 KiB per weight of a batch) faults its pages in, which costs as much as
 * the search itself on a virtual machine and is paid once per encoder. */
static void warm(struct sf_encoder **enc, int threads, enum sf_code_method method, size_t m)
{
	float *z = calloc(m, sizeof(float));
	const float *x[SF_TRELLIS_LOCKSTEP];
	uint8_t *rec[SF_TRELLIS_LOCKSTEP];
	struct sf_err e;
	for (int k = 0; k < SF_TRELLIS_LOCKSTEP; k++) {
		x[k] = z;
		rec[k] = malloc(sf_codes_col_bytes(method, m));
	}
	for (int i = 0; i < threads; i++)
		sf_encoder_run(enc[i], x, SF_TRELLIS_LOCKSTEP, m, rec, NULL, 0, &e);
	for (int k = 0; k < SF_TRELLIS_LOCKSTEP; k++)
		free(rec[k]);
	free(z);
}

static void run(enum sf_code_method method, const float *cb, size_t m, size_t ncols, int threads,
		const char *what)
{
	struct sf_pool *pool;
	struct job J = { .method = method, .cb = cb, .m = m, .ncols = ncols };
	J.enc = calloc((size_t)threads, sizeof(*J.enc));
	J.sse = calloc(ncols, sizeof(double));
	J.ss = calloc(ncols, sizeof(double));
	atomic_init(&J.next, 0);
	sf_pool_create(&pool, threads);
	for (int i = 0; i < threads; i++)
		sf_encoder_init(&J.enc[i], method, cb, m);
	warm(J.enc, threads, method, m);
	double t0 = now(), c0 = cpu_now();
	sf_pool_run(pool, worker, &J);
	double dt = now() - t0, dc = cpu_now() - c0;
	double sse = 0, ss = 0;
	for (size_t j = 0; j < ncols; j++) {
		sse += J.sse[j];
		ss += J.ss[j];
	}
	printf("{\"bench\":\"%s\",\"method\":\"%s\",\"length\":%zu,\"columns\":%zu,\"threads\":%d,"
	       "\"mse\":%.5f,\"relative\":%.5f,\"weights_per_s\":%.0f,"
	       "\"weights_per_cpu_s\":%.0f,\"isa\":\"%s\"}\n",
	       what, sf_codes_method_name(method), m, ncols, threads,
	       sse / ((double)m * (double)ncols), sse / ss, (double)m * (double)ncols / dt,
	       (double)m * (double)ncols / dc, sf_isa_name(sf_cpu_isa()));
	fflush(stdout);
	for (int i = 0; i < threads; i++)
		sf_encoder_free(J.enc[i]);
	sf_pool_destroy(pool);
	free(J.enc);
	free(J.sse);
	free(J.ss);
}

/* y (rows m) += the sum over n of the 4096 columns, by bf16 colaccum and
 * by the two kinds of codes, the same selected columns */
static void decode_bench(const float *cb)
{
	enum { M = 1024, NC = 4096, NSEL = 1024, REPS = 20 };
	uint16_t *bf = malloc((size_t)M * NC * 2);
	float *x = malloc(M * sizeof(float)), *y = calloc(M, sizeof(float));
	uint32_t idx[NSEL];
	const void *bcol[NSEL], *qcol[NSEL];	/* the selected columns, bf16 and q8/q4 */
	float xv[NSEL];
	for (size_t j = 0; j < NC; j++) {
		column(x, M, j);
		for (size_t t = 0; t < M; t++)
			bf[j * M + t] = sf_f32_to_bf16(0.02f * x[t]);
	}
	for (int k = 0; k < NSEL; k++) {
		idx[k] = (uint32_t)((k * 2654435761u) % NC);
		bcol[k] = bf + idx[k] * M;
		xv[k] = 0.001f * (float)(k % 17);
	}
	double t0 = now();
	for (int r = 0; r < REPS; r++)
		sf_colaccum(y, M, bcol, 0, SF_DTYPE_BF16, xv, NSEL);
	double tb = now() - t0;
	printf("{\"bench\":\"decode\",\"kernel\":\"colaccum_bf16\",\"weights_per_s\":%.3e,\"isa\":\"%s\"}\n",
	       (double)M * NSEL * REPS / tb, sf_isa_name(sf_cpu_isa()));
	/* the quantized top tier's blocks: the same columns in q8 and q4 */
	for (int q = 0; q < 2; q++) {
		enum sf_dtype dt = q ? SF_DTYPE_Q4 : SF_DTYPE_Q8;
		size_t cb_bytes = (size_t)sf_dtype_col_bytes(dt, M);
		uint8_t *qc = malloc(NC * cb_bytes);
		for (size_t j = 0; j < NC; j++) {
			for (size_t t = 0; t < M; t++)
				x[t] = sf_bf16_to_f32(bf[j * M + t]);
			sf_quant_column(qc + j * cb_bytes, dt, x, M, SF_QUANT_RTN);
		}
		for (int k = 0; k < NSEL; k++)
			qcol[k] = qc + idx[k] * cb_bytes;
		for (int ref = 0; ref < 2; ref++) {
			t0 = now();
			for (int r = 0; r < REPS; r++)
				(ref ? sf_qcolaccum_ref : sf_qcolaccum)(y, M, 0, M, M, qcol, 0, dt, xv, NULL,
									1, 1, NSEL);
			double tq = now() - t0;
			printf("{\"bench\":\"decode\",\"kernel\":\"colaccum_%s%s\",\"weights_per_s\":"
			       "%.3e,\"vs_bf16\":%.3f}\n", q ? "q4" : "q8", ref ? "_ref" : "",
			       (double)M * NSEL * REPS / tq, tb / tq);
		}
		free(qc);
	}
	for (int mth = 0; mth < 2; mth++) {
		enum sf_code_method method = (enum sf_code_method)mth;
		size_t rb = sf_codes_col_bytes(method, M);
		uint8_t *recs = malloc(NC * rb);
		struct sf_encoder *enc;
		struct sf_err e;
		/* random codes are as fast to decode as fitted ones */
		for (size_t j = 0; j < NC * rb; j++)
			recs[j] = (uint8_t)((j * 2654435761u) >> 13);
		for (size_t j = 0; j < NC; j++) {
			recs[j * rb] = 0x00;	/* f16 1.0 = 0x3c00, little-endian */
			recs[j * rb + 1] = 0x3c;
			if (method == SF_CODES_SCALAR) {
				recs[j * rb + 2] = 0x00;
				recs[j * rb + 3] = 0x38;
			}
		}
		(void)enc;
		(void)e;
		struct sf_codes_view v = { method, cb, M, recs, rb };
		for (int ref = 0; ref < 2; ref++) {
			t0 = now();
			for (int r = 0; r < REPS; r++)
				(ref ? sf_codes_colaccum_ref : sf_codes_colaccum)(y, &v, 0, M, idx, xv,
									  NSEL);
			double tc = now() - t0;
			printf("{\"bench\":\"decode\",\"kernel\":\"codes_%s%s\",\"weights_per_s\":%.3e,"
			       "\"vs_bf16\":%.3f}\n", sf_codes_method_name(method), ref ? "_ref" : "",
			       (double)M * NSEL * REPS / tc, tb / tc);
		}
		free(recs);
	}
	free(bf);
	free(x);
	free(y);
}

int main(int argc, char **argv)
{
	float *cb;
	if (argc < 2 || posix_memalign((void **)&cb, 64, SF_TRELLIS_CODEBOOK * sizeof(float))) {
		fprintf(stderr, "usage: codes mse COLUMNS | codes encode THREADS [COLUMNS] | codes decode\n");
		return 2;
	}
	/* SF_ISA=avx2 times a lower level than the CPU's best */
	const char *isa_name = getenv("SF_ISA");
	enum sf_isa isa;
	if (isa_name && (sf_isa_parse(isa_name, &isa) || sf_cpu_use(isa))) {
		fprintf(stderr, "codes: SF_ISA=%s: not a level this CPU runs\n", isa_name);
		return 2;
	}
	sf_trellis_codebook(cb, SF_TRELLIS_DEFAULT_SEED);
	if (strcmp(argv[1], "mse") == 0) {
		size_t n = argc > 2 ? (size_t)atol(argv[2]) : 1000;
		int th = argc > 3 ? atoi(argv[3]) : 2;
		run(SF_CODES_TRELLIS, cb, 4096, n, th, "mse");
		run(SF_CODES_TRELLIS, cb, 256, n, th, "mse");
		run(SF_CODES_SCALAR, cb, 4096, n, th, "mse");
	} else if (strcmp(argv[1], "encode") == 0) {
		int th = argc > 2 ? atoi(argv[2]) : 1;
		size_t n = argc > 3 ? (size_t)atol(argv[3]) : 64;
		run(SF_CODES_TRELLIS, cb, 1024, n, th, "encode");
	} else {
		decode_bench(cb);
	}
	free(cb);
	return 0;
}
