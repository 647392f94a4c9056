/* A GGUF's tokenizer (tokenizer.ggml.* and tokenizer.chat_template) as the
 * tokenizer.json and tokenizer_config.json that encode the same text into
 * the same ids as llama.cpp, for the tokenizer we have (tokenizer.c).
 *
 * "llama" is llama.cpp's SentencePiece BPE: the text's spaces as U+2581,
 * one more in front (add_space_prefix), then the adjacent pair whose
 * joined piece is a token with the highest score merged first, leftmost
 * first among equals, pieces that are no token spelled by their bytes.
 * That is a BPE whose merges are every split of a token into two tokens,
 * ranked by the joined token's score, with byte fallback. "gpt2" is
 * byte-level BPE with the file's merges, split first by the regex llama.cpp
 * gives its tokenizer.ggml.pre. */
#include "engine/tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "formats/gguf.h"

/* llama.cpp's token types (llama_token_type) */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5,
       TT_BYTE = 6 };

/* The split regexes of the pre-tokenizers we take (llama-vocab.cpp's
 * llm_tokenizer_bpe), and how each decodes: llama.cpp cleans up spaces
 * before punctuation except where it says not to. */
static const struct {
	const char *const *names;	/* tokenizer.ggml.pre values, NULL-ended */
	const char *regex;
	int ignore_merges, clean_up, add_bos;
} pres[] = {
	{ (const char *const[]){ "llama3", "llama-v3", "llama-bpe", "dbrx", "smaug-bpe", NULL },
	  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
	  "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", 1, 1, 1 },
	{ (const char *const[]){ "qwen2", "deepseek-r1-qwen", NULL },
	  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
	  "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", 0, 0, 0 },
	{ (const char *const[]){ "gpt-2", "phi-2", "mpt", "olmo", NULL },
	  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", 0, 1, 0 },
	/* o200k (gpt-oss, GPT-4o) as llama.cpp writes it: a letter not a-z for
	 * o200k's upper-case classes, one not A-Z for its lower-case ones */
	{ (const char *const[]){ "gpt-4o", "llama4", NULL },
	  "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
	  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
	  "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*"
	  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
	  "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", 0, 0, 0 },
};

struct gtok {
	const struct sf_gguf *g;
	const struct sf_gguf_kv *tokens, *types, *scores, *merges;
	json_t *vocab;		/* piece -> id, the first id of a piece spelled twice */
	struct sf_err *e;
};

static int nomem(const struct gtok *G)
{
	return sf_err_set(G->e, -ENOMEM, "%s: tokenizer: out of memory", G->g->path);
}

static int type_of(const struct gtok *G, uint64_t id)
{
	return G->types ? sf_gguf_arr_i32(G->types, id) : TT_NORMAL;
}

/* An optional key: 0 and *out set, 0 and *out untouched when absent. */
static int opt_bool(const struct gtok *G, const char *key, int *out)
{
	int r = sf_gguf_get_bool(G->g, key, out, G->e);
	return r == -ENOENT ? 0 : r;
}

static int opt_token(const struct gtok *G, const char *key, int64_t *out)
{
	uint32_t v;
	int r = sf_gguf_get_u32(G->g, key, &v, G->e);

	if (r == -ENOENT)
		return 0;
	if (r)
		return r;
	if (v >= G->tokens->n)
		return sf_err_set(G->e, SF_EFORMAT, "%s: key '%s': %u, beyond the %llu tokens",
				  G->g->path, key, v, (unsigned long long)G->tokens->n);
	*out = v;
	return 0;
}

/* An optional array of one value per token: *kv NULL when absent. */
static int per_token(const struct gtok *G, const char *key, enum sf_gguf_vtype type,
		     const struct sf_gguf_kv **kv)
{
	int r = sf_gguf_get_arr(G->g, key, type, kv, G->e);

	if (r == -ENOENT)
		*kv = NULL;
	else if (r)
		return r;
	else if ((*kv)->n != G->tokens->n)
		return sf_err_set(G->e, SF_EFORMAT, "%s: key '%s': %llu values for %llu tokens",
				  G->g->path, key, (unsigned long long)(*kv)->n,
				  (unsigned long long)G->tokens->n);
	return 0;
}

static json_t *piece(const struct gtok *G, uint64_t id)
{
	uint64_t n;
	const char *s = sf_gguf_arr_str(G->tokens, id, &n);
	return json_stringn(s, n);
}

/* The vocabulary, and the control, user-defined and unknown tokens as
 * added tokens (matched in the text before it is split, as llama.cpp
 * partitions it; user-defined ones are text, the others special). */
static int load_vocab(struct gtok *G, json_t *added)
{
	uint64_t n = G->tokens->n;

	if (!(G->vocab = json_object()))
		return nomem(G);
	for (uint64_t id = 0; id < n; id++) {
		uint64_t len;
		const char *s = sf_gguf_arr_str(G->tokens, id, &len);
		int type = type_of(G, id);
		json_t *p = memchr(s, 0, len) ? NULL : json_stringn(s, len);

		if (!p)
			return sf_err_set(G->e, SF_EFORMAT, "%s: key 'tokenizer.ggml.tokens': token "
					  "%llu: not UTF-8 text", G->g->path, (unsigned long long)id);
		json_decref(p);
		if (!json_object_getn(G->vocab, s, len) &&
		    json_object_setn_new(G->vocab, s, len, json_integer((json_int_t)id)))
			return nomem(G);
		if (type != TT_CONTROL && type != TT_USER_DEFINED && type != TT_UNKNOWN)
			continue;
		json_t *a = json_pack("{s:I, s:o, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)id,
				      "content", piece(G, id), "single_word", 0, "lstrip", 0,
				      "rstrip", 0, "normalized", 0, "special",
				      type != TT_USER_DEFINED);
		if (!a || json_array_append_new(added, a))
			return nomem(G);
	}
	return 0;
}

struct cand {
	float score;
	uint32_t id, split;	/* the joined token, and its first piece's bytes */
};

static int cand_cmp(const void *pa, const void *pb)
{
	const struct cand *a = pa, *b = pb;

	if (a->score != b->score)
		return a->score > b->score ? -1 : 1;
	if (a->id != b->id)
		return a->id < b->id ? -1 : 1;
	return a->split < b->split ? -1 : a->split > b->split;
}

/* SentencePiece's merges: every split of a token at a character boundary
 * into two tokens, the highest scores first. */
static int spm_merges(struct gtok *G, json_t *merges)
{
	struct cand *c = NULL;
	size_t nc = 0, cap = 0;
	int r = 0;

	for (uint64_t id = 0; id < G->tokens->n; id++) {
		uint64_t len;
		const char *s = sf_gguf_arr_str(G->tokens, id, &len);
		json_t *v = json_object_getn(G->vocab, s, len);

		if (!v || (uint64_t)json_integer_value(v) != id)
			continue;	/* a second spelling of a piece is never formed */
		for (uint64_t k = 1; k < len; k++) {
			if (((unsigned char)s[k] & 0xC0) == 0x80)
				continue;	/* inside a character */
			if (!json_object_getn(G->vocab, s, k) ||
			    !json_object_getn(G->vocab, s + k, len - k))
				continue;
			if (nc == cap) {
				struct cand *n = realloc(c, (cap = cap ? 2 * cap : 4096) * sizeof(*c));
				if (!n) {
					r = nomem(G);
					goto out;
				}
				c = n;
			}
			c[nc++] = (struct cand){ sf_gguf_arr_f32(G->scores, id), (uint32_t)id,
						 (uint32_t)k };
		}
	}
	if (nc)
		qsort(c, nc, sizeof(*c), cand_cmp);
	for (size_t i = 0; i < nc; i++) {
		uint64_t len;
		const char *s = sf_gguf_arr_str(G->tokens, c[i].id, &len);
		json_t *m = json_pack("[s%, s%]", s, (size_t)c[i].split, s + c[i].split,
				      (size_t)(len - c[i].split));
		if (!m || json_array_append_new(merges, m)) {
			r = nomem(G);
			goto out;
		}
	}
out:
	free(c);
	return r;
}

static json_t *replace(const char *from, const char *to)
{
	return json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "String", from,
			 "content", to);
}

