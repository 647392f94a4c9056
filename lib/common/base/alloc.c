#include "base/alloc.h"

#include <stdlib.h>
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
