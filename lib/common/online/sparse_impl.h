/* The sparse decoder's state, private to online/sparse*.c: sparse.c sets
 * it up and tears it down, sparse_exec.c runs the per-token groups on it
 * (select, cache, plan, read, compute, admit), sparse_stats.c reports its
 * figures. The public side is online/sparse.h; options and figures in
 * man/sf-run.1. Shapes: L = img->cfg.n_layers, nmax = the most source
 * entries of a group on flash, words = (nmax + 63) / 64. */
#ifndef SF_SPARSE_IMPL_H
#define SF_SPARSE_IMPL_H

#include <stdint.h>

#include "engine/kernels.h"
#include "engine/kernels_q.h"
#include "online/runs.h"
#include "online/sparse.h"

/* One read request: [aoff, aoff + alen) of the file into buf (NULL with
 * --simulate). */
struct req {
	uint64_t aoff;
	uint32_t alen;
	uint8_t *buf;
};

/* A read buffer: one flash group's regions as they lie in the file, the
 * top tier at 0 and the middle tier after it, and which of its 4 KiB
 * pages are asked for and which have arrived (page x: bytes
 * [x * 4096, (x + 1) * 4096) of mem). A page is asked for once: by the
 * group's own plan, or earlier by --prefetch (those also in ahead until
 * the plan finds it needs them). */
struct iobuf {
	uint8_t *mem;			/* (io.buf_bytes); NULL with --simulate */
	uint64_t *asked, *arrived, *ahead;	/* (io.page_words) page bitmaps */
	struct req *reqs;		/* (io.buf_pages + 1) */
	size_t nreq;
	uint32_t inflight;		/* requests queued and not reaped */
	long gid;			/* the group held: layer * SF_NGROUPS + g; -1: none */
	uint64_t *pred;			/* (words) the entries predicted for it, */
	int predicted;			/* when it was */
};

/* Where a tier's region lies: in the file at base, stride bytes a
 * position, in a buffer at lay, cap bytes of it. */
struct sparse_tier {
	uint64_t base, stride, lay, cap;
};

/* Figures of one group kind summed over layers and tokens. */
struct gtally {
	uint64_t computed;	/* (layer, token) pairs computed from flash */
	uint64_t entries;	/* of those: source entries */
	uint64_t k_top, k_mid;
	double budget;		/* sum of Equation 5 */
	uint64_t hits, requests, bytes_moved, bytes_needed;
	uint64_t riders;	/* entries promoted by --free-riders */
	/* --prefetch: bytes asked ahead; of them, bytes the selection
	 * needed; bytes of pages the selection needed that were not */
	uint64_t ahead_bytes, ahead_used, unread_needed;
	/* entries predicted; of them selected; entries selected where a
	 * prediction was made */
	uint64_t pred_entries, pred_hits, pred_selected;
};

/* What each group computes: its tier sizes, and the entries it may
 * compute at all. */
struct sparse_tiers {
	uint32_t *k_top, *k_mid;		/* (L, SF_NGROUPS) entries per tier */
	uint64_t col_top[SF_NGROUPS];		/* bytes of one source entry's columns */
	uint64_t col_mid[SF_NGROUPS];		/* bytes of one entry's middle-tier record */
	size_t words;				/* 64-bit words of one entry bitmap */
	/* (L * SF_NGROUPS) NULL, or the entries of the group that may be
	 * computed (present on flash: --keep; within the computation set);
	 * keep_allow the same without the computation set. Both point
	 * into allow_bits: (groups packed with --keep, words) */
	uint64_t **allow, **keep_allow, *allow_bits;
	uint64_t allow_bytes;
	/* --free-riders: (page_words) the 4 KiB pages the top tier touches */
	uint64_t *pages;
	size_t page_words;
};

/* Reading: the ring and the buffers its requests land in (with
 * --simulate one buffer's bitmaps, the bytes being the flash regions in
 * RAM). */
