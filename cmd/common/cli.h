/* Command-line support shared by the cmd/sf-* programs: the one error
 * printer, the option tables with their help text, the common options,
 * checked number, layer and group parsing, version text, the stdout check
 * at exit, outputs (base/outfile.h) and the SIGBUS guard. The only code
 * that prints or exits on behalf of a command (lib/ never does). */
#ifndef SF_CLI_H
#define SF_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/outfile.h"
#include "base/parse.h"

#define SF_VERSION "0.1.0"

enum { SF_EXIT_OK = 0, SF_EXIT_FAIL = 1, SF_EXIT_USAGE = 2 };

/* Set by sf_cli_start: "sf-run", ... */
extern const char *sf_progname;

/* What every command does first: names itself for messages, installs the
 * SIGBUS guard (sf_catch_sigbus) and the interrupt handler
 * (sf_cli_interruptible) and applies the environment the library
 * never reads: SF_ISA=avx2 (a level, engine/cpu.h) makes every kernel
 * family use that level's path, one below the CPU's best (an unknown
 * level or one this CPU lacks: one line, exit 2); SF_REF=1 their plain C
 * references. */
void sf_cli_start(const char *progname);

/* "prog: <message>\n" on stderr. */
void sf_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A usage error: the message, then "Try 'prog --help'.", exit 2. */
_Noreturn void sf_usage_error(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

/* "prog (sparseflash) VERSION" on stdout. */
void sf_print_version(void);

/* one or many after a count of n: "1 token", "2 tokens" */
const char *sf_plural(unsigned long long n, const char *one, const char *many);

// --- option tables

/* One option of a command, with its help text beside it (fio's style):
 * the table makes the getopt strings and the option part of --help. */
struct sf_opt {
	const char *name;	/* long name without "--" */
	int key;		/* the short letter, or >= SF_OPT_FIRST for a long option only */
	const char *arg;	/* the value's name in --help ("DIR"); NULL: takes no value */
	const char *help;	/* one or more '\n'-separated lines; may hold one %s: def */
	const char *def;	/* the default's text for help's %s, or NULL */
	unsigned flags;		/* the command's own bits (sf-run: needs an IMAGE) */
};
enum { SF_OPT_PROGRESS = 256, SF_OPT_FIRST };	/* keys of long options only */

/* The common options, one meaning in every command (sparseflash(7),
 * COMMON OPTIONS). -o's help names what is written. -h/--help and
 * -V/--version are in every table without being listed: sf_cli_getopt
 * adds them after the command's own. */
#define SF_OPT_OUTPUT(help) { "output", 'o', "FILE", help, NULL, 0 }
#define SF_OPT_THREADS { "threads", 't', "N", "worker threads (default: online CPUs)", NULL, 0 }
#define SF_OPT_PROGRESS_ENTRY { "progress", SF_OPT_PROGRESS, NULL, \
	"report progress on stderr even when it is not a terminal", NULL, 0 }
#define SF_OPT_QUIET { "quiet", 'q', NULL, \
	"only errors on stderr: no progress on a terminal, no summary", NULL, 0 }
#define SF_OPT_VERBOSE { "verbose", 'v', NULL, "report what was loaded and chosen on stderr", \
	NULL, 0 }
#define SF_OPT_END { NULL, 0, NULL, NULL, NULL, 0 }
/* A default's macro as the text of help's %s: SF_STR(DEFAULT_WINDOW). */
#define SF_STR_(x) #x
#define SF_STR(x) SF_STR_(x)
/* A line of its own in --help before the options that follow. */
#define SF_OPT_HEADING(text) { "", 0, NULL, text, NULL, 0 }

/* A command's --help: usage lines, description, the table, examples. */
struct sf_cmd {
	const char *usage;	/* "Usage: ..." lines and the description, '\n' ended */
	const struct sf_opt *opts;	/* ended by SF_OPT_END */
	const char *examples;	/* the lines after "Examples:" */
};

