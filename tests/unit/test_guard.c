/* The SIGBUS guard (issue 9): the registry of mapped inputs and pending
 * temporaries (guard.h), and the commands' handler (sf_catch_sigbus in
 * cli.h) run in a child process: a safetensors file truncated under it
 * gives the one line and exit 1, the pending -o temporary removed, also
 * when several threads fault at once; a SIGBUS at an address nobody registered still ends the process the way
 * it did before (the default action, or AddressSanitizer's report). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cli.h"
#include "base/guard.h"
#include "formats/safetensors.h"
#include "unit.h"

static char dir[4096];

static void registry(void)
{
	static char buf[100], other[10];
	struct sf_err e = { 0 };
	char *tmp[SF_GUARD_MAX_TMPS + 1];

	CHECK(sf_guard_find(buf) == NULL, "nothing registered yet");
	CHECK(sf_guard_map(buf, sizeof(buf), "a.safetensors", &e) == 0, "map: %s", e.msg);
	CHECK(sf_guard_find(buf) && !strcmp(sf_guard_find(buf), "a.safetensors"), "first byte");
	CHECK(sf_guard_find(buf + 99) && !strcmp(sf_guard_find(buf + 99), "a.safetensors"),
	      "last byte");
	CHECK(sf_guard_find(buf + 100) == NULL, "one past the end");
	CHECK(sf_guard_find(other) == NULL, "elsewhere");
	sf_guard_unmap(buf + 1);	/* not where a mapping starts: ignored */
	CHECK(sf_guard_find(buf) != NULL, "unmap of another address forgot the mapping");
	sf_guard_unmap(buf);
	CHECK(sf_guard_find(buf) == NULL, "after unmap");

	/* the table is full at SF_GUARD_MAX_MAPS, and usable again after */
	static char many[SF_GUARD_MAX_MAPS + 1];
	int ok = 1;
	for (int i = 0; i < SF_GUARD_MAX_MAPS; i++)
		ok &= sf_guard_map(many + i, 1, "m", &e) == 0;
	CHECK(ok, "%d mappings", SF_GUARD_MAX_MAPS);
	CHECK(sf_guard_map(many + SF_GUARD_MAX_MAPS, 1, "full.sfq", &e) == SF_ELIMIT, "limit");
	char want[256];
	snprintf(want, sizeof(want), "full.sfq: more than %d files mapped at once",
		 SF_GUARD_MAX_MAPS);
	CHECK(!strcmp(e.msg, want), "message: %s", e.msg);
	for (int i = 0; i < SF_GUARD_MAX_MAPS; i++)
		sf_guard_unmap(many + i);
	CHECK(sf_guard_map(buf, 1, "again", &e) == 0, "map after the table emptied: %s", e.msg);
	sf_guard_unmap(buf);

	/* temporaries: only those still registered are removed */
	char kept[4200], gone[4200];
	snprintf(kept, sizeof(kept), "%s/kept", dir);
	snprintf(gone, sizeof(gone), "%s/gone", dir);
	close(open(kept, O_CREAT | O_WRONLY, 0600));
	close(open(gone, O_CREAT | O_WRONLY, 0600));
	CHECK(sf_guard_tmp(kept, &e) == 0 && sf_guard_tmp(gone, &e) == 0, "tmp: %s", e.msg);
	sf_guard_untmp(kept);
	sf_guard_untmp(NULL);
	sf_guard_unlink_tmps();
	CHECK(access(kept, F_OK) == 0, "a temporary no longer registered was removed");
	CHECK(access(gone, F_OK) < 0 && errno == ENOENT, "a registered temporary was left");
	sf_guard_untmp(gone);
	unlink(kept);
	for (int i = 0; i <= SF_GUARD_MAX_TMPS; i++)
		tmp[i] = strdup("t");
	ok = 1;
	for (int i = 0; i < SF_GUARD_MAX_TMPS; i++)
		ok &= sf_guard_tmp(tmp[i], &e) == 0;
	CHECK(ok, "%d temporaries", SF_GUARD_MAX_TMPS);
	CHECK(sf_guard_tmp(tmp[SF_GUARD_MAX_TMPS], &e) == SF_ELIMIT, "temporaries limit");
	for (int i = 0; i <= SF_GUARD_MAX_TMPS; i++) {
		sf_guard_untmp(tmp[i]);
		free(tmp[i]);
	}
}

/* Runs fn in a child with stderr to dir/err; its wait status, and the
 * text it wrote in text. */
static int in_child(void (*fn)(void), char *text, size_t size)
{
	char err[4200];
	int status = -1;
	pid_t pid;

	snprintf(err, sizeof(err), "%s/err", dir);
	fflush(NULL);
	if ((pid = fork()) < 0)
		return -1;
	if (pid == 0) {
		int fd = open(err, O_CREAT | O_TRUNC | O_WRONLY, 0600);
		if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
			_exit(99);
		fn();
		_exit(98);	/* fn did not end the process */
	}
	waitpid(pid, &status, 0);
	FILE *f = fopen(err, "r");
	size_t n = f ? fread(text, 1, size - 1, f) : 0;
	text[n] = '\0';
	if (f)
		fclose(f);
	return status;
}

static char model[4200], out[4200];

/* A pending -o output, a model mapped, the model cut to nothing, one of
 * its tensors read. */
