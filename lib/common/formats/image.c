/* The flash image's preamble, header and regions, and the drivers of the
 * writer behind sf-pack and the reader behind sf-run and sf-pack
 * --verify/--info; the parts they drive: formats/image_impl.h. See
 * image.h; byte layout in man/sf-formats.5 (IMAGE). */
#include "formats/image.h"
#include "formats/image_impl.h"

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

#include "base/bytes.h"
#include "base/file.h"
#include "base/jsonfile.h"
#include "base/outfile.h"
#include "base/quant.h"
#include "base/vocab.h"

#define TEXT_MAX ((uint64_t)256 << 20)	/* config and tokenizer files copied */
#define WBUF (4u << 20)			/* write buffer */
#define MAX_REGIONS (3 + (2 * SF_NGROUPS + 1) * 4096)	/* + a layer's experts */

static const char *const kind_names[SF_REGION_NKINDS] = {
	"resident", "index", "codebook", "top", "mid", "experts",
};

const char *sf_image_kind_name(enum sf_image_kind k)
{
	return (unsigned)k < SF_REGION_NKINDS ? kind_names[k] : "?";
}

static int kind_parse(const char *s, enum sf_image_kind *k)
{
	for (int i = 0; i < SF_REGION_NKINDS; i++)
		if (!strcmp(s, kind_names[i])) {
			*k = (enum sf_image_kind)i;
			return 0;
		}
	return -1;
}

// ----------------------------------------------------------------------------
// writer: the plan

static void plan_free(struct plan *p)
{
	if (p->g)
		for (int i = 0; i < p->nl * SF_NGROUPS; i++) {
			free(p->g[i].perm);
			free(p->g[i].rows);
		}
	free(p->g);
	free(p->x.region);
	free(p->x.order);
	free(p->t);
	free(p->r);
	for (int i = 0; i < 3; i++)
		free(p->texts[i]);
}

void image_add_region(struct plan *p, enum sf_image_kind kind, int layer, enum sf_group g,
		      uint64_t length)
{
	struct pregion *r = &p->r[p->nr++];

	r->kind = kind;
	r->layer = layer;
	r->g = g;
	r->length = length;
	if (kind == SF_REGION_TOP || kind == SF_REGION_MID)
		snprintf(r->name, sizeof(r->name), "layer %d %s %s", layer, sf_group_name(g),
			 kind_names[kind]);
	else if (kind == SF_REGION_EXPERTS)
		snprintf(r->name, sizeof(r->name), "layer %d experts", layer);
	else
		snprintf(r->name, sizeof(r->name), "%s", kind_names[kind]);
}

