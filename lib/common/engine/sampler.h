/* Picks the next token from logits: greedy at temperature 0, otherwise
 * softmax at the temperature with optional top-p (nucleus) truncation,
 * from a seeded generator so the same seed gives the same text. */
#ifndef SF_SAMPLER_H
#define SF_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct sf_prob_index {
	float prob;
	int index;
};

struct sf_sampler {
	int vocab_size;
	float temperature;	/* 0: greedy */
	float top_p;		/* 1: no truncation */
	uint64_t rng;		/* xorshift64* state, never 0 */
	struct sf_prob_index *candidates;	/* (vocab_size) top-p scratch */
};

int sf_sampler_init(struct sf_sampler *s, int vocab_size, float temperature, float top_p,
		    uint64_t seed, struct sf_err *e);
void sf_sampler_free(struct sf_sampler *s);	/* accepts a zeroed s */

/* Index of the largest logit, the lowest index on ties. */
int sf_argmax(const float *x, size_t n);

/* Samples from logits (modified in place when sampling). */
int sf_sample(struct sf_sampler *s, float *logits);

#endif
