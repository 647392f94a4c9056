/* The dense forward pass, one token at a time: see forward.h. Read it top
 * to bottom as llama2.c's forward(): embed, then per layer attention and
 * FFN with residual adds, then the final norm and the head. */
#include "engine/forward.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "engine/kernels.h"
#include "engine/kernels_qrows.h"

// ----------------------------------------------------------------------------
// groups

// ----------------------------------------------------------------------------
// run state

/* Float counts of every buffer, in one place so that sf_state_bytes and
 * sf_state_init cannot disagree. 64-bit: the KV cache of a 7B model at
 * long context passes 2^32 floats. */
struct state_sizes {
	uint64_t dim, q, kv, hidden, att, vocab, rope;
	uint64_t experts, moe_dim, moe_tok;	/* 0 without experts */
	uint64_t shared;	/* 0 without a shared expert */
};

/* Tokens of a pass whose attention outputs a head computes together (the
 * value rows' loads shared, sf_axpy_rows), each with its scores row. */
#define ATT_QUERIES 4

static int att_queries(int batch)
{
	return batch < ATT_QUERIES ? batch : ATT_QUERIES;
}

/* The per-token buffers hold batch tokens (dim, q, kv, hidden), the
 * logits rows tokens' (vocab). */
static struct state_sizes state_sizes(const struct sf_config *c, int seq_len, int batch,
				      int rows)
{
	struct state_sizes z;
	uint64_t b = (uint64_t)batch;
	z.dim = b * (uint64_t)c->dim;
	z.q = b * (uint64_t)c->n_heads * c->head_dim;
	z.kv = b * (uint64_t)c->n_kv_heads * c->head_dim;
	/* the FFN's, an expert's or the shared expert's, the widest */
	z.hidden = b * (uint64_t)(c->shared_hidden_dim > c->hidden_dim ? c->shared_hidden_dim
								     : c->hidden_dim);
	z.att = (uint64_t)c->n_heads * (uint64_t)att_queries(batch) * seq_len;
	z.vocab = (uint64_t)rows * (uint64_t)c->vocab_size;
	/* the RoPE frequencies, and Gemma 3's sliding layers' own */
	z.rope = (uint64_t)c->head_dim / 2 * (c->rope_theta_local > 0 ? 2 : 1);
	z.experts = b * (uint64_t)c->n_experts;
	z.moe_dim = c->n_experts ? z.dim : 0;
	z.moe_tok = c->n_experts ? b : 0;
	z.shared = c->shared_hidden_dim ? b : 0;
	return z;
}

static int logit_rows(const struct sf_state_opts *o)
{
	return o->last_logits ? 1 : o->batch;
}

uint64_t sf_state_buffer_bytes(const struct sf_config *c, const struct sf_state_opts *o)
{
	struct state_sizes z = state_sizes(c, o->seq_len, o->batch, logit_rows(o));
	uint64_t floats = 3 * z.dim + 2 * z.q + 2 * z.kv + 3 * z.hidden + z.att + z.vocab + z.rope +
			  3 * z.experts + 2 * z.moe_dim + z.shared;
	return floats * sizeof(float) + z.moe_tok * sizeof(int);
}

/* Positions layer l's KV cache holds in a state of seq_len positions and
 * passes of batch tokens: a sliding layer's tokens see the window's
 * positions up to their own, so a pass needs window + batch - 1 of them
 * (position p at row p % held: a ring); any other layer every one. */
static size_t kv_held(const struct sf_config *c, int l, size_t seq_len, size_t batch)
{
	size_t ring = (size_t)c->sliding_window + batch - 1;
	return c->layer_sliding[l] && c->sliding_window > 0 && ring < seq_len ? ring : seq_len;
}

void sf_state_kv_cost(const struct sf_config *c, int batch, enum sf_kv_type k,
		      enum sf_kv_type v, struct sf_kv_cost *cost)
{
	size_t kv_dim = (size_t)c->n_kv_heads * (size_t)c->head_dim;
	uint64_t row = sf_kv_row_bytes(k, kv_dim) + sf_kv_row_bytes(v, kv_dim);
	/* a layer's rows at ring + 1 positions tell a ring from a full layer */
	size_t ring = (size_t)c->sliding_window + (size_t)batch - 1;

	*cost = (struct sf_kv_cost){ 0 };
	for (int l = 0; l < c->n_layers; l++) {
		if (kv_held(c, l, ring + 1, (size_t)batch) == ring) {
			cost->ring_position += row;
			cost->ring = ring;
		} else {
			cost->position += row;
		}
	}
}

uint64_t sf_kv_cost_bytes(const struct sf_kv_cost *cost, uint64_t positions)
{
	return positions * cost->position +
	       (positions < cost->ring ? positions : cost->ring) * cost->ring_position;
}

uint64_t sf_state_kv_bytes(const struct sf_config *c, int positions, int batch,
			   enum sf_kv_type k, enum sf_kv_type v)
{
	struct sf_kv_cost cost;

	sf_state_kv_cost(c, batch, k, v, &cost);
	return sf_kv_cost_bytes(&cost, (uint64_t)positions);
}

uint64_t sf_state_bytes_batch(const struct sf_config *c, int seq_len, int batch)
{
	struct sf_state_opts o = { .seq_len = seq_len, .batch = batch };
	return sf_state_buffer_bytes(c, &o) +
	       sf_state_kv_bytes(c, seq_len, batch, SF_KV_F32, SF_KV_F32);
}

uint64_t sf_state_bytes(const struct sf_config *c, int seq_len)
{
	return sf_state_bytes_batch(c, seq_len, 1);
}

int sf_state_init(struct sf_runstate *s, const struct sf_config *c, int seq_len,
		  struct sf_err *e)
{
	return sf_state_init_batch(s, c, seq_len, 1, e);
}

int sf_state_init_batch(struct sf_runstate *s, const struct sf_config *c, int seq_len,
			int batch, struct sf_err *e)
{
	struct sf_state_opts o = { .seq_len = seq_len, .batch = batch };
	return sf_state_init_opts(s, c, &o, e);
}

/* An anonymous mapping of n bytes (at least a page), or NULL: its pages
 * are the kernel's zero page until written. */