static int plan_build(struct plan *p, const struct sf_image_pack_opts *o, struct sf_err *e)
{
	static const char *const files[3] = { "config.json", "tokenizer.json", "tokenizer_config.json" };
	int ret;

	memset(p, 0, sizeof(*p));
	p->o = o;
	p->nl = o->model->cfg.n_layers;
	if ((ret = image_check_inputs(o, e)))
		return ret;
	for (int i = 0; i < 3; i++) {
		char path[4096];
		if (o->texts[0]) {
			if (o->texts[i] && !(p->texts[i] = strdup(o->texts[i])))
				return sf_err_set(e, -ENOMEM, "out of memory");
			p->text_len[i] = o->texts[i] ? strlen(o->texts[i]) : 0;
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s", o->model_dir, files[i]);
		if ((ret = sf_file_read(path, TEXT_MAX, SF_FILE_REGULAR | (i == 2 ? SF_FILE_OPTIONAL : 0),
					&p->texts[i], &p->text_len[i], e)))
			return ret;
	}
	size_t ng = (size_t)p->nl * SF_NGROUPS;
	p->g = calloc(ng, sizeof(*p->g));
	/* per layer: 9 norms and biases (Gemma 3's sandwich norms among
	 * them), 7 resident matrices, a mixture's router and shared expert's
	 * 5; gpt-oss's o bias, sinks, router bias and 3 biases an expert */
	p->t = calloc(3 + (size_t)p->nl * (9 + 7 + 5 + 3 + 3 * (size_t)o->model->cfg.n_experts),
		      sizeof(*p->t));
	p->r = calloc(3 + 2 * ng + (size_t)p->nl, sizeof(*p->r));
	if (!p->g || !p->t || !p->r)
		return sf_err_set(e, -ENOMEM, "out of memory");
	for (int l = 0; l < p->nl; l++)
		for (int g = 0; g < SF_NGROUPS; g++)
			if ((ret = image_plan_group(p, l, (enum sf_group)g, e)))
				return ret;
	if ((ret = image_plan_experts(p, e)))
		return ret;
	image_plan_tensors(p);
	image_add_region(p, SF_REGION_INDEX, -1, 0, p->index_len);
	if (o->codes && o->codes->method == SF_CODES_TRELLIS)
		image_add_region(p, SF_REGION_CODEBOOK, -1, 0, (uint64_t)SF_TRELLIS_CODEBOOK * 4);
	for (int l = 0; l < p->nl; l++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			struct pgroup *G = &p->g[l * SF_NGROUPS + g];
			if (!G->resident) {
				G->top_region = (int)p->nr;
				image_add_region(p, SF_REGION_TOP, l, (enum sf_group)g,
						 G->entries * G->top_bytes);
			}
			if (!G->resident && G->sec) {
				G->mid_region = (int)p->nr;
				image_add_region(p, SF_REGION_MID, l, (enum sf_group)g,
						 G->entries * G->mid_bytes);
			}
			/* a layer's experts after its attention: in pass order */
			if (g == SF_GROUP_ATTN_OUT && p->x.count) {
				p->x.region[l] = (int)p->nr;
				image_add_region(p, SF_REGION_EXPERTS, l, 0,
						 (uint64_t)p->x.count * p->x.record_bytes);
			}
		}
	return 0;
}

// ----------------------------------------------------------------------------
// writer: the header

static json_t *header_json(const struct plan *p)
{
	const struct sf_image_pack_opts *o = p->o;
	json_t *h = json_object(), *a, *x;
	char crc[9];

	json_object_set_new(h, "format", json_string(FORMAT_NAME));
	json_object_set_new(h, "version", json_integer(SF_IMAGE_VERSION));
	sf_fingerprint_put(h, &o->model->fingerprint);
	json_object_set(h, "producer", o->producer ? o->producer : json_null());
	json_object_set_new(h, "config", json_stringn(p->texts[0], p->text_len[0]));
	json_object_set_new(h, "tokenizer", json_stringn(p->texts[1], p->text_len[1]));
	json_object_set_new(h, "tokenizer_config", p->texts[2] ?
			    json_stringn(p->texts[2], p->text_len[2]) : json_null());
	if (o->codes)
		json_object_set_new(h, "codes", json_pack("{s:s, s:I}", "method",
				    sf_codes_method_name(o->codes->method), "seed",
				    (json_int_t)o->codes->seed));
	else
		json_object_set_new(h, "codes", json_null());
	if (o->calib) {
		const struct sf_calib *c = o->calib;
		json_t *bs = json_array();
		for (size_t b = 0; b < c->nbudgets; b++) {
			json_t *ks = json_array();
			for (int l = 0; l < c->n_layers; l++) {
				json_t *kl = json_array();
				for (int g = 0; g < SF_NGROUPS; g++) {
					const struct sf_calib_group *cg = &sf_calib_at(c, b, l)->g[g];
					json_array_append_new(kl, ju(cg->k_top));
					json_array_append_new(kl, ju(cg->k_mid));
				}
				json_array_append_new(ks, kl);
			}
			json_array_append_new(bs, json_pack("{s:f, s:f, s:o}", "budget", c->budgets[b],
							    "realised", c->realised[b], "k", ks));
		}
		json_object_set_new(h, "tiers", json_pack("{s:s, s:o}", "method",
				    sf_codes_method_name(c->method), "budgets", bs));
	} else {
		json_object_set_new(h, "tiers", json_null());
	}
	a = json_array();
	for (size_t i = 0; i < p->nr; i++) {
		const struct pregion *r = &p->r[i];
		snprintf(crc, sizeof(crc), "%08" PRIx32, r->crc);
		x = json_pack("{s:s, s:s, s:o, s:o, s:s}", "name", r->name, "kind",
			      kind_names[r->kind], "offset", ju(r->offset), "length", ju(r->length),
			      "crc32c", crc);
		json_array_append_new(a, x);
	}
	json_object_set_new(h, "regions", a);
	json_object_set_new(h, "tensors", image_tensors_json(p));
	json_object_set_new(h, "groups", image_groups_json(p));
	json_object_set_new(h, "experts", image_experts_json(p));
	return h;
}

/* Renders the header with the region offsets it implies: offsets depend
 * on the header's length and the length on the offsets' digits, so lay
 * out until the two agree (CRCs are fixed-width hex, so filling them in
 * later keeps the length). */
static char *render_header(struct plan *p, uint64_t *hlen)
{
	uint64_t start = SF_IMAGE_ALIGN;

	for (int iter = 0; iter < 16; iter++) {
		uint64_t off = start;
		for (size_t i = 0; i < p->nr; i++) {
			p->r[i].offset = off;
			off = align_up(off + p->r[i].length, SF_IMAGE_ALIGN);
		}
		json_t *h = header_json(p);
		char *text = h ? json_dumps(h, JSON_COMPACT) : NULL;
		json_decref(h);
		if (!text)
			return NULL;
		*hlen = strlen(text);
		uint64_t need = align_up(SF_IMAGE_PREAMBLE + *hlen, SF_IMAGE_ALIGN);
		if (need == start)
			return text;
		free(text);
		start = need;
	}
	return NULL;
}

// ----------------------------------------------------------------------------
// writer: the bytes

static int wr_flush(struct wr *w, struct sf_err *e)
{
	size_t done = 0;

	while (done < w->n) {
		ssize_t k = pwrite(w->fd, w->buf + done, w->n - done,
				   (off_t)(w->pos - w->n + done));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return sf_err_set(e, -errno, "%s: write: %s", w->name, strerror(errno));
		done += (size_t)k;
	}
	/* Start writeback now: with gigabytes of RAM the kernel would hold
	 * the whole image dirty until the final fsync, so the disk would sit
	 * idle while the CPU transposes and the CPU idle while it writes. */
	if (w->n)
		sync_file_range(w->fd, (off_t)(w->pos - w->n), (off_t)w->n, SYNC_FILE_RANGE_WRITE);
	w->n = 0;
	return 0;
}

/* Appends bytes to the file; crc: whether they enter the region's CRC. */
int image_wr_put(struct wr *w, const void *data, size_t len, int crc, struct sf_err *e)
{
	const uint8_t *d = data;
	int ret;

	static const uint8_t zeros[SF_IMAGE_ALIGN];

	if (crc && d)
		w->crc = sf_crc32c(w->crc, d, len);
	for (size_t z = len; crc && !d && z; ) {
		size_t k = z < sizeof(zeros) ? z : sizeof(zeros);
		w->crc = sf_crc32c(w->crc, zeros, k);
		z -= k;
	}
	while (len) {
		size_t k = WBUF - w->n < len ? WBUF - w->n : len;
		if (d)
			memcpy(w->buf + w->n, d, k);
		else
			memset(w->buf + w->n, 0, k);
		w->n += k;
		w->pos += k;
		len -= k;
		if (d)
			d += k;
		if (w->n == WBUF && (ret = wr_flush(w, e)))
			return ret;
	}
	return 0;
}

static int wr_pad(struct wr *w, struct sf_err *e)
{
	return image_wr_put(w, NULL, align_up(w->pos, SF_IMAGE_ALIGN) - w->pos, 0, e);
}

int image_wr_u32(struct wr *w, uint32_t v, struct sf_err *e)
{
	unsigned char b[4];

	sf_put_le32(b, v);
	return image_wr_put(w, b, 4, 1, e);
}

static int write_region(struct wr *w, struct plan *p, struct pregion *r, struct sf_err *e)
{
	const struct sf_image_pack_opts *o = p->o;
	int ret = 0;

	if (w->pos != r->offset)
		return sf_err_set(e, -EIO, "%s: region '%s' at %" PRIu64 ", planned at %" PRIu64,
				  w->name, r->name, w->pos, r->offset);
	w->crc = 0;
	if (o->skeleton && r->kind >= SF_REGION_TOP) {
		if ((ret = wr_flush(w, e)))	/* a hole: nothing written */
			return ret;
		w->pos = align_up(r->offset + r->length, SF_IMAGE_ALIGN);
		r->crc = 0;
		return 0;
	}
	switch (r->kind) {
	case SF_REGION_RESIDENT:
		ret = image_write_resident(w, p, r, e);
		break;
	case SF_REGION_INDEX:
		ret = image_write_index(w, p, e);
		break;
	case SF_REGION_CODEBOOK:
		for (uint32_t i = 0; i < SF_TRELLIS_CODEBOOK && !ret; i++) {
			uint32_t u;
			memcpy(&u, &o->codes->codebook[i], 4);
			ret = image_wr_u32(w, u, e);
		}
		break;
	case SF_REGION_TOP:
		ret = image_write_top(w, o, &p->g[r->layer * SF_NGROUPS + (int)r->g], e);
		break;
	case SF_REGION_MID:
		ret = image_write_mid(w, &p->g[r->layer * SF_NGROUPS + (int)r->g], e);
		break;
	case SF_REGION_EXPERTS:
		ret = image_write_experts(w, p, r->layer, e);
		break;
	default:
		break;
	}
	if (ret)
		return ret;
	if (w->pos - r->offset != r->length)
		return sf_err_set(e, -EIO, "%s: region '%s' of %" PRIu64 " bytes, planned %" PRIu64,
				  w->name, r->name, w->pos - r->offset, r->length);
	r->crc = w->crc;
	if ((ret = wr_pad(w, e)))
		return ret;
	if (o->progress)
		o->progress(o->progress_arg, w->pos, w->total);
	return 0;
}

int sf_image_pack_estimate(const struct sf_image_pack_opts *o, struct sf_image_estimate *est,
			   struct sf_err *e)
{
	struct plan p;
	uint64_t hlen = 0;
	char *text = NULL;
	int ret;

	memset(est, 0, sizeof(*est));
	if ((ret = plan_build(&p, o, e)))
		goto out;
	if (!(text = render_header(&p, &hlen))) {
		ret = sf_err_set(e, -ENOMEM, "%s: cannot lay out the header", o->model_dir);
		goto out;
	}
	est->header = align_up(SF_IMAGE_PREAMBLE + hlen, SF_IMAGE_ALIGN);
	est->bytes = p.nr ? align_up(p.r[p.nr - 1].offset + p.r[p.nr - 1].length, SF_IMAGE_ALIGN)
			  : est->header;
	for (size_t i = 0; i < p.nr; i++)
		*(p.r[i].kind == SF_REGION_TOP || p.r[i].kind == SF_REGION_MID ? &est->flash
		  : &est->resident) += p.r[i].length;
out:
	free(text);
	plan_free(&p);
	return ret;
}

int sf_image_pack(const char *path, const struct sf_image_pack_opts *o, uint64_t *written,
		  struct sf_err *e)
{
	struct plan p;
	struct wr w = { .fd = -1, .name = path, .o = o };
	struct sf_outfile out;
	const struct sf_safetensors *st = &o->model->st;
	const char *const given[] = { o->placement_path, o->codes_path, o->calib_path,
				      o->keep_path, st->index_path };
	const size_t ngiven = sizeof(given) / sizeof(given[0]);
	/* every file this run reads, NULL-terminated: the model's too */
	const char **inputs = calloc(ngiven + st->nfiles + 1, sizeof(*inputs));
	char *text = NULL;
	uint64_t hlen = 0;
	size_t ni = 0;
	int ret;

	memset(&p, 0, sizeof(p));
	if (!inputs)
		return sf_err_set(e, -ENOMEM, "%s: out of memory", path);
	for (size_t i = 0; i < ngiven; i++)
		if (given[i])
			inputs[ni++] = given[i];
	for (size_t i = 0; i < st->nfiles; i++)
		inputs[ni++] = st->paths[i];
	/* written with pwrite: a regular file or a new name, never an input */
	ret = sf_outfile_open(&out, path, SF_OUT_BINARY | SF_OUT_SEEKABLE, inputs, e);
	free(inputs);
	if (ret)
		return ret;
	if ((ret = plan_build(&p, o, e)))
		goto out;
	if (!(text = render_header(&p, &hlen))) {
		ret = sf_err_set(e, -ENOMEM, "%s: cannot lay out the header", path);
		goto out;
	}
	if (hlen > SF_IMAGE_MAX_HEADER) {
		ret = sf_err_set(e, SF_ELIMIT, "%s: header of %" PRIu64 " bytes, over the limit of %"
				 PRIu64, path, hlen, SF_IMAGE_MAX_HEADER);
		goto out;
	}
	w.fd = out.fd;
	if (!(w.buf = malloc(WBUF))) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	w.pos = p.nr ? p.r[0].offset : align_up(SF_IMAGE_PREAMBLE + hlen, SF_IMAGE_ALIGN);
	w.total = align_up(p.r[p.nr - 1].offset + p.r[p.nr - 1].length, SF_IMAGE_ALIGN);
	for (size_t i = 0; i < p.nr; i++)
		if ((ret = write_region(&w, &p, &p.r[i], e)))
			goto out;
	if ((ret = wr_flush(&w, e)))
		goto out;
	uint64_t end = w.pos;
	if (o->skeleton && ftruncate(w.fd, (off_t)end)) {	/* a hole at the end too */
		ret = sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
		goto out;
	}
	/* the CRCs are in: the header keeps its length (fixed-width hex) */
	free(text);
	json_t *h = header_json(&p);
	text = h ? json_dumps(h, JSON_COMPACT) : NULL;
	json_decref(h);
	if (!text || strlen(text) != hlen) {
		ret = sf_err_set(e, -ENOMEM, "%s: cannot render the header", path);
		goto out;
	}
	unsigned char pre[SF_IMAGE_PREAMBLE] = { 0 };
	memcpy(pre, SF_IMAGE_MAGIC, 8);
	sf_put_le32(pre + 8, SF_IMAGE_VERSION);
	sf_put_le32(pre + 12, 0);
	sf_put_le64(pre + 16, hlen);
	sf_put_le32(pre + 24, sf_crc32c(0, text, (size_t)hlen));
	w.pos = 0;
	if ((ret = image_wr_put(&w, pre, sizeof(pre), 0, e)) ||
	    (ret = image_wr_put(&w, text, (size_t)hlen, 0, e)) || (ret = wr_pad(&w, e)) ||
	    (ret = wr_flush(&w, e)))
		goto out;
	if ((ret = sf_outfile_commit(&out, e)))
		goto out;
	if (written)
		*written = end;
out:
	sf_outfile_abort(&out);
	free(w.buf);
	free(text);
	plan_free(&p);
	return ret;
}

// ----------------------------------------------------------------------------
// reader

void sf_image_close(struct sf_image *img)
{
	if (!img)
		return;
	if (img->fd >= 0 && img->path)
		close(img->fd);
	if (img->map)
		munmap(img->map, img->map_size ? img->map_size : 1);
	json_decref(img->header);
	free(img->regions);
	free(img->groups);
	free(img->budgets);
	free(img->realised);
	free(img->k);
	free(img->tensors.tensors);
	free(img->u32);
	free(img->cb);
	free(img->experts.layer);
	free(img->experts.slot);
	free(img->path);
	memset(img, 0, sizeof(*img));
	img->fd = -1;
}

int sf_image_unchanged(const struct sf_image *img, struct sf_err *e)
{
	struct stat st;

	if (fstat(img->fd, &st))
		return sf_err_set(e, -errno, "%s: %s", img->path, strerror(errno));
	if ((uint64_t)st.st_size != img->file_size)
		return sf_err_set(e, SF_EFORMAT, "%s: %llu bytes, %" PRIu64 " when opened: the "
				  "file changed while open", img->path,
				  (unsigned long long)st.st_size, img->file_size);
	if ((int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec != img->mtime_ns)
		return sf_err_set(e, SF_EFORMAT, "%s: modified since it was opened: the file "
				  "changed while open (rewritten in place?)", img->path);
	return 0;
}

int image_read_at(int fd, void *buf, size_t len, uint64_t off, const char *path, struct sf_err *e)
{
	size_t done = 0;

	while (done < len) {
		ssize_t k = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return sf_err_set(e, -errno, "%s: read: %s", path, strerror(errno));
		if (!k)
			return sf_err_set(e, SF_EFORMAT, "%s: ends at byte %" PRIu64 " while reading",
					  path, off + done);
		done += (size_t)k;
	}
	return 0;
}

static int printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 0;
	return 1;
}

static int open_regions(struct sf_image *img, uint64_t data_start, struct sf_err *e)
{
	const char *path = img->path;
	json_t *a = json_object_get(img->header, "regions"), *r;
	uint64_t prev_end = data_start;
	size_t i;
	int ret;

	if (!json_is_array(a) || json_array_size(a) < 2 || json_array_size(a) > MAX_REGIONS)
		return sf_err_set(e, SF_EFORMAT, "%s: header: \"regions\" is not an array of 2..%d",
				  path, MAX_REGIONS);
	img->nregions = json_array_size(a);
	if (!(img->regions = calloc(img->nregions, sizeof(*img->regions))))
		return sf_err_set(e, -ENOMEM, "%s: out of memory", path);
	json_array_foreach(a, i, r) {
		struct sf_image_region *R = &img->regions[i];
		char where[SF_ERR_MAX];
		const char *name, *kind, *crc;

		snprintf(where, sizeof(where), "%s: header: regions[%zu]", path, i);
		/* names go into messages and --info: printable, so that an
		 * error stays one line */
		if (sf_json_str(r, "name", &name, where, e) || strlen(name) >= sizeof(R->name) ||
		    !printable(name) ||
		    sf_json_str(r, "kind", &kind, where, e) || kind_parse(kind, &R->kind) ||
		    sf_json_str(r, "crc32c", &crc, where, e) || strlen(crc) != 8 ||
		    strspn(crc, "0123456789abcdef") != 8)
			return sf_err_set(e, SF_EFORMAT, "%s: name, kind or crc32c missing or malformed",
					  where);
		strcpy(R->name, name);
		R->crc32c = (uint32_t)strtoul(crc, NULL, 16);
		R->layer = -1;
		if ((ret = sf_json_u64(r, "offset", INT64_MAX, &R->offset, where, e)) ||
		    (ret = sf_json_u64(r, "length", INT64_MAX, &R->length, where, e)))
			return ret;
		if (R->offset % SF_IMAGE_ALIGN)
			return sf_err_set(e, SF_EFORMAT, "%s: region '%s': offset %" PRIu64
					  " is not a multiple of %d", path, R->name, R->offset,
					  SF_IMAGE_ALIGN);
		if (R->offset < prev_end)
			return sf_err_set(e, SF_EFORMAT, "%s: region '%s': offset %" PRIu64
					  " overlaps the %s ending at %" PRIu64, path, R->name, R->offset,
					  i ? "previous region" : "header", prev_end);
		if (R->length > img->file_size || R->offset > img->file_size - R->length)
			return sf_err_set(e, SF_EFORMAT, "%s: region '%s' (bytes %" PRIu64 "..%" PRIu64
					  ") extends past the end of the file (%" PRIu64
					  " bytes): truncated?", path, R->name, R->offset,
					  R->offset + R->length, img->file_size);
		/* the resident, index and codebook regions come first, in that
		 * order: they are mapped together */
		enum sf_image_kind want = i == 0 ? SF_REGION_RESIDENT : i == 1 ? SF_REGION_INDEX :
					  R->kind;
		if (R->kind != want || (i > 2 && R->kind < SF_REGION_TOP) ||
		    (i == 2 && R->kind == SF_REGION_RESIDENT) || (i == 2 && R->kind == SF_REGION_INDEX))
			return sf_err_set(e, SF_EFORMAT, "%s: region '%s': kind %s at index %zu out of "
					  "order", path, R->name, kind, i);
		prev_end = R->offset + R->length;
	}
	if (img->file_size != align_up(prev_end, SF_IMAGE_ALIGN))
		return sf_err_set(e, SF_EFORMAT, "%s: %" PRIu64 " bytes, expected %" PRIu64
				  " from the region table", path, img->file_size,
				  align_up(prev_end, SF_IMAGE_ALIGN));
	return 0;
}

static int crc_mismatch(const struct sf_image *img, const struct sf_image_region *R, uint32_t crc,
			struct sf_err *e)
{
	return sf_err_set(e, SF_EFORMAT, "%s: region '%s' (%" PRIu64 " bytes at %" PRIu64
			  "): CRC-32C %08" PRIx32 ", expected %08" PRIx32 ": the image is damaged",
			  img->path, R->name, R->length, R->offset, crc, R->crc32c);
}

static int tensor_cmp(const void *a, const void *b)
{
	return strcmp(((const struct sf_tensor *)a)->name, ((const struct sf_tensor *)b)->name);
}

int sf_image_open(struct sf_image *img, const char *path, struct sf_err *e)
{
	return sf_image_open_flags(img, path, 0, e);
}

int sf_image_open_flags(struct sf_image *img, const char *path, unsigned open_flags,
			struct sf_err *e)
{
	unsigned char pre[SF_IMAGE_PREAMBLE];
	char *htext = NULL;
	uint8_t *seen = NULL;
	int *refs = NULL;
	json_error_t je;
	struct stat st;
	json_t *v;
	int ret;

	memset(img, 0, sizeof(*img));
	img->fd = -1;
	if (!(img->path = strdup(path))) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	if ((img->fd = sf_file_open_regular(path, 0, &st, e)) < 0) {
		ret = img->fd;
		goto out;
	}
	img->file_size = (uint64_t)st.st_size;
	img->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	if (img->file_size < SF_IMAGE_PREAMBLE) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: %" PRIu64 " bytes: too short for an image",
				 path, img->file_size);
		goto out;
	}
	if ((ret = image_read_at(img->fd, pre, sizeof(pre), 0, path, e)))
		goto out;
	if (memcmp(pre, SF_IMAGE_MAGIC, 8)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: not a sparseflash image (bad magic)", path);
		goto out;
	}
	uint32_t version = sf_get_le32(pre + 8), flags = sf_get_le32(pre + 12);
	uint64_t hlen = sf_get_le64(pre + 16);
	if (version == 2) {
		ret = sf_err_set(e, SF_EUNSUPPORTED, "%s: image format version 2, expected %d: made "
				 "before q8 and q4 columns held their scales first; pack it again",
				 path, SF_IMAGE_VERSION);
		goto out;
	}
	if (version < SF_IMAGE_VERSION_MIN || version > SF_IMAGE_VERSION) {
		ret = sf_fingerprint_version(path, "image format", version, SF_IMAGE_VERSION, e);
		goto out;
	}
	img->version = (int)version;
	if (flags || sf_get_le32(pre + 28)) {
		ret = sf_err_set(e, SF_EUNSUPPORTED, "%s: flags 0x%x, expected 0", path, flags);
		goto out;
	}
	if (hlen > SF_IMAGE_MAX_HEADER || hlen > img->file_size - SF_IMAGE_PREAMBLE) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header of %" PRIu64 " bytes in a file of %" PRIu64
				 ": truncated?", path, hlen, img->file_size);
		goto out;
	}
	if (!(htext = malloc(hlen ? hlen : 1))) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	if ((ret = image_read_at(img->fd, htext, (size_t)hlen, SF_IMAGE_PREAMBLE, path, e)))
		goto out;
	if (sf_crc32c(0, htext, (size_t)hlen) != sf_get_le32(pre + 24)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: CRC-32C 0x%08" PRIx32 ", expected 0x%08"
				 PRIx32 ": the image is damaged", path, sf_crc32c(0, htext, (size_t)hlen),
				 sf_get_le32(pre + 24));
		goto out;
	}
	if (!(img->header = json_loadb(htext, (size_t)hlen, JSON_REJECT_DUPLICATES, &je)) ||
	    !json_is_object(img->header)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: %s", path,
				 img->header ? "not a JSON object" : je.text);
		goto out;
	}
	free(htext);
	htext = NULL;
	const char *fmt;
	if (sf_json_str(img->header, "format", &fmt, path, e) || strcmp(fmt, FORMAT_NAME)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: \"format\" is not \"%s\"", path,
				 FORMAT_NAME);
		goto out;
	}
	char where[SF_ERR_MAX];
	snprintf(where, sizeof(where), "%s: header", path);
	if ((ret = sf_fingerprint_parse(&img->fingerprint, img->header, where, e)))
		goto out;
	v = json_object_get(img->header, "config");
	json_t *tk = json_object_get(img->header, "tokenizer"),
	       *tc = json_object_get(img->header, "tokenizer_config");
	if (!json_is_string(v) || !json_is_string(tk) || (!json_is_string(tc) && !json_is_null(tc))) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: config, tokenizer or tokenizer_config "
				 "missing", path);
		goto out;
	}
	img->config_text = json_string_value(v);
	img->config_len = json_string_length(v);
	img->tokenizer_text = json_string_value(tk);
	img->tokenizer_len = json_string_length(tk);
	if (json_is_string(tc)) {
		img->tokenizer_config_text = json_string_value(tc);
		img->tokenizer_config_len = json_string_length(tc);
	}
	char cname[4200];
	snprintf(cname, sizeof(cname), "%s: config.json", path);
	if ((ret = sf_config_parse(&img->cfg, cname, img->config_text, img->config_len, e)))
		goto out;
	v = json_object_get(img->header, "codes");
	if (v && !json_is_null(v)) {
		char where[SF_ERR_MAX];
		const char *me;
		snprintf(where, sizeof(where), "%s: header: codes", path);
		if (sf_json_str(v, "method", &me, where, e) ||
		    sf_codes_method_parse(me, &img->codes_method)) {
			ret = sf_err_set(e, SF_EFORMAT, "%s.method: unknown", where);
			goto out;
		}
		if ((ret = sf_json_u64(v, "seed", INT64_MAX, &img->codes_seed, where, e)))
			goto out;
		img->has_codes = 1;
	}
	if ((ret = open_regions(img, align_up(SF_IMAGE_PREAMBLE + hlen, SF_IMAGE_ALIGN), e)))
		goto out;
	int want_cb = img->has_codes && img->codes_method == SF_CODES_TRELLIS;
	int has_cb = img->nregions > 2 && img->regions[2].kind == SF_REGION_CODEBOOK;
	if (want_cb != has_cb) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: %s", path, want_cb ? "trellis codes without a "
				 "codebook region" : "a codebook region without trellis codes");
		goto out;
	}
	const struct sf_image_region *last = &img->regions[has_cb ? 2 : 1];
	/* read, not mapped: a file truncated under a running decoder must give
	 * an error from the flash reads, not SIGBUS on a resident page; into
	 * anonymous pages, zero and not the process's until written, so that
	 * the pages left on flash or deferred cost nothing */
	img->map_size = (size_t)(last->offset + last->length);
	img->map = mmap(NULL, img->map_size ? img->map_size : 1, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (img->map == MAP_FAILED) {
		img->map = NULL;
		ret = sf_err_set(e, -ENOMEM, "%s: %zu bytes of header and resident regions: %s", path,
				 img->map_size, strerror(ENOMEM));
		goto out;
	}
	/* the resident region is read once the tensors in it are known */
	if ((ret = image_read_at(img->fd, img->map, (size_t)img->regions[0].offset, 0, path, e)) ||
	    (ret = image_read_at(img->fd, (uint8_t *)img->map + img->regions[1].offset,
				 img->map_size - (size_t)img->regions[1].offset,
				 (off_t)img->regions[1].offset, path, e)))
		goto out;
	/* the index and codebook are decoded now, so their checksums are too
	 * (they are small); the resident blob's waits for sf_image_verify */
	for (size_t i = 1; i < (has_cb ? 3u : 2u); i++) {
		const struct sf_image_region *R = &img->regions[i];
		uint32_t crc = sf_crc32c(0, (const uint8_t *)img->map + R->offset, (size_t)R->length);
		if (crc != R->crc32c) {
			ret = crc_mismatch(img, R, crc, e);
			goto out;
		}
	}
	if (has_cb) {
		const uint8_t *c = (const uint8_t *)img->map + last->offset;
		if (last->length != (uint64_t)SF_TRELLIS_CODEBOOK * 4) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: region 'codebook': %" PRIu64 " bytes, "
					 "expected %u", path, last->length, SF_TRELLIS_CODEBOOK * 4);
			goto out;
		}
		if (posix_memalign((void **)&img->cb, 64, SF_TRELLIS_CODEBOOK * sizeof(float))) {
			img->cb = NULL;
			ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
			goto out;
		}
		for (uint32_t i = 0; i < SF_TRELLIS_CODEBOOK; i++) {
			uint32_t u = sf_get_le32(c + 4 * i);
			memcpy(&img->cb[i], &u, 4);
		}
		img->codebook = img->cb;
	}
	/* groups */
	json_t *ga = json_object_get(img->header, "groups");
	int nl = img->cfg.n_layers;
	size_t ng = (size_t)nl * SF_NGROUPS, nu32 = 0, nflash = 0;
	if (!json_is_array(ga) || json_array_size(ga) != ng) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header: \"groups\" is not an array of %zu", path,
				 ng);
		goto out;
	}
	for (int g = 0; g < SF_NGROUPS; g++)
		nu32 += 3 * sf_group_entries(&img->cfg, (enum sf_group)g);
	nu32 = nu32 * (size_t)nl + (size_t)nl * (size_t)img->cfg.hidden_dim;
	img->groups = calloc(ng, sizeof(*img->groups));
	img->u32 = malloc(nu32 * sizeof(uint32_t));
	seen = malloc((size_t)(img->cfg.hidden_dim > img->cfg.dim ? img->cfg.hidden_dim :
			       img->cfg.dim) + (size_t)img->cfg.n_heads * (size_t)img->cfg.head_dim);
	refs = calloc(img->nregions, sizeof(*refs));
	if (!img->groups || !img->u32 || !seen || !refs) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	uint32_t *u = img->u32;
	for (int l = 0; l < nl; l++) {
		for (int g = 0; g < SF_NGROUPS; g++) {
			json_t *go = json_array_get(ga, (size_t)l * SF_NGROUPS + (size_t)g);
			if ((ret = image_open_group(img, go, l, (enum sf_group)g, &u, seen, refs, e)))
				goto out;
			if (!img->groups[(size_t)l * SF_NGROUPS + (size_t)g].resident)
				nflash += (size_t)img->groups[(size_t)l * SF_NGROUPS + (size_t)g].nmat;
		}
		if ((ret = image_check_keep(img, l, e)))
			goto out;
	}
	if ((ret = image_open_experts(img, refs, e)))
		goto out;
	for (size_t i = 0; i < img->nregions; i++)
		if (img->regions[i].kind >= SF_REGION_TOP && !refs[i]) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: region '%s' belongs to no group", path,
					 img->regions[i].name);
			goto out;
		}
	if ((ret = image_open_tensors(img, nflash + image_expert_tensors(&img->cfg), e)) ||
	    (ret = image_open_tiers(img, e)) ||
	    (ret = image_read_resident(img, open_flags, e)))
		goto out;
	/* the flash matrices join the tensor table without data, so binding
	 * the model checks names, shapes and the shape fingerprint over all */
	struct sf_tensor *T = img->tensors.tensors + img->tensors.ntensors;
	for (size_t i = 0; i < ng; i++) {
		const struct sf_image_group *G = &img->groups[i];
		for (int x = 0; x < G->nmat && !G->resident; x++, T++) {
			strcpy(T->name, G->mat[x].tensor);
			T->dtype = T->source_dtype = G->mat[x].source_dtype;
			T->ndim = 2;
			T->shape[0] = G->mat[x].source_rows;
			T->shape[1] = G->mat[x].cols;
		}
	}
	img->tensors.ntensors += nflash;
	image_add_expert_tensors(img, img->tensors.tensors + img->tensors.ntensors);
	img->tensors.ntensors += image_expert_tensors(&img->cfg);
	qsort(img->tensors.tensors, img->tensors.ntensors, sizeof(struct sf_tensor), tensor_cmp);
	for (size_t i = 1; i < img->tensors.ntensors; i++)
		if (!strcmp(img->tensors.tensors[i].name, img->tensors.tensors[i - 1].name)) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: tensor '%s' twice", path,
					 img->tensors.tensors[i].name);
			goto out;
		}
	img->tensors.nfiles = 1;
	img->tensors.paths = &img->path;
	struct sf_model m;
	if ((ret = sf_image_model(img, &m, e)))
		goto out;
	sf_model_close(&m);
	ret = 0;
