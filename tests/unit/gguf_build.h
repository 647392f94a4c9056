/* GGUF files built field by field for the reader's tests (test_gguf.c)
 * and the fuzz seeds (tests/fixtures/mkgguf.c): little-endian, any field
 * any value, so a test can write exactly the hostile byte it means. The
 * layout is man/sf-formats.5 (GGUF). */
#ifndef SF_GGUF_BUILD_H
#define SF_GGUF_BUILD_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct gb {
	unsigned char *p;
	size_t n, cap;
};

static inline void gb_bytes(struct gb *b, const void *p, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		if (!b->p)
			abort();
	}
	if (n)
		memcpy(b->p + b->n, p, n);
	b->n += n;
}

static inline void gb_u32(struct gb *b, uint32_t v)
{
	unsigned char x[4];
	for (int i = 0; i < 4; i++)
		x[i] = (unsigned char)(v >> (8 * i));
	gb_bytes(b, x, 4);
}

static inline void gb_u64(struct gb *b, uint64_t v)
{
	unsigned char x[8];
	for (int i = 0; i < 8; i++)
		x[i] = (unsigned char)(v >> (8 * i));
	gb_bytes(b, x, 8);
}

/* A GGUF string: 8-byte length, the bytes. */
static inline void gb_str(struct gb *b, const char *s)
{
	gb_u64(b, strlen(s));
	gb_bytes(b, s, strlen(s));
}

/* Zero bytes up to the next multiple of align. */
static inline void gb_pad(struct gb *b, size_t align)
{
	static const unsigned char zero[256];
	while (b->n % align)
		gb_bytes(b, zero, align - b->n % align < sizeof(zero) ? align - b->n % align : sizeof(zero));
}

/* Magic, version, tensor count, key-value count. */
static inline void gb_header(struct gb *b, uint32_t version, uint64_t ntensors, uint64_t nkvs)
{
	gb_bytes(b, "GGUF", 4);
	gb_u32(b, version);
	gb_u64(b, ntensors);
	gb_u64(b, nkvs);
}

/* A key and its value type; the value follows. */
static inline void gb_key(struct gb *b, const char *key, uint32_t type)
{
	gb_str(b, key);
	gb_u32(b, type);
}

static inline void gb_kv_u32(struct gb *b, const char *key, uint32_t v)
{
	gb_key(b, key, 4);	/* U32 */
	gb_u32(b, v);
}

static inline void gb_kv_str(struct gb *b, const char *key, const char *v)
{
	gb_key(b, key, 8);	/* STRING */
	gb_str(b, v);
}

/* A tensor info of n_dims dimensions ne[0..n_dims). */
static inline void gb_tensor(struct gb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
			     uint32_t type, uint64_t offset)
{
	gb_str(b, name);
	gb_u32(b, n_dims);
	for (uint32_t d = 0; d < n_dims; d++)
		gb_u64(b, ne[d]);
	gb_u32(b, type);
	gb_u64(b, offset);
}

#endif
