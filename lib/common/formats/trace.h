/* Activation traces (.sft), the stream sf-profile writes and sf-coact and
 * sf-place read: per token, layer and group the active set (and of a
 * mixture's layer the experts its router picks), then per entry the sum
 * of |value|. One writer and one reader; both stream (a pipe is
 * enough, nothing is sought). Byte layout: man/sf-formats.5 (TRACE). */
#ifndef SF_TRACE_H
#define SF_TRACE_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "base/vocab.h"
#include "formats/config.h"
#include "formats/model.h"

#define SF_TRACE_MAGIC "SFTRACE"	/* 8 bytes with its NUL */
#define SF_TRACE_VERSION 3	/* 2: fingerprint of the weights, shape_fingerprint;
				 * 3: a mixture's experts slots */
#define SF_TRACE_MIN_VERSION 2	/* the oldest the reader takes */
#define SF_TRACE_BLOCK_TOKENS 64	/* tokens per block the writer emits */
#define SF_TRACE_MAX_BLOCK_TOKENS 65536
#define SF_TRACE_MAX_HEADER (16u << 20)	/* bytes of JSON header */
#define SF_TRACE_MAX_ENTRIES (1u << 24)	/* entries of one group */
#define SF_TRACE_MAX_LAYERS 4096
/* Bytes a reader allocates for one block's bitmaps, the sums and its read
 * buffer: a 405B-parameter model needs about 0.3 GiB at 64 tokens a block. */
#define SF_TRACE_MAX_BUFFERS ((uint64_t)1 << 30)
#define SF_TRACE_BLOCK_HEADER 24	/* kind, ntokens, payload bytes, crc, reserved */

enum { SF_TRACE_KIND_TOKENS = 1, SF_TRACE_KIND_SUMS = 2 };

enum sf_trace_select { SF_TRACE_DENSITY, SF_TRACE_THRESHOLD };

/* How a slot's active sets are stored: a bitmap of ceil(n/64) 64-bit words
 * per token, or (density mode, when it is smaller) a count and the
 * ascending indices as 32-bit words. Readers always see bitmaps. */
enum sf_trace_encoding { SF_TRACE_BITMAP, SF_TRACE_INDEX };

/* One recorded (layer, group), or a mixture's layer's experts
 * (SF_GROUP_EXPERTS: n_experts entries, active the ones the router
 * picked for the token and gave a nonzero weight: 1 to k of them, k
 * the experts used whatever the selection). */
struct sf_trace_slot {
	int layer;
	enum sf_group group;
	uint32_t entries;		/* n: length of the group's input */
	uint32_t k;			/* density mode: round(density * n); experts: the
					 * experts used; else 0 */
	uint32_t words;			/* ceil(n / 64): 64-bit words of a bitmap row */
	enum sf_trace_encoding encoding;
};

/* What a trace holds, as its header states it. */
struct sf_trace_info {
	struct sf_fingerprint fingerprint;
	int n_layers;			/* the model's */
	uint32_t entries[SF_NKINDS];	/* the model's entries per group; experts:
					 * n_experts, 0 for a dense model */
	uint32_t experts_used;		/* a mixture's experts per token, else 0 */
	int layer_lo, layer_hi;		/* recorded layers, inclusive */
	unsigned groups;		/* bit g: group g recorded (SF_GROUP_EXPERTS too) */
	enum sf_trace_select select;
	double density;			/* density mode, in (0, 1] */
	double threshold;		/* threshold mode: active when |value| > threshold */
	uint32_t block_tokens;		/* most tokens in one block */
	int nslots;
	struct sf_trace_slot *slots;	/* (nslots) by layer, then group */
	const char *task;		/* NULL when untagged; points into header */
	json_t *header;			/* the whole JSON header */
};

/* The header's "selection" object, {"mode": "density", "density": v} or
 * the threshold's, as traces, .sfc and score files write it; and its
 * reader: 0, or -1 when sel is neither. */
json_t *sf_trace_selection_json(enum sf_trace_select select, double value);
int sf_trace_selection_parse(json_t *sel, enum sf_trace_select *select, double *value);

/* Entries selected by density d of n: round(d * n), halves away from zero. */
uint32_t sf_trace_density_k(double density, uint32_t n);