/* tokenizer.json of a "llama" vocabulary. */
static int spm_json(struct gtok *G, json_t *root, json_t *model, int space_prefix)
{
	json_t *merges = json_array(), *norm = json_array(), *dec = json_array();
	int r;

	if (!merges || !norm || !dec) {
		json_decref(merges), json_decref(norm), json_decref(dec);
		return nomem(G);
	}
	if (json_object_set_new(model, "merges", merges) ||
	    json_object_set_new(root, "normalizer", json_pack("{s:s, s:o}", "type", "Sequence",
							      "normalizers", norm)) ||
	    json_object_set_new(root, "decoder", json_pack("{s:s, s:o}", "type", "Sequence",
							   "decoders", dec)) ||
	    json_object_set_new(model, "byte_fallback", json_true()) ||
	    json_object_set_new(model, "fuse_unk", json_true()))
		return nomem(G);
	if (!G->scores)
		return sf_err_set(G->e, SF_EFORMAT, "%s: key 'tokenizer.ggml.scores': missing, which "
				  "a llama vocabulary ranks its merges by", G->g->path);
	if ((space_prefix && json_array_append_new(norm, json_pack("{s:s, s:s}", "type", "Prepend",
								   "prepend", "\u2581"))) ||
	    json_array_append_new(norm, replace(" ", "\u2581")) ||
	    json_array_append_new(dec, replace("\u2581", " ")) ||
	    json_array_append_new(dec, json_pack("{s:s}", "type", "ByteFallback")) ||
	    json_array_append_new(dec, json_pack("{s:s}", "type", "Fuse")) ||
	    (space_prefix && json_array_append_new(dec, json_pack("{s:s, s:s, s:i, s:i}", "type",
								  "Strip", "content", " ", "start",
								  1, "stop", 0))))
		return nomem(G);
	if ((r = spm_merges(G, merges)))
		return r;
	return 0;
}

