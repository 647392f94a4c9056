/* sf-serve's HTTP front end on libmicrohttpd, a thread per connection:
 * routes (OpenAI's and ollama's in one table), the API key, CORS, bounded
 * bodies, answers whole or streamed (server-sent events, or ollama's
 * newline-delimited JSON; each token's text flushed as it comes), a
 * client that goes away cancelling its job, one log line per request.
 * See man/sf-serve.1. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cli.h"
#include "serve.h"

#define WAIT_MS 100	/* how often a waiting request looks whether its client is gone */

/* One request, from its first call to its completion. */
struct request {
	struct server *s;
	double t0;
	char method[16], path[128], remote[64];
	struct sbuf body;
	int too_large, status;
	MHD_socket fd;
	struct api_req api;	/* a completion's; api.job NULL for the others */
	char id[40];
	time_t created;
	/* a stream */
	struct sbuf out;	/* bytes to write */
	size_t out_at;
	size_t sent;		/* of the job's text */
	size_t rsent;		/* of its reasoning */
	size_t token;		/* the token whose text ends after sent */
	int phase;		/* 0: text, 1: the end written */
	size_t prompt_tokens, completion_tokens;
};

static void add_cors(struct MHD_Response *r)
{
	MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
	MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
	MHD_add_response_header(r, "Access-Control-Allow-Headers",
				"Authorization, Content-Type");
}

static enum MHD_Result send_buf(struct request *q, struct MHD_Connection *c, int status,
				const char *type, const char *p, size_t n, const char *retry)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)p,
								 MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	if (type)
		MHD_add_response_header(r, "Content-Type", type);
	if (retry)
		MHD_add_response_header(r, "Retry-After", retry);
	add_cors(r);
	q->status = status;
	enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
	MHD_destroy_response(r);
	return ret;
}

/* Sends j (a reference taken) as JSON. */
static enum MHD_Result send_json(struct request *q, struct MHD_Connection *c, int status,
				 json_t *j, const char *retry)
{
	char *d = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!d)
		return MHD_NO;
	enum MHD_Result ret = send_buf(q, c, status, "application/json", d, strlen(d), retry);
	free(d);
	return ret;
}

/* An error in the shape of the request's API (OpenAI's, or ollama's
 * under /api/). */
static enum MHD_Result send_error(struct request *q, struct MHD_Connection *c, int status,
				  const char *code, const char *msg)
{
	return send_json(q, c, status, api_error_of(q->api.wire, status, code, msg),
			 status == 503 ? "1" : NULL);
}

