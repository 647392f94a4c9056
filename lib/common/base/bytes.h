/* Little-endian encode and decode of fixed-width integers and IEEE-754
 * values for the binary streams (trace, coact, codes): explicit byte
 * order, never a struct read raw. The layouts they serve are in
 * man/sf-formats.5. */
#ifndef SF_BYTES_H
#define SF_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SF_FNV64_BASIS 0xcbf29ce484222325ull	/* FNV-1a's offset basis */

/* 64-bit FNV-1a (prime 0x100000001b3) continued from h over n bytes; start
 * from SF_FNV64_BASIS. The fingerprints (formats/model.h) and the .sfq
 * checksums of sf-encode --info. */
static inline uint64_t sf_fnv64(uint64_t h, const void *p, uint64_t n)
{
	const unsigned char *b = p;

	for (uint64_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

static inline void sf_put_le16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static inline uint16_t sf_get_le16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static inline void sf_put_le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline void sf_put_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint32_t sf_get_le32(const unsigned char *p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static inline uint64_t sf_get_le64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static inline void sf_put_f64(unsigned char *p, double d)
{
	uint64_t v;
	memcpy(&v, &d, 8);
	sf_put_le64(p, v);
}

static inline double sf_get_f64(const unsigned char *p)
{
	uint64_t v = sf_get_le64(p);
	double d;
	memcpy(&d, &v, 8);
	return d;
}

/* CRC-32C (Castagnoli) of a buffer, continuing from crc (0 to start):
 * every trace block and coact section carries one, so a flipped byte is
 * an error rather than a silently different statistic. */
uint32_t sf_crc32c(uint32_t crc, const void *buf, size_t n);

#endif
