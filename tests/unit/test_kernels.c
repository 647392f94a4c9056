/* Unit test of lib/common/engine/kernels.c: every SIMD variant this CPU supports
 * against the scalar reference within a stated tolerance, the bf16/f16
 * conversions exhaustively, RoPE/RMSNorm/llama3 frequencies against
 * direct double-precision formulas, and weights at any byte offset. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu.h"
#include "engine/kernels.h"
#include "engine/kernels_q.h"
#include "unit.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* The tolerance every SIMD result is held to against the reference: the
 * two sum the same products in a different order, so the difference is
 * bounded by a few ulps of the sum of magnitudes. */
#define TOL_REL 1e-5
#define TOL_ABS 1e-6

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint32_t rnd32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

/* uniform in [-1, 1) */
static float frand(void)
{
	return (float)((double)rnd32() / 2147483648.0 - 1.0);
}

static const enum sf_dtype dtypes[] = { SF_DTYPE_F32, SF_DTYPE_F16, SF_DTYPE_BF16 };
static const char *const dtnames[] = { "f32", "f16", "bf16" };

static size_t esize(enum sf_dtype dt)
{
	return dt == SF_DTYPE_F32 ? 4 : 2;
}

/* n random weights in dt at p; returns them as f32 in wf (as the kernel
 * will see them) */
static void fill_w(void *p, float *wf, enum sf_dtype dt, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float f = frand();
		switch (dt) {
		case SF_DTYPE_F32: memcpy((char *)p + 4 * i, &f, 4); wf[i] = f; break;
		case SF_DTYPE_F16: {
			uint16_t h = sf_f32_to_f16(f);
			memcpy((char *)p + 2 * i, &h, 2);
			wf[i] = sf_f16_to_f32(h);
			break;
		}
		case SF_DTYPE_BF16: {
			uint16_t h = sf_f32_to_bf16(f);
			memcpy((char *)p + 2 * i, &h, 2);
			wf[i] = sf_bf16_to_f32(h);
			break;
		}
		default:
			break;	/* block dtypes: test_quant */
		}
	}
}

static int close_enough(float got, float want, double scale)
{
	return fabs((double)got - want) <= TOL_REL * scale + TOL_ABS;
}

// ----------------------------------------------------------------------------
// conversions

