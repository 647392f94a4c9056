/* Encoding (sf_tokenizer_encode): added tokens split out first, then the
 * normalizer, the pre-tokenizer's words, and per word the merges in rank
 * order with byte fallback, as Hugging Face tokenizers encodes. */
#include "engine/tokenizer_impl.h"

#include <errno.h>
#include <utf8proc.h>

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

