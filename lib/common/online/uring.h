/* Reads from one file through io_uring (O_DIRECT by default): the only
 * io_uring module. Queue (no syscall), submit (one batched submit) and reap
 * are separate steps; short reads and -EAGAIN are requeued, -EINTR retried;
 * a pread backend takes over when io_uring is refused. man/sf-run.1. */
#ifndef SF_URING_H
#define SF_URING_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SF_URING_DEFAULT_QD 64	/* reads in flight */
#define SF_URING_MAX_QD 4096
#define SF_URING_ALIGN 4096	/* offset, length and buffer under O_DIRECT */

enum sf_uring_backend {
	SF_URING_IOURING,
	SF_URING_PREAD,		/* one blocking pread per read, in reap */
};

/* TEST ONLY fault injection, compiled always so that tests exercise the
 * shipped code: "eio=N" (the Nth read issued, 1 based, requeues counted,
 * completes with -EIO) and "short=BYTES" (no read asks the kernel for more
 * than BYTES, so every larger request completes short and is requeued;
 * under O_DIRECT BYTES must be a multiple of the device's logical block
 * size, SF_URING_ALIGN always works), and "mispredict" (the sparse
 * decoder's --prefetch-predict reads ahead the entries least likely
 * instead: the output must not change). The commands take the text from
 * the environment variable SF_FAULT (sf_uring_fault_parse) and pass it in
 * sf_uring_opts.fault; the library never reads the environment. */
struct sf_uring_fault {
	uint64_t eio_nth;	/* 0: off */
	uint32_t short_cap;	/* 0: off */
	int mispredict;		/* read by the sparse decoder */
};
/* Comma-separated items of the text above into *f: 0 or -EINVAL. */
int sf_uring_fault_parse(const char *spec, struct sf_uring_fault *f, struct sf_err *e);

/* Zeroed options are the defaults: O_DIRECT, io_uring, SF_URING_DEFAULT_QD,
 * no registered buffers. */
struct sf_uring_opts {
	unsigned qd;		/* reads in flight (ring size); 0: SF_URING_DEFAULT_QD */
	int buffered;		/* 1: through the page cache (no O_DIRECT), for comparison */
	int force_pread;	/* 1: the pread backend even when io_uring works */
	/* Registered with io_uring_register_buffers when not NULL: reads whose
	 * buffer lies inside use READ_FIXED. posix_memalign(SF_URING_ALIGN)
	 * memory, arena_bytes a multiple of SF_URING_ALIGN; the caller frees it
	 * after sf_uring_close. */
	void *arena;
	size_t arena_bytes;
	struct sf_uring_fault fault;	/* test only; zeroed: none */
};

struct sf_uring;

/* Opens path read-only. Under O_DIRECT a filesystem that refuses direct
 * I/O is an error (-EINVAL, message says so): never a silent switch to
 * buffered reads. io_uring_queue_init failing with ENOSYS or EPERM (or a
 * kernel without IORING_OP_READ) selects the pread backend; see
 * sf_uring_backend. Applies o->fault (test only).
 * 0 or -errno; *u NULL on error. */
int sf_uring_open(struct sf_uring **u, const char *path, const struct sf_uring_opts *o,
		  struct sf_err *e);
/* Waits for reads still in flight (so their buffers may be freed after),
 * then releases everything. Accepts NULL. */
void sf_uring_close(struct sf_uring *u);

/* The active backend; *why (when why is not NULL) says why pread was
 * chosen ("forced", or the io_uring_queue_init error), NULL for io_uring.
 * Commands announce it under -v. */
enum sf_uring_backend sf_uring_backend(const struct sf_uring *u, const char **why);
const char *sf_uring_backend_name(enum sf_uring_backend b);	/* "io_uring", "pread" */
uint64_t sf_uring_size(const struct sf_uring *u);	/* file size at open */
unsigned sf_uring_qd(const struct sf_uring *u);

/* Queues a read of len bytes at offset into buf, identified by tag (any
 * value, handed back by sf_uring_reap). No syscall; any number may be
 * queued: those beyond the queue depth wait in a pending list flushed as
 * completions free slots. buf must stay valid until the read is reaped.
 * -EINVAL: len 0, offset + len overflows, or under O_DIRECT offset, len or
 * buf not a multiple of SF_URING_ALIGN; -ENOMEM. */
int sf_uring_queue(struct sf_uring *u, uint64_t offset, uint32_t len, void *buf, uint64_t tag,
		   struct sf_err *e);
