/* sf-serve's decoder: one thread serves the slots, each slot a job with
 * its own KV cache. A round feeds each slot still in its prompt one batch
 * of it (a pass of its own), samples a token in every slot past it, and
 * runs those slots' tokens together in one pass over the weights
 * (continuous batching, sf_forward_multi): from an image each group reads
 * the union of their columns once. A request that is cancelled frees its
 * slot at the next round. See serve.h and man/sf-serve.1. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/model.h"
#include "serve.h"

// --- buffers and jobs

int sbuf_add(struct sbuf *b, const char *p, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *q = realloc(b->p, cap);
		if (!q)
			return -ENOMEM;
		b->p = q;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, p, n);
	b->n += n;
	b->p[b->n] = '\0';
	return 0;
}

int sbuf_printf(struct sbuf *b, const char *fmt, ...)
{
	char small[256];
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	if ((size_t)n < sizeof(small))
		return sbuf_add(b, small, (size_t)n);
	char *big = malloc((size_t)n + 1);
	if (!big)
		return -ENOMEM;
	va_start(ap, fmt);
	vsnprintf(big, (size_t)n + 1, fmt, ap);
	va_end(ap);
	int ret = sbuf_add(b, big, (size_t)n);
	free(big);
	return ret;
}

void sbuf_free(struct sbuf *b)
{
	free(b->p);
	*b = (struct sbuf){ 0 };
}

void job_free(struct job *j)
{
	if (!j)
		return;
	free(j->prompt);
	for (int i = 0; i < j->nstop; i++)
		free(j->stop[i]);
	sbuf_free(&j->text);
	sbuf_free(&j->ends);
	sbuf_free(&j->reasoning);
	free(j);
}

/* Under mu: one reference less. */
static void job_put(struct job *j)
{
	if (--j->refs == 0)
		job_free(j);
}

void serve_job_release(struct server *s, struct job *j)
{
	if (j->in_queue) {	/* out of the queue at once: its place is free */
		struct job **p = &s->head, *prev = NULL;
		while (*p != j) {
			prev = *p;
			p = &(*p)->next;
		}
		*p = j->next;
		if (s->tail == j)
			s->tail = prev;
		s->queued--;
		j->in_queue = 0;
		j->done = 1;
		j->finish = FINISH_CANCEL;
		s->cancelled++;
		job_put(j);	/* the queue's reference */
	} else if (!j->done) {
		j->cancelled = 1;
		pthread_cond_signal(&s->work);
	}
	job_put(j);
}

int serve_submit(struct server *s, struct job *j)
{
	pthread_mutex_lock(&s->mu);
	int ret = s->draining || s->stopping ? -ESHUTDOWN
		: s->busy + s->queued >= s->nslots + s->queue_max ? -EBUSY : 0;
	if (!ret) {
		j->t_submit = sf_now_ns();
		j->refs++;
		j->in_queue = 1;
		j->next = NULL;
		if (s->tail)
			s->tail->next = j;
		else
			s->head = j;
		s->tail = j;
		s->queued++;
		pthread_cond_signal(&s->work);
	}
	pthread_mutex_unlock(&s->mu);
	return ret;
}

// --- a job's text

/* Under mu: the bytes added to the text, cut at the first stop string
 * that appears; 1 when one did. ready: what no stop string can still
 * take back (a tail that begins one is held). */
static int add_text(struct job *j, const char *p, size_t n, int final)
{
	size_t from = j->text.n;

	if (sbuf_add(&j->text, p, n))
		return -ENOMEM;
	if (j->nstop) {
		size_t start = from + 1 > j->stop_max ? from + 1 - j->stop_max : 0;
		size_t cut = j->text.n;
		for (int i = 0; i < j->nstop; i++) {
			size_t l = strlen(j->stop[i]);
			const char *hit = memmem(j->text.p + start, j->text.n - start, j->stop[i], l);
			if (hit && (size_t)(hit - j->text.p) < cut)
				cut = (size_t)(hit - j->text.p);
		}
		if (cut < j->text.n) {
			j->text.n = cut;
			j->text.p[cut] = '\0';
			j->ready = cut;
			return 1;
		}
	}
	size_t hold = 0;
	for (int i = 0; i < j->nstop && !final; i++) {
		size_t l = strlen(j->stop[i]);
		for (size_t k = l - 1; k > hold; k--)
			if (k <= j->text.n && !memcmp(j->text.p + j->text.n - k, j->stop[i], k)) {
				hold = k;
				break;
			}
	}
	j->ready = j->text.n - hold;
	return 0;
}

