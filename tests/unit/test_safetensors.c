/* Unit test of lib/common/formats/safetensors.c: the writer and reader round-trip
 * every dtype (whole buffers and fill callbacks), shards open through an
 * index, and every malformed input, built byte by byte in $SF_TMP, is
 * refused with the right code and a message naming the file and fault. */
#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "unit.h"

static char tmpdir[4096];

static char *path_of(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/%s", tmpdir, name);
	return buf;
}

static int write_bytes(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	int ok;

	if (!f)
		return -1;
	ok = fwrite(p, 1, n, f) == n;
	return fclose(f) == 0 && ok ? 0 : -1;
}

/* A safetensors file from parts: the 8-byte length (hlen, or the header's
 * own length when hlen is UINT64_MAX), the header text, then ndata bytes
 * of 0xab. */
static void write_st(const char *path, uint64_t hlen, const char *header, size_t ndata)
{
	size_t h = strlen(header), n = 8 + h + ndata;
	unsigned char *b = malloc(n);

	if (hlen == UINT64_MAX)
		hlen = h;
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(hlen >> (8 * i));
	memcpy(b + 8, header, h);
	memset(b + 8 + h, 0xab, ndata);
	CHECK(write_bytes(path, b, n) == 0, "cannot write %s", path);
	free(b);
}

/* Checks that ret is code and the message holds path and each of the
 * NULL-terminated substrings. */
static void check_err_at(int line, int ret, int code, const struct sf_err *e, const char *path,
			 ...)
{
	va_list ap;
	const char *s;

	if (getenv("UNIT_VERBOSE"))
		fprintf(stderr, "line %d: %s\n", line, e->msg);
	CHECK(ret == code, "line %d: returned %d, expected %d (%s)", line, ret, code, e->msg);
	CHECK(!path || strstr(e->msg, path), "line %d: message '%s' does not name %s", line, e->msg,
	      path);
	CHECK(!strchr(e->msg, '\n'), "line %d: message '%s' is not one line", line, e->msg);
	va_start(ap, path);
	while ((s = va_arg(ap, const char *)))
		CHECK(strstr(e->msg, s), "line %d: message '%s' lacks '%s'", line, e->msg, s);
	va_end(ap);
}
#define CHECK_ERR(ret, code, e, path, ...) check_err_at(__LINE__, ret, code, e, path, __VA_ARGS__, NULL)

/* Opens a one-file safetensors that must be refused. */
static void bad_file(int line, const char *name, uint64_t hlen, const char *header, size_t ndata,
		     int code, const char *want1, const char *want2)
{
	char path[4200];
	struct sf_safetensors st;
	struct sf_err e = { 0 };
	int ret;

	path_of(path, sizeof(path), name);
	write_st(path, hlen, header, ndata);
	ret = sf_safetensors_open_file(&st, path, &e);
	check_err_at(line, ret, code, &e, path, want1, want2, NULL);
	CHECK(st.ntensors == 0 && st.nfiles == 0, "line %d: st not cleared on failure", line);
	sf_safetensors_close(&st);
}
#define BAD(name, hlen, header, ndata, code, w1, w2) \
	bad_file(__LINE__, name, hlen, header, ndata, code, w1, w2)

// --- round trip

/* fill callback: byte k of the tensor is (k * 7 + seed) mod 251. */
static int pattern_fill(void *arg, const struct sf_tensor_out *t, void *buf, uint64_t off,
			size_t len)
{
	unsigned char *p = buf;
	unsigned seed = *(unsigned *)arg;

	(void)t;
	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)(((off + i) * 7 + seed) % 251);
	return 0;
}

static int failing_fill(void *arg, const struct sf_tensor_out *t, void *buf, uint64_t off,
			size_t len)
{
	(void)arg, (void)t, (void)buf, (void)len;
	return off ? -EIO : 0;	/* fails on the second chunk */
}

static int dir_has_tmp(void)
{
	DIR *d = opendir(tmpdir);
	struct dirent *de;
	int found = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (strstr(de->d_name, ".tmp."))
			found = 1;
	closedir(d);
	return found;
}

