/* Command-line support: see cli.h. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <unistd.h>

#include "base/err.h"
#include "base/guard.h"
#include "engine/cpu.h"

const char *sf_progname = "sparseflash";

void sf_cli_start(const char *progname)
{
	const char *ref = getenv("SF_REF");

	sf_progname = progname;
	sf_catch_sigbus();
	if (ref && *ref && strcmp(ref, "0") != 0)
		sf_cpu_use(SF_ISA_REF);
}

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
	struct sf_err e = { 0 };
	if (sf_guard_tmp(o->tmp, &e)) {
		sf_error("%s", e.msg);
		fclose(o->f);
		unlink(o->tmp);
		free(o->tmp);
		memset(o, 0, sizeof(*o));
		return SF_ELIMIT;
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
	sf_guard_untmp(o->tmp);
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
		sf_guard_untmp(o->tmp);
		free(o->tmp);
	}
	memset(o, 0, sizeof(*o));
}

// --- the SIGBUS guard

static struct sigaction sigbus_next;	/* the action before ours (ASan's, or the default) */
static _Atomic int sigbus_taken;	/* a thread is reporting one: the others wait */

/* Appends s to buf[*n, cap) without calling libc: async-signal-safe. */
static void put(char *buf, size_t *n, size_t cap, const char *s)
{
	while (*s && *n < cap)
		buf[(*n)++] = *s++;
}

/* Only async-signal-safe calls from here on: the guard's lookups, a
 * lock-free atomic, write, unlink, pause, sigaction, raise and _exit. */
static void on_sigbus(int sig, siginfo_t *si, void *ctx)
{
	/* si_code > 0: raised by the kernel for a fault, si_addr meaningful */
	const char *path = si && si->si_code > 0 ? sf_guard_find(si->si_addr) : NULL;
	char msg[8192];
	size_t n = 0;

	if (!path) {
		if ((sigbus_next.sa_flags & SA_SIGINFO) && sigbus_next.sa_sigaction) {
			sigbus_next.sa_sigaction(sig, si, ctx);
			return;
		}
		if (!(sigbus_next.sa_flags & SA_SIGINFO) && sigbus_next.sa_handler != SIG_DFL &&
		    sigbus_next.sa_handler != SIG_IGN) {
			sigbus_next.sa_handler(sig);
			return;
		}
		/* the default action: SIGBUS stays blocked until we return, then
		 * the raised one (or the retried access) ends the process */
		struct sigaction dfl = { .sa_handler = SIG_DFL };
		sigemptyset(&dfl.sa_mask);
		sigaction(SIGBUS, &dfl, NULL);
		raise(SIGBUS);
		return;
	}
	/* threads of the pool that touch the lost pages at once say it once */
	if (atomic_exchange(&sigbus_taken, 1))
		for (;;)
			pause();	/* until the reporting thread's _exit */
	sf_guard_unlink_tmps();
	put(msg, &n, sizeof(msg) - 1, sf_progname);
	put(msg, &n, sizeof(msg) - 1, ": ");
	put(msg, &n, sizeof(msg) - 1, path);
	put(msg, &n, sizeof(msg) - 1, ": file changed under a running ");
	put(msg, &n, sizeof(msg) - 1, sf_progname);
	put(msg, &n, sizeof(msg) - 1, " (truncated?): bus error reading mapped data");
	msg[n++] = '\n';
	for (size_t off = 0; off < n;) {
		ssize_t w = write(STDERR_FILENO, msg + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	_exit(SF_EXIT_FAIL);
}

void sf_catch_sigbus(void)
{
	struct sigaction sa = { .sa_sigaction = on_sigbus, .sa_flags = SA_SIGINFO };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, &sigbus_next);
}
