/* uring bench: raw random reads through lib/common/online/uring.c at each block
 * size and queue depth, O_DIRECT, over FILE (written with seeded random
 * data when missing or smaller than SIZE), then the --probe-device
 * figures; for tests/bench/uring.sh. One JSON object per line.
 * Usage: uring FILE SIZE SECONDS BLOCKS QDS [buffered|pread]
 *   e.g. uring /var/tmp/sf.bin 1G 1 4K,16K,64K,256K 1,2,4,8,16,32,64 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cli.h"
#include "online/uring.h"

/* Comma-separated values, each with an optional K/M/G suffix. */
static int parse_list(const char *s, uint64_t min, uint64_t max, uint64_t *out, int cap)
{
	char buf[256];
	int n = 0;

	if (strlen(s) >= sizeof(buf))
		return -1;
	strcpy(buf, s);
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
		if (n == cap || sf_parse_u64(t, min, max, &out[n++]) < 0)
			return -1;
	return n;
}

int main(int argc, char **argv)
{
	uint64_t size, blocks[16], qds[16];
	double seconds;
	int nb, nq;
	struct sf_uring_opts o = { 0 };
	struct sf_err e = { 0 };
	struct stat sb;

	if (argc < 6 || argc > 7)
		return fprintf(stderr, "usage: uring FILE SIZE SECONDS BLOCKS QDS [buffered|pread]\n"), 2;
	if (sf_parse_u64(argv[2], SF_URING_ALIGN, UINT64_MAX, &size) < 0 ||
	    sf_parse_f64(argv[3], 0.01, 3600, &seconds) < 0 ||
	    (nb = parse_list(argv[4], SF_URING_ALIGN, 1u << 30, blocks, 16)) <= 0 ||
	    (nq = parse_list(argv[5], 1, SF_URING_MAX_QD, qds, 16)) <= 0)
		return fprintf(stderr, "uring: bad SIZE, SECONDS, BLOCKS or QDS\n"), 2;
	if (argc == 7) {
		if (!strcmp(argv[6], "buffered"))
			o.buffered = 1;
		else if (!strcmp(argv[6], "pread"))
			o.force_pread = 1;
		else
			return fprintf(stderr, "uring: mode '%s': expected buffered or pread\n", argv[6]), 2;
	}
	size = size / SF_URING_ALIGN * SF_URING_ALIGN;
	if (stat(argv[1], &sb) < 0 || (uint64_t)sb.st_size < size) {
		fprintf(stderr, "uring: writing %llu bytes to %s\n", (unsigned long long)size, argv[1]);
		if (sf_uring_fill(argv[1], size, 1, &e) < 0)
			return fprintf(stderr, "uring: %s\n", e.msg), 1;
	}
	for (int b = 0; b < nb; b++)
		for (int q = 0; q < nq; q++) {
			struct sf_uring_bench r;
			o.qd = (unsigned)qds[q];
			if (sf_uring_bench_run(argv[1], size, (uint32_t)blocks[b], &o, seconds,
					       (uint64_t)(b * 100 + q + 1), &r, &e) < 0)
				return fprintf(stderr, "uring: %s\n", e.msg), 1;
			printf("{\"test\": \"random\", \"backend\": \"%s\", \"direct\": %s, \"block\": %u, "
			       "\"qd\": %u, \"reads\": %llu, \"seconds\": %.3f, \"iops\": %.0f, "
			       "\"gb_per_s\": %.3f}\n", sf_uring_backend_name(r.backend),
			       o.buffered ? "false" : "true", r.block, r.qd,
			       (unsigned long long)r.reads, r.seconds, r.iops, r.bytes_per_s / 1e9);
			fflush(stdout);
		}
	struct sf_uring_probe p;
	if (sf_uring_probe(argv[1], &p, &e) < 0)
		return fprintf(stderr, "uring: %s\n", e.msg), 1;
	printf("{\"test\": \"probe\", \"small_block\": %u, \"small_qd\": %u, \"iops\": %.0f, "
	       "\"large_block\": %u, \"large_qd\": %u, \"gb_per_s\": %.3f}\n", p.small.block,
	       p.small.qd, p.small.iops, p.large.block, p.large.qd, p.large.bytes_per_s / 1e9);
	return ferror(stdout) || fclose(stdout) ? 1 : 0;
}