/* getopt_long over the command's table. -h/--help prints the help and
 * -V/--version the version (exit 0); an unknown option, a missing value or
 * an ambiguous abbreviation prints "prog: <what>" and "Try 'prog
 * --help'." and exits 2. Returns the next option's key (optarg set) or -1
 * at the end (optind at the first operand). */
int sf_cli_getopt(int argc, char **argv, const struct sf_cmd *cmd);
/* The table's entry for key (its flags, name), or NULL. */
const struct sf_opt *sf_cli_opt(const struct sf_cmd *cmd, int key);

/* -t: the default (online CPUs, at most SF_MAX_THREADS) and the parser. */
#define SF_MAX_THREADS 256
int sf_cli_threads_default(void);
int sf_opt_threads(const char *s);

/* --layers / --dense-layers (sparseflash(7), LAYERS): a usage error for
 * text outside the grammar or a layer past n - 1. sf_opt_layers fills
 * set[n] for a model of n layers; sf_opt_layer_range takes one range
 * (N, N-M or all) when the layer count is not known yet (layers up to
 * max), into *lo, *hi. */
void sf_opt_layers(const char *opt, const char *s, int n, uint8_t *set);
void sf_opt_layer_range(const char *opt, const char *s, int max, int *lo, int *hi);

/* A comma-separated list of groups (attn_in, attn_out, ffn_in, ffn_out)
 * into a mask; with SF_GROUPS_ALIASES also attention, ffn and none; with
 * SF_GROUPS_EXPERTS also experts (bit SF_GROUP_EXPERTS). A usage error
 * names the item that is not one. */
#define SF_GROUPS_ALIASES 1
#define SF_GROUPS_EXPERTS 2
unsigned sf_opt_groups(const char *opt, const char *s, unsigned flags);

/* A dtype option: keep (-1, each matrix's own dtype) or an enum sf_dtype
 * by its name in lower case, of those which takes: a top tier's --dtype
 * (sf-pack: bf16, f16, f32, q8, q4; sf-encode --calibrate: q8 and q4
 * alone), or the embedding's and head's rows (sf-pack
 * --token-embedding-type, --output-tensor-type: q8, q6, q4). A usage
 * error lists them. */
#define SF_OPT_DTYPE_KEEP (-1)
enum sf_opt_dtypes { SF_OPT_DTYPES_TOP, SF_OPT_DTYPES_TOP_BLOCKS, SF_OPT_DTYPES_ROWS };
int sf_opt_dtype(const char *opt, const char *s, enum sf_opt_dtypes which);

/* A file or directory name: an empty one is a usage error
 * ("--model: an empty name"), not the current or root directory. */
const char *sf_opt_path(const char *opt, const char *s);

/* Option-value parsers for getopt loops: on a bad value they print
 * "prog: --opt: 'value' is not ...: expected MIN..MAX" and exit 2. */
uint64_t sf_opt_u64(const char *opt, const char *s, uint64_t min, uint64_t max);
double sf_opt_f64(const char *opt, const char *s, double min, double max);

/* Progress on stderr: "prog: DONE UNIT, RATE UNIT/s, ETA N s[; NOTE]",
 * when stderr is a terminal (unless -q) or with --progress. At a terminal
 * one line rewritten in place (\r) twice a second; elsewhere (a log) one
 * line ended by \n every SF_PROGRESS_LOG_SECONDS. The final line,
 * "prog: DONE UNIT in T s, RATE UNIT/s", has no ETA. */
#define SF_PROGRESS_LOG_SECONDS 5
struct sf_progress {
	int on, tty;
	const char *unit;
	double t0, last;
	char note[96];		/* the caller's text after the figures, or "" */
};
/* The one rule of --progress and -q: progress when asked for, or on a
 * terminal unless -q. */
