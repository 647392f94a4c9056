/* Hugging Face safetensors: one file or shards listed in
 * model.safetensors.index.json, memory-mapped, header validated before any
 * tensor is used (see man/sf-formats.5 for what is checked). Also the writer
 * used by tests/fixtures/mkmodel. */
#ifndef SF_SAFETENSORS_H
#define SF_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/vocab.h"

#define SF_TENSOR_MAX_DIMS 8
#define SF_TENSOR_NAME_MAX 256

struct sf_tensor {
	char name[SF_TENSOR_NAME_MAX];
	enum sf_dtype dtype;
	enum sf_dtype source_dtype;	/* the model's, which the shape fingerprint
					 * names: dtype, but for an image's
					 * quantized embedding and head */
	int ndim;
	uint64_t shape[SF_TENSOR_MAX_DIMS];
	uint64_t nbytes;
	const void *data;	/* inside the mapping of its file; safetensors
				 * packs tensors without padding, so data is
				 * not always aligned to its element size */
	int file;		/* index into the shard list */
};

struct sf_safetensors {
	size_t nfiles;
	void **maps;		/* (nfiles) */
	size_t *map_sizes;	/* (nfiles) */
	char **paths;		/* (nfiles) for messages */
	struct sf_tensor *tensors;	/* (ntensors), sorted by name */
	size_t ntensors;
	char *index_path;	/* model.safetensors.index.json when sharded, else NULL */
};

/* Opens DIR/model.safetensors, or the shards named by
 * DIR/model.safetensors.index.json when that exists (each distinct shard
 * opened once; every tensor listed must be in the shard named, every
 * tensor in a shard listed, no tensor in two shards). Each file is mapped
 * read-only, the mapping registered with the SIGBUS guard (guard.h: at
 * most SF_GUARD_MAX_MAPS files at once, else SF_ELIMIT), and its header
 * validated: length within the file and at most
 * 100 MiB, a JSON object without duplicate names, dtype F32/F16/BF16
 * (other safetensors dtypes refused by name), at most SF_TENSOR_MAX_DIMS
 * dimensions, shape * element size == end - begin without overflow,
 * ranges inside the data buffer and not overlapping, names shorter than
 * SF_TENSOR_NAME_MAX, at most 2^20 tensors. Returns 0, -errno, or
 * SF_EFORMAT / SF_EUNSUPPORTED / SF_ELIMIT / SF_EMISMATCH; *st is zeroed
 * on failure. */
int sf_safetensors_open(struct sf_safetensors *st, const char *dir, struct sf_err *e);
/* Opens one .safetensors file. */
int sf_safetensors_open_file(struct sf_safetensors *st, const char *path, struct sf_err *e);
void sf_safetensors_close(struct sf_safetensors *st);	/* accepts a zeroed st */
/* Unmaps from the process the whole pages of [p, p + n) when they lie in
 * one of st's mappings (MADV_DONTNEED; nothing otherwise): the next read
 * maps them again from the page cache or the file. What lets a pass over
 * a model larger than memory keep only the layer at hand resident. */
void sf_safetensors_release(const struct sf_safetensors *st, const void *p, size_t n);

/* A shape as "[a, b]" for messages, into buf (size bytes, truncated to
 * fit); returns buf. */
const char *sf_shape_str(char *buf, size_t size, int ndim, const uint64_t *shape);

/* st's tensors sorted by name, as sf_safetensors_find needs them: for a
 * tensor set built by a reader of another layout (a GGUF's, gpt-oss's
 * split experts). */
void sf_safetensors_sort(struct sf_safetensors *st);

/* NULL when absent. Binary search: O(log n). */
const struct sf_tensor *sf_safetensors_find(const struct sf_safetensors *st, const char *name);

/* The file to name in a message about the whole set (a tensor missing):
 * the index when sharded, else the one file. */
const char *sf_safetensors_source(const struct sf_safetensors *st);

/* Writer: tensors given in any order, written sorted by name with the
 * data laid out in that order, without gaps; the JSON header (keys sorted,
 * "__metadata__": {"format": "pt"}) is space-padded to a multiple of 8
 * bytes. PATH is written to PATH.tmp.XXXXXX, fsynced and renamed when
 * complete; on failure nothing is left behind. Returns 0 or -errno
 * (-EINVAL for a bad tensor description, -ENOSPC, ...).
 *
 * Each tensor's bytes come from data (which must hold the whole tensor),
 * or, when data is NULL, from fill, so large tensors can be generated
 * without holding them in memory: fill(arg, t, buf, offset, len) writes
 * bytes [offset, offset + len) of the tensor into buf and returns 0 or
 * -errno. It is called for consecutive ranges from offset 0 up to the
 * tensor's size, in order; offset and len are multiples of 8 except for
 * the last range (so whole elements). */
struct sf_tensor_out {
	const char *name;
	enum sf_dtype dtype;
	int ndim;
	uint64_t shape[SF_TENSOR_MAX_DIMS];
	const void *data;
	int (*fill)(void *arg, const struct sf_tensor_out *t, void *buf, uint64_t offset,
		    size_t len);
	void *arg;
};
int sf_safetensors_write(const char *path, const struct sf_tensor_out *t, size_t n,
			 struct sf_err *e);

#endif
