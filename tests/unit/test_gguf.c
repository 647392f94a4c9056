/* Unit test of lib/common/formats/gguf.c on files built byte by byte in
 * $SF_TMP (gguf_build.h): a valid file read back (metadata, tensors in
 * place, versions 2 and 3, a custom alignment), then hostile ones, each
 * refused with its code and a one-line message naming the file and the
 * fault: every truncation of a valid file, bad magic and versions, absurd
 * counts and string and array lengths, unknown value and tensor types,
 * too many dimensions, overflowing shapes, partial blocks, misaligned,
 * out-of-file and overlapping tensors, duplicate keys and names, bad
 * alignments and keys. Under SANITIZE=1 any read out of bounds fails. */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "formats/gguf.h"
#include "gguf_build.h"
#include "unit.h"

static const char *tmpdir;

static const char *write_gb(const char *name, const struct gb *b)
{
	return unit_write_file(tmpdir, name, b->p, b->n);
}

/* Opens b as a file that must be refused with code and a message holding
 * each NULL-terminated substring. */
static void refused_at(int line, const struct gb *b, int code, ...)
{
	const char *path = write_gb("bad.gguf", b), *s;
	struct sf_gguf g;
	struct sf_err e = { 0 };
	int ret = sf_gguf_open(&g, path, &e);
	va_list ap;

	if (getenv("UNIT_VERBOSE"))
		fprintf(stderr, "line %d: %s\n", line, e.msg);
	CHECK(ret == code, "line %d: returned %d, expected %d (%s)", line, ret, code, e.msg);
	CHECK(strstr(e.msg, path) && !strchr(e.msg, '\n'), "line %d: message '%s'", line, e.msg);
	CHECK(!g.map && !g.kvs && !g.tensors, "line %d: not zeroed on failure", line);
	va_start(ap, code);
	while ((s = va_arg(ap, const char *)))
		CHECK(strstr(e.msg, s), "line %d: message '%s' lacks '%s'", line, e.msg, s);
	va_end(ap);
	if (!ret)
		sf_gguf_close(&g);
}
#define REFUSED(b, code, ...) refused_at(__LINE__, b, code, __VA_ARGS__, NULL)

static const uint64_t ne_f32[] = { 4, 3 }, ne_q8[] = { 64, 1 };

/* A valid file: architecture, an array of strings, a U32; tensor "a"
 * F32 [4, 3] at 0 and "b" Q8_0 [64] at 64, data bytes 0, 1, 2, ... */
static void valid_file(struct gb *b, uint32_t version)
{
	memset(b, 0, sizeof(*b));
	gb_header(b, version, 2, 3);
	gb_kv_str(b, "general.architecture", "llama");
	gb_key(b, "tokenizer.ggml.tokens", 9);	/* ARRAY */
	gb_u32(b, 8);				/* of STRING */
	gb_u64(b, 2);
	gb_str(b, "<s>");
	gb_str(b, "hi");
	gb_kv_u32(b, "llama.block_count", 4);
	gb_tensor(b, "b", 1, ne_q8, SF_GGML_Q8_0, 64);
	gb_tensor(b, "a", 2, ne_f32, SF_GGML_F32, 0);
	gb_pad(b, 32);
	for (int i = 0; i < 64 + 68; i++)
		gb_bytes(b, &(unsigned char){ (unsigned char)i }, 1);
}