static uint32_t f2u(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static void test_bf16(void)
{
	for (uint32_t h = 0; h < 65536; h++) {
		float f = sf_bf16_to_f32((uint16_t)h);
		CHECK(f2u(f) == h << 16, "bf16 %04x -> %08x", h, f2u(f));
		uint16_t back = sf_f32_to_bf16(f);
		if (isnan(f))
			CHECK(isnan(sf_bf16_to_f32(back)) && (back & 0x8000) == (h & 0x8000),
			      "bf16 NaN %04x -> %04x", h, back);
		else
			CHECK(back == h, "bf16 round trip %04x -> %04x", h, back);
	}
	/* Each midpoint between neighbours (exact in f32) goes to the even
	 * one, one f32 ulp either side to the nearer; 0x7f7f's upper
	 * neighbour is infinity. Both signs. */
	for (uint32_t h = 0; h < 0x7f80; h++) {
		for (uint32_t s = 0; s <= 0x8000; s += 0x8000) {
			uint32_t mid = (h << 16) | 0x8000u;
			uint16_t even = (uint16_t)(((h & 1) ? h + 1 : h) | s);
			uint16_t r = sf_f32_to_bf16(u2f(mid | s << 16));
			CHECK(r == even, "bf16 tie %08x -> %04x, want %04x", mid | s << 16, r, even);
			r = sf_f32_to_bf16(u2f((mid + 1) | s << 16));
			CHECK(r == ((h + 1) | s), "bf16 above tie %08x -> %04x", mid + 1, r);
			r = sf_f32_to_bf16(u2f((mid - 1) | s << 16));
			CHECK(r == (h | s), "bf16 below tie %08x -> %04x", mid - 1, r);
		}
	}
	CHECK(sf_f32_to_bf16(INFINITY) == 0x7f80, "bf16 inf");
	CHECK(sf_f32_to_bf16(-INFINITY) == 0xff80, "bf16 -inf");
	CHECK(sf_f32_to_bf16(u2f(0x7f800001u)) != 0x7f80 &&
	      isnan(sf_bf16_to_f32(sf_f32_to_bf16(u2f(0x7f800001u)))), "bf16 low-payload NaN kept");
}

/* f16 value straight from the definition, for comparison */
static double f16_def(uint16_t h)
{
	int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
	double v;
	if (e == 0)
		v = ldexp(m, -24);
	else if (e == 31)
		v = m ? NAN : INFINITY;
	else
		v = ldexp(1024 + m, e - 25);
	return s ? -v : v;
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f)
{
	return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h)
{
	return _cvtsh_ss(h);
}
#endif

static void test_f16(void)
{
	for (uint32_t h = 0; h < 65536; h++) {
		float f = sf_f16_to_f32((uint16_t)h);
		double d = f16_def((uint16_t)h);
		if (isnan(d))
			CHECK(isnan(f), "f16 %04x not NaN", h);
		else
			CHECK((double)f == d && !!signbit(f) == !!(h & 0x8000),
			      "f16 %04x -> %a, want %a", h, f, d);
		uint16_t back = sf_f32_to_f16(f);
		if (isnan(f))
			CHECK(isnan(sf_f16_to_f32(back)) && (back & 0x8000) == (h & 0x8000),
			      "f16 NaN %04x -> %04x", h, back);
		else
			CHECK(back == h, "f16 round trip %04x -> %04x", h, back);
	}
	/* ties between neighbours, subnormals included; 0x7bff's upper
	 * neighbour is infinity (65520 rounds up to it) */
	for (uint32_t h = 0; h < 0x7c00; h++) {
		double a = f16_def((uint16_t)h);
		double b = h == 0x7bff ? 65536.0 : f16_def((uint16_t)(h + 1));
		float mid = (float)((a + b) / 2);
		CHECK((double)mid == (a + b) / 2, "f16 midpoint %04x not exact", h);
		for (int s = 0; s < 2; s++) {
			float m = s ? -mid : mid;
			uint16_t sg = s ? 0x8000 : 0;
			uint16_t even = (uint16_t)(((h & 1) ? h + 1 : h) | sg);
			uint16_t r = sf_f32_to_f16(m);
			CHECK(r == even, "f16 tie %a -> %04x, want %04x", m, r, even);
			r = sf_f32_to_f16(nextafterf(m, s ? -INFINITY : INFINITY));
			CHECK(r == ((h + 1) | sg), "f16 above tie %a -> %04x", m, r);
			r = sf_f32_to_f16(nextafterf(m, 0.0f));
			CHECK(r == (h | sg), "f16 below tie %a -> %04x", m, r);
		}
	}
	CHECK(sf_f32_to_f16(1e10f) == 0x7c00, "f16 overflow");
	CHECK(sf_f32_to_f16(-1e-10f) == 0x8000, "f16 underflow keeps sign");
	CHECK(sf_f32_to_f16(0x1p-25f) == 0, "f16 half of the least subnormal ties to 0");
	CHECK(sf_f32_to_f16(nextafterf(0x1p-25f, 1)) == 1, "f16 above half rounds up");
	CHECK(sf_f32_to_f16(u2f(0x7f800001u)) != 0x7c00, "f16 low-payload NaN kept");

#if defined(__x86_64__)
	/* random floats over the whole range against the F16C instruction */
	__builtin_cpu_init();
	if (__builtin_cpu_supports("f16c")) {
		int bad = 0;
		for (int i = 0; i < 2000000; i++) {
			uint32_t u = rnd32() ^ (rnd32() << 16);
			/* concentrate on exponents f16 can represent */
			if (i & 1)
				u = (u & 0x807fffffu) | ((100u + rnd32() % 50u) << 23);
			float f = u2f(u);
			if (isnan(f))
				continue;
			if (sf_f32_to_f16(f) != hw_f32_to_f16(f) && bad++ < 5)
				CHECK(0, "f16 %a: %04x, F16C %04x", f, sf_f32_to_f16(f), hw_f32_to_f16(f));
		}
		for (uint32_t h = 0; h < 65536; h++) {
			float a = sf_f16_to_f32((uint16_t)h), b = hw_f16_to_f32((uint16_t)h);
			if (!isnan(b))
				CHECK(f2u(a) == f2u(b), "f16 %04x: %a, F16C %a", h, a, b);
		}
	}
#endif
}

// ----------------------------------------------------------------------------
// matvec and colaccum: the variant selected now against the _ref

static void check_matvec(const char *isa, enum sf_dtype dt, const char *dn,
			 size_t rows, size_t cols, size_t off)
{
	size_t es = esize(dt), n = rows * cols;
	/* off elements of slack in front: tensors inside an mmap are only
	 * element-aligned */
	char *wbuf = malloc((n + off) * es + 1);
	float *wf = malloc((n + 1) * sizeof(float));
	float *xbuf = malloc((cols + off) * sizeof(float));
	float *y = malloc((rows + 1) * sizeof(float)), *yr = malloc((rows + 1) * sizeof(float));
	void *W = wbuf + off * es;
	float *x = xbuf + off;

	fill_w(W, wf, dt, n);
	for (size_t c = 0; c < cols; c++)
		x[c] = frand();
	/* a sub-range of rows too, as threads call it */
	size_t r0 = rows > 2 ? 1 : 0, r1 = rows;
	for (int pass = 0; pass < 2; pass++) {
		size_t a = pass ? r0 : 0, nr = r1 - a;
		y[nr] = yr[nr] = 12345.0f;
		sf_matvec_rows(y, W, dt, cols, x, a, r1);
		sf_matvec_rows_ref(yr, W, dt, cols, x, a, r1);
		CHECK(y[nr] == 12345.0f, "%s matvec %s wrote past row %zu", isa, dn, nr);
		for (size_t r = 0; r < nr; r++) {
			double mag = 0;
			for (size_t c = 0; c < cols; c++)
				mag += fabs((double)wf[(a + r) * cols + c] * x[c]);
			if (!close_enough(y[r], yr[r], mag)) {
				CHECK(0, "%s matvec %s %zux%zu off %zu row %zu: %.9g, ref %.9g",
				      isa, dn, rows, cols, off, a + r, y[r], yr[r]);
				break;
			}
		}
	}
	free(wbuf), free(wf), free(xbuf), free(y), free(yr);
}

static void test_matvec(const char *isa)
{
	static const size_t rowsv[] = { 1, 2, 3, 4, 5, 7, 8, 9, 13 };
	static const size_t bigcols[] = { 511, 1024, 2048, 4097, 5632 };
	for (int d = 0; d < 3; d++) {
		for (size_t ri = 0; ri < sizeof(rowsv) / sizeof(rowsv[0]); ri++)
			for (size_t cols = 1; cols <= 300; cols++)
				check_matvec(isa, dtypes[d], dtnames[d], rowsv[ri], cols, cols & 1);
		for (size_t i = 0; i < sizeof(bigcols) / sizeof(bigcols[0]); i++)
			check_matvec(isa, dtypes[d], dtnames[d], 6, bigcols[i], i & 1);
	}
}

static void check_colaccum(const char *isa, enum sf_dtype dt, const char *dn, size_t m,
			   size_t n, size_t off)
{
	size_t ncol = 40, stride = m + (m % 3), es = esize(dt), total = ncol * stride;
	char *cbuf = malloc((total + off) * es + 1);
	float *cf = malloc(total * sizeof(float));
	float *y = malloc((m + off + 1) * sizeof(float)), *yr = malloc((m + 1) * sizeof(float));
	float *yo = y + off, xv[32];
	uint32_t idx[32];
	const void *cols[32];	/* the columns from cbuf, off elements in */
	void *C = cbuf + off * es;

	fill_w(C, cf, dt, total);
	for (size_t k = 0; k < n; k++) {
		idx[k] = rnd32() % ncol;	/* repeats are allowed */
		cols[k] = cbuf + idx[k] * stride * es;
		xv[k] = frand();
	}
	for (size_t j = 0; j < m; j++)
		yo[j] = yr[j] = frand();
	yo[m] = yr[m] = 12345.0f;
	sf_colaccum(yo, m, cols, off * es, dt, xv, n);
	sf_colaccum_ref(yr, m, cols, off * es, dt, xv, n);
	CHECK(yo[m] == 12345.0f, "%s colaccum %s wrote past m", isa, dn);
	for (size_t j = 0; j < m; j++) {
		double mag = 1.0;	/* |y0| <= 1 */
		for (size_t k = 0; k < n; k++)
			mag += fabs((double)xv[k] * cf[idx[k] * stride + j]);
		if (!close_enough(yo[j], yr[j], mag)) {
			CHECK(0, "%s colaccum %s m %zu n %zu off %zu j %zu: %.9g, ref %.9g",
			      isa, dn, m, n, off, j, yo[j], yr[j]);
			break;
		}
	}
	free(cbuf), free(cf), free(y), free(yr);
}

static void test_colaccum(const char *isa)
{
	static const size_t nv[] = { 0, 1, 3, 4, 5, 8, 17, 32 };
	for (int d = 0; d < 3; d++)
		for (size_t m = 1; m <= 300; m += (m < 40 ? 1 : 7))
			for (size_t i = 0; i < sizeof(nv) / sizeof(nv[0]); i++)
				check_colaccum(isa, dtypes[d], dtnames[d], m, nv[i], m & 1);
	check_colaccum(isa, SF_DTYPE_BF16, "bf16", 2048, 32, 1);
}

/* The batched column-accumulate: every token's rows bit for bit what
 * sf_colaccum gives it over its own columns, at this level (the sparse
 * decoder's passes of several tokens rest on it), and to the _ref (one
 * fused multiply-add per weight everywhere). */
static void check_colaccum_batch(const char *isa, enum sf_dtype dt, const char *dn, size_t m,
				 size_t ntok, size_t n)
{
	size_t ncol = 40, stride = m + 3, es = esize(dt), ldy = m + 5;
	size_t ldx = (ntok + SF_BATCH_PAD - 1) / SF_BATCH_PAD * SF_BATCH_PAD;
	char *C = malloc(ncol * stride * es);
	float *cf = malloc(ncol * stride * sizeof(float));
	float *Y = malloc(ntok * ldy * sizeof(float)), *Y1 = malloc(ntok * ldy * sizeof(float));
	float *Yr = malloc(ntok * ldy * sizeof(float)), *X = calloc(n * ldx, sizeof(float));
	uint32_t *idx = malloc(n * 4), *sel = calloc(n * ldx, 4);
	const void **cols = malloc(n * sizeof(*cols)), **tcols = malloc(n * sizeof(*tcols));
	float *txv = malloc(n * sizeof(float));

	fill_w(C, cf, dt, ncol * stride);
	for (size_t k = 0; k < n; k++) {
		idx[k] = rnd32() % ncol;
		cols[k] = C + idx[k] * stride * es;
		for (size_t t = 0; t < ntok; t++)
			if (rnd32() % 3) {	/* each token selects about 2 columns in 3 */
				sel[k * ldx + t] = ~0u;
				X[k * ldx + t] = frand();
			}
	}
	for (size_t i = 0; i < ntok * ldy; i++)
		Y[i] = Y1[i] = Yr[i] = frand();
	sf_colaccum_batch(Y, ldy, m, cols, 0, dt, X, sel, ldx, ntok, n);
	sf_colaccum_batch_ref(Yr, ldy, m, cols, 0, dt, X, sel, ldx, ntok, n);
	for (size_t t = 0; t < ntok; t++) {
		size_t k1 = 0;
		for (size_t k = 0; k < n; k++)
			if (sel[k * ldx + t]) {
				tcols[k1] = cols[k];
				txv[k1++] = X[k * ldx + t];
			}
		sf_colaccum(Y1 + t * ldy, m, tcols, 0, dt, txv, k1);
	}
	CHECK(memcmp(Y, Y1, ntok * ldy * sizeof(float)) == 0,
	      "%s colaccum_batch %s m %zu tokens %zu: differs from a token at a time", isa, dn, m,
	      ntok);
	CHECK(memcmp(Y, Yr, ntok * ldy * sizeof(float)) == 0,
	      "%s colaccum_batch %s m %zu tokens %zu: differs from the _ref", isa, dn, m, ntok);
	free(C), free(cf), free(Y), free(Y1), free(Yr), free(X), free(sel), free(idx), free(cols);
	free(tcols);
	free(txv);
}

static void test_colaccum_batch(const char *isa)
{
	static const size_t mv[] = { 1, 7, 16, 31, 33, 47, 48, 49, 64, 65, 97, 100, 257 };
	static const size_t tv[] = { 1, 2, 5, 9, 17 };
	for (int d = 0; d < 3; d++)
		for (size_t i = 0; i < sizeof(mv) / sizeof(mv[0]); i++)
			for (size_t t = 0; t < sizeof(tv) / sizeof(tv[0]); t++)
				check_colaccum_batch(isa, dtypes[d], dtnames[d], mv[i], tv[t], 23);
	/* more columns than a block of them */
	check_colaccum_batch(isa, SF_DTYPE_BF16, "bf16", 100, 9, 300);
}

/* A float slab of np positions (tiles of SF_FSLAB_ROWS rows, the last
 * one short when rows is not a multiple) over rows [r0, r1), every
 * position selected or about half: one token and a pass of T, bit for bit
 * sf_colaccum / sf_colaccum_batch over the same columns, and the _ref. */
static void check_fslab(const char *isa, enum sf_dtype dt, const char *dn, size_t rows,
			size_t r0, size_t r1, size_t T, size_t np, int all)
{
	size_t es = esize(dt), ldy = r1 - r0 + 3, k = 0;
	size_t ldx = (T + SF_BATCH_PAD - 1) / SF_BATCH_PAD * SF_BATCH_PAD;
	char *C = malloc(np * rows * es);
	float *cf = malloc(np * rows * sizeof(float)), *X = calloc(np * ldx, sizeof(float));
	float *Y = malloc(T * ldy * sizeof(float)), *Yr = malloc(T * ldy * sizeof(float)),
	      *Yc = malloc(T * ldy * sizeof(float));
	uint8_t *mem = malloc(sf_slab_bytes(dt, rows, np));
	uint32_t *pos = malloc(np * 4), *sel = calloc(np * ldx, 4);
	const void **cols = malloc(np * sizeof(*cols));
	struct sf_slab sl;

	fill_w(C, cf, dt, np * rows);
	sf_slab_init(&sl, mem, dt, rows, np);
	for (size_t p = 0; p < np; p++) {
		sf_slab_put(&sl, p, C + p * rows * es);
		if (all || rnd32() % 2) {
			pos[k] = (uint32_t)p;
			cols[k] = C + p * rows * es;
			/* all: every token selects every position, as the decoder's
			 * dense groups (the strips' path without masks) */
			for (size_t t = 0; t < T; t++)
				if (T == 1 || all || rnd32() % 3) {
					sel[k * ldx + t] = ~0u;
					X[k * ldx + t] = frand();
				}
			k++;
		}
	}
	for (size_t i = 0; i < T * ldy; i++)
		Y[i] = Yr[i] = Yc[i] = frand();
	const uint32_t *sl_sel = T == 1 ? NULL : sel;
	sf_slab_accum(Y, ldy, r0, r1, &sl, pos, k, X, sl_sel, T == 1 ? 1 : ldx, T);
	sf_fslab_accum_ref(Yr, ldy, r0, r1, &sl, pos, k, X, sl_sel, T == 1 ? 1 : ldx, T);
	if (T == 1)
		sf_colaccum(Yc, r1 - r0, cols, r0 * es, dt, X, k);
	else
		sf_colaccum_batch(Yc, ldy, r1 - r0, cols, r0 * es, dt, X, sel, ldx, T, k);
	CHECK(!memcmp(Y, Yr, T * ldy * sizeof(float)),
	      "%s %s slab rows [%zu, %zu) of %zu, %zu tokens, %s: differs from the _ref", isa, dn,
	      r0, r1, rows, T, all ? "all" : "some");
	CHECK(!memcmp(Y, Yc, T * ldy * sizeof(float)),
	      "%s %s slab rows [%zu, %zu) of %zu, %zu tokens, %s: differs from the columns", isa,
	      dn, r0, r1, rows, T, all ? "all" : "some");
	free(C), free(cf), free(X), free(Y), free(Yr), free(Yc), free(mem), free(pos), free(sel);
	free(cols);
}

static void test_fslab(const char *isa)
{
	static const size_t sizes[][3] = {	/* rows, r0, r1 */
		{ 64, 0, 64 }, { 200, 0, 200 }, { 200, 30, 131 }, { 7, 0, 7 }, { 130, 64, 129 },
	};
	static const size_t tv[] = { 1, 3, 9 };
	for (int d = 0; d < 3; d++)
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
			for (size_t t = 0; t < sizeof(tv) / sizeof(tv[0]); t++)
				for (int all = 0; all < 2; all++)
					check_fslab(isa, dtypes[d], dtnames[d], sizes[i][0],
						    sizes[i][1], sizes[i][2], tv[t], 37 + 5 * t, all);
}

// ----------------------------------------------------------------------------
// the vector kernels: ref run first (selected), then isa

/* Gains w, and 1 + w (Gemma's, offset 1) at every other length. */
static void test_rmsnorm(enum sf_isa level)
{
	const char *isa = sf_isa_name(level);
	for (int d = 0; d < 3; d++) {
		for (size_t n = 1; n <= 2048; n += (n < 300 ? 1 : 437)) {
			float offset = (float)(n % 2);
			size_t es = esize(dtypes[d]), off = n & 1;
			char *wb = malloc((n + off) * es);
			float *wf = malloc(n * sizeof(float)), *x = malloc((n + 1) * sizeof(float));
			float *o = malloc(n * sizeof(float)), *oref = malloc(n * sizeof(float));
			float *xo = x + off;
			fill_w(wb + off * es, wf, dtypes[d], n);
			double ss = 0;
			for (size_t i = 0; i < n; i++) {
				xo[i] = 3.0f * frand();
				ss += (double)xo[i] * xo[i];
			}
			double rs = 1.0 / sqrt(ss / (double)n + 1e-5);
			sf_cpu_use(SF_ISA_REF);
			sf_rmsnorm(oref, xo, wb + off * es, dtypes[d], n, 1e-5f, offset);
			sf_cpu_use(level);
			sf_rmsnorm(o, xo, wb + off * es, dtypes[d], n, 1e-5f, offset);
			for (size_t i = 0; i < n; i++) {
				double want = (offset + wf[i]) * xo[i] * rs, mag = fabs(want);
				if (!close_enough(o[i], oref[i], mag) || !close_enough(oref[i], (float)want, mag)) {
					CHECK(0, "%s rmsnorm %s n %zu i %zu: %.9g, ref %.9g, exact %.9g",
					      isa, dtnames[d], n, i, o[i], oref[i], want);
					break;
				}
			}
			/* in place */
			sf_rmsnorm(xo, xo, wb + off * es, dtypes[d], n, 1e-5f, offset);
			CHECK(memcmp(xo, o, n * sizeof(float)) == 0, "%s rmsnorm in place n %zu", isa, n);
			free(wb), free(wf), free(x), free(o), free(oref);
		}
	}
}

/* Weights at every byte offset, as a tensor sits in its file's mapping
 * behind a safetensors header not padded to 8 or in a GGUF of alignment
 * 1: matvec, colaccum and rmsnorm give the floats of the same weights
 * aligned (the _ref's and the SIMD tails' element loads were misaligned
 * there: UBSan's report under SANITIZE=1). */
static void test_unaligned(enum sf_isa level)
{
	enum { ROWS = 5, COLS = 67, N = ROWS * COLS };
	const char *isa = sf_isa_name(level);
	float wf[N], x[COLS], y[ROWS], yu[ROWS], o[COLS], ou[COLS], c[COLS], cu[COLS];

	for (size_t i = 0; i < COLS; i++)
		x[i] = frand();
	for (int d = 0; d < 3; d++) {
		size_t es = esize(dtypes[d]);
		char *A = malloc(N * es), *ub = malloc(N * es + 8);
		fill_w(A, wf, dtypes[d], N);
		for (size_t off = 1; off < 8; off++) {
			char *U = ub + off;
			const void *ca[4], *cb[4];
			memcpy(U, A, N * es);
			sf_matvec_rows(y, A, dtypes[d], COLS, x, 0, ROWS);
			sf_matvec_rows(yu, U, dtypes[d], COLS, x, 0, ROWS);
			CHECK(!memcmp(y, yu, sizeof(y)), "%s matvec %s, weights %zu bytes in", isa,
			      dtnames[d], off);
			sf_rmsnorm(o, x, A, dtypes[d], COLS, 1e-5f, 0.0f);
			sf_rmsnorm(ou, x, U, dtypes[d], COLS, 1e-5f, 0.0f);
			CHECK(!memcmp(o, ou, sizeof(o)), "%s rmsnorm %s, weights %zu bytes in", isa,
			      dtnames[d], off);
			for (size_t k = 0; k < 4; k++) {
				ca[k] = A + k * COLS * es;
				cb[k] = U + k * COLS * es;
			}
			memset(c, 0, sizeof(c));
			memset(cu, 0, sizeof(cu));
			sf_colaccum(c, COLS, ca, 0, dtypes[d], x, 4);
			sf_colaccum(cu, COLS, cb, 0, dtypes[d], x, 4);
			CHECK(!memcmp(c, cu, sizeof(c)), "%s colaccum %s, columns %zu bytes in", isa,
			      dtnames[d], off);
		}
		free(A), free(ub);
	}
}

static void test_softmax(enum sf_isa level)
{
	const char *isa = sf_isa_name(level);
	for (size_t n = 1; n <= 300; n++) {
		float a[301], b[301];
		for (size_t i = 0; i < n; i++)
			a[i] = b[i] = 20.0f * frand();
		if (n > 3)
			a[n / 2] = b[n / 2] = -INFINITY;	/* a masked position */
		if (n > 10)
			a[3] = b[3] = -200.0f;	/* underflows to 0 */
		sf_cpu_use(SF_ISA_REF);
		sf_softmax(b, n);
		sf_cpu_use(level);
		sf_softmax(a, n);
		double sum = 0;
		for (size_t i = 0; i < n; i++) {
			sum += a[i];
			if (!close_enough(a[i], b[i], fabs(b[i]))) {
				CHECK(0, "%s softmax n %zu i %zu: %.9g, ref %.9g", isa, n, i, a[i], b[i]);
				break;
			}
		}
		CHECK(fabs(sum - 1.0) < 1e-5, "%s softmax n %zu sums to %.9g", isa, n, sum);
		if (n > 3)
			CHECK(a[n / 2] == 0.0f, "%s softmax -inf -> %g", isa, a[n / 2]);
	}
}

/* SwiGLU, and GELU's tanh approximation (Gemma's) against torch's
 * formula 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))) in double. */
static void test_glu(enum sf_isa level)
{
	const char *isa = sf_isa_name(level);
	for (int gelu = 0; gelu < 2; gelu++) {
		const char *name = gelu ? "geglu" : "swiglu";
		void (*glu)(float *, const float *, const float *, size_t) =
			gelu ? sf_geglu : sf_swiglu;
		for (size_t n = 1; n <= 300; n++) {
			float g[300], u[300], a[300], b[300];
			for (size_t i = 0; i < n; i++) {
				g[i] = 12.0f * frand();
				u[i] = frand();
			}
			if (n > 4) {
				/* exp(-g) overflows and underflows */
				g[0] = -100.0f, g[1] = 100.0f, g[2] = 0.0f, g[3] = -88.9f;
			}
			sf_cpu_use(SF_ISA_REF);
			glu(b, g, u, n);
			sf_cpu_use(level);
			glu(a, g, u, n);
			for (size_t i = 0; i < n; i++) {
				double x = g[i], y = sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
				double want = (gelu ? 0.5 * x * (1.0 + tanh(y)) : x / (1.0 + exp(-x))) *
					      u[i];
				if (!close_enough(a[i], b[i], fabs(want)) ||
				    !close_enough(b[i], (float)want, fabs(want))) {
					CHECK(0, "%s %s g %.9g u %.9g: %.9g, ref %.9g, exact %.9g",
					      isa, name, g[i], u[i], a[i], b[i], want);
					break;
				}
			}
		}
	}
}

/* The attention rows at this level against the reference, and within the
 * level exactly what one row a call gives: the kernels' own loops over
 * rows and outputs must not change a float (outputs held in registers,
 * four sharing each row, say). */
static void test_attention_rows(enum sf_isa level)
{
	const char *isa = sf_isa_name(level);
	static const size_t ds[] = { 1, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65,
				     127, 128, 129, 136, 200, 256, 300 };
	static const size_t ns[] = { 1, 5, 40 }, nqs[] = { 1, 4, 5 };
	enum { DMAX = 300, NMAX = 40, QMAX = 5, LD = DMAX + 3 };
	static float X[NMAX * LD], q[DMAX], s[QMAX * NMAX], o1[NMAX], o2[NMAX];
	static float y1[QMAX * DMAX], y2[QMAX * DMAX], y3[QMAX * DMAX];

	for (size_t di = 0; di < sizeof ds / sizeof *ds; di++)
		for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
			size_t d = ds[di], n = ns[ni], ld = d + 3, nq = nqs[(di + ni) % 3];
			for (size_t i = 0; i < n * ld; i++)
				X[i] = frand();
			for (size_t i = 0; i < d; i++)
				q[i] = frand();
			for (size_t i = 0; i < nq * DMAX; i++)
				y1[i] = y2[i] = y3[i] = frand();
			for (size_t p = 0; p < nq * NMAX; p++)
				s[p] = frand();
			sf_cpu_use(SF_ISA_REF);
			sf_dot_rows(o2, q, X, ld, n, d, 0.125f);
			sf_axpy_rows(y2, DMAX, s, NMAX, nq, X, ld, n, d);
			sf_cpu_use(level);
			sf_dot_rows(o1, q, X, ld, n, d, 0.125f);
			sf_axpy_rows(y1, DMAX, s, NMAX, nq, X, ld, n, d);
			for (size_t p = 0; p < n; p++) {
				double mag = 0;
				float one;
				for (size_t i = 0; i < d; i++)
					mag += fabs((double)q[i] * X[p * ld + i]) * 0.125;
				sf_dot_rows(&one, q, X + p * ld, 0, 1, d, 1.0f);
				for (size_t j = 0; j < nq; j++)
					sf_axpy_f32(y3 + j * DMAX, s[j * NMAX + p], X + p * ld, d);
				CHECK(close_enough(o1[p], o2[p], mag), "%s dot rows d %zu row %zu: "
				      "%.9g, ref %.9g", isa, d, p, o1[p], o2[p]);
				CHECK(o1[p] == one * 0.125f, "%s dot rows d %zu row %zu: %.9g, alone "
				      "%.9g", isa, d, p, o1[p], one * 0.125f);
			}
			CHECK(memcmp(y1, y3, nq * DMAX * sizeof *y1) == 0, "%s axpy rows d %zu n %zu, "
			      "%zu outputs: not the floats of a row a call", isa, d, n, nq);
			for (size_t i = 0; i < nq * DMAX; i++) {
				size_t j = i / DMAX;
				double mag = fabs(y2[i]);
				for (size_t p = 0; i % DMAX < d && p < n; p++)
					mag += fabs((double)s[j * NMAX + p] * X[p * ld + i % DMAX]);
				if (!close_enough(y1[i], y2[i], mag)) {
					CHECK(0, "%s axpy rows d %zu n %zu output %zu i %zu: %.9g, ref "
					      "%.9g", isa, d, n, j, i % DMAX, y1[i], y2[i]);
					break;
				}
			}
		}
}

