/* sf-serve: an OpenAI-compatible HTTP server over one model, dense from a
 * model directory in RAM (--model MODEL) or sparse from an sf-pack image.
 * /v1/completions, /v1/chat/completions (streamed as server-sent events
 * with "stream": true), /v1/models, /health and /metrics, and ollama's
 * /api/generate, /api/chat, /api/tags, /api/show and /api/version;
 * requests decode in --parallel slots, each with its own KV cache. See
 * man/sf-serve.1. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/model.h"
#include "common/device.h"
#include "common/ram.h"
#include "engine/chat.h"
#include "serve.h"

struct options {
	struct sf_model_opts mo;	/* --model or IMAGE, -c, -ctk, -ctv, --chat-template */
	const char *host, *api_key, *alias;
	int port, threads, batch, parallel, queue, log_json, quiet, verbose;
	uint64_t max_body, ram;
	double budget;
};

enum { OPT_HOST = SF_OPT_FIRST, OPT_PORT, OPT_API_KEY, OPT_PARALLEL, OPT_QUEUE, OPT_MAX_BODY,
       OPT_ALIAS, OPT_LOG_FORMAT, OPT_BUDGET, OPT_RAM };

static const struct sf_opt options[] = {
	SF_OPT_MODEL,
	SF_OPT_CTX("context length of each slot (default: the model's)"),
	SF_OPT_CACHE_TYPES,
	{ "chat-template", SF_OPT_CHAT_TEMPLATE, "NAME", "the chat template of /v1/chat/completions\n"
	  "when the model has none, or instead of its own:\n"
	  "chatml, llama2, llama3, ... (default: the model's,\n"
	  "else chatml)", NULL, 0 },
	{ "budget", OPT_BUDGET, "B", "IMAGE: the image's calibrated tier sizes for\n"
	  "budget B; 1: every column top tier (default)", NULL, 0 },
	{ "ram", OPT_RAM, "BYTES", "IMAGE: memory budget for everything sf-serve holds,\n"
	  "every slot's KV cache included; the cache takes what\n"
	  "is left (default: no limit, no cache)", NULL, 0 },
	{ "batch-size", 'b', "N", "prompt tokens per pass over the weights (default %s)",
	  SF_STR(SF_RUN_DEFAULT_BATCH), 0 },
	SF_OPT_THREADS,
	{ "host", OPT_HOST, "ADDR", "the address to listen on (default %s)",
	  SERVE_DEFAULT_HOST, 0 },
	{ "port", OPT_PORT, "N", "the port, 0 for any free one (default %s)",
	  SF_STR(SERVE_DEFAULT_PORT), 0 },
	{ "api-key", OPT_API_KEY, "KEY", "require \"Authorization: Bearer KEY\" (not of /health)",
	  NULL, 0 },
	{ "parallel", OPT_PARALLEL, "N", "slots: requests decoded together, each with its\n"
	  "own KV cache (also -np) (default %s)", SF_STR(SERVE_DEFAULT_PARALLEL), 0 },
	{ "queue", OPT_QUEUE, "N", "requests waiting for a slot at most; past them 503\n"
	  "(default %s)", SF_STR(SERVE_DEFAULT_QUEUE), 0 },
	{ "max-body", OPT_MAX_BODY, "BYTES", "the largest request body; past it 413\n"
	  "(default %s)", SF_STR(SERVE_DEFAULT_MAX_BODY), 0 },
	{ "alias", OPT_ALIAS, "NAME", "the model's id in /v1/models and answers\n"
	  "(default: the directory's or image's name)", NULL, 0 },
	{ "log-format", OPT_LOG_FORMAT, "F", "the line per request on stderr: text or json\n"
	  "(default text)", NULL, 0 },
	SF_OPT_QUIET,
	SF_OPT_VERBOSE,
	SF_OPT_END,
};

static const struct sf_cmd cmd = {
	"Usage: sf-serve --model MODEL [options]\n"
	"       sf-serve [options] IMAGE\n"
	"Serve a language model over HTTP with OpenAI's API: /v1/completions,\n"
	"/v1/chat/completions (streamed with \"stream\": true), /v1/models,\n"
	"/health and /metrics; and with ollama's: /api/generate, /api/chat,\n"
	"/api/tags, /api/show and /api/version.\n",
	options,
	"  sf-serve --model models/mix4-1m --port 8080\n"
	"  curl -s localhost:8080/v1/completions -d '{\"prompt\": \"In the beginning\",\n"
	"       \"max_tokens\": 32, \"temperature\": 0}' | jq -r '.choices[0].text'\n"
	"  sf-serve --host 0.0.0.0 --api-key secret --parallel 4 mix4-1m.sfimg\n",
};

