/* sf-pack: lays a model, its placement, codes and tier sizes out as the
 * flash image sf-run decodes from; --verify checks an image's every
 * checksum, --info summarises it as JSON. See man/sf-pack.1. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/pool.h"
#include "formats/calib.h"
#include "common/cli.h"
#include "formats/codes.h"
#include "formats/gguf.h"
#include "formats/image.h"
#include "formats/model.h"
#include "engine/forward.h"
#include "formats/placement.h"
#include "engine/tokenizer.h"
#include "common/ram.h"

#define DEFAULT_DTYPE "keep"
#define DEFAULT_QUANT "search"	/* pays for q4: sf-pack(1) */

struct options {
	const char *model_dir, *placement, *codes, *calib, *keep, *resident, *dtype_name,
		   *quant_name, *embed_name, *head_name;
	const char *output, *verify, *info;
	unsigned resident_mask;
	int dtype, embed_dtype, head_dtype, progress, quiet, verbose, dry_run, quant_set, threads;
	enum sf_quant_method quant;
};

enum { O_PLACEMENT = SF_OPT_FIRST, O_CODES, O_CALIB, O_KEEP, O_RESIDENT, O_DTYPE, O_QUANT,
       O_EMBED_TYPE, O_HEAD_TYPE, O_VERIFY, O_INFO, O_DRY_RUN };

static const struct sf_opt options[] = {
	{ "model", 'm', "MODEL", "Hugging Face model directory or GGUF file", NULL, 0 },
	SF_OPT_OUTPUT("the image (a regular file, not standard output)"),
	{ "placement", O_PLACEMENT, "FILE", "placement.json from sf-place (default: identity)", NULL, 0 },
	{ "codes", O_CODES, "FILE", "codes.sfq from sf-encode (default: no middle tier)", NULL, 0 },
	{ "calib", O_CALIB, "FILE", "calib.json from sf-encode --calibrate: tier sizes", NULL, 0 },
	{ "keep", O_KEEP, "FILE", "neurons.json: FFN neurons to keep, the rest left out", NULL, 0 },
	{ "resident", O_RESIDENT, "LIST", "groups kept in RAM instead of flash: attn_in,\n"
	  "attn_out, ffn_in, ffn_out, attention, ffn, none\n(default none)", NULL, 0 },
	{ "dtype", O_DTYPE, "T", "top tier: keep (the model's), bf16, f16, f32, or\n"
	  "q8, q4 (blocks of 32 rows with an f16 scale)\n(default %s)", DEFAULT_DTYPE, 0 },
	{ "quant", O_QUANT, "M", "block scales: rtn (round to nearest) or\n"
	  "search (least squared error)\n(default %s)", DEFAULT_QUANT, 0 },
	{ "token-embedding-type", O_EMBED_TYPE, "T", "the embedding's rows: keep, q8, q6 or q4\n"
	  "(default: q4 with --dtype q4, q8 with q8, else keep)", NULL, 0 },
	{ "output-tensor-type", O_HEAD_TYPE, "T", "the output head's rows (a tied embedding's\n"
	  "too, unless given its own): keep, q8, q6 or q4\n"
	  "(default: q6 with --dtype q4, q8 with q8, else keep)", NULL, 0 },
	SF_OPT_THREADS,
	{ "verify", O_VERIFY, "IMAGE", "check every offset, size, permutation and checksum", NULL, 0 },
	{ "info", O_INFO, "IMAGE", "print a JSON summary of an image, with the least\n"
	  "--ram of sf-run", NULL, 0 },
	{ "dry-run", O_DRY_RUN, NULL, "write no image: print its size, its resident bytes\n"
	  "and the least --ram of sf-run as JSON", NULL, 0 },
	SF_OPT_PROGRESS_ENTRY,
	SF_OPT_QUIET,
	SF_OPT_VERBOSE,
	SF_OPT_END,
};

