/* llamacpp: llama.cpp's side of the benchmarks, a small program on the
 * libllama that node-llama-cpp ships (tests/bench/llamacpp.bash builds and
 * runs it): quantize a GGUF, time a prompt and a greedy decode, score a
 * text's perplexity in sf-run --ppl's windows, tokenize. Results are one
 * JSON line on standard output; exit 0, 1 on a runtime error, 2 on usage. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "llama.h"
#include "ggml-backend.h"

#define DEFAULT_WINDOW 256
#define DEFAULT_MAX_TOKENS 16384

static const char usage_text[] =
	"Usage: llamacpp [options] quantize IN.gguf OUT.gguf TYPE [THREADS]\n"
	"       llamacpp [options] decode GGUF THREADS NTOK IDS_FILE\n"
	"       llamacpp [options] ppl GGUF THREADS TEXT_FILE [MAX_TOKENS [WINDOW]]\n"
	"       llamacpp [options] tokenize GGUF TEXT\n"
	"decode: IDS_FILE's integers (any separators, a JSON array too) are the\n"
	"prompt, evaluated as one batch; then NTOK greedy tokens, NTOK-1 passes.\n"
	"ppl: documents separated by a blank line, each BOS + its tokens, the\n"
	"first MAX_TOKENS (default 16384) in windows of WINDOW+1 (default 256).\n"
	"  --no-repack   no CPU extra buffer types (llama.cpp's --no-repack)\n"
	"  --no-warmup   no warm-up pass before the timed ones\n"
	"  --pure        quantize: every tensor to TYPE (llama-quantize --pure)\n"
	"  -v            llama.cpp's log on standard error\n";

static struct {
	int repack, warmup, pure, verbose;
	double buf_mib[8];		/* weight buffers by type, from the load log */
	char buf_name[8][32];
	int nbuf;
	int repacked;			/* tensors the load log says it repacked */
} g = { .repack = 1, .warmup = 1 };

static int die(const char *fmt, ...)
{
	va_list ap;

	fputs("llamacpp: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static long parse_long(const char *s, long min, long max, const char *what)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max) {
		fprintf(stderr, "llamacpp: %s: '%s': expected an integer in %ld..%ld\n", what, s,
			min, max);
		exit(2);
	}
	return v;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ---------------------------------------------------------------------------
// loading

/* llama.cpp's log: errors always, everything under -v; the lines naming a
 * weight buffer ("CPU_REPACK model buffer size = 3.38 MiB") and a repacked
 * tensor are counted, so a run reports where its weights went. */
static void log_cb(enum ggml_log_level level, const char *text, void *ud)
{
	const char *p = strstr(text, " model buffer size = ");
	char name[32];
	double mib;

	(void)ud;
	if (p && g.nbuf < 8 && sscanf(text, "%*s %31s model buffer size = %lf", name, &mib) == 2) {
		snprintf(g.buf_name[g.nbuf], sizeof(g.buf_name[0]), "%s", name);
		g.buf_mib[g.nbuf++] = mib;
	}
	if (strstr(text, "repack tensor "))
		g.repacked++;
	if (g.verbose || level == GGML_LOG_LEVEL_ERROR)
		fputs(text, stderr);
}

/* The CPU backends are shared objects beside libllama (GGML_BACKEND_DL):
 * load the best one for this CPU from there. */
static void backend_init(void)
{
	Dl_info info;
	char *path, *dir;

	llama_log_set(log_cb, NULL);
	if (!dladdr((void *)llama_backend_init, &info) || !info.dli_fname)
		die("cannot find the directory of libllama");
	path = strdup(info.dli_fname);
	dir = dirname(path);
	ggml_backend_load_all_from_path(dir);
	free(path);
	if (!ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU))
		die("%s: no CPU backend (libggml-cpu-*.so) loaded", dir);
	llama_backend_init();
}

static struct llama_model *model_open(const char *path)
{
	struct llama_model_params mp = llama_model_default_params();
	struct llama_model *m;

	mp.use_extra_bufts = g.repack;	/* false: weights stay in the mapped file */
	m = llama_model_load_from_file(path, mp);
	if (!m)
		die("%s: llama.cpp could not load it (-v shows why)", path);
	return m;
}

/* Text needs a tokenizer: a GGUF written without one has llama.cpp's
 * "no_vocab" (dummy tokens), which aborts in llama_tokenize. */
static void need_tokenizer(const struct llama_vocab *v, const char *path)
{
	if (llama_vocab_type(v) == LLAMA_VOCAB_TYPE_NONE)
		die("%s: no tokenizer (its model had no tokenizer.json): token ids only", path);
}

