/* sf-run: the decoder. With --model MODEL it runs the dense model of a
 * Hugging Face directory or a GGUF file in RAM; with IMAGE the sparse
 * decoder reads the flash groups of an sf-pack image per token (sparse.h). Generation from
 * -p or stdin, streamed to stdout, teacher-forced perplexity with --ppl,
 * figures with --bench. See man/sf-run.1. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cli.h"
#include "engine/chat.h"
#include "engine/corpus.h"
#include "engine/cpu.h"
#include "engine/eval.h"
#include "engine/forward.h"
#include "formats/gguf.h"
#include "formats/image.h"
#include "engine/kernels.h"
#include "engine/kernels_qrows.h"
#include "formats/model.h"
#include "base/file.h"
#include "base/pool.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "online/selectinfer.h"
#include "online/sparse.h"
#include "engine/tokenizer.h"
#include "online/uring.h"
#include "common/device.h"
#include "common/ram.h"
#include "common/model.h"

#define DEFAULT_WINDOW 256
#define MAX_PROMPT_BYTES (64u << 20)
#define DEFAULT_LATENCIES 65536	/* --ppl tokens whose latency --bench ranks */
/* --threads-draft: a draft is small by design, and a pool's wake per
 * product costs more than it saves there: mix4-1m decoded 11,860 tok/s
 * on one thread, 354 on two of a loaded 2-core machine */
#define DEFAULT_THREADS_DRAFT 1

struct options {
	struct sf_model_opts mo;	/* --model or IMAGE (sparse decoding), -c, -ctk, -ctv,
					 * --chat-template */
	const char *prompt;		/* NULL: read stdin */
	const char *prompt_file;	/* -f */
	const char *ppl_file;
	const char *stats_file;
	const char *read_log;
	int head_on_flash;
	int mxfp4_int8;			/* --activations q8 */
	long n_predict;			/* -1: until EOS or the context is full */
	double temp, top_p, min_p, repeat_penalty;
	int top_k, repeat_last_n;
	uint64_t seed;
	int threads;
	int batch;			/* tokens per weight pass: the prompt, --ppl */
	uint64_t max_tokens;		/* --ppl: 0 for all */
	int window;
	int ignore_eos, echo, verbose, quiet, progress;
	int conversation, verbose_prompt;
	struct sf_sparse_opts sparse;
	int sparse_set;			/* an option only the sparse decoder takes */
	int bench;
	const char *probe;		/* --probe-device: where */
	const char *pin[2];		/* --pin: score files (one task, one model) */
	int npin;
	double pin_ratio, pin_delta;
	double rho;			/* --compute-ratio; < 0: no selective computation */
	const char *static_file, *dense_layers;
	double compute_delta, alpha, beta;
	const char *draft;		/* --draft: a model directory or an image; NULL: none */
	int draft_max, draft_min, draft_fixed, draft_threads;
	double draft_p_min, draft_budget;
	int draft_set;			/* an option that needs --draft */
};

/* Keys of the long options; SPARSE in an entry's flags: the option only
 * the sparse decoder takes, so it needs an IMAGE (not --model). */
enum { OPT_TEMP = SF_OPT_FIRST, OPT_TOP_P, OPT_TOP_K, OPT_MIN_P, OPT_REPEAT_PENALTY,
       OPT_REPEAT_LAST_N, OPT_IGNORE_EOS, OPT_ECHO, OPT_PPL,
       OPT_MAX_TOKENS, OPT_WINDOW, OPT_STATS, OPT_BUDGET, OPT_DENSITY, OPT_K_TOP, OPT_K_MID,
       OPT_COLLAPSE, OPT_DEVICE_PEAK, OPT_DEVICE_IOPS, OPT_PROBE, OPT_QD, OPT_READ_SIZE, OPT_READ_LOG,
       OPT_PREFETCH, OPT_PREDICT, OPT_HEAD_ON_FLASH, OPT_NO_DIRECT, OPT_ACTIVATIONS,
       OPT_CACHE_POLICY, OPT_SEG_ADMIT, OPT_RAM, OPT_CACHE_RATIO, OPT_SIMULATE, OPT_BENCH,
       OPT_PIN, OPT_PIN_RATIO, OPT_PIN_DELTA, OPT_COMPUTE_RATIO, OPT_STATIC, OPT_COMPUTE_DELTA,
       OPT_ALPHA, OPT_BETA, OPT_DENSE_LAYERS, OPT_FREE_RIDERS, OPT_CONVERSATION,
       OPT_VERBOSE_PROMPT, OPT_DRAFT, OPT_DRAFT_MAX, OPT_DRAFT_MIN,
       OPT_DRAFT_P_MIN, OPT_DRAFT_FIXED, OPT_DRAFT_BUDGET, OPT_THREADS_DRAFT };
enum { SPARSE = 1 };

static const struct sf_opt options[] = {
	SF_OPT_MODEL,
	{ "prompt", 'p', "TEXT", "prompt (default: read standard input)", NULL, 0 },
	{ "file", 'f', "FILE", "read the prompt from FILE (one final newline dropped)", NULL, 0 },
	{ "n-predict", 'n', "N", "tokens to generate, -1 until EOS or the context\n"
	  "is full (default %s)", SF_STR(SF_DEFAULT_N_PREDICT), 0 },
	{ "temp", OPT_TEMP, "T", "temperature, 0 for greedy (default %s)", SF_STR(SF_DEFAULT_TEMP), 0 },
	{ "top-p", OPT_TOP_P, "P", "nucleus sampling threshold (default %s)", SF_STR(SF_DEFAULT_TOP_P), 0 },
	{ "top-k", OPT_TOP_K, "K", "sample from the K most likely tokens, 0 for all\n"
	  "(default %s)", SF_STR(SF_DEFAULT_TOP_K), 0 },
	{ "min-p", OPT_MIN_P, "P", "drop tokens less likely than P times the most\n"
	  "likely one (default %s)", "0", 0 },
	{ "repeat-penalty", OPT_REPEAT_PENALTY, "R", "divide the logits of recent tokens by R\n"
	  "(multiply if negative); 1 for none (default %s)", "1", 0 },
	{ "repeat-last-n", OPT_REPEAT_LAST_N, "N", "recent: the last N tokens of the text\n"
	  "(default %s)", SF_STR(SF_DEFAULT_REPEAT_LAST_N), 0 },
	{ "seed", 's', "N", "sampling seed (default %s)", SF_STR(SF_DEFAULT_SEED), 0 },
	{ "ignore-eos", OPT_IGNORE_EOS, NULL, "keep generating past the end-of-text token", NULL, 0 },
	{ "conversation", OPT_CONVERSATION, NULL, "chat (also -cnv): a user turn per line of standard\n"
	  "input, in the model's chat template; -p or -f is the\n"
	  "system message, -n bounds each answer", NULL, 0 },
	{ "chat-template", SF_OPT_CHAT_TEMPLATE, "NAME", "--conversation's template when the model has none,\n"
	  "or instead of its own: chatml, llama2, llama3,\n"
	  "gemma, ... (sf-run(1), Conversation)", NULL, 0 },
	{ "verbose-prompt", OPT_VERBOSE_PROMPT, NULL, "print the prompt (each turn of --conversation)\n"
	  "and its tokens on standard error", NULL, 0 },
	{ "echo", OPT_ECHO, NULL, "print the prompt before the generated text\n"
	  "(default: not printed)", NULL, 0 },
	SF_OPT_CTX("context length (default: the model's)"),
	SF_OPT_CACHE_TYPES,
	{ "batch-size", 'b', "N", "tokens per pass over the weights for the prompt and\n"
	  "--ppl (default %s); the output is the same", SF_STR(SF_RUN_DEFAULT_BATCH), 0 },
	SF_OPT_THREADS,
	{ "ppl", OPT_PPL, "FILE", "perplexity of FILE (documents separated by a\n"
	  "blank line, \"-\" for stdin), printed as JSON", NULL, 0 },
	{ "max-tokens", OPT_MAX_TOKENS, "N", "--ppl: score only the first N tokens", NULL, 0 },
	{ "window", OPT_WINDOW, "N", "--ppl: tokens scored per window (default %s)",
	  SF_STR(DEFAULT_WINDOW), 0 },
	{ "stats", OPT_STATS, "FILE", "write timings (IMAGE: the --bench figures) as JSON\n"
	  "to FILE; \"-\": standard output, the text then to\n"
	  "standard error", NULL, 0 },
	{ "bench", OPT_BENCH, NULL, "print the figures as JSON instead of text: \"pp\"\n"
	  "and \"tg\" (prompt and decode tokens/s, as llama-bench),\n"
	  "with IMAGE the sparse decoder's", NULL, 0 },
	SF_OPT_HEADING("Speculative decoding:"),
	{ "draft", OPT_DRAFT, "PATH", "draft model: a model directory (in RAM) or an image;\n"
	  "it proposes tokens, the model verifies them in one\n"
	  "pass (greedy: the same text as without)", NULL, 0 },
	{ "draft-max", OPT_DRAFT_MAX, "N", "tokens proposed per pass at most (default %s)",
	  SF_STR(SF_SPEC_DEFAULT_MAX), 0 },
	{ "draft-min", OPT_DRAFT_MIN, "N", "tokens proposed per pass that --draft-p-min\n"
	  "cannot stop (default %s)", SF_STR(SF_SPEC_DEFAULT_MIN), 0 },
	{ "draft-p-min", OPT_DRAFT_P_MIN, "P", "stop proposing after a token the draft gives\n"
	  "less than P (default %s)", SF_STR(SF_SPEC_DEFAULT_P_MIN), 0 },
	{ "draft-fixed", OPT_DRAFT_FIXED, NULL, "propose up to --draft-max every pass (default:\n"
	  "2 more after a pass that kept all, 1 fewer after\n"
	  "one that kept none)", NULL, 0 },
	{ "draft-budget", OPT_DRAFT_BUDGET, "B", "a draft image's --budget (default 1)", NULL, 0 },
	{ "threads-draft", OPT_THREADS_DRAFT, "N", "the draft's worker threads (default %s)",
	  SF_STR(DEFAULT_THREADS_DRAFT), 0 },
	SF_OPT_HEADING("Sparse decoding from IMAGE:"),
	{ "budget", OPT_BUDGET, "B", "the image's calibrated tier sizes for budget B;\n"
	  "1: every column top tier (default)", NULL, SPARSE },
	{ "density", OPT_DENSITY, "D", "TEAL: the round(D*n) largest entries, top tier only",
	  NULL, SPARSE },
	{ "k-top", OPT_K_TOP, "F", "top tier: fraction F of each group's entries", NULL, SPARSE },
	{ "k-mid", OPT_K_MID, "F", "middle tier (2-bit codes): the next fraction F", NULL, SPARSE },
	{ "collapse", OPT_COLLAPSE, "G", "read gaps of up to G entries between runs, or auto:\n"
	  "gaps up to peak/IOPS bytes (%s bytes without IOPS),\n"
	  "off while reads are bandwidth-bound (default auto)", SF_STR(SF_SPARSE_AUTO_GAP_BYTES),
	  SPARSE },
	{ "device-peak", OPT_DEVICE_PEAK, "BPS", "the device's peak bandwidth in bytes/s for\n"
	  "auto (default: from --probe-device)", NULL, SPARSE },
	{ "device-iops", OPT_DEVICE_IOPS, "N", "the device's 4 KiB random reads/s for auto\n"
	  "(default: from --probe-device)", NULL, SPARSE },
	{ "probe-device", OPT_PROBE, NULL, "measure the device holding DIR (default .) and store\n"
	  "its figures for --collapse auto, then exit", NULL, 0 },
	{ "qd", OPT_QD, "N", "reads in flight (default %s)", SF_STR(SF_URING_DEFAULT_QD), SPARSE },
	{ "read-size", OPT_READ_SIZE, "BYTES", "bytes of one read at most, a multiple of 4096\n"
	  "(default 262144, the probe's large read)", NULL, SPARSE },
	{ "head-on-flash", OPT_HEAD_ON_FLASH, NULL, "read the output head from flash every token\n"
	  "instead of holding it in RAM (the embedding rows\n"
	  "are always read from flash)", NULL, SPARSE },
	{ "read-log", OPT_READ_LOG, "FILE", "write every read as a line 'PASS OFFSET LENGTH'\n"
	  "to FILE, to replay on the device", NULL, SPARSE },
	{ "prefetch", OPT_PREFETCH, "N", "groups whose reads start while the one before\n"
	  "computes, a read buffer each, and a mixture's next\n"
	  "layer's guessed experts; 0: none (default %s)", SF_STR(SF_SPARSE_PREFETCH), SPARSE },
	{ "prefetch-predict", OPT_PREDICT, "P", "what --prefetch reads of groups whose selection\n"
	  "is not known yet: none, residual (attn_in and ffn_in\n"
	  "from the residual stream) or all (also attn_out and\n"
	  "ffn_out from the previous token) (default residual)", NULL, SPARSE },
	{ "no-direct", OPT_NO_DIRECT, NULL, "read through the page cache (no O_DIRECT)", NULL,
	  SPARSE },
	{ "activations", OPT_ACTIVATIONS, "T", "a q8 or q4 image's products and MXFP4 experts':\n"
	  "q8, activations in 8 bits and integer dot products;\n"
	  "f32, every weight widened to f32 (the reference);\n"
	  "auto, q8 for images, f32 for MXFP4 (default auto)", NULL, 0 },
	{ "cache-policy", OPT_CACHE_POLICY, "P", "s3fifo, lru or none (default s3fifo)", NULL,
	  SPARSE },
	{ "seg-admit", OPT_SEG_ADMIT, "P", "admission probability of an entry read inside a run\n"
	  "longer than 2 (default %s)", SF_STR(SF_CACHE_DEFAULT_SEG_ADMIT), SPARSE },
	{ "ram", OPT_RAM, "BYTES", "memory budget for everything sf-run holds; the cache\n"
	  "takes what is left (default: no limit, no cache)", NULL, SPARSE },
	{ "cache-ratio", OPT_CACHE_RATIO, "R", "cache of R times the offloaded bytes", NULL,
	  SPARSE },
	{ "pin", OPT_PIN, "FILE", "SelectInfer scores (sf-coact --scores): pin the best\n"
	  "entries in RAM, read once, never evicted; give it\n"
	  "twice for a task file and a model file", NULL, SPARSE },
	{ "pin-ratio", OPT_PIN_RATIO, "G", "share of each group's entries pinned (default %s)",
	  SF_STR(SF_SELECT_DEFAULT_GAMMA), SPARSE },
	{ "pin-delta", OPT_PIN_DELTA, "D", "share taken from the task scores first, the model\n"
	  "scores filling up to G (default %s)", SF_STR(SF_SELECT_DEFAULT_LOAD_DELTA), SPARSE },
	{ "compute-ratio", OPT_COMPUTE_RATIO, "RHO", "SelectInfer: after the prompt compute only the\n"
	  "share RHO of each layer's FFN neurons, chosen from\n"
	  "--static scores and the prompt's activations", NULL, SPARSE },
	{ "static", OPT_STATIC, "FILE", "scores of the static (base) neurons (sf-coact\n"
	  "--scores)", NULL, SPARSE },
	{ "compute-delta", OPT_COMPUTE_DELTA, "D", "static neurons: the top D by static score\n"
	  "(default %s)", SF_STR(SF_SELECT_DEFAULT_COMPUTE_DELTA), SPARSE },
	{ "alpha", OPT_ALPHA, "A", "per prompt token, its top A neurons are counted\n"
	  "(default %s)", SF_STR(SF_SELECT_DEFAULT_ALPHA), SPARSE },
	{ "beta", OPT_BETA, "B", "dynamic neurons: at most B, the most counted\n"
	  "(default %s)", SF_STR(SF_SELECT_DEFAULT_BETA), SPARSE },
	{ "dense-layers", OPT_DENSE_LAYERS, "LAYERS", "layers computed whole (LAYERS in sparseflash(7):\n"
	  "e.g. none, 5:2 (the first 5 and last 2), 0-4,26-27;\n"
	  "default: the paper's 5 first and 2 last of 28, scaled,\n"
	  "at least 1)", NULL, SPARSE },
	{ "free-riders", OPT_FREE_RIDERS, NULL, "entries inside the 4 KiB pages the top tier\n"
	  "reads anyway join it (they cost no I/O)", NULL, SPARSE },
	{ "simulate", OPT_SIMULATE, NULL, "same selection and compute from RAM, without I/O",
	  NULL, SPARSE },
	SF_OPT_PROGRESS_ENTRY,
	SF_OPT_QUIET,
	SF_OPT_VERBOSE,
	SF_OPT_END,
};

