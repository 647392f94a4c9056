/* The flash image sf-pack writes and sf-run decodes from: a preamble, a
 * JSON header (config, tokenizer, placements, tier sizes, region table),
 * the resident blob, then per layer and group the top-tier bundles and the
 * middle-tier codes in placement order, each region 4 KiB aligned and
 * CRC-32C checked. One writer (sf_image_pack), one reader (sf_image_open).
 * Byte layout: man/sf-formats.5 (IMAGE); the command: man/sf-pack.1. */
#ifndef SF_IMAGE_H
#define SF_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "formats/calib.h"
#include "formats/codes.h"
#include "base/err.h"
#include "base/quant.h"
#include "base/vocab.h"
#include "formats/model.h"
#include "formats/placement.h"
#include "formats/safetensors.h"

#define SF_IMAGE_MAGIC "SFIMAGE\0"	/* 8 bytes, the last one NUL */
#define SF_IMAGE_VERSION 6	/* 3: q8/q4 columns hold their scales first;
				 * 4: the embedding and head may be quantized;
				 * 5: a mixture's experts, one region a layer;
				 * 6: q8/q4 experts' rows in tiles of 16 */
#define SF_IMAGE_VERSION_MIN 3	/* read too: 3 never quantized rows; 3 and 4 never
				 * experts (sf-pack refused mixtures then); 5's
				 * q8/q4 experts are plain rows */
#define SF_IMAGE_PREAMBLE 32		/* bytes before the JSON header */
#define SF_IMAGE_ALIGN 4096		/* every region starts on this */
#define SF_IMAGE_TENSOR_ALIGN 64	/* resident tensors inside the blob */
#define SF_IMAGE_MAX_HEADER ((uint64_t)1 << 30)	/* JSON bytes (tokenizers are large) */
#define SF_IMAGE_ABSENT UINT32_MAX	/* pos[] of an entry left out by --keep */

enum sf_image_kind {
	SF_REGION_RESIDENT,	/* embeddings, norms, head, biases, resident groups */
	SF_REGION_INDEX,	/* permutations and kept rows, u32 little-endian */
	SF_REGION_CODEBOOK,	/* the trellis codebook, f32 little-endian */
	SF_REGION_TOP,		/* a group's top-tier bundles */
	SF_REGION_MID,		/* a group's middle-tier records */
	SF_REGION_EXPERTS,	/* a mixture layer's routed experts, one record each */
	SF_REGION_NKINDS
};
const char *sf_image_kind_name(enum sf_image_kind k);

struct sf_image_region {
	char name[32];		/* "resident", "layer 3 ffn_in top", ...: for messages */
	enum sf_image_kind kind;
	int layer;		/* top and mid: the group's; else -1 */
	enum sf_group group;
	uint64_t offset;	/* from the file start; a multiple of SF_IMAGE_ALIGN */
	uint64_t length;	/* bytes covered by the checksum */
	uint32_t crc32c;
};

/* One matrix of a group as the image holds it. Within a top-tier bundle
 * its column is rows elements of dtype at byte offset; within a
 * middle-tier entry its sf_codes record of mid_bytes at mid_offset.
 * A column is sf_dtype_col_bytes(dtype, rows) bytes. */
struct sf_image_matrix {
	char name[8];			/* "q", "gate", ... */
	char tensor[64];		/* its Hugging Face tensor name */
	uint64_t rows;			/* rows in a bundle: the kept neurons with --keep */
	uint64_t source_rows;		/* rows of the model's matrix */
	uint64_t cols;			/* = the group's source entries */
	enum sf_dtype dtype;		/* of the top tier: an element or block dtype */
	enum sf_dtype source_dtype;	/* of the model (enters the fingerprint) */
	uint64_t offset;		/* in a top bundle; a multiple of sf_dtype_align */
	uint64_t mid_offset, mid_bytes;	/* in a middle entry; mid_bytes 0 without codes */
};

/* One layer's group. Flash position p holds entry perm[p]: its bundle is
 * the top region's bytes [p * top_bytes, (p + 1) * top_bytes), its codes
 * the mid region's [p * mid_bytes, (p + 1) * mid_bytes). Resident groups
 * have no positions: their matrices are resident tensors. */
