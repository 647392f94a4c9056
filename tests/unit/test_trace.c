/* Activation traces: top-k selection and |x| sums at every level against
 * a sort and the reference, the writer and reader round trip in both
 * encodings, the trace the recorder (offline/profile.h) makes of the
 * embedded model against an independent observer of the dense pass
 * (active sets and |value| sums), the same bytes with 1 and 2 threads,
 * and a truncated, corrupted or extended stream refused. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu.h"
#include "engine/forward.h"
#include "engine/select.h"
#include "formats/model.h"
#include "formats/trace.h"
#include "offline/profile.h"
#include "unit.h"

static const struct sf_fingerprint FP1 = { "0123456789abcdef", "0123456789abcdef" },
				   FP2 = { "00112233aabbccdd", "00112233aabbccdd" };

static uint64_t rng = 88172645463325252ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* The definition: k largest |x|, ties to the lower index, by sorting. */
static const float *sort_x;
static int by_mag(const void *a, const void *b)
{
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	float x = fabsf(sort_x[i]), y = fabsf(sort_x[j]);
	if (x != y)
		return x > y ? -1 : 1;
	return i < j ? -1 : 1;
}

static void brute_topk(const float *x, uint32_t n, uint32_t k, uint64_t *bits)
{
	uint32_t *idx = malloc(n * sizeof(*idx));
	for (uint32_t i = 0; i < n; i++)
		idx[i] = i;
	sort_x = x;
	qsort(idx, n, sizeof(*idx), by_mag);
	memset(bits, 0, (n + 63) / 64 * 8);
	for (uint32_t i = 0; i < k; i++)
		bits[idx[i] / 64] |= 1ull << (idx[i] % 64);
	free(idx);
}

/* The portable path and the one of every level this CPU has against the
 * sort, on values of every scale; the |x| sums of every level against the
 * portable ones, bit for bit. */
static void test_topk_level(enum sf_isa level)
{
	static const uint32_t sizes[] = { 1, 7, 15, 16, 17, 63, 64, 65, 128, 384, 1000 };
	float x[1000];
	uint64_t a[16], b[16], c[16];
	uint32_t scratch[2000];
	double sa[1000], sb[1000];
	const char *isa = sf_isa_name(level);

	for (size_t si = 0; si < sizeof(sizes) / sizeof(*sizes); si++) {
		uint32_t n = sizes[si];
		for (int rep = 0; rep < 40; rep++) {
			/* rep % 4: 1 few distinct magnitudes, so ties decide (steps
			 * of 0.5 or of 0.1f, whose last mantissa bit is set); 2 all
			 * equal; 3 spread over many exponents, zeros among them */
			float step = rep % 8 == 1 ? 0.5f : 0.1f;
			for (uint32_t i = 0; i < n; i++) {
				double u = (double)(next_rand() >> 11) / 9007199254740992.0;
				x[i] = rep % 4 == 1   ? (float)((int)(u * 5) - 2) * step
				       : rep % 4 == 2 ? -0.75f
				       : rep % 4 == 3 ? (float)(u < 0.1 ? 0.0 : ldexp(u - 0.5, (int)(u * 80) - 40))
						      : (float)(u * 2 - 1);
				sa[i] = sb[i] = (double)i / 3;
			}
			uint32_t k = (uint32_t)(next_rand() % (n + 1));
			sf_select_topk_ref(x, n, k, a, scratch);
			sf_select_topk(x, n, k, c, scratch);
			brute_topk(x, n, k, b);
			CHECK(memcmp(a, b, (n + 63) / 64 * 8) == 0, "top-%u of %u (rep %d) differs "
			      "from the sort", k, n, rep);
			CHECK(memcmp(c, b, (n + 63) / 64 * 8) == 0, "%s top-%u of %u (rep %d) "
			      "differs from the sort", isa, k, n, rep);
			/* the last rep with a non-finite value, which the largest
			 * key must reveal */
			if (rep == 39)
				x[n / 2] = si % 2 ? -INFINITY : NAN;
			uint32_t ka = sf_select_abs_sum_ref(x, n, sa);
			uint32_t kb = sf_select_abs_sum(x, n, sb);
			CHECK(ka == kb && memcmp(sa, sb, n * sizeof(double)) == 0,
			      "%s |x| sums of %u (rep %d) differ from the reference", isa, n, rep);
			CHECK((ka >= 0x7f800000u) == (rep == 39), "%s: largest key %x of %u (rep %d)",
			      isa, ka, n, rep);
		}
	}
}

static int rank_cmp(const void *a, const void *b, void *arg)
{
	const float *x = arg;
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	float u = fabsf(x[i]), v = fabsf(x[j]);
	if (u != v)
		return u > v ? -1 : 1;
	return i < j ? -1 : i > j;
}

/* sf_select_rank against a comparison sort, over the same kinds of
 * vectors as the top-k (ties, all equal, many exponents with zeros) and
 * -0 against +0 */