// --- the slots

/* The state of a pass of every slot's next token: its buffers, with a
 * row of logits each; its own KV cache unused (mapped, never touched). */
static struct sf_state_opts pass_opts(const struct server *s, enum sf_kv_type kv_k,
				      enum sf_kv_type kv_v)
{
	return (struct sf_state_opts){ .seq_len = s->ctx, .batch = s->nslots, .kv_k = kv_k,
				       .kv_v = kv_v };
}

uint64_t serve_pass_state_bytes(const struct server *s)
{
	struct sf_state_opts po = pass_opts(s, s->pass.kv_k, s->pass.kv_v);
	return sf_state_buffer_bytes(&s->model.cfg, &po);
}

int serve_slots_open(struct server *s, enum sf_kv_type kv_k, enum sf_kv_type kv_v,
		     struct sf_err *e)
{
	int ret;

	if (!(s->slots = calloc((size_t)s->nslots, sizeof(*s->slots))))
		return sf_err_set(e, -ENOMEM, "slots: %s", strerror(ENOMEM));
	for (int i = 0; i < s->nslots; i++) {
		struct sf_state_opts so = { .seq_len = s->ctx, .batch = s->batch, .kv_k = kv_k,
					    .kv_v = kv_v, .last_logits = 1 };
		if ((ret = sf_state_init_opts(&s->slots[i].st, &s->model.cfg, &so, e)))
			return ret;
		s->slots[i].st.pool = s->pool;
		s->slots[i].st.exec = s->sparse ? sf_sparse_exec(s->sparse) : NULL;
		if (!(s->slots[i].hist = malloc((size_t)s->ctx * sizeof(int32_t))))
			return sf_err_set(e, -ENOMEM, "slots: %s", strerror(ENOMEM));
	}
	struct sf_state_opts po = pass_opts(s, kv_k, kv_v);
	if ((ret = sf_state_init_opts(&s->pass, &s->model.cfg, &po, e)))
		return ret;
	s->pass.pool = s->pool;
	if (!(s->pass_seqs = calloc((size_t)s->nslots, sizeof(*s->pass_seqs))) ||
	    !(s->pass_slots = calloc((size_t)s->nslots, sizeof(*s->pass_slots))) ||
	    !(s->pass_tokens = calloc((size_t)s->nslots, sizeof(*s->pass_tokens))) ||
	    !(s->pass_pos = calloc((size_t)s->nslots, sizeof(*s->pass_pos))))
		return sf_err_set(e, -ENOMEM, "slots: %s", strerror(ENOMEM));
	return 0;
}

/* Sets the pass's exec (an image's decoder) as the slots'. */
void serve_slots_exec(struct server *s, const struct sf_group_exec *exec)
{
	for (int i = 0; i < s->nslots; i++)
		s->slots[i].st.exec = exec;
	s->pass.exec = exec;
}

/* Under mu: the slot's job ends; the slot is free. */
static void finish(struct server *s, struct slot *sl, enum finish f)
{
	struct job *j = sl->job;

	j->finish = f;
	j->done = 1;
	j->t_done = sf_now_ns();
	if (!j->t_prompt)	/* ended in its prompt */
		j->t_prompt = j->t_start ? j->t_done : 0;
	j->ready = j->text.n;
	s->completion_tokens += j->ntokens;
	s->prompt_tokens += sl->at > sl->reused ? sl->at - sl->reused : 0;
	s->prompt_reused += sl->at > sl->reused ? sl->reused : sl->at;
	if (f == FINISH_CANCEL)
		s->cancelled++;
	sf_sampler_free(&sl->sampler);
	sf_detok_free(&sl->detok);
	sl->job = NULL;
	s->busy--;
	job_put(j);
	pthread_cond_broadcast(&s->progress);
}

