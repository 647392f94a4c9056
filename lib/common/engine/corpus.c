/* Corpora, one document at a time: plain text, JSON lines (a field, or
 * Alpaca records) and CSV through libcsv. See corpus.h and sf-profile(1). */
#include "engine/corpus.h"

#include <csv.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Input is read(2) in chunks and split here rather than by getline, which
 * would grow its buffer to any line a file holds. */
#define READ_CHUNK (64u << 10)
#define CSV_BLOCK (1u << 20)

struct sf_corpus {
	int fd;
	int owns_fd;
	char *path;
	enum sf_corpus_format format;
	char *field;		/* jsonl field or csv column */
	uint64_t size;		/* of a regular file, else 0 */
	uint64_t consumed;	/* bytes read(2) so far */
	unsigned char *chunk;	/* (READ_CHUNK) bytes read, chunk_pos..chunk_len not yet used */
	size_t chunk_pos, chunk_len;
	uint64_t lineno;	/* text, jsonl: lines read */
	char *line;		/* the current line, NUL-terminated */
	size_t line_cap;
	char *doc;		/* the document being assembled */
	size_t doc_len, doc_cap;

	/* csv */
	struct csv_parser csv;
	int csv_ready, csv_eof;
	uint64_t row;		/* records seen, the header being 1 */
	long col;		/* the column's index, -1 until the header is read */
	long field_no;		/* field within the current record */
	char **header;		/* names of the header row */
	size_t nheader;
	char **queue;		/* documents parsed, not yet returned */
	size_t *qlen, qhead, qn, qcap;
	char *cur;		/* the document last returned */
	int cb_err;		/* an error inside a libcsv callback */
	struct sf_err cb_msg;
};

static const char *const format_names[] = { "text", "jsonl", "alpaca", "csv" };

const char *sf_corpus_format_name(enum sf_corpus_format f)
{
	return (unsigned)f < 4 ? format_names[f] : "?";
}

int sf_corpus_format_parse(const char *name, enum sf_corpus_format *f)
{
	for (int i = 0; i < 4; i++) {
		if (strcmp(name, format_names[i]) == 0) {
			*f = (enum sf_corpus_format)i;
			return 0;
		}
	}
	return -1;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && strcmp(s + n - m, suffix) == 0;
}

enum sf_corpus_format sf_corpus_guess(const char *path)
{
	if (ends_with(path, ".jsonl") || ends_with(path, ".json"))
		return SF_CORPUS_JSONL;
	if (ends_with(path, ".csv"))
		return SF_CORPUS_CSV;
	return SF_CORPUS_TEXT;
}

/* RFC 4180: spaces are part of a field; libcsv trims them by default. */
static int no_space(unsigned char ch)
{
	(void)ch;
	return 0;
}

int sf_corpus_open_as(struct sf_corpus **out, const char *path, const struct sf_corpus_opts *o,
		      struct sf_err *e)
{
	struct sf_corpus *c = calloc(1, sizeof(*c));
	const char *field = o->format == SF_CORPUS_CSV
				    ? (o->column ? o->column : SF_CORPUS_DEFAULT_COLUMN)
				    : (o->field ? o->field : SF_CORPUS_DEFAULT_FIELD);
	int ret;

