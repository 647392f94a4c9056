/* libFuzzer harness: tokenizer.json, then after a NUL byte
 * tokenizer_config.json, then after another NUL text to encode (a fixed
 * sample when absent), through sf_tokenizer_open_mem; an accepted
 * tokenizer encodes the text, decodes the ids whole and streamed. */
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char sample[] = "In the beginning, God created \xc3\xa9t\xc3\xa9 <s> 42\n\xff\xfe";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *tj = (const char *)data, *cj = NULL, *text = sample;
	size_t tlen = size, clen = 0, xlen = sizeof(sample) - 1;
	const char *nul = memchr(tj, 0, size);
	struct sf_tokenizer *t;
	struct sf_err e;

	if (nul) {
		tlen = (size_t)(nul - tj);
		cj = nul + 1;
		clen = size - tlen - 1;
		const char *nul2 = memchr(cj, 0, clen);
		if (nul2) {
			text = nul2 + 1;
			xlen = clen - (size_t)(nul2 - cj) - 1;
			clen = (size_t)(nul2 - cj);
		}
	}
	if (sf_tokenizer_open_mem(&t, "fuzz", tj, tlen, cj, clen, &e))
		return 0;
	int32_t *ids = NULL;
	size_t n = 0;
	if (sf_tokenizer_encode(t, text, xlen, 1, &ids, &n, &e) == 0) {
		fuzz_decode(t, ids, n);
		free(ids);
	}
	int v = sf_tokenizer_vocab_size(t);
	for (int32_t id = -1; id <= v; id += v / 16 + 1)
		sf_tokenizer_piece(t, id, NULL);
	sf_tokenizer_close(t);
	return 0;
}
