/* Hugging Face tokenizer.json for BPE models: added-token splitting, the
 * normalizer and pre-tokenizer steps, rank-ordered merges with byte
 * fallback or the byte-level alphabet, the post-processor's BOS/EOS, and
 * the decoder chain shared by whole and streaming decode. See tokenizer.h. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/tokenizer.h"
#include "formats/gguf.h"
#include "formats/image.h"

#include <errno.h>
#include <jansson.h>
#include <pcre2.h>
#include <utf8proc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/jsonfile.h"

// ----------------------------------------------------------------------------
// UTF-8 as Rust's str sees it (HF tokenizers works on Rust strings)

/* Classifies the bytes at s: the length (1..4) of a valid character; 0
 * for an invalid one, with *bad the length of the maximal invalid subpart
 * that String::from_utf8_lossy replaces by one U+FFFD; -1 when s ends
 * inside a character that could still become valid. */
static int utf8_seq(const unsigned char *s, size_t n, size_t *bad)
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

static uint32_t utf8_cp(const unsigned char *s, int w)
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
static size_t char_len(const char *s, size_t n)
{
	size_t bad;
	int w = utf8_seq((const unsigned char *)s, n, &bad);
	return w > 0 ? (size_t)w : 1;
}

// ----------------------------------------------------------------------------
// GPT-2 byte-level alphabet: every byte as a printable code point

static uint16_t bl_byte2cp[256];
static int16_t bl_cp2byte[324];	/* the alphabet ends at U+0143 */

static void bl_init(void)
{
	int extra = 0;
	for (int b = 0; b < 256; b++) {
		bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
		bl_byte2cp[b] = (uint16_t)(keep ? b : 256 + extra++);
	}
	for (int i = 0; i < 324; i++)
		bl_cp2byte[i] = -1;
	for (int b = 0; b < 256; b++)
		bl_cp2byte[bl_byte2cp[b]] = (int16_t)b;
}

/* Writes the bytes a byte-level string stands for into o (room for n);
 * false when some character is outside the alphabet. */
