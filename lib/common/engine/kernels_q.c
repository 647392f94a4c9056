/* Column-accumulate over q8 and q4 blocks (see kernels_q.h): the _ref,
 * and AVX2 (strips of 16 rows) and AVX-512 (a whole block of 32 rows)
 * paths compiled through target attributes for one token; a pass of tokens
 * dequantizes a block of columns once, 16 rows at a time, and runs it
 * through sf_colaccum_strips (engine/kernels.h), as the float columns do.
 * Rows outside whole strips go through the _ref, which gives each row the
 * same operations. */
#include "engine/kernels_q.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "base/bytes.h"
#include "base/quant.h"
#include "engine/cpu.h"
#include "engine/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

/* sf_q_code_bytes and sf_q_codes_at for a top tier's dtypes alone (q8,
 * q4): one test where theirs has two (q6), which in the hot loops below
 * cost the q4 decode a third of its speed. */
static inline size_t top_code_bytes(enum sf_dtype dt)
{
	return dt == SF_DTYPE_Q8 ? SF_Q8_BLOCK_BYTES - 2 : SF_Q4_BLOCK_BYTES - 2;
}

static inline const uint8_t *top_codes_at(const uint8_t *col, enum sf_dtype dt, size_t rows,
					  size_t b)
{
	return col + 2 * sf_q_blocks(rows) + b * top_code_bytes(dt);
}

/* The codes of the block that holds row j of a column of rows rows. */
static inline const uint8_t *q_codes(const uint8_t *col, enum sf_dtype dt, size_t rows, size_t j)
{
	return top_codes_at(col, dt, rows, j / SF_QBLOCK);
}

void sf_qcolaccum_ref(float *Y, size_t ldy, size_t r0, size_t r1, size_t rows,
		      const void *const *cols, size_t off, enum sf_dtype dt, const float *X,
		      const uint32_t *sel, size_t ldx, size_t T, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		const uint8_t *col = (const uint8_t *)cols[k] + off;
		for (size_t t = 0; t < T; t++) {
			if (sel && !sel[k * ldx + t])
				continue;
			float x = X[k * ldx + t], *y = Y + t * ldy - r0;
			for (size_t j = r0; j < r1; j++)
				y[j] = fmaf(x, sf_q_weight(col, dt, rows, j), y[j]);
		}
	}
}

/* The rows of [r0, r1) outside the whole strips [s0, s1) of a SIMD path. */
static void edges_ref(float *Y, size_t ldy, size_t r0, size_t r1, size_t s0, size_t s1,
		      size_t rows, const void *const *cols, size_t off, enum sf_dtype dt,
		      const float *X, const uint32_t *sel, size_t ldx, size_t T, size_t n)
{
	if (s0 >= s1) {
		sf_qcolaccum_ref(Y, ldy, r0, r1, rows, cols, off, dt, X, sel, ldx, T, n);
		return;
	}
	if (r0 < s0)
		sf_qcolaccum_ref(Y, ldy, r0, s0, rows, cols, off, dt, X, sel, ldx, T, n);
	if (s1 < r1)
		sf_qcolaccum_ref(Y + (s1 - r0), ldy, s1, r1, rows, cols, off, dt, X, sel, ldx, T, n);
}

size_t sf_qrun_end(const uint32_t *pos, size_t k0, size_t n)
{
	size_t k1 = k0 + 1;
	while (k1 < n && k1 - k0 < SF_QRUN && pos[k1] / SF_QRUN == pos[k0] / SF_QRUN)
		k1++;
	return k1;
}

/* Where the integer path's columns are: column k at cols[k] + off, or
 * position pos[k] of a slab; rows rows of dtype dt, at positions pos[k]. */
struct qsrc {
	const void *const *cols;
	size_t off;
	const struct sf_slab *slab;
	const uint32_t *pos;
	size_t rows;
	enum sf_dtype dt;
};

static inline const uint8_t *qsrc_col(const struct qsrc *q, size_t k)
{
	return (const uint8_t *)q->cols[k] + q->off;
}

/* The columns of a run, positions [k0, k1), into col in whole quads, the
 * last repeated to fill the last quad (its inputs there are 0); the
 * quads. */
static inline size_t run_quads(const struct qsrc *q, size_t k0, size_t k1, const uint8_t **col)
{
	size_t m = k1 - k0, nq = (m + 3) / 4;
	for (size_t k = 0; k < 4 * nq; k++)
		col[k] = qsrc_col(q, k0 + (k < m ? k : m - 1));
	return nq;
}

static const uint8_t *slab_scale_at(const struct sf_slab *s, size_t p, size_t b);
static int slab_code(const struct sf_slab *s, size_t p, size_t j);

/* Column k's scale of block b and code of row j, wherever it is. */
static float qsrc_scale(const struct qsrc *q, size_t k, size_t b)
{
	return q->slab ? sf_quant_scale(slab_scale_at(q->slab, q->pos[k], b), 0)
		       : sf_quant_scale(qsrc_col(q, k), b);
}

static int qsrc_code(const struct qsrc *q, size_t k, size_t j)
{
	return q->slab ? slab_code(q->slab, q->pos[k], j)
		       : sf_q_code(top_codes_at(qsrc_col(q, k), q->dt, q->rows, j / SF_QBLOCK),
				   q->dt, j % SF_QBLOCK);
}

/* The integer path as kernels_q.h states it, one row and run at a time. */
static void qint_ref(float *Y, size_t ldy, size_t r0, size_t r1, const struct qsrc *q,
		     const float *X, size_t ldx, size_t T, size_t n)
{
	const uint32_t *pos = q->pos;

	for (size_t k0 = 0, k1; k0 < n; k0 = k1) {
		k1 = sf_qrun_end(pos, k0, n);
		for (size_t t = 0; t < T; t++) {
			float *y = Y + t * ldy - r0;
			for (size_t j = r0; j < r1; j++) {
				size_t b = j / SF_QBLOCK;
				float v[SF_QRUN], amax = 0.0f;
				for (size_t k = k0; k < k1; k++) {
					v[k - k0] = X[k * ldx + t] * qsrc_scale(q, k, b);
					amax = sf_q8_amax(amax, v[k - k0]);
				}
				/* id 0: no codes; a non-finite v leaves amax / 127,
				 * and so y, non-finite */
				float id = sf_q8_inv_scale(amax);
				int32_t sum = 0;
				for (size_t k = k0; id != 0.0f && k < k1; k++) {
					int qk = (int)nearbyintf(v[k - k0] * id);
					sum += qk * qsrc_code(q, k, j);
				}
				y[j] = fmaf(amax / 127.0f, (float)sum, y[j]);
			}
		}
	}
}

void sf_qcolaccum_int_ref(float *Y, size_t ldy, size_t r0, size_t r1, size_t rows,
			  const void *const *cols, const uint32_t *pos, size_t off,
			  enum sf_dtype dt, const float *X, size_t ldx, size_t T, size_t n)
{
	const struct qsrc q = { .cols = cols, .off = off, .pos = pos, .rows = rows, .dt = dt };
	qint_ref(Y, ldy, r0, r1, &q, X, ldx, T, n);
}

// ----------------------------------------------------------------------------
// slabs: tiles of runs, quads interleaved by row (kernels_q.h)

/* Blocks of tile c of a slab, runs of it, and the bytes of a run in a
 * tile of nb blocks. */
static size_t tile_blocks(const struct sf_slab *s, size_t c)
{
	size_t nb = sf_q_blocks(s->rows) - c * SF_QSLAB_BLOCKS;
	return nb < SF_QSLAB_BLOCKS ? nb : SF_QSLAB_BLOCKS;
}

static size_t slab_runs(size_t n)
{
	return (n + SF_QRUN - 1) / SF_QRUN;
}

static size_t run_bytes(enum sf_dtype dt, size_t nb)
{
	return SF_QRUN * nb * (2 + top_code_bytes(dt));
}

/* Run g of tile c: the tiles before it are whole ones. */
static uint8_t *run_at(const struct sf_slab *s, size_t c, size_t g)
{
	return s->mem + c * slab_runs(s->n) * run_bytes(s->dt, SF_QSLAB_BLOCKS) +
	       g * run_bytes(s->dt, tile_blocks(s, c));
}

/* Block b (of the tile, < nb) of a run's codes: its SF_QRUN / 4 quads. */
static inline const uint8_t *run_codes(const uint8_t *run, enum sf_dtype dt, size_t nb, size_t b)
{
	return run + 2 * SF_QRUN * nb + b * SF_QRUN * top_code_bytes(dt);
}

/* Byte r of a block's codes (the column layout) of position c of a quad,
 * in the quad's interleaved bytes. */
static inline size_t quad_byte(size_t r, size_t c)
{
	return r / 16 * 64 + 4 * (r % 16) + c;
}

size_t sf_qslab_bytes(enum sf_dtype dt, size_t rows, size_t n)
{
	return (size_t)sf_dtype_col_bytes(dt, rows) * SF_QRUN * slab_runs(n);
}

void sf_qslab_put(const struct sf_slab *s, size_t p, const uint8_t *col)
{
	size_t cb = top_code_bytes(s->dt), slot = p % SF_QRUN;
	for (size_t c = 0; c * SF_QSLAB_BLOCKS < sf_q_blocks(s->rows); c++) {
		size_t nb = tile_blocks(s, c), b0 = c * SF_QSLAB_BLOCKS;
		uint8_t *run = run_at(s, c, p / SF_QRUN);
		memcpy(run + 2 * nb * slot, sf_q_scale_at(col, b0), 2 * nb);
		for (size_t b = 0; b < nb; b++) {
			const uint8_t *src = top_codes_at(col, s->dt, s->rows, b0 + b);
			uint8_t *quad = (uint8_t *)run_codes(run, s->dt, nb, b) + slot / 4 * 4 * cb;
			for (size_t r = 0; r < cb; r++)
				quad[quad_byte(r, slot % 4)] = src[r];
		}
	}
}

/* Position p's scale of block b, and its code of row j. */
static const uint8_t *slab_scale_at(const struct sf_slab *s, size_t p, size_t b)
{
	size_t c = b / SF_QSLAB_BLOCKS;
	return run_at(s, c, p / SF_QRUN) + 2 * (tile_blocks(s, c) * (p % SF_QRUN) +
						b % SF_QSLAB_BLOCKS);
}

static int slab_code(const struct sf_slab *s, size_t p, size_t j)
{
	size_t b = j / SF_QBLOCK, c = b / SF_QSLAB_BLOCKS, r = j % SF_QBLOCK;
	const uint8_t *quad = run_codes(run_at(s, c, p / SF_QRUN), s->dt, tile_blocks(s, c),
					b % SF_QSLAB_BLOCKS) +
			      p % SF_QRUN / 4 * 4 * top_code_bytes(s->dt);
	if (s->dt == SF_DTYPE_Q8)
		return (int8_t)quad[quad_byte(r, p % 4)];
	return (int)((quad[quad_byte(r % 16, p % 4)] >> (r / 16 * 4)) & 15) - 8;
}

void sf_qslab_int_ref(float *Y, size_t ldy, size_t r0, size_t r1, const struct sf_slab *s,
		      const uint32_t *pos, size_t k, const float *X, size_t ldx, size_t T)
{
	const struct qsrc q = { .slab = s, .pos = pos, .rows = s->rows, .dt = s->dt };
	qint_ref(Y, ldy, r0, r1, &q, X, ldx, T, k);
}

/* A run of a slab as its kernels take it: the positions of pos[k0..k1)
 * at their slots, and the quads that hold one. */
struct slab_run {
	const uint8_t *run;
	uint8_t slot[SF_QRUN];
	uint8_t quad[SF_QRUN / 4];
	size_t nq;
	/* bytes ahead of its block a kernel asks for memory (sf_cpu_ahead): a
	 * run's blocks are one stream, which the prefetchers alone leave the
	 * loads waiting on (qint, Zen 5, one thread: AVX-512 q4 14-17 GB/s
	 * without, 24-26 with; AVX2 q8 21 and 23, q4 14 and 15) */
	size_t ahead;
};

static void slab_run_of(struct slab_run *r, const struct sf_slab *s, size_t c,
			const uint32_t *pos, size_t k0, size_t k1)
{
	unsigned quads = 0;
	r->run = run_at(s, c, pos[k0] / SF_QRUN);
	r->ahead = sf_cpu_ahead();
	if (k1 - k0 == SF_QRUN) {	/* whole: every slot, in order */
		for (unsigned qd = 0; qd < SF_QRUN / 4; qd++)
			r->quad[qd] = (uint8_t)qd;
		r->nq = SF_QRUN / 4;
		return;
	}
	for (size_t k = k0; k < k1; k++) {
		r->slot[k - k0] = (uint8_t)(pos[k] % SF_QRUN);
		quads |= 1u << (pos[k] % SF_QRUN / 4);
	}
	r->nq = 0;
	for (unsigned qd = 0; qd < SF_QRUN / 4; qd++)
		if (quads >> qd & 1)
			r->quad[r->nq++] = (uint8_t)qd;
}

/* Tokens [t0, t0 + nt) of the run's columns k0..k1 by slot, as the
 * preparations take them (returned, their stride *lx): a whole run's in
 * place; else scattered into xd, xd[slot * nt + t], 0 at the slots of no
 * column. */
static const float *slab_inputs(float *xd, const struct slab_run *r, const float *X, size_t ldx,
				size_t k0, size_t k1, size_t t0, size_t nt, size_t *lx)
{
	if (k1 - k0 == SF_QRUN) {
		*lx = ldx;
		return X + k0 * ldx + t0;
	}
	memset(xd, 0, SF_QRUN * nt * sizeof(float));
	for (size_t k = k0; k < k1; k++)
		for (size_t t = 0; t < nt; t++)
			xd[r->slot[k - k0] * nt + t] = X[k * ldx + t0 + t];
	*lx = nt;
	return xd;
}

/* The rows of [r0, r1) outside the whole blocks [s0, s1) of an integer
 * path. */
static void qint_edges(float *Y, size_t ldy, size_t r0, size_t r1, size_t s0, size_t s1,
		       const struct qsrc *q, const float *X, size_t ldx, size_t T, size_t n)
{
	if (s0 >= s1) {
		qint_ref(Y, ldy, r0, r1, q, X, ldx, T, n);
		return;
	}
	if (r0 < s0)
		qint_ref(Y, ldy, r0, s0, q, X, ldx, T, n);
	if (s1 < r1)
		qint_ref(Y + (s1 - r0), ldy, s1, r1, q, X, ldx, T, n);
}

#if defined(__x86_64__) || defined(__aarch64__)

/* Rows [j0, j0 + nr) of the column at col (of rows rows) as f32 into w,
 * j0 and nr multiples of 16 (a SIMD path's dequantization). */
typedef void qwiden_fn(float *w, const uint8_t *col, enum sf_dtype dt, size_t rows, size_t j0,
		       size_t nr);

struct q_columns {
	const void *const *cols;
	size_t off, rows;
	enum sf_dtype dt;
	qwiden_fn *widen;
};

static void widen_q(const void *ctx, size_t k, size_t j0, size_t nr, float *w, float *xs)
{
	const struct q_columns *q = ctx;
	(void)xs;	/* the scales are in the weights */
	q->widen(w, (const uint8_t *)q->cols[k] + q->off, q->dt, q->rows, j0, nr);
}

/* A pass (sel not NULL): the whole 16-row halves of blocks through the
 * strips' core (engine/kernels.h), each block of columns dequantized once;
 * the rows outside them through the _ref. */
static void qpass(float *Y, size_t ldy, size_t r0, size_t r1, size_t rows,
		  const void *const *cols, size_t off, enum sf_dtype dt, const float *X,
		  const uint32_t *sel, size_t ldx, size_t T, size_t n, qwiden_fn *widen)
{
	size_t s0 = (r0 + 15) / 16 * 16, s1 = r1 / 16 * 16;
	struct q_columns q = { cols, off, rows, dt, widen };

	if (s0 < s1)
		sf_colaccum_strips(Y + (s0 - r0), ldy, s0, s1, widen_q, &q, 0, X, sel, ldx, T, n);
	edges_ref(Y, ldy, r0, r1, s0, s1, rows, cols, off, dt, X, sel, ldx, T, n);
}

