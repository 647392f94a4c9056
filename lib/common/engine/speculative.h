/* Speculative decoding: a draft model proposes up to n tokens one at a
 * time, the target computes them in one batched pass (sf_forward_batch
 * with the logits of every position) and keeps the longest prefix its own
 * sampling agrees with, plus one token of its own. Greedy, the text is
 * plain decoding's; with temperature, the speculative-sampling rule
 * (Leviathan et al. 2023, Chen et al. 2023) keeps the target's
 * distribution. man/sf-run.1, --draft. */
#ifndef SF_SPECULATIVE_H
#define SF_SPECULATIVE_H

#include <stdint.h>

#include "base/err.h"
#include "engine/forward.h"
#include "engine/sampler.h"

/* Proposals per target pass at most (--draft-max): a pass verifies up
 * to 9 tokens. At an acceptance rate a the tokens a pass yields are
 * (1 - a^(n+1)) / (1 - a): at a = 0.7, 3.2 of the 3.3 any n gives come
 * by n = 8, and the draft's sequential steps and the union of a sparse
 * pass's selections grow with n. */
#define SF_SPEC_DEFAULT_MAX 8
#define SF_SPEC_DEFAULT_MIN 0		/* --draft-min: proposals --draft-p-min cannot stop */
/* --draft-p-min: the draft stops proposing after a token it gave less
 * than this probability. Off: a flash-bound pass verifies another token
 * for the draft's step and, at budget 1, no bytes; llama.cpp's 0.75 (for
 * targets whose verification costs compute) cut mix4-1m's tokens per
 * mix4-5m pass from 2.76 to 1.65 (128 greedy kjv tokens). */
#define SF_SPEC_DEFAULT_P_MIN 0
#define SF_SPEC_MAX 256			/* --draft-max at most */
/* The adaptive n's memory: its measurements lose this share of their
 * weight each pass (about the last 10 passes count), so n follows the
 * text (a genre the draft knows less) and the machine (flash or compute
 * bound). */
#define SF_SPEC_DECAY 0.9
/* Every this many passes n is one off the best (one more, or one fewer at
 * --draft-max), so that the cost of one more proposal stays measured and
 * a count of 0 (plain passes) still learns whether the draft agrees. */
#define SF_SPEC_PROBE 8
/* Sampling with a temperature, where the text depends on n, the costs are
 * not measured but nominal, so that a seed gives the same text: a pass of
 * k proposals costs 1 + k times this, and the draft this a proposal. */
#define SF_SPEC_NOMINAL 0.1

/* What the adaptive n is chosen from, each decayed by SF_SPEC_DECAY a
 * pass: the proposals kept and the passes a rejection ended (the draft's
 * per-proposal acceptance, a = kept / (kept + ended)), the model's pass
 * seconds t against its proposals k (sums of a least-squares line t = c0
 * + c1 k), and the draft's seconds per proposal. */
struct sf_spec_costs {
	double kept, ended;
	double w, k, kk, t, kt;
	double draft, draft_w;
};

/* A model taking part: its weights, KV cache (and exec) and sampler. */
struct sf_spec_model {
	const struct sf_model *m;
	struct sf_runstate *s;
	struct sf_sampler *sampler;
};

struct sf_spec {
	int vocab;
	int max, min;		/* proposals per pass: at most, and never stopped below */
	float p_min;
	int adaptive;		/* n follows the costs (else n = max) */
	int n;			/* proposals the next pass takes at most */
	struct sf_spec_costs costs;
	float *q;		/* (max, vocab) the draft's distribution of each proposal */
	float *p;		/* (vocab) the target's at a position, and the residual */
	int32_t *pass;		/* (max + 1) the target's pass: a token, the proposals */
	int draft_pos;		/* positions the draft's KV cache holds of the text */
	double draft_seconds;	/* spent in the draft's passes and proposals */
	/* figures: passes verified, tokens proposed and accepted */
	uint64_t passes, proposed, accepted;
};

