/* Unit test of lib/common/formats/image.c: images of the embedded mix4-1m packed
 * with identity and shuffled placements, every dtype, codes (scalar and
 * trellis), resident groups and --keep read back weight by weight (q8 and
 * q4: column by column, quantized as the packer does) against
 * the model; the model and tokenizer rebuilt from an image; every region
 * damaged in turn, truncation, another version, header offsets past the
 * end and overlapping regions refused; mismatched inputs refused. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/quant.h"
#include "formats/codes.h"
#include "engine/forward.h"
#include "formats/image.h"
#include "imagetest.h"
#include "engine/kernels.h"
#include "formats/model.h"
#include "formats/placement.h"
#include "engine/tokenizer.h"
#include "unit.h"

static char tmpdir[4096], model_dir[4096];
static struct sf_model M;

static void check_err_at(int line, int ret, const struct sf_err *e, const char *want)
{
	if (getenv("UNIT_VERBOSE"))
		fprintf(stderr, "line %d: %s\n", line, e->msg);
	CHECK(ret < 0, "line %d: returned %d, expected an error", line, ret);
	CHECK(!strchr(e->msg, '\n'), "line %d: message '%s' is not one line", line, e->msg);
	CHECK(strstr(e->msg, want), "line %d: message '%s' lacks '%s'", line, e->msg, want);
}
#define CHECK_ERR(ret, e, want) check_err_at(__LINE__, ret, e, want)

// --- inputs (tests/unit/imagetest.h)

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static int pack(const char *name, const struct sf_placement *pl, const struct sf_sfq *q,
		const struct sf_image_keep *k, unsigned resident, int dtype, struct sf_err *e)
{
	return imagetest_pack(tmpdir, name, &M, model_dir, pl, q, k, resident, dtype, e);
}

static void image_path(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "%s/%s", tmpdir, name);
}

// --- read-back checks

/* The bytes a weight element becomes in dtype dt, computed independently. */
static void expect(const struct sf_weight *w, uint64_t i, enum sf_dtype dt, uint8_t *out)
{
	const uint8_t *s = (const uint8_t *)w->data + i * sf_dtype_size(w->dtype);
	float f;

	if (w->dtype == dt) {
		memcpy(out, s, sf_dtype_size(dt));
		return;
	}
	if (w->dtype == SF_DTYPE_F32) {
		memcpy(&f, s, 4);
	} else {
		uint16_t h;
		memcpy(&h, s, 2);
		f = w->dtype == SF_DTYPE_BF16 ? sf_bf16_to_f32(h) : sf_f16_to_f32(h);
	}
	if (dt == SF_DTYPE_F32) {
		memcpy(out, &f, 4);
	} else {
		uint16_t h = dt == SF_DTYPE_BF16 ? sf_f32_to_bf16(f) : sf_f32_to_f16(f);
		memcpy(out, &h, 2);
	}
}

static uint8_t *read_region(const struct sf_image *img, const struct sf_image_region *r)
{
	uint8_t *b = malloc(r->length ? (size_t)r->length : 1);
	CHECK(pread(img->fd, b, (size_t)r->length, (off_t)r->offset) == (ssize_t)r->length,
	      "read %s", r->name);
	return b;
}

/* Every position's bundle equals the model's columns, every middle entry
 * the codes' record of the entry; returns the weights compared. */
static uint64_t check_image(const char *name, const struct sf_placement *pl,
			    const struct sf_sfq *q, const struct sf_image_keep *k, unsigned resident,
			    int dtype)
{
	char path[4200];
	struct sf_image img;
	struct sf_err e = { 0 };
	uint64_t compared = 0, bad = 0;

	image_path(path, sizeof(path), name);
	if (sf_image_open(&img, path, &e)) {
		CHECK(0, "%s: %s", name, e.msg);
		return 0;
	}
	CHECK(!memcmp(&img.fingerprint, &M.fingerprint, sizeof(M.fingerprint)), "%s: fingerprint %s",
	      name, img.fingerprint.weights);
	CHECK(!sf_image_verify(&img, &e), "%s: %s", name, e.msg);
	CHECK(img.has_codes == !!q, "%s: codes", name);
	if (q && q->method == SF_CODES_TRELLIS)
		CHECK(img.codebook && !memcmp(img.codebook, q->codebook,
					       SF_TRELLIS_CODEBOOK * sizeof(float)), "%s: codebook", name);
	for (int l = 0; l < M.cfg.n_layers; l++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			const struct sf_image_group *G = sf_image_group(&img, l, (enum sf_group)g);
			const struct sf_weight *w[SF_GROUP_MAX_MATRICES];
			const char *names[SF_GROUP_MAX_MATRICES];
			int nmat = sf_codes_group_matrices(&M, l, (enum sf_group)g, w, names);
			uint32_t n = (uint32_t)sf_group_entries(&M.cfg, (enum sf_group)g);
			const uint8_t *kept = k && k->count[l] < k->hidden ?
					      k->kept + (size_t)l * k->hidden : NULL;

			CHECK(G->resident == (int)(resident >> g & 1), "%s: layer %d %s resident", name,
			      l, sf_group_name((enum sf_group)g));
			CHECK(G->nmat == nmat, "nmat");
			if (G->resident)
				continue;
			/* the positions: the placement's order, left-out neurons skipped */
			const struct sf_placement_group *pg = NULL;
			for (int i = 0; pl && i < pl->ngroups; i++)
				if (pl->groups[i].layer == l && pl->groups[i].group == (enum sf_group)g)
					pg = &pl->groups[i];
			uint32_t np = 0;
			for (uint32_t p = 0; p < n; p++) {
				uint32_t j = pg ? pg->perm[p] : p;
				if (g == SF_GROUP_FFN_OUT && kept && !kept[j]) {
					CHECK(G->pos[j] == SF_IMAGE_ABSENT, "left-out neuron %u on flash", j);
					continue;
				}
				CHECK(np < G->entries && G->perm[np] == j && G->pos[j] == np,
				      "%s: layer %d %s position %u: entry %u, expected %u", name, l,
				      sf_group_name((enum sf_group)g), np, np < G->entries ? G->perm[np] : 0, j);
				np++;
			}
			CHECK(np == G->entries, "%s: %u positions, expected %u", name, G->entries, np);
			CHECK(!strcmp(G->method, pg ? "frequency" : "identity"), "method %s", G->method);
			uint8_t *top = read_region(&img, G->top);
			uint8_t want[4];
			for (uint32_t p = 0; p < G->entries; p++) {
				uint64_t off, len;
				sf_image_top_range(G, p, p + 1, &off, &len);
				CHECK(len == G->top_bytes && off == G->top->offset + p * G->top_bytes, "range");
				for (int i = 0; i < nmat; i++) {
					const struct sf_image_matrix *X = &G->mat[i];
					enum sf_dtype dt = dtype == SF_IMAGE_DTYPE_KEEP ? w[i]->dtype
										  : (enum sf_dtype)dtype;
					uint64_t es = sf_dtype_size(dt), r = 0;
					CHECK(X->dtype == dt, "dtype");
					CHECK(X->offset % es == 0 && G->top_bytes % es == 0, "alignment");
					for (uint64_t row = 0; row < w[i]->rows; row++) {
						if (g == SF_GROUP_FFN_IN && kept && !kept[row])
							continue;	/* left out */
						expect(w[i], row * w[i]->cols + G->perm[p], dt, want);
						bad += memcmp(top + (uint64_t)p * G->top_bytes + X->offset +
							      r * es, want, es) != 0;
						if (G->rows)
							bad += G->rows[r] != row;
						r++;
						compared++;
					}
					CHECK(r == X->rows, "%s: %" PRIu64 " rows, expected %" PRIu64, name,
					      X->rows, r);
				}
			}
			free(top);
			if (q) {
				const struct sf_sfq_section *s = sf_sfq_find(q, l, (enum sf_group)g);
				uint8_t *mid = read_region(&img, G->mid);
				CHECK(G->mid_bytes == s->entry_bytes, "mid bytes");
				for (uint32_t p = 0; p < G->entries; p++)
					bad += memcmp(mid + (uint64_t)p * G->mid_bytes,
						      s->data + (uint64_t)G->perm[p] * s->entry_bytes,
						      (size_t)s->entry_bytes) != 0;
				/* the view the decoder gets addresses the same records */
				for (int i = 0; i < nmat; i++) {
					struct sf_codes_view v = sf_image_mid_view(&img, G, i, mid);
					struct sf_codes_view u = sf_sfq_view(q, s, i);
					uint32_t p = G->entries - 1;
					CHECK(v.m == u.m && !memcmp(v.base + p * v.stride,
								    u.base + G->perm[p] * u.stride,
								    sf_codes_col_bytes(v.method, v.m)),
					      "mid view");
				}
				free(mid);
			} else {
				CHECK(!G->mid && !G->mid_bytes, "a middle tier without codes");
			}
		}
	CHECK(!bad, "%s: %" PRIu64 " weights or records differ", name, bad);
	sf_image_close(&img);
	return compared;
}

