/* Decoding: one engine for whole (sf_tokenizer_decode) and streaming
 * (sf_detok_*) decode, the decoder chain of tokenizer.json. */
#include "engine/tokenizer_impl.h"

#include <errno.h>

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

/* What a call gives out: the output less the bytes sf_detok_mark left
 * out. */
static void dt_result(struct sf_detok *d, const char **out, size_t *len)
{
	size_t drop = d->skip < d->nout ? d->skip : d->nout;

	d->skip -= drop;
	*out = d->out ? d->out + drop : "";
	*len = d->nout - drop;
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
	dt_result(d, out, len);
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
	dt_result(d, out, len);
	return 0;
}

int sf_detok_mark(struct sf_detok *d)
{
	/* finish a copy: what the held bytes give if the text ended here */
	struct sf_detok c = *d;
	const char *out;
	size_t n;
	int r;

	c.out = c.tmp = c.tmp2 = NULL;
	c.capout = c.captmp = c.captmp2 = 0;
	c.hold = d->nhold ? malloc(d->nhold) : NULL;
	c.pend = d->npend ? malloc(d->npend) : NULL;
	c.caphold = d->nhold;
	c.cappend = d->npend;
	if ((d->nhold && !c.hold) || (d->npend && !c.pend)) {
		sf_detok_free(&c);
		return -ENOMEM;
	}
	if (d->nhold)
		memcpy(c.hold, d->hold, d->nhold);
	if (d->npend)
		memcpy(c.pend, d->pend, d->npend);
	c.skip = 0;
	r = sf_detok_finish(&c, &out, &n);
	sf_detok_free(&c);
	if (!r)
		d->skip = n;
	return r;
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