/* The client closed its end (or the connection broke). */
static int peer_gone(MHD_socket fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Under mu: waits up to WAIT_MS for the job to change; 1 when the client
 * is gone. */
static int wait_job(struct request *q)
{
	struct server *s = q->s;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += WAIT_MS * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(&s->progress, &s->mu, &ts);
	return peer_gone(q->fd);
}

/* Under mu: gives up the job (cancelled if not done). */
static void drop_job(struct request *q)
{
	if (q->api.job) {
		q->prompt_tokens = q->api.job->nprompt;
		q->completion_tokens = q->api.job->ntokens;
		serve_job_release(q->s, q->api.job);
		q->api.job = NULL;
	}
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct request *q = cls;
	struct server *s = q->s;
	(void)pos;

	for (;;) {
		if (q->out_at < q->out.n) {
			size_t n = q->out.n - q->out_at < max ? q->out.n - q->out_at : max;
			memcpy(buf, q->out.p + q->out_at, n);
			q->out_at += n;
			return (ssize_t)n;
		}
		q->out.n = q->out_at = 0;
		if (q->phase)
			return MHD_CONTENT_READER_END_OF_STREAM;
		pthread_mutex_lock(&s->mu);
		struct job *j = q->api.job;
		int gone = 0;
		while (!j->done && j->ready == q->sent && j->reasoning.n == q->rsent &&
		       !(gone = wait_job(q)))
			;
		if (gone) {
			drop_job(q);
			pthread_mutex_unlock(&s->mu);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		int ret = 0;
		/* the reasoning as it comes (no stop string takes it back); in
		 * harmony it comes before the answer's text */
		if (j->reasoning.n > q->rsent) {
			ret = api_chunk(&q->out, s, &q->api, q->id, q->created, CHUNK_REASONING,
					j->reasoning.p + q->rsent, j->reasoning.n - q->rsent, j);
			q->rsent = j->reasoning.n;
		}
		/* a chunk a token, of the text no stop string can take back */
		const size_t *ends = (const size_t *)j->ends.p;
		size_t nends = j->ends.n / sizeof(size_t);
		while (!ret && q->sent < j->ready) {
			size_t to = j->ready;
			while (q->token < nends && ends[q->token] <= q->sent)
				q->token++;
			if (q->token < nends && ends[q->token] < to)
				to = ends[q->token];
			ret = api_chunk(&q->out, s, &q->api, q->id, q->created, CHUNK_DELTA,
					j->text.p + q->sent, to - q->sent, j);
			q->sent = to;
		}
		if (j->done && j->finish == FINISH_ERROR) {
			ret = ret || api_stream_error(&q->out, &q->api, j->error);
			q->phase = 1;
		} else if (j->done) {
			ret = ret || api_chunk(&q->out, s, &q->api, q->id, q->created, CHUNK_FINISH,
					       NULL, 0, j);
			if (q->api.include_usage)
				ret = ret || api_chunk(&q->out, s, &q->api, q->id, q->created,
						       CHUNK_USAGE, NULL, 0, j);
			ret = ret || api_stream_end(&q->out, &q->api);
			q->phase = 1;
		}
		if (q->phase)
			drop_job(q);
		pthread_mutex_unlock(&s->mu);
		if (ret)
			return MHD_CONTENT_READER_END_WITH_ERROR;
	}
}

/* POST /v1/completions and /v1/chat/completions, ollama's /api/generate
 * and /api/chat: one request core, the answer in the wire's shape. */
static enum MHD_Result completion(struct request *q, struct MHD_Connection *c, int chat)
{
	struct server *s = q->s;
	json_t *err = NULL;
	int status = api_parse(s, q->body.p ? q->body.p : "", q->body.n, chat, q->api.wire,
			       &q->api, &err);

	if (status)
		return send_json(q, c, status, err, NULL);
	if (q->api.load)	/* ollama's "load the model": it is */
		return send_json(q, c, 200, api_answer(s, &q->api, NULL, 0, "", 0, NULL), NULL);
	static unsigned long long counter;
	snprintf(q->id, sizeof(q->id), "%s-%llx%llx", chat ? "chatcmpl" : "cmpl",
		 (unsigned long long)time(NULL), __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
	q->created = time(NULL);
	int ret = serve_submit(s, q->api.job);
	if (ret) {
		pthread_mutex_lock(&s->mu);
		s->rejected++;
		drop_job(q);
		pthread_mutex_unlock(&s->mu);
		return send_error(q, c, 503, ret == -EBUSY ? "queue_full" : "shutting_down",
				  ret == -EBUSY ? "every slot is busy and the queue is full: retry "
				  "later" : "the server is shutting down");
	}
	if (q->api.stream) {
		if (chat && api_chunk(&q->out, s, &q->api, q->id, q->created, CHUNK_ROLE, NULL, 0,
				      q->api.job))
			return MHD_NO;
		struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
									   stream_read, q, NULL);
		if (!r)
			return MHD_NO;
		MHD_add_response_header(r, "Content-Type", q->api.wire == WIRE_OLLAMA
					? "application/x-ndjson" : "text/event-stream");
		MHD_add_response_header(r, "Cache-Control", "no-cache");
		add_cors(r);
		q->status = 200;
		enum MHD_Result mr = MHD_queue_response(c, MHD_HTTP_OK, r);
		MHD_destroy_response(r);
		return mr;
	}
	pthread_mutex_lock(&s->mu);
	struct job *j = q->api.job;
	int gone = 0;
	while (!j->done && !(gone = wait_job(q)))
		;
	if (gone) {
		drop_job(q);
		pthread_mutex_unlock(&s->mu);
		q->status = 499;	/* nginx's "client closed request", for the log */
		return MHD_NO;
	}
	json_t *answer = j->finish == FINISH_ERROR ? api_error_of(q->api.wire, 500, NULL, j->error)
		: api_answer(s, &q->api, q->id, q->created, j->text.p ? j->text.p : "",
			     j->text.n, j);
	int failed = j->finish == FINISH_ERROR;
	drop_job(q);
	pthread_mutex_unlock(&s->mu);
	return send_json(q, c, failed ? 500 : 200, answer, NULL);
}

/* The endpoints past /health: OpenAI's (those but /metrics also under
 * /v1) and ollama's. */
enum ep_kind { EP_MODELS, EP_METRICS, EP_COMPLETION, EP_CHAT, EP_TAGS, EP_VERSION, EP_SHOW };
static const struct endpoint {
	const char *path;
	enum ep_kind kind;
	int post;
	enum api_wire wire;
} endpoints[] = {
	{ "/models", EP_MODELS, 0, WIRE_OPENAI },
	{ "/completions", EP_COMPLETION, 1, WIRE_OPENAI },
	{ "/chat/completions", EP_CHAT, 1, WIRE_OPENAI },
	{ "/metrics", EP_METRICS, 0, WIRE_OPENAI },
	{ "/api/tags", EP_TAGS, 0, WIRE_OLLAMA },
	{ "/api/version", EP_VERSION, 0, WIRE_OLLAMA },
	{ "/api/show", EP_SHOW, 1, WIRE_OLLAMA },
	{ "/api/generate", EP_COMPLETION, 1, WIRE_OLLAMA },
	{ "/api/chat", EP_CHAT, 1, WIRE_OLLAMA },
};

static const struct endpoint *find_endpoint(const char *path)
{
	for (size_t i = 0; i < sizeof(endpoints) / sizeof(endpoints[0]); i++) {
		const struct endpoint *ep = &endpoints[i];
		if (!strcmp(path, ep->path) || (ep->wire == WIRE_OPENAI && ep->kind != EP_METRICS &&
						!strncmp(path, "/v1/", 4) && !strcmp(path + 3, ep->path)))
			return ep;
	}
	return NULL;
}

static enum MHD_Result route(struct request *q, struct MHD_Connection *c)
{
	struct server *s = q->s;
	const char *m = q->method, *p = q->path;
	int get = !strcmp(m, "GET") || !strcmp(m, "HEAD"), post = !strcmp(m, "POST");

	if (!strcmp(m, "OPTIONS")) {	/* CORS preflight */
		struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL,
									 MHD_RESPMEM_PERSISTENT);
		add_cors(r);
		MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
		q->status = 204;
		enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, r);
		MHD_destroy_response(r);
		return ret;
	}
	int ready;
	pthread_mutex_lock(&s->mu);
	ready = s->ready;
	pthread_mutex_unlock(&s->mu);
	if (!strcmp(p, "/health")) {
		if (!get)
			return send_error(q, c, 405, "method_not_allowed", "/health takes GET");
		return ready ? send_json(q, c, 200, json_pack("{s:s}", "status", "ok"), NULL)
			: send_error(q, c, 503, "loading", "the model is loading");
	}
	if (!strcmp(p, "/") && get)	/* ollama's heartbeat, which its clients ask first */
		return send_buf(q, c, 200, "text/plain; charset=utf-8", "Ollama is running", 17,
				NULL);
	if (!strncmp(p, "/api/", 5))	/* errors in ollama's shape */
		q->api.wire = WIRE_OLLAMA;
	if (s->api_key) {
		const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
							       MHD_HTTP_HEADER_AUTHORIZATION);
		if (!auth || strncmp(auth, "Bearer ", 7) || strcmp(auth + 7, s->api_key))
			return send_error(q, c, 401, "invalid_api_key", auth ? "invalid API key"
					  : "an API key is required: Authorization: Bearer KEY");
	}
	const struct endpoint *ep = find_endpoint(q->path);
	if (!ep)
		return send_error(q, c, 404, "not_found", "no such endpoint");
	q->api.wire = ep->wire;
	if ((ep->post && !post) || (!ep->post && !get))
		return send_error(q, c, 405, "method_not_allowed", ep->post
				  ? "this endpoint takes POST" : "this endpoint takes GET");
	if (ep->kind == EP_METRICS) {
		struct sbuf b = { 0 };
		pthread_mutex_lock(&s->mu);
		int ret = api_metrics(&b, s);
		pthread_mutex_unlock(&s->mu);
		enum MHD_Result mr = ret ? MHD_NO : send_buf(q, c, 200, "text/plain; version=0.0.4",
							     b.p, b.n, NULL);
		sbuf_free(&b);
		return mr;
	}
	if (ep->kind == EP_VERSION)
		return send_json(q, c, 200, api_version(), NULL);
	if (!ready)
		return send_error(q, c, 503, "loading", "the model is loading");
	if (ep->kind == EP_MODELS)
		return send_json(q, c, 200, api_models(s), NULL);
	if (ep->kind == EP_TAGS)
		return send_json(q, c, 200, api_tags(s), NULL);
	if (q->too_large) {
		char msg[96];
		snprintf(msg, sizeof(msg), "the body is larger than %zu bytes", s->max_body);
		return send_error(q, c, 413, "request_too_large", msg);
	}
	if (ep->kind == EP_SHOW) {
		json_t *out;
		int status = api_show(s, q->body.p ? q->body.p : "", q->body.n, &out);
		return send_json(q, c, status ? status : 200, out, NULL);
	}
	return completion(q, c, ep->kind == EP_CHAT);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *data,
				  size_t *size, void **con_cls)
{
	struct server *s = cls;
	struct request *q = *con_cls;
	(void)version;

	if (!q) {
		if (!(q = calloc(1, sizeof(*q))))
			return MHD_NO;
		q->s = s;
		q->t0 = sf_now();
		snprintf(q->method, sizeof(q->method), "%s", method);
		snprintf(q->path, sizeof(q->path), "%s", url);
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		q->fd = ci ? ci->connect_fd : -1;
		ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		if (ci && ci->client_addr) {
			const struct sockaddr *sa = ci->client_addr;
			if (sa->sa_family == AF_INET)
				inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr,
					  q->remote, sizeof(q->remote));
			else if (sa->sa_family == AF_INET6)
				inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr,
					  q->remote, sizeof(q->remote));
		}
		*con_cls = q;
		pthread_mutex_lock(&s->mu);
		s->in_flight++;
		pthread_mutex_unlock(&s->mu);
		return MHD_YES;
	}
	if (*size) {
		if (q->body.n + *size > s->max_body || sbuf_add(&q->body, data, *size))
			q->too_large = 1;
		*size = 0;
		return MHD_YES;
	}
	return route(q, c);
}

