/* Unit test of lib/common/base/ggml.c: the type table, hand-made blocks
 * of known value, then a GGUF written by llama.cpp's own gguf-py
 * (tests/unit/ggml_ref.py) read by formats/gguf.c: metadata of every value
 * type, and every handled tensor type's random rows dequantized by us and
 * by gguf-py's quants module, bit for bit. Without gguf-py (ggufpy.h)
 * that part is skipped (exit 77) after the other checks pass. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "base/bytes.h"
#include "base/ggml.h"
#include "base/vocab.h"
#include "formats/gguf.h"
#include "ggufpy.h"
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

/* The metadata gguf-py wrote, read back through every getter. */
static void check_metadata(const struct sf_gguf *g)
{
	const struct sf_gguf_kv *kv;
	struct sf_err e;
	uint32_t u;
	int32_t i;
	float f;
	int b;
	const char *s;
	uint64_t len;

	CHECK(g->version == 3 && g->alignment == 64, "version %u, alignment %u", g->version,
	      g->alignment);
	CHECK(!sf_gguf_get_u32(g, "test.u8", &u, &e) && u == 200, "u8");
	CHECK(!sf_gguf_get_i32(g, "test.i8", &i, &e) && i == -100, "i8");
	CHECK(!sf_gguf_get_u32(g, "test.u16", &u, &e) && u == 60000, "u16");
	CHECK(!sf_gguf_get_i32(g, "test.i16", &i, &e) && i == -30000, "i16");
	CHECK(!sf_gguf_get_u32(g, "test.u32", &u, &e) && u == 4000000000u, "u32");
	CHECK(!sf_gguf_get_i32(g, "test.i32", &i, &e) && i == -2000000000, "i32");
	CHECK(!sf_gguf_get_f32(g, "test.f32", &f, &e) && f == 0.25f, "f32");
	CHECK(!sf_gguf_get_f32(g, "test.f64", &f, &e) && f == 0.5f, "f64");
	CHECK(!sf_gguf_get_bool(g, "test.bool", &b, &e) && b == 1, "bool");
	CHECK(!sf_gguf_get_str(g, "test.string", &s, &len, &e) && len == 6 &&
	      !memcmp(s, "h\xc3\xa9llo", 6), "string");
	CHECK(sf_gguf_get_u32(g, "test.u64", &u, &e) == SF_EFORMAT, "u64 2^40 is no u32");
	CHECK(sf_gguf_get_u32(g, "test.i64", &u, &e) == SF_EFORMAT, "negative is no u32");
	CHECK(!sf_gguf_get_str(g, "general.architecture", &s, &len, &e) && len == 5 &&
	      !memcmp(s, "llama", 5), "general.architecture");
	CHECK(!sf_gguf_get_arr(g, "test.arr_str", SF_GGUF_STRING, &kv, &e) && kv->n == 3 &&
	      !memcmp(sf_gguf_arr_str(kv, 0, &len), "a", 1) && len == 1 &&
	      (sf_gguf_arr_str(kv, 1, &len), len == 0) &&
	      !memcmp(sf_gguf_arr_str(kv, 2, &len), "ccc", 3) && len == 3, "array of strings");
	CHECK(!sf_gguf_get_arr(g, "test.arr_i32", SF_GGUF_I32, &kv, &e) && kv->n == 3 &&
	      sf_gguf_arr_i32(kv, 1) == -2, "array of i32");
	CHECK(!sf_gguf_get_arr(g, "test.arr_f32", SF_GGUF_F32, &kv, &e) && kv->n == 2 &&
	      sf_gguf_arr_f32(kv, 1) == -1.5f, "array of f32");
}

/* Each tensor q.TYPE against want.TYPE: our rows against gguf-py's. */
static void compare_tensors(const struct sf_gguf *g)
{
	int types = 0;

	for (size_t k = 0; k < g->ntensors; k++) {
		const struct sf_gguf_tensor *q = &g->tensors[k], *want;
		char name[64];

		if (strncmp(q->name, "q.", 2))
			continue;
		snprintf(name, sizeof(name), "want.%s", q->name + 2);
		want = sf_gguf_tensor(g, name);
		CHECK(want && want->type == SF_GGML_F32 && want->ne[0] == q->ne[0] &&
		      want->ne[1] == q->ne[1] && q->ne[1] % 2, "%s: no %s of its shape", q->name, name);
		CHECK(!strcmp(q->name + 2, sf_ggml_type_name(q->type)), "%s: type %s", q->name,
		      sf_ggml_type_name(q->type));
		if (!want)
			continue;
		size_t n = (size_t)q->ne[0], rows = (size_t)q->ne[1], diff = 0, first = 0;
		uint64_t rb = q->nbytes / rows;
		float *got = malloc(sizeof(float) * n), *ref = malloc(sizeof(float) * n), first_got = 0;
		for (size_t r = 0; r < rows; r++) {
			sf_ggml_dequant_row(q->type, (const uint8_t *)q->data + r * rb, got, n);
			sf_ggml_dequant_row(SF_GGML_F32, (const uint8_t *)want->data + r * n * 4, ref, n);
			for (size_t i = 0; i < n; i++)
				if (memcmp(&got[i], &ref[i], 4) && !diff++) {
					first = r * n + i;
					first_got = got[i];
				}
		}
		CHECK(!diff, "%s: %zu of %zu elements differ from gguf-py's, first %zu (%a)", q->name,
		      diff, rows * n, first, (double)first_got);
		types++;
		free(got);
		free(ref);
	}
	CHECK(types == 14, "%d types compared, expected 14", types);
}

int main(void)
{
	const char *py = unit_gguf_py(), *tmp = unit_env("SF_TMP", "/tmp");
	char out[4200], args[4300];

	test_table();
	test_known_blocks();
	if (unit_failures)
		return unit_exit();
	if (!py)
		unit_skip(UNIT_NO_GGUF_PY ": dequantizers not compared with llama.cpp's");
	snprintf(out, sizeof(out), "%s/ggml_ref.gguf", tmp);
	snprintf(args, sizeof(args), "'%s'", out);
	CHECK(unit_gguf_py_run(py, "tests/unit/ggml_ref.py", args) == 0, "ggml_ref.py %s failed", out);
	if (!unit_failures) {
		struct sf_gguf g;
		struct sf_err e;
		int ret = sf_gguf_open(&g, out, &e);

		CHECK(ret == 0, "%s", e.msg);
		if (!ret) {
			check_metadata(&g);
			compare_tensors(&g);
			sf_gguf_close(&g);
		}
	}
	remove(out);
	return unit_exit();
}
