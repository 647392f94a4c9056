/* Unit test of lib/common/online/uring.c on a real file in $SF_TMP: random
 * aligned reads through the ring equal pread's bytes with more requests
 * than the queue depth, registered or not; the short-read fault is
 * requeued to exact bytes; the EIO fault and a file that ends early give
 * -EIO and a clear message; the pread backend reads the same; O_DIRECT
 * refuses misaligned requests. Skips (77) where O_DIRECT is refused. */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "online/uring.h"
#include "unit.h"

#define FILE_BYTES (8u << 20)
#define NREQ 300
#define MAX_LEN (128u << 10)

static char path[4096], tail_path[4096];
/* io_uring_queue_init failed with no refusal asked for (qemu-user does
 * not implement io_uring): every variant runs on the pread fallback */
static int no_ring;
static unsigned char *want;	/* (FILE_BYTES) the file, read back with pread */

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int write_file(const char *p, size_t n, uint64_t seed)
{
	unsigned char *b = malloc(n);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644), ok;
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(rng(&seed) >> 24);
	ok = fd >= 0 && write(fd, b, n) == (ssize_t)n && fsync(fd) == 0;
	if (fd >= 0)
		close(fd);
	free(b);
	return ok;
}

/* The file's bytes as an independent pread sees them. */
static void read_back(void)
{
	int fd = open(path, O_RDONLY);
	want = malloc(FILE_BYTES);
	CHECK(fd >= 0 && pread(fd, want, FILE_BYTES, 0) == (ssize_t)FILE_BYTES, "pread %s", path);
	if (fd >= 0)
		close(fd);
}

/* Writes the test files under dir; 0 when O_DIRECT opens there. */
static int setup_in(const char *dir)
{
	struct sf_uring *u;
	struct sf_err e = { 0 };
	int ret;

	snprintf(path, sizeof(path), "%s/test_uring.%d.bin", dir, (int)getpid());
	snprintf(tail_path, sizeof(tail_path), "%s/test_uring.%d.tail", dir, (int)getpid());
	if (!write_file(path, FILE_BYTES, 42) || !write_file(tail_path, (1u << 20) + 100, 7))
		return -1;
	ret = sf_uring_open(&u, path, NULL, &e);
	sf_uring_close(u);
	if (ret < 0) {
		fprintf(stderr, "%s: %s\n", dir, e.msg);
		unlink(path);
		unlink(tail_path);
	}
	return ret;
}

struct spec {
	uint64_t off;
	uint32_t len;
	size_t at;	/* in the arena */
};

/* NREQ random ranges, packed in an arena: aligned when align is 4096,
 * any byte offset and length when align is 1. */
static void make_specs(struct spec *s, uint64_t seed, uint32_t align, size_t *arena_bytes)
{
	size_t at = 0;
	for (int i = 0; i < NREQ; i++) {
		uint32_t len = (uint32_t)(rng(&seed) % (MAX_LEN / align) + 1) * align;
		uint64_t off = rng(&seed) % ((FILE_BYTES - len) / align + 1) * align;
		s[i] = (struct spec){ off, len, at };
		at += (len + 4095u) / 4096u * 4096u;
	}
	*arena_bytes = at;
}

/* Reads specs through u in one batch, checks every request once with the
 * right bytes; returns the number of reap errors (with the last message). */
