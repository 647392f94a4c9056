/* GGUF reader: the header, metadata and tensor infos walked with a
 * cursor that checks every length against the bytes left before reading,
 * then the tensors checked against the data section and each other. See
 * gguf.h and man/sf-formats.5. */
#include "formats/gguf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/file.h"
#include "base/guard.h"

#define GGUF_MAGIC "GGUF"
#define HEADER_BYTES 24		/* magic, version, tensor count, key count */
#define TENSORS_MAX (1u << 20)
#define KVS_MAX (1u << 20)
/* The fewest bytes a key-value pair (8-byte key length, a 1-byte key,
 * type, a 1-byte value) and a tensor info (name, n_dims 0, type, offset)
 * take: a count past what the rest of the file could hold is refused
 * before anything is allocated for it. */
#define KV_MIN_BYTES (8 + 1 + 4 + 1)
#define TENSOR_MIN_BYTES (8 + 1 + 4 + 4 + 8)

static const char *const vtype_names[SF_GGUF_NVTYPES] = {
	"U8", "I8", "U16", "I16", "U32", "I32", "F32", "BOOL", "STRING", "ARRAY", "U64", "I64",
	"F64",
};

/* Bytes of a value of a fixed-size type; 0 for STRING and ARRAY. */
static const uint8_t vtype_size[SF_GGUF_NVTYPES] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };

const char *sf_gguf_vtype_name(uint32_t t)
{
	return t < SF_GGUF_NVTYPES ? vtype_names[t] : "?";
}

// --- the cursor: every read checked against the end of the file

struct cursor {
	const unsigned char *map;
	uint64_t off, size;
	const char *path;
	struct sf_err *e;
};

/* n more bytes must be there; what names the field in the message. */
static int need(struct cursor *c, uint64_t n, const char *what, const char *name)
{
	if (n <= c->size - c->off)
		return 0;
	return sf_err_set(c->e, SF_EFORMAT,
			  "%s: %s%s%s%s: %llu bytes at offset %llu run past the end of the file (%llu bytes)",
			  c->path, what, name ? " '" : "", name ? name : "", name ? "'" : "",
			  (unsigned long long)n,
			  (unsigned long long)c->off, (unsigned long long)c->size);
}

static int read_u32(struct cursor *c, uint32_t *v, const char *what, const char *name)
{
	int ret = need(c, 4, what, name);

	if (!ret) {
		*v = sf_get_le32(c->map + c->off);
		c->off += 4;
	}
	return ret;
}

static int read_u64(struct cursor *c, uint64_t *v, const char *what, const char *name)
{
	int ret = need(c, 8, what, name);

	if (!ret) {
		*v = sf_get_le64(c->map + c->off);
		c->off += 8;
	}
	return ret;
}

/* A string: 8-byte length, then the bytes; *s points at them. */
static int read_str(struct cursor *c, const unsigned char **s, uint64_t *len, const char *what,
		    const char *name)
{
	int ret = read_u64(c, len, what, name);

	if (!ret)
		ret = need(c, *len, what, name);
	if (!ret) {
		*s = c->map + c->off;
		c->off += *len;
	}
	return ret;
}

/* A key or tensor name as a NUL-terminated copy: non-empty, shorter than
 * SF_GGUF_NAME_MAX, printable (it goes into one-line messages). */
static int read_name(struct cursor *c, char **out, const char *what)
{
	const unsigned char *s;
	uint64_t len;
	int ret = read_str(c, &s, &len, what, NULL);

	if (ret)
		return ret;
	if (!len)
		return sf_err_set(c->e, SF_EFORMAT, "%s: %s at offset %llu is empty", c->path, what,
				  (unsigned long long)(c->off - 8));
	if (len >= SF_GGUF_NAME_MAX)
		return sf_err_set(c->e, SF_ELIMIT, "%s: %s at offset %llu: %llu bytes, limit %d",
				  c->path, what, (unsigned long long)(c->off - len - 8),
				  (unsigned long long)len, SF_GGUF_NAME_MAX - 1);
	for (uint64_t i = 0; i < len; i++)
		if (s[i] < 0x20 || s[i] == 0x7f)
			return sf_err_set(c->e, SF_EFORMAT,
					  "%s: %s at offset %llu holds control characters", c->path,
					  what, (unsigned long long)(c->off - len - 8));
	*out = strndup((const char *)s, (size_t)len);
	if (!*out)
		return sf_err_set(c->e, -ENOMEM, "%s: out of memory", c->path);
	return 0;
}

