/* tokenizer.json: BPE with merges and byte fallback under the
 * SentencePiece-style normalizer (Llama 2, Mistral, TinyLlama, our models),
 * and byte-level BPE with the Llama 3 / Qwen2 pre-tokenizer regexes; added
 * and special tokens; the decoder chain; add_bos_token from
 * tokenizer_config.json. Results match Hugging Face tokenizers. */
#ifndef SF_TOKENIZER_H
#define SF_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Refused beyond these, each with its own message. */
#define SF_TOKENIZER_MAX_FILE ((uint64_t)256 << 20)	/* bytes of tokenizer.json */
#define SF_TOKENIZER_MAX_VOCAB (4u << 20)	/* entries, and every id below it */
#define SF_TOKENIZER_MAX_MERGES (4u << 20)

struct sf_tokenizer;

/* Reads DIR/tokenizer.json and DIR/tokenizer_config.json (the latter
 * optional). The tokenizer is read-only afterwards: encode and decode may
 * run in several threads at once. */
int sf_tokenizer_open(struct sf_tokenizer **t, const char *dir, struct sf_err *e);
/* The same from the two files' texts in memory (an image's header);
 * config_json may be NULL (no tokenizer_config.json). Messages name them
 * "NAME: tokenizer.json" and "NAME: tokenizer_config.json". */
int sf_tokenizer_open_mem(struct sf_tokenizer **t, const char *name, const char *tokenizer_json,
			  size_t tlen, const char *config_json, size_t clen, struct sf_err *e);
/* The same from an image's header (formats/image.h), named by its path. */
struct sf_image;
int sf_tokenizer_open_image(struct sf_tokenizer **t, const struct sf_image *img,
			    struct sf_err *e);
/* The same from a GGUF's metadata (tokenizer_gguf.c): tokenizer.ggml.model
 * llama (SentencePiece BPE, merges by score) or gpt2 (byte-level BPE
 * with the pre-tokenizers llama-bpe, qwen2 and gpt-2), tokens, token
 * types, scores, merges, BOS/EOS/unknown ids, add_bos/add_eos/
 * add_space_prefix and tokenizer.chat_template, encoding as llama.cpp
 * does; messages name the file. sf_tokenizer_gguf_texts gives the
 * tokenizer.json and tokenizer_config.json texts that stand for it
 * (malloc'ed, NUL-terminated), which an image embeds. */
struct sf_gguf;
int sf_tokenizer_open_gguf(struct sf_tokenizer **t, const struct sf_gguf *g, struct sf_err *e);
int sf_tokenizer_gguf_texts(const struct sf_gguf *g, char **tokenizer_json, char **config_json,
			    struct sf_err *e);
void sf_tokenizer_close(struct sf_tokenizer *t);	/* accepts NULL */

/* Binds a tokenizer to a model whose embedding has vocab_size rows: every
 * id it can produce (its vocabulary, merges' results, added and special
 * tokens, BOS and EOS) is below sf_tokenizer_vocab_size, so that must
 * not pass vocab_size. Returns 0, or SF_EMISMATCH "PATH: token 'PIECE'
 * has id N, beyond the model's M embedding rows (vocab_size)" naming the
 * lowest such id. sf_tokenizer_open_image checks against the image's
 * config itself. */
int sf_tokenizer_check_model(const struct sf_tokenizer *t, int vocab_size, struct sf_err *e);
/* sf_tokenizer_open of DIR, or of a GGUF file's metadata, then
 * sf_tokenizer_check_model; with t NULL the tokenizer is only checked,
 * then closed (sf-pack). */
int sf_tokenizer_open_model(struct sf_tokenizer **t, const char *dir, int vocab_size,
			    struct sf_err *e);

