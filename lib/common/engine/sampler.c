/* Token sampling: see sampler.h. */
#include "engine/sampler.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels.h"
#include "base/rng.h"

int sf_sampler_init(struct sf_sampler *s, int vocab_size, float temperature, float top_p,
		    uint64_t seed, struct sf_err *e)
{
	s->vocab_size = vocab_size;
	s->temperature = temperature;
	s->top_p = top_p;
	s->top_k = 0;
	s->min_p = 0.0f;
	s->penalty = 1.0f;
	s->freq_penalty = s->presence_penalty = 0.0f;
	s->last_n = 0;
	s->recent = NULL;
	s->nrecent = s->head = 0;
	/* splitmix64 of the seed, so that seed 0 and nearby seeds give
	 * unrelated, non-zero xorshift states */
	uint64_t z = sf_splitmix64(&seed);
	s->rng = z ? z : 1;
	s->candidates = malloc((size_t)vocab_size * sizeof(*s->candidates));
	s->sort_scratch = malloc((size_t)vocab_size * sizeof(*s->sort_scratch));
	if (!s->candidates || !s->sort_scratch) {
		sf_sampler_free(s);
		return sf_err_set(e, -ENOMEM, "sampler: %s", sf_strerror(-ENOMEM));
	}
	return 0;
}

void sf_sampler_free(struct sf_sampler *s)
{
	free(s->candidates);
	s->candidates = NULL;
	free(s->sort_scratch);
	s->sort_scratch = NULL;
	free(s->recent);
	s->recent = NULL;
}

int sf_sampler_set_penalty(struct sf_sampler *s, float penalty, int last_n, struct sf_err *e)
{
	if (!(penalty > 0.0f) || last_n < 0)
		return sf_err_set(e, -EINVAL, "sampler: penalty %g over %d tokens: expected a "
				  "penalty > 0 and a count >= 0", (double)penalty, last_n);
	free(s->recent);
	s->recent = NULL;
	s->nrecent = s->head = 0;
	s->penalty = penalty;
	s->last_n = last_n;
	if (last_n && !(s->recent = malloc((size_t)last_n * sizeof(*s->recent))))
		return sf_err_set(e, -ENOMEM, "sampler: %s", sf_strerror(-ENOMEM));
	return 0;
}

void sf_sampler_set_penalties(struct sf_sampler *s, float freq, float presence)
{
	s->freq_penalty = freq;
	s->presence_penalty = presence;
}

void sf_sampler_accept(struct sf_sampler *s, int32_t token)
{
	if (!s->recent)
		return;
	s->recent[s->head] = token;
	s->head = (s->head + 1) % s->last_n;
	if (s->nrecent < s->last_n)
		s->nrecent++;
}

static float random_f32(uint64_t *state)
{
	*state ^= *state >> 12;
	*state ^= *state << 25;
	*state ^= *state >> 27;
	return (float)((*state * 0x2545F4914F6CDD1DULL) >> 40) / 16777216.0f;	/* [0, 1) */
}

