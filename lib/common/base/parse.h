/* The one checked parser of numbers and layer ranges, for option values
 * and for text inside files: never clamps, reports not-a-number and
 * out-of-range apart so the caller can say which. */
#ifndef SF_PARSE_H
#define SF_PARSE_H

#include <stdint.h>

#include "base/err.h"

/* Parses an unsigned integer with an optional K/M/G/T suffix (powers of
 * 1024). Returns 0, -EINVAL when it is not a number, -ERANGE when outside
 * [min, max]. */
int sf_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
/* A finite decimal number in [min, max]: 0, -EINVAL or -ERANGE. */
int sf_parse_f64(const char *s, double min, double max, double *out);

/* The one layers grammar (sparseflash(7), LAYERS) of --layers and
 * --dense-layers: "all", "none", or comma-separated items, each a layer N,
 * a range N-M (N <= M), or F:L, the first F and the last L layers. set
 * (n bytes) gets 1 for each layer chosen. n is the model's layer count
 * with SF_LAYERS_MODEL, else only an upper bound (F:L then refused, as it
 * needs the count). Returns 0; -EINVAL for text outside the grammar,
 * -ERANGE for a layer past n - 1 (or a number too large to read), with
 * one message "WHAT: ..." in e. */
#define SF_LAYERS_MODEL 1
int sf_parse_layers(const char *what, const char *s, int n, unsigned flags, uint8_t *set,
		    struct sf_err *e);

#endif