#define INL static inline __attribute__((always_inline))

/* The scales and codes of rows [s0, s1) of four columns asked of memory
 * while the four before them are computed: a column in a cache slot or a
 * read buffer is cold, and four short streams leave the prefetchers no
 * time. */
static inline void q_prefetch(const void *const *cols, size_t off, enum sf_dtype dt,
			      size_t rows, size_t s0, size_t s1)
{
	for (int i = 0; i < 4; i++) {
		const uint8_t *c = (const uint8_t *)cols[i] + off;
		for (const uint8_t *p = sf_q_scale_at(c, s0 / SF_QBLOCK);
		     p < sf_q_scale_at(c, (s1 - 1) / SF_QBLOCK + 1); p += 64)
			__builtin_prefetch(p);
		for (const uint8_t *p = q_codes(c, dt, rows, s0); p < q_codes(c, dt, rows, s1 - 1) + 16;
		     p += 64)
			__builtin_prefetch(p);
	}
}

/* The rows of a slab's rows [r0, r1) outside its whole blocks [B0, B1). */
static void qslab_edges(float *Y, size_t ldy, size_t r0, size_t r1, size_t B0, size_t B1,
			const struct sf_slab *s, const uint32_t *pos, size_t n, const float *X,
			size_t ldx, size_t T)
{
	const struct qsrc q = { .slab = s, .pos = pos, .rows = s->rows, .dt = s->dt };
	qint_edges(Y, ldy, r0, r1, B0 * SF_QBLOCK, B1 * SF_QBLOCK, &q, X, ldx, T, n);
}

#endif

#if defined(__x86_64__)

/* Block b's scale by the F16C instruction (exact, as the library's
 * conversion): no call in the loops, which would spill the sums. */
#define QSCALE(col, b) _cvtsh_ss((unsigned short)(sf_q_scale_at(col, b)[0] | \
						  sf_q_scale_at(col, b)[1] << 8))

// ----------------------------------------------------------------------------
// a pass of many tokens (the prompt's, --ppl's windows): both x86 levels'
// frame over a slab or columns, each level's preparations and products

/* A pass (T >= QP_TOKENS), one run over a chunk of at most QP_BLOCKS
 * blocks: the run's codes laid out as a slab's quads (a slab's own, in
 * place); then QP_TOKENS tokens at a time (one a lane) each block's
 * activations quantized, and each quad's weights loaded once for several
 * tokens whose sums stay in registers. A token's floats are the one-token
 * path's (v = x * scale, |v| = |x| * |scale|), so a pass gives each token
 * the one-token path's. */
#define QP_TOKENS 16
/* Blocks of a chunk: a slab's tile, so that a run's inputs are read once
 * a tile (with T tokens they are as many bytes as 16 blocks of q4). */
#define QP_BLOCKS SF_QSLAB_BLOCKS

struct qpass {
	const uint8_t *w[QP_BLOCKS][SF_QRUN / 4];	/* block, quad: a slab's quad bytes */
	uint8_t buf[QP_BLOCKS][SF_QRUN / 4][128];	/* columns' quads made so */
	const uint8_t *h[SF_QRUN];			/* slot: its scales (f16), NULL: none */
	float s[SF_QRUN][QP_BLOCKS];			/* slot, block: the scales */
	float as[SF_QRUN][QP_BLOCKS];			/* and their magnitudes */
	const float *x[SF_QRUN];			/* slot: its inputs in X; NULL: none */
	int32_t a[QP_BLOCKS][SF_QRUN / 4][QP_TOKENS];	/* four slots' codes a token */
	int32_t off[QP_BLOCKS][QP_TOKENS];	/* minus the codes' offset times their sum */
	float d[QP_BLOCKS][QP_TOKENS];
	size_t nq, nb;
};

/* A level's pass over the run set up in p: every token, Y's rows from
 * block 0 of the chunk at y0 (token 0's), tokens ldy apart. */
typedef void qpass_tokens_fn(struct qpass *p, float *y0, size_t ldy, size_t T, enum sf_dtype dt);
/* A level's quads of block b of the columns col[0, 4 * nq) (rows rows)
 * into buf, as a slab lays them out. */
typedef void qpass_quads_fn(uint8_t (*buf)[128], const uint8_t *const *col, size_t nq,
			    size_t rows, size_t b, enum sf_dtype dt);

/* The next run's scales and codes of blocks [b, b + nb), asked of memory
 * while this run computes: the columns sit in cache slots and read
 * buffers anywhere, each visited for a few lines a chunk of blocks. */
static inline void qint_prefetch(const struct qsrc *q, size_t k0, size_t n, size_t b, size_t nb)
{
	const enum sf_dtype dt = q->dt;
	const size_t rows = q->rows;
	if (k0 >= n)
		return;
	for (size_t k = k0, k1 = sf_qrun_end(q->pos, k0, n); k < k1; k++) {
		const uint8_t *c = qsrc_col(q, k);
		__builtin_prefetch(sf_q_scale_at(c, b));
		for (const uint8_t *p = top_codes_at(c, dt, rows, b);
		     p < top_codes_at(c, dt, rows, b + nb); p += 64)
			__builtin_prefetch(p);
	}
}

/* The next run's inputs (from column k1, T tokens) asked of memory while
 * this run computes: with thousands of columns they outgrow the caches
 * (5,632 by 64 tokens: 1.4 MB), and a run reads each column's a line at a
 * time. */
static inline void qpass_ahead(const float *X, size_t ldx, size_t T, const uint32_t *pos,
			       size_t k1, size_t n)
{
	if (k1 >= n)
		return;
	for (size_t k = k1, k2 = sf_qrun_end(pos, k1, n); k < k2; k++)
		for (size_t t = 0; t < T; t += 16)
			__builtin_prefetch(X + k * ldx + t);
}

/* A pass over columns: chunk by chunk, run by run. */
static void qint_pass(qpass_tokens_fn *tokens, qpass_quads_fn *quads, float *Y, size_t ldy,
		      size_t r0, const struct qsrc *q, const float *X, size_t ldx, size_t T,
		      size_t n, size_t B0, size_t B1)
{
	struct qpass p;

	for (size_t b0 = B0; b0 < B1; b0 += QP_BLOCKS) {
		p.nb = B1 - b0 < QP_BLOCKS ? B1 - b0 : QP_BLOCKS;
		for (size_t k0 = 0, k1; k0 < n; k0 = k1) {
			const uint8_t *col[SF_QRUN];
			size_t m = (k1 = sf_qrun_end(q->pos, k0, n)) - k0;
			p.nq = run_quads(q, k0, k1, col);
			qint_prefetch(q, k1, n, b0, p.nb);
			qpass_ahead(X, ldx, T, q->pos, k1, n);
			for (size_t k = 0; k < 4 * p.nq; k++) {
				p.x[k] = k < m ? X + (k0 + k) * ldx : NULL;
				p.h[k] = k < m ? sf_q_scale_at(col[k], b0) : NULL;
			}
			for (size_t i = 0; i < p.nb; i++) {
				quads(p.buf[i], col, p.nq, q->rows, b0 + i, q->dt);
				for (size_t qd = 0; qd < p.nq; qd++)
					p.w[i][qd] = p.buf[i][qd];
			}
			tokens(&p, Y + SF_QBLOCK * b0 - r0, ldy, T, q->dt);
		}
	}
}

/* A pass over a slab's whole blocks [B0, B1): tile by tile (a tile is a
 * chunk), run by run, the run's quads that hold a position. */
static void qslab_pass(qpass_tokens_fn *tokens, float *Y, size_t ldy, size_t r0,
		       const struct sf_slab *s, const uint32_t *pos, size_t n, const float *X,
		       size_t ldx, size_t T, size_t B0, size_t B1)
{
	const enum sf_dtype dt = s->dt;
	const size_t qb = 4 * top_code_bytes(dt);
	struct qpass p;

	for (size_t c = B0 / SF_QSLAB_BLOCKS; c * SF_QSLAB_BLOCKS < B1; c++) {
		size_t base = c * SF_QSLAB_BLOCKS, nb = tile_blocks(s, c);
		size_t e0 = B0 > base ? B0 - base : 0, e1 = B1 - base < nb ? B1 - base : nb;
		p.nb = e1 - e0;
		for (size_t k0 = 0, k1; k0 < n; k0 = k1) {
			struct slab_run r;
			const float *xs[SF_QRUN] = { 0 };
			slab_run_of(&r, s, c, pos, k0, k1 = sf_qrun_end(pos, k0, n));
			qpass_ahead(X, ldx, T, pos, k1, n);
			/* the next run's scales, which a run of many tokens' work
			 * otherwise leaves the hardware's prefetch to miss */
			if (k1 < n) {
				const char *next = (const char *)run_at(s, c, pos[k1] / SF_QRUN);
				for (size_t l = 0; l < 2 * SF_QRUN * nb; l += 64)
					__builtin_prefetch(next + l);
			}
			for (size_t k = k0; k < k1; k++)
				xs[k1 - k0 == SF_QRUN ? k - k0 : r.slot[k - k0]] = X + k * ldx;
			p.nq = r.nq;
			for (size_t a = 0; a < r.nq; a++)
				for (size_t j = 0; j < 4; j++) {
					size_t slot = 4 * r.quad[a] + j;
					p.x[4 * a + j] = xs[slot];
					p.h[4 * a + j] = r.run + 2 * (nb * slot + e0);
				}
			for (size_t i = 0; i < p.nb; i++) {
				const uint8_t *blk = run_codes(r.run, dt, nb, e0 + i);
				for (size_t a = 0; a < r.nq; a++)
					p.w[i][a] = blk + r.quad[a] * qb;
			}
			tokens(&p, Y + SF_QBLOCK * (base + e0) - r0, ldy, T, dt);
		}
	}
}

// ----------------------------------------------------------------------------
// AVX2: 16 rows (half a block) as two vectors of 8

#define T256 __attribute__((target("avx2,fma,f16c")))

/* sf_q8_inv_scale lane by lane: 127 / amax where that is finite, else 0
 * (the test ordered: a NaN fails it). */
INL T256 __m256 inv_scale256(__m256 amax)
{
	__m256 id = _mm256_div_ps(_mm256_set1_ps(127.0f), amax);
	return _mm256_and_ps(_mm256_cmp_ps(id, _mm256_set1_ps(FLT_MAX), _CMP_LE_OQ), id);
}

/* The 16 weights of rows [j0, j0 + 16) (j0 a multiple of 16) of the
 * column at col. */
INL T256 void deq16_256(const uint8_t *col, enum sf_dtype dt, size_t rows, size_t j0,
			__m256 *w0, __m256 *w1)
{
	const uint8_t *b = q_codes(col, dt, rows, j0);
	size_t h = j0 / 16 % 2;
	__m128i c;
	if (dt == SF_DTYPE_Q8) {
		c = _mm_loadu_si128((const __m128i *)(b + 16 * h));
	} else {
		c = _mm_loadu_si128((const __m128i *)b);
		if (h)
			c = _mm_srli_epi16(c, 4);
		c = _mm_sub_epi8(_mm_and_si128(c, _mm_set1_epi8(15)), _mm_set1_epi8(8));
	}
	__m256 s = _mm256_set1_ps(QSCALE(col, j0 / SF_QBLOCK));
	*w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)), s);
	*w1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c, 8))), s);
}

/* One token, NC columns (4 or 1) a sweep down the rows: each column is
 * read in order, so the prefetchers follow NC streams, and y is loaded
 * and stored once a strip for the NC of them. Every row still takes the
 * columns in turn. */
INL T256 void qca256_cols(float *y, size_t r0, size_t s0, size_t s1, size_t rows,
			  const void *const *cols, size_t off, enum sf_dtype dt, const float *X,
			  const int NC)
{
	const uint8_t *col[4];
	__m256 xb[4];
#pragma GCC unroll 4
	for (int i = 0; i < NC; i++)
		col[i] = (const uint8_t *)cols[i] + off, xb[i] = _mm256_set1_ps(X[i]);
	for (size_t j0 = s0; j0 < s1; j0 += 16) {
		__m256 a0 = _mm256_loadu_ps(y + (j0 - r0)), a1 = _mm256_loadu_ps(y + (j0 - r0) + 8);
#pragma GCC unroll 4
		for (int i = 0; i < NC; i++) {
			__m256 w0, w1;
			deq16_256(col[i], dt, rows, j0, &w0, &w1);
			a0 = _mm256_fmadd_ps(w0, xb[i], a0);
			a1 = _mm256_fmadd_ps(w1, xb[i], a1);
		}
		_mm256_storeu_ps(y + (j0 - r0), a0);
		_mm256_storeu_ps(y + (j0 - r0) + 8, a1);
	}
}

INL T256 void qca256(float *y, size_t r0, size_t s0, size_t s1, size_t rows,
		     const void *const *cols, size_t off, enum sf_dtype dt, const float *X, size_t n)
{
	size_t k = 0;
	for (; k + 4 <= n; k += 4) {
		if (k + 8 <= n)
			q_prefetch(cols + k + 4, off, dt, rows, s0, s1);
		qca256_cols(y, r0, s0, s1, rows, cols + k, off, dt, X + k, 4);
	}
	for (; k < n; k++)
		qca256_cols(y, r0, s0, s1, rows, cols + k, off, dt, X + k, 1);
}

static T256 void qwiden_avx2(float *w, const uint8_t *col, enum sf_dtype dt, size_t rows,
			     size_t j0, size_t nr)
{
	for (size_t j = j0; j < j0 + nr; j += 16) {
		__m256 w0, w1;
		deq16_256(col, dt, rows, j, &w0, &w1);
		_mm256_store_ps(w + (j - j0), w0);
		_mm256_store_ps(w + (j - j0) + 8, w1);
	}
}

static T256 void qcolaccum_avx2(float *Y, size_t ldy, size_t r0, size_t r1, size_t rows,
				const void *const *cols, size_t off, enum sf_dtype dt,
				const float *X, const uint32_t *sel, size_t ldx, size_t T,
				size_t n)
{
	if (sel) {
		qpass(Y, ldy, r0, r1, rows, cols, off, dt, X, sel, ldx, T, n, qwiden_avx2);
		return;
	}
	size_t s0 = (r0 + 15) / 16 * 16, s1 = r1 / 16 * 16;
	if (s0 < s1 && dt == SF_DTYPE_Q8)
		qca256(Y, r0, s0, s1, rows, cols, off, SF_DTYPE_Q8, X, n);
	else if (s0 < s1)
		qca256(Y, r0, s0, s1, rows, cols, off, SF_DTYPE_Q4, X, n);
	edges_ref(Y, ldy, r0, r1, s0, s1, rows, cols, off, dt, X, sel, ldx, T, n);
}

// ----------------------------------------------------------------------------
// AVX-512: a whole block of 32 rows as two vectors of 16

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

/* The 32 weights of block b of the column at col. */
INL T512 void deq32_512(const uint8_t *col, enum sf_dtype dt, size_t rows, size_t b,
			__m512 *w0, __m512 *w1)
{
	const uint8_t *c = top_codes_at(col, dt, rows, b);
	__m128i c0, c1;
	if (dt == SF_DTYPE_Q8) {
		c0 = _mm_loadu_si128((const __m128i *)c);
		c1 = _mm_loadu_si128((const __m128i *)(c + 16));
	} else {
		__m128i v = _mm_loadu_si128((const __m128i *)c);
		__m128i m = _mm_set1_epi8(15), e = _mm_set1_epi8(8);
		c0 = _mm_sub_epi8(_mm_and_si128(v, m), e);
		c1 = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m), e);
	}
	__m512 s = _mm512_set1_ps(QSCALE(col, b));
	*w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c0)), s);
	*w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c1)), s);
}

