/* Number and range parsing: see parse.h. */
#include "base/parse.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
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

/* A number of the layers grammar: -EINVAL, or -ERANGE past max. */
static int layer_number(const char *s, size_t len, uint64_t max, uint64_t *out)
{
	char buf[32];

	if (len == 0 || len >= sizeof(buf))
		return len ? -ERANGE : -EINVAL;
	memcpy(buf, s, len);
	buf[len] = '\0';
	for (size_t i = 0; i < len; i++)	/* digits only: no suffix, sign or space */
		if (buf[i] < '0' || buf[i] > '9')
			return -EINVAL;
	return sf_parse_u64(buf, 0, max, out);
}

int sf_parse_layers(const char *what, const char *s, int n, unsigned flags, uint8_t *set,
		    struct sf_err *e)
{
	const int model = flags & SF_LAYERS_MODEL;
	const char *p = s;

	memset(set, 0, (size_t)n);
	if (!strcmp(s, "none"))
		return 0;
	if (!strcmp(s, "all")) {
		memset(set, 1, (size_t)n);
		return 0;
	}
	for (;;) {
		size_t len = strcspn(p, ","), cut = strcspn(p, "-:");
		uint64_t a, b;
		int ra, rb;

		if (cut >= len) {	/* N */
			ra = layer_number(p, len, (uint64_t)n - 1, &a);
			rb = ra;
			b = a;
			cut = len;
		} else {		/* N-M or F:L */
			ra = layer_number(p, cut, (uint64_t)n - 1 + (p[cut] == ':'), &a);
			rb = layer_number(p + cut + 1, len - cut - 1,
					  (uint64_t)n - 1 + (p[cut] == ':'), &b);
		}
		if (ra == -EINVAL || rb == -EINVAL || (cut < len && p[cut] == '-' && !ra && !rb &&
						       a > b))
			return sf_err_set(e, -EINVAL, "%s: '%s' is not a list of layers: expected "
					  "N, N-M (N <= M), F:L, all or none, comma separated",
					  what, s);
		if (cut < len && p[cut] == ':' && !model)
			return sf_err_set(e, -EINVAL, "%s: '%s': F:L (the first F and the last L "
					  "layers) needs the model's layer count; give N-M", what,
					  s);
		if (ra || rb) {
			const char *bad = ra ? p : p + cut + 1;
			int blen = (int)(ra ? cut : len - cut - 1);
			if (cut < len && p[cut] == ':')
				return sf_err_set(e, -ERANGE, "%s: %.*s is more layers than the "
						  "model's %d", what, (int)len, p, n);
			if (model)
				return sf_err_set(e, -ERANGE, "%s: layer %.*s is out of range: the "
						  "model has layers 0..%d", what, blen, bad, n - 1);
			return sf_err_set(e, -ERANGE, "%s: layer %.*s is out of range: expected "
					  "0..%d", what, blen, bad, n - 1);
		}
		if (cut < len && p[cut] == ':') {	/* the first a, the last b */
			for (int i = 0; i < n; i++)
				if ((uint64_t)i < a || (uint64_t)i + b >= (uint64_t)n)
					set[i] = 1;
		} else {
			for (uint64_t i = a; i <= b; i++)
				set[i] = 1;
		}
		if (!p[len])
			return 0;
		p += len + 1;
	}
}
