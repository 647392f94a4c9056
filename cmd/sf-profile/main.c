/* sf-profile: runs the dense model teacher-forced over corpora and writes
 * an activation trace: per token, layer and group the active set, and per
 * entry the sum of |value|. See man/sf-profile.1. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cli.h"
#include "engine/corpus.h"
#include "engine/forward.h"
#include "formats/model.h"
#include "base/pool.h"
#include "engine/tokenizer.h"
#include "formats/trace.h"
#include "offline/profile.h"

#define DEFAULT_DENSITY 0.3
#define DEFAULT_CONTEXT 256
#define MAX_THREADS 256

struct options {
	const char *model_dir;
	const char *output;
	char **corpora;
	int ncorpora;
	int format_set;
	struct sf_corpus_opts corpus;
	const char *task;
	enum sf_trace_select select;
	double value;
	const char *value_text;		/* as given, for the range message */
	int layer_lo, layer_hi;		/* -1: every layer */
	unsigned groups;
	int context;
	uint64_t max_tokens, max_docs;	/* 0: no limit */
	int threads;
	int dry_run, progress, quiet;
};

static void usage(void)
{
	printf("Usage: sf-profile --model DIR [options] CORPUS...\n"
	       "Run the dense model over corpora (teacher forcing) and write an activation\n"
	       "trace: per token, layer and group the active entries, and per entry the sum\n"
	       "of |value| (SelectInfer scores). CORPUS \"-\" is standard input.\n"
	       "\n"
	       "  -m, --model DIR       Hugging Face model directory\n"
	       "  -o, --output FILE     trace to write (default: standard output)\n"
	       "      --format F        text, jsonl, alpaca or csv (default: from each file's\n"
	       "                        name: .jsonl/.json, .csv, else text)\n"
	       "      --field NAME      jsonl: the string field holding the document\n"
	       "                        (default %s)\n"
	       "      --column NAME     csv: the column holding the document (default %s)\n"
	       "      --task NAME       tag the trace with a task name\n"
	       "      --density D       active: the round(D*n) entries of largest |value|\n"
	       "                        (0 < D <= 1, default %g)\n"
	       "      --threshold T     active: entries with |value| > T (instead of --density)\n"
	       "      --layers A-B      record only layers A to B (default: all)\n"
	       "      --groups LIST     record only these groups, comma separated: attn_in,\n"
	       "                        attn_out, ffn_in, ffn_out (default: all)\n"
	       "  -c, --context N       tokens per window; longer documents are split into\n"
	       "                        windows, each run from an empty cache (default %d)\n"
	       "      --max-tokens N    stop after N tokens\n"
	       "      --max-docs N      stop after N documents\n"
	       "  -t, --threads N       worker threads (default: online CPUs)\n"
	       "      --dry-run         run the model without recording (a throughput baseline)\n"
	       "      --progress        report progress on stderr even when not a terminal\n"
	       "  -q, --quiet           no summary on stderr\n"
	       "  -h, --help            show this help\n"
	       "  -V, --version         show the version\n"
	       "\n"
	       "Examples:\n"
	       "  sf-profile --model models/mix4-1m --task kjv kjv.profile.txt -o kjv.sft\n"
	       "  sf-profile -m models/mix4-1m --format alpaca data.jsonl | sf-coact -o x.sfc\n",
	       SF_CORPUS_DEFAULT_FIELD, SF_CORPUS_DEFAULT_COLUMN, DEFAULT_DENSITY,
	       DEFAULT_CONTEXT);
}

static unsigned parse_groups(const char *list)
{
	char *copy = strdup(list), *save = NULL;
	unsigned mask = 0;

	if (!copy)
		sf_usage_error("--groups: out of memory");
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		enum sf_group g;
		if (sf_group_parse(tok, &g)) {
			sf_error("--groups: '%s' is not a group: expected attn_in, attn_out, ffn_in "
				 "or ffn_out", tok);
			free(copy);
			fprintf(stderr, "Try '%s --help'.\n", sf_progname);
			exit(SF_EXIT_USAGE);
		}
		mask |= 1u << g;
	}
	free(copy);
	if (!mask)
		sf_usage_error("--groups: no group given");
	return mask;
}

