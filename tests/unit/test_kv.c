/* The KV cache's types (engine/kv.h) against f32: a row stored and widened
 * back is the row (f32), its f16 rounding (f16), or within half a block's
 * scale of it (q8_0, whose bytes are llama.cpp's Q8_0 layout); the
 * widening of every level the machine has equals the _ref; the forward
 * pass of the embedded mix4-1m with an f16 or q8_0 cache gives logits
 * near the f32 cache's, and with f32 the same floats as sf_state_init's;
 * q8_0 refuses heads that are not whole blocks, rounds a block too small
 * for 1 / d to codes 0 and keeps a non-finite input's block non-finite;
 * a long context's cache costs no memory until positions fill it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/rng.h"
#include "base/vocab.h"
#include "engine/cpu.h"
#include "engine/forward.h"
#include "engine/kv.h"
#include "formats/model.h"
#include "unit.h"

static uint64_t rng = 11;

static float gauss(void)
{
	double u = 1.0 - sf_rng_unit(&rng), v = sf_rng_unit(&rng);
	return (float)(sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v));
}

static void test_round_trip(void)
{
	enum { N = 256 };
	float x[N], y[N];
	uint8_t row[4 * N];

	for (int i = 0; i < N; i++)
		x[i] = gauss() * (i % 41 == 7 ? 30.0f : 1.0f);
	x[40] = 0.0f;
	for (int t = 0; t < 3; t++) {
		enum sf_kv_type k = (enum sf_kv_type)t;
		sf_kv_put(row, k, x, N);
		sf_kv_widen_ref(y, row, k, 0, 0, 1, N);
		for (int i = 0; i < N; i++) {
			float want = k == SF_KV_F32 ? x[i] : sf_f16_to_f32(sf_f32_to_f16(x[i]));
			if (k == SF_KV_Q8_0) {
				const uint8_t *b = row + i / 32 * SF_KV_Q8_0_BYTES;
				float d = sf_f16_to_f32(sf_get_le16(b));
				CHECK(fabsf(y[i] - x[i]) <= d * 0.5f + fabsf(x[i]) * 1e-3f,
				      "q8_0 element %d: %g from %g, scale %g", i, y[i], x[i], d);
				CHECK((int8_t)b[2 + i % 32] == (int)roundf(y[i] / d) || d == 0,
				      "q8_0 element %d: code", i);
			} else {
				CHECK(y[i] == want, "%s element %d: %g, want %g", sf_kv_type_name(k), i,
				      y[i], want);
			}
		}
	}
	CHECK(sf_kv_row_bytes(SF_KV_Q8_0, 128) == 136 && sf_kv_row_bytes(SF_KV_F16, 128) == 256,
	      "row bytes");
	enum sf_kv_type t;
	CHECK(!sf_kv_type_parse("q8_0", &t) && t == SF_KV_Q8_0 && sf_kv_type_parse("q4_0", &t),
	      "type names");
}

/* q8_0 of a block too small for 1 / d (subnormal keys of a damaged
 * model's norm) stores codes 0 and reads back 0; a NaN or an infinity in
 * a block reads back as NaN over the block (its scale keeps it), where
 * the NaN was an out-of-range int8 conversion read back as a number. */
static void test_q8_extremes(void)
{
	enum { N = 64 };
	float x[N], y[N];
	uint8_t row[4 * N];

	for (int i = 0; i < N; i++)
		x[i] = i < 32 ? (i % 2 ? 1e-40f : -3e-41f) : gauss();
	sf_kv_put(row, SF_KV_Q8_0, x, N);
	sf_kv_widen_ref(y, row, SF_KV_Q8_0, 0, 0, 1, N);
	for (int i = 0; i < 32; i++)
		CHECK(y[i] == 0.0f && row[2 + i] == 0, "q8_0 subnormal element %d: %g, code %d", i,
		      y[i], (int8_t)row[2 + i]);
	for (int bad = 0; bad < 2; bad++) {
		x[40] = bad ? INFINITY : NAN;
		sf_kv_put(row, SF_KV_Q8_0, x, N);
		sf_kv_widen_ref(y, row, SF_KV_Q8_0, 0, 0, 1, N);
		for (int i = 32; i < N; i++)
			CHECK(isnan(y[i]), "q8_0 element %d of a block with %s: %g", i,
			      bad ? "inf" : "NaN", y[i]);
	}
}

/* n rows of every type, ld bytes apart, widened from element off: each
 * level equals the _ref. */
static void test_widen(enum sf_isa level)
{
	enum { N = 13, D = 96, LD = 4 * 160 };
	uint8_t rows[N * LD];
	float x[160], a[N * D], b[N * D];

	if (!sf_cpu_has(level))
		return;
	CHECK(sf_cpu_use(level) == 0, "select %s", sf_isa_name(level));
	for (int t = 0; t < 3; t++) {
		enum sf_kv_type k = (enum sf_kv_type)t;
		for (int p = 0; p < N; p++) {
			for (int i = 0; i < 160; i++)
				x[i] = gauss();
			sf_kv_put(rows + p * LD, k, x, 160);
		}
		for (size_t off = 0; off <= 64; off += 32) {
			size_t d = t == SF_KV_Q8_0 ? 96 - off : 96 - off / 2 - 3;
			sf_kv_widen(a, rows, k, LD, off, N, d);
			sf_kv_widen_ref(b, rows, k, LD, off, N, d);
			CHECK(!memcmp(a, b, N * d * sizeof(float)), "%s %s from %zu: differs from ref",
			      sf_isa_name(level), sf_kv_type_name(k), off);
		}
	}
	sf_cpu_use_best();
}

