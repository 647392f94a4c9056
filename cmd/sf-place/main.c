/* sf-place: per layer and group (and a mixture's experts), the order of
 * the entries' bundles on flash (identity, frequency, or Neuralink's
 * co-activation path) from .sfc statistics, written as placement.json;
 * with --eval, the runs, read lengths and bytes placements give on a
 * trace. See man/sf-place.1. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "formats/coact.h"
#include "formats/image.h"
#include "formats/model.h"
#include "offline/place.h"
#include "formats/placement.h"
#include "base/pool.h"
#include "online/runs.h"
#include "formats/trace.h"

#define DEFAULT_METHOD "coact"
#define DEFAULT_MAX_MEMORY (8ull << 30)
#define MAX_PLACEMENTS 64

struct options {
	enum sf_place_method method;
	int exact;			/* 1 --exact, 0 --topk, -1 by size */
	uint32_t topk;
	int layer_lo, layer_hi;
	int threads;
	uint64_t max_memory;
	const char *output;
	const char *eval_trace;		/* --eval */
	const char *model_dir;
	int json, progress, quiet, verbose;
	char **inputs;			/* the .sfc, or the placements with --eval */
	int ninputs;
};

enum { OPT_EXACT = SF_OPT_FIRST, OPT_TOPK, OPT_MAX_MEMORY, OPT_EVAL, OPT_MODEL, OPT_JSON };

static const struct sf_opt options[] = {
	{ "method", 'm', "M", "identity (model order), frequency (descending\n"
	  "activation count) or coact (co-activation path)\n(default %s)", DEFAULT_METHOD, 0 },
	{ "exact", OPT_EXACT, NULL, "coact: the exact greedy on every pair (memory: 12\n"
	  "bytes per pair)", NULL, 0 },
	{ "topk", OPT_TOPK, "K", "coact: the scalable greedy on each entry's K most\n"
	  "co-activated partners (default: exact up to " SF_STR(SF_PLACE_EXACT_AUTO_MAX) "\n"
	  "entries, else --topk %s)", SF_STR(SF_PLACE_DEFAULT_TOPK), 0 },
	{ "layers", 'l', "N-M", "only layers N to M (or one layer N; LAYERS in\n"
	  "sparseflash(7), one range)", NULL, 0 },
	{ "max-memory", OPT_MAX_MEMORY, "SIZE", "refuse a search that needs more (default %s)",
	  "8G", 0 },
	SF_OPT_OUTPUT("placement.json (default: standard output)"),
	{ "eval", OPT_EVAL, "TRACE", "evaluate the placements given on TRACE (\"-\": stdin)", NULL, 0 },
	{ "model", OPT_MODEL, "MODEL", "the model: checks fingerprints, and gives --eval\n"
	  "the bytes of each entry's bundle", NULL, 0 },
	{ "json", OPT_JSON, NULL, "--eval: JSON on standard output", NULL, 0 },
	SF_OPT_THREADS,
	SF_OPT_PROGRESS_ENTRY,
	SF_OPT_QUIET,
	SF_OPT_VERBOSE,
	SF_OPT_END,
};
_Static_assert(DEFAULT_MAX_MEMORY == 8ull << 30, "--help says 8G");

static const struct sf_cmd cmd = {
	"Usage: sf-place [--method M] [--exact | --topk K] COACT.sfc [-o placement.json]\n"
	"       sf-place --eval TRACE [--model MODEL] [--json] PLACEMENT.json...\n"
	"Order each layer and group's entries on flash so that entries active\n"
	"together are read together, or evaluate placements on a trace.\n",
	options,
	"  sf-place --method coact coact.sfc -o coact.json\n"
	"  sf-place --method identity coact.sfc -o identity.json\n"
	"  sf-place --eval test.sft --model models/mix4-1m identity.json coact.json\n",
};