/* A q8 or q4 image (packed with rtn): every column of every bundle is
 * sf_quant_column of the model's column (its kept rows with --keep) at
 * its offset, offsets 2-aligned and the stride their sum. */
static void check_quant_image(const char *name, const struct sf_image_keep *k,
			      unsigned resident, enum sf_dtype dt)
{
	char path[4200];
	struct sf_image img;
	struct sf_err e = { 0 };
	uint64_t bad = 0, cols = 0;

	image_path(path, sizeof(path), name);
	if (sf_image_open(&img, path, &e) || sf_image_verify(&img, &e)) {
		CHECK(0, "%s: %s", name, e.msg);
		sf_image_close(&img);
		return;
	}
	for (int l = 0; l < M.cfg.n_layers; l++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			const struct sf_image_group *G = sf_image_group(&img, l, (enum sf_group)g);
			const struct sf_weight *w[SF_GROUP_MAX_MATRICES];
			const char *names[SF_GROUP_MAX_MATRICES];
			sf_codes_group_matrices(&M, l, (enum sf_group)g, w, names);
			const uint8_t *kept = k && k->count[l] < k->hidden ?
					      k->kept + (size_t)l * k->hidden : NULL;
			CHECK(G->resident == (int)(resident >> g & 1), "%s: resident", name);
			for (int i = 0; G->resident && i < G->nmat; i++)
				CHECK(!sf_dtype_is_block(G->mat[i].dtype), "%s: resident in %s", name,
				      sf_dtype_name(G->mat[i].dtype));
			if (G->resident)
				continue;
			uint8_t *top = read_region(&img, G->top);
			uint64_t end = 0;
			for (int i = 0; i < G->nmat; i++) {
				const struct sf_image_matrix *X = &G->mat[i];
				uint64_t cb = sf_dtype_col_bytes(dt, X->rows);
				float *col = malloc((size_t)X->rows * sizeof(float));
				uint8_t *q = malloc((size_t)cb);
				CHECK(X->dtype == dt && X->offset == end + end % 2, "%s: layout", name);
				end = X->offset + cb;
				for (uint32_t p = 0; p < G->entries; p++, cols++) {
					uint64_t r = 0;
					for (uint64_t row = 0; row < w[i]->rows; row++)
						if (!(g == SF_GROUP_FFN_IN && kept && !kept[row]))
							col[r++] = sf_weight_at(w[i], row * w[i]->cols +
										G->perm[p]);
					CHECK(r == X->rows, "%s: rows", name);
					sf_quant_column(q, dt, col, (size_t)r, SF_QUANT_RTN);
					bad += memcmp(top + (uint64_t)p * G->top_bytes + X->offset, q,
						      (size_t)cb) != 0;
				}
				free(col);
				free(q);
			}
			CHECK(G->top_bytes == end + end % 2, "%s: top_bytes %" PRIu64 ", columns end "
			      "at %" PRIu64, name, G->top_bytes, end);
			free(top);
		}
	CHECK(!bad && cols > 1000, "%s: %" PRIu64 " of %" PRIu64 " columns differ", name, bad, cols);
	sf_image_close(&img);
}

/* SF_IMAGE_OPEN_DEFER_RESIDENT: the resident region unread (zeros, its
 * bytes counted in resident_unread) until sf_image_load_resident, then the
 * same bytes as a plain open; the model binds either way. */
