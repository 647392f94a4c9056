/* Co-activation statistics: the pair kernels against the portable one;
 * counts and pairs of traces against a brute-force recount (past one
 * 4096-token pass); merge(a, b) equal to both traces fed together, merge
 * associative, a --layers split merged equal to the whole; scores and
 * their token-weighted merge; overflow, other models, damaged files. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu.h"
#include "engine/select.h"
#include "formats/coact.h"
#include "formats/scores.h"
#include "base/pool.h"
#include "formats/trace.h"
#include "offline/coact.h"
#include "unit.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static const char *tmp;
static const uint32_t ENTRIES[SF_NKINDS] = { 40, 24, 40, 70 };
#define NLAYERS 3

// ----------------------------------------------------------------------------
// kernels

static void test_kernels(void)
{
	uint32_t n = 150;
	size_t stride = 64;
	uint64_t *bits = aligned_alloc(64, n * stride * 8);
	uint64_t np = sf_coact_npairs(n);
	uint32_t *ref = calloc(np, 4), *got = calloc(np, 4);

	for (size_t i = 0; i < n * stride; i++)
		bits[i] = next_rand() & next_rand();
	for (size_t words = 8; words <= stride; words += 56) {
		memset(ref, 0, np * 4);
		sf_coact_pairs_ref(bits, stride, words, n, 0, n, ref);
		/* spot check the reference itself */
		uint32_t c = 0;
		for (size_t w = 0; w < words; w++)
			c += (uint32_t)__builtin_popcountll(bits[3 * stride + w] & bits[77 * stride + w]);
		CHECK(ref[sf_coact_pair_index(n, 3, 77)] == c, "ref pair (3, 77)");
		/* every level this CPU has, and the kernel it runs there */
		for (int k = 0; k < SF_NISA; k++) {
			if (sf_cpu_use((enum sf_isa)k) == -ENOTSUP)
				continue;
			memset(got, 0, np * 4);
			/* in two row ranges, as the workers split it */
			sf_coact_pairs(bits, stride, words, n, 0, 64, got);
			sf_coact_pairs(bits, stride, words, n, 64, n, got);
			CHECK(memcmp(ref, got, np * 4) == 0, "%s pairs differ from ref (%zu words)",
			      sf_coact_kernel(), words);
		}
		sf_cpu_use_best();
	}
	free(bits);
	free(ref);
	free(got);
}

// ----------------------------------------------------------------------------
// synthetic traces, kept in memory for the recount

struct synth {
	char path[4096];
	int ntok;
	struct sf_trace_info info;
	uint64_t *rows;		/* (ntok, sum of words) */
	size_t stride;
	double *sums;		/* (sum of entries) what the trailer should hold */
};