static void parse_options(int argc, char **argv, struct options *o)
{
	int c, method_given = 0, search_given = 0;

	*o = (struct options){
		.exact = -1, .topk = SF_PLACE_DEFAULT_TOPK, .layer_hi = INT_MAX,
		.max_memory = DEFAULT_MAX_MEMORY, .output = "-",
		.threads = sf_cli_threads_default(),
	};
	sf_place_method_parse(DEFAULT_METHOD, &o->method);
	while ((c = sf_cli_getopt(argc, argv, &cmd)) != -1) {
		switch (c) {
		case 'm':
			if (sf_place_method_parse(optarg, &o->method))
				sf_usage_error("--method: '%s' is not identity, frequency or coact", optarg);
			method_given = 1;
			break;
		case OPT_EXACT:
			o->exact = 1;
			search_given++;
			break;
		case OPT_TOPK:
			o->topk = (uint32_t)sf_opt_u64("--topk", optarg, 1, 4096);
			o->exact = 0;
			search_given++;
			break;
		case 'l':
			sf_opt_layer_range("--layers", optarg, SF_TRACE_MAX_LAYERS, &o->layer_lo,
					   &o->layer_hi);
			break;
		case OPT_MAX_MEMORY:
			o->max_memory = sf_opt_u64("--max-memory", optarg, 1, UINT64_MAX);
			break;
		case 'o': o->output = sf_opt_path("--output", optarg); break;
		case OPT_EVAL: o->eval_trace = optarg; break;
		case OPT_MODEL: o->model_dir = sf_opt_path("--model", optarg); break;
		case OPT_JSON: o->json = 1; break;
		case 't': o->threads = sf_opt_threads(optarg); break;
		case SF_OPT_PROGRESS: o->progress = 1; break;
		case 'q': o->quiet = 1; break;
		case 'v': o->verbose = 1; break;
		}
	}
	o->inputs = argv + optind;
	o->ninputs = argc - optind;
	if (search_given > 1)
		sf_usage_error("--exact and --topk cannot be combined");
	if (search_given && o->method != SF_PLACE_COACT)
		sf_usage_error("--exact and --topk apply to --method coact only");
	if (o->eval_trace) {
		if (method_given || search_given || strcmp(o->output, "-") != 0)
			sf_usage_error("--eval takes no --method, --exact, --topk or --output");
		if (o->ninputs < 1)
			sf_usage_error("--eval needs at least one PLACEMENT.json");
		if (o->ninputs > MAX_PLACEMENTS)
			sf_usage_error("--eval: at most %d placements", MAX_PLACEMENTS);
	} else {
		if (o->json)
			sf_usage_error("--json applies to --eval only");
		if (o->ninputs == 0)
			sf_usage_error("a COACT.sfc is required");
		if (o->ninputs > 1)
			sf_usage_error("one COACT.sfc expected, %d given", o->ninputs);
		sf_out_check_path(o->output, (const char *const[]){ o->inputs[0], NULL });
	}
}

/* The model of --model, its fingerprint compared with a stream's. */
static int open_model(struct sf_model *m, const struct options *o,
		      const struct sf_fingerprint *fingerprint, const char *name, const char *what)
{
	struct sf_err e = { 0 };

	if (sf_model_open_elements(m, o->model_dir, &e) ||
	    sf_fingerprint_check(fingerprint, name, what, &m->fingerprint, m->source, &e)) {
		sf_error("%s", e.msg);
		return -1;
	}
	return 0;
}

// --- placing

/* One group: the method's permutation, its options for the file. */
static int place_group(const struct options *o, const struct sf_coact_slot *sl,
		       struct sf_pool *pool, uint32_t *perm, json_t **opts, const char *name)
{
	struct sf_place_stats s = { sl->entries, sl->tokens, sl->counts, sl->pairs };
	struct sf_err e = { 0 };
	int exact = o->exact >= 0 ? o->exact : sl->entries <= SF_PLACE_EXACT_AUTO_MAX;
	uint64_t need;
	int ret = 0;