/* As qca256_cols, a whole block of rows at a time. */
INL T512 void qca512_cols(float *y, size_t r0, size_t s0, size_t s1, size_t rows,
			  const void *const *cols, size_t off, enum sf_dtype dt, const float *X,
			  const int NC)
{
	const uint8_t *col[4];
	__m512 xb[4];
#pragma GCC unroll 4
	for (int i = 0; i < NC; i++)
		col[i] = (const uint8_t *)cols[i] + off, xb[i] = _mm512_set1_ps(X[i]);
	for (size_t j0 = s0; j0 < s1; j0 += SF_QBLOCK) {
		__m512 a0 = _mm512_loadu_ps(y + (j0 - r0)), a1 = _mm512_loadu_ps(y + (j0 - r0) + 16);
#pragma GCC unroll 4
		for (int i = 0; i < NC; i++) {
			__m512 w0, w1;
			deq32_512(col[i], dt, rows, j0 / SF_QBLOCK, &w0, &w1);
			a0 = _mm512_fmadd_ps(w0, xb[i], a0);
			a1 = _mm512_fmadd_ps(w1, xb[i], a1);
		}
		_mm512_storeu_ps(y + (j0 - r0), a0);
		_mm512_storeu_ps(y + (j0 - r0) + 16, a1);
	}
}

INL T512 void qca512(float *y, size_t r0, size_t s0, size_t s1, size_t rows,
		     const void *const *cols, size_t off, enum sf_dtype dt, const float *X, size_t n)
{
	size_t k = 0;
	for (; k + 4 <= n; k += 4) {
		if (k + 8 <= n)
			q_prefetch(cols + k + 4, off, dt, rows, s0, s1);
		qca512_cols(y, r0, s0, s1, rows, cols + k, off, dt, X + k, 4);
	}
	for (; k < n; k++)
		qca512_cols(y, r0, s0, s1, rows, cols + k, off, dt, X + k, 1);
}

/* Each block that meets [j0, j0 + nr) dequantized once, the halves
 * inside stored. */
static T512 void qwiden_avx512(float *w, const uint8_t *col, enum sf_dtype dt, size_t rows,
			       size_t j0, size_t nr)
{
	for (size_t j = j0 / SF_QBLOCK * SF_QBLOCK; j < j0 + nr; j += SF_QBLOCK) {
		__m512 half[2];
		deq32_512(col, dt, rows, j / SF_QBLOCK, &half[0], &half[1]);
		for (size_t h = 0; h < 2; h++)
			if (j + 16 * h >= j0 && j + 16 * h < j0 + nr)
				_mm512_store_ps(w + (j + 16 * h - j0), half[h]);
	}
}

static T512 void qcolaccum_avx512(float *Y, size_t ldy, size_t r0, size_t r1, size_t rows,
				  const void *const *cols, size_t off, enum sf_dtype dt,
				  const float *X, const uint32_t *sel, size_t ldx, size_t T,
				  size_t n)
{
	if (sel) {
		qpass(Y, ldy, r0, r1, rows, cols, off, dt, X, sel, ldx, T, n, qwiden_avx512);
		return;
	}
	size_t s0 = (r0 + SF_QBLOCK - 1) / SF_QBLOCK * SF_QBLOCK, s1 = r1 / SF_QBLOCK * SF_QBLOCK;
	if (s0 < s1 && dt == SF_DTYPE_Q8)
		qca512(Y, r0, s0, s1, rows, cols, off, SF_DTYPE_Q8, X, n);
	else if (s0 < s1)
		qca512(Y, r0, s0, s1, rows, cols, off, SF_DTYPE_Q4, X, n);
	edges_ref(Y, ldy, r0, r1, s0, s1, rows, cols, off, dt, X, sel, ldx, T, n);
}

// ----------------------------------------------------------------------------
// integer products: each block's scale folded into the activations, which
// are then int8 per run of positions (see kernels_q.h)

/* The AVX2 path: blocks 8 at a time (one vector of their scales), a
 * block's 32 rows as four vectors of 8 sums. */
#define QI256_BLOCKS 8
#define QI256_TOKENS 2

/* A run's activations for one token over blocks [b0, b0 + QI256_BLOCKS):
 * per quad of columns and block, the four int8 codes as one int32 (byte
 * c: column 4 * quad + c); per block the scale and the sum of the codes
 * (the q4 codes' offset of 8 times it is taken back from the sums). */
struct qact256 {
	int32_t q[SF_QRUN / 4][QI256_BLOCKS];
	float d[QI256_BLOCKS];
	int32_t sum[QI256_BLOCKS];
};

/* Codes of 4 * 16 bytes (column c's at c) to rows: lanes of four bytes,
 * byte c of lane r column c's byte r; rows 0-7 to *lo, 8-15 to *hi. */
INL T256 void rows4x16_256(__m128i c0, __m128i c1, __m128i c2, __m128i c3, __m256i *lo,
			   __m256i *hi)
{
	__m128i t0 = _mm_unpacklo_epi8(c0, c1), t1 = _mm_unpackhi_epi8(c0, c1);
	__m128i t2 = _mm_unpacklo_epi8(c2, c3), t3 = _mm_unpackhi_epi8(c2, c3);
	*lo = _mm256_set_m128i(_mm_unpackhi_epi16(t0, t2), _mm_unpacklo_epi16(t0, t2));
	*hi = _mm256_set_m128i(_mm_unpackhi_epi16(t1, t3), _mm_unpacklo_epi16(t1, t3));
}

/* q4 codes' bytes as rows (lo rows 0-7 and 16-23, hi 8-15 and 24-31):
 * w[r] rows 8r to 8r + 7. */
INL T256 void nibbles256(__m256i lo, __m256i hi, __m256i *w)
{
	__m256i m = _mm256_set1_epi8(15);
	w[0] = _mm256_and_si256(lo, m);
	w[1] = _mm256_and_si256(hi, m);
	w[2] = _mm256_and_si256(_mm256_srli_epi16(lo, 4), m);
	w[3] = _mm256_and_si256(_mm256_srli_epi16(hi, 4), m);
}

/* The codes of one block of four columns (c[j] column j's) as rows: w[r]
 * rows 8r to 8r + 7, lanes of four bytes, one per column (q4: code + 8;
 * q8: the code). */
INL T256 void qcodes_quad256(const uint8_t *const *c, enum sf_dtype dt, __m256i *w)
{
	if (dt == SF_DTYPE_Q8) {
		for (int h = 0; h < 2; h++)
			rows4x16_256(_mm_loadu_si128((const __m128i *)(c[0] + 16 * h)),
				     _mm_loadu_si128((const __m128i *)(c[1] + 16 * h)),
				     _mm_loadu_si128((const __m128i *)(c[2] + 16 * h)),
				     _mm_loadu_si128((const __m128i *)(c[3] + 16 * h)),
				     &w[2 * h], &w[2 * h + 1]);
		return;
	}
	__m256i lo, hi;
	rows4x16_256(_mm_loadu_si128((const __m128i *)c[0]), _mm_loadu_si128((const __m128i *)c[1]),
		     _mm_loadu_si128((const __m128i *)c[2]), _mm_loadu_si128((const __m128i *)c[3]),
		     &lo, &hi);
	nibbles256(lo, hi, w);
}

/* acc += per lane the four products of its bytes w (q4: unsigned; q8:
 * signed, by the sign trick) and the activations a. */
INL T256 __m256i dot4_256(__m256i acc, __m256i w, __m256i a, enum sf_dtype dt)
{
	__m256i p;
	if (dt == SF_DTYPE_Q8)
		p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
	else
		p = _mm256_maddubs_epi16(w, a);
	return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/* The activations of columns [0, m) of a run for tokens [0, NT): sc[k]
 * the scales of column k's blocks, X as the kernel's. */
INL T256 void qprep256(struct qact256 *qa, const __m256 *sc, const float *X, size_t ldx,
		       size_t m, const int NT)
{
	for (int t = 0; t < NT; t++) {
		__m256 amax = _mm256_setzero_ps(), sgn = _mm256_set1_ps(-0.0f);
		for (size_t k = 0; k < m; k++) {
			__m256 v = _mm256_mul_ps(sc[k], _mm256_set1_ps(X[k * ldx + t]));
			amax = _mm256_max_ps(amax, _mm256_andnot_ps(sgn, v));
		}
		__m256 id = inv_scale256(amax);
		/* as qprep512: packed to bytes, each block's four side by side,
		 * their sum by two multiply-adds with ones */
		const __m256i lanes = _mm256_broadcastsi128_si256(_mm_setr_epi8(
			0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
		__m256i sum = _mm256_setzero_si256();
		_mm256_storeu_ps(qa[t].d, _mm256_div_ps(amax, _mm256_set1_ps(127.0f)));
		for (size_t k0 = 0; k0 < m; k0 += 4) {
			__m256i q[4];
			for (size_t c = 0; c < 4; c++) {
				__m256 v = _mm256_mul_ps(sc[k0 + c < m ? k0 + c : k0],
							 _mm256_set1_ps(X[(k0 + c < m ? k0 + c : k0) * ldx + t]));
				q[c] = k0 + c < m ? _mm256_cvtps_epi32(_mm256_mul_ps(v, id))
						  : _mm256_setzero_si256();
			}
			__m256i word = _mm256_shuffle_epi8(_mm256_packs_epi16(
				_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])), lanes);
			sum = _mm256_add_epi32(sum, _mm256_madd_epi16(
				_mm256_maddubs_epi16(_mm256_set1_epi8(1), word), _mm256_set1_epi16(1)));
			_mm256_storeu_si256((__m256i *)qa[t].q[k0 / 4], word);
		}
		_mm256_storeu_si256((__m256i *)qa[t].sum, sum);
	}
}

/* Tokens [0, NT)'s sums of a quad's block (w, as qcodes_quad256 gives
 * it) into acc[t], the quad qd's activations of block i. */
INL T256 void qdot256(__m256i (*acc)[4], const __m256i *w, const struct qact256 *qa, size_t qd,
		      size_t i, enum sf_dtype dt, const int NT)
{
#pragma GCC unroll 2
	for (int t = 0; t < NT; t++) {
		__m256i a = _mm256_set1_epi32(qa[t].q[qd][i]);
#pragma GCC unroll 4
		for (int r = 0; r < 4; r++)
			acc[t][r] = dot4_256(acc[t][r], w[r], a, dt);
	}
}

/* The 32 rows of block b of Y (y[t] at row 32 * b) += d * the integer
 * sums acc[t] of block i of the activations. */
INL T256 void qfinish256(float *const *y, const struct qact256 *qa, __m256i (*acc)[4], size_t b,
			 size_t i, enum sf_dtype dt, const int NT)
{
#pragma GCC unroll 2
	for (int t = 0; t < NT; t++) {
		__m256i off = _mm256_set1_epi32(dt == SF_DTYPE_Q8 ? 0 : 8 * qa[t].sum[i]);
		__m256 d = _mm256_set1_ps(qa[t].d[i]);
		float *yb = y[t] + SF_QBLOCK * b;
#pragma GCC unroll 4
		for (int r = 0; r < 4; r++) {
			__m256 f = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[t][r], off));
			_mm256_storeu_ps(yb + 8 * r, _mm256_fmadd_ps(d, f, _mm256_loadu_ps(yb + 8 * r)));
		}
	}
}

/* The same over block b of a slab's run r (a tile of nb blocks), its
 * quads already rows. */
INL T256 void qmac256_slab(float *const *y, const struct qact256 *qa, const struct slab_run *r,
			   size_t nb, size_t b, size_t i, enum sf_dtype dt, const int NT)
{
	const uint8_t *blk = run_codes(r->run, dt, nb, b);
	const size_t qb = 4 * top_code_bytes(dt);
	__m256i acc[QI256_TOKENS][4] = { 0 };
	for (size_t l = 0; l < SF_QRUN / 4 * qb; l += 64)
		__builtin_prefetch(blk + r->ahead + l);
	if (dt == SF_DTYPE_Q4) {
		/* a q4 product pair is at most 2 * 15 * 127: the run's eight
		 * quads sum in 16 bits (30,480 at most), widened once */
		__m256i s16[QI256_TOKENS][4] = { 0 };
		for (size_t a = 0; a < r->nq; a++) {
			const uint8_t *p = blk + r->quad[a] * qb;
			__m256i w[4];
			nibbles256(_mm256_loadu_si256((const __m256i *)p),
				   _mm256_loadu_si256((const __m256i *)(p + 32)), w);
#pragma GCC unroll 2
			for (int t = 0; t < NT; t++) {
				__m256i x = _mm256_set1_epi32(qa[t].q[r->quad[a]][i]);
#pragma GCC unroll 4
				for (int h = 0; h < 4; h++)
					s16[t][h] = _mm256_add_epi16(s16[t][h],
								     _mm256_maddubs_epi16(w[h], x));
			}
		}
#pragma GCC unroll 2
		for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
			for (int h = 0; h < 4; h++)
				acc[t][h] = _mm256_madd_epi16(s16[t][h], _mm256_set1_epi16(1));
		qfinish256(y, qa, acc, b, i, dt, NT);
		return;
	}
	for (size_t a = 0; a < r->nq; a++) {	/* q8 */
		const uint8_t *p = blk + r->quad[a] * qb;
		/* four loads, not a loop: GCC made the loop a memcpy into w on
		 * the stack, in 16-byte halves that the 32-byte loads of w then
		 * waited on (qint: q8 11 GB/s) */
		__m256i w[4] = { _mm256_loadu_si256((const __m256i *)p),
				 _mm256_loadu_si256((const __m256i *)(p + 32)),
				 _mm256_loadu_si256((const __m256i *)(p + 64)),
				 _mm256_loadu_si256((const __m256i *)(p + 96)) };
		qdot256(acc, w, qa, r->quad[a], i, dt, NT);
	}
	qfinish256(y, qa, acc, b, i, dt, NT);
}

/* The scales of nb <= 8 blocks from b of the column at col as floats,
 * 0 past them. */
INL T256 __m256 scales256(const uint8_t *col, size_t b, size_t nb)
{
	uint16_t h[QI256_BLOCKS] = { 0 };
	/* eight blocks straight from memory: the copy's stores in pieces
	 * left the load of them waiting (a third of the q4 slab's time) */
	if (nb == QI256_BLOCKS)
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)sf_q_scale_at(col, b)));
	memcpy(h, sf_q_scale_at(col, b), 2 * nb);
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
}

/* One token, as qint512_one: per run, the activations of its blocks in
 * chunks of QI256_ONE_BLOCKS, then each quad of columns down the chunk's
 * blocks, the integer sums kept per row in acc, then y once per run and
 * block. Going across every column each QI256_BLOCKS blocks (the pass's
 * order) read a few hundred bytes a column at a time, anywhere in memory:
 * qint 3-4 GB/s against the float path's 8-14. */
#define QI256_ONE_BLOCKS 64