// ----------------------------------------------------------------------------
// RoPE and its frequencies

static void test_rope(void)
{
	static const size_t dims[] = { 2, 64, 128 };
	static const int poss[] = { 0, 1, 7, 100, 8191, 131071 };
	float inv[64], v[3 * 128], v0[3 * 128];

	for (size_t di = 0; di < 3; di++) {
		size_t d = dims[di], h = d / 2;
		sf_rope_inv_freq(inv, d, 10000.0f, 0, 0, 0, 0);
		for (size_t i = 0; i < h; i++) {
			double want = pow(10000.0, -(double)(2 * i) / (double)d);
			CHECK(fabs(inv[i] - want) <= 2e-7 * want, "inv_freq d %zu i %zu: %.9g, want %.9g",
			      d, i, inv[i], want);
		}
		/* pairs (i, i + h), or interleaved (2i, 2i + 1): a llama GGUF's rows */
		for (size_t pi = 0; pi < 12; pi++) {
			int inter = pi >= 6, pos = poss[pi % 6];
			for (size_t i = 0; i < 3 * d; i++)
				v[i] = v0[i] = frand();
			sf_rope(v, 3, d, d, inv, 1.0f, pos, inter);	/* three heads */
			for (size_t j = 0; j < 3 * h; j++) {
				/* the angle as torch forms it (a float product), then
				 * exact trigonometry */
				size_t i = j % h, o = j / h * d;
				size_t i1 = o + (inter ? 2 * i : i), i2 = o + (inter ? 2 * i + 1 : i + h);
				double a = (double)((float)pos * inv[i]);
				double c = cos(a), s = sin(a), x1 = v0[i1], x2 = v0[i2];
				double w1 = x1 * c - x2 * s, w2 = x2 * c + x1 * s;
				double tol = 3e-7 * (fabs(x1) + fabs(x2)) + 1e-7;
				CHECK(fabs(v[i1] - w1) <= tol && fabs(v[i2] - w2) <= tol,
				      "rope d %zu pos %d interleaved %d head %zu i %zu: %.9g %.9g, "
				      "want %.9g %.9g", d, pos, inter, j / h, i, v[i1], v[i2], w1, w2);
			}
		}
	}
	/* Llama 3.x: factor 8, low 1, high 4, orig 8192, theta 500000, head
	 * dim 128; expected values from HF's _compute_llama3_parameters in
	 * double. 0-28 keep, 29-34 interpolate, 35-63 are divided by 8. */
	static const struct { int i; double want; } l3[] = {
		{ 0, 1.0 }, { 20, 1.656044008e-02 }, { 28, 3.211445995e-03 },
		{ 29, 2.166570764e-03 }, { 31, 8.567514129e-04 }, { 34, 1.785078128e-04 },
		{ 35, 9.556212354e-05 }, { 63, 3.068925989e-07 },
	};
	sf_rope_inv_freq(inv, 128, 500000.0f, 8.0f, 1.0f, 4.0f, 8192);
	for (size_t k = 0; k < sizeof(l3) / sizeof(l3[0]); k++)
		CHECK(fabs(inv[l3[k].i] - l3[k].want) <= 1e-6 * l3[k].want,
		      "llama3 inv_freq[%d] = %.9e, want %.9e", l3[k].i, inv[l3[k].i], l3[k].want);
}