static const struct sf_cmd cmd = {
	"Usage: sf-run --model MODEL [options]\n"
	"       sf-run [options] IMAGE\n"
	"       sf-run --probe-device [DIR]\n"
	"Run a language model: generate text, or measure perplexity; dense from\n"
	"a model directory or GGUF file, or sparse from an sf-pack image on flash.\n",
	options,
	"  sf-run --model models/mix4-1m -p \"In the beginning\" -n 32 --temp 0\n"
	"  sf-run --model models/mix4-1m --ppl test.txt --max-tokens 16384 | jq .ppl\n"
	"  sf-run --model qwen2.5-0.5b-instruct-q8_0.gguf -cnv\n"
	"  sf-run --model models/mix4-1m -cnv --chat-template chatml -p \"Be brief.\" -n 64\n"
	"  sf-run --budget 0.5 -p \"In the beginning\" -n 32 --temp 0 mix4-1m.sfimg\n"
	"  sf-run --density 0.4 --bench -n 64 -p Love mix4-1m.sfimg | jq .latency_seconds\n"
	"  sf-run --pin kjv.json --pin model.json --compute-ratio 0.4 --static kjv.json \\\n"
	"         --free-riders --density 0.5 -p \"In the beginning\" mix4-1m.sfimg\n",
};

