/* io_uring reads with requeue of short reads, a pread fallback, test-only
 * fault injection and device measurement (see uring.h; man/sf-run.1,
 * --probe-device). */

#include "online/uring.h"
#include "base/clock.h"
#include "base/rng.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NIL UINT32_MAX

/* One request from sf_uring_queue until it is reaped. Requests live in a
 * table indexed by the user_data of their reads, so growing the table
 * never invalidates a read in flight. */
struct req {
	uint64_t tag;
	uint64_t offset;
	char *buf;
	uint32_t len;
	uint32_t done;		/* bytes read so far */
	int err;		/* when completed: 0 or -errno */
	int eof;		/* err is -EIO because the file ended */
	int fault;		/* test hook: this read completes with -EIO */
	uint32_t next;		/* in the free, pending or done list */
};

struct list {
	uint32_t head, tail;
};

struct sf_uring {
	char *path;
	int fd;
	int direct;
	enum sf_uring_backend backend;
	char why[128];		/* why pread */
	int ring_up;
	struct io_uring ring;
	unsigned qd;
	unsigned inflight;
	char *arena;
	size_t arena_bytes;
	int registered;
	uint64_t size;

	struct req *req;
	uint32_t nreq;
	struct list free, pending, done;
	uint64_t outstanding;

	struct sf_uring_fault fault;
	uint64_t issued;	/* reads so far, for fault.eio_nth */
	struct sf_uring_stats st;
};

static void list_push_tail(struct sf_uring *u, struct list *l, uint32_t i)
{
	u->req[i].next = NIL;
	if (l->tail == NIL)
		l->head = i;
	else
		u->req[l->tail].next = i;
	l->tail = i;
}

static void list_push_head(struct sf_uring *u, struct list *l, uint32_t i)
{
	u->req[i].next = l->head;
	l->head = i;
	if (l->tail == NIL)
		l->tail = i;
}

static uint32_t list_pop(struct sf_uring *u, struct list *l)
{
	uint32_t i = l->head;
	if (i != NIL) {
		l->head = u->req[i].next;
		if (l->head == NIL)
			l->tail = NIL;
	}
	return i;
}

// ----------------------------------------------------------------------------
// Fault hook (test only)

int sf_uring_fault_parse(const char *spec, struct sf_uring_fault *f, struct sf_err *e)
{
	const char *p = spec;

	memset(f, 0, sizeof(*f));
	while (*p) {
		size_t n = strcspn(p, ",");
		const char *eq = memchr(p, '=', n);
		char *end;
		unsigned long long v;
		if (n == 10 && !memcmp(p, "mispredict", 10)) {
			f->mispredict = 1;
			p += n + (p[n] == ',');
			continue;
		}
		if (!eq)
			goto bad;
		errno = 0;
		v = strtoull(eq + 1, &end, 10);
		if (errno || end != p + n || end == eq + 1 || v == 0)
			goto bad;
		if ((size_t)(eq - p) == 3 && !memcmp(p, "eio", 3))
			f->eio_nth = v;
		else if ((size_t)(eq - p) == 5 && !memcmp(p, "short", 5) && v <= UINT32_MAX)
			f->short_cap = (uint32_t)v;
		else
			goto bad;
		p += n;
		if (*p == ',')
			p++;
	}
	return 0;
bad:
	return sf_err_set(e, -EINVAL, "SF_FAULT: bad fault '%s': expected eio=N, short=BYTES "
			  "(N, BYTES >= 1) or mispredict, comma separated", spec);
}

void sf_uring_set_fault(struct sf_uring *u, const struct sf_uring_fault *f)
{
	u->fault = *f;
}

// ----------------------------------------------------------------------------
// Open and close

