/* Hugging Face safetensors reader (one file or shards behind an index) and
 * writer. Every header field is checked before a tensor pointer is handed
 * out; see safetensors.h and man/sf-formats.5. */
#include "formats/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/guard.h"

/* Limits on what a header may claim, so that a hostile file cannot make us
 * allocate or parse without bound. */
#define HEADER_MAX (100u << 20)		/* bytes of JSON header */
#define TENSORS_MAX (1u << 20)		/* tensors in one file or one model */
#define INDEX_MAX (64u << 20)		/* bytes of model.safetensors.index.json */
#define WRITE_CHUNK (1u << 20)		/* bytes per fill() call; a multiple of 8 */

/* dtypes the safetensors format defines but we do not compute with: these
 * are refused as unsupported, any other string as malformed. */
static int dtype_is_foreign(const char *name)
{
	static const char *const other[] = {
		"BOOL", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F4", "F6_E2M3",
		"F6_E3M2", "I16", "U16", "I32", "U32", "F64", "I64", "U64", "C64",
	};

	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
		if (!strcmp(name, other[i]))
			return 1;
	return 0;
}

// --- helpers

static uint64_t get_le64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void put_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* A name goes into one-line messages, so control bytes are refused. */
static int name_is_printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 0;
	return 1;
}

static char *join_path(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);

	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}

const char *sf_shape_str(char *buf, size_t size, int ndim, const uint64_t *shape)
{
	size_t k = 0;

	k += (size_t)snprintf(buf + k, size - k, "[");
	for (int i = 0; i < ndim && k < size; i++)
		k += (size_t)snprintf(buf + k, size - k, "%s%llu", i ? ", " : "",
				      (unsigned long long)shape[i]);
	if (k < size)
		snprintf(buf + k, size - k, "]");
	return buf;
}

static int cmp_tensor_name(const void *a, const void *b)
{
	return strcmp(((const struct sf_tensor *)a)->name, ((const struct sf_tensor *)b)->name);
}

void sf_safetensors_sort(struct sf_safetensors *st)
{
	qsort(st->tensors, st->ntensors, sizeof(*st->tensors), cmp_tensor_name);
}

static int cmp_tensor_offset(const void *a, const void *b)
{
	const struct sf_tensor *x = *(const struct sf_tensor *const *)a;
	const struct sf_tensor *y = *(const struct sf_tensor *const *)b;
	const char *px = x->data, *py = y->data;

	if (px != py)
		return px < py ? -1 : 1;
	if (x->nbytes != y->nbytes)
		return x->nbytes < y->nbytes ? -1 : 1;
	return 0;
}

// --- reader

void sf_safetensors_release(const struct sf_safetensors *st, const void *p, size_t n)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p;

	for (size_t f = 0; f < st->nfiles; f++) {
		uintptr_t map = (uintptr_t)st->maps[f];
		if (a < map || a - map >= st->map_sizes[f] || n > st->map_sizes[f] - (a - map))
			continue;
		/* inward: the pages at the ends may hold a neighbour's bytes */
		uintptr_t lo = (a + page - 1) / page * page, hi = (a + n) / page * page;
		if (hi > lo)
			(void)madvise((void *)lo, hi - lo, MADV_DONTNEED);	/* a hint */
		return;
	}
}

void sf_safetensors_close(struct sf_safetensors *st)
{
	if (!st)
		return;
	for (size_t i = 0; i < st->nfiles; i++) {
		if (st->maps && st->maps[i]) {
			sf_guard_unmap(st->maps[i]);
			munmap(st->maps[i], st->map_sizes[i]);
		}
		if (st->paths)
			free(st->paths[i]);
	}
	free(st->maps);
	free(st->map_sizes);
	free(st->paths);
	free(st->tensors);
	free(st->index_path);
	memset(st, 0, sizeof(*st));
}