static int run_batch(struct sf_uring *u, const struct spec *s, unsigned char *arena,
		     const char *what, int *err_out, struct sf_err *e)
{
	unsigned char seen[NREQ] = { 0 };
	int errors = 0, ret;
	uint64_t tag;

	for (int i = 0; i < NREQ; i++) {
		ret = sf_uring_queue(u, s[i].off, s[i].len, arena + s[i].at, (uint64_t)i * 3 + 11, e);
		CHECK(ret == 0, "%s: queue %d: %s", what, i, e->msg);
	}
	CHECK(sf_uring_outstanding(u) == NREQ, "%s: outstanding %llu", what,
	      (unsigned long long)sf_uring_outstanding(u));
	ret = sf_uring_submit(u, e);
	CHECK(ret >= 0 && ret <= (int)sf_uring_qd(u), "%s: submit %d (qd %u)", what, ret,
	      sf_uring_qd(u));
	while ((ret = sf_uring_reap(u, &tag, 1, e)) != 0) {
		int i = (int)((tag - 11) / 3);
		CHECK(tag >= 11 && (tag - 11) % 3 == 0 && i < NREQ, "%s: tag %llu", what,
		      (unsigned long long)tag);
		if (!(tag >= 11 && (tag - 11) % 3 == 0 && i < NREQ))
			break;
		CHECK(!seen[i], "%s: request %d reaped twice", what, i);
		seen[i] = 1;
		if (ret < 0) {
			errors++;
			*err_out = ret;
			continue;
		}
		CHECK(ret == 1, "%s: reap %d", what, ret);
		CHECK(!memcmp(arena + s[i].at, want + s[i].off, s[i].len),
		      "%s: request %d (%u bytes at %llu): bytes differ from pread", what, i, s[i].len,
		      (unsigned long long)s[i].off);
	}
	for (int i = 0; i < NREQ; i++)
		CHECK(seen[i], "%s: request %d never reaped", what, i);
	CHECK(sf_uring_outstanding(u) == 0, "%s: %llu outstanding after the last reap", what,
	      (unsigned long long)sf_uring_outstanding(u));
	return errors;
}

struct variant {
	const char *name;
	struct sf_uring_opts o;
	int registered;
	uint32_t align;
	struct sf_uring_fault fault;
	int refused;		/* io_uring refused: expect the pread backend */
};

/* Sets no_ring, and says so, where this kernel or emulator gives no
 * io_uring. */
static void probe_ring(void)
{
	struct sf_uring *u = NULL;
	struct sf_err e = { 0 };
	const char *why = NULL;

	CHECK(sf_uring_open(&u, path, NULL, &e) == 0, "probe: open: %s", e.msg);
	if (u && sf_uring_backend(u, &why) == SF_URING_PREAD) {
		no_ring = 1;
		printf("io_uring unavailable here (%s): the io_uring variants test the pread "
		       "fallback\n", why ? why : "?");
	}
	sf_uring_close(u);
}

static void test_variant(const struct variant *v)
{
	struct spec s[NREQ];
	struct sf_uring_opts o = v->o;
	struct sf_uring *u = NULL;
	struct sf_uring_stats st;
	struct sf_err e = { 0 };
	unsigned char *arena;
	size_t bytes;
	uint64_t total = 0;
	int err = 0, ret;

	make_specs(s, 1234 + v->align, v->align, &bytes);
	CHECK(posix_memalign((void **)&arena, 4096, bytes) == 0, "%s: arena", v->name);
	memset(arena, 0xa5, bytes);
	if (v->registered) {
		o.arena = arena;
		o.arena_bytes = bytes;
	}
	ret = sf_uring_open(&u, path, &o, &e);
	CHECK(ret == 0, "%s: open: %s", v->name, e.msg);
	if (ret < 0) {
		free(arena);
		return;
	}
	int pread_backend = o.force_pread || v->refused || no_ring;
	CHECK(sf_uring_backend(u, NULL) == (pread_backend ? SF_URING_PREAD : SF_URING_IOURING),
	      "%s: backend %s", v->name, sf_uring_backend_name(sf_uring_backend(u, NULL)));
	sf_uring_set_fault(u, &v->fault);
	CHECK(run_batch(u, s, arena, v->name, &err, &e) == 0, "%s: reap error: %s", v->name, e.msg);

	sf_uring_stats(u, &st);
	for (int i = 0; i < NREQ; i++)
		total += s[i].len;
	CHECK(st.requests == NREQ && st.completed == NREQ && st.failed == 0,
	      "%s: requests %llu completed %llu failed %llu", v->name,
	      (unsigned long long)st.requests, (unsigned long long)st.completed,
	      (unsigned long long)st.failed);
	CHECK(st.bytes == total, "%s: %llu bytes read, %llu asked", v->name,
	      (unsigned long long)st.bytes, (unsigned long long)total);
	CHECK(st.reads == st.requests + st.short_reads + st.retries,
	      "%s: reads %llu = requests + short %llu + retries %llu", v->name,
	      (unsigned long long)st.reads, (unsigned long long)st.short_reads,
	      (unsigned long long)st.retries);
	if (v->fault.short_cap) {
		/* every request needs ceil(len / cap) reads */
		uint64_t need = 0;
		for (int i = 0; i < NREQ; i++)
			need += (s[i].len + v->fault.short_cap - 1) / v->fault.short_cap - 1;
		CHECK(st.short_reads == need, "%s: %llu short reads requeued, expected %llu",
		      v->name, (unsigned long long)st.short_reads, (unsigned long long)need);
	}
	CHECK(st.fixed_reads == (v->registered && !pread_backend ? st.reads : 0),
	      "%s: %llu of %llu reads READ_FIXED", v->name, (unsigned long long)st.fixed_reads,
	      (unsigned long long)st.reads);
	if (!pread_backend)
		CHECK(st.max_inflight == sf_uring_qd(u), "%s: at most %u in flight, qd %u", v->name,
		      st.max_inflight, sf_uring_qd(u));
	sf_uring_close(u);
	free(arena);
}

