/* What the tokenizer's files share (engine/tokenizer*.c, private): UTF-8
 * as Rust's str sees it, growable buffers, an arena, the hash maps, and
 * struct sf_tokenizer with the steps tokenizer.json describes. The
 * reader of tokenizer.json is tokenizer.c, encoding tokenizer_encode.c,
 * decoding tokenizer_decode.c, a GGUF's vocabulary tokenizer_gguf.c. */
#ifndef SF_TOKENIZER_IMPL_H
#define SF_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"

// ----------------------------------------------------------------------------
// UTF-8 as Rust's str sees it (HF tokenizers works on Rust strings)

/* Classifies the bytes at s: the length (1..4) of a valid character; 0
 * for an invalid one, with *bad the length of the maximal invalid subpart
 * that String::from_utf8_lossy replaces by one U+FFFD; -1 when s ends
 * inside a character that could still become valid. */
static inline int utf8_seq(const unsigned char *s, size_t n, size_t *bad)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xBF;
	int w;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF) {
		w = 2;
	} else if (c >= 0xE0 && c <= 0xEF) {
		w = 3;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;	/* surrogates */
	} else if (c >= 0xF0 && c <= 0xF4) {
		w = 4;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;	/* above U+10FFFF */
	} else {
		*bad = 1;
		return 0;
	}
	for (int i = 1; i < w; i++) {
		if ((size_t)i >= n)
			return -1;
		unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
		if (s[i] < l || s[i] > h) {
			*bad = (size_t)i;
			return 0;
		}
	}
	return w;
}