static bool bl_unmap(const char *s, size_t n, char *o, size_t *on)
{
	size_t k = 0, bad;
	for (size_t i = 0; i < n;) {
		int w = utf8_seq((const unsigned char *)s + i, n - i, &bad);
		if (w <= 0)
			return false;
		uint32_t cp = utf8_cp((const unsigned char *)s + i, w);
		if (cp >= 324 || bl_cp2byte[cp] < 0)
			return false;
		o[k++] = (char)bl_cp2byte[cp];
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

static int buf_reserve(struct buf *b, size_t more)
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

static int buf_add(struct buf *b, const void *s, size_t n)
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

static int idv_add(struct idv *v, int32_t id)
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

static char *arena_dup(struct chunk **a, const char *s, size_t n)
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

static void arena_free(struct chunk *a)
{
	while (a) {
		struct chunk *n = a->next;
		free(a);
		a = n;
	}
}

// ----------------------------------------------------------------------------
// Hash maps: byte string -> id, and (id, id) -> (rank, merged id)

static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
	return h ^ h >> 29;
}

static uint64_t hash_u64(uint64_t x)
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

static int smap_init(struct smap *m, size_t n)
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

static void smap_free(struct smap *m)
{
	free(m->key);
	free(m->klen);
	free(m->val);
}

static int32_t smap_get(const struct smap *m, const char *k, size_t n)
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
static int32_t smap_put(struct smap *m, const char *k, size_t n, int32_t v)
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

static int pmap_init(struct pmap *m, size_t n)
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

static void pmap_free(struct pmap *m)
{
	free(m->key);
	free(m->rank);
	free(m->res);
}

/* A repeated pair takes the later rank: HF collects merges into a map. */
static void pmap_put(struct pmap *m, int32_t a, int32_t b, uint32_t rank, int32_t res)
{
	uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	size_t i = hash_u64(k) & m->mask;
	while (m->key[i] != PAIR_EMPTY && m->key[i] != k)
		i = (i + 1) & m->mask;
	m->key[i] = k;
	m->rank[i] = rank;
	m->res[i] = res;
}

static bool pmap_get(const struct pmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *res)
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

// ----------------------------------------------------------------------------
// Loading

#define FMT(...) sf_err_set(e, SF_EFORMAT, __VA_ARGS__)
#define UNSUP(...) sf_err_set(e, SF_EUNSUPPORTED, __VA_ARGS__)

/* Parses a JSON object; path names it in messages. flags: jansson's
 * decoding flags beyond the duplicate and NUL rules. */
static int parse_json(const char *path, const char *data, size_t len, int flags, json_t **out,
		      struct sf_err *e)
{
	json_error_t je;

	*out = NULL;
	if ((uint64_t)len > SF_TOKENIZER_MAX_FILE)
		return sf_err_set(e, SF_ELIMIT, "%s: %llu bytes: over the limit of %llu (256 MiB)",
				  path, (unsigned long long)len,
				  (unsigned long long)SF_TOKENIZER_MAX_FILE);
	*out = json_loadb(data, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | flags, &je);
	if (!*out)
		return FMT("%s: line %d column %d: not valid JSON: %s", path, je.line, je.column, je.text);
	if (!json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		return FMT("%s: top level: not an object", path);
	}
	return 0;
}

/* A JSON string's bytes into the arena. */
static const char *jstr(struct sf_tokenizer *t, json_t *j, size_t *n)
{
	*n = json_string_length(j);
	return arena_dup(&t->arena, json_string_value(j), *n);
}

static int nomem(struct sf_tokenizer *t, struct sf_err *e)
{
	return sf_err_set(e, -ENOMEM, "%s: %s", t->path, strerror(ENOMEM));
}

static bool jbool(json_t *o, const char *k, bool dflt)
{
	json_t *v = json_object_get(o, k);
	return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* "PATH: WHERE", naming an object for the typed getters' messages. */
static const char *at(const struct sf_tokenizer *t, const char *where, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s: %s", t->path, where);
	return buf;
}

/* A step's "type", or NULL with the message set. */
static const char *jtype(struct sf_tokenizer *t, json_t *o, const char *where, struct sf_err *e)
{
	char buf[SF_ERR_MAX];
	const char *ty;

	if (!json_is_object(o)) {
		FMT("%s: %s: not an object", t->path, where);
		return NULL;
	}
	return sf_json_str(o, "type", &ty, at(t, where, buf, sizeof(buf)), e) ? NULL : ty;
}

/* The "String" or "Regex" of a pattern object: 1 for a regex. */
static int jpattern(struct sf_tokenizer *t, json_t *p, const char *where, const char **s, size_t *n,
		    struct sf_err *e)
{
	json_t *v;
	if (json_is_object(p) && json_is_string(v = json_object_get(p, "String"))) {
		if (!(*s = jstr(t, v, n)))
			return nomem(t, e);
		return 0;
	}
	if (json_is_object(p) && json_is_string(v = json_object_get(p, "Regex"))) {
		if (!(*s = jstr(t, v, n)))
			return nomem(t, e);
		return 1;
	}
	return FMT("%s: %s.pattern: neither {\"String\": ...} nor {\"Regex\": ...}", t->path, where);
}

/* Unicode's White_Space, which \s is in Hugging Face's regexes (Oniguruma),
 * and its complement, as the inside of a character class. PCRE2's \s is
 * these and U+180E MONGOLIAN VOWEL SEPARATOR, a space before Unicode 6.3. */
static const char white_space[] =
	"\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
static const char not_white_space[] =
	"\\x{0}-\\x{8}\\x{E}-\\x{1F}\\x{21}-\\x{84}\\x{86}-\\x{9F}\\x{A1}-\\x{167F}\\x{1681}-\\x{1FFF}"
	"\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}\\x{2030}-\\x{205E}\\x{2060}-\\x{2FFF}\\x{3001}-\\x{10FFFF}";

/* The pattern with every \s and \S spelled out as Oniguruma reads them
 * (a class of its own, or inside the class it stands in). NULL without
 * memory. */
static char *re_white_space(const char *pat, size_t n, size_t *on)
{
	struct buf o = { 0 };
	bool in_class = false, ok = true;

	for (size_t i = 0; i < n && ok; i++) {
		char c = pat[i];
		if (c == '\\' && i + 1 < n && (pat[i + 1] == 's' || pat[i + 1] == 'S')) {
			const char *set = pat[++i] == 's' ? white_space : not_white_space;
			ok = !(!in_class && buf_add(&o, "[", 1)) && !buf_add(&o, set, strlen(set)) &&
			     !(!in_class && buf_add(&o, "]", 1));
			continue;
		}
		if (c == '\\' && i + 1 < n) {	/* any other escape, as it is */
			ok = !buf_add(&o, pat + i, 2);
			i++;
			continue;
		}
		ok = !buf_add(&o, &c, 1);
		if (!in_class && c == '[') {
			in_class = true;
			/* "[^" and a "]" right after the opening are the class's own */
			if (i + 1 < n && pat[i + 1] == '^')
				ok = ok && !buf_add(&o, pat + ++i, 1);
			if (i + 1 < n && pat[i + 1] == ']')
				ok = ok && !buf_add(&o, pat + ++i, 1);
		} else if (in_class && c == '[' && i + 1 < n && pat[i + 1] == ':') {
			const char *end = memmem(pat + i, n - i, ":]", 2);	/* [:alpha:] */
			size_t len = end ? (size_t)(end - pat - i) + 1 : 0;
			ok = ok && !buf_add(&o, pat + i + 1, len);
			i += len;
		} else if (in_class && c == ']') {
			in_class = false;
		}
	}
	if (!ok || buf_add(&o, "", 1)) {
		free(o.p);
		return NULL;
	}
	*on = o.n - 1;
	return o.p;
}

static int compile_re(struct sf_tokenizer *t, const char *pat, size_t n, bool literal, pcre2_code **re,
		      const char *where, struct sf_err *e)
{
	int ec;
	PCRE2_SIZE off;
	uint32_t opt = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : 0);
	char *ws = NULL;
	size_t nws;

	if (!literal && !(pat = ws = re_white_space(pat, n, &nws)))
		return nomem(t, e);
	*re = pcre2_compile((PCRE2_SPTR)pat, literal ? n : nws, opt, &ec, &off, NULL);
	free(ws);
	if (!*re) {
		PCRE2_UCHAR msg[128];
		pcre2_get_error_message(ec, msg, sizeof(msg));
		return FMT("%s: %s: regex at offset %zu: %s", t->path, where, (size_t)off, (char *)msg);
	}
	pcre2_jit_compile(*re, PCRE2_JIT_COMPLETE);	/* falls back to the interpreter */
	return 0;
}

static int add_norm(struct sf_tokenizer *t, json_t *n, const char *where, struct sf_err *e)
{
	char sub[64];
	const char *ty = jtype(t, n, where, e);
	if (!ty)
		return SF_EFORMAT;
	if (!strcmp(ty, "Sequence")) {
		json_t *list = json_object_get(n, "normalizers");
		size_t i;
		json_t *v;
		if (!json_is_array(list))
			return FMT("%s: %s.normalizers: not an array", t->path, where);
		json_array_foreach(list, i, v) {
			snprintf(sub, sizeof(sub), "normalizer.normalizers[%zu]", i);
			int r = add_norm(t, v, sub, e);
			if (r)
				return r;
		}
		return 0;
	}
	struct nstep s = {0};
	struct nstep *p = realloc(t->norm, (t->nnorm + 1) * sizeof(*p));
	if (!p)
		return nomem(t, e);
	t->norm = p;
	if (!strcmp(ty, "Prepend")) {
		json_t *v = json_object_get(n, "prepend");
		if (!json_is_string(v))
			return FMT("%s: %s.prepend: not a string", t->path, where);
		s.kind = N_PREPEND;
		if (!(s.a = jstr(t, v, &s.na)))
			return nomem(t, e);
	} else if (!strcmp(ty, "Replace")) {
		json_t *c = json_object_get(n, "content");
		int r = jpattern(t, json_object_get(n, "pattern"), where, &s.a, &s.na, e);
		if (r < 0)
			return r;
		if (r == 1)
			return UNSUP("%s: %s: Replace with a Regex pattern: unsupported", t->path, where);
		if (!s.na)
			return FMT("%s: %s.pattern: empty", t->path, where);
		if (!json_is_string(c))
			return FMT("%s: %s.content: not a string", t->path, where);
		s.kind = N_REPLACE;
		if (!(s.b = jstr(t, c, &s.nb)))
			return nomem(t, e);
	} else if (!strcmp(ty, "NFC")) {
		s.kind = N_NFC;
	} else {
		return UNSUP("%s: normalizer type '%s': unsupported", t->path, ty);
	}
	t->norm[t->nnorm++] = s;
	return 0;
}

/* The GPT-2 pre-tokenizer, which ByteLevel with use_regex applies. */
static const char gpt2_re[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int add_pre(struct sf_tokenizer *t, json_t *n, const char *where, struct sf_err *e)
{
	char sub[64];
	const char *ty = jtype(t, n, where, e);
	if (!ty)
		return SF_EFORMAT;
	if (!strcmp(ty, "Sequence")) {
		json_t *list = json_object_get(n, "pretokenizers");
		size_t i;
		json_t *v;
		if (!json_is_array(list))
			return FMT("%s: %s.pretokenizers: not an array", t->path, where);
		json_array_foreach(list, i, v) {
			snprintf(sub, sizeof(sub), "pre_tokenizer.pretokenizers[%zu]", i);
			int r = add_pre(t, v, sub, e);
			if (r)
				return r;
		}
		return 0;
	}
	if (t->bytelevel)
		return UNSUP("%s: %s: '%s' after ByteLevel: unsupported", t->path, where, ty);
	struct pstep s = {0};
	struct pstep *p = realloc(t->pre, (t->npre + 1) * sizeof(*p));
	if (!p)
		return nomem(t, e);
	t->pre = p;
	int r = 0;
	if (!strcmp(ty, "Metaspace")) {
		json_t *rep = json_object_get(n, "replacement");
		json_t *sch = json_object_get(n, "prepend_scheme");
		s.kind = P_METASPACE;
		if (!json_is_string(rep) || !json_string_length(rep))
			return FMT("%s: %s.replacement: not a non-empty string", t->path, where);
		if (!(s.rep = jstr(t, rep, &s.nrep)))
			return nomem(t, e);
		if (json_is_string(sch)) {
			const char *v = json_string_value(sch);
			if (!strcmp(v, "always"))
				s.scheme = S_ALWAYS;
			else if (!strcmp(v, "first"))
				s.scheme = S_FIRST;
			else if (!strcmp(v, "never"))
				s.scheme = S_NEVER;
			else
				return UNSUP("%s: %s.prepend_scheme '%s': unsupported", t->path, where, v);
		} else {
			/* tokenizers before 0.14 said add_prefix_space */
			s.scheme = jbool(n, "add_prefix_space", true) ? S_ALWAYS : S_NEVER;
		}
		s.split = jbool(n, "split", true);
	} else if (!strcmp(ty, "Split")) {
		const char *pat, *b = json_string_value(json_object_get(n, "behavior"));
		size_t np;
		s.kind = P_SPLIT;
		if ((r = jpattern(t, json_object_get(n, "pattern"), where, &pat, &np, e)) < 0)
			return r;
		if (jbool(n, "invert", false))
			return UNSUP("%s: %s: Split with invert: unsupported", t->path, where);
		if (!b)
			return FMT("%s: %s.behavior: missing or not a string", t->path, where);
		if (!strcmp(b, "Isolated"))
			s.behavior = B_ISOLATED;
		else if (!strcmp(b, "Removed"))
			s.behavior = B_REMOVED;
		else if (!strcmp(b, "MergedWithPrevious"))
			s.behavior = B_MERGED_PREV;
		else if (!strcmp(b, "MergedWithNext"))
			s.behavior = B_MERGED_NEXT;
		else
			return UNSUP("%s: %s.behavior '%s': unsupported", t->path, where, b);
		if ((r = compile_re(t, pat, np, r == 0, &s.re, where, e)))
			return r;
	} else if (!strcmp(ty, "ByteLevel")) {
		s.kind = P_BYTELEVEL;
		s.prefix_space = jbool(n, "add_prefix_space", true);
		if (jbool(n, "use_regex", true) &&
		    (r = compile_re(t, gpt2_re, sizeof(gpt2_re) - 1, false, &s.re, where, e)))
			return r;
		t->bytelevel = true;
	} else {
		return UNSUP("%s: pre_tokenizer type '%s': unsupported", t->path, ty);
	}
	t->pre[t->npre++] = s;
	return 0;
}

/* Decoder chains we take: per-token Replace / Metaspace, then ByteFallback,
 * Fuse, and Strip after Fuse; or ByteLevel alone. Other orders would need
 * a general chain that streaming cannot follow, so they are refused. */
enum { ST_MAPS, ST_BYTEFALLBACK, ST_FUSE, ST_STRIP };
static int add_dec(struct sf_tokenizer *t, json_t *n, const char *where, int *stage, struct sf_err *e)
{
	char sub[64];
	const char *ty = jtype(t, n, where, e);
	if (!ty)
		return SF_EFORMAT;
	if (!strcmp(ty, "Sequence")) {
		json_t *list = json_object_get(n, "decoders");
		size_t i;
		json_t *v;
		if (!json_is_array(list))
			return FMT("%s: %s.decoders: not an array", t->path, where);
		json_array_foreach(list, i, v) {
			snprintf(sub, sizeof(sub), "decoder.decoders[%zu]", i);
			int r = add_dec(t, v, sub, stage, e);
			if (r)
				return r;
		}
		return 0;
	}
	if (t->dec == D_BYTELEVEL)
		return UNSUP("%s: %s: '%s' after ByteLevel: unsupported", t->path, where, ty);
	int want;
	if (!strcmp(ty, "Replace") || !strcmp(ty, "Metaspace"))
		want = ST_MAPS;
	else if (!strcmp(ty, "ByteFallback"))
		want = ST_BYTEFALLBACK;
	else if (!strcmp(ty, "Fuse"))
		want = ST_FUSE;
	else if (!strcmp(ty, "Strip"))
		want = ST_STRIP;
	else if (!strcmp(ty, "ByteLevel"))
		want = -1;
	else
		return UNSUP("%s: decoder type '%s': unsupported", t->path, ty);
	if (want < 0) {
		if (t->dec == D_CHAIN)
			return UNSUP("%s: %s: ByteLevel after other decoders: unsupported", t->path, where);
		t->dec = D_BYTELEVEL;
		return 0;
	}
	if (want < *stage || (want == *stage && want != ST_MAPS) || (want == ST_STRIP && *stage != ST_FUSE))
		return UNSUP("%s: %s: '%s' in this place of the decoder chain: unsupported", t->path,
			     where, ty);
	*stage = want;
	t->dec = D_CHAIN;
	if (want == ST_BYTEFALLBACK) {
		t->dec_byte_fallback = true;
	} else if (want == ST_STRIP) {
		json_t *c = json_object_get(n, "content"), *sp = json_object_get(n, "stop");
		char buf[SF_ERR_MAX];
		int64_t start;
		int r;
		if (!json_is_string(c) || json_string_length(c) == 0)
			return FMT("%s: %s.content: not a character", t->path, where);
		if ((r = sf_json_int(n, "start", 0, 1000, &start, at(t, where, buf, sizeof(buf)), e)))
			return r;
		if (json_is_integer(sp) && json_integer_value(sp) != 0)
			return UNSUP("%s: %s: Strip with stop > 0: unsupported", t->path, where);
		if (!(t->strip = jstr(t, c, &t->nstrip)))
			return nomem(t, e);
		t->strip_start = (unsigned)start;
	} else if (want == ST_MAPS) {
		struct dmap m = {0};
		struct dmap *p = realloc(t->dmap, (t->ndmap + 1) * sizeof(*p));
		if (!p)
			return nomem(t, e);
		t->dmap = p;
		if (!strcmp(ty, "Replace")) {
			json_t *c = json_object_get(n, "content");
			int r = jpattern(t, json_object_get(n, "pattern"), where, &m.from, &m.nfrom, e);
			if (r < 0)
				return r;
			if (r == 1)
				return UNSUP("%s: %s: Replace with a Regex pattern: unsupported", t->path, where);
			if (!m.nfrom)
				return FMT("%s: %s.pattern: empty", t->path, where);
			if (!json_is_string(c))
				return FMT("%s: %s.content: not a string", t->path, where);
			m.kind = M_REPLACE;
			if (!(m.to = jstr(t, c, &m.nto)))
				return nomem(t, e);
		} else {
			json_t *rep = json_object_get(n, "replacement");
			const char *sch = json_string_value(json_object_get(n, "prepend_scheme"));
			if (!json_is_string(rep) || !json_string_length(rep))
				return FMT("%s: %s.replacement: not a non-empty string", t->path, where);
			m.kind = M_METASPACE;
			if (!(m.from = jstr(t, rep, &m.nfrom)))
				return nomem(t, e);
			m.to = " ";
			m.nto = 1;
			m.first_drop = sch ? strcmp(sch, "never") != 0 : jbool(n, "add_prefix_space", true);
		}
		t->dmap[t->ndmap++] = m;
	}
	return 0;
}

static int load_added(struct sf_tokenizer *t, json_t *list, int32_t *maxid, struct sf_err *e)
{
	size_t i;
	json_t *a;
	if (!list || json_is_null(list))
		return 0;
	if (!json_is_array(list))
		return FMT("%s: added_tokens: not an array", t->path);
	if (json_array_size(list) > SF_TOKENIZER_MAX_VOCAB)
		return sf_err_set(e, SF_ELIMIT, "%s: added_tokens: %zu entries: over the limit of %u",
				  t->path, json_array_size(list), SF_TOKENIZER_MAX_VOCAB);
	t->added = calloc(json_array_size(list) + 1, sizeof(*t->added));
	if (!t->added)
		return nomem(t, e);
	json_array_foreach(list, i, a) {
		json_t *c = json_object_get(a, "content");
		struct added *d = &t->added[t->nadded];
		char where[64], buf[SF_ERR_MAX];
		int64_t id;
		int r;
		if (!json_is_object(a))
			return FMT("%s: added_tokens[%zu]: not an object", t->path, i);
		snprintf(where, sizeof(where), "added_tokens[%zu]", i);
		if ((r = sf_json_int(a, "id", 0, SF_TOKENIZER_MAX_VOCAB - 1, &id,
				     at(t, where, buf, sizeof(buf)), e)))
			return r;
		if (!json_is_string(c) || !json_string_length(c))
			return FMT("%s: added_tokens[%zu].content: not a non-empty string", t->path, i);
		size_t n;
		d->id = (int32_t)id;
		if (!(d->s = jstr(t, c, &n)))
			return nomem(t, e);
		d->n = (uint32_t)n;
		d->special = jbool(a, "special", false);
		d->lstrip = jbool(a, "lstrip", false);
		d->rstrip = jbool(a, "rstrip", false);
		d->single_word = jbool(a, "single_word", false);
		d->normalized = jbool(a, "normalized", !d->special);
		if (id > *maxid)
			*maxid = (int32_t)id;
		t->nadded++;
	}
	return 0;
}

static int added_cmp(const void *pa, const void *pb)
{
	const struct added *a = pa, *b = pb;
	unsigned char ca = (unsigned char)a->s[0], cb = (unsigned char)b->s[0];
	if (ca != cb)
		return ca < cb ? -1 : 1;
	if (a->n != b->n)
		return a->n > b->n ? -1 : 1;
	return a->id < b->id ? -1 : a->id > b->id;
}

static int load_model(struct sf_tokenizer *t, json_t *m, int32_t *maxid, struct sf_err *e)
{
	json_t *vocab = json_object_get(m, "vocab"), *merges = json_object_get(m, "merges");
	const char *ty = json_string_value(json_object_get(m, "type"));
	const char *key;
	json_t *v;
	int r;

	if (!json_is_object(m))
		return FMT("%s: model: missing or not an object", t->path);
	/* files from before tokenizers 0.10 omit the type; a BPE has merges */
	if (ty ? strcmp(ty, "BPE") != 0 : !merges)
		return UNSUP("%s: model type '%s': unsupported (only BPE)", t->path, ty ? ty : "?");
	if (!json_is_object(vocab))
		return FMT("%s: model.vocab: missing or not an object", t->path);
	if (json_object_size(vocab) > SF_TOKENIZER_MAX_VOCAB)
		return sf_err_set(e, SF_ELIMIT, "%s: model.vocab: %zu entries: over the limit of %u",
				  t->path, json_object_size(vocab), SF_TOKENIZER_MAX_VOCAB);
	v = json_object_get(m, "dropout");
	if (json_is_number(v) && json_number_value(v) > 0)
		return UNSUP("%s: model.dropout %g: unsupported (encoding would be random)", t->path,
			     json_number_value(v));
	const char *prefix[2] = { "continuing_subword_prefix", "end_of_word_suffix" };
	for (int i = 0; i < 2; i++) {
		v = json_object_get(m, prefix[i]);
		if (v && !json_is_null(v) && !(json_is_string(v) && !json_string_length(v)))
			return UNSUP("%s: model.%s: unsupported", t->path, prefix[i]);
	}
	t->byte_fallback = jbool(m, "byte_fallback", false);
	t->fuse_unk = jbool(m, "fuse_unk", false);
	t->ignore_merges = jbool(m, "ignore_merges", false);

	json_object_foreach(vocab, key, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) >= SF_TOKENIZER_MAX_VOCAB)
			return FMT("%s: model.vocab['%s']: id not an integer in [0, %u)", t->path, key,
				   SF_TOKENIZER_MAX_VOCAB);
		if (json_integer_value(v) > *maxid)
			*maxid = (int32_t)json_integer_value(v);
	}
	t->ntok = *maxid + 1;
	t->tok = calloc((size_t)t->ntok, sizeof(*t->tok));
	if (!t->tok || smap_init(&t->vocab, json_object_size(vocab)))
		return nomem(t, e);
	if (t->bytelevel && smap_init(&t->ekey, json_object_size(vocab)))
		return nomem(t, e);
	t->emap = t->bytelevel ? &t->ekey : &t->vocab;
	void *it;
	for (it = json_object_iter(vocab); it; it = json_object_iter_next(vocab, it)) {
		size_t n = json_object_iter_key_len(it);
		int32_t id = (int32_t)json_integer_value(json_object_iter_value(it));
		key = json_object_iter_key(it);
		if (t->tok[id].s)
			return FMT("%s: model.vocab['%s']: id %d already given to '%s'", t->path, key, id,
				   t->tok[id].s);
		if (!(t->tok[id].s = arena_dup(&t->arena, key, n)))
			return nomem(t, e);
		t->tok[id].n = (uint32_t)n;
		smap_put(&t->vocab, t->tok[id].s, n, id);
		if (t->bytelevel) {
			char *k = arena_dup(&t->arena, key, n);
			size_t bn;
			if (!k)
				return nomem(t, e);
			/* unmapping never lengthens, so it can work in place; strings
			 * outside the alphabet cannot come out of the pre-tokenizer */
			if (bl_unmap(k, n, k, &bn))
				smap_put(&t->ekey, k, bn, id);
		}
	}
	/* byte fallback looks up exactly this spelling */
	for (int b = 0; b < 256; b++) {
		char name[8];
		snprintf(name, sizeof(name), "<0x%02X>", b);
		t->byte_id[b] = smap_get(&t->vocab, name, 6);
	}

	const char *unk = json_string_value(json_object_get(m, "unk_token"));
	t->unk = -1;
	if (unk && (t->unk = smap_get(&t->vocab, unk, strlen(unk))) < 0)
		return FMT("%s: model.unk_token '%s': not in model.vocab", t->path, unk);

	if (!json_is_array(merges))
		return FMT("%s: model.merges: missing or not an array", t->path);
	size_t nm = json_array_size(merges);
	if (nm > SF_TOKENIZER_MAX_MERGES)
		return sf_err_set(e, SF_ELIMIT, "%s: model.merges: %zu entries: over the limit of %u",
				  t->path, nm, SF_TOKENIZER_MAX_MERGES);
	if ((r = pmap_init(&t->merges, nm)))
		return nomem(t, e);
	struct buf cat = {0};
	size_t i;
	json_array_foreach(merges, i, v) {
		const char *a, *b;
		size_t na, nb;
		if (json_is_string(v)) {
			/* tokenizers before 0.20 wrote "a b" */
			a = json_string_value(v);
			const char *sp = memchr(a, ' ', json_string_length(v));
			if (!sp || memchr(sp + 1, ' ', json_string_length(v) - (size_t)(sp + 1 - a))) {
				r = FMT("%s: model.merges[%zu]: '%s': not two tokens separated by one space",
					t->path, i, a);
				goto out;
			}
			na = (size_t)(sp - a);
			b = sp + 1;
			nb = json_string_length(v) - na - 1;
		} else if (json_is_array(v) && json_array_size(v) == 2 &&
			   json_is_string(json_array_get(v, 0)) && json_is_string(json_array_get(v, 1))) {
			a = json_string_value(json_array_get(v, 0));
			na = json_string_length(json_array_get(v, 0));
			b = json_string_value(json_array_get(v, 1));
			nb = json_string_length(json_array_get(v, 1));
		} else {
			r = FMT("%s: model.merges[%zu]: neither a string nor a pair of strings", t->path, i);
			goto out;
		}
		int32_t ia = smap_get(&t->vocab, a, na), ib = smap_get(&t->vocab, b, nb);
		cat.n = 0;
		if (buf_add(&cat, a, na) || buf_add(&cat, b, nb)) {
			r = nomem(t, e);
			goto out;
		}
		int32_t ic = smap_get(&t->vocab, cat.p, cat.n);
		/* HF refuses such a file rather than skip the merge */
		if (ia < 0 || ib < 0) {
			r = FMT("%s: model.merges[%zu]: token '%.*s' not in model.vocab", t->path, i,
				(int)(ia < 0 ? na : nb), ia < 0 ? a : b);
			goto out;
		}
		if (ic < 0) {
			r = FMT("%s: model.merges[%zu]: merged token '%.*s' not in model.vocab", t->path, i,
				(int)cat.n, cat.p);
			goto out;
		}
		pmap_put(&t->merges, ia, ib, (uint32_t)i, ic);
	}
	r = 0;
out:
	free(cat.p);
	return r;
}