static void parse_options(int argc, char **argv, struct options *o)
{
	const struct sf_opt *opt;
	struct sf_sparse_opts *so = &o->sparse;
	int c, probe = 0, selects = 0, k_mid_set = 0, pin_opt = 0, compute_opt = 0;

	*o = (struct options){
		.n_predict = SF_DEFAULT_N_PREDICT, .temp = SF_DEFAULT_TEMP, .top_p = SF_DEFAULT_TOP_P,
		.top_k = SF_DEFAULT_TOP_K, .min_p = SF_DEFAULT_MIN_P,
		.repeat_penalty = SF_DEFAULT_REPEAT_PENALTY, .repeat_last_n = SF_DEFAULT_REPEAT_LAST_N,
		.seed = SF_DEFAULT_SEED, .window = DEFAULT_WINDOW, .batch = SF_RUN_DEFAULT_BATCH,
		.threads = sf_cli_threads_default(),
		.pin_ratio = SF_SELECT_DEFAULT_GAMMA, .pin_delta = SF_SELECT_DEFAULT_LOAD_DELTA,
		.rho = -1, .compute_delta = SF_SELECT_DEFAULT_COMPUTE_DELTA,
		.alpha = SF_SELECT_DEFAULT_ALPHA, .beta = SF_SELECT_DEFAULT_BETA,
		.draft_max = SF_SPEC_DEFAULT_MAX, .draft_min = SF_SPEC_DEFAULT_MIN,
		.draft_p_min = SF_SPEC_DEFAULT_P_MIN, .draft_budget = 1.0,
		.draft_threads = DEFAULT_THREADS_DRAFT,
	};
	sf_model_opts_default(&o->mo);
	sf_sparse_opts_default(so);
	sf_cli_llama_names(argc, argv, &cmd);
	while ((c = sf_cli_getopt(argc, argv, &cmd)) != -1) {
		switch (c) {
		case 'p': o->prompt = optarg; break;
		case 'n':
			if (strcmp(optarg, "-1") == 0)
				o->n_predict = -1;
			else
				o->n_predict = (long)sf_opt_u64("--n-predict", optarg, 0, 1u << 30);
			break;
		case OPT_TEMP: o->temp = sf_opt_f64("--temp", optarg, 0.0, 100.0); break;
		case OPT_TOP_P: o->top_p = sf_opt_f64("--top-p", optarg, 0.0, 1.0); break;
		case 's': o->seed = sf_opt_u64("--seed", optarg, 0, UINT64_MAX); break;
		case 'f': o->prompt_file = sf_opt_path("--file", optarg); break;
		case OPT_TOP_K: o->top_k = (int)sf_opt_u64("--top-k", optarg, 0, INT32_MAX); break;
		case OPT_MIN_P: o->min_p = sf_opt_f64("--min-p", optarg, 0.0, 1.0); break;
		case OPT_REPEAT_PENALTY:
			o->repeat_penalty = sf_opt_f64("--repeat-penalty", optarg, 1e-3, 1e3);
			break;
		case OPT_REPEAT_LAST_N:
			o->repeat_last_n = (int)sf_opt_u64("--repeat-last-n", optarg, 0, 1u << 24);
			break;
		case OPT_IGNORE_EOS: o->ignore_eos = 1; break;
		case OPT_ECHO: o->echo = 1; break;
		case OPT_CONVERSATION: o->conversation = 1; break;
		case OPT_VERBOSE_PROMPT: o->verbose_prompt = 1; break;
		case 'b': o->batch = (int)sf_opt_u64("--batch-size", optarg, 1, SF_BATCH_MAX); break;
		case 't': o->threads = sf_opt_threads(optarg); break;
		case OPT_PPL: o->ppl_file = optarg; break;
		case OPT_MAX_TOKENS:
			o->max_tokens = sf_opt_u64("--max-tokens", optarg, 2, UINT64_MAX);
			break;
		case OPT_WINDOW: o->window = (int)sf_opt_u64("--window", optarg, 1, 1u << 24); break;
		case OPT_STATS: o->stats_file = sf_opt_path("--stats", optarg); break;
		case SF_OPT_PROGRESS: o->progress = 1; break;
		case OPT_BUDGET:
			so->select = SF_SPARSE_BUDGET;
			so->budget = sf_opt_f64("--budget", optarg, 1e-6, 1.0);
			selects++;
			break;
		case OPT_DENSITY:
			so->select = SF_SPARSE_DENSITY;
			so->density = sf_opt_f64("--density", optarg, 1e-6, 1.0);
			selects++;
			break;
		case OPT_K_TOP:
			so->select = SF_SPARSE_FRACTIONS;
			so->top = sf_opt_f64("--k-top", optarg, 0.0, 1.0);
			selects++;
			break;
		case OPT_K_MID:
			so->mid = sf_opt_f64("--k-mid", optarg, 0.0, 1.0);
			k_mid_set = 1;
			break;
		case OPT_COLLAPSE:
			so->collapse = strcmp(optarg, "auto") == 0 ? SF_SPARSE_COLLAPSE_AUTO
				: (int)sf_opt_u64("--collapse", optarg, 0, 1u << 20);
			break;
		case OPT_DEVICE_PEAK:
			so->device_peak = (double)sf_opt_u64("--device-peak", optarg, 1, UINT64_MAX);
			break;
		case OPT_DEVICE_IOPS:
			so->device_iops = (double)sf_opt_u64("--device-iops", optarg, 1, UINT64_MAX);
			break;
		case OPT_PROBE: probe = 1; break;
		case OPT_QD: so->qd = (unsigned)sf_opt_u64("--qd", optarg, 1, SF_URING_MAX_QD); break;
		case OPT_READ_SIZE:
			so->read_size = (uint32_t)sf_opt_u64("--read-size", optarg, SF_URING_ALIGN,
							     1u << 30);
			if (so->read_size % SF_URING_ALIGN)
				sf_usage_error("--read-size: %s: not a multiple of %d", optarg,
					       SF_URING_ALIGN);
			break;
		case OPT_HEAD_ON_FLASH: o->head_on_flash = 1; break;
		case OPT_READ_LOG: o->read_log = sf_opt_path("--read-log", optarg); break;
		case OPT_PREFETCH: so->prefetch = (int)sf_opt_u64("--prefetch", optarg, 0, 64); break;
		case OPT_PREDICT:
			if (sf_sparse_predict_parse(optarg, &so->predict))
				sf_usage_error("--prefetch-predict: '%s': expected none, residual or all",
					       optarg);
			break;
		case OPT_NO_DIRECT: so->buffered = 1; break;
		case OPT_ACTIVATIONS:
			if (strcmp(optarg, "auto") && strcmp(optarg, "q8") && strcmp(optarg, "f32"))
				sf_usage_error("--activations: '%s': expected auto, q8 or f32", optarg);
			so->f32_activations = !strcmp(optarg, "f32");
			o->mxfp4_int8 = !strcmp(optarg, "q8");
			break;
		case OPT_CACHE_POLICY:
			if (sf_cache_policy_parse(optarg, &so->policy))
				sf_usage_error("--cache-policy: '%s': expected s3fifo, lru or none",
					       optarg);
			break;
		case OPT_SEG_ADMIT: so->seg_admit = sf_opt_f64("--seg-admit", optarg, 0.0, 1.0); break;
		case OPT_RAM: so->ram = sf_opt_u64("--ram", optarg, 1, UINT64_MAX); break;
		case OPT_CACHE_RATIO:
			so->cache_ratio = sf_opt_f64("--cache-ratio", optarg, 0.0, 1.0);
			break;
		case OPT_SIMULATE: so->simulate = 1; break;
		case OPT_BENCH: o->bench = 1; break;
		case OPT_PIN:
			if (o->npin == 2)
				sf_usage_error("--pin: at most two files (task and model scores)");
			o->pin[o->npin++] = optarg;
			break;
		case OPT_PIN_RATIO:
			o->pin_ratio = sf_opt_f64("--pin-ratio", optarg, 0.0, 1.0);
			pin_opt = 1;
			break;
		case OPT_PIN_DELTA:
			o->pin_delta = sf_opt_f64("--pin-delta", optarg, 0.0, 1.0);
			pin_opt = 1;
			break;
		case OPT_COMPUTE_RATIO:
			o->rho = sf_opt_f64("--compute-ratio", optarg, 0.0, 1.0);
			break;
		case OPT_STATIC: o->static_file = optarg; compute_opt = 1; break;
		case OPT_COMPUTE_DELTA:
			o->compute_delta = sf_opt_f64("--compute-delta", optarg, 0.0, 1.0);
			compute_opt = 1;
			break;
		case OPT_ALPHA: o->alpha = sf_opt_f64("--alpha", optarg, 0.0, 1.0); compute_opt = 1; break;
		case OPT_BETA: o->beta = sf_opt_f64("--beta", optarg, 0.0, 1.0); compute_opt = 1; break;
		case OPT_DENSE_LAYERS: o->dense_layers = optarg; compute_opt = 1; break;
		case OPT_FREE_RIDERS: so->free_riders = 1; break;
		case OPT_DRAFT: o->draft = sf_opt_path("--draft", optarg); break;
		case OPT_DRAFT_MAX:
			o->draft_max = (int)sf_opt_u64("--draft-max", optarg, 1, SF_SPEC_MAX);
			o->draft_set = 1;
			break;
		case OPT_DRAFT_MIN:
			o->draft_min = (int)sf_opt_u64("--draft-min", optarg, 0, SF_SPEC_MAX);
			o->draft_set = 1;
			break;
		case OPT_DRAFT_P_MIN:
			o->draft_p_min = sf_opt_f64("--draft-p-min", optarg, 0.0, 1.0);
			o->draft_set = 1;
			break;
		case OPT_DRAFT_FIXED: o->draft_fixed = 1; o->draft_set = 1; break;
		case OPT_THREADS_DRAFT:
			o->draft_threads = (int)sf_opt_u64("--threads-draft", optarg, 1, SF_MAX_THREADS);
			o->draft_set = 1;
			break;
		case OPT_DRAFT_BUDGET:
			o->draft_budget = sf_opt_f64("--draft-budget", optarg, 1e-6, 1.0);
			o->draft_set = 1;
			break;
		case 'q': o->quiet = 1; break;
		case 'v': o->verbose = 1; break;
		default: sf_model_opt(&o->mo, c, optarg); break;
		}
		if ((opt = sf_cli_opt(&cmd, c)) && (opt->flags & SPARSE))
			o->sparse_set = 1;
	}
	if (probe) {
		if (optind + 1 < argc)
			sf_usage_error("unexpected argument '%s'", argv[optind + 1]);
		o->probe = optind < argc ? argv[optind] : ".";
		return;
	}
	sf_model_opts_operands(&o->mo, argc, argv);
	if (o->mo.model_dir && o->sparse_set)
		sf_usage_error("sparse decoding options need an IMAGE, not --model");
	if (selects > 1)
		sf_usage_error("--budget, --density and --k-top cannot be combined");
	if (k_mid_set && so->select != SF_SPARSE_FRACTIONS)
		sf_usage_error("--k-mid needs --k-top");
	if (so->top + so->mid > 1.0 + 1e-12)
		sf_usage_error("--k-top %g and --k-mid %g: more than every entry", so->top, so->mid);
	if (so->cache_ratio >= 0 && so->policy == SF_CACHE_NONE)
		sf_usage_error("--cache-ratio cannot be combined with --cache-policy none");
	if (pin_opt && !o->npin)
		sf_usage_error("--pin-ratio and --pin-delta need --pin");
	if (compute_opt && o->rho < 0)
		sf_usage_error("--static, --compute-delta, --alpha, --beta and --dense-layers "
			       "need --compute-ratio");
	if (o->ppl_file && (o->prompt || o->prompt_file))
		sf_usage_error("--ppl and --%s cannot be combined", o->prompt ? "prompt" : "file");
	if (o->prompt && o->prompt_file)
		sf_usage_error("--prompt and --file cannot be combined");
	if (o->mo.chat_template >= 0 && !o->conversation)
		sf_usage_error("--chat-template needs --conversation");
	if (o->conversation && (o->ppl_file || o->bench || o->echo))
		sf_usage_error("--conversation and --%s cannot be combined",
			       o->ppl_file ? "ppl" : o->bench ? "bench" : "echo");
	if (o->draft_set && !o->draft)
		sf_usage_error("--draft-max, --draft-min, --draft-p-min, --draft-fixed, "
			       "--draft-budget and --threads-draft need --draft");
	if (o->draft && (o->ppl_file || o->conversation))
		sf_usage_error("--draft and --%s cannot be combined",
			       o->ppl_file ? "ppl" : "conversation");
	if (o->draft_min > o->draft_max)
		sf_usage_error("--draft-min %d: more than --draft-max %d", o->draft_min,
			       o->draft_max);
	struct stat st;
	if (o->draft && o->draft_budget < 1.0 &&
	    ((stat(o->draft, &st) == 0 && S_ISDIR(st.st_mode)) || sf_gguf_probe(o->draft)))
		sf_usage_error("--draft-budget needs a draft image, not a model directory or GGUF");
	if (o->conversation && o->prompt_file && !strcmp(o->prompt_file, "-"))
		sf_usage_error("--conversation reads the turns from standard input: the system "
			       "message cannot come from it (-f -)");
}

/* --draft: the draft model, its KV cache and sampler, and the pass's state. */
struct draft {
	struct sf_image image;		/* a draft image */
	struct sf_sparse *sparse;
	struct sf_model model;
	struct sf_tokenizer *tok;
	struct sf_runstate state;
	struct sf_sampler sampler;	/* the run's settings, no repetition penalty */
	struct sf_spec spec;
	struct sf_pool *pool;		/* --threads-draft above 1; else NULL: the caller */
	int32_t *out;			/* (draft-max + 1) the tokens of a pass */
};

/* Everything a run holds, freed in one place. */
struct session {
	struct sf_image image;		/* IMAGE mode */
	struct sf_sparse *sparse;
	struct sf_model model;
	struct sf_tokenizer *tok;
	struct sf_pool *pool;
	struct sf_runstate state;
	int positions;		/* of the context: state.seq_len, or fewer when --ram
				 * leaves the KV cache room for no more */
	size_t used;		/* positions the KV cache holds now */
	struct sf_sampler sampler;
	double prompt_s, decode_s;
	size_t prompt_tokens, decode_tokens;
	size_t decode_steps;	/* forward passes after the prompt */
	size_t step_tokens;	/* tokens those passes gave (more than one a pass with --draft) */
	uint64_t bytes0;	/* IMAGE: bytes read when decoding began */
	double *busy_at;	/* (threads) the pool's busy seconds when decoding began */
	double *decode_busy;	/* (threads) and those decoding took, summed */
	struct draft *draft;	/* --draft; NULL: none */
	enum { STOP_NONE, STOP_EOS, STOP_EOT, STOP_LIMIT, STOP_CONTEXT, STOP_INTERRUPT, STOP_INPUT,
	       STOP_RAM } stop;
	int32_t eot;		/* --conversation: the end-of-turn token, or -1 */
	/* --conversation with gpt-oss's template: its answers' channels, the
	 * final one to the text, the others (reasoning) to standard error */
	struct sf_chat_channels channels;
	int harmony, reasoning_open;
	uint64_t text_bytes;	/* written to text so far */
	FILE *text;		/* the generated text: stdout, or stderr with --stats - */
	int text_open;		/* text written that does not end with a newline */
	json_t *ppl;		/* --ppl --bench: the perplexity figures */
	struct sf_outfile read_log;	/* --read-log; f NULL: none */
};

/* A full context's stop: the model's or -c's, or where --ram left the KV cache. */
static int context_stop(const struct session *S)
{
	return S->positions < S->state.seq_len ? STOP_RAM : STOP_CONTEXT;
}

static void log_read(void *ctx, uint64_t pass, uint64_t offset, uint32_t len)
{
	fprintf(ctx, "%llu %llu %u\n", (unsigned long long)pass, (unsigned long long)offset, len);
}