static inline uint32_t utf8_cp(const unsigned char *s, int w)
{
	switch (w) {
	case 1: return s[0];
	case 2: return (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
	case 3: return (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
	default: return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
			(uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
	}
}

/* Bytes of the character at s, invalid bytes counting one each: how the
 * BPE model splits a word into its initial symbols. */
static inline size_t char_len(const char *s, size_t n)
{
	size_t bad;
	int w = utf8_seq((const unsigned char *)s, n, &bad);
	return w > 0 ? (size_t)w : 1;
}

// ----------------------------------------------------------------------------
// GPT-2 byte-level alphabet: every byte as a printable code point

/* The alphabet's code points back to bytes (-1 outside it), filled
 * once by the first tokenizer opened (tokenizer.c). */
extern int16_t sf_tok_cp2byte[324];	/* the alphabet ends at U+0143 */

/* Writes the bytes a byte-level string stands for into o (room for n);
 * false when some character is outside the alphabet. */
static inline bool bl_unmap(const char *s, size_t n, char *o, size_t *on)
{
	size_t k = 0, bad;
	for (size_t i = 0; i < n;) {
		int w = utf8_seq((const unsigned char *)s + i, n - i, &bad);
		if (w <= 0)
			return false;
		uint32_t cp = utf8_cp((const unsigned char *)s + i, w);
		if (cp >= 324 || sf_tok_cp2byte[cp] < 0)
			return false;
		o[k++] = (char)sf_tok_cp2byte[cp];
		i += (size_t)w;
	}
	*on = k;
	return true;
}

// ----------------------------------------------------------------------------
// Growable buffers and an arena for the token strings

struct buf {
	char *p;
	size_t n, cap;
};

static inline int buf_reserve(struct buf *b, size_t more)
{
	if (b->n + more <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < b->n + more)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

static inline int buf_add(struct buf *b, const void *s, size_t n)
{
	if (buf_reserve(b, n))
		return -ENOMEM;
	if (n)
		memcpy(b->p + b->n, s, n);
	b->n += n;
	return 0;
}

struct idv {
	int32_t *p;
	size_t n, cap;
};

static inline int idv_add(struct idv *v, int32_t id)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? 2 * v->cap : 256;
		int32_t *p = realloc(v->p, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		v->p = p;
		v->cap = cap;
	}
	v->p[v->n++] = id;
	return 0;
}

struct chunk {
	struct chunk *next;
	size_t used, cap;
	char data[];
};

static inline char *arena_dup(struct chunk **a, const char *s, size_t n)
{
	if (!*a || (*a)->cap - (*a)->used < n + 1) {
		size_t cap = n + 1 > (1u << 20) ? n + 1 : (1u << 20);
		struct chunk *c = malloc(sizeof(*c) + cap);
		if (!c)
			return NULL;
		c->next = *a;
		c->used = 0;
		c->cap = cap;
		*a = c;
	}
	char *p = (*a)->data + (*a)->used;
	memcpy(p, s, n);
	p[n] = 0;
	(*a)->used += n + 1;
	return p;
}

static inline void arena_free(struct chunk *a)
{
	while (a) {
		struct chunk *n = a->next;
		free(a);
		a = n;
	}
}

// ----------------------------------------------------------------------------
// Hash maps: byte string -> id, and (id, id) -> (rank, merged id)

static inline uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
	return h ^ h >> 29;
}

static inline uint64_t hash_u64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ x >> 31;
}

/* Keys point into the token table, so the map holds no strings. Sized
 * once for its final count: load factor at most 1/2. */
struct smap {
	const char **key;
	uint32_t *klen;
	int32_t *val;		/* -1 empty */
	size_t mask;
};

static inline int smap_init(struct smap *m, size_t n)
{
	size_t cap = 16;
	while (cap < 2 * n)
		cap *= 2;
	m->key = calloc(cap, sizeof(*m->key));
	m->klen = calloc(cap, sizeof(*m->klen));
	m->val = malloc(cap * sizeof(*m->val));
	if (!m->key || !m->klen || !m->val)
		return -ENOMEM;
	memset(m->val, 0xff, cap * sizeof(*m->val));
	m->mask = cap - 1;
	return 0;
}

static inline void smap_free(struct smap *m)
{
	free(m->key);
	free(m->klen);
	free(m->val);
}

static inline int32_t smap_get(const struct smap *m, const char *k, size_t n)
{
	if (!m->val)
		return -1;
	for (size_t i = hash_bytes(k, n) & m->mask;; i = (i + 1) & m->mask) {
		if (m->val[i] < 0)
			return -1;
		if (m->klen[i] == n && !memcmp(m->key[i], k, n))
			return m->val[i];
	}
}

/* Returns the id already there, or -1 after inserting. */
static inline int32_t smap_put(struct smap *m, const char *k, size_t n, int32_t v)
{
	size_t i = hash_bytes(k, n) & m->mask;
	for (; m->val[i] >= 0; i = (i + 1) & m->mask)
		if (m->klen[i] == n && !memcmp(m->key[i], k, n))
			return m->val[i];
	m->key[i] = k;
	m->klen[i] = (uint32_t)n;
	m->val[i] = v;
	return -1;
}

#define PAIR_EMPTY UINT64_MAX

struct pmap {
	uint64_t *key;
	uint32_t *rank;
	int32_t *res;
	size_t mask;
};

static inline int pmap_init(struct pmap *m, size_t n)
{
	size_t cap = 16;
	while (cap < 2 * n)
		cap *= 2;
	m->key = malloc(cap * sizeof(*m->key));
	m->rank = malloc(cap * sizeof(*m->rank));
	m->res = malloc(cap * sizeof(*m->res));
	if (!m->key || !m->rank || !m->res)
		return -ENOMEM;
	memset(m->key, 0xff, cap * sizeof(*m->key));
	m->mask = cap - 1;
	return 0;
}

static inline void pmap_free(struct pmap *m)
{
	free(m->key);
	free(m->rank);
	free(m->res);
}

/* A repeated pair takes the later rank: HF collects merges into a map. */
static inline void pmap_put(struct pmap *m, int32_t a, int32_t b, uint32_t rank, int32_t res)
{
	uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	size_t i = hash_u64(k) & m->mask;
	while (m->key[i] != PAIR_EMPTY && m->key[i] != k)
		i = (i + 1) & m->mask;
	m->key[i] = k;
	m->rank[i] = rank;
	m->res[i] = res;
}

static inline bool pmap_get(const struct pmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *res)
{
	if (!m->key)
		return false;
	uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	for (size_t i = hash_u64(k) & m->mask; m->key[i] != PAIR_EMPTY; i = (i + 1) & m->mask)
		if (m->key[i] == k) {
			*rank = m->rank[i];
			*res = m->res[i];
			return true;
		}
	return false;
}

// ----------------------------------------------------------------------------
// The tokenizer

struct piece {
	const char *s;		/* as tokenizer.json spells it, NUL-terminated */
	uint32_t n;
	bool special;
};

struct added {
	int32_t id;
	const char *s;
	uint32_t n;
	bool special, lstrip, rstrip, single_word, normalized;
};

enum { N_PREPEND, N_REPLACE, N_NFC };
struct nstep {
	int kind;
	const char *a, *b;	/* prepend text / pattern and content */
	size_t na, nb;
};

enum { P_METASPACE, P_SPLIT, P_BYTELEVEL };
enum { S_ALWAYS, S_FIRST, S_NEVER };
enum { B_ISOLATED, B_REMOVED, B_MERGED_PREV, B_MERGED_NEXT };
struct pstep {
	int kind;
	pcre2_code *re;		/* Split pattern; ByteLevel with use_regex */
	int behavior;
	const char *rep;	/* Metaspace replacement */
	size_t nrep;
	int scheme;
	bool split;
	bool prefix_space;	/* ByteLevel add_prefix_space */
};

enum { D_JOIN, D_CHAIN, D_BYTELEVEL };
enum { M_REPLACE, M_METASPACE };
struct dmap {
	int kind;
	const char *from, *to;
	size_t nfrom, nto;
	bool first_drop;	/* Metaspace: the first token loses every replacement */
};

struct sf_tokenizer {
	char *path;		/* tokenizer.json, for messages */
	struct piece *tok;	/* (vocab_size) */
	int32_t ntok;
	struct chunk *arena;
	struct smap vocab;	/* tokenizer.json spelling -> model id */
	struct smap ekey;	/* byte-level: the bytes a token stands for -> id */
	const struct smap *emap;	/* the map encode looks symbols up in */
	struct pmap merges;
	bool bytelevel;
	bool byte_fallback, fuse_unk, ignore_merges;
	int32_t unk;
	int32_t byte_id[256];	/* <0xNN> */

	struct added *added;	/* sorted by first byte, longest first */
	size_t nadded;
	size_t added_at[257];	/* first entry for each first byte */
	bool any_normalized_added;

	struct nstep *norm;
	size_t nnorm;
	struct pstep *pre;
	size_t npre;

	int dec;
	struct dmap *dmap;
	size_t ndmap;
	bool dec_byte_fallback;
	const char *strip;	/* Strip after Fuse: content character */
	size_t nstrip;
	unsigned strip_start;

	int32_t *prefix, *suffix;	/* added around the text with add_special */
	size_t nprefix, nsuffix;
	int32_t bos, eos;
	bool adds_bos;
	const char *chat_template;	/* tokenizer_config.json's, or NULL */
	bool clean_up;		/* tokenizer_config.json's clean_up_tokenization_spaces */
};

#endif
