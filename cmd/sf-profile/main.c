/* sf-profile: runs the dense model teacher-forced over corpora and writes
 * an activation trace: per token, layer and group the active set, and per
 * entry the sum of |value|; of a mixture, per layer the experts the router
 * picks. See man/sf-profile.1. */
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
#define DEFAULT_WINDOW 256
#define DEFAULT_BATCH 64	/* tokens per weight pass */

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
	unsigned groups;		/* 0: the model's (sf_trace_model_groups) */
	int ctx;			/* -c: 0 for the model's max_position_embeddings */
	int window;			/* 0: DEFAULT_WINDOW, at most the context */
	int batch;			/* tokens per weight pass */
	uint64_t max_tokens, max_docs;	/* 0: no limit */
	int threads;
	int dry_run, progress, quiet, verbose;
};

enum { OPT_FORMAT = SF_OPT_FIRST, OPT_FIELD, OPT_COLUMN, OPT_TASK, OPT_DENSITY, OPT_THRESHOLD,
       OPT_LAYERS, OPT_GROUPS, OPT_WINDOW, OPT_MAX_TOKENS, OPT_MAX_DOCS, OPT_DRY_RUN };

static const struct sf_opt options[] = {
	{ "model", 'm', "MODEL", "Hugging Face model directory or GGUF file", NULL, 0 },
	SF_OPT_OUTPUT("trace to write (default: standard output)"),
	{ "format", OPT_FORMAT, "F", "text, jsonl, alpaca or csv (default: from each file's\n"
	  "name: .jsonl/.json, .csv, else text)", NULL, 0 },
	{ "field", OPT_FIELD, "NAME", "jsonl: the string field holding the document\n"
	  "(default %s)", SF_CORPUS_DEFAULT_FIELD, 0 },
	{ "column", OPT_COLUMN, "NAME", "csv: the column holding the document (default %s)",
	  SF_CORPUS_DEFAULT_COLUMN, 0 },
	{ "task", OPT_TASK, "NAME", "tag the trace with a task name", NULL, 0 },
	{ "density", OPT_DENSITY, "D", "active: the round(D*n) entries of largest |value|\n"
	  "(0 < D <= 1, default %s)", SF_STR(DEFAULT_DENSITY), 0 },
	{ "threshold", OPT_THRESHOLD, "T", "active: entries with |value| > T (instead of\n"
	  "--density)", NULL, 0 },
	{ "layers", OPT_LAYERS, "N-M", "record only layers N to M (LAYERS in sparseflash(7),\n"
	  "one range; default: all)", NULL, 0 },
	{ "groups", OPT_GROUPS, "LIST", "record only these groups, comma separated: attn_in,\n"
	  "attn_out, ffn_in, ffn_out, experts (a mixture's\n"
	  "router picks) (default: all the model has)", NULL, 0 },
	{ "ctx-size", 'c', "N", "context length, as sf-run's: no window is longer\n"
	  "(default: the model's)", NULL, 0 },
	{ "window", OPT_WINDOW, "N", "tokens per window (what -c set before it meant\n"
	  "--ctx-size); longer documents are split into\n"
	  "windows, each run from an empty cache (default %s,\n"
	  "at most -c)", SF_STR(DEFAULT_WINDOW), 0 },
	{ "batch-size", 'b', "N", "tokens per pass over the weights (default %s); the\n"
	  "trace is the same", SF_STR(DEFAULT_BATCH), 0 },
	{ "max-tokens", OPT_MAX_TOKENS, "N", "stop after N tokens", NULL, 0 },
	{ "max-docs", OPT_MAX_DOCS, "N", "stop after N documents", NULL, 0 },
	SF_OPT_THREADS,
	{ "dry-run", OPT_DRY_RUN, NULL, "run the model without recording (a throughput\n"
	  "baseline)", NULL, 0 },
	SF_OPT_PROGRESS_ENTRY,
	SF_OPT_QUIET,
	SF_OPT_VERBOSE,
	SF_OPT_END,
};

