/* The sparse decoder: computes every flash group of an image from the
 * columns its input selects (top tier, middle tier, omitted), reading them
 * with collapsed, 4 KiB aligned io_uring reads and a linking-aligned cache,
 * computing on runs in position order as they complete. It plugs into the
 * forward pass as its struct sf_group_exec. man/sf-run.1. */
#ifndef SF_SPARSE_H
#define SF_SPARSE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "online/cache.h"
#include "base/err.h"
#include "engine/forward.h"
#include "formats/image.h"
#include "formats/model.h"
#include "base/pool.h"
#include "online/selectinfer.h"
#include "online/uring.h"

#define SF_SPARSE_COLLAPSE_AUTO (-1)
/* --collapse auto's gap when the device's small-read IOPS are not known:
 * about a request's worth of transfer on flash of 1.5-2 GB/s and 50-70k
 * IOPS, in bytes so that it means the same for columns of any dtype (a q4
 * column is a quarter of a BF16 one). Known, the gap is peak bytes/s over
 * small-read IOPS (below), so reading a gap never costs more than the
 * request it saves. */
#define SF_SPARSE_AUTO_GAP_BYTES 32768
/* While reads are in flight, the columns that have arrived are computed
 * once they hold this many weights (and at a tier's end). Each batch is
 * a pass over the outputs and a wake of the workers: computing after
 * every completion made compute from flash 4-5x its --simulate time at
 * the Llama-2-7B shape. Any batching gives the same sums. */
#define SF_SPARSE_BATCH_WEIGHTS ((uint64_t)1 << 20)
/* auto: reads are bandwidth-bound, and collapse is off, while the achieved
 * bandwidth of the last SF_SPARSE_AUTO_WINDOW tokens is at least this
 * share of the device's peak. */
#define SF_SPARSE_BW_BOUND 0.8
#define SF_SPARSE_AUTO_WINDOW 4

/* Bytes of one read at most, unless --read-size or the probe says: the
 * request size --probe-device measures the device's peak with, which
 * the device serves many at once where one large read is split into a
 * few large bios served at depth 1. */
#define SF_SPARSE_READ_SIZE SF_URING_PROBE_LARGE
#define SF_SPARSE_PREFETCH 1	/* groups read ahead */

/* What --prefetch reads ahead where the selection is not known before
 * the group's input is: nothing; the entries the residual stream ranks
 * highest (attn_in, ffn_in); those and the previous pass's selection
 * (attn_out, ffn_out). */
enum sf_sparse_predict {
	SF_SPARSE_PREDICT_NONE,
	SF_SPARSE_PREDICT_RESIDUAL,
	SF_SPARSE_PREDICT_ALL,
};
const char *sf_sparse_predict_name(enum sf_sparse_predict p);	/* "none", "residual", "all" */
int sf_sparse_predict_parse(const char *name, enum sf_sparse_predict *p);	/* 0 or -EINVAL */

enum sf_sparse_select {
	SF_SPARSE_BUDGET,	/* the image's calibrated k_top, k_mid of a budget */
	SF_SPARSE_DENSITY,	/* TEAL: round(density * n) top tier, no middle */
	SF_SPARSE_FRACTIONS,	/* k_top = round(top * n), k_mid = round(mid * n) */
};