/* Entries activate with skewed probabilities so that pairs differ. */
static void make_trace(struct synth *S, const char *name, const char *fingerprint,
		       const char *task, int ntok, int lo, int hi)
{
	struct sf_err e = { 0 };
	struct sf_trace_writer *w = NULL;
	json_t *meta = json_pack("{s:s}", "task", task);

	memset(S, 0, sizeof(*S));
	snprintf(S->path, sizeof(S->path), "%s/%s", tmp, name);
	S->ntok = ntok;
	struct sf_fingerprint fp;
	snprintf(fp.weights, sizeof(fp.weights), "%s", fingerprint);
	snprintf(fp.shape, sizeof(fp.shape), "%s", fingerprint);
	int ret = sf_trace_info_init(&S->info, &fp, NLAYERS, ENTRIES, 0, lo, hi, 0xf,
				     SF_TRACE_THRESHOLD, 0.5, meta, &e);
	json_decref(meta);
	CHECK(ret == 0, "%s", e.msg);
	FILE *f = fopen(S->path, "wb");
	ret = ret ? ret : sf_trace_writer_open(&w, f, S->path, &S->info, &e);
	CHECK(ret == 0, "%s", e.msg);
	size_t nent = 0;
	for (int s = 0; s < S->info.nslots; s++) {
		S->stride += S->info.slots[s].words;
		nent += S->info.slots[s].entries;
	}
	S->rows = calloc((size_t)ntok * S->stride, 8);
	S->sums = calloc(nent, sizeof(double));
	float x[128];
	for (int t = 0; !ret && t < ntok; t++) {
		uint64_t *tr = S->rows + (size_t)t * S->stride;
		double *sum = S->sums;
		for (int s = 0; s < S->info.nslots; s++) {
			const struct sf_trace_slot *sl = &S->info.slots[s];
			for (uint32_t i = 0; i < sl->entries; i++) {
				double u = (double)(next_rand() >> 11) / 9007199254740992.0;
				x[i] = (float)(u * (1.0 + (double)i / sl->entries));
				sum[i] += fabs((double)x[i]);
			}
			uint64_t *row = sf_trace_writer_row(w, s);
			sf_select_threshold(x, sl->entries, 0.5f, row);
			sf_select_abs_sum(x, sl->entries, sf_trace_writer_sums(w, s));
			memcpy(tr, row, sl->words * 8);
			tr += sl->words;
			sum += sl->entries;
		}
		ret = sf_trace_writer_token(w, &e);
		CHECK(ret == 0, "%s", e.msg);
	}
	ret = ret ? ret : sf_trace_writer_finish(w, &e);
	CHECK(ret == 0, "%s", e.msg);
	sf_trace_writer_free(w);
	fclose(f);
}

static void free_trace(struct synth *S)
{
	free(S->rows);
	free(S->sums);
	sf_trace_info_free(&S->info);
}

/* Statistics of traces fed in order, layers [lo, hi]. */
static int coact_of(struct sf_coact *c, struct synth *const *S, int n, int lo, int hi,
		    struct sf_pool *pool)
{
	struct sf_err e = { 0 };
	struct sf_trace_reader *r = NULL;
	int ret = sf_trace_open(&r, S[0]->path, &e);

	ret = ret ? ret : sf_coact_plan_trace(c, sf_trace_reader_info(r), S[0]->path, lo, hi, &e);
	ret = ret ? ret : sf_coact_alloc(c, 1, &e);
	c->pool = pool;
	for (int k = 0; k < n && !ret; k++) {
		if (k) {
			sf_trace_close(r);
			r = NULL;
			ret = sf_trace_open(&r, S[k]->path, &e);
		}
		ret = ret ? ret : sf_coact_add_trace(c, r, &e);
	}
	CHECK(ret == 0, "%s", e.msg);
	sf_trace_close(r);
	return ret;
}

static void recount(const struct synth *S, const struct sf_coact *c)
{
	int bad_counts = 0, bad_pairs = 0, bad_sums = 0;

	for (int cs = 0; cs < c->nslots; cs++) {
		const struct sf_coact_slot *sl = &c->slots[cs];
		int s = sf_trace_slot_index(&S->info, sl->layer, sl->group);
		size_t off = 0, soff = 0;
		for (int k = 0; k < s; k++) {
			off += S->info.slots[k].words;
			soff += S->info.slots[k].entries;
		}
		uint32_t n = sl->entries;
		CHECK(sl->tokens == (uint64_t)S->ntok, "slot tokens %llu", (unsigned long long)sl->tokens);
		for (uint32_t i = 0; i < n; i++) {
			uint64_t ci = 0;
			for (int t = 0; t < S->ntok; t++)
				ci += S->rows[(size_t)t * S->stride + off + i / 64] >> (i % 64) & 1;
			bad_counts += ci != sl->counts[i];
			bad_sums += sl->sums[i] != S->sums[soff + i];
			for (uint32_t j = i + 1; j < n; j++) {
				uint32_t cij = 0;
				for (int t = 0; t < S->ntok; t++) {
					const uint64_t *row = S->rows + (size_t)t * S->stride + off;
					cij += (row[i / 64] >> (i % 64) & 1) & (row[j / 64] >> (j % 64) & 1);
				}
				bad_pairs += cij != sl->pairs[sf_coact_pair_index(n, i, j)];
			}
		}
	}
	CHECK(bad_counts == 0 && bad_pairs == 0 && bad_sums == 0,
	      "recount: %d counts, %d pairs, %d sums differ", bad_counts, bad_pairs, bad_sums);
}

