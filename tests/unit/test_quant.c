/* The quantized blocks: q8, q6 and q4 round trips within the format's
 * bound (rtn: every weight within scale / 2 of its source; search: no
 * block's squared error above rtn's), degenerate blocks, q6's byte layout
 * as sf-formats(5) gives it, and the column-accumulate kernels of every
 * level the machine has equal to the _ref bit for bit, a pass equal to one
 * token at a time; the integer path over columns and over slabs likewise,
 * and the two equal; the row products of the embedding and head likewise,
 * within their rounding of a float product; inputs too small for 127 /
 * amax give codes 0 on every path, and a NaN input a NaN product. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "base/quant.h"
#include "base/rng.h"
#include "engine/cpu.h"
#include "engine/kernels.h"
#include "engine/kernels_q.h"
#include "engine/kernels_qrows.h"
#include "unit.h"

static uint64_t rng = 7;
static double uniform(void)
{
	return 1.0 - sf_rng_unit(&rng);	/* (0, 1]: log() below stays finite */
}
static float gauss(void)
{
	return (float)(sqrt(-2.0 * log(uniform())) * cos(2.0 * M_PI * uniform()));
}

/* Q6: rows, and its tiles (an image's head held in RAM) */
static const enum sf_dtype qdt[3] = { SF_DTYPE_Q8, SF_DTYPE_Q4, SF_DTYPE_Q6 };

// --- round trips

static double block_sse(const float *w, const float *d, size_t n)
{
	double e = 0.0;
	for (size_t i = 0; i < n; i++)
		e += ((double)w[i] - d[i]) * ((double)w[i] - d[i]);
	return e;
}

static void test_round_trip(enum sf_dtype dt, size_t rows)
{
	const char *dn = sf_dtype_name(dt);
	size_t cb = (size_t)sf_dtype_col_bytes(dt, rows);
	float *w = malloc(rows * sizeof(float)), *d = malloc(rows * sizeof(float)),
	      *d2 = malloc(rows * sizeof(float));
	uint8_t *q = malloc(cb), *q2 = malloc(cb);

	for (size_t i = 0; i < rows; i++)
		w[i] = gauss() * (i % 97 == 3 ? 8.0f : 0.02f);	/* an outlier now and then */
	CHECK(sf_quant_column(q, dt, w, rows, SF_QUANT_RTN) == 0, "%s quantize", dn);
	CHECK(sf_quant_column(q2, dt, w, rows, SF_QUANT_SEARCH) == 0, "%s search", dn);
	sf_dequant_column(d, q, dt, rows);
	sf_dequant_column(d2, q2, dt, rows);
	double sse = 0.0, sse2 = 0.0;
	for (size_t r = 0; r < rows; r += SF_QBLOCK) {
		const uint8_t *b = sf_q_codes_at(q, dt, rows, r / SF_QBLOCK);
		size_t n = rows - r < SF_QBLOCK ? rows - r : SF_QBLOCK;
		float s = sf_quant_scale(q, r / SF_QBLOCK);
		for (size_t i = r; i < r + n; i++)
			CHECK(fabsf(w[i] - d[i]) <= s * 0.5f * (1.0f + 1e-6f),
			      "%s row %zu: %.9g from %.9g, scale %.9g", dn, i, d[i], w[i], s);
		const uint8_t *b2 = sf_q_codes_at(q2, dt, rows, r / SF_QBLOCK);
		for (size_t i = n; i < SF_QBLOCK; i++)
			CHECK(!sf_q_code(b, dt, i) && !sf_q_code(b2, dt, i),
			      "%s rows past the column not zero codes", dn);
		double e = block_sse(w + r, d + r, n), e2 = block_sse(w + r, d2 + r, n);
		CHECK(e2 <= e, "%s block at %zu: search %.9g worse than rtn %.9g", dn, r, e2, e);
		sse += e;
		sse2 += e2;
	}
	printf("%s %zu rows: squared error rtn %.4g, search %.4g\n", dn, rows, sse, sse2);
	free(w), free(d), free(d2), free(q), free(q2);
}

