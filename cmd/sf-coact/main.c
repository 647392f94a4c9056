/* sf-coact: turns activation traces into co-activation statistics (.sfc),
 * merges .sfc shards, writes and merges SelectInfer score files, selects
 * the neurons of sf-pack --keep from them, and summarises a .sfc. See
 * man/sf-coact.1. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cli.h"
#include "formats/coact.h"
#include "formats/scores.h"
#include "base/jsonfile.h"
#include "base/pool.h"
#include "online/selectinfer.h"
#include "formats/trace.h"
#include "offline/coact.h"

#define DEFAULT_MAX_MEMORY ((uint64_t)16 << 30)

enum mode { MODE_TRACES, MODE_MERGE, MODE_MERGE_SCORES, MODE_INFO, MODE_SELECT };

struct options {
	enum mode mode;
	const char *output;
	const char *scores;
	const char *task;	/* --select-neurons: task-specific scores */
	double gamma, delta;
	int gamma_set, delta_set;
	char **inputs;
	int ninputs;
	const char **read;	/* every file read (inputs and --task), NULL-ended: not an output */
	int layer_lo, layer_hi;
	uint64_t max_memory;
	int threads;
	int progress, quiet, verbose;
};

enum { OPT_LAYERS = SF_OPT_FIRST, OPT_MERGE, OPT_SCORES, OPT_MERGE_SCORES, OPT_INFO,
       OPT_MAX_MEMORY, OPT_SELECT, OPT_GAMMA, OPT_DELTA, OPT_TASK };

static const struct sf_opt options[] = {
	SF_OPT_OUTPUT(".sfc (or merged scores, or neurons file) to write\n"
		      "(default: standard output)"),
	{ "layers", OPT_LAYERS, "N-M", "only layers N to M (LAYERS in sparseflash(7), one\n"
	  "range; default: all the inputs hold)", NULL, 0 },
	{ "merge", OPT_MERGE, NULL, "the inputs are .sfc files to add together", NULL, 0 },
	{ "scores", OPT_SCORES, "FILE", "also write SelectInfer scores (JSON): per entry\n"
	  "sum|value| / tokens and the activation frequency", NULL, 0 },
	{ "merge-scores", OPT_MERGE_SCORES, NULL, "the inputs are score files: write their\n"
	  "token-weighted mean (model-specific scores)", NULL, 0 },
	{ "select-neurons", OPT_SELECT, NULL, "write the neurons file of sf-pack --keep\n"
	  "(SelectInfer's selective loading): per layer the top D\n"
	  "of the task scores, then the best model scores up to G", NULL, 0 },
	{ "gamma", OPT_GAMMA, "G", "share of FFN neurons kept, in (0, 1] (default %s)",
	  SF_STR(SF_SELECT_DEFAULT_GAMMA), 0 },
	{ "delta", OPT_DELTA, "D", "share taken from the task scores first (default %s)",
	  SF_STR(SF_SELECT_DEFAULT_LOAD_DELTA), 0 },
	{ "task", OPT_TASK, "FILE", "task-specific scores (kind \"task\"); MODEL.json is\n"
	  "model-specific (sf-coact --merge-scores); either alone\nfills up to G", NULL, 0 },
	{ "info", OPT_INFO, NULL, "print a JSON summary of a .sfc: per layer and group\n"
	  "tokens, mean density, share of entries active in more\n"
	  "than half the tokens, checksum; of experts the picks and\n"
	  "how well the layer before's predict them", NULL, 0 },
	{ "max-memory", OPT_MAX_MEMORY, "N", "refuse to need more than N bytes (K/M/G suffixes,\n"
	  "default %s)", "16G", 0 },
	SF_OPT_THREADS,
	SF_OPT_PROGRESS_ENTRY,
	SF_OPT_QUIET,
	SF_OPT_VERBOSE,
	SF_OPT_END,
};
_Static_assert(DEFAULT_MAX_MEMORY == (uint64_t)16 << 30, "--help says 16G");