// ----------------------------------------------------------------------------

/* Odd token and column counts, a column left out, a permutation: each
 * level's output, padding included, equal to the definition's. */
static void test_transpose(enum sf_isa level)
{
	const char *isa = sf_isa_name(level);
	const size_t sizes[][2] = { { 1, 1 }, { 2, 17 }, { 15, 16 }, { 16, 33 }, { 33, 70 },
				    { 47, 5 }, { 64, 64 } };
	for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
		size_t T = sizes[z][0], n = sizes[z][1], width = (T + 15) / 16 * 16 + 16;
		size_t ldi = n + 3, ldo = width + 5;
		float *in = malloc(T * ldi * sizeof(float));
		float *out = malloc(n * ldo * sizeof(float));
		uint32_t *pos = malloc(n * sizeof(uint32_t));
		for (size_t i = 0; i < T * ldi; i++)
			in[i] = frand();
		for (size_t j = 0; j < n; j++)
			pos[j] = (uint32_t)((j * 7 + 3) % n);	/* a permutation when 7 and n are coprime */
		if (n % 7 == 0)
			for (size_t j = 0; j < n; j++)
				pos[j] = (uint32_t)j;
		if (n > 2)
			pos[n / 2] = UINT32_MAX;
		for (size_t i = 0; i < n * ldo; i++)
			out[i] = -1.0f;
		sf_cpu_use(level);
		sf_transpose_columns(out, ldo, pos, in, ldi, T, n, width);
		int bad = 0;
		for (size_t j = 0; j < n && !bad; j++) {
			if (pos[j] == UINT32_MAX)
				continue;
			for (size_t t = 0; t < ldo && !bad; t++) {
				float want = t < T ? in[t * ldi + j] : t < width ? 0.0f : -1.0f;
				float got = out[(size_t)pos[j] * ldo + t];
				if (got != want) {
					CHECK(0, "%s transpose T %zu n %zu column %zu token %zu: %g, want %g",
					      isa, T, n, j, t, got, want);
					bad = 1;
				}
			}
		}
		if (n > 2) {	/* the left-out column's row untouched */
			size_t untouched = 1;
			for (size_t p = 0; p < n; p++) {
				int used = 0;
				for (size_t j = 0; j < n; j++)
					used |= pos[j] == p;
				for (size_t t = 0; t < ldo && !used; t++)
					untouched &= out[p * ldo + t] == -1.0f;
			}
			CHECK(untouched, "%s transpose T %zu n %zu wrote a row no column has", isa, T, n);
		}
		free(in);
		free(out);
		free(pos);
	}
}

