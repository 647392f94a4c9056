/* Command-line support: see cli.h. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *sf_progname = "sparseflash";

void sf_error(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", sf_progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void sf_usage_error(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", sf_progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help'.\n", sf_progname);
	exit(SF_EXIT_USAGE);
}

void sf_print_version(void)
{
	printf("%s (sparseflash) %s\n", sf_progname, SF_VERSION);
}

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

uint64_t sf_opt_u64(const char *opt, const char *s, uint64_t min, uint64_t max)
{
	uint64_t v;
	int ret = sf_parse_u64(s, min, max, &v);

	if (ret == -EINVAL)
		sf_usage_error("%s: '%s' is not a whole number", opt, s);
	if (ret)
		sf_usage_error("%s: %s is out of range: expected %llu..%llu", opt, s,
			       (unsigned long long)min, (unsigned long long)max);
	return v;
}

double sf_opt_f64(const char *opt, const char *s, double min, double max)
{
	double v;
	int ret = sf_parse_f64(s, min, max, &v);

	if (ret == -EINVAL)
		sf_usage_error("%s: '%s' is not a number", opt, s);
	if (ret)
		sf_usage_error("%s: %s is out of range: expected %g..%g", opt, s, min, max);
	return v;
}

int sf_close_stdout(void)
{
	int bad = ferror(stdout);

	if (fclose(stdout) != 0)
		bad = 1;
	if (bad) {
		sf_error("write error on standard output: %s",
			 errno ? strerror(errno) : "unknown error");
		return 1;
	}
	return 0;
}