static int ring_init(struct sf_uring *u, struct sf_err *e)
{
	struct io_uring_probe *probe;
	int ret = io_uring_queue_init(u->qd, &u->ring, 0);

	if (ret == -ENOSYS || ret == -EPERM) {
		/* refused by the kernel or a sandbox: the fallback exists for this */
		u->backend = SF_URING_PREAD;
		snprintf(u->why, sizeof(u->why), "io_uring_queue_init: %s", strerror(-ret));
		return 0;
	}
	if (ret < 0)
		return sf_err_set(e, ret, "%s: io_uring_queue_init(%u): %s", u->path, u->qd,
				  strerror(-ret));
	u->ring_up = 1;
	probe = io_uring_get_probe_ring(&u->ring);
	if (probe) {
		int ok = io_uring_opcode_supported(probe, IORING_OP_READ) &&
			 io_uring_opcode_supported(probe, IORING_OP_READ_FIXED);
		io_uring_free_probe(probe);
		if (!ok) {
			io_uring_queue_exit(&u->ring);
			u->ring_up = 0;
			u->backend = SF_URING_PREAD;
			snprintf(u->why, sizeof(u->why), "kernel io_uring lacks IORING_OP_READ");
			return 0;
		}
	}
	if (u->arena) {
		struct iovec iov = { .iov_base = u->arena, .iov_len = u->arena_bytes };
		ret = io_uring_register_buffers(&u->ring, &iov, 1);
		if (ret < 0)
			return sf_err_set(e, ret, "%s: io_uring_register_buffers(%zu bytes): %s%s",
					  u->path, u->arena_bytes, strerror(-ret),
					  ret == -ENOMEM ? " (RLIMIT_MEMLOCK too low?)" : "");
		u->registered = 1;
	}
	return 0;
}

int sf_uring_open(struct sf_uring **up, const char *path, const struct sf_uring_opts *o,
		  struct sf_err *e)
{
	static const struct sf_uring_opts defaults;
	struct sf_uring *u;
	struct stat sb;
	int ret;

	*up = NULL;
	if (!o)
		o = &defaults;
	if (o->qd > SF_URING_MAX_QD)
		return sf_err_set(e, -EINVAL, "%s: queue depth %u: expected 1 to %u", path, o->qd,
				  SF_URING_MAX_QD);
	if (o->arena && ((uintptr_t)o->arena % SF_URING_ALIGN || !o->arena_bytes ||
			 o->arena_bytes % SF_URING_ALIGN))
		return sf_err_set(e, -EINVAL, "%s: buffer arena %p of %zu bytes: expected both "
				  "multiples of %u", path, o->arena, o->arena_bytes, SF_URING_ALIGN);
	u = calloc(1, sizeof(*u));
	if (!u || !(u->path = strdup(path))) {
		free(u);
		return sf_err_set(e, -ENOMEM, "%s: open: %s", path, strerror(ENOMEM));
	}
	u->fd = -1;
	u->qd = o->qd ? o->qd : SF_URING_DEFAULT_QD;
	u->direct = !o->buffered;
	u->arena = o->arena;
	u->arena_bytes = o->arena_bytes;
	u->free = u->pending = u->done = (struct list){ NIL, NIL };
	u->fault = o->fault;

	u->fd = open(path, O_RDONLY | O_CLOEXEC | (u->direct ? O_DIRECT : 0));
	if (u->fd < 0) {
		ret = -errno;
		if (u->direct && ret == -EINVAL)
			sf_err_set(e, ret, "%s: open with O_DIRECT: the filesystem refuses direct I/O "
				   "(%s)", path, strerror(-ret));
		else
			sf_err_set(e, ret, "%s: open: %s", path, strerror(-ret));
		goto out;
	}
	if (fstat(u->fd, &sb) < 0) {
		ret = sf_err_set(e, -errno, "%s: fstat: %s", path, strerror(errno));
		goto out;
	}
	u->size = (uint64_t)sb.st_size;

	if (o->force_pread) {
		u->backend = SF_URING_PREAD;
		snprintf(u->why, sizeof(u->why), "forced");
		ret = 0;
	} else {
		ret = ring_init(u, e);
	}
out:
	if (ret < 0) {
		sf_uring_close(u);
		return ret;
	}
	*up = u;
	return 0;
}

void sf_uring_close(struct sf_uring *u)
{
	if (!u)
		return;
	if (u->ring_up) {
		/* the kernel may still write into the caller's buffers until each
		 * read completes */
		unsigned left;
		if (io_uring_sq_ready(&u->ring))
			io_uring_submit(&u->ring);
		left = u->inflight - io_uring_sq_ready(&u->ring);	/* those the kernel has */
		while (left) {
			struct io_uring_cqe *cqe;
			int ret = io_uring_wait_cqe(&u->ring, &cqe);
			if (ret == -EINTR)
				continue;
			if (ret < 0)
				break;
			io_uring_cqe_seen(&u->ring, cqe);
			left--;
		}
		io_uring_queue_exit(&u->ring);
	}
	if (u->fd >= 0)
		close(u->fd);
	free(u->req);
	free(u->path);
	free(u);
}