	switch (o->method) {
	case SF_PLACE_IDENTITY:
		sf_place_identity(s.n, perm);
		*opts = json_object();
		return 0;
	case SF_PLACE_FREQUENCY:
		sf_place_frequency(&s, perm);
		*opts = json_object();
		return 0;
	case SF_PLACE_COACT:
		break;
	}
	need = exact ? sf_place_exact_bytes(s.n)
		     : sf_place_topk_bytes(s.n, o->topk, SF_PLACE_DEFAULT_FINISH, sf_pool_size(pool));
	if (need > o->max_memory) {
		sf_error("%s: layer %d %s: the %s greedy needs %llu bytes for %u entries, over "
			 "--max-memory (%llu bytes)%s", name, sl->layer, sf_group_name(sl->group),
			 exact ? "exact" : "scalable", (unsigned long long)need, s.n,
			 (unsigned long long)o->max_memory, exact ? ": use --topk" : "");
		return -1;
	}
	if (exact) {
		ret = sf_place_coact_exact(&s, perm, NULL, &e);
		*opts = json_pack("{s:s}", "search", "exact");
	} else {
		ret = sf_place_coact_topk(&s, o->topk, SF_PLACE_DEFAULT_FINISH, pool, perm, &e);
		*opts = json_pack("{s:s, s:I, s:I}", "search", "topk", "topk", (json_int_t)o->topk,
				  "finish", (json_int_t)SF_PLACE_DEFAULT_FINISH);
	}
	if (ret)
		sf_error("%s", e.msg);
	return ret ? -1 : 0;
}

static int run_place(const struct options *o)
{
	const char *path = o->inputs[0];
	struct sf_coact c = { 0 };
	struct sf_coact_file *f = NULL;
	struct sf_placement pl = { 0 };
	struct sf_model m = { 0 };
	struct sf_pool *pool = NULL;
	struct sf_err e = { 0 };
	uint32_t *perm = NULL;
	json_t *meta = NULL;
	struct sf_progress pr;
	int status = SF_EXIT_FAIL;

	sf_progress_init(&pr, o->progress, o->quiet, "groups");
	/* slot by slot: one group's pairs in memory at a time */
	if (sf_coact_file_open(&f, path, &e) ||
	    sf_coact_plan_files(&c, &f, 1, o->layer_lo, o->layer_hi, &e)) {
		sf_error("%s", e.msg);
		goto out;
	}
	if (o->model_dir && open_model(&m, o, &c.fingerprint, path, "statistics"))
		goto out;
	if (sf_pool_create(&pool, o->threads)) {
		sf_error("cannot start %d threads", o->threads);
		goto out;
	}
	if (o->verbose) {
		uint32_t most = 0;
		for (int i = 0; i < c.nslots; i++)
			most = c.slots[i].entries > most ? c.slots[i].entries : most;
		int exact = o->exact >= 0 ? o->exact : most <= SF_PLACE_EXACT_AUTO_MAX;
		uint64_t search = o->method != SF_PLACE_COACT ? 0 : exact ? sf_place_exact_bytes(most)
				  : sf_place_topk_bytes(most, o->topk, SF_PLACE_DEFAULT_FINISH,
							sf_pool_size(pool));
		sf_cli_memory_need(sf_coact_stream_bytes(&c) + search,
				   "the statistics a group at a time, the largest group's search");
	}
	if (sf_placement_init(&pl, &c.fingerprint, c.nslots, &e)) {
		sf_error("%s", e.msg);
		goto out;
	}
	for (int i = 0; i < c.nslots; i++) {
		const struct sf_coact_slot *sl = &c.slots[i];
		json_t *opts = NULL;
		double t0 = sf_now();
		int ret;

		free(perm);
		if (!(perm = malloc(sizeof *perm * sl->entries))) {
			sf_error("%s: out of memory", path);
			goto out;
		}
		if (sf_coact_read_slot(&c, i, &f, 1, &e)) {
			sf_error("%s", e.msg);
			goto out;
		}
		struct sf_place_stats s = { sl->entries, sl->tokens, sl->counts, sl->pairs };
		if (place_group(o, sl, pool, perm, &opts, path))
			goto out;
		ret = sf_placement_set(&pl, i, sl->layer, sl->group, sl->entries, o->method, opts,
				       sl->tokens, sf_place_expected_runs(&s, perm),
				       sf_place_path_cost(&s, perm), perm, &e);
		json_decref(opts);
		sf_coact_drop_pairs(&c.slots[i]);
		if (ret) {
			sf_error("%s", e.msg);
			goto out;
		}
		if (o->verbose)
			fprintf(stderr, "%s: layer %d %s: %u entries, %s: %.3f runs/token predicted "
				"(%.2f s)\n", sf_progname, sl->layer, sf_group_name(sl->group),
				sl->entries, sf_place_method_name(o->method),
				pl.groups[i].predicted_runs, sf_now() - t0);
		sf_progress_update(&pr, (uint64_t)i + 1, (double)(i + 1) / c.nslots);
	}
	sf_progress_end(&pr, (uint64_t)c.nslots);
	meta = json_pack("{s:{s:s, s:s}, s:s, s:O*}", "producer", "program", "sf-place", "version",
			 SF_VERSION, "statistics", path, "sources", c.sources);
	if (sf_placement_write(&pl, o->output, meta, (const char *const[]){ path, NULL }, &e)) {
		sf_error("%s", e.msg);
		goto out;
	}
	status = SF_EXIT_OK;
out:
	json_decref(meta);
	free(perm);
	sf_placement_free(&pl);
	sf_pool_destroy(pool);
	sf_model_close(&m);
	sf_coact_free(&c);
	sf_coact_file_close(f);
	return status;
}

