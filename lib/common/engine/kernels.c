/* Compute kernels of the decoder (see kernels.h): a scalar _ref for each,
 * AVX2+FMA and AVX-512 variants compiled here through target attributes so
 * the build needs no -m flags, NEON variants on aarch64 (its base
 * instruction set: the dot-product level has no float path of its own),
 * and the family's table indexed by the level engine/cpu.h chose. */
#include "engine/kernels.h"

#include <math.h>
#include <string.h>

#include "base/quant.h"
#include "engine/cpu.h"
#include "engine/kernels_qrows.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

/* Element i of weights p, by memcpy: a tensor in its file's mapping sits
 * at any byte (a safetensors header not padded to 8, a GGUF of alignment
 * 1), where a uint16_t or float load would be misaligned. */
static inline float ld_w(const void *p, enum sf_dtype dt, size_t i)
{
	const unsigned char *b = p;
	uint16_t h;
	float f;

	switch (dt) {
	case SF_DTYPE_F16: memcpy(&h, b + 2 * i, 2); return sf_f16_to_f32(h);
	case SF_DTYPE_BF16: memcpy(&h, b + 2 * i, 2); return sf_bf16_to_f32(h);
	default: memcpy(&f, b + 4 * i, 4); return f;
	}
}

static inline size_t dt_size(enum sf_dtype dt)
{
	return dt == SF_DTYPE_F32 ? 4 : 2;
}

/* Bytes of a row of cols weights: elements, or MXFP4's blocks. */
static inline size_t row_bytes(enum sf_dtype dt, size_t cols)
{
	return dt == SF_DTYPE_MXFP4 ? (size_t)sf_dtype_col_bytes(dt, cols) : cols * dt_size(dt);
}

// ----------------------------------------------------------------------------
// reference kernels: plain loops in the order a reader expects

static void widen_ref(float *w, const void *c, enum sf_dtype dt, size_t m);

/* MXFP4 rows widened to f32 a chunk of rows at a time, then the f32
 * product over the chunk: chunks of whole groups of four from r0 (the
 * row kernels' grouping), so that each row gets the f32 kernel's
 * operations over [r0, r1), and so the floats of the BF16 rows the
 * weights widen to. */
#define MX_FLOATS (4 * SF_MXFP4_COLS_MAX)
typedef void widen_fn(float *w, const void *c, enum sf_dtype dt, size_t m);
typedef void matmul_fn(float *y, size_t ldy, const void *W, enum sf_dtype dt, size_t cols,
		       const float *x, size_t ldx, size_t T, size_t r0, size_t r1);

static void mx_matmul(widen_fn *widen, matmul_fn *matmul, float *y, size_t ldy, const void *W,
		      size_t cols, const float *x, size_t ldx, size_t T, size_t r0, size_t r1)
{
	float w[MX_FLOATS] __attribute__((aligned(64)));
	size_t rb = row_bytes(SF_DTYPE_MXFP4, cols);
	size_t step = MX_FLOATS / cols / 4 * 4;	/* >= 4 */

	for (size_t a = r0, n; a < r1; a += n) {
		n = r1 - a < step ? r1 - a : step;
		for (size_t r = 0; r < n; r++)
			widen(w + r * cols, (const uint8_t *)W + (a + r) * rb, SF_DTYPE_MXFP4, cols);
		matmul(y + (a - r0), ldy, w, SF_DTYPE_F32, cols, x, ldx, T, 0, n);
	}
}

void sf_matvec_rows_ref(float *y, const void *W, enum sf_dtype dt, size_t cols,
			const float *x, size_t r0, size_t r1)
{
	if (dt == SF_DTYPE_MXFP4) {
		sf_matmul_rows_ref(y, 1, W, dt, cols, x, 0, 1, r0, r1);
		return;
	}
	if (sf_dtype_is_block(dt)) {
		sf_qmatmul_rows_ref(y, 1, W, dt, cols, x, 0, 1, r0, r1);
		return;
	}
	for (size_t r = r0; r < r1; r++) {
		float acc = 0.0f;
		for (size_t c = 0; c < cols; c++)
			acc += ld_w(W, dt, r * cols + c) * x[c];
		y[r - r0] = acc;
	}
}

void sf_matmul_rows_ref(float *y, size_t ldy, const void *W, enum sf_dtype dt, size_t cols,
			const float *x, size_t ldx, size_t T, size_t r0, size_t r1)
{
	if (dt == SF_DTYPE_MXFP4) {
		mx_matmul(widen_ref, sf_matmul_rows_ref, y, ldy, W, cols, x, ldx, T, r0, r1);
		return;
	}
	for (size_t t = 0; t < T; t++)
		sf_matvec_rows_ref(y + t * ldy, W, dt, cols, x + t * ldx, r0, r1);
}

void sf_colaccum_ref(float *y, size_t m, const void *const *cols, size_t off, enum sf_dtype dt,
		     const float *xv, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		const char *c = (const char *)cols[k] + off;
		for (size_t j = 0; j < m; j++)
			y[j] = fmaf(xv[k], ld_w(c, dt, j), y[j]);
	}
}

void sf_colaccum_batch_ref(float *Y, size_t ldy, size_t m, const void *const *cols, size_t off,
			   enum sf_dtype dt, const float *X, const uint32_t *sel, size_t ldx,
			   size_t T, size_t n)
{
	for (size_t k = 0; k < n; k++)
		for (size_t t = 0; t < T; t++)
			if (sel[k * ldx + t])
				sf_colaccum_ref(Y + t * ldy, m, cols + k, off, dt, X + k * ldx + t, 1);
}

static void widen_ref(float *w, const void *c, enum sf_dtype dt, size_t m)
{
	for (size_t j = 0; j < m; j++)
		w[j] = dt == SF_DTYPE_MXFP4 ? sf_q_weight(c, dt, m, j) : ld_w(c, dt, j);
}

/* Block b's scale of an MXFP4 row (inline: a call a block and row was a
 * tenth of a decode). */
static inline float mx_scale(const uint8_t *row, size_t b)
{
	return sf_mxfp4_scale(row[b]);
}

static void strip_ref(float *Y, size_t ldy, size_t m, const float (*W)[SF_STRIP_ROWS],
		      const float *xs, const float *X, const uint32_t *sel, size_t ldx, size_t T,
		      size_t n)
{
	for (size_t k = 0; k < n; k++)
		for (size_t t = 0; t < T; t++) {
			if (sel && !sel[k * ldx + t])
				continue;
			float x = xs ? X[k * ldx + t] * xs[k] : X[k * ldx + t];
			for (size_t j = 0; j < m; j++)
				Y[t * ldy + j] = fmaf(x, W[k][j], Y[t * ldy + j]);
		}
}

/* Whether every token of [0, T) selected each of the n columns: the
 * strips are then given no sel and leave out their masks (the blends,
 * half their work on AVX2 and NEON; the sums of a group's tokens past T
 * are never stored). */
static inline int strip_all_selected(const uint32_t *sel, size_t ldx, size_t T, size_t n)
{
	for (size_t k = 0; k < n; k++)
		for (size_t t = 0; t < T; t++)
			if (!sel[k * ldx + t])
				return 0;
	return 1;
}

static void rmsnorm_ref(float *out, const float *x, const void *w, enum sf_dtype dt,
			size_t n, float eps, float offset)
{
	/* double: PyTorch's float mean is a pairwise sum, far closer to the
	 * exact value than a running float sum would be */
	double ss = 0.0;
	for (size_t i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	float r = 1.0f / sqrtf((float)(ss / (double)n) + eps);
	for (size_t i = 0; i < n; i++)
		out[i] = (offset + ld_w(w, dt, i)) * (x[i] * r);
}

static void softmax_ref(float *x, size_t n)
{
	if (n == 0)
		return;
	float mx = x[0], sum = 0.0f;
	for (size_t i = 1; i < n; i++)
		if (x[i] > mx)
			mx = x[i];
	for (size_t i = 0; i < n; i++) {
		x[i] = expf(x[i] - mx);
		sum += x[i];
	}
	float inv = 1.0f / sum;
	for (size_t i = 0; i < n; i++)
		x[i] *= inv;
}

/* The gated units: a = g * sigmoid(z) * u, z = g for SwiGLU; for GELU's
 * tanh approximation, 0.5 g (1 + tanh y) = g * sigmoid(2y), z = 2y =
 * 2 sqrt(2 / pi) (g + 0.044715 g^3) (transformers' gelu_pytorch_tanh,
 * Gemma's). Each path computes sigmoid(z) as 1 / (1 + e^-z). */
#define GELU_K 0.7978845608028654f	/* sqrt(2 / pi) */
#define GELU_C 0.044715f

static inline float glu_arg(float g, int gelu)
{
	return gelu ? 2.0f * GELU_K * (g + GELU_C * g * g * g) : g;
}

static void glu_ref(float *a, const float *g, const float *u, size_t n, int gelu)
{
	for (size_t i = 0; i < n; i++)
		a[i] = g[i] / (1.0f + expf(-glu_arg(g[i], gelu))) * u[i];
}

static float dot_ref(const float *a, const float *b, size_t n)
{
	float acc = 0.0f;
	for (size_t i = 0; i < n; i++)
		acc += a[i] * b[i];
	return acc;
}

static void axpy_ref(float *y, float s, const float *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] += s * x[i];
}

static void dots_ref(float *out, const float *q, const float *keys, size_t ldk, size_t n,
		     size_t d, float scale)
{
	for (size_t p = 0; p < n; p++)
		out[p] = dot_ref(q, keys + p * ldk, d) * scale;
}

static void axpys_ref(float *y, size_t ldy, const float *s, size_t lds, size_t nq,
		      const float *X, size_t ldx, size_t n, size_t d)
{
	for (size_t q = 0; q < nq; q++)
		for (size_t p = 0; p < n; p++)
			axpy_ref(y + q * ldy, s[q * lds + p], X + p * ldx, d);
}

// ----------------------------------------------------------------------------
// RoPE (scalar only: a few hundred sin/cos per token are not worth SIMD)

void sf_rope(float *v, size_t n_heads, size_t head_dim, size_t rope_dim, const float *inv_freq,
	     float mscale, int pos, int interleaved)
{
	size_t half = rope_dim / 2;
	for (size_t i = 0; i < half; i++) {
		/* float product then float cos/sin, as torch computes freqs */
		float a = (float)pos * inv_freq[i];
		float c = cosf(a) * mscale, s = sinf(a) * mscale;
		size_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
		for (size_t h = 0; h < n_heads; h++) {
			float *vh = v + h * head_dim;
			float x1 = vh[i1], x2 = vh[i2];
			vh[i1] = x1 * c - x2 * s;
			vh[i2] = x2 * c + x1 * s;
		}
	}
}

/* The dimension at which a frequency turns rotations times in orig
 * positions (find_correction_dim, in double as Python computes it). */
static double yarn_dim(double rotations, size_t head_dim, double theta, int orig)
{
	return (double)head_dim * log((double)orig / (rotations * 2 * M_PI)) / (2 * log(theta));
}

void sf_rope_yarn_inv_freq(float *inv_freq, size_t head_dim, float theta, float factor,
			   float beta_fast, float beta_slow, int orig, int truncate)
{
	double low = yarn_dim(beta_fast, head_dim, theta, orig);
	double high = yarn_dim(beta_slow, head_dim, theta, orig);

	if (truncate) {
		low = floor(low);
		high = ceil(high);
	}
	low = low > 0 ? low : 0;
	high = high < (double)head_dim - 1 ? high : (double)head_dim - 1;
	if (low == high)
		high += 0.001;	/* transformers' guard against a zero ramp */
	/* the tensors' float32 from here on */
	for (size_t i = 0; i < head_dim / 2; i++) {
		float pos = powf(theta, (float)(2 * i) / (float)head_dim);
		float ramp = ((float)i - (float)low) / (float)(high - low);
		float extrap = 1.0f - (ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp);
		inv_freq[i] = 1.0f / (factor * pos) * (1.0f - extrap) + 1.0f / pos * extrap;
	}
}

void sf_rope_inv_freq(float *inv_freq, size_t head_dim, float theta, float factor,
		      float low, float high, int orig)
{
	size_t half = head_dim / 2;
	/* torch: 1.0 / (base ** (arange(0, dim, 2).float() / dim)), all float32 */
	for (size_t i = 0; i < half; i++) {
		float e = (float)(2 * i) / (float)head_dim;
		inv_freq[i] = 1.0f / powf(theta, e);
	}
	if (!(factor > 0.0f))
		return;

	/* HF _compute_llama3_parameters, in float32 like its tensors */
	/* (torch turns `scalar / tensor` into reciprocal(tensor) * scalar) */
	const float two_pi = (float)6.283185307179586476925;
	float low_wavelen = (float)((double)orig / low);
	float high_wavelen = (float)((double)orig / high);
	for (size_t i = 0; i < half; i++) {
		float f = inv_freq[i];
		float wavelen = (1.0f / f) * two_pi;
		if (wavelen > low_wavelen) {
			f = f / factor;
		} else if (!(wavelen < high_wavelen)) {
			float smooth = ((1.0f / wavelen) * (float)orig - low) / (high - low);
			f = (1.0f - smooth) * f / factor + smooth * f;
		}
		inv_freq[i] = f;
	}
}

// ----------------------------------------------------------------------------
// dispatch table

struct kern {
	void (*matmul)(float *y, size_t ldy, const void *W, enum sf_dtype dt, size_t cols,
		       const float *x, size_t ldx, size_t T, size_t r0, size_t r1);
	void (*colaccum)(float *y, size_t m, const void *const *cols, size_t off, enum sf_dtype dt,
			 const float *xv, size_t n);
	/* the batched column-accumulate (sf_colaccum_strips): m rows of a
	 * column widened to f32 (m <= SF_STRIP_ROWS), and the register-tiled
	 * product of a block of such strips, xs the columns' factors or NULL,
	 * sel NULL when every token selected every column (no masks) */
	void (*widen)(float *w, const void *c, enum sf_dtype dt, size_t m);
	void (*strip)(float *Y, size_t ldy, size_t m, const float (*W)[SF_STRIP_ROWS],
		      const float *xs, const float *X, const uint32_t *sel, size_t ldx, size_t T,
		      size_t n);
	void (*rmsnorm)(float *out, const float *x, const void *w, enum sf_dtype dt,
			size_t n, float eps, float offset);
	void (*softmax)(float *x, size_t n);
	void (*glu)(float *a, const float *g, const float *u, size_t n, int gelu);
	/* attention over n rows of d: out[p] = (q . keys[p]) * scale, and
	 * for nq outputs y_q += s_q[p] * X[p] for p = 0, 1, ... in turn; the
	 * loops live in the kernels, so that a row costs no call and the
	 * outputs stay in registers */
	void (*dots)(float *out, const float *q, const float *keys, size_t ldk, size_t n, size_t d,
		     float scale);
	void (*axpys)(float *y, size_t ldy, const float *s, size_t lds, size_t nq, const float *X,
		      size_t ldx, size_t n, size_t d);
	/* a float slab's tile: y[j] += xv[k] * w_k[j], j < m <= SF_FSLAB_ROWS,
	 * w_k at base + pos[k] * stride, k in turn */
	void (*tile)(float *y, size_t m, const uint8_t *base, size_t stride, const uint32_t *pos,
		     enum sf_dtype dt, const float *xv, size_t n);
	void (*transpose)(float *out, size_t ldo, const uint32_t *pos, const float *in,
			  size_t ldi, size_t T, size_t n, size_t width);
};