	if (!c || !(c->path = strdup(strcmp(path, "-") == 0 ? "(stdin)" : path)) ||
	    !(c->field = strdup(field)))
		goto nomem;
	c->format = o->format;
	c->col = -1;
	if (strcmp(path, "-") == 0) {
		c->fd = STDIN_FILENO;
	} else {
		if ((c->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
			ret = -errno;
			sf_corpus_close(c);
			return sf_err_set(e, ret, "%s: %s", path, sf_strerror(ret));
		}
		c->owns_fd = 1;
	}
	struct stat st;
	if (fstat(c->fd, &st) == 0 && S_ISREG(st.st_mode))
		c->size = (uint64_t)st.st_size;
	if (c->format == SF_CORPUS_CSV) {
		if (csv_init(&c->csv, CSV_STRICT | CSV_STRICT_FINI) != 0)
			goto nomem;
		c->csv_ready = 1;
		csv_set_space_func(&c->csv, no_space);
		/* libcsv grows a field's buffer by this much at a time (default 128) */
		csv_set_blk_size(&c->csv, CSV_BLOCK);
	}
	if (!(c->chunk = malloc(READ_CHUNK)))
		goto nomem;
	*out = c;
	return 0;
nomem:
	sf_corpus_close(c);
	return sf_err_set(e, -ENOMEM, "%s: %s", path, sf_strerror(-ENOMEM));
}

int sf_corpus_open(struct sf_corpus **c, const char *path, struct sf_err *e)
{
	struct sf_corpus_opts o = { .format = SF_CORPUS_TEXT };
	return sf_corpus_open_as(c, path, &o, e);
}

void sf_corpus_close(struct sf_corpus *c)
{
	if (!c)
		return;
	if (c->owns_fd)
		close(c->fd);
	if (c->csv_ready)
		csv_free(&c->csv);
	for (size_t i = 0; i < c->nheader; i++)
		free(c->header[i]);
	free(c->header);
	for (size_t i = c->qhead; i < c->qn; i++)
		free(c->queue[i]);
	free(c->queue);
	free(c->qlen);
	free(c->cur);
	free(c->chunk);
	free(c->field);
	free(c->path);
	free(c->line);
	free(c->doc);
	free(c);
}

void sf_corpus_progress(const struct sf_corpus *c, uint64_t *done, uint64_t *total)
{
	*done = c->consumed - (c->chunk_len - c->chunk_pos);
	*total = c->size;
}

/* Grows *buf to hold need bytes, doubling but never past limit + 1 (the
 * callers refuse more than limit bytes before asking). */
static int grow(char **buf, size_t *cap, size_t need, size_t limit)
{
	if (need <= *cap)
		return 0;
	size_t ncap = *cap ? *cap : 4096;
	while (ncap < need)
		ncap *= 2;
	if (ncap > limit + 1)
		ncap = limit + 1;
	char *p = realloc(*buf, ncap);
	if (!p)
		return -ENOMEM;
	*buf = p;
	*cap = ncap;
	return 0;
}

/* The next chunk of input: 1, 0 at the end, or a negative error. */
static int fill(struct sf_corpus *c, struct sf_err *e)
{
	ssize_t n;

	do
		n = read(c->fd, c->chunk, READ_CHUNK);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		int ret = -errno;
		return sf_err_set(e, ret, "%s: %s", c->path, sf_strerror(ret));
	}
	c->chunk_pos = 0;
	c->chunk_len = (size_t)n;
	c->consumed += (uint64_t)n;
	return n > 0;
}

static int doc_append(struct sf_corpus *c, const char *s, size_t n, struct sf_err *e)
{
	if (n > SF_CORPUS_MAX_DOC - c->doc_len)
		return sf_err_set(e, SF_ELIMIT, "%s: line %llu: document longer than %u MiB (the "
				  "document limit)", c->path, (unsigned long long)c->lineno,
				  SF_CORPUS_MAX_DOC >> 20);
	if (grow(&c->doc, &c->doc_cap, c->doc_len + n + 1, SF_CORPUS_MAX_DOC))
		return sf_err_set(e, -ENOMEM, "%s: document of %zu bytes: %s", c->path,
				  c->doc_len + n, sf_strerror(-ENOMEM));
	memcpy(c->doc + c->doc_len, s, n);
	c->doc_len += n;
	c->doc[c->doc_len] = '\0';
	return 0;
}

/* 1 with the next line in c->line and its length without the newline
 * in *len, 0 at the end, or a negative error (a line over the limit is
 * refused before it is held). */
static int next_line(struct sf_corpus *c, size_t *len, struct sf_err *e)
{
	size_t n = 0;
	int any = 0, ret;

	for (;;) {
		if (c->chunk_pos == c->chunk_len) {
			if ((ret = fill(c, e)) < 0)
				return ret;
			if (!ret)
				break;
		}
		any = 1;
		const unsigned char *p = c->chunk + c->chunk_pos;
		size_t avail = c->chunk_len - c->chunk_pos;
		const unsigned char *nl = memchr(p, '\n', avail);
		size_t take = nl ? (size_t)(nl - p) : avail;
		if (take > SF_CORPUS_MAX_LINE - n)
			return sf_err_set(e, SF_ELIMIT, "%s: line %llu: longer than %u MiB (the line "
					  "limit)", c->path, (unsigned long long)c->lineno + 1,
					  SF_CORPUS_MAX_LINE >> 20);
		if (grow(&c->line, &c->line_cap, n + take + 1, SF_CORPUS_MAX_LINE))
			return sf_err_set(e, -ENOMEM, "%s: line %llu: %s", c->path,
					  (unsigned long long)c->lineno + 1, sf_strerror(-ENOMEM));
		memcpy(c->line + n, p, take);
		n += take;
		c->chunk_pos += take + (nl != NULL);
		if (nl)
			break;
	}
	if (!any)
		return 0;
	c->lineno++;
	c->line[n] = '\0';
	*len = n;
	return 1;
}