/* max in [1, SF_SPEC_MAX], min in [0, max], p_min in [0, 1]. */
int sf_spec_init(struct sf_spec *sp, int vocab, int max, int min, double p_min, int adaptive,
		 struct sf_err *e);
void sf_spec_free(struct sf_spec *sp);	/* accepts a zeroed sp */

/* Proposal i (0 based) of a pass from the draft's logits (modified): its
 * token drawn by the draft's sampler (greedy: the argmax), the
 * distribution it was drawn from kept for sf_spec_verify. *more is 0 when
 * the draft should propose no more this pass: the token's probability
 * (greedy: of the softmax of the logits) is below p_min and min
 * proposals are made. */
int32_t sf_spec_propose(struct sf_spec *sp, struct sf_sampler *draft, float *logits, int i,
			int *more);

/* Verifies the k proposals d[0, k) (0 <= k <= n) with the target's logits
 * (k + 1, vocab) of the pass that fed the token before them and d[0, k-1)
 * (modified): returns how many are accepted, a, and in *next the target's
 * token after d[0, a). Greedy: d[i] is accepted while it is the target's
 * argmax. Sampling: d[i] with probability min(1, p/q) of the target's and
 * the draft's probabilities of it; at the first rejection *next is drawn
 * from max(0, p - q) normalised, after full acceptance from the target's
 * last position. The accepted tokens and *next are given to
 * sf_sampler_accept of target, so its repetition penalty sees the text
 * plain decoding would. Then the figures. */
int sf_spec_verify(struct sf_spec *sp, struct sf_sampler *target, const int32_t *d, int k,
		   float *logits, int32_t *next);

/* The adaptive n (sf_spec_step calls these). sf_spec_observe records a
 * pass of k proposals of which a were kept, the model's pass taking
 * pass_s seconds and the draft draft_s per proposal (< 0: not measured,
 * as when it first caught up with many tokens). sf_spec_best_n is the
 * count in [min, max] of most expected tokens per second: a pass of k
 * yields (1 - a^(k+1)) / (1 - a) tokens at acceptance a and costs
 * c0 + c1 k + draft k seconds; 0 is a plain pass. Where reads bound the
 * pass (c1 near 0) that is max; where compute does, fewer; where the
 * draft rarely agrees, 0. Hugging Face's assisted generation instead
 * takes 1 off after any rejection and adds 2 after full acceptance:
 * on mix4-5m's image that held n near 1 and read 25% more bytes per
 * token than a fixed n, and it never stops drafting. */
void sf_spec_observe(struct sf_spec *sp, int k, int a, double pass_s, double draft_s);
int sf_spec_best_n(const struct sf_spec *sp);

/* One pass of speculative decoding. text[0, pos] is the text so far,
 * the target's KV cache holding every position before pos: the draft is
 * fed what it has not seen of it (in passes of its state's batch) and
 * proposes up to min(k, n) tokens (the caller bounds k by the tokens
 * wanted and the context left); the target computes text[pos] and the
 * proposals in one pass (its state's batch at least k + 1) and
 * sf_spec_verify keeps some; with sp->adaptive, the next pass's n follows
 * (sf_spec_best_n, one off it every SF_SPEC_PROBE passes) from the times
 * measured (greedy) or nominal ones (SF_SPEC_NOMINAL). The tokens the
 * pass gives, the accepted
 * proposals and the target's own, go to out[0, r) (out holds max + 1):
 * returns r, 1 to k + 1, the target's KV cache then holding positions
 * up to pos + r - 1 (what lies beyond is overwritten later), or a
 * negative error of either model's pass (sf_state_error; a sparse
 * decoder's read error is the caller's to check). */
int sf_spec_step(struct sf_spec *sp, const struct sf_spec_model *target,
		 const struct sf_spec_model *draft, const int32_t *text, int pos, int k,
		 int32_t *out, struct sf_err *e);

#endif