struct sf_image_group {
	int layer;
	enum sf_group group;
	int resident;
	uint32_t entries;		/* positions: entries present on flash */
	uint32_t source_entries;	/* the group's input length */
	char method[16];		/* how perm was found: identity, frequency, coact */
	const uint32_t *perm;		/* (entries) entry id at each position */
	const uint32_t *pos;		/* (source_entries) position of each entry, or
					 * SF_IMAGE_ABSENT when left out by --keep */
	const uint32_t *rows;		/* ffn_in with --keep: (mat[0].rows) the neuron
					 * (gate/up row) of each bundle row, ascending;
					 * NULL: every row in model order */
	int nmat;
	struct sf_image_matrix mat[SF_GROUP_MAX_MATRICES];
	uint64_t top_bytes;		/* bundle stride: columns plus alignment */
	uint64_t mid_bytes;		/* middle entry stride; 0: no middle tier */
	const struct sf_image_region *top, *mid;	/* mid NULL without codes */
};

/* A mixture's routed experts (cfg.n_experts > 0): per layer one region
 * of n_experts records of record_bytes, expert x's at slot[l][x] *
 * record_bytes (x itself without a placement's order),
 * each holding its gate (hidden_dim, dim), up (hidden_dim, dim) and down
 * (dim, hidden_dim) row-major in dtype at off[0..2] (safetensors layout,
 * so that one expert is one contiguous read and computes exactly as the
 * dense engine does). record_bytes is a multiple of SF_IMAGE_ALIGN. */
#define SF_IMAGE_EXPERT_MATRICES 3
struct sf_image_experts {
	int count;			/* per layer: cfg.n_experts; 0 without experts */
	enum sf_dtype dtype;		/* F32, F16 or BF16: the model's; or Q8, Q6 or
					 * Q4 rows (sf-pack --dtype), each row its
					 * blocks' scales then their codes; Q8X16 or
					 * Q4X16 for Q8 or Q4 rows in tiles
					 * (version 6 on) */
	enum sf_dtype source_dtype;	/* the model's (the shape fingerprint's) */
	uint64_t off[SF_IMAGE_EXPERT_MATRICES];	/* gate, up, down in a record */
	uint64_t record_bytes;
	const struct sf_image_region **layer;	/* (n_layers) each layer's region */
	uint32_t *slot;		/* (n_layers, count) expert x's record in layer l's
				 * region, slot[l * count + x]; NULL: x's own */
};

struct sf_image {
	char *path;
	int fd;				/* read-only, buffered: verify reads through it */
	uint64_t file_size;
	int64_t mtime_ns;		/* when opened: a rewrite in place changes it */
	int version;			/* of the format: SF_IMAGE_VERSION_MIN..SF_IMAGE_VERSION */
	struct sf_fingerprint fingerprint;	/* weights: the header's, trusted (CRC);
						 * shape: checked against the tensors */
	json_t *header;			/* the whole JSON header */
	struct sf_config cfg;
	const char *config_text, *tokenizer_text, *tokenizer_config_text;	/* in header;
					 * tokenizer_config_text NULL when absent */
	size_t config_len, tokenizer_len, tokenizer_config_len;
	size_t nregions;
	struct sf_image_region *regions;	/* (nregions) in file order */
	struct sf_image_group *groups;	/* (n_layers * SF_NGROUPS) */
	int has_codes;
	enum sf_code_method codes_method;
	uint64_t codes_seed;
	const float *codebook;		/* (SF_TRELLIS_CODEBOOK), 64-byte aligned; trellis only */
	size_t nbudgets;		/* calibrated tier sizes; 0 without --calib */
	double *budgets, *realised;	/* (nbudgets) */
	uint64_t *k;			/* (nbudgets, n_layers, SF_NGROUPS, 2): k_top, k_mid */
	uint64_t kept_neurons;		/* over every layer; = n_layers * hidden_dim without --keep */
	struct sf_image_experts experts;	/* count 0 for a dense model */
	struct sf_safetensors tensors;	/* resident tensors (data in map) and flash
					 * matrices (data NULL), sorted by name */
	/* sf_image_open_flags: the byte ranges of the embedding and head
	 * left on flash (pages not read, so not resident), sorted; their sum */
	uint64_t on_flash[2][2];
	int n_on_flash;
	uint64_t left_on_flash;
	/* the resident region's bytes to read still: all of them (less
	 * left_on_flash) with SF_IMAGE_OPEN_DEFER_RESIDENT, until
	 * sf_image_load_resident; else 0 */
	uint64_t resident_unread;
	/* SF_IMAGE_OPEN_TILE_HEAD: the head's rows, bound as Q6X16, that
	 * sf_image_load_resident tiles once it has read them (rows 0: none) */
	struct {
		void *data;
		uint64_t rows, cols;
	} tile_head;
	/* private */
	void *map;			/* [0, end of the last non-flash region): read into
					 * anonymous pages (zero until read), not a
					 * mapping of the file */
	size_t map_size;
	uint32_t *u32;			/* decoded permutations, positions, rows */
	float *cb;
};

