/* The flash image's parts, one file each (formats/image.h is their one
 * interface): image.c the preamble, header and regions and the reader's
 * and writer's drivers; image_resident.c the resident blob's tensors;
 * image_groups.c the groups' bundles, codes, permutations and tier
 * sizes; image_keep.c the neurons.json reader of --keep. Here what they
 * share: the writer's plan and byte stream, and the calls between them.
 * Private to formats/. */
#ifndef SF_IMAGE_IMPL_H
#define SF_IMAGE_IMPL_H

#include <stdint.h>

#include <jansson.h>

#include "formats/image.h"

#define FORMAT_NAME "sparseflash-image"

// ----------------------------------------------------------------------------
// writer: the plan (what goes where, before a byte is written)

struct pmat {
	const struct sf_weight *w;
	char tensor[64];
	uint64_t rows;		/* in the bundle */
	enum sf_dtype dt;
	uint64_t off, mid_off, mid_bytes;
};

struct pgroup {
	int resident;
	uint32_t entries, source_entries;
	const char *method;
	uint32_t *perm;		/* (entries) */
	uint32_t *rows;		/* (mat[0].rows) or NULL: all */
	int nmat;
	struct pmat mat[SF_GROUP_MAX_MATRICES];
	uint64_t top_bytes, mid_bytes;
	uint64_t perm_off, rows_off;	/* in the index region */
	int top_region, mid_region;	/* -1: none */
	const struct sf_sfq_section *sec;
};

struct ptensor {
	char name[96];
	const struct sf_weight *w;
	enum sf_dtype dt;	/* stored: w's, or a block dtype its rows are quantized to */
	int ndim;
	uint64_t off, len;	/* in the resident region */
};

struct pregion {
	char name[32];
	enum sf_image_kind kind;
	int layer;
	enum sf_group g;
	uint64_t offset, length;
	uint32_t crc;
};

/* A mixture's routed experts: the record layout (struct sf_image_experts)
 * and each layer's region. */
struct pexperts {
	int count;		/* 0: a dense model */
	enum sf_dtype dt, source_dt;
	uint64_t off[SF_IMAGE_EXPERT_MATRICES], record_bytes;
	int *region;		/* (nl) */
	uint32_t *order;	/* (nl, count) layer l's record s holds expert
				 * order[l * count + s] (the placement's); NULL:
				 * every layer in id order */
};

struct plan {
	const struct sf_image_pack_opts *o;
	int nl;
	struct pexperts x;
	struct pgroup *g;	/* (nl * SF_NGROUPS) */
	struct ptensor *t;
	size_t nt;
	struct pregion *r;
	size_t nr;
	uint64_t index_len;
	char *texts[3];		/* config.json, tokenizer.json, tokenizer_config.json */
	size_t text_len[3];
};

/* Region kind of layer's group g (layer -1, g 0 for the others) of length
 * bytes, named as man/sf-formats.5 says, appended to the plan. */
void image_add_region(struct plan *p, enum sf_image_kind kind, int layer, enum sf_group g,
		      uint64_t length);
/* The resident tensors and their region (image_resident.c). */
void image_plan_tensors(struct plan *p);
/* Group g of layer l: its positions, rows, bundle layout and inputs; the
 * inputs checked against the model first (image_groups.c). */
int image_plan_group(struct plan *p, int l, enum sf_group g, struct sf_err *e);
int image_check_inputs(const struct sf_image_pack_opts *o, struct sf_err *e);
/* The experts' record layout (image_experts.c); the header's "experts"
 * (null for a dense model); a layer's region of records. */
int image_plan_experts(struct plan *p, struct sf_err *e);
json_t *image_experts_json(const struct plan *p);
/* The header's "tensors" and "groups" arrays. */
json_t *image_tensors_json(const struct plan *p);
json_t *image_groups_json(const struct plan *p);

// ----------------------------------------------------------------------------
// writer: the bytes, through a buffer, each region's CRC-32C as it goes

struct wr {
	int fd;
	const char *name;	/* the temporary, for messages */
	uint64_t pos;		/* file offset of buf[0] + n */
	uint8_t *buf;
	size_t n;
	uint32_t crc;
	const struct sf_image_pack_opts *o;
	uint64_t total;
};

/* len bytes of data (NULL: zeros) at the stream's position, into the
 * region's CRC when crc; and a u32 little-endian. */
int image_wr_put(struct wr *w, const void *data, size_t len, int crc, struct sf_err *e);
int image_wr_u32(struct wr *w, uint32_t v, struct sf_err *e);
/* The regions' bytes: the resident blob, the index, a group's top and
 * middle tiers. */
int image_write_resident(struct wr *w, const struct plan *p, const struct pregion *r,
			 struct sf_err *e);
int image_write_index(struct wr *w, const struct plan *p, struct sf_err *e);
int image_write_top(struct wr *w, const struct sf_image_pack_opts *o, const struct pgroup *G,
		    struct sf_err *e);
int image_write_mid(struct wr *w, const struct pgroup *G, struct sf_err *e);
int image_write_experts(struct wr *w, const struct plan *p, int l, struct sf_err *e);
/* Matrix src's rows quantized to block dtype dt by o's method over o's
 * pool, a few MiB of rows at a time, written (named name in errors); in
 * tiles of SF_QTILE rows for a tiled dt (rows a multiple of SF_QTILE). */
int image_write_rows_quantized(struct wr *w, const char *name, const struct sf_weight *src,
			       enum sf_dtype dt, const struct sf_image_pack_opts *o,
			       struct sf_err *e);

// ----------------------------------------------------------------------------
// reader

/* len bytes at off of fd into buf, short reads retried; a file that ends
 * first is SF_EFORMAT naming path. */
int image_read_at(int fd, void *buf, size_t len, uint64_t off, const char *path,
		  struct sf_err *e);
/* The resident tensors of the header (nflash: the slots to leave for the
 * flash matrices), and the resident region read with sf_image_open_flags'
 * flags (image_resident.c). */
int image_open_tensors(struct sf_image *img, size_t nflash, struct sf_err *e);
int image_read_resident(struct sf_image *img, unsigned flags, struct sf_err *e);
/* Group g of layer l from its header object o, its permutation and rows
 * decoded into *u32 (advanced), seen and refs scratch; layer l's --keep
 * rows consistent across its FFN groups; the tier sizes (image_groups.c). */
int image_open_group(struct sf_image *img, json_t *o, int l, enum sf_group g, uint32_t **u32,
		     uint8_t *seen, int *refs, struct sf_err *e);
int image_check_keep(struct sf_image *img, int l, struct sf_err *e);
int image_open_tiers(struct sf_image *img, struct sf_err *e);
/* The header's "experts" against the config and its regions (refs:
 * regions claimed so far), and the expert matrices' slots in the tensor
 * table from *t on (nflash counted them: image_expert_tensors). */
int image_open_experts(struct sf_image *img, int *refs, struct sf_err *e);
size_t image_expert_tensors(const struct sf_config *c);
void image_add_expert_tensors(const struct sf_image *img, struct sf_tensor *t);

static inline uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static inline json_t *ju(uint64_t v)
{
	return json_integer((json_int_t)v);
}

#endif
