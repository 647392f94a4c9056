/* The sparse decoder's reads (sparse_impl.h). A ring of read buffers,
 * each holding one flash group's regions as they lie in the file (top
 * tier, then the middle tier) with a bitmap of the 4 KiB pages asked for
 * and one of those arrived. A group's selected positions become requests
 * of at most --read-size bytes, so that one region keeps the device's
 * queue full, and no page is asked for twice. --prefetch asks for the
 * next groups' pages while this one computes: every page where the
 * selection is known before its input (every entry top tier), the
 * predicted entries' pages otherwise. What a prediction misses is read
 * when the group runs, and compute waits for the pages of the entries it
 * computes whatever asked for them, so the output never depends on the
 * prefetch. man/sf-run.1. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/select.h"
#include "online/runs.h"
#include "online/sparse_impl.h"
#include "online/uring.h"

#define PAGE SF_IMAGE_ALIGN

static int bit(const uint64_t *b, uint64_t x)
{
	return b[x / 64] >> (x % 64) & 1;
}

static void set_bits(uint64_t *b, uint64_t x0, uint64_t x1)
{
	for (uint64_t x = x0; x < x1; x++)
		b[x / 64] |= 1ull << (x % 64);
}

// ----------------------------------------------------------------------------
// the ring of buffers

uint64_t sparse_reads_bytes(uint64_t buf_bytes, int nbuf, size_t entry_words)
{
	uint64_t pages = buf_bytes / PAGE, words = (pages + 63) / 64;
	return (uint64_t)nbuf * (buf_bytes + 3 * words * 8 + (pages + 1) * sizeof(struct req) +
				 entry_words * 8);
}

int sparse_reads_open(struct sf_sparse *sp, uint64_t buf_bytes, int nbuf, int with_memory)
{
	struct sparse_io *io = &sp->io;

	io->buf_bytes = buf_bytes;
	io->buf_pages = buf_bytes / PAGE;
	io->page_words = (size_t)(io->buf_pages + 63) / 64;
	io->nbuf = nbuf;
	if (!(io->bufs = calloc((size_t)nbuf, sizeof(*io->bufs))))
		return -ENOMEM;
	if (with_memory && posix_memalign((void **)&io->arena, SF_URING_ALIGN,
					  (size_t)(buf_bytes * (uint64_t)nbuf))) {
		io->arena = NULL;
		return -ENOMEM;
	}
	for (int i = 0; i < nbuf; i++) {
		struct iobuf *b = &io->bufs[i];
		b->gid = -1;
		b->mem = io->arena ? io->arena + (size_t)i * buf_bytes : NULL;
		b->asked = calloc(io->page_words ? io->page_words : 1, 8);
		b->arrived = calloc(io->page_words ? io->page_words : 1, 8);
		b->ahead = calloc(io->page_words ? io->page_words : 1, 8);
		b->reqs = calloc(io->buf_pages + 1, sizeof(*b->reqs));
		b->pred = calloc(sp->tiers.words ? sp->tiers.words : 1, 8);
		if (!b->asked || !b->arrived || !b->ahead || !b->reqs || !b->pred)
			return -ENOMEM;
	}
	return 0;
}

void sparse_reads_close(struct sf_sparse *sp)
{
	for (int i = 0; sp->io.bufs && i < sp->io.nbuf; i++) {
		free(sp->io.bufs[i].asked);
		free(sp->io.bufs[i].arrived);
		free(sp->io.bufs[i].ahead);
		free(sp->io.bufs[i].reqs);
		free(sp->io.bufs[i].pred);
	}
	free(sp->io.bufs);
	free(sp->io.arena);
}

/* Marks what the request tagged tag brought arrived: pages of a buffer,
 * or a slot of the head and embedding reads. */
static void arrived(struct sf_sparse *sp, uint64_t tag)
{
	if ((tag >> 32) == (uint64_t)sp->io.nbuf) {
		sp->head.done[(uint32_t)tag] = 1;
	} else if ((tag >> 32) == (uint64_t)sp->io.nbuf + 1) {
		sparse_experts_arrived(sp, (uint32_t)tag);
	} else {
		struct iobuf *b = &sp->io.bufs[tag >> 32];
		const struct req *q = &b->reqs[(uint32_t)tag];
		uint64_t x0 = (uint64_t)(q->buf - b->mem) / PAGE;
		set_bits(b->arrived, x0, x0 + q->alen / PAGE);
		b->inflight--;
	}
	if (!--sp->io.inflight) {
		double busy = sf_now() - sp->io.busy_since;
		sp->st.span_s += busy;
		sp->st.tok_span += busy;
	}
}