static T256 void qint256_one(float *Y, size_t r0, const struct qsrc *q, const float *X,
			     size_t n, size_t B0, size_t B1)
{
	const size_t rows = q->rows;
	const enum sf_dtype dt = q->dt;
	const uint32_t *pos = q->pos;
	struct qact256 qa[QI256_ONE_BLOCKS / QI256_BLOCKS];
	int32_t acc[QI256_ONE_BLOCKS][SF_QBLOCK] __attribute__((aligned(32)));
	float *y = Y - r0;

	for (size_t k0 = 0, k1; k0 < n; k0 = k1) {
		const uint8_t *col[SF_QRUN];
		size_t m = (k1 = sf_qrun_end(pos, k0, n)) - k0, nq = run_quads(q, k0, k1, col);
		for (size_t c0 = B0; c0 < B1; c0 += QI256_ONE_BLOCKS) {
			size_t c1 = B1 - c0 < QI256_ONE_BLOCKS ? B1 : c0 + QI256_ONE_BLOCKS;
			qint_prefetch(q, k1, n, c0, c1 - c0);
			for (size_t b0 = c0; b0 < c1; b0 += QI256_BLOCKS) {
				size_t nb = c1 - b0 < QI256_BLOCKS ? c1 - b0 : QI256_BLOCKS;
				__m256 sc[SF_QRUN];
				for (size_t k = 0; k < m; k++)
					sc[k] = scales256(col[k], b0, nb);
				qprep256(&qa[(b0 - c0) / QI256_BLOCKS], sc, X + k0, 1, m, 1);
			}
			memset(acc, 0, (c1 - c0) * sizeof(acc[0]));
			for (size_t qd = 0; qd < nq; qd++) {
				const uint8_t *c[4];
				for (int j = 0; j < 4; j++)
					c[j] = top_codes_at(col[4 * qd + j], dt, rows, c0);
				for (size_t b = c0; b < c1; b++) {
					__m256i w[4], *a = (__m256i *)acc[b - c0];
					qcodes_quad256(c, dt, w);
					for (int j = 0; j < 4; j++)
						c[j] += top_code_bytes(dt);
					__m256i x = _mm256_set1_epi32(
						qa[(b - c0) / QI256_BLOCKS].q[qd][(b - c0) % QI256_BLOCKS]);
#pragma GCC unroll 4
					for (int r = 0; r < 4; r++)
						_mm256_store_si256(a + r, dot4_256(_mm256_load_si256(a + r),
										 w[r], x, dt));
				}
			}
			for (size_t b = c0; b < c1; b++) {
				__m256i sums[1][4];
				for (int r = 0; r < 4; r++)
					sums[0][r] = _mm256_load_si256((const __m256i *)acc[b - c0] + r);
				qfinish256(&y, &qa[(b - c0) / QI256_BLOCKS], sums, b,
					   (b - c0) % QI256_BLOCKS, dt, 1);
			}
		}
	}
}

/* The pass (struct qpass) at the AVX2 level: eight tokens a vector in the
 * preparations, four tokens' sums of half a block's rows in registers in
 * the products (all of a block's would not fit the 16 registers). */

/* Slot k's scales of the chunk's blocks from p->nb f16 at h (NULL: none). */
INL T256 void qpass_scales256(struct qpass *p, size_t k, const uint8_t *h)
{
	for (size_t b = 0; b < p->nb; b += 8) {
		uint16_t f[8] = { 0 };
		size_t nb = p->nb - b < 8 ? p->nb - b : 8;
		__m256 s;
		if (h && nb == 8)
			s = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + 2 * b)));
		else {
			if (h)
				memcpy(f, h + 2 * b, 2 * nb);
			s = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)f));
		}
		_mm256_storeu_ps(p->s[k] + b, s);
		_mm256_storeu_ps(p->as[k] + b, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), s));
	}
}

/* Block i's activations of the eight tokens from t (xv slot by slot,
 * lanes tokens; ax their magnitudes), as qpass_prep's at AVX-512; q8
 * takes no offset (its products are signed, by the sign trick). */
INL T256 void qpass_prep256(struct qpass *p, const __m256 *xv, const __m256 *ax, size_t i,
			    size_t t, enum sf_dtype dt)
{
	const __m256i lanes = _mm256_broadcastsi128_si256(_mm_setr_epi8(
		0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
	__m256 am[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
			 _mm256_setzero_ps() };
	for (size_t qd = 0; qd < p->nq; qd++)
#pragma GCC unroll 4
		for (size_t c = 0; c < 4; c++)
			am[c] = _mm256_max_ps(am[c], _mm256_mul_ps(ax[4 * qd + c],
								   _mm256_set1_ps(p->as[4 * qd + c][i])));
	__m256 amax = _mm256_max_ps(_mm256_max_ps(am[0], am[1]), _mm256_max_ps(am[2], am[3]));
	__m256 id = inv_scale256(amax);
	_mm256_storeu_ps(p->d[i] + t, _mm256_div_ps(amax, _mm256_set1_ps(127.0f)));
	__m256i sum = _mm256_setzero_si256();
	for (size_t qd = 0; qd < p->nq; qd++) {
		__m256i q[4];
#pragma GCC unroll 4
		for (size_t c = 0; c < 4; c++) {
			size_t k = 4 * qd + c;
			q[c] = _mm256_cvtps_epi32(_mm256_mul_ps(
				_mm256_mul_ps(xv[k], _mm256_set1_ps(p->s[k][i])), id));
		}
		/* per 128-bit lane four tokens' int16 of two slots, then bytes
		 * of four slots, then each token's four side by side */
		__m256i word = _mm256_shuffle_epi8(_mm256_packs_epi16(
			_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])), lanes);
		if (dt == SF_DTYPE_Q4)
			sum = _mm256_add_epi32(sum, _mm256_madd_epi16(
				_mm256_maddubs_epi16(_mm256_set1_epi8(1), word), _mm256_set1_epi16(1)));
		_mm256_storeu_si256((__m256i *)(p->a[i][qd] + t), word);
	}
	_mm256_storeu_si256((__m256i *)(p->off[i] + t),
			    _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum, 3)));
}

/* Part h of block i for tokens [t0, t0 + NT) at y[t] (its row 0): q4's
 * half h, rows 8h-8h+7 and 8h+16-8h+23 (the low and high nibbles of one
 * 32-byte load a quad), NT <= 4; q8's quarter h, rows 8h-8h+7, NT <= 8
 * (more sums and the sign trick's operands would not fit the registers). */
INL T256 void qpass_part256(const struct qpass *p, size_t i, const enum sf_dtype dt,
			    float *const *y, size_t t0, const int NT, const size_t nq, const int h)
{
	const __m256i ones = _mm256_set1_epi16(1);
	__m256i u[8], v[4];
#pragma GCC unroll 8
	for (int t = 0; t < NT; t++)
		u[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
	for (int t = 0; t < NT && dt == SF_DTYPE_Q4; t++)
		v[t] = _mm256_setzero_si256();
	/* unrolled whole, as qpass_block's quads at AVX-512 */
#pragma GCC unroll 8
	for (size_t qd = 0; qd < SF_QRUN / 4; qd++) {
		if (qd == nq)
			break;
		__m256i c = _mm256_loadu_si256((const __m256i *)(p->w[i][qd] + 32 * h));
		if (dt == SF_DTYPE_Q4) {
			/* a q4 product pair is at most 2 * 15 * 127: a run's
			 * eight quads sum in 16 bits, widened once */
			__m256i lo = _mm256_and_si256(c, _mm256_set1_epi8(15));
			__m256i hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), _mm256_set1_epi8(15));
#pragma GCC unroll 4
			for (int t = 0; t < NT; t++) {
				__m256i a = _mm256_set1_epi32(p->a[i][qd][t0 + t]);
				u[t] = _mm256_add_epi16(u[t], _mm256_maddubs_epi16(lo, a));
				v[t] = _mm256_add_epi16(v[t], _mm256_maddubs_epi16(hi, a));
			}
		} else {
			__m256i ac = _mm256_abs_epi8(c);
#pragma GCC unroll 8
			for (int t = 0; t < NT; t++) {
				__m256i a = _mm256_set1_epi32(p->a[i][qd][t0 + t]);
				u[t] = _mm256_add_epi32(u[t], _mm256_madd_epi16(_mm256_maddubs_epi16(
					ac, _mm256_sign_epi8(a, c)), ones));
			}
		}
	}
#pragma GCC unroll 8
	for (int t = 0; t < NT; t++) {
		__m256i off = _mm256_set1_epi32(p->off[i][t0 + t]);
		__m256 d = _mm256_set1_ps(p->d[i][t0 + t]);
		float *yb = y[t0 + t] + SF_QBLOCK * i + 8 * h;
		if (dt == SF_DTYPE_Q4) {
			u[t] = _mm256_madd_epi16(u[t], ones);
			v[t] = _mm256_madd_epi16(v[t], ones);
			_mm256_storeu_ps(yb + 16, _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(
				_mm256_add_epi32(v[t], off)), _mm256_loadu_ps(yb + 16)));
		}
		_mm256_storeu_ps(yb, _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(
			_mm256_add_epi32(u[t], off)), _mm256_loadu_ps(yb)));
	}
}

/* Block i for tokens [0, nt), dt a constant: q4 in halves four tokens at
 * a time, q8 in quarters eight at a time. */
INL T256 void qpass_blocks256(const struct qpass *p, size_t i, const enum sf_dtype dt,
			      float *const *y, size_t nt)
{
	const int parts = dt == SF_DTYPE_Q4 ? 2 : 4, NT = dt == SF_DTYPE_Q4 ? 4 : 8;
	size_t t = 0;
	if (p->nq == SF_QRUN / 4)	/* a whole run: no exit inside the quads' loop */
		for (; t + (size_t)NT <= nt; t += (size_t)NT)
			for (int h = 0; h < parts; h++)
				qpass_part256(p, i, dt, y, t, NT, SF_QRUN / 4, h);
	for (; t + (size_t)NT <= nt; t += (size_t)NT)
		for (int h = 0; h < parts; h++)
			qpass_part256(p, i, dt, y, t, NT, p->nq, h);
	for (; t + 4 <= nt; t += 4)
		for (int h = 0; h < parts; h++)
			qpass_part256(p, i, dt, y, t, 4, p->nq, h);
	for (; t < nt; t++)
		for (int h = 0; h < parts; h++)
			qpass_part256(p, i, dt, y, t, 1, p->nq, h);
}

/* A slab's pass from 8 tokens (qint: q4 60 GMAC/s against 57 by two
 * tokens at a time, q8 level; from 4 the other way round, 37 against 48);
 * columns always: the pass lays their codes out once, the two tokens'
 * path for every two (qint, 2 tokens: q4 17.5 against 8.6). */
#define QP256_SLAB_MIN 8

/* The AVX2 level's qpass_tokens_fn. */
static T256 void qpass_tokens256(struct qpass *p, float *y0, size_t ldy, size_t T,
				 enum sf_dtype dt)
{
	const size_t ns = 4 * p->nq;
	for (size_t k = 0; k < ns; k++)
		qpass_scales256(p, k, p->h[k]);
	for (size_t t0 = 0; t0 < T; t0 += QP_TOKENS) {
		size_t nt = T - t0 < QP_TOKENS ? T - t0 : QP_TOKENS;
		float *y[QP_TOKENS];
		for (size_t t = 0; t < nt; t++)
			y[t] = y0 + (t0 + t) * ldy;
		for (size_t g = 0; g < nt; g += 8) {
			__m256 xv[SF_QRUN], ax[SF_QRUN];
			__m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(nt - g)),
						       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
			for (size_t k = 0; k < ns; k++) {
				xv[k] = p->x[k] ? _mm256_maskload_ps(p->x[k] + t0 + g, m)
						: _mm256_setzero_ps();
				ax[k] = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), xv[k]);
			}
			for (size_t i = 0; i < p->nb; i++)
				qpass_prep256(p, xv, ax, i, g, dt);
		}
		for (size_t i = 0; i < p->nb; i++)
			if (dt == SF_DTYPE_Q8)
				qpass_blocks256(p, i, SF_DTYPE_Q8, y, nt);
			else
				qpass_blocks256(p, i, SF_DTYPE_Q4, y, nt);
	}
}

/* The AVX2 level's qpass_quads_fn. */
static T256 void qpass_quads256(uint8_t (*buf)[128], const uint8_t *const *col, size_t nq,
				size_t rows, size_t b, enum sf_dtype dt)
{
	for (size_t qd = 0; qd < nq; qd++) {
		const uint8_t *c[4];
		for (int j = 0; j < 4; j++)
			c[j] = top_codes_at(col[4 * qd + j], dt, rows, b);
		for (size_t h = 0; h < (dt == SF_DTYPE_Q8 ? 2u : 1u); h++) {
			__m256i lo, hi;
			rows4x16_256(_mm_loadu_si128((const __m128i *)(c[0] + 16 * h)),
				     _mm_loadu_si128((const __m128i *)(c[1] + 16 * h)),
				     _mm_loadu_si128((const __m128i *)(c[2] + 16 * h)),
				     _mm_loadu_si128((const __m128i *)(c[3] + 16 * h)), &lo, &hi);
			_mm256_storeu_si256((__m256i *)(buf[qd] + 64 * h), lo);
			_mm256_storeu_si256((__m256i *)(buf[qd] + 64 * h + 32), hi);
		}
	}
}

static T256 void qint_avx2(float *Y, size_t ldy, size_t r0, size_t r1, const struct qsrc *q,
			   const float *X, size_t ldx, size_t T, size_t n)
{
	size_t s0 = (r0 + SF_QBLOCK - 1) / SF_QBLOCK * SF_QBLOCK, s1 = r1 / SF_QBLOCK * SF_QBLOCK;

	if (T == 1 && s1 > s0)
		qint256_one(Y, r0, q, X, n, s0 / SF_QBLOCK, s1 / SF_QBLOCK);
	else if (s1 > s0)
		qint_pass(qpass_tokens256, qpass_quads256, Y, ldy, r0, q, X, ldx, T, n,
			  s0 / SF_QBLOCK, s1 / SF_QBLOCK);
	qint_edges(Y, ldy, r0, r1, s0, s1, q, X, ldx, T, n);
}

/* A slab's whole blocks, tile by tile and run by run, QI256_BLOCKS blocks
 * and QI256_TOKENS tokens at a time: the run's inputs at their slots (0 at
 * the others, which changes no sum) through qprep256, then each block's
 * quads that hold a position. */
static T256 void qslab_avx2(float *Y, size_t ldy, size_t r0, size_t r1, const struct sf_slab *s,
			    const uint32_t *pos, size_t n, const float *X, size_t ldx, size_t T)
{
	const enum sf_dtype dt = s->dt;
	size_t B0 = (r0 + SF_QBLOCK - 1) / SF_QBLOCK, B1 = r1 / SF_QBLOCK;

	if (T >= QP256_SLAB_MIN) {
		qslab_pass(qpass_tokens256, Y, ldy, r0, s, pos, n, X, ldx, T, B0, B1);
		qslab_edges(Y, ldy, r0, r1, B0, B1, s, pos, n, X, ldx, T);
		return;
	}
	for (size_t c = B0 / SF_QSLAB_BLOCKS; c * SF_QSLAB_BLOCKS < B1; c++) {
		size_t base = c * SF_QSLAB_BLOCKS, nb = tile_blocks(s, c);
		size_t e0 = B0 > base ? B0 - base : 0, e1 = B1 - base < nb ? B1 - base : nb;
		/* as qslab_avx512 */
		size_t span = T == 1 ? e1 - e0 : QI256_BLOCKS;
		for (size_t a0 = e0; a0 < e1; a0 += span) {
			for (size_t k0 = 0, k1; k0 < n; k0 = k1) {
				struct slab_run r;
				size_t a1 = e1 - a0 < span ? e1 : a0 + span;
				slab_run_of(&r, s, c, pos, k0, k1 = sf_qrun_end(pos, k0, n));
				for (size_t b0 = a0; b0 < a1; b0 += QI256_BLOCKS) {
					size_t nbc = a1 - b0 < QI256_BLOCKS ? a1 - b0 : QI256_BLOCKS;
					__m256 sc[SF_QRUN];
					for (size_t p = 0; p < SF_QRUN; p++)
						sc[p] = scales256(r.run + 2 * nb * p, b0, nbc);
					for (size_t t0 = 0, nt; t0 < T; t0 += nt) {
						float xd[SF_QRUN * QI256_TOKENS];
						struct qact256 qa[QI256_TOKENS];
						float *y[QI256_TOKENS] = { Y + t0 * ldy + base * SF_QBLOCK - r0,
									   Y + (t0 + 1) * ldy + base * SF_QBLOCK - r0 };
						size_t lx;
						nt = T - t0 >= QI256_TOKENS ? QI256_TOKENS : 1;
						const float *x = slab_inputs(xd, &r, X, ldx, k0, k1, t0, nt,
									     &lx);
						if (nt == QI256_TOKENS) {
							qprep256(qa, sc, x, lx, SF_QRUN, QI256_TOKENS);
							for (size_t i = 0; i < nbc; i++)
								qmac256_slab(y, qa, &r, nb, b0 + i, i, dt,
									     QI256_TOKENS);
						} else {
							qprep256(qa, sc, x, lx, SF_QRUN, 1);
							for (size_t i = 0; i < nbc; i++)
								qmac256_slab(y, qa, &r, nb, b0 + i, i, dt, 1);
						}
					}
				}
			}
		}
	}
	qslab_edges(Y, ldy, r0, r1, B0, B1, s, pos, n, X, ldx, T);
}