struct sparse_io {
	struct sf_uring *u;			/* NULL with --simulate */
	struct iobuf *bufs;			/* (nbuf) the running group's at cur, */
	int nbuf, cur;				/* then the groups read ahead */
	uint8_t *arena;				/* (nbuf * buf_bytes) their memory */
	uint64_t buf_bytes, buf_pages;		/* the largest group's regions */
	size_t page_words;
	uint32_t read_size;			/* bytes of one request at most */
	long *order;				/* (norder) the flash groups in pass order */
	size_t *seq;				/* (L * SF_NGROUPS) a group's index in order */
	size_t norder;
	uint8_t *flash;				/* simulate: file bytes [flash_base, ...) */
	uint64_t flash_base, flash_bytes;
	uint64_t inflight;			/* requests queued and not reaped */
	double busy_since;			/* when inflight last left 0 */
};

/* The embedding rows and the output head read from flash when the image
 * was opened without them (sf_image_open_flags): a row per token, and
 * the head streamed in chunks of rows through slots, each chunk computed
 * as it arrives. */
struct sparse_head {
	int embed, head;			/* read from flash */
	uint64_t embed_off, head_off;		/* file offsets of the matrices */
	uint64_t embed_row_bytes, head_row_bytes;	/* dim elements in each's dtype */
	uint8_t *row;				/* (row_buf) an embedding row's read */
	uint64_t row_buf;
	uint32_t chunk_rows;			/* head rows a read: a multiple of 16 */
	int slots;
	uint64_t slot_bytes;
	uint8_t *mem;				/* (slots * slot_bytes) */
	uint8_t *done;				/* (slots + 1) the last: the row */
	uint64_t *chunk_off;			/* (slots) where each slot's rows start */
	uint64_t *read_off, *read_len;		/* (slots + 1) each slot's read */
	uint64_t bytes;				/* read for the head and embedding */
};

/* --prefetch-predict: the last normed input of attn_in or ffn_in, the
 * norm gains, the previous pass's selections, and scratch. */
struct sparse_predict {
	uint32_t n;				/* hidden dim */
	float *x;				/* (n) */
	int x_layer;				/* -1: none yet */
	enum sf_group x_g;
	float *gain;				/* (L, 2, n) attn_norm, ffn_norm */
	float *score;				/* (n) */
	uint64_t *history;			/* (L, SF_NGROUPS, 2, words) top, both tiers */
	uint64_t *top, *all;			/* (words) */
	uint32_t *ents, *tpos, *mpos;		/* (nmax) */
};

/* --collapse: the gap reads are joined across, and auto's window. */
struct sparse_collapse {
	int gap;				/* entries */
	uint64_t gap_bytes, auto_gap_bytes;	/* bytes between requests read to join them */
	char desc[96];				/* sf_sparse_collapse_desc */
	uint64_t win_bytes[SF_SPARSE_AUTO_WINDOW];	/* the last tokens' bytes read */
	double win_span[SF_SPARSE_AUTO_WINDOW];		/* and their I/O spans */
	uint64_t tokens_on, tokens_off;		/* tokens run with a gap, without */
};

/* The cache of top-tier bundles, and the pinned set in it. */
struct sparse_cache {
	struct sf_cache *c;
	int use;				/* cached or pinned entries to look up */
	const void **slots;			/* (nmax) per top entry its slot, or NULL */
	uint32_t *tent;				/* (nmax) per top entry its entry id */
};

/* Per-group scratch, sized for the largest group. */
struct sparse_scratch {
	uint32_t nmax;
	uint64_t *bits_top, *bits_all;		/* (words) top tier; both tiers */
	uint64_t *pscratch;			/* (words) sf_runs_positions */
	uint32_t *sel_scratch;			/* (2 * nmax) top-k; riders merged */
	uint32_t *ents;				/* (nmax) entries; then the misses' positions */
	uint32_t *tpos, *mpos;			/* (nmax) positions per tier, ascending */
	uint32_t *runlen;			/* (nmax) per miss the length of its run */
	/* The batch being gathered: per entry its position p and where its
	 * bundle is (a cache slot, or the tier's mirror at p), and per entry
	 * and token its input and whether the token selected it (~0 or 0),
	 * ldx a pass (1 for one token, else the tokens padded to
	 * SF_BATCH_PAD, the padding 0) */
	uint32_t *idx;				/* (nmax) */
	const void **cols;			/* (nmax) */
	const uint8_t *mirror;
	float *xv;				/* (nmax, ldx) */
	uint32_t *sel;				/* (nmax, ldx) */
	size_t ldx;
	float *xt;				/* (nmax, ldx) a pass's inputs by position */
	/* a pass of several tokens: each one's selected positions per
	 * tier, and their unions */
	int tokens;				/* o.tokens, at least 1 */
	uint64_t *tok_top, *tok_mid;		/* (tokens, words) */
	uint64_t *any_top, *any_mid;		/* (words) */
	struct sf_run *runs;			/* (nmax) */
	size_t nidx;
	/* the outputs of sparse_staged matrices computed here, then copied
	 * (kept rows scattered to their neurons); (SF_GROUP_MAX_MATRICES,
	 * tokens, ldy), ldy the most rows of one, padded off 4 KiB */
	float *yrows;
	uint64_t ldy;
};