enum sf_uring_backend sf_uring_backend(const struct sf_uring *u, const char **why)
{
	if (why)
		*why = u->backend == SF_URING_PREAD ? u->why : NULL;
	return u->backend;
}

const char *sf_uring_backend_name(enum sf_uring_backend b)
{
	return b == SF_URING_PREAD ? "pread" : "io_uring";
}

uint64_t sf_uring_size(const struct sf_uring *u)
{
	return u->size;
}

unsigned sf_uring_qd(const struct sf_uring *u)
{
	return u->qd;
}

uint64_t sf_uring_outstanding(const struct sf_uring *u)
{
	return u->outstanding;
}

void sf_uring_stats(const struct sf_uring *u, struct sf_uring_stats *s)
{
	*s = u->st;
}

void sf_uring_stats_reset(struct sf_uring *u)
{
	memset(&u->st, 0, sizeof(u->st));
}

// ----------------------------------------------------------------------------
// Queue, submit, reap

int sf_uring_queue(struct sf_uring *u, uint64_t offset, uint32_t len, void *buf, uint64_t tag,
		   struct sf_err *e)
{
	uint32_t i;

	if (!len || offset > UINT64_MAX - len)
		return sf_err_set(e, -EINVAL, "%s: read of %" PRIu32 " bytes at offset %" PRIu64
				  ": empty or past 2^64", u->path, len, offset);
	if (u->direct && (offset % SF_URING_ALIGN || len % SF_URING_ALIGN ||
			  (uintptr_t)buf % SF_URING_ALIGN))
		return sf_err_set(e, -EINVAL, "%s: read of %" PRIu32 " bytes at offset %" PRIu64
				  " into %p: O_DIRECT needs all three multiples of %u", u->path, len,
				  offset, buf, SF_URING_ALIGN);
	if (u->free.head == NIL) {
		/* grows only until the largest batch a caller queues has been seen */
		uint32_t n = u->nreq ? u->nreq * 2 : 2 * u->qd;
		struct req *r;
		if (n <= u->nreq || !(r = realloc(u->req, (size_t)n * sizeof(*r))))
			return sf_err_set(e, -ENOMEM, "%s: queue: %s", u->path, strerror(ENOMEM));
		u->req = r;
		for (uint32_t k = u->nreq; k < n; k++)
			list_push_tail(u, &u->free, k);
		u->nreq = n;
	}
	i = list_pop(u, &u->free);
	u->req[i] = (struct req){ .tag = tag, .offset = offset, .buf = buf, .len = len };
	list_push_tail(u, &u->pending, i);
	u->outstanding++;
	u->st.requests++;
	return 0;
}

/* The next read of request i: its remainder, capped by the fault hook. */
static uint32_t next_len(struct sf_uring *u, uint32_t i)
{
	struct req *r = &u->req[i];
	uint32_t n = r->len - r->done;

	if (u->fault.short_cap && n > u->fault.short_cap)
		n = u->fault.short_cap;
	u->st.reads++;
	r->fault = u->fault.eio_nth && ++u->issued == u->fault.eio_nth;
	return n;
}

/* Pending requests into free ring slots (no syscall). */
static void fill_ring(struct sf_uring *u)
{
	while (u->inflight < u->qd && u->pending.head != NIL) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
		if (!sqe)
			break;	/* SQ full of unsubmitted entries */
		uint32_t i = list_pop(u, &u->pending);
		struct req *r = &u->req[i];
		char *buf = r->buf + r->done;
		uint32_t n = next_len(u, i);
		uintptr_t at = (uintptr_t)buf, base = (uintptr_t)u->arena;
		if (u->registered && at >= base && n <= u->arena_bytes &&
		    at - base <= u->arena_bytes - n) {
			io_uring_prep_read_fixed(sqe, u->fd, buf, n, r->offset + r->done, 0);
			u->st.fixed_reads++;
		} else {
			io_uring_prep_read(sqe, u->fd, buf, n, r->offset + r->done);
		}
		io_uring_sqe_set_data64(sqe, i);
		if (++u->inflight > u->st.max_inflight)
			u->st.max_inflight = u->inflight;
	}
}