static void test_isa(enum sf_isa level)
{
	const char *isa = sf_isa_name(level);
	if (!sf_cpu_has(level)) {
		printf("%s: not supported here, not tested\n", isa);
		CHECK(sf_cpu_use(level) == -ENOTSUP, "%s: selected without the CPU", isa);
		return;
	}
	int rc = sf_cpu_use(level);
	CHECK(rc == 0, "select %s: %d", isa, rc);
	CHECK(sf_cpu_isa() == level, "isa %s after selecting %s", sf_isa_name(sf_cpu_isa()), isa);
	test_matvec(isa);
	test_colaccum(isa);
	test_colaccum_batch(isa);
	test_fslab(isa);
	test_rmsnorm(level);
	test_unaligned(level);
	test_softmax(level);
	test_glu(level);
	test_attention_rows(level);
	test_transpose(level);
	printf("%s: compared against ref\n", isa);
}

int main(void)
{
	printf("dispatch picks %s\n", sf_isa_name(sf_cpu_isa()));
	CHECK(sf_cpu_use(SF_NISA) == -ENOTSUP, "an unknown level accepted");

	test_bf16();
	test_f16();
	test_rope();
	/* ref against itself keeps the harness honest where no SIMD exists */
	for (int i = 0; i < SF_NISA; i++)
		test_isa((enum sf_isa)i);
	sf_cpu_use_best();
	return unit_exit();
}