static void parse_options(int argc, char **argv, struct options *o)
{
	enum { OPT_FORMAT = 256, OPT_FIELD, OPT_COLUMN, OPT_TASK, OPT_DENSITY, OPT_THRESHOLD,
	       OPT_LAYERS, OPT_GROUPS, OPT_MAX_TOKENS, OPT_MAX_DOCS, OPT_DRY_RUN, OPT_PROGRESS };
	static const struct option longopts[] = {
		{ "model", required_argument, NULL, 'm' },
		{ "output", required_argument, NULL, 'o' },
		{ "format", required_argument, NULL, OPT_FORMAT },
		{ "field", required_argument, NULL, OPT_FIELD },
		{ "column", required_argument, NULL, OPT_COLUMN },
		{ "task", required_argument, NULL, OPT_TASK },
		{ "density", required_argument, NULL, OPT_DENSITY },
		{ "threshold", required_argument, NULL, OPT_THRESHOLD },
		{ "layers", required_argument, NULL, OPT_LAYERS },
		{ "groups", required_argument, NULL, OPT_GROUPS },
		{ "context", required_argument, NULL, 'c' },
		{ "max-tokens", required_argument, NULL, OPT_MAX_TOKENS },
		{ "max-docs", required_argument, NULL, OPT_MAX_DOCS },
		{ "threads", required_argument, NULL, 't' },
		{ "dry-run", no_argument, NULL, OPT_DRY_RUN },
		{ "progress", no_argument, NULL, OPT_PROGRESS },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int c, have_density = 0, have_threshold = 0;

	*o = (struct options){
		.select = SF_TRACE_DENSITY, .value = DEFAULT_DENSITY, .layer_lo = -1,
		.layer_hi = -1, .groups = (1u << SF_NGROUPS) - 1, .context = DEFAULT_CONTEXT,
		.threads = cpus < 1 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : (int)cpus,
	};
	while ((c = getopt_long(argc, argv, "m:o:c:t:qhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'm': o->model_dir = optarg; break;
		case 'o': o->output = optarg; break;
		case OPT_FORMAT:
			if (sf_corpus_format_parse(optarg, &o->corpus.format))
				sf_usage_error("--format: '%s' is not text, jsonl, alpaca or csv", optarg);
			o->format_set = 1;
			break;
		case OPT_FIELD: o->corpus.field = optarg; break;
		case OPT_COLUMN: o->corpus.column = optarg; break;
		case OPT_TASK: o->task = optarg; break;
		case OPT_DENSITY:
			/* out of (0, 1] is bad input (exit 1), not a malformed option */
			o->value = sf_opt_f64("--density", optarg, -1e300, 1e300);
			o->value_text = optarg;
			o->select = SF_TRACE_DENSITY;
			have_density = 1;
			break;
		case OPT_THRESHOLD:
			o->value = sf_opt_f64("--threshold", optarg, 0.0, 1e30);
			o->select = SF_TRACE_THRESHOLD;
			have_threshold = 1;
			break;
		case OPT_LAYERS:
			if (sf_parse_range(optarg, SF_TRACE_MAX_LAYERS - 1, &o->layer_lo, &o->layer_hi))
				sf_usage_error("--layers: '%s' is not A-B or A with A <= B", optarg);
			break;
		case OPT_GROUPS: o->groups = parse_groups(optarg); break;
		case 'c': o->context = (int)sf_opt_u64("--context", optarg, 1, 1u << 24); break;
		case OPT_MAX_TOKENS: o->max_tokens = sf_opt_u64("--max-tokens", optarg, 1, UINT64_MAX); break;
		case OPT_MAX_DOCS: o->max_docs = sf_opt_u64("--max-docs", optarg, 1, UINT64_MAX); break;
		case 't': o->threads = (int)sf_opt_u64("--threads", optarg, 1, MAX_THREADS); break;
		case OPT_DRY_RUN: o->dry_run = 1; break;
		case OPT_PROGRESS: o->progress = 1; break;
		case 'q': o->quiet = 1; break;
		case 'h': usage(); exit(sf_close_stdout() ? SF_EXIT_FAIL : SF_EXIT_OK);
		case 'V': sf_print_version(); exit(sf_close_stdout() ? SF_EXIT_FAIL : SF_EXIT_OK);
		default:
			fprintf(stderr, "Try '%s --help'.\n", sf_progname);
			exit(SF_EXIT_USAGE);
		}
	}
	if (!o->model_dir)
		sf_usage_error("--model DIR is required");
	if (have_density && have_threshold)
		sf_usage_error("--density and --threshold cannot be combined");
	if (optind == argc)
		sf_usage_error("no corpus given (\"-\" reads standard input)");
	o->corpora = argv + optind;
	o->ncorpora = argc - optind;
	if (o->select == SF_TRACE_DENSITY && !(o->value > 0.0 && o->value <= 1.0)) {
		sf_error("--density %s: expected a value in (0, 1]", o->value_text);
		exit(SF_EXIT_FAIL);
	}
}

/* Everything a run holds, freed in one place. */
struct session {
	struct sf_model model;
	struct sf_tokenizer *tok;
	struct sf_pool *pool;
	struct sf_runstate state;
	struct sf_trace_info info;
	struct sf_trace_writer *writer;
	struct sf_profile *profile;	/* feeds the writer from the forward pass */
	struct sf_out out;
	struct sf_progress progress;
	uint64_t tokens, docs;
};

static void session_free(struct session *S)
{
	sf_profile_free(S->profile);
	sf_trace_writer_free(S->writer);
	sf_trace_info_free(&S->info);
	sf_state_free(&S->state);
	sf_pool_destroy(S->pool);
	sf_tokenizer_close(S->tok);
	sf_model_close(&S->model);
}

/* What the header records beside the shapes: task, corpora, producer and
 * the options that shape the trace. */
static json_t *trace_meta(const struct options *o)
{
	json_t *corpora = json_array();
	for (int i = 0; corpora && i < o->ncorpora; i++) {
		enum sf_corpus_format f = o->format_set ? o->corpus.format
							: sf_corpus_guess(o->corpora[i]);
		json_t *c = json_pack("{s:s, s:s}", "path", o->corpora[i], "format",
				      sf_corpus_format_name(f));
		if (c && f == SF_CORPUS_JSONL)
			json_object_set_new(c, "field", json_string(o->corpus.field ? o->corpus.field
							    : SF_CORPUS_DEFAULT_FIELD));
		if (c && f == SF_CORPUS_CSV)
			json_object_set_new(c, "column", json_string(o->corpus.column ? o->corpus.column
							     : SF_CORPUS_DEFAULT_COLUMN));
		json_array_append_new(corpora, c);
	}
	return json_pack("{s:s?, s:o, s:s, s:{s:s, s:i, s:I, s:I}}", "task", o->task, "corpora",
			 corpora, "producer", "sf-profile " SF_VERSION, "options", "model",
			 o->model_dir, "context", o->context, "max_tokens",
			 (json_int_t)o->max_tokens, "max_docs", (json_int_t)o->max_docs);
}

static int session_open(struct session *S, const struct options *o)
{
	struct sf_err e = { 0 };
	uint32_t entries[SF_NGROUPS];
	int ret;

	if ((ret = sf_model_open(&S->model, o->model_dir, &e)) ||
	    (ret = sf_tokenizer_open_model(&S->tok, o->model_dir, S->model.cfg.vocab_size, &e)))
		goto fail;
	const struct sf_config *cfg = &S->model.cfg;
	if (o->context > cfg->max_seq_len) {
		sf_error("--context %d: the model supports at most %d positions", o->context,
			 cfg->max_seq_len);
		return -EINVAL;
	}
	int lo = o->layer_lo < 0 ? 0 : o->layer_lo;
	int hi = o->layer_hi < 0 ? cfg->n_layers - 1 : o->layer_hi;
	if (hi >= cfg->n_layers) {
		sf_error("--layers %d-%d: the model has layers 0-%d", lo, hi, cfg->n_layers - 1);
		return -EINVAL;
	}
	sf_trace_model_entries(cfg, entries);
	json_t *meta = trace_meta(o);
	ret = sf_trace_info_init(&S->info, S->model.fingerprint, cfg->n_layers, entries, lo, hi,
				 o->groups, o->select, o->value, meta, &e);
	json_decref(meta);
	if (ret) {
		/* the message is about the options, not a file called "trace" */
		sf_error("%s", strncmp(e.msg, "trace: ", 7) == 0 ? e.msg + 7 : e.msg);
		return ret;
	}
	if ((ret = sf_pool_create(&S->pool, o->threads))) {
		sf_error("thread pool of %d: %s", o->threads, sf_strerror(ret));
		return ret;
	}
	if ((ret = sf_state_init(&S->state, cfg, o->context, &e)))
		goto fail;
	S->state.pool = S->pool;
	S->state.skip_logits = 1;	/* teacher forcing: the activations are what counts */
	return 0;
fail:
	sf_error("%s", e.msg);
	return ret;
}

static int done(const struct session *S, const struct options *o)
{
	return (o->max_tokens && S->tokens >= o->max_tokens) ||
	       (o->max_docs && S->docs >= o->max_docs);
}

/* One document: BOS first (as encode with special tokens adds it), then
 * windows of --context tokens, each from an empty cache. */
static int run_document(struct session *S, const struct options *o, const int32_t *ids,
			size_t n, double fraction)
{
	struct sf_err e = { 0 };
	int ret;

	for (size_t start = 0; start < n && !done(S, o); start += (size_t)o->context) {
		size_t len = n - start < (size_t)o->context ? n - start : (size_t)o->context;
		for (size_t pos = 0; pos < len && !done(S, o); pos++) {
			sf_forward(&S->model, &S->state, ids[start + pos], (int)pos);
			if ((ret = sf_state_error(&S->state, &e)) ||
			    (S->profile && (ret = sf_profile_token(S->profile, &e)))) {
				sf_error("%s", e.msg);
				return ret;
			}
			S->tokens++;
		}
		sf_progress_update(&S->progress, S->tokens,
				   o->max_tokens ? (double)S->tokens / o->max_tokens : fraction);
	}
	return 0;
}

static int run_corpus(struct session *S, const struct options *o, const char *path)
{
	struct sf_err e = { 0 };
	struct sf_corpus *corpus = NULL;
	struct sf_corpus_opts co = o->corpus;
	const char *doc;
	size_t len, nids;
	int32_t *ids = NULL;
	uint64_t docs = 0;
	int ret;

	if (!o->format_set)
		co.format = sf_corpus_guess(path);
	if ((ret = sf_corpus_open_as(&corpus, path, &co, &e))) {
		sf_error("%s", e.msg);
		return ret;
	}
	while (!done(S, o) && (ret = sf_corpus_next(corpus, &doc, &len, &e)) > 0) {
		if ((ret = sf_tokenizer_encode(S->tok, doc, len, 1, &ids, &nids, &e)))
			break;
		uint64_t at, total;
		sf_corpus_progress(corpus, &at, &total);
		ret = run_document(S, o, ids, nids, total ? (double)at / total : -1.0);
		free(ids);
		ids = NULL;
		if (ret)
			goto out;
		docs++;
		S->docs++;
	}
	if (ret < 0) {
		sf_error("%s", e.msg);
	} else if (docs == 0 && !done(S, o)) {
		sf_error("%s: no documents", strcmp(path, "-") == 0 ? "(stdin)" : path);
		ret = -EINVAL;
	}
out:
	sf_corpus_close(corpus);
	return ret < 0 ? ret : 0;
}

int main(int argc, char **argv)
{
	struct options o;
	struct session S = { 0 };
	struct sf_err e = { 0 };
	int ret;

	sf_cli_start("sf-profile");
	parse_options(argc, argv, &o);

	if ((ret = session_open(&S, &o)))
		goto out;
	if (!o.dry_run) {
		if ((ret = sf_out_open(&S.out, o.output, 1)))
			goto out;
		if ((ret = sf_trace_writer_open(&S.writer, S.out.f, S.out.path, &S.info, &e)) ||
		    (ret = sf_profile_open(&S.profile, S.writer, S.pool, &e))) {
			sf_error("%s", e.msg);
			goto out;
		}
		S.state.observer = sf_profile_observer(S.profile);
	}
	sf_progress_init(&S.progress, o.progress && !o.quiet, "tokens");
	double t0 = sf_now();
	for (int i = 0; i < o.ncorpora && !ret && !done(&S, &o); i++)
		ret = run_corpus(&S, &o, o.corpora[i]);
	sf_progress_end(&S.progress, S.tokens);
	double secs = sf_now() - t0;
	if (!ret && S.writer && (ret = sf_trace_writer_finish(S.writer, &e)))
		sf_error("%s", e.msg);
	if (!ret && !o.dry_run)
		ret = sf_out_commit(&S.out);
	if (!ret && !o.quiet)
		fprintf(stderr, "%s: %llu tokens of %llu documents in %.2f s, %.1f tokens/s%s\n",
			sf_progname, (unsigned long long)S.tokens, (unsigned long long)S.docs, secs,
			secs > 0 ? (double)S.tokens / secs : 0.0, o.dry_run ? " (dry run)" : "");
out:
	sf_out_abort(&S.out);
	session_free(&S);
	if (sf_close_stdout())
		ret = -EIO;
	return ret ? SF_EXIT_FAIL : SF_EXIT_OK;
}
