/* Plain-text corpora, one document at a time: see corpus.h. */
#include "corpus.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sf_corpus {
	FILE *f;
	int owns_file;		/* not stdin */
	char *path;
	char *line;		/* getline buffer */
	size_t line_cap;
	char *doc;		/* the document being assembled */
	size_t doc_len, doc_cap;
};

int sf_corpus_open(struct sf_corpus **out, const char *path, struct sf_err *e)
{
	struct sf_corpus *c = calloc(1, sizeof(*c));
	if (!c)
		return sf_err_set(e, -ENOMEM, "%s: %s", path, sf_strerror(-ENOMEM));
	c->path = strdup(strcmp(path, "-") == 0 ? "(stdin)" : path);
	if (!c->path) {
		free(c);
		return sf_err_set(e, -ENOMEM, "%s: %s", path, sf_strerror(-ENOMEM));
	}
	if (strcmp(path, "-") == 0) {
		c->f = stdin;
	} else {
		c->f = fopen(path, "rb");
		if (!c->f) {
			int ret = -errno;
			sf_corpus_close(c);
			return sf_err_set(e, ret, "%s: %s", path, sf_strerror(ret));
		}
		c->owns_file = 1;
	}
	*out = c;
	return 0;
}

void sf_corpus_close(struct sf_corpus *c)
{
	if (!c)
		return;
	if (c->owns_file)
		fclose(c->f);
	free(c->path);
	free(c->line);
	free(c->doc);
	free(c);
}

static int doc_append(struct sf_corpus *c, const char *s, size_t n, struct sf_err *e)
{
	if (c->doc_len + n + 1 > c->doc_cap) {
		size_t cap = c->doc_cap ? c->doc_cap : 4096;
		while (cap < c->doc_len + n + 1)
			cap *= 2;
		char *p = realloc(c->doc, cap);
		if (!p)
			return sf_err_set(e, -ENOMEM, "%s: document of %zu bytes: %s", c->path,
					  c->doc_len + n, sf_strerror(-ENOMEM));
		c->doc = p;
		c->doc_cap = cap;
	}
	memcpy(c->doc + c->doc_len, s, n);
	c->doc_len += n;
	c->doc[c->doc_len] = '\0';
	return 0;
}

int sf_corpus_next(struct sf_corpus *c, const char **doc, size_t *len, struct sf_err *e)
{
	ssize_t n;
	int ret;

	c->doc_len = 0;
	for (;;) {
		errno = 0;
		n = getline(&c->line, &c->line_cap, c->f);
		if (n < 0) {
			if (ferror(c->f)) {
				ret = errno ? -errno : -EIO;
				return sf_err_set(e, ret, "%s: %s", c->path, sf_strerror(ret));
			}
			break;
		}
		if (n > 0 && c->line[n - 1] == '\n')
			n--;
		if (n == 0) {
			if (c->doc_len)
				break;
			continue;	/* blank lines between documents */
		}
		if (c->doc_len && (ret = doc_append(c, "\n", 1, e)))
			return ret;
		if ((ret = doc_append(c, c->line, (size_t)n, e)))
			return ret;
	}
	if (!c->doc_len)
		return 0;
	*doc = c->doc;
	*len = c->doc_len;
	return 1;
}