/* sf_transpose_columns in tiles of 32 that stay in the first caches. */
static void transpose_ref(float *out, size_t ldo, const uint32_t *pos, const float *in,
			  size_t ldi, size_t T, size_t n, size_t width)
{
	const size_t tile = 32;
	for (size_t j0 = 0; j0 < n; j0 += tile)
		for (size_t t0 = 0; t0 < T; t0 += tile)
			for (size_t j = j0; j < j0 + tile && j < n; j++) {
				if (pos[j] == UINT32_MAX)
					continue;
				float *o = out + (size_t)pos[j] * ldo;
				for (size_t t = t0; t < t0 + tile && t < T; t++)
					o[t] = in[t * ldi + j];
				if (t0 + tile >= T)
					memset(o + T, 0, (width - T) * sizeof(float));
			}
}

static void tile_ref(float *y, size_t m, const uint8_t *base, size_t stride, const uint32_t *pos,
		     enum sf_dtype dt, const float *xv, size_t n)
{
	for (size_t k = 0; k < n; k++) {
		const uint8_t *c = base + pos[k] * stride;
		for (size_t j = 0; j < m; j++)
			y[j] = fmaf(xv[k], ld_w(c, dt, j), y[j]);
	}
}

static const struct kern kern_ref = {
	sf_matmul_rows_ref, sf_colaccum_ref, widen_ref, strip_ref, rmsnorm_ref, softmax_ref,
	glu_ref, dots_ref, axpys_ref, tile_ref, transpose_ref,
};

/* How far ahead of its column a float slab's tile kernel asks for memory
 * (one stream, positions one after another). */
#define FSLAB_AHEAD 2048

#if defined(__x86_64__)

// ----------------------------------------------------------------------------
// AVX2 + FMA + F16C: 8 lanes, scalar tails (AVX2 has no cheap masked
// 16-bit loads)

#define T256 __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline))

INL T256 __m256 ld8(const void *p, enum sf_dtype dt)
{
	switch (dt) {
	case SF_DTYPE_BF16:
		return _mm256_castsi256_ps(_mm256_slli_epi32(
			_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
	case SF_DTYPE_F16:
		return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
	default:
		return _mm256_loadu_ps((const float *)p);
	}
}

INL T256 float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* The hardware prefetcher follows a stream only within a 4 KiB page, so
 * with rows of a few KiB each group of four rows starts four cold
 * streams. Fetching the next group's rows into L2 at the column we are at
 * keeps the memory busy across those restarts: measured 2-10% more
 * bandwidth at 1 and 2 threads on TinyLlama shapes. lines: cache lines
 * each row advances per step. Prefetches past the matrix's end are
 * dropped, they never fault. */
INL void prefetch_group(const char *p, size_t rs, size_t lines)
{
	for (size_t l = 0; l < lines; l++) {
		_mm_prefetch(p + 64 * l, _MM_HINT_T1);
		_mm_prefetch(p + rs + 64 * l, _MM_HINT_T1);
		_mm_prefetch(p + 2 * rs + 64 * l, _MM_HINT_T1);
		_mm_prefetch(p + 3 * rs + 64 * l, _MM_HINT_T1);
	}
}

/* Weights [c, c + 8) of an MXFP4 row of cols (c a multiple of 8): the
 * codes looked up among the e2m1 values' two halves, the half picked by
 * the code's sign bit, times the block's scale (exact). */
INL T256 __m256 mx8(const uint8_t *row, size_t cols, size_t c)
{
	const __m256 lo = _mm256_loadu_ps(sf_e2m1), hi = _mm256_loadu_ps(sf_e2m1 + 8);
	size_t k = c / SF_QBLOCK;
	__m256i i = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(
		row + cols / SF_QBLOCK + 16 * k + c % 16)));

	i = _mm256_and_si256(_mm256_srli_epi32(i, (int)(c % SF_QBLOCK / 16 * 4)),
			     _mm256_set1_epi32(15));
	return _mm256_mul_ps(_mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, i),
					      _mm256_permutevar8x32_ps(hi, i),
					      _mm256_castsi256_ps(_mm256_slli_epi32(i, 28))),
			     _mm256_set1_ps(mx_scale(row, k)));
}

/* Block k of an MXFP4 row of cols: its 32 weights as w[0] to w[3], eight
 * each in order, mx8's values. */
INL T256 void mx32(const uint8_t *row, size_t cols, size_t k, __m256 *w)
{
	/* twice e2m1 is a small integer: the codes' bytes looked up at once
	 * (vpshufb), widened, then times half the scale, exact as the table
	 * times the scale (powers of two; -0 comes out +0, which a sum that
	 * starts at +0 cannot tell); two permutes and a blend each eight
	 * weights cost a third more */
	const __m128i twice = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
	const __m256 s = _mm256_set1_ps(mx_scale(row, k) * 0.5f);
	const __m128i q = _mm_loadu_si128((const __m128i *)(row + cols / SF_QBLOCK + 16 * k));
	const __m128i m = _mm_set1_epi8(15);
	__m128i lo = _mm_shuffle_epi8(twice, _mm_and_si128(q, m));
	__m128i hi = _mm_shuffle_epi8(twice, _mm_and_si128(_mm_srli_epi16(q, 4), m));
	__m128i b[4] = { lo, _mm_unpackhi_epi64(lo, lo), hi, _mm_unpackhi_epi64(hi, hi) };

#pragma GCC unroll 4
	for (int j = 0; j < 4; j++)
		w[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b[j])), s);
}

/* Weights [c, c + 8) of the row at row; the byte of column c that a
 * prefetch a row ahead asks for. */
INL T256 __m256 ldrow8(const char *row, size_t c, enum sf_dtype dt, size_t cols)
{
	if (dt == SF_DTYPE_MXFP4)
		return mx8((const uint8_t *)row, cols, c);
	return ld8(row + c * dt_size(dt), dt);
}
static inline size_t col_at(size_t c, enum sf_dtype dt, size_t cols)
{
	return dt == SF_DTYPE_MXFP4 ? cols / SF_QBLOCK + c / 2 : c * dt_size(dt);
}

/* RB rows by TB tokens of the matrix product, every (row, token) with
 * exactly the one-token kernel's operations: a takes columns [c, c+8) and
 * b [c+8, c+16) of each 16-column step, a the 8-column step after, then
 * hsum8(a + b) and the scalar tail. RB = 4, TB = 1 shares x over four rows
 * (eight FMA chains for one token); RB = 1, TB = 4 shares each weight over
 * four tokens. */
INL T256 void mm256_tile(float *y, size_t ldy, const char *w, size_t rs, enum sf_dtype dt,
			 size_t cols, const float *x, size_t ldx, const int RB, const int TB)
{
	size_t es = dt_size(dt), c = 0;
	__m256 a[4][4], b[4][4];
	float s[4][4];

#pragma GCC unroll 4
	for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
		for (int t = 0; t < TB; t++)
			a[r][t] = b[r][t] = _mm256_setzero_ps();
	/* MXFP4's whole blocks a row at a time (decoded 8 weights at a time,
	 * the decode cost more than the products: gpt-oss 0.41x llama.cpp) */
	for (; dt == SF_DTYPE_MXFP4 && c + 32 <= cols; c += 32) {
		if (RB == 4)
			prefetch_group(w + 4 * rs + col_at(c, dt, cols), rs, 1);
#pragma GCC unroll 4
		for (int r = 0; r < RB; r++) {
			__m256 v[4];
			mx32((const uint8_t *)w + r * rs, cols, c / SF_QBLOCK, v);
#pragma GCC unroll 4
			for (int t = 0; t < TB; t++) {
				const float *xt = x + t * ldx + c;
				a[r][t] = _mm256_fmadd_ps(v[0], _mm256_loadu_ps(xt), a[r][t]);
				b[r][t] = _mm256_fmadd_ps(v[1], _mm256_loadu_ps(xt + 8), b[r][t]);
				a[r][t] = _mm256_fmadd_ps(v[2], _mm256_loadu_ps(xt + 16), a[r][t]);
				b[r][t] = _mm256_fmadd_ps(v[3], _mm256_loadu_ps(xt + 24), b[r][t]);
			}
		}
	}
	for (; c + 16 <= cols; c += 16) {
		if (RB == 4)
			prefetch_group(w + 4 * rs + col_at(c, dt, cols), rs, 1);
		/* a half at a time, each input loaded once for the RB rows:
		 * folded into every FMA that uses it, the loads outnumbered the
		 * FMAs (AVX2 BF16 prompt 23 tok/s at -t 1, 30 so) */
		__m256 wh[4], xh;
#pragma GCC unroll 4
		for (int r = 0; r < RB; r++)
			wh[r] = ldrow8(w + r * rs, c, dt, cols);
#pragma GCC unroll 4
		for (int t = 0; t < TB; t++) {
			xh = _mm256_loadu_ps(x + t * ldx + c);
			__asm__("" : "+x"(xh));
#pragma GCC unroll 4
			for (int r = 0; r < RB; r++)
				a[r][t] = _mm256_fmadd_ps(wh[r], xh, a[r][t]);
		}
#pragma GCC unroll 4
		for (int r = 0; r < RB; r++)
			wh[r] = ldrow8(w + r * rs, c + 8, dt, cols);
#pragma GCC unroll 4
		for (int t = 0; t < TB; t++) {
			xh = _mm256_loadu_ps(x + t * ldx + c + 8);
			__asm__("" : "+x"(xh));
#pragma GCC unroll 4
			for (int r = 0; r < RB; r++)
				b[r][t] = _mm256_fmadd_ps(wh[r], xh, b[r][t]);
		}
	}
	for (; c + 8 <= cols; c += 8) {
#pragma GCC unroll 4
		for (int r = 0; r < RB; r++) {
			__m256 w0 = ld8(w + r * rs + c * es, dt);
#pragma GCC unroll 4
			for (int t = 0; t < TB; t++)
				a[r][t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + t * ldx + c), a[r][t]);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
		for (int t = 0; t < TB; t++)
			s[r][t] = hsum8(_mm256_add_ps(a[r][t], b[r][t]));
	for (; c < cols; c++)
#pragma GCC unroll 4
		for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
			for (int t = 0; t < TB; t++)
				s[r][t] += ld_w(w + r * rs, dt, c) * x[t * ldx + c];
#pragma GCC unroll 4
	for (int r = 0; r < RB; r++)
#pragma GCC unroll 4
		for (int t = 0; t < TB; t++)
			y[t * ldy + r] = s[r][t];
}

/* A row left over after the groups of four: four accumulators over 32
 * columns. */
INL T256 float mv256_1(const char *w, enum sf_dtype dt, size_t cols, const float *x)
{
	size_t es = dt_size(dt), c = 0;
	__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;

	for (; c + 32 <= cols; c += 32) {
		a0 = _mm256_fmadd_ps(ldrow8(w, c, dt, cols), _mm256_loadu_ps(x + c), a0);
		a1 = _mm256_fmadd_ps(ldrow8(w, c + 8, dt, cols), _mm256_loadu_ps(x + c + 8), a1);
		a2 = _mm256_fmadd_ps(ldrow8(w, c + 16, dt, cols), _mm256_loadu_ps(x + c + 16), a2);
		a3 = _mm256_fmadd_ps(ldrow8(w, c + 24, dt, cols), _mm256_loadu_ps(x + c + 24), a3);
	}
	for (; c + 8 <= cols; c += 8)
		a0 = _mm256_fmadd_ps(ld8(w + c * es, dt), _mm256_loadu_ps(x + c), a0);
	float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
	for (; c < cols; c++)
		s += ld_w(w, dt, c) * x[c];
	return s;
}

/* Rows in the one-token kernel's groups of four from r0, the rest one by
 * one; tokens four at a time, then two, one. */
INL T256 void mm256(float *y, size_t ldy, const void *W, enum sf_dtype dt, size_t cols,
		    const float *x, size_t ldx, size_t T, size_t r0, size_t r1)
{
	size_t rs = row_bytes(dt, cols), r = r0;
	size_t r4 = r0 + (r1 - r0) / 4 * 4;	/* [r0, r4): the groups of four */
	const char *w = W;

	if (T == 1)
		for (; r < r4; r += 4)
			mm256_tile(y + (r - r0), 1, w + r * rs, rs, dt, cols, x, ldx, 4, 1);
	for (; r + 2 <= r4; r += 2) {
		float *yr = y + (r - r0);
		const char *wr = w + r * rs;
		size_t t = 0;
		for (; t + 3 <= T; t += 3)
			mm256_tile(yr + t * ldy, ldy, wr, rs, dt, cols, x + t * ldx, ldx, 2, 3);
		if (t + 2 <= T) {
			mm256_tile(yr + t * ldy, ldy, wr, rs, dt, cols, x + t * ldx, ldx, 2, 2);
			t += 2;
		}
		if (t < T)
			mm256_tile(yr + t * ldy, ldy, wr, rs, dt, cols, x + t * ldx, ldx, 2, 1);
	}
	for (; r < r4; r++) {
		float *yr = y + (r - r0);
		const char *wr = w + r * rs;
		size_t t = 0;
		for (; t + 4 <= T; t += 4)
			mm256_tile(yr + t * ldy, ldy, wr, rs, dt, cols, x + t * ldx, ldx, 1, 4);
		if (t + 2 <= T) {
			mm256_tile(yr + t * ldy, ldy, wr, rs, dt, cols, x + t * ldx, ldx, 1, 2);
			t += 2;
		}
		if (t < T)
			mm256_tile(yr + t * ldy, ldy, wr, rs, dt, cols, x + t * ldx, ldx, 1, 1);
	}
	for (; r < r1; r++)
		for (size_t t = 0; t < T; t++)
			y[t * ldy + (r - r0)] = mv256_1(w + r * rs, dt, cols, x + t * ldx);
}

static T256 void widen_avx2(float *w, const void *c, enum sf_dtype dt, size_t m);

static T256 void matmul_avx2(float *y, size_t ldy, const void *W, enum sf_dtype dt,
			     size_t cols, const float *x, size_t ldx, size_t T, size_t r0,
			     size_t r1)
{
	/* one instance per dtype so the loads are resolved at compile time;
	 * MXFP4's blocks decoded once for a pass's tokens (in the tiles, each
	 * row pair's for every three: gpt-oss's prompt 24 tok/s at -t 1, 27
	 * so) */
	switch (dt) {
	case SF_DTYPE_MXFP4:
		if (T > 1)
			mx_matmul(widen_avx2, matmul_avx2, y, ldy, W, cols, x, ldx, T, r0, r1);
		else
			mm256(y, ldy, W, SF_DTYPE_MXFP4, cols, x, ldx, T, r0, r1);
		break;
	case SF_DTYPE_BF16: mm256(y, ldy, W, SF_DTYPE_BF16, cols, x, ldx, T, r0, r1); break;
	case SF_DTYPE_F16: mm256(y, ldy, W, SF_DTYPE_F16, cols, x, ldx, T, r0, r1); break;
	default: mm256(y, ldy, W, SF_DTYPE_F32, cols, x, ldx, T, r0, r1); break;
	}
}

/* Four columns per pass: y is loaded and stored once for four FMAs. */
INL T256 void ca256(float *y, size_t m, const void *const *cols, size_t off, enum sf_dtype dt,
		    const float *xv, size_t n)
{
	size_t es = dt_size(dt), k = 0;

	for (; k + 4 <= n; k += 4) {
		const char *c0 = (const char *)cols[k] + off;
		const char *c1 = (const char *)cols[k + 1] + off;
		const char *c2 = (const char *)cols[k + 2] + off;
		const char *c3 = (const char *)cols[k + 3] + off;
		__m256 v0 = _mm256_set1_ps(xv[k]), v1 = _mm256_set1_ps(xv[k + 1]);
		__m256 v2 = _mm256_set1_ps(xv[k + 2]), v3 = _mm256_set1_ps(xv[k + 3]);
		size_t j = 0;
		for (; j + 8 <= m; j += 8) {
			__m256 t = _mm256_loadu_ps(y + j);
			t = _mm256_fmadd_ps(ld8(c0 + j * es, dt), v0, t);
			t = _mm256_fmadd_ps(ld8(c1 + j * es, dt), v1, t);
			t = _mm256_fmadd_ps(ld8(c2 + j * es, dt), v2, t);
			t = _mm256_fmadd_ps(ld8(c3 + j * es, dt), v3, t);
			_mm256_storeu_ps(y + j, t);
		}
		for (; j < m; j++) {
			float t = y[j];
			t = fmaf(xv[k], ld_w(c0, dt, j), t);
			t = fmaf(xv[k + 1], ld_w(c1, dt, j), t);
			t = fmaf(xv[k + 2], ld_w(c2, dt, j), t);
			t = fmaf(xv[k + 3], ld_w(c3, dt, j), t);
			y[j] = t;
		}
	}
	for (; k < n; k++) {
		const char *c0 = (const char *)cols[k] + off;
		__m256 v0 = _mm256_set1_ps(xv[k]);
		size_t j = 0;
		for (; j + 8 <= m; j += 8)
			_mm256_storeu_ps(y + j, _mm256_fmadd_ps(ld8(c0 + j * es, dt), v0,
								_mm256_loadu_ps(y + j)));
		for (; j < m; j++)
			y[j] = fmaf(xv[k], ld_w(c0, dt, j), y[j]);
	}
}

static T256 void widen_avx2(float *w, const void *c, enum sf_dtype dt, size_t m)
{
	size_t es = dt_size(dt), j = 0;

	if (dt == SF_DTYPE_MXFP4) {
		for (size_t b = 0; b < m / SF_QBLOCK; b++) {
			__m256 v[4];
			mx32(c, m, b, v);
			for (int i = 0; i < 4; i++)
				_mm256_store_ps(w + SF_QBLOCK * b + 8 * i, v[i]);
		}
		return;
	}
	for (; j + 8 <= m; j += 8)
		_mm256_store_ps(w + j, ld8((const char *)c + j * es, dt));
	for (; j < m; j++)
		w[j] = ld_w(c, dt, j);
}

/* The lanes of rows [j, j + 8) below m. */
INL T256 __m256i rows8(size_t m, size_t j)
{
	int left = j < m ? (int)(m - j) : 0;
	return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The strip in 16 rows at a time, tokens four at a time with their sums in
 * registers across the n columns, each column's 16 weights loaded once
 * for the four; a token that did not select a column keeps its sum (the
 * multiply-add blended away). */
#define STRIP256_TOKENS 4
INL T256 void strip256(float *Y, size_t ldy, size_t m, const float (*W)[SF_STRIP_ROWS],
		       const float *xs, const float *X, const uint32_t *sel, size_t ldx, size_t T,
		       size_t n, const int scaled, const int masked)
{
	for (size_t j0 = 0; j0 < m; j0 += 16) {
		__m256i k0 = rows8(m, j0), k1 = rows8(m, j0 + 8);
		for (size_t t0 = 0; t0 < T; t0 += STRIP256_TOKENS) {
			__m256 a[STRIP256_TOKENS][2];
#pragma GCC unroll 4
			for (size_t t = 0; t < STRIP256_TOKENS; t++) {
				float *y = Y + (t0 + t) * ldy + j0;
				a[t][0] = t0 + t < T ? _mm256_maskload_ps(y, k0) : _mm256_setzero_ps();
				a[t][1] = t0 + t < T ? _mm256_maskload_ps(y + 8, k1) : _mm256_setzero_ps();
			}
			for (size_t k = 0; k < n; k++) {
				__m256 c0 = _mm256_load_ps(W[k] + j0), c1 = _mm256_load_ps(W[k] + j0 + 8);
				const float *x = X + k * ldx + t0;
				const uint32_t *s = masked ? sel + k * ldx + t0 : NULL;
#pragma GCC unroll 4
				for (size_t t = 0; t < STRIP256_TOKENS; t++) {
					__m256 xb = _mm256_set1_ps(scaled ? x[t] * xs[k] : x[t]);
					__m256 f0 = _mm256_fmadd_ps(c0, xb, a[t][0]);
					__m256 f1 = _mm256_fmadd_ps(c1, xb, a[t][1]);
					if (masked) {
						__m256 mk = _mm256_castsi256_ps(
							_mm256_set1_epi32((int)s[t]));
						f0 = _mm256_blendv_ps(a[t][0], f0, mk);
						f1 = _mm256_blendv_ps(a[t][1], f1, mk);
					}
					a[t][0] = f0;
					a[t][1] = f1;
				}
			}
			for (size_t t = 0; t < STRIP256_TOKENS && t0 + t < T; t++) {
				float *y = Y + (t0 + t) * ldy + j0;
				_mm256_maskstore_ps(y, k0, a[t][0]);
				_mm256_maskstore_ps(y + 8, k1, a[t][1]);
			}
		}
	}
}

/* A pass's strip; without sel (every token selected every column: an
 * image's dense groups, budget 1) its blends, half its work, left out. */
static T256 void strip_avx2(float *Y, size_t ldy, size_t m, const float (*W)[SF_STRIP_ROWS],
			    const float *xs, const float *X, const uint32_t *sel, size_t ldx,
			    size_t T, size_t n)
{
	if (xs && sel)
		strip256(Y, ldy, m, W, xs, X, sel, ldx, T, n, 1, 1);
	else if (xs)
		strip256(Y, ldy, m, W, xs, X, sel, ldx, T, n, 1, 0);
	else if (sel)
		strip256(Y, ldy, m, W, xs, X, sel, ldx, T, n, 0, 1);
	else
		strip256(Y, ldy, m, W, xs, X, sel, ldx, T, n, 0, 0);
}

static T256 void colaccum_avx2(float *y, size_t m, const void *const *cols, size_t off,
			       enum sf_dtype dt, const float *xv, size_t n)
{
	switch (dt) {
	case SF_DTYPE_BF16: ca256(y, m, cols, off, SF_DTYPE_BF16, xv, n); break;
	case SF_DTYPE_F16: ca256(y, m, cols, off, SF_DTYPE_F16, xv, n); break;
	default: ca256(y, m, cols, off, SF_DTYPE_F32, xv, n); break;
	}
}

static T256 void rmsnorm_avx2(float *out, const float *x, const void *w, enum sf_dtype dt,
			      size_t n, float eps, float offset)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0;
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		__m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
		a0 = _mm256_fmadd_ps(v0, v0, a0);
		a1 = _mm256_fmadd_ps(v1, v1, a1);
	}
	for (; i + 8 <= n; i += 8) {
		__m256 v0 = _mm256_loadu_ps(x + i);
		a0 = _mm256_fmadd_ps(v0, v0, a0);
	}
	float ss = hsum8(_mm256_add_ps(a0, a1));
	for (; i < n; i++)
		ss += x[i] * x[i];
	float r = 1.0f / sqrtf(ss / (float)n + eps);
	__m256 rv = _mm256_set1_ps(r), ov = _mm256_set1_ps(offset);
	size_t es = dt_size(dt);
	i = 0;
	for (; i + 8 <= n; i += 8) {
		__m256 t = _mm256_mul_ps(_mm256_loadu_ps(x + i), rv);
		__m256 g = _mm256_add_ps(ov, ld8((const char *)w + i * es, dt));
		_mm256_storeu_ps(out + i, _mm256_mul_ps(g, t));
	}
	for (; i < n; i++)
		out[i] = (offset + ld_w(w, dt, i)) * (x[i] * r);
}

