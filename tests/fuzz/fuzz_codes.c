/* libFuzzer harness: a .sfq file through sf_sfq_open; every section the
 * reader accepts is read end to end (the --info checksums). */
#include "formats/codes.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sf_sfq q;
	struct sf_err e;
	char path[64];
	int fd = fuzz_file(data, size, path);

	if (sf_sfq_open(&q, path, &e) == 0) {
		json_decref(sf_sfq_info_json(&q));
		for (size_t i = 0; i < q.nsections; i++)
			sf_sfq_find(&q, q.sections[i].layer, q.sections[i].group);
		sf_sfq_close(&q);
	}
	close(fd);
	return 0;
}
