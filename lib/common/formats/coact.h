/* Co-activation statistics (.sfc): per layer and group the token count,
 * per-entry activation counts and |value| sums, and pairwise counts; of a
 * mixture's experts also the step from the layer before. The
 * statistics in memory, the one reader (which also merges shards) and the
 * one writer. Accumulation from traces: offline/coact.h; SelectInfer
 * scores: formats/scores.h. Bytes: man/sf-formats.5 (COACT); commands:
 * man/sf-coact.1. */
#ifndef SF_COACT_H
#define SF_COACT_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "base/pool.h"
#include "formats/trace.h"

#define SF_COACT_MAGIC "SFCOACT"	/* 8 bytes with its NUL */
#define SF_COACT_VERSION 3	/* 2: fingerprint of the weights, shape_fingerprint;
				 * 3: experts slots and their steps */
#define SF_COACT_MIN_VERSION 2	/* the oldest the reader takes */
#define SF_COACT_MAX_HEADER (64u << 20)
/* Tokens transposed into per-entry bit vectors before one pair pass. */
#define SF_COACT_BLOCK_TOKENS 4096
#define SF_COACT_BLOCK_WORDS (SF_COACT_BLOCK_TOKENS / 64)
/* Pair counts are 32-bit: no slot may count more tokens than this. */
#define SF_COACT_MAX_TOKENS UINT32_MAX

/* One layer and group (or a layer's experts, SF_GROUP_EXPERTS). Pair
 * (i, j), i < j, is at sf_coact_pair_index. */
struct sf_coact_slot {
	int layer;
	enum sf_group group;
	uint32_t entries;	/* n */
	int step;		/* experts: 1 when the step from the layer before is
				 * counted (its experts were in the traces) */
	uint64_t tokens;	/* tokens counted */
	uint64_t *counts;	/* (n) tokens in which entry i is active */
	double *sums;		/* (n) sum over tokens of |value| */
	uint32_t *pairs;	/* (n * (n - 1) / 2) tokens in which i and j both are */
	uint32_t *steps;	/* step: (n, n) tokens in which expert i was picked at
				 * layer - 1 and j at this layer, [i * n + j] */
	json_t *tasks;		/* {task: tokens} of the tagged tokens */
	uint64_t *bits;		/* accumulation: (n, SF_COACT_BLOCK_WORDS) */
};

struct sf_coact {
	struct sf_fingerprint fingerprint;
	int n_layers;
	uint32_t entries[SF_NKINDS];	/* experts: 0 for a dense model */
	enum sf_trace_select select;
	double value;		/* the density or threshold */
	int nslots;
	struct sf_coact_slot *slots;	/* (nslots) by layer, then group */
	json_t *sources;	/* what went in: trace headers' provenance */
	const char *first;	/* the input that set the model, for messages */
	/* accumulation from traces (offline/coact.h) */
	uint32_t pending;	/* tokens transposed, not yet in the pairs */
	struct sf_pool *pool;	/* NULL: the caller's thread */
	/* called after each trace block with the tokens added so far */
	void (*progress)(void *ctx, uint64_t tokens);
	void *progress_ctx;
};

static inline uint64_t sf_coact_pair_index(uint32_t n, uint32_t i, uint32_t j)
{
	return (uint64_t)i * (2 * (uint64_t)n - i - 1) / 2 + (j - i - 1);
}

static inline uint64_t sf_coact_npairs(uint32_t n)
{
	return (uint64_t)n * (n - 1) / 2;
}

/* Inserts the slot (layer, g) in order unless c has it; its entries are
 * c->entries[g], step as given (experts only). *slot (may be NULL) is
 * set to it. */
int sf_coact_add_slot(struct sf_coact *c, int layer, enum sf_group g, int step,
		      struct sf_coact_slot **slot, struct sf_err *e);
/* tasks[task] += tokens ({task: tokens} maps; NULL task: nothing). 0, or
 * -1 when out of memory. */
int sf_coact_add_task(json_t *tasks, const char *task, uint64_t tokens);
/* Bytes sf_coact_alloc will take, so the command can state it first. */
uint64_t sf_coact_bytes(const struct sf_coact *c, int accumulate);
/* Bytes of reading c's files slot by slot (sf_coact_read_slot, the pairs
 * dropped after each): every slot's counts and sums, the largest slot's
 * pairs. At Llama-2-7B's shape 240 MiB, against 11 GiB for all at once. */
uint64_t sf_coact_stream_bytes(const struct sf_coact *c);
/* Allocates the statistics (zeroed); with accumulate, also the per-slot
 * bit vectors that traces are transposed into. */
int sf_coact_alloc(struct sf_coact *c, int accumulate, struct sf_err *e);
void sf_coact_drop_pairs(struct sf_coact_slot *s);	/* frees s's pairs and steps */
void sf_coact_free(struct sf_coact *c);	/* accepts a zeroed c */

// ----------------------------------------------------------------------------
// .sfc files

struct sf_coact_file;

/* Opens path ("-": standard input) and reads its header. */
int sf_coact_file_open(struct sf_coact_file **f, const char *path, struct sf_err *e);
void sf_coact_file_close(struct sf_coact_file *f);	/* accepts NULL */
/* Sets c up for the union of the files' slots within layers [lo, hi],
 * their tokens and tasks summed from the files' headers; the files must be
 * of one model and selection (else SF_EMISMATCH naming both files). */
int sf_coact_plan_files(struct sf_coact *c, struct sf_coact_file *const *f, int n, int lo,
			int hi, struct sf_err *e);
/* Adds every section of f that c holds (the rest are read past); c
 * planned from f among others, and allocated. */
int sf_coact_add_file(struct sf_coact *c, struct sf_coact_file *f, struct sf_err *e);
/* Slot s of c (planned from f[0, n)) allocated where it is not, and the
 * sections of it that the files hold added, each file read past what
 * comes before: called for slots in increasing order, it reads the files
 * once, holding only the slots the caller keeps. */
int sf_coact_read_slot(struct sf_coact *c, int s, struct sf_coact_file *const *f, int n,
		       struct sf_err *e);
/* Loads the slots of path within [lo, hi] into a fresh c. */
int sf_coact_load(struct sf_coact *c, const char *path, int lo, int hi, struct sf_err *e);

/* Writes c as .sfc to f (name for messages); meta (producer, options; may
 * be NULL) goes into the header. The same in parts: the header (which
 * needs every slot's tokens and tasks, not its statistics), then each
 * slot in order. */
int sf_coact_write(const struct sf_coact *c, FILE *f, const char *name, json_t *meta,
		   struct sf_err *e);
int sf_coact_write_header(const struct sf_coact *c, FILE *f, const char *name, json_t *meta,
			  struct sf_err *e);
int sf_coact_write_slot(const struct sf_coact_slot *s, FILE *f, const char *name,
			struct sf_err *e);

/* CRC-32C of a slot's section as sf_coact_write lays it out: equal
 * statistics give equal checksums (sf-coact --info prints them). */
uint32_t sf_coact_slot_crc(const struct sf_coact_slot *s);

/* A summary for jq: per slot tokens, mean active entries per token over
 * n, the share of entries active in more than half the tokens, crc; of
 * experts also each one's picks, and with a step how much of this
 * layer's picks the layer before's predict (sf-coact(1), --info); slots
 * the array of sf_coact_slot_info_json (taken), NULL: of every slot. */
json_t *sf_coact_slot_info_json(const struct sf_coact_slot *s);
json_t *sf_coact_info_json(const struct sf_coact *c, json_t *slots);

#endif