static uint8_t *map_zeros(uint64_t n)
{
	void *p = mmap(NULL, (size_t)(n ? n : 1), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

/* The state's float buffers in one mapping of zero pages, as calloc's
 * large blocks are (resident as they are used, so that the resident set
 * sf-run measures at start does not count them besides their own
 * figure), each on a cache line: the kernels load a token's activations
 * 64 bytes at a time, and calloc's blocks start 16 bytes into a page,
 * which split every such load over two lines. A buffer the model has no
 * use for (0 floats) stays NULL; all stay NULL when the mapping fails. */
static void map_floats(struct sf_runstate *s, const struct state_sizes *z)
{
	float **const buf[] = { &s->x, &s->xb, &s->proj, &s->q, &s->z, &s->k, &s->v, &s->gate,
				&s->up, &s->act, &s->att, &s->logits, &s->moe_in, &s->moe_out,
				&s->shared_gate };
	const size_t n[] = { z->dim, z->dim, z->dim, z->q, z->q, z->kv, z->kv, z->hidden,
			     z->hidden, z->hidden, z->att, z->vocab,
			     z->moe_dim, z->moe_dim, z->shared };
	const size_t nbuf = sizeof(n) / sizeof(n[0]);
	uint64_t bytes = 0;

	for (size_t i = 0; i < nbuf; i++)
		bytes += (n[i] * sizeof(float) + 63) / 64 * 64;
	if (!(s->floats = map_zeros(bytes)))
		return;
	s->floats_map = bytes;
	bytes = 0;
	for (size_t i = 0; i < nbuf; i++) {
		*buf[i] = n[i] ? (float *)(s->floats + bytes) : NULL;
		bytes += (n[i] * sizeof(float) + 63) / 64 * 64;
	}
}

int sf_state_init_opts(struct sf_runstate *s, const struct sf_config *c,
		       const struct sf_state_opts *o, struct sf_err *e)
{
	int seq_len = o->seq_len, batch = o->batch;
	enum sf_kv_type k = o->kv_k, v = o->kv_v;
	struct state_sizes z = state_sizes(c, seq_len, batch, logit_rows(o));
	size_t kv_dim = (size_t)c->n_kv_heads * (size_t)c->head_dim;

	memset(s, 0, sizeof(*s));
	if (!sf_kv_type_fits(k, (size_t)c->head_dim) || !sf_kv_type_fits(v, (size_t)c->head_dim))
		return sf_err_set(e, SF_EUNSUPPORTED, "KV cache in %s: heads of %d elements are "
				  "not whole blocks of %d", sf_kv_type_name(sf_kv_type_fits(k,
				  (size_t)c->head_dim) ? v : k), c->head_dim, SF_KV_Q8_0_BLOCK);
	if (seq_len < 1 || seq_len > c->max_seq_len)
		return sf_err_set(e, -EINVAL, "context of %d positions: expected 1..%d", seq_len,
				  c->max_seq_len);
	if (batch < 1 || batch > SF_BATCH_MAX)
		return sf_err_set(e, -EINVAL, "batch of %d tokens: expected 1..%d", batch,
				  SF_BATCH_MAX);
	s->seq_len = seq_len;
	s->batch = batch;
	s->logit_rows = logit_rows(o);
	map_floats(s, &z);
	s->kv_k = k;
	s->kv_v = v;
	s->k_row = sf_kv_row_bytes(k, kv_dim);
	s->v_row = sf_kv_row_bytes(v, kv_dim);
	s->kv_first = malloc(((size_t)c->n_layers + 1) * sizeof(*s->kv_first));
	if (s->kv_first) {
		s->kv_first[0] = 0;
		for (int l = 0; l < c->n_layers; l++)
			s->kv_first[l + 1] = s->kv_first[l] +
					     kv_held(c, l, (size_t)seq_len, (size_t)batch);
		s->k_map = (uint64_t)s->kv_first[c->n_layers] * s->k_row;
		s->v_map = (uint64_t)s->kv_first[c->n_layers] * s->v_row;
		s->key_cache = map_zeros(s->k_map);
		s->value_cache = map_zeros(s->v_map);
	}
	s->inv_freq = calloc(z.rope ? z.rope : 1, sizeof(float));
	if (c->n_experts) {
		s->router = calloc(z.experts, sizeof(float));
		s->route = calloc(z.experts, sizeof(float));
		s->route_ahead = calloc(z.experts, sizeof(float));
		s->moe_tok = calloc(z.moe_tok, sizeof(int));
	}
	if (!s->x || !s->xb || !s->proj || !s->q || !s->z || !s->k || !s->v || !s->gate ||
	    !s->up || !s->act || !s->att || !s->logits || !s->kv_first || !s->key_cache ||
	    !s->value_cache ||
	    !s->inv_freq || (c->n_experts && (!s->router || !s->route || !s->route_ahead || !s->moe_in ||
					      !s->moe_out || !s->moe_tok)) ||
	    (c->shared_hidden_dim && !s->shared_gate)) {
		uint64_t bytes = sf_state_buffer_bytes(c, o) +
				 sf_state_kv_bytes(c, seq_len, batch, k, v);
		sf_state_free(s);
		return sf_err_set(e, -ENOMEM, "run state of %llu bytes: %s",
				  (unsigned long long)bytes, sf_strerror(-ENOMEM));
	}
	if (c->rope_theta_local > 0) {	/* plain RoPE on their own base */
		s->inv_freq_local = s->inv_freq + c->head_dim / 2;
		sf_rope_inv_freq(s->inv_freq_local, (size_t)c->rope_dim, c->rope_theta_local, 0.0f,
				 0.0f, 0.0f, 0);
	}
	if (c->rope_yarn)
		sf_rope_yarn_inv_freq(s->inv_freq, (size_t)c->rope_dim, c->rope_theta,
				      c->rope_factor, c->rope_beta_fast, c->rope_beta_slow,
				      c->rope_orig_max_pos, c->rope_truncate);
	else
		sf_rope_inv_freq(s->inv_freq, (size_t)c->rope_dim, c->rope_theta,
				 c->rope_llama3 ? c->rope_factor : 0.0f, c->rope_low_freq_factor,
				 c->rope_high_freq_factor, c->rope_orig_max_pos);
	/* longrope's long factors for a context past the pretrained one */
	const float *div = c->rope_longrope && seq_len > c->rope_orig_max_pos ? c->rope_freqs_long
									       : c->rope_freqs;
	for (int i = 0; i < c->n_rope_freqs; i++)	/* llama.cpp's division */
		s->inv_freq[i] /= div[i];
	for (int i = 0; c->rope_linear > 0 && i < c->rope_dim / 2; i++)
		s->inv_freq[i] /= c->rope_linear;
	return 0;
}

void sf_state_free(struct sf_runstate *s)
{
	if (s->floats)
		munmap(s->floats, (size_t)(s->floats_map ? s->floats_map : 1));
	free(s->router);
	free(s->route);
	free(s->route_ahead);
	free(s->moe_tok);
	free(s->kv_first);
	if (s->key_cache)
		munmap(s->key_cache, (size_t)(s->k_map ? s->k_map : 1));
	if (s->value_cache)
		munmap(s->value_cache, (size_t)(s->v_map ? s->v_map : 1));
	free(s->inv_freq);
	memset(s, 0, sizeof(*s));
}

// ----------------------------------------------------------------------------
// helpers

static void add_bias(float *y, const struct sf_weight *b)
{
	if (!b->data)
		return;
	for (uint64_t i = 0; i < b->rows; i++)
		y[i] += sf_weight_at(b, i);
}

/* The RMSNorm of q or k x (heads, hd) before RoPE: Qwen3's of each
 * head over its own hd elements, OLMoE's over the whole projection;
 * nothing when the model has no such norm. */
static void qk_norm(float *x, const struct sf_weight *norm, const struct sf_config *c,
		    size_t heads)
{
	size_t hd = (size_t)c->head_dim;

	if (c->qk_norm == SF_QK_NORM_ALL)
		sf_rmsnorm(x, x, norm->data, norm->dtype, heads * hd, c->norm_eps, c->norm_offset);
	else if (c->qk_norm == SF_QK_NORM_HEAD)
		for (size_t h = 0; h < heads; h++)
			sf_rmsnorm(x + h * hd, x + h * hd, norm->data, norm->dtype, hd, c->norm_eps,
				   c->norm_offset);
}

/* OLMoE's clip_qkv: x (n) clamped to [-clip, clip]; nothing when 0. */
static void clip(float *x, size_t n, float clip)
{
	if (clip <= 0.0f)
		return;
	for (size_t i = 0; i < n; i++)
		x[i] = x[i] < -clip ? -clip : x[i] > clip ? clip : x[i];
}

static void observe(const struct sf_runstate *s, int layer, enum sf_group g, const float *in,
		    int T, size_t n)
{
	if (s->observer && s->observer->fn)
		s->observer->fn(s->observer->ctx, layer, g, in, T, n);
}

static void run(struct sf_pool *pool, void (*fn)(void *, int, int), void *arg)
{
	if (pool)
		sf_pool_run(pool, fn, arg);
	else
		fn(arg, 0, 1);
}

// ----------------------------------------------------------------------------
// a group's matrices on one input, rows split over the workers

#define MAX_GROUP_MATRICES 3

struct matvec_task {
	const float *x;		/* (T, ldx) */
	size_t ldx, T;
	int n;
	float *y[MAX_GROUP_MATRICES];	/* (T, w[i]->rows) */
	const struct sf_weight *w[MAX_GROUP_MATRICES];
	uint64_t total_rows;
	int mxfp4_int8;			/* sf_runstate's */
};

/* The rows of all matrices are split as one range, so one dispatch serves
 * the whole group and the threads stay balanced when the matrices differ
 * in height (q against k and v under GQA). */
static void matvec_worker(void *arg, int ith, int nth)
{
	const struct matvec_task *t = arg;
	size_t lo, hi, base = 0;

	sf_pool_split(t->total_rows, 16, ith, nth, &lo, &hi);
	for (int i = 0; i < t->n; i++) {
		const struct sf_weight *w = t->w[i];
		size_t a = lo > base ? lo - base : 0;
		size_t b = hi - base < w->rows ? hi - base : w->rows;
		if (hi > base && a < b) {
			if (w->dtype == SF_DTYPE_MXFP4 && t->mxfp4_int8)
				sf_qmatmul_rows(t->y[i] + a, w->rows, w->data, w->dtype, w->cols,
						t->x, t->ldx, t->T, a, b);
			else
				sf_matmul_rows(t->y[i] + a, w->rows, w->data, w->dtype, w->cols,
					       t->x, t->ldx, t->T, a, b);
		}
		base += w->rows;
	}
}

void sf_group_dense(struct sf_pool *pool, const float *x, int n, float *const *y,
		    const struct sf_weight *const *w)
{
	sf_group_dense_batch(pool, x, 0, 1, n, y, w);
}

/* sf_group_dense_batch, MXFP4 matrices as mxfp4_int8 says (sf_runstate). */
static void group_dense(struct sf_pool *pool, const float *x, size_t ldx, int T, int n,
			float *const *y, const struct sf_weight *const *w, int mxfp4_int8)
{
	struct matvec_task t = { .x = x, .ldx = ldx, .T = (size_t)T, .n = n, .total_rows = 0,
				 .mxfp4_int8 = mxfp4_int8 };
	for (int i = 0; i < n; i++) {
		t.y[i] = y[i];
		t.w[i] = w[i];
		t.total_rows += w[i]->rows;
	}
	run(pool, matvec_worker, &t);
}

void sf_group_dense_batch(struct sf_pool *pool, const float *x, size_t ldx, int T, int n,
			  float *const *y, const struct sf_weight *const *w)
{
	group_dense(pool, x, ldx, T, n, y, w, 0);
}

/* A group's products for T tokens, in (T, n) and y[i] (T, rows): observed
 * first, then dense or through s->exec (T within what the hooks take:
 * see sf_forward_batch). */
static void apply_group(struct sf_runstate *s, int layer, enum sf_group g, const float *in,
			size_t n, int T, int nout, float *const *y, const struct sf_weight *const *w)
{
	observe(s, layer, g, in, T, n);
	if (s->exec && s->exec->fn)
		s->exec->fn(s->exec->ctx, layer, g, in, T, n, nout, y, w);
	else
		sf_group_dense_batch(s->pool, in, n, T, nout, y, w);
}

// ----------------------------------------------------------------------------
// attention, heads split over the workers

struct attn_task {
	const struct sf_config *c;
	struct sf_runstate *s;
	const float *q;		/* (T, n_heads * head_dim) the tokens' queries */
	float *z;		/* (T, n_heads * head_dim) their attention outputs */
	int layer, pos, T;	/* token t is at position pos + t */
	int window;		/* a sliding layer's: the positions a token sees, its
				 * own the last; 0: all before it */
	const struct sf_weight *sinks;	/* (n_heads) gpt-oss's, or data NULL */
};

/* The first position the token at p sees. */
static size_t first_seen(const struct attn_task *t, size_t p)
{
	return t->window && p + 1 > (size_t)t->window ? p + 1 - (size_t)t->window : 0;
}

/* Softmax of x (n) with gpt-oss's sink: its logit joins the denominator
 * and has no value to weigh. */
static void softmax_sink(float *x, size_t n, float sink)
{
	float mx = sink, sum = 0.0f;

	for (size_t i = 0; i < n; i++)
		mx = x[i] > mx ? x[i] : mx;
	for (size_t i = 0; i < n; i++) {
		x[i] = expf(x[i] - mx);
		sum += x[i];
	}
	sum += expf(sink - mx);
	for (size_t i = 0; i < n; i++)
		x[i] *= 1.0f / sum;
}

/* Floats of one thread's widened KV rows: a chunk of positions of one
 * KV head at a time (at least 16 rows of the widest head a config
 * allows). */
#define KV_CHUNK_FLOATS 16384

/* Positions a chunk of the cache at type t holds: all of n in place when
 * f32, else what fits the widening buffer. */
static size_t kv_chunk(enum sf_kv_type t, size_t n, size_t hd)
{
	return t == SF_KV_F32 ? n : KV_CHUNK_FLOATS / hd;
}

/* The row of layer l's cache that holds position p. */
static size_t kv_row(const struct sf_runstate *s, int l, size_t p)
{
	return s->kv_first[l] + p % (s->kv_first[l + 1] - s->kv_first[l]);
}

/* The positions from c0 (below n) that a chunk of at most step takes: in
 * a ring of held rows, none past its last row. */
static size_t kv_span(size_t c0, size_t n, size_t step, size_t held)
{
	size_t m = n - c0 < step ? n - c0 : step;
	return m < held - c0 % held ? m : held - c0 % held;
}

/* Rows [p0, p0 + m) of a KV head (element off of rows of row bytes of
 * type t from cache): in place when f32, else widened into buf (the same
 * floats). *ld: the rows' stride in floats. */
static const float *kv_rows(const uint8_t *cache, enum sf_kv_type t, size_t row, size_t off,
			    size_t p0, size_t m, size_t hd, float *buf, size_t *ld)
{
	if (t == SF_KV_F32) {
		*ld = row / sizeof(float);
		return (const float *)(cache + p0 * row) + off;
	}
	sf_kv_widen(buf, cache + p0 * row, t, row, off, m, hd);
	*ld = hd;
	return buf;
}

/* Gemma 2's soft-capping of n scores or logits: cap * tanh(x / cap). */
static void softcap(float *x, size_t n, float cap)
{
	for (size_t i = 0; i < n; i++)
		x[i] = cap * tanhf(x[i] / cap);
}

/* The logits' soft-capping over the pool, SOFTCAP_CHUNK at a time: one
 * thread took 1.6 ms for Gemma 2's 256,000 a token (each its own
 * element: the same floats in any split). */
#define SOFTCAP_CHUNK 16384
struct softcap_task {
	float *x;
	size_t n;
	float cap;
};

static void softcap_step(void *ctx, size_t i)
{
	const struct softcap_task *t = ctx;
	size_t at = i * SOFTCAP_CHUNK;
	softcap(t->x + at, t->n - at < SOFTCAP_CHUNK ? t->n - at : SOFTCAP_CHUNK, t->cap);
}

/* Query heads [h0, h1) of the KV head at element off, tokens [k0, k0 +
 * nq) of the pass: each token's scores row, then their outputs together
 * over the positions all of them see and each over the rest it sees,
 * every sum in position order. Each chunk of keys and values is widened
 * once for all of those heads and tokens. In a sliding layer the
 * positions from the first token's window on are read, each token's
 * weights 0 before its own window. */
static void attend(const struct attn_task *t, size_t off, size_t h0, size_t h1, size_t k0,
		   size_t nq, float *buf)
{
	const struct sf_config *c = t->c;
	const struct sf_runstate *s = t->s;
	size_t hd = (size_t)c->head_dim, qd = (size_t)c->n_heads * hd, ld, m;
	size_t first = s->kv_first[t->layer], held = s->kv_first[t->layer + 1] - first;
	size_t shared = (size_t)t->pos + k0 + 1;	/* positions token k0 sees */
	size_t n = shared + nq - 1, lds = s->seq_len;	/* positions the last one sees */
	size_t lo = first_seen(t, shared - 1);	/* the first the first one sees */
	/* Gemma 3's query_pre_attn_scalar^-0.5 (in double, as Python) in
	 * place of head_dim's */
	float scale = c->attn_scalar > 0 ? (float)pow((double)c->attn_scalar, -0.5)
					 : 1.0f / sqrtf((float)hd);
	const uint8_t *keys = s->key_cache + first * s->k_row;
	const uint8_t *vals = s->value_cache + first * s->v_row;

	/* a sliding layer's ring holds [lo, n) (kv_held), in at most two
	 * stretches; the sums run in position order whatever the chunks */
	for (size_t c0 = lo, step = kv_chunk(s->kv_k, n, hd); c0 < n; c0 += m) {
		m = kv_span(c0, n, step, held);
		const float *kr = kv_rows(keys, s->kv_k, s->k_row, off, c0 % held, m, hd, buf,
					  &ld);
		for (size_t h = h0; h < h1; h++)
			for (size_t j = 0; j < nq; j++) {
				const float *q = t->q + (k0 + j) * qd + h * hd;
				float *aj = s->att + (h * (size_t)att_queries(s->batch) + j) * lds;
				if (c0 < shared + j)
					sf_dot_rows(aj + c0, q, kr, ld,
						    shared + j - c0 < m ? shared + j - c0 : m, hd,
						    scale);
			}
	}
	for (size_t h = h0; h < h1; h++)
		for (size_t j = 0; j < nq; j++) {
			float *aj = s->att + (h * (size_t)att_queries(s->batch) + j) * lds;
			size_t lj = first_seen(t, shared + j - 1);
			if (c->attn_softcap > 0)	/* Gemma 2's */
				softcap(aj + lj, shared + j - lj, c->attn_softcap);
			if (t->sinks->data)
				softmax_sink(aj + lj, shared + j - lj, sf_weight_at(t->sinks, h));
			else
				sf_softmax(aj + lj, shared + j - lj);
			memset(aj + lo, 0, (lj - lo) * sizeof(float));
			memset(t->z + (k0 + j) * qd + h * hd, 0, hd * sizeof(float));
		}
	for (size_t c0 = lo, step = kv_chunk(s->kv_v, n, hd); c0 < n; c0 += m) {
		m = kv_span(c0, n, step, held);
		const float *vr = kv_rows(vals, s->kv_v, s->v_row, off, c0 % held, m, hd, buf,
					  &ld);
		for (size_t h = h0; h < h1; h++) {
			const float *att = s->att + h * (size_t)att_queries(s->batch) * lds;
			float *z = t->z + k0 * qd + h * hd;
			if (c0 < shared)
				sf_axpy_rows(z, qd, att + c0, lds, nq, vr, ld,
					     (shared - c0 < m ? shared - c0 : m), hd);
			for (size_t j = 1; j < nq; j++) {
				size_t p0 = c0 > shared ? c0 : shared, p1 = shared + j;
				if (p1 > c0 + m)
					p1 = c0 + m;
				if (p0 < p1)
					sf_axpy_rows(z + j * qd, 0, att + j * lds + p0, 0, 1,
						     vr + (p0 - c0) * ld, ld, p1 - p0, hd);
			}
		}
	}
}

/* Work items: a KV head's query heads, in parts so that each worker has
 * a few items to even out (a part widens the KV head's rows once for its
 * heads), each part's tokens ATT_QUERIES at a time in turn (a head's
 * scores rows hold that many). */
#define ATT_ITEMS_PER_WORKER 4

static void attn_worker(void *arg, int ith, int nth)
{
	const struct attn_task *t = arg;
	const struct sf_config *c = t->c;
	size_t hd = (size_t)c->head_dim, kvh = (size_t)c->n_kv_heads, group = (size_t)c->n_heads / kvh;
	size_t parts = (ATT_ITEMS_PER_WORKER * (size_t)nth + kvh - 1) / kvh, lo, hi;
	float buf[KV_CHUNK_FLOATS];

	if (parts > group)
		parts = group;
	sf_pool_split(kvh * parts, 1, ith, nth, &lo, &hi);
	for (size_t it = lo; it < hi; it++) {
		size_t g = it / parts, part = it % parts;
		for (int k0 = 0; k0 < t->T; k0 += ATT_QUERIES)
			attend(t, g * hd, g * group + part * group / parts,
			       g * group + (part + 1) * group / parts, (size_t)k0,
			       (size_t)att_queries(t->T - k0), buf);
	}
}

// ----------------------------------------------------------------------------
// the forward pass

int sf_state_error(const struct sf_runstate *s, struct sf_err *e)
{
	if (s->err.code && e)
		*e = s->err;
	return s->err.code;
}

int sf_state_check_tokens(struct sf_runstate *s, const struct sf_config *c,
			  const int32_t *tokens, size_t n, int pos)
{
	for (size_t i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
			return sf_err_set(&s->err, SF_ELIMIT, "token id %d at position %zu: beyond the "
					  "model's %d embedding rows (vocab_size)", tokens[i],
					  (size_t)pos + i, c->vocab_size);
	return 0;
}

// ----------------------------------------------------------------------------
// a mixture of experts' FFN (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE)

/* A token's route (n) from its router probabilities p (n): the k largest
 * (ties to the lower index, as a stable sort) keep their probability,
 * over the sum of the k when renorm, every other expert 0. */
static void route_top_k(float *route, const float *p, int n, int k, int renorm)
{
	float sum = 0.0f;

	for (int e = 0; e < n; e++) {
		int above = 0;	/* experts ranked before e */
		for (int j = 0; j < n; j++)
			above += p[j] > p[e] || (p[j] == p[e] && j < e);
		route[e] = above < k ? p[e] : 0.0f;
		sum += route[e];
	}
	if (renorm)
		for (int e = 0; e < n; e++)
			route[e] /= sum;
}

/* T tokens' routes (T, n_experts), each its k likeliest experts, from
 * their router logits (T, n_experts) plus the router's bias (gpt-oss's;
 * data NULL else), made probabilities in place. gpt-oss's softmax over
 * the k largest logits is the softmax over all renormalised over them. */
static void routes(const struct sf_config *c, const struct sf_weight *bias, float *route,
		   float *logits, int k, int T)
{
	size_t ne = (size_t)c->n_experts;

	for (int t = 0; t < T; t++) {
		add_bias(logits + t * ne, bias);
		sf_softmax(logits + t * ne, ne);
		route_top_k(route + t * ne, logits + t * ne, c->n_experts, k, c->norm_topk);
	}
}

/* gpt-oss's clamped SwiGLU: a (n) = (clamp(u, -limit, limit) + 1) *
 * g' * sigmoid(alpha g'), g' = min(g, limit). */
static void swiglu_clamped(float *a, const float *g, const float *u, size_t n, float limit,
			   float alpha)
{
	for (size_t i = 0; i < n; i++) {
		float gi = g[i] < limit ? g[i] : limit;
		float ui = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
		a[i] = (ui + 1.0f) * (gi / (1.0f + expf(-alpha * gi)));
	}
}

/* One expert's SwiGLU FFN x on the n tokens in in (n, dim): out (n, dim)
 * = down(silu(gate in) * up in), its width the rows of w_gate, with the
 * biases of b (gpt-oss's: the model's own, where x may be an exec's copy
 * of the matrices) and the clamped SwiGLU where the config has one;
 * s->gate, s->up and s->act hold the hidden values. */
static void expert_ffn(const struct sf_config *c, struct sf_runstate *s,
		       const struct sf_expert_weights *x, const struct sf_expert_weights *b,
		       const float *in, int n, float *out)
{
	size_t dim = (size_t)c->dim, hidden = (size_t)x->w_gate.rows;

	{
		float *y[] = { s->gate, s->up };
		const struct sf_weight *mw[] = { &x->w_gate, &x->w_up };
		group_dense(s->pool, in, dim, n, 2, y, mw, s->mxfp4_int8);
	}
	for (int i = 0; i < n; i++) {
		float *g = s->gate + i * hidden, *u = s->up + i * hidden;
		add_bias(g, &b->b_gate);
		add_bias(u, &b->b_up);
		if (c->swiglu_limit > 0.0f)
			swiglu_clamped(s->act + i * hidden, g, u, hidden, c->swiglu_limit,
				       c->swiglu_alpha);
		else
			sf_swiglu(s->act + i * hidden, g, u, hidden);
	}
	{
		float *y[] = { out };
		const struct sf_weight *mw[] = { &x->w_down };
		group_dense(s->pool, s->act, hidden, n, 1, y, mw, s->mxfp4_int8);
	}
	for (int i = 0; i < n; i++)
		add_bias(out + i * dim, &b->b_down);
}

/* The next layer's likeliest expert of each token guessed for the exec
 * (experts_ahead): its router on the residual x (T, dim) normed by its
 * FFN norm, the residual its FFN will see but for this layer's FFN and
 * its attention. One guess a token: on the Mixtral shape's random model
 * the top one was picked 82-84% of the times, the top two 69% (each
 * wrong guess a record read for nothing). s->moe_in and s->router serve
 * as scratch before this layer's experts run. */
#define AHEAD_PICKS 1
static void guess_ahead(const struct sf_config *c, struct sf_runstate *s,
			const struct sf_layer_weights *next, int l, int T)
{
	size_t dim = (size_t)c->dim;

	for (int t = 0; t < T; t++)
		sf_rmsnorm(s->moe_in + t * dim, s->x + t * dim, next->ffn_norm.data,
			   next->ffn_norm.dtype, dim, c->norm_eps, c->norm_offset);
	{
		float *y[] = { s->router };
		const struct sf_weight *mw[] = { &next->router };
		sf_group_dense_batch(s->pool, s->moe_in, dim, T, 1, y, mw);
	}
	routes(c, &next->router_bias, s->route_ahead, s->router, AHEAD_PICKS, T);
	s->exec->experts_ahead(s->exec->ctx, l + 1, s->route_ahead, T);
}

/* s->proj (T, dim) = the sum over each token's picked experts, in expert
 * order as transformers adds them, of its route weight times the expert's
 * SwiGLU FFN of s->xb; then, in Qwen2-MoE, plus the shared expert's FFN
 * scaled by sigmoid(shared_gate xb). Only the picked experts run, each
 * once on all the tokens that picked it (its weights streamed once for
 * the pass), each token's floats those it would get alone. A picked
 * expert whose weight underflowed to 0 adds nothing, and is skipped.
 * Layer l's experts come from s->exec when it gives them (from flash),
 * which is given a guess at the next layer's (next: NULL at the last). */
static void moe_ffn(const struct sf_config *c, struct sf_runstate *s,
		    const struct sf_layer_weights *w, const struct sf_layer_weights *next, int l,
		    int T)
{
	size_t dim = (size_t)c->dim, ne = (size_t)c->n_experts;
	int shared = w->shared_gate.data != NULL;

	/* the router's logits, and the shared expert's gate, on the same input */
	{
		float *y[] = { s->router, s->shared_gate };
		const struct sf_weight *mw[] = { &w->router, &w->shared_gate };
		sf_group_dense_batch(s->pool, s->xb, dim, T, shared ? 2 : 1, y, mw);
	}
	routes(c, &w->router_bias, s->route, s->router, c->n_experts_used, T);
	if (s->observer && s->observer->routes)
		s->observer->routes(s->observer->ctx, l, s->route, T, ne);
	memset(s->proj, 0, (size_t)T * dim * sizeof(float));
	if (s->exec && s->exec->experts)
		s->exec->experts(s->exec->ctx, l, s->route, T);
	if (s->exec && s->exec->experts_ahead && next)
		guess_ahead(c, s, next, l, T);
	for (size_t e = 0; e < ne; e++) {
		const struct sf_expert_weights *xw = &w->experts[e];
		int n = 0;

		for (int t = 0; t < T; t++)
			if (s->route[t * ne + e] != 0.0f) {
				memcpy(s->moe_in + n * dim, s->xb + t * dim, dim * sizeof(float));
				s->moe_tok[n++] = t;
			}
		if (!n)
			continue;
		if (s->exec && s->exec->expert && !(xw = s->exec->expert(s->exec->ctx, l, (int)e)))
			continue;
		expert_ffn(c, s, xw, &w->experts[e], s->moe_in, n, s->moe_out);
		for (int i = 0; i < n; i++) {
			int t = s->moe_tok[i];
			sf_axpy_f32(s->proj + t * dim, s->route[t * ne + e], s->moe_out + i * dim,
				    dim);
		}
	}
	if (!shared)
		return;
	expert_ffn(c, s, &w->shared, &w->shared, s->xb, T, s->moe_out);
	for (int t = 0; t < T; t++)
		sf_axpy_f32(s->proj + t * dim, 1.0f / (1.0f + expf(-s->shared_gate[t])),
			    s->moe_out + t * dim, dim);
}

/* The first of T rows of n floats holding a NaN or an infinity, or -1:
 * a scan of the hidden state per layer, small beside the layer's products. */
static int nonfinite_row(const float *x, int T, size_t n)
{
	for (int t = 0; t < T; t++)
		for (size_t i = 0; i < n; i++)
			if (!isfinite(x[(size_t)t * n + i]))
				return t;
	return -1;
}

/* A pass of tokens of several sequences (sf_forward_multi): token t at
 * position pos[t] of the sequence whose KV cache seqs[t] holds. NULL in
 * a pass of one sequence's consecutive positions. */
struct multi {
	struct sf_runstate *const *seqs;	/* (T) */
	const int *pos;			/* (T) */
};

/* A step of layer l that each token of a pass takes on its own rows: the
 * workers split the tokens (alone, the pass's norms, RoPE, KV stores and
 * SwiGLU kept the other threads waiting), and no float changes. */
struct token_step {
	const struct sf_model *m;
	struct sf_runstate *s;
	const struct multi *mu;
	int l, pos;
};

static void attn_norm_step(void *ctx, size_t t)
{
	const struct token_step *st = ctx;
	const struct sf_config *c = &st->m->cfg;
	size_t dim = (size_t)c->dim;
	sf_rmsnorm(st->s->xb + t * dim, st->s->x + t * dim, st->m->layers[st->l].attn_norm.data,
		   st->m->layers[st->l].attn_norm.dtype, dim, c->norm_eps, c->norm_offset);
}

/* q, k and v's biases, norms and clipping, RoPE at the token's position,
 * and k and v into its sequence's KV cache. */
static void qkv_step(void *ctx, size_t t)
{
	const struct token_step *st = ctx;
	const struct sf_config *c = &st->m->cfg;
	const struct sf_layer_weights *w = &st->m->layers[st->l];
	struct sf_runstate *s = st->s;
	size_t hd = (size_t)c->head_dim;
	size_t q_dim = (size_t)c->n_heads * hd, kv_dim = (size_t)c->n_kv_heads * hd;
	float *q = s->q + t * q_dim, *k = s->k + t * kv_dim, *v = s->v + t * kv_dim;
	struct sf_runstate *kvs = st->mu ? st->mu->seqs[t] : s;	/* whose KV cache */
	int p = st->mu ? st->mu->pos[t] : st->pos + (int)t;
	size_t row = kv_row(kvs, st->l, (size_t)p);
	add_bias(q, &w->bq);
	add_bias(k, &w->bk);
	add_bias(v, &w->bv);
	qk_norm(q, &w->q_norm, c, (size_t)c->n_heads);
	qk_norm(k, &w->k_norm, c, (size_t)c->n_kv_heads);
	clip(q, q_dim, c->clip_qkv);
	clip(k, kv_dim, c->clip_qkv);
	clip(v, kv_dim, c->clip_qkv);
	/* Gemma 3's sliding layers turn on their own base */
	const float *inv = c->layer_sliding[st->l] && s->inv_freq_local ? s->inv_freq_local
									 : s->inv_freq;
	sf_rope(q, (size_t)c->n_heads, hd, (size_t)c->rope_dim, inv, c->rope_attn_factor, p,
		c->rope_interleaved);
	sf_rope(k, (size_t)c->n_kv_heads, hd, (size_t)c->rope_dim, inv, c->rope_attn_factor, p,
		c->rope_interleaved);
	sf_kv_put(kvs->key_cache + row * kvs->k_row, kvs->kv_k, k, kv_dim);
	sf_kv_put(kvs->value_cache + row * kvs->v_row, kvs->kv_v, v, kv_dim);
}

/* A sublayer's output y (dim) into the residual x, Gemma 3's normed
 * first (post_norms: norm is its post_attention_layernorm or
 * post_feedforward_layernorm). */
static void add_residual(const struct sf_config *c, float *x, float *y, const struct sf_weight *norm)
{
	size_t dim = (size_t)c->dim;

	if (c->post_norms)
		sf_rmsnorm(y, y, norm->data, norm->dtype, dim, c->norm_eps, c->norm_offset);
	sf_axpy_f32(x, 1.0f, y, dim);
}

/* The attention's output into the residual, then the FFN's normed input. */
static void attn_out_step(void *ctx, size_t t)
{
	const struct token_step *st = ctx;
	const struct sf_config *c = &st->m->cfg;
	const struct sf_layer_weights *w = &st->m->layers[st->l];
	size_t dim = (size_t)c->dim;
	float *x = st->s->x + t * dim;
	add_bias(st->s->proj + t * dim, &w->bo);
	add_residual(c, x, st->s->proj + t * dim, &w->post_attn_norm);
	sf_rmsnorm(st->s->xb + t * dim, x, w->ffn_norm.data, w->ffn_norm.dtype, dim, c->norm_eps,
		   c->norm_offset);
}

static void glu_step(void *ctx, size_t t)
{
	const struct token_step *st = ctx;
	size_t hidden = (size_t)st->m->cfg.hidden_dim;
	float *a = st->s->act + t * hidden, *g = st->s->gate + t * hidden, *u = st->s->up + t * hidden;

	if (st->m->cfg.act_gelu)	/* Gemma 3's */
		sf_geglu(a, g, u, hidden);
	else
		sf_swiglu(a, g, u, hidden);
}

static void ffn_out_step(void *ctx, size_t t)
{
	const struct token_step *st = ctx;
	const struct sf_config *c = &st->m->cfg;
	size_t dim = (size_t)c->dim;
	add_residual(c, st->s->x + t * dim, st->s->proj + t * dim,
		     &st->m->layers[st->l].post_ffn_norm);
}

/* Layer l on the residual stream s->x of tokens [0, T) at positions
 * pos + t: each step below runs per token in the order the one-token pass
 * runs it, and the products run over all T tokens with each (row, token)
 * computed as for one token, so every token gets the floats it would get
 * alone. */
static int layer(const struct sf_model *m, struct sf_runstate *s, int l, int T, int pos,
		 const struct multi *mu)
{
	const struct sf_config *c = &m->cfg;
	size_t dim = (size_t)c->dim;
	size_t hd = (size_t)c->head_dim;
	size_t q_dim = (size_t)c->n_heads * hd;
	size_t hidden = (size_t)c->hidden_dim;
	int window = c->layer_sliding[l] ? c->sliding_window : 0;	/* gpt-oss's */
	struct token_step st = { .m = m, .s = s, .mu = mu, .l = l, .pos = pos };
	int bad;

	const struct sf_layer_weights *w = &m->layers[l];

	// attention: q, k, v from the normed residual
	sf_pool_for(s->pool, (size_t)T, attn_norm_step, &st);
	{
		float *y[] = { s->q, s->k, s->v };
		const struct sf_weight *mw[] = { &w->wq, &w->wk, &w->wv };
		apply_group(s, l, SF_GROUP_ATTN_IN, s->xb, dim, T, 3, y, mw);
	}
	sf_pool_for(s->pool, (size_t)T, qkv_step, &st);
	/* every key of the block is cached first; token t reads up to pos + t;
	 * of several sequences, each token alone over its own cache, as a
	 * one-token pass of its sequence attends (with that state's scores) */
	if (mu) {
		for (int t = 0; t < T; t++) {
			struct attn_task at = { .c = c, .s = mu->seqs[t], .q = s->q + t * q_dim,
						.z = s->z + t * q_dim, .layer = l,
						.pos = mu->pos[t], .T = 1, .window = window,
						.sinks = &w->sinks };
			run(s->pool, attn_worker, &at);
		}
	} else {
		struct attn_task at = { .c = c, .s = s, .q = s->q, .z = s->z, .layer = l,
					.pos = pos, .T = T, .window = window, .sinks = &w->sinks };
		run(s->pool, attn_worker, &at);
	}
	{
		float *y[] = { s->proj };
		const struct sf_weight *mw[] = { &w->wo };
		apply_group(s, l, SF_GROUP_ATTN_OUT, s->z, q_dim, T, 1, y, mw);
	}

	// FFN: down(silu(gate(x)) * up(x)) on the normed residual, or a
	// mixture of such experts
	sf_pool_for(s->pool, (size_t)T, attn_out_step, &st);
	if (c->n_experts) {
		moe_ffn(c, s, w, l + 1 < c->n_layers ? &m->layers[l + 1] : NULL, l, T);
	} else {
		{
			float *y[] = { s->gate, s->up };
			const struct sf_weight *mw[] = { &w->w_gate, &w->w_up };
			apply_group(s, l, SF_GROUP_FFN_IN, s->xb, dim, T, 2, y, mw);
		}
		sf_pool_for(s->pool, (size_t)T, glu_step, &st);
		{
			float *y[] = { s->proj };
			const struct sf_weight *mw[] = { &w->w_down };
			apply_group(s, l, SF_GROUP_FFN_OUT, s->act, hidden, T, 1, y, mw);
		}
	}
	sf_pool_for(s->pool, (size_t)T, ffn_out_step, &st);
	if ((bad = nonfinite_row(s->x, T, dim)) >= 0)
		return sf_err_set(&s->err, SF_EFORMAT, "layer %d: non-finite hidden state at "
				  "position %d", l, pos + bad);
	return 0;
}

/* Tokens [0, T) at positions pos + t through every layer, then the head
 * on none, the last or all of them. */
enum head { HEAD_NONE, HEAD_LAST, HEAD_ALL };

/* The pass through the first nlayers layers, then the head. */
static int forward(const struct sf_model *m, struct sf_runstate *s, const int32_t *tokens,
		   int T, int pos, int nlayers, enum head head, float *logits,
		   const struct multi *mu)
{
	const struct sf_config *c = &m->cfg;
	size_t dim = (size_t)c->dim;
	int bad;

	if (s->err.code || sf_state_check_tokens(s, c, tokens, (size_t)T, pos))
		return -1;
	for (int t = 0; t < T; t++) {
		if (s->exec && s->exec->embed)
			s->exec->embed(s->exec->ctx, tokens[t], s->x + t * dim);
		else
			sf_weight_row(s->x + t * dim, &m->embed, (uint64_t)tokens[t]);
		if (c->embed_scale > 0)	/* Gemma 3's sqrt(hidden_size) */
			for (size_t i = 0; i < dim; i++)
				s->x[t * dim + i] *= c->embed_scale;
	}

	for (int l = 0; l < nlayers; l++) {
		if (layer(m, s, l, T, pos, mu))
			return -1;
		if (s->release_weights)
			sf_model_release_layer(m, l);
	}

	if (head == HEAD_NONE)
		return 0;
	/* the head: on every token, or on the last one only */
	int first = head == HEAD_ALL ? 0 : T - 1;
	for (int t = first; t < T; t++)
		sf_rmsnorm(s->x + t * dim, s->x + t * dim, m->final_norm.data, m->final_norm.dtype,
			   dim, c->norm_eps, c->norm_offset);
	if (s->exec && s->exec->head) {
		for (int t = first; t < T; t++)
			s->exec->head(s->exec->ctx, s->x + (size_t)t * dim,
				      logits + (size_t)(t - first) * (size_t)c->vocab_size);
	} else {
		float *y[] = { logits };
		const struct sf_weight *mw[] = { &m->lm_head };
		sf_group_dense_batch(s->pool, s->x + (size_t)first * dim, dim, T - first, 1, y, mw);
	}
	if (c->final_softcap > 0) {
		struct softcap_task sc = { logits, (size_t)(T - first) * (size_t)c->vocab_size,
					   c->final_softcap };
		sf_pool_for(s->pool, (sc.n + SOFTCAP_CHUNK - 1) / SOFTCAP_CHUNK, softcap_step, &sc);
	}
	if ((bad = nonfinite_row(logits, T - first, (size_t)c->vocab_size)) >= 0) {
		sf_err_set(&s->err, SF_EFORMAT, "output head: non-finite logits at position %d",
			   pos + first + bad);
		return -1;
	}
	return 0;
}

float *sf_forward(const struct sf_model *m, struct sf_runstate *s, int32_t token, int pos)
{
	return sf_forward_batch(m, s, &token, 1, pos, 0);
}

/* Tokens a hook takes in one call: its tokens field, 0 counting as 1. */
static int hook_tokens(int tokens)
{
	return tokens > 1 ? tokens : 1;
}

/* Of n tokens, how many the hooks take in one pass now (a pass may
 * change that): a token's floats do not depend on the tokens it shares a
 * pass with. */
static int pass_tokens(const struct sf_runstate *s, int n)
{
	if (s->observer && hook_tokens(s->observer->tokens) < n)
		n = hook_tokens(s->observer->tokens);
	if (s->exec && hook_tokens(s->exec->tokens) < n)
		n = hook_tokens(s->exec->tokens);
	return n;
}

float *sf_forward_batch(const struct sf_model *m, struct sf_runstate *s, const int32_t *tokens,
			int T, int pos, int all_logits)
{
	size_t vocab = (size_t)m->cfg.vocab_size;

	/* the buffers hold s->batch tokens and the cache s->seq_len positions */
	if (all_logits && s->logit_rows < T) {
		sf_err_set(&s->err, -EINVAL, "a pass of %d tokens with every token's logits: the "
			   "state holds %d %s of logits", T, s->logit_rows,
			   s->logit_rows == 1 ? "row" : "rows");
		return NULL;
	}
	if (T < 1 || T > s->batch || pos < 0 || pos > s->seq_len - T) {
		sf_err_set(&s->err, -EINVAL, "a pass of %d tokens at position %d: the state "
			   "holds %d tokens a pass and %d positions", T, pos, s->batch, s->seq_len);
		return NULL;
	}
	/* passes of as many tokens as the hooks take */
	for (int t = 0, n; t < T; t += n) {
		n = pass_tokens(s, T - t);
		enum head head = s->skip_logits ? HEAD_NONE : all_logits ? HEAD_ALL
				 : t + n == T ? HEAD_LAST : HEAD_NONE;
		if (forward(m, s, tokens + t, n, pos + t, m->cfg.n_layers, head,
			    s->logits + (all_logits ? (size_t)t * vocab : 0), NULL))
			return NULL;
	}
	return s->skip_logits ? NULL : s->logits;
}

float *sf_forward_multi(const struct sf_model *m, struct sf_runstate *s,
			struct sf_runstate *const *seqs, const int32_t *tokens, const int *pos, int T)
{
	size_t vocab = (size_t)m->cfg.vocab_size;

	if (T < 1 || T > s->batch || s->logit_rows < T) {
		sf_err_set(&s->err, -EINVAL, "a pass of %d sequences' tokens: the state holds %d "
			   "tokens a pass and %d rows of logits", T, s->batch, s->logit_rows);
		return NULL;
	}
	for (int t = 0; t < T; t++) {
		if (pos[t] < 0 || pos[t] >= seqs[t]->seq_len) {
			sf_err_set(&s->err, -EINVAL, "a pass of %d sequences' tokens: token %d at "
				   "position %d of a cache of %d positions", T, t, pos[t],
				   seqs[t]->seq_len);
			return NULL;
		}
		/* one token a sequence: a sliding layer's ring holds what one
		 * pass of its own batch needs, not more */
		for (int u = 0; u < t; u++)
			if (seqs[u] == seqs[t]) {
				sf_err_set(&s->err, -EINVAL, "a pass of %d sequences' tokens: "
					   "tokens %d and %d of the same sequence", T, u, t);
				return NULL;
			}
	}
	for (int t = 0, n; t < T; t += n) {
		n = pass_tokens(s, T - t);
		struct multi mu = { seqs + t, pos + t };
		if (forward(m, s, tokens + t, n, pos[t], m->cfg.n_layers, HEAD_ALL,
			    s->logits + (size_t)t * vocab, &mu))
			return NULL;
	}
	return s->logits;
}

/* A pass of T tokens at pos through layer l (the last of a prefix) that
 * the state and the hooks take whole; else the failure, kept in s. */
static int check_pass(const struct sf_model *m, struct sf_runstate *s, int l, int T, int pos)
{
	if (s->err.code)
		return -1;
	if (l < 0 || l >= m->cfg.n_layers || T < 1 || T > s->batch || pos < 0 ||
	    pos > s->seq_len - T || (s->observer && T > hook_tokens(s->observer->tokens)) ||
	    (s->exec && T > hook_tokens(s->exec->tokens))) {
		sf_err_set(&s->err, -EINVAL, "layer %d of %d: a pass of %d tokens at position %d: "
			   "the state holds %d tokens a pass and %d positions, the hooks take %d",
			   l, m->cfg.n_layers, T, pos, s->batch, s->seq_len,
			   s->exec ? hook_tokens(s->exec->tokens)
				   : s->observer ? hook_tokens(s->observer->tokens) : s->batch);
		return -1;
	}
	return 0;
}

int sf_forward_layer(const struct sf_model *m, struct sf_runstate *s, int l, int T, int pos)
{
	if (check_pass(m, s, l, T, pos))
		return -1;
	return layer(m, s, l, T, pos, NULL) ? -1 : 0;
}

int sf_forward_layers(const struct sf_model *m, struct sf_runstate *s, const int32_t *tokens,
		      int T, int pos, int nlayers)
{
	if (check_pass(m, s, nlayers - 1, T, pos))
		return -1;
	return forward(m, s, tokens, T, pos, nlayers, HEAD_NONE, NULL, NULL);
}