/* A token named in tokenizer_config.json: a string or {"content": ...}. */
static int config_token(struct sf_tokenizer *t, json_t *cfg, const char *cpath, const char *k,
			int32_t *id, struct sf_err *e)
{
	json_t *v = json_object_get(cfg, k);
	if (json_is_object(v))
		v = json_object_get(v, "content");
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return FMT("%s: %s: neither a string nor {\"content\": string}", cpath, k);
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	for (size_t i = 0; i < t->nadded; i++)
		if (t->added[i].n == n && !memcmp(t->added[i].s, s, n)) {
			*id = t->added[i].id;
			return 0;
		}
	if ((*id = smap_get(&t->vocab, s, n)) < 0)
		return FMT("%s: %s '%s': not a token of tokenizer.json", cpath, k, s);
	return 0;
}

static int load_post(struct sf_tokenizer *t, json_t *p, const char *where, struct sf_err *e)
{
	char sub[64];
	if (!p || json_is_null(p))
		return 0;
	const char *ty = jtype(t, p, where, e);
	if (!ty)
		return SF_EFORMAT;
	if (!strcmp(ty, "Sequence")) {
		json_t *list = json_object_get(p, "processors"), *v;
		size_t i;
		if (!json_is_array(list))
			return FMT("%s: %s.processors: not an array", t->path, where);
		json_array_foreach(list, i, v) {
			snprintf(sub, sizeof(sub), "post_processor.processors[%zu]", i);
			int r = load_post(t, v, sub, e);
			if (r)
				return r;
		}
		return 0;
	}
	if (!strcmp(ty, "ByteLevel"))
		return 0;	/* only moves offsets */
	if (strcmp(ty, "TemplateProcessing"))
		return UNSUP("%s: post_processor type '%s': unsupported", t->path, ty);
	if (t->prefix || t->suffix)
		return UNSUP("%s: %s: a second TemplateProcessing: unsupported", t->path, where);
	json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens");
	json_t *v;
	size_t i;
	bool seen_a = false;
	if (!json_is_array(single))
		return FMT("%s: %s.single: not an array", t->path, where);
	t->prefix = calloc(1, sizeof(int32_t));
	t->suffix = calloc(1, sizeof(int32_t));
	if (!t->prefix || !t->suffix)
		return nomem(t, e);
	json_array_foreach(single, i, v) {
		json_t *sp = json_object_get(v, "SpecialToken");
		if (json_is_object(json_object_get(v, "Sequence"))) {
			seen_a = true;
			continue;
		}
		const char *name = json_string_value(json_object_get(sp, "id"));
		json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
		if (!name)
			return FMT("%s: %s.single[%zu]: neither Sequence nor SpecialToken", t->path, where, i);
		if (!json_is_array(ids))
			return FMT("%s: %s.special_tokens['%s'].ids: missing or not an array", t->path,
				   where, name);
		size_t j;
		json_t *id;
		json_array_foreach(ids, j, id) {
			if (!json_is_integer(id) || json_integer_value(id) < 0 ||
			    json_integer_value(id) >= t->ntok)
				return FMT("%s: %s.special_tokens['%s'].ids[%zu]: not a token id", t->path,
					   where, name, j);
			int32_t **arr = seen_a ? &t->suffix : &t->prefix;
			size_t *cnt = seen_a ? &t->nsuffix : &t->nprefix;
			int32_t *q = realloc(*arr, (*cnt + 1) * sizeof(*q));
			if (!q)
				return nomem(t, e);
			q[(*cnt)++] = (int32_t)json_integer_value(id);
			*arr = q;
		}
	}
	return 0;
}