static void test_round_trip(void)
{
	float f32[6] = { 1, -2, 3.5f, 0, 1e-3f, -1e30f };
	uint16_t f16[5] = { 0x3c00, 0xbc00, 0x0001, 0x7bff, 0 };
	uint16_t bf16[6] = { 0x3f80, 0xbf80, 0x4049, 0x0000, 0x8000, 0x7f7f };
	float scalar = 42;
	unsigned seed = 3;
	uint64_t big = 3u << 20;	/* three fill chunks and a bit */
	struct sf_tensor_out out[] = {
		{ .name = "z.f32", .dtype = SF_DTYPE_F32, .ndim = 2, .shape = { 2, 3 }, .data = f32 },
		{ .name = "a.f16", .dtype = SF_DTYPE_F16, .ndim = 1, .shape = { 5 }, .data = f16 },
		{ .name = "m.bf16", .dtype = SF_DTYPE_BF16, .ndim = 3, .shape = { 3, 1, 2 }, .data = bf16 },
		{ .name = "scalar", .dtype = SF_DTYPE_F32, .ndim = 0, .data = &scalar },
		{ .name = "empty", .dtype = SF_DTYPE_BF16, .ndim = 2, .shape = { 0, 4 } },
		{ .name = "big.filled", .dtype = SF_DTYPE_BF16, .ndim = 2, .shape = { 3, big / 2 / 3 + 5 },
		  .fill = pattern_fill, .arg = &seed },
	};
	size_t n = sizeof(out) / sizeof(out[0]);
	char path[4200];
	struct sf_safetensors st;
	struct sf_err e = { 0 };
	const struct sf_tensor *t;
	int ret;

	path_of(path, sizeof(path), "rt.safetensors");
	ret = sf_safetensors_write(path, out, n, &e);
	CHECK(ret == 0, "write: %d %s", ret, e.msg);
	CHECK(!dir_has_tmp(), "temporary file left behind");

	/* The header length is a multiple of 8 and the keys are sorted. */
	{
		FILE *f = fopen(path, "rb");
		unsigned char b[8];
		uint64_t hlen = 0;
		char *h;

		CHECK(f && fread(b, 1, 8, f) == 8, "cannot read back %s", path);
		for (int i = 7; i >= 0; i--)
			hlen = hlen << 8 | b[i];
		CHECK(hlen % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)hlen);
		h = calloc(1, hlen + 1);
		CHECK(fread(h, 1, hlen, f) == hlen, "short header");
		CHECK(h[0] == '{' && strstr(h, "\"__metadata__\":{\"format\":\"pt\"}"), "header %s", h);
		CHECK(strstr(h, "\"a.f16\"") < strstr(h, "\"big.filled\"") &&
		      strstr(h, "\"scalar\"") < strstr(h, "\"z.f32\""), "keys not sorted: %s", h);
		free(h);
		fclose(f);
	}

	ret = sf_safetensors_open_file(&st, path, &e);
	CHECK(ret == 0, "open: %d %s", ret, e.msg);
	if (ret)
		return;
	CHECK(st.ntensors == n && st.nfiles == 1, "%zu tensors in %zu files", st.ntensors, st.nfiles);
	for (size_t i = 1; i < st.ntensors; i++)
		CHECK(strcmp(st.tensors[i - 1].name, st.tensors[i].name) < 0, "not sorted at %zu", i);

	t = sf_safetensors_find(&st, "z.f32");
	CHECK(t && t->dtype == SF_DTYPE_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
	      t->nbytes == sizeof(f32) && !memcmp(t->data, f32, sizeof(f32)), "z.f32 wrong");
	t = sf_safetensors_find(&st, "a.f16");
	CHECK(t && t->dtype == SF_DTYPE_F16 && t->ndim == 1 && t->shape[0] == 5 &&
	      t->nbytes == sizeof(f16) && !memcmp(t->data, f16, sizeof(f16)), "a.f16 wrong");
	t = sf_safetensors_find(&st, "m.bf16");
	CHECK(t && t->dtype == SF_DTYPE_BF16 && t->ndim == 3 && t->shape[2] == 2 &&
	      t->nbytes == sizeof(bf16) && !memcmp(t->data, bf16, sizeof(bf16)), "m.bf16 wrong");
	t = sf_safetensors_find(&st, "scalar");
	CHECK(t && t->ndim == 0 && t->nbytes == 4 && !memcmp(t->data, &scalar, 4), "scalar wrong");
	t = sf_safetensors_find(&st, "empty");
	CHECK(t && t->ndim == 2 && t->shape[0] == 0 && t->nbytes == 0, "empty wrong");
	t = sf_safetensors_find(&st, "big.filled");
	CHECK(t && t->nbytes == 2 * 3 * (big / 2 / 3 + 5), "big.filled size");
	if (t) {
		const unsigned char *p = t->data;
		uint64_t bad = 0;

		for (uint64_t k = 0; k < t->nbytes; k++)
			bad += p[k] != (unsigned char)((k * 7 + seed) % 251);
		CHECK(bad == 0, "big.filled: %llu bytes differ", (unsigned long long)bad);
	}
	CHECK(!sf_safetensors_find(&st, "absent") && !sf_safetensors_find(&st, "") &&
	      !sf_safetensors_find(&st, "zz"), "found an absent tensor");
	CHECK(!strcmp(sf_safetensors_source(&st), path), "source %s", sf_safetensors_source(&st));
	sf_safetensors_close(&st);
	sf_safetensors_close(&st);	/* twice is harmless */

	CHECK(sf_dtype_size(SF_DTYPE_BF16) == 2 && sf_dtype_size(SF_DTYPE_F32) == 4, "dtype sizes");
	{
		enum sf_dtype d;
		CHECK(sf_dtype_parse("F16", &d) == 0 && d == SF_DTYPE_F16, "parse F16");
		CHECK(sf_dtype_parse("I64", &d) == -1, "parse I64");
	}
}