/* Exactly equal statistics (sums: exactly, or within tol relative). */
static int same(const struct sf_coact *a, const struct sf_coact *b, double tol)
{
	if (a->nslots != b->nslots)
		return 0;
	for (int s = 0; s < a->nslots; s++) {
		const struct sf_coact_slot *x = &a->slots[s], *y = &b->slots[s];
		if (x->layer != y->layer || x->group != y->group || x->tokens != y->tokens ||
		    memcmp(x->counts, y->counts, x->entries * 8) ||
		    memcmp(x->pairs, y->pairs, sf_coact_npairs(x->entries) * 4) ||
		    !json_equal(x->tasks, y->tasks))
			return 0;
		for (uint32_t i = 0; i < x->entries; i++)
			if (fabs(x->sums[i] - y->sums[i]) > tol * fabs(x->sums[i]))
				return 0;
	}
	return 1;
}

static void write_sfc(const struct sf_coact *c, const char *name, char *path)
{
	struct sf_err e = { 0 };
	snprintf(path, 4096, "%s/%s", tmp, name);
	FILE *f = fopen(path, "wb");
	int ret = sf_coact_write(c, f, path, NULL, &e);
	CHECK(ret == 0, "%s", e.msg);
	fclose(f);
}

/* Merge of .sfc files within [lo, hi]; the error code. */
static int merge(struct sf_coact *c, const char *const *paths, int n, int lo, int hi,
		 struct sf_err *e)
{
	struct sf_coact_file *f[8] = { 0 };
	int ret = 0;
	for (int k = 0; k < n && !ret; k++)
		ret = sf_coact_file_open(&f[k], paths[k], e);
	ret = ret ? ret : sf_coact_plan_files(c, f, n, lo, hi, e);
	ret = ret ? ret : sf_coact_alloc(c, 0, e);
	for (int k = 0; k < n && !ret; k++)
		ret = sf_coact_add_file(c, f[k], e);
	for (int k = 0; k < n; k++)
		sf_coact_file_close(f[k]);
	return ret;
}

