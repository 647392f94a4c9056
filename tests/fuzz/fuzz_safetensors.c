/* libFuzzer harness: one .safetensors file through sf_safetensors_open_file;
 * every tensor the reader accepts is read end to end. */
#include "fuzz.h"
#include "formats/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sf_safetensors st;
	struct sf_err e;
	char path[64];
	int fd = fuzz_file(data, size, path);

	if (sf_safetensors_open_file(&st, path, &e) == 0) {
		for (size_t i = 0; i < st.ntensors; i++)
			fuzz_touch(st.tensors[i].data, st.tensors[i].nbytes);
		sf_safetensors_find(&st, "model.embed_tokens.weight");
		sf_safetensors_close(&st);
	}
	close(fd);
	return 0;
}