int sparse_reap(struct sf_sparse *sp, int wait)
{
	uint64_t tag;
	struct sf_err e = { 0 };
	double t0 = sf_now();
	int ret = sf_uring_reap(sp->io.u, &tag, wait, &e);

	if (!wait && ret == 0)
		return 0;
	if (wait)
		sp->st.wait_s += sf_now() - t0;
	if (ret == 0)
		return sf_err_set(&sp->err, -EIO, "%s: reads ended before the group's data came",
				  sp->img->path);
	while (ret == 1) {
		arrived(sp, tag);
		ret = sf_uring_reap(sp->io.u, &tag, 0, &e);
	}
	if (ret == 0)
		return 0;
	if (e.msg[0])	/* names the file, offset and length */
		return sf_err_set(&sp->err, ret, "%s", e.msg);
	return sf_err_set(&sp->err, ret, "%s: a read: %s", sp->img->path, sf_strerror(ret));
}

void sparse_reads_drain(struct sf_sparse *sp)
{
	while (sp->io.u && sf_uring_outstanding(sp->io.u)) {
		uint64_t tag;
		struct sf_err e;
		if (sf_uring_reap(sp->io.u, &tag, 1, &e) == 0)
			break;
	}
	for (int i = 0; i < sp->io.nbuf; i++) {
		sp->io.bufs[i].inflight = 0;
		sp->io.bufs[i].gid = -1;
	}
	if (sp->head.done)
		memset(sp->head.done, 0, (size_t)sp->head.slots + 1);
	sparse_experts_drain(sp);
	sp->io.inflight = 0;
}

/* Buffer b emptied for group gid: its reads waited for, its pages
 * forgotten. */
static int take(struct sf_sparse *sp, struct iobuf *b, long gid)
{
	int ret;

	while (b->inflight)
		if ((ret = sparse_reap(sp, 1)))
			return ret;
	for (size_t r = 0; sp->io.u && r < b->nreq; r++)	/* --no-direct: used, dropped */
		sf_uring_drop_cache(sp->io.u, b->reqs[r].aoff, b->reqs[r].alen);
	memset(b->asked, 0, sp->io.page_words * 8);
	memset(b->arrived, 0, sp->io.page_words * 8);
	memset(b->ahead, 0, sp->io.page_words * 8);
	b->nreq = 0;
	b->gid = gid;
	b->predicted = 0;
	return 0;
}

int sparse_buffer(struct sf_sparse *sp, long gid, struct iobuf **out)
{
	struct sparse_io *io = &sp->io;
	int next = (io->cur + 1) % io->nbuf;

	*out = &io->bufs[next];
	if (io->bufs[next].gid == gid && io->nbuf > 1) {
		io->cur = next;
		return 0;
	}
	io->cur = next;
	return take(sp, *out, gid);
}

// ----------------------------------------------------------------------------
// plans: 4 KiB pages, each asked for once, in requests of at most read_size

static int hist_bucket(uint32_t len)
{
	int b = 0;
	for (uint32_t lim = 1; b < SF_RUNS_NHIST - 1 && len > lim; lim *= 2)
		b++;
	return b;
}

/* A read's bytes in the token's and the run's figures. */
static void count_read(struct sf_sparse *sp, uint64_t len)
{
	sp->st.bytes_moved += len;
	sp->st.tok_bytes += len;
	sp->st.requests++;
}

/* Logs and queues one read, tagged buffer << 32 | index (buffer nbuf:
 * the head's and embedding's slots); the I/O busy span starts with the
 * first one in flight. */
static int queue_read(struct sf_sparse *sp, uint64_t off, uint32_t len, uint8_t *buf,
		      uint64_t tag)
{
	int ret;

	if (sp->o.on_read)
		sp->o.on_read(sp->o.on_read_ctx, sp->st.tokens, off, len);
	if ((ret = sf_uring_queue(sp->io.u, off, len, buf, tag, &sp->err)))
		return ret;
	if (!sp->io.inflight++)
		sp->io.busy_since = sf_now();
	return 0;
}