static void test_degenerate(enum sf_dtype dt)
{
	float w[SF_QBLOCK] = { 0 }, d[SF_QBLOCK];
	uint8_t q[SF_Q8_BLOCK_BYTES];

	CHECK(sf_quant_column(q, dt, w, SF_QBLOCK, SF_QUANT_SEARCH) == 0, "zeros");
	sf_dequant_column(d, q, dt, SF_QBLOCK);
	CHECK(!memcmp(w, d, sizeof(w)), "zeros not exact");
	w[5] = 1e-30f;	/* below f16's least scale: rounds to 0 or the least */
	CHECK(sf_quant_column(q, dt, w, SF_QBLOCK, SF_QUANT_RTN) == 0, "tiny");
	sf_dequant_column(d, q, dt, SF_QBLOCK);
	CHECK(fabsf(d[5] - w[5]) <= sf_quant_scale(q, 0) * 0.5f, "tiny off by %g", d[5] - w[5]);
	w[5] = 1e9f;	/* scale beyond f16 */
	CHECK(sf_quant_column(q, dt, w, SF_QBLOCK, SF_QUANT_RTN) == -ERANGE, "huge accepted");
	w[5] = NAN;
	CHECK(sf_quant_column(q, dt, w, SF_QBLOCK, SF_QUANT_RTN) == -ERANGE, "NaN accepted");
	enum sf_quant_method m;
	CHECK(sf_quant_method_parse("search", &m) == 0 && m == SF_QUANT_SEARCH, "parse");
	CHECK(sf_quant_method_parse("RTN", &m) == -1, "parse is exact");
	enum sf_dtype x;
	CHECK(sf_dtype_parse("Q8", &x) == -1, "a model tensor of Q8");
	CHECK(sf_dtype_parse_any("Q4", &x) == 0 && x == SF_DTYPE_Q4, "Q4 by name");
	CHECK(sf_dtype_col_bytes(SF_DTYPE_Q4, 33) == 36 && sf_dtype_col_bytes(SF_DTYPE_Q8, 64) == 68 &&
	      sf_dtype_col_bytes(SF_DTYPE_Q6, 64) == 52, "column bytes");
}

/* Ties round to even as nearbyintf does (scale 1: 7 is max |w| of q4);
 * columns over a pool of three are the columns one by one, and the first
 * column refused is named whichever thread met it. */
static void test_columns(enum sf_dtype dt)
{
	const char *dn = sf_dtype_name(dt);
	const float ties[8] = { 7.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 3.5f };
	const int even[8] = { 7, 0, 2, 2, 0, -2, -2, 4 };
	enum { N = 37, ROWS = 100 };
	size_t cb = (size_t)sf_dtype_col_bytes(dt, ROWS), bad = 0;
	float *w = malloc(N * ROWS * sizeof(float));
	uint8_t *q = malloc(N * cb), *one = malloc(cb), t[SF_Q8_BLOCK_BYTES];
	struct sf_pool *pool = NULL;

	if (dt == SF_DTYPE_Q4) {
		CHECK(sf_quant_column(t, dt, ties, 8, SF_QUANT_RTN) == 0, "ties");
		CHECK(sf_quant_scale(t, 0) == 1.0f, "ties' scale %g", sf_quant_scale(t, 0));
		for (int i = 0; i < 8; i++)
			CHECK(sf_q_code(sf_q_codes_at(t, dt, 8, 0), dt, (size_t)i) == even[i],
			      "%g coded %d, not %d", ties[i],
			      sf_q_code(sf_q_codes_at(t, dt, 8, 0), dt, (size_t)i), even[i]);
	}
	CHECK(sf_pool_create(&pool, 3) == 0, "pool");
	for (size_t i = 0; i < N * ROWS; i++)
		w[i] = gauss() * 0.02f;
	CHECK(sf_quant_columns(q, dt, w, ROWS, ROWS, N, SF_QUANT_SEARCH, pool, &bad) == 0,
	      "%s columns", dn);
	for (size_t j = 0; j < N; j++) {
		CHECK(sf_quant_column(one, dt, w + j * ROWS, ROWS, SF_QUANT_SEARCH) == 0, "column");
		CHECK(!memcmp(one, q + j * cb, cb), "%s column %zu differs over the pool", dn, j);
	}
	w[30 * ROWS + 5] = NAN;
	w[9 * ROWS + 99] = INFINITY;
	CHECK(sf_quant_columns(q, dt, w, ROWS, ROWS, N, SF_QUANT_RTN, pool, &bad) == -ERANGE &&
	      bad == 9, "%s: first column refused %zu, not 9", dn, bad);
	sf_pool_destroy(pool);
	free(w), free(q), free(one);
}

/* Codes -32..31 in order, the scale 1: q6's bytes as sf-formats(5) lays
 * them out, nibbles j | j << 4 and high bits 0, 0, 1, 1 at bits 0..7. */
