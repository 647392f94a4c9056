/* The tokenizer from a GGUF's metadata (engine/tokenizer_gguf.c) against
 * llama.cpp's own tokenizer tests: its source ships vocabulary-only GGUFs
 * of real models (models/ggml-vocab-NAME.gguf) with inputs and the ids
 * Hugging Face's tokenizers give them (.gguf.inp, .gguf.out, read as
 * llama.cpp's tests/test-tokenizer-0.cpp reads them), encoded without
 * special tokens. Each vocabulary whose model and pre-tokenizer we take
 * must give those ids on every input; one whose pre-tokenizer we do not
 * split is refused by name. Skipped (exit 77) without llama.cpp's source
 * (tests/bench/llamacpp.bash sets it up). */
#include <errno.h>
#include <libgen.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/file.h"
#include "engine/tokenizer.h"
#include "formats/gguf.h"
#include "ggufpy.h"
#include "unit.h"

#define SEPARATOR "\n__ggml_vocab_test__\n"

/* SentencePiece (Llama 2, Phi-3) and byte-level BPE with the
 * pre-tokenizers we split as llama.cpp does (MPT's is GPT-2's) */
static const char *const vocabs[] = { "llama-spm", "phi-3", "llama-bpe", "qwen2", "gpt-2", "mpt" };

/* DIR/NAME.SUFFIX's bytes, NUL-terminated (or NULL). */
static char *slurp(const char *dir, const char *name, const char *suffix, size_t *len)
{
	char path[4600];
	char *buf = NULL;
	struct sf_err e = { 0 };

	snprintf(path, sizeof(path), "%s/ggml-vocab-%s.gguf%s", dir, name, suffix);
	CHECK(sf_file_read(path, 64u << 20, 0, &buf, len, &e) == 0, "%s", e.msg);
	return buf;
}

/* The ids of one .out line ("" when it has none) into ids; their count. */
static size_t parse_ids(const char *line, int32_t *ids, size_t cap)
{
	size_t n = 0;
	char *end;

	for (;;) {
		long v = strtol(line, &end, 10);
		if (end == line || n == cap)
			return n;
		ids[n++] = (int32_t)v;
		line = end;
	}
}

static void test_vocab(const char *dir, const char *name)
{
	struct sf_gguf g;
	struct sf_tokenizer *t = NULL;
	struct sf_err e = { 0 };
	char path[4600];
	size_t ilen, olen, cases = 0;
	char *inp, *out;

	snprintf(path, sizeof(path), "%s/ggml-vocab-%s.gguf", dir, name);
	if (sf_gguf_open(&g, path, &e)) {
		CHECK(0, "%s", e.msg);
		return;
	}
	CHECK(sf_tokenizer_open_gguf(&t, &g, &e) == 0, "%s", e.msg);
	inp = slurp(dir, name, ".inp", &ilen);
	out = slurp(dir, name, ".out", &olen);
	for (char *in = inp, *o = out; t && in && o && *o; cases++) {
		char *sep = strstr(in, SEPARATOR), *nl = strchr(o, '\n');
		size_t len = sep ? (size_t)(sep - in) : strlen(in);
		int32_t want[512], *got = NULL;
		size_t nwant, ngot = 0;

		if (nl)
			*nl = 0;
		nwant = parse_ids(o, want, 512);
		CHECK(sf_tokenizer_encode(t, in, len, 0, &got, &ngot, &e) == 0, "%s", e.msg);
		int same = ngot == nwant && (!ngot || !memcmp(got, want, ngot * sizeof(*got)));
		CHECK(same, "%s case %zu '%.*s': %zu ids%s%d..., Hugging Face's %zu:%s", name, cases,
		      (int)(len < 40 ? len : 40), in, ngot, ngot ? " " : "", ngot ? got[0] : 0,
		      nwant, o);
		free(got);
		if (!sep || !nl)
			break;
		in = sep + strlen(SEPARATOR);
		o = nl + 1;
	}
	CHECK(cases >= 30, "%s: %zu cases read", name, cases);
	printf("%s: %zu inputs compared\n", name, cases);
	free(inp);
	free(out);
	sf_tokenizer_close(t);
	sf_gguf_close(&g);
}

/* Falcon's pre-tokenizer (its own split regexes): refused by name. */
static void test_refused(const char *dir)
{
	struct sf_gguf g;
	struct sf_tokenizer *t = NULL;
	struct sf_err e = { 0 };
	char path[4600];

	snprintf(path, sizeof(path), "%s/ggml-vocab-falcon.gguf", dir);
	CHECK(sf_gguf_open(&g, path, &e) == 0, "%s", e.msg);
	CHECK(sf_tokenizer_open_gguf(&t, &g, &e) == SF_EUNSUPPORTED && !t &&
	      strstr(e.msg, "key 'tokenizer.ggml.pre': 'falcon' unsupported"), "falcon: %s", e.msg);
	sf_gguf_close(&g);
}

int main(void)
{
	const char *py = unit_gguf_py();
	char dir[4300];
	struct stat sb;

	if (!py)
		unit_skip("no llama.cpp source (tests/bench/llamacpp.bash sets it up): its "
			  "vocabularies not compared");
	snprintf(dir, sizeof(dir), "%s/../models", py);
	if (stat(dir, &sb))
		unit_skip("no models/ beside llama.cpp's gguf-py: its vocabularies not compared");
	for (size_t i = 0; i < sizeof(vocabs) / sizeof(vocabs[0]); i++)
		test_vocab(dir, vocabs[i]);
	test_refused(dir);
	return unit_exit();
}