static const struct sf_cmd cmd = {
	"Usage: sf-pack --model MODEL [options] -o model.sfimg\n"
	"       sf-pack --verify IMAGE\n"
	"       sf-pack --info IMAGE\n"
	"       sf-pack --model MODEL [options] --dry-run\n"
	"Pack a model into the flash image sf-run decodes from: the resident\n"
	"weights, then per layer and group the top-tier bundles and middle-tier\n"
	"codes in placement order, every region 4 KiB aligned and checksummed.\n",
	options,
	"  sf-pack --model models/mix4-1m --placement coact.json --codes codes.sfq \\\n"
	"    --calib calib.json -o mix4-1m.sfimg\n"
	"  sf-pack --model models/mix4-1m --resident attention --dtype f32 -o a.sfimg\n"
	"  sf-pack --model models/mix4-1m --dtype q4 --quant search -o q4.sfimg\n"
	"  sf-pack --verify mix4-1m.sfimg && sf-pack --info mix4-1m.sfimg | jq .sizes\n"
	"  sf-pack --model models/mix4-1m --dry-run | jq .ram_at_least\n",
};

/* Whether anything is packed in a block dtype (what --quant applies to). */
static int quantizes(const struct options *o)
{
	const int dt[] = { o->dtype, o->embed_dtype, o->head_dtype };
	for (size_t i = 0; i < sizeof(dt) / sizeof(dt[0]); i++)
		if (dt[i] != SF_OPT_DTYPE_KEEP && sf_dtype_is_block((enum sf_dtype)dt[i]))
			return 1;
	return 0;
}

/* A dtype option's value as given: "keep" or the name in lower case. */
static const char *dtype_option(int dt)
{
	static const char *const names[] = { [SF_DTYPE_Q8] = "q8", [SF_DTYPE_Q6] = "q6",
					     [SF_DTYPE_Q4] = "q4" };
	return dt == SF_OPT_DTYPE_KEEP ? "keep" : names[dt];
}

/* The embedding's and the head's rows: as given, else after the top
 * tier, llama.cpp's choice for its Q4_0 and Q8_0 files: the head keeps
 * more bits (Q6_K), the embedding the matrices' type. */
static void rows_dtypes(struct options *o)
{
	o->embed_dtype = o->embed_name ? sf_opt_dtype("--token-embedding-type", o->embed_name,
						      SF_OPT_DTYPES_ROWS)
		       : sf_dtype_is_block((enum sf_dtype)o->dtype) ? o->dtype : SF_OPT_DTYPE_KEEP;
	o->head_dtype = o->head_name ? sf_opt_dtype("--output-tensor-type", o->head_name,
						    SF_OPT_DTYPES_ROWS)
		      : o->dtype == SF_DTYPE_Q4 ? SF_DTYPE_Q6
		      : o->dtype == SF_DTYPE_Q8 ? SF_DTYPE_Q8 : SF_OPT_DTYPE_KEEP;
}