// --- metadata

/* One value of type t (not ARRAY) skipped over, its bounds checked. */
static int skip_value(struct cursor *c, enum sf_gguf_vtype t, const char *key)
{
	const unsigned char *s;
	uint64_t len;

	if (t == SF_GGUF_STRING)
		return read_str(c, &s, &len, "key", key);
	int ret = need(c, vtype_size[t], "key", key);
	if (!ret)
		c->off += vtype_size[t];
	return ret;
}

static int read_vtype(struct cursor *c, enum sf_gguf_vtype *t, const char *key)
{
	uint32_t v;
	int ret = read_u32(c, &v, "key", key);

	if (ret)
		return ret;
	if (v >= SF_GGUF_NVTYPES)
		return sf_err_set(c->e, SF_EFORMAT, "%s: key '%s': value type %u unknown", c->path,
				  key, v);
	*t = v;
	return 0;
}

/* An array: element type, count, elements; strings indexed in kv->strs. */
static int read_array(struct cursor *c, struct sf_gguf_kv *kv)
{
	int ret = read_vtype(c, &kv->elem_type, kv->key);

	if (!ret)
		ret = read_u64(c, &kv->n, "key", kv->key);
	if (ret)
		return ret;
	if (kv->elem_type == SF_GGUF_ARRAY)
		return sf_err_set(c->e, SF_EUNSUPPORTED, "%s: key '%s': arrays of arrays not supported",
				  c->path, kv->key);
	/* each element at least its size (a string its 8-byte length) */
	uint64_t min = kv->elem_type == SF_GGUF_STRING ? 8 : vtype_size[kv->elem_type];
	if (kv->n > (c->size - c->off) / min)
		return sf_err_set(c->e, SF_EFORMAT,
				  "%s: key '%s': array of %llu %s cannot fit in the %llu bytes left",
				  c->path, kv->key, (unsigned long long)kv->n,
				  vtype_names[kv->elem_type], (unsigned long long)(c->size - c->off));
	kv->val = c->map + c->off;
	if (kv->elem_type != SF_GGUF_STRING) {
		c->off += kv->n * min;
		return 0;
	}
	/* n <= the bytes left / 8: the index is smaller than the file */
	kv->strs = malloc((kv->n ? kv->n : 1) * sizeof(*kv->strs));
	if (!kv->strs)
		return sf_err_set(c->e, -ENOMEM, "%s: key '%s': out of memory", c->path, kv->key);
	for (uint64_t i = 0; i < kv->n; i++) {
		kv->strs[i] = c->map + c->off;
		if ((ret = skip_value(c, SF_GGUF_STRING, kv->key)))
			return ret;
	}
	return 0;
}

static int read_kv(struct cursor *c, struct sf_gguf_kv *kv)
{
	int ret = read_name(c, &kv->key, "key");

	if (!ret)
		ret = read_vtype(c, &kv->type, kv->key);
	if (ret)
		return ret;
	if (kv->type == SF_GGUF_ARRAY)
		return read_array(c, kv);
	kv->n = 1;
	kv->val = c->map + c->off;
	return skip_value(c, kv->type, kv->key);
}

static int cmp_kv(const void *a, const void *b)
{
	return strcmp(((const struct sf_gguf_kv *)a)->key, ((const struct sf_gguf_kv *)b)->key);
}