static void test_q6_layout(void)
{
	float w[SF_QBLOCK];
	uint8_t q[SF_Q6_BLOCK_BYTES];

	for (int i = 0; i < SF_QBLOCK; i++)
		w[i] = (float)(i - 32);
	w[0] = -31.5f;	/* max |w| / 31 is above 1 by a little: rtn rounds the scale up */
	CHECK(sf_quant_column(q, SF_DTYPE_Q6, w, SF_QBLOCK, SF_QUANT_SEARCH) == 0, "q6");
	CHECK(sf_quant_scale(q, 0) == 1.0f, "q6 scale %g", sf_quant_scale(q, 0));
	for (int j = 0; j < 16; j++)
		CHECK(q[2 + j] == (uint8_t)(j | j << 4), "q6 nibble byte %d: 0x%02x", j, q[2 + j]);
	for (int j = 0; j < 8; j++)
		CHECK(q[18 + j] == 0x50, "q6 high byte %d: 0x%02x", j, q[18 + j]);
	CHECK(sf_q6_code(q + 2, 0) == -32 && sf_q6_code(q + 2, 31) == -1, "q6 codes");
	enum sf_dtype x;
	CHECK(sf_dtype_parse_any("Q6", &x) == 0 && x == SF_DTYPE_Q6 && !sf_dtype_is_top(x),
	      "Q6 by name, not a top tier's");
}

// --- kernels

/* ROWS-row columns of random codes, COLS of them at a stride of a few
 * spare bytes (as a bundle's other matrices leave). */
static void check_kernel(const char *isa, enum sf_dtype dt, size_t rows, size_t r0, size_t r1,
			 size_t T, size_t n)
{
	const char *dn = sf_dtype_name(dt);
	size_t stride = (size_t)sf_dtype_col_bytes(dt, rows) + 6, ncols = 40;
	size_t ldx = T > 1 ? (T + SF_BATCH_PAD - 1) / SF_BATCH_PAD * SF_BATCH_PAD : 1,
	       ldy = r1 - r0 + 3;
	uint8_t *C = calloc(ncols, stride);
	float *col = malloc(rows * sizeof(float)), *X = calloc(n * ldx, sizeof(float));
	float *Y = malloc(T * ldy * sizeof(float)), *Yr = malloc(T * ldy * sizeof(float)),
	      *Y1 = malloc(T * ldy * sizeof(float));
	uint32_t *idx = malloc(n * sizeof(uint32_t)), *sel = calloc(n * ldx, sizeof(uint32_t));
	const void **cols = malloc(n * sizeof(*cols)), **tcols = malloc(n * sizeof(*tcols));
	float *txv = malloc(n * sizeof(float));

	for (size_t c = 0; c < ncols; c++) {
		for (size_t i = 0; i < rows; i++)
			col[i] = gauss() * 0.05f;
		CHECK(sf_quant_column(C + c * stride, dt, col, rows, SF_QUANT_RTN) == 0, "quant");
	}
	for (size_t k = 0; k < n; k++) {
		idx[k] = (uint32_t)(uniform() * ncols);
		cols[k] = C + idx[k] * stride;
		for (size_t t = 0; t < T; t++) {
			X[k * ldx + t] = gauss();
			sel[k * ldx + t] = T == 1 || uniform() < 0.6 ? ~0u : 0;
		}
	}
	for (size_t i = 0; i < T * ldy; i++)
		Y[i] = Yr[i] = Y1[i] = gauss();
	const uint32_t *s = T > 1 ? sel : NULL;
	sf_qcolaccum(Y, ldy, r0, r1, rows, cols, 0, dt, X, s, ldx, T, n);
	sf_qcolaccum_ref(Yr, ldy, r0, r1, rows, cols, 0, dt, X, s, ldx, T, n);
	CHECK(!memcmp(Y, Yr, T * ldy * sizeof(float)),
	      "%s %s rows [%zu, %zu) of %zu, %zu tokens: differs from the _ref", isa, dn, r0, r1,
	      rows, T);
	for (size_t t = 0; t < T; t++) {
		size_t k1 = 0;
		for (size_t k = 0; k < n; k++)
			if (sel[k * ldx + t]) {
				tcols[k1] = cols[k];
				txv[k1++] = X[k * ldx + t];
			}
		sf_colaccum_span(Y1 + t * ldy, 1, r0, r1, rows, tcols, 0, dt, txv, NULL, 1, 1, k1);
	}
	CHECK(!memcmp(Y, Y1, T * ldy * sizeof(float)),
	      "%s %s rows [%zu, %zu), %zu tokens: differs from a token at a time", isa, dn, r0, r1,
	      T);
	free(C), free(col), free(X), free(Y), free(Yr), free(Y1), free(idx), free(sel);
	free(cols), free(tcols), free(txv);
}

/* The integer path: n columns at ascending positions (gaps of 1-3, so
 * runs of every length), inputs 0 where a token did not select its
 * column; against the _ref bit for bit, a pass against a token at a time
 * over its own columns, and near the float path. */
