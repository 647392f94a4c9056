/* What sf-run and sf-serve share to open a model and talk with it: the
 * model and tokenizer of --model MODEL or of an IMAGE, the end-of-text
 * test, the chat template a model names and its end-of-turn token, the
 * options that say so (one entry and one parser each) and the sampling
 * defaults. See man/sf-run.1 and man/sf-serve.1. */
#ifndef SF_CLI_MODEL_H
#define SF_CLI_MODEL_H

#include <stdint.h>

#include "base/err.h"
#include "engine/chat.h"
#include "engine/kv.h"
#include "formats/image.h"
#include "formats/model.h"
#include "engine/tokenizer.h"
#include "common/cli.h"

/* The sampling defaults, one source for the commands and their help. */
#define SF_DEFAULT_N_PREDICT 256
#define SF_DEFAULT_TEMP 0.8
#define SF_DEFAULT_TOP_P 0.95
#define SF_DEFAULT_SEED 42
#define SF_DEFAULT_TOP_K 0	/* off: llama.cpp's 40 would change the default text */
#define SF_DEFAULT_MIN_P 0.0
#define SF_DEFAULT_REPEAT_PENALTY 1.0
#define SF_DEFAULT_REPEAT_LAST_N 64

/* Keys of the shared long options, above every command's own. */
enum { SF_OPT_CACHE_TYPE_K = 1024, SF_OPT_CACHE_TYPE_V, SF_OPT_CHAT_TEMPLATE };

#define SF_OPT_MODEL { "model", 'm', "MODEL", "Hugging Face model directory or GGUF file\n(dense, in RAM)", \
	NULL, 0 }
#define SF_OPT_CTX(help) { "ctx-size", 'c', "N", help, NULL, 0 }
#define SF_OPT_CACHE_TYPES \
	{ "cache-type-k", SF_OPT_CACHE_TYPE_K, "T", "the KV cache's keys: f32, f16 or q8_0 (also -ctk)\n" \
	  "(default %s)", "f16", 0 }, \
	{ "cache-type-v", SF_OPT_CACHE_TYPE_V, "T", "the KV cache's values: f32, f16 or q8_0 (also\n" \
	  "-ctv) (default %s)", "f16", 0 }

/* What the shared options set. */
struct sf_model_opts {
	const char *model_dir;		/* --model; NULL: image */
	const char *image;		/* the positional IMAGE */
	int ctx;			/* -c; 0: the model's max_position_embeddings */
	enum sf_kv_type kv_k, kv_v;	/* -ctk, -ctv */
	int chat_template;		/* --chat-template; -1: the model's */
};
void sf_model_opts_default(struct sf_model_opts *o);
/* Takes the option of key (with its value arg) when it is one of the
 * shared ones: 1, or 0 for the command's own. A bad value is a usage
 * error. */
int sf_model_opt(struct sf_model_opts *o, int key, const char *arg);

/* After the options: the one operand, IMAGE, and the model's usage
 * errors (neither --model nor IMAGE, both, another operand). */
void sf_model_opts_operands(struct sf_model_opts *o, int argc, char **argv);

/* llama.cpp's "-cnv" is --conversation, "-ctk" and "-ctv" --cache-type-k
 * and --cache-type-v: rewritten in argv before getopt reads them as
 * "-c nv", "-c tk" (skipping the values of cmd's options that take one). */
void sf_cli_llama_names(int argc, char **argv, const struct sf_cmd *cmd);

/* flags for sf_image_open_flags, with SF_IMAGE_OPEN_TILE_HEAD where the
 * kernels read a tiled Q6 head faster (sf_qmatmul_rows_q6_tiles). */
unsigned sf_cli_image_flags(unsigned flags);

/* The model and tokenizer of --model MODEL (dir) or of the image at path
 * (image_flags: sf_image_open_flags', through sf_cli_image_flags), into
 * *img, *m and *tok. */
int sf_cli_open_model(const char *dir, const char *image, unsigned image_flags,
		      struct sf_image *img, struct sf_model *m, struct sf_tokenizer **tok,
		      struct sf_err *e);

/* End of text: the tokenizer's EOS or any of config.json's eos_token_id. */
int sf_cli_is_eos(const struct sf_model *m, const struct sf_tokenizer *tok, int32_t token);

/* The chat template: forced (>= 0, --chat-template) or the one
 * tokenizer_config.json names by its markers; SF_EUNSUPPORTED when the
 * model (named name) has none, or none of the templates known. */
int sf_cli_chat_template(const struct sf_tokenizer *tok, int forced, const char *name,
			 int *tmpl, struct sf_err *e);
/* The one token that is the template's end-of-turn marker, or -1 when it
 * has none, the vocabulary spells it in several, or it is the end of
 * text (</s>), which ends an answer anyway. */
int sf_cli_end_of_turn(const struct sf_model *m, const struct sf_tokenizer *tok, int tmpl,
		       int32_t *id, struct sf_err *e);
/* The one token that is marker's text, or -1 when the vocabulary spells
 * it in several. */
int sf_cli_marker_token(const struct sf_tokenizer *tok, const char *marker, int32_t *id,
			struct sf_err *e);
/* With gpt-oss's template, whose answers come in harmony's channels
 * (engine/chat.h), and each of its markers one token: *on = 1 and c set
 * up to tell an answer's text from its reasoning; else *on = 0 (the text
 * as written). */
int sf_cli_chat_channels(const struct sf_tokenizer *tok, int tmpl, struct sf_chat_channels *c,
			 int *on, struct sf_err *e);

#endif