struct sf_sparse_opts {
	enum sf_sparse_select select;
	double budget;			/* BUDGET: one of img->budgets, or 1 (every entry top) */
	double density;			/* DENSITY, in (0, 1] */
	double top, mid;		/* FRACTIONS, each in [0, 1], top + mid <= 1 */
	int collapse;			/* gap in positions, or SF_SPARSE_COLLAPSE_AUTO */
	double device_peak;		/* bytes/s for auto; 0: unknown (fixed gap) */
	double device_iops;		/* 4 KiB reads/s at depth; 0: unknown (gap in entries) */
	unsigned qd;			/* 0: SF_URING_DEFAULT_QD */
	uint32_t read_size;		/* bytes of one read at most, a multiple of 4096;
					 * 0: SF_SPARSE_READ_SIZE */
	/* Groups whose reads are asked for while the one before computes
	 * (a read buffer each); 0: none. The output does not change. */
	int prefetch;
	enum sf_sparse_predict predict;
	uint64_t batch_weights;		/* 0: SF_SPARSE_BATCH_WEIGHTS */
	/* A q8 or q4 top tier's products: 1, the float path (every weight
	 * widened to f32, one multiply-add a weight and token: the
	 * reference); 0, the integer path (sf_qcolaccum_int: activations to
	 * int8 with the block scales folded in). */
	int f32_activations;
	/* Tokens one forward pass may give the decoder (sf_forward_batch;
	 * 0 counts as 1): per group the union of their selections is read
	 * once, and each token computed with exactly its own. */
	int tokens;
	int buffered;			/* no O_DIRECT */
	int simulate;			/* flash regions read into RAM once; no I/O after */
	enum sf_cache_policy policy;
	double seg_admit;
	double cache_ratio;		/* < 0: cache from ram; else share of offloaded bytes */
	uint64_t ram;			/* 0: no limit */
	uint64_t state_bytes;		/* the run state the caller holds, but its KV cache */
	/* The caller's KV cache: what its positions cost (all 0: not
	 * counted; a sliding layer's ring stops growing), the positions its
	 * context holds, and the least of them --ram must leave room for (0:
	 * all). Its memory is taken as positions fill, so it counts only the
	 * positions granted (sf_sparse_memory.kv_positions): all when they
	 * fit in a quarter of what --ram leaves after the rest and an empty
	 * cache, else that quarter but at least kv_least; without --ram or
	 * with --cache-ratio, all. */
	struct sf_kv_cost kv_cost;
	uint32_t kv_positions, kv_least;
	uint64_t max_tokens;		/* latencies recorded for percentiles */
	/* Entries whose whole bundle lies in a 4 KiB page the top tier's own
	 * bundles touch cost no read: they join the top tier (from the
	 * middle tier or omitted). Chosen from the selection alone, before
	 * the cache and without the collapse gaps, so the output still does
	 * not depend on the cache, collapse, queue depth or threads. */
	int free_riders;
	/* SelectInfer's selective loading: these entries are read once at
	 * open and held in RAM, never evicted (NULL: none; borrowed, may be
	 * freed after sf_sparse_open). Entries --keep left out are skipped;
	 * with simulate nothing is pinned (no cache is consulted). */
	const struct sf_select_load *pin;
	/* SelectInfer's selective computation (NULL: none; borrowed during
	 * open, with its dense layers): the forward passes sf_sparse_prefill
	 * announces are observed, then for every pass after them the
	 * ffn_out entries of the layers not dense are only those of the
	 * chosen neurons (intersected with the usual selection) and the
	 * ffn_in rows computed only theirs (the others output 0). */
	const struct sf_select_compute_opts *compute;
	const struct sf_scores *compute_static;	/* static scores, or NULL */
	const char *compute_static_name;	/* for messages */
	struct sf_uring_fault fault;	/* test only: the reads' fault injection (uring.h) */
	/* Called for every request asked for (not with --simulate), in the
	 * order they are queued: the forward pass it belongs to (0 based),
	 * file offset and length; NULL: none. For replaying the requests on
	 * the raw device (sf-run --read-log). */
	void (*on_read)(void *ctx, uint64_t pass, uint64_t offset, uint32_t len);
	void *on_read_ctx;
};

/* Defaults: budget 1, collapse auto, S3-FIFO, SF_CACHE_DEFAULT_SEG_ADMIT,
 * no cache ratio, no RAM limit, SF_SPARSE_PREFETCH groups ahead with the
 * residual prediction. */
void sf_sparse_opts_default(struct sf_sparse_opts *o);

/* Bytes sf-run keeps, for the --ram check and -v. */
struct sf_sparse_memory {
	/* the process's resident set when the decoder is set up (code,
	 * libraries, tokenizer; the image's regions read into memory count
	 * under resident instead), plus SF_SPARSE_LATER_BYTES */
	uint64_t process;
	uint64_t resident;	/* the header and resident blob, read into memory */
	uint64_t state;		/* the run state but its KV cache (the caller's figure) */
	uint64_t kv;		/* the KV cache for kv_positions positions */
	uint32_t kv_positions;	/* granted: the caller stops there */
	uint64_t buffers;	/* read buffers and per-group scratch */
	uint64_t pinned;	/* the pinned set: slots and metadata */
	uint64_t slabs;		/* groups held whole, in the integer kernels' layout */
	uint64_t cache;		/* cache slots and metadata */
	uint64_t experts;	/* a mixture's expert slots and lookups */
	uint32_t expert_slots;	/* experts held: a token's picks at least; 0 with
				 * --simulate or no experts */
	uint64_t simulate;	/* --simulate: the flash regions in RAM */
	uint64_t offloaded;	/* top-tier bytes on flash (what --cache-ratio scales) */
	uint64_t total;
	uint64_t least;		/* the least --ram these options run in: no read-ahead,
				 * the KV cache's least positions, an empty cache */
};

