/* Size-limited whole-file reading (see file.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"

#define FIRST_CHUNK ((size_t)64 << 10)	/* a pipe's or an unsized file's first buffer */

static int too_large(const char *path, uint64_t max, struct sf_err *e)
{
	if (max && max % (1u << 20) == 0)
		return sf_err_set(e, SF_ELIMIT, "%s: larger than the limit of %llu bytes (%llu MiB)",
				  path, (unsigned long long)max, (unsigned long long)(max >> 20));
	return sf_err_set(e, SF_ELIMIT, "%s: larger than the limit of %llu bytes", path,
			  (unsigned long long)max);
}

int sf_file_open_regular(const char *path, int flags, struct stat *st, struct sf_err *e)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), fl, ret;

	if (fd < 0) {
		if ((flags & SF_FILE_OPTIONAL) && errno == ENOENT)
			return -ENOENT;
		return sf_err_set(e, -errno, "%s: cannot open: %s", path, strerror(errno));
	}
	if (fstat(fd, st)) {
		ret = sf_err_set(e, -errno, "%s: cannot stat: %s", path, strerror(errno));
	} else if (!S_ISREG(st->st_mode)) {
		ret = sf_err_set(e, SF_EFORMAT, "%s: not a regular file", path);
	} else if ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		ret = sf_err_set(e, -errno, "%s: fcntl: %s", path, strerror(errno));
	} else {
		return fd;
	}
	close(fd);
	return ret;
}

int sf_file_read(const char *path, uint64_t max, int flags, char **buf, size_t *len,
		 struct sf_err *e)
{
	struct stat st;
	char *b = NULL;
	size_t n = 0, cap;
	int fd, ret = 0;

	*buf = NULL;
	*len = 0;
	if (max > SIZE_MAX - 2)
		max = SIZE_MAX - 2;	/* room for the NUL and the byte that shows the excess */
	if (flags & SF_FILE_REGULAR) {
		if ((fd = sf_file_open_regular(path, flags, &st, e)) < 0)
			return fd == -ENOENT && (flags & SF_FILE_OPTIONAL) ? 0 : fd;
	} else if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		if ((flags & SF_FILE_OPTIONAL) && errno == ENOENT)
			return 0;
		return sf_err_set(e, -errno, "%s: cannot open: %s", path, strerror(errno));
	} else if (fstat(fd, &st)) {
		ret = sf_err_set(e, -errno, "%s: cannot stat: %s", path, strerror(errno));
		goto out;
	}
	if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > max) {
		ret = too_large(path, max, e);
		goto out;
	}
	/* a regular file in one read, and one more to see its end */
	cap = S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size + 2 : FIRST_CHUNK;
	if (cap > max + 2)
		cap = (size_t)max + 2;
	for (;;) {
		if (n + 1 == cap || !b) {
			size_t ncap = !b ? cap : cap > (max + 2) / 2 ? (size_t)max + 2 : 2 * cap;
			char *nb = realloc(b, ncap);
			if (!nb) {
				ret = sf_err_set(e, -ENOMEM, "%s: out of memory", path);
				goto out;
			}
			b = nb;
			cap = ncap;
		}
		ssize_t k = read(fd, b + n, cap - 1 - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			ret = sf_err_set(e, -errno, "%s: read: %s", path, strerror(errno));
			goto out;
		}
		if (k == 0)
			break;
		n += (size_t)k;
		if (n > max) {
			ret = too_large(path, max, e);
			goto out;
		}
	}
	b[n] = '\0';
	*buf = b;
	*len = n;
	b = NULL;
out:
	free(b);
	close(fd);
	return ret;
}