// ----------------------------------------------------------------------------
// text

static int next_text(struct sf_corpus *c, struct sf_err *e)
{
	size_t n;
	int ret;

	while ((ret = next_line(c, &n, e)) > 0) {
		if (n == 0) {
			if (c->doc_len)
				break;
			continue;	/* blank lines between documents */
		}
		if (c->doc_len && (ret = doc_append(c, "\n", 1, e)))
			return ret;
		if ((ret = doc_append(c, c->line, n, e)))
			return ret;
	}
	if (ret < 0)
		return ret;
	return c->doc_len ? 1 : 0;
}

// ----------------------------------------------------------------------------
// JSON lines

static int blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return 0;
	return 1;
}

/* The string field key of object o; required or NULL when absent. */
static int string_field(struct sf_corpus *c, json_t *o, const char *key, int required,
			const char **s, size_t *len, struct sf_err *e)
{
	json_t *v = json_object_get(o, key);
	*s = NULL;
	*len = 0;
	if (!v) {
		if (!required)
			return 0;
		return sf_err_set(e, SF_EFORMAT, "%s: line %llu: no field \"%s\"", c->path,
				  (unsigned long long)c->lineno, key);
	}
	if (!json_is_string(v))
		return sf_err_set(e, SF_EFORMAT, "%s: line %llu: field \"%s\" is not a string",
				  c->path, (unsigned long long)c->lineno, key);
	*s = json_string_value(v);
	*len = json_string_length(v);
	return 0;
}

static int alpaca_doc(struct sf_corpus *c, json_t *o, struct sf_err *e)
{
	static const char with_input[] =
		"Below is an instruction that describes a task, paired with an input that "
		"provides further context. Write a response that appropriately completes the "
		"request.\n\n### Instruction:\n";
	static const char without_input[] =
		"Below is an instruction that describes a task. Write a response that "
		"appropriately completes the request.\n\n### Instruction:\n";
	const char *ins, *in, *out;
	size_t nins, nin, nout;
	int ret;

	if ((ret = string_field(c, o, "instruction", 1, &ins, &nins, e)) ||
	    (ret = string_field(c, o, "input", 0, &in, &nin, e)) ||
	    (ret = string_field(c, o, "output", 1, &out, &nout, e)))
		return ret;
	if (nin) {
		if ((ret = doc_append(c, with_input, sizeof(with_input) - 1, e)) ||
		    (ret = doc_append(c, ins, nins, e)) ||
		    (ret = doc_append(c, "\n\n### Input:\n", 13, e)) ||
		    (ret = doc_append(c, in, nin, e)))
			return ret;
	} else if ((ret = doc_append(c, without_input, sizeof(without_input) - 1, e)) ||
		   (ret = doc_append(c, ins, nins, e))) {
		return ret;
	}
	if ((ret = doc_append(c, "\n\n### Response:\n", 16, e)) ||
	    (ret = doc_append(c, out, nout, e)))
		return ret;
	return 0;
}