// --- evaluating

struct eval {
	const struct sf_trace_info *info;
	int npl;
	struct sf_placement pl[MAX_PLACEMENTS];
	const struct sf_placement_group **grp;	/* (nslots, npl) */
	uint32_t **inv;				/* (nslots, npl) -> (n) positions */
	struct sf_runs_tally *tally;		/* (nslots, npl) */
	uint64_t *entry_bytes;			/* (nslots): 0 without --model */
};

static void eval_free(struct eval *E)
{
	int cells = E->info ? E->info->nslots * E->npl : 0;
	for (int i = 0; E->inv && i < cells; i++)
		free(E->inv[i]);
	for (int p = 0; p < E->npl; p++)
		sf_placement_free(&E->pl[p]);
	free(E->grp);
	free(E->inv);
	free(E->tally);
	free(E->entry_bytes);
}

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0.0;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

static void print_table(const struct options *o, const struct eval *E)
{
	const struct sf_trace_info *info = E->info;

	printf("%-5s %-8s %6s %-16s %10s %8s %8s", "layer", "group", "n", "placement", "runs/tok",
	       "read_len", "pred");
	for (int g = 0; g < SF_RUNS_NGAPS; g++)
		printf("  KiB/tok@%-2u", sf_runs_gaps[g]);
	printf("\n");
	for (int s = 0; s < info->nslots; s++)
		for (int p = 0; p < E->npl; p++) {
			const struct sf_runs_tally *t = &E->tally[s * E->npl + p];
			printf("%-5d %-8s %6u %-16.16s %10.2f %8.3f %8.2f", info->slots[s].layer,
			       sf_group_name(info->slots[s].group), info->slots[s].entries,
			       base_name(o->inputs[p]), ratio(t->runs[0], t->tokens),
			       ratio(t->active, t->runs[0]), E->grp[s * E->npl + p]->predicted_runs);
			for (int g = 0; g < SF_RUNS_NGAPS; g++)
				if (E->entry_bytes[s])
					printf("  %11.1f", ratio(t->bytes[g], t->tokens) / 1024.0);
				else
					printf("  %11s", "-");
			printf("\n");
		}
	for (int p = 0; p < E->npl; p++) {
		uint64_t runs = 0, active = 0, bytes[SF_RUNS_NGAPS] = { 0 }, tokens = 0;
		for (int s = 0; s < info->nslots; s++) {
			const struct sf_runs_tally *t = &E->tally[s * E->npl + p];
			runs += t->runs[0];
			active += t->active;
			tokens = t->tokens;
			for (int g = 0; g < SF_RUNS_NGAPS; g++)
				bytes[g] += t->bytes[g];
		}
		printf("%-5s %-8s %6s %-16.16s %10.2f %8.3f %8s", "all", "", "", base_name(o->inputs[p]),
		       ratio(runs, tokens), ratio(active, runs), "");
		for (int g = 0; g < SF_RUNS_NGAPS; g++)
			if (E->entry_bytes[0])
				printf("  %11.1f", ratio(bytes[g], tokens) / 1024.0);
			else
				printf("  %11s", "-");
		printf("\n");
	}
}

