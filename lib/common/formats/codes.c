/* Middle-tier codes, the format: column records, the trellis codebook, a
 * layer's group of matrices and the .sfq reader, writer and merge (the
 * kernels are engine/codes.c, the encoders offline/encode.c). Byte
 * layout: man/sf-formats.5 (codes). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/codes.h"
#include "base/bytes.h"
#include "base/guard.h"
#include "base/jsonfile.h"
#include "base/outfile.h"
#include "base/rng.h"
#include "base/vocab.h"

static const char *const method_names[] = { "trellis", "scalar" };

const char *sf_codes_method_name(enum sf_code_method m)
{
	return method_names[m];
}

int sf_codes_method_parse(const char *name, enum sf_code_method *m)
{
	for (int i = 0; i < 2; i++)
		if (strcmp(name, method_names[i]) == 0) {
			*m = (enum sf_code_method)i;
			return 0;
		}
	return -1;
}

// ----------------------------------------------------------------------------
// column records

size_t sf_codes_scale_bytes(enum sf_code_method m)
{
	return m == SF_CODES_SCALAR ? 4 : 2;
}

size_t sf_codes_col_bytes(enum sf_code_method method, size_t m)
{
	return sf_codes_scale_bytes(method) + (m + 3) / 4;
}

void sf_codes_pack(const uint8_t *c, size_t m, uint8_t *out)
{
	memset(out, 0, (m + 3) / 4);
	for (size_t t = 0; t < m; t++)
		out[t / 4] |= (uint8_t)((c[t] & 3u) << (6 - 2 * (t % 4)));
}

void sf_codes_unpack(const uint8_t *in, size_t m, uint8_t *c)
{
	for (size_t t = 0; t < m; t++)
		c[t] = (in[t / 4] >> (6 - 2 * (t % 4))) & 3u;
}

// ----------------------------------------------------------------------------
// the trellis codebook

void sf_trellis_codebook(float *cb, uint64_t seed)
{
	uint64_t s = seed;
	for (size_t i = 0; i < SF_TRELLIS_CODEBOOK; i += 2) {
		double u1 = sf_rng_unit(&s);
		double u2 = sf_rng_unit(&s);
		double r = sqrt(-2.0 * log(1.0 - u1));
		cb[i] = (float)(r * cos(2.0 * M_PI * u2));
		cb[i + 1] = (float)(r * sin(2.0 * M_PI * u2));
	}
}

// ----------------------------------------------------------------------------
// a layer's group

int sf_codes_group_matrices(const struct sf_model *m, int layer, enum sf_group g,
			    const struct sf_weight *w[SF_GROUP_MAX_MATRICES],
			    const char *names[SF_GROUP_MAX_MATRICES])
{
	const struct sf_layer_weights *L = &m->layers[layer];
	switch (g) {
	case SF_GROUP_ATTN_IN:
		w[0] = &L->wq; w[1] = &L->wk; w[2] = &L->wv;
		names[0] = "q"; names[1] = "k"; names[2] = "v";
		return 3;
	case SF_GROUP_ATTN_OUT:
		w[0] = &L->wo; names[0] = "o";
		return 1;
	case SF_GROUP_FFN_IN:
		w[0] = &L->w_gate; w[1] = &L->w_up;
		names[0] = "gate"; names[1] = "up";
		return 2;
	default:
		w[0] = &L->w_down; names[0] = "down";
		return 1;
	}
}

// ----------------------------------------------------------------------------
// .sfq: shapes and sections

static const char *const mat_names[SF_NGROUPS][SF_GROUP_MAX_MATRICES] = {
	{ "q", "k", "v" }, { "o" }, { "gate", "up" }, { "down" },
};

void sf_sfq_shape_of(struct sf_sfq_shape *s, const struct sf_config *c)
{
	*s = (struct sf_sfq_shape){ c->dim, c->hidden_dim, c->n_layers, c->n_heads,
				    c->n_kv_heads, c->head_dim };
}

void sf_sfq_section_init(struct sf_sfq_section *sec, enum sf_code_method method,
			 const struct sf_sfq_shape *sh, int layer, enum sf_group g)
{
	uint64_t qd = (uint64_t)sh->n_heads * (uint64_t)sh->head_dim;
	uint64_t kvd = (uint64_t)sh->n_kv_heads * (uint64_t)sh->head_dim;
	uint64_t rows[SF_NGROUPS][SF_GROUP_MAX_MATRICES] = {
		{ qd, kvd, kvd }, { (uint64_t)sh->dim }, { (uint64_t)sh->hidden_dim,
		(uint64_t)sh->hidden_dim }, { (uint64_t)sh->dim },
	};
	static const int nmat[SF_NGROUPS] = { 3, 1, 2, 1 };
	uint64_t entries[SF_NGROUPS] = { (uint64_t)sh->dim, qd, (uint64_t)sh->dim,
					 (uint64_t)sh->hidden_dim };

	*sec = (struct sf_sfq_section){ .layer = layer, .group = g, .entries = entries[g],
					.nmat = nmat[g] };
	for (int i = 0; i < sec->nmat; i++) {
		snprintf(sec->mat[i].name, sizeof(sec->mat[i].name), "%s", mat_names[g][i]);
		sec->mat[i].rows = rows[g][i];
		sec->mat[i].col_bytes = sf_codes_col_bytes(method, (size_t)rows[g][i]);
		sec->entry_bytes += sec->mat[i].col_bytes;
	}
	sec->bytes = sec->entries * sec->entry_bytes;	/* shapes are bounded: no overflow */
}

