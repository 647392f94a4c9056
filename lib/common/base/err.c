/* Error values and messages: see err.h. */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int sf_err_set(struct sf_err *e, int code, const char *fmt, ...)
{
	if (e) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
		va_end(ap);
		e->code = code;
	}
	return code;
}

const char *sf_strerror(int code)
{
	switch (code) {
	case SF_EFORMAT: return "malformed input";
	case SF_EUNSUPPORTED: return "unsupported";
	case SF_ELIMIT: return "limit exceeded";
	case SF_EMISMATCH: return "inputs do not match";
	}
	return strerror(-code);
}
