/* A fixed pool of worker threads for the decoder (-t N). sf_pool_run calls
 * fn(arg, ith, nth) for ith in [0, nth) on nth threads, the caller being
 * ith 0, and returns when all are done; work is split by (ith, nth) as
 * ggml does. Dispatch is cheap enough to call once per matrix. */
#ifndef SF_POOL_H
#define SF_POOL_H

#include <stddef.h>

struct sf_pool;

/* nthreads >= 1; 1 runs everything on the caller with no threads made.
 * 0, -EINVAL, -ENOMEM or the -errno of pthread_create; *p NULL on error. */
int sf_pool_create(struct sf_pool **p, int nthreads);
void sf_pool_destroy(struct sf_pool *p);	/* accepts NULL */
int sf_pool_size(const struct sf_pool *p);
/* Everything fn wrote is visible to the caller on return. One caller at a
 * time, and not from inside fn. A NULL pool runs fn(arg, 0, 1). */
void sf_pool_run(struct sf_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg);

/* fn(ctx, i) for every i in [0, n), the threads taking contiguous
 * stretches of i (sf_pool_split); with n < 2 or a NULL pool, all on the
 * caller. For work that splits by item, such as a pass's tokens. */
void sf_pool_for(struct sf_pool *p, size_t n, void (*fn)(void *ctx, size_t i), void *ctx);

/* seconds[i] (sf_pool_size entries): the time thread i (0: the caller)
 * has spent inside the runs' fn since the pool was made, read between
 * runs: what is left of a span of wall time is waiting or serial work. */
void sf_pool_busy(const struct sf_pool *p, double *seconds);

/* [*lo, *hi) of n items for worker ith of nth, in contiguous chunks whose
 * starts are multiples of align (align >= 1). */
void sf_pool_split(size_t n, size_t align, int ith, int nth, size_t *lo, size_t *hi);

#endif