/* Request [x0, x1) of buffer b's pages, of the tier region at file offset
 * base lying at lay in the buffer: asked now, queued (arrived at once
 * with --simulate, whose bytes are in RAM). */
static int ask(struct sf_sparse *sp, struct iobuf *b, uint64_t x0, uint64_t x1,
	       const struct sparse_tier *t, int ahead, struct gtally *gt)
{
	struct req *q = &b->reqs[b->nreq];
	uint64_t len = (x1 - x0) * PAGE;
	int ret;

	*q = (struct req){ .aoff = t->base + x0 * PAGE - t->lay, .alen = (uint32_t)len,
			   .buf = b->mem ? b->mem + x0 * PAGE : NULL };
	gt->ahead_bytes += ahead ? len : 0;
	gt->bytes_moved += len;
	gt->requests++;
	count_read(sp, len);
	if (sp->o.simulate) {
		set_bits(b->arrived, x0, x1);
		b->nreq++;
		return 0;
	}
	if ((ret = queue_read(sp, q->aoff, q->alen, q->buf,
			      (uint64_t)(b - sp->io.bufs) << 32 | b->nreq)))
		return ret;
	b->inflight++;
	b->nreq++;
	return 0;
}

/* Whether pages [x0, x1) of b are all not asked for. */
static int none_asked(const struct iobuf *b, uint64_t x0, uint64_t x1)
{
	for (uint64_t x = x0; x < x1; x++)
		if (bit(b->asked, x))
			return 0;
	return 1;
}

int sparse_plan(struct sf_sparse *sp, struct iobuf *b, const struct sparse_tier *t,
		const uint32_t *pos, size_t k, uint32_t *runlen, int ahead, struct gtally *gt)
{
	size_t nruns = sf_runs_plan(pos, k, (uint32_t)sp->collapse.gap, sp->s.runs), i = 0;
	uint64_t gap_pages = sp->collapse.gap_bytes / PAGE;
	uint64_t most = sp->io.read_size / PAGE;
	uint64_t q0 = 0, q1 = 0;	/* the open request's pages; q1 == q0: none */
	int ret;

	for (size_t r = 0; r < nruns; r++) {
		const struct sf_run *run = &sp->s.runs[r];
		uint64_t aoff, alen;
		sf_image_align(t->base + (uint64_t)run->start * t->stride,
			       (uint64_t)run->len * t->stride, &aoff, &alen);
		if (aoff - t->base + alen > t->cap)
			return sf_err_set(&sp->err, -EOVERFLOW, "%s: a read to %llu bytes into the "
					  "region overflows its buffer of %llu", sp->img->path,
					  (unsigned long long)(aoff - t->base + alen),
					  (unsigned long long)t->cap);
		uint64_t x0 = (t->lay + aoff - t->base) / PAGE, x1 = x0 + alen / PAGE;
		for (uint64_t x = x0; x < x1; x++) {
			if (bit(b->asked, x)) {
				if (bit(b->ahead, x)) {	/* read ahead, and needed */
					b->ahead[x / 64] &= ~(1ull << (x % 64));
					gt->ahead_used += PAGE;
				}
				continue;
			}
			gt->unread_needed += ahead ? 0 : PAGE;
			if (ahead)
				b->ahead[x / 64] |= 1ull << (x % 64);
			if (q1 > q0 && x >= q1 && x - q1 <= gap_pages && x + 1 - q0 <= most &&
			    none_asked(b, q1, x)) {
				set_bits(b->asked, q1, x + 1);
				q1 = x + 1;
				continue;
			}
			if (q1 > q0 && (ret = ask(sp, b, q0, q1, t, ahead, gt)))
				return ret;
			set_bits(b->asked, x, x + 1);
			q0 = x;
			q1 = x + 1;
		}
		for (; runlen && i < k && pos[i] < run->start + run->len; i++)
			runlen[i] = run->len;
		if (!ahead) {
			sp->st.hist[hist_bucket(run->len)]++;
			sp->st.runs_total++;
			sp->st.runs_positions += run->len;
		}
	}
	if (q1 > q0 && (ret = ask(sp, b, q0, q1, t, ahead, gt)))
		return ret;
	return 0;
}

int sparse_submit(struct sf_sparse *sp)
{
	int ret;

	if (sp->o.simulate || !sf_uring_outstanding(sp->io.u))
		return 0;
	ret = sf_uring_submit(sp->io.u, &sp->err);
	return ret < 0 ? ret : 0;
}