static void test_valid(void)
{
	struct gb b;
	struct sf_gguf g;
	struct sf_err e;
	const struct sf_gguf_kv *kv;
	const char *s;
	uint64_t len;
	uint32_t u;
	int32_t i;
	float f;

	for (uint32_t version = 2; version <= 3; version++) {
		valid_file(&b, version);
		const char *path = write_gb("valid.gguf", &b);
		int ret = sf_gguf_open(&g, path, &e);
		CHECK(ret == 0, "version %u: %s", version, e.msg);
		if (ret) {
			free(b.p);
			continue;
		}
		const struct sf_gguf_tensor *ta = sf_gguf_tensor(&g, "a"), *tb = sf_gguf_tensor(&g, "b");
		CHECK(g.version == version && g.alignment == 32 && g.nkvs == 3 && g.ntensors == 2,
		      "header");
		CHECK(ta && ta->type == SF_GGML_F32 && ta->n_dims == 2 && ta->ne[0] == 4 &&
		      ta->ne[1] == 3 && ta->ne[2] == 1 && ta->nbytes == 48, "tensor a");
		CHECK(tb && tb->type == SF_GGML_Q8_0 && tb->nbytes == 68 && tb->offset == 64, "tensor b");
		CHECK(g.data_offset % 32 == 0 && ta && tb &&
		      (const unsigned char *)ta->data == g.map + g.data_offset &&
		      ((const unsigned char *)tb->data)[0] == 64, "data in place, not copied");
		CHECK(!sf_gguf_tensor(&g, "c"), "absent tensor");
		CHECK(!sf_gguf_get_str(&g, "general.architecture", &s, &len, &e) && len == 5 &&
		      !memcmp(s, "llama", 5), "architecture");
		CHECK(!sf_gguf_get_arr(&g, "tokenizer.ggml.tokens", SF_GGUF_STRING, &kv, &e) &&
		      kv->n == 2 && !strncmp(sf_gguf_arr_str(kv, 1, &len), "hi", 2) && len == 2,
		      "tokens");
		CHECK(!sf_gguf_get_u32(&g, "llama.block_count", &u, &e) && u == 4, "block_count");
		CHECK(!sf_gguf_get_i32(&g, "llama.block_count", &i, &e) && i == 4, "as i32");
		CHECK(sf_gguf_get_u32(&g, "llama.nope", &u, &e) == -ENOENT &&
		      strstr(e.msg, "key 'llama.nope': missing"), "%s", e.msg);
		CHECK(sf_gguf_get_f32(&g, "llama.block_count", &f, &e) == SF_EFORMAT &&
		      strstr(e.msg, "key 'llama.block_count': U32, expected F32"), "%s", e.msg);
		CHECK(sf_gguf_get_u32(&g, "general.architecture", &u, &e) == SF_EFORMAT, "string as u32");
		CHECK(sf_gguf_get_arr(&g, "tokenizer.ggml.tokens", SF_GGUF_I32, &kv, &e) == SF_EFORMAT &&
		      strstr(e.msg, "ARRAY of STRING, expected ARRAY of I32"), "%s", e.msg);
		sf_gguf_close(&g);
		sf_gguf_close(&g);	/* twice: zeroed */
		free(b.p);
	}
}

/* Every proper prefix of a valid file is refused, without a read past it. */
static void test_truncated(void)
{
	struct gb b;

	valid_file(&b, 3);
	for (size_t n = 0; n < b.n; n++) {
		struct gb t = { b.p, n, n };
		const char *path = write_gb("cut.gguf", &t);
		struct sf_gguf g;
		struct sf_err e = { 0 };
		int ret = sf_gguf_open(&g, path, &e);

		CHECK(ret == SF_EFORMAT && strstr(e.msg, path), "%zu of %zu bytes: %d %s", n, b.n,
		      ret, e.msg);
		if (!ret)
			sf_gguf_close(&g);
	}
	free(b.p);
}

static void test_header(void)
{
	struct gb b = { 0 };

	gb_bytes(&b, "GGML", 4);
	gb_u32(&b, 3);
	gb_u64(&b, 0);
	gb_u64(&b, 0);
	REFUSED(&b, SF_EFORMAT, "not a GGUF file");
	for (uint32_t v = 0; v < 3; v++) {
		b.n = 0;
		gb_header(&b, v == 2 ? 0x03000000 : v == 1 ? 1 : 4, 0, 0);
		REFUSED(&b, SF_EUNSUPPORTED, "version", v == 2 ? "big-endian" : "expected 2 or 3");
	}
	b.n = 0;
	gb_header(&b, 3, 0, 0);
	b.n = 20;
	REFUSED(&b, SF_EFORMAT, "shorter than the 24-byte header");
	b.n = 0;
	gb_header(&b, 3, UINT64_MAX, 0);
	REFUSED(&b, SF_EFORMAT, "18446744073709551615 tensor infos cannot fit");
	b.n = 0;
	gb_header(&b, 3, 0, 1ull << 62);
	REFUSED(&b, SF_EFORMAT, "key-value pairs cannot fit");
	b.n = 0;
	gb_header(&b, 3, 0, 0);	/* nothing at all: a valid, empty file */
	const char *path = write_gb("empty.gguf", &b);
	struct sf_gguf g;
	struct sf_err e;
	CHECK(sf_gguf_open(&g, path, &e) == 0 && g.data_offset == 24, "%s", e.msg);
	sf_gguf_close(&g);
	free(b.p);
}

/* One file of a header and the key-value bytes kv made. */
static void kv_file(struct gb *b, uint64_t nkvs, void (*kv)(struct gb *))
{
	b->n = 0;
	gb_header(b, 3, 0, nkvs);
	kv(b);
}

