/* Size-limited JSON loading for the stage files (see jsonfile.h): jansson
 * pulls the bytes through a callback that stops at the limit. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/jsonfile.h"

struct source {
	FILE *f;
	uint64_t left;		/* bytes still allowed */
	int over;		/* the file went past the limit */
	int err;		/* errno of a read error */
};

static size_t feed(void *buf, size_t len, void *arg)
{
	struct source *s = arg;
	size_t n = fread(buf, 1, len, s->f);

	if (n == 0 && ferror(s->f)) {
		s->err = errno ? errno : EIO;
		return (size_t)-1;
	}
	if (n > s->left) {
		s->over = 1;
		return (size_t)-1;
	}
	s->left -= n;
	return n;
}

int sf_json_load(json_t **out, const char *path, uint64_t max, struct sf_err *e)
{
	struct source s = { .left = max };
	json_error_t je;

	*out = NULL;
	if (strcmp(path, "-") == 0)
		s.f = stdin;
	else if (!(s.f = fopen(path, "rb")))
		return sf_err_set(e, -errno, "%s: %s", path, strerror(errno));
	*out = json_load_callback(feed, &s, JSON_REJECT_DUPLICATES, &je);
	if (s.f != stdin)
		fclose(s.f);
	if (*out)
		return 0;
	if (s.over)
		return sf_err_set(e, SF_ELIMIT, "%s: larger than the limit of %llu bytes", path,
				  (unsigned long long)max);
	if (s.err)
		return sf_err_set(e, -s.err, "%s: read error: %s", path, strerror(s.err));
	return sf_err_set(e, SF_EFORMAT, "%s: line %d: %s", path, je.line, je.text);
}
