/* Unit test of lib/common/base/file.c, the size-limited whole-file reader
 * behind config.json, tokenizer.json and the safetensors index: a file at
 * the limit is read whole and NUL-terminated, one byte over is refused
 * with the exact message (a regular file before it is read, a pipe while
 * it is read), an absent file is an error or, optional, nothing. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/file.h"
#include "unit.h"

static char tmp[4096];

static void regular(void)
{
	const char doc[] = "{\"a\": 1}\n";
	const size_t n = sizeof(doc) - 1;
	const char *path = unit_write_file(tmp, "doc.json", doc, n);
	struct sf_err e = { 0 };
	char want[8400], *buf;
	size_t len;

	CHECK(sf_file_read(path, n, 0, &buf, &len, &e) == 0, "at the limit: %s", e.msg);
	CHECK(buf && len == n && memcmp(buf, doc, n) == 0 && buf[n] == '\0', "contents");
	free(buf);
	CHECK(sf_file_read(path, n - 1, 0, &buf, &len, &e) == SF_ELIMIT && !buf && !len,
	      "over the limit");
	snprintf(want, sizeof(want), "%s: larger than the limit of %zu bytes", path, n - 1);
	CHECK(strcmp(e.msg, want) == 0, "message: %s", e.msg);
	unlink(path);

	/* a limit of whole MiB is also given in MiB; a sparse file costs nothing */
	path = unit_write_file(tmp, "huge.json", "", 0);
	CHECK(truncate(path, (off_t)(1 << 20) + 1) == 0, "truncate: %s", strerror(errno));
	CHECK(sf_file_read(path, 1 << 20, 0, &buf, &len, &e) == SF_ELIMIT, "huge");
	snprintf(want, sizeof(want), "%s: larger than the limit of 1048576 bytes (1 MiB)", path);
	CHECK(strcmp(e.msg, want) == 0, "message: %s", e.msg);
	unlink(path);

	path = unit_write_file(tmp, "empty.json", "", 0);
	CHECK(sf_file_read(path, 16, 0, &buf, &len, &e) == 0 && buf && len == 0 && !buf[0],
	      "empty: %s", e.msg);
	free(buf);
	unlink(path);
}

static void absent(void)
{
	char path[4200], want[8400], *buf = (char *)1;
	struct sf_err e = { 0 };
	size_t len = 1;

	snprintf(path, sizeof(path), "%s/absent.json", tmp);
	CHECK(sf_file_read(path, 16, SF_FILE_OPTIONAL, &buf, &len, &e) == 0 && !buf && !len &&
	      !e.msg[0], "optional: %s", e.msg);
	CHECK(sf_file_read(path, 16, 0, &buf, &len, &e) == -ENOENT, "required");
	snprintf(want, sizeof(want), "%s: cannot open: %s", path, strerror(ENOENT));
	CHECK(strcmp(e.msg, want) == 0, "message: %s", e.msg);
}

/* A pipe has no size: it is read until it passes the limit. */
static void pipe_over(void)
{
	char path[4200], want[8400], *buf;
	struct sf_err e = { 0 };
	size_t len;

	snprintf(path, sizeof(path), "%s/fifo", tmp);
	unlink(path);
	CHECK(mkfifo(path, 0600) == 0, "mkfifo: %s", strerror(errno));
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open(path, O_WRONLY);
		char block[4096];
		memset(block, 'x', sizeof(block));
		for (int i = 0; fd >= 0 && i < 64; i++)
			if (write(fd, block, sizeof(block)) < 0)
				break;
		_exit(0);
	}
	CHECK(sf_file_read(path, 100000, 0, &buf, &len, &e) == SF_ELIMIT, "pipe: %s", e.msg);
	snprintf(want, sizeof(want), "%s: larger than the limit of 100000 bytes", path);
	CHECK(strcmp(e.msg, want) == 0, "message: %s", e.msg);
	waitpid(pid, NULL, 0);
	unlink(path);
}

int main(void)
{
	snprintf(tmp, sizeof(tmp), "%s/file.XXXXXX", unit_env("SF_TMP", "/tmp"));
	if (!mkdtemp(tmp))
		unit_skip("cannot make a temporary directory");
	regular();
	absent();
	pipe_over();
	rmdir(tmp);
	return unit_exit();
}
