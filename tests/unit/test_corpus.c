/* Corpus readers: plain text, JSON lines, Alpaca records and RFC 4180 CSV
 * give the documents expected (quotes, embedded newlines, commas, UTF-8,
 * CRLF, a byte order mark), and bad input fails with one line naming the
 * file and the line or row. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/corpus.h"
#include "unit.h"

static const char *tmp;

static const char *put(const char *name, const char *text)
{
	static char path[4096];
	snprintf(path, sizeof(path), "%s/%s", tmp, name);
	FILE *f = fopen(path, "wb");
	fwrite(text, 1, strlen(text), f);
	fclose(f);
	return path;
}

/* Reads every document of text as format; checks them against want (a
 * NULL-terminated list) or, with err, that reading fails with that exact
 * message after the file name (want NULL: documents before it not checked). */
static void expect(const char *what, const char *text, enum sf_corpus_format fmt,
		   const char *field, const char *const *want, const char *err)
{
	char name[64];
	snprintf(name, sizeof(name), "corpus-%s", what);
	const char *path = put(name, text);
	struct sf_corpus_opts o = { .format = fmt, .field = field, .column = field };
	struct sf_corpus *c = NULL;
	struct sf_err e = { 0 };
	const char *doc;
	size_t len;
	int ret = sf_corpus_open_as(&c, path, &o, &e), k = 0;

	CHECK(ret == 0, "%s: open: %s", what, e.msg);
	if (ret)
		return;
	while ((ret = sf_corpus_next(c, &doc, &len, &e)) > 0) {
		if (!want)
			continue;	/* an error case: what comes before the bad line */
		if (!want[k]) {
			CHECK(0, "%s: document %d not expected: \"%s\"", what, k, doc);
			break;
		}
		CHECK(len == strlen(want[k]) && memcmp(doc, want[k], len) == 0,
		      "%s: document %d is \"%s\", expected \"%s\"", what, k, doc, want[k]);
		k++;
	}
	if (err) {
		char full[8192];
		snprintf(full, sizeof(full), "%s: %s", path, err);
		CHECK(ret < 0 && strcmp(e.msg, full) == 0, "%s: error \"%s\", expected \"%s\"", what,
		      ret < 0 ? e.msg : "(none)", full);
	} else {
		CHECK(ret == 0, "%s: %s", what, e.msg);
		CHECK(want[k] == NULL, "%s: %d documents, more expected", what, k);
	}
	sf_corpus_close(c);
}

/* The token stream: documents of two corpora in turn, each BOS first and
 * encoded as alone, cut at max_tokens. */
static void check_tokens(void)
{
	char dir[4096];
	struct sf_tokenizer *tok = NULL;
	struct sf_err e = { 0 };
	char a[4096], b[4096];	/* put() returns one static buffer */
	snprintf(a, sizeof(a), "%s", put("tok-a.txt", "In the beginning\n\nGod created"));
	snprintf(b, sizeof(b), "%s", put("tok-b.jsonl", "{\"text\": \"A man who\"}\n"));
	const char *paths[] = { a, b };
	const char *docs_in_order[] = { "In the beginning", "A man who", "God created" };
	int32_t *want = NULL, *got = NULL, *ids;
	size_t nwant = 0, ngot, k, docs;

	snprintf(dir, sizeof(dir), "%s/models/mix4-1m", unit_env("SF_ROOT", "."));
	CHECK(sf_tokenizer_open(&tok, dir, &e) == 0, "%s", e.msg);
	if (!tok)
		return;
	want = malloc(4096 * sizeof(*want));
	for (int i = 0; i < 3; i++) {
		CHECK(sf_tokenizer_encode(tok, docs_in_order[i], strlen(docs_in_order[i]), 1, &ids,
					  &k, &e) == 0, "%s", e.msg);
		memcpy(want + nwant, ids, k * sizeof(*ids));
		nwant += k;
		free(ids);
	}
	CHECK(sf_corpus_tokens(paths, 2, tok, 0, &got, &ngot, &docs, &e) == 0, "%s", e.msg);
	CHECK(ngot == nwant && docs == 3 && memcmp(got, want, ngot * sizeof(*got)) == 0,
	      "round robin stream: %zu tokens from %zu documents, expected %zu from 3", ngot,
	      docs, nwant);
	free(got);
	CHECK(sf_corpus_tokens(paths, 2, tok, 5, &got, &ngot, &docs, &e) == 0, "%s", e.msg);
	CHECK(ngot == 5 && memcmp(got, want, 5 * sizeof(*got)) == 0 && got[0] == 1,
	      "max_tokens 5: %zu tokens", ngot);
	free(got);
	const char *missing[] = { a, "/nonexistent/corpus.txt" };
	CHECK(sf_corpus_tokens(missing, 2, tok, 0, &got, &ngot, &docs, &e) == -ENOENT &&
	      strstr(e.msg, "/nonexistent/corpus.txt"), "missing corpus: %s", e.msg);
	free(want);
	sf_tokenizer_close(tok);
}