static int id_add(int32_t **arr, size_t *n, int32_t id, bool front)
{
	int32_t *q = realloc(*arr, (*n + 1) * sizeof(*q));
	if (!q)
		return -ENOMEM;
	if (front) {
		memmove(q + 1, q, *n * sizeof(*q));
		q[0] = id;
	} else {
		q[*n] = id;
	}
	(*n)++;
	*arr = q;
	return 0;
}

static void id_remove(int32_t *arr, size_t *n, int32_t id)
{
	size_t k = 0;
	for (size_t i = 0; i < *n; i++)
		if (arr[i] != id)
			arr[k++] = arr[i];
	*n = k;
}

static bool id_in(const int32_t *arr, size_t n, int32_t id)
{
	for (size_t i = 0; i < n; i++)
		if (arr[i] == id)
			return true;
	return false;
}

/* The chat template of tokenizer_config.json: a string, or of a list of
 * {"name", "template"} the one named "default", as transformers takes
 * it; any other shape is no template (only --conversation needs one). */
static int config_chat_template(struct sf_tokenizer *t, json_t *cfg, struct sf_err *e)
{
	json_t *v = json_object_get(cfg, "chat_template"), *it;
	size_t i, n;

	json_array_foreach(v, i, it)
		if (json_is_string(json_object_get(it, "name")) &&
		    !strcmp(json_string_value(json_object_get(it, "name")), "default"))
			v = json_object_get(it, "template");
	if (!json_is_string(v))
		return 0;
	return (t->chat_template = jstr(t, v, &n)) ? 0 : nomem(t, e);
}

/* tokenizer_config.json names BOS and EOS and the chat template, and its
 * add_bos_token / add_eos_token override the template as transformers'
 * Llama tokenizers rebuild it. */
static int load_config(struct sf_tokenizer *t, const char *cpath, const char *text, size_t len,
		       struct sf_err *e)
{
	json_t *cfg = NULL;
	int r;
	/* transformers writes "model_max_length": 1000000000000000019884624838656
	 * by default; no integer of this file is read, so all are taken as reals */
	if (text && (r = parse_json(cpath, text, len, JSON_DECODE_INT_AS_REAL, &cfg, e)))
		goto out;
	t->bos = t->eos = -1;
	if (t->nprefix)
		t->bos = t->prefix[0];
	if (cfg) {
		json_t *ab = json_object_get(cfg, "add_bos_token"), *ae = json_object_get(cfg, "add_eos_token");
		json_t *cu = json_object_get(cfg, "clean_up_tokenization_spaces");
		if ((r = config_token(t, cfg, cpath, "bos_token", &t->bos, e)) ||
		    (r = config_token(t, cfg, cpath, "eos_token", &t->eos, e)) ||
		    (r = config_chat_template(t, cfg, e)))
			goto out;
		if (ab && !json_is_boolean(ab)) {
			r = FMT("%s: add_bos_token: not true or false", cpath);
			goto out;
		}
		if (ae && !json_is_boolean(ae)) {
			r = FMT("%s: add_eos_token: not true or false", cpath);
			goto out;
		}
		if (cu && !json_is_boolean(cu)) {
			r = FMT("%s: clean_up_tokenization_spaces: not true or false", cpath);
			goto out;
		}
		t->clean_up = json_is_true(cu);	/* transformers' default: false */
		if (json_is_true(ab) && t->bos < 0) {
			r = FMT("%s: add_bos_token is true but there is no bos_token", cpath);
			goto out;
		}
		if (json_is_true(ae) && t->eos < 0) {
			r = FMT("%s: add_eos_token is true but there is no eos_token", cpath);
			goto out;
		}
		r = 0;
		if (json_is_true(ab) && !id_in(t->prefix, t->nprefix, t->bos))
			r = id_add(&t->prefix, &t->nprefix, t->bos, true);
		else if (json_is_false(ab))
			id_remove(t->prefix, &t->nprefix, t->bos);
		if (!r && json_is_true(ae) && !id_in(t->suffix, t->nsuffix, t->eos))
			r = id_add(&t->suffix, &t->nsuffix, t->eos, false);
		else if (json_is_false(ae))
			id_remove(t->suffix, &t->nsuffix, t->eos);
		if (r) {
			r = nomem(t, e);
			goto out;
		}
	}
	t->adds_bos = t->bos >= 0 && id_in(t->prefix, t->nprefix, t->bos);
out:
	json_decref(cfg);
	return r;
}