/* What sf-run's resident set grows by after the decoder is set up, so
 * the resident set at that point cannot show it: the code first run by
 * the passes (kernels, sampler, the read ahead), reading the --ppl corpus
 * or the prompt (64 KiB chunks, line buffers, the tokens) and building
 * the --stats or --bench JSON. Up to about 480 KiB measured on mix4-5m's
 * --ppl; reserved twofold, so the peak resident set stays under --ram. */
#define SF_SPARSE_LATER_BYTES (1024u << 10)

/* The resident set at set-up moves from run to run by some hundreds of
 * KiB (the pages the allocator, the loader and the threads happen to
 * touch), and one process's stands for another's: the least --ram a
 * refusal names (and sf-pack --info's) adds this much, so that the figure
 * named runs. */
#define SF_SPARSE_RUN_TO_RUN_BYTES (1024u << 10)

struct sf_sparse;

/* Sets up decoding of img (m: its sf_image_model) on the pool (NULL: the
 * caller): resolves the tier sizes (SF_EUNSUPPORTED for a budget the image
 * was not calibrated for, listing those it was; a middle tier without
 * codes), sizes the cache, checks the memory budget (SF_ELIMIT with the
 * figures), allocates every buffer, opens the ring (or, with simulate,
 * reads the flash regions). An image whose resident region is deferred
 * (SF_IMAGE_OPEN_DEFER_RESIDENT) gets the budget checked, then -EINVAL:
 * the figures need no weights, decoding does. Images packed with --keep run as they are:
 * the neurons left out are never computed (their ffn_out entries never
 * selected, their ffn_in rows absent, so their activation is 0). *sp
 * NULL on error. */
int sf_sparse_open(struct sf_sparse **sp, const struct sf_image *img, const struct sf_model *m,
		   struct sf_pool *pool, const struct sf_sparse_opts *o, struct sf_err *e);
void sf_sparse_close(struct sf_sparse *sp);	/* accepts NULL */

/* Selective computation: the next `tokens` forward passes are a prefill
 * (computed with the usual selection and observed); at the start of the
 * pass after them the neurons are chosen and restrict every later pass,
 * until the next call. Without a call the set is chosen at the first pass
 * from the static scores alone. No effect without o->compute. */
void sf_sparse_prefill(struct sf_sparse *sp, uint64_t tokens);
/* The selection state (for its masks), or NULL without o->compute. */
const struct sf_select_compute *sf_sparse_compute(const struct sf_sparse *sp);

/* The exec to set as sf_runstate.exec. */
const struct sf_group_exec *sf_sparse_exec(struct sf_sparse *sp);
/* After a forward pass: 0, or the first read error (message in *e),
 * including the image rewritten in place under the decoder
 * (sf_image_unchanged); after one every later group outputs zeros and
 * reads nothing, so the caller must stop. */
int sf_sparse_error(struct sf_sparse *sp, struct sf_err *e);

void sf_sparse_memory(const struct sf_sparse *sp, struct sf_sparse_memory *mem);
/* The collapse gap in use now and how it was chosen ("N (fixed)",
 * "auto: N bytes, ...", "auto without device figures ..."), for -v. */
const char *sf_sparse_collapse_desc(const struct sf_sparse *sp);
const char *sf_sparse_backend(const struct sf_sparse *sp);	/* "io_uring", "pread", "simulate" */
/* The groups read ahead: --prefetch, or 0 with --simulate or when --ram
 * could not hold their buffers beside the least KV cache. */
int sf_sparse_prefetch(const struct sf_sparse *sp);

/* Bytes read from flash so far (the figures' bytes_moved): a run's
 * bytes over a span of passes, e.g. speculative decoding's per token. */
uint64_t sf_sparse_bytes_moved(const struct sf_sparse *sp);

/* The column cache's lookups and hits so far (every group's; 0 without
 * a cache): a few sums, cheap enough for every decode step, unlike
 * sf_sparse_stats_json. */
void sf_sparse_cache_counts(const struct sf_sparse *sp, uint64_t *lookups, uint64_t *hits);

/* The --bench / --stats figures so far (see man/sf-run.1): a new object. */
json_t *sf_sparse_stats_json(struct sf_sparse *sp);

#endif
