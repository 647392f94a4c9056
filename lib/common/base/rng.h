/* splitmix64 (Steele, Lea and Flood, 2014): a 64-bit counter through a
 * mixer. The one generator behind every seeded choice in sparseflash: the
 * trellis codebook, the sampler's seed, cache admission, test data. */
#ifndef SF_RNG_H
#define SF_RNG_H

#include <stdint.h>

static inline uint64_t sf_splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double sf_rng_unit(uint64_t *s)
{
	return (double)(sf_splitmix64(s) >> 11) * 0x1p-53;
}

#endif