static void log_request(const struct request *q)
{
	struct server *s = q->s;
	double secs = sf_now() - q->t0;

	if (s->quiet)
		return;
	if (s->log_json) {
		char ts[32];
		time_t now = time(NULL);
		struct tm tm;
		strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
		json_t *j = json_pack("{s:s,s:s,s:s,s:s,s:i,s:f,s:I,s:I}", "time", ts, "remote",
				      q->remote, "method", q->method, "path", q->path, "status",
				      q->status, "seconds", secs, "prompt_tokens",
				      (json_int_t)q->prompt_tokens, "completion_tokens",
				      (json_int_t)q->completion_tokens);
		char *d = j ? json_dumps(j, JSON_COMPACT) : NULL;
		if (d)
			fprintf(stderr, "%s\n", d);
		free(d);
		json_decref(j);
		return;
	}
	fprintf(stderr, "%s: %s \"%s %s\" %d %.3f s", sf_progname, q->remote, q->method, q->path,
		q->status, secs);
	if (q->prompt_tokens)
		fprintf(stderr, ", prompt %zu, completion %zu %s", q->prompt_tokens,
			q->completion_tokens, sf_plural(q->completion_tokens, "token", "tokens"));
	fputc('\n', stderr);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct server *s = cls;
	struct request *q = *con_cls;
	(void)c;

	if (!q)
		return;
	pthread_mutex_lock(&s->mu);
	if (q->api.job && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && q->status == 200)
		q->status = 499;
	drop_job(q);
	s->requests++;
	if (q->status >= 100 && q->status < 600)
		s->by_status[q->status / 100]++;
	s->in_flight--;
	pthread_mutex_unlock(&s->mu);
	log_request(q);
	sbuf_free(&q->body);
	sbuf_free(&q->out);
	free(q);
	*con_cls = NULL;
}

struct MHD_Daemon *serve_http_start(struct server *s, int fd, struct sf_err *e)
{
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
		MHD_USE_ITC, 0, NULL, NULL, on_request, s,
		MHD_OPTION_LISTEN_SOCKET, fd,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)(s->nslots + s->queue_max + 32),
		MHD_OPTION_CONNECTION_TIMEOUT, 120u,
		MHD_OPTION_END);
	if (!d)
		sf_err_set(e, -EIO, "the HTTP daemon did not start (libmicrohttpd)");
	return d;
}
