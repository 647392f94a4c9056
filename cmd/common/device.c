/* The device file of sf-run --probe-device: see device.h. */
#include "common/device.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "base/outfile.h"
#include "online/uring.h"

#define DEVICE_FORMAT "sparseflash-device"
#define DEVICE_VERSION 1
#define PROBE_FILE_BYTES ((uint64_t)1 << 30)

int sf_device_file(const char *path, char *buf, size_t cap, struct sf_err *e)
{
	struct stat st;
	const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	int n;

	if (stat(path, &st))
		return sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
	if (xdg && *xdg)
		n = snprintf(buf, cap, "%s/sparseflash/device-%u-%u.json", xdg, major(st.st_dev),
			     minor(st.st_dev));
	else if (home && *home)
		n = snprintf(buf, cap, "%s/.cache/sparseflash/device-%u-%u.json", home,
			     major(st.st_dev), minor(st.st_dev));
	else
		return sf_err_set(e, -ENOENT, "%s: neither XDG_CACHE_HOME nor HOME is set", path);
	if (n < 0 || (size_t)n >= cap)
		return sf_err_set(e, -ENAMETOOLONG, "%s: cache path too long", path);
	return 0;
}

int sf_device_load(const char *path, double *peak, double *iops, double *buffered,
		   struct sf_err *e)
{
	char file[4096];
	json_error_t je;
	struct sf_err ignored;

	/* no place to keep figures is no figures */
	if (sf_device_file(path, file, sizeof(file), &ignored) || access(file, F_OK))
		return 0;
	json_t *j = json_load_file(file, 0, &je);
	const char *fmt = NULL;
	double bw = 0, small = 0;
	if (!j || json_unpack(j, "{s:s, s:{s:F}, s:{s:F}}", "format", &fmt, "large", "bytes_per_s",
			      &bw, "small", "iops", &small) ||
	    strcmp(fmt, DEVICE_FORMAT) || !(bw > 0) || !(small > 0)) {
		json_decref(j);
		return sf_err_set(e, SF_EFORMAT, "%s: not a device file of sf-run --probe-device "
				  "(remove it and probe again)", file);
	}
	/* absent from files of an earlier probe */
	*buffered = json_number_value(json_object_get(json_object_get(j, "buffered"), "bytes_per_s"));
	json_decref(j);
	*peak = bw;
	*iops = small;
	return 1;
}

static json_t *bench_json(const struct sf_uring_bench *b)
{
	return json_pack("{s:i, s:i, s:s, s:f, s:f, s:f}", "block", (int)b->block, "qd", (int)b->qd,
			 "backend", sf_uring_backend_name(b->backend), "seconds", b->seconds,
			 "iops", b->iops, "bytes_per_s", b->bytes_per_s);
}

/* mkdir -p of the directory part of file. */
static int make_dirs(char *file)
{
	for (char *p = file + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			int r = mkdir(file, 0755);
			*p = '/';
			if (r && errno != EEXIST)
				return -errno;
		}
	return 0;
}

int sf_device_probe(const char *dir, json_t **out, struct sf_err *e)
{
	char file[4096], data[4200], dev[32];
	struct sf_uring_probe p;
	struct sf_outfile of = { .fd = -1 };
	struct stat st;
	int ret;

	if (out)
		*out = NULL;
	if ((ret = sf_device_file(dir, file, sizeof(file), e)))
		return ret;
	if (stat(dir, &st))
		return sf_err_set(e, -errno, "%s: %s", dir, strerror(errno));
	snprintf(data, sizeof(data), "%s/.sf-probe.%ld", dir, (long)getpid());
	ret = sf_uring_fill(data, PROBE_FILE_BYTES, 1, e);
	if (!ret)
		ret = sf_uring_probe(data, &p, e);
	unlink(data);
	if (ret)
		return ret;
	snprintf(dev, sizeof(dev), "%u:%u", major(st.st_dev), minor(st.st_dev));
	json_t *j = json_pack("{s:s, s:i, s:s, s:o, s:o, s:o}", "format", DEVICE_FORMAT,
			      "version", DEVICE_VERSION, "device", dev,
			      "small", bench_json(&p.small), "large", bench_json(&p.large),
			      "buffered", bench_json(&p.buffered));
	if (!j)
		return sf_err_set(e, -ENOMEM, "%s: %s", file, strerror(ENOMEM));
	if ((ret = make_dirs(file))) {
		ret = sf_err_set(e, ret, "%s: %s", file, strerror(-ret));
		goto out;
	}
	if ((ret = sf_outfile_open(&of, file, 0, NULL, e)))
		goto out;
	if (json_dumpf(j, of.f, JSON_INDENT(2)) || fputc('\n', of.f) == EOF) {
		ret = sf_err_set(e, -EIO, "%s: cannot write", file);
		goto out;
	}
	if ((ret = sf_outfile_commit(&of, e)))
		goto out;
	if (out) {
		*out = j;
		j = NULL;
	}
out:
	sf_outfile_abort(&of);
	json_decref(j);
	return ret;
}