static void check_deferred(const char *name)
{
	char path[4200];
	struct sf_image a, d;
	struct sf_model m;
	struct sf_err e = { 0 };

	image_path(path, sizeof(path), name);
	if (sf_image_open(&a, path, &e) ||
	    sf_image_open_flags(&d, path, SF_IMAGE_OPEN_DEFER_RESIDENT, &e)) {
		CHECK(0, "%s: %s", name, e.msg);
		sf_image_close(&a);
		return;
	}
	const struct sf_image_region *R = &a.regions[0];
	uint64_t len = a.regions[1].offset - R->offset;
	int zero = 1;
	for (uint64_t i = 0; i < len; i++)
		zero &= !((const uint8_t *)d.map)[R->offset + i];
	CHECK(len > 0 && d.resident_unread == len && !a.resident_unread, "%s: %llu unread of %llu",
	      name, (unsigned long long)d.resident_unread, (unsigned long long)len);
	CHECK(zero, "%s: the deferred region read before sf_image_load_resident", name);
	CHECK(!sf_image_model(&d, &m, &e), "%s: binding on the deferred region: %s", name, e.msg);
	sf_model_close(&m);
	CHECK(!sf_image_load_resident(&d, &e) && !sf_image_load_resident(&d, &e), "%s: %s", name,
	      e.msg);
	CHECK(!d.resident_unread && d.map_size == a.map_size &&
	      !memcmp(d.map, a.map, a.map_size), "%s: the loaded region differs", name);
	sf_image_close(&d);
	sf_image_close(&a);
}

/* The model rebuilt from an image: fingerprint, resident weights byte for
 * byte, flash matrices without data; with everything resident the forward
 * pass gives the dense model's logits exactly. */
static void check_model(const char *name, unsigned resident)
{
	char path[4200];
	struct sf_image img;
	struct sf_model m;
	struct sf_err e = { 0 };

	image_path(path, sizeof(path), name);
	if (sf_image_open(&img, path, &e)) {
		CHECK(0, "%s", e.msg);
		return;
	}
	CHECK(!sf_image_model(&img, &m, &e), "%s", e.msg);
	CHECK(!memcmp(&m.fingerprint, &M.fingerprint, sizeof(M.fingerprint)), "fingerprint %s",
	      m.fingerprint.weights);
	CHECK(!memcmp(m.embed.data, M.embed.data, M.embed.rows * M.embed.cols * 2), "embed");
	for (int l = 0; l < M.cfg.n_layers; l++) {
		CHECK(!memcmp(m.layers[l].attn_norm.data, M.layers[l].attn_norm.data, M.cfg.dim * 2),
		      "norm");
		for (int g = 0; g < SF_NGROUPS; g++) {
			const struct sf_weight *a[3], *b[3];
			const char *nm[3];
			int n = sf_codes_group_matrices(&m, l, (enum sf_group)g, a, nm);
			sf_codes_group_matrices(&M, l, (enum sf_group)g, b, nm);
			for (int i = 0; i < n; i++) {
				CHECK(a[i]->rows == b[i]->rows && a[i]->cols == b[i]->cols, "shape");
				if (resident >> g & 1)
					CHECK(a[i]->data && !memcmp(a[i]->data, b[i]->data,
								    b[i]->rows * b[i]->cols * 2), "resident %s", nm[i]);
				else
					CHECK(!a[i]->data, "flash %s has data", nm[i]);
			}
		}
	}
	if (resident == (1u << SF_NGROUPS) - 1) {
		struct sf_runstate s1 = { 0 }, s2 = { 0 };
		CHECK(!sf_state_init(&s1, &M.cfg, 8, &e) && !sf_state_init(&s2, &m.cfg, 8, &e), "state");
		int32_t toks[4] = { 1, 57, 300, 12 };
		for (int p = 0; p < 4; p++) {
			float *x = sf_forward(&M, &s1, toks[p], p), *y = sf_forward(&m, &s2, toks[p], p);
			CHECK(!memcmp(x, y, (size_t)M.cfg.vocab_size * sizeof(float)), "logits at %d", p);
		}
		sf_state_free(&s1);
		sf_state_free(&s2);
	}
	/* the tokenizer from the header encodes as the directory's */
	struct sf_tokenizer *t1 = NULL, *t2 = NULL;
	int32_t *i1 = NULL, *i2 = NULL;
	size_t n1 = 0, n2 = 0;
	const char *text = "In the beginning God created the heaven and the earth.";
	CHECK(!sf_tokenizer_open(&t1, model_dir, &e), "%s", e.msg);
	CHECK(!sf_tokenizer_open_image(&t2, &img, &e), "%s", e.msg);
	if (t1 && t2) {
		CHECK(!sf_tokenizer_encode(t1, text, strlen(text), 1, &i1, &n1, &e), "%s", e.msg);
		CHECK(!sf_tokenizer_encode(t2, text, strlen(text), 1, &i2, &n2, &e), "%s", e.msg);
		CHECK(n1 == n2 && n1 > 2 && !memcmp(i1, i2, n1 * sizeof(*i1)), "tokens differ");
	}
	free(i1);
	free(i2);
	sf_tokenizer_close(t1);
	sf_tokenizer_close(t2);
	sf_model_close(&m);
	sf_image_close(&img);
}

// --- damage

static int copy_file(const char *src, const char *dst)
{
	FILE *a = fopen(src, "rb"), *b = fopen(dst, "wb");
	char buf[1 << 16];
	size_t n;
	int ret = a && b ? 0 : -1;

	while (!ret && (n = fread(buf, 1, sizeof(buf), a)) > 0)
		ret = fwrite(buf, 1, n, b) == n ? 0 : -1;
	if (a)
		fclose(a);
	if (b && fclose(b))
		ret = -1;
	return ret;
}

static void flip(const char *path, uint64_t off)
{
	int fd = open(path, O_RDWR);
	unsigned char c = 0;
	CHECK(fd >= 0 && pread(fd, &c, 1, (off_t)off) == 1, "read %s", path);
	c ^= 0x10;
	CHECK(pwrite(fd, &c, 1, (off_t)off) == 1, "write %s", path);
	close(fd);
}

/* Rewrites the header JSON (which must still fit before the first region)
 * with a valid CRC, so the reader's later checks are reached. */