out:
	free(htext);
	free(seen);
	free(refs);
	if (ret)
		sf_image_close(img);
	return ret;
}

// ----------------------------------------------------------------------------
// verify and info

/* CRC of [off, off + len) with crc, or a check that it is all zero. */
static int scan(const struct sf_image *img, uint64_t off, uint64_t len, uint8_t *buf, size_t cap,
		uint32_t *crc, const char *what, struct sf_err *e)
{
	while (len) {
		size_t k = len < cap ? (size_t)len : cap;
		int ret = image_read_at(img->fd, buf, k, off, img->path, e);
		if (ret)
			return ret;
		if (crc) {
			*crc = sf_crc32c(*crc, buf, k);
		} else {
			for (size_t i = 0; i < k; i++)
				if (buf[i])
					return sf_err_set(e, SF_EFORMAT, "%s: byte %" PRIu64 " in the padding "
							  "after %s is not zero: the image is damaged",
							  img->path, off + i, what);
		}
		off += k;
		len -= k;
	}
	return 0;
}

int sf_image_verify(const struct sf_image *img, struct sf_err *e)
{
	const size_t cap = 4u << 20;
	uint8_t *buf = malloc(cap);
	uint64_t hlen = 0;
	int ret = 0;

	if (!buf)
		return sf_err_set(e, -ENOMEM, "%s: out of memory", img->path);
	if ((ret = sf_image_unchanged(img, e)))
		goto out;
	unsigned char pre[SF_IMAGE_PREAMBLE];
	if ((ret = image_read_at(img->fd, pre, sizeof(pre), 0, img->path, e)))
		goto out;
	hlen = sf_get_le64(pre + 16);
	uint64_t prev = SF_IMAGE_PREAMBLE + hlen;
	const char *prev_name = "the header";
	for (size_t i = 0; i < img->nregions; i++) {
		const struct sf_image_region *R = &img->regions[i];
		uint32_t crc = 0;
		if ((ret = scan(img, prev, R->offset - prev, buf, cap, NULL, prev_name, e)) ||
		    (ret = scan(img, R->offset, R->length, buf, cap, &crc, R->name, e)))
			goto out;
		if (crc != R->crc32c) {
			ret = crc_mismatch(img, R, crc, e);
			goto out;
		}
		prev = R->offset + R->length;
		prev_name = R->name;
	}
	ret = scan(img, prev, img->file_size - prev, buf, cap, NULL, prev_name, e);
out:
	free(buf);
	return ret;
}

