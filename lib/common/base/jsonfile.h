/* JSON documents read whole from a file or standard input under a size
 * limit, so that a hostile or runaway file is refused while it is read
 * rather than parsed into memory: the reader behind placement.json and
 * calib.json (man/sf-formats.5). Nesting is bounded by jansson itself
 * (JSON_PARSER_MAX_DEPTH, 2048 in Debian's 2.14). */
#ifndef SF_JSONFILE_H
#define SF_JSONFILE_H

#include <stdint.h>

#include <jansson.h>

#include "base/err.h"

/* Parses PATH ("-": standard input) with JSON_REJECT_DUPLICATES into *out.
 * 0; -errno naming the file; SF_ELIMIT "PATH: larger than the limit of MAX
 * bytes"; or SF_EFORMAT "PATH: line N: what jansson says". */
int sf_json_load(json_t **out, const char *path, uint64_t max, struct sf_err *e);

#endif
