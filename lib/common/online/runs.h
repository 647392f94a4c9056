/* Runs: the reads a token's active entries need under a placement. Maps
 * entries to flash positions, groups sorted positions into runs (joining
 * runs whose gap is at most a collapse threshold), counts the bytes read
 * at 4 KiB granularity, and tallies all of it over tokens. sf-place --eval
 * reports these; the sparse decoder plans its reads with the same calls. */
#ifndef SF_RUNS_H
#define SF_RUNS_H

#include <stddef.h>
#include <stdint.h>

#include "formats/config.h"
#include "engine/forward.h"
#include "formats/safetensors.h"

/* Flash positions [start, start + len) fetched by one read. */
struct sf_run {
	uint32_t start, len;
};

#define SF_RUNS_BLOCK 4096	/* bytes: reads are whole aligned blocks */
#define SF_RUNS_NGAPS 6
/* Collapse thresholds reported: runs at most this many positions apart
 * are read as one, gap included. */
extern const uint32_t sf_runs_gaps[SF_RUNS_NGAPS];	/* 0, 1, 2, 4, 8, 16 */

/* inv[perm[p]] = p: the position of every entry. */
void sf_runs_inverse(const uint32_t *perm, uint32_t n, uint32_t *inv);

/* The positions of active[0..k) (distinct entries < n), ascending, into
 * pos[0..k). scratch: ceil(n / 64) zeroed words, left zeroed. Returns k. */
size_t sf_runs_positions(const uint32_t *inv, uint32_t n, const uint32_t *active, size_t k,
			 uint64_t *scratch, uint32_t *pos);

/* Runs over ascending distinct positions pos[0..k): a new run starts where
 * more than gap positions lie after the previous one. runs needs room for
 * k. Returns the number of runs. */
size_t sf_runs_plan(const uint32_t *pos, size_t k, uint32_t gap, struct sf_run *runs);

/* Bytes read for runs (ascending) of entries of entry_bytes each, from a
 * region aligned to block: the distinct blocks they touch times block. */
uint64_t sf_runs_bytes(const struct sf_run *runs, size_t nruns, uint64_t entry_bytes,
		       uint64_t block);

/* Bytes of one entry's bundle: column j of every matrix of the group
 * (attn_in: q, k, v; attn_out: o; ffn_in: gate, up; ffn_out: down). */
uint64_t sf_runs_bundle_bytes(const struct sf_config *c, enum sf_group g, enum sf_dtype dt);

/* Read lengths (gap 0) histogram: 1, 2, 3-4, 5-8, 9-16, 17-32, 33-64, 65+. */
#define SF_RUNS_NHIST 8
extern const char *const sf_runs_hist_names[SF_RUNS_NHIST];

/* Sums over tokens of one group under one placement. */
struct sf_runs_tally {
	uint64_t tokens;
	uint64_t active;			/* active entries */
	uint64_t runs[SF_RUNS_NGAPS];		/* reads, per collapse gap */
	uint64_t read[SF_RUNS_NGAPS];		/* entries read, gaps included */
	uint64_t bytes[SF_RUNS_NGAPS];		/* at SF_RUNS_BLOCK granularity */
	uint64_t hist[SF_RUNS_NHIST];		/* gap-0 runs by read length */
};

/* Adds one token whose active positions are pos[0..k) (ascending).
 * scratch: room for k runs. */
void sf_runs_tally_add(struct sf_runs_tally *t, const uint32_t *pos, size_t k,
		       uint64_t entry_bytes, struct sf_run *scratch);

#endif
