/* Number and range parsing: see parse.h. */
#include "base/parse.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int sf_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (end == s)
		return -EINVAL;
	if (errno == ERANGE)
		return -ERANGE;
	switch (*end) {
	case 'K': case 'k': shift = 10; end++; break;
	case 'M': case 'm': shift = 20; end++; break;
	case 'G': case 'g': shift = 30; end++; break;
	case 'T': case 't': shift = 40; end++; break;
	}
	if (*end)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	v <<= shift;
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int sf_parse_f64(const char *s, double min, double max, double *out)
{
	char *end;
	double v;

	if (!s || !*s || *s == ' ')
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end)
		return -EINVAL;
	if (errno == ERANGE || isnan(v) || v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int sf_parse_range(const char *s, uint64_t max, int *lo, int *hi)
{
	const char *dash = strchr(s, '-');
	char first[32];
	uint64_t a, b;

	if (!dash) {
		if (sf_parse_u64(s, 0, max, &a))
			return -EINVAL;
		*lo = *hi = (int)a;
		return 0;
	}
	if ((size_t)(dash - s) >= sizeof(first))
		return -EINVAL;
	memcpy(first, s, (size_t)(dash - s));
	first[dash - s] = '\0';
	if (sf_parse_u64(first, 0, max, &a) || sf_parse_u64(dash + 1, 0, max, &b) || a > b)
		return -EINVAL;
	*lo = (int)a;
	*hi = (int)b;
	return 0;
}
