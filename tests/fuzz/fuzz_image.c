/* libFuzzer harness: an image through sf_image_open, then what sf-pack
 * --verify and --info and sf-run do with an accepted one (verify, the
 * tokenizer, info, model). The header's CRC-32C is recomputed first when the
 * header lies inside the input, so that mutations reach the JSON
 * validation instead of stopping at the checksum. */
#include <string.h>

#include "base/bytes.h"
#include "engine/tokenizer.h"
#include "fuzz.h"
#include "formats/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sf_image img;
	struct sf_err e;
	char path[64];
	uint8_t *buf = malloc(size ? size : 1);

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	if (size >= SF_IMAGE_PREAMBLE) {
		uint64_t hlen = sf_get_le64(buf + 16);
		if (hlen <= size - SF_IMAGE_PREAMBLE)
			sf_put_le32(buf + 24, sf_crc32c(0, buf + SF_IMAGE_PREAMBLE, (size_t)hlen));
	}
	int fd = fuzz_file(buf, size, path);
	free(buf);
	if (sf_image_open(&img, path, &e) == 0) {
		struct sf_model m;
		struct sf_tokenizer *t = NULL;
		sf_image_verify(&img, &e);
		if (sf_tokenizer_open_image(&t, &img, &e) == 0)
			sf_tokenizer_close(t);
		json_decref(sf_image_info_json(&img));
		if (sf_image_model(&img, &m, &e) == 0)
			sf_model_close(&m);
		sf_image_close(&img);
	}
	close(fd);
	return 0;
}