static void check_int_kernel(const char *isa, enum sf_dtype dt, size_t rows, size_t r0,
			     size_t r1, size_t T, size_t n)
{
	const char *dn = sf_dtype_name(dt);
	size_t stride = (size_t)sf_dtype_col_bytes(dt, rows) + 6, ncols = 40;
	size_t ldx = T > 1 ? (T + SF_BATCH_PAD - 1) / SF_BATCH_PAD * SF_BATCH_PAD : 1,
	       ldy = r1 - r0 + 3;
	uint8_t *C = calloc(ncols, stride);
	float *col = malloc(rows * sizeof(float)), *X = calloc(n * ldx, sizeof(float));
	float *Y = malloc(T * ldy * sizeof(float)), *Yr = malloc(T * ldy * sizeof(float)),
	      *Y1 = malloc(T * ldy * sizeof(float)), *Yf = calloc(T * ldy, sizeof(float)),
	      *Y0 = malloc(T * ldy * sizeof(float));
	uint32_t *pos = malloc(n * sizeof(uint32_t)), *tpos = malloc(n * sizeof(uint32_t)),
		 *sel = calloc(n * ldx, sizeof(uint32_t));
	const void **cols = malloc(n * sizeof(*cols)), **tcols = malloc(n * sizeof(*tcols));
	float *txv = malloc(n * sizeof(float));

	for (size_t c = 0; c < ncols; c++) {
		for (size_t i = 0; i < rows; i++)
			col[i] = gauss() * 0.05f * (c % 7 == 2 ? 6.0f : 1.0f);
		CHECK(sf_quant_column(C + c * stride, dt, col, rows, SF_QUANT_RTN) == 0, "quant");
	}
	for (size_t k = 0; k < n; k++) {
		pos[k] = (k ? pos[k - 1] : 0) + 1 + (uint32_t)(uniform() * 2.99);
		cols[k] = C + (size_t)(uniform() * ncols) % ncols * stride;
		for (size_t t = 0; t < T; t++) {
			int on = T == 1 || uniform() < 0.6;
			X[k * ldx + t] = on ? gauss() * (k % 11 == 4 ? 20.0f : 1.0f) : 0.0f;
			sel[k * ldx + t] = on ? ~0u : 0;
		}
	}
	for (size_t i = 0; i < T * ldy; i++)
		Y[i] = Yr[i] = Y1[i] = Y0[i] = gauss();
	sf_qcolaccum_int(Y, ldy, r0, r1, rows, cols, pos, 0, dt, X, ldx, T, n);
	sf_qcolaccum_int_ref(Yr, ldy, r0, r1, rows, cols, pos, 0, dt, X, ldx, T, n);
	CHECK(!memcmp(Y, Yr, T * ldy * sizeof(float)),
	      "%s %s int rows [%zu, %zu) of %zu, %zu tokens: differs from the _ref", isa, dn, r0,
	      r1, rows, T);
	for (size_t t = 0; t < T; t++) {
		size_t k1 = 0;
		for (size_t k = 0; k < n; k++)
			if (sel[k * ldx + t]) {
				tcols[k1] = cols[k];
				tpos[k1] = pos[k];
				txv[k1++] = X[k * ldx + t];
			}
		sf_qcolaccum_int(Y1 + t * ldy, 1, r0, r1, rows, tcols, tpos, 0, dt, txv, 1, 1, k1);
	}
	CHECK(!memcmp(Y, Y1, T * ldy * sizeof(float)),
	      "%s %s int rows [%zu, %zu), %zu tokens: differs from a token at a time", isa, dn,
	      r0, r1, T);
	/* against the float path: the error of 8-bit activations, with inputs
	 * 20x the others in every run, steps of 20/127 of the others: about
	 * 2e-3 relative, a case's draw up to 3e-3 (a wrong row or scale is
	 * off by ~1) */
	sf_qcolaccum_ref(Yf, ldy, r0, r1, rows, cols, 0, dt, X, T > 1 ? sel : NULL, ldx, T, n);
	double err = 0.0, norm = 0.0;
	for (size_t t = 0; t < T; t++)
		for (size_t j = 0; j < r1 - r0; j++) {
			double d = (double)(Y[t * ldy + j] - Y0[t * ldy + j]) - Yf[t * ldy + j];
			err += d * d;
			norm += (double)Yf[t * ldy + j] * Yf[t * ldy + j];
		}
	CHECK(err <= 5e-3 * norm, "%s %s int: relative squared error %.3g against the float path",
	      isa, dn, norm > 0 ? err / norm : err);
	free(C), free(col), free(X), free(Y), free(Yr), free(Y1), free(Yf), free(Y0), free(pos);
	free(tpos), free(sel), free(cols), free(tcols), free(txv);
}

/* A slab of np positions, the selected ones all of them (dense runs) or
 * about half: sf_qslab_int against its _ref and against
 * sf_qcolaccum_int over the same columns, bit for bit. */