static void test_rank(void)
{
	static const uint32_t sizes[] = { 1, 2, 17, 256, 1000 };
	float x[1000];
	uint32_t got[1000], want[1000];
	uint64_t scratch[2000];

	for (size_t si = 0; si < sizeof(sizes) / sizeof(*sizes); si++)
		for (int rep = 0; rep < 8; rep++) {
			uint32_t n = sizes[si];
			for (uint32_t i = 0; i < n; i++) {
				double u = (double)(next_rand() >> 11) / 9007199254740992.0;
				x[i] = rep % 4 == 1   ? (float)((int)(u * 5) - 2) * 0.1f
				       : rep % 4 == 2 ? (i % 2 ? -0.0f : 0.0f)
				       : rep % 4 == 3 ? (float)(u < 0.1 ? 0.0 : ldexp(u - 0.5, (int)(u * 80) - 40))
						      : (float)(u * 2 - 1);
				want[i] = i;
			}
			qsort_r(want, n, sizeof(uint32_t), rank_cmp, x);
			sf_select_rank(x, n, got, scratch);
			CHECK(memcmp(got, want, n * sizeof(uint32_t)) == 0,
			      "the ranking of %u entries (rep %d) differs from the sort", n, rep);
		}
}

static void test_topk(void)
{
	for (int i = 0; i < SF_NISA; i++) {
		if (sf_cpu_use((enum sf_isa)i)) {
			fprintf(stderr, "test_trace: no %s here: not tested\n",
				sf_isa_name((enum sf_isa)i));
			continue;
		}
		test_topk_level((enum sf_isa)i);
	}
	sf_cpu_use_best();
	/* -0 and +0 tie in magnitude */
	float z[4] = { -0.0f, 0.0f, 1.0f, -1.0f };
	uint64_t a[1];
	uint32_t scratch[8];
	sf_select_topk(z, 4, 3, a, scratch);
	CHECK(a[0] == 0xd, "top-3 of {-0, 0, 1, -1}: bits %llx, expected d",
	      (unsigned long long)a[0]);
	sf_select_threshold(z, 4, 0.5f, a);
	CHECK(a[0] == 0xc, "threshold 0.5: bits %llx, expected c", (unsigned long long)a[0]);
	CHECK(sf_trace_density_k(0.3, 384) == 115 && sf_trace_density_k(0.5, 3) == 2 &&
	      sf_trace_density_k(1.0, 11008) == 11008, "round(D*n)");
}

static void test_info_errors(void)
{
	uint32_t entries[SF_NKINDS] = { 128, 128, 128, 384 };
	struct sf_trace_info info;
	struct sf_err e = { 0 };

	CHECK(sf_trace_info_init(&info, &FP1, 4, entries, 0, 0, 3, 15,
				 SF_TRACE_DENSITY, 1.5, NULL, &e) == -EINVAL,
	      "density 1.5 accepted");
	CHECK(strcmp(e.msg, "trace: density 1.5: expected a value in (0, 1]") == 0, "%s", e.msg);
	CHECK(sf_trace_info_init(&info, &FP1, 4, entries, 0, 0, 3, 15,
				 SF_TRACE_DENSITY, 0.001, NULL, &e) == -EINVAL,
	      "density selecting nothing accepted");
	CHECK(sf_trace_info_init(&info, &FP1, 4, entries, 0, 2, 4, 15,
				 SF_TRACE_DENSITY, 0.5, NULL, &e) == -EINVAL, "layer 4 of 4 accepted");
}

/* Writes ntok random tokens (rows with exactly k bits in density mode) to
 * path, keeping the rows in *rows (ntok, nslots, words). */
static int write_random(const char *path, double density, int ntok, uint64_t **rows_out,
			struct sf_trace_info *info)
{
	uint32_t entries[SF_NKINDS] = { 100, 64, 100, 700 };
	struct sf_err e = { 0 };
	struct sf_trace_writer *w = NULL;
	FILE *f = fopen(path, "wb");
	int ret = sf_trace_info_init(info, &FP2, 3, entries, 0, 1, 2, 0xb,
				     SF_TRACE_DENSITY, density, NULL, &e);
	CHECK(ret == 0, "info: %s", e.msg);
	if (ret || !f || (ret = sf_trace_writer_open(&w, f, path, info, &e))) {
		CHECK(0, "writer: %s", e.msg);
		return -1;
	}
	size_t stride = 0;
	for (int s = 0; s < info->nslots; s++)
		stride += info->slots[s].words;
	uint64_t *rows = calloc((size_t)ntok * stride, 8);
	for (int t = 0; t < ntok; t++) {
		uint64_t *tr = rows + (size_t)t * stride;
		for (int s = 0; s < info->nslots; s++) {
			const struct sf_trace_slot *sl = &info->slots[s];
			uint64_t *row = sf_trace_writer_row(w, s);
			for (uint32_t got = 0; got < sl->k;) {
				uint32_t i = (uint32_t)(next_rand() % sl->entries);
				if (!(row[i / 64] >> (i % 64) & 1)) {
					row[i / 64] |= 1ull << (i % 64);
					got++;
				}
			}
			memcpy(tr, row, sl->words * 8);
			tr += sl->words;
		}
		ret = sf_trace_writer_token(w, &e);
		CHECK(ret == 0, "token %d: %s", t, e.msg);
	}
	ret = sf_trace_writer_finish(w, &e);
	CHECK(ret == 0, "finish: %s", e.msg);
	sf_trace_writer_free(w);
	fclose(f);
	*rows_out = rows;
	return 0;
}

