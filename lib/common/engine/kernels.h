/* Compute kernels of the decoder: matrix-vector products over f32, bf16
 * and f16 weights with f32 accumulation, the column-accumulate of the
 * sparse decoder, RMSNorm, RoPE, softmax, SiLU. Each has a portable _ref
 * path that always compiles; AVX2 and AVX-512 paths are called at the level
 * engine/cpu.h sets (sf_cpu_isa; sf_cpu_use(SF_ISA_REF) forces the _ref). */
#ifndef SF_KERNELS_H
#define SF_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "base/vocab.h"

/* y[r - r0] = sum_c W[r][c] * x[c] for rows r in [r0, r1); W row-major
 * with `cols` columns in dtype dt. Threads split rows by calling this on
 * disjoint ranges. A block dtype's rows (each sf_dtype_col_bytes) go to
 * sf_qmatmul_rows (engine/kernels_qrows.h), the _ref's to its _ref. */
void sf_matvec_rows(float *y, const void *W, enum sf_dtype dt, size_t cols,
		    const float *x, size_t r0, size_t r1);
void sf_matvec_rows_ref(float *y, const void *W, enum sf_dtype dt, size_t cols,
			const float *x, size_t r0, size_t r1);

/* The same for T tokens at once: y[t * ldy + r - r0] = sum_c W[r][c] *
 * x[t * ldx + c]. Each weight is loaded once for several tokens, and every
 * (row, token) gets the floats sf_matvec_rows gives that token over the
 * same [r0, r1): a batched forward pass equals the one-token one bit for
 * bit. */
void sf_matmul_rows(float *y, size_t ldy, const void *W, enum sf_dtype dt, size_t cols,
		    const float *x, size_t ldx, size_t T, size_t r0, size_t r1);
void sf_matmul_rows_ref(float *y, size_t ldy, const void *W, enum sf_dtype dt, size_t cols,
			const float *x, size_t ldx, size_t T, size_t r0, size_t r1);

/* Column-accumulate: y[0..m) += sum_k xv[k] * c_k[0..m), column k's
 * elements starting at (const char *)cols[k] + off (off in bytes: the
 * matrix's place in a bundle). The sparse decoder's shape: only the
 * selected input entries are touched, wherever each lies (a read buffer,
 * a cache slot), in the order given. */
void sf_colaccum(float *y, size_t m, const void *const *cols, size_t off, enum sf_dtype dt,
		 const float *xv, size_t n);
void sf_colaccum_ref(float *y, size_t m, const void *const *cols, size_t off, enum sf_dtype dt,
		     const float *xv, size_t n);

/* The column-accumulate for T tokens sharing the columns: for each k
 * and each token t whose sel[k * ldx + t] is ~0 (not 0), Y[t * ldy + j]
 * += X[k * ldx + t] * c_k[j] for j in [0, m). ldx is a multiple of
 * SF_BATCH_PAD at least T, the entries of t >= T 0. Each column's weights
 * are loaded once for all the tokens, and every token's row gets the
 * floats sf_colaccum gives it over its own columns in the same order (one
 * fused multiply-add per weight in every path, so any split of the rows
 * gives the same sums, equal to the _ref's). */
#define SF_BATCH_PAD 16	/* a cache line of floats: each column's inputs start on one */
void sf_colaccum_batch(float *Y, size_t ldy, size_t m, const void *const *cols, size_t off,
		       enum sf_dtype dt, const float *X, const uint32_t *sel, size_t ldx, size_t T,
		       size_t n);
void sf_colaccum_batch_ref(float *Y, size_t ldy, size_t m, const void *const *cols, size_t off,
			   enum sf_dtype dt, const float *X, const uint32_t *sel, size_t ldx,
			   size_t T, size_t n);

/* A slab: one matrix's top-tier columns at positions p < n held whole in
 * RAM (a group held, online/sparse_slab.c), laid out as its kernels
 * stream it. q8/q4: engine/kernels_q.h (sf_qslab_*). bf16/f16/f32 here:
 * tiles of SF_FSLAB_ROWS rows, in a tile position after position, each
 * position's rows of the tile (its column's bytes), so a thread's rows
 * are one stretch of memory read in order. */
struct sf_slab {
	uint8_t *mem;			/* (sf_slab_bytes, engine/kernels_q.h) */
	size_t n, rows;
	enum sf_dtype dt;
};
#define SF_FSLAB_ROWS 64
size_t sf_fslab_bytes(enum sf_dtype dt, size_t rows, size_t n);
void sf_fslab_put(const struct sf_slab *s, size_t p, const void *col);
/* sf_colaccum (sel NULL, T 1, ldx 1) or sf_colaccum_batch over positions
 * pos[0..k) (ascending) of a slab, rows [r0, r1) (row r0 at Y): the same
 * floats as over the same columns. */
void sf_fslab_accum(float *Y, size_t ldy, size_t r0, size_t r1, const struct sf_slab *s,
		    const uint32_t *pos, size_t k, const float *X, const uint32_t *sel,
		    size_t ldx, size_t T);