/* Fills *info for recording layers [layer_lo, layer_hi] and the groups in
 * the mask (SF_GROUP_EXPERTS's bit among them) of a model with n_layers
 * layers, entries[g] per group and experts_used experts a token (0 for a
 * dense model, whose entries[SF_GROUP_EXPERTS] is 0). value is the
 * density or the threshold, which the experts slots do not take. Refused:
 * a density outside (0, 1] or that selects no entry of a group, a
 * negative or non-finite threshold, layers outside the model, no group,
 * experts of a dense model, ffn_in or ffn_out of a mixture (its layers
 * have none), experts_used outside 1..n_experts. meta (task, corpora,
 * producer, options; may be NULL) is copied into the header. */
int sf_trace_info_init(struct sf_trace_info *info, const struct sf_fingerprint *fingerprint,
		       int n_layers, const uint32_t entries[SF_NKINDS], uint32_t experts_used,
		       int layer_lo, int layer_hi, unsigned groups, enum sf_trace_select select,
		       double value, json_t *meta, struct sf_err *e);
/* entries[] and the experts used a token of a model's config. */
void sf_trace_model_entries(const struct sf_config *c, uint32_t entries[SF_NKINDS],
			    uint32_t *experts_used);
/* The groups a model's layers have: the four, or a mixture's attn_in,
 * attn_out and experts. */
unsigned sf_trace_model_groups(const struct sf_config *c);
void sf_trace_info_free(struct sf_trace_info *info);	/* accepts a zeroed info */
/* Index of (layer, group) in info->slots, or -1 when not recorded. */
int sf_trace_slot_index(const struct sf_trace_info *info, int layer, enum sf_group g);

// ----------------------------------------------------------------------------
// writer

struct sf_trace_writer;

/* Writes the magic and header to f (not closed by the writer; name is
 * for messages). info is copied. The writer stores what its producer
 * hands it: each token a bitmap row per slot and the |value| sums (the
 * observer of the forward pass, offline/profile.h; or a synthetic trace's
 * generator). */
int sf_trace_writer_open(struct sf_trace_writer **w, FILE *f, const char *name,
			 const struct sf_trace_info *info, struct sf_err *e);
/* The writer's copy of the info, and its name for messages. */
const struct sf_trace_info *sf_trace_writer_info(const struct sf_trace_writer *w);
const char *sf_trace_writer_name(const struct sf_trace_writer *w);
/* The current token's bitmap row of a slot (slots[slot].words words,
 * zeroed), to fill with its active set; taking it marks the slot recorded
 * in this token. */
uint64_t *sf_trace_writer_row(struct sf_trace_writer *w, int slot);
/* Per entry sum of |value| of a slot over the trace, which the producer
 * adds to (zeros when it does not) and the trailer stores. */
double *sf_trace_writer_sums(struct sf_trace_writer *w, int slot);
/* Ends the current token: checks that every slot's row was taken, with no
 * bit past its entries (density mode: exactly k bits; experts: 1 to k),
 * and writes a block when it is full. */
int sf_trace_writer_token(struct sf_trace_writer *w, struct sf_err *e);
/* Writes the last block and the sums trailer and flushes f. */
int sf_trace_writer_finish(struct sf_trace_writer *w, struct sf_err *e);
uint64_t sf_trace_writer_tokens(const struct sf_trace_writer *w);
void sf_trace_writer_free(struct sf_trace_writer *w);	/* accepts NULL */

// ----------------------------------------------------------------------------
// reader

struct sf_trace_reader;

/* Opens path ("-": standard input), reads and checks the header; SF_ELIMIT
 * when its slots would need more than SF_TRACE_MAX_BUFFERS of buffers. */
int sf_trace_open(struct sf_trace_reader **r, const char *path, struct sf_err *e);
void sf_trace_close(struct sf_trace_reader *r);	/* accepts NULL */
const struct sf_trace_info *sf_trace_reader_info(const struct sf_trace_reader *r);
/* The name used in messages: the path, or "(stdin)". */
const char *sf_trace_reader_name(const struct sf_trace_reader *r);

/* Reads the next block: 1 with *ntokens set and sf_trace_rows valid until
 * the next call, 0 after the sums trailer was read and checked and the
 * stream ended, or a negative error (truncation, checksum, an active set
 * that breaks the header's selection, trailing bytes). */
int sf_trace_next(struct sf_trace_reader *r, uint32_t *ntokens, struct sf_err *e);
/* The block's rows of a slot: ntokens bitmaps of slots[slot].words words. */
const uint64_t *sf_trace_rows(const struct sf_trace_reader *r, int slot);
/* After sf_trace_next returned 0: per entry sum of |value| of a slot. */
const double *sf_trace_sums(const struct sf_trace_reader *r, int slot);
uint64_t sf_trace_tokens(const struct sf_trace_reader *r);

#endif