static void test_roundtrip(const char *tmp)
{
	static const double densities[] = { 0.3, 0.02 };	/* bitmaps; index lists for ffn_out */
	char path[4096];

	for (int d = 0; d < 2; d++) {
		struct sf_trace_info info;
		uint64_t *rows = NULL;
		snprintf(path, sizeof(path), "%s/roundtrip%d.sft", tmp, d);
		if (write_random(path, densities[d], 150, &rows, &info))
			return;
		CHECK(info.slots[2].encoding == (d ? SF_TRACE_INDEX : SF_TRACE_BITMAP),
		      "density %g: ffn_out encoding %d", densities[d], info.slots[2].encoding);

		struct sf_trace_reader *r = NULL;
		struct sf_err e = { 0 };
		uint32_t ntok;
		int ret = sf_trace_open(&r, path, &e), t = 0, bad = 0;
		CHECK(ret == 0, "open: %s", e.msg);
		if (ret) {
			free(rows);
			sf_trace_info_free(&info);
			return;
		}
		const struct sf_trace_info *ri = sf_trace_reader_info(r);
		CHECK(ri->nslots == 6 && ri->layer_lo == 1 && ri->layer_hi == 2 && ri->groups == 0xb,
		      "slots read back: %d, layers %d-%d", ri->nslots, ri->layer_lo, ri->layer_hi);
		size_t stride = 0;
		for (int s = 0; s < info.nslots; s++)
			stride += info.slots[s].words;
		while ((ret = sf_trace_next(r, &ntok, &e)) > 0) {
			for (uint32_t i = 0; i < ntok; i++, t++) {
				const uint64_t *tr = rows + (size_t)t * stride;
				for (int s = 0; s < ri->nslots; s++) {
					uint32_t wds = ri->slots[s].words;
					bad += memcmp(sf_trace_rows(r, s) + (size_t)i * wds, tr, wds * 8) != 0;
					tr += wds;
				}
			}
		}
		CHECK(ret == 0, "read: %s", e.msg);
		CHECK(t == 150 && sf_trace_tokens(r) == 150, "%d tokens read back", t);
		CHECK(bad == 0, "density %g: %d rows differ after the round trip", densities[d], bad);
		sf_trace_close(r);
		free(rows);
		sf_trace_info_free(&info);
	}
}

/* Inputs recorded through the profile's recorder (entries that are no
 * multiple of the SIMD width) read back as the sort's top-k and the
 * float64 sums, at every level this CPU has. */
static void test_record(const char *tmp)
{
	uint32_t entries[SF_NKINDS] = { 100, 64, 100, 700 };
	enum { NTOK = 70 };
	char path[4096];

	for (int v = 0; v < SF_NISA; v++) {
		if (sf_cpu_use((enum sf_isa)v))
			continue;
		const char *isa = sf_isa_name((enum sf_isa)v);
		struct sf_trace_info info;
		struct sf_trace_writer *w = NULL;
		struct sf_profile *p = NULL;
		struct sf_trace_reader *r = NULL;
		struct sf_err e = { 0 };
		uint64_t *rows = NULL;
		double *sums = NULL;
		float x[700];
		uint32_t ntok;
		int bad_rows = 0, bad_sums = 0, t = 0;
		size_t stride = 0, nent = 0;
		snprintf(path, sizeof(path), "%s/record-%s.sft", tmp, isa);
		FILE *f = fopen(path, "wb");
		int ret = sf_trace_info_init(&info, &FP2, 3, entries, 0, 0, 2, 0xf,
					     SF_TRACE_DENSITY, 0.3, NULL, &e);
		ret = ret ? ret : sf_trace_writer_open(&w, f, path, &info, &e);
		ret = ret ? ret : sf_profile_open(&p, w, NULL, 1, &e);
		CHECK(ret == 0 && f, "%s: %s", isa, e.msg);
		if (ret || !f)
			break;
		for (int s = 0; s < info.nslots; s++) {
			stride += info.slots[s].words;
			nent += info.slots[s].entries;
		}
		rows = calloc((size_t)NTOK * stride, 8);
		sums = calloc(nent, sizeof(double));
		for (int k = 0; !ret && k < NTOK; k++) {
			uint64_t *tr = rows + (size_t)k * stride;
			double *sum = sums;
			for (int s = 0; s < info.nslots; s++) {
				const struct sf_trace_slot *sl = &info.slots[s];
				for (uint32_t i = 0; i < sl->entries; i++) {
					double u = (double)(next_rand() >> 11) / 9007199254740992.0;
					x[i] = (float)ldexp(u - 0.5, (int)(next_rand() % 30) - 15);
					sum[i] += fabs((double)x[i]);
				}
				sf_profile_record(p, sl->layer, sl->group, x, 1, sl->entries);
				brute_topk(x, sl->entries, sl->k, tr);
				tr += sl->words;
				sum += sl->entries;
			}
			ret = sf_profile_tokens(p, 1, &e);
			CHECK(ret == 0, "%s: %s", isa, e.msg);
		}
		ret = ret ? ret : sf_trace_writer_finish(w, &e);
		CHECK(ret == 0, "%s: %s", isa, e.msg);
		sf_profile_free(p);
		sf_trace_writer_free(w);
		fclose(f);
		ret = ret ? ret : sf_trace_open(&r, path, &e);
		while (ret == 0 && (ret = sf_trace_next(r, &ntok, &e)) > 0) {
			ret = 0;
			for (uint32_t i = 0; i < ntok; i++, t++) {
				const uint64_t *tr = rows + (size_t)t * stride;
				for (int s = 0; s < info.nslots; s++) {
					uint32_t wds = info.slots[s].words;
					bad_rows += memcmp(sf_trace_rows(r, s) + (size_t)i * wds, tr,
							   wds * 8) != 0;
					tr += wds;
				}
			}
		}
		CHECK(ret == 0 && t == NTOK, "%s: %d tokens read: %s", isa, t, e.msg);
		const double *sum = sums;
		for (int s = 0; !ret && s < info.nslots; s++) {
			for (uint32_t i = 0; i < info.slots[s].entries; i++)
				bad_sums += sf_trace_sums(r, s)[i] != sum[i];
			sum += info.slots[s].entries;
		}
		CHECK(bad_rows == 0 && bad_sums == 0, "%s: %d rows and %d sums differ", isa,
		      bad_rows, bad_sums);
		sf_trace_close(r);
		free(rows);
		free(sums);
		sf_trace_info_free(&info);
	}
	sf_cpu_use_best();
}