/* Under mu: token's text (n bytes at p; token -1: what the decoder held
 * back) added to the job's text, as add_text, or in an answer in
 * channels to where its channel puts it: the text, the reasoning (no
 * stop string looks there) or nowhere (the markers and names). */
static int add_part(struct slot *sl, int32_t token, const char *p, size_t n, int final)
{
	struct job *j = sl->job;

	if (j->channels)
		switch (sf_chat_channels_push(&sl->channels, token, p, n)) {
		case SF_CHAT_PART_REASONING:
			if (sbuf_add(&j->reasoning, p, n))
				return -ENOMEM;
			/* the text grows by nothing */
			__attribute__((fallthrough));
		case SF_CHAT_PART_NONE:
			n = 0;
			break;
		default:
			break;
		}
	return add_text(j, p, n, final);
}

/* Outside mu: the job's sampler and its decoder, which has seen the
 * prompt unless the job is a chat's answer (how the first piece decodes
 * depends on what precedes it: the same text as sf-run's, as sf-run
 * -cnv's answer). */
static int slot_start(struct server *s, struct slot *sl, struct sf_err *e)
{
	struct job *j = sl->job;
	int ret;

	if (s->delay_ms)	/* test only: SF_SERVE_TOKEN_DELAY_MS */
		usleep((useconds_t)s->delay_ms * 1000);
	j->t_start = sf_now_ns();
	sf_detok_init(&sl->detok, s->tok, SF_DECODE_SKIP_SPECIAL);
	if (j->channels) {	/* the answer opens after <|start|>assistant */
		sl->channels = s->channels;
		sf_chat_channels_start(&sl->channels);
	}
	if ((ret = sf_sampler_init(&sl->sampler, s->model.cfg.vocab_size, j->temp, j->top_p,
				   j->seed, e)) ||
	    (ret = sf_sampler_set_penalty(&sl->sampler, j->repeat_penalty, j->repeat_last_n, e)))
		return ret;
	sl->sampler.top_k = j->top_k;
	sl->sampler.min_p = j->min_p;
	sf_sampler_set_penalties(&sl->sampler, j->freq_penalty, j->presence_penalty);
	for (size_t i = 0; i < j->nprompt; i++) {
		const char *p;
		size_t n;
		sf_sampler_accept(&sl->sampler, j->prompt[i]);
		if (!j->answer && (ret = sf_detok_push(&sl->detok, j->prompt[i], &p, &n)))
			return sf_err_set(e, ret, "the prompt: %s", sf_strerror(ret));
	}
	/* what the prompt still holds back is not the completion's */
	if (!j->answer && (ret = sf_detok_mark(&sl->detok)))
		return sf_err_set(e, ret, "the prompt: %s", sf_strerror(ret));
	/* the KV cache holds the positions of the tokens before, as the
	 * previous job fed them: those the prompt begins with are kept (the
	 * floats a pass gives them again), the last prompt token fed anyway
	 * for the logits */
	sl->reused = sl->reused < j->nprompt ? sl->reused : j->nprompt - 1;
	sl->at = sl->pos = sl->nhist = sl->reused;
	sl->made = 0;
	sl->logits = NULL;
	return 0;
}

/* After a pass: the sparse decoder's read error or the pass's own. */
static int pass_failed(struct server *s, struct slot *sl, struct sf_err *e)
{
	int ret = s->sparse ? sf_sparse_error(s->sparse, e) : 0;
	return ret ? ret : sf_state_error(&sl->st, e);
}

/* Outside mu: the job of a slot fails with e's message. */
static void fail(struct server *s, struct slot *sl, const struct sf_err *e, int ret)
{
	sl->nhist = 0;	/* what its KV cache holds is not known */
	pthread_mutex_lock(&s->mu);
	snprintf(sl->job->error, sizeof(sl->job->error), "%s", e->msg[0] ? e->msg
		 : sf_strerror(ret));
	s->errors++;
	finish(s, sl, FINISH_ERROR);
	pthread_mutex_unlock(&s->mu);
}