/* Lines are cut from 64 KiB reads: lines of every length around the read
 * size, and one of exactly SF_CORPUS_MAX_LINE bytes (the longest
 * accepted), come back whole; progress ends at the file's size. */
static void long_lines(void)
{
	static const size_t lens[] = { 1, 65535, 65536, 65537, 3, 131072, 200000, 0, 7,
				       SF_CORPUS_MAX_LINE, 2 };
	const size_t n = sizeof(lens) / sizeof(lens[0]);
	char path[4096];
	snprintf(path, sizeof(path), "%s/corpus-long.txt", tmp);
	FILE *f = fopen(path, "wb");
	uint64_t size = 0;
	for (size_t i = 0; i < n; i++) {
		for (size_t k = 0; k < lens[i]; k++)
			fputc('a' + (int)((i + k) % 26), f);
		fputc('\n', f);
		size += lens[i] + 1;
	}
	CHECK(fclose(f) == 0, "%s: cannot write", path);

	struct sf_corpus *c = NULL;
	struct sf_err e = { 0 };
	const char *doc;
	size_t len, i = 0;
	int ret;
	CHECK(sf_corpus_open(&c, path, &e) == 0, "open: %s", e.msg);
	while (c && (ret = sf_corpus_next(c, &doc, &len, &e)) > 0) {
		size_t want = 0, at = 0, start = i;	/* the document: lines up to a blank one */
		for (; i < n && lens[i]; i++)
			want += lens[i] + (i > start);
		int same = len == want;
		for (size_t j = start; same && j < i; j++) {
			for (size_t k = 0; same && k < lens[j]; k++)
				same = doc[at++] == 'a' + (int)((j + k) % 26);
			if (j + 1 < i)
				same = same && doc[at++] == '\n';
		}
		CHECK(same, "document from line %zu: %zu bytes, expected %zu", start + 1, len, want);
		i++;	/* the blank line */
	}
	CHECK(ret == 0 && i >= n, "%s: %zu lines read", e.msg, i);
	uint64_t done, total;
	sf_corpus_progress(c, &done, &total);
	CHECK(done == size && total == size, "progress %llu of %llu, file %llu",
	      (unsigned long long)done, (unsigned long long)total, (unsigned long long)size);
	sf_corpus_close(c);
	unlink(path);
}

