/* Picks the next token from logits: greedy at temperature 0, otherwise
 * softmax at the temperature with optional top-k, min-p and top-p
 * (nucleus) truncation, in llama.cpp's order, from a seeded generator so
 * the same seed gives the same text. A repetition penalty on the last
 * tokens seen applies before all of them, greedy included, and the
 * frequency and presence penalties of OpenAI's API after it. */
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
	int top_k;		/* 0: no truncation */
	float min_p;		/* 0: none; else drop p < min_p * the largest p */
	float penalty;		/* 1: none; else a seen token's logit / penalty if > 0, * if not */
	float freq_penalty;	/* 0: none; else a seen token's logit - freq_penalty * its count */
	float presence_penalty;	/* 0: none; else a seen token's logit - presence_penalty */
	int last_n;		/* tokens the penalty looks back on */
	int32_t *recent;	/* (last_n) ring of the last tokens accepted */
	int nrecent, head;
	uint64_t rng;		/* xorshift64* state, never 0 */
	struct sf_prob_index *candidates;	/* (vocab_size) truncation scratch */
	struct sf_prob_index *sort_scratch;	/* (vocab_size) */
};

int sf_sampler_init(struct sf_sampler *s, int vocab_size, float temperature, float top_p,
		    uint64_t seed, struct sf_err *e);
void sf_sampler_free(struct sf_sampler *s);	/* accepts a zeroed s */
/* The repetition penalty (> 0; 1 is none) on the last last_n tokens. */
int sf_sampler_set_penalty(struct sf_sampler *s, float penalty, int last_n, struct sf_err *e);
/* OpenAI's frequency and presence penalties (llama.cpp's), on the same
 * window of last_n tokens as the repetition penalty, after it: a seen
 * token's logit less freq * its count in the window, less presence. */
void sf_sampler_set_penalties(struct sf_sampler *s, float freq, float presence);
/* A token of the text (the prompt's, then each one sampled), for the
 * penalty's window. */
void sf_sampler_accept(struct sf_sampler *s, int32_t token);

/* Index of the largest logit, the lowest index on ties. */
int sf_argmax(const float *x, size_t n);

/* Samples from logits (modified in place when sampling). */
int sf_sample(struct sf_sampler *s, float *logits);

/* The distribution sf_sample draws from, over the whole vocabulary, into
 * probs (vocab_size): after the penalty, the temperature, top-k, min-p
 * and top-p, the tokens cut off at 0; greedy: 1 at the argmax. logits
 * are modified in place. Speculative sampling compares the draft's and
 * the target's (speculative.h). */
void sf_sampler_probs(struct sf_sampler *s, float *logits, float *probs);
/* A token drawn from probs (vocab_size, summing to 1) by the sampler's
 * generator. */
int sf_sampler_draw(struct sf_sampler *s, const float *probs);
/* Uniform in [0, 1) from the sampler's generator. */
float sf_sampler_coin(struct sf_sampler *s);

#endif
