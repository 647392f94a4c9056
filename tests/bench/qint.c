/* qint: how fast the q8/q4 top tier's kernels stream one token's columns
 * from memory: the integer path over a slab (sf_qslab_int: a group held
 * whole) and over columns (sf_qcolaccum_int: cache slots, read buffers)
 * against the float path (sf_qcolaccum), one and several threads
 * splitting the rows as the sparse decoder does; and the same weights
 * as quantized rows (sf_qmatmul_rows: an image's head) and those rows in
 * tiles of 16 (a GGUF file's Q8_0 or Q4_0, an image's experts). The
 * matrix is copied to fill --size so every pass streams it from memory,
 * as decoding from RAM does. --dtype q6 times the rows and tiles alone
 * (a q4 image's output head as it lies, and tiled where it is held).
 *
 *   qint [--rows R] [--cols C] [--dtype q4|q8|q6] [--threads N]
 *        [--size BYTES] [--passes N] [--tokens T] [--ldy N]
 *       one JSON line per path: {"path":"slab" (or "int", "f32", "rows", "tiles"),"kernel":"avx512vnni",
 *       "rows":..,"cols":..,"tokens":..,"threads":..,"gbps":..,"gmacs":..,
 *       "us_per_matrix":..}
 *       gbps counts the columns' bytes (codes and scales) per second, gmacs
 *       the weights times tokens, the best of the passes. --tokens T > 1
 *       times a pass of T tokens (the prompt's), every token on every
 *       column, and leaves out the float path. --ldy N puts a token's
 *       outputs N floats apart (default the rows): 2,048 rows at --ldy
 *       2048 against 2064 shows what a 4 KiB stride costs a pass.
 *       SF_ISA=avx2 (or ref) times that level's kernels, SF_AMX=0 the
 *       AVX-512 level's without AMX's tiles. */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "base/pool.h"
#include "base/quant.h"
#include "base/rng.h"
#include "engine/cpu.h"
#include "engine/kernels_q.h"
#include "engine/kernels_qrows.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct job {
	size_t rows, cols, off;
	enum sf_dtype dt;
	const void *const *ptr;		/* (cols) the columns of the copy */
	const struct sf_slab *slab;	/* or the copy's slab */
	const uint8_t *rowmat;		/* or its rows (rows, cols), x (T, cols) */
	const uint8_t *tiles;		/* or those rows in tiles */
	const uint32_t *pos;
	const float *x;
	float *y;
	size_t ldx, ldy, T;
	int integer;
};

static void worker(void *arg, int ith, int nth)
{
	const struct job *j = arg;
	size_t lo, hi;

	sf_pool_split(j->rows, SF_QBLOCK, ith, nth, &lo, &hi);
	if (lo >= hi)
		return;
	if (j->rowmat)
		sf_qmatmul_rows(j->y + lo, j->ldy, j->rowmat, j->dt, j->cols, j->x, j->cols, j->T, lo,
				hi);
	else if (j->tiles)
		sf_qmatmul_rows(j->y + lo, j->ldy, j->tiles, sf_dtype_tiled(j->dt), j->cols, j->x,
				j->cols, j->T, lo, hi);
	else if (j->slab)
		sf_qslab_int(j->y + lo, j->ldy, lo, hi, j->slab, j->pos, j->cols, j->x, j->ldx, j->T);
	else if (j->integer)
		sf_qcolaccum_int(j->y + lo, j->ldy, lo, hi, j->rows, j->ptr, j->pos, 0, j->dt, j->x,
				 j->ldx, j->T, j->cols);
	else
		sf_qcolaccum(j->y + lo, 1, lo, hi, j->rows, j->ptr, 0, j->dt, j->x, NULL, 1, 1,
			     j->cols);
}

