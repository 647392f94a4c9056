/* The one way sparseflash writes an output file (-o PATH; sparseflash(7),
 * OUTPUT FILES). A regular file or a new name is written under a temporary
 * name in the same directory (registered with the SIGBUS guard), fsynced
 * and renamed over PATH when complete, so a failed or interrupted run
 * leaves nothing behind and never half a file. NULL or "-" is standard
 * output; a FIFO, a character device or a terminal is streamed to; a
 * symlink is followed and its target replaced only when it is a regular
 * file; anything else (a directory, a block device, a socket, a dangling
 * symlink) is refused by name, and so is an output that is the same file
 * as one of the inputs. Binary output to a terminal is refused. */
#ifndef SF_OUTFILE_H
#define SF_OUTFILE_H

#include <stdio.h>

#include "base/err.h"

enum {
	SF_OUT_BINARY = 1,	/* refuse a terminal */
	SF_OUT_SEEKABLE = 2,	/* written with pwrite: only a regular file or a new name */
};

struct sf_outfile {
	FILE *f;		/* write here (stdout for "-"), or to fd with pwrite */
	int fd;
	const char *name;	/* as given, for messages; "(stdout)" for stdout */
	char *target;		/* the path renamed over (a symlink's target), or NULL when streamed */
	char *tmp;		/* the temporary name, or NULL when streamed */
};

/* Opens the output. inputs: the files this run reads (NULL-terminated, or
 * NULL), refused as the output with SF_EMISMATCH. Returns 0, -errno or an
 * SF_E* code with e's message naming the file. */
int sf_outfile_open(struct sf_outfile *o, const char *path, int flags,
		    const char *const *inputs, struct sf_err *e);
/* Flushes, fsyncs and renames into place (or flushes a stream): 0 or
 * -errno with e's message; on failure the temporary is removed. Either
 * way the output is closed (standard output is flushed, not closed). */
int sf_outfile_commit(struct sf_outfile *o, struct sf_err *e);
/* Closes and removes the temporary; accepts a zeroed or committed o. */
void sf_outfile_abort(struct sf_outfile *o);

/* 1 when path names the same file as the output would replace or stream
 * to (st_dev and st_ino), else 0: for inputs found after opening. */
int sf_outfile_is(const struct sf_outfile *o, const char *path);

#endif