static void draft_free(struct draft *D)
{
	if (!D)
		return;
	sf_sparse_close(D->sparse);
	sf_spec_free(&D->spec);
	sf_sampler_free(&D->sampler);
	sf_state_free(&D->state);
	sf_pool_destroy(D->pool);
	sf_tokenizer_close(D->tok);
	sf_model_close(&D->model);
	sf_image_close(&D->image);
	free(D->out);
	free(D);
}

static void session_free(struct session *S)
{
	draft_free(S->draft);
	sf_sparse_close(S->sparse);
	if (S->read_log.f)
		sf_outfile_abort(&S->read_log);
	sf_sampler_free(&S->sampler);
	sf_state_free(&S->state);
	sf_pool_destroy(S->pool);
	free(S->busy_at);
	free(S->decode_busy);
	sf_tokenizer_close(S->tok);
	sf_model_close(&S->model);
	sf_image_close(&S->image);
	json_decref(S->ppl);
}

/* The model and tokenizer of --model MODEL or of IMAGE. With --ram the
 * image's resident region is read only when it fits: a budget it alone
 * exceeds is refused on the decoder's figures, taken without it, where
 * reading it would meet a memory cgroup of that size first (the kernel
 * kills the process, no message). */
static int open_model(struct session *S, const struct options *o, struct sf_err *e)
{
	unsigned flags = o->sparse.simulate ? 0 : SF_IMAGE_OPEN_EMBED_ON_FLASH |
		(o->head_on_flash ? SF_IMAGE_OPEN_HEAD_ON_FLASH : 0);
	int ret;

	if (o->mo.image && o->sparse.ram)
		flags |= SF_IMAGE_OPEN_DEFER_RESIDENT;
	if ((ret = sf_cli_open_model(o->mo.model_dir, o->mo.image, flags, &S->image, &S->model,
				     &S->tok, e)))
		return ret;
	if (o->mo.image && S->image.resident_unread <= o->sparse.ram)
		ret = sf_image_load_resident(&S->image, e);
	return ret;
}

/* The pinning order of --pin's score files: a task file and a model file
 * in either order, or one of them alone. */
static int read_pin(struct session *S, const struct options *o, struct sf_select_load *pin,
		    struct sf_err *e)
{
	struct sf_scores sc[2] = { 0 };
	const struct sf_scores *task = NULL, *model = NULL;
	const char *tname = NULL, *mname = NULL;
	int ret = 0;

	for (int i = 0; i < o->npin && !ret; i++) {
		if ((ret = sf_scores_read(&sc[i], o->pin[i], &S->image.fingerprint,
					  S->image.path, &S->image.cfg, e)))
			break;
		const char **name = sc[i].is_task ? &tname : &mname;
		if (*name) {
			ret = sf_err_set(e, SF_EMISMATCH, "%s: --pin: a second %s score file (%s is "
					 "one): expected one task and one model file", o->pin[i],
					 sc[i].is_task ? "task" : "model", *name);
			break;
		}
		*name = o->pin[i];
		*(sc[i].is_task ? &task : &model) = &sc[i];
	}
	if (!ret)
		ret = sf_select_load_plan(pin, &S->image.cfg, task, tname, model, mname, o->pin_ratio,
					  o->pin_delta, e);
	sf_scores_free(&sc[0]);
	sf_scores_free(&sc[1]);
	return ret;
}

/* -v: the top tier's dtype (sf-pack --dtype), which budgets count bytes of. */
static void top_dtype_line(const struct sf_image *img)
{
	int dt = sf_image_top_dtype(img);

	if (dt >= 0)
		fprintf(stderr, "%s: top tier %s%s; budgets in its bytes\n", sf_progname,
			sf_dtype_name((enum sf_dtype)dt), sf_dtype_is_block((enum sf_dtype)dt) ?
			" (blocks of 32 rows, an f16 scale each)" : "");
}

/* Selective computation's options: the dense layers of --dense-layers (or
 * the default) and the --static scores. */
static int compute_opts(struct session *S, const struct options *o,
			struct sf_select_compute_opts *co, uint8_t **dense, struct sf_scores *stat,
			struct sf_err *e)
{
	int L = S->image.cfg.n_layers, ret;

	sf_select_compute_defaults(co, o->rho);
	co->delta = o->compute_delta;
	co->alpha = o->alpha;
	co->beta = o->beta;
	if (!(*dense = calloc((size_t)L, 1)))
		return sf_err_set(e, -ENOMEM, "--dense-layers: %s", strerror(ENOMEM));
	if (o->dense_layers) {
		if ((ret = sf_select_dense_parse(o->dense_layers, L, *dense, e)))
			return ret;
	} else {
		sf_select_dense_default(L, *dense);
	}
	co->dense = *dense;
	if (o->static_file &&
	    (ret = sf_scores_read(stat, o->static_file, &S->image.fingerprint, S->image.path,
				  &S->image.cfg, e)))
		return ret;
	return 0;
}

/* The sparse decoder on IMAGE, its device peak for --collapse auto from
 * --device-peak and --device-iops or the --probe-device file. */
static int open_sparse(struct session *S, const struct options *o, uint64_t tokens,
		       struct sf_err *e)
{
	struct sf_sparse_opts so = o->sparse;
	struct sf_select_load pin = { 0 };
	struct sf_select_compute_opts co;
	struct sf_scores stat = { 0 };
	struct sf_sparse_memory mem;
	uint8_t *dense = NULL;
	double peak = 0, iops = 0, buffered = 0;
	int ret;

	/* -c and --ppl's windows need every position; else the least */
	sf_cli_kv_opts(&so, &S->state, &S->model.cfg, o->mo.ctx || o->ppl_file ? S->state.seq_len
			: SF_RUN_KV_LEAST < S->state.seq_len ? SF_RUN_KV_LEAST : S->state.seq_len);
	so.max_tokens = tokens;
	so.tokens = S->state.batch;
	if ((ret = sf_device_load(o->mo.image, &peak, &iops, &buffered, e)) < 0)
		return ret;
	/* O_DIRECT whatever the probe found for the page cache: it times reads
	 * of a file it has just written, which a host may serve from its own
	 * memory, so the figure can promise a page cache that a cold image
	 * never has (issue 31: a 7B image read at half speed); --no-direct
	 * asks for it */
	if (o->verbose && !so.simulate && !so.buffered && buffered > peak && peak > 0)
		fprintf(stderr, "%s: reads with O_DIRECT, though --probe-device timed the page cache "
			"at %.0f MB/s against %.0f on the file it had just written "
			"(--no-direct reads through it)\n", sf_progname, buffered / 1e6, peak / 1e6);
	/* the options win over the stored figures */
	so.device_peak = so.device_peak > 0 ? so.device_peak : peak;
	so.device_iops = so.device_iops > 0 ? so.device_iops : iops;
	if (o->npin && (ret = read_pin(S, o, &pin, e)))
		goto out;
	so.pin = o->npin ? &pin : NULL;
	if (o->rho >= 0 && (ret = compute_opts(S, o, &co, &dense, &stat, e)))
		goto out;
	so.compute = o->rho >= 0 ? &co : NULL;
	so.compute_static = o->static_file ? &stat : NULL;
	so.compute_static_name = o->static_file;
	if (o->read_log) {
		const char *inputs[] = { o->mo.image, NULL };
		if ((ret = sf_outfile_open(&S->read_log, o->read_log, 0, inputs, e)))
			goto out;
		so.on_read = log_read;
		so.on_read_ctx = S->read_log.f;
	}
	if ((ret = sf_sparse_open(&S->sparse, &S->image, &S->model, S->pool, &so, e)))
		goto out;
	S->state.exec = sf_sparse_exec(S->sparse);
	sf_sparse_memory(S->sparse, &mem);
	S->positions = (int)mem.kv_positions;
	if (o->verbose) {
		fprintf(stderr, "%s: reads: %s%s, qd %u, at most %u bytes, %d groups ahead "
			"(predict %s); collapse %s\n"
			"%s: memory: %llu bytes: process %llu, resident %llu, state %llu, "
			"KV cache %llu (%u positions, %s/%s), buffers %llu, pinned %llu, held "
			"groups %llu, cache %llu, simulate %llu; offloaded %llu\n",
			sf_progname, sf_sparse_backend(S->sparse),
			so.buffered ? " (page cache)" : so.simulate ? "" : " (O_DIRECT)",
			so.qd ? so.qd : SF_URING_DEFAULT_QD,
			so.read_size ? so.read_size : SF_SPARSE_READ_SIZE, sf_sparse_prefetch(S->sparse),
			sf_sparse_predict_name(so.predict), sf_sparse_collapse_desc(S->sparse),
			sf_progname, (unsigned long long)mem.total, (unsigned long long)mem.process,
			(unsigned long long)mem.resident, (unsigned long long)mem.state,
			(unsigned long long)mem.kv, mem.kv_positions, sf_kv_type_name(S->state.kv_k),
			sf_kv_type_name(S->state.kv_v),
			(unsigned long long)mem.buffers, (unsigned long long)mem.pinned,
			(unsigned long long)mem.slabs, (unsigned long long)mem.cache,
			(unsigned long long)mem.simulate, (unsigned long long)mem.offloaded);
		top_dtype_line(&S->image);
		if (S->image.experts.count)
			fprintf(stderr, "%s: experts: %d a layer, %d a token, records of %llu bytes "
				"read whole; %u held in RAM (%llu bytes)\n", sf_progname,
				S->image.experts.count, S->image.cfg.n_experts_used,
				(unsigned long long)S->image.experts.record_bytes, mem.expert_slots,
				(unsigned long long)mem.experts);
		if (!so.simulate && so.prefetch && !sf_sparse_prefetch(S->sparse))
			fprintf(stderr, "%s: no read-ahead: --ram %llu cannot hold its buffers\n",
				sf_progname, (unsigned long long)so.ram);
	}
out:
	sf_select_load_free(&pin);
	sf_scores_free(&stat);
	free(dense);
	return ret;
}

/* After a forward pass: the sparse decoder's read error, or the pass's
 * own (a token beyond the embedding, a non-finite value). */
static int sparse_failed(const struct session *S, struct sf_err *e)
{
	int ret = S->sparse ? sf_sparse_error(S->sparse, e) : 0;
	return ret ? ret : sf_state_error(&S->state, e);
}

/* The draft's tokenizer against the model's: the same vocabulary, the
 * same special tokens, every piece spelled alike; and as many logits. */
static int same_tokenizer(const struct session *S, const struct options *o, struct sf_err *e)
{
	const struct sf_tokenizer *a = S->tok, *b = S->draft->tok;
	const char *name = o->mo.model_dir ? o->mo.model_dir : o->mo.image;
	int n = sf_tokenizer_vocab_size(a);

	if (sf_tokenizer_vocab_size(b) != n)
		return sf_err_set(e, SF_EMISMATCH, "%s: the draft's tokenizer differs from %s's: "
				  "%d tokens against %d", o->draft, name, sf_tokenizer_vocab_size(b), n);
	if (sf_tokenizer_bos(a) != sf_tokenizer_bos(b) || sf_tokenizer_eos(a) != sf_tokenizer_eos(b))
		return sf_err_set(e, SF_EMISMATCH, "%s: the draft's tokenizer differs from %s's: "
				  "BOS %d, EOS %d against %d, %d", o->draft, name,
				  sf_tokenizer_bos(b), sf_tokenizer_eos(b), sf_tokenizer_bos(a),
				  sf_tokenizer_eos(a));
	for (int32_t id = 0; id < n; id++) {
		size_t la, lb;
		const char *pa = sf_tokenizer_piece(a, id, &la), *pb = sf_tokenizer_piece(b, id, &lb);
		if (!pa != !pb || (pa && (la != lb || memcmp(pa, pb, la))))
			return sf_err_set(e, SF_EMISMATCH, "%s: the draft's tokenizer differs from "
					  "%s's: token %d is '%s' against '%s'", o->draft, name, id,
					  pb ? pb : "", pa ? pa : "");
	}
	if (S->draft->model.cfg.vocab_size != S->model.cfg.vocab_size)
		return sf_err_set(e, SF_EMISMATCH, "%s: the draft has %d logits, %s %d", o->draft,
				  S->draft->model.cfg.vocab_size, name, S->model.cfg.vocab_size);
	return 0;
}