/* e^x as 2^n * e^r with |r| <= ln2/2 and Taylor to degree 7 (truncation
 * 5e-9, below float precision). The clamps keep NaN (max/min return
 * their second operand on NaN); results beyond float range are fixed up
 * by the caller's masks. */
INL T256 __m256 exp256(__m256 x)
{
	const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.33654475f);
	__m256 big = _mm256_cmp_ps(x, _mm256_set1_ps(88.72283935546875f), _CMP_GT_OQ);
	__m256 tiny = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
	__m256 xc = _mm256_min_ps(hi, _mm256_max_ps(lo, x));
	__m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
				   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
	r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
	__m256 p = _mm256_set1_ps(1.0f / 5040);
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
	__m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
	__m256 res = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
	res = _mm256_andnot_ps(tiny, res);
	return _mm256_blendv_ps(res, _mm256_set1_ps(INFINITY), big);
}

static T256 void softmax_avx2(float *x, size_t n)
{
	if (n == 0)
		return;
	size_t i = 0;
	float mx = x[0];
	if (n >= 8) {
		__m256 m = _mm256_loadu_ps(x);
		for (i = 8; i + 8 <= n; i += 8)
			m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
		__m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
		h = _mm_max_ps(h, _mm_movehl_ps(h, h));
		h = _mm_max_ss(h, _mm_movehdup_ps(h));
		mx = _mm_cvtss_f32(h);
	}
	for (; i < n; i++)
		if (x[i] > mx)
			mx = x[i];
	__m256 mv = _mm256_set1_ps(mx), acc = _mm256_setzero_ps();
	for (i = 0; i + 8 <= n; i += 8) {
		__m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
		_mm256_storeu_ps(x + i, e);
		acc = _mm256_add_ps(acc, e);
	}
	float sum = hsum8(acc);
	for (; i < n; i++) {
		x[i] = expf(x[i] - mx);
		sum += x[i];
	}
	float is = 1.0f / sum;
	__m256 inv = _mm256_set1_ps(is);
	for (i = 0; i + 8 <= n; i += 8)
		_mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
	for (; i < n; i++)
		x[i] *= is;
}

/* -z of glu_arg */
INL T256 __m256 glu_neg_arg256(__m256 g, int gelu)
{
	if (!gelu)
		return _mm256_sub_ps(_mm256_setzero_ps(), g);
	__m256 c3 = _mm256_mul_ps(_mm256_mul_ps(g, g), _mm256_set1_ps(GELU_C));
	return _mm256_mul_ps(_mm256_fmadd_ps(c3, g, g), _mm256_set1_ps(-2.0f * GELU_K));
}

static T256 void glu_avx2(float *a, const float *g, const float *u, size_t n, int gelu)
{
	size_t i = 0;
	const __m256 one = _mm256_set1_ps(1.0f);
	for (; i + 8 <= n; i += 8) {
		__m256 gv = _mm256_loadu_ps(g + i);
		__m256 e = exp256(glu_neg_arg256(gv, gelu));
		__m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, e));
		_mm256_storeu_ps(a + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
	}
	for (; i < n; i++)
		a[i] = g[i] / (1.0f + expf(-glu_arg(g[i], gelu))) * u[i];
}

INL T256 float dot_avx2(const float *a, const float *b, size_t n)
{
	__m256 a0 = _mm256_setzero_ps(), a1 = a0;
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
		a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
	}
	for (; i + 8 <= n; i += 8)
		a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
	float s = hsum8(_mm256_add_ps(a0, a1));
	for (; i < n; i++)
		s += a[i] * b[i];
	return s;
}

static T256 void dots_avx2(float *out, const float *q, const float *keys, size_t ldk, size_t n,
			   size_t d, float scale)
{
	for (size_t p = 0; p < n; p++)
		out[p] = dot_avx2(q, keys + p * ldk, d) * scale;
}

/* NV vectors of y from y + i over every row, in registers */
INL T256 void axpys256_span(float *y, const float *s, const float *X, size_t ldx, size_t n,
			    const int NV)
{
	__m256 acc[8];
#pragma GCC unroll 8
	for (int v = 0; v < NV; v++)
		acc[v] = _mm256_loadu_ps(y + 8 * v);
	for (size_t p = 0; p < n; p++) {
		__m256 sv = _mm256_set1_ps(s[p]);
		const float *x = X + p * ldx;
#pragma GCC unroll 8
		for (int v = 0; v < NV; v++)
			acc[v] = _mm256_fmadd_ps(sv, _mm256_loadu_ps(x + 8 * v), acc[v]);
	}
#pragma GCC unroll 8
	for (int v = 0; v < NV; v++)
		_mm256_storeu_ps(y + 8 * v, acc[v]);
}

static T256 void axpys1_avx2(float *y, const float *s, const float *X, size_t ldx, size_t n,
			     size_t d)
{
	size_t i = 0;
	for (; i + 64 <= d; i += 64)
		axpys256_span(y + i, s, X + i, ldx, n, 8);
	switch ((d - i) / 8) {
	case 7: axpys256_span(y + i, s, X + i, ldx, n, 7); break;
	case 6: axpys256_span(y + i, s, X + i, ldx, n, 6); break;
	case 5: axpys256_span(y + i, s, X + i, ldx, n, 5); break;
	case 4: axpys256_span(y + i, s, X + i, ldx, n, 4); break;
	case 3: axpys256_span(y + i, s, X + i, ldx, n, 3); break;
	case 2: axpys256_span(y + i, s, X + i, ldx, n, 2); break;
	case 1: axpys256_span(y + i, s, X + i, ldx, n, 1); break;
	}
	/* the tail as axpy_avx2's scalar loop: the same products and sums */
	for (i += (d - i) / 8 * 8; i < d; i++)
		for (size_t p = 0; p < n; p++)
			y[i] += s[p] * X[p * ldx + i];
}

static T256 void axpys_avx2(float *y, size_t ldy, const float *s, size_t lds, size_t nq,
			    const float *X, size_t ldx, size_t n, size_t d)
{
	for (size_t q = 0; q < nq; q++)
		axpys1_avx2(y + q * ldy, s + q * lds, X, ldx, n, d);
}

/* A float slab's tile: NV 8-row vectors with their sums in registers
 * across the columns (NV a constant: with a count known at run time GCC
 * kept them on the stack, a load and a store each FMA, and the BF16 image
 * decoded at 0.86x the dense engine), the rows past them scalar (each row
 * one fused multiply-add a column in order, as the _ref). */
INL T256 void tile256(float *y, size_t m, const uint8_t *base, size_t stride, const uint32_t *pos,
		      enum sf_dtype dt, const float *xv, size_t n, const int NV)
{
	size_t es = dt_size(dt);
	__m256 acc[SF_FSLAB_ROWS / 8];

#pragma GCC unroll 8
	for (int v = 0; v < NV; v++)
		acc[v] = _mm256_loadu_ps(y + 8 * v);
	for (size_t k = 0; k < n; k++) {
		const uint8_t *c = base + pos[k] * stride;
		__m256 x = _mm256_set1_ps(xv[k]);
		for (size_t o = 0; o < stride; o += 64)
			__builtin_prefetch(c + FSLAB_AHEAD + o);
#pragma GCC unroll 8
		for (int v = 0; v < NV; v++)
			acc[v] = _mm256_fmadd_ps(ld8(c + 8 * (size_t)v * es, dt), x, acc[v]);
		for (size_t j = 8 * (size_t)NV; j < m; j++)
			y[j] = fmaf(xv[k], ld_w(c, dt, j), y[j]);
	}
#pragma GCC unroll 8
	for (int v = 0; v < NV; v++)
		_mm256_storeu_ps(y + 8 * v, acc[v]);
}

static T256 void tile_avx2(float *y, size_t m, const uint8_t *base, size_t stride,
			   const uint32_t *pos, enum sf_dtype dt, const float *xv, size_t n)
{
	switch (m / 8) {
	case 8: tile256(y, m, base, stride, pos, dt, xv, n, 8); break;
	case 7: tile256(y, m, base, stride, pos, dt, xv, n, 7); break;
	case 6: tile256(y, m, base, stride, pos, dt, xv, n, 6); break;
	case 5: tile256(y, m, base, stride, pos, dt, xv, n, 5); break;
	case 4: tile256(y, m, base, stride, pos, dt, xv, n, 4); break;
	case 3: tile256(y, m, base, stride, pos, dt, xv, n, 3); break;
	case 2: tile256(y, m, base, stride, pos, dt, xv, n, 2); break;
	case 1: tile256(y, m, base, stride, pos, dt, xv, n, 1); break;
	default: tile256(y, m, base, stride, pos, dt, xv, n, 0); break;
	}
}

