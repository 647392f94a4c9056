/* The one checked parser of numbers and layer ranges, for option values
 * and for text inside files: never clamps, reports not-a-number and
 * out-of-range apart so the caller can say which. */
#ifndef SF_PARSE_H
#define SF_PARSE_H

#include <stdint.h>

/* Parses an unsigned integer with an optional K/M/G/T suffix (powers of
 * 1024). Returns 0, -EINVAL when it is not a number, -ERANGE when outside
 * [min, max]. */
int sf_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
/* A finite decimal number in [min, max]: 0, -EINVAL or -ERANGE. */
int sf_parse_f64(const char *s, double min, double max, double *out);

/* "A-B" or "A" (inclusive, A <= B <= max) into *lo, *hi: 0, or -EINVAL. */
int sf_parse_range(const char *s, uint64_t max, int *lo, int *hi);

#endif