// ----------------------------------------------------------------------------
// the AVX-512 path with VNNI and VBMI: blocks 16 at a time, a block's 32
// rows as two vectors of 16 sums, one vpdpbusd per vector and quad

#define T512I __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni," \
					  "avx512vbmi,fma,f16c")))
#define QI512_BLOCKS 16
#define QI512_TOKENS 8

/* inv_scale256's. */
INL T512I __m512 inv_scale512(__m512 amax)
{
	__m512 id = _mm512_div_ps(_mm512_set1_ps(127.0f), amax);
	return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(id, _mm512_set1_ps(FLT_MAX), _CMP_LE_OQ), id);
}

/* As struct qact256, over 16 blocks. */
struct qact512 {
	int32_t q[SF_QRUN / 4][QI512_BLOCKS];
	float d[QI512_BLOCKS];
	int32_t sum[QI512_BLOCKS];
};

INL T512I void qprep512(struct qact512 *qa, const __m512 *sc, const float *X, size_t ldx,
			size_t m, const int NT)
{
	for (int t = 0; t < NT; t++) {
		__m512 amax = _mm512_setzero_ps();
		for (size_t k = 0; k < m; k++) {
			__m512 v = _mm512_mul_ps(sc[k], _mm512_set1_ps(X[k * ldx + t]));
			amax = _mm512_max_ps(amax, _mm512_abs_ps(v));
		}
		__m512 id = inv_scale512(amax);
		/* four columns' codes (|q| <= 127) packed to bytes, per 128-bit
		 * lane a0-3 b0-3 c0-3 d0-3, then each block's four side by side */
		const __m512i lanes = _mm512_broadcast_i32x4(_mm_setr_epi8(
			0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
		__m512i sum = _mm512_setzero_si512(), ones = _mm512_set1_epi8(1);
		_mm512_storeu_ps(qa[t].d, _mm512_div_ps(amax, _mm512_set1_ps(127.0f)));
		for (size_t k0 = 0; k0 < m; k0 += 4) {
			__m512i q[4];
			for (size_t c = 0; c < 4; c++) {
				__m512 v = _mm512_mul_ps(sc[k0 + c < m ? k0 + c : k0],
							 _mm512_set1_ps(X[(k0 + c < m ? k0 + c : k0) * ldx + t]));
				q[c] = k0 + c < m ? _mm512_cvtps_epi32(_mm512_mul_ps(v, id))
						  : _mm512_setzero_si512();
			}
			__m512i word = _mm512_shuffle_epi8(_mm512_packs_epi16(
				_mm512_packs_epi32(q[0], q[1]), _mm512_packs_epi32(q[2], q[3])), lanes);
			sum = _mm512_dpbusd_epi32(sum, ones, word);
			_mm512_storeu_si512(qa[t].q[k0 / 4], word);
		}
		_mm512_storeu_si512(qa[t].sum, sum);
	}
}

/* Four columns' 16 bytes at c[0..3] + at in one vector, then to rows:
 * byte 4r + c of the result is byte r of column c. */
INL T512I __m512i rows4x16_512(const uint8_t *const *c, size_t at)
{
	static const uint8_t idx[64] = {
		0, 16, 32, 48, 1, 17, 33, 49, 2, 18, 34, 50, 3, 19, 35, 51,
		4, 20, 36, 52, 5, 21, 37, 53, 6, 22, 38, 54, 7, 23, 39, 55,
		8, 24, 40, 56, 9, 25, 41, 57, 10, 26, 42, 58, 11, 27, 43, 59,
		12, 28, 44, 60, 13, 29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63,
	};
	__m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(c[0] + at)));
	z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(c[1] + at)), 1);
	z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(c[2] + at)), 2);
	z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(c[3] + at)), 3);
	return _mm512_permutexvar_epi8(_mm512_loadu_si512(idx), z);
}

/* q4 codes' bytes as rows: the low nibbles rows 0-15, the high 16-31. */
INL T512I void nibbles512(__m512i p, __m512i *w0, __m512i *w1)
{
	__m512i m = _mm512_set1_epi8(15);
	*w0 = _mm512_and_si512(p, m);
	*w1 = _mm512_and_si512(_mm512_srli_epi16(p, 4), m);
}

/* Block b of four columns (col[0..3], rows rows) as rows: w0 rows 0-15,
 * w1 rows 16-31, lanes of four unsigned bytes, one per column (q4: code
 * + 8 as stored; q8: code + 128), for vpdpbusd. */
INL T512I void quad_rows512(const uint8_t *const *col, enum sf_dtype dt, size_t rows, size_t b,
			    __m512i *w0, __m512i *w1)
{
	const uint8_t *c[4];
	for (int j = 0; j < 4; j++)
		c[j] = top_codes_at(col[j], dt, rows, b);
	if (dt == SF_DTYPE_Q8) {
		__m512i flip = _mm512_set1_epi8((char)0x80);
		*w0 = _mm512_xor_si512(rows4x16_512(c, 0), flip);
		*w1 = _mm512_xor_si512(rows4x16_512(c, 16), flip);
	} else {
		nibbles512(rows4x16_512(c, 0), w0, w1);
	}
}

/* The same of a slab's quad at p, its bytes already rows. */
INL T512I void slab_quad512(const uint8_t *p, enum sf_dtype dt, __m512i *w0, __m512i *w1)
{
	if (dt == SF_DTYPE_Q8) {
		__m512i flip = _mm512_set1_epi8((char)0x80);
		*w0 = _mm512_xor_si512(_mm512_loadu_si512(p), flip);
		*w1 = _mm512_xor_si512(_mm512_loadu_si512(p + 64), flip);
	} else {
		nibbles512(_mm512_loadu_si512(p), w0, w1);
	}
}

/* As qfinish256: y += d * (the sums less the codes' offset (q4: 8; q8:
 * 128, the flip of slab_quad512 and quad_rows512) times the activations'
 * sum); with folded, the sums began at that offset's negative
 * (qoff512). */
INL T512I __m512i qoff512(const struct qact512 *qa, size_t i, enum sf_dtype dt)
{
	return _mm512_set1_epi32(-(dt == SF_DTYPE_Q8 ? 128 : 8) * qa->sum[i]);
}

INL T512I void qfinish512(float *const *y, const struct qact512 *qa, const __m512i *lo,
			  const __m512i *hi, size_t b, size_t i, enum sf_dtype dt, const int NT,
			  const int folded)
{
#pragma GCC unroll 8
	for (int t = 0; t < NT; t++) {
		__m512i off = folded ? _mm512_setzero_si512() : qoff512(&qa[t], i, dt);
		__m512 d = _mm512_set1_ps(qa[t].d[i]);
		float *yb = y[t] + SF_QBLOCK * b;
		__m512 f0 = _mm512_cvtepi32_ps(_mm512_add_epi32(lo[t], off));
		__m512 f1 = _mm512_cvtepi32_ps(_mm512_add_epi32(hi[t], off));
		_mm512_storeu_ps(yb, _mm512_fmadd_ps(d, f0, _mm512_loadu_ps(yb)));
		_mm512_storeu_ps(yb + 16, _mm512_fmadd_ps(d, f1, _mm512_loadu_ps(yb + 16)));
	}
}

/* Tokens [0, NT)'s sums of a quad's block (w0 rows 0-15, w1 16-31) into
 * lo[t], hi[t], the quad qd's activations of block i. */
INL T512I void qdot512(__m512i *lo, __m512i *hi, __m512i w0, __m512i w1,
		       const struct qact512 *qa, size_t qd, size_t i, const int NT)
{
#pragma GCC unroll 8
	for (int t = 0; t < NT; t++) {
		__m512i a = _mm512_set1_epi32(qa[t].q[qd][i]);
		lo[t] = _mm512_dpbusd_epi32(lo[t], w0, a);
		hi[t] = _mm512_dpbusd_epi32(hi[t], w1, a);
	}
}

/* As qmac256_slab. */
INL T512I void qmac512_slab(float *const *y, const struct qact512 *qa, const struct slab_run *r,
			    size_t nb, size_t b, size_t i, const enum sf_dtype dt, const int NT,
			    const size_t nq)
{
	const uint8_t *blk = run_codes(r->run, dt, nb, b);
	const size_t qb = 4 * top_code_bytes(dt);
	/* one token's sums in four chains by quad, summed at the end (exact
	 * in integers): one chain would wait on vpdpbusd's latency 8 times a
	 * block (q8 from memory, qint, one thread, on a Sapphire Rapids Xeon:
	 * 14.3-15.1 GB/s against 13.2-13.9 with one chain; on Zen 5 its
	 * loads outlasted the one chain) */
	const int C = NT == 1 ? 4 : 1;
	__m512i lo[QI512_TOKENS], hi[QI512_TOKENS];
	/* (r->ahead) q4's 8 lines a block unrolled, q8's 16 a loop
	 * (unrolled, q8 streamed 7% slower, q4 as a loop 5%: qint) */
	if (dt == SF_DTYPE_Q4) {
#pragma GCC unroll 8
		for (size_t l = 0; l < SF_QRUN / 4 * qb; l += 64)
			__builtin_prefetch(blk + r->ahead + l);
	} else {
		for (size_t l = 0; l < SF_QRUN / 4 * qb; l += 64)
			__builtin_prefetch(blk + r->ahead + l);
	}
#pragma GCC unroll 8
	for (int t = 0; t < NT * C; t++)
		lo[t] = hi[t] = t < NT ? qoff512(&qa[t], i, dt) : _mm512_setzero_si512();
	/* unrolled whole, as qpass_block's; a whole run's quads (nq 8) are
	 * its slots in order, at offsets the compiler knows */
#pragma GCC unroll 8
	for (size_t a = 0; a < SF_QRUN / 4; a++) {
		if (a == nq)
			break;
		size_t qd = nq == SF_QRUN / 4 ? a : r->quad[a];
		__m512i w0, w1;
		slab_quad512(blk + qd * qb, dt, &w0, &w1);
		qdot512(lo + a % C * NT, hi + a % C * NT, w0, w1, qa, qd, i, NT);
	}
#pragma GCC unroll 4
	for (int c = 1; c < C; c++) {
		lo[0] = _mm512_add_epi32(lo[0], lo[c]);
		hi[0] = _mm512_add_epi32(hi[0], hi[c]);
	}
	qfinish512(y, qa, lo, hi, b, i, dt, NT, 1);
}

/* One token: per run, the activations of every block first, then the
 * columns a quad at a time down the blocks, their integer sums kept per
 * row in acc, then y once per run. Each quad's blocks are asked of memory
 * whole while the quad before computes: a burst down each column is what
 * memory serves fastest (columns in cache slots and read buffers lie
 * anywhere). Blocks of at most QI512_ONE_BLOCKS at a time keep that burst
 * and acc in the first caches. */
#define QI512_ONE_BLOCKS 64
#define QI512_ONE_AHEAD 2

static T512I void qint512_one(float *Y, size_t r0, const struct qsrc *q, const float *X,
			      size_t n, size_t B0, size_t B1)
{
	const size_t rows = q->rows;
	const enum sf_dtype dt = q->dt;
	const uint32_t *pos = q->pos;
	struct qact512 qa[QI512_ONE_BLOCKS / QI512_BLOCKS];
	int32_t acc[QI512_ONE_BLOCKS][SF_QBLOCK] __attribute__((aligned(64)));
	float *y = Y - r0;

	for (size_t k0 = 0, k1; k0 < n; k0 = k1) {
		/* this run's columns in quads, then the next run's */
		const uint8_t *col[2 * SF_QRUN];
		size_t m = (k1 = sf_qrun_end(pos, k0, n)) - k0, nq = run_quads(q, k0, k1, col);
		size_t k2 = k1 < n ? sf_qrun_end(pos, k1, n) : k1;
		size_t nq2 = nq + (k2 > k1 ? run_quads(q, k1, k2, col + 4 * nq) : 0);
		for (size_t c0 = B0; c0 < B1; c0 += QI512_ONE_BLOCKS) {
			size_t c1 = B1 - c0 < QI512_ONE_BLOCKS ? B1 : c0 + QI512_ONE_BLOCKS;
			/* the next run's scales */
			for (size_t k = k1; k < k2; k++)
				for (size_t b = c0; b < c1; b += 32)
					__builtin_prefetch(sf_q_scale_at(qsrc_col(q, k), b));
			for (size_t b0 = c0; b0 < c1; b0 += QI512_BLOCKS) {
				size_t nb = c1 - b0 < QI512_BLOCKS ? c1 - b0 : QI512_BLOCKS;
				__m512 sc[SF_QRUN];
				for (size_t k = 0; k < m; k++)
					sc[k] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
						(__mmask16)((1u << nb) - 1), sf_q_scale_at(col[k], b0)));
				qprep512(&qa[(b0 - c0) / QI512_BLOCKS], sc, X + k0, 1, m, 1);
			}
			memset(acc, 0, (c1 - c0) * sizeof(acc[0]));
			for (size_t qd = 0; qd < nq; qd++) {
				const uint8_t *const *ahead = qd + QI512_ONE_AHEAD < nq2 ?
					col + 4 * (qd + QI512_ONE_AHEAD) : NULL;
				/* lines of that quad per block, in 1/16ths */
				size_t per = ahead ? 4 * 16 * ((c1 - c0) * top_code_bytes(dt) + 63) / 64 /
						     (c1 - c0) : 0, l16 = 0;
				for (size_t b = c0; b < c1; b++) {
					const struct qact512 *q = &qa[(b - c0) / QI512_BLOCKS];
					__m512i w0, w1;
					/* the lines of the quad QI512_ONE_AHEAD on, spread over
					 * the blocks so the misses in flight stay few (a burst
					 * of them stalls the loads) */
					for (size_t l = l16 / 16; l < (l16 + per) / 16; l++)
						__builtin_prefetch(top_codes_at(ahead[l % 4], dt, rows, c0) +
								   l / 4 * 64);
					l16 += per;
					quad_rows512(col + 4 * qd, dt, rows, b, &w0, &w1);
					__m512i a = _mm512_set1_epi32(q->q[qd][(b - c0) % QI512_BLOCKS]);
					_mm512_store_si512(acc[b - c0], _mm512_dpbusd_epi32(
						_mm512_load_si512(acc[b - c0]), w0, a));
					_mm512_store_si512(acc[b - c0] + 16, _mm512_dpbusd_epi32(
						_mm512_load_si512(acc[b - c0] + 16), w1, a));
				}
			}
			for (size_t b = c0; b < c1; b++) {
				__m512i lo = _mm512_load_si512(acc[b - c0]);
				__m512i hi = _mm512_load_si512(acc[b - c0] + 16);
				qfinish512(&y, &qa[(b - c0) / QI512_BLOCKS], &lo, &hi, b,
					   (b - c0) % QI512_BLOCKS, dt, 1, 0);
			}
		}
	}
}