static int next_jsonl(struct sf_corpus *c, struct sf_err *e)
{
	size_t n;
	int ret;

	while ((ret = next_line(c, &n, e)) > 0) {
		if (blank(c->line, n))
			continue;
		json_error_t je;
		json_t *o = json_loadb(c->line, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
		if (!o)
			return sf_err_set(e, SF_EFORMAT, "%s: line %llu: not JSON: %s", c->path,
					  (unsigned long long)c->lineno, je.text);
		if (!json_is_object(o)) {
			json_decref(o);
			return sf_err_set(e, SF_EFORMAT, "%s: line %llu: not a JSON object", c->path,
					  (unsigned long long)c->lineno);
		}
		if (c->format == SF_CORPUS_ALPACA) {
			ret = alpaca_doc(c, o, e);
		} else {
			const char *s;
			size_t len;
			ret = string_field(c, o, c->field, 1, &s, &len, e);
			if (!ret && len)
				ret = doc_append(c, s, len, e);
		}
		json_decref(o);
		if (ret)
			return ret;
		if (c->doc_len)
			return 1;
	}
	return ret;
}

// ----------------------------------------------------------------------------
// CSV

static void csv_fail(struct sf_corpus *c, int code, const char *what)
{
	if (c->cb_err)
		return;
	c->cb_err = code;
	sf_err_set(&c->cb_msg, code, "%s: row %llu: %s", c->path,
		   (unsigned long long)c->row + 1, what);
}

static void csv_too_long(struct sf_corpus *c)
{
	char what[96];
	snprintf(what, sizeof(what), "field longer than %u MiB (the document limit)",
		 SF_CORPUS_MAX_DOC >> 20);
	csv_fail(c, SF_ELIMIT, what);
}

static void csv_field(void *s, size_t len, void *data)
{
	struct sf_corpus *c = data;
	long k = c->field_no++;

	if (c->cb_err)
		return;
	if (len > SF_CORPUS_MAX_DOC)
		return csv_too_long(c);
	if (c->col < 0) {	/* the header row */
		char **p = realloc(c->header, (c->nheader + 1) * sizeof(*p));
		if (!p)
			return csv_fail(c, -ENOMEM, "header: out of memory");
		c->header = p;
		/* a UTF-8 byte order mark, as spreadsheets write, is not part of the name */
		if (k == 0 && len >= 3 && memcmp(s, "\xef\xbb\xbf", 3) == 0) {
			s = (char *)s + 3;
			len -= 3;
		}
		if (!(p[c->nheader] = strndup(s, len)))
			return csv_fail(c, -ENOMEM, "header: out of memory");
		c->nheader++;
		return;
	}
	if (k != c->col || len == 0)
		return;
	char *doc = malloc(len + 1);
	if (!doc)
		return csv_fail(c, -ENOMEM, "out of memory");
	memcpy(doc, s, len);
	doc[len] = '\0';
	if (c->qn == c->qcap) {
		if (c->qhead) {	/* reuse the consumed front */
			memmove(c->queue, c->queue + c->qhead, (c->qn - c->qhead) * sizeof(char *));
			memmove(c->qlen, c->qlen + c->qhead, (c->qn - c->qhead) * sizeof(size_t));
			c->qn -= c->qhead;
			c->qhead = 0;
		}
		if (c->qn == c->qcap) {
			size_t cap = c->qcap ? c->qcap * 2 : 64;
			char **q = realloc(c->queue, cap * sizeof(*q));
			if (q)
				c->queue = q;
			size_t *ql = q ? realloc(c->qlen, cap * sizeof(*ql)) : NULL;
			if (!ql) {
				free(doc);
				return csv_fail(c, -ENOMEM, "out of memory");
			}
			c->qlen = ql;
			c->qcap = cap;
		}
	}
	c->queue[c->qn] = doc;
	c->qlen[c->qn++] = len;
}

static void csv_record(int term, void *data)
{
	struct sf_corpus *c = data;
	(void)term;

	if (c->cb_err)
		return;
	if (c->col < 0) {
		for (size_t i = 0; i < c->nheader; i++)
			if (strcmp(c->header[i], c->field) == 0 && c->col < 0)
				c->col = (long)i;
		if (c->col < 0) {
			char names[256] = "";
			for (size_t i = 0; i < c->nheader; i++)
				snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
					 i ? ", " : "", c->header[i]);
			c->cb_err = SF_EFORMAT;
			sf_err_set(&c->cb_msg, SF_EFORMAT, "%s: no column \"%s\" in the header (%s)",
				   c->path, c->field, names);
		}
	} else if (c->field_no <= c->col) {
		char what[128];
		snprintf(what, sizeof(what), "%ld fields, no column \"%s\" (field %ld)",
			 c->field_no, c->field, c->col + 1);
		csv_fail(c, SF_EFORMAT, what);
	}
	c->row++;
	c->field_no = 0;
}

