/* Corpora as a stream of documents, read one at a time so corpora larger
 * than memory stream; "-" reads standard input. Formats (man/sf-profile.1):
 * - text: documents separated by a blank line, a document's lines joined
 *   by "\n" (its last newline is not part of it);
 * - jsonl: one JSON object per line, the document is a string field;
 * - alpaca: JSON lines with instruction, input (optional) and output,
 *   joined in Stanford Alpaca's prompt format (see SF_CORPUS_ALPACA);
 * - csv: RFC 4180 (quoted fields with commas, quotes and newlines), a
 *   header row naming the columns, the document is one column.
 * Empty documents are skipped in every format. */
#ifndef SF_CORPUS_H
#define SF_CORPUS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/tokenizer.h"

enum sf_corpus_format { SF_CORPUS_TEXT, SF_CORPUS_JSONL, SF_CORPUS_ALPACA, SF_CORPUS_CSV };

#define SF_CORPUS_DEFAULT_FIELD "text"
#define SF_CORPUS_DEFAULT_COLUMN "text"

/* Limits, so that a file without newlines cannot make a reader hold
 * unbounded memory: a line of text or JSON (and so an Alpaca record), and
 * a document (a text document's lines joined, a CSV field). Longer input
 * is refused (SF_ELIMIT) naming the line or row and the limit. */
#define SF_CORPUS_MAX_LINE (16u << 20)
#define SF_CORPUS_MAX_DOC (64u << 20)

/* Alpaca records become, as Stanford Alpaca's train.py formats them (its
 * PROMPT_DICT), the prompt followed by the output:
 *   "Below is an instruction that describes a task, paired with an input
 *   that provides further context. Write a response that appropriately
 *   completes the request.\n\n### Instruction:\n{instruction}\n\n
 *   ### Input:\n{input}\n\n### Response:\n{output}"
 * and without an input (absent or empty) "Below is an instruction that
 * describes a task. Write a response that appropriately completes the
 * request.\n\n### Instruction:\n{instruction}\n\n### Response:\n{output}". */

struct sf_corpus_opts {
	enum sf_corpus_format format;
	const char *field;	/* jsonl: NULL for SF_CORPUS_DEFAULT_FIELD */
	const char *column;	/* csv: NULL for SF_CORPUS_DEFAULT_COLUMN */
};

struct sf_corpus;

/* A plain-text corpus. */
int sf_corpus_open(struct sf_corpus **c, const char *path, struct sf_err *e);
/* Any format. */
int sf_corpus_open_as(struct sf_corpus **c, const char *path, const struct sf_corpus_opts *o,
		      struct sf_err *e);
void sf_corpus_close(struct sf_corpus *c);	/* accepts NULL */

/* 1 with *doc (valid until the next call, NUL-terminated) and *len set, 0
 * at the end, or a negative error naming the file and line or row (a JSON
 * line that is not an object or lacks the field, a CSV without the
 * column, malformed quoting). */
int sf_corpus_next(struct sf_corpus *c, const char **doc, size_t *len, struct sf_err *e);

/* Bytes read so far and the file's size (0 when unknown: a pipe). */
void sf_corpus_progress(const struct sf_corpus *c, uint64_t *done, uint64_t *total);

/* The format a file name suggests: .jsonl and .json are jsonl, .csv is
 * csv, anything else text. */
enum sf_corpus_format sf_corpus_guess(const char *path);
int sf_corpus_format_parse(const char *name, enum sf_corpus_format *f);	/* 0, or -1 */
const char *sf_corpus_format_name(enum sf_corpus_format f);

/* The documents of npaths corpora (formats guessed from the names), taken
 * in turn one from each so that a token budget samples every corpus,
 * each tokenized with BOS first as Hugging Face's encode() does, into one
 * malloc'ed stream of at most max_tokens tokens (0: all). *docs counts the
 * documents used. The stream for perplexity, calibration and benchmarks. */
int sf_corpus_tokens(const char *const *paths, int npaths, const struct sf_tokenizer *tok,
		     uint64_t max_tokens, int32_t **out, size_t *n, size_t *docs,
		     struct sf_err *e);

#endif
