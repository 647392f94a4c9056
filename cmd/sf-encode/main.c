/* sf-encode: writes the 2-bit middle-tier codes of a model's weight columns
 * (.sfq), merges .sfq files or calib.json parts of separate layer jobs, and
 * with --calibrate chooses SpAx tier sizes per budget (calib.json). See
 * man/sf-encode.1. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/calib.h"
#include "common/cli.h"
#include "formats/codes.h"
#include "engine/corpus.h"
#include "engine/forward.h"
#include "formats/model.h"
#include "base/pool.h"
#include "engine/tokenizer.h"
#include "offline/calib.h"
#include "offline/encode.h"

#define DEFAULT_CALIB_TOKENS 1024
#define DEFAULT_WINDOW 128
#define MAX_CORPORA 16
#define DEFAULT_QUANT "search"	/* sf-pack's */

struct options {
	const char *model_dir, *output, *stats, *info, *codes;
	const char *layers, *groups, *dense_layers, *budgets, *dtype_name, *quant_name;
	const char *corpora[MAX_CORPORA];
	int ncorpora;
	enum sf_code_method method;
	uint64_t seed, calib_tokens;
	int threads, window, merge, calibrate, progress, quiet, verbose;
	int dtype;			/* --dtype: SF_OPT_DTYPE_KEEP, SF_DTYPE_Q8, SF_DTYPE_Q4 */
	enum sf_quant_method quant;
	char **inputs;		/* --merge */
	int ninputs;
};

enum { OPT_METHOD = SF_OPT_FIRST, OPT_SEED, OPT_LAYERS, OPT_GROUPS, OPT_STATS, OPT_MERGE,
       OPT_INFO, OPT_CALIBRATE, OPT_CORPUS, OPT_BUDGETS, OPT_CODES, OPT_CALIB_TOKENS,
       OPT_WINDOW, OPT_DENSE_LAYERS, OPT_DTYPE, OPT_QUANT };

static const struct sf_opt options[] = {
	{ "model", 'm', "MODEL", "Hugging Face model directory or GGUF file", NULL, 0 },
	SF_OPT_OUTPUT("output file, \"-\" for standard output"),
	{ "method", OPT_METHOD, "M", "trellis or scalar (default %s)", "trellis", 0 },
	{ "seed", OPT_SEED, "N", "trellis codebook seed (default %s)",
	  SF_STR(SF_TRELLIS_DEFAULT_SEED), 0 },
	{ "layers", OPT_LAYERS, "LAYERS", "layers to encode or calibrate (LAYERS in\n"
	  "sparseflash(7), e.g. 0-3,6; default all)", NULL, 0 },
	{ "groups", OPT_GROUPS, "LIST", "groups: attn_in,attn_out,ffn_in,ffn_out (default all)", NULL, 0 },
	SF_OPT_THREADS,
	{ "stats", OPT_STATS, "FILE", "write the encoding error per layer and group as JSON", NULL, 0 },
	{ "merge", OPT_MERGE, NULL, "merge the .sfq files, or the calib.json parts,\n"
	  "given as arguments", NULL, 0 },
	{ "info", OPT_INFO, "FILE", "print a .sfq file's header and checksums as JSON", NULL, 0 },
	{ "calibrate", OPT_CALIBRATE, NULL, "choose tier sizes per budget (writes calib.json)", NULL, 0 },
	{ "corpus", OPT_CORPUS, "FILE", "calibration text (documents separated by a blank\n"
	  "line); may be given up to %s times", SF_STR(MAX_CORPORA), 0 },
	{ "budgets", OPT_BUDGETS, "LIST", "budgets in (0, 1], e.g. 0.3,0.5,0.7", NULL, 0 },
	{ "codes", OPT_CODES, "FILE", "--calibrate: codes to use (default: encode in memory)", NULL, 0 },
	{ "calib-tokens", OPT_CALIB_TOKENS, "N", "--calibrate: tokens to measure on (default %s)",
	  SF_STR(DEFAULT_CALIB_TOKENS), 0 },
	{ "window", OPT_WINDOW, "N", "--calibrate: tokens per window (default %s)",
	  SF_STR(DEFAULT_WINDOW), 0 },
	{ "dense-layers", OPT_DENSE_LAYERS, "LAYERS", "--calibrate: layers that stay dense\n"
	  "(LAYERS in sparseflash(7), e.g. 0,3 or 1:1)", NULL, 0 },
	{ "dtype", OPT_DTYPE, "T", "--calibrate: the image's top tier, as sf-pack --dtype:\n"
	  "keep (the model's), q8 or q4 (default keep)", NULL, 0 },
	{ "quant", OPT_QUANT, "M", "--calibrate --dtype q8|q4: as sf-pack --quant, rtn or\n"
	  "search (default %s)", DEFAULT_QUANT, 0 },
	SF_OPT_PROGRESS_ENTRY,
	SF_OPT_QUIET,
	SF_OPT_VERBOSE,
	SF_OPT_END,
};

