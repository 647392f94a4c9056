/* The middle tier's encoders: columns to records, a layer's group over
 * the thread pool, a file's sections one at a time. See encode.h; record
 * layout in man/sf-formats.5 (codes). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "engine/codes.h"
#include "offline/encode.h"
#include "offline/twoscale.h"

// ----------------------------------------------------------------------------
// encoder

static float f16_round(float v)
{
	return sf_f16_to_f32(sf_f32_to_f16(v));
}

struct sf_encoder {
	enum sf_code_method method;
	const float *cb;
	size_t mmax;
	struct sf_trellis_work *tw;		/* trellis only */
	float *x[SF_TRELLIS_LOCKSTEP];		/* (mmax) normalised column */
	uint8_t *c[SF_TRELLIS_LOCKSTEP];	/* (mmax) codes, one per byte */
	float *dec;				/* (mmax) decoded column */
};

uint64_t sf_encoder_bytes(enum sf_code_method method, size_t mmax)
{
	uint64_t b = (uint64_t)mmax * (SF_TRELLIS_LOCKSTEP * (sizeof(float) + 1) + sizeof(float));
	return b + (method == SF_CODES_TRELLIS ? sf_trellis_work_bytes(mmax) : 0);
}

void sf_encoder_free(struct sf_encoder *enc)
{
	if (!enc)
		return;
	sf_trellis_work_free(enc->tw);
	for (int k = 0; k < SF_TRELLIS_LOCKSTEP; k++) {
		free(enc->x[k]);
		free(enc->c[k]);
	}
	free(enc->dec);
	free(enc);
}

int sf_encoder_init(struct sf_encoder **out, enum sf_code_method method, const float *cb,
		    size_t mmax)
{
	struct sf_encoder *enc = calloc(1, sizeof(*enc));
	*out = NULL;
	if (!enc)
		return -ENOMEM;
	enc->method = method;
	enc->cb = cb;
	enc->mmax = mmax = mmax ? mmax : 1;
	if (method == SF_CODES_TRELLIS && sf_trellis_work_init(&enc->tw, cb, mmax))
		goto fail;
	for (int k = 0; k < SF_TRELLIS_LOCKSTEP; k++)
		if (!(enc->x[k] = malloc(mmax * sizeof(float))) || !(enc->c[k] = malloc(mmax)))
			goto fail;
	if (!(enc->dec = malloc(mmax * sizeof(float))))
		goto fail;
	*out = enc;
	return 0;
fail:
	sf_encoder_free(enc);
	return -ENOMEM;
}

int sf_encoder_run(struct sf_encoder *enc, const float *const *w, int n, size_t m,
		   uint8_t *const *rec, double *sse, uint64_t first_col, struct sf_err *e)
{
	size_t sb = sf_codes_scale_bytes(enc->method);
	if (m > enc->mmax || n < 1 || n > SF_TRELLIS_LOCKSTEP)
		return sf_err_set(e, -EINVAL, "encoder: %d columns of %zu weights: at most %d of %zu",
				  n, m, SF_TRELLIS_LOCKSTEP, enc->mmax);
	for (int k = 0; k < n; k++) {
		double ss = 0.0;
		for (size_t t = 0; t < m; t++) {
			if (!isfinite(w[k][t]))
				return sf_err_set(e, SF_EFORMAT, "column %" PRIu64 ": weight %zu is %g",
						  first_col + (uint64_t)k, t, (double)w[k][t]);
			ss += (double)w[k][t] * w[k][t];
		}
		if (enc->method == SF_CODES_SCALAR) {
			float s0, s1;
			sf_twoscale_fit(w[k], m, f16_round, &s0, &s1, enc->c[k]);
			if (!isfinite(s0))
				return sf_err_set(e, SF_ELIMIT, "column %" PRIu64 ": scale beyond f16",
						  first_col + (uint64_t)k);
			sf_put_le16(rec[k], sf_f32_to_f16(s0));
			sf_put_le16(rec[k] + 2, sf_f32_to_f16(s1));
			continue;
		}
		/* the search runs on the column divided by the stored (f16)
		 * scale, so its error is exactly the decoder's */
		float s = f16_round((float)sqrt(m ? ss / (double)m : 0.0));
		if (!isfinite(s))
			return sf_err_set(e, SF_ELIMIT, "column %" PRIu64 ": RMS %g beyond f16",
					  first_col + (uint64_t)k, sqrt(ss / (double)m));
		for (size_t t = 0; t < m; t++)
			enc->x[k][t] = s > 0.0f ? w[k][t] / s : 0.0f;
		sf_put_le16(rec[k], sf_f32_to_f16(s));
	}
	if (enc->method == SF_CODES_TRELLIS)
		sf_trellis_encode((const float *const *)enc->x, n, m, enc->c, NULL, enc->tw);
	for (int k = 0; k < n; k++) {
		sf_codes_pack(enc->c[k], m, rec[k] + sb);
		if (!sse)
			continue;
		sf_codes_decode(enc->method, enc->cb, rec[k], m, enc->dec);
		double err = 0.0;
		for (size_t t = 0; t < m; t++) {
			double d = (double)w[k][t] - enc->dec[t];
			err += d * d;
		}
		sse[k] = err;
	}
	return 0;
}