struct sf_codes_view sf_sfq_view(const struct sf_sfq *q, const struct sf_sfq_section *sec, int i)
{
	size_t off = 0;
	for (int k = 0; k < i; k++)
		off += (size_t)sec->mat[k].col_bytes;
	return (struct sf_codes_view){ q->method, q->codebook, (size_t)sec->mat[i].rows,
				       sec->data + off, (size_t)sec->entry_bytes };
}

const struct sf_sfq_section *sf_sfq_find(const struct sf_sfq *q, int layer, enum sf_group g)
{
	for (size_t i = 0; i < q->nsections; i++)
		if (q->sections[i].layer == layer && q->sections[i].group == g)
			return &q->sections[i];
	return NULL;
}

int sf_sfq_check_model(const struct sf_sfq *q, const char *path, const struct sf_model *m,
		       struct sf_err *e)
{
	return sf_fingerprint_check(&q->fingerprint, path, "codes", &m->fingerprint, m->source, e);
}

static uint64_t align_up(uint64_t v)
{
	return (v + SF_SFQ_ALIGN - 1) / SF_SFQ_ALIGN * SF_SFQ_ALIGN;
}

#define PREFIX_BYTES 24	/* magic, version, flags, header length */
#define CRC_BYTES 4	/* the CRC-32C after the header, the codebook and each section */
#define CODEBOOK_BYTES ((uint64_t)SF_TRELLIS_CODEBOOK * 4)

static int cmp_section(const struct sf_sfq_section *a, const struct sf_sfq_section *b)
{
	if (a->layer != b->layer)
		return a->layer < b->layer ? -1 : 1;
	return a->group < b->group ? -1 : a->group > b->group;
}

// ----------------------------------------------------------------------------
// .sfq reader

uint64_t sf_sfq_bytes(const struct sf_sfq *q)
{
	uint64_t n = 0;
	for (size_t i = 0; i < q->nsections; i++)
		n += q->sections[i].bytes;
	return n;
}

void sf_sfq_close(struct sf_sfq *q)
{
	if (!q)
		return;
	json_decref(q->producer);
	free(q->codebook);
	free(q->sections);
	if (q->map) {
		sf_guard_unmap(q->map);
		munmap(q->map, q->map_size);
	}
	free(q->map_path);
	free(q->buf);
	memset(q, 0, sizeof(*q));
}

/* A pipe is read to its end; a regular file is mapped, and the mapping
 * registered with the SIGBUS guard under the path. */