/* One token of the experts test's trace: attn_in entries 0 and 2, the
 * experts of pick (npick of them) in each layer. */
static int put_experts_token(struct sf_trace_writer *w, const struct sf_trace_info *info,
			     const uint32_t *pick, int npick, struct sf_err *e)
{
	for (int s = 0; s < info->nslots; s++) {
		uint64_t *row = sf_trace_writer_row(w, s);
		if (info->slots[s].group != SF_GROUP_EXPERTS)
			row[0] = 0x5;
		for (int i = 0; info->slots[s].group == SF_GROUP_EXPERTS && i < npick; i++)
			row[pick[i] / 64] |= 1ull << (pick[i] % 64);
	}
	return sf_trace_writer_token(w, e);
}

/* Experts slots written and read directly: 1,024 experts 2 a token take
 * the index encoding; a token routed to 1 (a pick's weight underflowed)
 * is kept, one of 0 or 3 refused by the writer with its line; experts of
 * a dense model and ffn_in of a mixture refused. */
static void test_experts_slots(const char *tmp)
{
	uint32_t entries[SF_NKINDS] = { 16, 16, 16, 32, 1024 };
	static const uint32_t picks[3][2] = { { 3, 1000 }, { 7, 7 }, { 0, 1023 } };	/* 1 pick */
	static const uint32_t three[3] = { 0, 1, 2 };
	unsigned groups = 1u << SF_GROUP_ATTN_IN | 1u << SF_GROUP_EXPERTS;
	struct sf_trace_info info;
	struct sf_trace_writer *w = NULL;
	struct sf_trace_reader *r = NULL;
	struct sf_err e = { 0 };
	char path[4096], want[4200];
	uint32_t ntok;

	CHECK(sf_trace_info_init(&info, &FP1, 2, (uint32_t[SF_NKINDS]){ 16, 16, 16, 32, 0 }, 0,
				 0, 1, groups, SF_TRACE_DENSITY, 0.5, NULL, &e) == -EINVAL &&
	      !strcmp(e.msg, "trace: experts: the model is not a mixture of experts"), "%s", e.msg);
	CHECK(sf_trace_info_init(&info, &FP1, 2, entries, 2, 0, 1, 1u << SF_GROUP_FFN_IN,
				 SF_TRACE_DENSITY, 0.5, NULL, &e) == -EINVAL, "ffn_in of a mixture");
	if (sf_trace_info_init(&info, &FP1, 2, entries, 2, 0, 1, groups, SF_TRACE_THRESHOLD, 0.5,
			       NULL, &e)) {
		CHECK(0, "%s", e.msg);
		return;
	}
	CHECK(info.nslots == 4 && info.slots[1].group == SF_GROUP_EXPERTS && info.slots[1].k == 2 &&
	      info.slots[1].encoding == SF_TRACE_INDEX && info.slots[0].encoding == SF_TRACE_BITMAP,
	      "experts slot: k %u, encoding %d", info.slots[1].k, (int)info.slots[1].encoding);
	snprintf(path, sizeof(path), "%s/experts-slots.sft", tmp);
	FILE *f = fopen(path, "wb");
	int ret = f ? sf_trace_writer_open(&w, f, path, &info, &e) : -errno;
	for (int t = 0; !ret && t < 3; t++)
		ret = put_experts_token(w, &info, picks[t], 2, &e);
	CHECK(ret == 0, "%s", e.msg);
	for (int n = 0; !ret && n <= 3; n += 3) {
		snprintf(want, sizeof(want), "%s: token 3: layer 0 experts: %d picked, the router "
			 "picks 1 to 2", path, n);
		CHECK(put_experts_token(w, &info, three, n, &e) == -EINVAL && !strcmp(e.msg, want),
		      "%s", e.msg);
		for (int s = 0; s < info.nslots; s++)	/* the refused token's rows cleared */
			memset(sf_trace_writer_row(w, s), 0, (size_t)info.slots[s].words * 8);
	}
	ret = ret ? ret : sf_trace_writer_finish(w, &e);
	CHECK(ret == 0, "%s", e.msg);
	sf_trace_writer_free(w);
	if (f)
		fclose(f);
	ret = ret ? ret : sf_trace_open(&r, path, &e);
	int t = 0, bad = 0;
	while (ret == 0 && (ret = sf_trace_next(r, &ntok, &e)) > 0) {
		ret = 0;
		for (uint32_t i = 0; i < ntok; i++, t++)
			for (int s = 1; s < info.nslots; s += 2) {
				uint64_t want_row[16] = { 0 };
				for (int k = 0; k < 2; k++)
					want_row[picks[t][k] / 64] |= 1ull << (picks[t][k] % 64);
				bad += memcmp(sf_trace_rows(r, s) + (size_t)i * 16, want_row,
					      sizeof(want_row)) != 0;
			}
	}
	CHECK(ret == 0 && t == 3 && bad == 0, "%d tokens, %d experts rows differ: %s", t, bad,
	      e.msg);
	sf_trace_close(r);
	sf_trace_info_free(&info);
}

