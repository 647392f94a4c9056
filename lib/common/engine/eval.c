/* Perplexity: see eval.h. */
#include "engine/eval.h"

#include <math.h>

double sf_nll(const float *logits, size_t n, int32_t target)
{
	double mx = logits[0], sum = 0.0;
	for (size_t i = 1; i < n; i++)
		if (logits[i] > mx)
			mx = logits[i];
	for (size_t i = 0; i < n; i++)
		sum += exp((double)logits[i] - mx);
	return log(sum) + mx - (double)logits[target];
}

void sf_ppl_add(const struct sf_model *m, struct sf_runstate *s, const int32_t *tokens,
		size_t n, int window, struct sf_ppl *acc)
{
	size_t vocab = (size_t)m->cfg.vocab_size;

	/* the targets too: the last token of the stream is never an input */
	if (sf_state_check_tokens(s, &m->cfg, tokens, n, 0))
		return;
	for (size_t start = 0; start + 1 < n; start += (size_t)window) {
		size_t len = n - start < (size_t)window + 1 ? n - start : (size_t)window + 1;
		s->skip_logits = 0;
		/* the window's inputs s->batch at a time, each scored on its logits */
		for (size_t i = 0; i + 1 < len;) {
			int T = (int)(len - 1 - i < (size_t)s->batch ? len - 1 - i : (size_t)s->batch);
			const float *logits = sf_forward_batch(m, s, tokens + start + i, T, (int)i, 1);
			if (!logits)	/* the pass failed: sf_state_error says why */
				return;
			for (int t = 0; t < T; t++, i++) {
				acc->nll += sf_nll(logits + (size_t)t * vocab, vocab,
						   tokens[start + i + 1]);
				acc->scored++;
			}
		}
	}
}