static void patch_header(const char *path, void (*fn)(json_t *h))
{
	int fd = open(path, O_RDWR);
	unsigned char pre[SF_IMAGE_PREAMBLE];
	CHECK(fd >= 0 && pread(fd, pre, sizeof(pre), 0) == (ssize_t)sizeof(pre), "read");
	uint64_t hlen = sf_get_le64(pre + 16);
	char *text = malloc((size_t)hlen);
	CHECK(pread(fd, text, (size_t)hlen, SF_IMAGE_PREAMBLE) == (ssize_t)hlen, "read");
	json_t *h = json_loadb(text, (size_t)hlen, 0, NULL);
	uint64_t first = (uint64_t)json_integer_value(
		json_object_get(json_array_get(json_object_get(h, "regions"), 0), "offset"));
	fn(h);
	free(text);
	text = json_dumps(h, JSON_COMPACT);
	uint64_t nlen = strlen(text);
	CHECK(SF_IMAGE_PREAMBLE + nlen <= first, "patched header does not fit");
	char *zeros = calloc(1, (size_t)first);
	CHECK(pwrite(fd, zeros, (size_t)first, 0) == (ssize_t)first, "write");
	sf_put_le64(pre + 16, nlen);
	sf_put_le32(pre + 24, sf_crc32c(0, text, (size_t)nlen));
	CHECK(pwrite(fd, pre, sizeof(pre), 0) == (ssize_t)sizeof(pre), "write");
	CHECK(pwrite(fd, text, (size_t)nlen, SF_IMAGE_PREAMBLE) == (ssize_t)nlen, "write");
	close(fd);
	free(zeros);
	free(text);
	json_decref(h);
}

static json_t *region(json_t *h, size_t i)
{
	return json_array_get(json_object_get(h, "regions"), i);
}

static void past_end(json_t *h)
{
	json_t *r = region(h, json_array_size(json_object_get(h, "regions")) - 1);
	json_object_set_new(r, "offset", json_integer(json_integer_value(json_object_get(r, "offset")) +
						      (1 << 20)));
}

static void region_name(json_t *h)
{
	json_object_set_new(region(h, 2), "name", json_string("layer 0\nattn_in top"));
}

static void overlap(json_t *h)
{
	json_object_set(region(h, 3), "offset", json_object_get(region(h, 2), "offset"));
}

/* Layer 0 attn_in (a q4 image's) a byte shorter, or resident in Q4. */
static void q4_stride(json_t *h)
{
	json_t *g = json_array_get(json_object_get(h, "groups"), 0);
	json_object_set_new(g, "top_bytes",
			    json_integer(json_integer_value(json_object_get(g, "top_bytes")) - 2));
}

static void q4_resident(json_t *h)
{
	json_t *g = json_array_get(json_object_get(h, "groups"), 1);
	json_object_set_new(json_array_get(json_object_get(g, "matrices"), 0), "dtype",
			    json_string("Q4"));
}

static void bad_perm(json_t *h)
{
	/* layer 1 ffn_out's permutation past the end of the index region */
	json_t *g = json_array_get(json_object_get(h, "groups"), 7);
	json_object_set_new(g, "perm", json_integer(1 << 30));
}

static void open_fails(const char *path, const char *want, int line)
{
	struct sf_image img;
	struct sf_err e = { 0 };
	int ret = sf_image_open(&img, path, &e);
	check_err_at(line, ret, &e, want);
	if (!ret)
		sf_image_close(&img);
}

static void verify_fails(const char *path, const char *want, int line)
{
	struct sf_image img;
	struct sf_err e = { 0 };
	int ret = sf_image_open(&img, path, &e);
	if (!ret) {
		ret = sf_image_verify(&img, &e);
		sf_image_close(&img);
	}
	check_err_at(line, ret, &e, want);
}

// --- a mixture of experts (a Mixtral by mkmodel, when the fixture is built)

static void experts_count3(json_t *h)
{
	json_object_set_new(json_object_get(h, "experts"), "count", json_integer(3));
}

static void experts_none(json_t *h)
{
	json_object_set_new(h, "experts", json_null());
}

static void experts_order_twice(json_t *h)
{
	json_object_set_new(json_object_get(h, "experts"), "order",
			    json_loads("[[0, 0, 1, 2], [0, 1, 2, 3]]", 0, NULL));
}

static void experts_order_short(json_t *h)
{
	json_object_set_new(json_object_get(h, "experts"), "order", json_loads("[[0, 1, 2, 3]]", 0, NULL));
}

static void experts_record(json_t *h)
{
	json_t *x = json_object_get(h, "experts");
	json_object_set_new(x, "record_bytes",
			    json_integer(json_integer_value(json_object_get(x, "record_bytes")) + 4096));
}

static void experts_same_region(json_t *h)
{
	json_t *r = json_object_get(json_object_get(h, "experts"), "regions");
	json_array_set(r, 1, json_array_get(r, 0));
}

static void experts_down_offset(json_t *h)
{
	json_t *m = json_array_get(json_object_get(json_object_get(h, "experts"), "matrices"), 2);
	json_object_set_new(m, "offset", json_integer(json_integer_value(json_object_get(m, "offset")) + 64));
}

/* MXFP4 rows are a model's own: never another dtype's source, never
 * quantized from another's */
static void experts_from_mxfp4(json_t *h)
{
	json_object_set_new(json_object_get(h, "experts"), "source_dtype", json_string("MXFP4"));
}

static void experts_to_mxfp4(json_t *h)
{
	json_object_set_new(json_object_get(h, "experts"), "dtype", json_string("MXFP4"));
}

static void experts_ffn_on_flash(json_t *h)
{
	json_object_set_new(json_array_get(json_object_get(h, "groups"), SF_GROUP_FFN_IN), "resident",
			    json_false());
}

/* the config's expert count against the image's table */
static void experts_config(json_t *h)
{
	json_t *c = json_loads(json_string_value(json_object_get(h, "config")), 0, NULL);
	json_object_set_new(c, "num_local_experts", json_integer(5));
	char *t = json_dumps(c, JSON_COMPACT);
	json_object_set_new(h, "config", json_string(t));
	free(t);
	json_decref(c);
}

/* Every expert's record of img against m's weights, at its own slot, or
 * with reversed at slot 3 - x in layer 0 (a placement's order; layer 1
 * in id order). */
