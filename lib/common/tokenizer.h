/* tokenizer.json: BPE with merges and byte fallback under the
 * SentencePiece-style normalizer (Llama 2, Mistral, TinyLlama, our models),
 * and byte-level BPE with the Llama 3 / Qwen2 pre-tokenizer regexes; added
 * and special tokens; the decoder chain; add_bos_token from
 * tokenizer_config.json. */
#ifndef SF_TOKENIZER_H
#define SF_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct sf_tokenizer;

/* Reads DIR/tokenizer.json and DIR/tokenizer_config.json (the latter
 * optional). */
int sf_tokenizer_open(struct sf_tokenizer **t, const char *dir, struct sf_err *e);
void sf_tokenizer_close(struct sf_tokenizer *t);	/* accepts NULL */

int sf_tokenizer_vocab_size(const struct sf_tokenizer *t);
int sf_tokenizer_bos(const struct sf_tokenizer *t);	/* -1 when none */
int sf_tokenizer_eos(const struct sf_tokenizer *t);	/* -1 when none */
int sf_tokenizer_adds_bos(const struct sf_tokenizer *t);

/* Encodes len bytes of text (any bytes; invalid UTF-8 goes through byte
 * fallback). With add_special, prepends BOS when the tokenizer adds it, as
 * Hugging Face's encode() does. *ids is malloc'ed, caller frees. */
int sf_tokenizer_encode(const struct sf_tokenizer *t, const char *text, size_t len,
			int add_special, int32_t **ids, size_t *n, struct sf_err *e);

/* Decodes a whole sequence as Hugging Face's decode() does with
 * skip_special_tokens=False; *out is malloc'ed and NUL-terminated. */
int sf_tokenizer_decode(const struct sf_tokenizer *t, const int32_t *ids, size_t n,
			char **out, size_t *len, struct sf_err *e);

/* Streaming decode for generation: feed tokens one at a time and get the
 * bytes that are final so far, so that the concatenation of all outputs
 * (plus sf_detok_finish) equals sf_tokenizer_decode of the whole sequence. */
struct sf_detok {
	const struct sf_tokenizer *t;
	size_t ntokens;		/* tokens seen so far */
	unsigned char pending[8];	/* bytes of an incomplete UTF-8 sequence */
	size_t npending;
};
void sf_detok_init(struct sf_detok *d, const struct sf_tokenizer *t);
/* Writes at most cap bytes to out and returns the count (cap >= 64 is
 * always enough for one token of our vocabularies; longer pieces are
 * truncated to cap). */
size_t sf_detok_push(struct sf_detok *d, int32_t id, char *out, size_t cap);
size_t sf_detok_finish(struct sf_detok *d, char *out, size_t cap);

#endif
