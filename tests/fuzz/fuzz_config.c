/* libFuzzer harness: config.json text through sf_config_parse. */
#include <stdint.h>

#include "formats/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sf_config c;
	struct sf_err e;

	sf_config_parse(&c, "fuzz", (const char *)data, size, &e);
	return 0;
}