/* 8 rows of 8 floats into their 8 columns, in registers. */
INL T256 void transpose8x8(__m256 r[8])
{
	__m256 t[8], u[8];
	for (int i = 0; i < 4; i++) {
		t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	}
	for (int i = 0; i < 2; i++) {
		u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
		u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
		u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
		u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
	}
	for (int j = 0; j < 4; j++) {
		r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
		r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
	}
}

/* Blocks of 8 tokens by 8 columns transposed in registers (the plain
 * loop's strided loads were 1% of a q4 image's prompt); the tails
 * masked (a token past T reads 0, which the padding wants). */
static T256 void transpose_avx2(float *out, size_t ldo, const uint32_t *pos, const float *in,
				size_t ldi, size_t T, size_t n, size_t width)
{
	for (size_t j0 = 0; j0 < n; j0 += 8) {
		__m256i jm = rows8(n, j0);
		for (size_t t0 = 0; t0 < width; t0 += 8) {
			__m256 r[8];
			for (size_t t = 0; t < 8; t++)
				r[t] = t0 + t < T ? _mm256_maskload_ps(in + (t0 + t) * ldi + j0, jm)
						  : _mm256_setzero_ps();
			transpose8x8(r);
			__m256i tm = rows8(width, t0);
			for (size_t j = 0; j < 8 && j0 + j < n; j++)
				if (pos[j0 + j] != UINT32_MAX)
					_mm256_maskstore_ps(out + (size_t)pos[j0 + j] * ldo + t0, tm, r[j]);
		}
	}
}

static const struct kern kern_avx2 = {
	matmul_avx2, colaccum_avx2, widen_avx2, strip_avx2, rmsnorm_avx2, softmax_avx2,
	glu_avx2, dots_avx2, axpys_avx2, tile_avx2, transpose_avx2,
};

// ----------------------------------------------------------------------------
// AVX-512 F/BW/VL: 16 lanes, tails by masked loads (which never fault on
// the masked-off bytes, so a tensor at the very end of a mapping is safe)

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

INL T512 __m512 ld16(const void *p, enum sf_dtype dt)
{
	switch (dt) {
	case SF_DTYPE_BF16:
		return _mm512_castsi512_ps(_mm512_slli_epi32(
			_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
	case SF_DTYPE_F16:
		return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
	default:
		return _mm512_loadu_ps(p);
	}
}

INL T512 __m512 ld16m(const void *p, enum sf_dtype dt, __mmask16 k)
{
	switch (dt) {
	case SF_DTYPE_BF16:
		return _mm512_castsi512_ps(_mm512_slli_epi32(
			_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p)), 16));
	case SF_DTYPE_F16:
		return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, p));
	default:
		return _mm512_maskz_loadu_ps(k, p);
	}
}

INL T512 __mmask16 tailmask(size_t left)
{
	return (__mmask16)((1u << left) - 1u);
}

/* The sum of v's lanes by halving: lanes i and i + 8, then i and i + 4,
 * then 0 + 2 and 1 + 3, then the two (GCC's _mm512_reduce_add_ps written
 * out), so that hsum16x16 gives its floats on any compiler. */
INL T512 float hsum16(__m512 v)
{
	__m256 h = _mm256_add_ps(_mm512_extractf32x8_ps(v, 1), _mm512_castps512_ps256(v));
	__m128 q = _mm_add_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
	__m128 p = _mm_add_ps(q, _mm_shuffle_ps(q, q, _MM_SHUFFLE(1, 0, 3, 2)));
	return _mm_cvtss_f32(_mm_add_ss(p, _mm_shuffle_ps(p, p, _MM_SHUFFLE(1, 1, 1, 1))));
}

/* Lane j: hsum16(v[j]), every sum its pairs in the same order, for a
 * quarter of the instructions: each step adds halves of two vectors at
 * once, and the sums come out at lane 4 (j % 4) + j / 4. */
INL T512 __m512 hsum16x16(const __m512 v[16])
{
	__m512 u[8], w[4], z[2];
#pragma GCC unroll 8
	for (int m = 0; m < 8; m++)	/* lanes i + 8 and i */
		u[m] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], 0xee),
				     _mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], 0x44));
#pragma GCC unroll 4
	for (int m = 0; m < 4; m++)	/* i + 4 and i */
		w[m] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * m], u[2 * m + 1], 0xdd),
				     _mm512_shuffle_f32x4(u[2 * m], u[2 * m + 1], 0x88));
#pragma GCC unroll 2
	for (int m = 0; m < 2; m++)	/* 0 + 2 and 1 + 3 */
		z[m] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * m], w[2 * m + 1], 0xee),
				     _mm512_shuffle_ps(w[2 * m], w[2 * m + 1], 0x44));
	__m512 r = _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0xdd),
				 _mm512_shuffle_ps(z[0], z[1], 0x88));
	return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14,
						       3, 7, 11, 15), r);
}

/* Four rows of one token, sharing each load of x (eight FMA chains). Every
 * row's lanes accumulate columns [c, c+16) in a and [c+16, c+32) in b per
 * 32-column step, then 16-column steps into a, the masked tail into b, and
 * one reduction of a + b: the operations mm512_group4 repeats for a batch,
 * so that every token of a batch gets the floats it gets alone. */
INL T512 void mv512_4(float *y, const char *w, size_t rs, enum sf_dtype dt, size_t cols,
		      const float *x)
{
	size_t es = dt_size(dt), c = 0;
	const char *w0 = w, *w1 = w + rs, *w2 = w + 2 * rs, *w3 = w + 3 * rs;
	__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
	__m512 b0 = a0, b1 = a0, b2 = a0, b3 = a0;

	for (; c + 32 <= cols; c += 32) {
		__m512 x0 = _mm512_loadu_ps(x + c), x1 = _mm512_loadu_ps(x + c + 16);
		prefetch_group(w + 4 * rs + c * es, rs, es / 2);
		a0 = _mm512_fmadd_ps(ld16(w0 + c * es, dt), x0, a0);
		b0 = _mm512_fmadd_ps(ld16(w0 + (c + 16) * es, dt), x1, b0);
		a1 = _mm512_fmadd_ps(ld16(w1 + c * es, dt), x0, a1);
		b1 = _mm512_fmadd_ps(ld16(w1 + (c + 16) * es, dt), x1, b1);
		a2 = _mm512_fmadd_ps(ld16(w2 + c * es, dt), x0, a2);
		b2 = _mm512_fmadd_ps(ld16(w2 + (c + 16) * es, dt), x1, b2);
		a3 = _mm512_fmadd_ps(ld16(w3 + c * es, dt), x0, a3);
		b3 = _mm512_fmadd_ps(ld16(w3 + (c + 16) * es, dt), x1, b3);
	}
	for (; c + 16 <= cols; c += 16) {
		__m512 x0 = _mm512_loadu_ps(x + c);
		a0 = _mm512_fmadd_ps(ld16(w0 + c * es, dt), x0, a0);
		a1 = _mm512_fmadd_ps(ld16(w1 + c * es, dt), x0, a1);
		a2 = _mm512_fmadd_ps(ld16(w2 + c * es, dt), x0, a2);
		a3 = _mm512_fmadd_ps(ld16(w3 + c * es, dt), x0, a3);
	}
	if (c < cols) {
		__mmask16 k = tailmask(cols - c);
		__m512 x0 = _mm512_maskz_loadu_ps(k, x + c);
		b0 = _mm512_fmadd_ps(ld16m(w0 + c * es, dt, k), x0, b0);
		b1 = _mm512_fmadd_ps(ld16m(w1 + c * es, dt, k), x0, b1);
		b2 = _mm512_fmadd_ps(ld16m(w2 + c * es, dt, k), x0, b2);
		b3 = _mm512_fmadd_ps(ld16m(w3 + c * es, dt, k), x0, b3);
	}
	y[0] = hsum16(_mm512_add_ps(a0, b0));
	y[1] = hsum16(_mm512_add_ps(a1, b1));
	y[2] = hsum16(_mm512_add_ps(a2, b2));
	y[3] = hsum16(_mm512_add_ps(a3, b3));
}

/* A row left over after the groups of four: four accumulators over 64
 * columns, as many FMA chains in flight as the row allows. */
INL T512 float mv512_1(const char *w, enum sf_dtype dt, size_t cols, const float *x)
{
	size_t es = dt_size(dt), c = 0;
	__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;

	for (; c + 64 <= cols; c += 64) {
		a0 = _mm512_fmadd_ps(ld16(w + c * es, dt), _mm512_loadu_ps(x + c), a0);
		a1 = _mm512_fmadd_ps(ld16(w + (c + 16) * es, dt), _mm512_loadu_ps(x + c + 16), a1);
		a2 = _mm512_fmadd_ps(ld16(w + (c + 32) * es, dt), _mm512_loadu_ps(x + c + 32), a2);
		a3 = _mm512_fmadd_ps(ld16(w + (c + 48) * es, dt), _mm512_loadu_ps(x + c + 48), a3);
	}
	for (; c + 16 <= cols; c += 16)
		a0 = _mm512_fmadd_ps(ld16(w + c * es, dt), _mm512_loadu_ps(x + c), a0);
	if (c < cols) {
		__mmask16 k = tailmask(cols - c);
		a1 = _mm512_fmadd_ps(ld16m(w + c * es, dt, k), _mm512_maskz_loadu_ps(k, x + c), a1);
	}
	return hsum16(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* Columns per block and tokens per chunk of the batched product: four
 * rows' weights as f32 (8 KiB), three tokens' inputs (6 KiB) and their
 * accumulators stay in L1 while every token pair of the chunk passes over
 * them, and each weight is widened from bf16/f16 once per chunk. */
#define MM512_CB 512
#define MM512_TC 64

/* TB (1 to 3) tokens' accumulators acc[u][row][a|b] over the columns
 * [c0, c0 + cn) of four rows, whose f32 weights are wf (from zero at
 * c0 = 0, so that acc needs no clearing and is not read): mv512_4's
 * 32-column steps, and in the last block its 16-column step into a and
 * masked tail into b (a zero weight and a zero input in the masked lanes,
 * as ld16m and maskz give). */
INL T512 void mm512_span(__m512 (*acc)[4][2], const float (*wf)[MM512_CB], const float *xt,
			 size_t ldx, size_t c0, size_t cn, size_t cols, float *y, size_t ldy,
			 const int TB)
{
	__m512 a[4][3], b[4][3];
	size_t c = 0;

#pragma GCC unroll 4
	for (int r = 0; r < 4; r++)
#pragma GCC unroll 3
		for (int u = 0; u < TB; u++)
			if (c0 == 0)
				a[r][u] = b[r][u] = _mm512_setzero_ps();
			else
				a[r][u] = acc[u][r][0], b[r][u] = acc[u][r][1];
	for (; c + 32 <= cn && c0 + c + 32 <= cols; c += 32) {
		__m512 x0[3], x1[3];
#pragma GCC unroll 3
		for (int u = 0; u < TB; u++) {
			x0[u] = _mm512_loadu_ps(xt + u * ldx + c);
			x1[u] = _mm512_loadu_ps(xt + u * ldx + c + 16);
		}
#pragma GCC unroll 4
		for (int r = 0; r < 4; r++) {
			__m512 w0 = _mm512_load_ps(wf[r] + c), w1 = _mm512_load_ps(wf[r] + c + 16);
			/* each weight loaded once into a register: folding the load
			 * into every FMA that uses it would double the loads, and a
			 * 512-bit load costs as much as two FMAs on AMD Zen 4 */
			__asm__("" : "+v"(w0), "+v"(w1));
#pragma GCC unroll 3
			for (int u = 0; u < TB; u++) {
				a[r][u] = _mm512_fmadd_ps(w0, x0[u], a[r][u]);
				b[r][u] = _mm512_fmadd_ps(w1, x1[u], b[r][u]);
			}
		}
	}
	for (; c + 16 <= cn; c += 16)
#pragma GCC unroll 4
		for (int r = 0; r < 4; r++)
#pragma GCC unroll 3
			for (int u = 0; u < TB; u++)
				a[r][u] = _mm512_fmadd_ps(_mm512_load_ps(wf[r] + c),
							  _mm512_loadu_ps(xt + u * ldx + c), a[r][u]);
	if (c < cn) {
		__mmask16 k = tailmask(cn - c);
#pragma GCC unroll 4
		for (int r = 0; r < 4; r++)
#pragma GCC unroll 3
			for (int u = 0; u < TB; u++)
				b[r][u] = _mm512_fmadd_ps(_mm512_load_ps(wf[r] + c),
							  _mm512_maskz_loadu_ps(k, xt + u * ldx + c),
							  b[r][u]);
	}
	if (c0 + cn == cols) {
		/* the last block: the sums from the registers to y (token u's
		 * four rows at y + u * ldy) */
		__m512 v[16];
		float sums[16];
#pragma GCC unroll 16
		for (int j = 0; j < 16; j++)
			v[j] = j < 4 * TB ? _mm512_add_ps(a[j % 4][j / 4], b[j % 4][j / 4])
					  : _mm512_setzero_ps();
		_mm512_storeu_ps(sums, hsum16x16(v));
		for (int u = 0; u < TB; u++)
			memcpy(y + (size_t)u * ldy, sums + 4 * u, 4 * sizeof(float));
		return;
	}
#pragma GCC unroll 4
	for (int r = 0; r < 4; r++)
#pragma GCC unroll 3
		for (int u = 0; u < TB; u++)
			acc[u][r][0] = a[r][u], acc[u][r][1] = b[r][u];
}

/* Block k of an MXFP4 row of cols (base/quant.h): its 32 weights, the
 * low nibbles' 16 into *lo and the high ones' into *hi, each of the
 * block's 16 possible weights (e2m1 times its scale, exact) permuted
 * into place by code. */
INL T512 void mx512_32(const uint8_t *row, size_t cols, size_t k, __m512 *lo, __m512 *hi)
{
	__m512i i = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(
		sf_q_codes_at(row, SF_DTYPE_MXFP4, cols, k))));
	__m512 t = _mm512_mul_ps(_mm512_loadu_ps(sf_e2m1), _mm512_set1_ps(mx_scale(row, k)));

	*lo = _mm512_permutexvar_ps(_mm512_and_si512(i, _mm512_set1_epi32(15)), t);
	*hi = _mm512_permutexvar_ps(_mm512_srli_epi32(i, 4), t);
}

/* Columns [c0, c0 + cn) of n MXFP4 rows (rs bytes apart, c0 and cn whole
 * blocks) as f32 into wf; the next block's codes, or the next rows'
 * first, asked of memory meanwhile. */
INL T512 void mx512_block(float (*wf)[MM512_CB], const uint8_t *w, size_t rs, size_t cols,
			  size_t c0, size_t cn, int n)
{
	for (int r = 0; r < n; r++) {
		const uint8_t *row = w + (size_t)r * rs;
		const uint8_t *next = c0 + cn < cols
			? sf_q_codes_at(row, SF_DTYPE_MXFP4, cols, (c0 + cn) / SF_QBLOCK)
			: row + (size_t)n * rs;
		for (size_t c = 0; c < cn; c += SF_QBLOCK) {
			__m512 lo, hi;
			if (c % 128 == 0)
				_mm_prefetch((const char *)next + c / 2, _MM_HINT_T1);
			mx512_32(row, cols, (c0 + c) / SF_QBLOCK, &lo, &hi);
			_mm512_store_ps(wf[r] + c, lo);
			_mm512_store_ps(wf[r] + c + 16, hi);
		}
	}
}