/* Slot k's scales of the chunk's blocks from nb f16 at h (NULL: none). */
INL T512I void qpass_scales(struct qpass *p, size_t k, const uint8_t *h)
{
	for (size_t b = 0; b < QP_BLOCKS; b += 16) {
		size_t nb = p->nb > b ? p->nb - b < 16 ? p->nb - b : 16 : 0;
		__m512 s = h && nb ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
					     (__mmask16)((1u << nb) - 1), h + 2 * b))
				   : _mm512_setzero_ps();
		_mm512_storeu_ps(p->s[k] + b, s);
		_mm512_storeu_ps(p->as[k] + b, _mm512_abs_ps(s));
	}
}

/* Block i's activations of the tokens xv (slot by slot, lanes tokens;
 * ax their magnitudes). */
INL T512I void qpass_prep(struct qpass *p, const __m512 *xv, const __m512 *ax, size_t i,
			  enum sf_dtype dt)
{
	const __m512i lanes = _mm512_broadcast_i32x4(_mm_setr_epi8(
		0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
	/* the maxima and the sums in four and two chains (exact in any order):
	 * one chain a slot kept a block's work waiting on their latency */
	__m512 am[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
			 _mm512_setzero_ps() };
	for (size_t qd = 0; qd < p->nq; qd++)
#pragma GCC unroll 4
		for (size_t c = 0; c < 4; c++)
			am[c] = _mm512_max_ps(am[c], _mm512_mul_ps(ax[4 * qd + c],
								   _mm512_set1_ps(p->as[4 * qd + c][i])));
	__m512 amax = _mm512_max_ps(_mm512_max_ps(am[0], am[1]), _mm512_max_ps(am[2], am[3]));
	__m512 id = inv_scale512(amax);
	_mm512_storeu_ps(p->d[i], _mm512_div_ps(amax, _mm512_set1_ps(127.0f)));
	__m512i sum[2] = { _mm512_setzero_si512(), _mm512_setzero_si512() };
	const __m512i ones = _mm512_set1_epi8(1);
	for (size_t qd = 0; qd < p->nq; qd++) {
		__m512i q[4];
#pragma GCC unroll 4
		for (size_t c = 0; c < 4; c++) {
			size_t k = 4 * qd + c;
			q[c] = _mm512_cvtps_epi32(_mm512_mul_ps(
				_mm512_mul_ps(xv[k], _mm512_set1_ps(p->s[k][i])), id));
		}
		/* per 128-bit lane four tokens' int16 of two slots, then bytes
		 * of four slots, then each token's four side by side */
		__m512i word = _mm512_shuffle_epi8(_mm512_packs_epi16(
			_mm512_packs_epi32(q[0], q[1]), _mm512_packs_epi32(q[2], q[3])), lanes);
		sum[qd & 1] = _mm512_dpbusd_epi32(sum[qd & 1], ones, word);
		_mm512_storeu_si512(p->a[i][qd], word);
	}
	_mm512_storeu_si512(p->off[i], _mm512_sub_epi32(_mm512_setzero_si512(),
		_mm512_slli_epi32(_mm512_add_epi32(sum[0], sum[1]), dt == SF_DTYPE_Q8 ? 7 : 3)));
}

/* Block i for tokens [t0, t0 + NT) at y[t] (its row 0): each quad's
 * weights loaded once for the NT tokens, whose sums stay in registers. */
INL T512I void qpass_block(const struct qpass *p, size_t i, const enum sf_dtype dt,
			   float *const *y, size_t t0, const int NT, const size_t nq)
{
	__m512i lo[QI512_TOKENS], hi[QI512_TOKENS];
#pragma GCC unroll 8
	for (int t = 0; t < NT; t++)
		lo[t] = hi[t] = _mm512_set1_epi32(p->off[i][t0 + t]);
	/* unrolled whole: as a loop, GCC 12 moved every sum between
	 * registers (and the stack) each quad */
#pragma GCC unroll 8
	for (size_t qd = 0; qd < SF_QRUN / 4; qd++) {
		if (qd == nq)
			break;
		__m512i w0, w1;
		slab_quad512(p->w[i][qd], dt, &w0, &w1);
#pragma GCC unroll 8
		for (int t = 0; t < NT; t++) {
			__m512i a = _mm512_set1_epi32(p->a[i][qd][t0 + t]);
			lo[t] = _mm512_dpbusd_epi32(lo[t], w0, a);
			hi[t] = _mm512_dpbusd_epi32(hi[t], w1, a);
		}
	}
#pragma GCC unroll 8
	for (int t = 0; t < NT; t++) {
		__m512 d = _mm512_set1_ps(p->d[i][t0 + t]);
		float *yb = y[t0 + t] + SF_QBLOCK * i;
		_mm512_storeu_ps(yb, _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(lo[t]), _mm512_loadu_ps(yb)));
		_mm512_storeu_ps(yb + 16, _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(hi[t]),
							  _mm512_loadu_ps(yb + 16)));
	}
}

/* Block i for tokens [0, nt), dt a constant: its test out of the loops
 * (inside, it cost the sums their registers). */
INL T512I void qpass_blocks(const struct qpass *p, size_t i, const enum sf_dtype dt,
			    float *const *y, size_t nt)
{
	size_t t = 0;
	if (p->nq == SF_QRUN / 4)	/* a whole run: no exit inside the quads' loop */
		for (; t + 8 <= nt; t += 8)
			qpass_block(p, i, dt, y, t, 8, SF_QRUN / 4);
	for (; t + 8 <= nt; t += 8)
		qpass_block(p, i, dt, y, t, 8, p->nq);
	for (; t + 4 <= nt; t += 4)
		qpass_block(p, i, dt, y, t, 4, p->nq);
	for (; t < nt; t++)
		qpass_block(p, i, dt, y, t, 1, p->nq);
}

/* The AVX-512 level's qpass_tokens_fn. */
static T512I void qpass_tokens512(struct qpass *p, float *y0, size_t ldy, size_t T,
				  enum sf_dtype dt)
{
	const size_t ns = 4 * p->nq;
	for (size_t k = 0; k < ns; k++)
		qpass_scales(p, k, p->h[k]);
	for (size_t t0 = 0; t0 < T; t0 += QP_TOKENS) {
		size_t nt = T - t0 < QP_TOKENS ? T - t0 : QP_TOKENS;
		__mmask16 m = (__mmask16)((1u << nt) - 1);
		__m512 xv[SF_QRUN], ax[SF_QRUN];
		float *y[QP_TOKENS];
		for (size_t k = 0; k < ns; k++) {
			xv[k] = p->x[k] ? _mm512_maskz_loadu_ps(m, p->x[k] + t0) : _mm512_setzero_ps();
			ax[k] = _mm512_abs_ps(xv[k]);
		}
		for (size_t t = 0; t < nt; t++)
			y[t] = y0 + (t0 + t) * ldy;
		for (size_t i = 0; i < p->nb; i++)
			qpass_prep(p, xv, ax, i, dt);
		for (size_t i = 0; i < p->nb; i++)
			if (dt == SF_DTYPE_Q8)
				qpass_blocks(p, i, SF_DTYPE_Q8, y, nt);
			else
				qpass_blocks(p, i, SF_DTYPE_Q4, y, nt);
	}
}

/* The AVX-512 level's qpass_quads_fn. */
static T512I void qpass_quads512(uint8_t (*buf)[128], const uint8_t *const *col, size_t nq,
				 size_t rows, size_t b, enum sf_dtype dt)
{
	for (size_t qd = 0; qd < nq; qd++) {
		const uint8_t *c[4];
		for (int j = 0; j < 4; j++)
			c[j] = top_codes_at(col[4 * qd + j], dt, rows, b);
		_mm512_storeu_si512(buf[qd], rows4x16_512(c, 0));
		if (dt == SF_DTYPE_Q8)
			_mm512_storeu_si512(buf[qd] + 64, rows4x16_512(c, 16));
	}
}

/* NT tokens from t0 of a slab's run r over blocks [b0, b0 + nbc) of its
 * tile (of nb blocks, its first block base): the run's inputs at their
 * slots (0 at the others, which changes no sum), then each block's quads
 * that hold a position. */
INL T512I void qslab512_tokens(float *Y, size_t ldy, size_t r0, const struct slab_run *r,
			       const __m512 *sc, size_t nb, size_t base, size_t b0, size_t nbc,
			       enum sf_dtype dt, const float *X, size_t ldx, size_t k0, size_t k1,
			       size_t t0, const int NT)
{
	float xd[SF_QRUN * QI512_TOKENS];
	struct qact512 qa[QI512_TOKENS];
	float *y[QI512_TOKENS];
	for (int t = 0; t < NT; t++)
		y[t] = Y + (t0 + (size_t)t) * ldy + base * SF_QBLOCK - r0;
	size_t lx;
	const float *x = slab_inputs(xd, r, X, ldx, k0, k1, t0, (size_t)NT, &lx);
	qprep512(qa, sc, x, lx, SF_QRUN, NT);
	/* dt and a whole run's quads constants in the block's kernel */
	if (r->nq == SF_QRUN / 4 && dt == SF_DTYPE_Q4)
		for (size_t i = 0; i < nbc; i++)
			qmac512_slab(y, qa, r, nb, b0 + i, i, SF_DTYPE_Q4, NT, SF_QRUN / 4);
	else if (r->nq == SF_QRUN / 4)
		for (size_t i = 0; i < nbc; i++)
			qmac512_slab(y, qa, r, nb, b0 + i, i, SF_DTYPE_Q8, NT, SF_QRUN / 4);
	else
		for (size_t i = 0; i < nbc; i++)
			qmac512_slab(y, qa, r, nb, b0 + i, i, dt, NT, r->nq);
}

/* A slab's whole blocks, tile by tile and run by run, each run read once
 * in order, QI512_BLOCKS blocks and 8, 4 or 1 tokens at a time. */
static T512I void qslab_avx512(float *Y, size_t ldy, size_t r0, size_t r1,
			       const struct sf_slab *s, const uint32_t *pos, size_t n,
			       const float *X, size_t ldx, size_t T)
{
	const enum sf_dtype dt = s->dt;
	size_t B0 = (r0 + SF_QBLOCK - 1) / SF_QBLOCK, B1 = r1 / SF_QBLOCK;

	/* below a tile of tokens, the pass's lanes idle and its setup costs
	 * more than the tokens' own preparations */
	if (T >= QP_TOKENS) {
		qslab_pass(qpass_tokens512, Y, ldy, r0, s, pos, n, X, ldx, T, B0, B1);
		qslab_edges(Y, ldy, r0, r1, B0, B1, s, pos, n, X, ldx, T);
		return;
	}
	for (size_t c = B0 / SF_QSLAB_BLOCKS; c * SF_QSLAB_BLOCKS < B1; c++) {
		size_t base = c * SF_QSLAB_BLOCKS, nb = tile_blocks(s, c);
		size_t e0 = B0 > base ? B0 - base : 0, e1 = B1 - base < nb ? B1 - base : nb;
		/* one token: run by run down the tile, its memory in order; a
		 * pass: QI512_BLOCKS blocks at a time over every run, so that
		 * their rows of Y stay in the caches */
		size_t span = T == 1 ? e1 - e0 : QI512_BLOCKS;
		for (size_t a0 = e0; a0 < e1; a0 += span) {
			for (size_t k0 = 0, k1; k0 < n; k0 = k1) {
				struct slab_run r;
				size_t a1 = e1 - a0 < span ? e1 : a0 + span;
				slab_run_of(&r, s, c, pos, k0, k1 = sf_qrun_end(pos, k0, n));
				for (size_t b0 = a0; b0 < a1; b0 += QI512_BLOCKS) {
					size_t nbc = a1 - b0 < QI512_BLOCKS ? a1 - b0 : QI512_BLOCKS;
					__m512 sc[SF_QRUN];
					for (size_t p = 0; p < SF_QRUN; p++)
						sc[p] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(
							(__mmask16)((1u << nbc) - 1), r.run + 2 * (nb * p + b0)));
					size_t t0 = 0;
					for (; t0 + 8 <= T; t0 += 8)
						qslab512_tokens(Y, ldy, r0, &r, sc, nb, base, b0, nbc, dt, X,
								ldx, k0, k1, t0, 8);
					for (; t0 + 4 <= T; t0 += 4)
						qslab512_tokens(Y, ldy, r0, &r, sc, nb, base, b0, nbc, dt, X,
								ldx, k0, k1, t0, 4);
					for (; t0 < T; t0++)
						qslab512_tokens(Y, ldy, r0, &r, sc, nb, base, b0, nbc, dt, X,
								ldx, k0, k1, t0, 1);
				}
			}
		}
	}
	qslab_edges(Y, ldy, r0, r1, B0, B1, s, pos, n, X, ldx, T);
}

static T512I void qint_avx512(float *Y, size_t ldy, size_t r0, size_t r1,
			      const struct qsrc *q, const float *X, size_t ldx, size_t T, size_t n)
{
	size_t s0 = (r0 + SF_QBLOCK - 1) / SF_QBLOCK * SF_QBLOCK, s1 = r1 / SF_QBLOCK * SF_QBLOCK;

	if (s0 < s1) {
		if (T == 1)
			qint512_one(Y, r0, q, X, n, s0 / SF_QBLOCK, s1 / SF_QBLOCK);
		else
			qint_pass(qpass_tokens512, qpass_quads512, Y, ldy, r0, q, X, ldx, T, n,
				  s0 / SF_QBLOCK, s1 / SF_QBLOCK);
	}
	qint_edges(Y, ldy, r0, r1, s0, s1, q, X, ldx, T, n);
}

#endif /* __x86_64__ */

#if defined(__aarch64__)

// ----------------------------------------------------------------------------
// NEON: a float path of 16 rows (half a block) as four vectors of 4, and
// the integer products, a block's 32 rows as eight vectors of four sums,
// by SDOT (the dot-product level) or widening multiplies (plain NEON);
// at the i8mm level a pair of tokens by SMMLA, a block's 32 rows as
// sixteen 2x2 tiles of rows by tokens

#define TDOT __attribute__((target("arch=armv8.2-a+dotprod")))
#define TMM __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))

/* Block b's scale, exact (FCVT, as the library's conversion) and inline. */
static inline float qscale_n(const uint8_t *col, size_t b)
{
	__fp16 h;
	memcpy(&h, sf_q_scale_at(col, b), sizeof(h));
	return (float)h;
}

/* The 16 signed codes of rows [j0, j0 + 16) (j0 a multiple of 16) of the
 * column at col: q8's bytes, q4's nibbles less 8. */
INL int8x16_t codes16_n(const uint8_t *col, enum sf_dtype dt, size_t rows, size_t j0)
{
	const uint8_t *b = q_codes(col, dt, rows, j0);
	if (dt == SF_DTYPE_Q8)
		return vld1q_s8((const int8_t *)b + 16 * (j0 / 16 % 2));
	uint8x16_t c = vld1q_u8(b);
	c = j0 / 16 % 2 ? vshrq_n_u8(c, 4) : vandq_u8(c, vdupq_n_u8(15));
	return vsubq_s8(vreinterpretq_s8_u8(c), vdupq_n_s8(8));
}

/* The 16 weights of rows [j0, j0 + 16) as floats: code times scale. */
INL void deq16_n(const uint8_t *col, enum sf_dtype dt, size_t rows, size_t j0, float32x4_t *w)
{
	int8x16_t c = codes16_n(col, dt, rows, j0);
	int16x8_t lo = vmovl_s8(vget_low_s8(c)), hi = vmovl_high_s8(c);
	float s = qscale_n(col, j0 / SF_QBLOCK);
	w[0] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), s);
	w[1] = vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), s);
	w[2] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), s);
	w[3] = vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), s);
}

/* One token, NC columns (4 or 1) a sweep down the rows, as qca256_cols:
 * y loaded and stored once a strip for the NC, every row taking the
 * columns in turn. */
