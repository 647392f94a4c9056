/* Unit test of the batched matrix product (engine/kernels.c,
 * sf_matmul_rows): for every level this CPU has, every dtype, token counts
 * around the register blocks and column counts around every vector width
 * and tail, each (row, token) equals the one-token sf_matvec_rows of that
 * token over the same row range, bit for bit, and the portable reference
 * equals the same at its level; MXFP4 rows give the floats of the BF16
 * rows they widen to at every level, the reference's included. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/quant.h"
#include "base/rng.h"
#include "base/vocab.h"
#include "engine/cpu.h"
#include "engine/kernels.h"
#include "unit.h"

static void fill(void *w, enum sf_dtype dt, size_t n, uint64_t *seed)
{
	for (size_t i = 0; i < n; i++) {
		float f = (float)(sf_rng_unit(seed) * 2.0 - 1.0);
		switch (dt) {
		case SF_DTYPE_F32: ((float *)w)[i] = f; break;
		case SF_DTYPE_F16: ((uint16_t *)w)[i] = sf_f32_to_f16(f); break;
		case SF_DTYPE_BF16: ((uint16_t *)w)[i] = sf_f32_to_bf16(f); break;
		case SF_DTYPE_Q8:
		case SF_DTYPE_Q6:
		case SF_DTYPE_Q4:
		case SF_DTYPE_U8:
		case SF_DTYPE_Q8X16:
		case SF_DTYPE_Q4X16:
		case SF_DTYPE_Q6X16:
		case SF_DTYPE_MXFP4: break;	/* block dtypes: test_quant, mx_case */
		}
	}
}

/* rows [r0, r1) of a rows x cols matrix, T tokens */
static void check_case(enum sf_isa isa, enum sf_dtype dt, size_t rows, size_t cols, size_t T,
		       size_t r0, size_t r1, uint64_t *seed)
{
	void *w = malloc(rows * cols * 4 + 64);
	float *x = malloc(T * (cols + 3) * sizeof(float));
	size_t ldx = cols + 3, ldy = r1 - r0 + 5;
	float *yb = malloc(T * ldy * sizeof(float)), *y1 = malloc(ldy * sizeof(float));

	fill(w, dt, rows * cols, seed);
	fill(x, SF_DTYPE_F32, T * ldx, seed);
	sf_matmul_rows(yb, ldy, w, dt, cols, x, ldx, T, r0, r1);
	for (size_t t = 0; t < T; t++) {
		sf_matvec_rows(y1, w, dt, cols, x + t * ldx, r0, r1);
		if (memcmp(y1, yb + t * ldy, (r1 - r0) * sizeof(float))) {
			CHECK(0, "%s %s: rows %zu..%zu of %zux%zu, token %zu of %zu differs",
			      sf_isa_name(isa), sf_dtype_name(dt), r0, r1, rows, cols, t, T);
			break;
		}
	}
	free(w);
	free(x);
	free(yb);
	free(y1);
}

/* rows [r0, r1) of random MXFP4 rows (every code, scales about 1 and at
 * the ends of e8m0's range that stay finite) against the BF16 rows of
 * the same weights, through sf_matmul_rows and sf_matmul_rows_ref. */