_Static_assert(SF_CODES_DEFAULT_METHOD == SF_CODES_TRELLIS, "--help names trellis the default");

static const struct sf_cmd cmd = {
	"Usage: sf-encode --model MODEL [options] -o FILE.sfq\n"
	"       sf-encode --merge A.sfq B.sfq ... -o FILE.sfq\n"
	"       sf-encode --merge A.json B.json ... -o calib.json\n"
	"       sf-encode --info FILE.sfq\n"
	"       sf-encode --model MODEL --calibrate --corpus FILE --budgets LIST -o calib.json\n"
	"Write the 2-bit middle-tier codes of every weight column, or calibrate\n"
	"SpAx tier sizes per budget.\n",
	options,
	"  sf-encode --model models/mix4-1m -o mix4-1m.sfq\n"
	"  sf-encode --model models/mix4-1m --layers 0-1 -o a.sfq\n"
	"  sf-encode --model models/mix4-1m --layers 2-3 -o b.sfq\n"
	"  sf-encode --merge a.sfq b.sfq -o all.sfq\n"
	"  sf-encode --model models/mix4-1m --calibrate --codes all.sfq \\\n"
	"    --corpus kjv.calib.txt --budgets 0.3,0.5 -o calib.json\n"
	"  sf-encode --model models/mix4-1m --calibrate --codes all.sfq --dtype q4 \\\n"
	"    --corpus kjv.calib.txt --budgets 0.3,0.5 -o calib-q4.json\n",
};

