/* Large buffers that kernels stream or index at random. */
#ifndef SF_ALLOC_H
#define SF_ALLOC_H

#include <stddef.h>

/* bytes aligned to align (a power of two, at least sizeof(void *)), and
 * from 2 MiB on to 2 MiB with huge pages asked of the kernel (a hint: it
 * may refuse): walking 4 KiB pages costs the kernels their TLB, and a
 * first touch a fault each page. NULL when out of memory; free() frees. */
void *sf_alloc_large(size_t bytes, size_t align);

#endif