/* Sorted by key; a key twice refused; general.alignment checked. */
static int check_kvs(struct sf_gguf *g, struct sf_err *e)
{
	const struct sf_gguf_kv *a;

	if (g->nkvs > 1)
		qsort(g->kvs, g->nkvs, sizeof(*g->kvs), cmp_kv);
	for (size_t i = 1; i < g->nkvs; i++)
		if (!strcmp(g->kvs[i - 1].key, g->kvs[i].key))
			return sf_err_set(e, SF_EFORMAT, "%s: key '%s': given twice", g->path,
					  g->kvs[i].key);
	g->alignment = SF_GGUF_DEFAULT_ALIGNMENT;
	a = sf_gguf_find(g, "general.alignment");
	if (!a)
		return 0;
	if (a->type != SF_GGUF_U32)
		return sf_err_set(e, SF_EFORMAT, "%s: key 'general.alignment': %s, expected U32",
				  g->path, vtype_names[a->type]);
	g->alignment = sf_get_le32(a->val);
	if (!g->alignment || g->alignment & (g->alignment - 1))
		return sf_err_set(e, SF_EFORMAT,
				  "%s: key 'general.alignment': %u, expected a power of two", g->path,
				  g->alignment);
	return 0;
}

// --- tensor infos

static int read_tensor_info(struct cursor *c, struct sf_gguf_tensor *t, uint32_t alignment)
{
	uint32_t n_dims, type;
	uint64_t elems = 1, rows = 1, row;
	const char *tname;
	int ret = read_name(c, &t->name, "tensor name");

	if (!ret)
		ret = read_u32(c, &n_dims, "tensor", t->name);
	if (ret)
		return ret;
	if (n_dims > SF_GGUF_MAX_DIMS)
		return sf_err_set(c->e, SF_EFORMAT, "%s: tensor '%s': %u dimensions, at most %d",
				  c->path, t->name, n_dims, SF_GGUF_MAX_DIMS);
	t->n_dims = (int)n_dims;
	for (int d = 0; d < SF_GGUF_MAX_DIMS; d++) {
		t->ne[d] = 1;
		if (d < t->n_dims && (ret = read_u64(c, &t->ne[d], "tensor", t->name)))
			return ret;
		/* ggml holds dims as int64_t */
		if (t->ne[d] > INT64_MAX || __builtin_mul_overflow(elems, t->ne[d], &elems) ||
		    (d && __builtin_mul_overflow(rows, t->ne[d], &rows)))
			return sf_err_set(c->e, SF_EFORMAT,
					  "%s: tensor '%s': dimensions overflow 64 bits at ne[%d] = %llu",
					  c->path, t->name, d, (unsigned long long)t->ne[d]);
	}
	if ((ret = read_u32(c, &type, "tensor", t->name)) ||
	    (ret = read_u64(c, &t->offset, "tensor", t->name)))
		return ret;
	tname = sf_ggml_type_name(type);
	if (!tname)
		return sf_err_set(c->e, SF_EFORMAT, "%s: tensor '%s': tensor type %u unknown",
				  c->path, t->name, type);
	if (!sf_ggml_type_supported(type))
		return sf_err_set(c->e, SF_EUNSUPPORTED, "%s: tensor '%s': %s: tensor type not supported",
				  c->path, t->name, tname);
	t->type = type;
	ret = sf_ggml_row_bytes(type, t->ne[0], &row);
	if (ret == -EINVAL)
		return sf_err_set(c->e, SF_EFORMAT,
				  "%s: tensor '%s': rows of %llu elements are not whole %s blocks of %u",
				  c->path, t->name, (unsigned long long)t->ne[0], tname,
				  sf_ggml_block_elems(type));
	if (ret || __builtin_mul_overflow(row, rows, &t->nbytes))
		return sf_err_set(c->e, SF_EFORMAT, "%s: tensor '%s': byte size overflows 64 bits",
				  c->path, t->name);
	if (t->offset % alignment)
		return sf_err_set(c->e, SF_EFORMAT,
				  "%s: tensor '%s': data offset %llu is not a multiple of the alignment %u",
				  c->path, t->name, (unsigned long long)t->offset, alignment);
	return 0;
}

static int cmp_tensor_name(const void *a, const void *b)
{
	return strcmp(((const struct sf_gguf_tensor *)a)->name,
		      ((const struct sf_gguf_tensor *)b)->name);
}

