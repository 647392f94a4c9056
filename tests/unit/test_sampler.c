/* engine/sampler: the distribution a truncation keeps is the one a plain
 * reference gets with qsort over every probability (largest first, ties
 * in index order), bit for bit, for top-p alone and top-k, min-p and
 * top-p together, on logits with many ties, zeros and long tails. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels.h"
#include "engine/sampler.h"
#include "unit.h"

#define VOCAB 5000

static uint64_t rng = 5;

static double uniform(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (double)(rng >> 11) / 9007199254740992.0;
}

struct cand {
	float p;
	int i;
};

static int desc(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->p != y->p)
		return x->p < y->p ? 1 : -1;
	return x->i - y->i;
}

/* llama.cpp's order as sampler.h states it, at temperature 1: top-k, then
 * min-p, then top-p, over the candidates sorted with qsort. */
static void reference(const float *logits, int n, int top_k, float min_p, float top_p, float *out)
{
	float *p = malloc((size_t)n * sizeof(*p));
	struct cand *c = malloc((size_t)n * sizeof(*c));
	int m = 0, last;
	float mass = 0.0f;

	memcpy(p, logits, (size_t)n * sizeof(*p));
	sf_softmax(p, (size_t)n);
	if (top_k > 0 || min_p > 0.0f) {
		float pmax = 0.0f, total = 0.0f;
		for (int i = 0; i < n; i++)
			pmax = p[i] > pmax ? p[i] : pmax;
		for (int i = 0; i < n; i++)
			if (p[i] >= min_p * pmax)
				c[m++] = (struct cand){ p[i], i };
		qsort(c, (size_t)m, sizeof(*c), desc);
		if (top_k > 0 && m > top_k)
			m = top_k;
		for (int i = 0; i < m; i++)
			total += c[i].p;
		last = m - 1;
		for (int i = 0; i < m && top_p < 1.0f; i++) {
			mass += c[i].p / total;
			if (mass > top_p) {
				last = i;
				break;
			}
		}
	} else {
		float cutoff = (1.0f - top_p) / (float)(n - 1);
		for (int i = 0; i < n; i++)
			if (p[i] >= cutoff)
				c[m++] = (struct cand){ p[i], i };
		qsort(c, (size_t)m, sizeof(*c), desc);
		last = m - 1;
		for (int i = 0; i < m; i++) {
			mass += c[i].p;
			if (mass > top_p) {
				last = i;
				break;
			}
		}
	}
	mass = 0.0f;
	for (int i = 0; i <= last; i++)
		mass += c[i].p;
	memset(out, 0, (size_t)n * sizeof(*out));
	for (int i = 0; i <= last; i++)
		out[c[i].i] = c[i].p / mass;
	free(c);
	free(p);
}

/* Logits of kind k: 0 gaussian, 1 a few levels (ties everywhere), 2 one
 * peak over a flat floor, 3 gaussian with a third at -inf (zeros). */
static void logits_of(float *x, int n, int kind)
{
	for (int i = 0; i < n; i++) {
		double g = sqrt(-2.0 * log(uniform() + 1e-300)) * cos(6.283185307179586 * uniform());
		x[i] = kind == 1 ? (float)(int)(uniform() * 4) : kind == 2 ? 0.0f : (float)(3 * g);
		if (kind == 3 && uniform() < 0.33)
			x[i] = -INFINITY;
	}
	if (kind == 2)
		x[n / 3] = 9.0f;
}

int main(void)
{
	static const struct {
		int top_k;
		float min_p, top_p;
	} cuts[] = {
		{ 0, 0.0f, 0.95f }, { 0, 0.0f, 0.5f }, { 0, 0.0f, 0.999f }, { 40, 0.0f, 0.95f },
		{ 0, 0.05f, 1.0f }, { 7, 0.01f, 0.6f }, { 1000, 0.0f, 1.0f },
	};
	float *x = malloc(VOCAB * sizeof(*x)), *y = malloc(VOCAB * sizeof(*y));
	float *got = malloc(VOCAB * sizeof(*got)), *want = malloc(VOCAB * sizeof(*want));
	struct sf_err e = { 0 };

	for (size_t k = 0; k < sizeof(cuts) / sizeof(cuts[0]); k++)
		for (int kind = 0; kind < 4; kind++)
			for (int n = 2; n <= VOCAB; n = n * 7 + 3) {
				struct sf_sampler s;
				CHECK(!sf_sampler_init(&s, n, 1.0f, cuts[k].top_p, 1, &e), "%s", e.msg);
				s.top_k = cuts[k].top_k;
				s.min_p = cuts[k].min_p;
				logits_of(x, n, kind);
				memcpy(y, x, (size_t)n * sizeof(*y));
				sf_sampler_probs(&s, y, got);
				reference(x, n, cuts[k].top_k, cuts[k].min_p, cuts[k].top_p, want);
				CHECK(!memcmp(got, want, (size_t)n * sizeof(*got)),
				      "top-k %d, min-p %g, top-p %g, logits of kind %d, %d tokens: the "
				      "kept distribution differs from qsort's", cuts[k].top_k,
				      (double)cuts[k].min_p, (double)cuts[k].top_p, kind, n);
				sf_sampler_free(&s);
			}
	free(x);
	free(y);
	free(got);
	free(want);
	return unit_exit();
}
