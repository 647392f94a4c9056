/* The one monotonic clock of sparseflash: seconds for timings people
 * read, nanoseconds for counters kept in integers. */
#ifndef SF_CLOCK_H
#define SF_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t sf_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline double sf_now(void)
{
	return (double)sf_now_ns() * 1e-9;
}

#endif