static int cmp_tensor_offset(const void *a, const void *b)
{
	const struct sf_gguf_tensor *x = *(const struct sf_gguf_tensor *const *)a;
	const struct sf_gguf_tensor *y = *(const struct sf_gguf_tensor *const *)b;

	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Each tensor inside the data section, none overlapping another, no name
 * twice; then the tensors sorted by name. */
static int check_tensors(struct sf_gguf *g, struct sf_err *e)
{
	uint64_t room = g->map_size - g->data_offset;
	const struct sf_gguf_tensor **order;
	const struct sf_gguf_tensor *prev = NULL;
	int ret = 0;

	for (size_t i = 0; i < g->ntensors; i++) {
		struct sf_gguf_tensor *t = &g->tensors[i];

		if (t->offset > room || t->nbytes > room - t->offset)
			return sf_err_set(e, SF_EFORMAT,
					  "%s: tensor '%s': data [%llu, +%llu) runs past the end of the data section (%llu bytes)",
					  g->path, t->name, (unsigned long long)t->offset,
					  (unsigned long long)t->nbytes, (unsigned long long)room);
		t->data = g->map + g->data_offset + t->offset;
	}
	if (g->ntensors < 2)
		return 0;
	order = malloc(g->ntensors * sizeof(*order));
	if (!order)
		return sf_err_set(e, -ENOMEM, "%s: out of memory", g->path);
	for (size_t i = 0; i < g->ntensors; i++)
		order[i] = &g->tensors[i];
	qsort(order, g->ntensors, sizeof(*order), cmp_tensor_offset);
	for (size_t i = 0; i < g->ntensors && !ret; i++) {
		const struct sf_gguf_tensor *t = order[i];

		if (!t->nbytes)
			continue;
		if (prev && t->offset < prev->offset + prev->nbytes)
			ret = sf_err_set(e, SF_EFORMAT,
					 "%s: tensor '%s': data [%llu, %llu) overlaps tensor '%s' [%llu, %llu)",
					 g->path, t->name, (unsigned long long)t->offset,
					 (unsigned long long)(t->offset + t->nbytes), prev->name,
					 (unsigned long long)prev->offset,
					 (unsigned long long)(prev->offset + prev->nbytes));
		prev = t;
	}
	free(order);
	if (ret)
		return ret;
	qsort(g->tensors, g->ntensors, sizeof(*g->tensors), cmp_tensor_name);
	for (size_t i = 1; i < g->ntensors; i++)
		if (!strcmp(g->tensors[i - 1].name, g->tensors[i].name))
			return sf_err_set(e, SF_EFORMAT, "%s: tensor '%s': named twice", g->path,
					  g->tensors[i].name);
	return 0;
}

// --- open and close

/* The header, every key-value pair and tensor info, the data section. */
static int parse(struct sf_gguf *g, struct sf_err *e)
{
	struct cursor c = { g->map, 0, g->map_size, g->path, e };
	uint64_t ntensors, nkvs;
	int ret;

	if (g->map_size < 4 || memcmp(g->map, GGUF_MAGIC, 4))
		return sf_err_set(e, SF_EFORMAT, "%s: not a GGUF file (no 'GGUF' magic)", g->path);
	if (g->map_size < HEADER_BYTES)
		return sf_err_set(e, SF_EFORMAT, "%s: %zu bytes, shorter than the 24-byte header",
				  g->path, g->map_size);
	g->version = sf_get_le32(g->map + 4);
	if (g->version != 2 && g->version != 3)
		return sf_err_set(e, SF_EUNSUPPORTED, "%s: GGUF version %u%s, expected 2 or 3",
				  g->path, g->version,
				  g->version > 0xffffff ? " (a big-endian file?)" : "");
	ntensors = sf_get_le64(g->map + 8);
	nkvs = sf_get_le64(g->map + 16);
	c.off = HEADER_BYTES;
	if (nkvs > (c.size - c.off) / KV_MIN_BYTES)
		return sf_err_set(e, SF_EFORMAT, "%s: %llu key-value pairs cannot fit in the %llu bytes left",
				  g->path, (unsigned long long)nkvs, (unsigned long long)(c.size - c.off));
	if (ntensors > (c.size - c.off) / TENSOR_MIN_BYTES)
		return sf_err_set(e, SF_EFORMAT, "%s: %llu tensor infos cannot fit in the %llu bytes left",
				  g->path, (unsigned long long)ntensors,
				  (unsigned long long)(c.size - c.off));
	if (nkvs > KVS_MAX)
		return sf_err_set(e, SF_ELIMIT, "%s: %llu key-value pairs, limit %u", g->path,
				  (unsigned long long)nkvs, KVS_MAX);
	if (ntensors > TENSORS_MAX)
		return sf_err_set(e, SF_ELIMIT, "%s: %llu tensors, limit %u", g->path,
				  (unsigned long long)ntensors, TENSORS_MAX);
	g->kvs = calloc(nkvs ? nkvs : 1, sizeof(*g->kvs));
	g->tensors = calloc(ntensors ? ntensors : 1, sizeof(*g->tensors));
	if (!g->kvs || !g->tensors)
		return sf_err_set(e, -ENOMEM, "%s: out of memory", g->path);
	/* a pair or info read in part is counted, so that close frees it */
	while (g->nkvs < nkvs)
		if ((ret = read_kv(&c, &g->kvs[g->nkvs++])))
			return ret;
	if ((ret = check_kvs(g, e)))
		return ret;
	while (g->ntensors < ntensors)
		if ((ret = read_tensor_info(&c, &g->tensors[g->ntensors++], g->alignment)))
			return ret;
	/* the data section starts at the next multiple of the alignment
	 * (c.off <= the file size, so this cannot wrap) */
	g->data_offset = (c.off + g->alignment - 1) / g->alignment * g->alignment;
	if (g->data_offset > c.size) {
		if (ntensors)
			return sf_err_set(e, SF_EFORMAT,
					  "%s: data section at offset %llu, past the end of the file (%llu bytes)",
					  g->path, (unsigned long long)g->data_offset,
					  (unsigned long long)c.size);
		g->data_offset = c.size;
	}
	return check_tensors(g, e);
}

int sf_gguf_open(struct sf_gguf *g, const char *path, struct sf_err *e)
{
	struct stat sb;
	void *map;
	int fd, ret;

	memset(g, 0, sizeof(*g));
	g->path = strdup(path);
	if (!g->path)
		return sf_err_set(e, -ENOMEM, "%s: out of memory", path);
	if ((fd = sf_file_open_regular(path, 0, &sb, e)) < 0) {
		ret = fd;
		goto out;
	}
	if ((uint64_t)sb.st_size > SIZE_MAX) {
		ret = sf_err_set(e, SF_ELIMIT, "%s: file is %llu bytes, too large to map", path,
				 (unsigned long long)sb.st_size);
		goto out;
	}
	if (!sb.st_size) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: not a GGUF file (empty)", path);
		goto out;
	}
	map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		ret = sf_err_set(e, -errno, "%s: cannot map: %s", path, strerror(errno));
		goto out;
	}
	g->map = map;
	g->map_size = (size_t)sb.st_size;
	/* a hint: the row products walk several rows' pages at once (-m
	 * Q4_0.gguf, 427-token prompt: 90 -> 107 tok/s with the file mapped
	 * by 2 MiB pages) */
	(void)madvise(map, g->map_size, MADV_HUGEPAGE);
	/* so that a truncation under us is named, not a silent SIGBUS */
	if ((ret = sf_guard_map(map, g->map_size, g->path, e))) {
		munmap(map, g->map_size);
		g->map = NULL;
		goto out;
	}
	ret = parse(g, e);