/* Opens PATH, reads the header and the resident regions into memory (not
 * mapped, so that a file truncated while open makes later reads fail,
 * never raises SIGBUS) and validates everything before use: magic,
 * version, header length and CRC, every region 4 KiB aligned, inside the
 * file, in order and not overlapping, resident tensors inside their
 * region, every group's layout against the config (matrix names, rows,
 * dtypes, strides, region lengths), every permutation a valid injection
 * without duplicates. Checksums of the
 * flash regions are not read here (sf_image_verify). On failure *img is
 * zeroed (fd -1). */
int sf_image_open(struct sf_image *img, const char *path, struct sf_err *e);
/* sf_image_open, and with SF_IMAGE_OPEN_EMBED_ON_FLASH the 4 KiB pages
 * wholly inside the embedding matrix are not read (the decoder reads its
 * rows from the file: sf_image_offset), nor with SF_IMAGE_OPEN_HEAD_ON_FLASH
 * too those of the output head; a tied head keeps the embedding in
 * memory unless both are given. Their bytes in memory are then not the
 * file's: only a caller that reads them from the file may ask. */
#define SF_IMAGE_OPEN_EMBED_ON_FLASH 1u
#define SF_IMAGE_OPEN_HEAD_ON_FLASH 2u
/* With SF_IMAGE_OPEN_DEFER_RESIDENT the resident region is not read (its
 * tensors read as zeros, their memory not yet the process's) until
 * sf_image_load_resident: a caller that sizes its memory from the header
 * first (sf-run's --ram) refuses a budget too small for the region before
 * reading it, where the read would meet a memory cgroup's limit first.
 * The model binds (sf_image_model) either way. */
#define SF_IMAGE_OPEN_DEFER_RESIDENT 4u
/* With SF_IMAGE_OPEN_TILE_HEAD an output head of Q6 rows held in memory
 * (the embedding too when tied), their count a multiple of SF_QTILE, is
 * bound as Q6X16 and its rows tiled in place once read (base/quant.h):
 * the products' floats are the rows' (engine/kernels_qrows.h), and the
 * AVX-512 kernels read tiles faster, so the caller asks where those run
 * (sf_qmatmul_rows_q6_tiles). */
#define SF_IMAGE_OPEN_TILE_HEAD 8u
int sf_image_open_flags(struct sf_image *img, const char *path, unsigned flags, struct sf_err *e);
/* The resident region's bytes that the open deferred, read (and the head
 * tiled): 0, or an error naming the file. */
int sf_image_load_resident(struct sf_image *img, struct sf_err *e);
/* The file offset of p, a pointer into a resident tensor of img. */
uint64_t sf_image_offset(const struct sf_image *img, const void *p);
void sf_image_close(struct sf_image *img);	/* accepts a zeroed img */
/* 0 while the file is the one opened: same size and modification time
 * (a rewrite in place changes them; a new file renamed over the path does
 * not matter, img keeps the old one). Else SF_EFORMAT naming the file. */
int sf_image_unchanged(const struct sf_image *img, struct sf_err *e);

static inline const struct sf_image_group *sf_image_group(const struct sf_image *img, int layer,
							  enum sf_group g)
{
	return &img->groups[(size_t)layer * SF_NGROUPS + (size_t)g];
}

/* File bytes of positions [a, b) (a <= b <= entries) of a group's top or
 * middle tier: one contiguous range. */
static inline void sf_image_top_range(const struct sf_image_group *g, uint32_t a, uint32_t b,
				      uint64_t *off, uint64_t *len)
{
	*off = g->top->offset + (uint64_t)a * g->top_bytes;
	*len = (uint64_t)(b - a) * g->top_bytes;
}