/* SelectInfer's selective computation (o.compute). */
struct sparse_compute {
	struct sf_select_compute *sc;		/* NULL: off */
	int fixed;				/* the set restricts the passes */
	uint64_t prefill_left;			/* passes still observed */
	uint64_t *set_bits;			/* (L, words) the set as ffn_out allow */
	const uint8_t **set_mask;		/* (L) neurons computed; NULL: all */
	struct sf_run *spans;			/* (L, rows_all) ffn_in row spans */
	uint32_t *nspans;			/* (L) */
	uint64_t rows_all;			/* most ffn_in bundle rows of a layer */
	double rho;
	uint64_t bytes;				/* the selection's memory, for --ram */
	/* figures: passes restricted, their ffn_out entries and ffn_in
	 * rows; the set's size and how it was chosen, over layers */
	uint64_t passes, entries, rows, n_set, n_static, n_dynamic;
	int layers;
};

/* Groups held whole in RAM as slabs (sparse_slab.c). */
struct sparse_slabs {
	uint8_t *held;				/* (L * SF_NGROUPS) 1: held; NULL: none */
	int groups;
	struct sf_slab *mat;			/* (L * SF_NGROUPS, SF_GROUP_MAX_MATRICES) */
	uint8_t *mem;				/* (mem.slabs bytes) every slab */
};

/* A mixture's routed experts (sparse_experts.c): whole records in
 * slots, the least recently used given up first; none with --simulate,
 * whose flash copy holds them. Expert ids are layer * n + x. */
struct sparse_experts {
	int n;					/* experts a layer; 0: a dense model */
	int layers;				/* the model's (img->cfg.n_layers) */
	uint64_t record;			/* bytes of one (img->experts.record_bytes) */
	int slots;
	uint8_t *mem;				/* (slots, record) 4 KiB aligned */
	long *held;				/* (slots) the expert id held, or -1 */
	uint64_t *stamp;			/* (slots) last use; 0: free */
	uint32_t *pending;			/* (slots) its reads not yet arrived */
	int *slot_of;				/* (L * n) the slot holding it, or -1 */
	uint8_t *picked;			/* (n) this pass's picks still to run */
	uint8_t *ahead;				/* (n) read ahead for layer ahead_layer */
	int ahead_layer;			/* -1: none */
	uint64_t clock;
	struct sf_expert_weights w;		/* the one handed to the forward pass */
	/* figures: (layer, pass, expert) picks; (token, expert) routes;
	 * picks found in a slot, picks read; bytes read; experts read ahead,
	 * of them picked at their layer, picks read there though guessed for */
	uint64_t uses, tokens_routed, hits, misses, bytes;
	uint64_t ahead_reads, ahead_used, ahead_missed;
	uint64_t loaded;			/* experts read at open */
};

/* Timing and the --stats figures. */
struct sparse_stats {
	uint64_t tokens;			/* tokens finished */
	int pass_tokens;			/* tokens of the current pass, 0: none yet */
	double t_token;				/* start of the current pass */
	double *lat;				/* (o.max_tokens) seconds */
	uint64_t nlat;
	uint64_t tok_bytes;			/* this token's bytes read */
	double tok_span;			/* and I/O span */
	double compute_s, wait_s, span_s, exec_s;
	double overlap_s;			/* compute while reads were in flight */
	uint64_t requests, bytes_moved, bytes_needed, runs_total, runs_positions;
	uint64_t hist[SF_RUNS_NHIST];		/* runs by read length */
	struct gtally g[SF_NGROUPS];
};

