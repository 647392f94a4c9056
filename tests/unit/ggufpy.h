/* Where the tests find llama.cpp's gguf-py (numpy only): $SF_GGUF_PY,
 * else $LLAMACPP_DIR/llama.cpp/gguf-py, else the cache tests/bench/
 * llamacpp.bash's llamacpp_setup fills by default,
 * /var/tmp/sf-llamacpp/llama.cpp/gguf-py (make check-full sets it up). */
#ifndef SF_GGUFPY_H
#define SF_GGUFPY_H

#include <stdio.h>
#include <sys/stat.h>

#include "unit.h"

#define UNIT_NO_GGUF_PY "gguf-py not found ($SF_GGUF_PY, $LLAMACPP_DIR/llama.cpp/gguf-py " \
	"or /var/tmp/sf-llamacpp; tests/bench/llamacpp.bash's llamacpp_setup)"

/* The directory, or NULL. */
static inline const char *unit_gguf_py(void)
{
	static char dir[4200];
	const char *d = unit_env("SF_GGUF_PY", NULL);
	struct stat sb;

	if (d)
		return d;
	snprintf(dir, sizeof(dir), "%s/llama.cpp/gguf-py",
		 unit_env("LLAMACPP_DIR", "/var/tmp/sf-llamacpp"));
	return stat(dir, &sb) == 0 ? dir : NULL;
}

/* Runs SCRIPT ARGS (a path under the repository and its shell-quoted
 * arguments) with gguf-py importable, under $PYTHON or Debian's python3
 * (which has numpy); its exit status. */
static inline int unit_gguf_py_run(const char *py, const char *script, const char *args)
{
	char cmd[16384];

	snprintf(cmd, sizeof(cmd), "PYTHONPATH='%s' '%s' '%s/%s' %s", py,
		 unit_env("PYTHON", "/usr/bin/python3"), unit_env("SF_ROOT", "."), script, args);
	return system(cmd);
}

#endif
