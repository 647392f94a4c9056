/* libFuzzer harness: calib.json through sf_calib_load. */
#include "formats/calib.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sf_calib c;
	struct sf_err e;
	char path[64];
	int fd = fuzz_file(data, size, path);

	if (sf_calib_load(&c, path, &e) == 0)
		sf_calib_free(&c);
	close(fd);
	return 0;
}