/* Rows [0, 4G) of w, G groups of four (1 or 2), for T >= 2 tokens, each
 * (row, token) with exactly mv512_4's operations: only the order in which
 * the pairs take their turns differs, the accumulators waiting in acc
 * between column blocks and summed into y in the last. Three tokens a
 * turn: 24 accumulators, 6 inputs and 2 weights fill the 32 registers, 14
 * loads for 24 FMAs; the G groups take the same three tokens in turn, so
 * that their inputs come from L1 for the second group. */
INL T512 void mm512_groups(float *y, size_t ldy, const char *w, size_t rs, enum sf_dtype dt,
			   size_t cols, const float *x, size_t ldx, size_t T, const int G)
{
	size_t es = dt_size(dt);
	float wf[8][MM512_CB] __attribute__((aligned(64)));
	__m512 acc[2][MM512_TC][4][2];	/* (group, token, row, a|b) */

	for (size_t t0 = 0; t0 < T; t0 += MM512_TC) {
		size_t tn = T - t0 < MM512_TC ? T - t0 : MM512_TC;
		for (size_t c0 = 0; c0 < cols; c0 += MM512_CB) {
			size_t cn = cols - c0 < MM512_CB ? cols - c0 : MM512_CB;
			/* the next block's weights (or the next group's first) are
			 * fetched while this one is computed: the conversion would
			 * otherwise wait on memory every block */
			const char *next = c0 + cn < cols ? w + (c0 + cn) * es : w + 4 * G * rs;
			if (dt == SF_DTYPE_MXFP4)
				mx512_block(wf, (const uint8_t *)w, rs, cols, c0, cn, 4 * G);
			for (int r = 0; r < 4 * G && dt != SF_DTYPE_MXFP4; r++)
				for (size_t c = 0; c < cn; c += 16) {
					__mmask16 k = cn - c >= 16 ? (__mmask16)0xffff : tailmask(cn - c);
					_mm512_store_ps(wf[r] + c, ld16m(w + r * rs + (c0 + c) * es, dt, k));
					if (c % (64 / 2) == 0)
						_mm_prefetch(next + r * rs + c * es, _MM_HINT_T1);
					if (es == 4 && c % 32 == 16)
						_mm_prefetch(next + r * rs + c * es, _MM_HINT_T1);
				}
			size_t t = 0;
			for (; t + 3 <= tn; t += 3)
				for (int g = 0; g < G; g++)
					mm512_span(acc[g] + t, (const float (*)[MM512_CB])wf[4 * g],
						   x + (t0 + t) * ldx + c0, ldx, c0, cn, cols,
						   y + (t0 + t) * ldy + 4 * g, ldy, 3);
			for (; t + 2 <= tn; t += 2)
				for (int g = 0; g < G; g++)
					mm512_span(acc[g] + t, (const float (*)[MM512_CB])wf[4 * g],
						   x + (t0 + t) * ldx + c0, ldx, c0, cn, cols,
						   y + (t0 + t) * ldy + 4 * g, ldy, 2);
			if (t < tn)
				for (int g = 0; g < G; g++)
					mm512_span(acc[g] + t, (const float (*)[MM512_CB])wf[4 * g],
						   x + (t0 + t) * ldx + c0, ldx, c0, cn, cols,
						   y + (t0 + t) * ldy + 4 * g, ldy, 1);
		}
	}
}

/* Four MXFP4 rows (base/quant.h) for one token: mv512_4's operations on
 * the weights each block's codes and scale give, decoded in registers
 * (a block is one 32-column step: its low half feeds a, its high half
 * b), so the floats of the BF16 rows of the same weights. */
INL T512 void mv512_4_mx(float *y, const uint8_t *w, size_t rs, size_t cols, const float *x)
{
	const size_t nb = cols / SF_QBLOCK, codes = nb;	/* a scale byte a block first */
	__m512 a[4], b[4];

	for (int r = 0; r < 4; r++)
		a[r] = b[r] = _mm512_setzero_ps();
	for (size_t k = 0; k < nb; k++) {
		__m512 x0 = _mm512_loadu_ps(x + SF_QBLOCK * k), x1 = _mm512_loadu_ps(x + SF_QBLOCK * k + 16);
		/* the next group's scales, then its codes, a line a row */
		if (k % 64 == 0)
			prefetch_group((const char *)w + 4 * rs + k, rs, 1);
		if (k % 4 == 0)
			prefetch_group((const char *)w + 4 * rs + codes + 16 * k, rs, 1);
#pragma GCC unroll 4
		for (int r = 0; r < 4; r++) {
			__m512 lo, hi;
			mx512_32(w + r * rs, cols, k, &lo, &hi);
			a[r] = _mm512_fmadd_ps(lo, x0, a[r]);
			b[r] = _mm512_fmadd_ps(hi, x1, b[r]);
		}
	}
	for (int r = 0; r < 4; r++)
		y[r] = hsum16(_mm512_add_ps(a[r], b[r]));
}

static T512 void widen_avx512(float *w, const void *c, enum sf_dtype dt, size_t m);
static T512 void matmul_avx512(float *y, size_t ldy, const void *W, enum sf_dtype dt,
			       size_t cols, const float *x, size_t ldx, size_t T, size_t r0,
			       size_t r1);

/* Rows in groups of four from r0 (the one-token kernel's grouping, which
 * decides each row's operations), the rest one by one; a pass takes the
 * groups two at a time. MXFP4's groups decode their blocks in registers
 * (one token) or into mm512_groups' f32 block, the rest widened first
 * (mx_matmul). */
INL T512 void mm512(float *y, size_t ldy, const void *W, enum sf_dtype dt, size_t cols,
		    const float *x, size_t ldx, size_t T, size_t r0, size_t r1)
{
	size_t rs = row_bytes(dt, cols), r = r0;
	size_t r4 = r0 + (r1 - r0) / 4 * 4;	/* [r0, r4): the groups of four */
	const char *w = W;

	while (r < r4) {
		int groups = T > 1 && r + 8 <= r4 ? 2 : 1;
		if (T == 1 && dt == SF_DTYPE_MXFP4)
			mv512_4_mx(y + (r - r0), (const uint8_t *)w + r * rs, rs, cols, x);
		else if (T == 1)
			mv512_4(y + (r - r0), w + r * rs, rs, dt, cols, x);
		else if (groups == 2)
			mm512_groups(y + (r - r0), ldy, w + r * rs, rs, dt, cols, x, ldx, T, 2);
		else
			mm512_groups(y + (r - r0), ldy, w + r * rs, rs, dt, cols, x, ldx, T, 1);
		r += 4 * (size_t)groups;
	}
	if (dt == SF_DTYPE_MXFP4 && r < r1)
		mx_matmul(widen_avx512, matmul_avx512, y + (r - r0), ldy, W, cols, x, ldx, T, r, r1);
	for (; r < r1 && dt != SF_DTYPE_MXFP4; r++)
		for (size_t t = 0; t < T; t++)
			y[t * ldy + (r - r0)] = mv512_1(w + r * rs, dt, cols, x + t * ldx);
}

static T512 void matmul_avx512(float *y, size_t ldy, const void *W, enum sf_dtype dt,
			       size_t cols, const float *x, size_t ldx, size_t T, size_t r0,
			       size_t r1)
{
	switch (dt) {
	case SF_DTYPE_MXFP4: mm512(y, ldy, W, SF_DTYPE_MXFP4, cols, x, ldx, T, r0, r1); break;
	case SF_DTYPE_BF16: mm512(y, ldy, W, SF_DTYPE_BF16, cols, x, ldx, T, r0, r1); break;
	case SF_DTYPE_F16: mm512(y, ldy, W, SF_DTYPE_F16, cols, x, ldx, T, r0, r1); break;
	default: mm512(y, ldy, W, SF_DTYPE_F32, cols, x, ldx, T, r0, r1); break;
	}
}

INL T512 void ca512(float *y, size_t m, const void *const *cols, size_t off, enum sf_dtype dt,
		    const float *xv, size_t n)
{
	size_t es = dt_size(dt), k = 0, mt = m & ~(size_t)15;
	__mmask16 km = tailmask(m - mt);

	for (; k + 4 <= n; k += 4) {
		const char *c0 = (const char *)cols[k] + off;
		const char *c1 = (const char *)cols[k + 1] + off;
		const char *c2 = (const char *)cols[k + 2] + off;
		const char *c3 = (const char *)cols[k + 3] + off;
		__m512 v0 = _mm512_set1_ps(xv[k]), v1 = _mm512_set1_ps(xv[k + 1]);
		__m512 v2 = _mm512_set1_ps(xv[k + 2]), v3 = _mm512_set1_ps(xv[k + 3]);
		size_t j = 0;
		for (; j < mt; j += 16) {
			__m512 t = _mm512_loadu_ps(y + j);
			t = _mm512_fmadd_ps(ld16(c0 + j * es, dt), v0, t);
			t = _mm512_fmadd_ps(ld16(c1 + j * es, dt), v1, t);
			t = _mm512_fmadd_ps(ld16(c2 + j * es, dt), v2, t);
			t = _mm512_fmadd_ps(ld16(c3 + j * es, dt), v3, t);
			_mm512_storeu_ps(y + j, t);
		}
		if (km) {
			__m512 t = _mm512_maskz_loadu_ps(km, y + j);
			t = _mm512_fmadd_ps(ld16m(c0 + j * es, dt, km), v0, t);
			t = _mm512_fmadd_ps(ld16m(c1 + j * es, dt, km), v1, t);
			t = _mm512_fmadd_ps(ld16m(c2 + j * es, dt, km), v2, t);
			t = _mm512_fmadd_ps(ld16m(c3 + j * es, dt, km), v3, t);
			_mm512_mask_storeu_ps(y + j, km, t);
		}
	}
	for (; k < n; k++) {
		const char *c0 = (const char *)cols[k] + off;
		__m512 v0 = _mm512_set1_ps(xv[k]);
		size_t j = 0;
		for (; j < mt; j += 16)
			_mm512_storeu_ps(y + j, _mm512_fmadd_ps(ld16(c0 + j * es, dt), v0,
								_mm512_loadu_ps(y + j)));
		if (km)
			_mm512_mask_storeu_ps(y + j, km,
				_mm512_fmadd_ps(ld16m(c0 + j * es, dt, km), v0,
						_mm512_maskz_loadu_ps(km, y + j)));
	}
}

/* An MXFP4 row of m weights, block by block. */
INL T512 void mx_widen512(float *w, const uint8_t *row, size_t m)
{
	for (size_t b = 0; b < m / SF_QBLOCK; b++) {
		__m512 lo, hi;
		mx512_32(row, m, b, &lo, &hi);
		_mm512_store_ps(w + 32 * b, lo);
		_mm512_store_ps(w + 32 * b + 16, hi);
	}
}

static T512 void widen_avx512(float *w, const void *c, enum sf_dtype dt, size_t m)
{
	size_t es = dt_size(dt);

	if (dt == SF_DTYPE_MXFP4) {
		mx_widen512(w, c, m);
		return;
	}
	for (size_t j = 0; j < m; j += 16) {
		__mmask16 k = j + 16 <= m ? (__mmask16)0xffff : tailmask(m - j);
		_mm512_store_ps(w + j, ld16m((const char *)c + j * es, dt, k));
	}
}

/* The whole strip (three vectors, masked past m), tokens eight at a time:
 * 24 sums in registers, so each column's three vectors serve 24
 * multiply-adds; the multiply-add of a token that did not select the
 * column masked off. */
#define STRIP512_TOKENS 8
INL T512 void strip512(float *Y, size_t ldy, size_t m, const float (*W)[SF_STRIP_ROWS],
		       const float *xs, const float *X, const uint32_t *sel, size_t ldx, size_t T,
		       size_t n, const int scaled, const int masked)
{
	enum { V = SF_STRIP_ROWS / 16 };
	__mmask16 km[V];

#pragma GCC unroll 4
	for (size_t v = 0; v < V; v++)
		km[v] = 16 * v + 16 <= m ? (__mmask16)0xffff : 16 * v < m ? tailmask(m - 16 * v) : 0;
	for (size_t t0 = 0; t0 < T; t0 += STRIP512_TOKENS) {
		__m512 a[STRIP512_TOKENS][V];
#pragma GCC unroll 8
		for (size_t t = 0; t < STRIP512_TOKENS; t++)
#pragma GCC unroll 4
			for (size_t v = 0; v < V; v++)
				a[t][v] = _mm512_maskz_loadu_ps(t0 + t < T ? km[v] : 0,
								Y + (t0 + t) * ldy + 16 * v);
		for (size_t k = 0; k < n; k++) {
			__m512 w[V];
#pragma GCC unroll 4
			for (size_t v = 0; v < V; v++)
				w[v] = _mm512_load_ps(W[k] + 16 * v);
			const float *x = X + k * ldx + t0;
			const uint32_t *s = masked ? sel + k * ldx + t0 : NULL;
#pragma GCC unroll 8
			for (size_t t = 0; t < STRIP512_TOKENS; t++) {
				__m512 xb = _mm512_set1_ps(scaled ? x[t] * xs[k] : x[t]);
				__mmask16 mk = masked ? (__mmask16)s[t] : (__mmask16)0xffff;
#pragma GCC unroll 4
				for (size_t v = 0; v < V; v++)
					a[t][v] = _mm512_mask3_fmadd_ps(w[v], xb, a[t][v], mk);
			}
		}
		for (size_t t = 0; t < STRIP512_TOKENS && t0 + t < T; t++)
#pragma GCC unroll 4
			for (size_t v = 0; v < V; v++)
				_mm512_mask_storeu_ps(Y + (t0 + t) * ldy + 16 * v, km[v], a[t][v]);
	}
}

static T512 void strip_avx512(float *Y, size_t ldy, size_t m, const float (*W)[SF_STRIP_ROWS],
			      const float *xs, const float *X, const uint32_t *sel, size_t ldx,
			      size_t T, size_t n)
{
	if (xs && sel)
		strip512(Y, ldy, m, W, xs, X, sel, ldx, T, n, 1, 1);
	else if (xs)
		strip512(Y, ldy, m, W, xs, X, sel, ldx, T, n, 1, 0);
	else if (sel)
		strip512(Y, ldy, m, W, xs, X, sel, ldx, T, n, 0, 1);
	else
		strip512(Y, ldy, m, W, xs, X, sel, ldx, T, n, 0, 0);
}

static T512 void colaccum_avx512(float *y, size_t m, const void *const *cols, size_t off,
				 enum sf_dtype dt, const float *xv, size_t n)
{
	switch (dt) {
	case SF_DTYPE_BF16: ca512(y, m, cols, off, SF_DTYPE_BF16, xv, n); break;
	case SF_DTYPE_F16: ca512(y, m, cols, off, SF_DTYPE_F16, xv, n); break;
	default: ca512(y, m, cols, off, SF_DTYPE_F32, xv, n); break;
	}
}

static T512 void rmsnorm_avx512(float *out, const float *x, const void *w, enum sf_dtype dt,
				size_t n, float eps, float offset)
{
	__m512 a0 = _mm512_setzero_ps(), a1 = a0;
	size_t i = 0, es = dt_size(dt);
	for (; i + 32 <= n; i += 32) {
		__m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
		a0 = _mm512_fmadd_ps(v0, v0, a0);
		a1 = _mm512_fmadd_ps(v1, v1, a1);
	}
	for (; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? (__mmask16)0xffff : tailmask(n - i);
		__m512 v0 = _mm512_maskz_loadu_ps(k, x + i);
		a0 = _mm512_fmadd_ps(v0, v0, a0);
	}
	float ss = hsum16(_mm512_add_ps(a0, a1));
	float r = 1.0f / sqrtf(ss / (float)n + eps);
	__m512 rv = _mm512_set1_ps(r), ov = _mm512_set1_ps(offset);
	for (i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? (__mmask16)0xffff : tailmask(n - i);
		__m512 t = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), rv);
		__m512 g = _mm512_add_ps(ov, ld16m((const char *)w + i * es, dt, k));
		_mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(g, t));
	}
}