static void parse_args(int argc, char **argv, struct options *o)
{
	int c;

	o->dtype_name = DEFAULT_DTYPE;
	o->quant_name = DEFAULT_QUANT;
	o->threads = sf_cli_threads_default();
	while ((c = sf_cli_getopt(argc, argv, &cmd)) != -1) {
		switch (c) {
		case 'm': o->model_dir = sf_opt_path("--model", optarg); break;
		case 'o': o->output = sf_opt_path("--output", optarg); break;
		case O_PLACEMENT: o->placement = optarg; break;
		case O_CODES: o->codes = optarg; break;
		case O_CALIB: o->calib = optarg; break;
		case O_KEEP: o->keep = optarg; break;
		case O_RESIDENT: o->resident = optarg; break;
		case O_DTYPE: o->dtype_name = optarg; break;
		case O_QUANT: o->quant_name = optarg; o->quant_set = 1; break;
		case O_EMBED_TYPE: o->embed_name = optarg; break;
		case O_HEAD_TYPE: o->head_name = optarg; break;
		case 't': o->threads = sf_opt_threads(optarg); break;
		case O_VERIFY: o->verify = optarg; break;
		case O_INFO: o->info = optarg; break;
		case O_DRY_RUN: o->dry_run = 1; break;
		case SF_OPT_PROGRESS: o->progress = 1; break;
		case 'q': o->quiet = 1; break;
		case 'v': o->verbose = 1; break;
		}
	}
	if (optind < argc)
		sf_usage_error("unexpected argument '%s'", argv[optind]);
	if (o->verify || o->info) {
		if (o->verify && o->info)
			sf_usage_error("--verify and --info cannot be combined");
		if (o->model_dir || o->output || o->placement || o->codes || o->calib || o->keep ||
		    o->resident || o->embed_name || o->head_name)
			sf_usage_error("--%s takes only the image", o->verify ? "verify" : "info");
		return;
	}
	if (!o->model_dir)
		sf_usage_error("--model MODEL is required");
	if (o->dry_run && o->output)
		sf_usage_error("--dry-run writes nothing: no -o");
	if (!o->output && !o->dry_run)
		sf_usage_error("-o FILE is required");
	if (o->output && !strcmp(o->output, "-"))
		sf_usage_error("-o: an image is written to a file, not to standard output");
	_Static_assert(SF_OPT_DTYPE_KEEP == SF_IMAGE_DTYPE_KEEP, "one keep");
	o->dtype = sf_opt_dtype("--dtype", o->dtype_name, SF_OPT_DTYPES_TOP);
	rows_dtypes(o);
	if (sf_quant_method_parse(o->quant_name, &o->quant))
		sf_usage_error("--quant: '%s' is not rtn or search", o->quant_name);
	if (o->quant_set && !quantizes(o))
		sf_usage_error("--quant applies to q8, q6 and q4: --dtype, --token-embedding-type "
			       "or --output-tensor-type");
	o->resident_mask = o->resident ? sf_opt_groups("--resident", o->resident,
						       SF_GROUPS_ALIASES) : 0;
	if (o->keep && o->codes)
		sf_usage_error("--keep and --codes cannot be combined: the codes of ffn_in hold whole "
			       "columns, dropped neurons' rows included");
	if (o->keep && (o->resident_mask & (1u << SF_GROUP_FFN_IN | 1u << SF_GROUP_FFN_OUT)))
		sf_usage_error("--keep and a resident FFN group cannot be combined: resident "
			       "matrices are stored whole");
}

static void progress(void *arg, uint64_t done, uint64_t total)
{
	sf_progress_update(arg, done >> 20, total ? (double)done / (double)total : -1);
}

/* The options as packed; embed_dtype: as resolved for the model. */
static json_t *producer(const struct options *o, int embed_dtype)
{
	json_t *opt = json_pack("{s:s, s:s?, s:s?, s:s?, s:s?, s:s, s:s}", "model", o->model_dir,
				"placement", o->placement, "codes", o->codes, "calib", o->calib,
				"keep", o->keep, "resident", o->resident ? o->resident : "none",
				"dtype", o->dtype_name);
	json_object_set_new(opt, "token_embedding_type", json_string(dtype_option(embed_dtype)));
	json_object_set_new(opt, "output_tensor_type", json_string(dtype_option(o->head_dtype)));
	if (quantizes(o))
		json_object_set_new(opt, "quant", json_string(o->quant_name));
	return json_pack("{s:s, s:s, s:o}", "program", "sf-pack", "version", SF_VERSION, "options",
			 opt);
}

/* The least --ram of sf-run and its parts (common/ram.h), as JSON. */
static json_t *ram_json(const struct sf_sparse_memory *mem)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:i, s:I, s:I}", "process", (json_int_t)mem->process,
			 "resident", (json_int_t)mem->resident, "state", (json_int_t)mem->state,
			 "kv", (json_int_t)mem->kv, "kv_positions", (int)mem->kv_positions,
			 "buffers", (json_int_t)mem->buffers, "cache", (json_int_t)mem->cache);
}

/* `sf-pack --info path` run as a child, a fresh process whose resident
 * set stands for a fresh sf-run's: its "ram_at_least" and "ram" into *ram. */
