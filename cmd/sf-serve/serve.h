/* sf-serve's parts: the server's state, a request's job and the slots
 * that decode the jobs (slots.c), the requests and answers in JSON in
 * OpenAI's and ollama's shapes (api.c), the HTTP front end on libmicrohttpd (http.c) and main.c's
 * options. See man/sf-serve.1. */
#ifndef SF_SERVE_H
#define SF_SERVE_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "base/err.h"
#include "base/pool.h"
#include "engine/chat.h"
#include "engine/forward.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"
#include "formats/image.h"
#include "formats/model.h"
#include "online/sparse.h"

#define SERVE_DEFAULT_HOST "127.0.0.1"
#define SERVE_DEFAULT_PORT 8080
#define SERVE_DEFAULT_PARALLEL 2
#define SERVE_DEFAULT_QUEUE 16
#define SERVE_DEFAULT_MAX_BODY 1048576	/* 1 MiB */
#define SERVE_MAX_STOPS 16
#define SERVE_DRAIN_SECONDS 30	/* SIGTERM: how long the requests in flight may finish */
#define SERVE_OLLAMA_VERSION "0.9.0"	/* /api/version: the ollama API level answered */

/* A growing byte buffer. */
struct sbuf {
	char *p;
	size_t n, cap;
};
int sbuf_add(struct sbuf *b, const char *p, size_t n);	/* 0 or -ENOMEM */
int sbuf_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sbuf_free(struct sbuf *b);

enum finish { FINISH_NONE, FINISH_STOP, FINISH_LENGTH, FINISH_CANCEL, FINISH_ERROR };

/* One request's generation. The request's fields are set before the job
 * is queued and read-only after; the rest is under the server's lock. */
struct job {
	int32_t *prompt;	/* (nprompt) the tokens, BOS included */
	size_t nprompt;
	long max_tokens;	/* -1: until the end of text or the context is full */
	float temp, top_p, min_p, repeat_penalty, freq_penalty, presence_penalty;
	int top_k, repeat_last_n;
	int ignore_eos;		/* llama-server's: past the end-of-text token */
	int answer;		/* chat: the text decoded on its own, as sf-run -cnv's
				 * answers; else after the prompt, as sf-run's text */
	int channels;		/* an answer in harmony's channels (gpt-oss): the
				 * final one's text is the text, the others' the
				 * reasoning */
	uint64_t seed;
	char *stop[SERVE_MAX_STOPS];	/* the stop strings, NUL-terminated */
	int nstop;
	size_t stop_max;	/* the longest one's bytes */

	struct sbuf text;	/* the text so far, cut at a stop string */
	size_t ready;		/* of it, the bytes no stop string can take back */
	size_t ntokens;		/* tokens generated */
	struct sbuf ends;	/* (size_t) the text's length after each token: a
				 * stream's chunk a token */
	struct sbuf reasoning;	/* channels: the reasoning so far */
	enum finish finish;
	int done, cancelled, refs;
	int in_queue;		/* queued, not in a slot yet */
	char error[SF_ERR_MAX];	/* FINISH_ERROR's message */
	/* when (sf_now_ns) it was queued, took a slot, had its prompt fed and
	 * ended: ollama's durations */
	uint64_t t_submit, t_start, t_prompt, t_done;
	struct job *next;	/* in the queue */
};
void job_free(struct job *j);	/* accepts NULL */

struct slot {
	struct sf_runstate st;	/* its own KV cache */
	struct sf_sampler sampler;
	struct sf_detok detok;
	struct sf_chat_channels channels;	/* where the job's answer is */
	struct job *job;	/* NULL: free */
	int fresh;		/* job given, its sampler and decoder not set up yet */
	size_t at;		/* prompt tokens fed (or kept from the job before) */
	size_t reused;		/* of them, kept in the KV cache from the job before */
	int32_t *hist;		/* (ctx) the tokens whose keys and values the KV cache
				 * holds, at their positions */
	size_t nhist;
	size_t pos;		/* positions the KV cache holds */
	long made;		/* tokens generated */
	float *logits;		/* the last pass's, or NULL */
};

struct server {
	/* the model, read-only once ready */
	struct sf_image image;
	struct sf_model model;
	struct sf_tokenizer *tok;
	struct sf_sparse *sparse;	/* IMAGE; NULL for --model */
	struct sf_pool *pool;
	int ctx, batch, tmpl;
	int own_tmpl;		/* tmpl is the model's or --chat-template's, not the
				 * chatml fallback: ollama's /api/generate uses it */
	uint64_t model_bytes;	/* the model's files, for /api/tags */
	time_t model_mtime;
	int32_t eot;		/* the chat template's end-of-turn token, or -1 */
	struct sf_chat_channels channels;	/* harmony's markers, when harmony */
	int harmony;		/* the template's answers come in channels */
	const char *model_id;
	time_t created;
	/* options */
	int nslots, queue_max;
	size_t max_body;
	const char *api_key;
	int log_json, quiet, verbose;
	int delay_ms;		/* test only (SF_SERVE_TOKEN_DELAY_MS): a pause a token */

	struct slot *slots;
	struct sf_runstate pass;	/* the buffers of a round's pass (batch nslots) */
	struct sf_runstate **pass_seqs;	/* (nslots) the round's slots' states */
	struct slot **pass_slots;	/* (nslots) and the slots */
	int32_t *pass_tokens;		/* (nslots) their tokens */
	int *pass_pos;			/* (nslots) at these positions */
	pthread_t decoder;
	int decoder_started;