/* A busy slot's part of a round, outside mu but for publishing: a batch
 * of its prompt (a pass of its own), or a token sampled and its text
 * added. Returns 1 when the token is to be fed (*token: the round's pass
 * gives the next logits), else 0 (the prompt's pass done, or the job
 * ended). */
static int slot_step(struct server *s, struct slot *sl, int32_t *token_out)
{
	struct job *j = sl->job;
	struct sf_err e = { 0 };
	enum finish f = FINISH_NONE;
	const char *p = NULL;
	size_t n = 0;
	int ret = 0, stopped = 0;

	*token_out = -1;
	if (sl->fresh) {
		sl->fresh = 0;
		if ((ret = slot_start(s, sl, &e)))
			goto failed;
	}
	if (sl->at < j->nprompt) {
		size_t left = j->nprompt - sl->at;
		int T = left < (size_t)s->batch ? (int)left : s->batch;
		sl->st.skip_logits = sl->at + (size_t)T < j->nprompt;
		sl->logits = sf_forward_batch(&s->model, &sl->st, j->prompt + sl->at, T,
					      (int)sl->at, 0);
		if ((ret = pass_failed(s, sl, &e)))
			goto failed;
		memcpy(sl->hist + sl->at, j->prompt + sl->at, (size_t)T * sizeof(*sl->hist));
		sl->at += (size_t)T;
		sl->pos = sl->nhist = sl->at;
		if (sl->at == j->nprompt)
			j->t_prompt = sf_now_ns();
		if (sl->at < j->nprompt || j->max_tokens != 0)
			return 0;
		f = FINISH_LENGTH;	/* max_tokens 0: the prompt only */
		goto publish;
	}
	if (s->delay_ms)
		usleep((useconds_t)s->delay_ms * 1000);
	int32_t token = sf_sample(&sl->sampler, sl->logits);
	sf_sampler_accept(&sl->sampler, token);
	if ((sf_cli_is_eos(&s->model, s->tok, token) || token == s->eot) && !j->ignore_eos) {
		f = FINISH_STOP;
		goto publish;
	}
	sl->made++;
	if ((ret = sf_detok_push(&sl->detok, token, &p, &n))) {
		sf_err_set(&e, ret, "generation: %s", sf_strerror(ret));
		goto failed;
	}
	pthread_mutex_lock(&s->mu);
	j->ntokens++;
	stopped = add_part(sl, token, p, n, 0);
	if (stopped >= 0 && sbuf_add(&j->ends, (const char *)&j->text.n, sizeof(size_t)))
		stopped = -ENOMEM;
	if (stopped < 0) {
		pthread_mutex_unlock(&s->mu);
		sf_err_set(&e, -ENOMEM, "generation: %s", strerror(ENOMEM));
		goto failed;
	}
	if (stopped)
		finish(s, sl, FINISH_STOP);
	else
		pthread_cond_broadcast(&s->progress);
	pthread_mutex_unlock(&s->mu);
	if (stopped)
		return 0;
	if (sl->made == j->max_tokens || sl->pos == (size_t)s->ctx) {
		f = FINISH_LENGTH;
		goto publish;
	}
	*token_out = token;
	return 1;
publish:
	/* the end: what the decoder held back */
	if ((ret = sf_detok_finish(&sl->detok, &p, &n))) {
		sf_err_set(&e, ret, "generation: %s", sf_strerror(ret));
		goto failed;
	}
	pthread_mutex_lock(&s->mu);
	if (add_part(sl, -1, p, n, 1) < 0)
		snprintf(j->error, sizeof(j->error), "generation: %s", strerror(ENOMEM));
	finish(s, sl, j->error[0] ? FINISH_ERROR : f);
	pthread_mutex_unlock(&s->mu);
	return 0;
failed:
	fail(s, sl, &e, ret);
	return 0;
}

/* One pass over the weights for the n tokens the round's slots sampled:
 * each slot's next logits, copied into its own state's row. */