// ----------------------------------------------------------------------------
// --prefetch: the next groups' pages asked for while this one computes

void sparse_tiers_of(const struct sf_image_group *G, struct sparse_tier *top,
		     struct sparse_tier *mid)
{
	uint64_t tcap = sparse_round_up((uint64_t)G->entries * G->top_bytes);

	*top = (struct sparse_tier){ .base = G->top->offset, .stride = G->top_bytes, .lay = 0,
				     .cap = tcap };
	*mid = (struct sparse_tier){ 0 };
	if (G->mid)
		*mid = (struct sparse_tier){
			.base = G->mid->offset, .stride = G->mid_bytes, .lay = tcap,
			.cap = sparse_round_up((uint64_t)G->entries * G->mid_bytes) };
}

/* The entries predicted for group G of layer l, as bitmaps over its
 * source entries: top (k_top of them) and all (both tiers). Returns 0
 * when nothing can be predicted yet. */
static int predict(struct sf_sparse *sp, int l, enum sf_group g, uint32_t n, uint32_t kt,
		   uint32_t km, uint64_t *top, uint64_t *all)
{
	struct sparse_predict *pr = &sp->pred;
	size_t words = sp->tiers.words, nw = (n + 63) / 64;
	int wrong = sp->o.fault.mispredict;

	if (g == SF_GROUP_ATTN_IN || g == SF_GROUP_FFN_IN) {
		/* both inputs are RMSNorm of the residual stream times the
		 * norm's gain: the last one, its gain divided out and this
		 * group's multiplied in, ranks this input's entries */
		if (pr->x_layer < 0 || n != pr->n)
			return 0;
		const float *gs = pr->gain + ((size_t)pr->x_layer * 2 + (pr->x_g == SF_GROUP_FFN_IN)) * n;
		const float *gt = pr->gain + ((size_t)l * 2 + (g == SF_GROUP_FFN_IN)) * n;
		float most = 0;
		for (uint32_t j = 0; j < n; j++) {
			pr->score[j] = gs[j] != 0 ? fabsf(pr->x[j] * gt[j] / gs[j]) : 0.0f;
			most = pr->score[j] > most ? pr->score[j] : most;
		}
		for (uint32_t j = 0; wrong && j < n; j++)
			pr->score[j] = most - pr->score[j];	/* test only: the least likely */
		sf_select_topk(pr->score, n, kt, top, sp->s.sel_scratch);
		sf_select_topk(pr->score, n, kt + km, all, sp->s.sel_scratch);
		return 1;
	}
	if (sp->o.predict != SF_SPARSE_PREDICT_ALL)
		return 0;
	/* attn_out, ffn_out: the previous pass's selection */
	size_t at = ((size_t)l * SF_NGROUPS + g) * 2 * words;
	for (size_t w = 0; w < nw; w++) {
		top[w] = wrong ? ~pr->history[at + words + w] : pr->history[at + w];
		all[w] = wrong ? top[w] : pr->history[at + words + w];
	}
	if (n % 64) {
		top[nw - 1] &= (1ull << (n % 64)) - 1;
		all[nw - 1] &= (1ull << (n % 64)) - 1;
	}
	return 1;
}

/* Asks for the pages group gid will read, into buffer b: all of them
 * when every entry is top tier, the predicted entries' otherwise (those
 * cached left out). */
