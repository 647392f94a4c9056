/* The limits that make hostile input cheap to refuse (issue 9), each
 * checked with the exact message: a trace header that would commit the
 * reader to huge buffers, JSON files past their size limit, calib.json
 * counts that are not whole or claim more layers than are listed, corpus
 * lines and documents without end. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "formats/calib.h"
#include "engine/corpus.h"
#include "base/jsonfile.h"
#include "formats/placement.h"
#include "formats/trace.h"
#include "unit.h"

static const struct sf_fingerprint FP = { "0123456789abcdef", "0123456789abcdef" };

static char tmp[4096];

/* A header describing 64 layers of 2^24 entries per group: 32 GiB of sums. */
static void trace_buffers(void)
{
	uint32_t entries[SF_NKINDS] = { 0 };
	struct sf_trace_info info;
	struct sf_trace_reader *r = NULL;
	struct sf_err e = { 0 };
	char want[8192];

	for (int g = 0; g < SF_NGROUPS; g++)
		entries[g] = SF_TRACE_MAX_ENTRIES;
	int ret = sf_trace_info_init(&info, &FP, 64, entries, 0, 0, 63,
				     (1u << SF_NGROUPS) - 1, SF_TRACE_THRESHOLD, 0.5, NULL, &e);
	CHECK(ret == 0, "info_init: %s", e.msg);
	char *text = json_dumps(info.header, JSON_COMPACT);
	size_t hlen = strlen(text);
	unsigned char *buf = malloc(16 + hlen);
	memcpy(buf, SF_TRACE_MAGIC, 8);
	sf_put_le32(buf + 8, SF_TRACE_VERSION);
	sf_put_le32(buf + 12, (uint32_t)hlen);
	memcpy(buf + 16, text, hlen);
	const char *path = unit_write_file(tmp, "huge.sft", buf, 16 + hlen);
	ret = sf_trace_open(&r, path, &e);
	CHECK(ret == SF_ELIMIT && !r, "open: %d %s", ret, e.msg);
	snprintf(want, sizeof(want), "%s: header: 64 tokens per block over 256 slots need "
		 "103079215120 bytes of buffers: at most 1073741824", path);
	CHECK(strcmp(e.msg, want) == 0, "message: %s", e.msg);
	free(buf);
	free(text);
	sf_trace_info_free(&info);
}

static void json_size(void)
{
	const char doc[] = "{\"format\": \"sparseflash-placement\", \"padding\": \"                \"}";
	const char *path = unit_write_file(tmp, "big.json", doc, sizeof(doc) - 1);
	struct sf_err e = { 0 };
	char want[8192];
	json_t *j;

	CHECK(sf_json_load(&j, path, sizeof(doc) - 1, &e) == 0 && json_is_object(j), "at the limit: %s",
	      e.msg);
	json_decref(j);
	CHECK(sf_json_load(&j, path, sizeof(doc) - 2, &e) == SF_ELIMIT && !j, "over the limit");
	snprintf(want, sizeof(want), "%s: larger than the limit of %zu bytes", path, sizeof(doc) - 2);
	CHECK(strcmp(e.msg, want) == 0, "message: %s", e.msg);
	path = unit_write_file(tmp, "bad.json", "{\n\"a\": 1,\n\"a\": 2}", 18);
	CHECK(sf_json_load(&j, path, 100, &e) == SF_EFORMAT, "duplicate key");
	snprintf(want, sizeof(want), "%s: line 3: duplicate object key near '\"a\"'", path);
	CHECK(strcmp(e.msg, want) == 0, "message: %s", e.msg);
	/* the stage readers pass their own limits */
	CHECK(SF_PLACEMENT_MAX_FILE == 256u << 20 && SF_CALIB_MAX_FILE == 64u << 20, "limits");
}

/* calib.json: a minimal file with the given n_layers, layers listed and
 * k_top of layer 0. */