static void test_eio(int force_pread)
{
	struct spec s[NREQ];
	struct sf_uring_opts o = { .qd = 8, .force_pread = force_pread };
	struct sf_uring_fault f = { .eio_nth = 5 };
	struct sf_uring *u = NULL;
	struct sf_err e = { 0 };
	unsigned char *arena;
	size_t bytes;
	int err = 0;

	make_specs(s, 99, 4096, &bytes);
	CHECK(posix_memalign((void **)&arena, 4096, bytes) == 0, "arena");
	CHECK(sf_uring_open(&u, path, &o, &e) == 0, "open: %s", e.msg);
	if (!u) {
		free(arena);
		return;
	}
	sf_uring_set_fault(u, &f);
	CHECK(run_batch(u, s, arena, force_pread ? "eio pread" : "eio", &err, &e) == 1,
	      "eio: expected exactly one failed request");
	CHECK(err == -EIO, "eio: error %d, expected -EIO", err);
	CHECK(strstr(e.msg, path) && strstr(e.msg, ": Input/output error"), "eio: message '%s'",
	      e.msg);
	sf_uring_close(u);
	free(arena);
}

/* A file that ends inside a request: -EIO naming the file, the request and
 * how far it got; both backends, direct and buffered. */
static void test_eof(void)
{
	for (int mode = 0; mode < 4; mode++) {
		struct sf_uring_opts o = { .qd = 4, .force_pread = mode & 1, .buffered = mode >> 1 };
		struct sf_uring *u = NULL;
		struct sf_err e = { 0 };
		unsigned char *buf;
		char want_msg[5000];
		uint64_t tag = 0;
		int ret;

		CHECK(posix_memalign((void **)&buf, 4096, 16384) == 0, "buf");
		CHECK(sf_uring_open(&u, tail_path, &o, &e) == 0, "open: %s", e.msg);
		if (!u) {
			free(buf);
			continue;
		}
		CHECK(sf_uring_queue(u, 1u << 20, 8192, buf, 5, &e) == 0, "queue: %s", e.msg);
		CHECK(sf_uring_queue(u, 2u << 20, 4096, buf + 8192, 6, &e) == 0, "queue: %s", e.msg);
		CHECK(sf_uring_queue(u, 0, 4096, buf + 12288, 7, &e) == 0, "queue: %s", e.msg);
		for (int k = 0; k < 3; k++) {
			ret = sf_uring_reap(u, &tag, 1, &e);
			if (tag == 7) {
				CHECK(ret == 1, "mode %d: the good request: %d %s", mode, ret, e.msg);
				continue;
			}
			snprintf(want_msg, sizeof(want_msg),
				 "%s: read of %u bytes at offset %u: end of file after %u bytes "
				 "(file is %u bytes: truncated?)", tail_path, tag == 5 ? 8192 : 4096,
				 tag == 5 ? 1u << 20 : 2u << 20, tag == 5 ? 100 : 0, (1u << 20) + 100);
			CHECK(ret == -EIO, "mode %d tag %llu: reap %d, expected -EIO", mode,
			      (unsigned long long)tag, ret);
			CHECK(!strcmp(e.msg, want_msg), "mode %d: message '%s', expected '%s'", mode,
			      e.msg, want_msg);
		}
		CHECK(sf_uring_reap(u, &tag, 1, &e) == 0, "mode %d: nothing left to reap", mode);
		sf_uring_close(u);
		free(buf);
	}
}