static int load_file(struct sf_sfq *q, const char *path, const unsigned char **data,
		     uint64_t *size, struct sf_err *e)
{
	int fd = strcmp(path, "-") == 0 ? 0 : open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	int ret = 0;
	if (fd < 0)
		return sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0) {
		ret = sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (S_ISREG(st.st_mode) && st.st_size > 0) {
		q->map_size = (size_t)st.st_size;
		q->map = mmap(NULL, q->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (q->map == MAP_FAILED) {
			q->map = NULL;
			ret = sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
			goto out;
		}
		if (!(q->map_path = strdup(path))) {
			ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
			goto out;
		}
		if ((ret = sf_guard_map(q->map, q->map_size, q->map_path, e)))
			goto out;
		*data = q->map;
		*size = q->map_size;
		goto out;
	}
	size_t cap = 1 << 16, n = 0;
	for (;;) {
		if (n == cap || !q->buf) {
			unsigned char *nb = realloc(q->buf, cap *= 2);
			if (!nb) {
				ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
				goto out;
			}
			q->buf = nb;
		}
		ssize_t got = read(fd, q->buf + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0) {
			ret = sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
			goto out;
		}
		if (got == 0)
			break;
		n += (size_t)got;
	}
	*data = q->buf;
	*size = n;
out:
	if (fd > 0)
		close(fd);
	return ret;
}

#define MAX_DIM ((int64_t)1 << 20)

/* where: "PATH: header", how the getters name the header in messages */
static int parse_shape(const char *path, const char *where, json_t *o, struct sf_sfq_shape *s,
		       struct sf_err *e)
{
	const char *keys[] = { "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
			       "head_dim" };
	int *fields[] = { &s->dim, &s->hidden_dim, &s->n_layers, &s->n_heads, &s->n_kv_heads,
			  &s->head_dim };
	if (!json_is_object(o))
		return sf_err_set(e, SF_EFORMAT, "%s: header: \"model\" missing or not an object",
				  path);
	for (int i = 0; i < 6; i++) {
		int64_t v;
		int ret = sf_json_int(o, keys[i], 1, i == 2 ? 65536 : MAX_DIM, &v, where, e);
		if (ret)
			return ret;
		*fields[i] = (int)v;
	}
	if (s->n_heads * (int64_t)s->head_dim > MAX_DIM)
		return sf_err_set(e, SF_EFORMAT, "%s: header: n_heads * head_dim %" PRId64
				  " beyond %" PRId64, path, s->n_heads * (int64_t)s->head_dim,
				  MAX_DIM);
	return 0;
}

static int parse_section(const char *path, const char *where, const struct sf_sfq *q, json_t *o,
			 size_t i, struct sf_sfq_section *sec, struct sf_err *e)
{
	int64_t layer, v;
	enum sf_group g;
	int ret;
	json_t *gn = json_object_get(o, "group"), *mats = json_object_get(o, "matrices");

	if (!json_is_object(o))
		return sf_err_set(e, SF_EFORMAT, "%s: header: section %zu is not an object", path, i);
	if ((ret = sf_json_int(o, "layer", 0, q->shape.n_layers - 1, &layer, where, e)))
		return ret;
	if (!json_is_string(gn) || sf_group_parse(json_string_value(gn), &g))
		return sf_err_set(e, SF_EFORMAT, "%s: header: section %zu: unknown group", path, i);
	sf_sfq_section_init(sec, q->method, &q->shape, (int)layer, g);
	if ((ret = sf_json_int(o, "entries", 0, INT64_MAX, &v, where, e)))
		return ret;
	if ((uint64_t)v != sec->entries)
		return sf_err_set(e, SF_EFORMAT, "%s: layer %" PRId64 " %s: %" PRId64
				  " entries, the model shape has %" PRIu64, path, layer,
				  sf_group_name(g), v, sec->entries);
	if (!json_is_array(mats) || json_array_size(mats) != (size_t)sec->nmat)
		return sf_err_set(e, SF_EFORMAT, "%s: layer %" PRId64 " %s: expected %d matrices",
				  path, layer, sf_group_name(g), sec->nmat);
	for (int k = 0; k < sec->nmat; k++) {
		json_t *mo = json_array_get(mats, (size_t)k);
		json_t *nm = json_object_get(mo, "name");
		int64_t rows, cb;
		if (!json_is_string(nm) || strcmp(json_string_value(nm), sec->mat[k].name) != 0)
			return sf_err_set(e, SF_EFORMAT, "%s: layer %" PRId64 " %s: matrix %d is "
					  "not %s", path, layer, sf_group_name(g), k, sec->mat[k].name);
		if ((ret = sf_json_int(mo, "rows", 0, INT64_MAX, &rows, where, e)) ||
		    (ret = sf_json_int(mo, "col_bytes", 0, INT64_MAX, &cb, where, e)))
			return ret;
		if ((uint64_t)rows != sec->mat[k].rows || (uint64_t)cb != sec->mat[k].col_bytes)
			return sf_err_set(e, SF_EFORMAT, "%s: layer %" PRId64 " %s %s: %" PRId64
					  " rows in %" PRId64 " bytes, expected %" PRIu64 " in %"
					  PRIu64, path, layer, sf_group_name(g), sec->mat[k].name,
					  rows, cb, sec->mat[k].rows, sec->mat[k].col_bytes);
	}
	if ((ret = sf_json_int(o, "entry_bytes", 0, INT64_MAX, &v, where, e)))
		return ret;
	if ((uint64_t)v != sec->entry_bytes)
		return sf_err_set(e, SF_EFORMAT, "%s: layer %" PRId64 " %s: entry_bytes %" PRId64
				  ", expected %" PRIu64, path, layer, sf_group_name(g), v,
				  sec->entry_bytes);
	if ((ret = sf_json_int(o, "bytes", 0, INT64_MAX, &v, where, e)))
		return ret;
	if ((uint64_t)v != sec->bytes)
		return sf_err_set(e, SF_EFORMAT, "%s: layer %" PRId64 " %s: bytes %" PRId64
				  ", expected %" PRIu64, path, layer, sf_group_name(g), v, sec->bytes);
	if ((ret = sf_json_int(o, "offset", 0, INT64_MAX, &v, where, e)))
		return ret;
	sec->offset = (uint64_t)v;
	return 0;
}

/* n bytes at p against the little-endian CRC-32C stored right after them. */
static int check_crc(const char *path, const char *what, const unsigned char *p, uint64_t n,
		     struct sf_err *e)
{
	uint32_t got = sf_crc32c(0, p, (size_t)n), want = sf_get_le32(p + n);

	if (got != want)
		return sf_err_set(e, SF_EFORMAT, "%s: %s: CRC-32C %08x, expected %08x: the codes "
				  "are damaged", path, what, got, want);
	return 0;
}

int sf_sfq_open(struct sf_sfq *q, const char *path, struct sf_err *e)
{
	const unsigned char *d = NULL;
	uint64_t size = 0;
	json_t *h = NULL;
	json_error_t je;
	int64_t v;
	int ret;
	char where[SF_ERR_MAX];

	const unsigned char *cb_at = NULL;	/* the codebook in the file */

	memset(q, 0, sizeof(*q));
	snprintf(where, sizeof(where), "%s: header", path);
	if ((ret = load_file(q, path, &d, &size, e)))
		goto out;
	if (size < PREFIX_BYTES || memcmp(d, SF_SFQ_MAGIC, 8) != 0) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: not a .sfq file (bad magic)", path);
		goto out;
	}
	uint32_t version = sf_get_le32(d + 8), flags = sf_get_le32(d + 12);
	uint64_t hlen = sf_get_le64(d + 16);
	if (version != SF_SFQ_VERSION) {
		ret = sf_fingerprint_version(path, "codes", version, SF_SFQ_VERSION, e);
		goto out;
	}
	if (flags != 0) {
		ret = sf_err_set(e, SF_EUNSUPPORTED, "%s: flags 0x%x, expected 0", path, flags);
		goto out;
	}
	if (hlen > SF_SFQ_MAX_HEADER || hlen + CRC_BYTES > size - PREFIX_BYTES) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header of %" PRIu64 " bytes in a file of %"
				 PRIu64, path, hlen, size);
		goto out;
	}
	if (!(h = json_loadb((const char *)d + PREFIX_BYTES, (size_t)hlen, JSON_REJECT_DUPLICATES,
			     &je)) || !json_is_object(h)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: %s", path,
				 h ? "not a JSON object" : je.text);
		goto out;
	}
	uint64_t data_start = align_up(PREFIX_BYTES + hlen + CRC_BYTES);
	uint64_t data_size = size > data_start ? size - data_start : 0;

	json_t *me = json_object_get(h, "method");
	if ((ret = sf_fingerprint_parse(&q->fingerprint, h, where, e)))
		goto out;
	if (!json_is_string(me) || sf_codes_method_parse(json_string_value(me), &q->method)) {
		ret = sf_err_set(e, SF_EUNSUPPORTED, "%s: header: unknown method %s", path,
				 json_is_string(me) ? json_string_value(me) : "(missing)");
		goto out;
	}
	if ((ret = sf_json_int(h, "seed", 0, INT64_MAX, &v, where, e)) ||
	    (ret = parse_shape(path, where, json_object_get(h, "model"), &q->shape, e)))
		goto out;
	q->seed = (uint64_t)v;
	q->producer = json_incref(json_object_get(h, "producer"));

	json_t *cbo = json_object_get(h, "codebook");
	if (q->method == SF_CODES_TRELLIS) {
		int64_t off, bytes;
		if ((ret = sf_json_int(cbo, "offset", 0, INT64_MAX, &off, where, e)) ||
		    (ret = sf_json_int(cbo, "bytes", 0, INT64_MAX, &bytes, where, e)))
			goto out;
		if ((uint64_t)bytes != CODEBOOK_BYTES || off % SF_SFQ_ALIGN ||
		    (uint64_t)off > data_size ||
		    CODEBOOK_BYTES + CRC_BYTES > data_size - (uint64_t)off) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: codebook of %" PRId64 " bytes at %" PRId64
					 ": expected %" PRIu64 " aligned bytes and their CRC inside the %"
					 PRIu64 " data bytes", path, bytes, off, CODEBOOK_BYTES, data_size);
			goto out;
		}
		cb_at = d + data_start + off;
		if (posix_memalign((void **)&q->codebook, 64, CODEBOOK_BYTES)) {
			q->codebook = NULL;
			ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
			goto out;
		}
		const unsigned char *p = d + data_start + off;
		for (size_t i = 0; i < SF_TRELLIS_CODEBOOK; i++) {
			uint32_t u = sf_get_le32(p + 4 * i);
			memcpy(&q->codebook[i], &u, 4);
			if (!isfinite(q->codebook[i])) {
				ret = sf_err_set(e, SF_EFORMAT, "%s: codebook entry %zu is not finite",
						 path, i);
				goto out;
			}
		}
	} else if (cbo && !json_is_null(cbo)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: a codebook with scalar codes", path);
		goto out;
	}

	json_t *secs = json_object_get(h, "sections");
	if (!json_is_array(secs) ||
	    json_array_size(secs) > (size_t)q->shape.n_layers * SF_NGROUPS) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: \"sections\" missing or longer than "
				 "layers * groups", path);
		goto out;
	}
	q->nsections = json_array_size(secs);
	if (q->nsections && !(q->sections = calloc(q->nsections, sizeof(*q->sections)))) {
		ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
		goto out;
	}
	uint64_t end = q->codebook ? CODEBOOK_BYTES + CRC_BYTES : 0;
	for (size_t i = 0; i < q->nsections; i++) {
		struct sf_sfq_section *s = &q->sections[i];
		if ((ret = parse_section(path, where, q, json_array_get(secs, i), i, s, e)))
			goto out;
		if (i && cmp_section(&q->sections[i - 1], s) >= 0) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: layer %d %s: sections out of order or "
					 "repeated", path, s->layer, sf_group_name(s->group));
			goto out;
		}
		if (s->offset % SF_SFQ_ALIGN || s->offset < end || s->offset > data_size ||
		    s->bytes + CRC_BYTES > data_size - s->offset) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: layer %d %s: %" PRIu64 " bytes at %"
					 PRIu64 ": not aligned, overlapping, or beyond the %" PRIu64
					 " data bytes (truncated?)", path, s->layer,
					 sf_group_name(s->group), s->bytes, s->offset, data_size);
			goto out;
		}
		s->data = d + data_start + s->offset;
		end = s->offset + s->bytes + CRC_BYTES;
	}
	/* the bytes against their CRCs, once every offset is known good */
	if ((ret = check_crc(path, "header", d + PREFIX_BYTES, hlen, e)) ||
	    (cb_at && (ret = check_crc(path, "codebook", cb_at, CODEBOOK_BYTES, e))))
		goto out;
	for (size_t i = 0; i < q->nsections; i++) {
		const struct sf_sfq_section *s = &q->sections[i];
		char name[64];
		snprintf(name, sizeof(name), "layer %d %s", s->layer, sf_group_name(s->group));
		if ((ret = check_crc(path, name, s->data, s->bytes, e)))
			goto out;
	}