static int next_csv(struct sf_corpus *c, const char **doc, size_t *len, struct sf_err *e)
{
	free(c->cur);
	c->cur = NULL;
	while (c->qhead == c->qn) {
		if (c->cb_err)
			return sf_err_set(e, c->cb_err, "%s", c->cb_msg.msg);
		if (c->csv_eof)
			return 0;
		int ret = fill(c, e);
		if (ret < 0)
			return ret;
		if (ret == 0) {
			c->csv_eof = 1;
			if (csv_fini(&c->csv, csv_field, csv_record, c) != 0 && !c->cb_err)
				return sf_err_set(e, SF_EFORMAT, "%s: row %llu: %s", c->path,
						  (unsigned long long)c->row + 1,
						  "unterminated quoted field");
			continue;
		}
		size_t n = c->chunk_len;
		c->chunk_pos = n;
		if (csv_parse(&c->csv, c->chunk, n, csv_field, csv_record, c) != n && !c->cb_err)
			return sf_err_set(e, SF_EFORMAT, "%s: row %llu: %s", c->path,
					  (unsigned long long)c->row + 1,
					  csv_strerror(csv_error(&c->csv)));
		/* the field libcsv is still assembling (entry_pos: its length so far) */
		if (c->csv.entry_pos > SF_CORPUS_MAX_DOC)
			csv_too_long(c);
	}
	if (c->cb_err)	/* documents before a bad row are not returned */
		return sf_err_set(e, c->cb_err, "%s", c->cb_msg.msg);
	c->cur = c->queue[c->qhead];
	*doc = c->cur;
	*len = c->qlen[c->qhead++];
	return 1;
}

int sf_corpus_next(struct sf_corpus *c, const char **doc, size_t *len, struct sf_err *e)
{
	int ret;

	if (c->format == SF_CORPUS_CSV)
		return next_csv(c, doc, len, e);
	c->doc_len = 0;
	ret = c->format == SF_CORPUS_TEXT ? next_text(c, e) : next_jsonl(c, e);
	if (ret <= 0)
		return ret;
	*doc = c->doc;
	*len = c->doc_len;
	return 1;
}

/* Appends ids to the growing stream, at most room of them. */
static int tokens_append(int32_t **all, size_t *n, size_t *cap, const int32_t *ids, size_t k,
			 const char *path, struct sf_err *e)
{
	if (*n + k > *cap) {
		size_t ncap = *cap ? *cap : 65536;
		while (ncap < *n + k)
			ncap *= 2;
		int32_t *p = realloc(*all, ncap * sizeof(**all));
		if (!p)
			return sf_err_set(e, -ENOMEM, "%s: %zu tokens: %s", path, ncap,
					  sf_strerror(-ENOMEM));
		*all = p;
		*cap = ncap;
	}
	memcpy(*all + *n, ids, k * sizeof(*ids));
	*n += k;
	return 0;
}

int sf_corpus_tokens(const char *const *paths, int npaths, const struct sf_tokenizer *tok,
		     uint64_t max_tokens, int32_t **out, size_t *n_out, size_t *docs_out,
		     struct sf_err *e)
{
	struct sf_corpus **c = calloc((size_t)npaths, sizeof(*c));
	int32_t *all = NULL, *ids = NULL;
	size_t n = 0, cap = 0, docs = 0, k;
	int live = 0, ret = 0;

	if (!c)
		return sf_err_set(e, -ENOMEM, "%s: %s", paths[0], sf_strerror(-ENOMEM));
	for (int i = 0; i < npaths; i++) {
		struct sf_corpus_opts o = { .format = sf_corpus_guess(paths[i]) };
		if ((ret = sf_corpus_open_as(&c[i], paths[i], &o, e)))
			goto out;
		live++;
	}
	while (live && (!max_tokens || n < max_tokens)) {
		for (int i = 0; i < npaths && (!max_tokens || n < max_tokens); i++) {
			const char *doc;
			size_t len;
			if (!c[i])
				continue;
			if ((ret = sf_corpus_next(c[i], &doc, &len, e)) < 0)
				goto out;
			if (ret == 0) {
				sf_corpus_close(c[i]);
				c[i] = NULL;
				live--;
				continue;
			}
			if ((ret = sf_tokenizer_encode(tok, doc, len, 1, &ids, &k, e))) {
				char why[SF_ERR_MAX];
				snprintf(why, sizeof(why), "%s", e ? e->msg : "");
				sf_err_set(e, ret, "%s: %s", paths[i], why);
				goto out;
			}
			if (max_tokens && k > max_tokens - n)
				k = (size_t)(max_tokens - n);
			ret = tokens_append(&all, &n, &cap, ids, k, paths[i], e);
			free(ids);
			ids = NULL;
			if (ret)
				goto out;
			docs++;
		}
	}
	ret = 0;
out:
	for (int i = 0; i < npaths; i++)
		sf_corpus_close(c[i]);
	free(c);
	if (ret) {
		free(all);
		return ret;
	}
	*out = all;
	*n_out = n;
	*docs_out = docs;
	return 0;
}