out:
	if (fd >= 0)
		close(fd);
	if (ret)
		sf_gguf_close(g);
	return ret;
}

int sf_gguf_probe(const char *path)
{
	char magic[4];
	FILE *f = fopen(path, "rb");
	int yes = f && fread(magic, 1, sizeof(magic), f) == sizeof(magic) &&
		  !memcmp(magic, "GGUF", sizeof(magic));

	if (f)
		fclose(f);
	return yes;
}

void sf_gguf_close(struct sf_gguf *g)
{
	if (!g)
		return;
	if (g->map) {
		sf_guard_unmap(g->map);
		munmap((void *)g->map, g->map_size);
	}
	for (size_t i = 0; g->kvs && i < g->nkvs; i++) {
		free(g->kvs[i].key);
		free(g->kvs[i].strs);
	}
	for (size_t i = 0; g->tensors && i < g->ntensors; i++)
		free(g->tensors[i].name);
	free(g->kvs);
	free(g->tensors);
	free(g->path);
	memset(g, 0, sizeof(*g));
}

// --- lookups and typed getters

/* bsearch's comparisons of a name with a pair's key or a tensor's name */
static int cmp_key(const void *key, const void *kv)
{
	return strcmp(key, ((const struct sf_gguf_kv *)kv)->key);
}

