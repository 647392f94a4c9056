/* Size-limited JSON loading for the stage files (see jsonfile.h): jansson
 * pulls the bytes through a callback that stops at the limit. */
#include <errno.h>
#include <math.h>
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

int sf_json_int(json_t *o, const char *key, int64_t min, int64_t max, int64_t *out,
		const char *where, struct sf_err *e)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v))
		return sf_err_set(e, SF_EFORMAT, "%s: \"%s\" missing or not an integer", where, key);
	int64_t x = (int64_t)json_integer_value(v);
	if (x < min || x > max)
		return sf_err_set(e, SF_EFORMAT, "%s: \"%s\" is %lld: expected %lld..%lld", where,
				  key, (long long)x, (long long)min, (long long)max);
	*out = x;
	return 0;
}

int sf_json_u64(json_t *o, const char *key, uint64_t max, uint64_t *out, const char *where,
		struct sf_err *e)
{
	int64_t x = 0;
	int ret = sf_json_int(o, key, 0, max > INT64_MAX ? INT64_MAX : (int64_t)max, &x, where, e);
	if (!ret)
		*out = (uint64_t)x;
	return ret;
}

int sf_json_num(json_t *o, const char *key, double min, double max, double *out,
		const char *where, struct sf_err *e)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_number(v))
		return sf_err_set(e, SF_EFORMAT, "%s: \"%s\" missing or not a number", where, key);
	double x = json_number_value(v);
	if (!(x >= min && x <= max))
		return sf_err_set(e, SF_EFORMAT, "%s: \"%s\" is %g: expected %g..%g", where, key,
				  x, min, max);
	*out = x;
	return 0;
}

int sf_json_count(json_t *o, const char *key, double min, double max, double *out,
		  const char *where, struct sf_err *e)
{
	int ret = sf_json_num(o, key, min, max, out, where, e);
	if (!ret && *out != floor(*out))
		return sf_err_set(e, SF_EFORMAT, "%s: \"%s\" is %g: expected a whole number",
				  where, key, *out);
	return ret;
}

int sf_json_str(json_t *o, const char *key, const char **out, const char *where,
		struct sf_err *e)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_string(v))
		return sf_err_set(e, SF_EFORMAT, "%s: \"%s\" missing or not a string", where, key);
	*out = json_string_value(v);
	return 0;
}

int sf_json_has(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return v && !json_is_null(v);
}