static int info_child(const char *path, json_t **ram, struct sf_err *e)
{
	char *argv[] = { (char *)"sf-pack", (char *)"--info", (char *)path, NULL };
	posix_spawn_file_actions_t fa;
	int fd[2], status = 0, ret;
	pid_t pid;

	if (pipe(fd))
		return sf_err_set(e, -errno, "pipe: %s", strerror(errno));
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fd[1], STDOUT_FILENO);
	posix_spawn_file_actions_addclose(&fa, fd[0]);
	ret = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(fd[1]);
	if (ret) {
		close(fd[0]);
		return sf_err_set(e, -ret, "/proc/self/exe --info: %s", strerror(ret));
	}
	FILE *f = fdopen(fd[0], "r");
	json_error_t je;
	json_t *j = f ? json_loadf(f, 0, &je) : NULL;
	if (f)
		fclose(f);
	else
		close(fd[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	json_t *total = json_object_get(j, "ram_at_least"), *parts = json_object_get(j, "ram");
	if (!WIFEXITED(status) || WEXITSTATUS(status) || !json_is_integer(total) || !parts) {
		json_decref(j);
		return sf_err_set(e, -EIO, "%s: sf-pack --info gave no memory figures", path);
	}
	*ram = json_pack("{s:O, s:O}", "ram_at_least", total, "ram", parts);
	json_decref(j);
	return *ram ? 0 : sf_err_set(e, -ENOMEM, "%s", strerror(ENOMEM));
}

/* --dry-run: the image's figures, and the least --ram of sf-run taken by
 * sf-run's own accounting (the figure its refusal names, common/ram.h)
 * from a skeleton of the image: its header and resident regions in a file
 * under $TMPDIR, the flash regions holes, measured by sf-pack --info in a
 * fresh process and removed after. */
static int estimate(struct sf_image_pack_opts *po, const struct sf_model *m, struct sf_err *e)
{
	struct sf_image_estimate est;
	const char *tmp = getenv("TMPDIR");
	char path[4096];
	json_t *ram = NULL;
	int ret = sf_image_pack_estimate(po, &est, e);

	if (ret)
		return ret;
	snprintf(path, sizeof(path), "%s/sf-pack-dry-run.%ld.sfimg", tmp && *tmp ? tmp : "/tmp",
		 (long)getpid());
	po->skeleton = 1;
	po->progress = NULL;
	if (!(ret = sf_image_pack(path, po, NULL, e)))
		ret = info_child(path, &ram, e);
	unlink(path);
	if (ret)
		return ret;
	json_t *j = json_pack("{s:I, s:I, s:I, s:I, s:i}",
			      "image_bytes", (json_int_t)est.bytes,
			      "header_bytes", (json_int_t)est.header,
			      "resident_bytes", (json_int_t)est.resident,
			      "flash_bytes", (json_int_t)est.flash, "context", m->cfg.max_seq_len);
	if (!j || json_object_update(j, ram) || json_dumpf(j, stdout, JSON_INDENT(1)) ||
	    fputc('\n', stdout) == EOF)
		ret = sf_err_set(e, -EIO, "(stdout): cannot write the estimate");
	json_decref(j);
	json_decref(ram);
	return ret;
}

/* What packing holds at once besides the codes: the largest group's
 * columns (and, for q8 or q4, its largest matrix as floats) and the one
 * matrix being read from the mapping (sf_image_pack releases each). */
static uint64_t pack_bytes(const struct sf_model *m, int dtype)
{
	uint64_t most = 0;
	for (int l = 0; l < m->cfg.n_layers; l++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			const struct sf_weight *w[SF_GROUP_MAX_MATRICES];
			const char *names[SF_GROUP_MAX_MATRICES];
			uint64_t group = 0, matrix = 0, floats = 0;
			for (int k = sf_codes_group_matrices(m, l, (enum sf_group)g, w, names); k-- > 0;) {
				uint64_t n = w[k]->rows * w[k]->cols, b = sf_weight_bytes(w[k]);
				group += b;
				matrix = b > matrix ? b : matrix;
				floats = n * sizeof(float) > floats ? n * sizeof(float) : floats;
			}
			if (sf_dtype_is_block((enum sf_dtype)dtype))
				matrix += floats;
			most = group + matrix > most ? group + matrix : most;
		}
	return most;
}

/* A GGUF model: the texts an image embeds, from its metadata (its
 * tokenizer checked against the model in them), and with
 * --dtype keep for a quantized file the top tier nearest its bits (the
 * image's blocks run down columns, the file's along rows, so its blocks
 * cannot be kept as they are): q8 from 7 bits a weight of its layers'
 * matrices up, q4 below; said on stderr. */
static int gguf_inputs(struct options *o, const struct sf_config *cfg, char **texts,
		       struct sf_err *e)
{
	struct sf_gguf g;
	struct sf_tokenizer *tok;
	uint64_t elems = 0, bytes = 0;
	char types[160] = "";
	int ret;

	if ((ret = sf_gguf_open(&g, o->model_dir, e)))
		return ret;
	/* the tokenizer checked in the texts the image will hold */
	if ((ret = sf_tokenizer_gguf_texts(&g, &texts[1], &texts[2], e)) ||
	    (ret = sf_tokenizer_open_mem(&tok, o->model_dir, texts[1], strlen(texts[1]), texts[2],
					 strlen(texts[2]), e)))
		goto out;
	ret = sf_tokenizer_check_model(tok, cfg->vocab_size, e);
	sf_tokenizer_close(tok);
	if (ret)
		goto out;
	if (!(texts[0] = sf_config_json(cfg))) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory", o->model_dir);
		goto out;
	}
	for (size_t i = 0; i < g.ntensors; i++) {
		const struct sf_gguf_tensor *t = &g.tensors[i];
		const char *name = sf_ggml_type_name(t->type);
		/* MXFP4 experts stay MXFP4 (image_plan_experts) */
		if (strncmp(t->name, "blk.", 4) || t->n_dims < 2 || t->type == SF_GGML_MXFP4)
			continue;
		/* a mixture's experts stacked in three dimensions */
		elems += t->ne[0] * t->ne[1] * t->ne[2];
		bytes += t->nbytes;
		if (sf_ggml_block_elems(t->type) > 1 && !strstr(types, name) &&
		    strlen(types) + strlen(name) + 2 < sizeof(types))
			snprintf(types + strlen(types), sizeof(types) - strlen(types), "%s%s",
				 *types ? ", " : "", name);
	}
	if (o->dtype == SF_OPT_DTYPE_KEEP && *types) {
		o->dtype = bytes * 8 >= 7 * elems ? SF_DTYPE_Q8 : SF_DTYPE_Q4;
		rows_dtypes(o);
		if (!o->quiet)
			fprintf(stderr, "%s: %s: its %s matrices (%.2f bits a weight) requantized to "
				"%s columns, the image's top tier (--dtype chooses)\n", sf_progname,
				o->model_dir, types, (double)bytes * 8 / (double)elems,
				sf_dtype_name((enum sf_dtype)o->dtype));
	}
	ret = 0;
out:
	sf_gguf_close(&g);
	return ret;
}