static int cmp_name(const void *name, const void *t)
{
	return strcmp(name, ((const struct sf_gguf_tensor *)t)->name);
}

const struct sf_gguf_kv *sf_gguf_find(const struct sf_gguf *g, const char *key)
{
	return g->nkvs ? bsearch(key, g->kvs, g->nkvs, sizeof(*g->kvs), cmp_key) : NULL;
}

const struct sf_gguf_tensor *sf_gguf_tensor(const struct sf_gguf *g, const char *name)
{
	return g->ntensors ? bsearch(name, g->tensors, g->ntensors, sizeof(*g->tensors), cmp_name)
			   : NULL;
}

/* The pair for key, or -ENOENT with "PATH: key 'K': missing". */
static int lookup(const struct sf_gguf *g, const char *key, const struct sf_gguf_kv **kv,
		  struct sf_err *e)
{
	*kv = sf_gguf_find(g, key);
	if (!*kv)
		return sf_err_set(e, -ENOENT, "%s: key '%s': missing", g->path, key);
	return 0;
}

static int wrong_type(const struct sf_gguf *g, const struct sf_gguf_kv *kv, const char *expected,
		      struct sf_err *e)
{
	return sf_err_set(e, SF_EFORMAT, "%s: key '%s': %s%s%s, expected %s", g->path, kv->key,
			  vtype_names[kv->type], kv->type == SF_GGUF_ARRAY ? " of " : "",
			  kv->type == SF_GGUF_ARRAY ? vtype_names[kv->elem_type] : "", expected);
}

/* An integer value of any width, as signed (-1 when it cannot be: a U64
 * past INT64_MAX, or not an integer). */
static int int_value(const struct sf_gguf_kv *kv, int64_t *v)
{
	const unsigned char *p = kv->val;

	switch (kv->type) {
	case SF_GGUF_U8: *v = p[0]; return 0;
	case SF_GGUF_I8: *v = (int8_t)p[0]; return 0;
	case SF_GGUF_U16: *v = sf_get_le16(p); return 0;
	case SF_GGUF_I16: *v = (int16_t)sf_get_le16(p); return 0;
	case SF_GGUF_U32: *v = sf_get_le32(p); return 0;
	case SF_GGUF_I32: *v = (int32_t)sf_get_le32(p); return 0;
	case SF_GGUF_I64: *v = (int64_t)sf_get_le64(p); return 0;
	case SF_GGUF_U64:
		if (sf_get_le64(p) > INT64_MAX)
			return -1;
		*v = (int64_t)sf_get_le64(p);
		return 0;
	default:
		return -1;
	}
}

static int get_int(const struct sf_gguf *g, const char *key, int64_t lo, int64_t hi,
		   const char *expected, int64_t *out, struct sf_err *e)
{
	const struct sf_gguf_kv *kv;
	int ret = lookup(g, key, &kv, e);

	if (ret)
		return ret;
	if (int_value(kv, out))
		return wrong_type(g, kv, expected, e);
	if (*out < lo || *out > hi)
		return sf_err_set(e, SF_EFORMAT, "%s: key '%s': %lld, expected %s", g->path, key,
				  (long long)*out, expected);
	return 0;
}

