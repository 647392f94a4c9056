/* The middle tier: 2-bit codes of every weight column (trellis or scalar),
 * the column records they are stored in, the encoder of a layer's group,
 * the decode-accumulate kernel the sparse decoder shares, and the .sfq
 * file (one reader, one writer). Byte layout: man/sf-formats.5 (codes). */
#ifndef SF_CODES_H
#define SF_CODES_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/err.h"
#include "base/vocab.h"
#include "formats/model.h"
#include "base/pool.h"

enum sf_code_method { SF_CODES_TRELLIS, SF_CODES_SCALAR };

struct sf_sfq;

#define SF_CODES_DEFAULT_METHOD SF_CODES_TRELLIS

const char *sf_codes_method_name(enum sf_code_method m);
/* 0 and *m set, or -1 for an unknown name. */
int sf_codes_method_parse(const char *name, enum sf_code_method *m);

// ----------------------------------------------------------------------------
// column records

/* A column of m weights is one record: its scales as little-endian f16
 * (trellis: the column's RMS; scalar: s0 then s1), then the m codes packed
 * four to a byte, code t in bits 7-6 of byte t/4 for t % 4 == 0 down to
 * bits 1-0 for t % 4 == 3 (so a 16-bit big-endian window of the stream is
 * a trellis index), unused low bits zero. */
size_t sf_codes_scale_bytes(enum sf_code_method m);
size_t sf_codes_col_bytes(enum sf_code_method method, size_t m);
void sf_codes_pack(const uint8_t *c, size_t m, uint8_t *out);	/* out: (m + 3) / 4 bytes */
void sf_codes_unpack(const uint8_t *in, size_t m, uint8_t *c);

/* out[0..m) = the weights a record decodes to: trellis cb[idx_t] * scale,
 * scalar sf_twoscale_level(c_t, s0, s1). cb: the trellis codebook (unused
 * for scalar). Exactly the values the encoder measured its error on. */
void sf_codes_decode(enum sf_code_method method, const float *cb, const uint8_t *rec, size_t m,
		     float *out);

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

// ----------------------------------------------------------------------------
// a layer's group

#define SF_GROUP_MAX_MATRICES 3

/* The matrices of group g in layer l (q, k, v; o; gate, up; down) and
 * their names; returns how many. */
int sf_codes_group_matrices(const struct sf_model *m, int layer, enum sf_group g,
			    const struct sf_weight *w[SF_GROUP_MAX_MATRICES],
			    const char *names[SF_GROUP_MAX_MATRICES]);

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
 * worker (sf_encoder_bytes each) and the largest section. */
int sf_codes_encode_sections(const struct sf_model *m, const struct sf_sfq *d,
			     struct sf_pool *pool,
			     int (*sink)(void *arg, size_t i, const uint8_t *data,
					 const struct sf_codes_stats *st, struct sf_err *e),
			     void *arg, struct sf_err *e);

// ----------------------------------------------------------------------------
// decode-accumulate: the sparse decoder's middle tier

/* The records of one matrix of a group: column i at base + i * stride. */
struct sf_codes_view {
	enum sf_code_method method;
	const float *codebook;	/* (SF_TRELLIS_CODEBOOK) trellis only */
	size_t m;		/* rows: weights per column */
	const uint8_t *base;	/* record of column 0 */
	size_t stride;		/* bytes from one column's record to the next */
};

/* y[t] += sum_k xv[k] * decode(column idx[k])[t] for the rows t in
 * [r0, r1) (r1 <= m), columns in order, so any split of the rows gives
 * the same sums: one table lookup and one multiply-add per weight
 * (trellis: the 16-bit index from the code window, a gather from the
 * codebook; scalar: a 4-entry level table). */
void sf_codes_colaccum(float *y, const struct sf_codes_view *v, size_t r0, size_t r1,
		       const uint32_t *idx, const float *xv, size_t n);
void sf_codes_colaccum_ref(float *y, const struct sf_codes_view *v, size_t r0, size_t r1,
			   const uint32_t *idx, const float *xv, size_t n);

// ----------------------------------------------------------------------------
// .sfq files

#define SF_SFQ_MAGIC "SFQCODES"
#define SF_SFQ_VERSION 1
#define SF_SFQ_ALIGN 4096
#define SF_SFQ_MAX_HEADER ((uint64_t)64 << 20)

struct sf_sfq_matrix {
	char name[8];		/* "q", "gate", ... */
	uint64_t rows;		/* weights per column */
	uint64_t col_bytes;	/* sf_codes_col_bytes(method, rows) */
};

