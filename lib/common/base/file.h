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

#include "base/err.h"

enum {
	SF_FILE_OPTIONAL = 1,	/* absent (ENOENT): 0 with *buf NULL, *len 0 */
};

/* Reads PATH whole into *buf (malloc'd, NUL-terminated after *len bytes;
 * the caller frees it). Returns 0; -errno with "PATH: cannot open: why"
 * or "PATH: read: why"; or SF_ELIMIT "PATH: larger than the limit of MAX
 * bytes" (with "(N MiB)" after it when MAX is whole MiB). A file that
 * shrinks while it is read gives what was there. */
int sf_file_read(const char *path, uint64_t max, int flags, char **buf, size_t *len,
		 struct sf_err *e);

#endif