/* Highest id of the model vocabulary or the added tokens, plus one. */
int sf_tokenizer_vocab_size(const struct sf_tokenizer *t);
int sf_tokenizer_bos(const struct sf_tokenizer *t);	/* -1 when none */
int sf_tokenizer_eos(const struct sf_tokenizer *t);	/* -1 when none */
int sf_tokenizer_adds_bos(const struct sf_tokenizer *t);
/* tokenizer_config.json's chat_template (Jinja; of a list, the "default"
 * one), or NULL. */
const char *sf_tokenizer_chat_template(const struct sf_tokenizer *t);

/* The token's string as tokenizer.json spells it (NUL-terminated; *len
 * may be NULL), or NULL for an id that names no token. */
const char *sf_tokenizer_piece(const struct sf_tokenizer *t, int32_t id, size_t *len);
/* 1 for an added token marked special (<s>, </s>, <|eot_id|>), else 0. */
int sf_tokenizer_is_special(const struct sf_tokenizer *t, int32_t id);

/* Encodes len bytes of text (any bytes; invalid UTF-8 goes through byte
 * fallback, or byte by byte in byte-level vocabularies). With add_special,
 * adds what the post-processor template adds (BOS), as Hugging Face's
 * encode() does, corrected by add_bos_token / add_eos_token. *ids is
 * malloc'ed, caller frees. */
int sf_tokenizer_encode(const struct sf_tokenizer *t, const char *text, size_t len,
			int add_special, int32_t **ids, size_t *n, struct sf_err *e);

/* Flags of decode and the streaming decoder. */
#define SF_DECODE_SKIP_SPECIAL 1	/* leave out special tokens (skip_special_tokens=True) */

/* Decodes a whole sequence as Hugging Face's decode() does; ids that name
 * no token are skipped, as there. With clean_up_tokenization_spaces true
 * in tokenizer_config.json (transformers' default is false), " ." becomes
 * ".", and so " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've" and
 * " 're" lose their space, as transformers' decode() does by default
 * then. *out is malloc'ed and NUL-terminated. */
int sf_tokenizer_decode(const struct sf_tokenizer *t, const int32_t *ids, size_t n,
			int flags, char **out, size_t *len, struct sf_err *e);

/* Streaming decode for generation: feed tokens one at a time and get the
 * bytes that are final so far; the concatenation of every push and the
 * finish equals sf_tokenizer_decode of the whole sequence byte for byte.
 * A run of byte-fallback tokens is held until it ends (a later invalid
 * byte turns the whole run into U+FFFD, as Hugging Face does), and in
 * byte-level vocabularies an incomplete UTF-8 character is held; with
 * clean_up_tokenization_spaces, the text from the last space on. The
 * fields are private. */
struct sf_detok {
	const struct sf_tokenizer *t;
	int flags;
	size_t ntokens;		/* tokens handed to the decoder chain so far */
	unsigned strip_left;	/* leading Strip characters still to remove */
	unsigned char *hold;	/* bytes not final yet */
	size_t nhold, caphold;
	char *out;		/* what the last call returned */
	size_t nout, capout;
	char *tmp, *tmp2;	/* one token through the per-token decoders */
	size_t captmp, captmp2;
	char *pend;		/* clean_up_tokenization_spaces: text not given out yet */
	size_t npend, cappend;
	size_t skip;		/* bytes still to leave out (sf_detok_mark) */
};
void sf_detok_init(struct sf_detok *d, const struct sf_tokenizer *t, int flags);
/* *out stays valid until the next call on d. Returns 0 or -ENOMEM. */
int sf_detok_push(struct sf_detok *d, int32_t id, const char **out, size_t *len);
int sf_detok_finish(struct sf_detok *d, const char **out, size_t *len);
/* The text pushed so far is not to be given out (a prompt not echoed)
 * though it shapes what follows: the bytes it still holds back, as
 * finishing here would give them, are left out of the next calls'
 * output. Exact when no held character or clean-up spans the mark.
 * Returns 0 or -ENOMEM. */
int sf_detok_mark(struct sf_detok *d);
void sf_detok_free(struct sf_detok *d);	/* accepts NULL; d may be reused after init */

#endif
