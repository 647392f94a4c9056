/* SpAx's scalar middle tier: two scales per column and two sign bits per
 * weight, w_hat = e1 * s0 + e2 * s1 with e1, e2 in {-1, +1}: four levels
 * +-s0 +-s1, fitted by least squares (alternating scale fit and nearest-
 * level assignment until no assignment changes), which can reach the
 * 4-level Lloyd-Max quantiser. Code layout: man/sf-formats.5 (codes). */
#ifndef SF_TWOSCALE_H
#define SF_TWOSCALE_H

#include <stddef.h>
#include <stdint.h>

#include "formats/codes.h"	/* sf_twoscale_level: what a code means */

#define SF_TWOSCALE_MAX_ITER 100	/* alternations before giving up on a fixed point */

/* Fits w[0..m) (finite): s0 >= s1 >= 0 and the codes c[0..m) (one per
 * byte). round(v) maps a scale to the value that will be stored (f16);
 * the final assignment uses the rounded scales, so the levels a decoder
 * computes from the stored scales are exactly those the fit chose from.
 * NULL keeps full precision. Returns the squared error. */
double sf_twoscale_fit(const float *w, size_t m, float (*round)(float), float *s0, float *s1,
		       uint8_t *c);

#endif