/* --draft PATH: a model directory or GGUF file in RAM, or an image decoded at
 * --draft-budget (no cache, no RAM limit), with ctx positions; refused
 * when its tokenizer is not the model's. */
static int open_draft(struct session *S, const struct options *o, int ctx, struct sf_err *e)
{
	struct draft *D = calloc(1, sizeof(*D));
	struct stat st;
	int ret;

	if (!(S->draft = D))
		return sf_err_set(e, -ENOMEM, "--draft: %s", strerror(ENOMEM));
	if ((stat(o->draft, &st) == 0 && S_ISDIR(st.st_mode)) || sf_gguf_probe(o->draft)) {
		if ((ret = sf_model_open(&D->model, o->draft, e)) ||
		    (ret = sf_tokenizer_open_model(&D->tok, o->draft, D->model.cfg.vocab_size, e)))
			return ret;
	} else if ((ret = sf_image_open_flags(&D->image, o->draft, sf_cli_image_flags(
					      o->sparse.simulate ? 0 : SF_IMAGE_OPEN_EMBED_ON_FLASH), e)) ||
		   (ret = sf_image_model(&D->image, &D->model, e)) ||
		   (ret = sf_tokenizer_open_image(&D->tok, &D->image, e))) {
		return ret;
	}
	if ((ret = same_tokenizer(S, o, e)))
		return ret;
	if (ctx > D->model.cfg.max_seq_len)
		return sf_err_set(e, -EINVAL, "%s: the draft supports at most %d positions, the "
				  "context is %d: give --ctx-size", o->draft,
				  D->model.cfg.max_seq_len, ctx);
	int batch = o->batch < ctx ? o->batch : ctx;
	struct sf_state_opts so_state = { .seq_len = ctx, .batch = batch, .kv_k = o->mo.kv_k,
					  .kv_v = o->mo.kv_v };
	if ((ret = sf_state_init_opts(&D->state, &D->model.cfg, &so_state, e)) ||
	    (ret = sf_sampler_init(&D->sampler, D->model.cfg.vocab_size, (float)o->temp,
				   (float)o->top_p, o->seed ^ 0x5eed5eedu, e)) ||
	    (ret = sf_spec_init(&D->spec, S->model.cfg.vocab_size, o->draft_max, o->draft_min,
				o->draft_p_min, !o->draft_fixed, e)))
		return ret;
	D->sampler.top_k = o->top_k;
	D->sampler.min_p = (float)o->min_p;
	D->state.mxfp4_int8 = o->mxfp4_int8;
	if (o->draft_threads > 1 && (ret = sf_pool_create(&D->pool, o->draft_threads)))
		return sf_err_set(e, ret, "--threads-draft %d: %s", o->draft_threads,
				  sf_strerror(ret));
	D->state.pool = D->pool;
	if (!(D->out = malloc(((size_t)o->draft_max + 1) * sizeof(*D->out))))
		return sf_err_set(e, -ENOMEM, "--draft: %s", strerror(ENOMEM));
	if (D->image.path) {
		struct sf_sparse_opts so;
		sf_sparse_opts_default(&so);
		so.budget = o->draft_budget;
		so.simulate = o->sparse.simulate;
		so.buffered = o->sparse.buffered;
		so.device_peak = o->sparse.device_peak;
		so.device_iops = o->sparse.device_iops;
		so.tokens = D->state.batch;
		sf_cli_kv_opts(&so, &D->state, &D->model.cfg, ctx);
		so.max_tokens = (uint64_t)ctx;
		if ((ret = sf_sparse_open(&D->sparse, &D->image, &D->model, D->pool, &so, e)))
			return ret;
		D->state.exec = sf_sparse_exec(D->sparse);
	}
	if (o->verbose && D->image.path)
		fprintf(stderr, "%s: draft %s: image at budget %g\n", sf_progname, o->draft,
			o->draft_budget);
	if (o->verbose)
		fprintf(stderr, "%s: draft %s: up to %d tokens a pass (%s), at least %d, p-min %g\n",
			sf_progname, o->draft, o->draft_max, o->draft_fixed ? "fixed" : "adaptive",
			o->draft_min, o->draft_p_min);
	return 0;
}

static int session_open(struct session *S, const struct options *o, int ctx, struct sf_err *e)
{
	int ret;

	if ((ret = open_model(S, o, e)))
		return ret;
	if (ctx == 0)
		ctx = sf_config_default_ctx(&S->model.cfg);
	if (ctx > S->model.cfg.max_seq_len && o->ppl_file)	/* ctx is the window's */
		return sf_err_set(e, -EINVAL, "--window %d: a window takes %d positions, the model "
				  "supports at most %d", o->window, ctx, S->model.cfg.max_seq_len);
	if (ctx > S->model.cfg.max_seq_len)
		return sf_err_set(e, -EINVAL, "--ctx-size %d: the model supports at most %d "
				  "positions", ctx, S->model.cfg.max_seq_len);
	if ((ret = sf_pool_create(&S->pool, o->threads)))
		return sf_err_set(e, ret, "thread pool of %d: %s", o->threads, sf_strerror(ret));
	if (!(S->busy_at = calloc((size_t)o->threads, sizeof(double))) ||
	    !(S->decode_busy = calloc((size_t)o->threads, sizeof(double))))
		return sf_err_set(e, -ENOMEM, "thread pool of %d: %s", o->threads, strerror(ENOMEM));
	/* --draft: a pass verifies a token and up to --draft-max proposals */
	int batch = o->draft && o->draft_max + 1 > o->batch ? o->draft_max + 1 : o->batch;
	batch = batch < ctx ? batch : ctx;
	/* every token's logits for --ppl and --draft's checks; else the last's */
	struct sf_state_opts so_state = { .seq_len = ctx, .batch = batch, .kv_k = o->mo.kv_k,
					  .kv_v = o->mo.kv_v, .last_logits = !o->ppl_file && !o->draft };
	if ((ret = sf_state_init_opts(&S->state, &S->model.cfg, &so_state, e)) ||
	    (ret = sf_sampler_init(&S->sampler, S->model.cfg.vocab_size, (float)o->temp,
				   (float)o->top_p, o->seed, e)) ||
	    (ret = sf_sampler_set_penalty(&S->sampler, (float)o->repeat_penalty,
					  o->repeat_last_n, e)))
		return ret;
	S->sampler.top_k = o->top_k;
	S->sampler.min_p = (float)o->min_p;
	S->state.pool = S->pool;
	S->state.mxfp4_int8 = o->mxfp4_int8;
	S->positions = ctx;
	if (o->mo.image && (ret = open_sparse(S, o, o->ppl_file ? (o->max_tokens &&
			 o->max_tokens < DEFAULT_LATENCIES ? o->max_tokens : DEFAULT_LATENCIES)
			 : (uint64_t)ctx, e)))
		return ret;
	if (o->draft && (ret = open_draft(S, o, ctx, e)))
		return ret;
	if (o->verbose) {
		sf_cli_model_summary(o->mo.model_dir ? o->mo.model_dir : o->mo.image, &S->model, ctx,
				     o->threads);
		if (o->mo.model_dir)
			fprintf(stderr, "%s: memory: resident %llu bytes (the whole model, "
				"%s), flash 0\n", sf_progname,
				(unsigned long long)sf_model_bytes(&S->model),
				S->model.converted ? "mapped, and a GGUF's blocks converted in RAM"
						   : "mapped");
	}
	return 0;
}

/* Reads all of standard input as the prompt; one final newline, which
 * `echo` adds, is not part of it. At a terminal a hint says so first
 * (unless quiet), and the input is read with read(2) itself so that
 * Ctrl-D after text on a line (a read not ended by a newline) ends the
 * prompt as Ctrl-D on an empty line does, not only a second one. NULL
 * with e set on failure. */
static char *read_stdin_prompt(size_t *len, int quiet, struct sf_err *e)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	int tty = isatty(STDIN_FILENO), failed = 0;

	if (tty && !quiet)
		fprintf(stderr, "%s: reading the prompt from the terminal; end it with Ctrl-D "
			"(or give -p TEXT or -f FILE)\n", sf_progname);
	while (buf) {
		size_t got;
		if (tty) {
			ssize_t r;
			while ((r = read(STDIN_FILENO, buf + n, cap - n - 1)) < 0 && errno == EINTR)
				;
			failed = r < 0;
			got = r > 0 ? (size_t)r : 0;
		} else {
			got = fread(buf + n, 1, cap - n - 1, stdin);
			failed = ferror(stdin);
		}
		n += got;
		if (got == 0 || failed || (tty && buf[n - 1] != '\n'))
			break;
		if (n + 1 == cap) {
			if (cap >= MAX_PROMPT_BYTES) {
				sf_err_set(e, -EFBIG, "standard input: prompt longer than %u bytes",
					   MAX_PROMPT_BYTES);
				free(buf);
				return NULL;
			}
			char *p = realloc(buf, cap * 2);
			if (!p)
				break;
			buf = p;
			cap *= 2;
		}
	}
	if (!buf || failed) {
		sf_err_set(e, -EIO, "standard input: %s", buf ? strerror(errno) : strerror(ENOMEM));
		free(buf);
		return NULL;
	}
	if (n && buf[n - 1] == '\n')
		n--;
	buf[n] = '\0';
	*len = n;
	return buf;
}

static int write_out(struct session *S, const char *p, size_t n, struct sf_err *e)
{
	if ((n && fwrite(p, 1, n, S->text) != n) || fflush(S->text))
		return sf_err_set(e, -EIO, "write error on standard %s: %s",
				  S->text == stdout ? "output" : "error", strerror(errno));
	if (n)
		S->text_open = p[n - 1] != '\n';
	S->text_bytes += n;
	return 0;
}

static int emit(struct session *S, struct sf_detok *d, int32_t id, struct sf_err *e)
{
	const char *p;
	size_t n;
	int ret = sf_detok_push(d, id, &p, &n);

	if (ret)
		return sf_err_set(e, ret, "generation: %s", sf_strerror(ret));
	if (!S->harmony)
		return write_out(S, p, n, e);
	switch (sf_chat_channels_push(&S->channels, id, p, n)) {
	case SF_CHAT_PART_ANSWER:
		return write_out(S, p, n, e);
	case SF_CHAT_PART_REASONING:
		fwrite(p, 1, n, stderr);
		S->reasoning_open |= n > 0 && p[n - 1] != '\n';
		return 0;
	default:
		/* a marker or a name: a reasoning channel's text ends its line */
		if (S->reasoning_open)
			fputc('\n', stderr);
		S->reasoning_open = 0;
		return 0;
	}
}

/* End of text: the tokenizer's EOS or any of config.json's eos_token_id. */
static int is_eos(const struct session *S, int32_t token)
{
	return sf_cli_is_eos(&S->model, S->tok, token);
}