static int pack(struct options *o)
{
	const char *inputs[5], *const given[] = { o->placement, o->codes, o->calib, o->keep };
	size_t ninputs = 0;

	for (size_t i = 0; i < sizeof(given) / sizeof(given[0]); i++)
		if (given[i])
			inputs[ninputs++] = given[i];
	inputs[ninputs] = NULL;
	sf_out_check_path(o->output, inputs);

	struct sf_model m;
	struct sf_placement pl = { 0 };
	struct sf_sfq q = { 0 };
	struct sf_calib cal = { 0 };
	struct sf_image_keep keep = { 0 };
	struct sf_progress pr;
	struct sf_pool *pool = NULL;
	struct sf_err e = { 0 };
	uint64_t written = 0;
	json_t *prod = NULL;
	char *texts[3] = { NULL, NULL, NULL };
	int ret;

	if ((ret = sf_pool_create(&pool, o->threads))) {
		sf_error("thread pool of %d: %s", o->threads, sf_strerror(ret));
		return ret;
	}
	if ((ret = sf_model_open_elements(&m, o->model_dir, &e)))
		goto out;
	int gguf = sf_gguf_probe(o->model_dir);
	if ((gguf && (ret = gguf_inputs(o, &m.cfg, texts, &e))) ||
	    (!gguf && (ret = sf_tokenizer_open_model(NULL, o->model_dir, m.cfg.vocab_size, &e))) ||
	    (o->placement && (ret = sf_placement_read(&pl, o->placement, &e))) ||
	    (o->codes && (ret = sf_sfq_open(&q, o->codes, &e))) ||
	    (o->calib && (ret = sf_calib_load(&cal, o->calib, &e))) ||
	    (o->keep && (ret = sf_image_keep_read(&keep, o->keep, &m, &e))))
		goto out;
	/* a tied matrix is the head's too: its type unless given its own */
	int embed_dtype = m.cfg.tie_embeddings && !o->embed_name ? o->head_dtype : o->embed_dtype;
	prod = producer(o, embed_dtype);
	sf_progress_init(&pr, o->progress, o->quiet, "MiB");
	struct sf_image_pack_opts po = {
		.model = &m, .model_dir = o->model_dir, .texts = { texts[0], texts[1], texts[2] },
		.placement = o->placement ? &pl : NULL, .placement_path = o->placement,
		.codes = o->codes ? &q : NULL, .codes_path = o->codes,
		.calib = o->calib ? &cal : NULL, .calib_path = o->calib,
		.keep = o->keep ? &keep : NULL, .keep_path = o->keep,
		.resident = o->resident_mask, .dtype = o->dtype, .quant = o->quant, .pool = pool,
		.embed_dtype = embed_dtype, .head_dtype = o->head_dtype,
		.producer = prod,
		.progress = progress, .progress_arg = &pr,
	};
	if (o->dry_run) {
		ret = estimate(&po, &m, &e);
		goto out;
	}
	if (o->verbose)
		sf_cli_memory_need(pack_bytes(&m, o->dtype) + sf_sfq_bytes(&q),
				   "a group's columns, one matrix of the weights at a time "
				   "(mapped), the codes (mapped)");
	if ((ret = sf_image_pack(o->output, &po, &written, &e)))
		goto out;
	sf_progress_end(&pr, written >> 20);
	if (o->verbose)
		fprintf(stderr, "%s: %s: %llu bytes\n", sf_progname, o->output,
			(unsigned long long)written);
out:
	if (ret)
		sf_error("%s", e.msg);
	json_decref(prod);
	sf_image_keep_free(&keep);
	sf_calib_free(&cal);
	sf_sfq_close(&q);
	sf_placement_free(&pl);
	sf_model_close(&m);
	sf_pool_destroy(pool);
	for (int i = 0; i < 3; i++)
		free(texts[i]);
	return ret;
}