INL void qcan_cols(float *y, size_t r0, size_t s0, size_t s1, size_t rows,
		   const void *const *cols, size_t off, enum sf_dtype dt, const float *X, const int NC)
{
	const uint8_t *col[4];
#pragma GCC unroll 4
	for (int i = 0; i < NC; i++)
		col[i] = (const uint8_t *)cols[i] + off;
	for (size_t j0 = s0; j0 < s1; j0 += 16) {
		float *yj = y + (j0 - r0);
		float32x4_t a[4] = { vld1q_f32(yj), vld1q_f32(yj + 4), vld1q_f32(yj + 8),
				     vld1q_f32(yj + 12) };
#pragma GCC unroll 4
		for (int i = 0; i < NC; i++) {
			float32x4_t w[4];
			deq16_n(col[i], dt, rows, j0, w);
#pragma GCC unroll 4
			for (int v = 0; v < 4; v++)
				a[v] = vfmaq_n_f32(a[v], w[v], X[i]);
		}
#pragma GCC unroll 4
		for (int v = 0; v < 4; v++)
			vst1q_f32(yj + 4 * v, a[v]);
	}
}

INL void qcan(float *y, size_t r0, size_t s0, size_t s1, size_t rows, const void *const *cols,
	      size_t off, enum sf_dtype dt, const float *X, size_t n)
{
	size_t k = 0;
	for (; k + 4 <= n; k += 4) {
		if (k + 8 <= n)
			q_prefetch(cols + k + 4, off, dt, rows, s0, s1);
		qcan_cols(y, r0, s0, s1, rows, cols + k, off, dt, X + k, 4);
	}
	for (; k < n; k++)
		qcan_cols(y, r0, s0, s1, rows, cols + k, off, dt, X + k, 1);
}

static void qwiden_neon(float *w, const uint8_t *col, enum sf_dtype dt, size_t rows, size_t j0,
			size_t nr)
{
	for (size_t j = j0; j < j0 + nr; j += 16) {
		float32x4_t v[4];
		deq16_n(col, dt, rows, j, v);
		for (int i = 0; i < 4; i++)
			vst1q_f32(w + (j - j0) + 4 * i, v[i]);
	}
}

static void qcolaccum_neon(float *Y, size_t ldy, size_t r0, size_t r1, size_t rows,
			   const void *const *cols, size_t off, enum sf_dtype dt, const float *X,
			   const uint32_t *sel, size_t ldx, size_t T, size_t n)
{
	if (sel) {
		qpass(Y, ldy, r0, r1, rows, cols, off, dt, X, sel, ldx, T, n, qwiden_neon);
		return;
	}
	size_t s0 = (r0 + 15) / 16 * 16, s1 = r1 / 16 * 16;
	if (s0 < s1 && dt == SF_DTYPE_Q8)
		qcan(Y, r0, s0, s1, rows, cols, off, SF_DTYPE_Q8, X, n);
	else if (s0 < s1)
		qcan(Y, r0, s0, s1, rows, cols, off, SF_DTYPE_Q4, X, n);
	edges_ref(Y, ldy, r0, r1, s0, s1, rows, cols, off, dt, X, sel, ldx, T, n);
}

/* The integer products: blocks four at a time (one vector of their
 * scales), tokens two at a time. */
#define QIN_BLOCKS 4
#define QIN_TOKENS 2

/* A run's activations for one token over blocks [b0, b0 + QIN_BLOCKS):
 * per quad of columns and block the four int8 codes as one int32 (byte
 * c: column 4 * quad + c), and per block the factor d. */
struct qactn {
	int32_t q[SF_QRUN / 4][QIN_BLOCKS];
	float d[QIN_BLOCKS];
};

/* The activations of columns [0, m) of a run for tokens [0, NT), each as
 * qint_ref rounds it: sc[k] the scales of column k's blocks. */
INL void qprep_n(struct qactn *qa, const float32x4_t *sc, const float *X, size_t ldx, size_t m,
		 const int NT)
{
	/* the bytes of four columns' four blocks to four blocks' columns */
	static const uint8_t by_block[16] = { 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15 };
	const uint8x16_t lanes = vld1q_u8(by_block);

	for (int t = 0; t < NT; t++) {
		float32x4_t amax = vdupq_n_f32(0.0f);
		for (size_t k = 0; k < m; k++)
			amax = vmaxq_f32(amax, vabsq_f32(vmulq_n_f32(sc[k], X[k * ldx + t])));
		float32x4_t id = vdivq_f32(vdupq_n_f32(127.0f), amax);
		id = vbslq_f32(vcleq_f32(id, vdupq_n_f32(FLT_MAX)), id, vdupq_n_f32(0.0f));
		vst1q_f32(qa[t].d, vdivq_f32(amax, vdupq_n_f32(127.0f)));
		for (size_t k0 = 0; k0 < m; k0 += 4) {
			int16x4_t q[4];
			for (size_t c = 0; c < 4; c++) {
				size_t k = k0 + c < m ? k0 + c : k0;
				float32x4_t v = vmulq_n_f32(sc[k], X[k * ldx + t]);
				q[c] = k0 + c < m ? vmovn_s32(vcvtnq_s32_f32(vmulq_f32(v, id)))
						  : vdup_n_s16(0);
			}
			int8x16_t cols = vcombine_s8(vmovn_s16(vcombine_s16(q[0], q[1])),
						     vmovn_s16(vcombine_s16(q[2], q[3])));
			vst1q_s32(qa[t].q[k0 / 4],
				  vreinterpretq_s32_s8(vqtbl1q_s8(cols, lanes)));
		}
	}
}

/* Four columns' 16 codes (c[j] column j's) to rows: r[i] rows 4i to
 * 4i + 3, four bytes a row, byte j column j's. */
INL void rows4x16_n(int8x16_t c0, int8x16_t c1, int8x16_t c2, int8x16_t c3, int8x16_t *r)
{
	int16x8_t t0 = vreinterpretq_s16_s8(vzip1q_s8(c0, c1));
	int16x8_t t1 = vreinterpretq_s16_s8(vzip2q_s8(c0, c1));
	int16x8_t t2 = vreinterpretq_s16_s8(vzip1q_s8(c2, c3));
	int16x8_t t3 = vreinterpretq_s16_s8(vzip2q_s8(c2, c3));
	r[0] = vreinterpretq_s8_s16(vzip1q_s16(t0, t2));
	r[1] = vreinterpretq_s8_s16(vzip2q_s16(t0, t2));
	r[2] = vreinterpretq_s8_s16(vzip1q_s16(t1, t3));
	r[3] = vreinterpretq_s8_s16(vzip2q_s16(t1, t3));
}

/* q4's bytes as rows (byte r: row r's nibble low, row r + 16's high) to
 * the signed codes of rows 0-15 (w[0..3]) and 16-31 (w[4..7]). */
INL void nibbles_n(const uint8x16_t *p, int8x16_t *w)
{
	for (int i = 0; i < 4; i++) {
		w[i] = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(p[i], vdupq_n_u8(15))), vdupq_n_s8(8));
		w[4 + i] = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(p[i], 4)), vdupq_n_s8(8));
	}
}

/* Block b of four columns (col[j] column j's) as rows: w[i] rows 4i to
 * 4i + 3, the signed codes. */
INL void quad_rows_n(const uint8_t *const *col, enum sf_dtype dt, size_t rows, size_t b,
		     int8x16_t *w)
{
	const uint8_t *c[4];
	for (int j = 0; j < 4; j++)
		c[j] = top_codes_at(col[j], dt, rows, b);
	if (dt == SF_DTYPE_Q8) {
		for (int h = 0; h < 2; h++)
			rows4x16_n(vld1q_s8((const int8_t *)c[0] + 16 * h),
				   vld1q_s8((const int8_t *)c[1] + 16 * h),
				   vld1q_s8((const int8_t *)c[2] + 16 * h),
				   vld1q_s8((const int8_t *)c[3] + 16 * h), w + 4 * h);
		return;
	}
	int8x16_t r[4];
	uint8x16_t p[4];
	rows4x16_n(vld1q_s8((const int8_t *)c[0]), vld1q_s8((const int8_t *)c[1]),
		   vld1q_s8((const int8_t *)c[2]), vld1q_s8((const int8_t *)c[3]), r);
	for (int i = 0; i < 4; i++)
		p[i] = vreinterpretq_u8_s8(r[i]);
	nibbles_n(p, w);
}

/* A slab's quad of a block, its bytes already rows (quad_byte). */
INL void slab_quad_n(const uint8_t *p, enum sf_dtype dt, int8x16_t *w)
{
	if (dt == SF_DTYPE_Q8) {
		for (int i = 0; i < 8; i++)
			w[i] = vld1q_s8((const int8_t *)p + 16 * i);
		return;
	}
	uint8x16_t q[4] = { vld1q_u8(p), vld1q_u8(p + 16), vld1q_u8(p + 32), vld1q_u8(p + 48) };
	nibbles_n(q, w);
}

static TDOT int32x4_t sdot_n(int32x4_t acc, int8x16_t w, int8x16_t a)
{
	return vdotq_s32(acc, w, a);
}

/* acc += per lane (a row) the four products of its bytes of w and a: by
 * SDOT, or by widening multiplies whose pairs fit int16 (|code| <= 128,
 * |activation| <= 127). */
INL int32x4_t dot4_n(int32x4_t acc, int8x16_t w, int8x16_t a, const int dot)
{
	if (dot)
		return sdot_n(acc, w, a);
	int16x8_t p = vpaddq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(a)), vmull_high_s8(w, a));
	return vpadalq_s16(acc, p);
}

/* Tokens [0, NT)'s sums of a quad's block w into acc[t], quad qd's
 * activations of block i. */
INL void qdot_n(int32x4_t (*acc)[8], const int8x16_t *w, const struct qactn *qa, size_t qd,
		size_t i, const int NT, const int dot)
{
#pragma GCC unroll 2
	for (int t = 0; t < NT; t++) {
		int8x16_t a = vreinterpretq_s8_s32(vdupq_n_s32(qa[t].q[qd][i]));
#pragma GCC unroll 8
		for (int r = 0; r < 8; r++)
			acc[t][r] = dot4_n(acc[t][r], w[r], a, dot);
	}
}

/* The 32 rows of block b of Y (y[t] at row 32 * b) += d * the integer
 * sums acc[t] of block i of the activations. */
INL void qfinish_n(float *const *y, const struct qactn *qa, int32x4_t (*acc)[8], size_t b,
		   size_t i, const int NT)
{
#pragma GCC unroll 2
	for (int t = 0; t < NT; t++) {
		float *yb = y[t] + SF_QBLOCK * b;
#pragma GCC unroll 8
		for (int r = 0; r < 8; r++)
			vst1q_f32(yb + 4 * r, vfmaq_n_f32(vld1q_f32(yb + 4 * r),
							  vcvtq_f32_s32(acc[t][r]), qa[t].d[i]));
	}
}

/* The scales of nb <= 4 blocks from b at col as floats, 0 past them. */
INL float32x4_t scales_n(const uint8_t *col, size_t b, size_t nb)
{
	uint16_t h[QIN_BLOCKS] = { 0 };
	/* as scales256: whole, straight from memory */
	if (nb == QIN_BLOCKS)
		return vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(sf_q_scale_at(col, b))));
	memcpy(h, sf_q_scale_at(col, b), 2 * nb);
	return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

static TMM int32x4_t smmla_n(int32x4_t acc, int8x16_t w, int8x16_t a)
{
	return vmmlaq_s32(acc, w, a);
}

/* The i8mm level's pair of tokens: two quads' blocks wa and wb (NULL:
 * none, past the run's last quad) against quads qd and qe of both
 * tokens' activations of block i. SMMLA multiplies a 2x8 matrix by an
 * 8x2 one: here two rows' codes of the eight columns (one row's four of
 * wa, then its four of wb) by both tokens' eight activations, into acc2's
 * 2x2 tile [row, token]; acc2[2v] holds rows 4v and 4v + 1, acc2[2v + 1]
 * rows 4v + 2 and 4v + 3. The sums are SDOT's, added in another order:
 * integers, so exactly the same. */
INL void qmm_n(int32x4_t *acc2, const int8x16_t *wa, const int8x16_t *wb,
	       const struct qactn *qa, size_t qd, size_t qe, size_t i)
{
	int32_t a[4] = { qa[0].q[qd][i], wb ? qa[0].q[qe][i] : 0, qa[1].q[qd][i],
			 wb ? qa[1].q[qe][i] : 0 };
	int8x16_t av = vreinterpretq_s8_s32(vld1q_s32(a));
#pragma GCC unroll 8
	for (int v = 0; v < 8; v++) {
		int32x4_t a32 = vreinterpretq_s32_s8(wa[v]);
		int32x4_t b32 = wb ? vreinterpretq_s32_s8(wb[v]) : vdupq_n_s32(0);
		acc2[2 * v] = smmla_n(acc2[2 * v], vreinterpretq_s8_s32(vzip1q_s32(a32, b32)), av);
		acc2[2 * v + 1] =
			smmla_n(acc2[2 * v + 1], vreinterpretq_s8_s32(vzip2q_s32(a32, b32)), av);
	}
}

/* acc2's tiles of block b (block i of the activations) into the pair of
 * tokens' rows as qfinish_n: each token's four rows a vector, unzipped. */
INL void qmm_finish_n(float *const *y, const struct qactn *qa, const int32x4_t *acc2, size_t b,
		      size_t i)
{
	int32x4_t acc[QIN_TOKENS][8];
#pragma GCC unroll 8
	for (int v = 0; v < 8; v++) {
		acc[0][v] = vuzp1q_s32(acc2[2 * v], acc2[2 * v + 1]);
		acc[1][v] = vuzp2q_s32(acc2[2 * v], acc2[2 * v + 1]);
	}
	qfinish_n(y, qa, acc, b, i, QIN_TOKENS);
}

/* Blocks [b0, b0 + nb) of a run's columns (col[k], nq quads) for tokens
 * [0, NT) of X: prepared once, then each block's quads; at the i8mm level
 * (dot 2) a pair of tokens takes the quads two at a time by SMMLA. One
 * token stays on SDOT there: SMMLA's second token would be zeros, so it
 * does SDOT's 16 products an instruction, after the zips. */
INL void qrun_n(float *const *y, const float32x4_t *sc, const float *X, size_t ldx, size_t m,
		const uint8_t *const *col, size_t nq, size_t rows, size_t b0, size_t nb,
		enum sf_dtype dt, const int NT, const int dot)
{
	struct qactn qa[QIN_TOKENS];
	qprep_n(qa, sc, X, ldx, m, NT);
	if (dot == 2 && NT == 2) {
		for (size_t i = 0; i < nb; i++) {
			int32x4_t acc2[16];
			for (int v = 0; v < 16; v++)
				acc2[v] = vdupq_n_s32(0);
			for (size_t qd = 0; qd < nq; qd += 2) {
				int8x16_t wa[8], wb[8];
				int two = qd + 1 < nq;
				quad_rows_n(col + 4 * qd, dt, rows, b0 + i, wa);
				if (two)
					quad_rows_n(col + 4 * (qd + 1), dt, rows, b0 + i, wb);
				qmm_n(acc2, wa, two ? wb : NULL, qa, qd, qd + 1, i);
			}
			qmm_finish_n(y, qa, acc2, b0 + i, i);
		}
		return;
	}
	for (size_t i = 0; i < nb; i++) {
		int32x4_t acc[QIN_TOKENS][8];
		for (int t = 0; t < NT; t++)
			for (int r = 0; r < 8; r++)
				acc[t][r] = vdupq_n_s32(0);
		for (size_t qd = 0; qd < nq; qd++) {
			int8x16_t w[8];
			quad_rows_n(col + 4 * qd, dt, rows, b0 + i, w);
			qdot_n(acc, w, qa, qd, i, NT, dot);
		}
		qfinish_n(y, qa, acc, b0 + i, i, NT);
	}
}