/* As exp256, with scalef doing the 2^n so over- and underflow (to
 * subnormals and zero) come out right without masks; the clamps only stop
 * inf - inf in the reduction and keep NaN. */
INL T512 __m512 exp512(__m512 x)
{
	__m512 xc = _mm512_min_ps(_mm512_set1_ps(100.0f), _mm512_max_ps(_mm512_set1_ps(-110.0f), x));
	__m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
					_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
	__m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
	r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
	__m512 p = _mm512_set1_ps(1.0f / 5040);
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
	return _mm512_scalef_ps(p, n);
}

static T512 void softmax_avx512(float *x, size_t n)
{
	if (n == 0)
		return;
	__m512 m = _mm512_set1_ps(-INFINITY), acc = _mm512_setzero_ps();
	size_t i;
	for (i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? (__mmask16)0xffff : tailmask(n - i);
		m = _mm512_mask_max_ps(m, k, m, _mm512_maskz_loadu_ps(k, x + i));
	}
	__m512 mv = _mm512_set1_ps(_mm512_reduce_max_ps(m));
	for (i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? (__mmask16)0xffff : tailmask(n - i);
		__m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), mv));
		_mm512_mask_storeu_ps(x + i, k, e);
		acc = _mm512_mask_add_ps(acc, k, acc, e);
	}
	__m512 inv = _mm512_set1_ps(1.0f / hsum16(acc));
	for (i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? (__mmask16)0xffff : tailmask(n - i);
		_mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inv));
	}
}

/* -z of glu_arg */
INL T512 __m512 glu_neg_arg512(__m512 g, int gelu)
{
	if (!gelu)
		return _mm512_sub_ps(_mm512_setzero_ps(), g);
	__m512 c3 = _mm512_mul_ps(_mm512_mul_ps(g, g), _mm512_set1_ps(GELU_C));
	return _mm512_mul_ps(_mm512_fmadd_ps(c3, g, g), _mm512_set1_ps(-2.0f * GELU_K));
}

static T512 void glu_avx512(float *a, const float *g, const float *u, size_t n, int gelu)
{
	const __m512 one = _mm512_set1_ps(1.0f);
	for (size_t i = 0; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? (__mmask16)0xffff : tailmask(n - i);
		__m512 gv = _mm512_maskz_loadu_ps(k, g + i);
		__m512 e = exp512(glu_neg_arg512(gv, gelu));
		__m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, e));
		_mm512_mask_storeu_ps(a + i, k, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(k, u + i)));
	}
}

/* The lanes of a dot product before their sum: 32-element steps into two
 * accumulators, then 16 (the last masked) into the first. */
INL T512 __m512 dot512_lanes(const float *a, const float *b, size_t n)
{
	__m512 a0 = _mm512_setzero_ps(), a1 = a0;
	size_t i = 0;
	for (; i + 32 <= n; i += 32) {
		a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
		a1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), a1);
	}
	for (; i < n; i += 16) {
		__mmask16 k = n - i >= 16 ? (__mmask16)0xffff : tailmask(n - i);
		a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, a + i), _mm512_maskz_loadu_ps(k, b + i), a0);
	}
	return _mm512_add_ps(a0, a1);
}

/* Sixteen rows a step share one transposed sum (hsum16x16), the rest
 * are summed alone: the same floats either way. */
INL T512 void dots512(float *out, const float *q, const float *keys, size_t ldk, size_t n,
		      size_t d, float scale)
{
	const __m512 sv = _mm512_set1_ps(scale);
	size_t p = 0;
	for (; p + 16 <= n; p += 16) {
		__m512 v[16];
#pragma GCC unroll 16
		for (int j = 0; j < 16; j++)
			v[j] = dot512_lanes(q, keys + (p + (size_t)j) * ldk, d);
		_mm512_storeu_ps(out + p, _mm512_mul_ps(hsum16x16(v), sv));
	}
	for (; p < n; p++)
		out[p] = hsum16(dot512_lanes(q, keys + p * ldk, d)) * scale;
}

/* The common head sizes with d known to the compiler and the query in a
 * local copy that no store to out can touch, so that its vectors stay in
 * registers over all the keys. */
static T512 void dots_avx512(float *out, const float *q, const float *keys, size_t ldk,
			     size_t n, size_t d, float scale)
{
	float qc[128] __attribute__((aligned(64)));

	switch (d) {
	case 32: memcpy(qc, q, 32 * sizeof(float)); dots512(out, qc, keys, ldk, n, 32, scale); break;
	case 64: memcpy(qc, q, 64 * sizeof(float)); dots512(out, qc, keys, ldk, n, 64, scale); break;
	case 128:
		memcpy(qc, q, 128 * sizeof(float));
		dots512(out, qc, keys, ldk, n, 128, scale);
		break;
	default: dots512(out, q, keys, ldk, n, d, scale); break;
	}
}

/* NQ outputs of NV vectors (y + q * ldy, weights s + q * lds) over every
 * row, in registers, each row's NV loads serving the NQ; k masks the last
 * vector (its other lanes are neither read nor written). */
INL T512 void axpys512_span(float *y, size_t ldy, const float *s, size_t lds, const float *X,
			    size_t ldx, size_t n, __mmask16 k, const int NV, const int NQ)
{
	__m512 acc[4][8];
#pragma GCC unroll 4
	for (int q = 0; q < NQ; q++)
#pragma GCC unroll 8
		for (int v = 0; v < NV; v++)
			acc[q][v] = _mm512_maskz_loadu_ps(v == NV - 1 ? k : 0xffff,
							  y + (size_t)q * ldy + 16 * v);
	for (size_t p = 0; p < n; p++) {
		__m512 x[8];
#pragma GCC unroll 8
		for (int v = 0; v < NV; v++)
			x[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? k : 0xffff, X + p * ldx + 16 * v);
#pragma GCC unroll 4
		for (int q = 0; q < NQ; q++) {
			__m512 sv = _mm512_set1_ps(s[(size_t)q * lds + p]);
#pragma GCC unroll 8
			for (int v = 0; v < NV; v++)
				acc[q][v] = _mm512_fmadd_ps(sv, x[v], acc[q][v]);
		}
	}
#pragma GCC unroll 4
	for (int q = 0; q < NQ; q++)
#pragma GCC unroll 8
		for (int v = 0; v < NV; v++)
			_mm512_mask_storeu_ps(y + (size_t)q * ldy + 16 * v, v == NV - 1 ? k : 0xffff,
					      acc[q][v]);
}

/* Up to 64 elements (a head of 32 or 64), four outputs share each row's
 * loads and their FMA chains cover the latency that one output's two or
 * four leave open; wider rows, one output at a time in spans of 128. */
static T512 void axpys_avx512(float *y, size_t ldy, const float *s, size_t lds, size_t nq,
			      const float *X, size_t ldx, size_t n, size_t d)
{
	size_t q = 0;
	if (d == 0)
		return;
	__mmask16 k = d % 16 ? tailmask(d % 16) : (__mmask16)0xffff;
	for (; d <= 64 && q + 4 <= nq; q += 4)
		switch ((d + 15) / 16) {
		case 4: axpys512_span(y + q * ldy, ldy, s + q * lds, lds, X, ldx, n, k, 4, 4); break;
		case 3: axpys512_span(y + q * ldy, ldy, s + q * lds, lds, X, ldx, n, k, 3, 4); break;
		case 2: axpys512_span(y + q * ldy, ldy, s + q * lds, lds, X, ldx, n, k, 2, 4); break;
		default: axpys512_span(y + q * ldy, ldy, s + q * lds, lds, X, ldx, n, k, 1, 4); break;
		}
	for (; q < nq; q++) {
		float *yq = y + q * ldy;
		const float *sq = s + q * lds;
		size_t i = 0;
		for (; i + 128 <= d; i += 128)
			axpys512_span(yq + i, 0, sq, 0, X + i, ldx, n, 0xffff, 8, 1);
		if (i == d)
			continue;
		__mmask16 kt = (d - i) % 16 ? tailmask((d - i) % 16) : (__mmask16)0xffff;
		switch ((d - i + 15) / 16) {
		case 8: axpys512_span(yq + i, 0, sq, 0, X + i, ldx, n, kt, 8, 1); break;
		case 7: axpys512_span(yq + i, 0, sq, 0, X + i, ldx, n, kt, 7, 1); break;
		case 6: axpys512_span(yq + i, 0, sq, 0, X + i, ldx, n, kt, 6, 1); break;
		case 5: axpys512_span(yq + i, 0, sq, 0, X + i, ldx, n, kt, 5, 1); break;
		case 4: axpys512_span(yq + i, 0, sq, 0, X + i, ldx, n, kt, 4, 1); break;
		case 3: axpys512_span(yq + i, 0, sq, 0, X + i, ldx, n, kt, 3, 1); break;
		case 2: axpys512_span(yq + i, 0, sq, 0, X + i, ldx, n, kt, 2, 1); break;
		default: axpys512_span(yq + i, 0, sq, 0, X + i, ldx, n, kt, 1, 1); break;
		}
	}
}

/* A float slab's tile, NV vectors of 16 rows (the last masked by km),
 * their sums in registers across the columns. */
INL T512 void tile512(float *y, const uint8_t *base, size_t stride, const uint32_t *pos,
		      enum sf_dtype dt, const float *xv, size_t n, __mmask16 km, const int NV)
{
	size_t es = dt_size(dt);
	__m512 acc[SF_FSLAB_ROWS / 16];
#pragma GCC unroll 4
	for (int v = 0; v < NV; v++)
		acc[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? km : 0xffff, y + 16 * v);
	for (size_t k = 0; k < n; k++) {
		const uint8_t *c = base + pos[k] * stride;
		__m512 x = _mm512_set1_ps(xv[k]);
		for (size_t o = 0; o < stride; o += 64)
			__builtin_prefetch(c + FSLAB_AHEAD + o);
#pragma GCC unroll 4
		for (int v = 0; v < NV; v++)
			acc[v] = _mm512_fmadd_ps(v == NV - 1 ? ld16m(c + 16 * v * es, dt, km)
							     : ld16(c + 16 * v * es, dt), x, acc[v]);
	}
#pragma GCC unroll 4
	for (int v = 0; v < NV; v++)
		_mm512_mask_storeu_ps(y + 16 * v, v == NV - 1 ? km : 0xffff, acc[v]);
}

static T512 void tile_avx512(float *y, size_t m, const uint8_t *base, size_t stride,
			     const uint32_t *pos, enum sf_dtype dt, const float *xv, size_t n)
{
	__mmask16 km = m % 16 ? tailmask(m % 16) : (__mmask16)0xffff;
	switch ((m + 15) / 16) {
	case 4: tile512(y, base, stride, pos, dt, xv, n, km, 4); break;
	case 3: tile512(y, base, stride, pos, dt, xv, n, km, 3); break;
	case 2: tile512(y, base, stride, pos, dt, xv, n, km, 2); break;
	case 1: tile512(y, base, stride, pos, dt, xv, n, km, 1); break;
	default: break;
	}
}

/* 16 rows of 16 floats into their 16 columns, in registers. */
INL T512 void transpose16x16(__m512 r[16])
{
	__m512 t[16];
	for (int i = 0; i < 8; i++) {
		t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
		t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
	}
	for (int i = 0; i < 4; i++) {
		r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
		r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
		r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
		r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
	}
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 4; j++) {
			t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);
			t[8 * i + 4 + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0xdd);
		}
	for (int j = 0; j < 8; j++) {
		r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
		r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
	}
}

/* Blocks of 16 tokens by 16 columns transposed in registers; the tails
 * masked (a token past T reads 0, which the padding wants). */
static T512 void transpose_avx512(float *out, size_t ldo, const uint32_t *pos, const float *in,
				  size_t ldi, size_t T, size_t n, size_t width)
{
	for (size_t j0 = 0; j0 < n; j0 += 16) {
		__mmask16 jm = n - j0 >= 16 ? (__mmask16)0xffff : tailmask(n - j0);
		for (size_t t0 = 0; t0 < width; t0 += 16) {
			__m512 r[16];
			for (size_t t = 0; t < 16; t++)
				r[t] = t0 + t < T ? _mm512_maskz_loadu_ps(jm, in + (t0 + t) * ldi + j0)
						  : _mm512_setzero_ps();
			transpose16x16(r);
			__mmask16 tm = width - t0 >= 16 ? (__mmask16)0xffff : tailmask(width - t0);
			for (size_t j = 0; j < 16 && j0 + j < n; j++)
				if (pos[j0 + j] != UINT32_MAX)
					_mm512_mask_storeu_ps(out + (size_t)pos[j0 + j] * ldo + t0, tm, r[j]);
		}
	}
}

static const struct kern kern_avx512 = {
	matmul_avx512, colaccum_avx512, widen_avx512, strip_avx512, rmsnorm_avx512, softmax_avx512,
	glu_avx512, dots_avx512, axpys_avx512, tile_avx512, transpose_avx512,
};

#endif /* __x86_64__ */

#if defined(__aarch64__)

// ----------------------------------------------------------------------------
// NEON (aarch64 Advanced SIMD, every ARMv8.0 core): 4 lanes, fused
// multiply-adds as the x86 paths', f16 and bf16 widened by base
// instructions (FCVTL, USHLL), scalar tails

#define INL static inline __attribute__((always_inline))

INL float32x4_t ld4n(const void *p, enum sf_dtype dt)
{
	switch (dt) {
	case SF_DTYPE_BF16:
		return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)p), 16));
	case SF_DTYPE_F16:
		return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p)));
	default:
		return vld1q_f32((const float *)p);
	}
}

/* One row by TB tokens: four accumulators over each 16-column step, the
 * first over the 4-column steps after, then their sum and the scalar
 * tail. A token's operations are the same for any TB (TB = 4 shares each
 * weight load over four tokens), so a batched product gives the one-token
 * floats. */
INL void mmn_row(float *y, size_t ldy, const char *w, enum sf_dtype dt, size_t cols,
		 const float *x, size_t ldx, const int TB)
{
	size_t es = dt_size(dt), c = 0;
	float32x4_t a[4][4];

#pragma GCC unroll 4
	for (int t = 0; t < TB; t++)
		a[t][0] = a[t][1] = a[t][2] = a[t][3] = vdupq_n_f32(0.0f);
	for (; c + 16 <= cols; c += 16) {
		float32x4_t w0 = ld4n(w + c * es, dt), w1 = ld4n(w + (c + 4) * es, dt);
		float32x4_t w2 = ld4n(w + (c + 8) * es, dt), w3 = ld4n(w + (c + 12) * es, dt);
#pragma GCC unroll 4
		for (int t = 0; t < TB; t++) {
			const float *xt = x + t * ldx + c;
			a[t][0] = vfmaq_f32(a[t][0], w0, vld1q_f32(xt));
			a[t][1] = vfmaq_f32(a[t][1], w1, vld1q_f32(xt + 4));
			a[t][2] = vfmaq_f32(a[t][2], w2, vld1q_f32(xt + 8));
			a[t][3] = vfmaq_f32(a[t][3], w3, vld1q_f32(xt + 12));
		}
	}
	for (; c + 4 <= cols; c += 4) {
		float32x4_t w0 = ld4n(w + c * es, dt);
#pragma GCC unroll 4
		for (int t = 0; t < TB; t++)
			a[t][0] = vfmaq_f32(a[t][0], w0, vld1q_f32(x + t * ldx + c));
	}
#pragma GCC unroll 4
	for (int t = 0; t < TB; t++) {
		float s = vaddvq_f32(vaddq_f32(vaddq_f32(a[t][0], a[t][1]),
					       vaddq_f32(a[t][2], a[t][3])));
		for (size_t cc = c; cc < cols; cc++)
			s += ld_w(w, dt, cc) * x[t * ldx + cc];
		y[t * ldy] = s;
	}
}