static void check_expert_records(const struct sf_image *img, const struct sf_model *m,
				 int reversed)
{
	for (int l = 0; l < m->cfg.n_layers; l++) {
		CHECK(sf_image_group(img, l, SF_GROUP_FFN_IN)->resident &&
		      !sf_image_group(img, l, SF_GROUP_FFN_OUT)->nmat, "layer %d FFN groups", l);
		for (int x = 0; x < 4; x++) {
			uint64_t off, len;
			struct sf_expert_weights w;
			const struct sf_expert_weights *want = &m->layers[l].experts[x];
			int slot = reversed && l == 0 ? 3 - x : x;
			sf_image_expert_range(img, l, x, &off, &len);
			CHECK(off % SF_IMAGE_ALIGN == 0 && off + len <= img->file_size &&
			      off == img->experts.layer[l]->offset + (uint64_t)slot * len,
			      "layer %d expert %d: range", l, x);
			uint8_t *rec = malloc((size_t)len);
			CHECK(pread(img->fd, rec, (size_t)len, (off_t)off) == (ssize_t)len, "read");
			sf_image_expert_weights(img, rec, &w);
			const struct sf_weight *got[3] = { &w.w_gate, &w.w_up, &w.w_down };
			const struct sf_weight *exp[3] = { &want->w_gate, &want->w_up, &want->w_down };
			for (int i = 0; i < 3; i++)
				CHECK(got[i]->rows == exp[i]->rows && got[i]->cols == exp[i]->cols &&
				      !memcmp(got[i]->data, exp[i]->data,
					      (size_t)(exp[i]->rows * exp[i]->cols * 2)),
				      "layer %d expert %d matrix %d", l, x, i);
			free(rec);
		}
	}
}

/* A random Mixtral packed: each expert's record holds its three matrices
 * byte for byte at the header's offsets, in the file; the router and the
 * FFN norms resident; the model bound from the image is the model's
 * shape. Expert tables that disagree with the config or the file: one
 * line each. */
static void check_experts(void)
{
	char args[4400], cmd[4400], dir[4200], path[4200], dst[4200];
	struct sf_model m, bound;
	struct sf_image img;
	struct sf_err e = { 0 };

	snprintf(args, sizeof(args), "--arch mixtral --experts 4 --experts-used 2 --hidden 64 "
		 "--intermediate 96 --heads 4 --kv-heads 2 --layers 2 --vocab 300 --seed 5 "
		 "--tokenizer '%s'", model_dir);
	if (unit_mkmodel(tmpdir, "mk-mixtral", args, dir, sizeof(dir), "images of experts"))
		return;
	CHECK(!sf_model_open(&m, dir, &e), "%s", e.msg);
	CHECK(!imagetest_pack(tmpdir, "moe.sfimg", &m, dir, NULL, NULL, NULL, 0,
			      SF_IMAGE_DTYPE_KEEP, &e), "%s", e.msg);
	image_path(path, sizeof(path), "moe.sfimg");
	CHECK(!sf_image_open(&img, path, &e), "%s", e.msg);
	CHECK(img.version == SF_IMAGE_VERSION && img.experts.count == 4 &&
	      img.experts.dtype == SF_DTYPE_BF16 && img.experts.record_bytes % SF_IMAGE_ALIGN == 0,
	      "experts table");
	check_expert_records(&img, &m, 0);
	CHECK(!sf_image_verify(&img, &e), "%s", e.msg);
	CHECK(!sf_image_model(&img, &bound, &e), "%s", e.msg);
	CHECK(bound.layers[1].router.data && !bound.layers[1].experts[3].w_down.data &&
	      !strcmp(bound.fingerprint.shape, m.fingerprint.shape), "bound mixture");
	sf_model_close(&bound);
	sf_image_close(&img);
	/* a placement of layer 0's experts (sf-place on their picks): the
	 * records in its order, each found where it lies */
	struct sf_placement pl = { 0 };
	const uint32_t rev[4] = { 3, 2, 1, 0 };
	CHECK(!sf_placement_init(&pl, &m.fingerprint, 1, &e) &&
	      !sf_placement_set(&pl, 0, 0, SF_GROUP_EXPERTS, 4, SF_PLACE_COACT, NULL, 0, 0, 0, rev,
				&e), "%s", e.msg);
	CHECK(!imagetest_pack(tmpdir, "moe-placed.sfimg", &m, dir, &pl, NULL, NULL, 0,
			      SF_IMAGE_DTYPE_KEEP, &e), "%s", e.msg);
	image_path(dst, sizeof(dst), "moe-placed.sfimg");
	CHECK(!sf_image_open(&img, dst, &e), "%s", e.msg);
	CHECK(img.experts.slot != NULL, "placed experts");
	check_expert_records(&img, &m, 1);
	CHECK(!sf_image_verify(&img, &e), "%s", e.msg);
	sf_image_close(&img);
	unlink(dst);
	/* a placement of another shape's experts */
	pl.groups[0].n = 5;
	CHECK_ERR(imagetest_pack(tmpdir, "x.sfimg", &m, dir, &pl, NULL, NULL, 0,
				 SF_IMAGE_DTYPE_KEEP, &e), &e,
		  "pl.json: layer 0 experts: 5 entries, the model has 4");
	pl.groups[0].n = 4;
	sf_placement_free(&pl);
	/* the tables against the config and the regions */
	image_path(dst, sizeof(dst), "moe-bad.sfimg");
	struct { void (*fn)(json_t *); const char *want; } bad[] = {
		{ experts_count3, "header: experts: count 3, the config gives 4 (num_local_experts)" },
		{ experts_none, "a mixture of 4 experts (config.json) without experts in the image" },
		{ experts_record, "header: experts: record_bytes" },
		{ experts_order_twice, "header: experts: order[0][1]: not an expert below 4, or one "
				       "named twice" },
		{ experts_order_short, "header: experts: \"order\" is not an array of 2" },
		{ experts_same_region, "region 4 is not layer 1's own experts region" },
		{ experts_down_offset, "matrices[2]: expected down of shape [64, 96] at offset" },
		{ experts_ffn_on_flash, "layer 0 ffn_in: on flash in a mixture of experts" },
		{ experts_config, "count 4, the config gives 5 (num_local_experts)" },
		{ experts_from_mxfp4, "header: experts: source_dtype missing, or not F32, F16, BF16 "
				      "or MXFP4 (dtype's own unless dtype is Q8, Q6 or Q4)" },
		{ experts_to_mxfp4, "header: experts: source_dtype missing, or not F32, F16, BF16" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		CHECK(!copy_file(path, dst), "copy");
		patch_header(dst, bad[i].fn);
		open_fails(dst, bad[i].want, __LINE__);
	}
	/* an image cut inside the last layer's experts */
	struct stat st;
	CHECK(!copy_file(path, dst) && !stat(dst, &st), "copy");
	CHECK(!truncate(dst, st.st_size - SF_IMAGE_ALIGN), "truncate");
	open_fails(dst, "region 'layer 1 experts'", __LINE__);
	unlink(dst);
	unlink(path);
	/* what a mixture's image cannot hold yet */
	struct sf_image_keep k = { 0 };
	CHECK_ERR(imagetest_pack(tmpdir, "x.sfimg", &m, dir, NULL, NULL, &k, 0, SF_IMAGE_DTYPE_KEEP,
				 &e), &e, "neurons.json: kept neurons of a mixture of experts");
	CHECK_ERR(imagetest_pack(tmpdir, "x.sfimg", &m, dir, NULL, NULL, NULL,
				 1u << SF_GROUP_FFN_IN, SF_IMAGE_DTYPE_KEEP, &e), &e,
		  "--resident ffn_in or ffn_out: a mixture's FFN is its experts");
	sf_model_close(&m);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0, "rm");
}