/* Moves queued reads into free ring slots and submits them with one
 * io_uring_submit. Returns the number of reads the kernel took (0 with the
 * pread backend, whose reads run in reap) or -errno. */
int sf_uring_submit(struct sf_uring *u, struct sf_err *e);
/* One completed request: every byte read. Returns 1 with *tag set; 0 when
 * none has completed and wait is 0, or nothing is outstanding; or a
 * negative error with *tag the failed request: -EIO when the file ends
 * before the request does (images are validated to hold every region, so a
 * short file is damage), or the read's -errno. Short reads, -EAGAIN and
 * -EINTR never surface: they are requeued. After an error the other
 * requests carry on; reap them or close. Refills free slots and submits as
 * it goes, so a caller may queue everything, submit once, and reap. The
 * pread backend performs one read per call (even with wait 0). */
int sf_uring_reap(struct sf_uring *u, uint64_t *tag, int wait, struct sf_err *e);
/* Requests queued and not yet reaped (pending, in flight or completed). */
uint64_t sf_uring_outstanding(const struct sf_uring *u);

struct sf_uring_stats {
	uint64_t requests;	/* accepted by sf_uring_queue */
	uint64_t completed;	/* reaped whole */
	uint64_t failed;	/* reaped with an error */
	uint64_t reads;		/* reads issued to the kernel, requeues included */
	uint64_t fixed_reads;	/* of which READ_FIXED on the registered arena */
	uint64_t bytes;		/* bytes the reads returned */
	uint64_t short_reads;	/* requeued for the remainder */
	uint64_t retries;	/* -EAGAIN / -EINTR completions requeued */
	uint64_t submits;	/* io_uring_submit calls that took reads */
	uint64_t wait_ns;	/* time blocked in reap: I/O wait */
	uint32_t max_inflight;
};
void sf_uring_stats(const struct sf_uring *u, struct sf_uring_stats *s);
void sf_uring_stats_reset(struct sf_uring *u);

/* Buffered rings: drops [offset, offset + len) of the file from the page
 * cache (len 0: to the end), so that reads through it hold no memory
 * past their use; nothing under O_DIRECT. */
void sf_uring_drop_cache(struct sf_uring *u, uint64_t offset, uint64_t len);

/* Replaces the fault injection of an open ring (test only). */
void sf_uring_set_fault(struct sf_uring *u, const struct sf_uring_fault *f);

// ----------------------------------------------------------------------------
// Device measurement (sf-run --probe-device, tests/bench/uring.sh)

/* Writes size bytes of seeded pseudo-random data to path (created or
 * truncated), synced to the device, so that reads measure the device and
 * not holes. 0 or -errno. */
int sf_uring_fill(const char *path, uint64_t size, uint64_t seed, struct sf_err *e);

/* Random reads of block bytes at SF_URING_ALIGN-aligned offsets in
 * [0, span) keeping o->qd in flight, for seconds (after at least qd reads). */
struct sf_uring_bench {
	uint32_t block, qd;
	enum sf_uring_backend backend;
	uint64_t reads, bytes;
	double seconds;
	double iops;		/* reads per second */
	double bytes_per_s;
};
int sf_uring_bench_run(const char *path, uint64_t span, uint32_t block,
		       const struct sf_uring_opts *o, double seconds, uint64_t seed,
		       struct sf_uring_bench *r, struct sf_err *e);

/* The figures sf-run --probe-device stores per device: random 4 KiB reads
 * (IOPS-bound) and random large reads (bandwidth-bound), O_DIRECT, and the
 * same large reads through the page cache (emptied of the file first),
 * over an existing file (written by sf_uring_fill; at least 1 GiB so that
 * the device cache does not flatter), each the median of several runs;
 * about 18 s in all. */
#define SF_URING_PROBE_SMALL 4096u
#define SF_URING_PROBE_SMALL_QD 64u
#define SF_URING_PROBE_LARGE (256u * 1024u)
#define SF_URING_PROBE_LARGE_QD 32u
#define SF_URING_PROBE_SECONDS 2.0	/* per run */
#define SF_URING_PROBE_REPEATS 3	/* runs per figure; the median is kept */
struct sf_uring_probe {
	struct sf_uring_bench small;	/* iops: the device's random-read IOPS */
	struct sf_uring_bench large;	/* bytes_per_s: its peak bandwidth */
	struct sf_uring_bench buffered;	/* the large reads through the page cache */
};
int sf_uring_probe(const char *path, struct sf_uring_probe *p, struct sf_err *e);

#endif