static void parse_options(int argc, char **argv, struct options *o)
{
	int c;

	*o = (struct options){
		.method = SF_CODES_DEFAULT_METHOD, .seed = SF_TRELLIS_DEFAULT_SEED,
		.calib_tokens = DEFAULT_CALIB_TOKENS, .window = DEFAULT_WINDOW,
		.threads = sf_cli_threads_default(),
	};
	while ((c = sf_cli_getopt(argc, argv, &cmd)) != -1) {
		switch (c) {
		case 'm': o->model_dir = sf_opt_path("--model", optarg); break;
		case 'o': o->output = sf_opt_path("--output", optarg); break;
		case OPT_METHOD:
			/* a well-formed request the tool cannot serve: exit 1 */
			if (sf_codes_method_parse(optarg, &o->method)) {
				sf_error("--method: unknown method '%s': expected trellis or scalar",
					 optarg);
				exit(SF_EXIT_FAIL);
			}
			break;
		case OPT_SEED: o->seed = sf_opt_u64("--seed", optarg, 0, INT64_MAX); break;
		case OPT_LAYERS: o->layers = optarg; break;
		case OPT_GROUPS: o->groups = optarg; break;
		case 't': o->threads = sf_opt_threads(optarg); break;
		case OPT_STATS: o->stats = optarg; break;
		case OPT_MERGE: o->merge = 1; break;
		case OPT_INFO: o->info = optarg; break;
		case OPT_CALIBRATE: o->calibrate = 1; break;
		case OPT_CORPUS:
			if (o->ncorpora == MAX_CORPORA)
				sf_usage_error("--corpus: at most %d files", MAX_CORPORA);
			o->corpora[o->ncorpora++] = optarg;
			break;
		case OPT_BUDGETS: o->budgets = optarg; break;
		case OPT_CODES: o->codes = optarg; break;
		case OPT_CALIB_TOKENS:
			o->calib_tokens = sf_opt_u64("--calib-tokens", optarg, 1, 1u << 24);
			break;
		case OPT_WINDOW: o->window = (int)sf_opt_u64("--window", optarg, 1, 1u << 20); break;
		case OPT_DENSE_LAYERS: o->dense_layers = optarg; break;
		case OPT_DTYPE: o->dtype_name = optarg; break;
		case OPT_QUANT: o->quant_name = optarg; break;
		case SF_OPT_PROGRESS: o->progress = 1; break;
		case 'q': o->quiet = 1; break;
		case 'v': o->verbose = 1; break;
		}
	}
	o->inputs = argv + optind;
	o->ninputs = argc - optind;
	if (o->merge + !!o->info + o->calibrate > 1)
		sf_usage_error("--merge, --info and --calibrate cannot be combined");
	if (o->info) {
		if (o->ninputs)
			sf_usage_error("unexpected argument '%s'", o->inputs[0]);
		return;
	}
	if (o->merge) {
		if (o->ninputs < 1)
			sf_usage_error("--merge needs at least one .sfq file or calib.json part");
	} else if (o->ninputs) {
		sf_usage_error("unexpected argument '%s'", o->inputs[0]);
	} else if (!o->model_dir) {
		sf_usage_error("--model MODEL is required");
	}
	if (!o->output)
		sf_usage_error("-o FILE is required");
	if (o->calibrate && (!o->ncorpora || !o->budgets))
		sf_usage_error("--calibrate needs --corpus FILE and --budgets LIST");
	if (!o->calibrate && (o->ncorpora || o->budgets || o->codes || o->dense_layers ||
			      o->dtype_name || o->quant_name))
		sf_usage_error("--corpus, --budgets, --codes, --dense-layers, --dtype and --quant "
			       "need --calibrate");
	o->dtype = o->dtype_name ? sf_opt_dtype("--dtype", o->dtype_name, SF_OPT_DTYPES_TOP_BLOCKS)
		   : SF_OPT_DTYPE_KEEP;
	if (sf_quant_method_parse(o->quant_name ? o->quant_name : DEFAULT_QUANT, &o->quant))
		sf_usage_error("--quant: '%s' is not rtn or search", o->quant_name);
	if (o->quant_name && o->dtype == SF_OPT_DTYPE_KEEP)
		sf_usage_error("--quant applies to --dtype q8 or q4");
}

static size_t parse_budgets(const char *s, double *out)
{
	size_t n = 0;
	char *copy = strdup(s), *save = NULL;
	if (!copy)
		sf_usage_error("--budgets: %s", strerror(ENOMEM));
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		double v;
		if (n == SF_CALIB_MAX_BUDGETS)
			sf_usage_error("--budgets: at most %d budgets", SF_CALIB_MAX_BUDGETS);
		/* not a number is a malformed option (exit 2), a number
		 * outside (0, 1] a budget that cannot be met (exit 1) */
		int bad = sf_parse_f64(t, 0.0, 1.0, &v);
		if (bad == -EINVAL)
			sf_usage_error("--budgets: %s is not a budget in (0, 1]", t);
		if (bad || v <= 0.0) {
			sf_error("--budgets: %s is not a budget in (0, 1]", t);
			exit(SF_EXIT_FAIL);
		}
		out[n++] = v;
	}
	free(copy);
	if (!n)
		sf_usage_error("--budgets: no budget in '%s'", s);
	return n;
}

/* The files this run reads (the .sfq of --merge and --codes, the
 * corpora), refused as its output or --stats; -o renames a temporary
 * over FILE, so only a regular file or a new name. */
static void check_outputs(const struct options *o)
{
	const char **in = calloc((size_t)o->ninputs + (size_t)o->ncorpora + 2, sizeof(*in));
	int n = 0;

	if (!in)
		return;
	for (int i = 0; i < o->ninputs; i++)
		in[n++] = o->inputs[i];
	for (int i = 0; i < o->ncorpora; i++)
		in[n++] = o->corpora[i];
	if (o->codes)
		in[n++] = o->codes;
	sf_out_check_path(o->output, in);
	sf_out_check_path(o->stats, in);
	free(in);
}

