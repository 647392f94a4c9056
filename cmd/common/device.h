/* The device file of sf-run --probe-device: the figures of the device that
 * holds a directory, kept under $XDG_CACHE_HOME/sparseflash (or
 * ~/.cache/sparseflash) for --collapse auto. The command chooses the path
 * from the environment and passes the figures to the library
 * (sf_sparse_opts.device_peak, device_iops). See man/sf-run.1, FILES. */
#ifndef SF_CLI_DEVICE_H
#define SF_CLI_DEVICE_H

#include <stddef.h>

#include <jansson.h>

#include "base/err.h"

/* $XDG_CACHE_HOME/sparseflash/device-MAJ-MIN.json (or ~/.cache/...) of the
 * device holding path, into buf: 0, or -errno with e's message. */
int sf_device_file(const char *path, char *buf, size_t cap, struct sf_err *e);
/* The figures stored for the device of path: 1 with *peak (large-read
 * bytes/s, O_DIRECT), *iops (small reads/s) and *buffered (the large reads
 * through the page cache, bytes/s; 0 from an earlier probe's file) set, 0
 * when none are stored (or no place to keep them), or SF_EFORMAT for a
 * file that is not ours. */
int sf_device_load(const char *path, double *peak, double *iops, double *buffered,
		   struct sf_err *e);
/* Measures the device holding dir (sf_uring_probe on a 1 GiB file written
 * there and removed after) and stores the figures; *out (may be NULL) the
 * JSON stored, a new reference. 0 or an error with e's message. */
int sf_device_probe(const char *dir, json_t **out, struct sf_err *e);

#endif