static int calib_with(const char *n_layers, int listed, const char *k_top, struct sf_err *e)
{
	char doc[8192], layer[512], groups[512];
	size_t at = 0;

	snprintf(groups, sizeof(groups), "{\"attn_in\": {\"entries\": 8, \"top_bytes\": 16, "
		 "\"mid_bytes\": 4}, \"attn_out\": {\"entries\": 8, \"top_bytes\": 16, \"mid_bytes\": "
		 "4}, \"ffn_in\": {\"entries\": 8, \"top_bytes\": 16, \"mid_bytes\": 4}, \"ffn_out\": "
		 "{\"entries\": 8, \"top_bytes\": 16, \"mid_bytes\": 4}}");
	at += (size_t)snprintf(doc + at, sizeof(doc) - at, "{\"version\": 2, \"fingerprint\": \"0123456789abcdef\", "
			       "\"shape_fingerprint\": \"0123456789abcdef\", "
			       "\"method\": \"scalar\", \"n_layers\": %s, \"tokens\": 8, \"window\": "
			       "8, \"groups\": %s, \"budgets\": [{\"budget\": 0.5, \"realised\": 0.5, "
			       "\"layers\": [", n_layers, groups);
	for (int l = 0; l < listed; l++) {
		const char *g = "{\"k_top\": 1, \"k_mid\": 0}";
		snprintf(layer, sizeof(layer), "%s{\"layer\": %d, \"budget\": 0.5, \"error\": 0, "
			 "\"groups\": {\"attn_in\": {\"k_top\": %s, \"k_mid\": 0}, \"attn_out\": %s, \"ffn_in\": "
			 "%s, \"ffn_out\": %s}}", l ? ", " : "", l, l ? "1" : k_top, g, g, g);
		at += (size_t)snprintf(doc + at, sizeof(doc) - at, "%s", layer);
	}
	at += (size_t)snprintf(doc + at, sizeof(doc) - at, "]}]}");
	struct sf_calib c;
	int ret = sf_calib_load(&c, unit_write_file(tmp, "calib.json", doc, at), e);
	if (!ret)
		sf_calib_free(&c);
	return ret;
}

static void calib_counts(void)
{
	struct sf_err e = { 0 };
	char want[8192];
	char path[4200];

	snprintf(path, sizeof(path), "%s/calib.json", tmp);
	CHECK(calib_with("2", 2, "1", &e) == 0, "valid: %s", e.msg);
	CHECK(calib_with("2", 2, "1.5", &e) == SF_EFORMAT, "half an entry");
	snprintf(want, sizeof(want), "%s: budget 0.5 layer 0 attn_in: \"k_top\" is 1.5: expected a "
		 "whole number", path);
	CHECK(strcmp(e.msg, want) == 0, "message: %s", e.msg);
	CHECK(calib_with("4097", 2, "1", &e) == SF_EFORMAT, "layers beyond the limit");
	snprintf(want, sizeof(want), "%s: \"n_layers\" is 4097: expected 1..%d", path,
		 SF_CALIB_MAX_LAYERS);
	CHECK(strcmp(e.msg, want) == 0, "message: %s", e.msg);
	CHECK(calib_with("4096", 2, "1", &e) == SF_EFORMAT, "layers claimed, not listed");
	snprintf(want, sizeof(want), "%s: budget 1: expected 4096 layers", path);
	CHECK(strcmp(e.msg, want) == 0, "message: %s", e.msg);
}

/* The first error reading every document of path as fmt: 0 when none. */
static int corpus_error(const char *path, enum sf_corpus_format fmt, struct sf_err *e)
{
	struct sf_corpus_opts o = { .format = fmt };
	struct sf_corpus *c;
	const char *doc;
	size_t len;
	int ret = sf_corpus_open_as(&c, path, &o, e);

	if (ret)
		return ret;
	while ((ret = sf_corpus_next(c, &doc, &len, e)) > 0)
		;
	sf_corpus_close(c);
	return ret;
}