/* The prompt's text: -p, the file of -f, or standard input (not with
 * --conversation, whose turns come from there: then NULL when neither
 * is given). One final newline of a file or standard input is dropped.
 * *buf is what to free. */
static int prompt_text(const struct options *o, char **buf, const char **text, size_t *len,
		       struct sf_err *e)
{
	int ret;

	*buf = NULL;
	*text = o->prompt;
	*len = o->prompt ? strlen(o->prompt) : 0;
	if (o->prompt_file && strcmp(o->prompt_file, "-") != 0) {
		if ((ret = sf_file_read(o->prompt_file, MAX_PROMPT_BYTES, 0, buf, len, e)))
			return ret;
		if (*len && (*buf)[*len - 1] == '\n')
			(*buf)[--*len] = '\0';
		*text = *buf;
	}
	if (!*text && !o->conversation && !(*text = *buf = read_stdin_prompt(len, o->quiet, e)))
		return e->code;
	return 0;
}

/* --verbose-prompt, as llama.cpp's: the text as fed (C escapes), then a
 * line per token, its id and its piece as tokenizer.json spells it. */
static void print_prompt(const struct session *S, const char *label, const char *text,
			 size_t len, const int32_t *ids, size_t n)
{
	fprintf(stderr, "%s: %s: %zu %s: \"", sf_progname, label, n, sf_plural(n, "token", "tokens"));
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)text[i];
		if (c == '\n')
			fputs("\\n", stderr);
		else if (c == '\t')
			fputs("\\t", stderr);
		else if (c == '"' || c == '\\')
			fprintf(stderr, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			fprintf(stderr, "\\x%02x", c);
		else
			fputc(c, stderr);
	}
	fputs("\"\n", stderr);
	for (size_t i = 0; i < n; i++) {
		const char *p = sf_tokenizer_piece(S->tok, ids[i], NULL);
		fprintf(stderr, "%6d -> '%s'\n", ids[i], p ? p : "");
	}
}

/* Token ids, grown one at a time. */
struct ids {
	int32_t *v;
	size_t n, cap;
};

static int ids_add(struct ids *a, int32_t id, struct sf_err *e)
{
	if (a->n == a->cap) {
		size_t cap = a->cap ? 2 * a->cap : 256;
		int32_t *v = realloc(a->v, cap * sizeof(*v));
		if (!v)
			return sf_err_set(e, -ENOMEM, "generation: %s", strerror(ENOMEM));
		a->v = v;
		a->cap = cap;
	}
	a->v[a->n++] = id;
	return 0;
}

/* --draft, after the prompt's logits: each pass feeds the last token and
 * the draft's proposals, and emits the tokens the target accepts and its
 * own after them, stopping as run() does. text holds the prompt (n
 * tokens) and grows with the generated ones. */
static int speculate(struct session *S, const struct options *o, float *logits, size_t *pos,
		     struct ids *text, struct sf_detok *d, struct sf_err *e)
{
	struct draft *D = S->draft;
	long limit = o->n_predict < 0 ? (long)S->positions : o->n_predict, made = 0;
	int limit_stop = o->n_predict < 0 ? STOP_CONTEXT : STOP_LIMIT, ret = 0, m = 1;
	const struct sf_spec_model target = { &S->model, &S->state, &S->sampler },
		draft = { &D->model, &D->state, &D->sampler };
	int32_t *out = D->out;

	if (limit == 0)
		return 0;	/* run() said STOP_LIMIT */
	out[0] = sf_sample(&S->sampler, logits);
	sf_sampler_accept(&S->sampler, out[0]);
	while (!ret && !sf_cli_interrupted()) {
		/* the tokens of the last pass */
		for (int i = 0; i < m; i++) {
			int32_t t = out[i];
			if ((is_eos(S, t) || t == S->eot) && !o->ignore_eos) {
				S->stop = is_eos(S, t) ? STOP_EOS : STOP_EOT;
				return 0;
			}
			made++;
			S->decode_tokens++;
			if ((ret = ids_add(text, t, e)) || (!o->bench && (ret = emit(S, d, t, e))))
				return ret;
		}
		if (*pos == (size_t)S->positions) {
			S->stop = context_stop(S);
			break;
		}
		if (made == limit) {
			S->stop = limit_stop;
			break;
		}
		/* text[*pos] is the token to feed: proposals after it, as many as
		 * the tokens wanted and the context leave room for */
		long k = limit - made - 1;
		if (k > (long)S->positions - 1 - (long)*pos)
			k = (long)S->positions - 1 - (long)*pos;
		m = sf_spec_step(&D->spec, &target, &draft, text->v, (int)*pos, (int)k, out, e);
		if (m < 0 || (D->sparse && (ret = sf_sparse_error(D->sparse, e))) ||
		    (ret = sparse_failed(S, e)))
			return m < 0 ? m : ret;
		*pos += (size_t)m;
		S->decode_steps++;
		S->step_tokens += (size_t)m;
	}
	return ret;
}

/* The pool's busy seconds since decoding began, added to decode_busy. */
static void add_busy(struct session *S)
{
	int n = sf_pool_size(S->pool);
	double now[n];
	sf_pool_busy(S->pool, now);
	for (int i = 0; i < n; i++)
		S->decode_busy[i] += now[i] - S->busy_at[i];
}

/* Feeds the n tokens at positions *pos on, in passes of up to the
 * state's batch, the last of which gives the first sample; then samples
 * up to -n tokens, written through d to the text, each one more decode
 * step, until the end-of-text (or end-of-turn) token, -n, a full context
 * or an interrupt; *pos advances past every token fed. A turn of a
 * conversation (turn set) feeds its whole prompt even when interrupted,
 * and the answer's last token too, so that the KV cache holds the whole
 * exchange; answer, when not NULL, receives the tokens sampled (the stop
 * token not). */
static int run(struct session *S, const struct options *o, const int32_t *tokens, size_t n,
	       size_t *pos, int turn, struct sf_detok *d, struct ids *answer, struct sf_err *e)
{
	long limit = o->n_predict < 0 ? (long)S->positions : o->n_predict, made = 0;
	int limit_stop = o->n_predict < 0 ? STOP_CONTEXT : STOP_LIMIT, ret = 0;
	double t0 = sf_now();
	float *logits = NULL;

	if (S->sparse)	/* selective computation: the prompt is the prefill */
		sf_sparse_prefill(S->sparse, n);
	for (size_t i = 0; i < n; i++)	/* --repeat-penalty looks back on the prompt too */
		sf_sampler_accept(&S->sampler, tokens[i]);
	size_t at = 0;
	/* -n 0 still runs the prompt, as llama.cpp's does (its timings are
	 * the prompt's), but not the head */
	int batch = o->batch < S->state.batch ? o->batch : S->state.batch;	/* not --draft's */
	while (at < n && !ret && (turn || !sf_cli_interrupted())) {
		int T = n - at < (size_t)batch ? (int)(n - at) : batch;
		S->state.skip_logits = at + (size_t)T < n || (limit == 0 && !turn);
		logits = sf_forward_batch(&S->model, &S->state, tokens + at, T, (int)(*pos + at), 0);
		ret = sparse_failed(S, e);
		at += (size_t)T;
	}
	*pos += at;
	double t1 = sf_now();
	S->prompt_tokens += at;
	S->stop = limit == 0 ? STOP_LIMIT : STOP_NONE;
	S->bytes0 = S->sparse ? sf_sparse_bytes_moved(S->sparse) : 0;
	sf_pool_busy(S->pool, S->busy_at);
	if (S->draft && logits && !ret) {
		struct ids text = { 0 };
		for (size_t i = 0; i < n && !ret; i++)
			ret = ids_add(&text, tokens[i], e);
		if (!ret)
			ret = speculate(S, o, logits, pos, &text, d, e);
		free(text.v);
		logits = NULL;
	}
	while (logits && !ret && !sf_cli_interrupted()) {
		if (made == limit) {
			S->stop = limit_stop;
			break;
		}
		int32_t token = sf_sample(&S->sampler, logits);
		sf_sampler_accept(&S->sampler, token);
		if ((is_eos(S, token) || token == S->eot) && !o->ignore_eos) {
			S->stop = is_eos(S, token) ? STOP_EOS : STOP_EOT;
			break;
		}
		made++;
		S->decode_tokens++;
		if ((answer && (ret = ids_add(answer, token, e))) ||
		    (!o->bench && (ret = emit(S, d, token, e))))
			break;
		if (*pos == (size_t)S->positions) {
			S->stop = context_stop(S);
			break;
		}
		if (made == limit && !turn) {	/* no pass for a token nobody reads */
			S->stop = limit_stop;
			break;
		}
		logits = sf_forward(&S->model, &S->state, token, (int)(*pos)++);
		if ((ret = sparse_failed(S, e)))
			break;
		S->decode_steps++;
		S->step_tokens++;
	}
	S->prompt_s += t1 - t0;
	S->decode_s += sf_now() - t1;
	add_busy(S);
	S->used = *pos;
	return ret;
}

/* The end of the text: what the decoder held back, then a newline so
 * that the shell's prompt or the next line starts on a line of its own
 * and a file is a text file. */
static int end_text(struct session *S, struct sf_detok *d, int bench, struct sf_err *e)
{
	const char *p;
	size_t n;
	int ret = 0;

	if (!bench && (ret = sf_detok_finish(d, &p, &n)))
		sf_err_set(e, ret, "generation: %s", sf_strerror(ret));
	else if (!bench)
		ret = write_out(S, p, n, e);
	if (!ret && S->text_open)
		ret = write_out(S, "\n", 1, e);
	return ret;
}

static int generate(struct session *S, const struct options *o, struct sf_err *e)
{
	char *buf;
	const char *text;
	size_t text_len, np = 0, pos = 0;
	int32_t *prompt = NULL;
	struct sf_detok detok;
	int ret;

	if ((ret = prompt_text(o, &buf, &text, &text_len, e)))
		return ret;
	ret = sf_tokenizer_encode(S->tok, text, text_len, 1, &prompt, &np, e);
	if (!ret && o->verbose_prompt)
		print_prompt(S, "prompt", text, text_len, prompt, np);
	free(buf);
	if (ret)
		return ret;
	if (np == 0)
		ret = sf_err_set(e, -EINVAL, "prompt: empty, and the tokenizer adds no BOS token "
				 "to start from");
	else if (np > (size_t)S->positions)
		ret = sf_err_set(e, -EINVAL, "prompt: %zu tokens do not fit the context of %d %s%s",
				 np, S->positions,
				 sf_plural((unsigned long long)S->positions, "position", "positions"),
				 S->positions < S->state.seq_len ? ", all --ram leaves the KV cache "
				 "room for" : "");
	if (ret) {
		free(prompt);
		return ret;
	}

	/* The prompt goes through the detokenizer even when not echoed: how
	 * the first generated piece decodes depends on what precedes it. */
	sf_detok_init(&detok, S->tok, SF_DECODE_SKIP_SPECIAL);
	for (size_t i = 0; i < np && !ret; i++) {
		const char *p;
		size_t n;
		if ((ret = sf_detok_push(&detok, prompt[i], &p, &n)))
			sf_err_set(e, ret, "generation: %s", sf_strerror(ret));
		else if (o->echo && !o->bench)
			ret = write_out(S, p, n, e);
	}
	/* what the prompt still holds back is the prompt's: not given out */
	if (!ret && !(o->echo && !o->bench) && (ret = sf_detok_mark(&detok)))
		sf_err_set(e, ret, "generation: %s", sf_strerror(ret));
	sf_cli_interruptible(1);	/* Ctrl-C: the text so far, the timings */
	if (!ret)
		ret = run(S, o, prompt, np, &pos, 0, &detok, NULL, e);
	if (!ret)
		ret = end_text(S, &detok, o->bench, e);
	if (sf_cli_interrupted())
		S->stop = STOP_INTERRUPT;
	sf_detok_free(&detok);
	free(prompt);
	return ret;
}

