/* What a SIGBUS handler needs to know: the input files this process has
 * mapped (safetensors shards, .sfq codes) and the temporary outputs it has
 * pending. A mapped file truncated under a running command raises SIGBUS
 * on the next touch of a page past its new end; the commands' handler
 * (sf_catch_sigbus in cli.h) names the file, removes the temporaries and
 * exits. This module only keeps the tables: it never prints, exits or
 * installs a handler. See sparseflash(7), CONVENTIONS. */
#ifndef SF_GUARD_H
#define SF_GUARD_H

#include <stddef.h>

#include "base/err.h"

#define SF_GUARD_MAX_MAPS 4096	/* files mapped at once */
#define SF_GUARD_MAX_TMPS 64	/* temporary outputs pending at once */

/* Registers [addr, addr + len) as a mapping of path. The path is kept by
 * pointer and must stay valid until sf_guard_unmap. Returns 0, or
 * SF_ELIMIT ("PATH: more than N files mapped at once") when
 * SF_GUARD_MAX_MAPS mappings are registered. */
int sf_guard_map(const void *addr, size_t len, const char *path, struct sf_err *e);
/* Forgets the mapping that starts at addr, before it is unmapped; does
 * nothing when none is registered there. */
void sf_guard_unmap(const void *addr);

/* Registers a temporary output file's name, kept by pointer: it must stay
 * valid and unchanged until sf_guard_untmp. Returns 0, or SF_ELIMIT
 * ("PATH: more than N temporary outputs at once") when SF_GUARD_MAX_TMPS
 * are pending. */
int sf_guard_tmp(const char *path, struct sf_err *e);
/* Forgets that pointer, after the file was renamed or removed (so the
 * handler never finds an output gone missing); NULL or a pointer not
 * registered does nothing. */
void sf_guard_untmp(const char *path);

/* For the handler, async-signal-safe: the path of the registered mapping
 * that holds addr, or NULL; and unlink(2) of every registered temporary. */
const char *sf_guard_find(const void *addr);
void sf_guard_unlink_tmps(void);

#endif
