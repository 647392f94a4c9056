/* What the two streamed formats share (.sft traces, .sfc co-activation
 * files; man/sf-formats.5): a file or standard input that begins with an
 * 8-byte magic, a u32 version and a u32 header length, then the JSON
 * header, padded to the format's alignment. One opener and one exact
 * reader serve both, so both name a truncation and a foreign file alike. */
#ifndef SF_STREAM_H
#define SF_STREAM_H

#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "base/err.h"

struct sf_stream_kind {
	char magic[8];
	uint32_t version;	/* the version written */
	uint32_t max_header;	/* bytes of JSON header at most */
	uint32_t align;		/* the header is padded to end on a multiple of it */
	const char *what;	/* "trace": "not a sparseflash trace", "trace version 3" */
	uint32_t min_version;	/* the oldest still read; 0: version alone */
};

struct sf_stream {
	FILE *f;
	int owns_file;
	char *name;		/* the path, or "(stdin)" */
	uint64_t offset;	/* bytes consumed */
	uint32_t version;	/* the stream's, min_version..version */
};

/* Opens path ("-": standard input), checks magic and version (the kind's
 * min_version to version) and reads the header, which must be a JSON
 * object, into *header (the caller's reference). On failure the stream
 * is closed. */
int sf_stream_open(struct sf_stream *s, const char *path, const struct sf_stream_kind *k,
		   json_t **header, struct sf_err *e);
/* n bytes, or an error naming what was being read ("block 0"). */
int sf_stream_read(struct sf_stream *s, void *buf, size_t n, const char *what, struct sf_err *e);
void sf_stream_close(struct sf_stream *s);	/* accepts a zeroed s */

#endif