static void truncated_model(void)
{
	struct sf_safetensors st;
	struct sf_out o;
	struct sf_err e = { 0 };
	volatile uint8_t sum = 0;

	sf_progname = "test_guard";
	sf_catch_sigbus();
	if (sf_out_open(&o, out, 1, NULL) || sf_safetensors_open_file(&st, model, &e))
		_exit(97);
	if (truncate(model, 0))
		_exit(96);
	const struct sf_tensor *t = &st.tensors[st.ntensors - 1];
	for (uint64_t b = 0; b < t->nbytes; b++)
		sum += ((const uint8_t *)t->data)[b];
	_exit(95);	/* read the bytes of a truncated file */
}

/* Threads that touch the lost pages together: still one line. */
static const struct sf_tensor *shared_tensor;
static pthread_barrier_t start;

static void *reader(void *arg)
{
	volatile uint8_t sum = 0;
	const struct sf_tensor *t = shared_tensor;

	(void)arg;
	pthread_barrier_wait(&start);
	for (uint64_t b = 0; b < t->nbytes; b++)
		sum += ((const uint8_t *)t->data)[b];
	return NULL;
}

static void truncated_model_threads(void)
{
	struct sf_safetensors st;
	struct sf_out o;
	struct sf_err e = { 0 };
	pthread_t th[4];

	sf_progname = "test_guard";
	sf_catch_sigbus();
	if (sf_out_open(&o, out, 1, NULL) || sf_safetensors_open_file(&st, model, &e) ||
	    pthread_barrier_init(&start, NULL, 5))
		_exit(97);
	shared_tensor = &st.tensors[st.ntensors - 1];
	for (int i = 0; i < 4; i++)
		if (pthread_create(&th[i], NULL, reader, NULL))
			_exit(96);
	if (truncate(model, 0))
		_exit(96);
	pthread_barrier_wait(&start);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	_exit(95);
}

/* The same fault in a mapping nobody registered. */
static void unregistered_map(void)
{
	char path[4200];
	int fd;
	volatile uint8_t v;

	sf_catch_sigbus();
	snprintf(path, sizeof(path), "%s/plain", dir);
	if ((fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600)) < 0 || ftruncate(fd, 8192))
		_exit(97);
	const uint8_t *p = mmap(NULL, 8192, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED || ftruncate(fd, 0))
		_exit(96);
	v = p[4096];
	(void)v;
	_exit(95);
}

/* A SIGBUS sent, not raised by a fault (si_code SI_USER). */
static void sent(void)
{
	sf_catch_sigbus();
	kill(getpid(), SIGBUS);
	_exit(95);
}

/* Not our line, and the process ended by the signal or, under ASan, by
 * ASan's report of it. */
static void check_not_ours(int status, const char *text, const char *what)
{
	CHECK(!strstr(text, "bus error reading mapped data"), "%s: the guard spoke: %s", what,
	      text);
#ifdef __SANITIZE_ADDRESS__
	CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS) ||
	      (WIFEXITED(status) && WEXITSTATUS(status) != 0 && strstr(text, "AddressSanitizer")),
	      "%s: status 0x%x: %s", what, status, text);
#else
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS, "%s: status 0x%x: %s", what,
	      status, text);
#endif
}

int main(void)
{
	char cmd[8600], text[16384], want[16384];

	snprintf(dir, sizeof(dir), "%s/test_guard.XXXXXX", unit_env("SF_TMP", "/tmp"));
	if (!mkdtemp(dir))
		unit_skip("cannot make a scratch directory");
	registry();

	snprintf(model, sizeof(model), "%s/model.safetensors", dir);
	snprintf(out, sizeof(out), "%s/out.bin", dir);
	snprintf(cmd, sizeof(cmd), "cp '%s/models/mix4-1m/model.safetensors' '%s'",
		 unit_env("SF_ROOT", "."), model);
	CHECK(system(cmd) == 0, "copy the model");
	int status = in_child(truncated_model, text, sizeof(text));
	snprintf(want, sizeof(want), "test_guard: %s: file changed under a running test_guard "
		 "(truncated?): bus error reading mapped data\n", model);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "status 0x%x", status);
	CHECK(!strcmp(text, want), "message: %s", text);
	snprintf(cmd, sizeof(cmd), "ls '%s' | grep -q '^out'", dir);
	CHECK(system(cmd) != 0, "the output or its temporary is left in %s", dir);

	snprintf(cmd, sizeof(cmd), "cp '%s/models/mix4-1m/model.safetensors' '%s'",
		 unit_env("SF_ROOT", "."), model);
	CHECK(system(cmd) == 0, "copy the model");
	status = in_child(truncated_model_threads, text, sizeof(text));
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "threads: status 0x%x", status);
	CHECK(!strcmp(text, want), "threads: message: %s", text);
	snprintf(cmd, sizeof(cmd), "ls '%s' | grep -q '^out'", dir);
	CHECK(system(cmd) != 0, "threads: the output or its temporary is left in %s", dir);

	status = in_child(unregistered_map, text, sizeof(text));
	check_not_ours(status, text, "unregistered mapping");
	status = in_child(sent, text, sizeof(text));
	check_not_ours(status, text, "sent with kill");

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK(system(cmd) == 0, "cleanup");
	return unit_exit();
}