/* Reads the whole trace at path; the error code, with the message in e. */
static int read_all(const char *path, struct sf_err *e)
{
	struct sf_trace_reader *r = NULL;
	uint32_t ntok;
	int ret = sf_trace_open(&r, path, e);
	while (ret == 0 && (ret = sf_trace_next(r, &ntok, e)) > 0)
		ret = 0;
	sf_trace_close(r);
	return ret;
}

static void test_damage(const char *tmp)
{
	char path[4096], bad[4096];
	struct sf_trace_info info;
	uint64_t *rows = NULL;
	struct sf_err e = { 0 };

	snprintf(path, sizeof(path), "%s/damage.sft", tmp);
	snprintf(bad, sizeof(bad), "%s/damaged.sft", tmp);
	if (write_random(path, 0.3, 100, &rows, &info))
		return;
	free(rows);
	sf_trace_info_free(&info);
	FILE *f = fopen(path, "rb");
	unsigned char *buf = malloc(1 << 20);
	size_t n = fread(buf, 1, 1 << 20, f);
	fclose(f);

	/* truncated in the last block */
	f = fopen(bad, "wb");
	fwrite(buf, 1, n - 100, f);
	fclose(f);
	CHECK(read_all(bad, &e) == SF_EFORMAT && strstr(e.msg, "truncated at byte"),
	      "truncated trace: %s", e.msg);
	/* a flipped byte in the middle of the first block */
	buf[n / 3] ^= 0x10;
	f = fopen(bad, "wb");
	fwrite(buf, 1, n, f);
	fclose(f);
	CHECK(read_all(bad, &e) == SF_EFORMAT && strstr(e.msg, "checksum"),
	      "corrupted trace: %s", e.msg);
	buf[n / 3] ^= 0x10;
	/* bytes after the trailer */
	f = fopen(bad, "wb");
	fwrite(buf, 1, n, f);
	fputc(0, f);
	fclose(f);
	CHECK(read_all(bad, &e) == SF_EFORMAT && strstr(e.msg, "data after the sums trailer"),
	      "extended trace: %s", e.msg);
	/* not a trace */
	buf[0] = 'X';
	f = fopen(bad, "wb");
	fwrite(buf, 1, n, f);
	fclose(f);
	CHECK(read_all(bad, &e) == SF_EFORMAT && strstr(e.msg, "bad magic"), "magic: %s", e.msg);
	free(buf);
}

// ----------------------------------------------------------------------------
// the embedded model: the trace against an independent observer

struct witness {
	struct sf_trace_writer *w;
	struct sf_profile *p;
	const struct sf_trace_info *info;
	double **sums;		/* (nslots, entries) */
	uint64_t **rows;	/* (nslots) -> (max tokens, words) by brute force */
	int tokens;
	uint32_t calls;
};

static void witness_fn(void *ctx, int layer, enum sf_group g, const float *in, int T,
			size_t n)
{
	struct witness *W = ctx;
	int s = sf_trace_slot_index(W->info, layer, g);

	sf_profile_record(W->p, layer, g, in, T, n);
	W->calls += (uint32_t)T;
	if (s < 0)
		return;
	const struct sf_trace_slot *sl = &W->info->slots[s];
	for (int t = 0; t < T; t++, in += n) {
		for (size_t i = 0; i < n; i++)
			W->sums[s][i] += fabs((double)in[i]);
		brute_topk(in, (uint32_t)n, sl->k,
			   W->rows[s] + (size_t)(W->tokens + t) * sl->words);
	}
}

/* ntok token ids from a fixed pseudo-random stream (the same every call,
 * BOS at each window of ctx) through the forward pass in passes of batch
 * tokens, each pass's recording ended; *done counts the tokens before the
 * pass, for the witnesses. 0, or the first failure in e. */
static int profile_tokens(const struct sf_model *m, struct sf_runstate *st, struct sf_profile *p,
			  int ntok, int ctx, int batch, int *done, struct sf_err *e)
{
	int32_t *toks = malloc((size_t)ntok * sizeof(*toks));
	int ret = 0;

	if (!toks)
		return sf_err_set(e, -ENOMEM, "token ids: %s", sf_strerror(-ENOMEM));
	rng = 88172645463325252ull;
	for (int i = 0; i < ntok; i++)
		toks[i] = i % ctx == 0 ? 1 : (int32_t)(next_rand() % m->cfg.vocab_size);
	for (*done = 0; *done < ntok;) {
		int pos = *done % ctx, T = batch;
		T = T < ctx - pos ? T : ctx - pos;
		T = T < ntok - *done ? T : ntok - *done;
		sf_forward_batch(m, st, toks + *done, T, pos, 0);
		if ((ret = sf_state_error(st, e)) || (ret = sf_profile_tokens(p, T, e)))
			break;
		*done += T;
	}
	free(toks);
	return ret;
}

