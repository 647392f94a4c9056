/* libFuzzer harness: one GGUF file through sf_gguf_open; every key the
 * reader accepts is read through its getter (each string of an array of
 * strings included), every tensor looked up by name and dequantized row
 * by row, so a range the reader let past its checks faults here. Then
 * what a command makes of it: the config, the tokenizer (encoding and
 * decoding a text) and the model bound both ways (model_gguf.c). */
#include "engine/tokenizer.h"
#include "formats/gguf.h"
#include "formats/model.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void read_kv(const struct sf_gguf *g, const struct sf_gguf_kv *kv)
{
	struct sf_err e;
	const struct sf_gguf_kv *arr;
	const char *s;
	uint64_t len;
	uint32_t u;
	int32_t i;
	float f;
	int b;

	sf_gguf_get_u32(g, kv->key, &u, &e);
	sf_gguf_get_i32(g, kv->key, &i, &e);
	sf_gguf_get_f32(g, kv->key, &f, &e);
	sf_gguf_get_bool(g, kv->key, &b, &e);
	if (sf_gguf_get_str(g, kv->key, &s, &len, &e) == 0)
		fuzz_touch(s, len);
	if (kv->type != SF_GGUF_ARRAY || sf_gguf_get_arr(g, kv->key, kv->elem_type, &arr, &e))
		return;
	for (uint64_t k = 0; k < arr->n; k++) {
		if (arr->elem_type == SF_GGUF_STRING) {
			s = sf_gguf_arr_str(arr, k, &len);
			fuzz_touch(s, len);
		} else if (arr->elem_type == SF_GGUF_I32 || arr->elem_type == SF_GGUF_U32) {
			sf_gguf_arr_i32(arr, k);
		} else if (arr->elem_type == SF_GGUF_F32) {
			sf_gguf_arr_f32(arr, k);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sf_gguf g;
	struct sf_err e;
	char path[64];
	int fd = fuzz_file(data, size, path);

	if (sf_gguf_open(&g, path, &e) == 0) {
		for (size_t k = 0; k < g.nkvs; k++)
			read_kv(&g, &g.kvs[k]);
		for (size_t t = 0; t < g.ntensors; t++) {
			const struct sf_gguf_tensor *x = sf_gguf_tensor(&g, g.tensors[t].name);
			uint64_t rows = x->ne[1] * x->ne[2] * x->ne[3], row;
			float *y = x->ne[0] <= 1 << 16 ? malloc(sizeof(float) * (x->ne[0] + 1)) : NULL;

			fuzz_touch(x->data, x->nbytes);
			sf_ggml_row_bytes(x->type, x->ne[0], &row);
			for (uint64_t r = 0; y && r < rows && r < 64; r++)
				sf_ggml_dequant_row(x->type, (const uint8_t *)x->data + r * row, y,
						    (size_t)x->ne[0]);
			free(y);
		}
		struct sf_config c;
		struct sf_tokenizer *t;
		struct sf_model m;
		static const char text[] = "hello world, it's 12345 o'clock \xe2\x96\x81\xff";
		if (sf_tokenizer_open_gguf(&t, &g, &e) == 0) {
			int32_t *ids = NULL;
			size_t n = 0, len;
			char *out = NULL;
			if (sf_tokenizer_encode(t, text, sizeof(text) - 1, 1, &ids, &n, &e) == 0 &&
			    sf_tokenizer_decode(t, ids, n, 0, &out, &len, &e) == 0)
				fuzz_touch(out, len);
			free(ids);
			free(out);
			sf_tokenizer_close(t);
		}
		sf_config_from_gguf(&c, &g, &e);
		sf_gguf_close(&g);
		if (sf_model_open(&m, path, &e) == 0)
			sf_model_close(&m);
		if (sf_model_open_elements(&m, path, &e) == 0)
			sf_model_close(&m);
	}
	close(fd);
	return 0;
}
