/* libFuzzer harness: a .sfc file through sf_coact_load (header, plan,
 * allocation, every section), then the summaries drawn from it. */
#include <limits.h>

#include "formats/coact.h"
#include "formats/scores.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sf_coact c;
	struct sf_err e;
	char path[64];
	int fd = fuzz_file(data, size, path);

	if (sf_coact_load(&c, path, 0, INT_MAX, &e) == 0) {
		json_decref(sf_coact_info_json(&c, NULL));
		json_decref(sf_scores_from_coact(&c, &e));
		sf_coact_free(&c);
	}
	close(fd);
	return 0;
}