int sf_cli_progress_on(int progress, int quiet);
void sf_progress_init(struct sf_progress *p, int progress, int quiet, const char *unit);
/* fraction: of the whole work done, or < 0 when unknown (no ETA). */
void sf_progress_update(struct sf_progress *p, uint64_t done, double fraction);
void sf_progress_end(struct sf_progress *p, uint64_t done);	/* the final line */


/* An output named with -o, written through base/outfile.h (the one
 * atomic-output writer: a temporary renamed when complete, a FIFO or
 * character device streamed to, a symlink followed, a directory or block
 * device refused by name, "-" or NULL standard output), refusing any of
 * inputs (NULL-terminated, may be NULL) as the output. These print the
 * error once and return it. */
struct sf_out {
	FILE *f;
	const char *path;	/* as given, for messages ("(stdout)" for stdout) */
	struct sf_outfile of;
};
int sf_out_open(struct sf_out *o, const char *path, int binary, const char *const *inputs);
int sf_out_commit(struct sf_out *o);	/* 0, or -errno after printing */
void sf_out_abort(struct sf_out *o);	/* accepts a zeroed o */
/* Before the work of a command whose library writer takes a path
 * (sf-place, sf-encode, sf-pack; each writes through base/outfile):
 * refuses, with the message and exit 1, an output that is the same file as
 * one of inputs, so a long run does not end in that refusal. "-" and NULL
 * pass. */
void sf_out_check_path(const char *path, const char *const *inputs);

/* The SIGBUS guard, installed by every command that maps input files
 * (safetensors shards, .sfq codes; see guard.h): when such a file is
 * truncated under the running command, the next touch of a page past its
 * new end raises SIGBUS. The handler then removes the pending temporary
 * outputs, writes the one line "prog: FILE: file changed under a running
 * prog (truncated?): bus error reading mapped data" with write(2) and
 * exits 1. A SIGBUS at any other address goes to the handler installed
 * before (AddressSanitizer's) or to the default action. */
void sf_catch_sigbus(void);

/* SIGINT, SIGTERM and SIGHUP (installed by sf_cli_start, unless the
 * signal was ignored when the command started, as in a background job of
 * a script): the handler removes the pending temporary outputs (guard.h)
 * and ends the process by the signal again, so the shell sees 130 for
 * SIGINT and 143 for SIGTERM. A stale temporary "X.tmp.XXXXXX" left by a
 * SIGKILL is never removed by a later run: its name is unique, so it is
 * in nobody's way, and it may be another running command's.
 *
 * A command that has something to finish (sf-run: the text decoded so
 * far, its timing line and --stats) calls sf_cli_interruptible(1) around
 * its loop and polls sf_cli_interrupted(): the first signal only sets the
 * flag, a second ends the process at once. sf_cli_interruptible(0)
 * returns to the immediate handling (a blocking read of the prompt must
 * stay interruptible). */
void sf_cli_interruptible(int on);
int sf_cli_interrupted(void);	/* the signal received, or 0 */
/* Forgets a signal that has been handled (sf-run --conversation: Ctrl-C
 * stopped an answer, the chat goes on). */
void sf_cli_interrupt_clear(void);
/* Removes the temporaries and ends the process by sig (exit 128 + sig). */
_Noreturn void sf_cli_reraise(int sig);

/* -v's model line on stderr: "prog: NAME: ARCH, N parameters, DTYPE, L
 * layers, dim D, context C of MAX, fingerprint F; kernels K, T threads". */
struct sf_model;
void sf_cli_model_summary(const char *name, const struct sf_model *m, int ctx, int threads);
/* -v: the memory a command is about to need, stated before it starts:
 * "PROG: memory: about N MiB: WHAT". */
void sf_cli_memory_need(uint64_t bytes, const char *what);

/* Flushes and closes stdout; returns 1 on a write error, so main can
 * `return sf_close_stdout() ? 1 : status;`, and reports it unless an error
 * was printed already (the one that stopped the command, often this
 * same write error: said once). */
int sf_close_stdout(void);

#endif