/* Builds the tokenizer from the two texts (ctext NULL: no
 * tokenizer_config.json); tpath and cpath name them in messages. */
static int open_texts(struct sf_tokenizer **tp, const char *tpath, const char *ttext, size_t tlen,
		      const char *cpath, const char *ctext, size_t clen, struct sf_err *e)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	json_t *root = NULL, *v;
	int32_t maxid = -1;
	int r;

	*tp = NULL;
	pthread_once(&once, bl_init);
	struct sf_tokenizer *t = calloc(1, sizeof(*t));
	if (!t)
		return sf_err_set(e, -ENOMEM, "%s: %s", tpath, strerror(ENOMEM));
	t->unk = t->bos = t->eos = -1;
	if (!(t->path = strdup(tpath))) {
		r = sf_err_set(e, -ENOMEM, "%s: %s", tpath, strerror(ENOMEM));
		goto fail;
	}
	if ((r = parse_json(t->path, ttext, tlen, 0, &root, e)))
		goto fail;
	if ((r = load_added(t, json_object_get(root, "added_tokens"), &maxid, e)))
		goto fail;
	v = json_object_get(root, "normalizer");
	if (v && !json_is_null(v) && (r = add_norm(t, v, "normalizer", e)))
		goto fail;
	v = json_object_get(root, "pre_tokenizer");
	if (v && !json_is_null(v) && (r = add_pre(t, v, "pre_tokenizer", e)))
		goto fail;
	int stage = ST_MAPS;
	t->dec = D_JOIN;
	v = json_object_get(root, "decoder");
	if (v && !json_is_null(v) && (r = add_dec(t, v, "decoder", &stage, e)))
		goto fail;
	if ((r = load_model(t, json_object_get(root, "model"), &maxid, e)))
		goto fail;
	for (size_t i = 0; i < t->nadded; i++) {
		struct added *a = &t->added[i];
		/* decode spells an added token by its content, as HF does */
		t->tok[a->id].s = a->s;
		t->tok[a->id].n = a->n;
		t->tok[a->id].special = a->special;
		t->any_normalized_added |= a->normalized;
	}
	if (t->nadded)	/* added is NULL without added tokens: qsort's pointer must not be */
		qsort(t->added, t->nadded, sizeof(*t->added), added_cmp);
	for (size_t i = 0, b = 0; b <= 256; b++) {
		while (i < t->nadded && (unsigned char)t->added[i].s[0] < b)
			i++;
		t->added_at[b] = i;
	}
	if ((r = load_post(t, json_object_get(root, "post_processor"), "post_processor", e)))
		goto fail;
	if ((r = load_config(t, cpath, ctext, clen, e)))
		goto fail;
	json_decref(root);
	*tp = t;
	return 0;
fail:
	json_decref(root);
	sf_tokenizer_close(t);
	return r;
}

int sf_tokenizer_open(struct sf_tokenizer **tp, const char *dir, struct sf_err *e)
{
	char *tpath = NULL, *cpath = NULL, *ttext = NULL, *ctext = NULL;
	size_t tlen = 0, clen = 0;
	int r;

	*tp = NULL;
	if (asprintf(&tpath, "%s/tokenizer.json", dir) < 0) {
		tpath = NULL;
		r = sf_err_set(e, -ENOMEM, "%s: %s", dir, strerror(ENOMEM));
		goto out;
	}
	if (asprintf(&cpath, "%s/tokenizer_config.json", dir) < 0) {
		cpath = NULL;
		r = sf_err_set(e, -ENOMEM, "%s: %s", dir, strerror(ENOMEM));
		goto out;
	}
	if ((r = sf_file_read(tpath, SF_TOKENIZER_MAX_FILE, SF_FILE_REGULAR, &ttext, &tlen, e)) ||
	    (r = sf_file_read(cpath, SF_TOKENIZER_MAX_FILE, SF_FILE_OPTIONAL | SF_FILE_REGULAR, &ctext, &clen, e)))
		goto out;
	r = open_texts(tp, tpath, ttext, tlen, cpath, ctext, clen, e);
out:
	free(ttext);
	free(ctext);
	free(tpath);
	free(cpath);
	return r;
}

int sf_tokenizer_open_mem(struct sf_tokenizer **tp, const char *name, const char *tokenizer_json,
			  size_t tlen, const char *config_json, size_t clen, struct sf_err *e)
{
	char *tpath = NULL, *cpath = NULL;
	int r;

	*tp = NULL;
	if (asprintf(&tpath, "%s: tokenizer.json", name) < 0) {
		tpath = NULL;
		r = sf_err_set(e, -ENOMEM, "%s: %s", name, strerror(ENOMEM));
		goto out;
	}
	if (asprintf(&cpath, "%s: tokenizer_config.json", name) < 0) {
		cpath = NULL;
		r = sf_err_set(e, -ENOMEM, "%s: %s", name, strerror(ENOMEM));
		goto out;
	}
	r = open_texts(tp, tpath, tokenizer_json, tlen, cpath, config_json, clen, e);
out:
	free(tpath);
	free(cpath);
	return r;
}

void sf_tokenizer_close(struct sf_tokenizer *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->npre; i++)
		pcre2_code_free(t->pre[i].re);
	smap_free(&t->vocab);
	smap_free(&t->ekey);
	pmap_free(&t->merges);
	arena_free(t->arena);
	free(t->tok);
	free(t->added);
	free(t->norm);
	free(t->pre);
	free(t->dmap);
	free(t->prefix);
	free(t->suffix);
	free(t->path);
	free(t);
}

int sf_tokenizer_check_model(const struct sf_tokenizer *t, int vocab_size, struct sf_err *e)
{
	int32_t id = vocab_size;

	if (t->ntok <= vocab_size)
		return 0;
	while (id < t->ntok - 1 && !t->tok[id].s)
		id++;	/* the lowest id beyond that names a token; the last always does */
	return sf_err_set(e, SF_EMISMATCH, "%s: token '%.*s' has id %d, beyond the model's %d "
			  "embedding rows (vocab_size)", t->path, t->tok[id].s ? (int)(t->tok[id].n < 64 ? t->tok[id].n : 64) : 0,
			  t->tok[id].s ? t->tok[id].s : "", id, vocab_size);
}

int sf_tokenizer_open_model(struct sf_tokenizer **tp, const char *dir, int vocab_size,
			    struct sf_err *e)
{
	struct sf_tokenizer *t;
	struct sf_gguf g;
	int r;

	if (!sf_gguf_probe(dir)) {
		r = sf_tokenizer_open(&t, dir, e);
	} else if (!(r = sf_gguf_open(&g, dir, e))) {
		r = sf_tokenizer_open_gguf(&t, &g, e);
		sf_gguf_close(&g);
	}
	if (tp)
		*tp = NULL;
	if (r)
		return r;
	if ((r = sf_tokenizer_check_model(t, vocab_size, e)) || !tp)
		sf_tokenizer_close(t);
	else
		*tp = t;
	return r;
}

int sf_tokenizer_vocab_size(const struct sf_tokenizer *t) { return t->ntok; }
int sf_tokenizer_bos(const struct sf_tokenizer *t) { return t->bos; }
int sf_tokenizer_eos(const struct sf_tokenizer *t) { return t->eos; }
int sf_tokenizer_adds_bos(const struct sf_tokenizer *t) { return t->adds_bos; }
const char *sf_tokenizer_chat_template(const struct sf_tokenizer *t) { return t->chat_template; }

const char *sf_tokenizer_piece(const struct sf_tokenizer *t, int32_t id, size_t *len)
{
	if (id < 0 || id >= t->ntok || !t->tok[id].s)
		return NULL;
	if (len)
		*len = t->tok[id].n;
	return t->tok[id].s;
}

int sf_tokenizer_is_special(const struct sf_tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->ntok && t->tok[id].special;
}

// ----------------------------------------------------------------------------
// Encoding

struct sym {
	int32_t id;
	int32_t prev, next;
	uint32_t len;		/* 0 once merged into its left neighbour */
};

struct cand {
	uint32_t rank, pos;
	int32_t res;
};

/* Per-call scratch, so that one tokenizer serves several threads. */
struct enc {
	const struct sf_tokenizer *t;
	struct sf_err *e;
	struct idv out;
	struct sym *sym;
	struct cand *heap;
	size_t capsym;
	struct buf norm, a, b;	/* normalized text; pre-token pieces, double-buffered */
	pcre2_match_data *md;
};