static void parse_options(int argc, char **argv, struct options *o)
{
	int c;

	*o = (struct options){ .host = SERVE_DEFAULT_HOST, .port = SERVE_DEFAULT_PORT,
			       .threads = sf_cli_threads_default(), .batch = SF_RUN_DEFAULT_BATCH,
			       .parallel = SERVE_DEFAULT_PARALLEL, .queue = SERVE_DEFAULT_QUEUE,
			       .max_body = SERVE_DEFAULT_MAX_BODY, .budget = 1.0 };
	sf_model_opts_default(&o->mo);
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)	/* llama-server's name */
		if (!strcmp(argv[i], "-np"))
			argv[i] = (char *)"--parallel";
	sf_cli_llama_names(argc, argv, &cmd);
	while ((c = sf_cli_getopt(argc, argv, &cmd)) != -1) {
		switch (c) {
		case 'b': o->batch = (int)sf_opt_u64("--batch-size", optarg, 1, SF_BATCH_MAX); break;
		case 't': o->threads = sf_opt_threads(optarg); break;
		case OPT_HOST:
			if (!*optarg)
				sf_usage_error("--host: an empty address");
			o->host = optarg;
			break;
		case OPT_PORT: o->port = (int)sf_opt_u64("--port", optarg, 0, 65535); break;
		case OPT_API_KEY:
			if (!*optarg)
				sf_usage_error("--api-key: an empty key");
			o->api_key = optarg;
			break;
		case OPT_PARALLEL: o->parallel = (int)sf_opt_u64("--parallel", optarg, 1, 256); break;
		case OPT_QUEUE: o->queue = (int)sf_opt_u64("--queue", optarg, 0, 65536); break;
		case OPT_MAX_BODY:
			o->max_body = sf_opt_u64("--max-body", optarg, 1024, 1u << 30);
			break;
		case OPT_ALIAS:
			if (!*optarg)
				sf_usage_error("--alias: an empty name");
			o->alias = optarg;
			break;
		case OPT_LOG_FORMAT:
			if (strcmp(optarg, "text") && strcmp(optarg, "json"))
				sf_usage_error("--log-format: '%s': expected text or json", optarg);
			o->log_json = !strcmp(optarg, "json");
			break;
		case OPT_BUDGET: o->budget = sf_opt_f64("--budget", optarg, 1e-6, 1.0); break;
		case OPT_RAM: o->ram = sf_opt_u64("--ram", optarg, 1, UINT64_MAX); break;
		case 'q': o->quiet = 1; break;
		case 'v': o->verbose = 1; break;
		default: sf_model_opt(&o->mo, c, optarg); break;
		}
	}
	sf_model_opts_operands(&o->mo, argc, argv);
	if (o->mo.model_dir && o->budget < 1.0)
		sf_usage_error("--budget needs an IMAGE, not --model");
	if (o->mo.model_dir && o->ram)
		sf_usage_error("--ram needs an IMAGE, not --model");
}

/* The listening socket on host:port (port 0: the kernel's choice, read
 * back into *bound). */