// ----------------------------------------------------------------------------
// a layer's group over the pool

static float weight_at(const struct sf_weight *w, uint64_t i)
{
	const uint8_t *p = (const uint8_t *)w->data;
	switch (w->dtype) {
	case SF_DTYPE_BF16: return sf_bf16_to_f32(sf_get_le16(p + 2 * i));
	case SF_DTYPE_F16: return sf_f16_to_f32(sf_get_le16(p + 2 * i));
	default: {
		uint32_t u = sf_get_le32(p + 4 * i);
		float f;
		memcpy(&f, &u, sizeof(f));
		return f;
	}
	}
}

struct group_task {
	const struct sf_weight *w[SF_GROUP_MAX_MATRICES];
	size_t matoff[SF_GROUP_MAX_MATRICES];	/* record offset inside an entry */
	size_t items_before[SF_GROUP_MAX_MATRICES + 1];	/* prefix sums of batches */
	const char *names[SF_GROUP_MAX_MATRICES];
	int nmat;
	size_t entry_bytes, cols;
	uint8_t *out;
	struct sf_encoder *const *enc;
	double *item_sse;	/* (items, SF_TRELLIS_LOCKSTEP) */
	float **colbuf;		/* (nth, SF_TRELLIS_LOCKSTEP * max rows) */
	atomic_size_t next;
	atomic_int failed;
	int *ret;		/* (nth) */
	struct sf_err *err;	/* (nth) */
};

static void group_worker(void *arg, int ith, int nth)
{
	struct group_task *T = arg;
	size_t items = T->items_before[T->nmat];
	(void)nth;
	for (;;) {
		if (atomic_load(&T->failed))
			return;
		size_t it = atomic_fetch_add(&T->next, 1);
		if (it >= items)
			return;
		int i = 0;
		while (it >= T->items_before[i + 1])
			i++;
		const struct sf_weight *w = T->w[i];
		size_t rows = (size_t)w->rows;
		size_t j0 = (it - T->items_before[i]) * SF_TRELLIS_LOCKSTEP;
		int n = (int)(T->cols - j0 < SF_TRELLIS_LOCKSTEP ? T->cols - j0 : SF_TRELLIS_LOCKSTEP);
		const float *cols[SF_TRELLIS_LOCKSTEP];
		uint8_t *rec[SF_TRELLIS_LOCKSTEP];
		for (int k = 0; k < n; k++) {
			float *c = T->colbuf[ith] + (size_t)k * rows;
			for (size_t r = 0; r < rows; r++)
				c[r] = weight_at(w, (uint64_t)r * T->cols + j0 + (size_t)k);
			cols[k] = c;
			rec[k] = T->out + (j0 + (size_t)k) * T->entry_bytes + T->matoff[i];
		}
		struct sf_err ce;
		int ret = sf_encoder_run(T->enc[ith], cols, n, rows, rec,
					 T->item_sse + it * SF_TRELLIS_LOCKSTEP, j0, &ce);
		if (ret) {
			T->ret[ith] = sf_err_set(&T->err[ith], ret, "%s %s", T->names[i], ce.msg);
			atomic_store(&T->failed, 1);
			return;
		}
	}
}

int sf_codes_encode_group(const struct sf_model *m, int layer, enum sf_group g,
			  struct sf_encoder *const *enc, struct sf_pool *pool, uint8_t *out,
			  struct sf_codes_stats *st, struct sf_err *e)
{
	struct group_task T = { .out = out, .enc = enc };
	int nth = pool ? sf_pool_size(pool) : 1, ret = 0;
	size_t maxrows = 0;