// --- conversation

/* Standard input line by line through poll(2) and read(2): poll is
 * never restarted after a signal, so Ctrl-C at the prompt is seen at
 * once. */
struct input {
	char *line;		/* the turn read, NUL-terminated */
	size_t len, cap;
	char buf[4096];		/* read ahead */
	size_t have, at;
	int eof;
};

static int input_add(struct input *in, char c, struct sf_err *e)
{
	if (in->len + 2 > in->cap) {
		if (in->cap >= MAX_PROMPT_BYTES)
			return sf_err_set(e, -EFBIG, "standard input: a turn longer than %u bytes",
					  MAX_PROMPT_BYTES);
		size_t cap = in->cap ? 2 * in->cap : 256;
		char *p = realloc(in->line, cap);
		if (!p)
			return sf_err_set(e, -ENOMEM, "standard input: %s", strerror(ENOMEM));
		in->line = p;
		in->cap = cap;
	}
	in->line[in->len++] = c;
	in->line[in->len] = '\0';
	return 0;
}

/* The next turn: a line, joined with the next one (by a newline) while
 * it ends with a backslash. 1, 0 at the end of the input, -EINTR on a
 * signal while waiting, or an error. */
static int read_turn(struct input *in, struct sf_err *e)
{
	int ret;

	in->len = 0;
	if ((ret = input_add(in, '\0', e)))	/* a string even when the line is empty */
		return ret;
	in->len = 0;
	for (;;) {
		while (in->at < in->have) {
			char c = in->buf[in->at++];
			if (c == '\n' && !(in->len && in->line[in->len - 1] == '\\'))
				return 1;
			if (c == '\n')
				in->line[in->len - 1] = '\n';
			else if ((ret = input_add(in, c, e)))
				return ret;
		}
		if (in->eof)
			return in->len > 0;
		if (sf_cli_interrupted())
			return -EINTR;
		struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
		ssize_t r = poll(&p, 1, -1);
		if (r >= 0)
			r = read(STDIN_FILENO, in->buf, sizeof(in->buf));
		if (r < 0 && errno != EINTR && errno != EAGAIN)
			return sf_err_set(e, -errno, "standard input: %s", strerror(errno));
		in->have = r > 0 ? (size_t)r : 0;
		in->at = 0;
		in->eof = r == 0;
	}
}

/* Why an answer or the run stopped, after "stopped: ". */
static void print_stop(const struct session *S, const struct options *o)
{
	switch (S->stop) {
	case STOP_EOS: fputs("end of text (EOS)", stderr); break;
	case STOP_EOT: fprintf(stderr, "end of turn (%s)", sf_tokenizer_piece(S->tok, S->eot, NULL));
		break;
	case STOP_LIMIT: fprintf(stderr, "-n %ld reached", o->n_predict); break;
	case STOP_CONTEXT: fputs("context full", stderr); break;
	case STOP_RAM: fputs("the KV cache full at what --ram leaves it", stderr); break;
	case STOP_INTERRUPT: fputs("interrupted", stderr); break;
	case STOP_INPUT: fputs("end of input", stderr); break;
	case STOP_NONE: fputs("prompt only", stderr); break;
	}
}

/* --conversation: a turn per line of standard input, each answered; the
 * KV cache keeps every turn, so each is fed once. */
static int conversation(struct session *S, const struct options *o, struct sf_err *e)
{
	struct sf_chat chat = { 0 };
	struct input in = { 0 };
	struct ids answer = { 0 };
	struct sf_detok detok;
	char *buf = NULL, *text = NULL, *said = NULL;
	const char *system;
	int32_t *ids = NULL;
	size_t len, n, pos = 0;
	int tmpl, ret, tty = isatty(STDIN_FILENO);

	if ((ret = sf_cli_chat_template(S->tok, o->mo.chat_template, o->mo.model_dir ?
					o->mo.model_dir : o->mo.image, &tmpl, e)) ||
	    (ret = prompt_text(o, &buf, &system, &len, e)) ||
	    (ret = sf_chat_init(&chat, tmpl, system, e)))
		goto out;
	if ((ret = sf_cli_end_of_turn(&S->model, S->tok, tmpl, &S->eot, e)) ||
	    (ret = sf_cli_chat_channels(S->tok, tmpl, &S->channels, &S->harmony, e)))
		goto out;
	if (o->verbose) {
		fprintf(stderr, "%s: chat template %s (%s); answers end at ", sf_progname,
			sf_chat_name(tmpl), o->mo.chat_template >= 0 ? "--chat-template"
			: "tokenizer_config.json");
		if (S->eot >= 0)
			fprintf(stderr, "'%s' (token %d) or ", sf_chat_end_of_turn(tmpl), S->eot);
		fputs("the end-of-text token\n", stderr);
	}
	if (tty && !o->quiet)
		fprintf(stderr, "%s: chatting (%s): a turn per line, a line ending in \\ goes on; "
			"Ctrl-C stops an answer; Ctrl-D or Ctrl-C here ends\n", sf_progname,
			sf_chat_name(tmpl));
	sf_cli_interruptible(1);
	for (int turn = 1;; turn++) {
		if (tty)
			fputs("> ", stderr);
		if ((ret = read_turn(&in, e)) <= 0) {
			S->stop = ret == 0 ? STOP_INPUT : STOP_INTERRUPT;
			if (tty)
				fputc('\n', stderr);
			ret = ret == -EINTR ? 0 : ret;
			break;
		}
		if (in.line[strspn(in.line, " \t\r\n")] == '\0') {	/* nothing said */
			turn--;
			continue;
		}
		if ((ret = sf_chat_user(&chat, in.line, &text, &len, e)) ||
		    (ret = sf_tokenizer_encode(S->tok, text, len, pos == 0, &ids, &n, e)))
			break;
		if (o->verbose_prompt) {
			char label[32];
			snprintf(label, sizeof(label), "turn %d", turn);
			print_prompt(S, label, text, len, ids, n);
		}
		if (n > (size_t)S->positions - pos) {
			ret = sf_err_set(e, -EINVAL, "turn %d: %zu tokens do not fit the %zu positions "
					 "left of the context of %d%s", turn, n,
					 (size_t)S->positions - pos, S->positions,
					 S->positions < S->state.seq_len ? ", all --ram leaves the KV "
					 "cache room for" : "");
			break;
		}
		sf_detok_init(&detok, S->tok, SF_DECODE_SKIP_SPECIAL);
		answer.n = 0;
		sf_chat_channels_start(&S->channels);
		uint64_t before = S->text_bytes;
		ret = run(S, o, ids, n, &pos, 1, &detok, &answer, e);
		if (S->reasoning_open)
			fputc('\n', stderr);
		S->reasoning_open = 0;
		if (!ret)
			ret = end_text(S, &detok, 0, e);
		sf_detok_free(&detok);
		free(text);
		free(ids);
		text = NULL;
		ids = NULL;
		if (sf_cli_interrupted())
			S->stop = STOP_INTERRUPT;
		if (!ret && o->verbose) {
			fprintf(stderr, "%s: answer %d: %zu %s, stopped: ", sf_progname, turn,
				answer.n, sf_plural(answer.n, "token", "tokens"));
			print_stop(S, o);
			fprintf(stderr, "; %zu of %d %s used\n", pos, S->positions,
				sf_plural((unsigned long long)S->positions, "position", "positions"));
		}
		if (ret || (ret = sf_tokenizer_decode(S->tok, answer.v, answer.n,
						      SF_DECODE_SKIP_SPECIAL, &said, &len, e)) ||
		    (S->text_bytes == before &&	/* a line even when empty */
		     (ret = write_out(S, "\n", 1, e))) ||
		    (ret = sf_chat_answer(&chat, said, e)))
			break;
		free(said);
		said = NULL;
		if (sf_cli_interrupted() && sf_cli_interrupted() != SIGINT)
			break;	/* SIGTERM, SIGHUP: the end */
		sf_cli_interrupt_clear();	/* Ctrl-C stopped the answer only */
	}
out:
	sf_chat_free(&chat);
	free(in.line);
	free(answer.v);
	free(buf);
	free(text);
	free(ids);
	free(said);
	return ret;
}

/* Tokenizes the documents of the file, each prefixed with BOS, into one
 * stream of at most max_tokens tokens (0: all). */
static int read_ppl_tokens(struct session *S, const char *path, uint64_t max_tokens,
			   int32_t **out, size_t *n_out, size_t *docs_out, struct sf_err *e)
{
	int ret = sf_corpus_tokens(&path, 1, S->tok, max_tokens, out, n_out, docs_out, e);

	if (ret)
		return ret;
	if (*n_out < 2) {
		free(*out);
		return sf_err_set(e, -EINVAL, "%s: %zu tokens: perplexity needs at least 2", path,
				  *n_out);
	}
	return 0;
}

/* A JSON document and a newline on standard output. */
static int print_json(json_t *j, size_t flags, struct sf_err *e)
{
	if (json_dumpf(j, stdout, flags) || fputc('\n', stdout) == EOF)
		return sf_err_set(e, -EIO, "write error on standard output: %s", strerror(errno));
	return 0;
}

static int perplexity(struct session *S, const struct options *o, struct sf_err *e)
{
	int32_t *tokens;
	size_t n, docs;
	struct sf_ppl acc = { 0 };
	int ret = read_ppl_tokens(S, o->ppl_file, o->max_tokens, &tokens, &n, &docs, e);
	struct sf_progress pr;

	if (ret)
		return ret;
	sf_progress_init(&pr, o->progress, o->quiet, "tokens");
	sf_cli_interruptible(1);	/* Ctrl-C: the windows scored so far, the timings */
	double t0 = sf_now();
	for (size_t start = 0; start + 1 < n && !sf_cli_interrupted(); start += (size_t)o->window) {
		size_t len = n - start < (size_t)o->window + 1 ? n - start : (size_t)o->window + 1;
		if (S->sparse)	/* selective computation: each window's first half is its prompt */
			sf_sparse_prefill(S->sparse, (len - 1) / 2);
		sf_ppl_add(&S->model, &S->state, tokens + start, len, o->window, &acc);
		if ((ret = sparse_failed(S, e))) {
			free(tokens);
			return ret;
		}
		snprintf(pr.note, sizeof(pr.note), "ppl %.4f", exp(acc.nll / acc.scored));
		sf_progress_update(&pr, acc.scored, (double)acc.scored / (double)(n - 1));
	}
	sf_progress_end(&pr, acc.scored);
	S->prompt_tokens = acc.scored ? acc.scored + 1 : 0;	/* n, unless interrupted */
	S->prompt_s = sf_now() - t0;
	free(tokens);
	if (acc.scored == 0)	/* interrupted before the first window */
		return 0;

	json_t *j = json_pack("{s:s, s:I, s:I, s:i, s:f, s:f}", "file", o->ppl_file,
			      "documents", (json_int_t)docs, "tokens", (json_int_t)acc.scored,
			      "window", o->window, "nll", acc.nll / (double)acc.scored,
			      "ppl", exp(acc.nll / (double)acc.scored));
	if (!j)
		return sf_err_set(e, -ENOMEM, "perplexity: %s", strerror(ENOMEM));
	if (o->bench) {	/* the figures are printed at the end, with these */
		S->ppl = j;
		return 0;
	}
	ret = print_json(j, JSON_REAL_PRECISION(10), e);
	json_decref(j);
	return ret;
}