/* Pieces are stored as [u32 len][u8 first][bytes]... in a buf. */
static int piece_add(struct buf *b, const char *s, size_t n, bool first)
{
	uint32_t len = (uint32_t)n;
	if (buf_reserve(b, 5 + n))
		return -ENOMEM;
	memcpy(b->p + b->n, &len, 4);
	b->p[b->n + 4] = first;
	memcpy(b->p + b->n + 5, s, n);
	b->n += 5 + n;
	return 0;
}

static bool cand_less(const struct cand *a, const struct cand *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(struct cand *h, size_t *n, struct cand c)
{
	size_t i = (*n)++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!cand_less(&c, &h[p]))
			break;
		h[i] = h[p];
		i = p;
	}
	h[i] = c;
}

static struct cand heap_pop(struct cand *h, size_t *n)
{
	struct cand top = h[0], last = h[--(*n)];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && cand_less(&h[c + 1], &h[c]))
			c++;
		if (!cand_less(&h[c], &last))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = last;
	return top;
}

/* One pre-token through the model, as HF's BPE::merge_word and
 * Word::merge_all: symbols per character (byte fallback or unk for those
 * not in the vocabulary), then the lowest-ranked adjacent pair merged
 * first, leftmost on ties, using a heap whose stale entries are dropped
 * when popped. */
static int bpe_word(struct enc *w, const char *s, size_t n)
{
	const struct sf_tokenizer *t = w->t;
	size_t ns = 0, nh = 0;
	int32_t unk_pending = -1;

	if (!n)
		return 0;
	if (t->ignore_merges) {
		int32_t id = smap_get(t->emap, s, n);
		if (id >= 0)
			return idv_add(&w->out, id);
	}
	if (n > w->capsym) {
		free(w->sym);
		free(w->heap);
		w->capsym = n;
		w->sym = malloc(n * sizeof(*w->sym));
		/* n - 1 initial pairs and at most two new ones per merge */
		w->heap = malloc(3 * n * sizeof(*w->heap));
		if (!w->sym || !w->heap) {
			w->capsym = 0;
			return -ENOMEM;
		}
	}
	for (size_t i = 0; i < n;) {
		size_t cl = t->bytelevel ? 1 : char_len(s + i, n - i);
		int32_t id = smap_get(t->emap, s + i, cl);
		if (id >= 0) {
			if (unk_pending >= 0)
				w->sym[ns++] = (struct sym){ unk_pending, 0, 0, 1 };
			unk_pending = -1;
			w->sym[ns++] = (struct sym){ id, 0, 0, (uint32_t)cl };
		} else {
			bool all = t->byte_fallback;
			for (size_t k = 0; all && k < cl; k++)
				all = t->byte_id[(unsigned char)s[i + k]] >= 0;
			if (all) {
				if (unk_pending >= 0)
					w->sym[ns++] = (struct sym){ unk_pending, 0, 0, 1 };
				unk_pending = -1;
				for (size_t k = 0; k < cl; k++)
					w->sym[ns++] = (struct sym){ t->byte_id[(unsigned char)s[i + k]], 0, 0, 1 };
			} else if (t->unk >= 0) {
				if (unk_pending >= 0 && !t->fuse_unk)
					w->sym[ns++] = (struct sym){ unk_pending, 0, 0, 1 };
				unk_pending = t->unk;
			}
			/* with neither, HF drops the character: so do we */
		}
		i += cl;
	}
	if (unk_pending >= 0)
		w->sym[ns++] = (struct sym){ unk_pending, 0, 0, 1 };
	for (size_t i = 0; i < ns; i++) {
		w->sym[i].prev = (int32_t)i - 1;
		w->sym[i].next = i + 1 < ns ? (int32_t)i + 1 : -1;
	}
	for (size_t i = 0; i + 1 < ns; i++) {
		struct cand c = { 0, (uint32_t)i, 0 };
		if (pmap_get(&t->merges, w->sym[i].id, w->sym[i + 1].id, &c.rank, &c.res))
			heap_push(w->heap, &nh, c);
	}
	while (nh) {
		struct cand top = heap_pop(w->heap, &nh);
		struct sym *a = &w->sym[top.pos];
		uint32_t rank;
		int32_t res;
		if (!a->len || a->next < 0)
			continue;
		struct sym *b = &w->sym[a->next];
		if (!pmap_get(&t->merges, a->id, b->id, &rank, &res) || res != top.res)
			continue;
		a->id = res;
		a->len += b->len;
		b->len = 0;
		a->next = b->next;
		if (a->next >= 0)
			w->sym[a->next].prev = (int32_t)top.pos;
		struct cand c;
		if (a->prev >= 0 && pmap_get(&t->merges, w->sym[a->prev].id, a->id, &c.rank, &c.res)) {
			c.pos = (uint32_t)a->prev;
			heap_push(w->heap, &nh, c);
		}
		if (a->next >= 0 && pmap_get(&t->merges, a->id, w->sym[a->next].id, &c.rank, &c.res)) {
			c.pos = top.pos;
			heap_push(w->heap, &nh, c);
		}
	}
	for (size_t i = 0; i < ns; i++)
		if (w->sym[i].len && idv_add(&w->out, w->sym[i].id))
			return -ENOMEM;
	return 0;
}

/* Cuts one piece at the matches of re as the Split behaviour says. */
static int split_re(struct enc *w, pcre2_code *re, int behavior, const char *s, size_t n, bool first,
		    struct buf *o)
{
	size_t pos = 0, prev = 0;
	if (!w->md && !(w->md = pcre2_match_data_create(1, NULL)))
		return -ENOMEM;
	while (pos < n) {
		int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, 0, w->md, NULL);
		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0) {
			PCRE2_UCHAR msg[128];
			pcre2_get_error_message(rc, msg, sizeof(msg));
			return sf_err_set(w->e, SF_EFORMAT, "%s: pre_tokenizer: regex match: %s",
					  w->t->path, (char *)msg);
		}
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
		size_t ms = ov[0], me = ov[1];
		if (me <= ms) {	/* HF drops empty pieces */
			pos = ms + char_len(s + ms, n - ms);
			continue;
		}
		/* where the piece before the match ends, and where the next begins */
		size_t end = behavior == B_MERGED_PREV ? me : ms;
		if (end > prev && piece_add(o, s + prev, end - prev, first && prev == 0))
			return -ENOMEM;
		if (behavior == B_ISOLATED && piece_add(o, s + ms, me - ms, first && ms == 0))
			return -ENOMEM;
		prev = behavior == B_MERGED_NEXT ? ms : me;
		pos = me;
	}
	if (n > prev && piece_add(o, s + prev, n - prev, first && prev == 0))
		return -ENOMEM;
	return 0;
}

static int pre_step(struct enc *w, const struct pstep *p, const char *s, size_t n, bool first,
		    struct buf *o)
{
	if (p->kind == P_SPLIT)
		return split_re(w, p->re, p->behavior, s, n, first, o);
	if (p->kind == P_BYTELEVEL) {
		struct buf tmp = {0};
		int r;
		if (p->prefix_space && (n == 0 || s[0] != ' ')) {
			if (buf_add(&tmp, " ", 1) || buf_add(&tmp, s, n)) {
				free(tmp.p);
				return -ENOMEM;
			}
			s = tmp.p;
			n = tmp.n;
		}
		r = p->re ? split_re(w, p->re, B_ISOLATED, s, n, first, o) : piece_add(o, s, n, first);
		free(tmp.p);
		return r;
	}
	/* Metaspace: spaces to the replacement, prepend by the scheme, then
	 * cut before every replacement */
	struct buf m = {0};
	int r = -ENOMEM;
	bool pre = p->scheme == S_ALWAYS || (p->scheme == S_FIRST && first);
	for (size_t i = 0; i < n; i++)
		if (s[i] == ' ' ? buf_add(&m, p->rep, p->nrep) : buf_add(&m, s + i, 1))
			goto out;
	if (pre && !(m.n >= p->nrep && !memcmp(m.p, p->rep, p->nrep))) {
		if (buf_reserve(&m, p->nrep))
			goto out;
		memmove(m.p + p->nrep, m.p, m.n);
		memcpy(m.p, p->rep, p->nrep);
		m.n += p->nrep;
	}
	if (!p->split) {
		r = m.n ? piece_add(o, m.p, m.n, first) : 0;
		goto out;
	}
	size_t prev = 0;
	for (size_t i = 1; i + p->nrep <= m.n; i++)
		if (!memcmp(m.p + i, p->rep, p->nrep)) {
			if (piece_add(o, m.p + prev, i - prev, first && prev == 0))
				goto out;
			prev = i;
		}
	r = m.n > prev ? piece_add(o, m.p + prev, m.n - prev, first && prev == 0) : 0;
out:
	free(m.p);
	return r;
}

