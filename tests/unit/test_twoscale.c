/* Two-scale scalar codes: the fit reaches the Lloyd-Max quantiser on
 * Gaussian data, the reported error is the decoded one, degenerate
 * columns (one weight, zeros, two values) are exact. */
#include <math.h>
#include <stdlib.h>

#include "base/vocab.h"
#include "offline/twoscale.h"
#include "unit.h"

static uint64_t rng = 99;
static double uniform(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return ((double)(rng >> 11) + 0.5) * 0x1p-53;
}

static float f16r(float v)
{
	return sf_f16_to_f32(sf_f32_to_f16(v));
}

static double decoded_sse(const float *w, size_t m, const uint8_t *c, float s0, float s1)
{
	double e = 0.0;
	for (size_t i = 0; i < m; i++) {
		double d = (double)w[i] - sf_twoscale_level(c[i], s0, s1);
		e += d * d;
	}
	return e;
}

int main(void)
{
	enum { M = 20000 };
	float *w = malloc(M * sizeof(float)), s0, s1;
	uint8_t *c = malloc(M);
	for (size_t i = 0; i < M; i++)
		w[i] = (float)(sqrt(-2.0 * log(uniform())) * cos(2.0 * M_PI * uniform()));
	double e = sf_twoscale_fit(w, M, f16r, &s0, &s1, c);
	CHECK(fabs(e - decoded_sse(w, M, c, s0, s1)) <= 1e-9 * e, "reported %g", e);
	CHECK(e / M < 0.120 && e / M > 0.110, "Gaussian MSE %g, Lloyd-Max 0.1175", e / M);
	CHECK(fabs(s0 + s1 - 1.510) < 0.05 && fabs(s0 - s1 - 0.4528) < 0.03,
	      "levels %g %g, Lloyd-Max 1.510 0.453", s0 + s1, s0 - s1);
	CHECK(s0 == f16r(s0) && s1 == f16r(s1), "scales not f16 values");
	CHECK(s0 >= s1 && s1 >= 0, "scales %g %g not canonical", s0, s1);
	for (unsigned k = 1; k < 4; k++)
		CHECK(sf_twoscale_level(k, s0, s1) > sf_twoscale_level(k - 1, s0, s1),
		      "levels do not rise with the code at %u", k);
	/* every weight got its nearest level */
	for (size_t i = 0; i < M; i++)
		for (unsigned k = 0; k < 4; k++)
			if (fabsf(w[i] - sf_twoscale_level(k, s0, s1)) <
			    fabsf(w[i] - sf_twoscale_level(c[i], s0, s1))) {
				CHECK(0, "weight %zu: level %u is nearer than code %u", i, k, c[i]);
				break;
			}

	/* one weight: exact */
	float one = -0.75f;
	e = sf_twoscale_fit(&one, 1, NULL, &s0, &s1, c);
	CHECK(e == 0.0 && sf_twoscale_level(c[0], s0, s1) == one, "one weight: error %g", e);
	/* zeros: exact */
	float z[7] = { 0 };
	e = sf_twoscale_fit(z, 7, f16r, &s0, &s1, c);
	CHECK(e == 0.0, "zeros: error %g", e);
	/* four distinct symmetric levels are exactly representable */
	float q[8] = { -3, -1, 1, 3, 3, 1, -1, -3 };
	e = sf_twoscale_fit(q, 8, f16r, &s0, &s1, c);
	CHECK(e < 1e-12 && s0 == 2.0f && s1 == 1.0f, "four levels: error %g, scales %g %g", e,
	      s0, s1);
	free(w);
	free(c);
	return unit_exit();
}
