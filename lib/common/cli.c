/* Command-line support: see cli.h. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

double sf_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void sf_progress_init(struct sf_progress *p, int force, const char *unit)
{
	p->on = force || isatty(STDERR_FILENO);
	p->unit = unit;
	p->t0 = p->last = sf_now();
}

static void progress_line(struct sf_progress *p, uint64_t done, double fraction, double t)
{
	double rate = t > p->t0 ? (double)done / (t - p->t0) : 0.0;
	fprintf(stderr, "\r%s: %llu %s, %.1f %s/s", sf_progname, (unsigned long long)done,
		p->unit, rate, p->unit);
	if (fraction > 0 && fraction < 1)
		fprintf(stderr, ", ETA %.0f s  ", (t - p->t0) * (1 - fraction) / fraction);
	else
		fputs("  ", stderr);
}

void sf_progress_update(struct sf_progress *p, uint64_t done, double fraction)
{
	double t;
	if (!p->on || (t = sf_now()) - p->last < 0.5)
		return;
	p->last = t;
	progress_line(p, done, fraction, t);
}

void sf_progress_end(struct sf_progress *p, uint64_t done)
{
	if (!p->on)
		return;
	progress_line(p, done, 1.0, sf_now());
	fputc('\n', stderr);
}

int sf_out_open(struct sf_out *o, const char *path, int binary)
{
	struct stat st;
	int fd;

	memset(o, 0, sizeof(*o));
	if (!path || strcmp(path, "-") == 0) {
		o->path = "(stdout)";
		if (binary && isatty(STDOUT_FILENO)) {
			sf_error("refusing to write binary output to a terminal; use -o FILE or "
				 "a pipe");
			return -EINVAL;
		}
		o->f = stdout;
		return 0;
	}
	o->path = path;
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		if (!(o->f = fopen(path, "wb"))) {
			sf_error("%s: %s", path, strerror(errno));
			return -errno;
		}
		return 0;
	}
	size_t n = strlen(path);
	if (!(o->tmp = malloc(n + 16))) {
		sf_error("%s: %s", path, strerror(ENOMEM));
		return -ENOMEM;
	}
	snprintf(o->tmp, n + 16, "%s.tmp.XXXXXX", path);
	if ((fd = mkstemp(o->tmp)) < 0 || !(o->f = fdopen(fd, "wb"))) {
		int err = errno;
		sf_error("%s: %s", path, strerror(err));
		if (fd >= 0) {
			close(fd);
			unlink(o->tmp);
		}
		free(o->tmp);
		o->tmp = NULL;
		return -err;
	}
	/* mkstemp makes the file 0600; an output file gets the usual mode */
	mode_t mask = umask(0);
	umask(mask);
	fchmod(fd, 0666 & ~mask);
	return 0;
}

int sf_out_commit(struct sf_out *o)
{
	int ret = 0;

	if (o->f == stdout) {
		if (fflush(stdout)) {
			sf_error("write error on standard output: %s", strerror(errno));
			ret = -EIO;
		}
		o->f = NULL;
		return ret;
	}
	if (fflush(o->f) || ferror(o->f) || (o->tmp && fsync(fileno(o->f)))) {
		ret = -(errno ? errno : EIO);
		sf_error("%s: write error: %s", o->path, strerror(-ret));
	}
	if (fclose(o->f) && !ret) {
		ret = -(errno ? errno : EIO);
		sf_error("%s: write error: %s", o->path, strerror(-ret));
	}
	o->f = NULL;
	if (!ret && o->tmp && rename(o->tmp, o->path)) {
		ret = -errno;
		sf_error("%s: %s", o->path, strerror(errno));
	}
	if (ret && o->tmp)
		unlink(o->tmp);
	free(o->tmp);
	o->tmp = NULL;
	return ret;
}

void sf_out_abort(struct sf_out *o)
{
	if (o->f && o->f != stdout)
		fclose(o->f);
	if (o->tmp) {
		unlink(o->tmp);
		free(o->tmp);
	}
	memset(o, 0, sizeof(*o));
}