/* tokenizer.json of a "gpt2" vocabulary; *pre_at: its pres[] entry. */
static int bpe_json(struct gtok *G, json_t *root, json_t *model, size_t *pre_at)
{
	const char *pre;
	uint64_t plen;
	json_t *merges = json_array();
	int r;

	if (!merges || json_object_set_new(model, "merges", merges))
		return nomem(G);
	if ((r = sf_gguf_get_str(G->g, "tokenizer.ggml.pre", &pre, &plen, G->e)))
		return r == -ENOENT ? sf_err_set(G->e, SF_EUNSUPPORTED, "%s: key 'tokenizer.ggml.pre': "
						 "missing (llama.cpp's \"default\" pre-tokenizer is "
						 "not supported)", G->g->path) : r;
	for (*pre_at = 0; *pre_at < sizeof(pres) / sizeof(pres[0]); (*pre_at)++) {
		const char *const *n = pres[*pre_at].names;
		while (*n && !(strlen(*n) == plen && !memcmp(*n, pre, plen)))
			n++;
		if (*n)
			break;
	}
	if (*pre_at == sizeof(pres) / sizeof(pres[0]))
		return sf_err_set(G->e, SF_EUNSUPPORTED, "%s: key 'tokenizer.ggml.pre': '%.*s' "
				  "unsupported (llama-bpe, qwen2, gpt-2 or gpt-4o and their aliases)",
				  G->g->path, plen > 60 ? 60 : (int)plen, pre);
	if ((r = sf_gguf_get_arr(G->g, "tokenizer.ggml.merges", SF_GGUF_STRING, &G->merges, G->e)))
		return r;
	for (uint64_t i = 0; i < G->merges->n; i++) {
		uint64_t n;
		const char *s = sf_gguf_arr_str(G->merges, i, &n);
		if (json_array_append_new(merges, json_stringn(s, n)))
			return nomem(G);
	}
	json_t *split = json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex",
				  pres[*pre_at].regex, "behavior", "Isolated", "invert", 0);
	json_t *bl = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
			       "trim_offsets", 1, "use_regex", 0);
	if (!split || !bl ||
	    json_object_set_new(root, "pre_tokenizer", json_pack("{s:s, s:[o, o]}", "type",
								 "Sequence", "pretokenizers",
								 split, bl)) ||
	    json_object_set_new(root, "decoder", json_pack("{s:s, s:b, s:b, s:b}", "type",
							   "ByteLevel", "add_prefix_space", 1,
							   "trim_offsets", 1, "use_regex", 1)) ||
	    json_object_set_new(model, "byte_fallback", json_false()) ||
	    json_object_set_new(model, "ignore_merges", json_boolean(pres[*pre_at].ignore_merges)))
		return nomem(G);
	return 0;
}