/* Tokens through mix4-1m with caches of each type against f32. */
static void test_forward(const struct sf_model *m)
{
	static const int32_t toks[] = { 1, 57, 300, 12, 900, 4, 4, 77, 501, 23, 8, 640 };
	enum { T = sizeof(toks) / sizeof(toks[0]) };
	struct sf_runstate s[4];
	struct sf_err e = { 0 };
	size_t vocab = (size_t)m->cfg.vocab_size;
	double worst[3] = { 0 };

	CHECK(!sf_state_init_batch(&s[0], &m->cfg, 32, 4, &e), "%s", e.msg);
	for (int t = 0; t < 3; t++) {
		struct sf_state_opts o = { .seq_len = 32, .batch = 4, .kv_k = (enum sf_kv_type)t,
					   .kv_v = (enum sf_kv_type)t, .last_logits = 1 };
		CHECK(!sf_state_init_opts(&s[1 + t], &m->cfg, &o, &e), "%s", e.msg);
	}
	for (int p = 0; p < T; p++) {
		float *ref = sf_forward(m, &s[0], toks[p], p);
		float *got[3];
		for (int t = 0; t < 3; t++)
			got[t] = sf_forward(m, &s[1 + t], toks[p], p);
		CHECK(ref && got[0] && !memcmp(ref, got[0], vocab * sizeof(float)),
		      "f32 cache at %d: not sf_state_init's floats", p);
		for (int t = 1; t < 3; t++)
			for (size_t v = 0; ref && got[t] && v < vocab; v++)
				worst[t] = fmax(worst[t], fabs((double)ref[v] - got[t][v]));
	}
	printf("logits off by at most: f16 %.3g, q8_0 %.3g\n", worst[1], worst[2]);
	/* one row of logits: a pass asking for every token's is refused */
	int32_t two[2] = { 5, 6 };
	CHECK(!sf_forward_batch(m, &s[1], two, 2, T, 1) && strstr(s[1].err.msg, "1 row of logits"),
	      "a pass of every token's logits on one row: %s", s[1].err.msg);
	CHECK(worst[1] > 0 && worst[1] < 0.01, "f16 cache: logits off by %g", worst[1]);
	CHECK(worst[2] > worst[1] && worst[2] < 0.1, "q8_0 cache: logits off by %g", worst[2]);
	for (int i = 0; i < 4; i++)
		sf_state_free(&s[i]);
}

static long rss_pages(void)
{
	long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f && fscanf(f, "%ld %ld", &size, &res) != 2)
		res = 0;
	if (f)
		fclose(f);
	return res;
}

static void test_lazy(const struct sf_model *m)
{
	struct sf_config c = m->cfg;
	struct sf_runstate s;
	struct sf_err e = { 0 };

	c.max_seq_len = 1 << 16;	/* 512 MiB of f32 cache */
	long before = rss_pages();
	struct sf_state_opts o = { .seq_len = c.max_seq_len, .batch = 1 };
	CHECK(!sf_state_init_opts(&s, &c, &o, &e), "%s", e.msg);
	long after = rss_pages();
	long page = sysconf(_SC_PAGESIZE);
	uint64_t kv = sf_state_kv_bytes(&c, c.max_seq_len, 1, SF_KV_F32, SF_KV_F32);
	/* under an emulator (make check ARCH=arm64 sets SF_EXEC) the resident
	 * set is the emulator's, whose bookkeeping grows with every mapping */
	if (*unit_env("SF_EXEC", ""))
		printf("lazy cache: resident pages not checked under %s\n", unit_env("SF_EXEC", ""));
	else
		CHECK((uint64_t)(after - before) * (uint64_t)page < kv / 64, "a %llu-byte cache "
		      "took %ld pages before any position", (unsigned long long)kv, after - before);
	sf_state_free(&s);
	c.head_dim = 48;
	o = (struct sf_state_opts){ .seq_len = 16, .batch = 1, .kv_k = SF_KV_F16, .kv_v = SF_KV_Q8_0 };
	CHECK(sf_state_init_opts(&s, &c, &o, &e) == SF_EUNSUPPORTED &&
	      strstr(e.msg, "q8_0: heads of 48 elements"), "q8_0 heads of 48: %s", e.msg);
}

int main(void)
{
	const char *root = unit_env("SF_ROOT", ".");
	char dir[4096];
	struct sf_model m;
	struct sf_err e = { 0 };

	test_round_trip();
	test_q8_extremes();
	for (int i = 0; i < SF_NISA; i++)
		test_widen((enum sf_isa)i);
	snprintf(dir, sizeof(dir), "%s/models/mix4-1m", root);
	if (sf_model_open(&m, dir, &e)) {
		fprintf(stderr, "%s\n", e.msg);
		return 1;
	}
	test_forward(&m);
	test_lazy(&m);
	sf_model_close(&m);
	return unit_exit();
}