static json_t *producer_json(const struct options *o)
{
	json_t *opts = json_object();
	if (o->merge) {
		json_t *in = json_array();
		for (int i = 0; i < o->ninputs; i++)
			json_array_append_new(in, json_string(o->inputs[i]));
		json_object_set_new(opts, "merge", in);
	} else {
		json_object_set_new(opts, "model", json_string(o->model_dir));
		json_object_set_new(opts, "method", json_string(sf_codes_method_name(o->method)));
		json_object_set_new(opts, "seed", json_integer((json_int_t)o->seed));
		json_object_set_new(opts, "layers", json_string(o->layers ? o->layers : "all"));
		json_object_set_new(opts, "groups", json_string(o->groups ? o->groups : "all"));
	}
	if (o->calibrate) {
		json_t *c = json_array();
		for (int i = 0; i < o->ncorpora; i++)
			json_array_append_new(c, json_string(o->corpora[i]));
		json_object_set_new(opts, "corpora", c);
		json_object_set_new(opts, "budgets", json_string(o->budgets));
		json_object_set_new(opts, "codes", o->codes ? json_string(o->codes) : json_null());
		json_object_set_new(opts, "dense_layers",
				    json_string(o->dense_layers ? o->dense_layers : ""));
		json_object_set_new(opts, "dtype", json_string(o->dtype_name ? o->dtype_name : "keep"));
		if (o->dtype != SF_OPT_DTYPE_KEEP)
			json_object_set_new(opts, "quant",
					    json_string(sf_quant_method_name(o->quant)));
	}
	return json_pack("{s:s,s:s,s:o}", "program", "sf-encode", "version", SF_VERSION,
			 "options", opts);
}

// ----------------------------------------------------------------------------
// encoding

struct encode_sink {
	struct sf_sfq_writer *w;	/* NULL: into the in-memory file */
	struct sf_sfq *mem;
	json_t *stats;
	int verbose;
	size_t done;			/* sections written */
	struct sf_progress progress;
};

static int sink(void *arg, size_t i, const uint8_t *data, const struct sf_codes_stats *st,
		struct sf_err *e)
{
	struct encode_sink *S = arg;
	const struct sf_sfq_section *s = &S->mem->sections[i];
	int ret = 0;
	if (S->w)
		ret = sf_sfq_writer_section(S->w, data, s->bytes, e);
	else
		memcpy(S->mem->buf + s->offset, data, (size_t)s->bytes);
	json_t *mats = json_object();
	double sse = 0.0, ss = 0.0;
	for (int k = 0; k < s->nmat; k++) {
		json_object_set_new(mats, s->mat[k].name,
				    json_pack("{s:f,s:f}", "mse",
					      st->sse[k] / (double)(s->mat[k].rows * s->entries),
					      "relative", st->ss[k] > 0 ? st->sse[k] / st->ss[k] : 0.0));
		sse += st->sse[k];
		ss += st->ss[k];
	}
	json_array_append_new(S->stats, json_pack("{s:i,s:s,s:f,s:o}", "layer", s->layer,
						  "group", sf_group_name(s->group), "relative",
						  ss > 0 ? sse / ss : 0.0, "matrices", mats));
	if (S->verbose)
		fprintf(stderr, "%s: layer %d %s: relative error %.4f\n", sf_progname, s->layer,
			sf_group_name(s->group), ss > 0 ? sse / ss : 0.0);
	S->done++;
	sf_progress_update(&S->progress, S->done, (double)S->done / (double)S->mem->nsections);
	return ret;
}

/* The file description of the codes of the selected layers and groups. */
static int describe(struct sf_sfq *d, const struct sf_model *m, const struct options *o,
		    const uint8_t *layers, unsigned groups)
{
	memset(d, 0, sizeof(*d));
	d->fingerprint = m->fingerprint;
	d->method = o->method;
	d->seed = o->seed;
	sf_sfq_shape_of(&d->shape, &m->cfg);
	d->sections = calloc((size_t)m->cfg.n_layers * SF_NGROUPS, sizeof(*d->sections));
	if (!d->sections)
		return -ENOMEM;
	if (o->method == SF_CODES_TRELLIS) {
		if (posix_memalign((void **)&d->codebook, 64, SF_TRELLIS_CODEBOOK * sizeof(float))) {
			d->codebook = NULL;
			return -ENOMEM;
		}
		sf_trellis_codebook(d->codebook, o->seed);
	}
	for (int l = 0; l < m->cfg.n_layers; l++)
		for (int g = 0; g < SF_NGROUPS; g++)
			if (layers[l] && (groups >> g & 1))
				sf_sfq_section_init(&d->sections[d->nsections++], o->method, &d->shape,
						    l, (enum sf_group)g);
	return 0;
}