static void check_slab_kernel(const char *isa, enum sf_dtype dt, size_t rows, size_t r0,
			      size_t r1, size_t T, size_t np, int all)
{
	const char *dn = sf_dtype_name(dt);
	size_t cb = (size_t)sf_dtype_col_bytes(dt, rows), ldy = r1 - r0 + 3, k = 0;
	size_t ldx = T > 1 ? (T + SF_BATCH_PAD - 1) / SF_BATCH_PAD * SF_BATCH_PAD : 1;
	uint8_t *C = malloc(np * cb), *mem = malloc(sf_qslab_bytes(dt, rows, np));
	float *col = malloc(rows * sizeof(float)), *X = calloc(np * ldx, sizeof(float));
	float *Y = malloc(T * ldy * sizeof(float)), *Yr = malloc(T * ldy * sizeof(float)),
	      *Yc = malloc(T * ldy * sizeof(float));
	uint32_t *pos = malloc(np * sizeof(uint32_t));
	const void **cols = malloc(np * sizeof(*cols));
	struct sf_slab sl;

	sf_slab_init(&sl, mem, dt, rows, np);
	for (size_t p = 0; p < np; p++) {
		for (size_t i = 0; i < rows; i++)
			col[i] = gauss() * 0.05f * (p % 5 == 1 ? 4.0f : 1.0f);
		CHECK(sf_quant_column(C + p * cb, dt, col, rows, SF_QUANT_RTN) == 0, "quant");
		sf_qslab_put(&sl, p, C + p * cb);
		if (all || uniform() < 0.5) {
			pos[k] = (uint32_t)p;
			cols[k] = C + p * cb;
			for (size_t t = 0; t < T; t++)
				X[k * ldx + t] = T == 1 || uniform() < 0.7 ? gauss() : 0.0f;
			k++;
		}
	}
	for (size_t i = 0; i < T * ldy; i++)
		Y[i] = Yr[i] = Yc[i] = gauss();
	sf_qslab_int(Y, ldy, r0, r1, &sl, pos, k, X, ldx, T);
	sf_qslab_int_ref(Yr, ldy, r0, r1, &sl, pos, k, X, ldx, T);
	sf_qcolaccum_int_ref(Yc, ldy, r0, r1, rows, cols, pos, 0, dt, X, ldx, T, k);
	CHECK(!memcmp(Y, Yr, T * ldy * sizeof(float)),
	      "%s %s slab rows [%zu, %zu) of %zu, %zu tokens, %s: differs from the _ref", isa, dn,
	      r0, r1, rows, T, all ? "all" : "some");
	CHECK(!memcmp(Y, Yc, T * ldy * sizeof(float)),
	      "%s %s slab rows [%zu, %zu), %zu tokens, %s: differs from the columns", isa, dn, r0,
	      r1, T, all ? "all" : "some");
	free(C), free(mem), free(col), free(X), free(Y), free(Yr), free(Yc), free(pos), free(cols);
}

/* rows rows of cols in dtype dt (tiled: its tiles, rows a multiple of
 * SF_QTILE), T tokens: the level's product equals the _ref's bit for bit,
 * over [r0, r1) as over all rows, with T tokens as one at a time, and lies
 * within its rounding of the float product of the dequantized rows: per
 * block, each input within d_b / 2 of its source. A tile's rows dequantize
 * to the rows packed in it, and unpack to their bytes; Q6's tiles give
 * its rows' floats. */