/* Row by row, tokens four at a time, then two, one. */
INL void mmn(float *y, size_t ldy, const void *W, enum sf_dtype dt, size_t cols, const float *x,
	     size_t ldx, size_t T, size_t r0, size_t r1)
{
	size_t rs = cols * dt_size(dt);

	for (size_t r = r0; r < r1; r++) {
		float *yr = y + (r - r0);
		const char *wr = (const char *)W + r * rs;
		size_t t = 0;
		for (; t + 4 <= T; t += 4)
			mmn_row(yr + t * ldy, ldy, wr, dt, cols, x + t * ldx, ldx, 4);
		if (t + 2 <= T) {
			mmn_row(yr + t * ldy, ldy, wr, dt, cols, x + t * ldx, ldx, 2);
			t += 2;
		}
		if (t < T)
			mmn_row(yr + t * ldy, ldy, wr, dt, cols, x + t * ldx, ldx, 1);
	}
}

static void widen_neon(float *w, const void *c, enum sf_dtype dt, size_t m);

static void matmul_neon(float *y, size_t ldy, const void *W, enum sf_dtype dt, size_t cols,
			const float *x, size_t ldx, size_t T, size_t r0, size_t r1)
{
	/* one instance per dtype so the loads are resolved at compile time */
	switch (dt) {
	case SF_DTYPE_MXFP4:
		mx_matmul(widen_neon, matmul_neon, y, ldy, W, cols, x, ldx, T, r0, r1);
		break;
	case SF_DTYPE_BF16: mmn(y, ldy, W, SF_DTYPE_BF16, cols, x, ldx, T, r0, r1); break;
	case SF_DTYPE_F16: mmn(y, ldy, W, SF_DTYPE_F16, cols, x, ldx, T, r0, r1); break;
	default: mmn(y, ldy, W, SF_DTYPE_F32, cols, x, ldx, T, r0, r1); break;
	}
}

/* Four columns per pass: y is loaded and stored once for four FMAs, each
 * element's in the columns' order (the _ref's floats). */
INL void can(float *y, size_t m, const void *const *cols, size_t off, enum sf_dtype dt,
	     const float *xv, size_t n)
{
	size_t es = dt_size(dt), k = 0;

	for (; k + 4 <= n; k += 4) {
		const char *c0 = (const char *)cols[k] + off;
		const char *c1 = (const char *)cols[k + 1] + off;
		const char *c2 = (const char *)cols[k + 2] + off;
		const char *c3 = (const char *)cols[k + 3] + off;
		size_t j = 0;
		for (; j + 4 <= m; j += 4) {
			float32x4_t t = vld1q_f32(y + j);
			t = vfmaq_n_f32(t, ld4n(c0 + j * es, dt), xv[k]);
			t = vfmaq_n_f32(t, ld4n(c1 + j * es, dt), xv[k + 1]);
			t = vfmaq_n_f32(t, ld4n(c2 + j * es, dt), xv[k + 2]);
			t = vfmaq_n_f32(t, ld4n(c3 + j * es, dt), xv[k + 3]);
			vst1q_f32(y + j, t);
		}
		for (; j < m; j++) {
			float t = y[j];
			t = fmaf(xv[k], ld_w(c0, dt, j), t);
			t = fmaf(xv[k + 1], ld_w(c1, dt, j), t);
			t = fmaf(xv[k + 2], ld_w(c2, dt, j), t);
			t = fmaf(xv[k + 3], ld_w(c3, dt, j), t);
			y[j] = t;
		}
	}
	for (; k < n; k++) {
		const char *c0 = (const char *)cols[k] + off;
		size_t j = 0;
		for (; j + 4 <= m; j += 4)
			vst1q_f32(y + j, vfmaq_n_f32(vld1q_f32(y + j), ld4n(c0 + j * es, dt), xv[k]));
		for (; j < m; j++)
			y[j] = fmaf(xv[k], ld_w(c0, dt, j), y[j]);
	}
}

static void colaccum_neon(float *y, size_t m, const void *const *cols, size_t off,
			  enum sf_dtype dt, const float *xv, size_t n)
{
	switch (dt) {
	case SF_DTYPE_BF16: can(y, m, cols, off, SF_DTYPE_BF16, xv, n); break;
	case SF_DTYPE_F16: can(y, m, cols, off, SF_DTYPE_F16, xv, n); break;
	default: can(y, m, cols, off, SF_DTYPE_F32, xv, n); break;
	}
}

/* An MXFP4 row of m weights: each code's magnitude (twice its e2m1
 * value, an integer) by TBL, times half the scale, its sign bit set from
 * the code's (so -0 stays -0, as the e2m1 table has it). */
static void mx_widen_neon(float *w, const uint8_t *row, size_t m)
{
	static const uint8_t twice[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12 };
	const uint8x16_t tab = vld1q_u8(twice);
	const uint8_t *codes = sf_q_codes_at(row, SF_DTYPE_MXFP4, m, 0);

	for (size_t b = 0; b < m / SF_QBLOCK; b++) {
		float32x4_t s = vdupq_n_f32(mx_scale(row, b) * 0.5f);
		uint8x16_t v = vld1q_u8(codes + 16 * b);
		uint8x16_t idx[2] = { vandq_u8(v, vdupq_n_u8(15)), vshrq_n_u8(v, 4) };
		for (int h = 0; h < 2; h++) {
			uint8x16_t mag = vqtbl1q_u8(tab, idx[h]);
			uint16x8_t m16[2] = { vmovl_u8(vget_low_u8(mag)), vmovl_u8(vget_high_u8(mag)) };
			uint16x8_t i16[2] = { vmovl_u8(vget_low_u8(idx[h])),
					      vmovl_u8(vget_high_u8(idx[h])) };
			for (int q = 0; q < 4; q++) {
				uint32x4_t mq = q % 2 ? vmovl_high_u16(m16[q / 2])
						      : vmovl_u16(vget_low_u16(m16[q / 2]));
				uint32x4_t iq = q % 2 ? vmovl_high_u16(i16[q / 2])
						      : vmovl_u16(vget_low_u16(i16[q / 2]));
				float32x4_t f = vmulq_f32(vcvtq_f32_u32(mq), s);
				uint32x4_t sign = vshlq_n_u32(vandq_u32(iq, vdupq_n_u32(8)), 28);
				vst1q_f32(w + 32 * b + 16 * h + 4 * q,
					  vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(f),
									  sign)));
			}
		}
	}
}

static void widen_neon(float *w, const void *c, enum sf_dtype dt, size_t m)
{
	size_t es = dt_size(dt), j = 0;

	if (dt == SF_DTYPE_MXFP4) {
		mx_widen_neon(w, c, m);
		return;
	}
	for (; j + 4 <= m; j += 4)
		vst1q_f32(w + j, ld4n((const char *)c + j * es, dt));
	for (; j < m; j++)
		w[j] = ld_w(c, dt, j);
}

/* NV vectors of rows from j0, tokens four at a time with their sums in
 * registers across the n columns, each column's weights loaded once for
 * the four; a token that did not select a column keeps its sum (the
 * multiply-add selected away). The tokens past T read sel 0 (ldx pads
 * them) and are neither loaded nor stored. */
#define STRIPN_TOKENS 4
INL void stripn(float *Y, size_t ldy, size_t j0, const float (*W)[SF_STRIP_ROWS],
		const float *xs, const float *X, const uint32_t *sel, size_t ldx, size_t T,
		size_t n, const int NV, const int scaled, const int masked)
{
	for (size_t t0 = 0; t0 < T; t0 += STRIPN_TOKENS) {
		float32x4_t a[STRIPN_TOKENS][4];
#pragma GCC unroll 4
		for (size_t t = 0; t < STRIPN_TOKENS; t++)
#pragma GCC unroll 4
			for (int v = 0; v < NV; v++)
				a[t][v] = t0 + t < T ? vld1q_f32(Y + (t0 + t) * ldy + j0 + 4 * v)
						     : vdupq_n_f32(0.0f);
		for (size_t k = 0; k < n; k++) {
			float32x4_t c[4];
#pragma GCC unroll 4
			for (int v = 0; v < NV; v++)
				c[v] = vld1q_f32(W[k] + j0 + 4 * v);
			const float *x = X + k * ldx + t0;
			const uint32_t *s = masked ? sel + k * ldx + t0 : NULL;
#pragma GCC unroll 4
			for (size_t t = 0; t < STRIPN_TOKENS; t++) {
				float32x4_t xb = vdupq_n_f32(scaled ? x[t] * xs[k] : x[t]);
				uint32x4_t mk = vdupq_n_u32(masked ? s[t] : ~0u);
#pragma GCC unroll 4
				for (int v = 0; v < NV; v++)
					a[t][v] = masked ? vbslq_f32(mk, vfmaq_f32(a[t][v], c[v], xb),
								     a[t][v])
							 : vfmaq_f32(a[t][v], c[v], xb);
			}
		}
		for (size_t t = 0; t < STRIPN_TOKENS && t0 + t < T; t++)
#pragma GCC unroll 4
			for (int v = 0; v < NV; v++)
				vst1q_f32(Y + (t0 + t) * ldy + j0 + 4 * v, a[t][v]);
	}
}

/* 16 rows at a time, then 4, then the rows past the last whole vector
 * scalar, each the _ref's fused multiply-add a selected column. */
INL void strip_neon_with(float *Y, size_t ldy, size_t m, const float (*W)[SF_STRIP_ROWS],
			 const float *xs, const float *X, const uint32_t *sel, size_t ldx,
			 size_t T, size_t n, const int scaled)
{
	size_t j0 = 0;
	for (; j0 + 16 <= m && sel; j0 += 16)
		stripn(Y, ldy, j0, W, xs, X, sel, ldx, T, n, 4, scaled, 1);
	for (; j0 + 16 <= m; j0 += 16)
		stripn(Y, ldy, j0, W, xs, X, sel, ldx, T, n, 4, scaled, 0);
	for (; j0 + 4 <= m && sel; j0 += 4)
		stripn(Y, ldy, j0, W, xs, X, sel, ldx, T, n, 1, scaled, 1);
	for (; j0 + 4 <= m; j0 += 4)
		stripn(Y, ldy, j0, W, xs, X, sel, ldx, T, n, 1, scaled, 0);
	if (j0 < m)
		strip_ref(Y + j0, ldy, m - j0, (const float (*)[SF_STRIP_ROWS])(W[0] + j0), xs, X,
			  sel, ldx, T, n);
}

static void strip_neon(float *Y, size_t ldy, size_t m, const float (*W)[SF_STRIP_ROWS],
		       const float *xs, const float *X, const uint32_t *sel, size_t ldx, size_t T,
		       size_t n)
{
	if (xs)
		strip_neon_with(Y, ldy, m, W, xs, X, sel, ldx, T, n, 1);
	else
		strip_neon_with(Y, ldy, m, W, xs, X, sel, ldx, T, n, 0);
}

static void rmsnorm_neon(float *out, const float *x, const void *w, enum sf_dtype dt, size_t n,
			 float eps, float offset)
{
	float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		float32x4_t v0 = vld1q_f32(x + i), v1 = vld1q_f32(x + i + 4);
		a0 = vfmaq_f32(a0, v0, v0);
		a1 = vfmaq_f32(a1, v1, v1);
	}
	float ss = vaddvq_f32(vaddq_f32(a0, a1));
	for (; i < n; i++)
		ss += x[i] * x[i];
	float r = 1.0f / sqrtf(ss / (float)n + eps);
	size_t es = dt_size(dt);
	for (i = 0; i + 4 <= n; i += 4)
		vst1q_f32(out + i, vmulq_f32(vaddq_f32(vdupq_n_f32(offset),
						       ld4n((const char *)w + i * es, dt)),
					     vmulq_n_f32(vld1q_f32(x + i), r)));
	for (; i < n; i++)
		out[i] = (offset + ld_w(w, dt, i)) * (x[i] * r);
}

/* e^x as exp256 (the AVX2 path) computes it: 2^n * e^r with |r| <=
 * ln2/2 and Taylor to degree 7; NaN kept (FMAX and FMIN return it),
 * results beyond float range set by the masks. */
INL float32x4_t expn(float32x4_t x)
{
	uint32x4_t big = vcgtq_f32(x, vdupq_n_f32(88.72283935546875f));
	uint32x4_t tiny = vcltq_f32(x, vdupq_n_f32(-87.33654475f));
	float32x4_t xc = vminq_f32(vdupq_n_f32(88.3762626647949f),
				   vmaxq_f32(vdupq_n_f32(-87.33654475f), x));
	float32x4_t n = vrndnq_f32(vmulq_n_f32(xc, 1.44269504088896341f));
	float32x4_t r = vfmsq_n_f32(xc, n, 0.693359375f);
	r = vfmsq_n_f32(r, n, -2.12194440e-4f);
	float32x4_t p = vdupq_n_f32(1.0f / 5040);
	p = vfmaq_f32(vdupq_n_f32(1.0f / 720), p, r);
	p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
	p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
	p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
	p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
	p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
	p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
	int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
	float32x4_t res = vmulq_f32(p, vreinterpretq_f32_s32(e));
	res = vbslq_f32(tiny, vdupq_n_f32(0.0f), res);
	return vbslq_f32(big, vdupq_n_f32(INFINITY), res);
}

static void softmax_neon(float *x, size_t n)
{
	if (n == 0)
		return;
	size_t i = 0;
	float mx = x[0];
	if (n >= 4) {
		float32x4_t m = vld1q_f32(x);
		for (i = 4; i + 4 <= n; i += 4)
			m = vmaxq_f32(m, vld1q_f32(x + i));
		mx = vmaxvq_f32(m);
	}
	for (; i < n; i++)
		if (x[i] > mx)
			mx = x[i];
	float32x4_t acc = vdupq_n_f32(0.0f);
	for (i = 0; i + 4 <= n; i += 4) {
		float32x4_t e = expn(vsubq_f32(vld1q_f32(x + i), vdupq_n_f32(mx)));
		vst1q_f32(x + i, e);
		acc = vaddq_f32(acc, e);
	}
	float sum = vaddvq_f32(acc);
	for (; i < n; i++) {
		x[i] = expf(x[i] - mx);
		sum += x[i];
	}
	float is = 1.0f / sum;
	for (i = 0; i + 4 <= n; i += 4)
		vst1q_f32(x + i, vmulq_n_f32(vld1q_f32(x + i), is));
	for (; i < n; i++)
		x[i] *= is;
}

/* -z of glu_arg */
INL float32x4_t glu_neg_argn(float32x4_t g, int gelu)
{
	if (!gelu)
		return vnegq_f32(g);
	float32x4_t c3 = vmulq_n_f32(vmulq_f32(g, g), GELU_C);
	return vmulq_n_f32(vfmaq_f32(g, c3, g), -2.0f * GELU_K);
}

static void glu_neon(float *a, const float *g, const float *u, size_t n, int gelu)
{
	size_t i = 0;
	for (; i + 4 <= n; i += 4) {
		float32x4_t gv = vld1q_f32(g + i);
		float32x4_t e = expn(glu_neg_argn(gv, gelu));
		float32x4_t s = vdivq_f32(gv, vaddq_f32(vdupq_n_f32(1.0f), e));
		vst1q_f32(a + i, vmulq_f32(s, vld1q_f32(u + i)));
	}
	for (; i < n; i++)
		a[i] = g[i] / (1.0f + expf(-glu_arg(g[i], gelu))) * u[i];
}

