/* The worker pool (see pool.h). A run bumps a generation counter that
 * idle workers spin on for a few tens of microseconds and then sleep on
 * (a futex on Linux, a condition variable elsewhere), so back-to-back
 * dispatches cost no system call while an idle pool costs no CPU. */
#include "base/pool.h"
#include "base/clock.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* How long a worker (or the waiting caller) polls before sleeping:
 * longer than the gap between two dispatches of one layer, short enough
 * that a pool idle between tokens gives its cores back at once. */
#define SF_POOL_SPIN_NS 50000

struct sf_pool {
	int n;				/* threads including the caller */
	int oversubscribed;		/* n > online CPUs */
	pthread_t *threads;		/* (n - 1) */
	void (*fn)(void *arg, int ith, int nth);	/* published by gen */
	void *arg;
	_Atomic int stop;
	/* Each on its own cache line: workers poll gen while the caller
	 * polls pending, and they should not invalidate each other. */
	_Alignas(64) _Atomic unsigned gen;	/* futex word: bumped per run */
	_Atomic int sleepers;			/* workers in (or entering) wait */
	_Alignas(64) _Atomic unsigned pending;	/* futex word: workers not done */
	_Atomic int caller_waits;
	struct busy *busy;		/* (n) */
#if !defined(__linux__)
	pthread_mutex_t mu;
	pthread_cond_t cv;
#endif
};

/* A thread's time inside fn, on its own cache line (only it writes). */
struct busy {
	_Alignas(64) uint64_t ns;
};

struct worker_arg {
	struct sf_pool *p;
	int ith;
};

// ----------------------------------------------------------------------------
// sleeping on a word: futex, or a condition variable as a portable stand-in

static void word_wait(struct sf_pool *p, _Atomic unsigned *w, unsigned val)
{
#if defined(__linux__)
	(void)p;
	/* returns at once (EAGAIN) if *w no longer holds val; spurious
	 * wakeups are fine, the callers loop */
	syscall(SYS_futex, (unsigned *)w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
#else
	pthread_mutex_lock(&p->mu);
	while (atomic_load(w) == val)
		pthread_cond_wait(&p->cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
#endif
}

static void word_wake(struct sf_pool *p, _Atomic unsigned *w)
{
#if defined(__linux__)
	(void)p;
	syscall(SYS_futex, (unsigned *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
	/* the lock orders this after a waiter's check of *w */
	(void)w;
	pthread_mutex_lock(&p->mu);
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
#endif
}

/* Polls until *w != val for SF_POOL_SPIN_NS; returns the new value or
 * val. With more threads than CPUs the thread we wait for may need our
 * CPU, so we yield it instead of pausing. */
static unsigned spin_while(const struct sf_pool *p, _Atomic unsigned *w, unsigned val)
{
	uint64_t t0 = 0;
	for (unsigned i = 0;; i++) {
		unsigned v = atomic_load_explicit(w, memory_order_acquire);
		if (v != val)
			return v;
		if (p->oversubscribed)
			sched_yield();
		else
			cpu_relax();
		if ((i & 63) == 63) {	/* the clock is ~20 ns, pause ~40 */
			uint64_t t = sf_now_ns();
			if (!t0)
				t0 = t;
			else if (t - t0 > SF_POOL_SPIN_NS)
				return val;
		}
	}
}

// ----------------------------------------------------------------------------
// workers

static void *worker_main(void *a)
{
	struct worker_arg *wa = a;
	struct sf_pool *p = wa->p;
	int ith = wa->ith;
	unsigned seen = 0;

	free(wa);
	for (;;) {
		unsigned g = spin_while(p, &p->gen, seen);
		while (g == seen) {
			/* Dekker with sf_pool_run: we announce ourselves, then
			 * look at gen; it bumps gen, then looks at sleepers. Both
			 * seq_cst, so at least one of us sees the other. */
			atomic_fetch_add(&p->sleepers, 1);
			g = atomic_load(&p->gen);
			if (g == seen) {
				word_wait(p, &p->gen, seen);
				g = atomic_load(&p->gen);
			}
			atomic_fetch_sub(&p->sleepers, 1);
		}
		seen = g;
		if (atomic_load_explicit(&p->stop, memory_order_relaxed))
			break;
		uint64_t t0 = sf_now_ns();
		p->fn(p->arg, ith, p->n);
		p->busy[ith].ns += sf_now_ns() - t0;
		/* release: our writes happen-before the caller's return */
		if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_waits))
			word_wake(p, &p->pending);
	}
	return NULL;
}

static void publish(struct sf_pool *p)
{
	atomic_fetch_add(&p->gen, 1);	/* seq_cst: see worker_main */
	if (atomic_load(&p->sleepers) > 0)
		word_wake(p, &p->gen);
}

// ----------------------------------------------------------------------------
// public

int sf_pool_create(struct sf_pool **pp, int nthreads)
{
	struct sf_pool *p;
	int ret = 0;

	*pp = NULL;
	if (nthreads < 1)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->n = 1;
	if (posix_memalign((void **)&p->busy, 64, (size_t)nthreads * sizeof(*p->busy))) {
		free(p);
		return -ENOMEM;
	}
	for (int i = 0; i < nthreads; i++)
		p->busy[i].ns = 0;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	p->oversubscribed = ncpu > 0 && nthreads > ncpu;
#if !defined(__linux__)
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->cv, NULL);
#endif
	if (nthreads > 1) {
		p->threads = calloc((size_t)nthreads - 1, sizeof(*p->threads));
		if (!p->threads) {
			ret = -ENOMEM;
			goto out;
		}
	}
	for (int i = 1; i < nthreads; i++) {
		struct worker_arg *wa = malloc(sizeof(*wa));
		if (!wa) {
			ret = -ENOMEM;
			goto out;
		}
		wa->p = p;
		wa->ith = i;
		/* p->n counts the threads made so far so that destroy joins
		 * just those; the final value is set before any run */
		int rc = pthread_create(&p->threads[i - 1], NULL, worker_main, wa);
		if (rc) {
			free(wa);
			ret = -rc;
			goto out;
		}
		p->n = i + 1;
	}
	*pp = p;
	return 0;
out:
	sf_pool_destroy(p);
	return ret;
}

void sf_pool_destroy(struct sf_pool *p)
{
	if (!p)
		return;
	if (p->n > 1) {
		atomic_store_explicit(&p->stop, 1, memory_order_relaxed);
		publish(p);
		for (int i = 0; i < p->n - 1; i++)
			pthread_join(p->threads[i], NULL);
	}
#if !defined(__linux__)
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->cv);
#endif
	free(p->threads);
	free(p->busy);
	free(p);
}