struct sf_sparse {
	const struct sf_image *img;
	const struct sf_model *m;
	struct sf_pool *pool;
	/* the options, batch_weights resolved; pin and compute are
	 * borrowed for the set-up only and NULL after it */
	struct sf_sparse_opts o;
	struct sf_group_exec exec;
	int failed;				/* the first read error; then zeros */
	struct sf_err err;

	struct sparse_tiers tiers;
	struct sparse_io io;
	struct sparse_predict pred;
	struct sparse_head head;
	struct sparse_collapse collapse;
	struct sparse_cache cache;
	struct sparse_scratch s;
	struct sparse_compute comp;
	struct sparse_slabs slab;
	struct sparse_experts xp;
	struct sparse_stats st;
	struct sf_sparse_memory mem;
};

static inline uint64_t sparse_round_up(uint64_t v)
{
	return (v + SF_IMAGE_ALIGN - 1) & ~(uint64_t)(SF_IMAGE_ALIGN - 1);
}

/* The batch's floats per entry for a pass of T tokens (s.ldx). */
static inline size_t sparse_ldx(int T)
{
	return T > 1 ? ((size_t)T + SF_BATCH_PAD - 1) / SF_BATCH_PAD * SF_BATCH_PAD : 1;
}

/* Whether a pass of T tokens computes matrix i of G into s.yrows: with
 * kept rows (--keep), whose outputs are scattered to their neurons after;
 * and with rows a multiple of 1,024, where a token's outputs 4 KiB apart
 * fall into the same cache sets for every token of the pass (qint
 * --tokens 64: 2,048 rows at a stride of 2,048 passed 13% slower than at
 * 2,064). */
static inline int sparse_staged(const struct sf_image_group *G, int i, int T)
{
	return G->rows || (T > 1 && G->mat[i].rows % 1024 == 0);
}

/* Bytes of one entry's columns in the image's top-tier dtype: the rows
 * the image holds, or (source) the model's, which the budget is a share
 * of (so a q4 image's budget counts q4 bytes, as SpAx's). */
static inline uint64_t sparse_col_bytes(const struct sf_image_group *G, int source)
{
	uint64_t b = 0;
	for (int k = 0; k < G->nmat; k++)
		b += sf_dtype_col_bytes(G->mat[k].dtype,
					source ? G->mat[k].source_rows : G->mat[k].rows);
	return b;
}

/* sparse_read.c: the ring of read buffers (bytes it takes for --ram),
 * opened with or without their memory (--simulate); the buffer for
 * group gid as it runs; its plan (ahead: for --prefetch); submit; reap
 * (wait 1: at least one); every read waited for after an error; the
 * next groups read ahead; the inputs and selections the predictions
 * use. */
uint64_t sparse_reads_bytes(uint64_t buf_bytes, int nbuf, size_t entry_words);
int sparse_reads_open(struct sf_sparse *sp, uint64_t buf_bytes, int nbuf, int with_memory);
void sparse_reads_close(struct sf_sparse *sp);
int sparse_buffer(struct sf_sparse *sp, long gid, struct iobuf **b);
void sparse_tiers_of(const struct sf_image_group *G, struct sparse_tier *top,
		     struct sparse_tier *mid);
int sparse_plan(struct sf_sparse *sp, struct iobuf *b, const struct sparse_tier *t,
		const uint32_t *pos, size_t k, uint32_t *runlen, int ahead, struct gtally *gt);
int sparse_submit(struct sf_sparse *sp);
int sparse_reap(struct sf_sparse *sp, int wait);
void sparse_reads_drain(struct sf_sparse *sp);
int sparse_prefetch(struct sf_sparse *sp, long gid);
/* The prediction made for the group in b, if any, against its selection
 * (bitmap over n entries). */
void sparse_score_prediction(const struct iobuf *b, const uint64_t *sel,
			     uint32_t n, struct gtally *gt);
void sparse_observe(struct sf_sparse *sp, int l, enum sf_group g, const float *in, size_t n,
		    const uint64_t *top, const uint64_t *all);