static const struct sf_cmd cmd = {
	"Usage: sf-profile --model MODEL [options] CORPUS...\n"
	"Run the dense model over corpora (teacher forcing) and write an activation\n"
	"trace: per token, layer and group the active entries, and per entry the sum\n"
	"of |value| (SelectInfer scores). CORPUS \"-\" is standard input.\n",
	options,
	"  sf-profile --model models/mix4-1m --task kjv kjv.profile.txt -o kjv.sft\n"
	"  sf-profile -m models/mix4-1m --format alpaca data.jsonl | sf-coact -o x.sfc\n",
};

static void parse_options(int argc, char **argv, struct options *o)
{
	int c, have_density = 0, have_threshold = 0;

	*o = (struct options){
		.select = SF_TRACE_DENSITY, .value = DEFAULT_DENSITY, .layer_lo = -1,
		.layer_hi = -1,
		.batch = DEFAULT_BATCH, .threads = sf_cli_threads_default(),
	};
	while ((c = sf_cli_getopt(argc, argv, &cmd)) != -1) {
		switch (c) {
		case 'm': o->model_dir = sf_opt_path("--model", optarg); break;
		case 'o': o->output = sf_opt_path("--output", optarg); break;
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
			sf_opt_layer_range("--layers", optarg, SF_TRACE_MAX_LAYERS, &o->layer_lo,
					   &o->layer_hi);
			break;
		case OPT_GROUPS: o->groups = sf_opt_groups("--groups", optarg, SF_GROUPS_EXPERTS); break;
		case 'c': o->ctx = (int)sf_opt_u64("--ctx-size", optarg, 1, 1u << 24); break;
		case OPT_WINDOW: o->window = (int)sf_opt_u64("--window", optarg, 1, 1u << 24); break;
		case 'b': o->batch = (int)sf_opt_u64("--batch-size", optarg, 1, SF_BATCH_MAX); break;
		case OPT_MAX_TOKENS: o->max_tokens = sf_opt_u64("--max-tokens", optarg, 1, UINT64_MAX); break;
		case OPT_MAX_DOCS: o->max_docs = sf_opt_u64("--max-docs", optarg, 1, UINT64_MAX); break;
		case 't': o->threads = sf_opt_threads(optarg); break;
		case OPT_DRY_RUN: o->dry_run = 1; break;
		case SF_OPT_PROGRESS: o->progress = 1; break;
		case 'q': o->quiet = 1; break;
		case 'v': o->verbose = 1; break;
		}
	}
	if (!o->model_dir)
		sf_usage_error("--model MODEL is required");
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
			 o->model_dir, "context", o->window, "max_tokens",
			 (json_int_t)o->max_tokens, "max_docs", (json_int_t)o->max_docs);
}

/* Opens the model and everything a run holds; resolves the window against
 * the context (-c) and the model's positions. */
