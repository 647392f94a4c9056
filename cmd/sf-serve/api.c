/* sf-serve's API in JSON: requests read field by field with the type and
 * range each must have (anything else a 400, unknown fields ignored), the
 * answers and stream chunks in OpenAI's shape or ollama's, the model
 * lists and the Prometheus metrics. See man/sf-serve.1, Endpoints. */
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

json_t *api_error_of(enum api_wire wire, int status, const char *code, const char *message)
{
	return wire == WIRE_OLLAMA ? json_pack("{s:s}", "error", message)
		: api_error(message, api_error_type(status), code);
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

/* ollama's model field: the model's id, with or without a tag (":latest"). */
static int known_model(const struct server *s, const char *name)
{
	size_t n = strlen(s->model_id);
	return name && !strncmp(name, s->model_id, n) && (!name[n] || name[n] == ':');
}

/* The messages' text in the chat template with the opening of the answer. */
static int render(struct server *s, const struct sf_chat_msg *cm, size_t n, char **text,
		  size_t *len, json_t **err)
{
	return sf_chat_render(s->tmpl, cm, n, 1, text, len) ? bad(err, NULL, "out of memory") : 0;
}

/* A completion's prompt, as is; ollama's /api/generate (not raw) in the
 * model's own chat template after the system message, when it has one
 * (*answer set), as ollama writes a model's template; a model without
 * one takes the prompt as is, as ollama's "{{ .Prompt }}". */
static int prompt_text(struct server *s, json_t *req, const struct api_req *r, char **text,
		       size_t *len, int *answer, json_t **err)
{
	json_t *p = json_object_get(req, "prompt"), *sys = json_object_get(req, "system");
	int raw = 0, ret;

	if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
		p = json_array_get(p, 0);
	if (!p)
		return bad(err, "missing_field", "'prompt' is required");
	if (!json_is_string(p))
		return bad(err, "invalid_type", "'prompt': expected a string (or an array of "
			   "one string)");
	if (r->wire == WIRE_OLLAMA) {
		if ((ret = get_bool(req, "raw", &raw, err)))
			return ret;
		if (sys && !json_is_null(sys) && !json_is_string(sys))
			return bad(err, "invalid_type", "'system': expected a string");
	}
	if (r->wire == WIRE_OLLAMA && !raw && s->own_tmpl) {
		struct sf_chat_msg cm[2];
		size_t n = 0;
		if (json_string_length(sys))
			cm[n++] = (struct sf_chat_msg){ SF_CHAT_SYSTEM, json_string_value(sys) };
		cm[n++] = (struct sf_chat_msg){ SF_CHAT_USER, json_string_value(p) };
		*answer = 1;
		return render(s, cm, n, text, len, err);
	}
	*len = json_string_length(p);
	if (!(*text = malloc(*len + 1)))
		return bad(err, NULL, "out of memory");
	memcpy(*text, json_string_value(p), *len + 1);
	return 0;
}

/* The prompt's text: completions' prompt, or chat's messages in the chat
 * template with the opening of the answer, as sf-run -cnv writes a first
 * turn (*answer set). */
static int prompt_of(struct server *s, json_t *req, const struct api_req *r, char **text,
		     size_t *len, int *answer, json_t **err)
{
	if (!r->chat)
		return prompt_text(s, req, r, text, len, answer, err);
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
	*answer = 1;
	ret = render(s, cm, n, text, len, err);
out:
	for (i = 0; texts && i < n; i++)
		sbuf_free(&texts[i]);
	free(texts);
	free(cm);
	return ret;
}

/* ollama's model (required, 404 for another) and its "load the model"
 * request, without a prompt or messages; 0 or the status. */
static int ollama_fields(const struct server *s, json_t *req, struct api_req *r, json_t **err)
{
	json_t *m = json_object_get(req, "model"), *what;

	if (!json_is_string(m) || !json_string_length(m))
		return bad(err, "missing_field", "model is required");
	if (!known_model(s, json_string_value(m))) {
		char msg[300];
		snprintf(msg, sizeof(msg), "model '%.200s' not found", json_string_value(m));
		*err = api_error(msg, api_error_type(404), "model_not_found");
		return 404;
	}
	what = json_object_get(req, r->chat ? "messages" : "prompt");
	r->load = !what || json_is_null(what) || (json_is_array(what) && !json_array_size(what)) ||
		(json_is_string(what) && !json_string_length(what));
	return 0;
}

int api_parse(struct server *s, const char *body, size_t n, int chat, enum api_wire wire,
	      struct api_req *r, json_t **err)
{
	json_error_t je;
	json_t *req = json_loadb(body, n, 0, &je), *so, *opts = req, *none = NULL;
	struct job *j = calloc(1, sizeof(*j));
	double temp = SF_DEFAULT_TEMP, top_p = SF_DEFAULT_TOP_P, min_p = SF_DEFAULT_MIN_P,
		rp = SF_DEFAULT_REPEAT_PENALTY, fp = 0, pp = 0;
	json_int_t max = -1, top_k = SF_DEFAULT_TOP_K, last_n = SF_DEFAULT_REPEAT_LAST_N,
		seed = -1, nchoices = 1;
	char *text = NULL;
	size_t len;
	int ret;
	struct sf_err e = { 0 };

	*r = (struct api_req){ .wire = wire, .chat = chat, .stream = wire == WIRE_OLLAMA };
	if (!j) {
		ret = bad(err, NULL, "out of memory");
		goto out;
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
	/* ollama's sampling fields are under "options", OpenAI's at the top */
	if (wire == WIRE_OLLAMA) {
		if ((ret = ollama_fields(s, req, r, err)) || r->load)
			goto out;
		opts = json_object_get(req, "options");
		if (opts && !json_is_null(opts) && !json_is_object(opts)) {
			ret = bad(err, "invalid_type", "'options': expected an object");
			goto out;
		}
		if (!opts || json_is_null(opts))
			opts = none = json_object();
	}
	if ((ret = get_num(opts, "temperature", 0, 100, &temp, err)) ||
	    (ret = get_num(opts, "top_p", 0, 1, &top_p, err)) ||
	    (ret = get_num(opts, "min_p", 0, 1, &min_p, err)) ||
	    (ret = get_num(opts, "repeat_penalty", 1e-3, 1e3, &rp, err)) ||
	    (ret = get_num(opts, "frequency_penalty", -2, 2, &fp, err)) ||
	    (ret = get_num(opts, "presence_penalty", -2, 2, &pp, err)) ||
	    (ret = get_int(opts, "top_k", 0, INT32_MAX, &top_k, err)) ||
	    (ret = get_int(opts, "repeat_last_n", 0, 1 << 24, &last_n, err)) ||
	    (ret = get_int(opts, "max_tokens", -1, 1 << 30, &max, err)) ||
	    (ret = get_int(opts, "max_completion_tokens", -1, 1 << 30, &max, err)) ||
	    (ret = get_int(opts, "n_predict", -1, 1 << 30, &max, err)) ||
	    (ret = get_int(opts, "num_predict", -2, 1 << 30, &max, err)) ||	/* ollama's; -2: fill the context */
	    (ret = get_int(opts, "seed", INT64_MIN, INT64_MAX, &seed, err)) ||
	    (ret = get_int(opts, "n", 1, 1, &nchoices, err)) ||
	    (ret = get_bool(req, "stream", &r->stream, err)) ||
	    (ret = get_bool(opts, "ignore_eos", &j->ignore_eos, err)) ||
	    (ret = get_stop(opts, j, err)))
		goto out;
	if (max < -1)
		max = -1;
	if ((so = json_object_get(req, "stream_options")) && !json_is_null(so)) {
		if (!json_is_object(so)) {
			ret = bad(err, "invalid_type", "'stream_options': expected an object");
			goto out;
		}
		if ((ret = get_bool(so, "include_usage", &r->include_usage, err)))
			goto out;
	}
	if ((ret = prompt_of(s, req, r, &text, &len, &j->answer, err)))
		goto out;
	j->channels = j->answer && s->harmony;
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
	j->seed = seed >= 0 || json_object_get(opts, "seed") ? (uint64_t)seed
		: (uint64_t)sf_now_ns() ^ ((uint64_t)(uintptr_t)j << 16);
	j->refs = 1;
	r->job = j;
	j = NULL;
	ret = 0;
out:
	if (ret && wire == WIRE_OLLAMA) {	/* ollama's shape: {"error": message} */
		json_t *e = api_error_of(wire, ret, NULL, json_string_value(
			json_object_get(json_object_get(*err, "error"), "message")));
		json_decref(*err);
		*err = e;
	}
	free(text);
	job_free(j);
	json_decref(none);
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

// --- ollama's shapes

/* RFC 3339 in UTC with nanoseconds, as ollama writes its times. */
static void rfc3339(char *buf, size_t size, time_t sec, long nsec)
{
	struct tm tm;
	size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", gmtime_r(&sec, &tm));
	snprintf(buf + n, size - n, ".%09ldZ", nsec);
}

/* The name ollama lists a model by: its id with a tag. */
static void ollama_name(const struct server *s, char *buf, size_t size)
{
	snprintf(buf, size, "%s%s", s->model_id, strchr(s->model_id, ':') ? "" : ":latest");
}

/* One object of /api/generate (response) or /api/chat (message): a
 * token's text (j NULL), or with j the end (done, done_reason, the counts
 * and the durations in nanoseconds; load_duration is the wait for a slot,
 * the model being loaded once at start); with r->load, "done_reason":
 * "load". The reasoning (think, nthink bytes; NULL: none), as ollama's
 * "thinking" beside the text. */
static json_t *ollama_object(const struct server *s, const struct api_req *r, const char *text,
			     size_t n, const char *think, size_t nthink, const struct job *j)
{
	char name[300], at[48];
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	rfc3339(at, sizeof(at), ts.tv_sec, ts.tv_nsec);
	ollama_name(s, name, sizeof(name));
	json_t *o = json_pack("{s:s,s:s}", "model", name, "created_at", at);
	if (!o)
		return NULL;
	json_t *m = o;
	if (r->chat)
		json_object_set_new(o, "message", m = json_pack("{s:s,s:o}", "role", "assistant",
								 "content", api_string(text, n)));
	else
		json_object_set_new(o, "response", api_string(text, n));
	if (think && m)
		json_object_set_new(m, "thinking", api_string(think, nthink));
	json_object_set_new(o, "done", json_boolean(j || r->load));
	if (r->load)
		json_object_set_new(o, "done_reason", json_string("load"));
	if (!j)
		return o;
	json_t *end = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "done_reason",
				api_finish_name(j->finish),
				"total_duration", (json_int_t)(j->t_done - j->t_submit),
				"load_duration", (json_int_t)(j->t_start - j->t_submit),
				"prompt_eval_count", (json_int_t)j->nprompt,
				"prompt_eval_duration", (json_int_t)(j->t_prompt - j->t_start),
				"eval_count", (json_int_t)j->ntokens,
				"eval_duration", (json_int_t)(j->t_done - j->t_prompt));
	json_object_update(o, end);
	json_decref(end);
	return o;
}

static json_t *details(const struct server *s)
{
	const struct sf_config *c = &s->model.cfg;
	/* the dense parameters: embeddings (twice when untied), attention and MLP */
	uint64_t q = (uint64_t)c->n_heads * (uint64_t)c->head_dim,
		kv = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim,
		params = (uint64_t)c->vocab_size * (uint64_t)c->dim * (c->tie_embeddings ? 1 : 2) +
		(uint64_t)c->n_layers * ((uint64_t)c->dim * (2 * q + 2 * kv) +
					 3 * (uint64_t)c->dim * (uint64_t)c->hidden_dim);
	char size[32];
	const char *arch = sf_arch_name(c->arch);

	if (params >= 1000000000)
		snprintf(size, sizeof(size), "%.1fB", (double)params / 1e9);
	else if (params >= 1000000)
		snprintf(size, sizeof(size), "%.1fM", (double)params / 1e6);
	else
		snprintf(size, sizeof(size), "%.1fK", (double)params / 1e3);
	return json_pack("{s:s,s:s,s:s,s:[s],s:s,s:s}", "parent_model", "", "format",
			 s->sparse ? "sfimg" : "safetensors", "family", arch, "families", arch,
			 "parameter_size", size, "quantization_level",
			 sf_dtype_name(s->model.embed.dtype));
}

json_t *api_tags(const struct server *s)
{
	char name[300], at[48];

	ollama_name(s, name, sizeof(name));
	rfc3339(at, sizeof(at), s->model_mtime, 0);
	return json_pack("{s:[{s:s,s:s,s:s,s:I,s:s,s:o}]}", "models", "name", name, "model",
			 name, "modified_at", at, "size", (json_int_t)s->model_bytes, "digest",
			 s->model.fingerprint.weights, "details", details(s));
}

json_t *api_version(void)
{
	return json_pack("{s:s}", "version", SERVE_OLLAMA_VERSION);
}

int api_show(const struct server *s, const char *body, size_t n, json_t **out)
{
	json_t *req = json_loadb(body, n, 0, NULL), *m = NULL;
	int status = 400;
	char msg[300];

	if (!json_is_object(req))
		snprintf(msg, sizeof(msg), "the body must be a JSON object");
	else if (!json_is_string(m = json_object_get(req, "model")) &&
		 !json_is_string(m = json_object_get(req, "name")))
		snprintf(msg, sizeof(msg), "model is required");
	else if (!known_model(s, json_string_value(m))) {
		snprintf(msg, sizeof(msg), "model '%.200s' not found", json_string_value(m));
		status = 404;
	} else
		status = 0;
	if (status) {
		*out = api_error_of(WIRE_OLLAMA, status, NULL, msg);
		json_decref(req);
		return status;
	}
	const struct sf_config *c = &s->model.cfg;
	json_t *info = json_pack("{s:s,s:i,s:i,s:i,s:i,s:i}", "general.architecture",
				 sf_arch_name(c->arch), "context_length", s->ctx,
				 "embedding_length", c->dim, "block_count", c->n_layers,
				 "attention.head_count", c->n_heads, "attention.head_count_kv",
				 c->n_kv_heads);
	*out = json_pack("{s:s,s:s,s:s,s:o,s:o,s:[s]}", "modelfile", "", "parameters", "",
			 "template", "", "details", details(s), "model_info", info,
			 "capabilities", "completion");
	json_decref(req);
	return 0;
}

// --- the answers

json_t *api_answer(const struct server *s, const struct api_req *r, const char *id,
		   time_t created, const char *text, size_t n, const struct job *j)
{
	/* the reasoning of an answer in channels, when it has any */
	const char *think = j && j->reasoning.n ? j->reasoning.p : NULL;
	size_t nthink = think ? j->reasoning.n : 0;

	if (r->wire == WIRE_OLLAMA)
		return ollama_object(s, r, text, n, think, nthink, j);
	json_t *choice = r->chat
		? json_pack("{s:i,s:{s:s,s:o},s:s}", "index", 0, "message", "role", "assistant",
			    "content", api_string(text, n), "finish_reason", api_finish_name(j->finish))
		: json_pack("{s:i,s:o,s:n,s:s}", "index", 0, "text", api_string(text, n), "logprobs",
			    "finish_reason", api_finish_name(j->finish));
	/* llama-server's name for it */
	if (think && r->chat && choice)
		json_object_set_new(json_object_get(choice, "message"), "reasoning_content",
				    api_string(think, nthink));
	return json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o}", "id", id, "object",
			 r->chat ? "chat.completion" : "text_completion", "created",
			 (json_int_t)created, "model", s->model_id, "choices", choice, "usage",
			 usage(j));
}

