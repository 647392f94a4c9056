/* Two-scale scalar codes: alternating least-squares fit of (s0, s1) and
 * nearest-level assignment. See twoscale.h and man/sf-formats.5 (codes). */
#include <math.h>

#include "offline/twoscale.h"

/* Lloyd-Max levels of a unit Gaussian at 4 levels, +-0.4528 and +-1.5104,
 * as s0 +- s1: the starting point, scaled by the column's RMS. */
#define LM_S0 0.9816
#define LM_S1 0.5288

/* Nearest of the four levels; with s0 >= s1 >= 0 the midpoints are -s0, 0,
 * s0. Returns how many codes changed. */
static size_t assign(const float *w, size_t m, float s0, uint8_t *c)
{
	size_t changed = 0;
	for (size_t i = 0; i < m; i++) {
		unsigned pos = w[i] >= 0.0f;
		unsigned e2 = pos ? w[i] >= s0 : w[i] > -s0;
		uint8_t code = (uint8_t)(pos << 1 | e2);
		changed += code != c[i];
		c[i] = code;
	}
	return changed;
}

/* The least-squares scales for fixed signs, as s0 >= s1 >= 0 (the level
 * set +-s0 +-s1 is the same under swapping the scales or negating one). */
static void fit(const float *w, size_t m, const uint8_t *c, float *s0, float *s1)
{
	double cross = 0.0, b0 = 0.0, b1 = 0.0, n = (double)m;
	for (size_t i = 0; i < m; i++) {
		double e1 = (c[i] & 2) ? 1.0 : -1.0, e2 = (c[i] & 1) ? 1.0 : -1.0;
		cross += e1 * e2;
		b0 += e1 * w[i];
		b1 += e2 * w[i];
	}
	double det = n * n - cross * cross;
	double a, b;
	if (det <= 1e-9 * n * n) {
		/* every weight on the inner levels or every one on the outer:
		 * only one magnitude is determined */
		a = fabs(b0) / n;
		b = 0.0;
	} else {
		a = (n * b0 - cross * b1) / det;
		b = (n * b1 - cross * b0) / det;
	}
	a = fabs(a);
	b = fabs(b);
	*s0 = (float)(a >= b ? a : b);
	*s1 = (float)(a >= b ? b : a);
}

double sf_twoscale_fit(const float *w, size_t m, float (*round)(float), float *s0, float *s1,
		       uint8_t *c)
{
	double ss = 0.0;
	for (size_t i = 0; i < m; i++)
		ss += (double)w[i] * w[i];
	double rms = m ? sqrt(ss / (double)m) : 0.0;
	float a = (float)(LM_S0 * rms), b = (float)(LM_S1 * rms);

	for (size_t i = 0; i < m; i++)
		c[i] = 0xff;	/* nothing assigned yet: the first pass counts as a change */
	for (int it = 0; it < SF_TWOSCALE_MAX_ITER && assign(w, m, a, c); it++)
		fit(w, m, c, &a, &b);
	if (round) {
		a = round(a);
		b = round(b);
		if (b > a) {
			float t = a; a = b; b = t;
		}
		assign(w, m, a, c);
	}
	*s0 = a;
	*s1 = b;
	double err = 0.0;
	for (size_t i = 0; i < m; i++) {
		double d = (double)w[i] - sf_twoscale_level(c[i], a, b);
		err += d * d;
	}
	return err;
}
