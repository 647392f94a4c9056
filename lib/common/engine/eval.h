/* Teacher-forced perplexity as reference.json computes it: the token
 * stream is cut into windows of window + 1 tokens at stride window, each
 * scored from an empty context, every token after a window's first
 * predicted once. */
#ifndef SF_EVAL_H
#define SF_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/forward.h"

struct sf_ppl {
	double nll;		/* sum of -log p(token | context), natural log */
	uint64_t scored;	/* tokens predicted */
};

/* Adds the windows of tokens[0..n) to *acc. s must hold window + 1
 * positions; its batch (sf_state_init_batch) sets how many tokens share a
 * pass over the weights, which does not change the result. A token beyond
 * the vocabulary or a failed pass ends it early: see sf_state_error. */
void sf_ppl_add(const struct sf_model *m, struct sf_runstate *s, const int32_t *tokens,
		size_t n, int window, struct sf_ppl *acc);

/* -log softmax(logits)[target] in double precision. */
double sf_nll(const float *logits, size_t n, int32_t target);

#endif