/* The embedding (tied: the head too) packed in q6, q8 and q4 rows: each
 * row sf_quant_column of the model's; the model bound from the image has
 * the model's shape fingerprint; its embedding lookups equal the whole
 * matrix dequantized at once, and its logits lie near the dense model's.
 * A norm claimed in a block dtype, and a block dtype without the model's
 * dtype beside it, refused. */
static void q6_norm(json_t *h)
{
	json_t *t, *a = json_object_get(h, "tensors");
	size_t i;
	json_array_foreach(a, i, t)
		if (!strcmp(json_string_value(json_object_get(t, "name")), "model.norm.weight"))
			json_object_set_new(t, "dtype", json_string("Q6"));
}

static void no_source_dtype(json_t *h)
{
	json_t *t, *a = json_object_get(h, "tensors");
	size_t i;
	json_array_foreach(a, i, t)
		json_object_del(t, "source_dtype");
}

static void check_quant_rows(enum sf_dtype dt)
{
	char path[4200], dst[4200];
	const char *dn = sf_dtype_name(dt);
	struct sf_image img;
	struct sf_model m;
	struct sf_err e = { 0 };
	struct sf_image_pack_opts o = { .model = &M, .model_dir = model_dir, .dtype = SF_DTYPE_Q4,
					.embed_dtype = (int)dt, .quant = SF_QUANT_SEARCH };
	size_t rows = (size_t)M.embed.rows, cols = (size_t)M.embed.cols;
	size_t rb = (size_t)sf_dtype_col_bytes(dt, cols);

	image_path(path, sizeof(path), "rows.sfimg");
	CHECK(M.cfg.tie_embeddings && cols % SF_QBLOCK == 0, "mix4-1m: tied, rows of whole blocks");
	CHECK(!sf_image_pack(path, &o, NULL, &e), "%s: %s", dn, e.msg);
	if (sf_image_open(&img, path, &e) || sf_image_verify(&img, &e) ||
	    sf_image_model(&img, &m, &e)) {
		CHECK(0, "%s: %s", dn, e.msg);
		sf_image_close(&img);
		return;
	}
	CHECK(m.embed.dtype == dt && m.lm_head.data == m.embed.data, "%s: embed %s", dn,
	      sf_dtype_name(m.embed.dtype));
	CHECK(!strcmp(m.fingerprint.shape, M.fingerprint.shape), "%s: shape fingerprint", dn);
	float *all = malloc(rows * cols * sizeof(float)), *row = malloc(cols * sizeof(float));
	uint8_t *q = malloc(rb);
	size_t bad = 0;
	for (size_t r = 0; r < rows; r++) {
		sf_weight_row(row, &M.embed, r);
		sf_quant_column(q, dt, row, cols, SF_QUANT_SEARCH);
		bad += memcmp((const uint8_t *)m.embed.data + r * rb, q, rb) != 0;
	}
	CHECK(!bad, "%s: %zu of %zu rows not the model's quantized", dn, bad, rows);
	for (size_t r = 0; r < rows; r++)	/* dequantize all: sf_q_weight element by element */
		for (size_t c = 0; c < cols; c++)
			all[r * cols + c] = sf_q_weight((const uint8_t *)m.embed.data + r * rb, dt,
							cols, c);
	for (size_t r = 0; r < rows; r++) {
		sf_weight_row(row, &m.embed, r);
		bad += memcmp(row, all + r * cols, cols * sizeof(float)) != 0;
	}
	CHECK(!bad, "%s: %zu lookups differ from the matrix dequantized", dn, bad);
	/* every group resident as the model's: the logits move by the head's rounding only */
	struct sf_model d;
	struct sf_image dimg;
	o.resident = (1u << SF_NGROUPS) - 1;
	image_path(dst, sizeof(dst), "rows-res.sfimg");
	CHECK(!sf_image_pack(dst, &o, NULL, &e), "%s", e.msg);
	if (!sf_image_open(&dimg, dst, &e) && !sf_image_model(&dimg, &d, &e)) {
		struct sf_runstate s1 = { 0 }, s2 = { 0 };
		CHECK(!sf_state_init(&s1, &M.cfg, 8, &e) && !sf_state_init(&s2, &d.cfg, 8, &e), "state");
		int32_t toks[4] = { 1, 57, 300, 12 };
		double worst = 0.0, spread = 0.0;
		for (int p = 0; p < 4; p++) {
			float *x = sf_forward(&M, &s1, toks[p], p), *y = sf_forward(&d, &s2, toks[p], p);
			for (int v = 0; x && y && v < M.cfg.vocab_size; v++) {
				worst = fmax(worst, fabs((double)x[v] - y[v]));
				spread = fmax(spread, fabs((double)x[v]));
			}
		}
		double tol = dt == SF_DTYPE_Q8 ? 0.02 : dt == SF_DTYPE_Q6 ? 0.06 : 0.25;
		CHECK(worst > 0.0 && worst < tol * spread, "%s: logits off by %.4g of %.4g", dn,
		      worst, spread);
		printf("%s rows: logits off by at most %.4g (largest %.4g)\n", dn, worst, spread);
		sf_state_free(&s1);
		sf_state_free(&s2);
		sf_model_close(&d);
	} else {
		CHECK(0, "%s", e.msg);
	}
	sf_image_close(&dimg);
	unlink(dst);
	if (dt == SF_DTYPE_Q6) {
		CHECK(!copy_file(path, dst), "copy");
		patch_header(dst, q6_norm);
		open_fails(dst, "tensors[", __LINE__);
		CHECK(!copy_file(path, dst), "copy");
		patch_header(dst, no_source_dtype);
		open_fails(dst, "source_dtype missing", __LINE__);
		unlink(dst);
	}
	free(all), free(row), free(q);
	sf_model_close(&m);
	sf_image_close(&img);
	unlink(path);
}