	T.nmat = sf_codes_group_matrices(m, layer, g, T.w, T.names);
	T.cols = (size_t)T.w[0]->cols;
	for (int i = 0; i < T.nmat; i++) {
		T.matoff[i] = T.entry_bytes;
		T.entry_bytes += sf_codes_col_bytes(enc[0]->method, (size_t)T.w[i]->rows);
		T.items_before[i + 1] = T.items_before[i] +
					(T.cols + SF_TRELLIS_LOCKSTEP - 1) / SF_TRELLIS_LOCKSTEP;
		if (T.w[i]->rows > maxrows)
			maxrows = (size_t)T.w[i]->rows;
	}
	size_t items = T.items_before[T.nmat];
	T.item_sse = calloc(items * SF_TRELLIS_LOCKSTEP, sizeof(double));
	T.colbuf = calloc((size_t)nth, sizeof(float *));
	T.ret = calloc((size_t)nth, sizeof(int));
	T.err = calloc((size_t)nth, sizeof(struct sf_err));
	if (!T.item_sse || !T.colbuf || !T.ret || !T.err) {
		ret = sf_err_set(e, -ENOMEM, "layer %d %s: %s", layer, sf_group_name(g),
				 strerror(ENOMEM));
		goto out;
	}
	for (int t = 0; t < nth; t++)
		if (!(T.colbuf[t] = malloc(SF_TRELLIS_LOCKSTEP * maxrows * sizeof(float)))) {
			ret = sf_err_set(e, -ENOMEM, "layer %d %s: %s", layer, sf_group_name(g),
					 strerror(ENOMEM));
			goto out;
		}
	atomic_init(&T.next, 0);
	atomic_init(&T.failed, 0);
	if (pool)
		sf_pool_run(pool, group_worker, &T);
	else
		group_worker(&T, 0, 1);
	for (int t = 0; t < nth; t++)
		if (T.ret[t]) {
			ret = sf_err_set(e, T.ret[t], "layer %d %s: %s", layer, sf_group_name(g),
					 T.err[t].msg);
			goto out;
		}
	if (st) {
		*st = (struct sf_codes_stats){ 0 };
		for (int i = 0; i < T.nmat; i++) {
			/* summed in column order: the same figure at any -t */
			for (size_t it = T.items_before[i]; it < T.items_before[i + 1]; it++)
				for (int k = 0; k < SF_TRELLIS_LOCKSTEP; k++)
					st->sse[i] += T.item_sse[it * SF_TRELLIS_LOCKSTEP + (size_t)k];
			uint64_t nw = T.w[i]->rows * T.w[i]->cols;
			for (uint64_t q = 0; q < nw; q++) {
				double v = weight_at(T.w[i], q);
				st->ss[i] += v * v;
			}
		}
	}
out:
	if (T.colbuf)
		for (int t = 0; t < nth; t++)
			free(T.colbuf[t]);
	free(T.colbuf);
	free(T.item_sse);
	free(T.ret);
	free(T.err);
	return ret;
}

/* The largest section of d in bytes, and its longest column. */
static void largest(const struct sf_sfq *d, uint64_t *bytes, uint64_t *rows)
{
	*bytes = *rows = 0;
	for (size_t i = 0; i < d->nsections; i++) {
		const struct sf_sfq_section *s = &d->sections[i];
		if (s->bytes > *bytes)
			*bytes = s->bytes;
		for (int k = 0; k < s->nmat; k++)
			if (s->mat[k].rows > *rows)
				*rows = s->mat[k].rows;
	}
}

uint64_t sf_codes_encode_bytes(const struct sf_sfq *d, int threads)
{
	uint64_t bytes, rows;
	largest(d, &bytes, &rows);
	return bytes + (uint64_t)threads * (sf_encoder_bytes(d->method, (size_t)rows) +
					    SF_TRELLIS_LOCKSTEP * rows * sizeof(float));
}

int sf_codes_encode_sections(const struct sf_model *m, const struct sf_sfq *d,
			     struct sf_pool *pool,
			     int (*sink)(void *arg, size_t i, const uint8_t *data,
					 const struct sf_codes_stats *st, struct sf_err *e),
			     void *arg, struct sf_err *e)
{
	int nth = pool ? sf_pool_size(pool) : 1, made = 0, ret = 0;
	struct sf_encoder **enc = calloc((size_t)nth, sizeof(*enc));
	uint64_t maxbytes, maxrows;
	uint8_t *buf = NULL;

	largest(d, &maxbytes, &maxrows);
	if (!enc || maxbytes > SIZE_MAX || !(buf = malloc(maxbytes ? (size_t)maxbytes : 1))) {
		ret = sf_err_set(e, -ENOMEM, "encoding: %" PRIu64 " bytes: %s", maxbytes,
				 strerror(ENOMEM));
		goto out;
	}
	for (; made < nth; made++)
		if ((ret = sf_encoder_init(&enc[made], d->method, d->codebook, (size_t)maxrows))) {
			ret = sf_err_set(e, ret, "encoder for columns of %" PRIu64 " weights (%" PRIu64
					 " bytes): %s", maxrows,
					 sf_encoder_bytes(d->method, (size_t)maxrows), strerror(-ret));
			goto out;
		}
	for (size_t i = 0; i < d->nsections; i++) {
		const struct sf_sfq_section *s = &d->sections[i];
		struct sf_codes_stats st;
		if ((ret = sf_codes_encode_group(m, s->layer, s->group, enc, pool, buf, &st, e)) ||
		    (ret = sink(arg, i, buf, &st, e)))
			goto out;
		/* read once: out of the resident set (a model larger than memory) */
		const struct sf_weight *w[SF_GROUP_MAX_MATRICES];
		const char *names[SF_GROUP_MAX_MATRICES];
		for (int k = sf_codes_group_matrices(m, s->layer, s->group, w, names); k-- > 0;)
			sf_model_release(m, w[k]);
	}
out:
	for (int i = 0; i < made; i++)
		sf_encoder_free(enc[i]);
	free(enc);
	free(buf);
	return ret;
}