/* BOS and EOS around the text when llama.cpp adds them. */
static json_t *template(const struct gtok *G, int64_t bos, int add_bos, int64_t eos, int add_eos)
{
	json_t *single = json_array(), *specials = json_object();
	int64_t ids[2] = { add_bos ? bos : -1, add_eos ? eos : -1 };

	if (!single || !specials)
		goto fail;
	for (int i = 0; i < 2; i++) {
		if (i == 1 && json_array_append_new(single, json_pack("{s:{s:s, s:i}}", "Sequence",
								      "id", "A", "type_id", 0)))
			goto fail;
		if (ids[i] < 0)
			continue;
		json_t *p = piece(G, (uint64_t)ids[i]);
		const char *s = json_string_value(p);
		if (!s || json_array_append_new(single, json_pack("{s:{s:s, s:i}}", "SpecialToken",
								  "id", s, "type_id", 0)) ||
		    json_object_set_new(specials, s, json_pack("{s:s, s:[I], s:[O]}", "id", s, "ids",
							       (json_int_t)ids[i], "tokens", p))) {
			json_decref(p);
			goto fail;
		}
		json_decref(p);
	}
	return json_pack("{s:s, s:o, s:o, s:o}", "type", "TemplateProcessing", "single", single,
			 "pair", json_deep_copy(single), "special_tokens", specials);
fail:
	json_decref(single);
	json_decref(specials);
	return NULL;
}

int sf_tokenizer_gguf_texts(const struct sf_gguf *g, char **tokenizer_json, char **config_json,
			    struct sf_err *e)
{
	struct gtok G = { .g = g, .e = e };
	json_t *root = json_object(), *model = json_object(), *added = json_array();
	json_t *config = json_object();
	const char *kind, *tmpl;
	uint64_t klen, tlen;
	int64_t bos = -1, eos = -1, unk = -1;
	int r, spm, space_prefix = 1, add_bos, add_eos = 0, clean_up = 0;
	size_t pre_at = 0;

