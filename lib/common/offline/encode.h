/* The middle tier's encoders: one thread's encoder of columns into
 * records (trellis by offline/trellis.h's Viterbi search, scalar by
 * offline/twoscale.h's fit), a layer's group encoded over the thread
 * pool, and the sections of a .sfq file encoded one at a time. Record
 * layout: formats/codes.h and man/sf-formats.5 (codes). */
#ifndef SF_ENCODE_H
#define SF_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/pool.h"
#include "base/quant.h"
#include "base/vocab.h"
#include "formats/codes.h"
#include "formats/model.h"
#include "offline/trellis.h"

/* One thread's encoder: scratch for columns up to mmax long. */
struct sf_encoder;
uint64_t sf_encoder_bytes(enum sf_code_method method, size_t mmax);
int sf_encoder_init(struct sf_encoder **enc, enum sf_code_method method, const float *cb,
		    size_t mmax);
void sf_encoder_free(struct sf_encoder *enc);	/* accepts NULL */

/* Encodes n (1..SF_TRELLIS_LOCKSTEP) columns w[i][0..m) into the records
 * rec[i] (sf_codes_col_bytes each); sse[i] gets the squared error of the
 * decoded column (NULL: not wanted). A column's record depends on that
 * column alone. SF_EFORMAT for a non-finite weight, SF_ELIMIT for a scale
 * beyond f16, with e naming the column as "column J" (J = first_col + i). */
int sf_encoder_run(struct sf_encoder *enc, const float *const *w, int n, size_t m,
		   uint8_t *const *rec, double *sse, uint64_t first_col, struct sf_err *e);

struct sf_codes_stats {
	double sse[SF_GROUP_MAX_MATRICES];	/* squared error of the decoded weights */
	double ss[SF_GROUP_MAX_MATRICES];	/* squared norm of the weights */
};

/* Encodes every column of group g of layer l into out (entries *
 * entry_bytes, entry j's records in matrix order at j * entry_bytes),
 * columns spread over the pool (NULL: the caller) with encoder enc[ith]
 * for worker ith (sf_pool_size of them, or one). Deterministic whatever
 * the thread count. */
int sf_codes_encode_group(const struct sf_model *m, int layer, enum sf_group g,
			  struct sf_encoder *const *enc, struct sf_pool *pool, uint8_t *out,
			  struct sf_codes_stats *st, struct sf_err *e);

/* Encodes the sections d lists (d->method, d->codebook set) in order and
 * hands each to sink(arg, i, data, stats, e) before the next is encoded,
 * so memory holds one section at a time: the encoders of every pool
 * worker (sf_encoder_bytes each) and the largest section; each group's
 * weights leave the resident set once encoded (sf_model_release).
 * sf_codes_encode_bytes: that memory for threads workers, the weights
 * aside. */
uint64_t sf_codes_encode_bytes(const struct sf_sfq *d, int threads);
int sf_codes_encode_sections(const struct sf_model *m, const struct sf_sfq *d,
			     struct sf_pool *pool,
			     int (*sink)(void *arg, size_t i, const uint8_t *data,
					 const struct sf_codes_stats *st, struct sf_err *e),
			     void *arg, struct sf_err *e);

/* m with its flash matrices (q, k, v, o, gate, up, down of every layer)
 * as a q8 or q4 top tier holds them: each column quantized with qm as
 * sf-pack --dtype does and dequantized to f32 (row-major, like the
 * model's), the weights a sparse decoder computes with from such an
 * image. t->m shares m's other tensors and fingerprint (m must outlive
 * it); free with sf_top_model_free, never sf_model_close. Memory: 4 bytes
 * a flash weight. -ERANGE as sf_quant_column, naming the tensor. */
struct sf_top_model {
	struct sf_model m;
	float *buf;	/* every flash matrix, in layer and matrix order */
};
int sf_top_model_init(struct sf_top_model *t, const struct sf_model *m, enum sf_dtype dt,
		      enum sf_quant_method qm, struct sf_err *e);
void sf_top_model_free(struct sf_top_model *t);	/* accepts a zeroed t */

#endif