/* --stats FILE through the one atomic-output writer: a failure names the
 * file and the reason, and leaves no partial file. */
static int write_json_file(json_t *j, const char *path, struct sf_err *e)
{
	struct sf_outfile of;
	int ret = sf_outfile_open(&of, path, 0, NULL, e);

	if (ret)
		return ret;
	if (json_dumpf(j, of.f, JSON_REAL_PRECISION(10)) || fputc('\n', of.f) == EOF) {
		ret = sf_err_set(e, -EIO, "%s: cannot write statistics: %s", of.name,
				 strerror(errno ? errno : EIO));
		sf_outfile_abort(&of);
		return ret;
	}
	return sf_outfile_commit(&of, e);
}

/* --draft's figures: proposals, acceptance, tokens per pass of the
 * model, the draft's time and bytes read (the model's bytes per token
 * are decode_bytes_per_token). */
static json_t *speculative_json(const struct session *S, const struct options *o)
{
	const struct draft *D = S->draft;
	const struct sf_spec *sp = &D->spec;
	uint64_t made = sp->accepted + sp->passes;	/* each pass adds its own token */
	json_t *j = json_pack("{s:s, s:i, s:i, s:f, s:b, s:I, s:I, s:I, s:f, s:f, s:f}",
			      "draft", o->draft, "draft_max", sp->max, "draft_min", sp->min,
			      "draft_p_min", (double)sp->p_min, "adaptive", sp->adaptive,
			      "passes", (json_int_t)sp->passes, "proposed", (json_int_t)sp->proposed,
			      "accepted", (json_int_t)sp->accepted,
			      "acceptance_rate", sp->proposed ?
				(double)sp->accepted / (double)sp->proposed : 0.0,
			      "tokens_per_pass", sp->passes ? (double)made / (double)sp->passes : 0.0,
			      "draft_seconds", sp->draft_seconds);

	if (j && D->sparse)
		json_object_set_new(j, "draft_bytes", json_integer(
			(json_int_t)sf_sparse_bytes_moved(D->sparse)));
	return j;
}

/* Does the model route to MXFP4 experts (their products as
 * --activations says, apart from the top tier's)? */
static int mxfp4_experts(const struct session *S)
{
	if (!S->model.cfg.n_experts)
		return 0;
	if (S->sparse)
		return sf_dtype_untiled(S->image.experts.dtype) == SF_DTYPE_MXFP4;
	return S->model.layers[0].experts[0].w_gate.dtype == SF_DTYPE_MXFP4;
}

/* The MXFP4 experts' products in j's "experts" object (made without an
 * image): "activations", as the top tier's. */
static int experts_activations(json_t *j, const struct options *o)
{
	json_t *x = json_object_get(j, "experts");
	if (!x && (json_object_set_new(j, "experts", json_object()) ||
		   !(x = json_object_get(j, "experts"))))
		return -ENOMEM;
	return json_object_set_new(x, "activations", json_pack("{s:s, s:s, s:s}", "dtype",
		"MXFP4", "type", o->mxfp4_int8 ? "q8" : "f32", "kernel", o->mxfp4_int8 ?
		sf_qmatmul_rows_kernel() : sf_isa_name(sf_cpu_isa()))) ? -ENOMEM : 0;
}

/* Timings (and with IMAGE the sparse decoder's figures) as JSON to path
 * (--stats: written whole or not at all, base/outfile.h), "-" or NULL
 * (--bench) for one line on standard output. */
static int write_stats(const struct session *S, const struct options *o, const char *path,
		       struct sf_err *e)
{
	double pr = S->prompt_s > 0 ? (double)S->prompt_tokens / S->prompt_s : 0.0;
	double dr = S->decode_s > 0 ? (double)S->step_tokens / S->decode_s : 0.0;
	json_t *j = json_pack("{s:s, s:s, s:i, s:s, s:I, s:f, s:f, s:I, s:I, s:f, s:f}",
			      "mode", o->ppl_file ? "ppl" : o->conversation ? "conversation" : "generate",
			      "model", o->mo.model_dir ? o->mo.model_dir : o->mo.image,
			      "threads", o->threads, "kernels", sf_isa_name(sf_cpu_isa()),
			      "prompt_tokens", (json_int_t)S->prompt_tokens,
			      "prompt_seconds", S->prompt_s, "prompt_tokens_per_second", pr,
			      "decode_tokens", (json_int_t)S->decode_tokens,
			      "decode_steps", (json_int_t)S->decode_steps,
			      "decode_seconds", S->decode_s, "decode_tokens_per_second", dr);
	int ret = j ? 0 : -ENOMEM;

	if (!ret && o->bench && (json_object_set_new(j, "pp", json_real(pr)) ||
				 json_object_set_new(j, "tg", json_real(dr)) ||
				 json_object_set_new(j, "batch", json_integer(o->batch < S->state.batch ?
							     o->batch : S->state.batch))))
		ret = -ENOMEM;
	if (!ret && S->sparse && json_object_set_new(j, "decode_bytes_per_token", json_real(
			S->step_tokens ? (double)(sf_sparse_bytes_moved(S->sparse) - S->bytes0) /
			(double)S->step_tokens : 0.0)))
		ret = -ENOMEM;
	if (!ret && S->draft && json_object_set_new(j, "speculative", speculative_json(S, o)))
		ret = -ENOMEM;
	/* each thread's share of the decode's wall time spent computing in
	 * the pool's runs (the rest: waiting for the others, or serial) */
	json_t *busy = json_array();
	for (int i = 0; busy && i < sf_pool_size(S->pool); i++)
		json_array_append_new(busy, json_real(S->decode_s > 0 ?
						      S->decode_busy[i] / S->decode_s : 0.0));
	if (!ret && (!busy || json_object_set_new(j, "decode_busy", busy)))
		ret = -ENOMEM;
	/* the KV cache: its types and the bytes of the positions it holds */
	if (!ret && json_object_set_new(j, "kv_cache", json_pack(
			"{s:s, s:s, s:I, s:I}", "type_k", sf_kv_type_name(S->state.kv_k),
			"type_v", sf_kv_type_name(S->state.kv_v), "positions", (json_int_t)S->used,
			"bytes_in_use", (json_int_t)sf_state_kv_bytes(&S->model.cfg, (int)S->used,
								       S->state.batch, S->state.kv_k,
								       S->state.kv_v))))
		ret = -ENOMEM;
	if (!ret && S->sparse) {
		json_t *sp = sf_sparse_stats_json(S->sparse);
		if (!sp || json_object_update(j, sp))
			ret = -ENOMEM;
		json_decref(sp);
		if (S->ppl)
			json_object_set(j, "ppl", S->ppl);
	}
	if (!ret && mxfp4_experts(S))
		ret = experts_activations(j, o);
	if (ret)
		ret = sf_err_set(e, ret, "statistics: %s", strerror(-ret));
	else if (path == NULL || strcmp(path, "-") == 0)
		ret = print_json(j, JSON_REAL_PRECISION(10), e);
	else
		ret = write_json_file(j, path, e);
	json_decref(j);
	return ret;
}

/* " N tokens, R tok/s": no rate without a measured step (-c 4 decodes
 * one token, which needs no forward pass). */
static void print_count(const char *what, size_t tokens, size_t steps, double seconds)
{
	fprintf(stderr, " %s %zu %s", what, tokens, sf_plural(tokens, "token", "tokens"));
	if (steps && seconds > 0)
		fprintf(stderr, ", %.1f tok/s", (double)steps / seconds);
}

/* After generating, on stderr: why it stopped, the context, the timings. */
static void report(const struct session *S, const struct options *o)
{
	const struct sf_config *cfg = &S->model.cfg;

	fprintf(stderr, "%s: stopped: ", sf_progname);
	print_stop(S, o);
	fprintf(stderr, "; context %d %s", S->positions,
		sf_plural((unsigned long long)S->positions, "position", "positions"));
	/* the context capped at the window (gpt-oss computes its windows) */
	if (cfg->sliding_window && S->state.seq_len == cfg->sliding_window &&
	    cfg->max_seq_len == cfg->sliding_window)
		fputs(" (the model's sliding window)", stderr);
	fprintf(stderr, "\n%s:", sf_progname);
	print_count("prompt", S->prompt_tokens, S->prompt_tokens, S->prompt_s);
	fputc(';', stderr);
	print_count("decode", S->decode_tokens, S->step_tokens, S->decode_s);
	fputc('\n', stderr);
}

/* --probe-device: measure, store, print the figures. */
static int probe(const char *dir, struct sf_err *e)
{
	json_t *j;
	int ret = sf_device_probe(dir, &j, e);

	if (ret)
		return ret;
	ret = print_json(j, JSON_INDENT(2), e);
	json_decref(j);
	return ret;
}

int main(int argc, char **argv)
{
	struct options o;
	struct session S = { .eot = -1 };
	struct sf_err e = { 0 };
	const char *fault = getenv("SF_FAULT");	/* test only: uring.h */
	int ret;

	sf_cli_start("sf-run");
	parse_options(argc, argv, &o);
	if (o.probe) {
		ret = probe(o.probe, &e);
		goto out;
	}
	if (o.mo.image && fault && *fault && (ret = sf_uring_fault_parse(fault, &o.sparse.fault, &e)))
		goto out;

	/* --stats -: standard output holds only JSON, the text goes to stderr */
	S.text = o.stats_file && strcmp(o.stats_file, "-") == 0 ? stderr : stdout;
	int ctx = o.ppl_file ? o.window + 1 : o.mo.ctx;
	ret = session_open(&S, &o, ctx, &e);
	if (!ret)
		ret = o.ppl_file ? perplexity(&S, &o, &e) : o.conversation ? conversation(&S, &o, &e)
			: generate(&S, &o, &e);
	if (!ret && !o.quiet && !o.ppl_file && !o.bench)
		report(&S, &o);
	if (!ret && o.bench)
		ret = write_stats(&S, &o, NULL, &e);
	if (!ret && o.stats_file)
		ret = write_stats(&S, &o, o.stats_file, &e);
	if (!ret && S.stop == STOP_RAM)	/* the text so far is out: say why it ends */
		ret = sf_err_set(&e, SF_ELIMIT, "%s: the context reached %d positions, all that "
				 "--ram %llu leaves the KV cache room for: give more --ram, or -c",
				 o.mo.image, S.positions, (unsigned long long)o.sparse.ram);
	sf_sparse_close(S.sparse);	/* its last reads logged */
	S.sparse = NULL;
	if (!ret && S.read_log.f)
		ret = sf_outfile_commit(&S.read_log, &e);
	session_free(&S);
out:
	if (ret)
		sf_error("%s", e.msg[0] ? e.msg : sf_strerror(ret));
	if (sf_close_stdout())
		ret = -EIO;
	if (sf_cli_interrupted())	/* after the timings and --stats: 130, 143 */
		sf_cli_reraise(sf_cli_interrupted());
	return ret ? SF_EXIT_FAIL : SF_EXIT_OK;
}