static void test_statistics(struct sf_pool *pool)
{
	struct synth A, B, C, X;
	struct sf_coact ca = { 0 }, cab = { 0 }, cb = { 0 }, cc = { 0 }, m = { 0 };
	struct sf_err e = { 0 };
	char pa[4096], pb[4096], pc[4096], pab[4096], pbc[4096], plo[4096], phi[4096];

	/* A crosses one 4096-token pass; B and C are short */
	make_trace(&A, "a.sft", "00112233aabbccdd", "kjv", 4200, 0, NLAYERS - 1);
	make_trace(&B, "b.sft", "00112233aabbccdd", "man", 300, 0, NLAYERS - 1);
	make_trace(&C, "c.sft", "00112233aabbccdd", "kjv", 130, 0, NLAYERS - 1);

	struct synth *sa[] = { &A }, *sab[] = { &A, &B }, *sb[] = { &B }, *sc[] = { &C };
	if (coact_of(&ca, sa, 1, 0, 99, pool) || coact_of(&cab, sab, 2, 0, 99, pool) ||
	    coact_of(&cb, sb, 1, 0, 99, NULL) || coact_of(&cc, sc, 1, 0, 99, pool))
		goto out;
	recount(&A, &ca);
	recount(&B, &cb);

	/* merge(a, b) == a and b fed together, exactly */
	write_sfc(&ca, "a.sfc", pa);
	write_sfc(&cb, "b.sfc", pb);
	write_sfc(&cc, "c.sfc", pc);
	const char *ab[] = { pa, pb };
	CHECK(merge(&m, ab, 2, 0, 99, &e) == 0, "%s", e.msg);
	CHECK(same(&m, &cab, 0.0), "merge(a, b) differs from a and b fed together");
	json_t *t = json_object_get(m.slots[0].tasks, "man");
	CHECK(json_integer_value(t) == 300, "merged tasks");
	write_sfc(&m, "ab.sfc", pab);
	sf_coact_free(&m);

	/* associative: (a b) c == a (b c) */
	struct sf_coact m1 = { 0 }, m2 = { 0 }, bc = { 0 };
	const char *bcp[] = { pb, pc };
	CHECK(merge(&bc, bcp, 2, 0, 99, &e) == 0, "%s", e.msg);
	write_sfc(&bc, "bc.sfc", pbc);
	const char *left[] = { pab, pc }, *right[] = { pa, pbc };
	CHECK(merge(&m1, left, 2, 0, 99, &e) == 0, "%s", e.msg);
	CHECK(merge(&m2, right, 2, 0, 99, &e) == 0, "%s", e.msg);
	CHECK(same(&m1, &m2, 1e-12), "(a b) c differs from a (b c)");
	sf_coact_free(&m1);
	sf_coact_free(&m2);
	sf_coact_free(&bc);

	/* --layers split, then merged, equals the whole */
	struct sf_coact lo = { 0 }, hi = { 0 }, whole = { 0 };
	CHECK(coact_of(&lo, sab, 2, 0, 0, pool) == 0 && lo.nslots == 4, "layers 0-0");
	CHECK(coact_of(&hi, sab, 2, 1, 2, pool) == 0 && hi.nslots == 8, "layers 1-2");
	write_sfc(&lo, "lo.sfc", plo);
	write_sfc(&hi, "hi.sfc", phi);
	const char *split[] = { phi, plo };
	CHECK(merge(&whole, split, 2, 0, 99, &e) == 0, "%s", e.msg);
	CHECK(same(&whole, &cab, 0.0), "layers 0 and 1-2 merged differ from the whole");
	for (int s = 0; s < whole.nslots && s < cab.nslots; s++)
		CHECK(sf_coact_slot_crc(&whole.slots[s]) == sf_coact_slot_crc(&cab.slots[s]),
		      "slot %d checksum", s);
	sf_coact_free(&lo);
	sf_coact_free(&hi);
	sf_coact_free(&whole);

	/* loading one layer of a file */
	struct sf_coact one = { 0 };
	CHECK(sf_coact_load(&one, pab, 2, 2, &e) == 0 && one.nslots == 4 && one.slots[0].layer == 2,
	      "load layer 2: %s", e.msg);
	CHECK(memcmp(one.slots[3].pairs, cab.slots[11].pairs,
		     sf_coact_npairs(ENTRIES[3]) * 4) == 0, "loaded layer 2 ffn_out pairs");
	sf_coact_free(&one);

	/* scores: sums / tokens; merged scores weighted by tokens */
	json_t *sa_j = sf_scores_from_coact(&ca, &e), *sb_j = sf_scores_from_coact(&cb, &e), *merged = NULL;
	CHECK(sa_j && strcmp(json_string_value(json_object_get(sa_j, "kind")), "task") == 0 &&
	      strcmp(json_string_value(json_object_get(sa_j, "task")), "kjv") == 0, "task scores");
	json_t *s3 = json_array_get(json_object_get(sa_j, "slots"), 3);
	double score = json_real_value(json_array_get(json_object_get(s3, "scores"), 5));
	CHECK(score == ca.slots[3].sums[5] / 4200.0, "score %g, expected %g", score,
	      ca.slots[3].sums[5] / 4200.0);
	json_t *in[] = { sa_j, sb_j };
	const char *names[] = { "a.json", "b.json" };
	CHECK(sf_scores_merge(in, names, 2, &merged, &e) == 0, "%s", e.msg);
	json_t *ms3 = json_array_get(json_object_get(merged, "slots"), 3);
	double got = json_real_value(json_array_get(json_object_get(ms3, "scores"), 5));
	double want = cab.slots[3].sums[5] / 4500.0;
	CHECK(fabs(got - want) <= 1e-12 * want, "merged score %.17g, expected %.17g", got, want);
	CHECK(strcmp(json_string_value(json_object_get(merged, "kind")), "model") == 0 &&
	      json_integer_value(json_object_get(ms3, "tokens")) == 4500, "merged kind, tokens");
	json_object_set_new(sb_j, "fingerprint", json_string("ffffffffffffffff"));
	json_decref(merged);
	CHECK(sf_scores_merge(in, names, 2, &merged, &e) == SF_EMISMATCH &&
	      strcmp(e.msg, "b.json: scores of a look-alike of a.json (same shapes, other weights): "
		     "fingerprint ffffffffffffffff, expected 00112233aabbccdd") == 0, "%s", e.msg);
	json_decref(sa_j);
	json_decref(sb_j);

	/* another model: a trace and a .sfc */
	make_trace(&X, "x.sft", "ffeeddccbbaa9988", "kjv", 10, 0, NLAYERS - 1);
	struct sf_trace_reader *r = NULL;
	CHECK(sf_trace_open(&r, X.path, &e) == 0, "%s", e.msg);
	CHECK(r && sf_coact_add_trace(&ca, r, &e) == SF_EMISMATCH && strstr(e.msg, "trace of another model"),
	      "other model's trace: %s", e.msg);
	sf_trace_close(r);
	struct sf_coact cx = { 0 };
	char px[4096];
	struct synth *sx[] = { &X };
	if (!coact_of(&cx, sx, 1, 0, 99, NULL)) {
		write_sfc(&cx, "x.sfc", px);
		const char *ax[] = { pa, px };
		char want_msg[8300];
		snprintf(want_msg, sizeof(want_msg), "%s: counts of another model than %s: shape "
			 "fingerprint ffeeddccbbaa9988, expected 00112233aabbccdd", px, pa);
		CHECK(merge(&m, ax, 2, 0, 99, &e) == SF_EMISMATCH && strcmp(e.msg, want_msg) == 0,
		      "other model's .sfc: %s", e.msg);
	}
	sf_coact_free(&cx);
	free_trace(&X);

	/* 32-bit pair counts refused before they overflow */
	cc.slots[0].tokens = SF_COACT_MAX_TOKENS - 100;
	CHECK(sf_trace_open(&r, C.path, &e) == 0, "%s", e.msg);
	CHECK(r && sf_coact_add_trace(&cc, r, &e) == SF_ELIMIT && strstr(e.msg, "overflow"),
	      "overflow: %s", e.msg);
	sf_trace_close(r);

	/* a damaged .sfc */
	FILE *f = fopen(pab, "rb");
	static unsigned char buf[1 << 20];
	size_t n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	char bad[4096];
	snprintf(bad, sizeof(bad), "%s/bad.sfc", tmp);
	buf[n - 50] ^= 1;
	f = fopen(bad, "wb");
	fwrite(buf, 1, n, f);
	fclose(f);
	const char *pbad[] = { bad };
	CHECK(merge(&m, pbad, 1, 0, 99, &e) == SF_EFORMAT && strstr(e.msg, "checksum"),
	      "corrupted .sfc: %s", e.msg);
	f = fopen(bad, "wb");
	fwrite(buf, 1, n - 8, f);
	fclose(f);
	CHECK(merge(&m, pbad, 1, 0, 99, &e) == SF_EFORMAT && strstr(e.msg, "(truncated)"),
	      "truncated .sfc: %s", e.msg);
out:
	sf_coact_free(&m);
	sf_coact_free(&ca);
	sf_coact_free(&cab);
	sf_coact_free(&cb);
	sf_coact_free(&cc);
	free_trace(&A);
	free_trace(&B);
	free_trace(&C);
}

int main(void)
{
	struct sf_pool *pool = NULL;

	tmp = unit_env("SF_TMP", "/tmp");
	test_kernels();
	CHECK(sf_pool_create(&pool, 2) == 0, "pool");
	test_statistics(pool);
	sf_pool_destroy(pool);
	return unit_exit();
}