/* Grows the per-file arrays by one slot, zeroed. */
static int add_file_slot(struct sf_safetensors *st, const char *path, struct sf_err *e)
{
	size_t n = st->nfiles + 1;
	void **maps = realloc(st->maps, n * sizeof(*maps));
	size_t *sizes;
	char **paths;

	if (!maps)
		goto nomem;
	st->maps = maps;
	sizes = realloc(st->map_sizes, n * sizeof(*sizes));
	if (!sizes)
		goto nomem;
	st->map_sizes = sizes;
	paths = realloc(st->paths, n * sizeof(*paths));
	if (!paths)
		goto nomem;
	st->paths = paths;
	st->maps[st->nfiles] = NULL;
	st->map_sizes[st->nfiles] = 0;
	st->paths[st->nfiles] = strdup(path);
	if (!st->paths[st->nfiles])
		goto nomem;
	st->nfiles = n;
	return 0;
nomem:
	return sf_err_set(e, -ENOMEM, "%s: out of memory", path);
}

/* Parses one tensor entry of a header into *t (name already set). */
static int parse_entry(const char *path, const char *name, json_t *v, const unsigned char *buf,
		       uint64_t buf_size, struct sf_tensor *t, struct sf_err *e)
{
	json_t *jd = json_object_get(v, "dtype");
	json_t *js = json_object_get(v, "shape");
	json_t *jo = json_object_get(v, "data_offsets");
	uint64_t begin, end, count = 1, nbytes;
	char sb[160];

	if (!json_is_object(v))
		return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': entry is not a JSON object",
				  path, name);
	if (!json_is_string(jd))
		return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': 'dtype' %s, expected a string",
				  path, name, jd ? "is not a string" : "missing");
	/* U8: gpt-oss's MXFP4 blocks and scales, which only its reader takes
	 * (formats/model_gptoss.h); bound as a weight, refused */
	if (!strcmp(json_string_value(jd), "U8"))
		t->dtype = SF_DTYPE_U8;
	else if (sf_dtype_parse(json_string_value(jd), &t->dtype)) {
		const char *d = json_string_value(jd);
		int foreign = dtype_is_foreign(d);

		if (!name_is_printable(d))
			d = "(unprintable)";
		return sf_err_set(e, foreign ? SF_EUNSUPPORTED : SF_EFORMAT,
				  "%s: tensor '%s': dtype '%s' %s (expected F32, F16 or BF16)",
				  path, name, d, foreign ? "unsupported" : "unknown");
	}
	t->source_dtype = t->dtype;
	if (!json_is_array(js))
		return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': 'shape' %s, expected an array",
				  path, name, js ? "is not an array" : "missing");
	if (json_array_size(js) > SF_TENSOR_MAX_DIMS)
		return sf_err_set(e, SF_ELIMIT, "%s: tensor '%s': %zu dimensions, at most %d supported",
				  path, name, json_array_size(js), SF_TENSOR_MAX_DIMS);
	t->ndim = (int)json_array_size(js);
	for (int i = 0; i < t->ndim; i++) {
		json_t *d = json_array_get(js, (size_t)i);

		if (!json_is_integer(d) || json_integer_value(d) < 0)
			return sf_err_set(e, SF_EFORMAT,
					  "%s: tensor '%s': shape[%d] is not a non-negative integer",
					  path, name, i);
		t->shape[i] = (uint64_t)json_integer_value(d);
		if (__builtin_mul_overflow(count, t->shape[i], &count))
			return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': shape %s overflows 64 bits",
					  path, name, sf_shape_str(sb, sizeof(sb), i + 1, t->shape));
	}
	if (__builtin_mul_overflow(count, (uint64_t)sf_dtype_size(t->dtype), &nbytes))
		return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': shape %s of %s overflows 64 bits",
				  path, name, sf_shape_str(sb, sizeof(sb), t->ndim, t->shape),
				  sf_dtype_name(t->dtype));
	if (!json_is_array(jo) || json_array_size(jo) != 2 ||
	    !json_is_integer(json_array_get(jo, 0)) || !json_is_integer(json_array_get(jo, 1)) ||
	    json_integer_value(json_array_get(jo, 0)) < 0 ||
	    json_integer_value(json_array_get(jo, 1)) < 0)
		return sf_err_set(e, SF_EFORMAT,
				  "%s: tensor '%s': 'data_offsets' %s, expected [begin, end] of non-negative integers",
				  path, name, jo ? "malformed" : "missing");
	begin = (uint64_t)json_integer_value(json_array_get(jo, 0));
	end = (uint64_t)json_integer_value(json_array_get(jo, 1));
	if (begin > end)
		return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] begin after end",
				  path, name, (unsigned long long)begin, (unsigned long long)end);
	if (end - begin != nbytes)
		return sf_err_set(e, SF_EFORMAT,
				  "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, shape %s of %s needs %llu",
				  path, name, (unsigned long long)begin, (unsigned long long)end,
				  (unsigned long long)(end - begin),
				  sf_shape_str(sb, sizeof(sb), t->ndim, t->shape), sf_dtype_name(t->dtype),
				  (unsigned long long)nbytes);
	if (end > buf_size)
		return sf_err_set(e, SF_EFORMAT,
				  "%s: tensor '%s': data ends at byte %llu of the data buffer, past its end (%llu bytes)",
				  path, name, (unsigned long long)end, (unsigned long long)buf_size);
	t->nbytes = nbytes;
	t->data = buf + begin;
	return 0;
}