static void check_damage(const char *name)
{
	char src[4200], dst[4200];
	struct sf_image img;
	struct sf_err e = { 0 };

	image_path(src, sizeof(src), name);
	image_path(dst, sizeof(dst), "damaged.sfimg");
	if (sf_image_open(&img, src, &e)) {
		CHECK(0, "%s", e.msg);
		return;
	}
	/* a flipped byte in every region is found and the region named */
	for (size_t i = 0; i < img.nregions; i++) {
		const struct sf_image_region *r = &img.regions[i];
		char want[64];
		if (!r->length)
			continue;
		CHECK(!copy_file(src, dst), "copy");
		flip(dst, r->offset + imagetest_rnd(&rng, (uint32_t)r->length));
		snprintf(want, sizeof(want), "region '%s'", r->name);
		verify_fails(dst, want, __LINE__);
	}
	uint64_t size = img.file_size, first = img.regions[0].offset;
	sf_image_close(&img);
	CHECK(!copy_file(src, dst), "copy");
	flip(dst, SF_IMAGE_PREAMBLE + 10);
	open_fails(dst, "header: CRC-32C", __LINE__);
	CHECK(!copy_file(src, dst), "copy");
	flip(dst, first - 1);	/* padding after the header */
	verify_fails(dst, "padding after the header is not zero", __LINE__);
	CHECK(!copy_file(src, dst), "copy");
	CHECK(!truncate(dst, (off_t)(size - SF_IMAGE_ALIGN)), "truncate");
	open_fails(dst, "past the end of the file", __LINE__);
	CHECK(!truncate(dst, 100), "truncate");
	open_fails(dst, "truncated?", __LINE__);
	CHECK(!copy_file(src, dst), "copy");
	flip(dst, 8);	/* version 6 -> 22 */
	open_fails(dst, "image format version 22, expected 6", __LINE__);

	CHECK(!copy_file(src, dst), "copy");
	flip(dst, 0);
	open_fails(dst, "not a sparseflash image (bad magic)", __LINE__);
	CHECK(!copy_file(src, dst), "copy");
	patch_header(dst, past_end);
	open_fails(dst, "past the end of the file", __LINE__);
	CHECK(!copy_file(src, dst), "copy");
	patch_header(dst, overlap);
	open_fails(dst, "overlaps the previous region", __LINE__);
	CHECK(!copy_file(src, dst), "copy");
	patch_header(dst, region_name);
	open_fails(dst, "regions[2]: name, kind or crc32c missing or malformed", __LINE__);
	CHECK(!copy_file(src, dst), "copy");
	patch_header(dst, bad_perm);
	open_fails(dst, "layer 1 ffn_out perm", __LINE__);
	unlink(dst);
}

/* Inputs that do not belong to the model: refused before anything is written. */
static void check_mismatch(void)
{
	struct sf_placement pl;
	struct sf_sfq q;
	struct sf_err e = { 0 };
	char path[4200];
	struct stat st;

	imagetest_shuffled(&M, &rng, &pl);
	pl.fingerprint.weights[0] = pl.fingerprint.weights[0] == '0' ? '1' : '0';
	CHECK_ERR(pack("bad.sfimg", &pl, NULL, NULL, 0, SF_IMAGE_DTYPE_KEEP, &e),
		  &e, "pl.json: placement of a look-alike of ");
	pl.fingerprint = M.fingerprint;
	pl.groups[2].n = 5;	/* a group of another shape */
	CHECK_ERR(pack("bad.sfimg", &pl, NULL, NULL, 0, SF_IMAGE_DTYPE_KEEP, &e),
		  &e, "pl.json: layer 0 ffn_in: 5 entries, the model has 128");
	sf_placement_free(&pl);
	imagetest_codes(&M, &q, SF_CODES_SCALAR, 1u << SF_GROUP_ATTN_OUT);
	CHECK_ERR(pack("bad.sfimg", NULL, &q, NULL, 0, SF_IMAGE_DTYPE_KEEP, &e), &e,
		  "codes.sfq: no codes for layer 0 attn_in");
	q.fingerprint.shape[3] ^= 1;
	CHECK_ERR(pack("bad.sfimg", NULL, &q, NULL, 0, SF_IMAGE_DTYPE_KEEP, &e), &e,
		  "codes.sfq: codes of another model than ");
	sf_sfq_close(&q);
	image_path(path, sizeof(path), "bad.sfimg");
	CHECK(stat(path, &st) && errno == ENOENT, "a refused pack left %s", path);
	/* an output that is one of the inputs: refused before it is touched */
	struct sf_image_pack_opts o = { .model = &M, .model_dir = model_dir, .calib_path = path };
	struct sf_image img;
	image_path(path, sizeof(path), "a.sfimg");
	CHECK_ERR(sf_image_pack(path, &o, NULL, &e), &e, "a.sfimg: is also an input");
	CHECK(!sf_image_open(&img, path, &e), "the input after a refused pack: %s", e.msg);
	sf_image_close(&img);
}

static void check_keep_file(void)
{
	char path[4200];
	struct sf_image_keep k;
	struct sf_err e = { 0 };
	FILE *f;

	image_path(path, sizeof(path), "neurons.json");
	f = fopen(path, "w");
	fprintf(f, "{\"format\": \"sparseflash-neurons\", \"version\": 2, \"fingerprint\": \"%s\", "
		"\"shape_fingerprint\": \"%s\", \"layers\": [{\"layer\": 1, \"neurons\": [0, 5, 383]}]}",
		M.fingerprint.weights, M.fingerprint.shape);
	fclose(f);
	CHECK(!sf_image_keep_read(&k, path, &M, &e), "%s", e.msg);
	CHECK(k.count[0] == 384 && k.count[1] == 3 && k.kept[384 + 5] && !k.kept[384 + 6], "keep");
	sf_image_keep_free(&k);
	f = fopen(path, "w");
	fprintf(f, "{\"format\": \"sparseflash-neurons\", \"version\": 2, \"fingerprint\": \"%s\", "
		"\"shape_fingerprint\": \"%s\", \"layers\": [{\"layer\": 2, \"neurons\": [0, 384]}]}",
		M.fingerprint.weights, M.fingerprint.shape);
	fclose(f);
	CHECK_ERR(sf_image_keep_read(&k, path, &M, &e), &e,
		  "layer 2: neuron 384 is out of range: expected 0..383");
	f = fopen(path, "w");
	fprintf(f, "{\"format\": \"sparseflash-neurons\", \"version\": 2, \"fingerprint\": "
		"\"0123456789abcdef\", \"shape_fingerprint\": \"0123456789abcdef\", \"layers\": []}");
	fclose(f);
	CHECK_ERR(sf_image_keep_read(&k, path, &M, &e), &e, "neurons of another model than ");
	f = fopen(path, "w");
	fprintf(f, "{\"format\": \"sparseflash-neurons\", \"version\": 1, \"fingerprint\": "
		"\"0123456789abcdef\", \"layers\": []}");
	fclose(f);
	CHECK_ERR(sf_image_keep_read(&k, path, &M, &e), &e, "neurons version 1, expected 2: made "
		  "before fingerprints covered the weights; make it again");
}

