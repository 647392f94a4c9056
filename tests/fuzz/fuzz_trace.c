/* libFuzzer harness: a .sft trace through sf_trace_open and sf_trace_next
 * to its end. Before parsing, every block whose payload lies inside the
 * input gets its CRC-32C recomputed, so that mutations reach the block
 * decoder instead of stopping at the checksum (which the unit tests
 * cover). */
#include <string.h>

#include "base/bytes.h"
#include "fuzz.h"
#include "formats/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sf_trace_reader *r;
	struct sf_err e;
	char path[64];
	uint8_t *buf = malloc(size ? size : 1);

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	if (size >= 16) {
		uint64_t off = 16 + (uint64_t)sf_get_le32(buf + 12);
		while (off + SF_TRACE_BLOCK_HEADER <= size) {
			uint64_t len = sf_get_le64(buf + off + 8);
			if (len > size - off - SF_TRACE_BLOCK_HEADER)
				break;
			sf_put_le32(buf + off + 16,
				    sf_crc32c(0, buf + off + SF_TRACE_BLOCK_HEADER, (size_t)len));
			off += SF_TRACE_BLOCK_HEADER + len;
		}
	}
	int fd = fuzz_file(buf, size, path);
	free(buf);
	if (sf_trace_open(&r, path, &e) == 0) {
		const struct sf_trace_info *info = sf_trace_reader_info(r);
		uint32_t ntok;
		int ret;
		while ((ret = sf_trace_next(r, &ntok, &e)) == 1)
			for (int s = 0; s < info->nslots; s++)
				fuzz_touch(sf_trace_rows(r, s),
					   (uint64_t)ntok * info->slots[s].words * 8);
		if (ret == 0)
			for (int s = 0; s < info->nslots; s++)
				fuzz_touch(sf_trace_sums(r, s), (uint64_t)info->slots[s].entries * 8);
		sf_trace_close(r);
	}
	close(fd);
	return 0;
}
