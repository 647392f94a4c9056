/* The quantized top tier's blocks: see quant.h and sf-formats(5). */
#include "base/quant.h"

#include <errno.h>
#include <stdatomic.h>
#include <math.h>
#include <string.h>

#include "base/bytes.h"
#include "base/pool.h"

const char *sf_quant_method_name(enum sf_quant_method m)
{
	return m == SF_QUANT_SEARCH ? "search" : "rtn";
}

int sf_quant_method_parse(const char *name, enum sf_quant_method *m)
{
	if (!strcmp(name, "rtn"))
		*m = SF_QUANT_RTN;
	else if (!strcmp(name, "search"))
		*m = SF_QUANT_SEARCH;
	else
		return -1;
	return 0;
}

const float sf_e2m1[16] = { 0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
			    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f };

const int8_t sf_e2m1_twice[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12 };

float sf_quant_scale(const uint8_t *col, size_t b)
{
	return sf_f16_to_f32(sf_get_le16(sf_q_scale_at(col, b)));
}

float sf_q_int_scale(const uint8_t *row, enum sf_dtype dt, size_t b)
{
	return dt == SF_DTYPE_MXFP4 ? 0.5f * sf_mxfp4_scale(row[b]) : sf_quant_scale(row, b);
}

/* The smallest f16 at least s (s >= 0 finite), or 0x7c00 (inf) past the
 * range: every |w| <= s * qmax then codes within qmax. */
static uint16_t f16_at_least(float s)
{
	uint16_t h = sf_f32_to_f16(s);
	while (h < 0x7c00 && sf_f16_to_f32(h) < s)
		h++;
	return h;
}