static int write_stats(const char *path, json_t *stats)
{
	int bad = strcmp(path, "-") == 0 ? json_dumpf(stats, stdout, JSON_INDENT(1)) || fputc('\n', stdout) == EOF
					 : json_dump_file(stats, path, JSON_INDENT(1));
	if (bad)
		sf_error("%s: cannot write the statistics", path);
	return bad ? -EIO : 0;
}

/* Encodes into a file (o->output) or, with mem set, into memory. */
static int encode(const struct sf_model *m, const struct options *o, struct sf_pool *pool,
		  const uint8_t *layers, unsigned groups, struct sf_sfq *mem)
{
	struct sf_sfq d;
	struct sf_err e = { 0 };
	struct encode_sink S = { .stats = json_array(), .verbose = o->verbose };
	int ret;

	sf_progress_init(&S.progress, o->progress, o->quiet, "groups");

	if ((ret = describe(&d, m, o, layers, groups))) {
		sf_error("%s", strerror(-ret));
		goto out;
	}
	d.producer = producer_json(o);
	S.mem = &d;
	if (o->verbose)
		sf_cli_memory_need(sf_codes_encode_bytes(&d, sf_pool_size(pool)) +
				   (mem ? sf_sfq_bytes(&d) : 0) + sf_model_pass_bytes(m),
				   mem ? "the encoders, the codes, the weights a layer at a time "
				   "(mapped)" : "the encoders, a group's codes, the weights a layer "
				   "at a time (mapped)");
	if (!mem && (ret = sf_sfq_writer_open(&S.w, o->output, &d, NULL, &e))) {
		sf_error("%s", e.msg);
		goto out;
	}
	if (mem) {
		uint64_t total = 0;
		for (size_t i = 0; i < d.nsections; i++) {
			d.sections[i].offset = total;
			total += d.sections[i].bytes;
		}
		if (!(d.buf = malloc(total ? (size_t)total : 1))) {
			ret = -ENOMEM;
			sf_error("codes in memory: %" PRIu64 " bytes: %s", total, strerror(ENOMEM));
			goto out;
		}
	}
	if ((ret = sf_codes_encode_sections(m, &d, pool, sink, &S, &e))) {
		sf_error("%s", e.msg);
		goto out;
	}
	sf_progress_end(&S.progress, d.nsections);
	if (S.w) {
		ret = sf_sfq_writer_close(S.w, &e);
		S.w = NULL;
		if (ret) {
			sf_error("%s", e.msg);
			goto out;
		}
	}
	if (o->stats && !mem && (ret = write_stats(o->stats, S.stats)))
		goto out;
	if (mem) {
		for (size_t i = 0; i < d.nsections; i++)
			d.sections[i].data = d.buf + d.sections[i].offset;
		*mem = d;
		memset(&d, 0, sizeof(d));
	}
out:
	sf_sfq_writer_abort(S.w);
	json_decref(S.stats);
	sf_sfq_close(&d);
	return ret;
}

// ----------------------------------------------------------------------------
// calibration

/* The calibration tokens: documents of the corpora in turn, each with BOS. */
static int read_tokens(const struct options *o, const struct sf_tokenizer *tok, int32_t **out,
		       size_t *n)
{
	struct sf_err e = { 0 };
	size_t docs;
	int ret = sf_corpus_tokens(o->corpora, o->ncorpora, tok, o->calib_tokens, out, n, &docs, &e);

	if (ret) {
		sf_error("%s", e.msg);
		return ret;
	}
	if (*n < 2) {
		sf_error("%s: no text to calibrate on", o->corpora[0]);
		free(*out);
		return -EINVAL;
	}
	return 0;
}

/* Per step of the calibration: configurations scored, rate, ETA and the
 * layer (at most every half second at a terminal, SF_PROGRESS_LOG_SECONDS
 * in a log). */