static void test_writer_errors(void)
{
	float x[2] = { 1, 2 };
	struct sf_tensor_out dup[] = {
		{ .name = "a", .dtype = SF_DTYPE_F32, .ndim = 1, .shape = { 2 }, .data = x },
		{ .name = "a", .dtype = SF_DTYPE_F32, .ndim = 1, .shape = { 2 }, .data = x },
	};
	struct sf_tensor_out fails[] = {
		{ .name = "f", .dtype = SF_DTYPE_F32, .ndim = 1, .shape = { 1u << 20 },
		  .fill = failing_fill },
	};
	struct sf_tensor_out nodata[] = {
		{ .name = "n", .dtype = SF_DTYPE_F32, .ndim = 1, .shape = { 2 } },
	};
	struct sf_err e = { 0 };
	char path[4200], nodir[4200];
	int ret;

	path_of(path, sizeof(path), "w.safetensors");
	path_of(nodir, sizeof(nodir), "no/such/dir/w.safetensors");
	ret = sf_safetensors_write(nodir, dup, 1, &e);
	CHECK_ERR(ret, -ENOENT, &e, nodir, "cannot create");
	ret = sf_safetensors_write(path, dup, 2, &e);
	CHECK_ERR(ret, -EINVAL, &e, path, "tensor 'a' given twice");
	ret = sf_safetensors_write(path, nodata, 1, &e);
	CHECK_ERR(ret, -EINVAL, &e, path, "neither data nor fill");
	ret = sf_safetensors_write(path, fails, 1, &e);
	CHECK_ERR(ret, -EIO, &e, path, "tensor 'f'");
	CHECK(access(path, F_OK) != 0, "%s exists after a failed write", path);
	CHECK(!dir_has_tmp(), "temporary file left behind after a failed write");
}

// --- malformed single files