/* jansson reports a duplicate as: duplicate object key near '"NAME"'. */
static int dup_key_error(const char *path, const json_error_t *jerr, struct sf_err *e)
{
	static const char pre[] = "near '\"";
	const char *p = strstr(jerr->text, pre);
	size_t len;

	if (p) {
		p += sizeof(pre) - 1;
		len = strlen(p);
		if (len >= 2 && p[len - 2] == '"' && p[len - 1] == '\'')
			return sf_err_set(e, SF_EFORMAT, "%s: tensor '%.*s': named twice in the header",
					  path, (int)(len - 2), p);
	}
	return sf_err_set(e, SF_EFORMAT, "%s: header: duplicate tensor name (%s)", path, jerr->text);
}

/* Maps one file and appends its tensors to st->tensors (unsorted). */
static int load_file(struct sf_safetensors *st, const char *path, size_t *cap, struct sf_err *e)
{
	int fd = -1, ret;
	struct stat sb;
	unsigned char *map;
	uint64_t hlen, fsize, buf_size;
	json_t *root = NULL;
	json_error_t jerr;
	const char *key;
	json_t *val;
	const struct sf_tensor **order = NULL;
	size_t first, file;

	ret = add_file_slot(st, path, e);
	if (ret)
		return ret;
	file = st->nfiles - 1;
	first = st->ntensors;
	if ((fd = sf_file_open_regular(path, 0, &sb, e)) < 0) {
		ret = fd;
		goto out;
	}
	fsize = (uint64_t)sb.st_size;
	if (fsize < 8) {
		ret = sf_err_set(e, SF_EFORMAT,
				 "%s: file is %llu bytes, too short for the 8-byte header length",
				 path, (unsigned long long)fsize);
		goto out;
	}
	if (fsize > SIZE_MAX) {
		ret = sf_err_set(e, SF_ELIMIT, "%s: file is %llu bytes, too large to map",
				 path, (unsigned long long)fsize);
		goto out;
	}
	map = mmap(NULL, (size_t)fsize, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		ret = sf_err_set(e, -errno, "%s: cannot map: %s", path, strerror(errno));
		goto out;
	}
	st->maps[file] = map;
	st->map_sizes[file] = (size_t)fsize;
	/* so that a truncation under us is named, not a silent SIGBUS */
	if ((ret = sf_guard_map(map, (size_t)fsize, st->paths[file], e)))
		goto out;

	hlen = get_le64(map);
	if (hlen > fsize - 8) {
		ret = sf_err_set(e, SF_EFORMAT,
				 "%s: header of %llu bytes runs past the end of the file (%llu bytes, room for %llu)",
				 path, (unsigned long long)hlen, (unsigned long long)fsize,
				 (unsigned long long)(fsize - 8));
		goto out;
	}
	if (hlen > HEADER_MAX) {
		ret = sf_err_set(e, SF_ELIMIT, "%s: header of %llu bytes, limit %u",
				 path, (unsigned long long)hlen, HEADER_MAX);
		goto out;
	}
	buf_size = fsize - 8 - hlen;
	root = json_loadb((const char *)map + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		if (json_error_code(&jerr) == json_error_duplicate_key)
			ret = dup_key_error(path, &jerr, e);
		else
			ret = sf_err_set(e, SF_EFORMAT,
					 "%s: header is not valid JSON: %s at byte %d", path,
					 jerr.text, jerr.position + 8);
		goto out;
	}
	if (!json_is_object(root)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header is not a JSON object", path);
		goto out;
	}
	if (json_object_size(root) > TENSORS_MAX ||
	    st->ntensors + json_object_size(root) > TENSORS_MAX + 1) {
		ret = sf_err_set(e, SF_ELIMIT, "%s: %zu header entries, limit %u tensors", path,
				 json_object_size(root), TENSORS_MAX);
		goto out;
	}
	json_object_foreach(root, key, val) {
		struct sf_tensor *t;

		if (!strcmp(key, "__metadata__")) {
			if (!json_is_object(val)) {
				ret = sf_err_set(e, SF_EFORMAT, "%s: '__metadata__' is not a JSON object",
						 path);
				goto out;
			}
			continue;
		}
		if (!*key || !name_is_printable(key)) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: a tensor name is empty or holds control characters",
					 path);
			goto out;
		}
		if (strlen(key) >= SF_TENSOR_NAME_MAX) {
			ret = sf_err_set(e, SF_ELIMIT, "%s: tensor '%.40s...': name of %zu bytes, limit %d",
					 path, key, strlen(key), SF_TENSOR_NAME_MAX - 1);
			goto out;
		}
		if (st->ntensors == *cap) {
			size_t ncap = *cap ? *cap * 2 : 64;
			struct sf_tensor *nt = realloc(st->tensors, ncap * sizeof(*nt));

			if (!nt) {
				ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
				goto out;
			}
			st->tensors = nt;
			*cap = ncap;
		}
		t = &st->tensors[st->ntensors];
		memset(t, 0, sizeof(*t));
		memcpy(t->name, key, strlen(key) + 1);
		t->file = (int)file;
		ret = parse_entry(path, key, val, map + 8 + hlen, buf_size, t, e);
		if (ret)
			goto out;
		st->ntensors++;
	}

	/* Overlap check: sort this file's tensors by where their data starts;
	 * each must begin at or after the end of the one before. Empty
	 * tensors overlap nothing. */
	if (st->ntensors - first > 1) {
		size_t n = st->ntensors - first;
		const struct sf_tensor *prev = NULL;

		order = malloc(n * sizeof(*order));
		if (!order) {
			ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
			goto out;
		}
		for (size_t i = 0; i < n; i++)
			order[i] = &st->tensors[first + i];
		qsort(order, n, sizeof(*order), cmp_tensor_offset);
		for (size_t i = 0; i < n; i++) {
			const struct sf_tensor *t = order[i];

			if (!t->nbytes)
				continue;
			if (prev && (const char *)t->data < (const char *)prev->data + prev->nbytes) {
				const unsigned char *b = map + 8 + hlen;
				ret = sf_err_set(e, SF_EFORMAT,
						 "%s: tensor '%s': data [%llu, %llu] overlaps tensor '%s' [%llu, %llu]",
						 path, t->name,
						 (unsigned long long)((const unsigned char *)t->data - b),
						 (unsigned long long)((const unsigned char *)t->data - b + t->nbytes),
						 prev->name,
						 (unsigned long long)((const unsigned char *)prev->data - b),
						 (unsigned long long)((const unsigned char *)prev->data - b + prev->nbytes));
				goto out;
			}
			prev = t;
		}
	}
	ret = 0;
