/* libFuzzer harness: placement.json through sf_placement_read. */
#include "fuzz.h"
#include "formats/placement.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sf_placement pl;
	struct sf_err e;
	char path[64];
	int fd = fuzz_file(data, size, path);

	if (sf_placement_read(&pl, path, &e) == 0)
		sf_placement_free(&pl);
	close(fd);
	return 0;
}
