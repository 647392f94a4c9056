/* Error values and messages shared by every lib/common module.
 * Library calls return 0, -errno, or a negative SF_E* code, and fill a
 * struct sf_err with a one-line message "<file>: <what>: <why>" that the
 * command prints after its own name. The library itself never prints. */
#ifndef SF_ERR_H
#define SF_ERR_H

#include <stddef.h>

enum {
	SF_EFORMAT = -4096,	/* input is malformed */
	SF_EUNSUPPORTED = -4097,	/* well-formed, but a feature we do not handle */
	SF_ELIMIT = -4098,	/* input exceeds a stated limit */
	SF_EMISMATCH = -4099,	/* inputs do not belong together */
};

#define SF_ERR_MAX 512

struct sf_err {
	int code;
	char msg[SF_ERR_MAX];
};

/* Formats the message into e (when e is not NULL) and returns code, so
 * callers can write `return sf_err_set(e, SF_EFORMAT, "%s: ...", path);`. */
int sf_err_set(struct sf_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The text for a code: strerror for -errno, a fixed phrase for SF_E*. */
const char *sf_strerror(int code);

#endif
