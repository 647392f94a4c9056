/* Co-activation statistics (.sfc): their memory, the reader (header,
 * sections summed into the statistics, checksums) and the writer, and the
 * summary sf-coact --info prints. See coact.h; the bytes are in
 * man/sf-formats.5 (COACT). Accumulation from traces: offline/coact.c;
 * SelectInfer scores: formats/scores.c. */
#include "formats/coact.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/bytes.h"
#include "formats/stream.h"
#include "base/jsonfile.h"

// ----------------------------------------------------------------------------
// slots and memory

static int slot_cmp(const struct sf_coact_slot *a, int layer, enum sf_group g)
{
	if (a->layer != layer)
		return a->layer < layer ? -1 : 1;
	return a->group == g ? 0 : a->group < g ? -1 : 1;
}

static struct sf_coact_slot *find_slot(const struct sf_coact *c, int layer, enum sf_group g)
{
	for (int s = 0; s < c->nslots; s++)
		if (slot_cmp(&c->slots[s], layer, g) == 0)
			return &c->slots[s];
	return NULL;
}

int sf_coact_add_slot(struct sf_coact *c, int layer, enum sf_group g, int step,
		      struct sf_coact_slot **slot, struct sf_err *e)
{
	int at = 0;
	while (at < c->nslots && slot_cmp(&c->slots[at], layer, g) < 0)
		at++;
	if (at < c->nslots && slot_cmp(&c->slots[at], layer, g) == 0) {
		if (slot)
			*slot = &c->slots[at];
		return 0;
	}
	struct sf_coact_slot *p = realloc(c->slots, (size_t)(c->nslots + 1) * sizeof(*p));
	if (!p)
		return sf_err_set(e, -ENOMEM, "coact slots: %s", sf_strerror(-ENOMEM));
	c->slots = p;
	memmove(p + at + 1, p + at, (size_t)(c->nslots - at) * sizeof(*p));
	p[at] = (struct sf_coact_slot){ .layer = layer, .group = g, .entries = c->entries[g],
					.step = g == SF_GROUP_EXPERTS && step };
	c->nslots++;
	if (slot)
		*slot = &p[at];
	return 0;
}

/* Cells of a slot's step table: n * n for experts counted with the step. */
static uint64_t step_cells(uint32_t n, int step)
{
	return step ? (uint64_t)n * n : 0;
}

int sf_coact_add_task(json_t *tasks, const char *task, uint64_t tokens)
{
	if (!task)
		return 0;
	json_t *v = json_object_get(tasks, task);
	json_int_t have = json_is_integer(v) ? json_integer_value(v) : 0;
	return json_object_set_new(tasks, task, json_integer(have + (json_int_t)tokens));
}

uint64_t sf_coact_bytes(const struct sf_coact *c, int accumulate)
{
	uint64_t total = 0;
	for (int s = 0; s < c->nslots; s++) {
		uint64_t n = c->slots[s].entries;
		total += sf_coact_npairs((uint32_t)n) * 4 + n * 16 +
			 step_cells((uint32_t)n, c->slots[s].step) * 4;
		if (accumulate)
			total += n * SF_COACT_BLOCK_WORDS * 8;
	}
	return total;
}

uint64_t sf_coact_stream_bytes(const struct sf_coact *c)
{
	uint64_t total = 0, most = 0;
	for (int s = 0; s < c->nslots; s++) {
		uint64_t n = c->slots[s].entries, pairs = sf_coact_npairs((uint32_t)n) * 4 +
			   step_cells((uint32_t)n, c->slots[s].step) * 4;
		total += n * 16;
		most = pairs > most ? pairs : most;
	}
	return total + most;
}

/* The arrays of slot sl that are not there yet, zeroed. */
static int alloc_slot(struct sf_coact_slot *sl, int accumulate, struct sf_err *e)
{
	uint32_t n = sl->entries;
	uint64_t np = sf_coact_npairs(n);
	if (np > SIZE_MAX / 4)
		return sf_err_set(e, SF_ELIMIT, "layer %d %s: %llu pairs do not fit in memory",
				  sl->layer, sf_group_name(sl->group), (unsigned long long)np);
	if (!sl->counts)
		sl->counts = calloc(n, sizeof(*sl->counts));
	if (!sl->sums)
		sl->sums = calloc(n, sizeof(*sl->sums));
	if (!sl->pairs)
		sl->pairs = calloc(np ? (size_t)np : 1, sizeof(*sl->pairs));
	if (sl->step && !sl->steps)
		sl->steps = calloc((size_t)step_cells(n, 1), sizeof(*sl->steps));
	if (!sl->tasks)
		sl->tasks = json_object();
	if (accumulate && !sl->bits && (sl->bits = aligned_alloc(64, (size_t)n *
								  SF_COACT_BLOCK_WORDS * 8)))
		memset(sl->bits, 0, (size_t)n * SF_COACT_BLOCK_WORDS * 8);
	if (!sl->counts || !sl->sums || !sl->pairs || !sl->tasks || (accumulate && !sl->bits) ||
	    (sl->step && !sl->steps))
		return sf_err_set(e, -ENOMEM, "layer %d %s: statistics of %llu bytes: %s",
				  sl->layer, sf_group_name(sl->group),
				  (unsigned long long)(np * 4 + (uint64_t)n * 16),
				  sf_strerror(-ENOMEM));
	return 0;
}