out:
	free(order);
	json_decref(root);
	if (fd >= 0)
		close(fd);
	return ret;
}

/* Sorts by name and refuses a name held twice (only possible across
 * shards: one header cannot hold duplicates). */
static int sort_tensors(struct sf_safetensors *st, struct sf_err *e)
{
	if (st->ntensors > 1)
		sf_safetensors_sort(st);
	for (size_t i = 1; i < st->ntensors; i++) {
		const struct sf_tensor *a = &st->tensors[i - 1], *b = &st->tensors[i];

		if (!strcmp(a->name, b->name))
			return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': also in %s",
					  st->paths[b->file], b->name, st->paths[a->file]);
	}
	return 0;
}

int sf_safetensors_open_file(struct sf_safetensors *st, const char *path, struct sf_err *e)
{
	size_t cap = 0;
	int ret;

	memset(st, 0, sizeof(*st));
	ret = load_file(st, path, &cap, e);
	if (!ret)
		ret = sort_tensors(st, e);
	if (ret)
		sf_safetensors_close(st);
	return ret;
}

static int open_index(struct sf_safetensors *st, const char *dir, const char *ipath,
		      struct sf_err *e)
{
	char *text = NULL, *spath = NULL;
	size_t len = 0, cap = 0;
	json_t *root = NULL, *wm;
	json_error_t jerr;
	const char *key;
	json_t *val;
	int ret;

