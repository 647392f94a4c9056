/* The streams' shared opening and exact reads: see stream.h. */
#include "formats/stream.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "formats/model.h"

int sf_stream_read(struct sf_stream *s, void *buf, size_t n, const char *what, struct sf_err *e)
{
	size_t got = fread(buf, 1, n, s->f);
	if (got != n) {
		if (ferror(s->f))
			return sf_err_set(e, -EIO, "%s: read error: %s", s->name, strerror(errno));
		return sf_err_set(e, SF_EFORMAT,
				  "%s: truncated at byte %llu: %s needs %zu bytes, %zu left",
				  s->name, (unsigned long long)(s->offset + got), what, n, got);
	}
	s->offset += n;
	return 0;
}

int sf_stream_open(struct sf_stream *s, const char *path, const struct sf_stream_kind *k,
		   json_t **header, struct sf_err *e)
{
	unsigned char pre[16];
	char *text = NULL;
	int ret;

	memset(s, 0, sizeof(*s));
	*header = NULL;
	if (!(s->name = strdup(strcmp(path, "-") == 0 ? "(stdin)" : path)))
		return sf_err_set(e, -ENOMEM, "%s: %s", path, sf_strerror(-ENOMEM));
	if (strcmp(path, "-") == 0) {
		s->f = stdin;
	} else if (!(s->f = fopen(path, "rb"))) {
		ret = sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
		goto fail;
	} else {
		s->owns_file = 1;
	}
	if ((ret = sf_stream_read(s, pre, sizeof(pre), "the header", e)))
		goto fail;
	if (memcmp(pre, k->magic, 8) != 0) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: not a sparseflash %s (bad magic)", s->name,
				 k->what);
		goto fail;
	}
	s->version = sf_get_le32(pre + 8);
	if (s->version > k->version || s->version < (k->min_version ? k->min_version : k->version)) {
		ret = sf_fingerprint_version(s->name, k->what, s->version, (int)k->version, e);
		goto fail;
	}
	uint32_t hlen = sf_get_le32(pre + 12);
	if (hlen > k->max_header) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: header of %u bytes: at most %u", s->name, hlen,
				 k->max_header);
		goto fail;
	}
	/* 64-bit: the padding of a header near 4 GiB must not wrap */
	uint64_t padded = (16 + (uint64_t)hlen + k->align - 1) / k->align * k->align - 16;
	if (!(text = malloc(padded ? (size_t)padded : 1))) {
		ret = sf_err_set(e, -ENOMEM, "%s: %s", s->name, sf_strerror(-ENOMEM));
		goto fail;
	}
	if ((ret = sf_stream_read(s, text, (size_t)padded, "the JSON header", e)))
		goto fail;
	json_error_t je;
	*header = json_loadb(text, hlen, JSON_REJECT_DUPLICATES, &je);
	if (!json_is_object(*header)) {
		json_decref(*header);
		*header = NULL;
		ret = sf_err_set(e, SF_EFORMAT, "%s: header is not a JSON object: %s", s->name,
				 je.text);
		goto fail;
	}
	free(text);
	return 0;
fail:
	free(text);
	sf_stream_close(s);
	return ret;
}

void sf_stream_close(struct sf_stream *s)
{
	if (s->owns_file)
		fclose(s->f);
	free(s->name);
	memset(s, 0, sizeof(*s));
}