void sf_fslab_accum_ref(float *Y, size_t ldy, size_t r0, size_t r1, const struct sf_slab *s,
			const uint32_t *pos, size_t k, const float *X, const uint32_t *sel,
			size_t ldx, size_t T);

/* The batched column-accumulate over any kind of column (float columns,
 * the middle tier's codes, q8/q4 blocks): rows [s0, s1) (row s0 at Y) in
 * strips of SF_STRIP_ROWS, columns in blocks of SF_STRIP_COLUMNS. fill
 * writes rows [j0, j0 + rows) of the k-th column as f32 into w and the
 * column's factor on its inputs into *xs (read only when scaled); each
 * block is filled once and then, for each k in turn and each token t whose
 * sel[k * ldx + t] is ~0, Y[t * ldy + j - s0] = fmaf(X[k * ldx + t] *
 * xs[k], w_k[j], Y[t * ldy + j - s0]) by a register-tiled core: a token's
 * floats are those of its own columns, in their order. */
#define SF_STRIP_ROWS 48
#define SF_STRIP_COLUMNS 128
typedef void sf_strip_fill(const void *ctx, size_t k, size_t j0, size_t rows, float *w,
			   float *xs);
void sf_colaccum_strips(float *Y, size_t ldy, size_t s0, size_t s1, sf_strip_fill *fill,
			const void *ctx, int scaled, const float *X, const uint32_t *sel, size_t ldx,
			size_t T, size_t n);

/* out = x / sqrt(mean(x^2) + eps) * (offset + w), as Hugging Face's
 * LlamaRMSNorm (offset 0) and Gemma3RMSNorm (offset 1, its gains stored
 * less one) compute it, float32 throughout; w in dtype dt. out may alias
 * x. */
void sf_rmsnorm(float *out, const float *x, const void *w, enum sf_dtype dt, size_t n, float eps,
		float offset);

/* Rotate-half RoPE on n_heads head vectors of head_dim side by side, all
 * at position pos, over the first rope_dim dimensions of each (Phi-3's
 * partial rotary; else head_dim), with inverse frequencies
 * inv_freq[rope_dim / 2] (see sf_rope_inv_freq): each angle's cos and sin,
 * times mscale (YaRN's and longrope's attention factor, else 1), serve
 * every head. Frequency i turns the pair (i, i + rope_dim / 2), or with
 * interleaved (a llama GGUF's rows, sf_config.rope_interleaved) the pair
 * (2i, 2i + 1); the dimensions from rope_dim on pass unchanged. */
void sf_rope(float *v, size_t n_heads, size_t head_dim, size_t rope_dim, const float *inv_freq,
	     float mscale, int pos, int interleaved);
/* inv_freq[i] = theta^(-2i/head_dim) for i < head_dim / 2 (head_dim: the
 * dimensions turned, sf_rope's rope_dim), with Llama 3 rope_scaling applied
 * when factor > 0 (low, high: the frequency factors; orig: the original
 * max position). */
void sf_rope_inv_freq(float *inv_freq, size_t head_dim, float theta, float factor,
		      float low, float high, int orig);
/* The same with YaRN's rope_scaling (transformers' _compute_yarn_parameters):
 * theta^(-2i/head_dim) over factor where a frequency turns fewer than
 * beta_slow times in orig positions, undivided where more than beta_fast,
 * a linear ramp between (its ends floored and ceiled when truncate). */
void sf_rope_yarn_inv_freq(float *inv_freq, size_t head_dim, float theta, float factor,
			   float beta_fast, float beta_slow, int orig, int truncate);

void sf_softmax(float *x, size_t n);
/* a[i] = silu(g[i]) * u[i] */
void sf_swiglu(float *a, const float *g, const float *u, size_t n);
/* a[i] = gelu(g[i]) * u[i], GELU's tanh approximation (transformers'
 * gelu_pytorch_tanh: Gemma's), as g * sigmoid(2y) with the same
 * exponential as sf_swiglu */
void sf_geglu(float *a, const float *g, const float *u, size_t n);
/* The columns of T rows (T, n) (row t at in + t * ldi) as rows of width
 * floats: column j to out + pos[j] * ldo, its T values then 0 up to width
 * (>= T); a column whose pos is UINT32_MAX is left out. */
void sf_transpose_columns(float *out, size_t ldo, const uint32_t *pos, const float *in,
			  size_t ldi, size_t T, size_t n, size_t width);
/* Attention over n rows of d floats, row p at keys + p * ldk (or X + p *
 * ldx): out[p] = (q . keys[p]) * scale; and for nq outputs, y_q = y + q *
 * ldy, y_q += s_q[p] * X[p] for p = 0, 1, ... in turn, s_q = s + q * lds,
 * each element's sum in that order (as n calls of sf_axpy_f32). */
void sf_dot_rows(float *out, const float *q, const float *keys, size_t ldk, size_t n, size_t d,
		 float scale);
void sf_axpy_rows(float *y, size_t ldy, const float *s, size_t lds, size_t nq, const float *X,
		  size_t ldx, size_t n, size_t d);
/* y += s * x */
void sf_axpy_f32(float *y, float s, const float *x, size_t n);

#endif