int sf_coact_alloc(struct sf_coact *c, int accumulate, struct sf_err *e)
{
	int ret = 0;
	for (int s = 0; s < c->nslots && !ret; s++)
		ret = alloc_slot(&c->slots[s], accumulate, e);
	return ret;
}

void sf_coact_drop_pairs(struct sf_coact_slot *sl)
{
	free(sl->pairs);
	free(sl->steps);
	sl->pairs = NULL;
	sl->steps = NULL;
}

void sf_coact_free(struct sf_coact *c)
{
	for (int s = 0; s < c->nslots; s++) {
		free(c->slots[s].counts);
		free(c->slots[s].sums);
		free(c->slots[s].pairs);
		free(c->slots[s].steps);
		free(c->slots[s].bits);
		json_decref(c->slots[s].tasks);
	}
	free(c->slots);
	json_decref(c->sources);
	memset(c, 0, sizeof(*c));
}

// ----------------------------------------------------------------------------
// sections: one layout for writing and for checksums

#define CHUNK (64u << 10)

struct emitter {
	int (*put)(void *ctx, const unsigned char *p, size_t n);
	void *ctx;
	unsigned char buf[CHUNK];
	size_t len;
	uint32_t crc;
	int err;
};

static void emit_flush(struct emitter *em)
{
	em->crc = sf_crc32c(em->crc, em->buf, em->len);
	if (em->put && !em->err)
		em->err = em->put(em->ctx, em->buf, em->len);
	em->len = 0;
}

static unsigned char *emit_space(struct emitter *em, size_t n)
{
	if (em->len + n > CHUNK)
		emit_flush(em);
	unsigned char *p = em->buf + em->len;
	em->len += n;
	return p;
}

/* Where a section's step table starts: after the pairs, padded to 8. */
static uint64_t steps_at(uint32_t n)
{
	return (8 + 16 * (uint64_t)n + 4 * sf_coact_npairs(n) + 7) / 8 * 8;
}

static uint64_t section_bytes(uint32_t n, int step)
{
	uint64_t body = steps_at(n) + 4 * step_cells(n, step);
	return (body + 7) / 8 * 8 + 8;	/* padding, then crc and a zero word */
}

/* Emits a slot's section; returns its crc (the one written at its end). */
static uint32_t emit_section(struct emitter *em, const struct sf_coact_slot *s)
{
	uint64_t np = sf_coact_npairs(s->entries);

	em->crc = 0;
	sf_put_le64(emit_space(em, 8), s->tokens);
	for (uint32_t i = 0; i < s->entries; i++)
		sf_put_le64(emit_space(em, 8), s->counts[i]);
	for (uint32_t i = 0; i < s->entries; i++)
		sf_put_f64(emit_space(em, 8), s->sums[i]);
	for (uint64_t p = 0; p < np; p++)
		sf_put_le32(emit_space(em, 4), s->pairs[p]);
	if (np % 2)
		memset(emit_space(em, 4), 0, 4);
	uint64_t nsteps = step_cells(s->entries, s->step);
	for (uint64_t p = 0; p < nsteps; p++)
		sf_put_le32(emit_space(em, 4), s->steps[p]);
	if (nsteps % 2)
		memset(emit_space(em, 4), 0, 4);
	emit_flush(em);
	uint32_t crc = em->crc;
	unsigned char *t = emit_space(em, 8);
	sf_put_le32(t, crc);
	sf_put_le32(t + 4, 0);
	emit_flush(em);
	return crc;
}

uint32_t sf_coact_slot_crc(const struct sf_coact_slot *s)
{
	struct emitter *em = malloc(sizeof(*em));
	if (!em)
		return 0;
	em->put = NULL;
	em->len = 0;
	em->err = 0;
	uint32_t crc = emit_section(em, s);
	free(em);
	return crc;
}

