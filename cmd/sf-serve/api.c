/* sf-serve's OpenAI API in JSON: requests read field by field with the
 * type and range each must have (anything else a 400, unknown fields
 * ignored), the answers, stream chunks, the model list and the
 * Prometheus metrics. See man/sf-serve.1, API. */
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/model.h"
#include "engine/chat.h"
#include "serve.h"

const char *api_error_type(int status)
{
	switch (status) {
	case 401: return "authentication_error";
	case 404: return "not_found_error";
	case 503: return "unavailable_error";
	case 500: return "server_error";
	default: return "invalid_request_error";
	}
}

json_t *api_error(const char *message, const char *type, const char *code)
{
	return json_pack("{s:{s:s,s:s,s:s?}}", "error", "message", message, "type", type,
			 "code", code);
}

/* A 400 with the message, into *err. */
static int bad(json_t **err, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int bad(json_t **err, const char *code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	*err = api_error(msg, "invalid_request_error", code);
	return 400;
}

/* A number field in [lo, hi], absent or null leaving *v; 0 or 400. */
static int get_num(json_t *req, const char *key, double lo, double hi, double *v, json_t **err)
{
	json_t *f = json_object_get(req, key);

	if (!f || json_is_null(f))
		return 0;
	if (!json_is_number(f))
		return bad(err, "invalid_type", "'%s': expected a number", key);
	double x = json_number_value(f);
	if (!(x >= lo && x <= hi))
		return bad(err, "invalid_value", "'%s': %g is out of range: expected %g to %g", key,
			   x, lo, hi);
	*v = x;
	return 0;
}

static int get_int(json_t *req, const char *key, json_int_t lo, json_int_t hi, json_int_t *v,
		   json_t **err)
{
	json_t *f = json_object_get(req, key);

	if (!f || json_is_null(f))
		return 0;
	if (!json_is_integer(f))
		return bad(err, "invalid_type", "'%s': expected an integer", key);
	json_int_t x = json_integer_value(f);
	if (x < lo || x > hi)
		return bad(err, "invalid_value", "'%s': %lld is out of range: expected %lld to %lld",
			   key, (long long)x, (long long)lo, (long long)hi);
	*v = x;
	return 0;
}

static int get_bool(json_t *req, const char *key, int *v, json_t **err)
{
	json_t *f = json_object_get(req, key);

	if (!f || json_is_null(f))
		return 0;
	if (!json_is_boolean(f))
		return bad(err, "invalid_type", "'%s': expected true or false", key);
	*v = json_is_true(f);
	return 0;
}

/* stop: a string or an array of strings (empty ones skipped). */
static int get_stop(json_t *req, struct job *j, json_t **err)
{
	json_t *f = json_object_get(req, "stop"), *v;
	size_t i;

	if (!f || json_is_null(f))
		return 0;
	if (json_is_string(f)) {
		if (json_string_length(f) && !(j->stop[j->nstop++] = strdup(json_string_value(f))))
			return bad(err, NULL, "stop: out of memory");
		goto lengths;
	}
	if (!json_is_array(f))
		return bad(err, "invalid_type", "'stop': expected a string or an array of strings");
	if (json_array_size(f) > SERVE_MAX_STOPS)
		return bad(err, "invalid_value", "'stop': %zu strings: at most %d",
			   json_array_size(f), SERVE_MAX_STOPS);
	json_array_foreach(f, i, v) {
		if (!json_is_string(v))
			return bad(err, "invalid_type", "'stop[%zu]': expected a string", i);
		if (json_string_length(v) && !(j->stop[j->nstop++] = strdup(json_string_value(v))))
			return bad(err, NULL, "stop: out of memory");
	}
lengths:
	for (int k = 0; k < j->nstop; k++)
		if (j->stop[k] && strlen(j->stop[k]) > j->stop_max)
			j->stop_max = strlen(j->stop[k]);
	return 0;
}

/* content: a string, an array of text parts, or null. */
static int get_content(json_t *m, size_t at, struct sbuf *b, json_t **err)
{
	json_t *c = json_object_get(m, "content"), *part;
	size_t i;

	if (!c || json_is_null(c))
		return sbuf_add(b, "", 0) ? bad(err, NULL, "out of memory") : 0;
	if (json_is_string(c))
		return sbuf_add(b, json_string_value(c), json_string_length(c))
			? bad(err, NULL, "out of memory") : 0;
	if (!json_is_array(c))
		return bad(err, "invalid_type", "'messages[%zu].content': expected a string or an "
			   "array of text parts", at);
	if (sbuf_add(b, "", 0))
		return bad(err, NULL, "out of memory");
	json_array_foreach(c, i, part) {
		json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
		if (!json_is_object(part) || !json_is_string(type) ||
		    strcmp(json_string_value(type), "text") || !json_is_string(text))
			return bad(err, "invalid_type", "'messages[%zu].content[%zu]': expected a text "
				   "part {\"type\": \"text\", \"text\": ...}", at, i);
		if (sbuf_add(b, json_string_value(text), json_string_length(text)))
			return bad(err, NULL, "out of memory");
	}
	return 0;
}

/* The prompt's text: completions' prompt, or chat's messages in the chat
 * template with the opening of the answer, as sf-run -cnv writes a first
 * turn. */
static int prompt_of(struct server *s, json_t *req, int chat, char **text, size_t *len,
		     json_t **err)
{
	if (!chat) {
		json_t *p = json_object_get(req, "prompt");
		if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
			p = json_array_get(p, 0);
		if (!p)
			return bad(err, "missing_field", "'prompt' is required");
		if (!json_is_string(p))
			return bad(err, "invalid_type", "'prompt': expected a string (or an array of "
				   "one string)");
		*len = json_string_length(p);
		if (!(*text = malloc(*len + 1)))
			return bad(err, NULL, "out of memory");
		memcpy(*text, json_string_value(p), *len + 1);
		return 0;
	}
	json_t *msgs = json_object_get(req, "messages"), *m;
	size_t n, i;
	int ret = 0;
	if (!msgs)
		return bad(err, "missing_field", "'messages' is required");
	if (!json_is_array(msgs) || !(n = json_array_size(msgs)))
		return bad(err, "invalid_type", "'messages': expected a non-empty array");
	struct sf_chat_msg *cm = calloc(n, sizeof(*cm));
	struct sbuf *texts = calloc(n, sizeof(*texts));
	if (!cm || !texts) {
		ret = bad(err, NULL, "out of memory");
		goto out;
	}
	json_array_foreach(msgs, i, m) {
		json_t *role = json_object_get(m, "role");
		const char *r = json_string_value(role);
		if (!json_is_object(m) || !r) {
			ret = bad(err, "invalid_type", "'messages[%zu]': expected an object with a role",
				  i);
			goto out;
		}
		if (!strcmp(r, "system") || !strcmp(r, "developer"))
			cm[i].role = SF_CHAT_SYSTEM;
		else if (!strcmp(r, "user"))
			cm[i].role = SF_CHAT_USER;
		else if (!strcmp(r, "assistant"))
			cm[i].role = SF_CHAT_ASSISTANT;
		else {
			ret = bad(err, "invalid_value", "'messages[%zu].role': '%s' is not system, "
				  "developer, user or assistant", i, r);
			goto out;
		}
		if ((ret = get_content(m, i, &texts[i], err)))
			goto out;
		cm[i].text = texts[i].p;
	}
	if (sf_chat_render(s->tmpl, cm, n, 1, text, len))
		ret = bad(err, NULL, "out of memory");
out:
	for (i = 0; texts && i < n; i++)
		sbuf_free(&texts[i]);
	free(texts);
	free(cm);
	return ret;
}

int api_parse(struct server *s, const char *body, size_t n, int chat, struct api_req *r,
	      json_t **err)
{
	json_error_t je;
	json_t *req = json_loadb(body, n, 0, &je), *so;
	struct job *j = calloc(1, sizeof(*j));
	double temp = SF_DEFAULT_TEMP, top_p = SF_DEFAULT_TOP_P, min_p = SF_DEFAULT_MIN_P,
		rp = SF_DEFAULT_REPEAT_PENALTY, fp = 0, pp = 0;
	json_int_t max = -1, top_k = SF_DEFAULT_TOP_K, last_n = SF_DEFAULT_REPEAT_LAST_N,
		seed = -1, nchoices = 1;
	char *text = NULL;
	size_t len;
	int ret;
	struct sf_err e = { 0 };

	*r = (struct api_req){ .chat = chat };
	if (!j) {
		json_decref(req);
		return bad(err, NULL, "out of memory");
	}
	if (!req) {
		ret = bad(err, "invalid_json", "the body is not JSON: %s at line %d column %d",
			  je.text, je.line, je.column);
		goto out;
	}
	if (!json_is_object(req)) {
		ret = bad(err, "invalid_type", "the body must be a JSON object");
		goto out;
	}
	if ((ret = get_num(req, "temperature", 0, 100, &temp, err)) ||
	    (ret = get_num(req, "top_p", 0, 1, &top_p, err)) ||
	    (ret = get_num(req, "min_p", 0, 1, &min_p, err)) ||
	    (ret = get_num(req, "repeat_penalty", 1e-3, 1e3, &rp, err)) ||
	    (ret = get_num(req, "frequency_penalty", -2, 2, &fp, err)) ||
	    (ret = get_num(req, "presence_penalty", -2, 2, &pp, err)) ||
	    (ret = get_int(req, "top_k", 0, INT32_MAX, &top_k, err)) ||
	    (ret = get_int(req, "repeat_last_n", 0, 1 << 24, &last_n, err)) ||
	    (ret = get_int(req, "max_tokens", -1, 1 << 30, &max, err)) ||
	    (ret = get_int(req, "max_completion_tokens", -1, 1 << 30, &max, err)) ||
	    (ret = get_int(req, "n_predict", -1, 1 << 30, &max, err)) ||
	    (ret = get_int(req, "seed", INT64_MIN, INT64_MAX, &seed, err)) ||
	    (ret = get_int(req, "n", 1, 1, &nchoices, err)) ||
	    (ret = get_bool(req, "stream", &r->stream, err)) ||
	    (ret = get_bool(req, "ignore_eos", &j->ignore_eos, err)) ||
	    (ret = get_stop(req, j, err)))
		goto out;
	if ((so = json_object_get(req, "stream_options")) && !json_is_null(so)) {
		if (!json_is_object(so)) {
			ret = bad(err, "invalid_type", "'stream_options': expected an object");
			goto out;
		}
		if ((ret = get_bool(so, "include_usage", &r->include_usage, err)))
			goto out;
	}
	if ((ret = prompt_of(s, req, chat, &text, &len, err)))
		goto out;
	if ((ret = sf_tokenizer_encode(s->tok, text, len, 1, &j->prompt, &j->nprompt, &e))) {
		ret = bad(err, NULL, "%s", e.msg);
		goto out;
	}
	if (j->nprompt == 0) {
		ret = bad(err, "invalid_value", "the prompt is empty, and the tokenizer adds no BOS "
			  "token to start from");
		goto out;
	}
	if (j->nprompt > (size_t)s->ctx) {
		ret = bad(err, "context_length_exceeded", "the prompt's %zu tokens do not fit the "
			  "context of %d positions", j->nprompt, s->ctx);
		goto out;
	}
	j->max_tokens = (long)max;
	j->temp = (float)temp;
	j->top_p = (float)top_p;
	j->min_p = (float)min_p;
	j->repeat_penalty = (float)rp;
	j->freq_penalty = (float)fp;
	j->presence_penalty = (float)pp;
	j->top_k = (int)top_k;
	j->repeat_last_n = (int)last_n;
	/* no seed: one of its own */
	j->seed = seed >= 0 || json_object_get(req, "seed") ? (uint64_t)seed
		: (uint64_t)sf_now_ns() ^ ((uint64_t)(uintptr_t)j << 16);
	j->answer = chat;
	j->refs = 1;
	r->job = j;
	j = NULL;
	ret = 0;
out:
	free(text);
	job_free(j);
	json_decref(req);
	return ret;
}

const char *api_finish_name(enum finish f)
{
	return f == FINISH_LENGTH ? "length" : "stop";
}

/* The bytes as a JSON string, invalid UTF-8 (never from the decoder,
 * which gives U+FFFD) replaced byte by byte. */
json_t *api_string(const char *p, size_t n)
{
	json_t *v = json_stringn(p, n);
	if (v)
		return v;
	struct sbuf b = { 0 };
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c < 0x80)
			sbuf_add(&b, p + i, 1);
		else
			sbuf_add(&b, "\xef\xbf\xbd", 3);
	}
	v = json_stringn(b.p ? b.p : "", b.n);
	sbuf_free(&b);
	return v;
}