// ----------------------------------------------------------------------------
// the model as a quantized top tier holds it

/* The flash matrices of layer L, in the image's order. */
static void flash_matrices(struct sf_layer_weights *L, struct sf_weight *w[7])
{
	w[0] = &L->wq, w[1] = &L->wk, w[2] = &L->wv, w[3] = &L->wo;
	w[4] = &L->w_gate, w[5] = &L->w_up, w[6] = &L->w_down;
}

int sf_top_model_init(struct sf_top_model *t, const struct sf_model *m, enum sf_dtype dt,
		      enum sf_quant_method qm, struct sf_err *e)
{
	uint64_t total = 0, maxrows = 0;
	float *col = NULL;
	uint8_t *q = NULL;
	struct sf_weight *w[7];
	int ret = 0;

	memset(t, 0, sizeof(*t));
	t->m = *m;
	t->m.layers = malloc((size_t)m->cfg.n_layers * sizeof(*t->m.layers));
	if (!t->m.layers)
		return sf_err_set(e, -ENOMEM, "quantized top tier: %s", strerror(ENOMEM));
	memcpy(t->m.layers, m->layers, (size_t)m->cfg.n_layers * sizeof(*t->m.layers));
	for (int l = 0; l < m->cfg.n_layers; l++) {
		flash_matrices(&t->m.layers[l], w);
		for (int i = 0; i < 7; i++) {
			total += w[i]->rows * w[i]->cols;	/* 64 bits: 7B layers pass 2^32 */
			maxrows = w[i]->rows > maxrows ? w[i]->rows : maxrows;
		}
	}
	if (total > SIZE_MAX / sizeof(float) || !(t->buf = malloc((size_t)total * sizeof(float) + 1)) ||
	    !(col = malloc((size_t)maxrows * sizeof(float) + 1)) ||
	    !(q = malloc((size_t)sf_dtype_col_bytes(dt, maxrows) + 1))) {
		ret = sf_err_set(e, -ENOMEM, "quantized top tier: %llu weights in f32: %s",
				 (unsigned long long)total, strerror(ENOMEM));
		goto out;
	}
	float *W = t->buf;
	for (int l = 0; l < m->cfg.n_layers; l++) {
		flash_matrices(&t->m.layers[l], w);
		for (int i = 0; i < 7; i++) {
			size_t R = (size_t)w[i]->rows, C = (size_t)w[i]->cols;
			for (size_t c = 0; c < C; c++) {
				for (size_t r = 0; r < R; r++)
					col[r] = weight_at(w[i], (uint64_t)r * C + c);
				if (sf_quant_column(q, dt, col, R, qm)) {
					static const char *const nm[7] = { "q", "k", "v", "o", "gate",
									   "up", "down" };
					ret = sf_err_set(e, -ERANGE, "layer %d %s column %zu: a weight "
							 "not finite or a block's scale beyond the "
							 "F16 range", l, nm[i], c);
					goto out;
				}
				sf_dequant_column(col, q, dt, R);
				for (size_t r = 0; r < R; r++)
					W[r * C + c] = col[r];
			}
			*w[i] = (struct sf_weight){ .data = W, .dtype = SF_DTYPE_F32, .rows = R,
						    .cols = C };
			W += R * C;
		}
	}
out:
	free(col);
	free(q);
	if (ret)
		sf_top_model_free(t);
	return ret;
}

void sf_top_model_free(struct sf_top_model *t)
{
	if (!t)
		return;
	free(t->m.layers);
	free(t->buf);
	memset(t, 0, sizeof(*t));
}
