/* A minimal harness for the C unit tests: CHECK records a failure and
 * goes on, the test's main returns unit_exit(). Exit 0 pass, 1 fail, 77
 * skip (with the reason as the last line). Inputs come from the
 * environment the Makefile sets: SF_ROOT, SF_SHARED, SF_TMP. */
#ifndef SF_UNIT_H
#define SF_UNIT_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int unit_failures;

#define CHECK(cond, ...) do { \
	if (!(cond)) { \
		unit_failures++; \
		fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
		fprintf(stderr, __VA_ARGS__); \
		fputc('\n', stderr); \
	} \
} while (0)

static inline int unit_exit(void)
{
	if (unit_failures)
		fprintf(stderr, "%d check(s) failed\n", unit_failures);
	return unit_failures ? 1 : 0;
}

static inline _Noreturn void unit_skip(const char *why)
{
	printf("%s\n", why);
	exit(77);
}

/* Writes n bytes of data to DIR/NAME; the path, valid until the next call. */
static inline const char *unit_write_file(const char *dir, const char *name, const void *data,
					  size_t n)
{
	static char path[4200];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	CHECK(f && fwrite(data, 1, n, f) == n && fclose(f) == 0, "%s: cannot write", path);
	return path;
}

/* $name or the fallback */
static inline const char *unit_env(const char *name, const char *fallback)
{
	const char *v = getenv(name);
	return v && *v ? v : fallback;
}

/* A random model by the mkmodel fixture (SF_FIXTURES) in dir (n bytes:
 * TMPDIR/NAME) with mkmodel's options args: 0, or -1 when the fixture is
 * not there (said on stderr, naming what goes untested) or failed (a
 * failed check). */
static inline int unit_mkmodel(const char *tmpdir, const char *name, const char *args,
			       char *dir, size_t n, const char *untested)
{
	const char *fx = unit_env("SF_FIXTURES", NULL);
	char mk[4200], cmd[16400];

	if (!fx) {
		fprintf(stderr, "SF_FIXTURES unset: %s not tested\n", untested);
		return -1;
	}
	snprintf(mk, sizeof(mk), "%s/mkmodel", fx);
	if (access(mk, X_OK)) {
		fprintf(stderr, "%s not built: %s not tested\n", mk, untested);
		return -1;
	}
	snprintf(dir, n, "%s/%s", tmpdir, name);
	snprintf(cmd, sizeof(cmd), "'%s' -o '%s' %s > /dev/null", mk, dir, args);
	int ok = system(cmd) == 0;
	CHECK(ok, "%s failed", cmd);
	return ok ? 0 : -1;
}

#endif