static void test_bad_files(void)
{
	char path[4200], name[400];
	struct sf_safetensors st;
	struct sf_err e = { 0 };
	int ret;

	/* Shorter than the length field. */
	path_of(path, sizeof(path), "short.safetensors");
	CHECK(write_bytes(path, "\x10\0\0\0\0", 5) == 0, "write");
	ret = sf_safetensors_open_file(&st, path, &e);
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "file is 5 bytes", "too short");
	path_of(path, sizeof(path), "empty.safetensors");
	CHECK(write_bytes(path, "", 0) == 0, "write");
	ret = sf_safetensors_open_file(&st, path, &e);
	CHECK_ERR(ret, SF_EFORMAT, &e, path, "file is 0 bytes");

	path_of(path, sizeof(path), "absent.safetensors");
	ret = sf_safetensors_open_file(&st, path, &e);
	CHECK_ERR(ret, -ENOENT, &e, path, "cannot open");

	/* Header length past the end; header cut short by truncation. */
	BAD("hlen.safetensors", 100, "{}", 40, SF_EFORMAT, "header of 100 bytes",
	    "past the end of the file (50 bytes, room for 42)");
	BAD("cut.safetensors", 64, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],", 0, SF_EFORMAT,
	    "past the end of the file", NULL);
	/* Length whose + 8 would wrap around 64 bits. */
	BAD("wrap.safetensors", UINT64_MAX - 3, "{}", 0, SF_EFORMAT, "past the end", NULL);

	/* Header longer than the 100 MiB limit, in a sparse file. */
	{
		int fd;
		unsigned char b[8];
		uint64_t h = (100u << 20) + 8;

		path_of(path, sizeof(path), "huge.safetensors");
		fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
		for (int i = 0; i < 8; i++)
			b[i] = (unsigned char)(h >> (8 * i));
		CHECK(fd >= 0 && write(fd, b, 8) == 8 && ftruncate(fd, (off_t)(8 + h)) == 0,
		      "cannot make %s", path);
		close(fd);
		ret = sf_safetensors_open_file(&st, path, &e);
		CHECK_ERR(ret, SF_ELIMIT, &e, path, "header of 104857608 bytes", "limit 104857600");
		unlink(path);
	}

	BAD("notjson.safetensors", UINT64_MAX, "{not json}      ", 0, SF_EFORMAT,
	    "header is not valid JSON", NULL);
	BAD("trunc-json.safetensors", UINT64_MAX, "{\"a\":{\"dtype\":", 0, SF_EFORMAT,
	    "header is not valid JSON", NULL);
	BAD("array.safetensors", UINT64_MAX, "[1, 2, 3]", 0, SF_EFORMAT,
	    "header is not a JSON object", NULL);
	BAD("meta.safetensors", UINT64_MAX, "{\"__metadata__\": 3}", 0, SF_EFORMAT,
	    "'__metadata__' is not a JSON object", NULL);
	BAD("entry.safetensors", UINT64_MAX, "{\"w\": [1]}", 0, SF_EFORMAT,
	    "tensor 'w': entry is not a JSON object", NULL);
	BAD("nodtype.safetensors", UINT64_MAX, "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
	    SF_EFORMAT, "tensor 'w'", "'dtype' missing");

	/* Data range past the end of the buffer. */
	BAD("past.safetensors", UINT64_MAX,
	    "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, SF_EFORMAT,
	    "tensor 'w': data ends at byte 16", "past its end (8 bytes)");
	/* Overlapping ranges. */
	BAD("overlap.safetensors", UINT64_MAX,
	    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
	    "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, SF_EFORMAT,
	    "tensor 'b': data [4, 12] overlaps tensor 'a' [0, 8]", NULL);
	BAD("same.safetensors", UINT64_MAX,
	    "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
	    "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]}}", 8, SF_EFORMAT,
	    "overlaps", NULL);
	/* Dtypes: one safetensors has but we refuse by name, and nonsense. */
	BAD("i64.safetensors", UINT64_MAX,
	    "{\"w\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, SF_EUNSUPPORTED,
	    "tensor 'w': dtype 'I64' unsupported", NULL);
	BAD("q7.safetensors", UINT64_MAX,
	    "{\"w\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, SF_EFORMAT,
	    "tensor 'w': dtype 'Q7' unknown", NULL);
	/* Shape times element size against the range. */
	BAD("size.safetensors", UINT64_MAX,
	    "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, SF_EFORMAT,
	    "tensor 'w': data_offsets [0, 8] hold 8 bytes", "shape [3] of F32 needs 12");
	BAD("overflow.safetensors", UINT64_MAX,
	    "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
	    SF_EFORMAT, "tensor 'w': shape [4294967296, 4294967296] overflows", NULL);
	BAD("overflow2.safetensors", UINT64_MAX,
	    "{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}}", 8,
	    SF_EFORMAT, "tensor 'w': shape [4611686018427387904] of F32 overflows", NULL);
	BAD("reversed.safetensors", UINT64_MAX,
	    "{\"w\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8, SF_EFORMAT,
	    "tensor 'w': data_offsets [8, 0] begin after end", NULL);
	BAD("negdim.safetensors", UINT64_MAX,
	    "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-1],\"data_offsets\":[0,8]}}", 8, SF_EFORMAT,
	    "tensor 'w': shape[1] is not a non-negative integer", NULL);
	BAD("realdim.safetensors", UINT64_MAX,
	    "{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, SF_EFORMAT,
	    "tensor 'w': shape[0] is not a non-negative integer", NULL);
	BAD("ndim.safetensors", UINT64_MAX,
	    "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
	    SF_ELIMIT, "tensor 'w': 9 dimensions, at most 8", NULL);
	BAD("offsets.safetensors", UINT64_MAX,
	    "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, SF_EFORMAT,
	    "tensor 'w': 'data_offsets' malformed", NULL);
	/* Duplicate names (the JSON loader's own check). */
	BAD("dup.safetensors", UINT64_MAX,
	    "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
	    "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, SF_EFORMAT,
	    "tensor 'w': named twice", NULL);
	/* Names: too long, or with a control character. */
	{
		char hdr[1024];

		memset(name, 'n', 300);
		name[300] = 0;
		snprintf(hdr, sizeof(hdr),
			 "{\"%s\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", name);
		BAD("longname.safetensors", UINT64_MAX, hdr, 4, SF_ELIMIT,
		    "name of 300 bytes, limit 255", NULL);
	}
	BAD("ctrl.safetensors", UINT64_MAX,
	    "{\"a\\nb\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, SF_EFORMAT,
	    "control characters", NULL);

	/* Accepted: trailing padding spaces, a gap between tensors, metadata. */
	path_of(path, sizeof(path), "ok.safetensors");
	write_st(path, UINT64_MAX,
		 "{\"__metadata__\":{\"format\":\"pt\"},"
		 "\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[8,12]},"
		 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}     ", 12);
	ret = sf_safetensors_open_file(&st, path, &e);
	CHECK(ret == 0 && st.ntensors == 2 && !strcmp(st.tensors[0].name, "a"),
	      "ok.safetensors: %d %s", ret, e.msg);
	sf_safetensors_close(&st);
}