INL float dotn(const float *a, const float *b, size_t n)
{
	float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		a0 = vfmaq_f32(a0, vld1q_f32(a + i), vld1q_f32(b + i));
		a1 = vfmaq_f32(a1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
	}
	for (; i + 4 <= n; i += 4)
		a0 = vfmaq_f32(a0, vld1q_f32(a + i), vld1q_f32(b + i));
	float s = vaddvq_f32(vaddq_f32(a0, a1));
	for (; i < n; i++)
		s += a[i] * b[i];
	return s;
}

static void dots_neon(float *out, const float *q, const float *keys, size_t ldk, size_t n,
		      size_t d, float scale)
{
	for (size_t p = 0; p < n; p++)
		out[p] = dotn(q, keys + p * ldk, d) * scale;
}

/* NV vectors of y from y + i over every row, in registers */
INL void axpysn_span(float *y, const float *s, const float *X, size_t ldx, size_t n,
		     const int NV)
{
	float32x4_t acc[8];
#pragma GCC unroll 8
	for (int v = 0; v < NV; v++)
		acc[v] = vld1q_f32(y + 4 * v);
	for (size_t p = 0; p < n; p++) {
		const float *x = X + p * ldx;
#pragma GCC unroll 8
		for (int v = 0; v < NV; v++)
			acc[v] = vfmaq_n_f32(acc[v], vld1q_f32(x + 4 * v), s[p]);
	}
#pragma GCC unroll 8
	for (int v = 0; v < NV; v++)
		vst1q_f32(y + 4 * v, acc[v]);
}

static void axpys1_neon(float *y, const float *s, const float *X, size_t ldx, size_t n, size_t d)
{
	size_t i = 0;
	for (; i + 32 <= d; i += 32)
		axpysn_span(y + i, s, X + i, ldx, n, 8);
	switch ((d - i) / 4) {
	case 7: axpysn_span(y + i, s, X + i, ldx, n, 7); break;
	case 6: axpysn_span(y + i, s, X + i, ldx, n, 6); break;
	case 5: axpysn_span(y + i, s, X + i, ldx, n, 5); break;
	case 4: axpysn_span(y + i, s, X + i, ldx, n, 4); break;
	case 3: axpysn_span(y + i, s, X + i, ldx, n, 3); break;
	case 2: axpysn_span(y + i, s, X + i, ldx, n, 2); break;
	case 1: axpysn_span(y + i, s, X + i, ldx, n, 1); break;
	}
	/* the tail scalar, the same products and sums for any n */
	for (i += (d - i) / 4 * 4; i < d; i++)
		for (size_t p = 0; p < n; p++)
			y[i] += s[p] * X[p * ldx + i];
}

static void axpys_neon(float *y, size_t ldy, const float *s, size_t lds, size_t nq,
		       const float *X, size_t ldx, size_t n, size_t d)
{
	for (size_t q = 0; q < nq; q++)
		axpys1_neon(y + q * ldy, s + q * lds, X, ldx, n, d);
}

/* A float slab's tile: 4-row vectors with their sums in registers across
 * the columns, the rows past them scalar (each row one fused
 * multiply-add a column in order, as the _ref). */
static void tile_neon(float *y, size_t m, const uint8_t *base, size_t stride, const uint32_t *pos,
		      enum sf_dtype dt, const float *xv, size_t n)
{
	size_t es = dt_size(dt), nv = m / 4;
	float32x4_t acc[SF_FSLAB_ROWS / 4];

	for (size_t v = 0; v < nv; v++)
		acc[v] = vld1q_f32(y + 4 * v);
	for (size_t k = 0; k < n; k++) {
		const uint8_t *c = base + pos[k] * stride;
		for (size_t o = 0; o < stride; o += 64)
			__builtin_prefetch(c + FSLAB_AHEAD + o);
		for (size_t v = 0; v < nv; v++)
			acc[v] = vfmaq_n_f32(acc[v], ld4n(c + 4 * v * es, dt), xv[k]);
		for (size_t j = 4 * nv; j < m; j++)
			y[j] = fmaf(xv[k], ld_w(c, dt, j), y[j]);
	}
	for (size_t v = 0; v < nv; v++)
		vst1q_f32(y + 4 * v, acc[v]);
}

static const struct kern kern_neon = {
	matmul_neon, colaccum_neon, widen_neon, strip_neon, rmsnorm_neon, softmax_neon,
	glu_neon, dots_neon, axpys_neon, tile_neon, transpose_ref,
};

#endif /* __aarch64__ */

// ----------------------------------------------------------------------------
// the family's table, indexed by enum sf_isa (engine/cpu.h)

static const struct kern *const kern_table[SF_NISA] = {
	[SF_ISA_REF] = &kern_ref,
#if defined(__x86_64__)
	[SF_ISA_AVX2] = &kern_avx2,
	[SF_ISA_AVX512] = &kern_avx512,
#else
	[SF_ISA_AVX2] = &kern_ref,
	[SF_ISA_AVX512] = &kern_ref,
#endif
#if defined(__aarch64__)
	[SF_ISA_NEON] = &kern_neon,
	[SF_ISA_DOTPROD] = &kern_neon,
	[SF_ISA_I8MM] = &kern_neon,
#else
	[SF_ISA_NEON] = &kern_ref,
	[SF_ISA_DOTPROD] = &kern_ref,
	[SF_ISA_I8MM] = &kern_ref,
#endif
};

static inline const struct kern *K(void)
{
	return kern_table[sf_cpu_isa()];
}

// ----------------------------------------------------------------------------
// public entry points

void sf_matvec_rows(float *y, const void *W, enum sf_dtype dt, size_t cols,
		    const float *x, size_t r0, size_t r1)
{
	sf_matmul_rows(y, 1, W, dt, cols, x, 0, 1, r0, r1);
}

void sf_matmul_rows(float *y, size_t ldy, const void *W, enum sf_dtype dt, size_t cols,
		    const float *x, size_t ldx, size_t T, size_t r0, size_t r1)
{
	if (dt == SF_DTYPE_MXFP4)
		K()->matmul(y, ldy, W, dt, cols, x, ldx, T, r0, r1);
	else if (sf_dtype_is_block(dt))
		sf_qmatmul_rows(y, ldy, W, dt, cols, x, ldx, T, r0, r1);
	else
		K()->matmul(y, ldy, W, dt, cols, x, ldx, T, r0, r1);
}

void sf_colaccum(float *y, size_t m, const void *const *cols, size_t off, enum sf_dtype dt,
		 const float *xv, size_t n)
{
	K()->colaccum(y, m, cols, off, dt, xv, n);
}

/* Strips of SF_STRIP_ROWS rows, blocks of SF_STRIP_COLUMNS columns: a
 * block's strips are filled side by side first, because in an image the
 * columns lie a power of two apart, and read in place they would share a
 * few L1 sets and come from L2 for every group of tokens (half the speed). */
static void colaccum_strips_with(const struct kern *kern, float *Y, size_t ldy, size_t s0,
				    size_t s1, sf_strip_fill *fill, const void *ctx, int scaled,
				    const float *X, const uint32_t *sel, size_t ldx, size_t T,
				    size_t n)
{
	float W[SF_STRIP_COLUMNS][SF_STRIP_ROWS] __attribute__((aligned(64)));
	float xs[SF_STRIP_COLUMNS];
	/* looked at once a call, not once a strip of rows */
	const uint32_t *mask = strip_all_selected(sel, ldx, T, n) ? NULL : sel;

	for (size_t j0 = s0; j0 < s1; j0 += SF_STRIP_ROWS) {
		size_t rows = s1 - j0 < SF_STRIP_ROWS ? s1 - j0 : SF_STRIP_ROWS;
		for (size_t kb = 0; kb < n; kb += SF_STRIP_COLUMNS) {
			size_t kn = n - kb < SF_STRIP_COLUMNS ? n - kb : SF_STRIP_COLUMNS;
			for (size_t k = 0; k < kn; k++) {
				fill(ctx, kb + k, j0, rows, W[k], &xs[k]);
				for (size_t j = rows; j < SF_STRIP_ROWS; j++)
					W[k][j] = 0.0f;
			}
			kern->strip(Y + (j0 - s0), ldy, rows, (const float (*)[SF_STRIP_ROWS])W,
				    scaled ? xs : NULL, X + kb * ldx, mask ? mask + kb * ldx : NULL,
				    ldx, T, kn);
		}
	}
}

void sf_colaccum_strips(float *Y, size_t ldy, size_t s0, size_t s1, sf_strip_fill *fill,
			const void *ctx, int scaled, const float *X, const uint32_t *sel, size_t ldx,
			size_t T, size_t n)
{
	colaccum_strips_with(K(), Y, ldy, s0, s1, fill, ctx, scaled, X, sel, ldx, T, n);
}

struct float_columns {
	const void *const *cols;
	size_t off;	/* bytes */
	enum sf_dtype dt;
	void (*widen)(float *w, const void *c, enum sf_dtype dt, size_t m);
};

static void widen_column(const void *ctx, size_t k, size_t j0, size_t rows, float *w, float *xs)
{
	const struct float_columns *f = ctx;
	(void)xs;	/* no factor */
	f->widen(w, (const char *)f->cols[k] + f->off + j0 * dt_size(f->dt), f->dt, rows);
}

void sf_colaccum_batch(float *Y, size_t ldy, size_t m, const void *const *cols, size_t off,
		       enum sf_dtype dt, const float *X, const uint32_t *sel, size_t ldx, size_t T,
		       size_t n)
{
	struct float_columns f = { cols, off, dt, K()->widen };
	sf_colaccum_strips(Y, ldy, 0, m, widen_column, &f, 0, X, sel, ldx, T, n);
}

// ----------------------------------------------------------------------------
// float slabs (engine/kernels.h)

/* Rows of tile c of a slab, and the tile's first byte: the tiles before
 * it are whole ones. */
static size_t ftile_rows(const struct sf_slab *s, size_t c)
{
	size_t r = s->rows - c * SF_FSLAB_ROWS;
	return r < SF_FSLAB_ROWS ? r : SF_FSLAB_ROWS;
}

static const uint8_t *ftile_at(const struct sf_slab *s, size_t c)
{
	return s->mem + c * SF_FSLAB_ROWS * s->n * dt_size(s->dt);
}

size_t sf_fslab_bytes(enum sf_dtype dt, size_t rows, size_t n)
{
	return rows * n * dt_size(dt);
}

void sf_fslab_put(const struct sf_slab *s, size_t p, const void *col)
{
	size_t es = dt_size(s->dt);
	for (size_t c = 0; c * SF_FSLAB_ROWS < s->rows; c++) {
		size_t rows = ftile_rows(s, c);
		memcpy((uint8_t *)ftile_at(s, c) + p * rows * es,
		       (const uint8_t *)col + c * SF_FSLAB_ROWS * es, rows * es);
	}
}

/* Rows [j0, j0 + rows) of position pos[k] of a slab as f32: a pass's
 * strips (sf_colaccum_strips), which may cross tiles. */
struct fslab_strips {
	const struct sf_slab *s;
	const uint32_t *pos;
	void (*widen)(float *w, const void *c, enum sf_dtype dt, size_t m);
};

static void fslab_fill(const void *ctx, size_t k, size_t j0, size_t rows, float *w, float *xs)
{
	const struct fslab_strips *f = ctx;
	const struct sf_slab *s = f->s;
	size_t es = dt_size(s->dt);
	float piece[SF_STRIP_ROWS] __attribute__((aligned(64)));	/* widen stores aligned */
	(void)xs;	/* no factor */
	for (size_t j = j0; j < j0 + rows;) {
		size_t c = j / SF_FSLAB_ROWS, tr = ftile_rows(s, c), in = j - c * SF_FSLAB_ROWS;
		size_t m = tr - in < j0 + rows - j ? tr - in : j0 + rows - j;
		const uint8_t *src = ftile_at(s, c) + (f->pos[k] * tr + in) * es;
		if (j == j0) {
			f->widen(w, src, s->dt, m);
		} else {
			f->widen(piece, src, s->dt, m);
			memcpy(w + (j - j0), piece, m * sizeof(float));
		}
		j += m;
	}
}

/* One token: the tiles' rows of [r0, r1) through the level's tile
 * kernel; a pass: strips. */
static void fslab_accum(const struct kern *kern, float *Y, size_t ldy, size_t r0, size_t r1,
			const struct sf_slab *s, const uint32_t *pos, size_t k, const float *X,
			const uint32_t *sel, size_t ldx, size_t T)
{
	if (r0 >= r1 || !k || !T)
		return;
	if (sel) {
		struct fslab_strips f = { s, pos, kern->widen };
		colaccum_strips_with(kern, Y, ldy, r0, r1, fslab_fill, &f, 0, X, sel, ldx, T, k);
		return;
	}
	size_t es = dt_size(s->dt);
	for (size_t c = r0 / SF_FSLAB_ROWS; c * SF_FSLAB_ROWS < r1; c++) {
		size_t t0 = c * SF_FSLAB_ROWS, tr = ftile_rows(s, c);
		size_t a = r0 > t0 ? r0 : t0, e = r1 < t0 + tr ? r1 : t0 + tr;
		kern->tile(Y + (a - r0), e - a, ftile_at(s, c) + (a - t0) * es, tr * es, pos, s->dt,
			   X, k);
	}
}

void sf_fslab_accum(float *Y, size_t ldy, size_t r0, size_t r1, const struct sf_slab *s,
		    const uint32_t *pos, size_t k, const float *X, const uint32_t *sel,
		    size_t ldx, size_t T)
{
	fslab_accum(K(), Y, ldy, r0, r1, s, pos, k, X, sel, ldx, T);
}

void sf_fslab_accum_ref(float *Y, size_t ldy, size_t r0, size_t r1, const struct sf_slab *s,
			const uint32_t *pos, size_t k, const float *X, const uint32_t *sel,
			size_t ldx, size_t T)
{
	fslab_accum(&kern_ref, Y, ldy, r0, r1, s, pos, k, X, sel, ldx, T);
}

void sf_rmsnorm(float *out, const float *x, const void *w, enum sf_dtype dt, size_t n, float eps,
		float offset)
{
	if (n)
		K()->rmsnorm(out, x, w, dt, n, eps, offset);
}

void sf_softmax(float *x, size_t n)
{
	K()->softmax(x, n);
}

void sf_swiglu(float *a, const float *g, const float *u, size_t n)
{
	K()->glu(a, g, u, n, 0);
}

void sf_geglu(float *a, const float *g, const float *u, size_t n)
{
	K()->glu(a, g, u, n, 1);
}

void sf_transpose_columns(float *out, size_t ldo, const uint32_t *pos, const float *in,
			  size_t ldi, size_t T, size_t n, size_t width)
{
	K()->transpose(out, ldo, pos, in, ldi, T, n, width);
}

void sf_dot_rows(float *out, const float *q, const float *keys, size_t ldk, size_t n, size_t d,
		 float scale)
{
	K()->dots(out, q, keys, ldk, n, d, scale);
}

void sf_axpy_rows(float *y, size_t ldy, const float *s, size_t lds, size_t nq, const float *X,
		  size_t ldx, size_t n, size_t d)
{
	K()->axpys(y, ldy, s, lds, nq, X, ldx, n, d);
}

void sf_axpy_f32(float *y, float s, const float *x, size_t n)
{
	K()->axpys(y, 0, &s, 0, 1, x, 0, 1, n);
}
