#include "base/alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void *sf_alloc_large(size_t bytes, size_t align)
{
	const size_t huge = (size_t)2 << 20;
	void *p;

	if (posix_memalign(&p, bytes >= huge ? huge : align, bytes ? bytes : 1))
		return NULL;
	if (bytes >= huge)
		(void)madvise(p, bytes / huge * huge, MADV_HUGEPAGE);
	return p;
}

void *sf_calloc_lines(size_t n, size_t size)
{
	size_t bytes;
	void *p;

	if (size && n > (SIZE_MAX - 63) / size)
		return NULL;
	bytes = n * size;
	bytes += !bytes;
	/* no huge pages: a buffer sized for a pass's tokens and used by
	 * one token's would then be resident 2 MiB at a time */
	if (posix_memalign(&p, 64, (bytes + 63) / 64 * 64))
		return NULL;
	memset(p, 0, bytes);
	return p;
}