// --- shards

static void write_index(const char *dir, const char *json)
{
	char path[4200];

	snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
	CHECK(write_bytes(path, json, strlen(json)) == 0, "cannot write %s", path);
}

static void make_shard(const char *dir, const char *file, const char *n1, const char *n2,
		       const float *data)
{
	struct sf_tensor_out t[2] = {
		{ .name = n1, .dtype = SF_DTYPE_F32, .ndim = 1, .shape = { 2 }, .data = data },
		{ .name = n2, .dtype = SF_DTYPE_BF16, .ndim = 2, .shape = { 2, 2 }, .data = data },
	};
	struct sf_err e = { 0 };
	char path[4200];
	int ret;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	ret = sf_safetensors_write(path, t, n2 ? 2 : 1, &e);
	CHECK(ret == 0, "write %s: %s", path, e.msg);
}

static void test_shards(void)
{
	float d1[2] = { 1, 2 }, d2[2] = { 3, 4 };
	char dir[4200], ipath[4300], want[4300];
	struct sf_safetensors st;
	struct sf_err e = { 0 };
	const struct sf_tensor *t;
	int ret;

	path_of(dir, sizeof(dir), "shards");
	mkdir(dir, 0755);
	snprintf(ipath, sizeof(ipath), "%s/model.safetensors.index.json", dir);
	make_shard(dir, "s1.safetensors", "x", "y", d1);
	make_shard(dir, "s2.safetensors", "z", NULL, d2);
	make_shard(dir, "s3.safetensors", "y", "w", d2);	/* y again */

	write_index(dir, "{\"metadata\":{\"total_size\":24},\"weight_map\":"
			 "{\"x\":\"s1.safetensors\",\"z\":\"s2.safetensors\",\"y\":\"s1.safetensors\"}}");
	ret = sf_safetensors_open(&st, dir, &e);
	CHECK(ret == 0, "open shards: %d %s", ret, e.msg);
	if (!ret) {
		CHECK(st.nfiles == 2 && st.ntensors == 3, "%zu files, %zu tensors", st.nfiles, st.ntensors);
		t = sf_safetensors_find(&st, "z");
		CHECK(t && strstr(st.paths[t->file], "s2.safetensors") && !memcmp(t->data, d2, 8),
		      "z not from s2");
		t = sf_safetensors_find(&st, "y");
		CHECK(t && strstr(st.paths[t->file], "s1.safetensors") && t->dtype == SF_DTYPE_BF16,
		      "y not from s1");
		CHECK(!strcmp(sf_safetensors_source(&st), ipath), "source %s",
		      sf_safetensors_source(&st));
		sf_safetensors_close(&st);
	}

	/* A shard that does not exist. */
	write_index(dir, "{\"weight_map\":{\"x\":\"s1.safetensors\",\"q\":\"gone.safetensors\"}}");
	ret = sf_safetensors_open(&st, dir, &e);
	snprintf(want, sizeof(want), "%s/gone.safetensors", dir);
	CHECK_ERR(ret, -ENOENT, &e, ipath, want, "tensor 'q'", "No such file");
	/* A tensor not in the shard the index names. */
	write_index(dir, "{\"weight_map\":{\"x\":\"s1.safetensors\",\"y\":\"s1.safetensors\","
			 "\"z\":\"s1.safetensors\"}}");
	ret = sf_safetensors_open(&st, dir, &e);
	CHECK_ERR(ret, SF_EMISMATCH, &e, ipath, "tensor 'z': listed in", "s1.safetensors, but not there");
	/* Listed in one shard, found in another that is also open. */
	write_index(dir, "{\"weight_map\":{\"x\":\"s1.safetensors\",\"y\":\"s1.safetensors\","
			 "\"z\":\"s1.safetensors\",\"q\":\"s2.safetensors\"}}");
	ret = sf_safetensors_open(&st, dir, &e);
	CHECK_ERR(ret, SF_EMISMATCH, &e, ipath, "tensor 'z'", "but not there");
	/* A tensor in two shards. */
	write_index(dir, "{\"weight_map\":{\"x\":\"s1.safetensors\",\"y\":\"s1.safetensors\","
			 "\"w\":\"s3.safetensors\"}}");
	ret = sf_safetensors_open(&st, dir, &e);
	CHECK_ERR(ret, SF_EFORMAT, &e, "s3.safetensors", "tensor 'y': also in", "s1.safetensors");
	/* A shard holding a tensor the index does not list. */
	write_index(dir, "{\"weight_map\":{\"x\":\"s1.safetensors\",\"z\":\"s2.safetensors\"}}");
	ret = sf_safetensors_open(&st, dir, &e);
	CHECK_ERR(ret, SF_EMISMATCH, &e, ipath, "tensor 'y': in", "not listed in the index");
	/* Malformed indexes. */
	write_index(dir, "{\"weight_map\":{\"x\":\"../s1.safetensors\"}}");
	ret = sf_safetensors_open(&st, dir, &e);
	CHECK_ERR(ret, SF_EFORMAT, &e, ipath, "'../s1.safetensors' is not a plain file name");
	write_index(dir, "{\"metadata\":{}}");
	ret = sf_safetensors_open(&st, dir, &e);
	CHECK_ERR(ret, SF_EFORMAT, &e, ipath, "'weight_map' missing");
	write_index(dir, "{\"weight_map\":{\"x\":1}}");
	ret = sf_safetensors_open(&st, dir, &e);
	CHECK_ERR(ret, SF_EFORMAT, &e, ipath, "weight_map['x'] is not a string");
	write_index(dir, "{\"weight_map\":");
	ret = sf_safetensors_open(&st, dir, &e);
	CHECK_ERR(ret, SF_EFORMAT, &e, ipath, "not valid JSON");
	CHECK(st.nfiles == 0 && st.ntensors == 0, "st not cleared");
	sf_safetensors_close(&st);

	/* No index and no model.safetensors. */
	unlink(ipath);
	ret = sf_safetensors_open(&st, dir, &e);
	snprintf(want, sizeof(want), "%s/model.safetensors", dir);
	CHECK_ERR(ret, -ENOENT, &e, want, "cannot open");
}

int main(void)
{
	const char *base = unit_env("SF_TMP", "/tmp");

	snprintf(tmpdir, sizeof(tmpdir), "%s/test_safetensors.%d", base, (int)getpid());
	if (mkdir(tmpdir, 0755) && errno != EEXIST) {
		fprintf(stderr, "cannot create %s: %s\n", tmpdir, strerror(errno));
		return 1;
	}
	test_round_trip();
	test_writer_errors();
	test_bad_files();
	test_shards();
	return unit_exit();
}