static void mx_case(enum sf_isa isa, size_t rows, size_t cols, size_t T, size_t r0, size_t r1,
		    uint64_t *seed)
{
	size_t rb = (size_t)sf_dtype_col_bytes(SF_DTYPE_MXFP4, cols), nb = cols / SF_QBLOCK;
	uint8_t *mx = malloc(rows * rb);
	uint16_t *bf = malloc(rows * cols * sizeof(uint16_t));
	float *x = malloc(T * cols * sizeof(float));
	float *y[4];

	for (int i = 0; i < 4; i++)
		y[i] = malloc(T * (r1 - r0) * sizeof(float));
	for (size_t r = 0; r < rows; r++)
		for (size_t b = 0; b < nb; b++) {
			uint64_t u = sf_splitmix64(seed);
			uint8_t e = u % 61 == 0 ? 0 : u % 67 == 0 ? 252 : (uint8_t)(118 + u % 20);
			uint8_t *c = mx + r * rb + nb + 16 * b;
			mx[r * rb + b] = e;
			for (size_t j = 0; j < 16; j++)
				c[j] = (uint8_t)sf_splitmix64(seed);
		}
	for (size_t r = 0; r < rows; r++)
		for (size_t j = 0; j < cols; j++) {
			float w = sf_q_weight(mx + r * rb, SF_DTYPE_MXFP4, cols, j);
			bf[r * cols + j] = sf_f32_to_bf16(w);
			if (sf_bf16_to_f32(bf[r * cols + j]) != w) {
				CHECK(0, "MXFP4 weight %g is no bf16", w);
				goto out;
			}
		}
	for (size_t i = 0; i < T * cols; i++)
		x[i] = (float)(sf_rng_unit(seed) * 2.0 - 1.0);
	sf_matmul_rows(y[0], r1 - r0, mx, SF_DTYPE_MXFP4, cols, x, cols, T, r0, r1);
	sf_matmul_rows(y[1], r1 - r0, bf, SF_DTYPE_BF16, cols, x, cols, T, r0, r1);
	sf_matmul_rows_ref(y[2], r1 - r0, mx, SF_DTYPE_MXFP4, cols, x, cols, T, r0, r1);
	sf_matmul_rows_ref(y[3], r1 - r0, bf, SF_DTYPE_BF16, cols, x, cols, T, r0, r1);
	CHECK(!memcmp(y[0], y[1], T * (r1 - r0) * sizeof(float)),
	      "%s MXFP4: rows %zu..%zu of %zux%zu, %zu tokens: not the BF16 rows' floats",
	      sf_isa_name(isa), r0, r1, rows, cols, T);
	CHECK(!memcmp(y[2], y[3], T * (r1 - r0) * sizeof(float)),
	      "ref MXFP4: rows %zu..%zu of %zux%zu, %zu tokens: not the BF16 rows' floats",
	      r0, r1, rows, cols, T);
out:
	for (int i = 0; i < 4; i++)
		free(y[i]);
	free(mx);
	free(bf);
	free(x);
}

int main(void)
{
	static const size_t cols[] = { 1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 257 };
	static const size_t toks[] = { 1, 2, 3, 4, 5, 7, 8, 9, 13, 17 };
	static const enum sf_dtype dts[] = { SF_DTYPE_F32, SF_DTYPE_F16, SF_DTYPE_BF16 };
	uint64_t seed = 7;

	for (int isa = 0; isa < SF_NISA; isa++) {
		if (!sf_cpu_has((enum sf_isa)isa))
			continue;
		sf_cpu_use((enum sf_isa)isa);
		for (size_t d = 0; d < 3; d++)
			for (size_t c = 0; c < sizeof(cols) / sizeof(cols[0]); c++)
				for (size_t t = 0; t < sizeof(toks) / sizeof(toks[0]); t++) {
					/* row ranges: whole, from an offset, short of four */
					check_case(isa, dts[d], 11, cols[c], toks[t], 0, 11, &seed);
					check_case(isa, dts[d], 11, cols[c], toks[t], 1, 10, &seed);
					check_case(isa, dts[d], 11, cols[c], toks[t], 5, 7, &seed);
					/* two groups of four taken together, then one */
					check_case(isa, dts[d], 14, cols[c], toks[t], 0, 14, &seed);
				}
		/* more columns than a block and more tokens than a chunk of
		 * the batched product */
		for (size_t d = 0; d < 3; d++) {
			check_case(isa, dts[d], 14, 1100, 70, 1, 14, &seed);
			check_case(isa, dts[d], 14, 1104, 70, 1, 14, &seed);	/* steps of 16 */
		}
		/* MXFP4: whole blocks; chunks of rows (16 of 4,096 columns) */
		for (size_t t = 0; t < sizeof(toks) / sizeof(toks[0]); t += 3) {
			mx_case(isa, 11, 32, toks[t], 0, 11, &seed);
			mx_case(isa, 11, 96, toks[t], 1, 10, &seed);
			mx_case(isa, 14, 64, toks[t], 5, 7, &seed);
			mx_case(isa, 37, 4096, toks[t], 1, 36, &seed);
		}
		mx_case(isa, 9, SF_MXFP4_COLS_MAX, 2, 0, 9, &seed);
	}
	sf_cpu_use_best();
	return unit_exit();
}
