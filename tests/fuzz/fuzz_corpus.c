/* libFuzzer harness: the corpus readers. The first byte picks the format
 * (text, jsonl, alpaca, csv), the rest is the file; every document is read. */
#include "engine/corpus.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sf_corpus_opts o = { 0 };
	struct sf_corpus *c;
	struct sf_err e;
	char path[64];

	if (!size)
		return 0;
	o.format = (enum sf_corpus_format)(data[0] % 4);
	int fd = fuzz_file(data + 1, size - 1, path);
	if (sf_corpus_open_as(&c, path, &o, &e) == 0) {
		const char *doc;
		size_t len;
		while (sf_corpus_next(c, &doc, &len, &e) == 1)
			fuzz_touch(doc, len + 1);
		sf_corpus_close(c);
	}
	close(fd);
	return 0;
}