static void check_rows_kernel(const char *isa, enum sf_dtype dt, size_t rows, size_t cols,
			      size_t r0, size_t r1, size_t T, int tiled)
{
	size_t rb = (size_t)sf_dtype_col_bytes(dt, cols), nb = cols / SF_QBLOCK;
	uint8_t *W = malloc(rows * rb), *P = W;
	float *f = malloc(cols * sizeof(float)), *X = malloc(T * cols * sizeof(float)),
	      *Y = malloc(T * rows * sizeof(float)), *Yr = malloc(T * rows * sizeof(float)),
	      *Y1 = malloc(rows * sizeof(float)), *g = malloc(cols * sizeof(float));

	for (size_t r = 0; r < rows; r++) {
		if (dt == SF_DTYPE_MXFP4) {	/* gpt-oss's blocks: scales 2^-9 to 2^0, any
						 * codes; every fifth row's 2^-127 (subnormal)
						 * to 2^-125 */
			for (size_t b = 0; b < nb; b++)
				W[r * rb + b] = r % 5 == 4 ? (uint8_t)((r + b) % 3)
						: (uint8_t)(118 + (size_t)(uniform() * 10) % 10);
			for (size_t i = nb; i < rb; i++)
				W[r * rb + i] = (uint8_t)((size_t)(uniform() * 256) % 256);
			continue;
		}
		for (size_t c = 0; c < cols; c++)
			f[c] = gauss() * (c % 61 == 5 ? 4.0f : 0.05f);
		CHECK(sf_quant_column(W + r * rb, dt, f, cols, SF_QUANT_SEARCH) == 0, "quantize");
	}
	if (tiled) {	/* the products read P, the bound W's rows */
		P = malloc(rows * rb);
		sf_qtile_pack(P, W, rows, dt, cols);
		for (size_t i = 0; i < rows / SF_QTILE; i++) {
			for (size_t r = 0; r < SF_QTILE; r++) {
				sf_qtile_dequant_row(f, P + i * SF_QTILE * rb, dt, cols, r);
				sf_dequant_column(g, W + (i * SF_QTILE + r) * rb, dt, cols);
				CHECK(!memcmp(f, g, cols * sizeof(float)), "%s tile %zu row %zu: "
				      "dequantizes to another row", sf_dtype_name(dt), i, r);
				uint8_t *u = malloc(rb);
				sf_qtile_unpack_row(u, P + i * SF_QTILE * rb, dt, cols, r);
				CHECK(!memcmp(u, W + (i * SF_QTILE + r) * rb, rb), "%s tile %zu row "
				      "%zu: unpacks to other bytes", sf_dtype_name(dt), i, r);
				free(u);
			}
		}
		dt = sf_dtype_tiled(dt);
	}
	const char *dn = sf_dtype_name(dt);
	for (size_t i = 0; i < T * cols; i++)	/* block 1 of token 0 all zeros */
		X[i] = i >= SF_QBLOCK && i < 2 * SF_QBLOCK ? 0.0f : gauss() * (i % 37 ? 1.0f : 9.0f);
	sf_qmatmul_rows(Y, rows, P, dt, cols, X, cols, T, 0, rows);
	sf_qmatmul_rows_ref(Yr, rows, P, dt, cols, X, cols, T, 0, rows);
	CHECK(!memcmp(Y, Yr, T * rows * sizeof(float)), "%s %s rows: %zu x %zu, %zu tokens: "
	      "differs from ref", isa, dn, rows, cols, T);
	if (dt == SF_DTYPE_Q6X16) {	/* an image's head, tiled where it is held */
		sf_qmatmul_rows_ref(Yr, rows, W, SF_DTYPE_Q6, cols, X, cols, T, 0, rows);
		CHECK(!memcmp(Y, Yr, T * rows * sizeof(float)), "%s %s rows: %zu x %zu, %zu "
		      "tokens: differs from its rows untiled", isa, dn, rows, cols, T);
	}
	for (size_t t = 0; t < T; t++) {
		sf_qmatmul_rows(Y1, 0, P, dt, cols, X + t * cols, cols, 1, r0, r1);
		CHECK(!memcmp(Y1, Y + t * rows + r0, (r1 - r0) * sizeof(float)),
		      "%s %s rows [%zu, %zu) token %zu alone: differs from the pass", isa, dn, r0,
		      r1, t);
		const float *x = X + t * cols;
		for (size_t r = 0; r < rows && t < 6; r++) {	/* the bound: a few tokens */
			double exact = 0.0, bound = 1e-5;
			sf_dequant_column(f, W + r * rb, sf_dtype_untiled(dt), cols);
			for (size_t b = 0; b < nb; b++) {
				float amax = 0.0f;
				for (size_t i = b * SF_QBLOCK; i < (b + 1) * SF_QBLOCK; i++)
					amax = fmaxf(amax, fabsf(x[i]));
				for (size_t i = b * SF_QBLOCK; i < (b + 1) * SF_QBLOCK; i++) {
					exact += (double)f[i] * x[i];
					bound += fabs(f[i]) * (amax / 127.0 * 0.5 + 1e-5 * fabs(x[i]));
				}
			}
			CHECK(fabs(Y[t * rows + r] - exact) <= bound, "%s %s row %zu token %zu: %.9g, "
			      "float %.9g, bound %.3g", isa, dn, r, t, Y[t * rows + r], exact, bound);
		}
	}
	if (P != W)
		free(P);
	free(W), free(f), free(X), free(Y), free(Yr), free(Y1), free(g);
}

/* Activations so small that 127 / amax overflows (a layer norm's
 * subnormal weights in a damaged model give them): every code 0, so the
 * integer paths leave Y as it was (here 0) on every level, where an
 * infinite 127 / amax made codes of x * inf (the _ref's INT_MIN times a
 * code overflowed). A NaN input: the _ref's rows of that token NaN, and
 * the rows products' too, where both went on as if it were 0. */
