/* The least --ram sf-run decodes an image in with its defaults, taken by
 * the decoder's own accounting (sf_sparse_open, what sf-run's refusal
 * names): sf-pack --info and --dry-run print it. See man/sf-pack.1. */
#ifndef SF_CLI_RAM_H
#define SF_CLI_RAM_H

#include "base/err.h"
#include "online/sparse.h"

/* Tokens per pass over the weights of sf-run's prompt and --ppl (-b). */
#define SF_RUN_DEFAULT_BATCH 64

/* Added to the figure: the resident set of one process stands for
 * another's, and sf-run's own varies by up to about 250 KiB from run to
 * run (the pages its allocator and loader happen to touch). */
#define SF_CLI_RAM_SLACK (512u << 10)

/* Opens the image at path as sf-run does without options (embedding rows
 * on flash, the tokenizer, the model's whole context, -b
 * SF_RUN_DEFAULT_BATCH, the sparse defaults, threads threads), sets up the
 * decoder without a cache and fills mem with its figures: mem->total is
 * the least --ram, this process's resident set standing for sf-run's.
 * Only the image's header and resident regions are read, so a skeleton
 * image (sf_image_pack_opts.skeleton) gives the packed image's figures. */
int sf_cli_ram_least(const char *path, int threads, struct sf_sparse_memory *mem,
		     struct sf_err *e);

#endif