static int read_ahead(struct sf_sparse *sp, struct iobuf *b, long gid)
{
	int l = (int)(gid / SF_NGROUPS);
	enum sf_group g = (enum sf_group)(gid % SF_NGROUPS);
	const struct sf_image_group *G = sf_image_group(sp->img, l, g);
	uint32_t n = G->source_entries, kt = sp->tiers.k_top[gid], km = sp->tiers.k_mid[gid];
	const uint64_t *allow = sp->tiers.allow[gid];
	struct gtally *gt = &sp->st.g[g];
	struct sparse_tier top, mid;
	uint32_t *ents = sp->pred.ents, *tpos = sp->pred.tpos, *mpos = sp->pred.mpos;
	size_t nt, nm = 0, nw = (n + 63) / 64;
	int ret;

	sparse_tiers_of(G, &top, &mid);
	if (kt == n && km == 0) {
		nt = 0;
		for (uint32_t p = 0; p < G->entries; p++)
			if (!allow || bit(allow, G->perm[p]))
				tpos[nt++] = p;
	} else {
		if (sp->o.predict == SF_SPARSE_PREDICT_NONE ||
		    !predict(sp, l, g, n, kt, km, sp->pred.top, sp->pred.all))
			return 0;
		memcpy(b->pred, km ? sp->pred.all : sp->pred.top, nw * 8);
		b->predicted = 1;
		nt = 0;
		for (size_t w = 0; w < nw; w++) {
			uint64_t t = sp->pred.top[w] & (allow ? allow[w] : ~0ull);
			for (; t; t &= t - 1)
				ents[nt++] = (uint32_t)(w * 64 + (uint64_t)__builtin_ctzll(t));
		}
		sf_runs_positions(G->pos, n, ents, nt, sp->s.pscratch, tpos);
		for (size_t w = 0; km && w < nw; w++) {
			uint64_t t = sp->pred.all[w] & ~sp->pred.top[w] & (allow ? allow[w] : ~0ull);
			for (; t; t &= t - 1)
				ents[nm++] = (uint32_t)(w * 64 + (uint64_t)__builtin_ctzll(t));
		}
		if (nm)
			sf_runs_positions(G->pos, n, ents, nm, sp->s.pscratch, mpos);
	}
	if (sparse_held(sp, gid))
		nt = 0;		/* in RAM whole */
	else if (sp->cache.use)
		nt = sf_cache_keep_unheld(sp->cache.c, (uint32_t)l, g, G->perm, tpos, nt);
	if ((nm && G->mid && (ret = sparse_plan(sp, b, &mid, mpos, nm, NULL, 1, gt))) ||
	    (ret = sparse_plan(sp, b, &top, tpos, nt, NULL, 1, gt)))
		return ret;
	return 0;
}

int sparse_prefetch(struct sf_sparse *sp, long gid)
{
	struct sparse_io *io = &sp->io;
	int ret;

	if (io->nbuf < 2 || sp->o.simulate)
		return 0;
	for (int k = 1; k < io->nbuf; k++) {
		long next = io->order[(io->seq[gid] + (size_t)k) % io->norder];
		struct iobuf *b = &io->bufs[(io->cur + k) % io->nbuf];
		if (b->gid == next)
			continue;
		if ((ret = take(sp, b, next)) || (ret = read_ahead(sp, b, next)))
			return ret;
	}
	return sparse_submit(sp);
}

void sparse_score_prediction(const struct iobuf *b, const uint64_t *sel,
			     uint32_t n, struct gtally *gt)
{
	if (!b->predicted || b->gid < 0)
		return;
	for (size_t w = 0; w < (n + 63) / 64; w++) {
		gt->pred_entries += (uint64_t)__builtin_popcountll(b->pred[w]);
		gt->pred_hits += (uint64_t)__builtin_popcountll(b->pred[w] & sel[w]);
		gt->pred_selected += (uint64_t)__builtin_popcountll(sel[w]);
	}
}

void sparse_observe(struct sf_sparse *sp, int l, enum sf_group g, const float *in, size_t n,
		    const uint64_t *top, const uint64_t *all)
{
	struct sparse_predict *pr = &sp->pred;
	size_t words = sp->tiers.words;

	if (sp->io.nbuf < 2 || sp->o.predict == SF_SPARSE_PREDICT_NONE)
		return;
	if ((g == SF_GROUP_ATTN_IN || g == SF_GROUP_FFN_IN) && n == pr->n) {
		memcpy(pr->x, in, n * sizeof(float));
		pr->x_layer = l;
		pr->x_g = g;
	} else if (sp->o.predict == SF_SPARSE_PREDICT_ALL && top) {
		uint64_t *h = pr->history + ((size_t)l * SF_NGROUPS + g) * 2 * words;
		memcpy(h, top, (n + 63) / 64 * 8);
		memcpy(h + words, all, (n + 63) / 64 * 8);
	}
}

// ----------------------------------------------------------------------------
// the embedding rows and the output head from flash

#define HEAD_SLOTS 8	/* head reads in flight */
#define HEAD_READ_MAX (1u << 20)	/* bytes of one head read at most, whatever --read-size */

/* Head rows a read: as many as fit in a read of read_size (at most
 * HEAD_READ_MAX), a multiple of 16, at least 16. */
static uint32_t head_chunk_rows(uint64_t read_size, uint64_t row_bytes)
{
	uint64_t rows = (read_size < HEAD_READ_MAX ? read_size : HEAD_READ_MAX) / row_bytes / 16 * 16;
	return rows ? (uint32_t)rows : 16;
}

