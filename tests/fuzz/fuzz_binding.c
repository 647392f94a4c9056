/* libFuzzer harness: a model directory's tokenizer bound to its config, as
 * sf_tokenizer_open_model and the image reader bind them. Input: config.json,
 * NUL, tokenizer.json, NUL, tokenizer_config.json, NUL, text (a fixed sample
 * when absent). A tokenizer that sf_tokenizer_check_model accepts must never
 * give an id the embedding lacks: its vocabulary, BOS and EOS, and every id
 * it encodes, are below vocab_size (else abort); and the decoders take every
 * id the model can sample, the ids no token names included. */
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"
#include "formats/config.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char binding_sample[] = "In the beginning, God created \xc3\xa9t\xc3\xa9 <s></s> 42\n\xff\xfe";

/* The next NUL-terminated part of [*p, end): its length, *p moved past it. */
static size_t binding_part(const char **p, const char *end, const char **start)
{
	const char *nul = memchr(*p, 0, (size_t)(end - *p));
	size_t n = nul ? (size_t)(nul - *p) : (size_t)(end - *p);

	*start = *p;
	*p += n + (nul != NULL);
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data, *end = p + size, *cj, *tj, *tcj, *text = binding_sample;
	size_t clen = binding_part(&p, end, &cj), tlen = binding_part(&p, end, &tj);
	size_t tclen = binding_part(&p, end, &tcj);
	size_t xlen = sizeof(binding_sample) - 1;
	struct sf_config cfg;
	struct sf_tokenizer *t;
	struct sf_err e;

	if (p < end) {
		text = p;
		xlen = (size_t)(end - p);
	}
	if (sf_config_parse(&cfg, "fuzz/config.json", cj, clen, &e))
		return 0;
	if (sf_tokenizer_open_mem(&t, "fuzz", tj, tlen, tclen ? tcj : NULL, tclen, &e))
		return 0;
	if (sf_tokenizer_check_model(t, cfg.vocab_size, &e)) {
		sf_tokenizer_close(t);
		return 0;
	}
	int v = cfg.vocab_size;
	if (sf_tokenizer_vocab_size(t) > v || sf_tokenizer_bos(t) >= v || sf_tokenizer_eos(t) >= v)
		abort();
	int32_t *ids = NULL;
	size_t n = 0;
	if (sf_tokenizer_encode(t, text, xlen, 1, &ids, &n, &e) == 0) {
		for (size_t i = 0; i < n; i++)
			if (ids[i] < 0 || ids[i] >= v)
				abort();
		fuzz_decode(t, ids, n);
		free(ids);
	}
	/* what a sampler may draw: spread over every row of the embedding,
	 * with the config's BOS and EOS */
	int32_t drawn[72];	/* 61 spread, BOS, up to SF_MAX_EOS */
	size_t k = 0;
	for (int32_t id = 0; id < v && k < 60; id += v / 60 + 1)
		drawn[k++] = id;
	drawn[k++] = v - 1;
	if (cfg.bos_id >= 0)
		drawn[k++] = cfg.bos_id;
	for (int i = 0; i < cfg.n_eos && k < sizeof(drawn) / sizeof(drawn[0]); i++)
		drawn[k++] = cfg.eos_ids[i];
	fuzz_decode(t, drawn, k);
	sf_tokenizer_close(t);
	return 0;
}