static void test_misaligned(void)
{
	struct sf_uring *u = NULL;
	struct sf_err e = { 0 };
	unsigned char *buf;
	static const struct {
		uint64_t off;
		uint32_t len;
		size_t shift;
	} bad[] = { { 512, 4096, 0 }, { 4096, 4000, 0 }, { 4096, 4096, 512 }, { 0, 0, 0 },
		    { UINT64_MAX - 4095, 8192, 0 } };

	CHECK(posix_memalign((void **)&buf, 4096, 16384) == 0, "buf");
	CHECK(sf_uring_open(&u, path, NULL, &e) == 0, "open: %s", e.msg);
	if (!u) {
		free(buf);
		return;
	}
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		e.msg[0] = 0;
		CHECK(sf_uring_queue(u, bad[k].off, bad[k].len, buf + bad[k].shift, 1, &e) == -EINVAL,
		      "case %zu accepted", k);
		CHECK(strstr(e.msg, path) != NULL, "case %zu: message '%s'", k, e.msg);
	}
	CHECK(strstr(e.msg, "empty or past 2^64"), "overflow message '%s'", e.msg);
	CHECK(sf_uring_queue(u, 4096, 4000, buf, 1, &e) == -EINVAL &&
	      strstr(e.msg, "O_DIRECT needs all three multiples of 4096"), "message '%s'", e.msg);
	CHECK(sf_uring_outstanding(u) == 0, "refused requests were queued");
	sf_uring_close(u);
	free(buf);
}

static void test_options(void)
{
	struct sf_uring_fault f;
	struct sf_uring_opts o = { 0 };
	struct sf_uring *u = NULL;
	struct sf_err e = { 0 };
	static const char *bad[] = { "eio", "eio=", "eio=0", "short=x", "eio=3,", "bogus=1",
				     "short=99999999999", "eio=2;short=4" };
	char buf[4200];

	CHECK(sf_uring_fault_parse("eio=7,short=512", &f, &e) == 0 && f.eio_nth == 7 &&
	      f.short_cap == 512, "parse: %s", e.msg);
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		int ret = sf_uring_fault_parse(bad[k], &f, &e);
		/* "eio=3," ends in an empty item: accepted, nothing after it */
		if (!strcmp(bad[k], "eio=3,"))
			CHECK(ret == 0 && f.eio_nth == 3, "'%s': %d", bad[k], ret);
		else
			CHECK(ret == -EINVAL && strstr(e.msg, "SF_FAULT: bad fault"), "'%s': %d %s",
			      bad[k], ret, e.msg);
	}
	/* the options' hook: the ring takes the fault it is opened with */
	o.fault = (struct sf_uring_fault){ .eio_nth = 1 };
	CHECK(sf_uring_open(&u, path, &o, &e) == 0, "open: %s", e.msg);
	o.fault = (struct sf_uring_fault){ 0 };
	if (u) {
		unsigned char *b;
		uint64_t tag;
		CHECK(posix_memalign((void **)&b, 4096, 4096) == 0, "buf");
		CHECK(sf_uring_queue(u, 0, 4096, b, 3, &e) == 0, "queue: %s", e.msg);
		CHECK(sf_uring_reap(u, &tag, 1, &e) == -EIO && tag == 3, "fault eio=1 ignored");
		sf_uring_close(u);
		free(b);
	}

	o.qd = SF_URING_MAX_QD + 1;
	CHECK(sf_uring_open(&u, path, &o, &e) == -EINVAL && strstr(e.msg, "queue depth"),
	      "qd %u: %s", o.qd, e.msg);
	o = (struct sf_uring_opts){ .arena = buf + 1, .arena_bytes = 4096 };
	CHECK(sf_uring_open(&u, path, &o, &e) == -EINVAL && strstr(e.msg, "buffer arena"),
	      "misaligned arena: %s", e.msg);
	snprintf(buf, sizeof(buf), "%s.missing", path);
	CHECK(sf_uring_open(&u, buf, NULL, &e) == -ENOENT && strstr(e.msg, ": open: No such file"),
	      "missing file: %s", e.msg);

	/* procfs refuses O_DIRECT: said so, not silently read buffered */
	if (sf_uring_open(&u, "/proc/self/status", NULL, &e) != -ENOENT) {
		CHECK(!u && !strcmp(e.msg, "/proc/self/status: open with O_DIRECT: the filesystem "
				    "refuses direct I/O (Invalid argument)"), "message '%s'", e.msg);
		o = (struct sf_uring_opts){ .buffered = 1 };
		CHECK(sf_uring_open(&u, "/proc/self/status", &o, &e) == 0, "buffered: %s", e.msg);
		sf_uring_close(u);
	}

	o = (struct sf_uring_opts){ .force_pread = 1 };
	CHECK(sf_uring_open(&u, path, &o, &e) == 0, "open: %s", e.msg);
	if (u) {
		const char *why;
		CHECK(sf_uring_backend(u, &why) == SF_URING_PREAD && !strcmp(why, "forced") &&
		      !strcmp(sf_uring_backend_name(SF_URING_PREAD), "pread"), "pread backend");
		CHECK(sf_uring_size(u) == FILE_BYTES, "size %llu",
		      (unsigned long long)sf_uring_size(u));
		sf_uring_close(u);
	}
	sf_uring_close(NULL);
}

