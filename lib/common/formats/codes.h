/* The middle tier's format: 2-bit codes of every weight column (trellis
 * or scalar), the column records they are stored in, what a code means
 * (the trellis codebook, the scalar levels), and the .sfq file (one
 * reader, one writer). The kernels that decode records are in
 * engine/codes.h, the encoders in offline/encode.h. Byte layout:
 * man/sf-formats.5 (codes). */
#ifndef SF_CODES_H
#define SF_CODES_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/err.h"
#include "base/vocab.h"
#include "formats/model.h"

enum sf_code_method { SF_CODES_TRELLIS, SF_CODES_SCALAR };

#define SF_CODES_DEFAULT_METHOD SF_CODES_TRELLIS

const char *sf_codes_method_name(enum sf_code_method m);
/* 0 and *m set, or -1 for an unknown name. */
int sf_codes_method_parse(const char *name, enum sf_code_method *m);

// ----------------------------------------------------------------------------
// what a code means

/* Trellis: weight t of a column reads codebook[idx_t] * scale with idx_t =
 * ((idx_{t-1} << 2) | c_t) & 0xFFFF and idx_{-1} = 0. */
#define SF_TRELLIS_CODEBOOK (1u << 16)	/* entries: window L = 16 bits */
#define SF_TRELLIS_DEFAULT_SEED 1

/* Fills cb[SF_TRELLIS_CODEBOOK] with standard normal values: splitmix64
 * seeded with seed, each pair of draws u1, u2 = (next() >> 11) * 2^-53
 * giving r = sqrt(-2 ln(1 - u1)), cb[2i] = r cos(2 pi u2), cb[2i+1] =
 * r sin(2 pi u2), computed in double and rounded to float. The table is
 * stored beside the codes, so libm differences cannot change a decode. */
void sf_trellis_codebook(float *cb, uint64_t seed);

/* Scalar (two scales per column, offline/twoscale.h): code c (0..3) is
 * e1 * s0 + e2 * s1 with e1 = +1 when bit 1 is set, e2 = +1 when bit 0 is
 * set, so with s0 >= s1 >= 0 the levels rise with c. Computed the same
 * way by the encoder's report and every decoder. */
static inline float sf_twoscale_level(unsigned c, float s0, float s1)
{
	return ((c & 2) ? s0 : -s0) + ((c & 1) ? s1 : -s1);
}

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

// ----------------------------------------------------------------------------
// a layer's group

#define SF_GROUP_MAX_MATRICES 3

/* The matrices of group g in layer l (q, k, v; o; gate, up; down) and
 * their names; returns how many. */
int sf_codes_group_matrices(const struct sf_model *m, int layer, enum sf_group g,
			    const struct sf_weight *w[SF_GROUP_MAX_MATRICES],
			    const char *names[SF_GROUP_MAX_MATRICES]);

/* The records of one matrix of a group: column i at base + i * stride;
 * what the kernels of engine/codes.h decode. */
struct sf_codes_view {
	enum sf_code_method method;
	const float *codebook;	/* (SF_TRELLIS_CODEBOOK) trellis only */
	size_t m;		/* rows: weights per column */
	const uint8_t *base;	/* record of column 0 */
	size_t stride;		/* bytes from one column's record to the next */
};

// ----------------------------------------------------------------------------
// .sfq files

#define SF_SFQ_MAGIC "SFQCODES"
#define SF_SFQ_VERSION 3	/* 2: a CRC-32C after the header, the codebook and each section;
				 * 3: fingerprint of the weights, shape_fingerprint */
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
	struct sf_fingerprint fingerprint;
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
/* The bytes of q's sections: what its codes take in memory. */
uint64_t sf_sfq_bytes(const struct sf_sfq *q);
/* NULL when the file holds no codes for (layer, g). */
const struct sf_sfq_section *sf_sfq_find(const struct sf_sfq *q, int layer, enum sf_group g);
/* SF_EMISMATCH (naming path and the model's file) when q's fingerprint is
 * not the model's. */
int sf_sfq_check_model(const struct sf_sfq *q, const char *path, const struct sf_model *m,
		       struct sf_err *e);
/* The view of matrix i of a section. */
struct sf_codes_view sf_sfq_view(const struct sf_sfq *q, const struct sf_sfq_section *sec, int i);

/* Writer: d describes the file (fingerprint, method, seed, shape,
 * producer, codebook, sections with layer/group/sizes; offsets are
 * computed here). PATH ("-": stdout, refused when a terminal) is opened
 * with base/outfile.h (a temporary renamed by sf_sfq_writer_close; the
 * inputs, NULL-terminated or NULL, refused as the output); the sections'
 * bytes are handed over in order with sf_sfq_writer_section, so a file
 * streams out one section at a time. */
struct sf_sfq_writer;
int sf_sfq_writer_open(struct sf_sfq_writer **w, const char *path, const struct sf_sfq *d,
		       const char *const *inputs, struct sf_err *e);
int sf_sfq_writer_section(struct sf_sfq_writer *w, const void *data, uint64_t len,
			  struct sf_err *e);
/* Completes the file; 0 or an error, after which nothing is left behind. */
int sf_sfq_writer_close(struct sf_sfq_writer *w, struct sf_err *e);
/* Drops an unfinished file (removes the temporary); accepts NULL. */
void sf_sfq_writer_abort(struct sf_sfq_writer *w);

/* Merges the sections of several files of the same model, method and
 * codebook (each (layer, group) in one file only) into PATH (refused
 * when it is one of the inputs). */
int sf_sfq_merge(const char *path, const char *const *inputs, size_t n, json_t *producer,
		 struct sf_err *e);

/* A summary for sf-encode --info: fingerprint, method, seed, producer, and
 * per section layer, group, entries, bytes and the FNV-1a checksum. */
json_t *sf_sfq_info_json(const struct sf_sfq *q);

#endif