uint64_t sparse_head_bytes(const struct sf_sparse *sp)
{
	const struct sf_image *img = sp->img;
	uint64_t erb = sf_weight_row_bytes(&sp->m->embed), hrb = sf_weight_row_bytes(&sp->m->lm_head);
	uint64_t rs = sp->o.read_size ? sp->o.read_size : SF_SPARSE_READ_SIZE;

	if (!img->left_on_flash || sp->o.simulate)
		return 0;
	return sparse_round_up(erb) + 2 * PAGE +
	       HEAD_SLOTS * (head_chunk_rows(rs, hrb) * hrb + 2 * PAGE) +
	       (HEAD_SLOTS + 1) * (1 + 3 * sizeof(uint64_t));
}

/* Whether img left (part of) the matrix w on flash. */
static int left_out(const struct sf_image *img, const struct sf_weight *w)
{
	uint64_t a = sf_image_offset(img, w->data);
	uint64_t b = a + sf_weight_bytes(w);

	for (int i = 0; i < 2; i++)
		if (img->on_flash[i][1] > img->on_flash[i][0] && img->on_flash[i][0] >= a &&
		    img->on_flash[i][1] <= b)
			return 1;
	return 0;
}

int sparse_head_open(struct sf_sparse *sp)
{
	struct sparse_head *h = &sp->head;
	const struct sf_model *m = sp->m;
	if (!sp->img->left_on_flash || sp->o.simulate || !sp->io.u)
		return 0;
	h->embed = left_out(sp->img, &m->embed);
	h->head = left_out(sp->img, &m->lm_head);
	h->embed_off = sf_image_offset(sp->img, m->embed.data);
	h->head_off = sf_image_offset(sp->img, m->lm_head.data);
	h->embed_row_bytes = sf_weight_row_bytes(&m->embed);
	h->head_row_bytes = sf_weight_row_bytes(&m->lm_head);
	h->row_buf = sparse_round_up(h->embed_row_bytes) + 2 * PAGE;
	h->chunk_rows = head_chunk_rows(sp->io.read_size, h->head_row_bytes);
	h->slots = HEAD_SLOTS;
	h->slot_bytes = (uint64_t)h->chunk_rows * h->head_row_bytes + 2 * PAGE;
	if (posix_memalign((void **)&h->row, PAGE, (size_t)h->row_buf) ||
	    posix_memalign((void **)&h->mem, PAGE, (size_t)(h->slot_bytes * (uint64_t)h->slots)))
		return -ENOMEM;
	h->done = calloc((size_t)h->slots + 1, 1);
	h->chunk_off = calloc((size_t)h->slots, sizeof(*h->chunk_off));
	h->read_off = calloc((size_t)h->slots + 1, sizeof(*h->read_off));
	h->read_len = calloc((size_t)h->slots + 1, sizeof(*h->read_len));
	if (!h->done || !h->chunk_off || !h->read_off || !h->read_len)
		return -ENOMEM;
	if (h->embed)
		sp->exec.embed = sparse_embed_row;
	if (h->head)
		sp->exec.head = sparse_head_logits;
	return 0;
}

void sparse_head_close(struct sf_sparse *sp)
{
	free(sp->head.row);
	free(sp->head.mem);
	free(sp->head.done);
	free(sp->head.chunk_off);
	free(sp->head.read_off);
	free(sp->head.read_len);
}

/* Queues the read of [off, off + len) of the file, 4 KiB aligned, into
 * slot (slots: the embedding row) at buf; returns where off landed. */
static int head_read(struct sf_sparse *sp, int slot, uint8_t *buf, uint64_t off, uint64_t len,
		     uint64_t *skip)
{
	uint64_t aoff, alen;
	int ret;

	sf_image_align(off, len, &aoff, &alen);
	*skip = off - aoff;
	sp->head.read_off[slot] = aoff;
	sp->head.read_len[slot] = alen;
	sp->head.done[slot] = 0;
	if ((ret = queue_read(sp, aoff, (uint32_t)alen, buf,
			      (uint64_t)sp->io.nbuf << 32 | (uint32_t)slot)))
		return ret;
	sp->head.bytes += alen;
	count_read(sp, alen);
	return 0;
}