static void check_extreme_inputs(const char *isa, enum sf_dtype dt)
{
	const char *dn = sf_dtype_name(dt);
	enum { ROWS = 64, N = 40, T = 3, COLS = 64 };
	size_t stride = (size_t)sf_dtype_col_bytes(dt, ROWS), rb = stride;
	uint8_t *C = malloc(N * stride), *W = malloc(ROWS * rb);
	const void *cols[N];
	uint32_t pos[N];
	float col[ROWS], X[N * T], Y[T * ROWS], Yr[T * ROWS], x[T * COLS], y[T * ROWS];

	for (size_t k = 0; k < N; k++) {
		for (size_t i = 0; i < ROWS; i++)
			col[i] = gauss() * 0.05f;
		CHECK(sf_quant_column(C + k * stride, dt, col, ROWS, SF_QUANT_RTN) == 0, "quant");
		cols[k] = C + k * stride;
		pos[k] = (uint32_t)k;
		for (size_t t = 0; t < T; t++)
			X[k * T + t] = (k + t) % 3 ? 1e-38f : -3e-39f;
	}
	memset(Y, 0, sizeof(Y));
	memset(Yr, 0, sizeof(Yr));
	sf_qcolaccum_int(Y, ROWS, 0, ROWS, ROWS, cols, pos, 0, dt, X, T, T, N);
	sf_qcolaccum_int_ref(Yr, ROWS, 0, ROWS, ROWS, cols, pos, 0, dt, X, T, T, N);
	for (size_t i = 0; i < T * ROWS; i++) {
		CHECK(Y[i] == 0.0f, "%s %s int, inputs of 1e-38: row %zu token %zu %g, want 0", isa,
		      dn, i % ROWS, i / ROWS, Y[i]);
		CHECK(Yr[i] == 0.0f, "%s %s int _ref, inputs of 1e-38: row %zu token %zu %g, want 0",
		      isa, dn, i % ROWS, i / ROWS, Yr[i]);
	}
	X[5 * T + 1] = NAN;
	sf_qcolaccum_int_ref(Yr, ROWS, 0, ROWS, ROWS, cols, pos, 0, dt, X, T, T, N);
	for (size_t j = 0; j < ROWS; j++)
		CHECK(isnan(Yr[ROWS + j]) && Yr[j] == 0.0f && Yr[2 * ROWS + j] == 0.0f,
		      "%s %s int _ref, a NaN input of token 1: row %zu %g %g %g", isa, dn, j, Yr[j],
		      Yr[ROWS + j], Yr[2 * ROWS + j]);
	/* the rows products (an image's head, a GGUF's Q8_0 and Q4_0) */
	for (size_t r = 0; r < ROWS; r++) {
		for (size_t c = 0; c < COLS; c++)
			col[c] = gauss() * 0.05f;
		CHECK(sf_quant_column(W + r * rb, dt, col, COLS, SF_QUANT_RTN) == 0, "quant");
	}
	for (size_t i = 0; i < T * COLS; i++)
		x[i] = i % 2 ? 1e-38f : -2e-40f;
	x[COLS + 3] = NAN;
	for (int ref = 0; ref < 2; ref++) {
		(ref ? sf_qmatmul_rows_ref : sf_qmatmul_rows)(y, ROWS, W, dt, COLS, x, COLS, T, 0,
							       ROWS);
		for (size_t r = 0; r < ROWS; r++)
			CHECK(y[r] == 0.0f && isnan(y[ROWS + r]) && y[2 * ROWS + r] == 0.0f,
			      "%s %s rows%s, inputs of 1e-38 and a NaN in token 1: row %zu %g %g %g",
			      isa, dn, ref ? " _ref" : "", r, y[r], y[ROWS + r], y[2 * ROWS + r]);
	}
	free(C), free(W);
}