int sf_gguf_get_u32(const struct sf_gguf *g, const char *key, uint32_t *out, struct sf_err *e)
{
	int64_t v;
	int ret = get_int(g, key, 0, UINT32_MAX, "an integer in 0..4294967295", &v, e);

	if (!ret)
		*out = (uint32_t)v;
	return ret;
}

int sf_gguf_get_i32(const struct sf_gguf *g, const char *key, int32_t *out, struct sf_err *e)
{
	int64_t v;
	int ret = get_int(g, key, INT32_MIN, INT32_MAX,
			  "an integer in -2147483648..2147483647", &v, e);

	if (!ret)
		*out = (int32_t)v;
	return ret;
}

int sf_gguf_get_f32(const struct sf_gguf *g, const char *key, float *out, struct sf_err *e)
{
	const struct sf_gguf_kv *kv;
	int ret = lookup(g, key, &kv, e);
	uint32_t u;

	if (ret)
		return ret;
	if (kv->type == SF_GGUF_F32) {
		u = sf_get_le32(kv->val);
		memcpy(out, &u, 4);
	} else if (kv->type == SF_GGUF_F64) {
		*out = (float)sf_get_f64(kv->val);
	} else {
		return wrong_type(g, kv, "F32", e);
	}
	if (!isfinite(*out))
		return sf_err_set(e, SF_EFORMAT, "%s: key '%s': not a finite number", g->path, key);
	return 0;
}

/* The pair for key, which must hold a value of type. */
static int lookup_as(const struct sf_gguf *g, const char *key, enum sf_gguf_vtype type,
		     const struct sf_gguf_kv **kv, struct sf_err *e)
{
	int ret = lookup(g, key, kv, e);

	if (!ret && (*kv)->type != type)
		ret = wrong_type(g, *kv, vtype_names[type], e);
	return ret;
}

int sf_gguf_get_bool(const struct sf_gguf *g, const char *key, int *out, struct sf_err *e)
{
	const struct sf_gguf_kv *kv;
	int ret = lookup_as(g, key, SF_GGUF_BOOL, &kv, e);

	if (ret)
		return ret;
	if (kv->val[0] > 1)
		return sf_err_set(e, SF_EFORMAT, "%s: key '%s': BOOL byte %u, expected 0 or 1",
				  g->path, key, kv->val[0]);
	*out = kv->val[0];
	return 0;
}

int sf_gguf_get_str(const struct sf_gguf *g, const char *key, const char **s, uint64_t *len,
		    struct sf_err *e)
{
	const struct sf_gguf_kv *kv;
	int ret = lookup_as(g, key, SF_GGUF_STRING, &kv, e);

	if (ret)
		return ret;
	*len = sf_get_le64(kv->val);
	*s = (const char *)kv->val + 8;
	return 0;
}

int sf_gguf_get_arr(const struct sf_gguf *g, const char *key, enum sf_gguf_vtype elem_type,
		    const struct sf_gguf_kv **kv, struct sf_err *e)
{
	int ret = lookup(g, key, kv, e);
	char expected[32];

	if (ret)
		return ret;
	if ((*kv)->type != SF_GGUF_ARRAY || (*kv)->elem_type != elem_type) {
		snprintf(expected, sizeof(expected), "ARRAY of %s", sf_gguf_vtype_name(elem_type));
		return wrong_type(g, *kv, expected, e);
	}
	return 0;
}

int32_t sf_gguf_arr_i32(const struct sf_gguf_kv *kv, uint64_t i)
{
	return (int32_t)sf_get_le32(kv->val + 4 * i);
}

uint32_t sf_gguf_arr_u32(const struct sf_gguf_kv *kv, uint64_t i)
{
	return sf_get_le32(kv->val + 4 * i);
}

float sf_gguf_arr_f32(const struct sf_gguf_kv *kv, uint64_t i)
{
	uint32_t u = sf_get_le32(kv->val + 4 * i);
	float f;

	memcpy(&f, &u, 4);
	return f;
}

const char *sf_gguf_arr_str(const struct sf_gguf_kv *kv, uint64_t i, uint64_t *len)
{
	*len = sf_get_le64(kv->strs[i]);
	return (const char *)kv->strs[i] + 8;
}