static int listen_on(const char *host, int port, int *bound, struct sf_err *e)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE }, *res = NULL;
	char ports[8];
	int fd = -1, ret, one = 1;

	snprintf(ports, sizeof(ports), "%d", port);
	if ((ret = getaddrinfo(host, ports, &hints, &res)))
		return sf_err_set(e, -EINVAL, "--host %s: %s", host, gai_strerror(ret));
	ret = -EADDRNOTAVAIL;
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		if ((fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol)) < 0) {
			ret = -errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 64) == 0)
			break;
		ret = -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return sf_err_set(e, ret, "%s:%d: cannot listen: %s", host, port, strerror(-ret));
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	*bound = port;
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
		*bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
			       : ((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

/* The bytes of the model's files (a directory's regular files, one level)
 * and its time of change, for ollama's /api/tags; 0 when not known. */
static void model_files(const char *path, uint64_t *bytes, time_t *mtime)
{
	struct stat st;
	DIR *d;

	*bytes = 0;
	*mtime = 0;
	if (stat(path, &st))
		return;
	*mtime = st.st_mtime;
	if (!S_ISDIR(st.st_mode) || !(d = opendir(path))) {
		*bytes = (uint64_t)st.st_size;
		return;
	}
	for (struct dirent *de; (de = readdir(d));) {
		struct stat f;
		if (!fstatat(dirfd(d), de->d_name, &f, 0) && S_ISREG(f.st_mode)) {
			*bytes += (uint64_t)f.st_size;
			if (f.st_mtime > *mtime)
				*mtime = f.st_mtime;
		}
	}
	closedir(d);
}

/* The model, the slots and the decoder. */
static int load(struct server *s, const struct options *o, struct sf_err *e)
{
	const char *name = o->mo.model_dir ? o->mo.model_dir : o->mo.image;
	int ret;

	if ((ret = sf_cli_open_model(o->mo.model_dir, o->mo.image, SF_IMAGE_OPEN_EMBED_ON_FLASH,
				     &s->image, &s->model, &s->tok, e)))
		return ret;
	s->ctx = o->mo.ctx ? o->mo.ctx : sf_config_default_ctx(&s->model.cfg);
	if (s->ctx > s->model.cfg.max_seq_len)
		return sf_err_set(e, -EINVAL, "--ctx-size %d: the model supports at most %d "
				  "positions", s->ctx, s->model.cfg.max_seq_len);
	s->batch = o->batch < s->ctx ? o->batch : s->ctx;
	s->own_tmpl = 1;
	if ((ret = sf_cli_chat_template(s->tok, o->mo.chat_template, name, &s->tmpl, e))) {
		s->own_tmpl = 0;
		/* as llama-server: chatml when the model names none we know */
		s->tmpl = sf_chat_find("chatml");
		if (o->verbose)
			fprintf(stderr, "%s: %s; chat in chatml\n", sf_progname, e->msg);
		*e = (struct sf_err){ 0 };
	}
	if ((ret = sf_cli_end_of_turn(&s->model, s->tok, s->tmpl, &s->eot, e)) ||
	    (ret = sf_cli_chat_channels(s->tok, s->tmpl, &s->channels, &s->harmony, e)))
		return ret;
	if ((ret = sf_pool_create(&s->pool, o->threads)))
		return sf_err_set(e, ret, "thread pool of %d: %s", o->threads, sf_strerror(ret));
	if ((ret = serve_slots_open(s, o->mo.kv_k, o->mo.kv_v, e)))
		return ret;
	if (o->mo.image) {
		struct sf_sparse_opts so;
		struct sf_sparse_memory mem;
		double peak = 0, iops = 0, buffered = 0;
		sf_sparse_opts_default(&so);
		so.budget = o->budget;
		so.ram = o->ram;
		so.tokens = s->batch;
		so.max_tokens = (uint64_t)s->ctx;
		/* as sf-run's, for every slot: a state and a KV cache each, all
		 * granted the same positions, and the pass of them all */
		sf_cli_kv_opts(&so, &s->slots[0].st, &s->model.cfg,
			       o->mo.ctx || SF_RUN_KV_LEAST > s->ctx ? s->ctx : SF_RUN_KV_LEAST);
		so.state_bytes = so.state_bytes * (uint64_t)s->nslots + serve_pass_state_bytes(s);
		so.kv_cost.position *= (uint64_t)s->nslots;
		so.kv_cost.ring_position *= (uint64_t)s->nslots;
		if ((ret = sf_device_load(o->mo.image, &peak, &iops, &buffered, e)) < 0)
			return ret;
		so.device_peak = peak;
		so.device_iops = iops;
		if ((ret = sf_sparse_open(&s->sparse, &s->image, &s->model, s->pool, &so, e)))
			return ret;
		serve_slots_exec(s, sf_sparse_exec(s->sparse));
		/* a request beyond the positions granted is refused as one
		 * beyond the context */
		sf_sparse_memory(s->sparse, &mem);
		if ((int)mem.kv_positions < s->ctx)
			s->ctx = (int)mem.kv_positions;
		if (o->verbose)
			fprintf(stderr, "%s: memory: %llu bytes: process %llu, resident %llu, states "
				"%llu, KV caches %llu (%d slots of %u positions), buffers %llu, "
				"held groups %llu, cache %llu\n", sf_progname,
				(unsigned long long)mem.total, (unsigned long long)mem.process,
				(unsigned long long)mem.resident, (unsigned long long)mem.state,
				(unsigned long long)mem.kv, s->nslots, mem.kv_positions,
				(unsigned long long)mem.buffers, (unsigned long long)mem.slabs,
				(unsigned long long)mem.cache);
	}
	if (o->verbose)
		sf_cli_model_summary(name, &s->model, s->ctx, o->threads);
	model_files(name, &s->model_bytes, &s->model_mtime);
	return serve_decoder_start(s, e);
}

/* SIGTERM or SIGINT: no new requests; those in flight finish (up to
 * SERVE_DRAIN_SECONDS), then the end. */
static void drain(struct server *s, struct MHD_Daemon *d)
{
	MHD_socket fd = MHD_quiesce_daemon(d);
	double t0 = sf_now();

	if (fd != MHD_INVALID_SOCKET)
		close(fd);
	pthread_mutex_lock(&s->mu);
	s->draining = 1;
	pthread_mutex_unlock(&s->mu);
	for (;;) {
		pthread_mutex_lock(&s->mu);
		int left = s->in_flight + s->busy + s->queued;
		pthread_mutex_unlock(&s->mu);
		if (!left || sf_now() - t0 > SERVE_DRAIN_SECONDS)
			break;
		usleep(20000);
	}
}

int main(int argc, char **argv)
{
	struct options o;
	struct server s = { .eot = -1 };
	struct sf_err e = { 0 };
	struct MHD_Daemon *d = NULL;
	int ret = 0, port = 0, fd;

	sf_cli_start("sf-serve");
	signal(SIGPIPE, SIG_IGN);
	parse_options(argc, argv, &o);
	s.nslots = o.parallel;
	s.queue_max = o.queue;
	s.max_body = o.max_body;
	s.api_key = o.api_key;
	s.log_json = o.log_json;
	s.quiet = o.quiet;
	s.verbose = o.verbose;
	s.created = time(NULL);
	/* test only: a pause before each token, so that tests find slots busy
	 * (the embedded model decodes a whole context in under a second) */
	const char *delay = getenv("SF_SERVE_TOKEN_DELAY_MS");
	if (delay && *delay)
		s.delay_ms = (int)sf_opt_u64("SF_SERVE_TOKEN_DELAY_MS", delay, 0, 10000);
	const char *name = o.mo.model_dir ? o.mo.model_dir : o.mo.image;
	const char *base = strrchr(name, '/');
	while (base && !base[1] && base > name) {	/* "models/mix4-1m/" */
		const char *p = base - 1;
		while (p > name && *p != '/')
			p--;
		base = *p == '/' ? p : NULL;
	}
	char id[256];
	snprintf(id, sizeof(id), "%s", o.alias ? o.alias : base ? base + 1 : name);
	if (!o.alias && strchr(id, '/'))
		*strchr(id, '/') = '\0';
	s.model_id = id;
	json_object_seed(0);	/* before any thread makes an object */
	pthread_mutex_init(&s.mu, NULL);
	pthread_cond_init(&s.work, NULL);
	pthread_cond_init(&s.progress, NULL);

	sf_cli_interruptible(1);	/* SIGTERM drains */
	if ((fd = listen_on(o.host, o.port, &port, &e)) < 0) {
		ret = fd;
		goto out;
	}
	if (!(d = serve_http_start(&s, fd, &e))) {
		close(fd);
		ret = e.code;
		goto out;
	}
	if (!o.quiet)
		fprintf(stderr, "%s: listening on http://%s%s%s:%d/ (loading %s)\n", sf_progname,
			strchr(o.host, ':') ? "[" : "", o.host, strchr(o.host, ':') ? "]" : "",
			port, name);
	if ((ret = load(&s, &o, &e)))
		goto out;
	pthread_mutex_lock(&s.mu);
	s.ready = 1;
	pthread_mutex_unlock(&s.mu);
	if (!o.quiet)
		fprintf(stderr, "%s: ready: %s, %d %s of %d positions\n", sf_progname, s.model_id,
			s.nslots, sf_plural((unsigned long long)s.nslots, "slot", "slots"), s.ctx);
	while (!sf_cli_interrupted())
		usleep(50000);
	if (!o.quiet)
		fprintf(stderr, "%s: %s: finishing the requests in flight\n", sf_progname,
			strsignal(sf_cli_interrupted()));
	drain(&s, d);
out:
	if (d)
		MHD_stop_daemon(d);
	serve_slots_close(&s);
	sf_sparse_close(s.sparse);
	sf_pool_destroy(s.pool);
	sf_tokenizer_close(s.tok);
	sf_model_close(&s.model);
	sf_image_close(&s.image);
	for (struct job *j = s.head, *n; j; j = n) {
		n = j->next;
		job_free(j);
	}
	if (ret)
		sf_error("%s", e.msg[0] ? e.msg : sf_strerror(ret));
	if (sf_close_stdout())
		ret = -EIO;
	return ret ? SF_EXIT_FAIL : SF_EXIT_OK;
}