static int ring_submit(struct sf_uring *u, struct sf_err *e)
{
	int ret;

	fill_ring(u);
	if (!io_uring_sq_ready(&u->ring))
		return 0;
	do
		ret = io_uring_submit(&u->ring);
	while (ret == -EINTR);
	if (ret == -EAGAIN || ret == -EBUSY)
		return 0;	/* kernel short of resources: the entries stay queued */
	if (ret < 0)
		return sf_err_set(e, ret, "%s: io_uring_submit: %s", u->path, strerror(-ret));
	if (ret > 0)
		u->st.submits++;
	return ret;
}

int sf_uring_submit(struct sf_uring *u, struct sf_err *e)
{
	return u->backend == SF_URING_IOURING ? ring_submit(u, e) : 0;
}

static void finish(struct sf_uring *u, uint32_t i, int err, int eof)
{
	u->req[i].err = err;
	u->req[i].eof = eof;
	list_push_tail(u, &u->done, i);
}

/* One read's result res for request i, from either backend. */
static void on_result(struct sf_uring *u, uint32_t i, int res)
{
	struct req *r = &u->req[i];

	if (r->fault)
		res = -EIO;
	if (res == -EAGAIN || res == -EINTR) {
		u->st.retries++;
		list_push_head(u, &u->pending, i);
	} else if (res < 0) {
		finish(u, i, res, 0);
	} else if (res == 0) {
		finish(u, i, -EIO, 1);
	} else if ((uint32_t)res > r->len - r->done) {
		finish(u, i, -EIO, 0);	/* more than asked: never trust the buffer */
	} else {
		u->st.bytes += (uint64_t)res;
		r->done += (uint32_t)res;
		if (r->done < r->len && u->direct && (r->offset + r->done) % SF_URING_ALIGN) {
			/* O_DIRECT returns part of a block only where the file ends */
			finish(u, i, -EIO, 1);
		} else if (r->done < r->len) {
			u->st.short_reads++;
			list_push_head(u, &u->pending, i);	/* ahead of later requests */
		} else {
			finish(u, i, 0, 0);
		}
	}
}

/* Completions the kernel has posted, without waiting. */
static unsigned drain_cqes(struct sf_uring *u)
{
	struct io_uring_cqe *cqe;
	unsigned n = 0;

	while (io_uring_peek_cqe(&u->ring, &cqe) == 0) {
		uint32_t i = (uint32_t)io_uring_cqe_get_data64(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&u->ring, cqe);
		u->inflight--;
		on_result(u, i, res);
		n++;
	}
	return n;
}

static void pread_one(struct sf_uring *u)
{
	uint32_t i = list_pop(u, &u->pending);
	struct req *r = &u->req[i];
	uint32_t n = next_len(u, i);
	uint64_t t0 = sf_now_ns();
	ssize_t got = r->fault ? -1 : pread(u->fd, r->buf + r->done, n, (off_t)(r->offset + r->done));
	int res = got < 0 ? (r->fault ? -EIO : -errno) : (int)got;

	u->st.wait_ns += sf_now_ns() - t0;
	on_result(u, i, res);
}

static int ring_wait(struct sf_uring *u, struct sf_err *e)
{
	struct io_uring_cqe *cqe;
	uint64_t t0 = sf_now_ns();
	int ret;

	do
		ret = io_uring_wait_cqe(&u->ring, &cqe);
	while (ret == -EINTR);
	u->st.wait_ns += sf_now_ns() - t0;
	if (ret < 0)
		return sf_err_set(e, ret, "%s: io_uring_wait_cqe: %s", u->path, strerror(-ret));
	return 0;
}

static int reap_done(struct sf_uring *u, uint64_t *tag, struct sf_err *e)
{
	uint32_t i = list_pop(u, &u->done);
	struct req r = u->req[i];
	int ret = 1;

	list_push_tail(u, &u->free, i);
	u->outstanding--;
	*tag = r.tag;
	if (!r.err) {
		u->st.completed++;
		return 1;
	}
	u->st.failed++;
	if (r.eof) {
		struct stat sb;
		uint64_t size = fstat(u->fd, &sb) == 0 ? (uint64_t)sb.st_size : u->size;
		ret = sf_err_set(e, r.err, "%s: read of %" PRIu32 " bytes at offset %" PRIu64
				 ": end of file after %" PRIu32 " bytes (file is %" PRIu64
				 " bytes: truncated?)", u->path, r.len, r.offset, r.done, size);
	} else {
		ret = sf_err_set(e, r.err, "%s: read of %" PRIu32 " bytes at offset %" PRIu64 ": %s%s",
				 u->path, r.len, r.offset, strerror(-r.err),
				 r.err == -EINVAL && u->direct ?
				 " (direct I/O refused, or the device needs larger alignment)" : "");
	}
	return ret;
}