static json_t *tally_json(const struct sf_runs_tally *t, uint64_t entry_bytes)
{
	json_t *hist = json_object(), *gaps = json_array();

	for (int h = 0; h < SF_RUNS_NHIST; h++)
		json_object_set_new(hist, sf_runs_hist_names[h], json_integer((json_int_t)t->hist[h]));
	for (int g = 0; g < SF_RUNS_NGAPS; g++)
		json_array_append_new(gaps, json_pack("{s:i, s:f, s:f, s:o}", "gap", (int)sf_runs_gaps[g],
			"runs_per_token", ratio(t->runs[g], t->tokens), "entries_read_per_token",
			ratio(t->read[g], t->tokens), "bytes_per_token",
			entry_bytes ? json_real(ratio(t->bytes[g], t->tokens)) : json_null()));
	return json_pack("{s:I, s:f, s:f, s:f, s:o, s:o}", "tokens", (json_int_t)t->tokens,
			 "active_per_token", ratio(t->active, t->tokens), "runs_per_token",
			 ratio(t->runs[0], t->tokens), "mean_read_length", ratio(t->active, t->runs[0]),
			 "read_length_histogram", hist, "collapse", gaps);
}

static int print_json(const struct options *o, const struct eval *E)
{
	const struct sf_trace_info *info = E->info;
	json_t *pls = json_array(), *root;
	int ret;

	for (int p = 0; p < E->npl; p++) {
		json_t *groups = json_array();
		for (int s = 0; s < info->nslots; s++) {
			const struct sf_placement_group *G = E->grp[s * E->npl + p];
			json_t *g = tally_json(&E->tally[s * E->npl + p], E->entry_bytes[s]);
			json_object_update_new(g, json_pack("{s:i, s:s, s:I, s:s, s:f, s:o}", "layer",
				info->slots[s].layer, "group", sf_group_name(info->slots[s].group),
				"entries", (json_int_t)info->slots[s].entries, "method",
				sf_place_method_name(G->method), "predicted_runs_per_token",
				G->predicted_runs, "entry_bytes",
				E->entry_bytes[s] ? json_integer((json_int_t)E->entry_bytes[s]) : json_null()));
			json_array_append_new(groups, g);
		}
		json_array_append_new(pls, json_pack("{s:s, s:o}", "placement", o->inputs[p],
						     "groups", groups));
	}
	root = json_pack("{s:s, s:s, s:I, s:o}", "trace", o->eval_trace, "fingerprint",
			 info->fingerprint.weights, "tokens",
			 (json_int_t)(info->nslots ? E->tally[0].tokens : 0), "placements", pls);
	ret = root ? json_dumpf(root, stdout, JSON_INDENT(2)) : -1;
	if (!ret)
		putchar('\n');
	json_decref(root);
	return ret;
}

/* Bytes an entry of a trace's slot reads: a group's bundle, or a
 * mixture's expert, its whole record as sf-pack stores it in the model's
 * dtype. */
static uint64_t entry_bytes(const struct sf_model *m, const struct sf_trace_slot *sl)
{
	const struct sf_layer_weights *L = &m->layers[sl->layer];
	const struct sf_weight *w[] = { &L->wq, &L->wo, &L->w_gate, &L->w_down };

	if (sl->group == SF_GROUP_EXPERTS)
		return sf_image_expert_record_bytes(&m->cfg, L->experts[0].w_gate.dtype);
	return sf_runs_bundle_bytes(&m->cfg, sl->group, w[sl->group]->dtype);
}