struct calib_progress {
	struct sf_progress pr;
	struct sf_calib_progress last;
};

static void calib_progress(void *arg, const struct sf_calib_progress *p)
{
	struct calib_progress *cp = arg;
	cp->last = *p;
	snprintf(cp->pr.note, sizeof(cp->pr.note), "layer %d of %d",
		 p->layers_done < p->layers ? p->layers_done + 1 : p->layers, p->layers);
	sf_progress_update(&cp->pr, p->configs, p->fraction);
}

static int calibrate(const struct sf_model *m, const struct options *o, struct sf_pool *pool,
		     const uint8_t *dense, const uint8_t *layers)
{
	struct calib_progress cp = { 0 };
	struct sf_tokenizer *tok = NULL;
	struct sf_sfq q = { 0 };
	struct sf_calib C = { 0 };
	struct sf_err e = { 0 };
	double budgets[SF_CALIB_MAX_BUDGETS];
	int32_t *tokens = NULL;
	size_t ntok = 0;
	int ret;

	struct sf_calib_opts co = { .budgets = budgets, .nbudgets = parse_budgets(o->budgets, budgets),
				    .dense_layers = dense, .window = o->window,
				    .layers = o->layers ? layers : NULL,
				    .top_dtype = o->dtype == SF_OPT_DTYPE_KEEP ? SF_DTYPE_F32 :
						 (enum sf_dtype)o->dtype, .quant = o->quant,
				    .release_weights = sf_model_releases(m) };
	if (o->window > m->cfg.max_seq_len)
		sf_usage_error("--window: %d is more than the model's %d positions", o->window,
			       m->cfg.max_seq_len);
	if (o->codes) {
		if ((ret = sf_sfq_open(&q, o->codes, &e)) ||
		    (ret = sf_sfq_check_model(&q, o->codes, m, &e))) {
			sf_error("%s", e.msg);
			goto out;
		}
	} else {
		uint8_t *need = malloc((size_t)m->cfg.n_layers);
		if (!need) {
			ret = -ENOMEM;
			sf_error("%s", strerror(ENOMEM));
			goto out;
		}
		for (int l = 0; l < m->cfg.n_layers; l++)
			need[l] = !dense[l] && layers[l];
		ret = encode(m, o, pool, need, (1u << SF_NGROUPS) - 1, &q);
		free(need);
		if (ret)
			goto out;
	}
	if ((ret = sf_tokenizer_open_model(&tok, o->model_dir, m->cfg.vocab_size, &e))) {
		sf_error("%s", e.msg);
		goto out;
	}
	if ((ret = read_tokens(o, tok, &tokens, &ntok)))
		goto out;
	if (o->verbose) {
		fprintf(stderr, "%s: calibrating on %zu tokens, %zu budgets\n", sf_progname, ntok,
			co.nbudgets);
		sf_cli_memory_need(sf_calib_bytes(m, ntok, &co, o->threads) + sf_sfq_bytes(&q) +
				   (co.release_weights ? sf_model_pass_bytes(m) : sf_model_bytes(m)),
				   co.release_weights ? "the calibration, the codes, the weights "
				   "one layer at a time (mapped)"
				   : "the calibration, the codes, the weights (mapped)");
	}
	sf_progress_init(&cp.pr, o->progress, o->quiet, "configurations");
	co.progress = calib_progress;
	co.progress_arg = &cp;
	if ((ret = sf_calib_run(&C, m, &q, tokens, ntok, &co, pool, &e))) {
		sf_error("%s", e.msg);
		goto out;
	}
	snprintf(cp.pr.note, sizeof(cp.pr.note), "%d layers", cp.last.layers);
	sf_progress_end(&cp.pr, cp.last.configs);
	C.producer = producer_json(o);
	const char *inputs[MAX_CORPORA + 2];	/* what this run read, NULL-terminated */
	int ni = 0;
	if (o->codes)
		inputs[ni++] = o->codes;
	for (int i = 0; i < o->ncorpora; i++)
		inputs[ni++] = o->corpora[i];
	inputs[ni] = NULL;
	if ((ret = sf_calib_write(&C, o->output, inputs, &e)))
		sf_error("%s", e.msg);
out:
	sf_calib_free(&C);
	sf_sfq_close(&q);
	free(tokens);
	sf_tokenizer_close(tok);
	return ret;
}