int main(void)
{
	tmp = unit_env("SF_TMP", "/tmp");

	const char *text[] = { "first line\nsecond line", "caf\xc3\xa9 \xe2\x80\x94 ok", "last",
			       NULL };
	expect("text", "\n\nfirst line\nsecond line\n\n\n\ncaf\xc3\xa9 \xe2\x80\x94 ok\n\nlast",
	       SF_CORPUS_TEXT, NULL, text, NULL);
	const char *none[] = { NULL };
	expect("empty", "\n\n\n", SF_CORPUS_TEXT, NULL, none, NULL);

	const char *jsonl[] = { "He said \"hi\", then left.\nNext line", "\xce\xbb x", NULL };
	expect("jsonl",
	       "{\"task\": \"a\", \"text\": \"He said \\\"hi\\\", then left.\\nNext line\"}\n"
	       "\n"
	       "{\"text\": \"\"}\n"
	       "{\"text\": \"\\u03bb x\", \"extra\": [1, 2]}\r\n",
	       SF_CORPUS_JSONL, NULL, jsonl, NULL);
	const char *body[] = { "b1", NULL };
	expect("jsonl-field", "{\"text\": \"t\", \"body\": \"b1\"}\n", SF_CORPUS_JSONL, "body", body,
	       NULL);
	expect("jsonl-array", "{\"text\": \"ok\"}\n[1, 2]\n", SF_CORPUS_JSONL, NULL, NULL,
	       "line 2: not a JSON object");
	expect("jsonl-nofield", "{\"body\": \"x\"}\n", SF_CORPUS_JSONL, NULL, NULL,
	       "line 1: no field \"text\"");
	expect("jsonl-number", "{\"text\": 3}\n", SF_CORPUS_JSONL, NULL, NULL,
	       "line 1: field \"text\" is not a string");
	expect("jsonl-broken", "{\"text\": \"x\"\n", SF_CORPUS_JSONL, NULL, NULL,
	       "line 1: not JSON: '}' expected near end of file");

	const char *alpaca[] = {
		"Below is an instruction that describes a task, paired with an input that provides "
		"further context. Write a response that appropriately completes the request.\n\n"
		"### Instruction:\nTranslate.\n\n### Input:\nchat\n\n### Response:\ncat",
		"Below is an instruction that describes a task. Write a response that appropriately "
		"completes the request.\n\n### Instruction:\nSay hi.\n\n### Response:\nhi",
		NULL };
	expect("alpaca",
	       "{\"instruction\": \"Translate.\", \"input\": \"chat\", \"output\": \"cat\"}\n"
	       "{\"instruction\": \"Say hi.\", \"input\": \"\", \"output\": \"hi\"}\n",
	       SF_CORPUS_ALPACA, NULL, alpaca, NULL);
	expect("alpaca-nooutput", "{\"instruction\": \"x\"}\n", SF_CORPUS_ALPACA, NULL, NULL,
	       "line 1: no field \"output\"");

	const char *csv[] = { "plain", "with, comma", "a \"quoted\" word",
			      "two\nlines, and \xe2\x9c\x93", "  spaces kept  ", "crlf\r\ninside",
			      NULL };
	expect("csv",
	       "\xef\xbb\xbftask,text,n\r\n"
	       "a,plain,1\r\n"
	       "b,\"with, comma\",2\r\n"
	       "c,\"a \"\"quoted\"\" word\",3\n"
	       "d,\"two\nlines, and \xe2\x9c\x93\",4\n"
	       "e,,5\n"
	       "\n"
	       "f,  spaces kept  ,6\n"
	       "g,\"crlf\r\ninside\",7",
	       SF_CORPUS_CSV, NULL, csv, NULL);
	expect("csv-nocolumn", "task,body\nkjv,x\n", SF_CORPUS_CSV, NULL, NULL,
	       "no column \"text\" in the header (task, body)");
	expect("csv-short", "task,text\nkjv,x\nman\n", SF_CORPUS_CSV, NULL, NULL,
	       "row 3: 1 fields, no column \"text\" (field 2)");
	expect("csv-quote", "task,text\nkjv,\"open\n", SF_CORPUS_CSV, NULL, NULL,
	       "row 2: unterminated quoted field");
	const char *col[] = { "kjv", NULL };
	expect("csv-column", "task,text\nkjv,x\n", SF_CORPUS_CSV, "task", col, NULL);

	CHECK(sf_corpus_guess("a/b.jsonl") == SF_CORPUS_JSONL &&
	      sf_corpus_guess("b.csv") == SF_CORPUS_CSV &&
	      sf_corpus_guess("kjv.profile.txt") == SF_CORPUS_TEXT, "format from the name");
	check_tokens();
	long_lines();
	return unit_exit();
}
