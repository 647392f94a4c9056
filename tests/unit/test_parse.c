/* base/parse: the one layers grammar of --layers and --dense-layers
 * (sparseflash(7), LAYERS): every form it takes, the sets they give, and
 * text outside it or past the model refused with one message. */
#include <errno.h>
#include <string.h>

#include "base/parse.h"
#include "unit.h"

/* set[0..n) as a string of 0 and 1 */
static const char *bits(const uint8_t *set, int n)
{
	static char buf[64];
	for (int i = 0; i < n; i++)
		buf[i] = set[i] ? '1' : '0';
	buf[n] = '\0';
	return buf;
}

static void test_accepted(void)
{
	static const struct { const char *s; const char *want; } ok[] = {
		{ "all", "111111" }, { "none", "000000" }, { "0", "100000" }, { "5", "000001" },
		{ "1-3", "011100" }, { "0-1,4", "110010" }, { "2:1", "110001" }, { "0:0", "000000" },
		{ "6:0", "111111" }, { "1:1,2-3", "101101" }, { "3,3,3-3", "000100" },
	};
	struct sf_err e = { 0 };
	uint8_t set[6];

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		int ret = sf_parse_layers("--layers", ok[i].s, 6, SF_LAYERS_MODEL, set, &e);
		CHECK(ret == 0 && !strcmp(bits(set, 6), ok[i].want), "'%s': %d %s (want %s) %s",
		      ok[i].s, ret, bits(set, 6), ok[i].want, e.msg);
	}
}

static void test_refused(void)
{
	static const struct { const char *s; int ret; const char *msg; } bad[] = {
		{ "", -EINVAL, NULL }, { "1,", -EINVAL, NULL }, { ",1", -EINVAL, NULL },
		{ "2-1", -EINVAL, NULL }, { "1-", -EINVAL, NULL }, { "-1", -EINVAL, NULL },
		{ "1-2-3", -EINVAL, NULL }, { "1K", -EINVAL, NULL }, { " 1", -EINVAL, NULL },
		{ "x:1", -EINVAL, NULL }, { "All", -EINVAL, NULL },
		{ "0-x", -EINVAL, "--layers: '0-x' is not a list of layers: expected N, N-M "
				  "(N <= M), F:L, all or none, comma separated" },
		{ "6", -ERANGE, "--layers: layer 6 is out of range: the model has layers 0..5" },
		{ "0-6", -ERANGE, "--layers: layer 6 is out of range: the model has layers 0..5" },
		{ "99999999999999999999", -ERANGE, "--layers: layer 99999999999999999999 is out "
						   "of range: the model has layers 0..5" },
		{ "7:0", -ERANGE, "--layers: 7:0 is more layers than the model's 6" },
	};
	struct sf_err e = { 0 };
	uint8_t set[6];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int ret = sf_parse_layers("--layers", bad[i].s, 6, SF_LAYERS_MODEL, set, &e);
		CHECK(ret == bad[i].ret && (!bad[i].msg || !strcmp(e.msg, bad[i].msg)),
		      "'%s': %d '%s'", bad[i].s, ret, e.msg);
	}
}

/* Without the model's count: an upper bound only, and F:L refused. */
static void test_bound(void)
{
	struct sf_err e = { 0 };
	uint8_t set[8];

	CHECK(sf_parse_layers("--layers", "2-7", 8, 0, set, &e) == 0 &&
	      !strcmp(bits(set, 8), "00111111"), "2-7: %s", e.msg);
	CHECK(sf_parse_layers("--layers", "8", 8, 0, set, &e) == -ERANGE &&
	      !strcmp(e.msg, "--layers: layer 8 is out of range: expected 0..7"), "%s", e.msg);
	CHECK(sf_parse_layers("--layers", "1:1", 8, 0, set, &e) == -EINVAL &&
	      strstr(e.msg, "needs the model's layer count"), "%s", e.msg);
}

int main(void)
{
	test_accepted();
	test_refused();
	test_bound();
	return unit_exit();
}