out:
	json_decref(h);
	if (ret)
		sf_sfq_close(q);
	return ret;
}

// ----------------------------------------------------------------------------
// .sfq writer

struct sf_sfq_writer {
	struct sf_outfile out;
	size_t nsections, next;
	uint64_t *offsets, *bytes;
	uint64_t pos;		/* bytes of the data region written */
};

static json_t *header_json(const struct sf_sfq *d, const uint64_t *offsets)
{
	json_t *h = json_object(), *secs = json_array(), *cb = json_null();
	if (d->method == SF_CODES_TRELLIS)
		cb = json_pack("{s:I,s:I,s:s,s:I}", "offset", (json_int_t)0, "bytes",
			       (json_int_t)CODEBOOK_BYTES, "dtype", "F32", "entries",
			       (json_int_t)SF_TRELLIS_CODEBOOK);
	json_object_set_new(h, "format", json_string("sparseflash codes"));
	sf_fingerprint_put(h, &d->fingerprint);
	json_object_set_new(h, "method", json_string(sf_codes_method_name(d->method)));
	json_object_set_new(h, "seed", json_integer((json_int_t)d->seed));
	json_object_set_new(h, "scale_dtype", json_string("F16"));
	json_object_set_new(h, "model",
			    json_pack("{s:i,s:i,s:i,s:i,s:i,s:i}", "dim", d->shape.dim,
				      "hidden_dim", d->shape.hidden_dim, "n_layers",
				      d->shape.n_layers, "n_heads", d->shape.n_heads, "n_kv_heads",
				      d->shape.n_kv_heads, "head_dim", d->shape.head_dim));
	json_object_set(h, "producer", d->producer ? d->producer : json_null());
	json_object_set_new(h, "codebook", cb);
	for (size_t i = 0; i < d->nsections; i++) {
		const struct sf_sfq_section *s = &d->sections[i];
		json_t *mats = json_array();
		for (int k = 0; k < s->nmat; k++)
			json_array_append_new(mats, json_pack("{s:s,s:I,s:I}", "name", s->mat[k].name,
							      "rows", (json_int_t)s->mat[k].rows,
							      "col_bytes",
							      (json_int_t)s->mat[k].col_bytes));
		json_array_append_new(secs, json_pack("{s:i,s:s,s:I,s:o,s:I,s:I,s:I}", "layer",
						      s->layer, "group", sf_group_name(s->group),
						      "entries", (json_int_t)s->entries, "matrices",
						      mats, "entry_bytes", (json_int_t)s->entry_bytes,
						      "offset", (json_int_t)offsets[i], "bytes",
						      (json_int_t)s->bytes));
	}
	json_object_set_new(h, "sections", secs);
	return h;
}

