/* Command-line support: see cli.h. */
#include "cli.h"

#include <errno.h>
#include <pthread.h>
#include <getopt.h>
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
#include "base/vocab.h"
#include "engine/cpu.h"
#include "formats/model.h"

const char *sf_progname = "sparseflash";

// --- interrupts (SIGINT, SIGTERM, SIGHUP)

static const int interrupt_signals[] = { SIGINT, SIGTERM, SIGHUP };
static volatile sig_atomic_t interrupted, interruptible;

_Noreturn void sf_cli_reraise(int sig)
{
	struct sigaction dfl = { .sa_handler = SIG_DFL };
	sigset_t set;

	sf_guard_unlink_tmps();
	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	sigemptyset(&set);
	sigaddset(&set, sig);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
	_exit(128 + sig);	/* not reached: the default action ends the process */
}

/* Async-signal-safe: an atomic flag, or sf_cli_reraise's unlink,
 * sigaction, sigprocmask, raise and _exit. */
static void on_interrupt(int sig)
{
	if (interruptible && !interrupted) {
		interrupted = sig;
		return;
	}
	sf_cli_reraise(sig);
}

static void catch_interrupts(void)
{
	for (size_t i = 0; i < sizeof(interrupt_signals) / sizeof(interrupt_signals[0]); i++) {
		struct sigaction sa = { .sa_handler = on_interrupt, .sa_flags = SA_RESTART }, old;
		sigemptyset(&sa.sa_mask);
		if (sigaction(interrupt_signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
			continue;	/* ignored by whoever started us: stays so */
		sigaction(interrupt_signals[i], &sa, NULL);
	}
}

void sf_cli_interruptible(int on)
{
	interruptible = on;
	if (!on && interrupted)
		sf_cli_reraise(interrupted);
}

int sf_cli_interrupted(void)
{
	return interrupted;
}

void sf_cli_interrupt_clear(void)
{
	interrupted = 0;
}

void sf_cli_start(const char *progname)
{
	const char *ref = getenv("SF_REF"), *level = getenv("SF_ISA"), *amx = getenv("SF_AMX");
	enum sf_isa isa;

	sf_progname = progname;
	sf_catch_sigbus();
	catch_interrupts();
	if (level && *level && (sf_isa_parse(level, &isa) || sf_cpu_use(isa))) {
		sf_error("SF_ISA: '%s' is not a level this CPU runs (ref, avx2, avx512; neon, "
			 "dotprod, i8mm on aarch64)", level);
		exit(SF_EXIT_USAGE);
	}
	if (ref && *ref && strcmp(ref, "0") != 0)
		sf_cpu_use(SF_ISA_REF);
	if (amx && !strcmp(amx, "0"))
		sf_cpu_use_amx(0);
}

static int errors_printed;	/* by sf_error: sf_close_stdout says no more */

void sf_error(const char *fmt, ...)
{
	va_list ap;
	errors_printed++;
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

const char *sf_plural(unsigned long long n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

// --- option tables

/* Every command's last two options. */
static const struct sf_opt always[] = {
	{ "help", 'h', NULL, "show this help", NULL, 0 },
	{ "version", 'V', NULL, "show the version", NULL, 0 },
};
#define NALWAYS (sizeof(always) / sizeof(always[0]))

const struct sf_opt *sf_cli_opt(const struct sf_cmd *cmd, int key)
{
	for (const struct sf_opt *p = cmd->opts; p->name; p++)
		if (p->key == key && *p->name)
			return p;
	for (size_t i = 0; i < NALWAYS; i++)
		if (always[i].key == key)
			return &always[i];
	return NULL;
}

/* The option column of --help: "  -t, --threads N" padded to 24. */
static void help_option(const struct sf_opt *p)
{
	char col[64];
	int n;

	if (p->key < SF_OPT_PROGRESS)
		n = snprintf(col, sizeof(col), "  -%c, --%s%s%s", p->key, p->name, p->arg ? " " : "",
			     p->arg ? p->arg : "");
	else
		n = snprintf(col, sizeof(col), "      --%s%s%s", p->name, p->arg ? " " : "",
			     p->arg ? p->arg : "");
	printf("%s", col);
	/* the first line beside the option when it fits, else below it */
	printf(n < 24 ? "%*s" : "\n%*s", n < 24 ? 24 - n : 24, "");
	for (const char *h = p->help; *h;) {
		size_t len = strcspn(h, "\n");
		const char *pct = memchr(h, '%', len);
		if (pct && pct[1] == 's')
			printf("%.*s%s%.*s\n", (int)(pct - h), h, p->def ? p->def : "",
			       (int)(len - (size_t)(pct - h) - 2), pct + 2);
		else
			printf("%.*s\n", (int)len, h);
		h += len;
		if (*h == '\n' && *++h)
			printf("%24s", "");
	}
}

static void help(const struct sf_cmd *cmd)
{
	fputs(cmd->usage, stdout);
	putchar('\n');
	for (const struct sf_opt *p = cmd->opts; p->name; p++)
		if (*p->name)
			help_option(p);
		else
			printf("\n%s\n", p->help);
	for (size_t i = 0; i < NALWAYS; i++)
		help_option(&always[i]);
	if (cmd->examples)
		printf("\nExamples:\n%s", cmd->examples);
}

// --- llama.cpp's options that no command takes

/* Refused by name with the reason (sparseflash(7), COMMON OPTIONS), before
 * getopt would read "-ngl" as "-n gl" or call "--mlock" unrecognized. A
 * command that takes one of these names itself keeps its own meaning. */
#define CPU_ONLY "sparseflash runs on the CPU only"
#define KV_TYPES "sf-run's: the other commands keep the KV cache in float32"
#define TO_CHAT "use sf-run -cnv (--conversation) to chat"
#define SAMPLERS "sf-run samples with --temp, --top-k, --top-p, --min-p and --repeat-penalty"
#define ROPE "RoPE is the model's config.json's"
#define LOCAL "models are local Hugging Face directories or sf-pack images"
static const struct {
	const char *name, *why;
} llama_refused[] = {
	{ "-ngl", CPU_ONLY }, { "--n-gpu-layers", CPU_ONLY }, { "--gpu-layers", CPU_ONLY },
	{ "-fa", CPU_ONLY }, { "--flash-attn", CPU_ONLY }, { "-mg", CPU_ONLY },
	{ "--main-gpu", CPU_ONLY }, { "-ts", CPU_ONLY }, { "--tensor-split", CPU_ONLY },
	{ "-sm", CPU_ONLY }, { "--split-mode", CPU_ONLY }, { "-nkvo", CPU_ONLY },
	{ "--no-kv-offload", CPU_ONLY }, { "-dev", CPU_ONLY }, { "--device", CPU_ONLY },
	{ "--mlock", "--model maps the weights; an IMAGE reads them from flash" },
	{ "--no-mmap", "--model maps the weights; an IMAGE reads them from flash" },
	{ "--numa", "no NUMA placement" },
	{ "-ctk", KV_TYPES }, { "--cache-type-k", KV_TYPES }, { "-ctv", KV_TYPES },
	{ "--cache-type-v", KV_TYPES },
	{ "-ub", "one batch size: -b" }, { "--ubatch-size", "one batch size: -b" },
	{ "-tb", "one thread count: -t" }, { "--threads-batch", "one thread count: -t" },
	{ "-np", "one sequence at a time" }, { "--parallel", "one sequence at a time" },
	{ "-cb", "one sequence at a time" }, { "--cont-batching", "one sequence at a time" },
	{ "-i", TO_CHAT }, { "--interactive", TO_CHAT }, { "-if", TO_CHAT },
	{ "--interactive-first", TO_CHAT }, { "-r", TO_CHAT }, { "--reverse-prompt", TO_CHAT },
	{ "--in-prefix", TO_CHAT }, { "--in-suffix", TO_CHAT }, { "--multiline-input", TO_CHAT },
	{ "-sys", "sf-run -cnv takes the system message with -p or -f" },
	{ "--system-prompt", "sf-run -cnv takes the system message with -p or -f" },
	{ "--jinja", "the chat templates are built in (sf-run --chat-template)" },
	{ "--typical", SAMPLERS }, { "--mirostat", SAMPLERS }, { "--mirostat-lr", SAMPLERS },
	{ "--mirostat-ent", SAMPLERS }, { "--presence-penalty", SAMPLERS },
	{ "--frequency-penalty", SAMPLERS }, { "--dynatemp-range", SAMPLERS },
	{ "--samplers", SAMPLERS }, { "--xtc-probability", SAMPLERS },
	{ "--dry-multiplier", SAMPLERS },
	{ "--rope-scaling", ROPE }, { "--rope-freq-base", ROPE }, { "--rope-freq-scale", ROPE },
	{ "--yarn-orig-ctx", ROPE },
	{ "--lora", LOCAL }, { "--lora-scaled", LOCAL }, { "--control-vector", LOCAL },
	{ "-hf", LOCAL }, { "-hfr", LOCAL }, { "-mu", LOCAL }, { "--model-url", LOCAL },
	{ "-md", LOCAL }, { "--model-draft", LOCAL },
	{ "--grammar", "no constrained sampling" }, { "--grammar-file", "no constrained sampling" },
	{ "-j", "no constrained sampling" }, { "--json-schema", "no constrained sampling" },
	{ "--prompt-cache", "no prompt cache" }, { "--keep", "the context is never shifted" },
	{ "-e", "the prompt is taken as written" }, { "--escape", "the prompt is taken as written" },
	{ "--log-file", "messages go to standard error (-q, -v)" },
	{ "--log-disable", "messages go to standard error (-q, -v)" },
	{ "--color", "no coloured output" }, { "-co", "no coloured output" },
	{ "--no-display-prompt", "the prompt is printed only with sf-run --echo" },
	{ "-sp", "special tokens are never printed" }, { "--special", "special tokens are never printed" },
	{ "--no-warmup", "there is no warm-up run" },
	{ "--no-context-shift", "the context is never shifted" },
	{ "--context-shift", "the context is never shifted" },
	{ "-l", SAMPLERS }, { "--logit-bias", SAMPLERS },
	{ "-dt", "the KV cache is never defragmented" },
	{ "--defrag-thold", "the KV cache is never defragmented" },
	{ "--override-kv", "the model's config.json is read as it is" },
	{ "-C", "threads are placed by the kernel" }, { "--cpu-mask", "threads are placed by the kernel" },
	{ "-Cr", "threads are placed by the kernel" }, { "--cpu-range", "threads are placed by the kernel" },
	{ "--prio", "threads are placed by the kernel" }, { "--poll", "threads are placed by the kernel" },
};

/* The command's own option spelled as arg ("-x" or "--name"), or NULL. */
static const struct sf_opt *own_option(const struct sf_cmd *cmd, const char *arg)
{
	if (arg[0] == '-' && arg[1] && arg[1] != '-' && !arg[2])
		return sf_cli_opt(cmd, (unsigned char)arg[1]);
	if (!strncmp(arg, "--", 2) && !strchr(arg, '='))
		for (const struct sf_opt *p = cmd->opts; p->name; p++)
			if (*p->name && !strcmp(p->name, arg + 2))
				return p;
	return NULL;
}

static void refuse_llama_options(int argc, char **argv, const struct sf_cmd *cmd)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
		const char *a = argv[i];
		const struct sf_opt *own = own_option(cmd, a);
		if (own) {
			if (own->arg)	/* its value is text, whatever it looks like */
				i++;
			continue;
		}
		for (size_t u = 0; u < sizeof(llama_refused) / sizeof(llama_refused[0]); u++)
			if (!strcmp(a, llama_refused[u].name))
				sf_usage_error("%s: llama.cpp's option is not supported: %s", a,
					       llama_refused[u].why);
	}
}

int sf_cli_getopt(int argc, char **argv, const struct sf_cmd *cmd)
{
	static const struct sf_cmd *built;
	static struct option longopts[128];
	static char shorts[3 * 64 + 2];
	int c;

	if (built != cmd) {	/* the getopt strings, once per table */
		size_t n = 0, k = 0, nopts = 0;
		while (cmd->opts[nopts].name)
			nopts++;
		shorts[k++] = ':';	/* a missing value returns ':' */
		for (size_t i = 0; i < nopts + NALWAYS && n + 1 < 128; i++) {
			const struct sf_opt *p = i < nopts ? &cmd->opts[i] : &always[i - nopts];
			if (!*p->name)	/* a heading */
				continue;
			longopts[n++] = (struct option){ p->name, p->arg ? required_argument
								: no_argument, NULL, p->key };
			if (p->key < SF_OPT_PROGRESS && k + 3 < sizeof(shorts)) {
				shorts[k++] = (char)p->key;
				if (p->arg)
					shorts[k++] = ':';
			}
		}
		longopts[n] = (struct option){ 0 };
		shorts[k] = '\0';
		built = cmd;
		refuse_llama_options(argc, argv, cmd);
	}
	opterr = 0;	/* the messages are ours: "sf-run: ...", not argv[0] */
	c = getopt_long(argc, argv, shorts, longopts, NULL);
	switch (c) {
	case 'h':
		help(cmd);
		exit(sf_close_stdout() ? SF_EXIT_FAIL : SF_EXIT_OK);
	case 'V':
		sf_print_version();
		exit(sf_close_stdout() ? SF_EXIT_FAIL : SF_EXIT_OK);
	case ':':
	case '?': {
		const char *arg = argv[optind - 1];
		const struct sf_opt *p = optopt ? sf_cli_opt(cmd, optopt) : NULL;
		if (c == ':' && p && strncmp(arg, "--", 2) == 0)
			sf_usage_error("option '--%s' requires a value", p->name);
		if (c == ':')
			sf_usage_error("option '-%c' requires a value", optopt);
		if (optopt && strncmp(arg, "--", 2) != 0)
			sf_usage_error("invalid option '-%c'", optopt);
		if (optopt)	/* --flag=value for an option without a value */
			sf_usage_error("option '--%s' takes no value", p ? p->name : "?");
		sf_usage_error("unrecognized option '%.*s'", (int)strcspn(arg, "="), arg);
	}
	}
	return c;
}

int sf_cli_threads_default(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	return cpus < 1 ? 1 : cpus > SF_MAX_THREADS ? SF_MAX_THREADS : (int)cpus;
}

int sf_opt_threads(const char *s)
{
	return (int)sf_opt_u64("--threads", s, 1, SF_MAX_THREADS);
}

void sf_opt_layers(const char *opt, const char *s, int n, uint8_t *set)
{
	struct sf_err e = { 0 };

	if (sf_parse_layers(opt, s, n, SF_LAYERS_MODEL, set, &e))
		sf_usage_error("%s", e.msg);
}

void sf_opt_layer_range(const char *opt, const char *s, int max, int *lo, int *hi)
{
	struct sf_err e = { 0 };
	uint8_t *set = malloc((size_t)max);
	int a = -1, b = -1;

	if (!set)
		sf_usage_error("%s: %s", opt, strerror(ENOMEM));
	if (sf_parse_layers(opt, s, max, 0, set, &e)) {
		free(set);
		sf_usage_error("%s", e.msg);
	}
	for (int i = 0; i < max; i++)
		if (set[i]) {
			if (a < 0)
				a = i;
			else if (!set[i - 1]) {
				free(set);
				sf_usage_error("%s: '%s': expected one range N-M here", opt, s);
			}
			b = i;
		}
	free(set);
	if (a < 0)
		sf_usage_error("%s: '%s' selects no layer", opt, s);
	*lo = a;
	*hi = b;
}

unsigned sf_opt_groups(const char *opt, const char *s, unsigned flags)
{
	const char *expected = flags & SF_GROUPS_ALIASES
		? "attn_in, attn_out, ffn_in, ffn_out, attention, ffn or none"
		: flags & SF_GROUPS_EXPERTS ? "attn_in, attn_out, ffn_in, ffn_out or experts"
		: "attn_in, attn_out, ffn_in or ffn_out";
	unsigned mask = 0;
	int items = 0;

	for (const char *p = s; *p || !items; ) {
		size_t len = strcspn(p, ",");
		char item[32];
		enum sf_group g;

		if (len >= sizeof(item))
			len = sizeof(item) - 1;
		memcpy(item, p, len);
		item[len] = '\0';
		items++;
		if ((flags & SF_GROUPS_ALIASES) && !strcmp(item, "attention"))
			mask |= 1u << SF_GROUP_ATTN_IN | 1u << SF_GROUP_ATTN_OUT;
		else if ((flags & SF_GROUPS_ALIASES) && !strcmp(item, "ffn"))
			mask |= 1u << SF_GROUP_FFN_IN | 1u << SF_GROUP_FFN_OUT;
		else if ((flags & SF_GROUPS_ALIASES) && !strcmp(item, "none"))
			;
		else if (*item && !((flags & SF_GROUPS_EXPERTS) ? sf_kind_parse(item, &g)
								 : sf_group_parse(item, &g)))
			mask |= 1u << g;
		else
			sf_usage_error("%s: '%s' is not %s", opt, item, expected);
		p += strcspn(p, ",");
		if (!*p)
			break;
		p++;
	}
	return mask;
}

int sf_opt_dtype(const char *opt, const char *s, enum sf_opt_dtypes which)
{
	static const char *const lists[] = {
		[SF_OPT_DTYPES_TOP] = "keep, bf16, f16, f32, q8 or q4",
		[SF_OPT_DTYPES_TOP_BLOCKS] = "keep, q8 or q4",
		[SF_OPT_DTYPES_ROWS] = "keep, q8, q6 or q4",
	};
	char up[8];
	size_t n = strlen(s);
	int lower = n < sizeof(up);	/* "BF16" is no more a --dtype than "Keep" */
	enum sf_dtype dt;

	if (!strcmp(s, "keep"))
		return SF_OPT_DTYPE_KEEP;
	for (size_t i = 0; lower && i <= n; i++) {
		lower = !(s[i] >= 'A' && s[i] <= 'Z');
		up[i] = s[i] >= 'a' && s[i] <= 'z' ? (char)(s[i] - 'a' + 'A') : s[i];
	}
	if (lower && !sf_dtype_parse_any(up, &dt) &&
	    (which == SF_OPT_DTYPES_TOP ? sf_dtype_is_top(dt)
	     : which == SF_OPT_DTYPES_TOP_BLOCKS ? sf_dtype_is_top(dt) && sf_dtype_is_block(dt)
	     : sf_dtype_is_block(dt) && dt != SF_DTYPE_MXFP4))	/* rows sf-pack writes */
		return (int)dt;
	sf_usage_error("%s: '%s' is not %s", opt, s, lists[which]);
}

const char *sf_opt_path(const char *opt, const char *s)
{
	if (!*s)
		sf_usage_error("%s: an empty name", opt);
	return s;
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
	if (bad && !errors_printed) {
		sf_error("write error on standard output: %s",
			 errno ? strerror(errno) : "unknown error");
	}
	return bad;
}

int sf_cli_progress_on(int progress, int quiet)
{
	return progress || (!quiet && isatty(STDERR_FILENO));
}

void sf_progress_init(struct sf_progress *p, int progress, int quiet, const char *unit)
{
	p->on = sf_cli_progress_on(progress, quiet);
	p->tty = isatty(STDERR_FILENO);
	p->unit = unit;
	p->t0 = p->last = sf_now();
	p->note[0] = '\0';
}

/* fraction > 1: the final line (the time taken, no ETA). */
static void progress_line(struct sf_progress *p, uint64_t done, double fraction, double t)
{
	double rate = t > p->t0 ? (double)done / (t - p->t0) : 0.0;
	fprintf(stderr, "%s%s: %llu %s", p->tty ? "\r" : "", sf_progname,
		(unsigned long long)done, p->unit);
	if (fraction > 1)
		fprintf(stderr, " in %.1f s", t - p->t0);
	fprintf(stderr, ", %.3g %s/s", rate, p->unit);
	if (fraction > 0 && fraction < 1)
		fprintf(stderr, ", ETA %.0f s", (t - p->t0) * (1 - fraction) / fraction);
	if (p->note[0])
		fprintf(stderr, "; %s", p->note);
	/* at a terminal: erase what a longer line before left */
	fputs(p->tty ? "\033[K" : "\n", stderr);
}

void sf_progress_update(struct sf_progress *p, uint64_t done, double fraction)
{
	double t;
	/* all done: the final line follows */
	if (!p->on || fraction >= 1 ||
	    (t = sf_now()) - p->last < (p->tty ? 0.5 : SF_PROGRESS_LOG_SECONDS))
		return;
	p->last = t;
	progress_line(p, done, fraction, t);
}

void sf_progress_end(struct sf_progress *p, uint64_t done)
{
	if (!p->on)
		return;
	progress_line(p, done, 2.0, sf_now());
	if (p->tty)
		fputc('\n', stderr);
}

void sf_cli_model_summary(const char *name, const struct sf_model *m, int ctx, int threads)
{
	const struct sf_config *c = &m->cfg;
	/* from the shapes, in 64 bits: a 7B model's count overflows int */
	uint64_t dim = (uint64_t)c->dim, q = (uint64_t)c->n_heads * (uint64_t)c->head_dim;
	uint64_t kv = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim;
	uint64_t ffn = 3 * dim * (uint64_t)c->hidden_dim;
	/* a mixture: each expert an FFN, and the router's row per expert;
	 * a shared expert an FFN of its width and its gate's row */
	uint64_t ffns = c->n_experts ? (uint64_t)c->n_experts * (ffn + dim) : ffn;
	uint64_t shared = c->shared_hidden_dim ? 3 * dim * (uint64_t)c->shared_hidden_dim + dim : 0;
	uint64_t qk = c->qk_norm == SF_QK_NORM_HEAD ? 2 * (uint64_t)c->head_dim
		      : c->qk_norm == SF_QK_NORM_ALL ? q + kv : 0;
	/* gpt-oss's o bias, sinks, and its router's and experts' biases */
	uint64_t gpt_oss = (c->o_bias ? dim : 0) + (c->attn_sinks ? (uint64_t)c->n_heads : 0) +
			   (c->moe_bias ? (uint64_t)c->n_experts *
					  (1 + 2 * (uint64_t)c->hidden_dim + dim) : 0);
	/* the norms: 2 a layer, Gemma 3's sandwich 4 */
	uint64_t layer = (c->post_norms ? 4 : 2) * dim + 2 * dim * q + 2 * dim * kv + ffns + shared +
			 (c->qkv_bias ? q + 2 * kv : 0) + qk + gpt_oss;
	uint64_t params = (uint64_t)c->vocab_size * dim * (c->tie_embeddings ? 1 : 2) + dim +
			  (uint64_t)c->n_layers * layer;

	/* LongRoPE's factors, which the context chooses (sf_state_init) */
	const char *longrope = !c->rope_longrope ? "" : ctx > c->rope_orig_max_pos ?
			       " (LongRoPE's long factors)" : " (LongRoPE's short factors)";

	fprintf(stderr, "%s: %s: %s, %llu parameters, %s, %d layers, dim %d, context %d of %d%s, "
		"fingerprint %s; kernels %s, %d threads\n", sf_progname, name, sf_arch_name(c->arch),
		(unsigned long long)params, sf_dtype_name(m->embed.dtype), c->n_layers, c->dim, ctx,
		c->max_seq_len, longrope, m->fingerprint.weights, sf_isa_name(sf_cpu_isa()), threads);
}

void sf_cli_memory_need(uint64_t bytes, const char *what)
{
	double mib = (double)bytes / (1 << 20);
	fprintf(stderr, "%s: memory: about %.*f MiB: %s\n", sf_progname, mib < 10 ? 1 : 0, mib,
		what);
}

// --- outputs

int sf_out_open(struct sf_out *o, const char *path, int binary, const char *const *inputs)
{
	struct sf_err e = { 0 };
	int ret;

	memset(o, 0, sizeof(*o));
	if ((ret = sf_outfile_open(&o->of, path, binary ? SF_OUT_BINARY : 0, inputs, &e))) {
		sf_error("%s", e.msg);
		sf_outfile_abort(&o->of);
		memset(o, 0, sizeof(*o));
		return ret;
	}
	o->f = o->of.f;
	o->path = o->of.name;
	return 0;
}

int sf_out_commit(struct sf_out *o)
{
	struct sf_err e = { 0 };
	int ret = sf_outfile_commit(&o->of, &e);

	if (ret)
		sf_error("%s", e.msg);
	o->f = NULL;
	return ret;
}

void sf_out_abort(struct sf_out *o)
{
	if (o->f || o->of.tmp)
		sf_outfile_abort(&o->of);
	memset(o, 0, sizeof(*o));
}

void sf_out_check_path(const char *path, const char *const *inputs)
{
	struct stat out, in;

	if (!path || !strcmp(path, "-") || stat(path, &out))
		return;
	for (size_t i = 0; inputs && inputs[i]; i++)
		if (stat(inputs[i], &in) == 0 && in.st_dev == out.st_dev && in.st_ino == out.st_ino) {
			sf_error("%s: is also an input (%s): refusing to overwrite it", path,
				 inputs[i]);
			exit(SF_EXIT_FAIL);
		}
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