static struct llama_context *context_open(struct llama_model *m, int threads, uint32_t n_ctx,
					  uint32_t n_batch)
{
	struct llama_context_params cp = llama_context_default_params();
	struct llama_context *ctx;

	cp.n_ctx = n_ctx;
	cp.n_batch = n_batch;
	cp.n_ubatch = n_batch;	/* the prompt or a window in one pass */
	cp.n_seq_max = 1;
	cp.n_threads = threads;
	cp.n_threads_batch = threads;
	cp.no_perf = true;
	ctx = llama_init_from_model(m, cp);
	if (!ctx)
		die("cannot create a context of %u positions", n_ctx);
	return ctx;
}

static void decode_or_die(struct llama_context *ctx, struct llama_batch b)
{
	int ret = llama_decode(ctx, b);

	if (ret)
		die("llama_decode of %d tokens: error %d", b.n_tokens, ret);
	llama_synchronize(ctx);
}

static llama_token argmax(const float *v, int n)
{
	int best = 0;

	for (int i = 1; i < n; i++)
		if (v[i] > v[best])
			best = i;
	return best;
}

static void print_buffers(void)
{
	printf("\"repack\": %s, \"repacked_tensors\": %d, \"weight_buffers_mib\": {",
	       g.repack ? "true" : "false", g.repacked);
	for (int i = 0; i < g.nbuf; i++)
		printf("%s\"%s\": %.2f", i ? ", " : "", g.buf_name[i], g.buf_mib[i]);
	printf("}");
}

static long rss_peak_kib(void)
{
	struct rusage ru;

	return getrusage(RUSAGE_SELF, &ru) ? -1 : ru.ru_maxrss;
}

// ---------------------------------------------------------------------------
// quantize

static const struct {
	const char *name;
	enum llama_ftype ftype;
} qtypes[] = {
	{ "Q4_0", LLAMA_FTYPE_MOSTLY_Q4_0 }, { "Q4_1", LLAMA_FTYPE_MOSTLY_Q4_1 },
	{ "Q5_0", LLAMA_FTYPE_MOSTLY_Q5_0 }, { "Q5_1", LLAMA_FTYPE_MOSTLY_Q5_1 },
	{ "Q8_0", LLAMA_FTYPE_MOSTLY_Q8_0 }, { "Q2_K", LLAMA_FTYPE_MOSTLY_Q2_K },
	{ "Q3_K_M", LLAMA_FTYPE_MOSTLY_Q3_K_M }, { "Q4_K_S", LLAMA_FTYPE_MOSTLY_Q4_K_S },
	{ "Q4_K_M", LLAMA_FTYPE_MOSTLY_Q4_K_M }, { "Q5_K_M", LLAMA_FTYPE_MOSTLY_Q5_K_M },
	{ "Q6_K", LLAMA_FTYPE_MOSTLY_Q6_K }, { "F16", LLAMA_FTYPE_MOSTLY_F16 },
	{ "BF16", LLAMA_FTYPE_MOSTLY_BF16 }, { "F32", LLAMA_FTYPE_ALL_F32 },
};

static int cmd_quantize(int argc, char **argv)
{
	struct llama_model_quantize_params qp = llama_model_quantize_default_params();
	size_t i;

	if (argc < 3 || argc > 4)
		return 2;
	for (i = 0; i < sizeof(qtypes) / sizeof(qtypes[0]); i++)
		if (!strcmp(argv[2], qtypes[i].name))
			break;
	if (i == sizeof(qtypes) / sizeof(qtypes[0]))
		die("quantize: type '%s': expected Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_M, "
		    "Q4_K_S, Q4_K_M, Q5_K_M, Q6_K, F16, BF16 or F32", argv[2]);
	qp.ftype = qtypes[i].ftype;
	qp.nthread = argc == 4 ? (int)parse_long(argv[3], 1, 1024, "THREADS") : 0;
	qp.pure = g.pure;
	if (llama_model_quantize(argv[0], argv[1], &qp))
		die("quantize %s to %s as %s failed (-v shows why)", argv[0], argv[1], argv[2]);
	return 0;
}

// ---------------------------------------------------------------------------
// decode

/* Every integer in the file, whatever separates them. */
static llama_token *read_ids(const char *path, int *n_out)
{
	FILE *f = fopen(path, "r");
	llama_token *ids = NULL;
	int n = 0, cap = 0, c;

	if (!f)
		die("%s: %s", path, strerror(errno));
	while ((c = fgetc(f)) != EOF) {
		long v = 0;
		if (c < '0' || c > '9')
			continue;
		for (; c >= '0' && c <= '9'; c = fgetc(f))
			if ((v = v * 10 + (c - '0')) > INT32_MAX)
				die("%s: token id over %d", path, INT32_MAX);
		if (n == cap && !(ids = realloc(ids, (size_t)(cap = cap ? 2 * cap : 256) * sizeof(*ids))))
			die("%s: %s", path, strerror(ENOMEM));
		ids[n++] = (llama_token)v;
	}
	if (ferror(f))
		die("%s: read error", path);
	fclose(f);
	if (n == 0)
		die("%s: no token ids", path);
	*n_out = n;
	return ids;
}