/* Pre-tokenizes a normalized piece and runs each pre-token through BPE. */
static int encode_pretok(struct enc *w, const char *s, size_t n, bool first)
{
	const struct sf_tokenizer *t = w->t;
	int r;
	if (!t->npre)
		return bpe_word(w, s, n);
	w->a.n = 0;
	if ((r = piece_add(&w->a, s, n, first)))
		return r;
	for (size_t k = 0; k < t->npre; k++) {
		w->b.n = 0;
		for (size_t off = 0; off < w->a.n;) {
			uint32_t len;
			memcpy(&len, w->a.p + off, 4);
			if ((r = pre_step(w, &t->pre[k], w->a.p + off + 5, len, w->a.p[off + 4], &w->b)))
				return r;
			off += 5 + len;
		}
		struct buf x = w->a;
		w->a = w->b;
		w->b = x;
	}
	for (size_t off = 0; off < w->a.n;) {
		uint32_t len;
		memcpy(&len, w->a.p + off, 4);
		if ((r = bpe_word(w, w->a.p + off + 5, len)))
			return r;
		off += 5 + len;
	}
	return 0;
}

static bool word_byte(unsigned char c)
{
	/* non-ASCII counts as a word character: most of it is letters */
	return c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

static bool space_byte(unsigned char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

static int encode_text(struct enc *w, const char *s, size_t n, bool first);

/* Splits s at the added tokens (leftmost, longest first, as HF's
 * Aho-Corasick does) of one kind, normalized or not, handing the text
 * between them to next. */
static int split_added(struct enc *w, const char *s, size_t n, bool first, bool normalized)
{
	const struct sf_tokenizer *t = w->t;
	size_t start = 0, i = 0;
	int r;
	while (i < n) {
		unsigned char c = (unsigned char)s[i];
		const struct added *hit = NULL;
		for (size_t k = t->added_at[c]; k < t->added_at[c + 1]; k++) {
			const struct added *a = &t->added[k];
			if (a->normalized == normalized && a->n <= n - i && !memcmp(s + i, a->s, a->n)) {
				hit = a;
				break;
			}
		}
		if (!hit) {
			i++;
			continue;
		}
		size_t st = i, sp = i + hit->n;
		i = sp;
		if (hit->single_word && ((st > 0 && word_byte((unsigned char)s[st - 1])) ||
					 (sp < n && word_byte((unsigned char)s[sp]))))
			continue;
		if (hit->lstrip)
			while (st > start && space_byte((unsigned char)s[st - 1]))
				st--;
		if (hit->rstrip)
			while (sp < n && space_byte((unsigned char)s[sp]))
				sp++;
		if (st > start) {
			r = normalized ? encode_pretok(w, s + start, st - start, first && start == 0)
				       : encode_text(w, s + start, st - start, first && start == 0);
			if (r)
				return r;
		}
		if ((r = idv_add(&w->out, hit->id)))
			return r;
		start = i = sp;
	}
	if (n > start)
		return normalized ? encode_pretok(w, s + start, n - start, first && start == 0)
				  : encode_text(w, s + start, n - start, first && start == 0);
	return 0;
}

/* NFC of s[0, n) appended to o, by utf8proc (Unicode's own composition
 * tables). Bytes that are not UTF-8 are kept as they are, and the valid
 * runs between them normalized each. */
static int nfc_append(struct buf *o, const char *s, size_t n)
{
	size_t i = 0, bad;

	while (i < n) {
		size_t j = i;
		while (j < n && utf8_seq((const unsigned char *)s + j, n - j, &bad) > 0)
			j += (size_t)utf8_seq((const unsigned char *)s + j, n - j, &bad);
		if (j > i) {
			utf8proc_uint8_t *out = NULL;
			utf8proc_ssize_t len = utf8proc_map((const utf8proc_uint8_t *)s + i,
							    (utf8proc_ssize_t)(j - i), &out,
							    UTF8PROC_STABLE | UTF8PROC_COMPOSE);
			if (len < 0)
				return len == UTF8PROC_ERROR_NOMEM ? -ENOMEM : -EINVAL;
			int r = buf_add(o, (const char *)out, (size_t)len);
			free(out);
			if (r)
				return -ENOMEM;
		}
		if (j < n && buf_add(o, s + j, 1))
			return -ENOMEM;
		i = j + (j < n);
	}
	return 0;
}

/* The text between two non-normalized added tokens: normalizer, then the
 * normalized added tokens, then pre-tokenizer and model. */
static int encode_text(struct enc *w, const char *s, size_t n, bool first)
{
	const struct sf_tokenizer *t = w->t;
	struct buf *o = &w->norm, x = {0};
	/* chained Replace steps could grow the text without bound */
	uint64_t limit = 16 * (uint64_t)n + 4096;
	size_t k = 0;
	if (t->nnorm) {
		o->n = 0;
		if (buf_add(o, s, n))
			return -ENOMEM;
		for (k = 0; k < t->nnorm; k++) {
			const struct nstep *st = &t->norm[k];
			x.n = 0;
			if (st->kind == N_PREPEND) {
				if (!o->n)
					continue;	/* HF prepends to non-empty text only */
				if (buf_add(&x, st->a, st->na) || buf_add(&x, o->p, o->n))
					goto nomem;
			} else if (st->kind == N_REPLACE) {
				for (size_t i = 0; i < o->n;) {
					if (i + st->na <= o->n && !memcmp(o->p + i, st->a, st->na)) {
						if (buf_add(&x, st->b, st->nb))
							goto nomem;
						if (x.n > limit)
							goto too_long;
						i += st->na;
					} else {
						if (buf_add(&x, o->p + i, 1))
							goto nomem;
						i++;
					}
				}
			} else {
				int r = nfc_append(&x, o->p, o->n);
				if (r == -ENOMEM)
					goto nomem;
				if (r) {
					free(x.p);
					return sf_err_set(w->e, SF_EFORMAT, "%s: normalizer NFC: text "
							  "utf8proc cannot normalize", t->path);
				}
			}
			if (x.n > limit)
				goto too_long;
			struct buf y = *o;
			*o = x;
			x = y;
		}
		free(x.p);
		/* w->norm is not touched again below: the normalized added
		 * tokens go straight to the pre-tokenizer */
		s = o->p;
		n = o->n;
	}
	return t->any_normalized_added ? split_added(w, s, n, first, true) : encode_pretok(w, s, n, first);
nomem:
	free(x.p);
	return -ENOMEM;
too_long:
	free(x.p);
	return sf_err_set(w->e, SF_ELIMIT, "%s: normalizer step %zu makes over %llu bytes of "
			  "%zu: over the limit of 16 times the text plus 4 KiB", t->path, k + 1,
			  (unsigned long long)limit, n);
}

int sf_tokenizer_encode(const struct sf_tokenizer *t, const char *text, size_t len, int add_special,
			int32_t **ids, size_t *n, struct sf_err *e)
{
	struct enc w = { .t = t, .e = e };
	int r = 0;
	*ids = NULL;
	*n = 0;
	if (add_special)
		for (size_t i = 0; !r && i < t->nprefix; i++)
			r = idv_add(&w.out, t->prefix[i]);
	if (!r && len)
		r = split_added(&w, text, len, true, false);
	if (add_special)
		for (size_t i = 0; !r && i < t->nsuffix; i++)
			r = idv_add(&w.out, t->suffix[i]);
	if (!r && !w.out.p)
		r = idv_add(&w.out, 0);	/* a valid pointer even for no ids */
	else if (!r)
		*n = w.out.n;
	if (r == -ENOMEM)
		sf_err_set(e, r, "%s: encode: %s", t->path, strerror(ENOMEM));
	if (r) {
		free(w.out.p);
		*n = 0;
	} else {
		*ids = w.out.p;
	}
	free(w.sym);
	free(w.heap);
	free(w.norm.p);
	free(w.a.p);
	free(w.b.p);
	pcre2_match_data_free(w.md);
	return r;
}

// ----------------------------------------------------------------------------
// Decoding: one engine for whole and streaming decode

static int grow(char **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 64;
	while (c < need)
		c *= 2;
	char *q = realloc(*p, c);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

void sf_detok_init(struct sf_detok *d, const struct sf_tokenizer *t, int flags)
{
	memset(d, 0, sizeof(*d));
	d->t = t;
	d->flags = flags;
	d->strip_left = t->strip ? t->strip_start : 0;
}

void sf_detok_free(struct sf_detok *d)
{
	if (!d)
		return;
	free(d->hold);
	free(d->out);
	free(d->tmp);
	free(d->tmp2);
	free(d->pend);
	d->hold = NULL;
	d->out = d->tmp = d->tmp2 = d->pend = NULL;
	d->nhold = d->caphold = d->nout = d->capout = d->captmp = d->captmp2 = 0;
	d->npend = d->cappend = 0;
}

/* Output after Strip: the Fuse before it makes the whole text one token,
 * so only its start loses content characters. */
static int dt_emit(struct sf_detok *d, const char *s, size_t n)
{
	const struct sf_tokenizer *t = d->t;
	while (d->strip_left && n >= t->nstrip && !memcmp(s, t->strip, t->nstrip)) {
		s += t->nstrip;
		n -= t->nstrip;
		d->strip_left--;
	}
	if (n)
		d->strip_left = 0;
	if (grow(&d->out, &d->capout, d->nout + n + 1))
		return -ENOMEM;
	memcpy(d->out + d->nout, s, n);
	d->nout += n;
	return 0;
}

static const char fffd[] = "\xEF\xBF\xBD";

/* A finished run of <0xNN> tokens: its text when it is valid UTF-8 as a
 * whole, else one U+FFFD per byte (HF's ByteFallback). */
static int dt_flush_run(struct sf_detok *d)
{
	size_t bad, i = 0;
	int r = 0;
	while (i < d->nhold) {
		int w = utf8_seq(d->hold + i, d->nhold - i, &bad);
		if (w <= 0)
			break;
		i += (size_t)w;
	}
	if (i == d->nhold)
		r = dt_emit(d, (const char *)d->hold, d->nhold);
	else
		for (i = 0; !r && i < d->nhold; i++)
			r = dt_emit(d, fffd, 3);
	d->nhold = 0;
	return r;
}

/* Byte-level text out: valid characters as they are, each maximal
 * invalid subpart as one U+FFFD (String::from_utf8_lossy); an incomplete
 * character at the end waits for more unless final. */
static int dt_drain_lossy(struct sf_detok *d, bool final)
{
	size_t i = 0, good = 0, bad;
	int r;
	while (i < d->nhold) {
		int w = utf8_seq(d->hold + i, d->nhold - i, &bad);
		if (w > 0) {
			i += (size_t)w;
			continue;
		}
		if (w < 0 && !final)
			break;
		if ((r = dt_emit(d, (const char *)d->hold + good, i - good)) || (r = dt_emit(d, fffd, 3)))
			return r;
		i += w < 0 ? d->nhold - i : bad;
		good = i;
	}
	if ((r = dt_emit(d, (const char *)d->hold + good, i - good)))
		return r;
	memmove(d->hold, d->hold + i, d->nhold - i);
	d->nhold -= i;
	return 0;
}

static int hold_add(struct sf_detok *d, const void *s, size_t n)
{
	if (grow((char **)&d->hold, &d->caphold, d->nhold + n))
		return -ENOMEM;
	memcpy(d->hold + d->nhold, s, n);
	d->nhold += n;
	return 0;
}

/* The per-token decoders (Replace, Metaspace) into d->tmp. */
static int dt_maps(struct sf_detok *d, const char *s, size_t n, size_t index, const char **o, size_t *on)
{
	const struct sf_tokenizer *t = d->t;
	*o = s;
	*on = n;
	for (size_t k = 0; k < t->ndmap; k++) {
		const struct dmap *m = &t->dmap[k];
		const char *in = *o;
		size_t nin = *on, j = 0;
		/* the worst case: every byte starts a match that grows */
		size_t need = nin * (m->nto > m->nfrom ? m->nto : 1) + 1;
		char **sp = *o == d->tmp ? &d->tmp2 : &d->tmp;
		size_t *cp = sp == &d->tmp ? &d->captmp : &d->captmp2;
		if (grow(sp, cp, need))
			return -ENOMEM;
		char *scratch = *sp;
		for (size_t i = 0; i < nin;) {
			if (i + m->nfrom <= nin && !memcmp(in + i, m->from, m->nfrom)) {
				if (!(m->first_drop && index == 0)) {
					memcpy(scratch + j, m->to, m->nto);
					j += m->nto;
				}
				i += m->nfrom;
			} else {
				scratch[j++] = in[i++];
			}
		}
		*o = scratch;
		*on = j;
	}
	return 0;
}

/* transformers' clean_up_tokenization: each in turn, every " ." made "."
 * left to right, then " ?" and so on (Python's str.replace), " ' " made
 * "'". */
static size_t clean_up(char *s, size_t n)
{
	/* each pattern's replacement is itself without its spaces */
	static const char *const pats[] = { " .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's",
					    " 've", " 're" };

	for (size_t k = 0; k < sizeof(pats) / sizeof(pats[0]); k++) {
		size_t m = strlen(pats[k]), w = 0;
		for (size_t i = 0; i < n;) {
			if (i + m <= n && !memcmp(s + i, pats[k], m)) {
				for (size_t j = 0; j < m; j++)
					if (pats[k][j] != ' ')
						s[w++] = pats[k][j];
				i += m;
			} else {
				s[w++] = s[i++];
			}
		}
		n = w;
	}
	return n;
}

/* clean_up_tokenization_spaces on the output: what this call decoded joins
 * the text held back; the part before the last space that no later text
 * can join a pattern with is cleaned and given out, the rest held (all of
 * it given out when final). The space must follow a character that ends
 * no pattern's beginning: not a space or "'" (" ' ") and not a lone "n"
 * (" n't" once " ' " became "'"); "'v" and "'r" could only go on with an
 * "e", which no cleaned text starts with (each pattern begins with a
 * space and only loses its spaces). So the text given out is, piece after
 * piece, the whole text's clean-up. */
static int dt_clean_up(struct sf_detok *d, bool final)
{
	size_t cut = final ? d->npend + d->nout : 0;

	if (grow(&d->pend, &d->cappend, d->npend + d->nout + 1))
		return -ENOMEM;
	if (d->nout)	/* out is NULL before any output */
		memcpy(d->pend + d->npend, d->out, d->nout);
	d->npend += d->nout;
	for (size_t c = d->npend; !final && c-- > 1;) {
		const char *p = d->pend;
		if (p[c] == ' ' && p[c - 1] != ' ' && p[c - 1] != '\'' &&
		    !(p[c - 1] == 'n' && (c == 1 || p[c - 2] == ' '))) {
			cut = c;
			break;
		}
	}
	if (grow(&d->out, &d->capout, cut + 1))
		return -ENOMEM;
	memcpy(d->out, d->pend, cut);
	d->nout = clean_up(d->out, cut);
	memmove(d->pend, d->pend + cut, d->npend - cut);
	d->npend -= cut;
	return 0;
}

static bool byte_token(const char *s, size_t n, unsigned char *b)
{
	static const char hex[] = "0123456789ABCDEF0123456789abcdef";
	if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
		return false;
	const char *h = memchr(hex, s[3], 32), *l = memchr(hex, s[4], 32);
	if (!h || !l || !s[3] || !s[4])
		return false;
	*b = (unsigned char)(((h - hex) & 15) << 4 | ((l - hex) & 15));
	return true;
}

int sf_detok_push(struct sf_detok *d, int32_t id, const char **out, size_t *len)
{
	const struct sf_tokenizer *t = d->t;
	int r = 0;
	d->nout = 0;
	*out = "";
	*len = 0;
	if (id < 0 || id >= t->ntok || !t->tok[id].s)
		return 0;
	if ((d->flags & SF_DECODE_SKIP_SPECIAL) && t->tok[id].special)
		return 0;
	const char *s = t->tok[id].s;
	size_t n = t->tok[id].n, index = d->ntokens++;
	if (t->dec == D_JOIN) {
		if ((index && (r = dt_emit(d, " ", 1))) || (r = dt_emit(d, s, n)))
			return r;
	} else if (t->dec == D_BYTELEVEL) {
		if (grow(&d->tmp, &d->captmp, n + 1))
			return -ENOMEM;
		size_t bn;
		if (!bl_unmap(s, n, d->tmp, &bn)) {
			memcpy(d->tmp, s, n);	/* HF keeps such a token's own bytes */
			bn = n;
		}
		if ((r = hold_add(d, d->tmp, bn)) || (r = dt_drain_lossy(d, false)))
			return r;
	} else {
		unsigned char b;
		if ((r = dt_maps(d, s, n, index, &s, &n)))
			return r;
		if (t->dec_byte_fallback && byte_token(s, n, &b)) {
			if ((r = hold_add(d, &b, 1)))
				return r;
		} else {
			if (d->nhold && (r = dt_flush_run(d)))
				return r;
			if ((r = dt_emit(d, s, n)))
				return r;
		}
	}
	if (t->clean_up && (r = dt_clean_up(d, false)))
		return r;
	*out = d->out ? d->out : "";
	*len = d->nout;
	return 0;
}

int sf_detok_finish(struct sf_detok *d, const char **out, size_t *len)
{
	int r = 0;
	d->nout = 0;
	*out = "";
	*len = 0;
	if (d->nhold)
		r = d->t->dec == D_BYTELEVEL ? dt_drain_lossy(d, true) : dt_flush_run(d);
	if (!r && d->t->clean_up)
		r = dt_clean_up(d, true);
	if (r)
		return r;
	*out = d->out ? d->out : "";
	*len = d->nout;
	return 0;
}

int sf_tokenizer_decode(const struct sf_tokenizer *t, const int32_t *ids, size_t n, int flags,
			char **out, size_t *len, struct sf_err *e)
{
	struct sf_detok d;
	struct buf b = {0};
	const char *p;
	size_t k;
	int r = 0;

	*out = NULL;
	*len = 0;
	sf_detok_init(&d, t, flags);
	for (size_t i = 0; !r && i <= n; i++) {
		r = i < n ? sf_detok_push(&d, ids[i], &p, &k) : sf_detok_finish(&d, &p, &k);
		if (!r)
			r = buf_add(&b, p, k);
	}
	if (!r)
		r = buf_add(&b, "", 1);
	sf_detok_free(&d);
	if (r) {
		free(b.p);
		return sf_err_set(e, r, "%s: decode: %s", t->path, strerror(-r));
	}
	*out = b.p;
	*len = b.n - 1;
	return 0;
}

int sf_tokenizer_open_image(struct sf_tokenizer **t, const struct sf_image *img,
			    struct sf_err *e)
{
	int r = sf_tokenizer_open_mem(t, img->path, img->tokenizer_text, img->tokenizer_len,
				      img->tokenizer_config_text, img->tokenizer_config_len, e);

	if (!r && (r = sf_tokenizer_check_model(*t, img->cfg.vocab_size, e))) {
		sf_tokenizer_close(*t);
		*t = NULL;
	}
	return r;
}