static void test_kernels(enum sf_isa level)
{
	const char *isa = sf_isa_name(level);
	static const size_t sizes[][3] = {	/* rows, r0, r1 */
		{ 64, 0, 64 }, { 256, 32, 224 }, { 100, 0, 100 }, { 96, 7, 90 }, { 33, 16, 33 },
		{ 128, 16, 48 }, { 64, 3, 5 },
	};
	static const size_t tokens[] = { 1, 2, 7, 10 };

	if (!sf_cpu_has(level)) {
		printf("%s: not supported here, not tested\n", isa);
		return;
	}
	CHECK(sf_cpu_use(level) == 0, "select %s", isa);
	static const size_t row_sizes[][4] = {	/* rows, cols, r0, r1 */
		{ 37, 32, 0, 37 }, { 20, 96, 3, 17 }, { 33, 512, 16, 32 }, { 9, 2080, 1, 8 },
		{ 3, 20000, 0, 3 }, { 40, 2080, 5, 37 },	/* spans of 28 rows */
	};
	/* 37: two roundings of 2,080 inputs (31 tokens, then 6) */
	static const size_t row_tokens[] = { 1, 3, 4, 6, 9, 37 };
	for (int d = 0; d < 3; d++)
		for (size_t i = 0; i < sizeof(row_sizes) / sizeof(row_sizes[0]); i++)
			for (size_t t = 0; t < sizeof(row_tokens) / sizeof(row_tokens[0]); t++)
				check_rows_kernel(isa, qdt[d], row_sizes[i][0], row_sizes[i][1],
						  row_sizes[i][2], row_sizes[i][3], row_tokens[t], 0);
	/* gpt-oss's experts: MXFP4 rows, the codes twice their e2m1 values */
	for (size_t i = 0; i < sizeof(row_sizes) / sizeof(row_sizes[0]); i++)
		for (size_t t = 0; t < sizeof(row_tokens) / sizeof(row_tokens[0]); t++)
			check_rows_kernel(isa, SF_DTYPE_MXFP4, row_sizes[i][0], row_sizes[i][1],
					  row_sizes[i][2], row_sizes[i][3], row_tokens[t], 0);
	/* tiles: whole, cut by the range, one tile; roundings of 2,080 inputs;
	 * rows of 20,000 (three tokens rounded at a time, none on AMX) */
	static const size_t tile_sizes[][4] = {	/* rows, cols, r0, r1 */
		{ 16, 32, 0, 16 }, { 48, 96, 0, 48 }, { 64, 2080, 5, 59 }, { 32, 512, 16, 20 },
		{ 160, 160, 7, 160 }, { 16, 20000, 3, 16 },
	};
	for (int d = 0; d < 3; d++)
		for (size_t i = 0; i < sizeof(tile_sizes) / sizeof(tile_sizes[0]); i++)
			for (size_t t = 0; t < sizeof(row_tokens) / sizeof(row_tokens[0]); t++)
				check_rows_kernel(isa, qdt[d], tile_sizes[i][0], tile_sizes[i][1],
						  tile_sizes[i][2], tile_sizes[i][3], row_tokens[t], 1);
	for (int d = 0; d < 2; d++)
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
			for (size_t t = 0; t < sizeof(tokens) / sizeof(tokens[0]); t++)
				check_kernel(isa, qdt[d], sizes[i][0], sizes[i][1], sizes[i][2],
					     tokens[t], 150);
	static const size_t int_tokens[] = { 1, 3, 4, 9, 17, 29 };
	static const size_t int_sizes[][3] = {	/* rows, r0, r1: chunks of 8, 16 and 32 blocks */
		{ 64, 0, 64 }, { 1056, 0, 1056 }, { 600, 40, 590 }, { 33, 0, 33 }, { 64, 3, 5 },
		{ 2100, 1000, 2099 },
	};
	for (int d = 0; d < 2; d++)
		for (size_t i = 0; i < sizeof(int_sizes) / sizeof(int_sizes[0]); i++)
			for (size_t t = 0; t < sizeof(int_tokens) / sizeof(int_tokens[0]); t++)
				for (size_t n = 1; n <= 150; n += 149)
					check_int_kernel(isa, qdt[d], int_sizes[i][0], int_sizes[i][1],
							 int_sizes[i][2], int_tokens[t], n + t % 2 * 7);
	for (int d = 0; d < 2; d++)
		for (size_t i = 0; i < sizeof(int_sizes) / sizeof(int_sizes[0]); i++)
			for (size_t t = 0; t < sizeof(int_tokens) / sizeof(int_tokens[0]); t++)
				for (int all = 0; all < 2; all++)
					check_slab_kernel(isa, qdt[d], int_sizes[i][0], int_sizes[i][1],
							  int_sizes[i][2], int_tokens[t], 70 + t * 13, all);
	for (int d = 0; d < 2; d++)
		check_extreme_inputs(isa, qdt[d]);
	printf("%s: compared against ref (integer path: %s, rows: %s)\n", isa,
	       sf_qcolaccum_int_kernel(), sf_qmatmul_rows_kernel());
}

int main(void)
{
	for (int d = 0; d < 3; d++) {
		test_round_trip(qdt[d], 4096 + 17);
		test_degenerate(qdt[d]);
	}
	test_q6_layout();
	for (int i = 0; i < SF_NISA; i++)
		test_kernels((enum sf_isa)i);
	if (sf_cpu_has_feature("amx-int8")) {	/* the AVX-512 level's passes without the tiles */
		sf_cpu_use_amx(0);
		printf("avx512 again, AMX's tiles kept out:\n");
		test_kernels(SF_ISA_AVX512);
		sf_cpu_use_amx(1);
	}
	sf_cpu_use_best();
	for (int d = 0; d < 3; d++)	/* last: the kernels' draws stay as they were */
		test_columns(qdt[d]);
	return unit_exit();
}