/* The embedding and head on flash: sizes (bytes for --ram), set-up,
 * and the struct sf_group_exec hooks. */
uint64_t sparse_head_bytes(const struct sf_sparse *sp);
int sparse_head_open(struct sf_sparse *sp);
void sparse_head_close(struct sf_sparse *sp);
void sparse_embed_row(void *ctx, int32_t token, float *out);
void sparse_head_logits(void *ctx, const float *x, float *logits);

/* Whether the pages of bytes [off, off + len) of b have all arrived. */
static inline int sparse_arrived(const struct iobuf *b, uint64_t off, uint64_t len)
{
	for (uint64_t x = off / SF_IMAGE_ALIGN; x <= (off + len - 1) / SF_IMAGE_ALIGN; x++)
		if (!(b->arrived[x / 64] >> (x % 64) & 1))
			return 0;
	return 1;
}

/* sparse.c: pread of [off, off + len) of the image, whole. */
int sparse_pread(const struct sf_image *img, uint8_t *buf, uint64_t len, uint64_t off,
		 struct sf_err *e);
/* The same, then the page cache's copy dropped: what is held from open is
 * read once and not worth the cache's room. */
int sparse_pread_once(const struct sf_image *img, uint8_t *buf, uint64_t len, uint64_t off,
		      struct sf_err *e);

/* Whether --ram's room holds groups whole and, with a slot for each, every
 * expert, read at open: a budget with no --cache-ratio or --pin. */
static inline int sparse_hold_whole(const struct sf_sparse_opts *o)
{
	return o->ram && !o->simulate && o->cache_ratio < 0 && !o->pin;
}

/* sparse_slab.c: the groups to hold in room bytes (marked in slab.held,
 * their top-tier bytes and entries taken from offloaded and entries, per
 * group kind) and their bytes; reading them in (after the read buffers
 * are open); freeing. */
uint64_t sparse_slabs_plan(struct sf_sparse *sp, uint64_t room, uint64_t *offloaded,
			   uint64_t *entries);
int sparse_slabs_load(struct sf_sparse *sp, uint64_t bytes, struct sf_err *e);
void sparse_slabs_free(struct sf_sparse *sp);

/* Whether group gid is held whole. */
static inline int sparse_held(const struct sf_sparse *sp, long gid)
{
	return sp->slab.held && sp->slab.held[gid];
}

/* sparse_read.c: queues the read of [off, off + len) of the file (4 KiB
 * aligned) into buf in requests of at most read_size, each tagged for
 * expert slot and counted in *pending. */
int sparse_read_record(struct sf_sparse *sp, uint32_t slot, uint8_t *buf, uint64_t off,
		       uint64_t len, uint32_t *pending);

/* sparse_experts.c: the bytes of slots records and the lookups; set-up
 * (slots 0: --simulate's copy holds them); every expert read at open when
 * it has a slot and sparse_hold_whole (the read-ahead then off); the
 * exec's hooks; a slot's
 * request arrived; every read given up (after an error); the --stats
 * figures (per: 1 / tokens). */
uint64_t sparse_experts_bytes(const struct sf_image *img, int slots);
int sparse_experts_open(struct sf_sparse *sp, int slots);
int sparse_experts_load(struct sf_sparse *sp, struct sf_err *e);
void sparse_experts_close(struct sf_sparse *sp);
void sparse_experts_plan(void *ctx, int layer, const float *route, int T);
const struct sf_expert_weights *sparse_expert(void *ctx, int layer, int x);
void sparse_experts_ahead(void *ctx, int layer, const float *route, int T);
void sparse_experts_arrived(struct sf_sparse *sp, uint32_t slot);
void sparse_experts_drain(struct sf_sparse *sp);
json_t *sparse_experts_json(const struct sf_sparse *sp, double per);

/* sparse_exec.c: the struct sf_group_exec function (ctx: the decoder). */
void sf_sparse_group_exec(void *ctx, int layer, enum sf_group g, const float *in, int T,
			  size_t n, int nout, float *const *out, const struct sf_weight *const *w);
/* The tokens the next pass may hold: o.tokens, fewer while selective
 * computation's prefill ends within them. */
void sparse_pass_tokens(struct sf_sparse *sp);

#endif
