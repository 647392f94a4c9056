/* Corpora as a stream of documents. Plain text: documents separated by a
 * blank line, a document's lines joined by "\n" (its last newline is not
 * part of it). "-" reads standard input. Documents are read one at a
 * time, so corpora larger than memory stream. */
#ifndef SF_CORPUS_H
#define SF_CORPUS_H

#include <stddef.h>

#include "err.h"

struct sf_corpus;

int sf_corpus_open(struct sf_corpus **c, const char *path, struct sf_err *e);
void sf_corpus_close(struct sf_corpus *c);	/* accepts NULL */

/* 1 with *doc (valid until the next call) and *len set, 0 at the end, or a
 * negative error. Empty documents are skipped. */
int sf_corpus_next(struct sf_corpus *c, const char **doc, size_t *len, struct sf_err *e);

#endif
