/* Replays sf-run --read-log on the raw device: per pass, every request of
 * the log read with O_DIRECT through a plain liburing loop that keeps
 * QD in flight into one registered buffer (READ_FIXED, as sf-run reads;
 * the requests land on each other, their bytes unused), as fast as the
 * device serves them; what pipelining across
 * groups can reach for that request list. The page cache plays no part
 * (O_DIRECT). Prints one JSON object: passes, their seconds (median and
 * sum), bytes and requests.
 *   replay FILE LOG [QD]          (tests/bench/flash-pipeline.sh) */
#include <fcntl.h>
#include <liburing.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

struct rq {
	uint64_t pass, off;
	uint32_t len;
};

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void die(const char *what)
{
	fprintf(stderr, "replay: %s\n", what);
	exit(1);
}

int main(int argc, char **argv)
{
	if (argc < 3 || argc > 4) {
		fprintf(stderr, "usage: replay FILE LOG [QD]\n");
		return 2;
	}
	unsigned qd = argc == 4 ? (unsigned)atoi(argv[3]) : 64;
	FILE *log = fopen(argv[2], "r");
	int fd = open(argv[1], O_RDONLY | O_DIRECT);
	if (!log || fd < 0 || qd < 1 || qd > 4096)
		die("cannot open the file or the log, or a bad QD");

	size_t n = 0, cap = 1 << 16;
	uint32_t most = 0;
	struct rq *r = malloc(cap * sizeof(*r));
	unsigned long long p, o;
	unsigned l;
	while (r && fscanf(log, "%llu %llu %u", &p, &o, &l) == 3) {
		if (n == cap && !(r = realloc(r, (cap *= 2) * sizeof(*r))))
			break;
		r[n++] = (struct rq){ p, o, l };
		most = l > most ? l : most;
	}
	if (!r || !n)
		die("an empty log, or out of memory");

	struct io_uring ring;
	uint8_t *buf;
	if (io_uring_queue_init(qd, &ring, 0) < 0 ||
	    posix_memalign((void **)&buf, 4096, most))
		die("io_uring_queue_init or the buffer failed");
	struct iovec iov = { .iov_base = buf, .iov_len = most };
	memset(buf, 0, iov.iov_len);
	if (io_uring_register_buffers(&ring, &iov, 1) < 0)
		die("io_uring_register_buffers failed");
	double *secs = calloc(r[n - 1].pass + 1, sizeof(double));
	size_t npass = 0;
	uint64_t bytes = 0;
	for (size_t i = 0; i < n;) {
		size_t end = i;
		while (end < n && r[end].pass == r[i].pass)
			end++;
		double t0 = now();
		size_t next = i, done = 0, free_slot[4096], nfree = qd;
		for (unsigned k = 0; k < qd; k++)
			free_slot[k] = k;
		while (done < end - i) {
			while (next < end && nfree) {
				struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
				size_t s = free_slot[--nfree];
				io_uring_prep_read_fixed(sqe, fd, buf, r[next].len, r[next].off, 0);
				io_uring_sqe_set_data64(sqe, s);
				next++;
			}
			io_uring_submit(&ring);
			struct io_uring_cqe *cqe;
			if (io_uring_wait_cqe(&ring, &cqe) < 0)
				die("io_uring_wait_cqe failed");
			do {
				if (cqe->res < 0)
					die("a read failed");
				bytes += (uint64_t)cqe->res;	/* short reads: rare, not requeued */
				free_slot[nfree++] = (size_t)io_uring_cqe_get_data64(cqe);
				done++;
				io_uring_cqe_seen(&ring, cqe);
			} while (io_uring_peek_cqe(&ring, &cqe) == 0);
		}
		secs[npass++] = now() - t0;
		i = end;
	}
	double sum = 0;
	for (size_t k = 0; k < npass; k++)
		sum += secs[k];
	qsort(secs, npass, sizeof(double), cmp_double);
	printf("{\"passes\": %zu, \"p50\": %.6f, \"seconds\": %.6f, \"bytes\": %llu, "
	       "\"requests\": %zu, \"qd\": %u}\n", npass, secs[(npass - 1) / 2], sum,
	       (unsigned long long)bytes, n, qd);
	io_uring_queue_exit(&ring);
	free(buf);
	free(secs);
	free(r);
	fclose(log);
	close(fd);
	return 0;
}