static const struct sf_cmd cmd = {
	"Usage: sf-coact [options] [TRACE...]\n"
	"       sf-coact --merge [options] FILE.sfc...\n"
	"       sf-coact --merge-scores [-o FILE] SCORES.json...\n"
	"       sf-coact --info [--layers N-M] FILE.sfc\n"
	"       sf-coact --select-neurons [--gamma G] [--delta D] [--task TASK.json]\n"
	"                [MODEL.json] [-o neurons.json]\n"
	"Accumulate co-activation statistics from activation traces (standard input\n"
	"when no TRACE is given): per layer and group the token count, per-entry\n"
	"activation counts and |value| sums, and pair counts; of a mixture's experts\n"
	"also the steps from the layer before's.\n",
	options,
	"  sf-profile -m models/mix4-1m kjv.txt | sf-coact --scores kjv.json -o kjv.sfc\n"
	"  sf-coact --merge a.sfc b.sfc -o ab.sfc\n"
	"  sf-coact --merge-scores kjv.json man.json -o model.json\n"
	"  sf-coact --select-neurons --gamma 0.7 --task kjv.json model.json -o neurons.json\n",
};

static void parse_options(int argc, char **argv, struct options *o)
{
	int c, modes = 0;

	*o = (struct options){
		.mode = MODE_TRACES, .layer_lo = 0, .layer_hi = SF_TRACE_MAX_LAYERS - 1,
		.max_memory = DEFAULT_MAX_MEMORY,
		.gamma = SF_SELECT_DEFAULT_GAMMA, .delta = SF_SELECT_DEFAULT_LOAD_DELTA,
		.threads = sf_cli_threads_default(),
	};
	while ((c = sf_cli_getopt(argc, argv, &cmd)) != -1) {
		switch (c) {
		case 'o': o->output = sf_opt_path("--output", optarg); break;
		case OPT_LAYERS:
			sf_opt_layer_range("--layers", optarg, SF_TRACE_MAX_LAYERS, &o->layer_lo,
					   &o->layer_hi);
			break;
		case OPT_MERGE: o->mode = MODE_MERGE; modes++; break;
		case OPT_SCORES: o->scores = optarg; break;
		case OPT_MERGE_SCORES: o->mode = MODE_MERGE_SCORES; modes++; break;
		case OPT_INFO: o->mode = MODE_INFO; modes++; break;
		case OPT_SELECT: o->mode = MODE_SELECT; modes++; break;
		case OPT_GAMMA:
			o->gamma = sf_opt_f64("--gamma", optarg, 0, 1);
			if (o->gamma <= 0)
				sf_usage_error("--gamma: %s keeps no neuron: expected more than 0", optarg);
			o->gamma_set = 1;
			break;
		case OPT_DELTA: o->delta = sf_opt_f64("--delta", optarg, 0, 1); o->delta_set = 1; break;
		case OPT_TASK: o->task = optarg; break;
		case OPT_MAX_MEMORY:
			o->max_memory = sf_opt_u64("--max-memory", optarg, 1, UINT64_MAX);
			break;
		case 't': o->threads = sf_opt_threads(optarg); break;
		case SF_OPT_PROGRESS: o->progress = 1; break;
		case 'q': o->quiet = 1; break;
		case 'v': o->verbose = 1; break;
		}
	}
	if (modes > 1)
		sf_usage_error("--merge, --merge-scores, --info and --select-neurons cannot be combined");
	o->inputs = argv + optind;
	o->ninputs = optind < argc ? argc - optind : 0;
	if (o->mode != MODE_SELECT && (o->task || o->gamma_set || o->delta_set))
		sf_usage_error("--task, --gamma and --delta go with --select-neurons");
	if (o->mode == MODE_SELECT && o->ninputs > 1)
		sf_usage_error("--select-neurons takes one model-specific score file (and --task)");
	if (o->mode == MODE_SELECT && o->ninputs == 0 && !o->task)
		sf_usage_error("--select-neurons needs --task scores, model scores, or both");
	if (o->mode != MODE_TRACES && o->mode != MODE_SELECT && o->ninputs == 0)
		sf_usage_error("no input file given");
	if (o->mode == MODE_INFO && o->ninputs != 1)
		sf_usage_error("--info takes one .sfc file");
	if (o->scores && (o->mode == MODE_MERGE_SCORES || o->mode == MODE_INFO ||
			  o->mode == MODE_SELECT))
		sf_usage_error("--scores goes with traces or --merge");
	int stdin_uses = 0;
	for (int i = 0; i < o->ninputs; i++)
		stdin_uses += strcmp(o->inputs[i], "-") == 0;
	stdin_uses += o->task && strcmp(o->task, "-") == 0;
	if (stdin_uses > 1)
		sf_usage_error("standard input (\"-\") can be read only once");
	if (!(o->read = calloc((size_t)o->ninputs + 2, sizeof(*o->read))))
		sf_usage_error("%s", strerror(ENOMEM));
	for (int i = 0; i < o->ninputs; i++)
		o->read[i] = o->inputs[i];
	o->read[o->ninputs] = o->task;
}

