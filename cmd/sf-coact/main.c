/* sf-coact: turns activation traces into co-activation statistics (.sfc),
 * merges .sfc shards, writes and merges SelectInfer score files, and
 * summarises a .sfc. See man/sf-coact.1. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "coact.h"
#include "pool.h"
#include "trace.h"

#define DEFAULT_MAX_MEMORY ((uint64_t)16 << 30)
#define MAX_THREADS 256

enum mode { MODE_TRACES, MODE_MERGE, MODE_MERGE_SCORES, MODE_INFO };

struct options {
	enum mode mode;
	const char *output;
	const char *scores;
	char **inputs;
	int ninputs;
	int layer_lo, layer_hi;
	uint64_t max_memory;
	int threads;
	int progress, quiet;
};

static void usage(void)
{
	printf("Usage: sf-coact [options] [TRACE...]\n"
	       "       sf-coact --merge [options] FILE.sfc...\n"
	       "       sf-coact --merge-scores [-o FILE] SCORES.json...\n"
	       "       sf-coact --info [--layers A-B] FILE.sfc\n"
	       "Accumulate co-activation statistics from activation traces (standard input\n"
	       "when no TRACE is given): per layer and group the token count, per-entry\n"
	       "activation counts and |value| sums, and pair counts.\n"
	       "\n"
	       "  -o, --output FILE     .sfc (or merged scores) to write (default: standard\n"
	       "                        output)\n"
	       "      --layers A-B      only layers A to B (default: all the inputs hold)\n"
	       "      --merge           the inputs are .sfc files to add together\n"
	       "      --scores FILE     also write SelectInfer scores (JSON): per entry\n"
	       "                        sum|value| / tokens and the activation frequency\n"
	       "      --merge-scores    the inputs are score files: write their token-weighted\n"
	       "                        mean (model-specific scores)\n"
	       "      --info            print a JSON summary of a .sfc: per layer and group\n"
	       "                        tokens, mean density, share of entries active in more\n"
	       "                        than half the tokens, checksum\n"
	       "      --max-memory N    refuse to need more than N bytes (K/M/G suffixes,\n"
	       "                        default %lluG)\n"
	       "  -t, --threads N       worker threads for the pair counts (default: online\n"
	       "                        CPUs)\n"
	       "      --progress        report progress on stderr even when not a terminal\n"
	       "  -q, --quiet           do not state the memory needed or the totals\n"
	       "  -h, --help            show this help\n"
	       "  -V, --version         show the version\n"
	       "\n"
	       "Examples:\n"
	       "  sf-profile -m models/mix4-1m kjv.txt | sf-coact --scores kjv.json -o kjv.sfc\n"
	       "  sf-coact --merge a.sfc b.sfc -o ab.sfc\n"
	       "  sf-coact --merge-scores kjv.json man.json -o model.json\n",
	       (unsigned long long)(DEFAULT_MAX_MEMORY >> 30));
}

static void parse_options(int argc, char **argv, struct options *o)
{
	enum { OPT_LAYERS = 256, OPT_MERGE, OPT_SCORES, OPT_MERGE_SCORES, OPT_INFO, OPT_MAX_MEMORY,
	       OPT_PROGRESS };
	static const struct option longopts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "layers", required_argument, NULL, OPT_LAYERS },
		{ "merge", no_argument, NULL, OPT_MERGE },
		{ "scores", required_argument, NULL, OPT_SCORES },
		{ "merge-scores", no_argument, NULL, OPT_MERGE_SCORES },
		{ "info", no_argument, NULL, OPT_INFO },
		{ "max-memory", required_argument, NULL, OPT_MAX_MEMORY },
		{ "threads", required_argument, NULL, 't' },
		{ "progress", no_argument, NULL, OPT_PROGRESS },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int c, modes = 0;

	*o = (struct options){
		.mode = MODE_TRACES, .layer_lo = 0, .layer_hi = SF_TRACE_MAX_LAYERS - 1,
		.max_memory = DEFAULT_MAX_MEMORY,
		.threads = cpus < 1 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : (int)cpus,
	};
	while ((c = getopt_long(argc, argv, "o:t:qhV", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': o->output = optarg; break;
		case OPT_LAYERS:
			if (sf_parse_range(optarg, SF_TRACE_MAX_LAYERS - 1, &o->layer_lo, &o->layer_hi))
				sf_usage_error("--layers: '%s' is not A-B or A with A <= B", optarg);
			break;
		case OPT_MERGE: o->mode = MODE_MERGE; modes++; break;
		case OPT_SCORES: o->scores = optarg; break;
		case OPT_MERGE_SCORES: o->mode = MODE_MERGE_SCORES; modes++; break;
		case OPT_INFO: o->mode = MODE_INFO; modes++; break;
		case OPT_MAX_MEMORY:
			o->max_memory = sf_opt_u64("--max-memory", optarg, 1, UINT64_MAX);
			break;
		case 't': o->threads = (int)sf_opt_u64("--threads", optarg, 1, MAX_THREADS); break;
		case OPT_PROGRESS: o->progress = 1; break;
		case 'q': o->quiet = 1; break;
		case 'h': usage(); exit(sf_close_stdout() ? SF_EXIT_FAIL : SF_EXIT_OK);
		case 'V': sf_print_version(); exit(sf_close_stdout() ? SF_EXIT_FAIL : SF_EXIT_OK);
		default:
			fprintf(stderr, "Try '%s --help'.\n", sf_progname);
			exit(SF_EXIT_USAGE);
		}
	}
	if (modes > 1)
		sf_usage_error("--merge, --merge-scores and --info cannot be combined");
	o->inputs = argv + optind;
	o->ninputs = optind < argc ? argc - optind : 0;
	if (o->mode != MODE_TRACES && o->ninputs == 0)
		sf_usage_error("no input file given");
	if (o->mode == MODE_INFO && o->ninputs != 1)
		sf_usage_error("--info takes one .sfc file");
	if (o->scores && (o->mode == MODE_MERGE_SCORES || o->mode == MODE_INFO))
		sf_usage_error("--scores goes with traces or --merge");
	int stdin_uses = 0;
	for (int i = 0; i < o->ninputs; i++)
		stdin_uses += strcmp(o->inputs[i], "-") == 0;
	if (stdin_uses > 1)
		sf_usage_error("standard input (\"-\") can be read only once");
}

static void report_progress(void *ctx, uint64_t tokens)
{
	sf_progress_update(ctx, tokens, -1.0);
}

/* States the memory the statistics need and refuses beyond the limit. */
static int check_memory(const struct sf_coact *c, const struct options *o, int accumulate)
{
	uint64_t need = sf_coact_bytes(c, accumulate);
	int ngroups = 0, nlayers = 0, last = -1;

	for (int s = 0; s < c->nslots; s++) {
		if (c->slots[s].layer != last)
			nlayers++;
		last = c->slots[s].layer;
		ngroups++;
	}
	if (!o->quiet)
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

/* Writes the .sfc and the scores of c, each committed only when both are
 * complete. */
static int write_outputs(const struct sf_coact *c, const struct options *o)
{
	struct sf_out out = { 0 }, sout = { 0 };
	struct sf_err e = { 0 };
	json_t *meta = json_pack("{s:s, s:{s:[i, i]}}", "producer", "sf-coact " SF_VERSION,
				 "options", "layers", o->layer_lo, o->layer_hi);
	json_t *scores = NULL;
	int ret;

	if ((ret = sf_out_open(&out, o->output, 1)))
		goto out;
	if (o->scores && (ret = sf_out_open(&sout, o->scores, 0)))
		goto out;
	if ((ret = sf_coact_write(c, out.f, out.path, meta, &e))) {
		sf_error("%s", e.msg);
		goto out;
	}
	if (o->scores) {
		if (!(scores = sf_coact_scores(c, &e))) {
			ret = e.code;
			sf_error("%s", e.msg);
			goto out;
		}
		if ((ret = write_json(scores, &sout)))
			goto out;
	}
	if ((ret = sf_out_commit(&out)) || (o->scores && (ret = sf_out_commit(&sout))))
		goto out;
out:
	sf_out_abort(&out);
	sf_out_abort(&sout);
	json_decref(scores);
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
	for (int i = 0; i < n && !ret; i++)
		if ((ret = sf_trace_open(&r[i], inputs[i], &e)))
			sf_error("%s", e.msg);
	if (!ret && (ret = sf_coact_plan_trace(&c, sf_trace_reader_info(r[0]),
					       sf_trace_reader_name(r[0]), o->layer_lo,
					       o->layer_hi, &e)))
		sf_error("%s", e.msg);
	if (!ret && !(ret = check_memory(&c, o, 1)) && (ret = sf_coact_alloc(&c, 1, &e)))
		sf_error("%s", e.msg);
	if (!ret) {
		c.pool = pool;
		sf_progress_init(&progress, o->progress && !o->quiet, "tokens");
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

/* --merge and --info: .sfc inputs added into one set of statistics. */
static int from_files(const struct options *o)
{
	struct sf_coact_file **f = calloc((unsigned)o->ninputs, sizeof(*f));
	struct sf_coact c = { 0 };
	struct sf_err e = { 0 };
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
	if (!ret && !(ret = check_memory(&c, o, 0)) && (ret = sf_coact_alloc(&c, 0, &e)))
		sf_error("%s", e.msg);
	for (int i = 0; i < o->ninputs && !ret; i++)
		if ((ret = sf_coact_add_file(&c, f[i], &e)))
			sf_error("%s", e.msg);
	if (!ret && o->mode == MODE_INFO) {
		json_t *j = sf_coact_info_json(&c);
		struct sf_out out = { .f = stdout, .path = "(stdout)" };
		ret = j ? write_json(j, &out) : -ENOMEM;
		json_decref(j);
	} else if (!ret) {
		ret = write_outputs(&c, o);
	}
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
		json_error_t je;
		int is_stdin = strcmp(o->inputs[i], "-") == 0;
		names[i] = is_stdin ? "(stdin)" : o->inputs[i];
		in[i] = is_stdin ? json_loadf(stdin, 0, &je) : json_load_file(o->inputs[i], 0, &je);
		if (!json_is_object(in[i])) {
			sf_error("%s: not a JSON object: %s", names[i], in[i] ? "" : je.text);
			ret = SF_EFORMAT;
		}
	}
	if (!ret && (ret = sf_scores_merge(in, names, o->ninputs, &merged, &e)))
		sf_error("%s", e.msg);
	if (!ret && !(ret = sf_out_open(&out, o->output, 0)) && !(ret = write_json(merged, &out)))
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

int main(int argc, char **argv)
{
	struct options o;
	struct sf_pool *pool = NULL;
	int ret;

	sf_progname = "sf-coact";
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
	default:
		ret = merge_scores(&o);
		break;
	}
	sf_pool_destroy(pool);
	if (sf_close_stdout())
		ret = -EIO;
	return ret ? SF_EXIT_FAIL : SF_EXIT_OK;
}