int api_chunk(struct sbuf *out, const struct server *s, const struct api_req *r,
	      const char *id, time_t created, enum api_chunk kind, const char *text, size_t n,
	      const struct job *j)
{
	if (r->wire == WIRE_OLLAMA) {	/* a line a token, then the end's */
		if (kind != CHUNK_DELTA && kind != CHUNK_REASONING && kind != CHUNK_FINISH)
			return 0;
		json_t *o = kind == CHUNK_REASONING ? ollama_object(s, r, "", 0, text, n, NULL)
			    : ollama_object(s, r, text, n, NULL, 0, kind == CHUNK_FINISH ? j : NULL);
		char *d = o ? json_dumps(o, JSON_COMPACT) : NULL;
		int ret = d ? sbuf_printf(out, "%s\n", d) : -ENOMEM;
		free(d);
		json_decref(o);
		return ret;
	}
	json_t *choices = json_array(), *c = NULL;

	if (kind == CHUNK_ROLE)
		c = json_pack("{s:i,s:{s:s,s:s},s:n}", "index", 0, "delta", "role", "assistant",
			      "content", "", "finish_reason");
	else if (kind == CHUNK_DELTA && r->chat)
		c = json_pack("{s:i,s:{s:o},s:n}", "index", 0, "delta", "content",
			      api_string(text, n), "finish_reason");
	else if (kind == CHUNK_REASONING)
		c = json_pack("{s:i,s:{s:o},s:n}", "index", 0, "delta", "reasoning_content",
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

int api_stream_end(struct sbuf *out, const struct api_req *r)
{
	return r->wire == WIRE_OLLAMA ? 0 : sbuf_add(out, "data: [DONE]\n\n", 14);
}

int api_stream_error(struct sbuf *out, const struct api_req *r, const char *message)
{
	json_t *e = api_error_of(r->wire, 500, NULL, message);
	char *d = e ? json_dumps(e, JSON_COMPACT) : NULL;
	int ret = !d ? -ENOMEM : r->wire == WIRE_OLLAMA ? sbuf_printf(out, "%s\n", d)
		: sbuf_printf(out, "data: %s\n\n", d);
	free(d);
	json_decref(e);
	return ret ? ret : api_stream_end(out, r);
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
	if (s->sparse) {
		ret |= metric(out, "sf_flash_bytes_read_total", "counter", "bytes read from the image",
			      (double)s->flash_bytes);
		ret |= metric(out, "sf_cache_lookups_total", "counter", "the column cache's lookups",
			      (double)s->cache_lookups);
		ret |= metric(out, "sf_cache_hits_total", "counter", "the column cache's hits",
			      (double)s->cache_hits);
		ret |= metric(out, "sf_cache_hit_ratio", "gauge", "the column cache's hits over its "
			      "lookups so far (0 before any)", s->cache_lookups
			      ? (double)s->cache_hits / (double)s->cache_lookups : 0.0);
	}
	return ret ? -ENOMEM : 0;
}