int sf_argmax(const float *x, size_t n)
{
	size_t best = 0;
	for (size_t i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return (int)best;
}

/* A probability's bits, complemented so that the largest sorts first. */
static inline uint32_t prob_key(float p)
{
	uint32_t u = 0;
	if (p != 0.0f)	/* -0 as +0 */
		memcpy(&u, &p, sizeof(u));
	return ~u;
}

static int sample_all(const float *p, int n, float coin)
{
	float cdf = 0.0f;
	for (int i = 0; i < n; i++) {
		cdf += p[i];
		if (coin < cdf)
			return i;
	}
	return n - 1;	/* rounding left the cdf short of 1 */
}

/* The n candidates, taken in index order, by probability, the largest
 * first and ties in index order (a total order keeps sampling
 * deterministic): a stable radix sort on the bits of the probabilities,
 * which are >= 0 and so order as their bits do, three passes of 11 bits.
 * qsort's comparisons took 15% of a decode's time over 32,000 tokens. */
#define RADIX_BITS 11
#define RADIX_PASSES 3

static void sort_by_prob(struct sf_sampler *s, int n)
{
	struct sf_prob_index *from = s->candidates, *to = s->sort_scratch;

	for (int pass = 0; pass < RADIX_PASSES; pass++) {
		int shift = pass * RADIX_BITS;
		uint32_t count[1u << RADIX_BITS] = { 0 };
		for (int i = 0; i < n; i++)
			count[(prob_key(from[i].prob) >> shift) & ((1u << RADIX_BITS) - 1)]++;
		uint32_t at = 0;
		for (uint32_t d = 0; d < 1u << RADIX_BITS; d++) {
			uint32_t c = count[d];
			count[d] = at;
			at += c;
		}
		for (int i = 0; i < n; i++)
			to[count[(prob_key(from[i].prob) >> shift) & ((1u << RADIX_BITS) - 1)]++] =
				from[i];
		struct sf_prob_index *t = from;
		from = to;
		to = t;
	}
	/* an odd number of passes leaves the sorted candidates in the scratch */
	if (from != s->candidates)
		memcpy(s->candidates, from, (size_t)n * sizeof(*from));
}

/* The candidate of c[0..last] where the cumulative probability passes r
 * (coin times their mass). */
static int draw(const struct sf_prob_index *c, int last, float r)
{
	float cdf = 0.0f;
	for (int i = 0; i <= last; i++) {
		cdf += c[i].prob;
		if (r < cdf)
			return c[i].index;
	}
	return c[last].index;
}

/* Nucleus sampling: the smallest set of most likely tokens whose
 * probability reaches top_p, as s->candidates[0, *last] of mass *mass.
 * Tokens below (1 - top_p) / (n - 1) cannot be in that set, so they are
 * dropped before sorting. */
static void keep_top_p(struct sf_sampler *s, const float *p, int *last, float *mass)
{
	int n = s->vocab_size, m = 0;
	float cutoff = (1.0f - s->top_p) / (float)(n > 1 ? n - 1 : 1);

	for (int i = 0; i < n; i++) {
		if (p[i] >= cutoff) {
			s->candidates[m].prob = p[i];
			s->candidates[m].index = i;
			m++;
		}
	}
	sort_by_prob(s, m);

	*mass = 0.0f;
	*last = m - 1;
	for (int i = 0; i < m; i++) {
		*mass += s->candidates[i].prob;
		if (*mass > s->top_p) {
			*last = i;
			break;
		}
	}
}

/* llama.cpp's repetition penalty: once per distinct token of the window
 * (a token seen twice is penalised once). */
static void penalise(struct sf_sampler *s, float *logits)
{
	for (int i = 0; i < s->nrecent; i++) {
		int32_t t = s->recent[i];
		int seen = 0;
		if (t < 0 || t >= s->vocab_size)
			continue;
		for (int j = 0; j < i && !seen; j++)
			seen = s->recent[j] == t;
		if (seen)
			continue;
		if (s->penalty != 1.0f)
			logits[t] = logits[t] > 0 ? logits[t] / s->penalty : logits[t] * s->penalty;
		if (s->freq_penalty != 0.0f || s->presence_penalty != 0.0f) {
			int count = 0;
			for (int j = i; j < s->nrecent; j++)
				count += s->recent[j] == t;
			logits[t] -= (float)count * s->freq_penalty + s->presence_penalty;
		}
	}
}

/* top-k, then min-p, then top-p over the candidates left, as llama.cpp
 * chains them; the candidates sorted by probability, ties by index: kept
 * are s->candidates[0, *last], of mass *mass. */
static void keep_truncated(struct sf_sampler *s, const float *p, int *last, float *mass)
{
	int n = s->vocab_size, m = 0;
	float pmax = p[sf_argmax(p, (size_t)n)];

	for (int i = 0; i < n; i++)
		if (p[i] >= s->min_p * pmax) {
			s->candidates[m].prob = p[i];
			s->candidates[m].index = i;
			m++;
		}
	sort_by_prob(s, m);
	if (s->top_k > 0 && m > s->top_k)
		m = s->top_k;
	float total = 0.0f;
	for (int i = 0; i < m; i++)
		total += s->candidates[i].prob;
	*last = m - 1;
	*mass = 0.0f;
	if (s->top_p > 0.0f && s->top_p < 1.0f)
		for (int i = 0; i < m; i++) {
			*mass += s->candidates[i].prob / total;
			if (*mass > s->top_p) {
				*last = i;
				break;
			}
		}
	*mass = 0.0f;
	for (int i = 0; i <= *last; i++)
		*mass += s->candidates[i].prob;
}

/* The penalty, then the softmax at the temperature, in place; 0 when
 * greedy (the logits penalised only). Then which truncation applies: 1
 * none, 2 top-p alone, 3 top-k or min-p (with top-p). */
static int scale(struct sf_sampler *s, float *logits)
{
	if (s->penalty != 1.0f || s->freq_penalty != 0.0f || s->presence_penalty != 0.0f)
		penalise(s, logits);
	if (s->temperature == 0.0f)
		return 0;
	for (int i = 0; i < s->vocab_size; i++)
		logits[i] /= s->temperature;
	sf_softmax(logits, (size_t)s->vocab_size);
	if (s->top_k > 0 || s->min_p > 0.0f)
		return 3;
	return s->top_p <= 0.0f || s->top_p >= 1.0f ? 1 : 2;
}

/* The kept candidates of a truncation (scale's 2 or 3). */
static void keep(struct sf_sampler *s, int how, const float *p, int *last, float *mass)
{
	if (how == 3)
		keep_truncated(s, p, last, mass);
	else
		keep_top_p(s, p, last, mass);
}

int sf_sample(struct sf_sampler *s, float *logits)
{
	int how = scale(s, logits), last;
	float mass;

	if (how == 0)
		return sf_argmax(logits, (size_t)s->vocab_size);
	float coin = random_f32(&s->rng);
	if (how == 1)
		return sample_all(logits, s->vocab_size, coin);
	keep(s, how, logits, &last, &mass);
	return draw(s->candidates, last, coin * mass);
}

void sf_sampler_probs(struct sf_sampler *s, float *logits, float *probs)
{
	int n = s->vocab_size, how = scale(s, logits), last;
	float mass;

	if (how == 1) {
		memcpy(probs, logits, (size_t)n * sizeof(*probs));
		return;
	}
	memset(probs, 0, (size_t)n * sizeof(*probs));
	if (how == 0) {
		probs[sf_argmax(logits, (size_t)n)] = 1.0f;
		return;
	}
	keep(s, how, logits, &last, &mass);
	for (int i = 0; i <= last; i++)
		probs[s->candidates[i].index] = s->candidates[i].prob / mass;
}

int sf_sampler_draw(struct sf_sampler *s, const float *probs)
{
	return sample_all(probs, s->vocab_size, random_f32(&s->rng));
}

float sf_sampler_coin(struct sf_sampler *s)
{
	return random_f32(&s->rng);
}