	ret = sf_file_read(ipath, INDEX_MAX, SF_FILE_REGULAR, &text, &len, e);
	if (ret)
		goto out;
	root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: not valid JSON: %s at line %d column %d",
				 ipath, jerr.text, jerr.line, jerr.column);
		goto out;
	}
	wm = json_object_get(root, "weight_map");
	if (!json_is_object(wm)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: 'weight_map' %s, expected an object", ipath,
				 wm ? "is not an object" : "missing");
		goto out;
	}
	if (json_object_size(wm) > TENSORS_MAX) {
		ret = sf_err_set(e, SF_ELIMIT, "%s: 'weight_map' has %zu tensors, limit %u", ipath,
				 json_object_size(wm), TENSORS_MAX);
		goto out;
	}
	/* Open each distinct shard once, in order of first mention. */
	json_object_foreach(wm, key, val) {
		const char *f = json_string_value(val);
		size_t i;

		if (!f) {
			ret = sf_err_set(e, SF_EFORMAT, "%s: weight_map['%s'] is not a string",
					 ipath, name_is_printable(key) ? key : "?");
			goto out;
		}
		/* A shard is a file beside the index, never elsewhere. */
		if (!*f || strchr(f, '/') || !strcmp(f, ".") || !strcmp(f, "..") ||
		    !name_is_printable(f)) {
			ret = sf_err_set(e, SF_EFORMAT,
					 "%s: weight_map['%s']: '%s' is not a plain file name",
					 ipath, name_is_printable(key) ? key : "?",
					 name_is_printable(f) ? f : "?");
			goto out;
		}
		free(spath);
		spath = join_path(dir, f);
		if (!spath) {
			ret = sf_err_set(e, -ENOMEM, "%s: out of memory", ipath);
			goto out;
		}
		for (i = 0; i < st->nfiles; i++)
			if (!strcmp(st->paths[i], spath))
				break;
		if (i < st->nfiles)
			continue;
		ret = load_file(st, spath, &cap, e);
		if (ret == -ENOENT)
			ret = sf_err_set(e, ret, "%s: tensor '%s': shard %s: %s", ipath,
					 name_is_printable(key) ? key : "?", spath, strerror(ENOENT));
		if (ret)
			goto out;
	}
	ret = sort_tensors(st, e);
	if (ret)
		goto out;
	/* The index and the shards must agree both ways. */
	json_object_foreach(wm, key, val) {
		const struct sf_tensor *t = sf_safetensors_find(st, key);

		free(spath);
		spath = join_path(dir, json_string_value(val));
		if (!spath) {
			ret = sf_err_set(e, -ENOMEM, "%s: out of memory", ipath);
			goto out;
		}
		if (!t || strcmp(st->paths[t->file], spath)) {
			ret = sf_err_set(e, SF_EMISMATCH, "%s: tensor '%s': listed in %s, but not there",
					 ipath, name_is_printable(key) ? key : "?", spath);
			goto out;
		}
	}
	if (st->ntensors != json_object_size(wm)) {
		for (size_t i = 0; i < st->ntensors; i++)
			if (!json_object_get(wm, st->tensors[i].name)) {
				ret = sf_err_set(e, SF_EMISMATCH,
						 "%s: tensor '%s': in %s but not listed in the index",
						 ipath, st->tensors[i].name, st->paths[st->tensors[i].file]);
				goto out;
			}
	}
	ret = 0;
