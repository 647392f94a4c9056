/* The one atomic-output writer: see outfile.h. */
#include "base/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/guard.h"

/* Is the file at path (followed) the one with st's identity? */
static int same_file(const struct stat *st, const char *path)
{
	struct stat in;
	return path && stat(path, &in) == 0 && in.st_dev == st->st_dev && in.st_ino == st->st_ino;
}

static int check_inputs(const char *name, const struct stat *st, const char *const *inputs,
			struct sf_err *e)
{
	for (size_t i = 0; inputs && inputs[i]; i++)
		if (same_file(st, inputs[i]))
			return sf_err_set(e, SF_EMISMATCH, "%s: is also an input (%s): refusing to "
					  "overwrite it", name, inputs[i]);
	return 0;
}

static int open_stream(struct sf_outfile *o, const char *path, int flags, struct sf_err *e)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
	if ((flags & SF_OUT_BINARY) && isatty(fd)) {
		close(fd);
		return sf_err_set(e, -EINVAL, "%s: refusing to write binary output to a terminal",
				  path);
	}
	if (!(o->f = fdopen(fd, "wb"))) {
		int err = errno;
		close(fd);
		return sf_err_set(e, -err, "%s: %s", path, strerror(err));
	}
	o->fd = fd;
	return 0;
}

/* A new file beside target: mkstemp's 0600 widened to what the umask
 * gives any new file, so an output is as readable as one made by cp. */
static int open_tmp_at(struct sf_outfile *o, struct sf_err *e)
{
	size_t n = strlen(o->target) + sizeof(".tmp.XXXXXX");
	int ret;

	if (!(o->tmp = malloc(n)))
		return sf_err_set(e, -ENOMEM, "%s: %s", o->name, strerror(ENOMEM));
	snprintf(o->tmp, n, "%s.tmp.XXXXXX", o->target);
	if ((o->fd = mkostemp(o->tmp, O_CLOEXEC)) < 0) {
		ret = sf_err_set(e, -errno, "%s: %s", o->name, strerror(errno));
		free(o->tmp);
		o->tmp = NULL;
		return ret;
	}
	if ((ret = sf_guard_tmp(o->tmp, e)) < 0) {
		close(o->fd);
		unlink(o->tmp);
		free(o->tmp);
		o->tmp = NULL;
		return ret;
	}
	mode_t mask = umask(0);
	umask(mask);
	if (fchmod(o->fd, 0666 & ~mask) || !(o->f = fdopen(o->fd, "wb"))) {
		ret = sf_err_set(e, -errno, "%s: %s", o->name, strerror(errno));
		close(o->fd);
		unlink(o->tmp);
		sf_guard_untmp(o->tmp);
		free(o->tmp);
		o->tmp = NULL;
		return ret;
	}
	return 0;
}

/* open_tmp_at, and on failure the target's name freed too. */
static int open_tmp(struct sf_outfile *o, struct sf_err *e)
{
	int ret = open_tmp_at(o, e);

	if (ret) {	/* nothing of o is left to close or free */
		free(o->target);
		o->target = NULL;
	}
	return ret;
}

int sf_outfile_open(struct sf_outfile *o, const char *path, int flags,
		    const char *const *inputs, struct sf_err *e)
{
	struct stat lst, st;
	int ret;

	memset(o, 0, sizeof(*o));
	o->fd = -1;
	if (!path || !strcmp(path, "-")) {
		o->name = "(stdout)";
		if (flags & SF_OUT_SEEKABLE)
			return sf_err_set(e, -EINVAL, "standard output: this output is written "
					  "with random access; name a file with -o");
		if ((flags & SF_OUT_BINARY) && isatty(STDOUT_FILENO))
			return sf_err_set(e, -EINVAL, "refusing to write binary output to a "
					  "terminal; use -o FILE or a pipe");
		if (fstat(STDOUT_FILENO, &st) == 0 && (ret = check_inputs(o->name, &st, inputs, e)))
			return ret;
		o->f = stdout;
		o->fd = STDOUT_FILENO;
		return 0;
	}
	o->name = path;
	if (!*path)
		return sf_err_set(e, -EINVAL, "an empty output name");
	if (lstat(path, &lst) < 0) {
		if (errno != ENOENT)
			return sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
		if (!(o->target = strdup(path)))
			return sf_err_set(e, -ENOMEM, "%s: %s", path, strerror(ENOMEM));
		return open_tmp(o, e);
	}
	if (stat(path, &st) < 0)
		return sf_err_set(e, -errno, "%s: %s", path,
				  errno == ENOENT ? "a symlink to nothing: refusing to create its "
				  "target" : strerror(errno));
	if ((ret = check_inputs(path, &st, inputs, e)))
		return ret;
	if (S_ISREG(st.st_mode)) {
		/* a symlink's target is replaced, the link kept */
		o->target = S_ISLNK(lst.st_mode) ? realpath(path, NULL) : strdup(path);
		if (!o->target)
			return sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
		return open_tmp(o, e);
	}
	if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
		if (flags & SF_OUT_SEEKABLE)
			return sf_err_set(e, -EINVAL, "%s: not a regular file: this output is "
					  "written with random access", path);
		return open_stream(o, path, flags, e);
	}
	return sf_err_set(e, -EINVAL, "%s: %s: refusing to write over it", path,
			  S_ISDIR(st.st_mode) ? "a directory" : S_ISBLK(st.st_mode) ?
			  "a block device" : S_ISSOCK(st.st_mode) ? "a socket" :
			  "not a regular file");
}

int sf_outfile_commit(struct sf_outfile *o, struct sf_err *e)
{
	int ret = 0;

	if (!o->f)
		return 0;
	if (o->f == stdout) {
		if (fflush(stdout) || ferror(stdout))
			ret = sf_err_set(e, -(errno ? errno : EIO), "write error on standard "
					 "output: %s", strerror(errno ? errno : EIO));
		o->f = NULL;
		return ret;
	}
	errno = 0;
	if (fflush(o->f) || ferror(o->f) || (o->tmp && fsync(o->fd)))
		ret = sf_err_set(e, -(errno ? errno : EIO), "%s: write error: %s", o->name,
				 strerror(errno ? errno : EIO));
	if (fclose(o->f) && !ret)
		ret = sf_err_set(e, -(errno ? errno : EIO), "%s: write error: %s", o->name,
				 strerror(errno ? errno : EIO));
	o->f = NULL;
	o->fd = -1;
	if (!ret && o->tmp && rename(o->tmp, o->target))
		ret = sf_err_set(e, -errno, "%s: %s", o->name, strerror(errno));
	if (o->tmp) {
		if (ret)
			unlink(o->tmp);
		sf_guard_untmp(o->tmp);
	}
	free(o->tmp);
	free(o->target);
	o->tmp = o->target = NULL;
	return ret;
}

void sf_outfile_abort(struct sf_outfile *o)
{
	if (o->f && o->f != stdout)
		fclose(o->f);
	if (o->tmp) {
		unlink(o->tmp);
		sf_guard_untmp(o->tmp);
	}
	free(o->tmp);
	free(o->target);
	memset(o, 0, sizeof(*o));
	o->fd = -1;
}

int sf_outfile_is(const struct sf_outfile *o, const char *path)
{
	struct stat st;

	if (o->target)	/* replaced when committed: the file there now */
		return stat(o->target, &st) == 0 && same_file(&st, path);
	return o->fd >= 0 && fstat(o->fd, &st) == 0 && same_file(&st, path);
}