static void kv_long_key(struct gb *b) { gb_u64(b, UINT64_MAX); gb_bytes(b, "k\0\0\0\0\0\0\0", 8); }
static void kv_empty_key(struct gb *b) { gb_kv_u32(b, "", 1); }
static void kv_ctrl_key(struct gb *b) { gb_kv_u32(b, "a\nb", 1); }
static void kv_big_key(struct gb *b)
{
	char k[300];
	memset(k, 'k', sizeof(k) - 1);
	k[sizeof(k) - 1] = 0;
	gb_kv_u32(b, k, 1);
}
static void kv_bad_type(struct gb *b) { gb_key(b, "x", 13); gb_u32(b, 0); }
static void kv_long_str(struct gb *b) { gb_key(b, "x", 8); gb_u64(b, 1ull << 40); gb_u32(b, 0); }
static void kv_huge_array(struct gb *b)
{
	gb_key(b, "x", 9);
	gb_u32(b, 4);
	gb_u64(b, 1ull << 62);
	gb_u64(b, 0);
}
static void kv_huge_str_array(struct gb *b)
{
	gb_key(b, "x", 9);
	gb_u32(b, 8);
	gb_u64(b, UINT64_MAX / 2);
	gb_str(b, "a");
}
static void kv_str_array_cut(struct gb *b)
{
	gb_key(b, "x", 9);
	gb_u32(b, 8);
	gb_u64(b, 2);
	gb_str(b, "a");
	gb_u64(b, 1000);
	gb_bytes(b, "bcd", 3);
}
static void kv_nested(struct gb *b) { gb_key(b, "x", 9); gb_u32(b, 9); gb_u64(b, 0); gb_u32(b, 0); }
static void kv_array_bad_elem(struct gb *b) { gb_key(b, "x", 9); gb_u32(b, 77); gb_u64(b, 0); }
static void kv_twice(struct gb *b) { gb_kv_u32(b, "x", 1); gb_kv_u32(b, "x", 2); }
static void kv_align48(struct gb *b) { gb_kv_u32(b, "general.alignment", 48); }
static void kv_align0(struct gb *b) { gb_kv_u32(b, "general.alignment", 0); }
static void kv_align_u64(struct gb *b) { gb_key(b, "general.alignment", 10); gb_u64(b, 32); }

static void test_metadata(void)
{
	struct gb b = { 0 };

	kv_file(&b, 1, kv_long_key);
	REFUSED(&b, SF_EFORMAT, "key", "run past the end of the file");
	kv_file(&b, 1, kv_empty_key);
	REFUSED(&b, SF_EFORMAT, "key at offset 24 is empty");
	kv_file(&b, 1, kv_ctrl_key);
	REFUSED(&b, SF_EFORMAT, "control characters");
	kv_file(&b, 1, kv_big_key);
	REFUSED(&b, SF_ELIMIT, "299 bytes, limit 255");
	kv_file(&b, 1, kv_bad_type);
	REFUSED(&b, SF_EFORMAT, "key 'x': value type 13 unknown");
	kv_file(&b, 1, kv_long_str);
	REFUSED(&b, SF_EFORMAT, "key 'x': 1099511627776 bytes at offset", "run past the end");
	kv_file(&b, 1, kv_huge_array);
	REFUSED(&b, SF_EFORMAT, "key 'x': array of 4611686018427387904 U32 cannot fit");
	kv_file(&b, 1, kv_huge_str_array);
	REFUSED(&b, SF_EFORMAT, "array of 9223372036854775807 STRING cannot fit");
	kv_file(&b, 1, kv_str_array_cut);
	REFUSED(&b, SF_EFORMAT, "key 'x': 1000 bytes", "run past the end");
	kv_file(&b, 1, kv_nested);
	REFUSED(&b, SF_EUNSUPPORTED, "key 'x': arrays of arrays not supported");
	kv_file(&b, 1, kv_array_bad_elem);
	REFUSED(&b, SF_EFORMAT, "key 'x': value type 77 unknown");
	kv_file(&b, 2, kv_twice);
	REFUSED(&b, SF_EFORMAT, "key 'x': given twice");
	kv_file(&b, 1, kv_align48);
	REFUSED(&b, SF_EFORMAT, "'general.alignment': 48, expected a power of two");
	kv_file(&b, 1, kv_align0);
	REFUSED(&b, SF_EFORMAT, "'general.alignment': 0, expected a power of two");
	kv_file(&b, 1, kv_align_u64);
	REFUSED(&b, SF_EFORMAT, "'general.alignment': U64, expected U32");
	free(b.p);
}

/* A file of n tensor infos (names t0, t1, ...) of one shape and type at
 * the given offsets, then data bytes of data_bytes. */
static void tensor_file(struct gb *b, uint32_t alignment, size_t n, uint32_t n_dims,
			const uint64_t *ne, uint32_t type, const uint64_t *offsets, size_t data_bytes)
{
	b->n = 0;
	gb_header(b, 3, n, alignment ? 1 : 0);
	if (alignment)
		gb_kv_u32(b, "general.alignment", alignment);
	for (size_t i = 0; i < n; i++) {
		char name[32];
		snprintf(name, sizeof(name), "t%zu", i);
		gb_tensor(b, name, n_dims, ne, type, offsets[i]);
	}
	gb_pad(b, alignment ? alignment : 32);
	for (size_t i = 0; i < data_bytes; i++)
		gb_bytes(b, "", 1);
}