int main(int argc, char **argv)
{
	size_t rows = 11264, cols = 2048, ldy = 0, size = 1ull << 30, passes = 5, T = 1;
	int threads = 1;
	enum sf_dtype dt = SF_DTYPE_Q4;
	static const struct option lo[] = {
		{ "rows", 1, 0, 'r' }, { "cols", 1, 0, 'c' }, { "dtype", 1, 0, 'd' },
		{ "threads", 1, 0, 't' }, { "size", 1, 0, 's' }, { "passes", 1, 0, 'p' },
		{ "tokens", 1, 0, 'T' }, { "ldy", 1, 0, 'y' }, { 0 },
	};
	for (int c; (c = getopt_long(argc, argv, "", lo, NULL)) != -1;) {
		switch (c) {
		case 'r': rows = strtoull(optarg, NULL, 10); break;
		case 'c': cols = strtoull(optarg, NULL, 10); break;
		case 'd': dt = !strcmp(optarg, "q8") ? SF_DTYPE_Q8
			     : !strcmp(optarg, "q6") ? SF_DTYPE_Q6 : SF_DTYPE_Q4; break;
		case 't': threads = atoi(optarg); break;
		case 's': size = strtoull(optarg, NULL, 10); break;
		case 'p': passes = strtoull(optarg, NULL, 10); break;
		case 'T': T = strtoull(optarg, NULL, 10); break;
		case 'y': ldy = strtoull(optarg, NULL, 10); break;
		default: fprintf(stderr, "usage: see the file's comment\n"); return 2;
		}
	}
	/* SF_ISA=avx2 (or ref) times a sibling on a machine that has more */
	enum sf_isa isa;
	const char *isa_name = getenv("SF_ISA");
	if (isa_name && (sf_isa_parse(isa_name, &isa) || sf_cpu_use(isa))) {
		fprintf(stderr, "qint: SF_ISA=%s: not a level this machine has\n", isa_name);
		return 2;
	}
	/* SF_AMX=0: the AVX-512 level's passes without AMX's tiles */
	const char *amx = getenv("SF_AMX");
	if (amx && !strcmp(amx, "0"))
		sf_cpu_use_amx(0);
	ldy = ldy > rows ? ldy : rows;
	size_t cb = (size_t)sf_dtype_col_bytes(dt, rows), mat = cb * cols;
	size_t copies = size / mat ? size / mat : 1;
	uint8_t *W = NULL;
	if (posix_memalign((void **)&W, 2u << 20, copies * mat))
		return 1;
	madvise(W, copies * mat, MADV_HUGEPAGE);
	size_t ldx = T == 1 ? 1 : (T + SF_BATCH_PAD - 1) / SF_BATCH_PAD * SF_BATCH_PAD;
	float *col = malloc(rows * sizeof(float)), *x = calloc(cols * ldx, sizeof(float)),
	      *y = calloc(ldy * T, sizeof(float));
	const void **ptr = malloc(copies * cols * sizeof(*ptr));
	uint32_t *pos = malloc(cols * sizeof(uint32_t));
	uint64_t rng = 5;
	for (size_t k = 0; k < cols; k++) {
		for (size_t i = 0; i < rows; i++)
			col[i] = (float)(sf_rng_unit(&rng) - 0.5);
		sf_quant_column(W + k * cb, dt, col, rows, SF_QUANT_RTN);
		for (size_t t = 0; t < T; t++)
			x[k * ldx + t] = (float)(sf_rng_unit(&rng) - 0.5);
		pos[k] = (uint32_t)k;
	}
	for (size_t c = 1; c < copies; c++)
		memcpy(W + c * mat, W, mat);
	for (size_t i = 0; i < copies * cols; i++)
		ptr[i] = W + i * cb;
	size_t sb = sf_qslab_bytes(dt, rows, cols);
	uint8_t *S = NULL;
	struct sf_slab *slab = malloc(copies * sizeof(*slab));
	if (posix_memalign((void **)&S, 2u << 20, copies * sb))
		return 1;
	madvise(S, copies * sb, MADV_HUGEPAGE);
	for (size_t c = 0; c < copies && dt != SF_DTYPE_Q6; c++) {	/* no Q6 top tier */
		sf_slab_init(&slab[c], S + c * sb, dt, rows, cols);
		for (size_t k = 0; k < cols; k++)
			sf_qslab_put(&slab[c], k, W + k * cb);
	}
	/* the rows: their own copies, x token by token */
	size_t rb = (size_t)sf_dtype_col_bytes(dt, cols);
	uint8_t *R = NULL;
	float *xr = malloc(T * cols * sizeof(float)), *row = malloc(cols * sizeof(float));
	if (posix_memalign((void **)&R, 2u << 20, copies * rows * rb))
		return 1;
	madvise(R, copies * rows * rb, MADV_HUGEPAGE);
	for (size_t r = 0; r < rows; r++) {
		for (size_t k = 0; k < cols; k++)
			row[k] = (float)(sf_rng_unit(&rng) - 0.5);
		sf_quant_column(R + r * rb, dt, row, cols, SF_QUANT_RTN);
	}
	for (size_t c = 1; c < copies; c++)
		memcpy(R + c * rows * rb, R, rows * rb);
	uint8_t *Tl = NULL;
	if (rows % SF_QTILE || posix_memalign((void **)&Tl, 2u << 20, copies * rows * rb))
		return 1;
	madvise(Tl, copies * rows * rb, MADV_HUGEPAGE);
	sf_qtile_pack(Tl, R, copies * rows, dt, cols);
	for (size_t t = 0; t < T; t++)
		for (size_t k = 0; k < cols; k++)
			xr[t * cols + k] = x[k * ldx + t];
	struct sf_pool *pool = NULL;
	if (sf_pool_create(&pool, threads))
		return 1;
	static const char *const names[] = { "f32", "int", "slab", "rows", "tiles" };
	for (int path = 4; path >= (dt == SF_DTYPE_Q6 ? 3 : T == 1 ? 0 : 1); path--) {
		double best = 1e30;
		for (size_t p = 0; p < passes; p++) {
			double t0 = now_s();
			for (size_t c = 0; c < copies; c++) {
				struct job j = { rows, cols, 0, dt, ptr + c * cols,
						 path == 2 ? &slab[c] : NULL,
						 path == 3 ? R + c * rows * rb : NULL,
						 path == 4 ? Tl + c * rows * rb : NULL, pos,
						 path >= 3 ? xr : x, y, ldx, ldy, T, path >= 1 };
				sf_pool_run(pool, worker, &j);
			}
			double t = (now_s() - t0) / (double)copies;
			best = t < best ? t : best;
		}
		printf("{\"path\":\"%s\",\"kernel\":\"%s\",\"dtype\":\"%s\",\"rows\":%zu,\"cols\":%zu,"
		       "\"tokens\":%zu,\"threads\":%d,\"gbps\":%.2f,\"gmacs\":%.1f,"
		       "\"us_per_matrix\":%.1f}\n",
		       names[path],
		       path >= 3 ? sf_qmatmul_rows_kernel()
		       : path ? sf_qcolaccum_int_kernel() : sf_isa_name(sf_cpu_isa()),
		       sf_dtype_name(dt), rows, cols, T, threads, (double)mat / best / 1e9,
		       (double)rows * (double)cols * (double)T / best / 1e9, best * 1e6);
	}
	sf_pool_destroy(pool);
	free(W), free(S), free(slab), free(col), free(x), free(y), free(ptr), free(pos);
	free(R), free(Tl), free(xr), free(row);
	return 0;
}