int sf_uring_reap(struct sf_uring *u, uint64_t *tag, int wait, struct sf_err *e)
{
	int ret;

	for (;;) {
		if (u->done.head != NIL)
			return reap_done(u, tag, e);
		if (u->pending.head == NIL && !u->inflight)
			return 0;
		if (u->backend == SF_URING_PREAD) {
			pread_one(u);
			continue;
		}
		/* completions first: they free slots for the pending list */
		if (drain_cqes(u))
			continue;
		if ((ret = ring_submit(u, e)) < 0)
			return ret;
		if (drain_cqes(u))
			continue;
		if (!wait)
			return 0;
		if (!u->inflight)
			return sf_err_set(e, -EAGAIN, "%s: io_uring_submit took no reads", u->path);
		if ((ret = ring_wait(u, e)) < 0)
			return ret;
	}
}

// ----------------------------------------------------------------------------
// Device measurement

int sf_uring_fill(const char *path, uint64_t size, uint64_t seed, struct sf_err *e)
{
	enum { CHUNK = 1 << 20 };
	uint64_t *buf = malloc(CHUNK), s = seed;
	int fd = -1, ret = 0;

	if (!buf)
		return sf_err_set(e, -ENOMEM, "%s: fill: %s", path, strerror(ENOMEM));
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		ret = sf_err_set(e, -errno, "%s: create: %s", path, strerror(errno));
		goto out;
	}
	for (uint64_t at = 0; at < size;) {
		size_t n = size - at < CHUNK ? (size_t)(size - at) : CHUNK;
		for (size_t k = 0; k < CHUNK / 8; k++)
			buf[k] = sf_splitmix64(&s);
		for (size_t off = 0; off < n;) {
			ssize_t w = write(fd, (char *)buf + off, n - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				ret = sf_err_set(e, -errno, "%s: write at %" PRIu64 ": %s", path,
						 at + off, strerror(errno));
				goto out;
			}
			off += (size_t)w;
		}
		at += n;
	}
	if (fdatasync(fd) < 0)
		ret = sf_err_set(e, -errno, "%s: fdatasync: %s", path, strerror(errno));
out:
	if (fd >= 0 && close(fd) < 0 && !ret)
		ret = sf_err_set(e, -errno, "%s: close: %s", path, strerror(errno));
	free(buf);
	return ret;
}

static uint64_t bench_offset(uint64_t *s, uint64_t span, uint32_t block)
{
	uint64_t slots = (span - block) / SF_URING_ALIGN + 1;
	return sf_splitmix64(s) % slots * SF_URING_ALIGN;
}

int sf_uring_bench_run(const char *path, uint64_t span, uint32_t block,
		       const struct sf_uring_opts *o, double seconds, uint64_t seed,
		       struct sf_uring_bench *r, struct sf_err *e)
{
	struct sf_uring_opts opts = o ? *o : (struct sf_uring_opts){ 0 };
	struct sf_uring *u = NULL;
	struct sf_uring_stats st;
	char *arena = NULL;
	uint64_t s = seed, t0, t1, limit;
	unsigned qd;
	int ret;