	*tokenizer_json = *config_json = NULL;
	if (!root || !model || !added || !config ||
	    json_object_set(root, "model", model) || json_object_set(root, "added_tokens", added)) {
		r = nomem(&G);
		goto out;
	}
	if ((r = sf_gguf_get_str(g, "tokenizer.ggml.model", &kind, &klen, e)))
		goto out;
	spm = klen == 5 && !memcmp(kind, "llama", 5);
	if (!spm && !(klen == 4 && !memcmp(kind, "gpt2", 4))) {
		r = sf_err_set(e, SF_EUNSUPPORTED, "%s: key 'tokenizer.ggml.model': '%.*s' unsupported "
			       "(llama or gpt2)", g->path, klen > 60 ? 60 : (int)klen, kind);
		goto out;
	}
	if ((r = sf_gguf_get_arr(g, "tokenizer.ggml.tokens", SF_GGUF_STRING, &G.tokens, e)))
		goto out;
	if (G.tokens->n < 1 || G.tokens->n > SF_TOKENIZER_MAX_VOCAB) {
		r = sf_err_set(e, SF_ELIMIT, "%s: key 'tokenizer.ggml.tokens': %llu tokens, expected "
			       "1..%u", g->path, (unsigned long long)G.tokens->n, SF_TOKENIZER_MAX_VOCAB);
		goto out;
	}
	if ((r = per_token(&G, "tokenizer.ggml.token_type", SF_GGUF_I32, &G.types)) ||
	    (r = per_token(&G, "tokenizer.ggml.scores", SF_GGUF_F32, &G.scores)))
		goto out;
	/* llama.cpp's defaults: SentencePiece adds BOS and a space in front */
	add_bos = spm;
	if ((r = opt_token(&G, "tokenizer.ggml.bos_token_id", &bos)) ||
	    (r = opt_token(&G, "tokenizer.ggml.eos_token_id", &eos)) ||
	    (r = opt_token(&G, "tokenizer.ggml.unknown_token_id", &unk)) ||
	    (r = load_vocab(&G, added)))
		goto out;
	if (spm) {
		if ((r = opt_bool(&G, "tokenizer.ggml.add_space_prefix", &space_prefix)) ||
		    (r = spm_json(&G, root, model, space_prefix)))
			goto out;
	} else {
		if ((r = bpe_json(&G, root, model, &pre_at)))
			goto out;
		add_bos = pres[pre_at].add_bos;
		clean_up = pres[pre_at].clean_up;
	}
	if ((r = opt_bool(&G, "tokenizer.ggml.add_bos_token", &add_bos)) ||
	    (r = opt_bool(&G, "tokenizer.ggml.add_eos_token", &add_eos)))
		goto out;
	if ((add_bos && bos < 0) || (add_eos && eos < 0)) {
		r = sf_err_set(e, SF_EFORMAT, "%s: key 'tokenizer.ggml.add_%s_token': true, without "
			       "tokenizer.ggml.%s_token_id", g->path, add_bos && bos < 0 ? "bos" : "eos",
			       add_bos && bos < 0 ? "bos" : "eos");
		goto out;
	}
	json_t *post = template(&G, bos, add_bos, eos, add_eos);
	if (!post || json_object_set_new(root, "post_processor", post) ||
	    json_object_set_new(model, "type", json_string("BPE")) ||
	    json_object_set(model, "vocab", G.vocab) ||
	    json_object_set_new(model, "unk_token", unk >= 0 ? piece(&G, (uint64_t)unk) : json_null()) ||
	    json_object_set_new(config, "add_bos_token", json_boolean(add_bos)) ||
	    json_object_set_new(config, "add_eos_token", json_boolean(add_eos)) ||
	    json_object_set_new(config, "clean_up_tokenization_spaces", json_boolean(clean_up)) ||
	    (bos >= 0 && json_object_set_new(config, "bos_token", piece(&G, (uint64_t)bos))) ||
	    (eos >= 0 && json_object_set_new(config, "eos_token", piece(&G, (uint64_t)eos)))) {
		r = nomem(&G);
		goto out;
	}
	r = sf_gguf_get_str(g, "tokenizer.chat_template", &tmpl, &tlen, e);
	if (r && r != -ENOENT)
		goto out;
	if (!r && json_object_set_new(config, "chat_template", json_stringn(tmpl, tlen))) {
		r = nomem(&G);
		goto out;
	}
	*tokenizer_json = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII);
	*config_json = json_dumps(config, JSON_COMPACT | JSON_ENSURE_ASCII);
	if (!*tokenizer_json || !*config_json) {
		free(*tokenizer_json);
		free(*config_json);
		*tokenizer_json = *config_json = NULL;
		r = nomem(&G);
		goto out;
	}
	r = 0;
out:
	json_decref(G.vocab);
	json_decref(root);
	json_decref(model);
	json_decref(added);
	json_decref(config);
	return r;
}

int sf_tokenizer_open_gguf(struct sf_tokenizer **t, const struct sf_gguf *g, struct sf_err *e)
{
	char *tj, *cj;
	int r;

	*t = NULL;
	if ((r = sf_tokenizer_gguf_texts(g, &tj, &cj, e)))
		return r;
	r = sf_tokenizer_open_mem(t, g->path, tj, strlen(tj), cj, strlen(cj), e);
	free(tj);
	free(cj);
	return r;
}