static void report_progress(void *ctx, uint64_t tokens)
{
	sf_progress_update(ctx, tokens, -1.0);
}

/* States the memory the statistics need (need bytes) and refuses beyond
 * the limit. */
static int check_memory(const struct sf_coact *c, const struct options *o, uint64_t need)
{
	int ngroups = 0, nlayers = 0, last = -1;

	for (int s = 0; s < c->nslots; s++) {
		if (c->slots[s].layer != last)
			nlayers++;
		last = c->slots[s].layer;
		ngroups++;
	}
	if (o->verbose)
		fprintf(stderr, "%s: %d layer(s), %d layer-group(s): statistics need %llu bytes "
			"(%.1f MiB)\n", sf_progname, nlayers, ngroups, (unsigned long long)need,
			(double)need / (1 << 20));
	if (need > o->max_memory) {
		sf_error("statistics need %llu bytes (%.1f MiB), more than --max-memory %llu; "
			 "restrict with --layers", (unsigned long long)need,
			 (double)need / (1 << 20), (unsigned long long)o->max_memory);
		return -ENOMEM;
	}
	return 0;
}

static int write_json(json_t *j, struct sf_out *out)
{
	if (json_dumpf(j, out->f, JSON_COMPACT | JSON_REAL_PRECISION(17)) ||
	    fputc('\n', out->f) == EOF) {
		sf_error("%s: write error: %s", out->path, strerror(errno));
		return -EIO;
	}
	return 0;
}

/* The .sfc (and --scores) outputs, opened before c is written. */
static int open_outputs(const struct options *o, struct sf_out *out, struct sf_out *sout)
{
	int ret = sf_out_open(out, o->output, 1, o->read);
	if (!ret && o->scores)
		ret = sf_out_open(sout, o->scores, 0, o->read);
	return ret;
}

static json_t *coact_meta(const struct options *o)
{
	return json_pack("{s:s, s:{s:[i, i]}}", "producer", "sf-coact " SF_VERSION, "options",
			 "layers", o->layer_lo, o->layer_hi);
}

/* After the .sfc is written: the scores of c, then both committed, each
 * only when both are complete. */
static int commit_outputs(const struct sf_coact *c, const struct options *o, struct sf_out *out,
			  struct sf_out *sout)
{
	struct sf_err e = { 0 };
	json_t *scores = NULL;
	int ret = 0;

	if (fflush(out->f)) {
		sf_error("%s: write error: %s", out->path, strerror(errno));
		return -EIO;
	}
	if (o->scores) {
		if (!(scores = sf_scores_from_coact(c, &e))) {
			sf_error("%s", e.msg);
			return e.code;
		}
		ret = write_json(scores, sout);
		json_decref(scores);
	}
	if (!ret && !(ret = sf_out_commit(out)) && o->scores)
		ret = sf_out_commit(sout);
	return ret;
}

/* Writes the .sfc and the scores of c. */
static int write_outputs(const struct sf_coact *c, const struct options *o)
{
	struct sf_out out = { 0 }, sout = { 0 };
	struct sf_err e = { 0 };
	json_t *meta = coact_meta(o);
	int ret = open_outputs(o, &out, &sout);

	if (!ret && (ret = sf_coact_write(c, out.f, out.path, meta, &e)))
		sf_error("%s", e.msg);
	if (!ret)
		ret = commit_outputs(c, o, &out, &sout);
	sf_out_abort(&out);
	sf_out_abort(&sout);
	json_decref(meta);
	return ret;
}

