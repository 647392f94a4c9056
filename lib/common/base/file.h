/* Small whole files read into memory under a size limit (config.json,
 * tokenizer.json, the safetensors index): a regular file larger than the
 * limit is refused before it is read, anything else (a pipe, a character
 * device) while it is read, so a hostile or runaway file never fills
 * memory. The JSON stage files have their own streaming reader,
 * base/jsonfile.h. */
#ifndef SF_FILE_H
#define SF_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "base/err.h"

enum {
	SF_FILE_OPTIONAL = 1,	/* absent (ENOENT): 0 with *buf NULL, *len 0 */
	SF_FILE_REGULAR = 2,	/* anything but a regular file refused (a model's files) */
};

/* Opens PATH read-only for a file that must be regular (a model's
 * config, weights and tokenizer, an image): opened with O_NONBLOCK so a
 * FIFO cannot hang the open, then anything not regular refused and
 * O_NONBLOCK cleared. Returns the descriptor with *st filled; -errno
 * with "PATH: cannot open: why" (-ENOENT quietly when OPTIONAL and
 * absent: no message); or SF_EFORMAT "PATH: not a regular file". */
int sf_file_open_regular(const char *path, int flags, struct stat *st, struct sf_err *e);

/* Reads PATH whole into *buf (malloc'd, NUL-terminated after *len bytes;
 * the caller frees it); with SF_FILE_REGULAR opened as
 * sf_file_open_regular does. Returns 0; -errno with "PATH: cannot open:
 * why" or "PATH: read: why"; SF_EFORMAT "PATH: not a regular file"; or
 * SF_ELIMIT "PATH: larger than the limit of MAX
 * bytes" (with "(N MiB)" after it when MAX is whole MiB). A file that
 * shrinks while it is read gives what was there. */
int sf_file_read(const char *path, uint64_t max, int flags, char **buf, size_t *len,
		 struct sf_err *e);

#endif