static inline void sf_image_mid_range(const struct sf_image_group *g, uint32_t a, uint32_t b,
				      uint64_t *off, uint64_t *len)
{
	*off = g->mid->offset + (uint64_t)a * g->mid_bytes;
	*len = (uint64_t)(b - a) * g->mid_bytes;
}

/* A byte range rounded out to SF_IMAGE_ALIGN for O_DIRECT; the image's
 * size is a multiple of it, so the result stays inside the file. */
static inline void sf_image_align(uint64_t off, uint64_t len, uint64_t *aoff, uint64_t *alen)
{
	uint64_t end = (off + len + SF_IMAGE_ALIGN - 1) & ~(uint64_t)(SF_IMAGE_ALIGN - 1);

	*aoff = off & ~(uint64_t)(SF_IMAGE_ALIGN - 1);
	*alen = end - *aoff;
}

/* File bytes of expert x of layer l (img->experts.count > 0): one
 * record, 4 KiB aligned, inside the file (checked at open). */
static inline void sf_image_expert_range(const struct sf_image *img, int l, int x, uint64_t *off,
					 uint64_t *len)
{
	uint64_t s = img->experts.slot ? img->experts.slot[(size_t)l * img->experts.count + x]
				       : (uint64_t)x;
	*off = img->experts.layer[l]->offset + s * img->experts.record_bytes;
	*len = img->experts.record_bytes;
}

/* Bytes of one expert's record in an image of the config's shape whose
 * experts are in dt: its gate, up and down, each aligned, the whole a
 * multiple of SF_IMAGE_ALIGN (one read an expert; sf-place --eval). */
uint64_t sf_image_expert_record_bytes(const struct sf_config *c, enum sf_dtype dt);

/* Expert x's weights in rec, the bytes of its record: data pointing into
 * rec, shapes from the config. */
void sf_image_expert_weights(const struct sf_image *img, const uint8_t *rec,
			     struct sf_expert_weights *w);

/* The codes view of matrix i for middle records read into buf, where buf
 * holds consecutive entries from some position a: column index p - a
 * reaches position p. */
struct sf_codes_view sf_image_mid_view(const struct sf_image *img, const struct sf_image_group *g,
				       int i, const uint8_t *buf);

/* Calibrated k_top and k_mid of budget b (0 <= b < nbudgets). They count
 * source entries; with --keep a group may have fewer positions. */
static inline void sf_image_tier(const struct sf_image *img, size_t b, int layer, enum sf_group g,
				 uint64_t *k_top, uint64_t *k_mid)
{
	const uint64_t *k = img->k + (((b * (size_t)img->cfg.n_layers) + (size_t)layer) *
				      SF_NGROUPS + (size_t)g) * 2;
	*k_top = k[0];
	*k_mid = k[1];
}

/* The model of the image: config, resident weights pointing into img's
 * memory, flash matrices with data NULL; the fingerprint is recomputed
 * and must equal the header's (SF_EFORMAT otherwise). img must outlive m;
 * close m with sf_model_close. */
int sf_image_model(const struct sf_image *img, struct sf_model *m, struct sf_err *e);
/* The tokenizer from the header's texts is built by the engine:
 * sf_tokenizer_open_image (engine/tokenizer.h). */

/* Reads every region and checks its CRC-32C and that the alignment
 * padding is zero: SF_EFORMAT naming the region on the first mismatch, or
 * saying the file changed size since sf_image_open (truncated while
 * open). sf-pack --verify then builds the tokenizer too. */
int sf_image_verify(const struct sf_image *img, struct sf_err *e);

/* The top tier's dtype (sf-pack --dtype gives every group on flash the
 * same): the first group on flash's, or -1 when every group is resident. */
int sf_image_top_dtype(const struct sf_image *img);

/* The sf-pack --info summary (see man/sf-pack.1). */
json_t *sf_image_info_json(const struct sf_image *img);

// ----------------------------------------------------------------------------
// writing

/* neurons.json for --keep: per layer the FFN neurons selective loading
 * loads; layers not listed keep every neuron (man/sf-pack.1). Written by
 * sf_selectinfer (online/selectinfer.h). */