static int inspect(const struct options *o)
{
	struct sf_image img = { .fd = -1 };	/* closed at out: even when never opened */
	struct sf_err e = { 0 };
	json_t *j = NULL;
	int ret;

	/* the least --ram first, before this process holds the image too */
	struct sf_sparse_memory mem;
	if (o->info && (ret = sf_cli_ram_least(o->info, sf_cli_threads_default(), &mem, &e)))
		goto out;
	if ((ret = sf_image_open(&img, o->verify ? o->verify : o->info, &e)))
		goto out;
	if (o->verify) {
		/* the regions, then the tokenizer the header carries */
		struct sf_tokenizer *t = NULL;
		if (!(ret = sf_image_verify(&img, &e)))
			ret = sf_tokenizer_open_image(&t, &img, &e);
		sf_tokenizer_close(t);
		goto out;
	}
	if ((j = sf_image_info_json(&img)) &&
	    (json_object_set_new(j, "ram_at_least", json_integer((json_int_t)mem.total)) ||
	     json_object_set_new(j, "ram", ram_json(&mem)))) {
		json_decref(j);
		j = NULL;
	}
	if (!j || json_dumpf(j, stdout, JSON_INDENT(1)) ||
	    fputc('\n', stdout) == EOF) {
		ret = -1;
		snprintf(e.msg, sizeof(e.msg), "(stdout): cannot write the summary");
	}
out:
	if (ret)
		sf_error("%s", e.msg);
	json_decref(j);
	sf_image_close(&img);
	return ret;
}

int main(int argc, char **argv)
{
	struct options o = { 0 };
	int ret;

	sf_cli_start("sf-pack");
	parse_args(argc, argv, &o);
	ret = o.verify || o.info ? inspect(&o) : pack(&o);
	return sf_close_stdout() ? SF_EXIT_FAIL : ret ? SF_EXIT_FAIL : SF_EXIT_OK;
}