static void test_tensors(void)
{
	struct gb b = { 0 };
	const uint64_t at0[] = { 0, 0 }, at32[] = { 0, 32 }, at4[] = { 4 }, ne4[] = { 4 };
	const uint64_t ne5[] = { 1, 1, 1, 1, 1 }, ne_big[] = { 1ull << 32, 1ull << 32, 1ull << 32 };
	const uint64_t ne33[] = { 33 }, ne_neg[] = { 1ull << 63 }, ne_q[] = { 1ull << 62 };
	const uint64_t at_far[] = { 1ull << 62 }, at64[] = { 64 };

	tensor_file(&b, 0, 1, 1, ne4, 16, at0, 64);
	REFUSED(&b, SF_EUNSUPPORTED, "tensor 't0': IQ2_XXS: tensor type not supported");
	tensor_file(&b, 0, 1, 1, ne4, 99, at0, 64);
	REFUSED(&b, SF_EFORMAT, "tensor 't0': tensor type 99 unknown");
	tensor_file(&b, 0, 1, 1, ne4, 4, at0, 64);
	REFUSED(&b, SF_EFORMAT, "tensor type 4 unknown");	/* removed Q4_2 */
	tensor_file(&b, 0, 1, 5, ne5, SF_GGML_F32, at0, 64);
	REFUSED(&b, SF_EFORMAT, "tensor 't0': 5 dimensions, at most 4");
	tensor_file(&b, 0, 1, 3, ne_big, SF_GGML_F32, at0, 64);
	REFUSED(&b, SF_EFORMAT, "tensor 't0': dimensions overflow 64 bits");
	tensor_file(&b, 0, 1, 1, ne_neg, SF_GGML_F32, at0, 64);
	REFUSED(&b, SF_EFORMAT, "dimensions overflow");
	tensor_file(&b, 0, 1, 1, ne_q, SF_GGML_F32, at0, 64);
	REFUSED(&b, SF_EFORMAT, "byte size overflows 64 bits");
	tensor_file(&b, 0, 1, 1, ne33, SF_GGML_Q8_0, at0, 64);
	REFUSED(&b, SF_EFORMAT, "rows of 33 elements are not whole Q8_0 blocks of 32");
	tensor_file(&b, 0, 1, 1, ne4, SF_GGML_F32, at4, 64);
	REFUSED(&b, SF_EFORMAT, "data offset 4 is not a multiple of the alignment 32");
	tensor_file(&b, 64, 1, 1, ne4, SF_GGML_F32, at32 + 1, 64);
	REFUSED(&b, SF_EFORMAT, "data offset 32 is not a multiple of the alignment 64");
	tensor_file(&b, 0, 1, 1, ne4, SF_GGML_F32, at_far, 64);
	REFUSED(&b, SF_EFORMAT, "tensor 't0': data [4611686018427387904, +16)", "past the end");
	tensor_file(&b, 0, 1, 1, ne4, SF_GGML_F32, at64, 64);
	REFUSED(&b, SF_EFORMAT, "data [64, +16) runs past the end of the data section (64 bytes)");
	tensor_file(&b, 0, 2, 1, ne4, SF_GGML_F32, at0, 64);
	REFUSED(&b, SF_EFORMAT, "overlaps tensor", "[0, 16)");
	tensor_file(&b, 0, 2, 1, ne4, SF_GGML_F32, at32, 64);	/* apart: fine */
	const char *path = write_gb("two.gguf", &b);
	struct sf_gguf g;
	struct sf_err e;
	CHECK(sf_gguf_open(&g, path, &e) == 0 && g.ntensors == 2, "%s", e.msg);
	sf_gguf_close(&g);

	/* the same name twice, at different offsets */
	b.n = 0;
	gb_header(&b, 3, 2, 0);
	gb_tensor(&b, "w", 1, ne4, SF_GGML_F32, 0);
	gb_tensor(&b, "w", 1, ne4, SF_GGML_F32, 32);
	gb_pad(&b, 32);
	gb_pad(&b, 64);
	for (int i = 0; i < 64; i++)
		gb_bytes(&b, "", 1);
	REFUSED(&b, SF_EFORMAT, "tensor 'w': named twice");
	free(b.p);
}

int main(void)
{
	tmpdir = unit_env("SF_TMP", "/tmp");
	test_valid();
	test_truncated();
	test_header();
	test_metadata();
	test_tensors();
	return unit_exit();
}