json_t *sf_image_info_json(const struct sf_image *img)
{
	uint64_t by_kind[SF_REGION_NKINDS] = { 0 }, in_regions = 0;
	json_t *o = json_object(), *sizes = json_object(), *regions = json_array(),
	       *groups = json_array(), *methods = json_object(), *dtypes = json_array(),
	       *top_by_dtype = json_object();

	for (size_t i = 0; i < img->nregions; i++) {
		const struct sf_image_region *R = &img->regions[i];
		char crc[9];
		snprintf(crc, sizeof(crc), "%08" PRIx32, R->crc32c);
		by_kind[R->kind] += R->length;
		in_regions += R->length;
		json_array_append_new(regions, json_pack("{s:s, s:s, s:I, s:I, s:s}", "name", R->name,
				      "kind", kind_names[R->kind], "offset", (json_int_t)R->offset,
				      "length", (json_int_t)R->length, "crc32c", crc));
	}
	uint64_t hlen = img->regions[0].offset;	/* preamble, header and its padding */
	json_object_set_new(sizes, "file", ju(img->file_size));
	json_object_set_new(sizes, "header", ju(hlen));
	for (int k = 0; k < SF_REGION_NKINDS; k++)
		json_object_set_new(sizes, kind_names[k], ju(by_kind[k]));
	json_object_set_new(sizes, "padding", ju(img->file_size - hlen - in_regions));
	for (int l = 0; l < img->cfg.n_layers; l++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			const struct sf_image_group *G = sf_image_group(img, l, (enum sf_group)g);
			json_t *x = json_pack("{s:i, s:s, s:b, s:I, s:I}", "layer", l, "group",
					      sf_group_name((enum sf_group)g), "resident", G->resident,
					      "entries", (json_int_t)G->entries, "source_entries",
					      (json_int_t)G->source_entries);
			json_t *md = json_array();
			for (int i = 0; i < G->nmat; i++) {
				const char *dn = sf_dtype_name(G->resident ? G->mat[i].source_dtype :
							       G->mat[i].dtype);
				json_array_append_new(md, json_string(dn));
				size_t j, n = json_array_size(dtypes);
				for (j = 0; j < n; j++)
					if (!strcmp(json_string_value(json_array_get(dtypes, j)), dn))
						break;
				if (!G->resident && j == n)
					json_array_append_new(dtypes, json_string(dn));
			}
			json_object_set_new(x, "dtypes", md);
			if (!G->resident) {
				/* a group's matrices share one dtype (sf-pack --dtype) */
				const char *dn = sf_dtype_name(G->mat[0].dtype);
				json_t *tb = json_object_get(top_by_dtype, dn);
				json_object_set_new(top_by_dtype, dn, ju((tb ? (uint64_t)json_integer_value(tb)
								  : 0) + (uint64_t)G->entries *
								 G->top_bytes));
				json_object_set_new(x, "method", json_string(G->method));
				json_object_set_new(x, "top_bytes", ju(G->top_bytes));
				json_object_set_new(x, "mid_bytes", ju(G->mid_bytes));
				json_t *c = json_object_get(methods, G->method);
				json_object_set_new(methods, G->method,
						    json_integer(c ? json_integer_value(c) + 1 : 1));
			}
			json_array_append_new(groups, x);
		}
	json_object_set_new(o, "file", json_string(img->path));
	json_object_set_new(o, "format", json_string(FORMAT_NAME));
	json_object_set_new(o, "version", json_integer(img->version));
	sf_fingerprint_put(o, &img->fingerprint);
	json_object_set(o, "producer", json_object_get(img->header, "producer"));
	json_object_set_new(o, "model", json_pack("{s:s, s:i, s:i, s:i, s:i}", "arch",
			    sf_arch_name(img->cfg.arch), "layers", img->cfg.n_layers, "dim",
			    img->cfg.dim, "hidden_dim", img->cfg.hidden_dim, "vocab_size",
			    img->cfg.vocab_size));
	/* the resident matrices sf-pack may quantize (their rows) */
	const char *names[2] = { "model.embed_tokens.weight",
				 img->cfg.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight" };
	for (int i = 0; i < 2; i++) {
		const struct sf_tensor *T = sf_safetensors_find(&img->tensors, names[i]);
		json_t *x = T ? json_pack("{s:s, s:s, s:I}", "dtype", sf_dtype_name(T->dtype),
					  "source_dtype", sf_dtype_name(T->source_dtype), "bytes",
					  (json_int_t)T->nbytes) : json_null();
		if (i == 1 && T)
			json_object_set_new(x, "tied", json_boolean(img->cfg.tie_embeddings));
		json_object_set_new(o, i ? "output" : "token_embedding", x);
	}
	json_object_set_new(sizes, "top_by_dtype", top_by_dtype);
	json_object_set_new(o, "sizes", sizes);
	json_object_set_new(o, "top_dtypes", dtypes);
	json_object_set_new(o, "placement_methods", methods);
	/* a mixture's routed experts: on flash, one record each */
	json_object_set_new(o, "experts", !img->experts.count ? json_null() :
			    json_pack("{s:i, s:i, s:s, s:I, s:b}", "count", img->experts.count, "used",
				      img->cfg.n_experts_used, "dtype",
				      sf_dtype_name(sf_dtype_untiled(img->experts.dtype)),
				      "record_bytes",
				      (json_int_t)img->experts.record_bytes,
				      "placed", img->experts.slot != NULL));
	json_object_set_new(o, "codes", img->has_codes ?
			    json_pack("{s:s, s:I}", "method", sf_codes_method_name(img->codes_method),
				      "seed", (json_int_t)img->codes_seed) : json_null());
	if (img->nbudgets) {
		json_t *b = json_array(), *r = json_array();
		for (size_t i = 0; i < img->nbudgets; i++) {
			json_array_append_new(b, json_real(img->budgets[i]));
			json_array_append_new(r, json_real(img->realised[i]));
		}
		json_object_set_new(o, "tiers", json_pack("{s:o, s:o}", "budgets", b, "realised", r));
	} else {
		json_object_set_new(o, "tiers", json_null());
	}
	json_object_set_new(o, "neurons", json_pack("{s:I, s:I}", "kept",
			    (json_int_t)img->kept_neurons, "total",
			    (json_int_t)img->cfg.n_layers * img->cfg.hidden_dim));
	json_object_set_new(o, "groups", groups);
	json_object_set_new(o, "regions", regions);
	return o;
}
