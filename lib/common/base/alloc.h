/* Large buffers that kernels stream or index at random. */
#ifndef SF_ALLOC_H
#define SF_ALLOC_H

#include <stddef.h>

/* bytes aligned to align (a power of two, at least sizeof(void *)), and
 * from 2 MiB on to 2 MiB with huge pages asked of the kernel (a hint: it
 * may refuse): walking 4 KiB pages costs the kernels their TLB, and a
 * first touch a fault each page. NULL when out of memory; free() frees. */
void *sf_alloc_large(size_t bytes, size_t align);
/* n elements of size bytes, zero, aligned to a cache line: for the
 * buffers kernels load 64 bytes at a time (calloc's large blocks start
 * 16 bytes into a page, which splits every such load over two lines).
 * NULL when out of memory or n * size overflows; free() frees. */
void *sf_calloc_lines(size_t n, size_t size);

#endif