static int wr(struct sf_sfq_writer *w, const void *p, size_t n, struct sf_err *e)
{
	if (n && fwrite(p, 1, n, w->out.f) != n)
		return sf_err_set(e, -errno ? -errno : -EIO, "%s: %s", w->out.name,
				  strerror(errno ? errno : EIO));
	return 0;
}

static int wr_crc(struct sf_sfq_writer *w, uint32_t crc, struct sf_err *e)
{
	uint8_t b[CRC_BYTES];
	sf_put_le32(b, crc);
	return wr(w, b, sizeof(b), e);
}

static int pad_to(struct sf_sfq_writer *w, uint64_t target, struct sf_err *e)
{
	static const unsigned char zeros[SF_SFQ_ALIGN];
	while (w->pos < target) {
		size_t n = target - w->pos < sizeof(zeros) ? (size_t)(target - w->pos) : sizeof(zeros);
		int ret = wr(w, zeros, n, e);
		if (ret)
			return ret;
		w->pos += n;
	}
	return 0;
}

void sf_sfq_writer_abort(struct sf_sfq_writer *w)
{
	if (!w)
		return;
	sf_outfile_abort(&w->out);
	free(w->offsets);
	free(w->bytes);
	free(w);
}

int sf_sfq_writer_open(struct sf_sfq_writer **out, const char *path, const struct sf_sfq *d,
		       const char *const *inputs, struct sf_err *e)
{
	struct sf_sfq_writer *w = calloc(1, sizeof(*w));
	json_t *h = NULL;
	char *text = NULL;
	int ret = 0;

	*out = NULL;
	if (!w || !(w->offsets = calloc(d->nsections + 1, sizeof(uint64_t))) ||
	    !(w->bytes = calloc(d->nsections + 1, sizeof(uint64_t)))) {
		ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
		goto out;
	}
	w->out.fd = -1;
	w->nsections = d->nsections;
	uint64_t pos = d->method == SF_CODES_TRELLIS ? CODEBOOK_BYTES + CRC_BYTES : 0;
	for (size_t i = 0; i < d->nsections; i++) {
		w->offsets[i] = pos = align_up(pos);
		w->bytes[i] = d->sections[i].bytes;
		pos += w->bytes[i] + CRC_BYTES;
	}
	if ((ret = sf_outfile_open(&w->out, path, SF_OUT_BINARY, inputs, e)))
		goto out;
	h = header_json(d, w->offsets);
	if (!h || !(text = json_dumps(h, JSON_COMPACT))) {
		ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
		goto out;
	}
	uint64_t hlen = strlen(text);
	uint8_t prefix[PREFIX_BYTES];
	memcpy(prefix, SF_SFQ_MAGIC, 8);
	sf_put_le32(prefix + 8, SF_SFQ_VERSION);
	sf_put_le32(prefix + 12, 0);
	sf_put_le64(prefix + 16, hlen);
	w->pos = 0;
	if ((ret = wr(w, prefix, sizeof(prefix), e)) || (ret = wr(w, text, hlen, e)) ||
	    (ret = wr_crc(w, sf_crc32c(0, text, hlen), e)))
		goto out;
	/* pad the header to the data region, counting from the file start */
	w->pos = PREFIX_BYTES + hlen + CRC_BYTES;
	if ((ret = pad_to(w, align_up(w->pos), e)))
		goto out;
	w->pos = 0;
	if (d->method == SF_CODES_TRELLIS) {
		uint8_t buf[4096];
		uint32_t crc = 0;
		for (size_t i = 0; i < SF_TRELLIS_CODEBOOK; i += 1024) {
			for (size_t k = 0; k < 1024; k++) {
				uint32_t u;
				memcpy(&u, &d->codebook[i + k], 4);
				sf_put_le32(buf + 4 * k, u);
			}
			crc = sf_crc32c(crc, buf, sizeof(buf));
			if ((ret = wr(w, buf, sizeof(buf), e)))
				goto out;
		}
		if ((ret = wr_crc(w, crc, e)))
			goto out;
		w->pos = CODEBOOK_BYTES + CRC_BYTES;
	}
out:
	free(text);
	json_decref(h);
	if (ret)
		sf_sfq_writer_abort(w);
	else
		*out = w;
	return ret;
}