/* A sandbox that refuses io_uring (seccomp returning EPERM for
 * io_uring_setup, as container runtimes do) selects the pread backend,
 * which says why and reads the same bytes. In a child, since the filter
 * cannot be removed. */
static void test_refused(void)
{
	pid_t pid = fork();
	int status = 0;

	if (pid == 0) {
		struct sock_filter f[] = {
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		};
		struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };
		const struct sf_uring_fault none = { 0 };
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP,
								 SECCOMP_MODE_FILTER, &prog))
			_exit(77);
		const struct variant v = { "io_uring refused", { .qd = 8 }, 1, 4096, none, 1 };
		struct sf_uring *u = NULL;
		struct sf_err e = { 0 };
		const char *why = NULL;
		CHECK(sf_uring_open(&u, path, NULL, &e) == 0, "open: %s", e.msg);
		if (u) {
			CHECK(sf_uring_backend(u, &why) == SF_URING_PREAD && why &&
			      !strcmp(why, "io_uring_queue_init: Operation not permitted"),
			      "refused io_uring: backend %s (%s)",
			      sf_uring_backend_name(sf_uring_backend(u, NULL)), why ? why : "");
			sf_uring_close(u);
		}
		test_variant(&v);
		fflush(stderr);
		_exit(unit_failures ? 1 : 0);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork");
	if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
		fprintf(stderr, "note: seccomp unavailable, io_uring refusal not tested\n");
	else
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "refused io_uring: child %#x",
		      status);
}

int main(void)
{
	const char *dirs[] = { unit_env("SF_TMP", "/tmp"), "/var/tmp", "/tmp" };
	const struct sf_uring_fault none = { 0 }, cap4k = { .short_cap = 4096 },
				    cap512 = { .short_cap = 512 }, cap1000 = { .short_cap = 1000 };
	size_t d;

	for (d = 0; d < sizeof(dirs) / sizeof(dirs[0]); d++)
		if (setup_in(dirs[d]) == 0)
			break;
	if (d == sizeof(dirs) / sizeof(dirs[0]))
		unit_skip("O_DIRECT is refused in $SF_TMP, /var/tmp and /tmp");
	read_back();
	probe_ring();

	const struct variant v[] = {
		{ "direct qd 8 registered", { .qd = 8 }, 1, 4096, none, 0 },
		{ "direct qd 64", { 0 }, 0, 4096, none, 0 },
		{ "direct qd 1", { .qd = 1 }, 1, 4096, none, 0 },
		{ "direct short 4096", { .qd = 16 }, 1, 4096, cap4k, 0 },
		{ "buffered unaligned short 1000", { .qd = 8, .buffered = 1 }, 0, 1, cap1000, 0 },
		{ "buffered unaligned registered", { .qd = 8, .buffered = 1 }, 1, 1, none, 0 },
		{ "pread direct", { .force_pread = 1 }, 1, 4096, none, 0 },
		{ "pread direct short 4096", { .force_pread = 1 }, 0, 4096, cap4k, 0 },
		{ "pread buffered short 512", { .force_pread = 1, .buffered = 1 }, 0, 1, cap512, 0 },
	};
	for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++)
		test_variant(&v[k]);
	test_eio(0);
	test_eio(1);
	test_eof();
	test_misaligned();
	test_options();
	test_refused();

	unlink(path);
	unlink(tail_path);
	free(want);
	return unit_exit();
}
