/* The SIGBUS guard's tables (see guard.h): fixed arrays of slots, each
 * claimed and released with atomic operations, so registering is
 * thread-safe without a lock and the handler, which may run in any thread
 * at any moment, reads them without one. */
#include "base/guard.h"

#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "base/err.h"

/* A signal handler may only use lock-free atomics. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2 && ATOMIC_LONG_LOCK_FREE == 2 &&
	       ATOMIC_POINTER_LOCK_FREE == 2, "the SIGBUS guard needs lock-free atomics");

/* A slot is FREE, BUSY while one thread fills or empties it, or LIVE: its
 * fields are published by the release store of LIVE and read after an
 * acquire load of it. */
enum { FREE, BUSY, LIVE };

/* One table kind for both: a slot is found again by begin (a mapping's
 * address; a temporary's name pointer, with end == begin, no range). */
struct slot {
	_Atomic int state;
	_Atomic uintptr_t begin, end;	/* [begin, end) */
	_Atomic(const char *) path;
};

static struct slot maps[SF_GUARD_MAX_MAPS];
static struct slot tmps[SF_GUARD_MAX_TMPS];

/* Fills a free slot of t[0..n); 0, or -1 when every slot is taken. */
static int add(struct slot *t, size_t n, uintptr_t begin, uintptr_t end, const char *path)
{
	for (size_t i = 0; i < n; i++) {
		struct slot *s = &t[i];
		int expect = FREE;
		if (!atomic_compare_exchange_strong(&s->state, &expect, BUSY))
			continue;
		atomic_store_explicit(&s->begin, begin, memory_order_relaxed);
		atomic_store_explicit(&s->end, end, memory_order_relaxed);
		atomic_store_explicit(&s->path, path, memory_order_relaxed);
		atomic_store_explicit(&s->state, LIVE, memory_order_release);
		return 0;
	}
	return -1;
}

/* Frees the live slot of t[0..n) that begins at begin, if any. */
static void drop(struct slot *t, size_t n, uintptr_t begin)
{
	for (size_t i = 0; i < n; i++) {
		struct slot *s = &t[i];
		int live = LIVE;
		if (atomic_load_explicit(&s->state, memory_order_acquire) != LIVE ||
		    atomic_load_explicit(&s->begin, memory_order_relaxed) != begin ||
		    !atomic_compare_exchange_strong(&s->state, &live, BUSY))
			continue;
		atomic_store_explicit(&s->path, NULL, memory_order_relaxed);
		atomic_store_explicit(&s->state, FREE, memory_order_release);
		return;
	}
}

int sf_guard_map(const void *addr, size_t len, const char *path, struct sf_err *e)
{
	if (add(maps, SF_GUARD_MAX_MAPS, (uintptr_t)addr, (uintptr_t)addr + len, path))
		return sf_err_set(e, SF_ELIMIT, "%s: more than %d files mapped at once", path,
				  SF_GUARD_MAX_MAPS);
	return 0;
}

void sf_guard_unmap(const void *addr)
{
	drop(maps, SF_GUARD_MAX_MAPS, (uintptr_t)addr);
}

int sf_guard_tmp(const char *path, struct sf_err *e)
{
	if (add(tmps, SF_GUARD_MAX_TMPS, (uintptr_t)path, (uintptr_t)path, path))
		return sf_err_set(e, SF_ELIMIT, "%s: more than %d temporary outputs at once", path,
				  SF_GUARD_MAX_TMPS);
	return 0;
}

void sf_guard_untmp(const char *path)
{
	if (path)
		drop(tmps, SF_GUARD_MAX_TMPS, (uintptr_t)path);
}

const char *sf_guard_find(const void *addr)
{
	uintptr_t a = (uintptr_t)addr;

	for (size_t i = 0; i < SF_GUARD_MAX_MAPS; i++) {
		struct slot *s = &maps[i];
		if (atomic_load_explicit(&s->state, memory_order_acquire) != LIVE)
			continue;
		if (a >= atomic_load_explicit(&s->begin, memory_order_relaxed) &&
		    a < atomic_load_explicit(&s->end, memory_order_relaxed))
			return atomic_load_explicit(&s->path, memory_order_relaxed);
	}
	return NULL;
}

void sf_guard_unlink_tmps(void)
{
	for (size_t i = 0; i < SF_GUARD_MAX_TMPS; i++) {
		struct slot *s = &tmps[i];
		const char *path;
		if (atomic_load_explicit(&s->state, memory_order_acquire) == LIVE &&
		    (path = atomic_load_explicit(&s->path, memory_order_relaxed)))
			unlink(path);
	}
}