static void round_pass(struct server *s, int n)
{
	struct sf_err e = { 0 };
	size_t vocab = (size_t)s->model.cfg.vocab_size;
	float *lm = sf_forward_multi(&s->model, &s->pass, s->pass_seqs, s->pass_tokens,
				     s->pass_pos, n);
	int ret = s->sparse ? sf_sparse_error(s->sparse, &e) : 0;

	if (!ret && !lm)
		ret = sf_state_error(&s->pass, &e);
	for (int i = 0; i < n; i++) {
		struct slot *sl = s->pass_slots[i];
		if (ret) {
			fail(s, sl, &e, ret);
			continue;
		}
		memcpy(sl->st.logits, lm + (size_t)i * vocab, vocab * sizeof(float));
		sl->logits = sl->st.logits;
		sl->hist[sl->pos] = s->pass_tokens[i];
		sl->nhist = ++sl->pos;
	}
	if (ret)	/* a failed pass stays failed: a fresh state for the next */
		s->pass.err = (struct sf_err){ 0 };
}

static void *decoder(void *arg)
{
	struct server *s = arg;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		/* cancelled jobs leave their slots */
		for (int i = 0; i < s->nslots; i++)
			if (s->slots[i].job && s->slots[i].job->cancelled)
				finish(s, &s->slots[i], FINISH_CANCEL);
		/* queued ones take the free slots, each the one whose KV cache
		 * holds the longest start of its prompt */
		while (s->head && !s->stopping) {
			struct job *j = s->head;
			struct slot *best = NULL;
			size_t best_n = 0;
			for (int i = 0; i < s->nslots; i++) {
				struct slot *sl = &s->slots[i];
				size_t n = 0;
				if (sl->job)
					continue;
				while (n < sl->nhist && n < j->nprompt && sl->hist[n] == j->prompt[n])
					n++;
				if (!best || n > best_n) {
					best = sl;
					best_n = n;
				}
			}
			if (!best)
				break;
			if (!(s->head = j->next))
				s->tail = NULL;
			s->queued--;
			j->in_queue = 0;
			best->job = j;
			best->fresh = 1;
			best->reused = best_n;
			s->busy++;
		}
		if (!s->busy) {
			if (s->stopping)
				break;
			pthread_cond_wait(&s->work, &s->mu);
			continue;
		}
		pthread_mutex_unlock(&s->mu);
		int n = 0;
		for (int i = 0; i < s->nslots; i++) {
			struct slot *sl = &s->slots[i];
			int32_t token;
			/* only this thread sets or clears sl->job */
			if (sl->job && slot_step(s, sl, &token)) {
				s->pass_slots[n] = sl;
				s->pass_seqs[n] = &sl->st;
				s->pass_tokens[n] = token;
				s->pass_pos[n] = (int)sl->pos;
				n++;
			}
		}
		if (n)
			round_pass(s, n);
		pthread_mutex_lock(&s->mu);
		s->rounds++;
		s->round_tokens += (uint64_t)n;
		if (n > s->pass_max)
			s->pass_max = n;
		if (s->sparse) {
			s->flash_bytes = sf_sparse_bytes_moved(s->sparse);
			sf_sparse_cache_counts(s->sparse, &s->cache_lookups, &s->cache_hits);
		}
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

int serve_decoder_start(struct server *s, struct sf_err *e)
{
	int ret = pthread_create(&s->decoder, NULL, decoder, s);
	if (ret)
		return sf_err_set(e, -ret, "decoder thread: %s", strerror(ret));
	s->decoder_started = 1;
	return 0;
}

void serve_slots_close(struct server *s)
{
	if (s->decoder_started) {
		pthread_mutex_lock(&s->mu);
		s->stopping = 1;
		for (int i = 0; i < s->nslots; i++)
			if (s->slots[i].job)
				s->slots[i].job->cancelled = 1;
		pthread_cond_signal(&s->work);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->decoder, NULL);
		s->decoder_started = 0;
	}
	for (int i = 0; s->slots && i < s->nslots; i++) {
		sf_state_free(&s->slots[i].st);
		free(s->slots[i].hist);
	}
	free(s->slots);
	s->slots = NULL;
	sf_state_free(&s->pass);
	free(s->pass_seqs);
	free(s->pass_slots);
	free(s->pass_tokens);
	free(s->pass_pos);
}
