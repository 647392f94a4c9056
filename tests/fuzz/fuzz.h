/* Shared by the libFuzzer harnesses (tests/fuzz/README): parsers that open a
 * path get the input through a memfd named /proc/self/fd/N, so nothing is
 * written to disk and every run starts from a fresh file. */
#ifndef SF_FUZZ_H
#define SF_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/tokenizer.h"

/* The input as a file: returns its descriptor (close it after) and fills
 * path. Aborts when the kernel refuses: a harness without input is broken. */
static inline int fuzz_file(const uint8_t *data, size_t size, char path[64])
{
	int fd = memfd_create("fuzz", MFD_CLOEXEC);
	size_t off = 0;

	if (fd < 0)
		abort();
	while (off < size) {
		ssize_t n = write(fd, data + off, size - off);
		if (n <= 0)
			abort();
		off += (size_t)n;
	}
	snprintf(path, 64, "/proc/self/fd/%d", fd);
	return fd;
}

/* Reads every byte of a range so that a range outside its mapping faults
 * under the fuzzer instead of passing unnoticed. */
static inline void fuzz_touch(const void *p, uint64_t n)
{
	const volatile uint8_t *b = p;
	uint8_t x = 0;

	for (uint64_t i = 0; i < n; i += 4096)
		x ^= b[i];
	if (n)
		x ^= b[n - 1];
	(void)x;
}

/* ids decoded whole and streamed piece by piece (the two decoders a
 * sampler's ids go through); the text itself is not checked. */
static inline void fuzz_decode(const struct sf_tokenizer *t, const int32_t *ids, size_t n)
{
	struct sf_err e;
	struct sf_detok d;
	const char *piece;
	char *out = NULL;
	size_t len;

	if (sf_tokenizer_decode(t, ids, n, 0, &out, &len, &e) == 0)
		free(out);
	sf_detok_init(&d, t, SF_DECODE_SKIP_SPECIAL);
	for (size_t i = 0; i < n; i++)
		if (sf_detok_push(&d, ids[i], &piece, &len))
			break;
	sf_detok_finish(&d, &piece, &len);
	sf_detok_free(&d);
}

#endif