static int clampi(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* The codes of n (<= SF_QBLOCK) weights at scale s, 0 for s 0; their
 * squared error. */
static double codes_at(const float *w, size_t n, float s, int qmax, int *q)
{
	double err = 0.0;
	for (size_t i = 0; i < n; i++) {
		q[i] = s > 0.0f ? clampi((int)sf_round_even(w[i] / s), -qmax - 1, qmax) : 0;
		double d = (double)w[i] - (double)((float)q[i] * s);
		err += d * d;
	}
	return err;
}

/* One block: its scale to scale, its codes to codes. */
static int quant_block(uint8_t *scale, uint8_t *codes, enum sf_dtype dt, const float *w,
		       size_t n, enum sf_quant_method m)
{
	const int qmax = sf_q_max(dt), bias = sf_q_bias(dt);
	float amax = 0.0f;
	int q[SF_QBLOCK] = { 0 }, t[SF_QBLOCK] = { 0 };	/* rows past n: code 0 */

	for (size_t i = 0; i < n; i++) {
		if (!isfinite(w[i]))
			return -ERANGE;
		if (fabsf(w[i]) > amax)
			amax = fabsf(w[i]);
	}
	uint16_t h = f16_at_least(amax / (float)qmax);
	if (h >= 0x7c00)
		return -ERANGE;
	if (amax > 0.0f && h == 0)
		h = 1;	/* below the least subnormal: codes of 0 and +-1 */
	double best = codes_at(w, n, sf_f16_to_f32(h), qmax, q);
	for (int k = -10; m == SF_QUANT_SEARCH && amax > 0.0f && k <= 10; k++) {
		uint16_t c = sf_f32_to_f16(amax / ((float)qmax + 0.1f * (float)k));
		if (!c || c >= 0x7c00 || c == h)
			continue;
		double err = codes_at(w, n, sf_f16_to_f32(c), qmax, t);
		if (err < best) {
			best = err;
			h = c;
			memcpy(q, t, sizeof(q));
		}
	}
	sf_put_le16(scale, h);
	if (dt == SF_DTYPE_Q8) {
		for (size_t i = 0; i < SF_QBLOCK; i++)
			codes[i] = (uint8_t)(int8_t)q[i];
		return 0;
	}
	for (size_t i = 0; i < SF_QBLOCK / 2; i++)
		codes[i] = (uint8_t)(((q[i] + bias) & 15) | ((q[i + 16] + bias) & 15) << 4);
	if (dt == SF_DTYPE_Q6)
		for (size_t j = 0; j < 8; j++) {
			codes[16 + j] = 0;
			for (size_t k = 0; k < 4; k++)
				codes[16 + j] |= (uint8_t)(((q[8 * k + j] + bias) >> 4) << (2 * k));
		}
	return 0;
}

int sf_quant_column(uint8_t *dst, enum sf_dtype dt, const float *w, size_t rows,
		    enum sf_quant_method m)
{
	uint8_t *codes = dst + 2 * sf_q_blocks(rows);

	for (size_t b = 0; b < sf_q_blocks(rows); b++) {
		size_t r = b * SF_QBLOCK, n = rows - r < SF_QBLOCK ? rows - r : SF_QBLOCK;
		int ret = quant_block(dst + 2 * b, codes + b * sf_q_code_bytes(dt), dt, w + r, n, m);
		if (ret)
			return ret;
	}
	return 0;
}

struct quant_job {
	uint8_t *dst;
	enum sf_dtype dt;
	const float *w;
	size_t ld, rows, n;
	enum sf_quant_method m;
	_Atomic size_t bad;		/* the first column refused; n: none */
};

static void quant_part(void *arg, int ith, int nth)
{
	struct quant_job *q = arg;
	size_t lo, hi, cb = sf_dtype_col_bytes(q->dt, q->rows);

	sf_pool_split(q->n, 1, ith, nth, &lo, &hi);
	for (size_t j = lo; j < hi; j++)
		if (sf_quant_column(q->dst + j * cb, q->dt, q->w + j * q->ld, q->rows, q->m)) {
			size_t b = atomic_load(&q->bad);
			while (j < b && !atomic_compare_exchange_weak(&q->bad, &b, j))
				;
			return;
		}
}

int sf_quant_columns(uint8_t *dst, enum sf_dtype dt, const float *w, size_t ld, size_t rows,
		     size_t n, enum sf_quant_method m, struct sf_pool *pool, size_t *bad)
{
	struct quant_job q = { .dst = dst, .dt = dt, .w = w, .ld = ld, .rows = rows, .n = n,
			       .m = m, .bad = n };

	sf_pool_run(pool, quant_part, &q);
	*bad = atomic_load(&q.bad);
	return *bad < n ? -ERANGE : 0;
}

void sf_dequant_column(float *w, const uint8_t *src, enum sf_dtype dt, size_t rows)
{
	for (size_t r = 0; r < rows; r++)
		w[r] = sf_q_weight(src, dt, rows, r);
}

/* Q6's high bits, row r's part of a tile's two chunks from the row's
 * eight bytes of them (byte j: columns j, j + 8, j + 16, j + 24 at bits
 * 0, 2, 4, 6), four columns a word: each byte's two bits at a time. */
static void q6_tile_high(uint8_t *codes, const uint8_t *high, size_t r)
{
	uint32_t a, b;	/* the row's bytes 0..3 and 4..7 */

	memcpy(&a, high, 4);
	memcpy(&b, high + 4, 4);
	for (size_t k = 0; k < 2; k++, a >>= 4, b >>= 4) {
		uint32_t v = (a & 0x03030303u) | (b & 0x03030303u) << 2 |
			     (a & 0x0c0c0c0cu) << 2 | (b & 0x0c0c0c0cu) << 4;
		memcpy(codes + 256 + 64 * k + 4 * r, &v, 4);
	}
}

static void q6_untile_high(uint8_t *high, const uint8_t *codes, size_t r)
{
	uint32_t a = 0, b = 0, v;

	for (size_t k = 0; k < 2; k++) {
		memcpy(&v, codes + 256 + 64 * k + 4 * r, 4);
		a |= ((v & 0x03030303u) | (v >> 2 & 0x0c0c0c0cu)) << 4 * k;
		b |= ((v >> 2 & 0x03030303u) | (v >> 4 & 0x0c0c0c0cu)) << 4 * k;
	}
	memcpy(high, &a, 4);
	memcpy(high + 4, &b, 4);
}

/* Row r's bytes of a tile and its row's, block by block, moved one way
 * or the other (to_tile); quant.h's layout. */
static void qtile_move(uint8_t *tile, uint8_t *row, enum sf_dtype dt, size_t cols, size_t r,
		       int to_tile)
{
	size_t nb = cols / SF_QBLOCK, bb = sf_qtile_block_bytes(dt);
	size_t chunks = (dt == SF_DTYPE_Q8 ? SF_QBLOCK : SF_QBLOCK / 2) / 4;

	for (size_t b = 0; b < nb; b++) {
		uint8_t *p = tile + b * bb, *codes = p + 2 * SF_QTILE;
		uint8_t *c = (uint8_t *)sf_q_codes_at(row, dt, cols, b);
		uint8_t *s = row + 2 * b;
		memcpy(to_tile ? p + 2 * r : s, to_tile ? s : p + 2 * r, 2);
		for (size_t h = 0; h < chunks; h++)
			memcpy(to_tile ? codes + 64 * h + 4 * r : c + 4 * h,
			       to_tile ? c + 4 * h : codes + 64 * h + 4 * r, 4);
		if (dt == SF_DTYPE_Q6 && to_tile)
			q6_tile_high(codes, c + SF_QBLOCK / 2, r);
		else if (dt == SF_DTYPE_Q6)
			q6_untile_high(c + SF_QBLOCK / 2, codes, r);
	}
}

void sf_qtile_pack(uint8_t *tiles, const uint8_t *rows, size_t n, enum sf_dtype dt, size_t cols)
{
	size_t rb = (size_t)sf_dtype_col_bytes(dt, cols);

	for (size_t r = 0; r < n; r++)	/* row r % SF_QTILE of tile r / SF_QTILE */
		qtile_move(tiles + r / SF_QTILE * SF_QTILE * rb, (uint8_t *)rows + r * rb, dt, cols,
			   r % SF_QTILE, 1);
}

void sf_qtile_unpack_row(uint8_t *row, const uint8_t *tile, enum sf_dtype dt, size_t cols, size_t r)
{
	qtile_move((uint8_t *)tile, row, dt, cols, r, 0);
}

void sf_qtile_dequant_row(float *w, const uint8_t *tile, enum sf_dtype dt, size_t cols, size_t r)
{
	size_t nb = cols / SF_QBLOCK, bb = sf_qtile_block_bytes(dt);

	for (size_t b = 0; b < nb; b++) {
		const uint8_t *p = tile + b * bb;
		float s = sf_quant_scale(p + 2 * r, 0);
		for (size_t i = 0; i < SF_QBLOCK; i++)
			w[b * SF_QBLOCK + i] = (float)sf_qtile_code(p + 2 * SF_QTILE, dt, r, i) * s;
	}
}