int sf_sfq_writer_section(struct sf_sfq_writer *w, const void *data, uint64_t len,
			  struct sf_err *e)
{
	int ret;
	if (w->next >= w->nsections || len != w->bytes[w->next])
		return sf_err_set(e, -EINVAL, "%s: section %zu of %" PRIu64 " bytes not expected",
				  w->out.name, w->next, len);
	if ((ret = pad_to(w, w->offsets[w->next], e)) || (ret = wr(w, data, (size_t)len, e)) ||
	    (ret = wr_crc(w, sf_crc32c(0, data, (size_t)len), e)))
		return ret;
	w->pos += len + CRC_BYTES;
	w->next++;
	return 0;
}

int sf_sfq_writer_close(struct sf_sfq_writer *w, struct sf_err *e)
{
	int ret;
	if (w->next != w->nsections)
		ret = sf_err_set(e, -EINVAL, "%s: %zu of %zu sections written", w->out.name, w->next,
				 w->nsections);
	else
		ret = sf_outfile_commit(&w->out, e);
	sf_sfq_writer_abort(w);
	return ret;
}

// ----------------------------------------------------------------------------
// merge

struct merge_src {
	const struct sf_sfq_section *sec;
	const void *data;
};

static int cmp_src(const void *a, const void *b)
{
	return cmp_section(((const struct merge_src *)a)->sec, ((const struct merge_src *)b)->sec);
}