static int session_open(struct session *S, struct options *o)
{
	struct sf_err e = { 0 };
	uint32_t entries[SF_NKINDS], experts_used;
	int ret;

	if ((ret = sf_model_open(&S->model, o->model_dir, &e)) ||
	    (ret = sf_tokenizer_open_model(&S->tok, o->model_dir, S->model.cfg.vocab_size, &e)))
		goto fail;
	const struct sf_config *cfg = &S->model.cfg;
	if (o->ctx > cfg->max_seq_len) {
		sf_error("--ctx-size %d: the model supports at most %d positions", o->ctx,
			 cfg->max_seq_len);
		return -EINVAL;
	}
	int ctx = o->ctx ? o->ctx : sf_config_default_ctx(cfg);
	if (o->window > ctx) {
		if (o->ctx)
			sf_error("--window %d: longer than the context (--ctx-size %d)", o->window, ctx);
		else
			sf_error("--window %d: the model supports at most %d positions", o->window, ctx);
		return -EINVAL;
	}
	if (!o->window)
		o->window = DEFAULT_WINDOW < ctx ? DEFAULT_WINDOW : ctx;
	int lo = o->layer_lo < 0 ? 0 : o->layer_lo;
	int hi = o->layer_hi < 0 ? cfg->n_layers - 1 : o->layer_hi;
	if (hi >= cfg->n_layers) {
		sf_error("--layers %d-%d: the model has layers 0-%d", lo, hi, cfg->n_layers - 1);
		return -EINVAL;
	}
	sf_trace_model_entries(cfg, entries, &experts_used);
	json_t *meta = trace_meta(o);
	ret = sf_trace_info_init(&S->info, &S->model.fingerprint, cfg->n_layers, entries,
				 experts_used, lo, hi,
				 o->groups ? o->groups : sf_trace_model_groups(cfg), o->select,
				 o->value, meta, &e);
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
	int batch = o->batch < o->window ? o->batch : o->window;
	if ((ret = sf_state_init_batch(&S->state, cfg, o->window, batch, &e)))
		goto fail;
	S->state.pool = S->pool;
	S->state.skip_logits = 1;	/* teacher forcing: the activations are what counts */
	S->state.release_weights = sf_model_releases(&S->model);
	if (o->verbose) {
		int rel = S->state.release_weights;
		sf_cli_model_summary(o->model_dir, &S->model, o->window, o->threads);
		sf_cli_memory_need((rel ? sf_model_pass_bytes(&S->model) : sf_model_bytes(&S->model)) +
				   sf_state_bytes_batch(cfg, o->window, batch) +
				   (o->dry_run ? 0 : sf_profile_bytes(&S->info, batch, o->threads)),
				   rel ? "the weights one layer at a time (mapped), run state, recorder"
				       : "the weights (mapped), run state, recorder");
	}
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
 * windows of --window tokens, each from an empty cache. */
static int run_document(struct session *S, const struct options *o, const int32_t *ids,
			size_t n, double fraction)
{
	struct sf_err e = { 0 };
	int ret;

	for (size_t start = 0; start < n && !done(S, o); start += (size_t)o->window) {
		size_t len = n - start < (size_t)o->window ? n - start : (size_t)o->window;
		for (size_t pos = 0; pos < len && !done(S, o);) {
			size_t T = len - pos < (size_t)S->state.batch ? len - pos : (size_t)S->state.batch;
			if (o->max_tokens && T > o->max_tokens - S->tokens)
				T = o->max_tokens - S->tokens;
			sf_forward_batch(&S->model, &S->state, ids + start + pos, (int)T, (int)pos, 0);
			if ((ret = sf_state_error(&S->state, &e)) ||
			    (S->profile && (ret = sf_profile_tokens(S->profile, (int)T, &e)))) {
				sf_error("%s", e.msg);
				return ret;
			}
			S->tokens += T;
			pos += T;
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
		if ((ret = sf_out_open(&S.out, o.output, 1, (const char *const *)o.corpora)))
			goto out;
		if ((ret = sf_trace_writer_open(&S.writer, S.out.f, S.out.path, &S.info, &e)) ||
		    (ret = sf_profile_open(&S.profile, S.writer, S.pool, S.state.batch, &e))) {
			sf_error("%s", e.msg);
			goto out;
		}
		S.state.observer = sf_profile_observer(S.profile);
	}
	sf_progress_init(&S.progress, o.progress, o.quiet, "tokens");
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
		fprintf(stderr, "%s: %llu %s of %llu %s in %.2f s, %.1f tokens/s%s\n", sf_progname,
			(unsigned long long)S.tokens, sf_plural(S.tokens, "token", "tokens"),
			(unsigned long long)S.docs, sf_plural(S.docs, "document", "documents"), secs,
			secs > 0 ? (double)S.tokens / secs : 0.0, o.dry_run ? " (dry run)" : "");
out:
	sf_out_abort(&S.out);
	session_free(&S);
	if (sf_close_stdout())
		ret = -EIO;
	return ret ? SF_EXIT_FAIL : SF_EXIT_OK;
}
