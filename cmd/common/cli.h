/* Command-line support shared by the cmd/sf-* programs: the one error
 * printer, checked number parsing, version text, the stdout check at exit,
 * outputs written under a temporary name and the SIGBUS guard.
 * This is the only lib/common module that prints or exits, on behalf of the
 * command that calls it. */
#ifndef SF_CLI_H
#define SF_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "base/clock.h"
#include "base/parse.h"

#define SF_VERSION "0.1.0"

enum { SF_EXIT_OK = 0, SF_EXIT_FAIL = 1, SF_EXIT_USAGE = 2 };

/* Set by sf_cli_start: "sf-run", ... */
extern const char *sf_progname;

/* What every command does first: names itself for messages, installs the
 * SIGBUS guard (sf_catch_sigbus) and applies the environment the library
 * never reads: SF_REF=1 makes every kernel family use its plain C
 * reference (engine/cpu.h). */
void sf_cli_start(const char *progname);

/* "prog: <message>\n" on stderr. */
void sf_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A usage error: the message, then "Try 'prog --help'.", exit 2. */
_Noreturn void sf_usage_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

/* "prog (sparseflash) VERSION" on stdout. */
void sf_print_version(void);

/* Option-value parsers for getopt loops: on a bad value they print
 * "prog: --opt: 'value' is not ...: expected MIN..MAX" and exit 2. */
uint64_t sf_opt_u64(const char *opt, const char *s, uint64_t min, uint64_t max);
double sf_opt_f64(const char *opt, const char *s, double min, double max);

/* Progress on stderr ("\rprog: DONE UNIT, RATE UNIT/s, ETA"), at most
 * twice a second, when stderr is a terminal or on request. */
struct sf_progress {
	int on;
	const char *unit;
	double t0, last;
};
void sf_progress_init(struct sf_progress *p, int force, const char *unit);
/* fraction: of the whole work done, or < 0 when unknown (no ETA). */
void sf_progress_update(struct sf_progress *p, uint64_t done, double fraction);
void sf_progress_end(struct sf_progress *p, uint64_t done);	/* the final line */


/* An output named with -o: written to a temporary name in the same
 * directory and renamed by sf_out_commit, removed by sf_out_abort, so a
 * failed run leaves nothing behind. NULL or "-" is stdout, refused when
 * binary and a terminal; a path that exists and is not a regular file
 * (/dev/null) is written in place. These print the error themselves. */
struct sf_out {
	FILE *f;
	const char *path;	/* as given, for messages ("(stdout)" for stdout) */
	char *tmp;		/* the temporary name, or NULL */
};
int sf_out_open(struct sf_out *o, const char *path, int binary);
int sf_out_commit(struct sf_out *o);	/* 0, or -errno after printing */
void sf_out_abort(struct sf_out *o);	/* accepts a zeroed o */

/* The SIGBUS guard, installed by every command that maps input files
 * (safetensors shards, .sfq codes; see guard.h): when such a file is
 * truncated under the running command, the next touch of a page past its
 * new end raises SIGBUS. The handler then removes the pending temporary
 * outputs, writes the one line "prog: FILE: file changed under a running
 * prog (truncated?): bus error reading mapped data" with write(2) and
 * exits 1. A SIGBUS at any other address goes to the handler installed
 * before (AddressSanitizer's) or to the default action. */
void sf_catch_sigbus(void);

/* Flushes and closes stdout; reports a write error and returns 1 on
 * failure so main can `return sf_close_stdout() ? 1 : status;`. */
int sf_close_stdout(void);

#endif
