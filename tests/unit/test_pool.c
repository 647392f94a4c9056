/* Unit test of lib/common/base/pool.c: sf_pool_split covers every item exactly
 * once in aligned contiguous chunks, and sf_pool_run runs every ith once
 * per dispatch, with results visible on return, over 100k dispatches
 * (fast back-to-back and with pauses long enough for workers to sleep). */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/pool.h"
#include "unit.h"

static void test_split(void)
{
	static const size_t ns[] = { 0, 1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 100, 1000, 4097, 32000 };
	static const size_t aligns[] = { 1, 2, 3, 4, 16, 64 };
	unsigned char *seen = malloc(32000);

	for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++) {
		for (size_t b = 0; b < sizeof(aligns) / sizeof(aligns[0]); b++) {
			for (int nth = 1; nth <= 9; nth++) {
				size_t n = ns[a], al = aligns[b], prev = 0, minsz = SIZE_MAX, maxsz = 0;
				memset(seen, 0, n);
				for (int ith = 0; ith < nth; ith++) {
					size_t lo, hi;
					sf_pool_split(n, al, ith, nth, &lo, &hi);
					CHECK(lo == prev && lo <= hi && hi <= n,
					      "n %zu align %zu %d/%d: [%zu, %zu) after %zu", n, al, ith, nth,
					      lo, hi, prev);
					CHECK(lo == n || lo % al == 0, "n %zu align %zu %d/%d: lo %zu unaligned",
					      n, al, ith, nth, lo);
					for (size_t i = lo; i < hi && i < n; i++)
						seen[i]++;
					prev = hi;
					if (hi - lo < minsz)
						minsz = hi - lo;
					if (hi - lo > maxsz)
						maxsz = hi - lo;
				}
				CHECK(prev == n, "n %zu align %zu nth %d: ends at %zu", n, al, nth, prev);
				for (size_t i = 0; i < n; i++)
					if (seen[i] != 1) {
						CHECK(0, "n %zu align %zu nth %d: item %zu seen %d times", n, al,
						      nth, i, seen[i]);
						break;
					}
				/* balanced to within one block */
				CHECK(maxsz - minsz <= al,
				      "n %zu align %zu nth %d: chunks %zu..%zu", n, al, nth, minsz, maxsz);
			}
		}
	}
	free(seen);
}

// ----------------------------------------------------------------------------

struct task {
	size_t n;
	uint32_t *count;	/* (n) times each item was processed */
	int nth;		/* the size every call must be told */
	_Atomic int bad_nth;
	_Atomic int calls;
	_Atomic unsigned ith_mask;
};

static void work(void *arg, int ith, int nth)
{
	struct task *t = arg;
	size_t lo, hi;
	sf_pool_split(t->n, 4, ith, nth, &lo, &hi);
	/* plain, non-atomic writes: the pool must order them before the
	 * caller's return */
	for (size_t i = lo; i < hi; i++)
		t->count[i]++;
	if (nth != t->nth)
		atomic_store_explicit(&t->bad_nth, nth, memory_order_relaxed);
	atomic_fetch_add_explicit(&t->calls, 1, memory_order_relaxed);
	atomic_fetch_or_explicit(&t->ith_mask, 1u << ith, memory_order_relaxed);
}

static void sleep_us(long us)
{
	struct timespec ts = { 0, us * 1000 };
	nanosleep(&ts, NULL);
}

static void test_run(int nthreads)
{
	struct sf_pool *p;
	int rc = sf_pool_create(&p, nthreads);
	CHECK(rc == 0, "create %d: %d", nthreads, rc);
	if (rc)
		return;
	CHECK(sf_pool_size(p) == nthreads, "size %d, want %d", sf_pool_size(p), nthreads);

	struct task t = { .n = 103, .nth = nthreads };
	t.count = calloc(t.n, sizeof(*t.count));
	/* make check-full (SF_FULL=1) hunts rare wake-up races for longer */
	const char *full = getenv("SF_FULL");
	const int runs = full && *full == '1' ? 100000 : 10000;
	for (int r = 0; r < runs; r++) {
		atomic_store(&t.calls, 0);
		atomic_store(&t.ith_mask, 0);
		sf_pool_run(p, work, &t);
		if (atomic_load(&t.calls) != nthreads ||
		    atomic_load(&t.ith_mask) != (1u << nthreads) - 1 || atomic_load(&t.bad_nth)) {
			CHECK(0, "%d threads run %d: %d calls, mask %x, nth %d", nthreads, r,
			      atomic_load(&t.calls), atomic_load(&t.ith_mask), atomic_load(&t.bad_nth));
			break;
		}
		/* now and then pause past the spin, so workers (and the caller
		 * waiting on a slow worker) go through the sleeping path */
		if (r % 5000 == 4999)
			sleep_us(200);
	}
	for (size_t i = 0; i < t.n; i++)
		if (t.count[i] != (uint32_t)runs) {
			CHECK(0, "%d threads: item %zu processed %u times, want %d", nthreads, i,
			      t.count[i], runs);
			break;
		}
	free(t.count);
	sf_pool_destroy(p);
}

/* One worker much slower than the caller: the caller must wait for it
 * (spinning, then sleeping) and see its result. */
static void slow(void *arg, int ith, int nth)
{
	int *out = arg;
	(void)nth;
	if (ith == nth - 1)
		sleep_us(300);
	out[ith] = ith + 1;
}

static void test_slow(int nthreads)
{
	struct sf_pool *p;
	int out[8];
	if (sf_pool_create(&p, nthreads))
		return;
	for (int r = 0; r < 200; r++) {
		memset(out, 0, sizeof(out));
		sf_pool_run(p, slow, out);
		for (int i = 0; i < nthreads; i++)
			CHECK(out[i] == i + 1, "%d threads slow run %d: out[%d] = %d", nthreads, r, i,
			      out[i]);
	}
	sf_pool_destroy(p);
}

static void count_item(void *ctx, size_t i)
{
	int *seen = ctx;
	seen[i]++;
}

/* sf_pool_for visits each item exactly once, on a pool and on none. */
static void test_for(int nthreads)
{
	struct sf_pool *p = NULL;
	if (nthreads && sf_pool_create(&p, nthreads))
		return;
	static const size_t ns[] = { 0, 1, 2, 3, 17, 100 };
	for (size_t z = 0; z < sizeof ns / sizeof ns[0]; z++) {
		int seen[100] = { 0 };
		sf_pool_for(p, ns[z], count_item, seen);
		for (size_t i = 0; i < 100; i++)
			CHECK(seen[i] == (i < ns[z]), "%d threads for n %zu: item %zu seen %d times",
			      nthreads, ns[z], i, seen[i]);
	}
	sf_pool_destroy(p);
}

int main(void)
{
	struct sf_pool *p = (struct sf_pool *)1;
	CHECK(sf_pool_create(&p, 0) == -EINVAL && p == NULL, "0 threads accepted");
	sf_pool_destroy(NULL);
	CHECK(sf_pool_size(NULL) == 1, "NULL pool size");

	test_split();
	static const int sizes[] = { 1, 2, 4 };
	for (int i = 0; i < 3; i++) {
		test_run(sizes[i]);
		test_slow(sizes[i]);
		test_for(sizes[i]);
	}
	test_for(0);	/* no pool */
	/* created and destroyed with no run in between */
	for (int i = 0; i < 50; i++) {
		if (sf_pool_create(&p, 3) == 0)
			sf_pool_destroy(p);
	}
	return unit_exit();
}