static int run_eval(const struct options *o)
{
	struct sf_trace_reader *r = NULL;
	struct sf_model m = { 0 };
	struct sf_err e = { 0 };
	struct eval E = { 0 };
	uint32_t *active = NULL, *pos = NULL, ntok, maxn = 0;
	uint64_t *scratch = NULL;
	struct sf_run *runs = NULL;
	const char *tname;
	int status = SF_EXIT_FAIL, ret, nslots;

	if (sf_trace_open(&r, o->eval_trace, &e)) {
		sf_error("%s", e.msg);
		goto out;
	}
	E.info = sf_trace_reader_info(r);
	tname = sf_trace_reader_name(r);
	nslots = E.info->nslots;
	if (o->model_dir && open_model(&m, o, &E.info->fingerprint, tname, "trace"))
		goto out;
	E.grp = calloc((size_t)nslots * o->ninputs, sizeof *E.grp);
	E.inv = calloc((size_t)nslots * o->ninputs, sizeof *E.inv);
	E.tally = calloc((size_t)nslots * o->ninputs, sizeof *E.tally);
	E.entry_bytes = calloc((size_t)nslots + 1, sizeof *E.entry_bytes);
	if (!E.grp || !E.inv || !E.tally || !E.entry_bytes) {
		sf_error("%s: out of memory", tname);
		goto out;
	}
	E.npl = o->ninputs;
	for (int p = 0; p < E.npl; p++) {
		const char *path = o->inputs[p];
		if (sf_placement_read(&E.pl[p], path, &e)) {
			sf_error("%s", e.msg);
			goto out;
		}
		if (sf_fingerprint_check(&E.pl[p].fingerprint, path, "placement",
					 &E.info->fingerprint, tname, &e)) {
			sf_error("%s", e.msg);
			goto out;
		}
		for (int s = 0; s < nslots; s++) {
			const struct sf_trace_slot *sl = &E.info->slots[s];
			const struct sf_placement_group *G =
				sf_placement_lookup(&E.pl[p], path, sl->layer, sl->group, sl->entries,
						    tname, &e);
			if (!G) {
				sf_error("%s", e.msg);
				goto out;
			}
			E.grp[s * E.npl + p] = G;
			if (!(E.inv[s * E.npl + p] = malloc(sizeof(uint32_t) * G->n))) {
				sf_error("%s: out of memory", path);
				goto out;
			}
			sf_runs_inverse(G->perm, G->n, E.inv[s * E.npl + p]);
		}
	}
	for (int s = 0; s < nslots; s++) {
		const struct sf_trace_slot *sl = &E.info->slots[s];
		maxn = sl->entries > maxn ? sl->entries : maxn;
		if (o->model_dir)
			E.entry_bytes[s] = entry_bytes(&m, sl);
	}
	active = malloc(sizeof *active * maxn);
	pos = malloc(sizeof *pos * maxn);
	runs = malloc(sizeof *runs * maxn);
	scratch = calloc(((size_t)maxn + 63) / 64, sizeof *scratch);
	if (!active || !pos || !runs || !scratch) {
		sf_error("%s: out of memory", tname);
		goto out;
	}
	while ((ret = sf_trace_next(r, &ntok, &e)) == 1) {
		for (int s = 0; s < nslots; s++) {
			const struct sf_trace_slot *sl = &E.info->slots[s];
			const uint64_t *rows = sf_trace_rows(r, s);
			for (uint32_t t = 0; t < ntok; t++) {
				const uint64_t *row = rows + (size_t)t * sl->words;
				size_t k = 0;
				for (uint32_t w = 0; w < sl->words; w++)
					for (uint64_t b = row[w]; b; b &= b - 1)
						active[k++] = w * 64 + (uint32_t)__builtin_ctzll(b);
				for (int p = 0; p < E.npl; p++) {
					size_t c = (size_t)s * E.npl + p;
					sf_runs_positions(E.inv[c], sl->entries, active, k, scratch, pos);
					sf_runs_tally_add(&E.tally[c], pos, k, E.entry_bytes[s], runs);
				}
			}
		}
	}
	if (ret < 0) {
		sf_error("%s", e.msg);
		goto out;
	}
	if (o->json ? print_json(o, &E) : (print_table(o, &E), 0)) {
		sf_error("out of memory");
		goto out;
	}
	status = SF_EXIT_OK;
out:
	free(active);
	free(pos);
	free(runs);
	free(scratch);
	eval_free(&E);
	sf_model_close(&m);
	sf_trace_close(r);
	return status;
}

int main(int argc, char **argv)
{
	struct options o;
	int status;

	sf_cli_start("sf-place");
	parse_options(argc, argv, &o);
	status = o.eval_trace ? run_eval(&o) : run_place(&o);
	return sf_close_stdout() ? SF_EXIT_FAIL : status;
}