int sf_sfq_merge(const char *path, const char *const *inputs, size_t n, json_t *producer,
		 struct sf_err *e)
{
	struct sf_sfq *in = calloc(n, sizeof(*in));
	const char **names = calloc(n + 1, sizeof(*names));	/* inputs, NULL-terminated */
	struct merge_src *src = NULL;
	struct sf_sfq out = { 0 };
	struct sf_sfq_writer *w = NULL;
	size_t total = 0, opened = 0;
	int ret = 0;

	if (!in || !names) {
		ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct sf_sfq *a = &in[i], *f = &in[0];
		if ((ret = sf_sfq_open(a, inputs[i], e)))
			goto out;
		opened++;	/* closed at out, whatever is refused below */
		if (i && (ret = sf_fingerprint_check(&a->fingerprint, inputs[i], "codes",
						     &f->fingerprint, inputs[0], e)))
			goto out;
		if (i && (a->method != f->method || a->seed != f->seed ||
			  (a->codebook && memcmp(a->codebook, f->codebook, CODEBOOK_BYTES) != 0))) {
			ret = sf_err_set(e, SF_EMISMATCH, "%s: %s codes with seed %" PRIu64 ", %s has "
					 "%s with seed %" PRIu64, inputs[i],
					 sf_codes_method_name(a->method), a->seed, inputs[0],
					 sf_codes_method_name(f->method), f->seed);
			goto out;
		}
		total += a->nsections;
	}
	if (!(src = calloc(total + 1, sizeof(*src))) ||
	    !(out.sections = calloc(total + 1, sizeof(*out.sections)))) {
		ret = sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
		goto out;
	}
	total = 0;
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; k < in[i].nsections; k++)
			src[total++] = (struct merge_src){ &in[i].sections[k], in[i].sections[k].data };
	qsort(src, total, sizeof(*src), cmp_src);
	for (size_t i = 0; i < total; i++) {
		if (i && cmp_section(src[i - 1].sec, src[i].sec) == 0) {
			ret = sf_err_set(e, SF_EMISMATCH, "%s: layer %d %s is in two inputs", path,
					 src[i].sec->layer, sf_group_name(src[i].sec->group));
			goto out;
		}
		out.sections[i] = *src[i].sec;
	}
	out.fingerprint = in[0].fingerprint;
	out.method = in[0].method;
	out.seed = in[0].seed;
	out.shape = in[0].shape;
	out.codebook = in[0].codebook;
	out.producer = producer;
	out.nsections = total;
	memcpy(names, inputs, n * sizeof(*names));
	if ((ret = sf_sfq_writer_open(&w, path, &out, names, e)))
		goto out;
	for (size_t i = 0; i < total; i++)
		if ((ret = sf_sfq_writer_section(w, src[i].data, src[i].sec->bytes, e)))
			goto out;
	ret = sf_sfq_writer_close(w, e);
	w = NULL;