static int cmd_decode(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	int threads = (int)parse_long(argv[1], 1, 1024, "THREADS");
	int ntok = (int)parse_long(argv[2], 1, 1 << 20, "NTOK"), np;
	llama_token *prompt = read_ids(argv[3], &np);
	struct llama_model *m = model_open(argv[0]);
	int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
	struct llama_context *ctx = context_open(m, threads, (uint32_t)(np + ntok), (uint32_t)np);
	llama_token *out = malloc((size_t)ntok * sizeof(*out));
	double t0, t1, t2;

	if (!out)
		die("%s", strerror(ENOMEM));
	for (int i = 0; i < np; i++)
		if (prompt[i] < 0 || prompt[i] >= n_vocab)
			die("%s: token %d: out of the vocabulary's 0..%d", argv[3], prompt[i], n_vocab - 1);
	if (g.warmup) {	/* page the weights in, as llama-cli's warm-up does */
		decode_or_die(ctx, llama_batch_get_one(prompt, 1));
		llama_memory_clear(llama_get_memory(ctx), true);
	}
	t0 = now();
	decode_or_die(ctx, llama_batch_get_one(prompt, np));
	t1 = now();
	out[0] = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
	for (int i = 1; i < ntok; i++) {
		decode_or_die(ctx, llama_batch_get_one(&out[i - 1], 1));
		out[i] = argmax(llama_get_logits_ith(ctx, -1), n_vocab);
	}
	t2 = now();

	printf("{\"model\": \"%s\", \"threads\": %d, ", argv[0], threads);
	print_buffers();
	printf(", \"prompt_tokens\": %d, \"prompt_seconds\": %.6f, \"prompt_tokens_per_second\": %.3f"
	       ", \"decode_tokens\": %d, \"decode_steps\": %d, \"decode_seconds\": %.6f"
	       ", \"decode_tokens_per_second\": %.3f, \"rss_peak_kib\": %ld, \"ids\": [",
	       np, t1 - t0, np / (t1 - t0), ntok, ntok - 1, t2 - t1,
	       t2 > t1 ? (ntok - 1) / (t2 - t1) : 0.0, rss_peak_kib());
	for (int i = 0; i < ntok; i++)
		printf("%s%d", i ? ", " : "", out[i]);
	printf("]}\n");
	llama_free(ctx);
	llama_model_free(m);
	free(out);
	free(prompt);
	return 0;
}

// ---------------------------------------------------------------------------
// ppl

/* The file's documents (split at empty lines, lines joined by "\n"), each
 * BOS and its tokens, as sf-run --ppl reads a text file. */
static llama_token *read_docs(const struct llama_vocab *v, const char *path, long max,
			      int *n_out, int *docs_out)
{
	FILE *f = fopen(path, "r");
	char *line = NULL, *doc = NULL;
	size_t lcap = 0, dlen = 0, dcap = 0;
	llama_token *ids = NULL;
	int n = 0, cap = 0, docs = 0;
	ssize_t len;
	int more = 1;

	if (!f)
		die("%s: %s", path, strerror(errno));
	while (more && n < max) {
		len = getline(&line, &lcap, f);
		more = len >= 0;
		if (more && len > 0 && line[len - 1] == '\n')
			line[--len] = '\0';
		if (more && len > 0) {	/* a line of the document */
			if (dlen + (size_t)len + 2 > dcap &&
			    !(doc = realloc(doc, dcap = 2 * (dlen + (size_t)len + 2))))
				die("%s", strerror(ENOMEM));
			if (dlen)
				doc[dlen++] = '\n';
			memcpy(doc + dlen, line, (size_t)len);
			dlen += (size_t)len;
			continue;
		}
		if (!dlen)
			continue;
		if (cap - n < (int)dlen + 2 &&
		    !(ids = realloc(ids, (size_t)(cap = 2 * (n + (int)dlen + 2)) * sizeof(*ids))))
			die("%s", strerror(ENOMEM));
		ids[n] = llama_vocab_bos(v);
		int k = llama_tokenize(v, doc, (int32_t)dlen, ids + n + 1, cap - n - 1, false, false);
		if (k < 0 || ids[n] < 0)
			die("%s: document %d: cannot tokenize it (no vocabulary?)", path, docs + 1);
		n += k + 1;
		docs++;
		dlen = 0;
	}
	if (ferror(f))
		die("%s: read error", path);
	fclose(f);
	free(line);
	free(doc);
	*n_out = n < max ? n : (int)max;
	*docs_out = docs;
	return ids;
}