	/* under mu */
	pthread_mutex_t mu;
	pthread_cond_t work;		/* the decoder: a job queued or cancelled, or stop */
	pthread_cond_t progress;	/* the requests: text added, a job done */
	struct job *head, *tail;	/* queued, not in a slot yet */
	int queued, busy;		/* jobs queued; slots busy */
	int ready;			/* the model is loaded */
	int draining;			/* SIGTERM: no new jobs */
	int stopping;			/* the decoder ends */
	int in_flight;			/* HTTP requests being answered */
	uint64_t requests, errors, rejected, cancelled;
	uint64_t prompt_tokens, completion_tokens;
	uint64_t prompt_reused;		/* prompt tokens kept in a slot's KV cache */
	uint64_t flash_bytes;		/* IMAGE: bytes read, after the last round */
	uint64_t cache_lookups, cache_hits;	/* IMAGE: the column cache's, after the
						 * last round (sf_sparse_cache_counts) */
	uint64_t rounds, round_tokens;	/* the decoder's rounds, and the tokens their
					 * batched passes fed */
	int pass_max;			/* the most tokens one such pass fed */
	uint64_t by_status[6];		/* 1xx .. 5xx */
};

/* slots.c: the decoder thread over nslots slots, each with its own KV
 * cache: a round gives each slot in its prompt a batch of it, and the
 * next tokens of the others one pass together (sf_forward_multi). */
int serve_slots_open(struct server *s, enum sf_kv_type kv_k, enum sf_kv_type kv_v,
		     struct sf_err *e);
void serve_slots_close(struct server *s);	/* stops the decoder first */
int serve_decoder_start(struct server *s, struct sf_err *e);
void serve_slots_exec(struct server *s, const struct sf_group_exec *exec);
/* The bytes of the pass state's buffers (--ram counts them). */
uint64_t serve_pass_state_bytes(const struct server *s);
/* Queues j (a reference taken): 0, -EBUSY when the queue is full,
 * -ESHUTDOWN when draining. */
int serve_submit(struct server *s, struct job *j);
/* Under mu: a request gives up its job; it is cancelled (its slot freed
 * at the next round) and the reference dropped. */
void serve_job_release(struct server *s, struct job *j);

/* api.c: the requests and answers, one request core in two wire
 * formats: OpenAI's (/v1/...: server-sent events, errors as
 * {"error":{"message","type","code"}}) and ollama's (/api/...: the
 * sampling fields under "options", newline-delimited JSON, errors as
 * {"error":"..."}). */
enum api_wire { WIRE_OPENAI, WIRE_OLLAMA };
struct api_req {
	enum api_wire wire;
	int chat, stream, include_usage;
	int load;		/* ollama: no prompt or messages, "load the model" */
	struct job *job;
};
/* Parses a completion (chat: chat completion) request body into r (its
 * job tokenized); 0, or the HTTP status of the failure with *err set to
 * the error in the wire's shape (a new reference). */
int api_parse(struct server *s, const char *body, size_t n, int chat, enum api_wire wire,
	      struct api_req *r, json_t **err);
json_t *api_error(const char *message, const char *type, const char *code);
/* An error of that status in the wire's shape. */
json_t *api_error_of(enum api_wire wire, int status, const char *code, const char *message);
const char *api_error_type(int status);
/* The whole answer of a finished job (ollama: with r->load, of none). */
json_t *api_answer(const struct server *s, const struct api_req *r, const char *id,
		   time_t created, const char *text, size_t n, const struct job *j);
/* A stream's chunk: role (chat's first), a content delta, the finish or
 * the usage; appended to out as "data: JSON\n\n" (OpenAI's) or a line
 * of JSON (ollama's, which has no role or usage chunks). */
enum api_chunk { CHUNK_ROLE, CHUNK_DELTA, CHUNK_REASONING, CHUNK_FINISH, CHUNK_USAGE };
int api_chunk(struct sbuf *out, const struct server *s, const struct api_req *r,
	      const char *id, time_t created, enum api_chunk kind, const char *text, size_t n,
	      const struct job *j);
/* A stream's end after the finish, or a failure's message in its place. */
int api_stream_end(struct sbuf *out, const struct api_req *r);
int api_stream_error(struct sbuf *out, const struct api_req *r, const char *message);
json_t *api_models(const struct server *s);
/* ollama's /api/tags and /api/version; /api/show of the body: 0 and
 * *out the answer, or the status with *out the error. */
json_t *api_tags(const struct server *s);
json_t *api_version(void);
int api_show(const struct server *s, const char *body, size_t n, json_t **out);
/* The Prometheus text of /metrics (under mu). */
int api_metrics(struct sbuf *out, const struct server *s);
/* json_dumps that never fails on a text of invalid UTF-8 (bytes replaced
 * by U+FFFD): a string. */
json_t *api_string(const char *p, size_t n);
const char *api_finish_name(enum finish f);

/* http.c */
struct MHD_Daemon;
/* Starts the HTTP daemon on the bound socket fd. */
struct MHD_Daemon *serve_http_start(struct server *s, int fd, struct sf_err *e);

#endif