int main(void)
{
	const char *root = unit_env("SF_ROOT", ".");
	struct sf_err e = { 0 };
	struct sf_placement pl;
	struct sf_sfq qs, qt;
	struct sf_image_keep k = { 0 };
	const unsigned ALL = (1u << SF_NGROUPS) - 1, ATTN = 1u << SF_GROUP_ATTN_IN | 1u << SF_GROUP_ATTN_OUT;
	uint64_t n = 0;

	snprintf(model_dir, sizeof(model_dir), "%s/models/mix4-1m", root);
	snprintf(tmpdir, sizeof(tmpdir), "%s/test_image.XXXXXX", unit_env("SF_TMP", "/tmp"));
	mkdir(unit_env("SF_TMP", "/tmp"), 0777);
	if (!mkdtemp(tmpdir)) {
		perror(tmpdir);
		return 1;
	}
	if (sf_model_open(&M, model_dir, &e)) {
		fprintf(stderr, "%s\n", e.msg);
		return 1;
	}
	imagetest_shuffled(&M, &rng, &pl);
	imagetest_codes(&M, &qs, SF_CODES_SCALAR, ALL);
	imagetest_codes(&M, &qt, SF_CODES_TRELLIS, 1u << SF_GROUP_ATTN_OUT);
	imagetest_keep_random(&M, &rng, 6, &k);

	/* identity, no codes, the model's dtype */
	CHECK(!pack("a.sfimg", NULL, NULL, NULL, 0, SF_IMAGE_DTYPE_KEEP, &e), "%s", e.msg);
	n += check_image("a.sfimg", NULL, NULL, NULL, 0, SF_IMAGE_DTYPE_KEEP);
	check_model("a.sfimg", 0);
	/* shuffled, scalar codes, f32 */
	CHECK(!pack("b.sfimg", &pl, &qs, NULL, 0, SF_DTYPE_F32, &e), "%s", e.msg);
	n += check_image("b.sfimg", &pl, &qs, NULL, 0, SF_DTYPE_F32);
	/* shuffled, trellis codes of attn_out, the rest resident, f16 */
	unsigned res = ALL & ~(1u << SF_GROUP_ATTN_OUT);
	CHECK(!pack("c.sfimg", &pl, &qt, NULL, res, SF_DTYPE_F16, &e), "%s", e.msg);
	n += check_image("c.sfimg", &pl, &qt, NULL, res, SF_DTYPE_F16);
	check_model("c.sfimg", res);
	check_deferred("c.sfimg");
	/* attention resident, shuffled, --keep, bf16 */
	CHECK(!pack("d.sfimg", &pl, NULL, &k, ATTN, SF_DTYPE_BF16, &e), "%s", e.msg);
	n += check_image("d.sfimg", &pl, NULL, &k, ATTN, SF_DTYPE_BF16);
	check_model("d.sfimg", ATTN);
	/* q8, q4 with --keep (partial last blocks) and attn_out resident: the
	 * packer's columns; a wrong stride or a resident Q4 matrix refused */
	CHECK(!pack("q8.sfimg", &pl, &qs, NULL, 0, SF_DTYPE_Q8, &e), "%s", e.msg);
	check_quant_image("q8.sfimg", NULL, 0, SF_DTYPE_Q8);
	unsigned ao = 1u << SF_GROUP_ATTN_OUT;
	CHECK(!pack("q4.sfimg", &pl, NULL, &k, ao, SF_DTYPE_Q4, &e), "%s", e.msg);
	check_quant_image("q4.sfimg", &k, ao, SF_DTYPE_Q4);
	{
		char src[4200], dst[4200];
		image_path(src, sizeof(src), "q4.sfimg");
		image_path(dst, sizeof(dst), "damaged.sfimg");
		CHECK(!copy_file(src, dst), "copy");
		patch_header(dst, q4_stride);
		open_fails(dst, "layer 0 attn_in: top_bytes", __LINE__);
		CHECK(!copy_file(src, dst), "copy");
		patch_header(dst, q4_resident);
		open_fails(dst, "resident in block dtype Q4", __LINE__);
		unlink(dst);
	}
	/* everything resident: the forward pass is the dense one */
	CHECK(!pack("e.sfimg", NULL, NULL, NULL, ALL, SF_IMAGE_DTYPE_KEEP, &e), "%s", e.msg);
	check_model("e.sfimg", ALL);
	CHECK(n > 1000000, "only %" PRIu64 " weights compared", n);
	/* --keep with codes, and with a resident FFN group: refused */
	CHECK_ERR(pack("x.sfimg", NULL, &qs, &k, 0, SF_IMAGE_DTYPE_KEEP, &e), &e, "--keep with codes");
	CHECK_ERR(pack("x.sfimg", NULL, NULL, &k, 1u << SF_GROUP_FFN_OUT, SF_IMAGE_DTYPE_KEEP, &e),
		  &e, "--keep with a resident FFN group");

	check_quant_rows(SF_DTYPE_Q6);
	check_quant_rows(SF_DTYPE_Q8);
	check_quant_rows(SF_DTYPE_Q4);
	check_damage("b.sfimg");
	check_damage("d.sfimg");
	check_mismatch();
	check_keep_file();
	check_experts();

	sf_image_keep_free(&k);
	sf_sfq_close(&qs);
	sf_sfq_close(&qt);
	sf_placement_free(&pl);
	sf_model_close(&M);
	if (!unit_failures) {
		const char *names[] = { "a", "b", "c", "d", "e", "q8", "q4" };
		char p[4200];
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			snprintf(p, sizeof(p), "%s/%s.sfimg", tmpdir, names[i]);
			unlink(p);
		}
		snprintf(p, sizeof(p), "%s/neurons.json", tmpdir);
		unlink(p);
		rmdir(tmpdir);
	}
	return unit_exit();
}