/* The trace of NTOK tokens written to path by a writer on a pool of
 * nthreads (the forward pass on it too), in passes of batch tokens,
 * checked against the witness. */
static void test_model(const char *root, const char *path, int nthreads, int batch)
{
	char dir[4096];
	struct sf_pool *pool = NULL;
	struct sf_model m = { 0 };
	struct sf_runstate st = { 0 };
	struct sf_err e = { 0 };
	struct sf_trace_info info = { 0 };
	uint32_t entries[SF_NKINDS] = { 0 }, experts_used = 0;
	enum { NTOK = 200, CTX = 64 };

	snprintf(dir, sizeof(dir), "%s/models/mix4-1m", root);
	if (sf_model_open(&m, dir, &e)) {
		CHECK(0, "%s", e.msg);
		return;
	}
	sf_trace_model_entries(&m.cfg, entries, &experts_used);
	/* layers 1-3, three groups: the observer must skip what is not recorded */
	int ret = sf_trace_info_init(&info, &m.fingerprint, m.cfg.n_layers, entries,
				     experts_used, 1, 3, 0xd, SF_TRACE_DENSITY, 0.25, NULL, &e);
	CHECK(ret == 0, "%s", e.msg);
	ret = ret ? ret : sf_state_init_batch(&st, &m.cfg, CTX, batch < CTX ? batch : CTX, &e);
	CHECK(ret == 0, "%s", e.msg);
	FILE *f = fopen(path, "wb");
	struct witness W = { .info = &info };
	if (!ret)
		ret = sf_trace_writer_open(&W.w, f, path, &info, &e);
	CHECK(ret == 0, "%s", e.msg);
	if (!ret && (ret = sf_pool_create(&pool, nthreads)))
		CHECK(0, "pool of %d: %d", nthreads, ret);
	if (!ret && (ret = sf_profile_open(&W.p, W.w, pool, batch, &e)))
		CHECK(0, "%s", e.msg);
	if (ret)
		goto out;
	W.sums = calloc((size_t)info.nslots, sizeof(*W.sums));
	W.rows = calloc((size_t)info.nslots, sizeof(*W.rows));
	for (int s = 0; s < info.nslots; s++) {
		W.sums[s] = calloc(info.slots[s].entries, sizeof(double));
		W.rows[s] = calloc((size_t)NTOK * info.slots[s].words, 8);
	}
	struct sf_observer obs = { .fn = witness_fn, .ctx = &W, .tokens = batch };
	st.observer = &obs;
	st.pool = pool;
	st.skip_logits = 1;
	ret = profile_tokens(&m, &st, W.p, NTOK, CTX, batch, &W.tokens, &e);
	CHECK(ret == 0, "%s", e.msg);
	CHECK(W.calls == (uint32_t)NTOK * m.cfg.n_layers * SF_NGROUPS, "observer saw %u groups",
	      W.calls);
	ret = sf_trace_writer_finish(W.w, &e);
	CHECK(ret == 0, "%s", e.msg);
	fclose(f);
	f = NULL;

	struct sf_trace_reader *r = NULL;
	uint32_t ntok;
	int t = 0, bad_rows = 0, bad_k = 0, bad_sums = 0;
	ret = sf_trace_open(&r, path, &e);
	CHECK(ret == 0, "%s", e.msg);
	while (ret == 0 && (ret = sf_trace_next(r, &ntok, &e)) > 0) {
		ret = 0;
		for (int s = 0; s < info.nslots; s++) {
			const struct sf_trace_slot *sl = &info.slots[s];
			for (uint32_t i = 0; i < ntok; i++) {
				const uint64_t *row = sf_trace_rows(r, s) + (size_t)i * sl->words;
				uint32_t c = 0;
				for (uint32_t w = 0; w < sl->words; w++)
					c += (uint32_t)__builtin_popcountll(row[w]);
				bad_k += c != (uint32_t)floor(0.25 * sl->entries + 0.5);
				bad_rows += memcmp(row, W.rows[s] + (size_t)(t + i) * sl->words,
						   sl->words * 8) != 0;
			}
		}
		t += (int)ntok;
	}
	CHECK(ret == 0, "%s", e.msg);
	CHECK(t == NTOK, "%d tokens in the trace", t);
	CHECK(bad_k == 0, "%d active sets without round(0.25 n) entries", bad_k);
	CHECK(bad_rows == 0, "%s, %d threads: %d active sets differ from the brute-force top-k",
	      sf_isa_name(sf_cpu_isa()), nthreads, bad_rows);
	for (int s = 0; !ret && s < info.nslots; s++)
		for (uint32_t i = 0; i < info.slots[s].entries; i++)
			bad_sums += sf_trace_sums(r, s)[i] != W.sums[s][i];
	CHECK(bad_sums == 0, "%s, %d threads: %d |value| sums differ from the observer's",
	      sf_isa_name(sf_cpu_isa()), nthreads, bad_sums);
	sf_trace_close(r);
	for (int s = 0; s < info.nslots; s++) {
		free(W.sums[s]);
		free(W.rows[s]);
	}
	free(W.sums);
	free(W.rows);
out:
	if (f)
		fclose(f);
	sf_profile_free(W.p);
	sf_trace_writer_free(W.w);
	sf_pool_destroy(pool);
	sf_trace_info_free(&info);
	sf_state_free(&st);
	sf_model_close(&m);
}