// ----------------------------------------------------------------------------
// merging calibration parts

/* A file whose first byte other than blanks is '{': JSON, not a .sfq. */
static int is_json(const char *path)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : NULL;
	int c = EOF;
	if (!f)
		return 0;	/* the merge names what is wrong with it */
	while ((c = fgetc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r')
		;
	fclose(f);
	return c == '{';
}

static int merge_calib(const struct options *o)
{
	struct sf_calib *parts = calloc((size_t)o->ninputs, sizeof(*parts)), C = { 0 };
	struct sf_err e = { 0 };
	int ret = 0, n = 0;

	if (!parts) {
		sf_error("%s", strerror(ENOMEM));
		return -ENOMEM;
	}
	for (; n < o->ninputs; n++)
		if ((ret = sf_calib_load_part(&parts[n], o->inputs[n], &e))) {
			sf_error("%s", e.msg);
			goto out;
		}
	if ((ret = sf_calib_merge(&C, parts, (size_t)n, (const char *const *)o->inputs, &e)) ||
	    (ret = sf_calib_write(&C, o->output, (const char *const *)o->inputs, &e)))
		sf_error("%s", e.msg);
out:
	for (int i = 0; i < n; i++)
		sf_calib_free(&parts[i]);
	free(parts);
	sf_calib_free(&C);
	return ret;
}

static int info(const char *path)
{
	struct sf_sfq q;
	struct sf_err e = { 0 };
	int ret = sf_sfq_open(&q, path, &e);
	if (ret) {
		sf_error("%s", e.msg);
		return ret;
	}
	json_t *j = sf_sfq_info_json(&q);
	if (json_dumpf(j, stdout, JSON_INDENT(1)) || fputc('\n', stdout) == EOF)
		ret = -EIO;
	json_decref(j);
	sf_sfq_close(&q);
	return ret;
}

int main(int argc, char **argv)
{
	struct options o;
	struct sf_model m = { 0 };
	struct sf_pool *pool = NULL;
	struct sf_err e = { 0 };
	uint8_t *layers = NULL, *dense = NULL;
	int ret;

	sf_cli_start("sf-encode");
	parse_options(argc, argv, &o);
	if (o.info) {
		ret = info(o.info);
		goto out;
	}
	check_outputs(&o);
	if (o.merge && is_json(o.inputs[0])) {
		ret = merge_calib(&o);
		goto out;
	}
	if (o.merge) {
		json_t *p = producer_json(&o);
		if ((ret = sf_sfq_merge(o.output, (const char *const *)o.inputs, (size_t)o.ninputs,
					p, &e)))
			sf_error("%s", e.msg);
		json_decref(p);
		goto out;
	}
	if ((ret = sf_model_open_elements(&m, o.model_dir, &e)) ||
	    (ret = sf_model_dense_ffn(&m, o.model_dir, &e))) {
		sf_error("%s", e.msg);
		goto out;
	}
	int L = m.cfg.n_layers;
	if (!(layers = malloc((size_t)L)) || !(dense = calloc((size_t)L, 1))) {
		ret = -ENOMEM;
		sf_error("%s", strerror(ENOMEM));
		goto out;
	}
	sf_opt_layers("--layers", o.layers ? o.layers : "all", L, layers);
	if (o.dense_layers)
		sf_opt_layers("--dense-layers", o.dense_layers, L, dense);
	unsigned groups = o.groups ? sf_opt_groups("--groups", o.groups, 0) : (1u << SF_NGROUPS) - 1;
	if ((ret = sf_pool_create(&pool, o.threads))) {
		sf_error("thread pool of %d: %s", o.threads, sf_strerror(ret));
		goto out;
	}
	ret = o.calibrate ? calibrate(&m, &o, pool, dense, layers)
			  : encode(&m, &o, pool, layers, groups, NULL);
out:
	free(layers);
	free(dense);
	sf_pool_destroy(pool);
	sf_model_close(&m);
	return sf_close_stdout() ? SF_EXIT_FAIL : ret ? SF_EXIT_FAIL : SF_EXIT_OK;
}