INL void qint_n(float *Y, size_t ldy, size_t r0, size_t r1, const struct qsrc *q, const float *X,
		size_t ldx, size_t T, size_t n, const int dot)
{
	const size_t rows = q->rows;
	const enum sf_dtype dt = q->dt;
	size_t s0 = (r0 + SF_QBLOCK - 1) / SF_QBLOCK * SF_QBLOCK, s1 = r1 / SF_QBLOCK * SF_QBLOCK;

	for (size_t b0 = s0 / SF_QBLOCK; b0 < s1 / SF_QBLOCK; b0 += QIN_BLOCKS) {
		size_t nb = s1 / SF_QBLOCK - b0 < QIN_BLOCKS ? s1 / SF_QBLOCK - b0 : QIN_BLOCKS;
		for (size_t k0 = 0, k1; k0 < n; k0 = k1) {
			const uint8_t *col[SF_QRUN];
			float32x4_t sc[SF_QRUN];
			size_t m = (k1 = sf_qrun_end(q->pos, k0, n)) - k0;
			size_t nq = run_quads(q, k0, k1, col);
			for (size_t k = 0; k < m; k++)
				sc[k] = scales_n(col[k], b0, nb);
			for (size_t t0 = 0, nt; t0 < T; t0 += nt) {
				float *y[QIN_TOKENS] = { Y + t0 * ldy - r0, Y + (t0 + 1) * ldy - r0 };
				const float *x = X + k0 * ldx + t0;
				nt = T - t0 >= QIN_TOKENS ? QIN_TOKENS : 1;
				if (nt == QIN_TOKENS)
					qrun_n(y, sc, x, ldx, m, col, nq, rows, b0, nb, dt, QIN_TOKENS,
					       dot);
				else
					qrun_n(y, sc, x, ldx, m, col, nq, rows, b0, nb, dt, 1, dot);
			}
		}
	}
	qint_edges(Y, ldy, r0, r1, s0, s1, q, X, ldx, T, n);
}

static void qint_neon(float *Y, size_t ldy, size_t r0, size_t r1, const struct qsrc *q,
		      const float *X, size_t ldx, size_t T, size_t n)
{
	qint_n(Y, ldy, r0, r1, q, X, ldx, T, n, 0);
}

static TDOT void qint_dotprod(float *Y, size_t ldy, size_t r0, size_t r1, const struct qsrc *q,
			      const float *X, size_t ldx, size_t T, size_t n)
{
	qint_n(Y, ldy, r0, r1, q, X, ldx, T, n, 1);
}

static TMM void qint_i8mm(float *Y, size_t ldy, size_t r0, size_t r1, const struct qsrc *q,
			  const float *X, size_t ldx, size_t T, size_t n)
{
	qint_n(Y, ldy, r0, r1, q, X, ldx, T, n, 2);
}

/* Block b0 + i .. of a slab's run r (a tile of nb blocks) for tokens
 * [0, NT): as qrun_n, the quads that hold a position already rows (at
 * the i8mm level, a pair of tokens, two such quads at a time). */
INL void qslab_run_n(float *const *y, const float32x4_t *sc, const float *x, size_t lx,
		     const struct slab_run *r, size_t nb, size_t b0, size_t nbc, enum sf_dtype dt,
		     const int NT, const int dot)
{
	const size_t qb = 4 * top_code_bytes(dt);
	struct qactn qa[QIN_TOKENS];
	qprep_n(qa, sc, x, lx, SF_QRUN, NT);
	if (dot == 2 && NT == 2) {
		for (size_t i = 0; i < nbc; i++) {
			const uint8_t *blk = run_codes(r->run, dt, nb, b0 + i);
			int32x4_t acc2[16];
			for (int v = 0; v < 16; v++)
				acc2[v] = vdupq_n_s32(0);
			for (size_t a = 0; a < r->nq; a += 2) {
				int8x16_t wa[8], wb[8];
				int two = a + 1 < r->nq;
				slab_quad_n(blk + r->quad[a] * qb, dt, wa);
				if (two)
					slab_quad_n(blk + r->quad[a + 1] * qb, dt, wb);
				qmm_n(acc2, wa, two ? wb : NULL, qa, r->quad[a], two ? r->quad[a + 1] : 0,
				      i);
			}
			qmm_finish_n(y, qa, acc2, b0 + i, i);
		}
		return;
	}
	for (size_t i = 0; i < nbc; i++) {
		const uint8_t *blk = run_codes(r->run, dt, nb, b0 + i);
		int32x4_t acc[QIN_TOKENS][8];
		for (int t = 0; t < NT; t++)
			for (int v = 0; v < 8; v++)
				acc[t][v] = vdupq_n_s32(0);
		for (size_t a = 0; a < r->nq; a++) {
			int8x16_t w[8];
			slab_quad_n(blk + r->quad[a] * qb, dt, w);
			qdot_n(acc, w, qa, r->quad[a], i, NT, dot);
		}
		qfinish_n(y, qa, acc, b0 + i, i, NT);
	}
}

/* A slab's whole blocks, tile by tile, run by run, QIN_BLOCKS blocks and
 * QIN_TOKENS tokens at a time: the run's inputs at their slots (0 at the
 * others, which changes no sum), then each block's quads that hold a
 * position. */
INL void qslab_n(float *Y, size_t ldy, size_t r0, size_t r1, const struct sf_slab *s,
		 const uint32_t *pos, size_t n, const float *X, size_t ldx, size_t T, const int dot)
{
	const enum sf_dtype dt = s->dt;
	size_t B0 = (r0 + SF_QBLOCK - 1) / SF_QBLOCK, B1 = r1 / SF_QBLOCK;

	for (size_t c = B0 / SF_QSLAB_BLOCKS; c * SF_QSLAB_BLOCKS < B1; c++) {
		size_t base = c * SF_QSLAB_BLOCKS, nb = tile_blocks(s, c);
		size_t e0 = B0 > base ? B0 - base : 0, e1 = B1 - base < nb ? B1 - base : nb;
		for (size_t k0 = 0, k1; k0 < n; k0 = k1) {
			struct slab_run r;
			slab_run_of(&r, s, c, pos, k0, k1 = sf_qrun_end(pos, k0, n));
			for (size_t b0 = e0; b0 < e1; b0 += QIN_BLOCKS) {
				size_t nbc = e1 - b0 < QIN_BLOCKS ? e1 - b0 : QIN_BLOCKS;
				float32x4_t sc[SF_QRUN];
				for (size_t p = 0; p < SF_QRUN; p++)
					sc[p] = scales_n(r.run + 2 * nb * p, b0, nbc);
				for (size_t t0 = 0, nt; t0 < T; t0 += nt) {
					float xd[SF_QRUN * QIN_TOKENS];
					float *y[QIN_TOKENS] = { Y + t0 * ldy + base * SF_QBLOCK - r0,
								 Y + (t0 + 1) * ldy + base * SF_QBLOCK - r0 };
					size_t lx;
					nt = T - t0 >= QIN_TOKENS ? QIN_TOKENS : 1;
					const float *x = slab_inputs(xd, &r, X, ldx, k0, k1, t0, nt, &lx);
					if (nt == QIN_TOKENS)
						qslab_run_n(y, sc, x, lx, &r, nb, b0, nbc, dt, QIN_TOKENS,
							    dot);
					else
						qslab_run_n(y, sc, x, lx, &r, nb, b0, nbc, dt, 1, dot);
				}
			}
		}
	}
	qslab_edges(Y, ldy, r0, r1, B0, B1, s, pos, n, X, ldx, T);
}

static void qslab_neon(float *Y, size_t ldy, size_t r0, size_t r1, const struct sf_slab *s,
		       const uint32_t *pos, size_t n, const float *X, size_t ldx, size_t T)
{
	qslab_n(Y, ldy, r0, r1, s, pos, n, X, ldx, T, 0);
}

static TDOT void qslab_dotprod(float *Y, size_t ldy, size_t r0, size_t r1,
			       const struct sf_slab *s, const uint32_t *pos, size_t n,
			       const float *X, size_t ldx, size_t T)
{
	qslab_n(Y, ldy, r0, r1, s, pos, n, X, ldx, T, 1);
}

static TMM void qslab_i8mm(float *Y, size_t ldy, size_t r0, size_t r1, const struct sf_slab *s,
			   const uint32_t *pos, size_t n, const float *X, size_t ldx, size_t T)
{
	qslab_n(Y, ldy, r0, r1, s, pos, n, X, ldx, T, 2);
}

#endif /* __aarch64__ */

// ----------------------------------------------------------------------------
// the family's table, indexed by enum sf_isa (engine/cpu.h)

typedef void qcolaccum_fn(float *Y, size_t ldy, size_t r0, size_t r1, size_t rows,
			  const void *const *cols, size_t off, enum sf_dtype dt, const float *X,
			  const uint32_t *sel, size_t ldx, size_t T, size_t n);

static qcolaccum_fn *const qcolaccum_table[SF_NISA] = {
	[SF_ISA_REF] = sf_qcolaccum_ref,
#if defined(__x86_64__)
	[SF_ISA_AVX2] = qcolaccum_avx2,
	[SF_ISA_AVX512] = qcolaccum_avx512,
#else
	[SF_ISA_AVX2] = sf_qcolaccum_ref,
	[SF_ISA_AVX512] = sf_qcolaccum_ref,
#endif
#if defined(__aarch64__)
	[SF_ISA_NEON] = qcolaccum_neon,
	[SF_ISA_DOTPROD] = qcolaccum_neon,
	[SF_ISA_I8MM] = qcolaccum_neon,
#else
	[SF_ISA_NEON] = sf_qcolaccum_ref,
	[SF_ISA_DOTPROD] = sf_qcolaccum_ref,
	[SF_ISA_I8MM] = sf_qcolaccum_ref,
#endif
};

void sf_qcolaccum(float *Y, size_t ldy, size_t r0, size_t r1, size_t rows,
		  const void *const *cols, size_t off, enum sf_dtype dt, const float *X,
		  const uint32_t *sel, size_t ldx, size_t T, size_t n)
{
	if (r0 < r1 && n && T)
		qcolaccum_table[sf_cpu_isa()](Y, ldy, r0, r1, rows, cols, off, dt, X, sel, ldx, T,
					      n);
}

typedef void qint_fn(float *Y, size_t ldy, size_t r0, size_t r1, const struct qsrc *q,
		     const float *X, size_t ldx, size_t T, size_t n);

static qint_fn *const qint_table[SF_NISA] = {
	[SF_ISA_REF] = qint_ref,
#if defined(__x86_64__)
	[SF_ISA_AVX2] = qint_avx2,
	[SF_ISA_AVX512] = qint_avx512,
#else
	[SF_ISA_AVX2] = qint_ref,
	[SF_ISA_AVX512] = qint_ref,
#endif
#if defined(__aarch64__)
	[SF_ISA_NEON] = qint_neon,
	[SF_ISA_DOTPROD] = qint_dotprod,
	[SF_ISA_I8MM] = qint_i8mm,
#else
	[SF_ISA_NEON] = qint_ref,
	[SF_ISA_DOTPROD] = qint_ref,
	[SF_ISA_I8MM] = qint_ref,
#endif
};

enum sf_isa sf_qint_isa(void)
{
	enum sf_isa isa = sf_cpu_isa();
	if (isa == SF_ISA_AVX512 &&
	    !(sf_cpu_has_feature("avx512vnni") && sf_cpu_has_feature("avx512vbmi")))
		isa = SF_ISA_AVX2;
	return isa;
}

typedef void qslab_fn(float *Y, size_t ldy, size_t r0, size_t r1, const struct sf_slab *s,
		      const uint32_t *pos, size_t k, const float *X, size_t ldx, size_t T);

static qslab_fn *const qslab_table[SF_NISA] = {
	[SF_ISA_REF] = sf_qslab_int_ref,
#if defined(__x86_64__)
	[SF_ISA_AVX2] = qslab_avx2,
	[SF_ISA_AVX512] = qslab_avx512,
#else
	[SF_ISA_AVX2] = sf_qslab_int_ref,
	[SF_ISA_AVX512] = sf_qslab_int_ref,
#endif
#if defined(__aarch64__)
	[SF_ISA_NEON] = qslab_neon,
	[SF_ISA_DOTPROD] = qslab_dotprod,
	[SF_ISA_I8MM] = qslab_i8mm,
#else
	[SF_ISA_NEON] = sf_qslab_int_ref,
	[SF_ISA_DOTPROD] = sf_qslab_int_ref,
	[SF_ISA_I8MM] = sf_qslab_int_ref,
#endif
};

void sf_qslab_int(float *Y, size_t ldy, size_t r0, size_t r1, const struct sf_slab *s,
		  const uint32_t *pos, size_t k, const float *X, size_t ldx, size_t T)
{
	if (r0 < r1 && k && T)
		qslab_table[sf_qint_isa()](Y, ldy, r0, r1, s, pos, k, X, ldx, T);
}

const char *sf_qcolaccum_int_kernel(void)
{
	return sf_qint_isa() == SF_ISA_AVX512 ? "avx512vnni" : sf_isa_name(sf_qint_isa());
}

void sf_qcolaccum_int(float *Y, size_t ldy, size_t r0, size_t r1, size_t rows,
		      const void *const *cols, const uint32_t *pos, size_t off, enum sf_dtype dt,
		      const float *X, size_t ldx, size_t T, size_t n)
{
	const struct qsrc q = { .cols = cols, .off = off, .pos = pos, .rows = rows, .dt = dt };
	if (r0 < r1 && n && T)
		qint_table[sf_qint_isa()](Y, ldy, r0, r1, &q, X, ldx, T, n);
}

void sf_colaccum_span(float *Y, size_t ldy, size_t r0, size_t r1, size_t rows,
		      const void *const *cols, size_t off, enum sf_dtype dt, const float *X,
		      const uint32_t *sel, size_t ldx, size_t T, size_t n)
{
	if (sf_dtype_is_block(dt)) {
		sf_qcolaccum(Y, ldy, r0, r1, rows, cols, off, dt, X, sel, ldx, T, n);
		return;
	}
	off += r0 * sf_dtype_size(dt);
	if (!sel)
		sf_colaccum(Y, r1 - r0, cols, off, dt, X, n);
	else
		sf_colaccum_batch(Y, ldy, r1 - r0, cols, off, dt, X, sel, ldx, T, n);
}

size_t sf_slab_bytes(enum sf_dtype dt, size_t rows, size_t n)
{
	return sf_dtype_is_block(dt) ? sf_qslab_bytes(dt, rows, n) : sf_fslab_bytes(dt, rows, n);
}

void sf_slab_init(struct sf_slab *s, uint8_t *mem, enum sf_dtype dt, size_t rows, size_t n)
{
	*s = (struct sf_slab){ .mem = mem, .n = n, .rows = rows, .dt = dt };
	if (sf_dtype_is_block(dt) && n % SF_QRUN)
		for (size_t c = 0; c * SF_QSLAB_BLOCKS < sf_q_blocks(rows); c++)
			memset(run_at(s, c, n / SF_QRUN), 0, run_bytes(dt, tile_blocks(s, c)));
}

void sf_slab_put(const struct sf_slab *s, size_t p, const void *col)
{
	if (sf_dtype_is_block(s->dt))
		sf_qslab_put(s, p, col);
	else
		sf_fslab_put(s, p, col);
}

void sf_slab_accum(float *Y, size_t ldy, size_t r0, size_t r1, const struct sf_slab *s,
		   const uint32_t *pos, size_t k, const float *X, const uint32_t *sel, size_t ldx,
		   size_t T)
{
	if (sf_dtype_is_block(s->dt))
		sf_qslab_int(Y, ldy, r0, r1, s, pos, k, X, ldx, T);
	else
		sf_fslab_accum(Y, ldy, r0, r1, s, pos, k, X, T == 1 ? NULL : sel, ldx, T);
}
