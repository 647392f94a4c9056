/* Hugging Face tokenizer.json for BPE models read into struct
 * sf_tokenizer (tokenizer_impl.h): added tokens, the normalizer and
 * pre-tokenizer steps, the vocabulary and rank-ordered merges with byte
 * fallback or the byte-level alphabet, the post-processor's BOS/EOS, the
 * decoder chain, tokenizer_config.json; the accessors. Encoding is
 * tokenizer_encode.c, decoding tokenizer_decode.c. See tokenizer.h. */
#include "engine/tokenizer_impl.h"
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
// GPT-2 byte-level alphabet: every byte as a printable code point

static uint16_t bl_byte2cp[256];
int16_t sf_tok_cp2byte[324];

static void bl_init(void)
{
	int extra = 0;
	for (int b = 0; b < 256; b++) {
		bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
		bl_byte2cp[b] = (uint16_t)(keep ? b : 256 + extra++);
	}
	for (int i = 0; i < 324; i++)
		sf_tok_cp2byte[i] = -1;
	for (int b = 0; b < 256; b++)
		sf_tok_cp2byte[bl_byte2cp[b]] = (int16_t)b;
}

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