static json_t *usage(const struct job *j)
{
	return json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)j->nprompt,
			 "completion_tokens", (json_int_t)j->ntokens, "total_tokens",
			 (json_int_t)(j->nprompt + j->ntokens));
}

json_t *api_answer(const struct server *s, const struct api_req *r, const char *id,
		   time_t created, const char *text, size_t n, const struct job *j)
{
	json_t *choice = r->chat
		? json_pack("{s:i,s:{s:s,s:o},s:s}", "index", 0, "message", "role", "assistant",
			    "content", api_string(text, n), "finish_reason", api_finish_name(j->finish))
		: json_pack("{s:i,s:o,s:n,s:s}", "index", 0, "text", api_string(text, n), "logprobs",
			    "finish_reason", api_finish_name(j->finish));
	return json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o}", "id", id, "object",
			 r->chat ? "chat.completion" : "text_completion", "created",
			 (json_int_t)created, "model", s->model_id, "choices", choice, "usage",
			 usage(j));
}

int api_chunk(struct sbuf *out, const struct server *s, const struct api_req *r,
	      const char *id, time_t created, enum api_chunk kind, const char *text, size_t n,
	      const struct job *j)
{
	json_t *choices = json_array(), *c = NULL;

	if (kind == CHUNK_ROLE)
		c = json_pack("{s:i,s:{s:s,s:s},s:n}", "index", 0, "delta", "role", "assistant",
			      "content", "", "finish_reason");
	else if (kind == CHUNK_DELTA && r->chat)
		c = json_pack("{s:i,s:{s:o},s:n}", "index", 0, "delta", "content",
			      api_string(text, n), "finish_reason");
	else if (kind == CHUNK_DELTA)
		c = json_pack("{s:i,s:o,s:n,s:n}", "index", 0, "text", api_string(text, n),
			      "logprobs", "finish_reason");
	else if (kind == CHUNK_FINISH && r->chat)
		c = json_pack("{s:i,s:{},s:s}", "index", 0, "delta", "finish_reason",
			      api_finish_name(j->finish));
	else if (kind == CHUNK_FINISH)
		c = json_pack("{s:i,s:s,s:n,s:s}", "index", 0, "text", "", "logprobs",
			      "finish_reason", api_finish_name(j->finish));
	if (c)
		json_array_append_new(choices, c);
	json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:o}", "id", id, "object",
			      r->chat ? "chat.completion.chunk" : "text_completion", "created",
			      (json_int_t)created, "model", s->model_id, "choices", choices);
	if (kind == CHUNK_USAGE)
		json_object_set_new(o, "usage", usage(j));
	char *d = o ? json_dumps(o, JSON_COMPACT) : NULL;
	int ret = d ? sbuf_printf(out, "data: %s\n\n", d) : -ENOMEM;
	free(d);
	json_decref(o);
	return ret;
}

