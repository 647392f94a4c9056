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

/* Typed getters of an object's member, the one set every reader uses.
 * where names the object in messages ("calib.json: groups[3]"); each
 * failure is one SF_EFORMAT message of the form
 *   WHERE: "KEY" missing or not an integer
 *   WHERE: "KEY" is 7: expected 0..3
 * sf_json_int takes integers only; sf_json_count a whole number written
 * as an integer or a float (2.0); sf_json_num any finite number. */
int sf_json_int(json_t *o, const char *key, int64_t min, int64_t max, int64_t *out,
		const char *where, struct sf_err *e);
int sf_json_u64(json_t *o, const char *key, uint64_t max, uint64_t *out, const char *where,
		struct sf_err *e);
int sf_json_num(json_t *o, const char *key, double min, double max, double *out,
		const char *where, struct sf_err *e);
int sf_json_count(json_t *o, const char *key, double min, double max, double *out,
		  const char *where, struct sf_err *e);
/* A string member: 0 and *out set (valid while o lives), or SF_EFORMAT. */
int sf_json_str(json_t *o, const char *key, const char **out, const char *where,
		struct sf_err *e);
/* A member that may be absent: 1 when present (then read it with the
 * getters above), 0 when absent or JSON null. */
int sf_json_has(json_t *o, const char *key);

#endif