int sf_pool_size(const struct sf_pool *p)
{
	return p ? p->n : 1;
}

void sf_pool_run(struct sf_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg)
{
	uint64_t t0 = sf_now_ns();
	if (!p || p->n == 1) {
		fn(arg, 0, 1);
		if (p)
			p->busy[0].ns += sf_now_ns() - t0;
		return;
	}
	p->fn = fn;
	p->arg = arg;
	atomic_store_explicit(&p->pending, (unsigned)p->n - 1, memory_order_relaxed);
	publish(p);	/* releases fn, arg and pending to the workers */

	fn(arg, 0, p->n);
	p->busy[0].ns += sf_now_ns() - t0;

	unsigned left;
	while ((left = atomic_load_explicit(&p->pending, memory_order_acquire)) != 0) {
		if (spin_while(p, &p->pending, left) != left)
			continue;
		/* Dekker with the last worker's decrement, as with gen */
		atomic_store(&p->caller_waits, 1);
		left = atomic_load(&p->pending);
		if (left != 0)
			word_wait(p, &p->pending, left);
		atomic_store(&p->caller_waits, 0);
	}
	/* the acquire load that saw 0 pairs with every worker's decrement
	 * (a release sequence), so their outputs are visible to our caller */
}

void sf_pool_split(size_t n, size_t align, int ith, int nth, size_t *lo, size_t *hi)
{
	if (align < 1)
		align = 1;
	if (nth < 1)
		nth = 1;
	/* Balance whole blocks of align items. The spare blocks go to the
	 * last workers: the last block may be short, and so the last chunk
	 * is never both short-blocked and a block behind the others. */
	size_t blocks = n / align + (n % align != 0);
	size_t per = blocks / (size_t)nth, extra = blocks % (size_t)nth, i = (size_t)ith;
	size_t first = (size_t)nth - extra;	/* workers [first, nth) get per + 1 */
	size_t b0 = i * per + (i > first ? i - first : 0);
	size_t b1 = b0 + per + (i >= first);
	*lo = b0 * align < n ? b0 * align : n;
	*hi = b1 * align < n ? b1 * align : n;
}

struct pool_for {
	void (*fn)(void *ctx, size_t i);
	void *ctx;
	size_t n;
};

static void for_worker(void *arg, int ith, int nth)
{
	const struct pool_for *f = arg;
	size_t lo, hi;
	sf_pool_split(f->n, 1, ith, nth, &lo, &hi);
	for (size_t i = lo; i < hi; i++)
		f->fn(f->ctx, i);
}

void sf_pool_for(struct sf_pool *p, size_t n, void (*fn)(void *ctx, size_t i), void *ctx)
{
	struct pool_for f = { fn, ctx, n };
	if (n < 2)
		p = NULL;
	sf_pool_run(p, for_worker, &f);
}

void sf_pool_busy(const struct sf_pool *p, double *seconds)
{
	for (int i = 0; i < sf_pool_size(p); i++)
		seconds[i] = p ? (double)p->busy[i].ns * 1e-9 : 0.0;
}