json_t *api_models(const struct server *s)
{
	return json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list", "data", "id",
			 s->model_id, "object", "model", "created", (json_int_t)s->created,
			 "owned_by", "sparseflash");
}

static int metric(struct sbuf *out, const char *name, const char *type, const char *help,
		  double v)
{
	return sbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type,
			   name, v);
}

int api_metrics(struct sbuf *out, const struct server *s)
{
	int ret = 0;
	static const char *classes[] = { "1xx", "2xx", "3xx", "4xx", "5xx" };

	ret |= metric(out, "sf_requests_total", "counter", "HTTP requests answered",
		      (double)s->requests);
	ret |= sbuf_printf(out, "# HELP sf_responses_total HTTP responses by status class\n"
			   "# TYPE sf_responses_total counter\n");
	for (int i = 0; i < 5; i++)
		ret |= sbuf_printf(out, "sf_responses_total{class=\"%s\"} %llu\n", classes[i],
				   (unsigned long long)s->by_status[i + 1]);
	ret |= metric(out, "sf_rejected_total", "counter", "requests refused with 503 (queue full "
		      "or draining)", (double)s->rejected);
	ret |= metric(out, "sf_cancelled_total", "counter", "generations cancelled by a client "
		      "that went away", (double)s->cancelled);
	ret |= metric(out, "sf_errors_total", "counter", "generations that failed",
		      (double)s->errors);
	ret |= metric(out, "sf_prompt_tokens_total", "counter", "prompt tokens fed",
		      (double)s->prompt_tokens);
	ret |= metric(out, "sf_prompt_tokens_cached_total", "counter", "prompt tokens whose keys "
		      "and values a slot's KV cache held from the request before",
		      (double)s->prompt_reused);
	ret |= metric(out, "sf_completion_tokens_total", "counter", "tokens generated",
		      (double)s->completion_tokens);
	ret |= metric(out, "sf_queue_depth", "gauge", "requests waiting for a slot",
		      (double)s->queued);
	ret |= metric(out, "sf_slots_busy", "gauge", "slots generating", (double)s->busy);
	ret |= metric(out, "sf_slots_total", "gauge", "slots (--parallel)", (double)s->nslots);
	ret |= metric(out, "sf_decode_rounds_total", "counter", "the decoder's rounds",
		      (double)s->rounds);
	ret |= metric(out, "sf_batched_tokens_total", "counter", "tokens fed by the rounds' "
		      "passes over the weights, one pass for every slot's next token",
		      (double)s->round_tokens);
	ret |= metric(out, "sf_batched_tokens_max", "gauge", "the most slots' tokens one pass "
		      "over the weights fed", (double)s->pass_max);
	if (s->sparse)
		ret |= metric(out, "sf_flash_bytes_read_total", "counter", "bytes read from the image",
			      (double)s->flash_bytes);
	return ret ? -ENOMEM : 0;
}