static int file_put(void *ctx, const unsigned char *p, size_t n)
{
	return fwrite(p, 1, n, ctx) == n ? 0 : -EIO;
}

static json_t *slot_json(const struct sf_coact_slot *s, uint64_t offset)
{
	json_t *o = json_pack("{s:i, s:s, s:I, s:I, s:O, s:I, s:I}", "layer", s->layer, "group",
			      sf_group_name(s->group), "entries", (json_int_t)s->entries, "tokens",
			      (json_int_t)s->tokens, "tasks", s->tasks, "offset",
			      (json_int_t)offset, "bytes",
			      (json_int_t)section_bytes(s->entries, s->step));
	if (o && s->step && json_object_set_new(o, "step", json_true())) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* A dense model's entries as version 2 wrote them: no experts. */
static json_t *entries_json(const uint32_t entries[SF_NKINDS])
{
	json_t *o = json_object();
	for (int g = 0; o && g < SF_NKINDS; g++)
		if (g != SF_GROUP_EXPERTS || entries[g])
			json_object_set_new(o, sf_group_name((enum sf_group)g),
					    json_integer(entries[g]));
	return o;
}

static int write_error(const char *name, struct sf_err *e)
{
	return sf_err_set(e, -EIO, "%s: write error: %s", name,
			  errno ? strerror(errno) : "short write");
}

int sf_coact_write_header(const struct sf_coact *c, FILE *f, const char *name, json_t *meta,
			  struct sf_err *e)
{
	json_t *slots = json_array(), *h = NULL;
	struct emitter *em = NULL;
	char *text = NULL;
	uint64_t off = 0;
	int ret = 0;

	for (int s = 0; slots && s < c->nslots; s++) {
		if (json_array_append_new(slots, slot_json(&c->slots[s], off)))
			goto nomem;
		off += section_bytes(c->slots[s].entries, c->slots[s].step);
	}
	if (!slots)
		goto nomem;
	h = json_pack("{s:s, s:i, s:s, s:s, s:i, s:o, s:o, s:O, s:O}", "format",
		      "sparseflash-coact", "version", SF_COACT_VERSION, "fingerprint",
		      c->fingerprint.weights, "shape_fingerprint", c->fingerprint.shape, "n_layers",
		      c->n_layers, "entries", entries_json(c->entries), "selection",
		      sf_trace_selection_json(c->select, c->value), "slots", slots, "sources",
		      c->sources ? c->sources : json_null());
	if (!h || (meta && json_object_update_missing(h, meta)))
		goto nomem;
	if (!(text = json_dumps(h, JSON_COMPACT | JSON_REAL_PRECISION(17))) ||
	    !(em = malloc(sizeof(*em))))
		goto nomem;
	size_t hlen = strlen(text);
	if (hlen > SF_COACT_MAX_HEADER) {
		ret = sf_err_set(e, SF_ELIMIT, "%s: header of %zu bytes: at most %u", name, hlen,
				 SF_COACT_MAX_HEADER);
		goto out;
	}
	*em = (struct emitter){ .put = file_put, .ctx = f };
	unsigned char *p = emit_space(em, 16);
	memcpy(p, SF_COACT_MAGIC, 8);
	sf_put_le32(p + 8, SF_COACT_VERSION);
	sf_put_le32(p + 12, (uint32_t)hlen);
	for (size_t i = 0; i < hlen; i += CHUNK / 2) {
		size_t n = hlen - i < CHUNK / 2 ? hlen - i : CHUNK / 2;
		memcpy(emit_space(em, n), text + i, n);
	}
	size_t pad = (8 - (16 + hlen) % 8) % 8;
	memset(emit_space(em, pad), 0, pad);
	emit_flush(em);
	if (em->err)
		ret = write_error(name, e);
	goto out;
nomem:
	ret = sf_err_set(e, -ENOMEM, "%s: %s", name, sf_strerror(-ENOMEM));
out:
	json_decref(slots);
	json_decref(h);
	free(text);
	free(em);
	return ret;
}

int sf_coact_write_slot(const struct sf_coact_slot *s, FILE *f, const char *name,
			struct sf_err *e)
{
	struct emitter *em = malloc(sizeof(*em));
	int ret = 0;

	if (!em)
		return sf_err_set(e, -ENOMEM, "%s: %s", name, sf_strerror(-ENOMEM));
	*em = (struct emitter){ .put = file_put, .ctx = f };
	emit_section(em, s);
	if (em->err)
		ret = write_error(name, e);
	free(em);
	return ret;
}

int sf_coact_write(const struct sf_coact *c, FILE *f, const char *name, json_t *meta,
		   struct sf_err *e)
{
	int ret = sf_coact_write_header(c, f, name, meta, e);
	for (int s = 0; s < c->nslots && !ret; s++)
		ret = sf_coact_write_slot(&c->slots[s], f, name, e);
	if (!ret && fflush(f))
		ret = write_error(name, e);
	return ret;
}

// ----------------------------------------------------------------------------
// .sfc reader

struct file_slot {
	int layer;
	enum sf_group group;
	uint32_t entries;
	int step;
	uint64_t tokens, offset, bytes;
	json_t *tasks;	/* borrowed from the header */
};

struct sf_coact_file {
	struct sf_stream in;
	json_t *header;
	struct sf_fingerprint fingerprint;
	int n_layers;
	uint32_t entries[SF_NKINDS];
	enum sf_trace_select select;
	double value;
	int nslots;
	struct file_slot *slots;
	uint64_t data_start;	/* file offset of the first section */
	int next;		/* section to read next */
	unsigned char *buf;	/* CHUNK */
};

static int parse_coact_header(struct sf_coact_file *f, struct sf_err *e)
{
	json_t *h = f->header, *v, *slots;
	const char *name = f->in.name;
	char where[SF_ERR_MAX];
	uint64_t off = 0;
	int64_t x;
	int ret;

	v = json_object_get(h, "format");
	if (!json_is_string(v) || strcmp(json_string_value(v), "sparseflash-coact") != 0)
		return sf_err_set(e, SF_EFORMAT, "%s: header: \"format\" is not "
				  "\"sparseflash-coact\"", name);
	snprintf(where, sizeof(where), "%s: header", name);
	if ((ret = sf_fingerprint_parse(&f->fingerprint, h, where, e)))
		return ret;
	if ((ret = sf_json_int(h, "n_layers", 1, SF_TRACE_MAX_LAYERS, &x, where, e)))
		return ret;
	f->n_layers = (int)x;
	snprintf(where, sizeof(where), "%s: header: \"entries\"", name);
	v = json_object_get(h, "entries");
	for (int g = 0; g < SF_NGROUPS; g++) {
		if ((ret = sf_json_int(v, sf_group_name((enum sf_group)g), 1, SF_TRACE_MAX_ENTRIES,
				       &x, where, e)))
			return ret;
		f->entries[g] = (uint32_t)x;
	}
	/* version 3: a mixture's experts */
	if (f->in.version >= 3 && sf_json_has(v, "experts")) {
		if ((ret = sf_json_int(v, "experts", 1, SF_TRACE_MAX_ENTRIES, &x, where, e)))
			return ret;
		f->entries[SF_GROUP_EXPERTS] = (uint32_t)x;
	}
	if (sf_trace_selection_parse(json_object_get(h, "selection"), &f->select, &f->value))
		return sf_err_set(e, SF_EFORMAT, "%s: header: \"selection\" is neither density "
				  "nor threshold", name);
	slots = json_object_get(h, "slots");
	if (!json_is_array(slots) || json_array_size(slots) < 1 ||
	    json_array_size(slots) > (size_t)SF_TRACE_MAX_LAYERS * SF_NKINDS)
		return sf_err_set(e, SF_EFORMAT, "%s: header: \"slots\" is not a list of 1..%d",
				  name, SF_TRACE_MAX_LAYERS * SF_NKINDS);
	f->nslots = (int)json_array_size(slots);
	if (!(f->slots = calloc((size_t)f->nslots, sizeof(*f->slots))))
		return sf_err_set(e, -ENOMEM, "%s: %s", name, sf_strerror(-ENOMEM));
	for (int s = 0; s < f->nslots; s++) {
		json_t *o = json_array_get(slots, (size_t)s);
		struct file_slot *fs = &f->slots[s];
		enum sf_group g;
		snprintf(where, sizeof(where), "%s: header: slot %d", name, s);
		v = json_object_get(o, "group");
		if (!json_is_string(v) || sf_kind_parse(json_string_value(v), &g) ||
		    (g == SF_GROUP_EXPERTS && !f->entries[g]))
			return sf_err_set(e, SF_EFORMAT, "%s: \"group\" missing or not a group "
					  "of the model", where);
		if ((ret = sf_json_int(o, "layer", 0, f->n_layers - 1, &x, where, e)))
			return ret;
		fs->layer = (int)x;
		fs->group = g;
		fs->entries = f->entries[g];
		v = json_object_get(o, "step");
		fs->step = json_is_true(v);
		if (v && (!json_is_boolean(v) || (fs->step && (g != SF_GROUP_EXPERTS || !fs->layer))))
			return sf_err_set(e, SF_EFORMAT, "%s: \"step\" is not a boolean, or not of "
					  "experts after layer 0", where);
		fs->tasks = json_object_get(o, "tasks");
		if (s && (fs->layer < fs[-1].layer ||
			  (fs->layer == fs[-1].layer && fs->group <= fs[-1].group)))
			return sf_err_set(e, SF_EFORMAT, "%s: header: slot %d out of order", name, s);
		if ((ret = sf_json_int(o, "entries", fs->entries, fs->entries, &x, where, e)) ||
		    (ret = sf_json_u64(o, "tokens", SF_COACT_MAX_TOKENS, &fs->tokens, where, e)) ||
		    (ret = sf_json_u64(o, "offset", UINT64_MAX, &fs->offset, where, e)) ||
		    (ret = sf_json_u64(o, "bytes", UINT64_MAX, &fs->bytes, where, e)))
			return ret;
		if (fs->offset != off || fs->bytes != section_bytes(fs->entries, fs->step) ||
		    !json_is_object(fs->tasks))
			return sf_err_set(e, SF_EFORMAT, "%s: header: slot %d (layer %d %s): offset, "
					  "bytes or tasks inconsistent", name, s, fs->layer,
					  sf_group_name(g));
		off += fs->bytes;
	}
	struct stat st;
	if (fstat(fileno(f->in.f), &st) == 0 && S_ISREG(st.st_mode) &&
	    (uint64_t)st.st_size != f->data_start + off)
		return sf_err_set(e, SF_EFORMAT, "%s: %llu bytes: the header describes %llu%s",
				  name, (unsigned long long)st.st_size,
				  (unsigned long long)(f->data_start + off),
				  (uint64_t)st.st_size < f->data_start + off ? " (truncated)" : "");
	return 0;
}

static const struct sf_stream_kind coact_kind = {
	SF_COACT_MAGIC, SF_COACT_VERSION, SF_COACT_MAX_HEADER, 8, "coact file",
	SF_COACT_MIN_VERSION,
};

int sf_coact_file_open(struct sf_coact_file **out, const char *path, struct sf_err *e)
{
	struct sf_coact_file *f = calloc(1, sizeof(*f));
	int ret;

	if (!f || !(f->buf = malloc(CHUNK))) {
		if (f)
			free(f);
		return sf_err_set(e, -ENOMEM, "%s: %s", path, sf_strerror(-ENOMEM));
	}
	if ((ret = sf_stream_open(&f->in, path, &coact_kind, &f->header, e))) {
		free(f->buf);
		free(f);
		return ret;
	}
	f->data_start = f->in.offset;
	if ((ret = parse_coact_header(f, e)))
		goto fail;
	*out = f;
	return 0;
fail:
	sf_coact_file_close(f);
	return ret;
}

void sf_coact_file_close(struct sf_coact_file *f)
{
	if (!f)
		return;
	sf_stream_close(&f->in);
	json_decref(f->header);
	free(f->slots);
	free(f->buf);
	free(f);
}

/* The model and selection of two inputs. */
static int check_file(const struct sf_coact *c, const struct sf_coact_file *f,
		      struct sf_err *e)
{
	int ret = sf_fingerprint_check(&f->fingerprint, f->in.name, "counts", &c->fingerprint,
				       c->first, e);

	if (ret)
		return ret;
	if (f->n_layers != c->n_layers || memcmp(f->entries, c->entries, sizeof(c->entries)))
		return sf_err_set(e, SF_EMISMATCH, "%s: model shape differs from %s's", f->in.name,
				  c->first);
	if (f->select != c->select || f->value != c->value)
		return sf_err_set(e, SF_EMISMATCH, "%s: selection %s %g differs from %s's %s %g",
				  f->in.name, f->select == SF_TRACE_DENSITY ? "density" : "threshold",
				  f->value, c->first,
				  c->select == SF_TRACE_DENSITY ? "density" : "threshold", c->value);
	return 0;
}

/* The tokens and tasks a file's section adds to slot s, from the file's
 * header (its section is checked against it when read): a merge knows
 * its header before reading a section. */
static int count_tokens(struct sf_coact_slot *s, const struct sf_coact_file *f,
			const struct file_slot *fs, struct sf_err *e)
{
	const char *task;
	json_t *v;

	if (s->tokens + fs->tokens > SF_COACT_MAX_TOKENS)
		return sf_err_set(e, SF_ELIMIT, "%s: layer %d %s: %llu + %llu tokens: 32-bit "
				  "pair counts would overflow", f->in.name, fs->layer,
				  sf_group_name(fs->group), (unsigned long long)s->tokens,
				  (unsigned long long)fs->tokens);
	s->tokens += fs->tokens;
	if (!s->tasks && !(s->tasks = json_object()))
		return sf_err_set(e, -ENOMEM, "%s: %s", f->in.name, sf_strerror(-ENOMEM));
	json_object_foreach(fs->tasks, task, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return sf_err_set(e, SF_EFORMAT, "%s: header: task \"%s\" has no token "
					  "count", f->in.name, task);
		if (sf_coact_add_task(s->tasks, task, (uint64_t)json_integer_value(v)))
			return sf_err_set(e, -ENOMEM, "%s: %s", f->in.name, sf_strerror(-ENOMEM));
	}
	return 0;
}

int sf_coact_plan_files(struct sf_coact *c, struct sf_coact_file *const *f, int n, int lo,
			int hi, struct sf_err *e)
{
	int ret;

	memset(c, 0, sizeof(*c));
	c->fingerprint = f[0]->fingerprint;
	c->n_layers = f[0]->n_layers;
	memcpy(c->entries, f[0]->entries, sizeof(c->entries));
	c->select = f[0]->select;
	c->value = f[0]->value;
	c->first = f[0]->in.name;
	if (!(c->sources = json_array())) {
		ret = sf_err_set(e, -ENOMEM, "%s: %s", c->first, sf_strerror(-ENOMEM));
		goto fail;
	}
	for (int k = 0; k < n; k++) {
		if ((ret = check_file(c, f[k], e)))
			goto fail;
		for (int s = 0; s < f[k]->nslots; s++) {
			const struct file_slot *fs = &f[k]->slots[s];
			struct sf_coact_slot *sl;
			if (fs->layer < lo || fs->layer > hi)
				continue;
			if ((ret = sf_coact_add_slot(c, fs->layer, fs->group, fs->step, &sl, e)))
				goto fail;
			if (sl->step != fs->step) {
				ret = sf_err_set(e, SF_EMISMATCH, "%s: layer %d experts: %s the step "
						 "from layer %d, %s's %s", f[k]->in.name, fs->layer,
						 fs->step ? "counts" : "does not count",
						 fs->layer - 1, c->first,
						 sl->step ? "does" : "does not");
				goto fail;
			}
			if ((ret = count_tokens(sl, f[k], fs, e)))
				goto fail;
		}
		json_t *src = json_object_get(f[k]->header, "sources");
		if (json_is_array(src))
			json_array_extend(c->sources, src);
	}
	if (!c->nslots) {
		ret = sf_err_set(e, -EINVAL, "%s: no layer in %d-%d", c->first, lo, hi);
		goto fail;
	}
	return 0;
fail:
	sf_coact_free(c);
	return ret;
}

/* Reads len bytes of the current section in chunks, each passed to fn
 * with the crc running over them. */
static int read_chunks(struct sf_coact_file *f, uint64_t len, uint32_t *crc,
		       void (*fn)(void *ctx, const unsigned char *p, size_t n), void *ctx,
		       struct sf_err *e)
{
	while (len) {
		size_t n = len < CHUNK ? (size_t)len : CHUNK;
		int ret = sf_stream_read(&f->in, f->buf, n, "a section", e);
		if (ret)
			return ret;
		*crc = sf_crc32c(*crc, f->buf, n);
		if (fn)
			fn(ctx, f->buf, n);
		len -= n;
	}
	return 0;
}

struct section_add {
	struct sf_coact_slot *slot;
	uint64_t tokens;	/* the section's */
	uint64_t at;		/* bytes of the section body seen */
	unsigned char part[8];	/* a value split across chunks */
	size_t npart;
	int bad;		/* a count above the tokens or a bad sum */
};

static void add_value(struct section_add *a, const unsigned char *p)
{
	struct sf_coact_slot *s = a->slot;
	uint64_t n = s->entries, at = a->at;

	if (at < 8) {
		return;	/* tokens: read before */
	} else if (at < 8 + 8 * n) {
		uint64_t v = sf_get_le64(p);
		a->bad |= v > a->tokens;
		s->counts[(at - 8) / 8] += v;
	} else if (at < 8 + 16 * n) {
		double v = sf_get_f64(p);
		a->bad |= !(v >= 0.0) || !isfinite(v);
		s->sums[(at - 8 - 8 * n) / 8] += v;
	} else if (at < steps_at(s->entries)) {
		uint64_t idx = (at - 8 - 16 * n) / 4;
		uint32_t v = sf_get_le32(p);
		if (idx < sf_coact_npairs(s->entries)) {
			a->bad |= v > a->tokens;
			s->pairs[idx] += v;
		}
	} else {
		uint64_t idx = (at - steps_at(s->entries)) / 4;
		uint32_t v = sf_get_le32(p);
		if (idx < step_cells(s->entries, s->step)) {
			a->bad |= v > a->tokens;
			s->steps[idx] += v;
		}
	}
}

/* Values are 8 bytes up to the pairs, 4 after; chunks may split one. */
static void section_add_fn(void *ctx, const unsigned char *p, size_t n)
{
	struct section_add *a = ctx;
	uint64_t pairs_at = 8 + 16 * (uint64_t)a->slot->entries;

	while (n) {
		size_t size = a->at < pairs_at ? 8 : 4;
		size_t take = size - a->npart < n ? size - a->npart : n;
		memcpy(a->part + a->npart, p, take);
		a->npart += take;
		p += take;
		n -= take;
		if (a->npart == size) {
			add_value(a, a->part);
			a->at += size;
			a->npart = 0;
		}
	}
}

/* Reads f's next section, added into s (NULL: read past), checked
 * against f's header; at the end of f, that nothing follows. */
static int read_section(struct sf_coact_slot *s, struct sf_coact_file *f, struct sf_err *e)
{
	const struct file_slot *fs = &f->slots[f->next++];
	unsigned char tail[8], tok[8];
	uint32_t crc = 0;
	int ret;

	if (!s) {
		ret = read_chunks(f, fs->bytes, &crc, NULL, NULL, e);
	} else if (!(ret = sf_stream_read(&f->in, tok, 8, "a section", e))) {
		crc = sf_crc32c(0, tok, 8);
		uint64_t tokens = sf_get_le64(tok);
		if (tokens != fs->tokens)
			return sf_err_set(e, SF_EFORMAT, "%s: layer %d %s: section counts %llu tokens, "
					  "the header %llu", f->in.name, fs->layer,
					  sf_group_name(fs->group), (unsigned long long)tokens,
					  (unsigned long long)fs->tokens);
		struct section_add a = { .slot = s, .tokens = tokens, .at = 8 };
		if ((ret = read_chunks(f, fs->bytes - 16, &crc, section_add_fn, &a, e)) ||
		    (ret = sf_stream_read(&f->in, tail, 8, "a section", e)))
			return ret;
		if (sf_get_le32(tail) != crc || sf_get_le32(tail + 4) != 0)
			return sf_err_set(e, SF_EFORMAT, "%s: layer %d %s: checksum 0x%08x, the "
					  "section says 0x%08x", f->in.name, fs->layer,
					  sf_group_name(fs->group), crc, sf_get_le32(tail));
		if (a.bad)
			return sf_err_set(e, SF_EFORMAT, "%s: layer %d %s: a count above the %llu "
					  "tokens or a bad sum", f->in.name, fs->layer,
					  sf_group_name(fs->group), (unsigned long long)tokens);
	}
	if (ret || f->next < f->nslots)
		return ret;
	if (fgetc(f->in.f) != EOF)
		return sf_err_set(e, SF_EFORMAT, "%s: data after the last section at byte %llu",
				  f->in.name, (unsigned long long)f->in.offset);
	return 0;
}

int sf_coact_add_file(struct sf_coact *c, struct sf_coact_file *f, struct sf_err *e)
{
	int ret = check_file(c, f, e);

	while (!ret && f->next < f->nslots) {
		const struct file_slot *fs = &f->slots[f->next];
		ret = read_section(find_slot(c, fs->layer, fs->group), f, e);
	}
	return ret;
}

int sf_coact_read_slot(struct sf_coact *c, int s, struct sf_coact_file *const *f, int n,
		       struct sf_err *e)
{
	struct sf_coact_slot *sl = &c->slots[s];
	int ret = alloc_slot(sl, 0, e);

	for (int k = 0; k < n && !ret; k++) {
		struct sf_coact_file *F = f[k];
		int cmp = -1;
		while (!ret && F->next < F->nslots &&
		       (cmp = slot_cmp(sl, F->slots[F->next].layer, F->slots[F->next].group)) > 0)
			ret = read_section(NULL, F, e);
		if (!ret && cmp == 0 && F->next < F->nslots)
			ret = read_section(sl, F, e);
	}
	return ret;
}

int sf_coact_load(struct sf_coact *c, const char *path, int lo, int hi, struct sf_err *e)
{
	struct sf_coact_file *f = NULL;
	int ret;

	memset(c, 0, sizeof(*c));
	if ((ret = sf_coact_file_open(&f, path, e)))
		return ret;
	if (!(ret = sf_coact_plan_files(c, &f, 1, lo, hi, e))) {
		c->first = "an earlier input";	/* f's name goes with f */
		if ((ret = sf_coact_alloc(c, 0, e)) || (ret = sf_coact_add_file(c, f, e)))
			sf_coact_free(c);
	}
	sf_coact_file_close(f);
	return ret;
}

// ----------------------------------------------------------------------------
// summary

/* How well the layer before's picks predict this layer's, from the step
 * table: each expert i of the layer before predicts its k most frequent
 * successors (k the experts a token picks); covered is the share of the
 * (i, j) steps, i picked before and j now by one token, whose j is among
 * i's k; chance, k / n, what a guess blind to i covers. A read-ahead of
 * the k successors of each pick pays where covered is well above chance. */
static json_t *step_json(const struct sf_coact_slot *sl, uint64_t active)
{
	uint32_t n = sl->entries;
	uint32_t k = sl->tokens ? (uint32_t)((double)active / (double)sl->tokens + 0.5) : 0;
	uint64_t all = 0, hit = 0;
	uint32_t *row = malloc((size_t)n * sizeof(*row));

	if (!row)
		return NULL;
	k = k < 1 ? 1 : k > n ? n : k;
	for (uint32_t i = 0; i < n; i++) {
		memcpy(row, sl->steps + (size_t)i * n, (size_t)n * sizeof(*row));
		for (uint32_t j = 0; j < n; j++)
			all += row[j];
		/* the k largest by selection: k and n are small (8 of 128) */
		for (uint32_t t = 0; t < k; t++) {
			uint32_t best = t;
			for (uint32_t j = t + 1; j < n; j++)
				best = row[j] > row[best] ? j : best;
			uint32_t v = row[best];
			row[best] = row[t];
			row[t] = v;
			hit += v;
		}
	}
	free(row);
	return json_pack("{s:i, s:i, s:I, s:f, s:f}", "from", sl->layer - 1, "successors", (int)k,
			 "steps", (json_int_t)all, "covered", all ? (double)hit / (double)all : 0.0,
			 "chance", (double)k / n);
}

json_t *sf_coact_slot_info_json(const struct sf_coact_slot *sl)
{
	uint64_t active = 0, over = 0;
	char crc[16];
	for (uint32_t i = 0; i < sl->entries; i++) {
		active += sl->counts[i];
		over += 2 * sl->counts[i] > sl->tokens;
	}
	snprintf(crc, sizeof(crc), "%08x", sf_coact_slot_crc(sl));
	double denom = (double)sl->tokens * sl->entries;
	json_t *o = json_pack("{s:i, s:s, s:I, s:I, s:O, s:f, s:f, s:s}", "layer", sl->layer,
			      "group", sf_group_name(sl->group), "entries", (json_int_t)sl->entries,
			      "tokens", (json_int_t)sl->tokens, "tasks", sl->tasks, "mean_density",
			      denom > 0 ? (double)active / denom : 0.0, "over_half",
			      (double)over / sl->entries, "crc", crc);
	if (o && sl->group == SF_GROUP_EXPERTS) {
		json_t *picks = json_array();
		for (uint32_t i = 0; picks && i < sl->entries; i++)
			json_array_append_new(picks, json_integer((json_int_t)sl->counts[i]));
		if (json_object_set_new(o, "picks", picks) ||
		    (sl->step && sl->steps && json_object_set_new(o, "step", step_json(sl, active)))) {
			json_decref(o);
			return NULL;
		}
	}
	return o;
}

json_t *sf_coact_info_json(const struct sf_coact *c, json_t *slots)
{
	if (!slots) {
		slots = json_array();
		for (int s = 0; slots && s < c->nslots; s++)
			json_array_append_new(slots, sf_coact_slot_info_json(&c->slots[s]));
	}
	return json_pack("{s:s, s:s, s:o, s:o}", "fingerprint", c->fingerprint.weights,
			 "shape_fingerprint", c->fingerprint.shape, "selection",
			 sf_trace_selection_json(c->select, c->value), "slots", slots);
}
