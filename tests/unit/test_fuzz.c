/* Replays the fuzz harnesses (tests/fuzz/fuzz_*.c, included here under
 * their own names) on every input of tests/fuzz/regress/NAME/, inputs that
 * once crashed or misled a parser, and on the text seeds committed under
 * tests/fuzz/seeds/NAME/, linked with the normal library: make check needs
 * no clang, and under SANITIZE=1 a regression is a sanitizer report. */
#include <dirent.h>
#include <stdint.h>
#include <string.h>

#include "unit.h"

#define LLVMFuzzerTestOneInput fuzz_binding
#include "../fuzz/fuzz_binding.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_calib
#include "../fuzz/fuzz_calib.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_coact
#include "../fuzz/fuzz_coact.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_codes
#include "../fuzz/fuzz_codes.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_config
#include "../fuzz/fuzz_config.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_corpus
#include "../fuzz/fuzz_corpus.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_gguf
#include "../fuzz/fuzz_gguf.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_image
#include "../fuzz/fuzz_image.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_placement
#include "../fuzz/fuzz_placement.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_safetensors
#include "../fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_tokenizer
#include "../fuzz/fuzz_tokenizer.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_trace
#include "../fuzz/fuzz_trace.c"
#undef LLVMFuzzerTestOneInput

static const struct {
	const char *name;
	int (*run)(const uint8_t *data, size_t size);
} harnesses[] = {
	{ "binding", fuzz_binding }, { "calib", fuzz_calib }, { "coact", fuzz_coact }, { "codes", fuzz_codes },
	{ "config", fuzz_config }, { "corpus", fuzz_corpus }, { "gguf", fuzz_gguf },
	{ "image", fuzz_image },
	{ "placement", fuzz_placement }, { "safetensors", fuzz_safetensors },
	{ "tokenizer", fuzz_tokenizer }, { "trace", fuzz_trace },
};

/* Runs a harness on every file of dir (absent: none); returns how many. */
static int replay(const char *dir, int (*run)(const uint8_t *, size_t))
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		char path[4096];
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		FILE *f = fopen(path, "rb");
		CHECK(f, "%s: cannot open", path);
		if (!f)
			continue;
		fseek(f, 0, SEEK_END);
		long size = ftell(f);
		rewind(f);
		uint8_t *buf = malloc(size > 0 ? (size_t)size : 1);
		CHECK(buf && fread(buf, 1, (size_t)size, f) == (size_t)size, "%s: cannot read", path);
		fclose(f);
		if (buf)
			run(buf, (size_t)size);
		free(buf);
		n++;
	}
	closedir(d);
	return n;
}

int main(void)
{
	const char *root = unit_env("SF_ROOT", ".");
	int regress = 0;

	for (size_t i = 0; i < sizeof(harnesses) / sizeof(harnesses[0]); i++) {
		char dir[4096];
		snprintf(dir, sizeof(dir), "%s/tests/fuzz/regress/%s", root, harnesses[i].name);
		regress += replay(dir, harnesses[i].run);
		snprintf(dir, sizeof(dir), "%s/tests/fuzz/seeds/%s", root, harnesses[i].name);
		replay(dir, harnesses[i].run);
	}
	CHECK(regress > 0, "no input under %s/tests/fuzz/regress", root);
	return unit_exit();
}