/* The whole file, or NULL; *n its size. */
static unsigned char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = NULL;
	long len;

	if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (buf = malloc((size_t)len)) && fread(buf, 1, (size_t)len, f) != (size_t)len) {
		free(buf);
		buf = NULL;
	}
	*n = buf ? (size_t)len : 0;
	if (f)
		fclose(f);
	return buf;
}

// --- a mixture's experts slots (a Mixtral by mkmodel, when the fixture is built)

/* What the decoder is handed: the routes of each pass as sf-run's exec
 * gets them (sf_group_exec.experts), its picks and weights, per layer. */
struct routes_witness {
	int n_layers, ne, tokens;	/* tokens before this pass */
	uint64_t *picks;	/* (n_layers, tokens) bit e: expert e picked */
	double *sums;		/* (n_layers, ne) sum of the weights */
	int dense_ffn;		/* ffn_in or ffn_out observed */
	struct sf_profile *p;
};

static void routes_exec(void *ctx, int layer, const float *route, int T)
{
	struct routes_witness *W = ctx;
	for (int t = 0; t < T; t++)
		for (int x = 0; x < W->ne; x++) {
			float r = route[(size_t)t * W->ne + x];
			W->sums[layer * W->ne + x] += r;
			if (r != 0.0f)
				W->picks[(size_t)layer * 4096 + W->tokens + t] |= 1ull << x;
		}
}

static void groups_fn(void *ctx, int layer, enum sf_group g, const float *in, int T, size_t n)
{
	struct routes_witness *W = ctx;
	W->dense_ffn |= g == SF_GROUP_FFN_IN || g == SF_GROUP_FFN_OUT;
	sf_profile_record(W->p, layer, g, in, T, n);
}

static void routes_fn(void *ctx, int layer, const float *route, int T, size_t n)
{
	struct routes_witness *W = ctx;
	sf_profile_record(W->p, layer, SF_GROUP_EXPERTS, route, T, n);
}

/* A random Mixtral of 4 experts, 2 a token, profiled in passes of batch
 * tokens: its experts slots hold exactly the experts the decoder's exec
 * is handed for each token, their sums the routes' weights; no dense FFN
 * group is observed; a density of 0.5 leaves the experts' k at 2. The
 * trace written to path. */
static void test_experts_batch(const char *dir, const char *path, int batch)
{
	enum { NTOK = 150, CTX = 64 };
	struct sf_model m = { 0 };
	struct sf_runstate st = { 0 };
	struct sf_err e = { 0 };
	struct sf_trace_info info = { 0 };
	struct sf_trace_writer *w = NULL;
	uint32_t entries[SF_NKINDS], used;
	FILE *f = NULL;
	int ret;

	if ((ret = sf_model_open(&m, dir, &e))) {
		CHECK(0, "%s", e.msg);
		return;
	}
	sf_trace_model_entries(&m.cfg, entries, &used);
	CHECK(entries[SF_GROUP_EXPERTS] == 4 && used == 2, "experts %u, used %u",
	      entries[SF_GROUP_EXPERTS], used);
	CHECK(sf_trace_info_init(&info, &m.fingerprint, m.cfg.n_layers, entries, used, 0, 1,
				 1u << SF_GROUP_FFN_OUT, SF_TRACE_DENSITY, 0.5, NULL, &e) == -EINVAL &&
	      strstr(e.msg, "ffn_out: a mixture of experts has no dense FFN"), "%s", e.msg);
	ret = sf_trace_info_init(&info, &m.fingerprint, m.cfg.n_layers, entries, used, 0, 1,
				 sf_trace_model_groups(&m.cfg), SF_TRACE_DENSITY, 0.5, NULL, &e);
	CHECK(ret == 0, "%s", e.msg);
	ret = ret ? ret : sf_state_init_batch(&st, &m.cfg, CTX, batch, &e);
	CHECK(ret == 0, "%s", e.msg);
	struct routes_witness W = { .n_layers = m.cfg.n_layers, .ne = 4 };
	W.picks = calloc((size_t)m.cfg.n_layers * 4096, sizeof(*W.picks));
	W.sums = calloc((size_t)m.cfg.n_layers * 4, sizeof(*W.sums));
	if (!ret && !(f = fopen(path, "wb")))
		ret = -errno;
	if (!ret && ((ret = sf_trace_writer_open(&w, f, path, &info, &e)) ||
		     (ret = sf_profile_open(&W.p, w, NULL, batch, &e))))
		CHECK(0, "%s", e.msg);
	if (ret)
		goto out;
	struct sf_observer obs = { .fn = groups_fn, .routes = routes_fn, .ctx = &W,
				   .tokens = batch };
	struct sf_group_exec ex = { .experts = routes_exec, .ctx = &W, .tokens = batch };
	st.observer = &obs;
	st.exec = &ex;
	st.skip_logits = 1;
	ret = profile_tokens(&m, &st, W.p, NTOK, CTX, batch, &W.tokens, &e);
	CHECK(ret == 0, "%s", e.msg);
	CHECK(!W.dense_ffn, "a mixture's ffn_in or ffn_out observed");
	CHECK(!sf_trace_writer_finish(w, &e), "%s", e.msg);
	fclose(f);
	f = NULL;

	struct sf_trace_reader *r = NULL;
	uint32_t ntok;
	int t = 0, bad = 0, two = 0;
	ret = sf_trace_open(&r, path, &e);
	CHECK(ret == 0, "%s", e.msg);
	while (ret == 0 && (ret = sf_trace_next(r, &ntok, &e)) > 0) {
		ret = 0;
		for (int l = 0; l < m.cfg.n_layers; l++) {
			int s = sf_trace_slot_index(&info, l, SF_GROUP_EXPERTS);
			for (uint32_t i = 0; i < ntok; i++) {
				uint64_t row = sf_trace_rows(r, s)[i];
				bad += row != W.picks[(size_t)l * 4096 + t + i];
				two += __builtin_popcountll(row) == 2;
			}
		}
		t += (int)ntok;
	}
	CHECK(ret == 0, "%s", e.msg);
	CHECK(t == NTOK && two == NTOK * m.cfg.n_layers, "%d tokens, %d of 2 picks", t, two);
	CHECK(bad == 0, "batch %d: %d tokens' experts differ from the decoder's routes", batch,
	      bad);
	for (int l = 0; !ret && l < m.cfg.n_layers; l++)
		for (int x = 0; x < 4; x++) {
			double got = sf_trace_sums(r, sf_trace_slot_index(&info, l, SF_GROUP_EXPERTS))[x];
			CHECK(fabs(got - W.sums[l * 4 + x]) <= 1e-9 * W.sums[l * 4 + x],
			      "layer %d expert %d: weights sum %.17g, the routes' %.17g", l, x, got,
			      W.sums[l * 4 + x]);
		}
	sf_trace_close(r);
out:
	if (f)
		fclose(f);
	free(W.picks);
	free(W.sums);
	sf_profile_free(W.p);
	sf_trace_writer_free(w);
	sf_trace_info_free(&info);
	sf_state_free(&st);
	sf_model_close(&m);
}

