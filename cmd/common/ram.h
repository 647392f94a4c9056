/* The least --ram sf-run decodes an image in with its defaults, taken by
 * the decoder's own accounting (sf_sparse_open, what sf-run's refusal
 * names): sf-pack --info and --dry-run print it. See man/sf-pack.1. */
#ifndef SF_CLI_RAM_H
#define SF_CLI_RAM_H

#include "base/err.h"
#include "engine/forward.h"
#include "online/sparse.h"

/* Tokens per pass over the weights of sf-run's prompt and --ppl (-b). */
#define SF_RUN_DEFAULT_BATCH 64

/* Positions of the KV cache the least --ram leaves room for when -c does
 * not say: a short prompt and 64 tokens. */
#define SF_RUN_KV_LEAST 128

/* The sparse decoder's figures of a run state for --ram: its buffers, and
 * its KV cache, of which --ram must leave room for least positions
 * (sf_sparse_opts.kv_cost). */
void sf_cli_kv_opts(struct sf_sparse_opts *so, const struct sf_runstate *st,
		    const struct sf_config *cfg, int least);

/* Opens the image at path as sf-run does without options (embedding rows
 * on flash, the tokenizer, the model's whole context with room in the KV
 * cache for SF_RUN_KV_LEAST positions, -b
 * SF_RUN_DEFAULT_BATCH, the sparse defaults, threads threads), sets up the
 * decoder without a cache and fills mem with its figures: mem->total is
 * the least --ram, this process's resident set standing for sf-run's
 * (with SF_SPARSE_RUN_TO_RUN_BYTES, as sf-run's refusal names it).
 * Only the image's header and resident regions are read, so a skeleton
 * image (sf_image_pack_opts.skeleton) gives the packed image's figures. */
int sf_cli_ram_least(const char *path, int threads, struct sf_sparse_memory *mem,
		     struct sf_err *e);

#endif