	memset(r, 0, sizeof(*r));
	if (!block || block % SF_URING_ALIGN || span < block)
		return sf_err_set(e, -EINVAL, "%s: bench: block %" PRIu32 " over %" PRIu64
				  " bytes: expected a multiple of %u no larger than the span",
				  path, block, span, SF_URING_ALIGN);
	qd = opts.qd ? opts.qd : SF_URING_DEFAULT_QD;
	if (qd > SF_URING_MAX_QD)
		return sf_err_set(e, -EINVAL, "%s: queue depth %u: expected 1 to %u", path, qd,
				  SF_URING_MAX_QD);
	opts.qd = qd;
	if ((uint64_t)qd * block > SIZE_MAX ||
	    posix_memalign((void **)&arena, SF_URING_ALIGN, (size_t)qd * block))
		return sf_err_set(e, -ENOMEM, "%s: bench: %u buffers of %" PRIu32 " bytes: %s",
				  path, qd, block, strerror(ENOMEM));
	opts.arena = arena;
	opts.arena_bytes = (size_t)qd * block;
	if ((ret = sf_uring_open(&u, path, &opts, e)) < 0)
		goto out;
	if (sf_uring_size(u) < span) {
		ret = sf_err_set(e, -EINVAL, "%s: bench: file of %" PRIu64 " bytes: expected at "
				 "least %" PRIu64, path, sf_uring_size(u), span);
		goto out;
	}
	sf_uring_drop_cache(u, 0, 0);	/* buffered: the device, not what the cache holds */
	limit = (uint64_t)(seconds * 1e9);
	t0 = sf_now_ns();
	for (unsigned k = 0; k < qd; k++)
		if ((ret = sf_uring_queue(u, bench_offset(&s, span, block), block,
					  arena + (size_t)k * block, k, e)) < 0)
			goto out;
	for (;;) {
		uint64_t tag;
		if ((ret = sf_uring_submit(u, e)) < 0)
			goto out;
		/* everything already completed, then one submit for the refills */
		for (int w = 1; (ret = sf_uring_reap(u, &tag, w, e)) == 1; w = 0)
			if (sf_now_ns() - t0 < limit &&
			    (ret = sf_uring_queue(u, bench_offset(&s, span, block), block,
						  arena + tag * block, tag, e)) < 0)
				goto out;
		if (ret < 0)
			goto out;
		if (!sf_uring_outstanding(u))
			break;
	}
	t1 = sf_now_ns();
	sf_uring_stats(u, &st);
	*r = (struct sf_uring_bench){
		.block = block, .qd = qd, .backend = sf_uring_backend(u, NULL),
		.reads = st.completed, .bytes = st.bytes, .seconds = (double)(t1 - t0) * 1e-9,
	};
	r->iops = (double)r->reads / r->seconds;
	r->bytes_per_s = (double)r->bytes / r->seconds;
	ret = 0;
out:
	sf_uring_close(u);
	free(arena);
	return ret;
}

void sf_uring_drop_cache(struct sf_uring *u, uint64_t offset, uint64_t len)
{
	if (!u->direct)
		(void)posix_fadvise(u->fd, (off_t)offset, (off_t)len, POSIX_FADV_DONTNEED);
}

/* The median of SF_URING_PROBE_REPEATS runs: a virtual disk's figures
 * swing by a third from one second to the next. */
static int probe_median(const char *path, uint64_t span, uint32_t block, unsigned qd,
			int buffered, struct sf_uring_bench *out, struct sf_err *e)
{
	struct sf_uring_bench r[SF_URING_PROBE_REPEATS];
	struct sf_uring_opts o = { .qd = qd, .buffered = buffered };

	for (int k = 0; k < SF_URING_PROBE_REPEATS; k++) {
		int ret = sf_uring_bench_run(path, span, block, &o, SF_URING_PROBE_SECONDS,
					     (uint64_t)k + 1, &r[k], e);
		if (ret < 0)
			return ret;
		for (int j = k; j > 0 && r[j].iops < r[j - 1].iops; j--) {
			struct sf_uring_bench t = r[j];
			r[j] = r[j - 1];
			r[j - 1] = t;
		}
	}
	*out = r[SF_URING_PROBE_REPEATS / 2];
	return 0;
}

int sf_uring_probe(const char *path, struct sf_uring_probe *p, struct sf_err *e)
{
	struct stat sb;
	uint64_t span;
	int ret;

	if (stat(path, &sb) < 0)
		return sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
	span = (uint64_t)sb.st_size / SF_URING_ALIGN * SF_URING_ALIGN;
	ret = probe_median(path, span, SF_URING_PROBE_SMALL, SF_URING_PROBE_SMALL_QD, 0, &p->small, e);
	if (ret >= 0)
		ret = probe_median(path, span, SF_URING_PROBE_LARGE, SF_URING_PROBE_LARGE_QD, 0,
				   &p->large, e);
	if (ret >= 0)
		ret = probe_median(path, span, SF_URING_PROBE_LARGE, SF_URING_PROBE_LARGE_QD, 1,
				   &p->buffered, e);
	return ret < 0 ? ret : 0;
}