out:
	free(spath);
	free(text);
	json_decref(root);
	return ret;
}

int sf_safetensors_open(struct sf_safetensors *st, const char *dir, struct sf_err *e)
{
	char *ipath = join_path(dir, "model.safetensors.index.json");
	char *path = NULL;
	int ret;

	memset(st, 0, sizeof(*st));
	if (!ipath)
		return sf_err_set(e, -ENOMEM, "%s: out of memory", dir);
	if (access(ipath, F_OK) == 0) {
		st->index_path = ipath;
		ipath = NULL;
		ret = open_index(st, dir, st->index_path, e);
		if (ret)
			sf_safetensors_close(st);
		goto out;
	}
	if (errno != ENOENT) {
		ret = sf_err_set(e, -errno, "%s: %s", ipath, strerror(errno));
		goto out;
	}
	path = join_path(dir, "model.safetensors");
	if (!path) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory", dir);
		goto out;
	}
	ret = sf_safetensors_open_file(st, path, e);
out:
	free(path);
	free(ipath);
	return ret;
}

const struct sf_tensor *sf_safetensors_find(const struct sf_safetensors *st, const char *name)
{
	size_t lo = 0, hi = st->ntensors;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, st->tensors[mid].name);

		if (!c)
			return &st->tensors[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

const char *sf_safetensors_source(const struct sf_safetensors *st)
{
	if (st->index_path)
		return st->index_path;
	return st->nfiles ? st->paths[0] : "(no file)";
}

// --- writer

static int write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int cmp_out_name(const void *a, const void *b)
{
	const struct sf_tensor_out *x = *(const struct sf_tensor_out *const *)a;
	const struct sf_tensor_out *y = *(const struct sf_tensor_out *const *)b;

	return strcmp(x->name, y->name);
}

/* Checks one tensor the caller gave and returns its byte size. */
static int check_out(const char *path, const struct sf_tensor_out *t, uint64_t *nbytes,
		     struct sf_err *e)
{
	uint64_t count = 1;

	if (!t->name || !*t->name || !name_is_printable(t->name))
		return sf_err_set(e, -EINVAL, "%s: a tensor name is empty or holds control characters",
				  path);
	if (strlen(t->name) >= SF_TENSOR_NAME_MAX)
		return sf_err_set(e, -EINVAL, "%s: tensor '%.40s...': name of %zu bytes, limit %d",
				  path, t->name, strlen(t->name), SF_TENSOR_NAME_MAX - 1);
	if (!sf_dtype_size(t->dtype))
		return sf_err_set(e, -EINVAL, "%s: tensor '%s': dtype %d unknown", path, t->name,
				  (int)t->dtype);
	if (t->ndim < 0 || t->ndim > SF_TENSOR_MAX_DIMS)
		return sf_err_set(e, -EINVAL, "%s: tensor '%s': %d dimensions, expected 0..%d",
				  path, t->name, t->ndim, SF_TENSOR_MAX_DIMS);
	for (int i = 0; i < t->ndim; i++)
		if (t->shape[i] > INT64_MAX || __builtin_mul_overflow(count, t->shape[i], &count))
			return sf_err_set(e, -EINVAL, "%s: tensor '%s': shape overflows 64 bits",
					  path, t->name);
	if (__builtin_mul_overflow(count, (uint64_t)sf_dtype_size(t->dtype), nbytes) ||
	    *nbytes > INT64_MAX)
		return sf_err_set(e, -EINVAL, "%s: tensor '%s': size overflows 64 bits", path, t->name);
	if (*nbytes && !t->data && !t->fill)
		return sf_err_set(e, -EINVAL, "%s: tensor '%s': neither data nor fill given",
				  path, t->name);
	return 0;
}

/* The header JSON of the sorted tensors, padded with spaces to a multiple
 * of 8 bytes so the data buffer starts 8-byte aligned. */
static int build_header(const char *path, const struct sf_tensor_out *const *order,
			const uint64_t *nbytes, size_t n, char **out, size_t *out_len,
			struct sf_err *e)
{
	json_t *root = json_object(), *meta = json_object();
	uint64_t off = 0;
	char *s = NULL, *padded;
	size_t len, plen;
	int ret = -ENOMEM;

	if (!root || !meta || json_object_set_new(meta, "format", json_string("pt")) ||
	    json_object_set(root, "__metadata__", meta))
		goto nomem;
	for (size_t i = 0; i < n; i++) {
		const struct sf_tensor_out *t = order[i];
		json_t *o = json_object(), *shape = json_array(), *offs = json_array();
		int bad = !o || !shape || !offs;

		for (int d = 0; !bad && d < t->ndim; d++)
			bad = json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
		bad = bad || json_array_append_new(offs, json_integer((json_int_t)off)) ||
		      json_array_append_new(offs, json_integer((json_int_t)(off + nbytes[i])));
		bad = bad || json_object_set_new(o, "dtype", json_string(sf_dtype_name(t->dtype)));
		bad = bad || json_object_set(o, "shape", shape) ||
		      json_object_set(o, "data_offsets", offs);
		json_decref(shape);
		json_decref(offs);
		if (bad || json_object_set_new(root, t->name, o)) {
			if (bad)
				json_decref(o);
			goto nomem;
		}
		/* No overflow: the sum of checked sizes is bounded by the
		 * caller's memory or fill; guard anyway. */
		if (__builtin_add_overflow(off, nbytes[i], &off)) {
			ret = sf_err_set(e, -EINVAL, "%s: total size overflows 64 bits", path);
			goto out;
		}
	}
	s = json_dumps(root, JSON_SORT_KEYS | JSON_COMPACT);
	if (!s)
		goto nomem;
	len = strlen(s);
	plen = (len + 7) & ~(size_t)7;
	padded = malloc(plen);
	if (!padded)
		goto nomem;
	memcpy(padded, s, len);
	memset(padded + len, ' ', plen - len);
	*out = padded;
	*out_len = plen;
	ret = 0;
	goto out;
nomem:
	ret = sf_err_set(e, -ENOMEM, "%s: out of memory building the header", path);
out:
	free(s);
	json_decref(meta);
	json_decref(root);
	return ret;
}

/* fsync of the directory makes the rename itself durable. */
static void sync_dir_of(const char *path)
{
	char *copy = strdup(path);
	int fd;

	if (!copy)
		return;
	fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	free(copy);
}

int sf_safetensors_write(const char *path, const struct sf_tensor_out *t, size_t n,
			 struct sf_err *e)
{
	const struct sf_tensor_out **order = NULL;
	uint64_t *nbytes = NULL;
	char *header = NULL, *tmp = NULL;
	unsigned char *chunk = NULL, lenbuf[8];
	size_t hlen = 0, tlen;
	int fd = -1, ret;

	if (n > TENSORS_MAX)
		return sf_err_set(e, -EINVAL, "%s: %zu tensors, limit %u", path, n, TENSORS_MAX);
	order = malloc((n ? n : 1) * sizeof(*order));
	nbytes = malloc((n ? n : 1) * sizeof(*nbytes));
	tlen = strlen(path) + sizeof(".tmp.XXXXXX");
	tmp = malloc(tlen);
	if (!order || !nbytes || !tmp) {
		ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
		goto out;
	}
	tmp[0] = 0;	/* nothing to unlink yet */
	for (size_t i = 0; i < n; i++)
		order[i] = &t[i];
	if (n > 1)
		qsort(order, n, sizeof(*order), cmp_out_name);
	for (size_t i = 0; i < n; i++) {
		ret = check_out(path, order[i], &nbytes[i], e);
		if (ret)
			goto out;
		if (i && !strcmp(order[i - 1]->name, order[i]->name)) {
			ret = sf_err_set(e, -EINVAL, "%s: tensor '%s' given twice", path,
					 order[i]->name);
			goto out;
		}
	}
	ret = build_header(path, order, nbytes, n, &header, &hlen, e);
	if (ret)
		goto out;

	snprintf(tmp, tlen, "%s.tmp.XXXXXX", path);
	fd = mkstemp(tmp);
	if (fd < 0) {
		ret = sf_err_set(e, -errno, "%s: cannot create: %s", tmp, strerror(errno));
		tmp[0] = 0;
		goto out;
	}
	if ((ret = sf_guard_tmp(tmp, e))) {
		unlink(tmp);
		tmp[0] = 0;
		goto out;
	}
	/* mkstemp makes the file 0600; a model is meant to be shared. */
	fchmod(fd, 0644);
	put_le64(lenbuf, hlen);
	ret = write_all(fd, lenbuf, 8);
	if (!ret)
		ret = write_all(fd, header, hlen);
	for (size_t i = 0; !ret && i < n; i++) {
		const struct sf_tensor_out *o = order[i];

		if (o->data) {
			ret = write_all(fd, o->data, (size_t)nbytes[i]);
			continue;
		}
		if (!chunk && nbytes[i]) {
			chunk = malloc(WRITE_CHUNK);
			if (!chunk) {
				ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
				goto out;
			}
		}
		for (uint64_t off = 0; off < nbytes[i];) {
			size_t len = nbytes[i] - off < WRITE_CHUNK ? (size_t)(nbytes[i] - off)
								   : WRITE_CHUNK;

			ret = o->fill(o->arg, o, chunk, off, len);
			if (ret) {
				ret = sf_err_set(e, ret < 0 ? ret : -EIO,
						 "%s: tensor '%s': generating data failed: %s",
						 path, o->name, strerror(ret < 0 ? -ret : EIO));
				goto out;
			}
			ret = write_all(fd, chunk, len);
			if (ret)
				break;
			off += len;
		}
	}
	if (!ret && fsync(fd))
		ret = -errno;
	if (ret) {
		ret = sf_err_set(e, ret, "%s: write failed: %s", tmp, strerror(-ret));
		goto out;
	}
	ret = close(fd);
	fd = -1;
	if (ret) {
		ret = sf_err_set(e, -errno, "%s: write failed: %s", tmp, strerror(errno));
		goto out;
	}
	if (rename(tmp, path)) {
		ret = sf_err_set(e, -errno, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
		goto out;
	}
	sf_guard_untmp(tmp);
	tmp[0] = 0;
	sync_dir_of(path);
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	if (tmp && tmp[0] && ret)
		unlink(tmp);
	sf_guard_untmp(tmp);
	free(chunk);
	free(tmp);
	free(header);
	free(nbytes);
	free(order);
	return ret;
}