/* The experts slots of one token a pass and of 7: the same bytes. */
static void test_experts(const char *root, const char *tmp)
{
	char args[4400], dir[4200], one[4096], seven[4096];

	snprintf(args, sizeof(args), "--arch mixtral --experts 4 --experts-used 2 --hidden 64 "
		 "--intermediate 96 --heads 4 --kv-heads 2 --layers 2 --vocab 300 --seed 5 "
		 "--tokenizer '%s/models/mix4-1m'", root);
	if (unit_mkmodel(tmp, "trace-mixtral", args, dir, sizeof(dir), "traces of experts"))
		return;
	snprintf(one, sizeof(one), "%s/experts-1.sft", tmp);
	snprintf(seven, sizeof(seven), "%s/experts-7.sft", tmp);
	test_experts_batch(dir, one, 1);
	test_experts_batch(dir, seven, 7);
	size_t n1, n7;
	unsigned char *a = slurp(one, &n1), *b = slurp(seven, &n7);
	CHECK(a && b && n1 == n7 && !memcmp(a, b, n1), "experts traces of -b 1 and 7 differ");
	free(a);
	free(b);
}

/* At every level this CPU has (each checked by the witness), the trace
 * bytes depend neither on how many threads selected them nor on the
 * tokens of a forward pass. */
static void test_model_threads(const char *root, const char *tmp)
{
	static const struct { int threads, batch; } runs[] = {
		{ 1, 1 }, { 2, 1 }, { 2, 2 }, { 3, 7 }, { 1, 64 }, { 2, 300 },
	};
	char one[4096], other[4096];

	for (int i = 0; i < SF_NISA; i++) {
		const char *isa = sf_isa_name((enum sf_isa)i);
		if (sf_cpu_use((enum sf_isa)i))
			continue;	/* said in test_topk */
		snprintf(one, sizeof(one), "%s/model-%s-1.sft", tmp, isa);
		snprintf(other, sizeof(other), "%s/model-%s-n.sft", tmp, isa);
		test_model(root, one, runs[0].threads, runs[0].batch);
		size_t n1, n2;
		unsigned char *a = slurp(one, &n1);
		for (size_t r = 1; r < sizeof(runs) / sizeof(runs[0]); r++) {
			test_model(root, other, runs[r].threads, runs[r].batch);
			unsigned char *b = slurp(other, &n2);
			CHECK(a && b && n1 == n2 && memcmp(a, b, n1) == 0,
			      "%s: the trace of %d threads in passes of %d differs from one thread's "
			      "a token at a time (%zu and %zu bytes)", isa, runs[r].threads,
			      runs[r].batch, n2, n1);
			free(b);
		}
		free(a);
	}
	sf_cpu_use_best();
}

int main(void)
{
	const char *root = unit_env("SF_ROOT", ".");
	const char *tmp = unit_env("SF_TMP", "/tmp");

	test_topk();
	test_rank();
	test_info_errors();
	test_roundtrip(tmp);
	test_damage(tmp);
	test_record(tmp);
	test_experts_slots(tmp);
	test_model_threads(root, tmp);
	test_experts(root, tmp);
	return unit_exit();
}