static void corpus_expect(const char *path, enum sf_corpus_format fmt, const char *what)
{
	struct sf_err e = { 0 };
	char want[8192];
	int ret = corpus_error(path, fmt, &e);

	snprintf(want, sizeof(want), "%s: %s", path, what);
	CHECK(ret == SF_ELIMIT && strcmp(e.msg, want) == 0, "%s as %s: %d \"%s\", expected \"%s\"",
	      path, sf_corpus_format_name(fmt), ret, e.msg, want);
}

/* Writes head, n bytes of ch, then tail. */
static const char *write_long(const char *name, const char *head, int ch, size_t n,
			      const char *tail)
{
	static char path[4200];
	static char block[1 << 16];
	snprintf(path, sizeof(path), "%s/%s", tmp, name);
	FILE *f = fopen(path, "wb");
	int ok = f && fputs(head, f) >= 0;
	memset(block, ch, sizeof(block));
	for (size_t at = 0; ok && at < n; at += sizeof(block)) {
		size_t k = n - at < sizeof(block) ? n - at : sizeof(block);
		ok = fwrite(block, 1, k, f) == k;
	}
	ok = ok && fputs(tail, f) >= 0;
	CHECK(f && fclose(f) == 0 && ok, "%s: cannot write", path);
	return path;
}

/* An endless line (/dev/zero has no newline) is refused once it passes
 * the line limit, in every line-based format; a CSV field, also the
 * header's, at the document limit; a text document of many lines at the
 * document limit. Each after reading about the limit, not the input. */
static void corpus_lengths(void)
{
	char what[256], cmd[4100];

	for (int f = SF_CORPUS_TEXT; f <= SF_CORPUS_ALPACA; f++)
		corpus_expect("/dev/zero", (enum sf_corpus_format)f,
			      "line 1: longer than 16 MiB (the line limit)");
	corpus_expect("/dev/zero", SF_CORPUS_CSV, "row 1: field longer than 64 MiB (the document "
		      "limit)");
	const char *path = write_long("long.csv", "id,text\n1,", 'x', SF_CORPUS_MAX_DOC + 1, "\n");
	corpus_expect(path, SF_CORPUS_CSV, "row 2: field longer than 64 MiB (the document limit)");
	unlink(path);
	path = write_long("long.jsonl", "{\"text\": \"a\", \"instruction\": \"i\", \"output\": "
			  "\"o\"}\n{\"text\": \"", 'x', SF_CORPUS_MAX_LINE, "\"}\n");
	corpus_expect(path, SF_CORPUS_JSONL, "line 2: longer than 16 MiB (the line limit)");
	corpus_expect(path, SF_CORPUS_ALPACA, "line 2: longer than 16 MiB (the line limit)");
	unlink(path);

	/* lines of 4,000 bytes from a pipe, without a blank line */
	snprintf(cmd, sizeof(cmd), "yes %04000d", 0);
	FILE *p = popen(cmd, "r");
	char fd[64];
	CHECK(p, "popen: %s", strerror(errno));
	if (!p)
		return;
	snprintf(fd, sizeof(fd), "/proc/self/fd/%d", fileno(p));
	unsigned lines = 1;	/* the first line that takes the document past the limit */
	while (4001ull * lines - 1 <= SF_CORPUS_MAX_DOC)
		lines++;
	snprintf(what, sizeof(what), "line %u: document longer than 64 MiB (the document limit)",
		 lines);
	corpus_expect(fd, SF_CORPUS_TEXT, what);
	pclose(p);
}

int main(void)
{
	snprintf(tmp, sizeof(tmp), "%s/limits.XXXXXX", unit_env("SF_TMP", "/tmp"));
	if (!mkdtemp(tmp))
		unit_skip("cannot make a scratch directory");
	trace_buffers();
	json_size();
	calib_counts();
	corpus_lengths();
	char cmd[4200];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	CHECK(system(cmd) == 0, "cleanup");
	return unit_exit();
}
