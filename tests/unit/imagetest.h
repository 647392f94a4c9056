/* Inputs shared by the unit tests that pack images of the embedded
 * mix4-1m (test_image.c, test_sparse.c): a shuffled placement, codes
 * encoded in memory as sf-encode makes them, a random --keep selection,
 * and packing into a directory. Each test passes its own generator state,
 * so its inputs do not depend on the other's. */
#ifndef SF_IMAGETEST_H
#define SF_IMAGETEST_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/codes.h"
#include "engine/forward.h"
#include "formats/image.h"
#include "formats/model.h"
#include "formats/placement.h"
#include "offline/encode.h"
#include "unit.h"

#define IMAGETEST_CODES_SEED 7

/* xorshift64: a uniform draw in [0, n). */
static inline uint32_t imagetest_rnd(uint64_t *s, uint32_t n)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (uint32_t)(*s % n);
}

/* Every group of m a shuffled permutation (Fisher-Yates), labelled frequency. */
static inline void imagetest_shuffled(const struct sf_model *m, uint64_t *rng,
				      struct sf_placement *pl)
{
	struct sf_err e = { 0 };
	json_t *opt = json_object();
	int nl = m->cfg.n_layers;

	CHECK(!sf_placement_init(pl, &m->fingerprint, nl * SF_NGROUPS, &e), "%s", e.msg);
	for (int l = 0; l < nl; l++)
		for (int g = 0; g < SF_NGROUPS; g++) {
			uint32_t n = (uint32_t)sf_group_entries(&m->cfg, (enum sf_group)g);
			uint32_t *p = malloc(n * sizeof(*p));
			for (uint32_t i = 0; i < n; i++)
				p[i] = i;
			for (uint32_t i = n - 1; i > 0; i--) {
				uint32_t j = imagetest_rnd(rng, i + 1), t = p[i];
				p[i] = p[j];
				p[j] = t;
			}
			CHECK(!sf_placement_set(pl, l * SF_NGROUPS + g, l, (enum sf_group)g, n,
						SF_PLACE_FREQUENCY, opt, 0, 0, 0, p, &e), "%s", e.msg);
			free(p);
		}
	json_decref(opt);
}

static inline int imagetest_sink(void *arg, size_t i, const uint8_t *data,
				 const struct sf_codes_stats *st, struct sf_err *e)
{
	struct sf_sfq *q = arg;
	(void)st;
	(void)e;
	memcpy(q->buf + q->sections[i].offset, data, (size_t)q->sections[i].bytes);
	return 0;
}

/* Codes of m's groups in mask, in memory; free with sf_sfq_close. */
static inline void imagetest_codes(const struct sf_model *m, struct sf_sfq *q,
				   enum sf_code_method method, unsigned mask)
{
	struct sf_err e = { 0 };
	uint64_t total = 0;

	memset(q, 0, sizeof(*q));
	q->fingerprint = m->fingerprint;
	q->method = method;
	q->seed = IMAGETEST_CODES_SEED;
	sf_sfq_shape_of(&q->shape, &m->cfg);
	q->sections = calloc((size_t)m->cfg.n_layers * SF_NGROUPS, sizeof(*q->sections));
	if (method == SF_CODES_TRELLIS) {
		CHECK(!posix_memalign((void **)&q->codebook, 64, SF_TRELLIS_CODEBOOK * sizeof(float)),
		      "memory");
		sf_trellis_codebook(q->codebook, q->seed);
	}
	for (int l = 0; l < m->cfg.n_layers; l++)
		for (int g = 0; g < SF_NGROUPS; g++)
			if (mask >> g & 1)
				sf_sfq_section_init(&q->sections[q->nsections++], method, &q->shape, l,
						    (enum sf_group)g);
	for (size_t i = 0; i < q->nsections; i++) {
		q->sections[i].offset = total;
		total += q->sections[i].bytes;
	}
	q->buf = malloc((size_t)total);
	CHECK(q->buf != NULL, "memory");
	CHECK(!sf_codes_encode_sections(m, q, NULL, imagetest_sink, q, &e), "%s", e.msg);
	for (size_t i = 0; i < q->nsections; i++)
		q->sections[i].data = q->buf + q->sections[i].offset;
}

/* A --keep selection: layer 0 whole (SelectInfer leaves the first layer
 * dense), each neuron of the others kept with probability share_10 / 10.
 * Free with sf_image_keep_free. */
static inline void imagetest_keep_random(const struct sf_model *m, uint64_t *rng,
					 uint32_t share_10, struct sf_image_keep *k)
{
	uint32_t H = (uint32_t)m->cfg.hidden_dim;

	k->n_layers = m->cfg.n_layers;
	k->hidden = H;
	k->kept = malloc((size_t)k->n_layers * H);
	k->count = malloc((size_t)k->n_layers * sizeof(uint32_t));
	for (int l = 0; l < k->n_layers; l++) {
		k->count[l] = 0;
		for (uint32_t j = 0; j < H; j++) {
			k->kept[(size_t)l * H + j] = l == 0 || imagetest_rnd(rng, 10) < share_10;
			k->count[l] += k->kept[(size_t)l * H + j];
		}
	}
}

/* Packs m (from model_dir) into dir/name; inputs may be NULL. */
static inline int imagetest_pack(const char *dir, const char *name, const struct sf_model *m,
				 const char *model_dir, const struct sf_placement *pl,
				 const struct sf_sfq *q, const struct sf_image_keep *k,
				 unsigned resident, int dtype, struct sf_err *e)
{
	char path[4200];
	struct sf_image_pack_opts o = {
		.model = m, .model_dir = model_dir, .placement = pl, .placement_path = "pl.json",
		.codes = q, .codes_path = "codes.sfq", .keep = k, .keep_path = "neurons.json",
		.resident = resident, .dtype = dtype,
	};
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return sf_image_pack(path, &o, NULL, e);
}

#endif