int sparse_read_record(struct sf_sparse *sp, uint32_t slot, uint8_t *buf, uint64_t off,
		       uint64_t len, uint32_t *pending)
{
	uint64_t tag = ((uint64_t)sp->io.nbuf + 1) << 32 | slot;
	int ret;

	for (uint64_t at = 0; at < len; at += sp->io.read_size) {
		uint32_t n = len - at < sp->io.read_size ? (uint32_t)(len - at) : sp->io.read_size;
		if ((ret = queue_read(sp, off + at, n, buf + at, tag)))
			return ret;
		count_read(sp, n);
		(*pending)++;
	}
	return 0;
}

static int wait_slot(struct sf_sparse *sp, int slot)
{
	int ret;

	while (!sp->head.done[slot])
		if ((ret = sparse_reap(sp, 1)))
			return ret;
	return 0;
}

/* The first failure stops the decoder (sf_sparse_error); out is zeroed. */
static void head_fail(struct sf_sparse *sp, int ret, float *out, size_t n)
{
	if (!sp->failed)
		sp->failed = ret;
	sparse_reads_drain(sp);
	memset(out, 0, n * sizeof(float));
}

void sparse_embed_row(void *ctx, int32_t token, float *out)
{
	struct sf_sparse *sp = ctx;
	struct sparse_head *h = &sp->head;
	const struct sf_weight *w = &sp->m->embed;
	uint64_t skip;
	int ret;

	if (sp->failed) {
		memset(out, 0, (size_t)w->cols * sizeof(float));
		return;
	}
	if ((ret = head_read(sp, h->slots, h->row,
			     h->embed_off + (uint64_t)token * h->embed_row_bytes, h->embed_row_bytes,
			     &skip)) || (ret = sparse_submit(sp)) ||
	    (ret = wait_slot(sp, h->slots))) {
		head_fail(sp, ret, out, (size_t)w->cols);
		return;
	}
	const struct sf_weight row = { .data = h->row + skip, .dtype = w->dtype, .rows = 1,
				       .cols = w->cols };
	sf_weight_row(out, &row, 0);
	sf_uring_drop_cache(sp->io.u, h->read_off[h->slots], h->read_len[h->slots]);
}

void sparse_head_logits(void *ctx, const float *x, float *logits)
{
	struct sf_sparse *sp = ctx;
	struct sparse_head *h = &sp->head;
	const struct sf_weight *w = &sp->m->lm_head;
	uint64_t nchunks = (w->rows + h->chunk_rows - 1) / h->chunk_rows, next = 0;
	int ret;

	if (sp->failed) {
		memset(logits, 0, (size_t)w->rows * sizeof(float));
		return;
	}
	for (uint64_t c = 0; c < nchunks; c++) {
		for (; next < nchunks && next - c < (uint64_t)h->slots; next++) {
			uint64_t r0 = next * h->chunk_rows;
			uint64_t r1 = r0 + h->chunk_rows < w->rows ? r0 + h->chunk_rows : w->rows;
			int slot = (int)(next % (uint64_t)h->slots);
			if ((ret = head_read(sp, slot, h->mem + (uint64_t)slot * h->slot_bytes,
					     h->head_off + r0 * h->head_row_bytes,
					     (r1 - r0) * h->head_row_bytes,
					     &h->chunk_off[slot])))
				goto fail;
		}
		int slot = (int)(c % (uint64_t)h->slots);
		if ((ret = sparse_submit(sp)) || (ret = wait_slot(sp, slot)))
			goto fail;
		/* rows from a multiple of 16, as the dense product splits them:
		 * the same floats */
		uint64_t r0 = c * h->chunk_rows;
		struct sf_weight sub = {
			.data = h->mem + (uint64_t)slot * h->slot_bytes + h->chunk_off[slot],
			.dtype = w->dtype, .cols = w->cols,
			.rows = r0 + h->chunk_rows < w->rows ? h->chunk_rows : w->rows - r0,
		};
		float *y[] = { logits + r0 };
		const struct sf_weight *mw[] = { &sub };
		double t0 = sf_now();
		sf_group_dense(sp->pool, x, 1, y, mw);
		sp->st.compute_s += sf_now() - t0;
		sf_uring_drop_cache(sp->io.u, h->read_off[slot], h->read_len[slot]);
		h->done[slot] = 0;
	}
	return;
fail:
	head_fail(sp, ret, logits, (size_t)w->rows);
}