struct sf_sfq_section {
	int layer;
	enum sf_group group;
	uint64_t entries;	/* columns per matrix: the group's input length */
	int nmat;
	struct sf_sfq_matrix mat[SF_GROUP_MAX_MATRICES];
	uint64_t entry_bytes;	/* sum of col_bytes */
	uint64_t offset;	/* from the start of the data region, SF_SFQ_ALIGN aligned */
	uint64_t bytes;		/* entries * entry_bytes */
	const uint8_t *data;	/* reader: the section's bytes */
};

/* The model shape the codes belong to (also checked by the fingerprint). */
struct sf_sfq_shape {
	int dim, hidden_dim, n_layers, n_heads, n_kv_heads, head_dim;
};

struct sf_sfq {
	char fingerprint[SF_FINGERPRINT_LEN + 1];
	enum sf_code_method method;
	uint64_t seed;			/* of the trellis codebook */
	struct sf_sfq_shape shape;
	json_t *producer;		/* {"program", "version", "options"}: owned */
	float *codebook;		/* (SF_TRELLIS_CODEBOOK), 64-byte aligned; NULL for scalar */
	size_t nsections;
	struct sf_sfq_section *sections;	/* (nsections) in (layer, group) order */
	/* reader's private state */
	void *map;
	size_t map_size;
	char *map_path;		/* the mapped file's path, for the SIGBUS guard */
	unsigned char *buf;
};

/* The shape of a model's config. */
void sf_sfq_shape_of(struct sf_sfq_shape *s, const struct sf_config *c);
/* The section of (layer, group) with its matrices and sizes filled in from
 * the shape (offset 0, data NULL). */
void sf_sfq_section_init(struct sf_sfq_section *sec, enum sf_code_method method,
			 const struct sf_sfq_shape *shape, int layer, enum sf_group g);

/* Reads PATH ("-" for stdin; a pipe is read to its end, a file mapped
 * and registered with the SIGBUS guard, see guard.h).
 * Everything is validated before use: magic, version, header length and
 * JSON, method, codebook, every section's shape against the header's model
 * shape, sizes without overflow, offsets aligned, in order, not
 * overlapping and inside the file. On failure *q is zeroed. */
int sf_sfq_open(struct sf_sfq *q, const char *path, struct sf_err *e);
void sf_sfq_close(struct sf_sfq *q);	/* accepts a zeroed q */
/* NULL when the file holds no codes for (layer, g). */
const struct sf_sfq_section *sf_sfq_find(const struct sf_sfq *q, int layer, enum sf_group g);
/* SF_EMISMATCH (naming path) when q's fingerprint is not the model's. */
int sf_sfq_check_model(const struct sf_sfq *q, const char *path, const struct sf_model *m,
		       struct sf_err *e);
/* The view of matrix i of a section. */
struct sf_codes_view sf_sfq_view(const struct sf_sfq *q, const struct sf_sfq_section *sec, int i);

/* Writer: d describes the file (fingerprint, method, seed, shape,
 * producer, codebook, sections with layer/group/sizes; offsets are
 * computed here). PATH ("-": stdout, refused when a terminal) is written
 * to PATH.tmp.XXXXXX and renamed by sf_sfq_writer_close; the sections'
 * bytes are handed over in order with sf_sfq_writer_section, so a file
 * streams out one section at a time. */
struct sf_sfq_writer;
int sf_sfq_writer_open(struct sf_sfq_writer **w, const char *path, const struct sf_sfq *d,
		       struct sf_err *e);
int sf_sfq_writer_section(struct sf_sfq_writer *w, const void *data, uint64_t len,
			  struct sf_err *e);
/* Completes the file; 0 or an error, after which nothing is left behind. */
int sf_sfq_writer_close(struct sf_sfq_writer *w, struct sf_err *e);
/* Drops an unfinished file (removes the temporary); accepts NULL. */
void sf_sfq_writer_abort(struct sf_sfq_writer *w);

/* Merges the sections of several files of the same model, method and
 * codebook (each (layer, group) in one file only) into PATH. */
int sf_sfq_merge(const char *path, const char *const *inputs, size_t n, json_t *producer,
		 struct sf_err *e);

/* A summary for sf-encode --info: fingerprint, method, seed, producer, and
 * per section layer, group, entries, bytes and the FNV-1a checksum. */
json_t *sf_sfq_info_json(const struct sf_sfq *q);

/* 64-bit FNV-1a of a byte range: the section checksums --info prints. */
uint64_t sf_sfq_fnv64(const void *p, uint64_t n);

#endif