static int cmd_ppl(int argc, char **argv)
{
	if (argc < 3 || argc > 5)
		return 2;
	int threads = (int)parse_long(argv[1], 1, 1024, "THREADS"), n, docs;
	long max = argc > 3 ? parse_long(argv[3], 2, 1L << 30, "MAX_TOKENS") : DEFAULT_MAX_TOKENS;
	int window = argc > 4 ? (int)parse_long(argv[4], 1, 1 << 16, "WINDOW") : DEFAULT_WINDOW;
	struct llama_model *m = model_open(argv[0]);
	const struct llama_vocab *v = llama_model_get_vocab(m);
	int n_vocab = llama_vocab_n_tokens(v);
	need_tokenizer(v, argv[0]);
	llama_token *ids = read_docs(v, argv[2], max, &n, &docs);
	struct llama_context *ctx = context_open(m, threads, (uint32_t)window + 1,
						 (uint32_t)window + 1);
	int8_t *all = malloc((size_t)window + 1);
	double nll = 0, t0;
	long scored = 0;

	if (!all)
		die("%s", strerror(ENOMEM));
	if (n < 2)
		die("%s: %d tokens: perplexity needs at least 2", argv[2], n);
	memset(all, 1, (size_t)window + 1);
	t0 = now();
	for (int start = 0; start + 1 < n; start += window) {
		int len = n - start < window + 1 ? n - start : window + 1;
		struct llama_batch b = llama_batch_get_one(ids + start, len);
		b.logits = all;
		llama_memory_clear(llama_get_memory(ctx), true);
		decode_or_die(ctx, b);
		for (int i = 0; i + 1 < len; i++) {	/* row i predicts token i + 1 */
			const float *z = llama_get_logits_ith(ctx, i);
			double mx = z[argmax(z, n_vocab)], sum = 0;
			for (int j = 0; j < n_vocab; j++)
				sum += exp((double)z[j] - mx);
			nll += mx + log(sum) - (double)z[ids[start + i + 1]];
			scored++;
		}
	}
	printf("{\"file\": \"%s\", \"documents\": %d, \"tokens\": %ld, \"window\": %d, "
	       "\"nll\": %.6f, \"ppl\": %.6f, \"seconds\": %.3f, \"threads\": %d, ", argv[2], docs,
	       scored, window, nll / (double)scored, exp(nll / (double)scored), now() - t0, threads);
	print_buffers();
	printf("}\n");
	llama_free(ctx);
	llama_model_free(m);
	free(ids);
	free(all);
	return 0;
}

// ---------------------------------------------------------------------------
// tokenize

static int cmd_tokenize(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	struct llama_model_params mp = llama_model_default_params();
	mp.vocab_only = true;
	struct llama_model *m = llama_model_load_from_file(argv[0], mp);
	if (!m)
		die("%s: llama.cpp could not load it (-v shows why)", argv[0]);
	need_tokenizer(llama_model_get_vocab(m), argv[0]);
	int len = (int)strlen(argv[1]), n;
	llama_token *ids = malloc(((size_t)len + 2) * sizeof(*ids));
	if (!ids)
		die("%s", strerror(ENOMEM));
	n = llama_tokenize(llama_model_get_vocab(m), argv[1], len, ids, len + 2, true, false);
	if (n < 0)
		die("%s: cannot tokenize the text", argv[0]);
	printf("[");
	for (int i = 0; i < n; i++)
		printf("%s%d", i ? ", " : "", ids[i]);
	printf("]\n");
	free(ids);
	llama_model_free(m);
	return 0;
}

// ---------------------------------------------------------------------------
// main

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} cmds[] = { { "quantize", cmd_quantize }, { "decode", cmd_decode },
		     { "ppl", cmd_ppl }, { "tokenize", cmd_tokenize } };
	int i = 1, ret = 2;

	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--no-repack"))
			g.repack = 0;
		else if (!strcmp(argv[i], "--no-warmup"))
			g.warmup = 0;
		else if (!strcmp(argv[i], "--pure"))
			g.pure = 1;
		else if (!strcmp(argv[i], "-v"))
			g.verbose = 1;
		else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return fputs(usage_text, stdout) == EOF;
		else
			break;
	}
	if (i < argc) {
		for (size_t c = 0; c < sizeof(cmds) / sizeof(cmds[0]); c++) {
			if (!strcmp(argv[i], cmds[c].name)) {
				backend_init();
				ret = cmds[c].fn(argc - i - 1, argv + i + 1);
				break;
			}
		}
	}
	if (ret == 2)
		fputs(usage_text, stderr);
	if (fclose(stdout))
		die("write error on standard output: %s", strerror(errno));
	return ret;
}