out:
	sf_sfq_writer_abort(w);
	free(out.sections);
	free(src);
	free(names);
	for (size_t i = 0; i < opened && in; i++)
		sf_sfq_close(&in[i]);
	free(in);
	return ret;
}

json_t *sf_sfq_info_json(const struct sf_sfq *q)
{
	json_t *o = json_object(), *secs = json_array();
	sf_fingerprint_put(o, &q->fingerprint);
	json_object_set_new(o, "method", json_string(sf_codes_method_name(q->method)));
	json_object_set_new(o, "seed", json_integer((json_int_t)q->seed));
	json_object_set(o, "producer", q->producer ? q->producer : json_null());
	if (q->codebook) {
		char hex[17];
		snprintf(hex, sizeof(hex), "%016" PRIx64,
			 sf_fnv64(SF_FNV64_BASIS, q->codebook, CODEBOOK_BYTES));
		json_object_set_new(o, "codebook_fnv64", json_string(hex));
	}
	for (size_t i = 0; i < q->nsections; i++) {
		const struct sf_sfq_section *s = &q->sections[i];
		char hex[17];
		snprintf(hex, sizeof(hex), "%016" PRIx64, sf_fnv64(SF_FNV64_BASIS, s->data, s->bytes));
		json_array_append_new(secs, json_pack("{s:i,s:s,s:I,s:I,s:s}", "layer", s->layer,
						      "group", sf_group_name(s->group), "entries",
						      (json_int_t)s->entries, "bytes",
						      (json_int_t)s->bytes, "fnv64", hex));
	}
	json_object_set_new(o, "sections", secs);
	return o;
}