static int from_traces(const struct options *o, struct sf_pool *pool)
{
	char *stdin_name[] = { "-" };
	char **inputs = o->ninputs ? o->inputs : stdin_name;
	int n = o->ninputs ? o->ninputs : 1, ret = 0;
	struct sf_trace_reader **r = calloc((unsigned)n, sizeof(*r));
	struct sf_coact c = { 0 };
	struct sf_progress progress;
	struct sf_err e = { 0 };

	if (!r) {
		sf_error("%s", strerror(ENOMEM));
		return -ENOMEM;
	}
	if (!o->ninputs && !o->quiet && isatty(STDIN_FILENO))
		fprintf(stderr, "%s: no trace given: reading one from standard input (sf-profile "
			"... | sf-coact)\n", sf_progname);
	for (int i = 0; i < n && !ret; i++)
		if ((ret = sf_trace_open(&r[i], inputs[i], &e)))
			sf_error("%s", e.msg);
	if (!ret && (ret = sf_coact_plan_trace(&c, sf_trace_reader_info(r[0]),
					       sf_trace_reader_name(r[0]), o->layer_lo,
					       o->layer_hi, &e)))
		sf_error("%s", e.msg);
	if (!ret && !(ret = check_memory(&c, o, sf_coact_bytes(&c, 1))) &&
	    (ret = sf_coact_alloc(&c, 1, &e)))
		sf_error("%s", e.msg);
	if (!ret) {
		c.pool = pool;
		sf_progress_init(&progress, o->progress, o->quiet, "tokens");
		c.progress = report_progress;
		c.progress_ctx = &progress;
		for (int i = 0; i < n && !ret; i++)
			if ((ret = sf_coact_add_trace(&c, r[i], &e)))
				sf_error("%s", e.msg);
		sf_progress_end(&progress, c.slots[0].tokens);
	}
	if (!ret)
		ret = write_outputs(&c, o);
	if (!ret && !o->quiet)
		fprintf(stderr, "%s: %llu tokens from %d trace(s), pair kernel %s\n", sf_progname,
			(unsigned long long)c.slots[0].tokens, n, sf_coact_kernel());
	sf_coact_free(&c);
	for (int i = 0; i < n; i++)
		sf_trace_close(r[i]);
	free(r);
	return ret;
}

/* --merge and --info: .sfc inputs added into one set of statistics, slot
 * by slot, so that one slot's pairs are in memory at a time. */
static int from_files(const struct options *o)
{
	struct sf_coact_file **f = calloc((unsigned)o->ninputs, sizeof(*f));
	struct sf_coact c = { 0 };
	struct sf_out out = { 0 }, sout = { 0 };
	struct sf_err e = { 0 };
	json_t *info = NULL, *meta = NULL;
	int ret = 0;

	if (!f) {
		sf_error("%s", strerror(ENOMEM));
		return -ENOMEM;
	}
	for (int i = 0; i < o->ninputs && !ret; i++)
		if ((ret = sf_coact_file_open(&f[i], o->inputs[i], &e)))
			sf_error("%s", e.msg);
	if (!ret && (ret = sf_coact_plan_files(&c, f, o->ninputs, o->layer_lo, o->layer_hi, &e)))
		sf_error("%s", e.msg);
	if (!ret)
		ret = check_memory(&c, o, sf_coact_stream_bytes(&c));
	if (!ret && o->mode == MODE_INFO) {
		if (!(info = json_array()))
			ret = -ENOMEM;
	} else if (!ret && !(ret = open_outputs(o, &out, &sout))) {
		if (!(meta = coact_meta(o)))
			ret = -ENOMEM;
		else if ((ret = sf_coact_write_header(&c, out.f, out.path, meta, &e)))
			sf_error("%s", e.msg);
	}
	for (int s = 0; s < c.nslots && !ret; s++) {
		if ((ret = sf_coact_read_slot(&c, s, f, o->ninputs, &e)) ||
		    (!info && (ret = sf_coact_write_slot(&c.slots[s], out.f, out.path, &e))))
			sf_error("%s", e.msg);
		else if (info && json_array_append_new(info, sf_coact_slot_info_json(&c.slots[s])))
			ret = -ENOMEM;
		sf_coact_drop_pairs(&c.slots[s]);
	}
	if (ret == -ENOMEM && !e.code)
		sf_error("%s", strerror(ENOMEM));
	if (!ret && info) {
		json_t *j = sf_coact_info_json(&c, info);
		struct sf_out so = { .f = stdout, .path = "(stdout)" };
		info = NULL;
		ret = j ? write_json(j, &so) : -ENOMEM;
		json_decref(j);
	} else if (!ret) {
		ret = commit_outputs(&c, o, &out, &sout);
	}
	sf_out_abort(&out);
	sf_out_abort(&sout);
	json_decref(info);
	json_decref(meta);
	sf_coact_free(&c);
	for (int i = 0; i < o->ninputs; i++)
		sf_coact_file_close(f[i]);
	free(f);
	return ret;
}