#define SF_IMAGE_KEEP_FORMAT "sparseflash-neurons"
#define SF_IMAGE_KEEP_VERSION 2	/* 2: fingerprint of the weights, shape_fingerprint */
struct sf_image_keep {
	int n_layers;
	uint32_t hidden;	/* neurons per layer */
	uint8_t *kept;		/* (n_layers, hidden): 1 when kept */
	uint32_t *count;	/* (n_layers) kept neurons */
};
/* Reads and validates PATH against m: format, version, fingerprint,
 * every layer in range and listed once, neurons in range, not repeated,
 * at least one per listed layer. On failure *k is zeroed. */
int sf_image_keep_read(struct sf_image_keep *k, const char *path, const struct sf_model *m,
		       struct sf_err *e);
void sf_image_keep_free(struct sf_image_keep *k);	/* accepts a zeroed k */

#define SF_IMAGE_DTYPE_KEEP (-1)

struct sf_image_pack_opts {
	const struct sf_model *model;
	const char *model_dir;		/* its config.json and tokenizer files are copied */
	/* those three texts (NUL-terminated, the last may be NULL) when the
	 * model is a GGUF file, which has none: sf_config_json and
	 * sf_tokenizer_gguf_texts of its metadata; texts[0] NULL otherwise */
	const char *texts[3];
	const struct sf_placement *placement;	/* NULL: identity everywhere */
	const char *placement_path;
	const struct sf_sfq *codes;	/* NULL: no middle tier */
	const char *codes_path;
	const struct sf_calib *calib;	/* NULL: no tier sizes */
	const char *calib_path;
	const struct sf_image_keep *keep;	/* NULL: every neuron */
	const char *keep_path;
	unsigned resident;		/* bit g set: group g kept in the resident blob */
	int dtype;			/* top tier: SF_IMAGE_DTYPE_KEEP or an enum sf_dtype
					 * (a block dtype quantizes the groups on flash;
					 * resident ones keep the model's) */
	/* the rows of the embedding and the output head quantized to a block
	 * dtype (Q8, Q6, Q4), when it is one and the rows are whole blocks;
	 * any other value (0 included) keeps the model's. A tied head is the
	 * embedding: embed_dtype. */
	int embed_dtype, head_dtype;
	enum sf_quant_method quant;	/* a block dtype's scales (base/quant.h) */
	struct sf_pool *pool;		/* quantizes over its threads (NULL: the caller's) */
	json_t *producer;		/* {"program", "version", "options"}: borrowed */
	/* 1: the top- and middle-tier regions are left as holes (CRC 0): an
	 * image to take sf-run's memory figures from before packing (sf-pack
	 * --dry-run), which only --verify or decoding would tell apart */
	int skeleton;
	/* Called after each region with the bytes written so far (may be NULL). */
	void (*progress)(void *arg, uint64_t done, uint64_t total);
	void *progress_arg;
};

/* Writes the image with base/outfile.h (a regular file or a new name
 * only, since it is written with pwrite): to a temporary in PATH's
 * directory, fsynced and renamed to PATH; on any failure the temporary is
 * removed. An output that is one of the inputs (the model's safetensors,
 * the placement, codes, calib and keep files) is refused. Checks the
 * inputs belong to the model (fingerprints, groups, sizes) before
 * anything is written. Memory: per group its matrices in the top-tier
 * dtype (ffn_in: 2 * hidden_dim * dim elements) plus a 4 MiB buffer, and
 * for a block dtype one matrix in f32 (hidden_dim * dim * 4 bytes).
 * *written gets the file's size (may be NULL). */
int sf_image_pack(const char *path, const struct sf_image_pack_opts *o, uint64_t *written,
		  struct sf_err *e);

/* What sf_image_pack would write, without writing (sf-pack --dry-run):
 * the same plan and checks, so the figures are the image's. */
struct sf_image_estimate {
	uint64_t bytes;		/* the file */
	uint64_t header;	/* preamble and JSON header, aligned */
	uint64_t resident;	/* resident, index and codebook regions: read into RAM */
	uint64_t flash;		/* top- and middle-tier regions: read per token */
};
int sf_image_pack_estimate(const struct sf_image_pack_opts *o, struct sf_image_estimate *est,
			   struct sf_err *e);

#endif
