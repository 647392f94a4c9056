/* Unit test of lib/common/base/ggml.c: the type table, hand-made blocks
 * of known value, then every handled type against llama.cpp's own
 * dequantization (gguf-py's quants module, through tests/unit/ggml_ref.py)
 * on random rows, bit for bit. gguf-py comes from $SF_GGUF_PY, else
 * $LLAMACPP_DIR/llama.cpp/gguf-py, else /var/tmp/sf-llamacpp/llama.cpp/gguf-py
 * (where tests/bench/llamacpp.bash's llamacpp_setup puts it; make
 * check-full sets it up): without it that comparison is skipped (exit 77)
 * after the other checks pass. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "base/bytes.h"
#include "base/ggml.h"
#include "base/vocab.h"
#include "unit.h"

static void test_table(void)
{
	uint64_t bytes = 0;

	CHECK(!strcmp(sf_ggml_type_name(SF_GGML_Q4_K), "Q4_K"), "Q4_K name");
	CHECK(!strcmp(sf_ggml_type_name(16), "IQ2_XXS"), "IQ2_XXS name");
	CHECK(!sf_ggml_type_name(4) && !sf_ggml_type_name(31) && !sf_ggml_type_name(1000),
	      "removed or unknown types have no name");
	CHECK(sf_ggml_type_supported(SF_GGML_Q6_K) && !sf_ggml_type_supported(16) &&
	      !sf_ggml_type_supported(4), "supported set");
	CHECK(sf_ggml_block_bytes(SF_GGML_Q4_K) == 144 && sf_ggml_block_elems(SF_GGML_Q4_K) == 256,
	      "Q4_K block");
	CHECK(sf_ggml_block_bytes(SF_GGML_Q6_K) == 210 && sf_ggml_block_bytes(SF_GGML_Q3_K) == 110 &&
	      sf_ggml_block_bytes(SF_GGML_Q2_K) == 84 && sf_ggml_block_bytes(SF_GGML_Q5_K) == 176,
	      "K block bytes");
	CHECK(sf_ggml_row_bytes(SF_GGML_Q8_0, 96, &bytes) == 0 && bytes == 102, "Q8_0 row");
	CHECK(sf_ggml_row_bytes(SF_GGML_Q8_0, 97, &bytes) == -EINVAL, "partial block refused");
	CHECK(sf_ggml_row_bytes(SF_GGML_F32, UINT64_MAX / 2, &bytes) == -EOVERFLOW, "overflow");
	CHECK(sf_ggml_row_bytes(4, 32, &bytes) == -EINVAL, "removed type");
}

/* Q8_0 with d = 0.5 and codes -16..15; Q4_0 with d = 2 and nibbles 0..15. */
static void test_known_blocks(void)
{
	uint8_t q8[34], q4[18];
	float y[32];
	int ok = 1;

	sf_put_le16(q8, sf_f32_to_f16(0.5f));
	for (int i = 0; i < 32; i++)
		q8[2 + i] = (uint8_t)(int8_t)(i - 16);
	sf_ggml_dequant_row(SF_GGML_Q8_0, q8, y, 32);
	for (int i = 0; i < 32; i++)
		ok &= y[i] == 0.5f * (float)(i - 16);
	CHECK(ok, "Q8_0 block");

	sf_put_le16(q4, sf_f32_to_f16(2.0f));
	for (int i = 0; i < 16; i++)
		q4[2 + i] = (uint8_t)(i | (15 - i) << 4);
	sf_ggml_dequant_row(SF_GGML_Q4_0, q4, y, 32);
	ok = 1;
	for (int i = 0; i < 16; i++)
		ok &= y[i] == 2.0f * (float)(i - 8) && y[16 + i] == 2.0f * (float)(7 - i);
	CHECK(ok, "Q4_0 block");
}

static const char *gguf_py_dir(void)
{
	static char dir[4200];
	const char *d = unit_env("SF_GGUF_PY", NULL);
	struct stat sb;

	if (d)
		return d;
	snprintf(dir, sizeof(dir), "%s/llama.cpp/gguf-py", unit_env("LLAMACPP_DIR", "/var/tmp/sf-llamacpp"));
	return stat(dir, &sb) == 0 ? dir : NULL;
}

static uint32_t get32(FILE *f)
{
	unsigned char b[4] = { 0 };
	return fread(b, 1, 4, f) == 4 ? sf_get_le32(b) : 0;
}

/* Every record of ggml_ref.py's output: our rows against gguf-py's. */
static void compare_records(const char *path)
{
	FILE *f = fopen(path, "rb");
	int types = 0;

	CHECK(f, "%s: cannot open", path);
	if (!f)
		return;
	for (;;) {
		uint32_t type = get32(f), rows = get32(f), n = get32(f);
		uint64_t rb = 0;

		if (feof(f))
			break;
		CHECK(sf_ggml_type_supported(type) && sf_ggml_row_bytes(type, n, &rb) == 0 && rows,
		      "type %u, %u x %u: bad record", type, rows, n);
		if (!rows || !rb)
			break;
		uint8_t *data = malloc(rows * rb);
		float *want = malloc(sizeof(float) * rows * n), *got = malloc(sizeof(float) * n);
		CHECK(fread(data, 1, rows * rb, f) == rows * rb &&
		      fread(want, sizeof(float), (size_t)rows * n, f) == (size_t)rows * n,
		      "%s: short record", path);
		size_t diff = 0, first = 0;
		float first_got = 0.0f;
		for (uint32_t r = 0; r < rows; r++) {
			sf_ggml_dequant_row(type, data + r * rb, got, n);
			for (uint32_t i = 0; i < n; i++)
				if (memcmp(&got[i], &want[(size_t)r * n + i], 4) && !diff++) {
					first = (size_t)r * n + i;
					first_got = got[i];
				}
		}
		CHECK(!diff, "%s: %zu of %u elements differ from gguf-py's, first %zu: %a vs %a",
		      sf_ggml_type_name(type), diff, rows * n, first, (double)first_got,
		      (double)want[first]);
		types++;
		free(data);
		free(want);
		free(got);
	}
	fclose(f);
	CHECK(types == 13, "%d types compared, expected 13", types);
}

int main(void)
{
	const char *py = gguf_py_dir(), *tmp = unit_env("SF_TMP", "/tmp");
	const char *python = unit_env("PYTHON", "/usr/bin/python3");
	char cmd[16384], out[4200];

	test_table();
	test_known_blocks();
	if (unit_failures)
		return unit_exit();
	if (!py)
		unit_skip("gguf-py not found ($SF_GGUF_PY, $LLAMACPP_DIR/llama.cpp/gguf-py or "
			  "/var/tmp/sf-llamacpp; tests/bench/llamacpp.bash's llamacpp_setup): "
			  "dequantizers not compared with llama.cpp's");
	snprintf(out, sizeof(out), "%s/ggml_ref.bin", tmp);
	snprintf(cmd, sizeof(cmd), "PYTHONPATH='%s' '%s' '%s/tests/unit/ggml_ref.py' '%s'", py,
		 python, unit_env("SF_ROOT", "."), out);
	CHECK(system(cmd) == 0, "%s failed", cmd);
	if (!unit_failures)
		compare_records(out);
	remove(out);
	return unit_exit();
}