static int merge_scores(const struct options *o)
{
	json_t **in = calloc((unsigned)o->ninputs, sizeof(*in)), *merged = NULL;
	const char **names = calloc((unsigned)o->ninputs, sizeof(*names));
	struct sf_out out = { 0 };
	struct sf_err e = { 0 };
	int ret = 0;

	if (!in || !names) {
		sf_error("%s", strerror(ENOMEM));
		ret = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < o->ninputs && !ret; i++) {
		names[i] = o->inputs[i];
		if ((ret = sf_json_load(&in[i], o->inputs[i], SF_SCORES_MAX_BYTES, &e)))
			sf_error("%s", e.msg);
	}
	if (!ret && (ret = sf_scores_merge(in, names, o->ninputs, &merged, &e)))
		sf_error("%s", e.msg);
	if (!ret && !(ret = sf_out_open(&out, o->output, 0, o->read)) && !(ret = write_json(merged, &out)))
		ret = sf_out_commit(&out);
out:
	sf_out_abort(&out);
	for (int i = 0; in && i < o->ninputs; i++)
		json_decref(in[i]);
	free(in);
	free(names);
	json_decref(merged);
	return ret;
}

/* --select-neurons: neurons.json from task and/or model scores. */
static int select_neurons(const struct options *o)
{
	const char *model_path = o->ninputs ? o->inputs[0] : NULL;
	struct sf_scores task = { 0 }, model = { 0 };
	struct sf_out out = { 0 };
	struct sf_err e = { 0 };
	json_t *doc = NULL;
	json_t *meta = json_pack("{s:s, s:{s:f, s:f, s:s?, s:s?}}", "producer",
				 "sf-coact " SF_VERSION, "options", "gamma", o->gamma, "delta",
				 o->delta, "task", o->task, "model", model_path);
	int ret = 0;

	if (!meta) {
		sf_error("%s", strerror(ENOMEM));
		return -ENOMEM;
	}
	if (o->task && (ret = sf_scores_read(&task, o->task, NULL, NULL, NULL, &e)))
		goto fail;
	if (model_path && (ret = sf_scores_read(&model, model_path, NULL, NULL, NULL, &e)))
		goto fail;
	if ((ret = sf_select_neurons_json(&doc, o->task ? &task : NULL, o->task,
					  model_path ? &model : NULL, model_path, o->gamma,
					  o->delta, meta, &e)))
		goto fail;
	if (!(ret = sf_out_open(&out, o->output, 0, o->read)) && !(ret = write_json(doc, &out)))
		ret = sf_out_commit(&out);
	goto out;
fail:
	sf_error("%s", e.msg);
out:
	sf_out_abort(&out);
	sf_scores_free(&task);
	sf_scores_free(&model);
	json_decref(doc);
	json_decref(meta);
	return ret;
}

int main(int argc, char **argv)
{
	struct options o;
	struct sf_pool *pool = NULL;
	int ret;

	sf_cli_start("sf-coact");
	parse_options(argc, argv, &o);

	switch (o.mode) {
	case MODE_TRACES:
		if ((ret = sf_pool_create(&pool, o.threads))) {
			sf_error("thread pool of %d: %s", o.threads, sf_strerror(ret));
			break;
		}
		ret = from_traces(&o, pool);
		break;
	case MODE_MERGE:
	case MODE_INFO:
		ret = from_files(&o);
		break;
	case MODE_SELECT:
		ret = select_neurons(&o);
		break;
	default:
		ret = merge_scores(&o);
		break;
	}
	sf_pool_destroy(pool);
	free(o.read);
	if (sf_close_stdout())
		ret = -EIO;
	return ret ? SF_EXIT_FAIL : SF_EXIT_OK;
}
