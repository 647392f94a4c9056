/* Column records and .sfq files: bit packing at every length, records
 * decoding to the error the encoder reported, a column encoded alone
 * equal to the same column in its group, the decode-accumulate SIMD path
 * against _ref and against decode, .sfq round trip, merge, and corrupt
 * files refused. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/pool.h"
#include "engine/codes.h"
#include "engine/kernels.h"
#include "engine/cpu.h"
#include "formats/codes.h"
#include "offline/encode.h"
#include "base/bytes.h"
#include "unit.h"

static uint64_t rng = 7;
static double uniform(void)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return ((double)(rng >> 11) + 0.5) * 0x1p-53;
}
static float gauss(void)
{
	return (float)(sqrt(-2.0 * log(uniform())) * cos(2.0 * M_PI * uniform()));
}

static const size_t lengths[] = { 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 100, 255, 257 };
#define NLEN (sizeof(lengths) / sizeof(lengths[0]))

static void test_packing(void)
{
	for (size_t i = 0; i < NLEN; i++) {
		size_t m = lengths[i], nb = (m + 3) / 4;
		uint8_t c[260], back[260], packed[80];
		for (size_t t = 0; t < m; t++)
			c[t] = (uint8_t)(uniform() * 4) & 3;
		memset(packed, 0xaa, sizeof(packed));
		sf_codes_pack(c, m, packed);
		sf_codes_unpack(packed, m, back);
		CHECK(memcmp(c, back, m) == 0, "length %zu: unpack differs", m);
		CHECK(packed[nb] == 0xaa, "length %zu: wrote past %zu bytes", m, nb);
		/* unused low bits of the last byte are zero */
		if (m % 4)
			CHECK((packed[nb - 1] & ((1u << (2 * (4 - m % 4))) - 1)) == 0,
			      "length %zu: padding bits set", m);
		/* code 0 is the top two bits of byte 0 */
		CHECK((packed[0] >> 6) == c[0], "length %zu: code 0 not in bits 7-6", m);
		CHECK(sf_codes_col_bytes(SF_CODES_TRELLIS, m) == 2 + nb, "trellis bytes");
		CHECK(sf_codes_col_bytes(SF_CODES_SCALAR, m) == 4 + nb, "scalar bytes");
	}
}

static void test_records(const float *cb, enum sf_code_method method)
{
	struct sf_encoder *enc;
	struct sf_err e;
	CHECK(sf_encoder_init(&enc, method, cb, 300) == 0, "encoder");
	for (size_t i = 0; i < NLEN; i++) {
		size_t m = lengths[i], rb = sf_codes_col_bytes(method, m);
		float *w[SF_TRELLIS_LOCKSTEP], dec[260];
		uint8_t *rec[SF_TRELLIS_LOCKSTEP], again[90];
		double sse[SF_TRELLIS_LOCKSTEP];
		for (int k = 0; k < SF_TRELLIS_LOCKSTEP; k++) {
			w[k] = malloc(m * sizeof(float));
			rec[k] = malloc(rb);
			for (size_t t = 0; t < m; t++)
				w[k][t] = 0.02f * gauss();
		}
		CHECK(sf_encoder_run(enc, (const float *const *)w, SF_TRELLIS_LOCKSTEP, m, rec, sse, 0,
				     &e) == 0, "run: %s", e.msg);
		double dsum = 0, sssum = 0;
		for (int k = 0; k < SF_TRELLIS_LOCKSTEP; k++) {
			sf_codes_decode(method, cb, rec[k], m, dec);
			double d = 0, ss = 0;
			for (size_t t = 0; t < m; t++) {
				d += ((double)w[k][t] - dec[t]) * ((double)w[k][t] - dec[t]);
				ss += (double)w[k][t] * w[k][t];
			}
			CHECK(d == sse[k], "%s length %zu: decoded error %g, reported %g",
			      sf_codes_method_name(method), m, d, sse[k]);
			dsum += d;
			sssum += ss;
			/* the same column alone: the same bytes (deterministic, independent) */
			uint8_t *one[1] = { again };
			const float *wp[1] = { w[k] };
			CHECK(sf_encoder_run(enc, wp, 1, m, one, NULL, 0, &e) == 0, "run one");
			CHECK(memcmp(again, rec[k], rb) == 0, "%s length %zu: column alone differs",
			      sf_codes_method_name(method), m);
		}
		/* over all the columns: one column's error varies too much */
		CHECK(m < 200 || dsum / sssum < (method == SF_CODES_TRELLIS ? 0.09 : 0.14),
		      "%s length %zu: relative error %g", sf_codes_method_name(method), m,
		      dsum / sssum);
		for (int k = 0; k < SF_TRELLIS_LOCKSTEP; k++) {
			free(w[k]);
			free(rec[k]);
		}
	}
	/* a non-finite weight is refused with the column named */
	float bad[3] = { 1, NAN, 2 };
	const float *bp[1] = { bad };
	uint8_t br[8], *brp[1] = { br };
	CHECK(sf_encoder_run(enc, bp, 1, 3, brp, NULL, 41, &e) == SF_EFORMAT, "NaN accepted");
	CHECK(strcmp(e.msg, "column 41: weight 1 is nan") == 0, "message: %s", e.msg);
	sf_encoder_free(enc);
}

/* ncol columns of m N(0,1) weights encoded, one record every
 * sf_codes_col_bytes + 3 bytes (unaligned on purpose). */
static uint8_t *encode_gauss(const float *cb, enum sf_code_method method, size_t m, size_t ncol)
{
	size_t rb = sf_codes_col_bytes(method, m);
	struct sf_encoder *enc;
	struct sf_err e;
	uint8_t *recs = malloc(ncol * (rb + 3));
	float *w = malloc(m * sizeof(float));
	CHECK(sf_encoder_init(&enc, method, cb, m) == 0, "encoder");
	for (size_t j = 0; j < ncol; j++) {
		uint8_t *r[1] = { recs + j * (rb + 3) };
		const float *wp[1] = { w };
		for (size_t t = 0; t < m; t++)
			w[t] = gauss();
		CHECK(sf_encoder_run(enc, wp, 1, m, r, NULL, j, &e) == 0, "encode");
	}
	sf_encoder_free(enc);
	free(w);
	return recs;
}

/* decode-accumulate: SIMD equals _ref bit for bit, and equals the sum of
 * x * decode(column) within float rounding */
static void test_colaccum(const float *cb, enum sf_code_method method)
{
	for (size_t i = 0; i < NLEN; i++) {
		size_t m = lengths[i], rb = sf_codes_col_bytes(method, m), ncol = 9;
		uint8_t *recs = encode_gauss(cb, method, m, ncol);
		struct sf_codes_view v = { method, cb, m, recs, rb + 3 };
		uint32_t idx[4] = { 8, 0, 5, 3 };
		float xv[4] = { 0.5f, -1.25f, 2.0f, 0.125f };
		float *y = calloc(m, sizeof(float)), *yr = calloc(m, sizeof(float));
		float *dec = malloc(m * sizeof(float));
		double *yd = calloc(m, sizeof(double));
		for (size_t t = 0; t < m; t++)
			y[t] = yr[t] = (float)t * 0.01f;
		sf_codes_colaccum_ref(yr, &v, 0, m, idx, xv, 4);
		/* every SIMD path the machine has */
		for (enum sf_isa a = SF_ISA_REF; a < SF_NISA; a++) {
			if (!sf_cpu_has(a) || sf_cpu_use(a) != 0)
				continue;	/* not on this machine */
			for (size_t t = 0; t < m; t++)
				y[t] = (float)t * 0.01f;
			sf_codes_colaccum(y, &v, 0, m, idx, xv, 4);
			CHECK(memcmp(y, yr, m * sizeof(float)) == 0,
			      "%s, %s length %zu: SIMD differs from _ref", sf_isa_name(a),
			      sf_codes_method_name(method), m);
			/* the rows in three pieces, cut off any step boundary */
			size_t c1 = m / 3, c2 = m - m / 5;
			for (size_t t = 0; t < m; t++)
				y[t] = (float)t * 0.01f;
			sf_codes_colaccum(y, &v, c2, m, idx, xv, 4);
			sf_codes_colaccum(y, &v, 0, c1, idx, xv, 4);
			sf_codes_colaccum(y, &v, c1, c2, idx, xv, 4);
			CHECK(memcmp(y, yr, m * sizeof(float)) == 0,
			      "%s, %s length %zu: rows in pieces differ from _ref", sf_isa_name(a),
			      sf_codes_method_name(method), m);
			/* three tokens sharing the columns, rows in two pieces: each
			 * token's rows those of its own columns alone */
			{
				/* (4 columns, 8 padded tokens): which of the 3 chose each */
				static const uint32_t on[4][3] = { { 1, 0, 1 }, { 0, 1, 0 },
								   { 1, 1, 1 }, { 0, 0, 1 } };
				float X[4 * 8] = { 0 };
				uint32_t sel[4 * 8] = { 0 };
				for (int k = 0; k < 4; k++)
					for (int t = 0; t < 3; t++)
						if (on[k][t]) {
							sel[k * 8 + t] = ~0u;
							X[k * 8 + t] = 0.5f * (float)(k + 1) - (float)t;
						}
				float *Y = calloc(3 * m, sizeof(float)), *Y1 = calloc(3 * m, sizeof(float));
				sf_codes_colaccum_batch(Y, m, &v, c1, m, idx, X, sel, 8, 3, 4);
				sf_codes_colaccum_batch(Y, m, &v, 0, c1, idx, X, sel, 8, 3, 4);
				for (int t = 0; t < 3; t++)
					for (int k = 0; k < 4; k++)
						if (on[k][t])
							sf_codes_colaccum_ref(Y1 + t * m, &v, 0, m, idx + k,
									      X + k * 8 + t, 1);
				CHECK(memcmp(Y, Y1, 3 * m * sizeof(float)) == 0,
				      "%s, %s length %zu: batched differs from a token at a time",
				      sf_isa_name(a), sf_codes_method_name(method), m);
				free(Y);
				free(Y1);
			}
		}
		sf_cpu_use_best();
		/* the columns' factors, decoded once (calibration's way): the
		 * f32 column-accumulate over them gives the same floats */
		{
			float *vals = malloc(ncol * m * sizeof(float)), fac[9], xf[4];
			float *yf = malloc(m * sizeof(float));
			const void *cols[4];
			for (size_t j = 0; j < ncol; j++)
				fac[j] = sf_codes_factors(method, cb, recs + j * (rb + 3), m, vals + j * m);
			for (int k = 0; k < 4; k++) {
				xf[k] = xv[k] * fac[idx[k]];
				cols[k] = vals + idx[k] * m;
			}
			for (size_t t = 0; t < m; t++)
				yf[t] = (float)t * 0.01f;
			sf_colaccum(yf, m, cols, 0, SF_DTYPE_F32, xf, 4);
			CHECK(memcmp(yf, yr, m * sizeof(float)) == 0,
			      "%s length %zu: the decoded factors' column-accumulate differs",
			      sf_codes_method_name(method), m);
			free(vals);
			free(yf);
		}
		for (int k = 0; k < 4; k++) {
			sf_codes_decode(method, cb, recs + idx[k] * (rb + 3), m, dec);
			for (size_t t = 0; t < m; t++)
				yd[t] += (double)xv[k] * dec[t];
		}
		for (size_t t = 0; t < m; t++)
			CHECK(fabs(y[t] - ((double)t * 0.01f + yd[t])) < 1e-5, "%s length %zu: y[%zu] %g",
			      sf_codes_method_name(method), m, t, y[t]);
		free(recs);
		free(y);
		free(yr);
		free(yd);
		free(dec);
	}
}

/* The batched decode-accumulate at a pass's sizes: more columns than a
 * block of them (SF_STRIP_COLUMNS), more tokens than a register tile,
 * rows over several strips and a part one, cut in two pieces: every SIMD
 * path equals the _ref bit for bit. */
static void test_colaccum_blocks(const float *cb, enum sf_code_method method)
{
	size_t m = 133, rb = sf_codes_col_bytes(method, m), ncol = 9, n = 300, T = 19, ldx = 24;
	size_t cut = 37;
	uint8_t *recs = encode_gauss(cb, method, m, ncol);
	float *X = calloc(n * ldx, sizeof(float));
	float *Y = malloc(T * m * sizeof(float)), *Yr = malloc(T * m * sizeof(float));
	uint32_t *idx = malloc(n * 4), *sel = calloc(n * ldx, 4);
	for (size_t k = 0; k < n; k++) {
		idx[k] = (uint32_t)(uniform() * (double)ncol) % ncol;
		for (size_t t = 0; t < T; t++)
			if (uniform() < 0.6) {
				sel[k * ldx + t] = ~0u;
				X[k * ldx + t] = (float)gauss();
			}
	}
	struct sf_codes_view v = { method, cb, m, recs, rb + 3 };
	for (size_t i = 0; i < T * m; i++)
		Yr[i] = (float)i * 1e-3f;
	sf_codes_colaccum_batch_ref(Yr, m, &v, 0, m, idx, X, sel, ldx, T, n);
	for (enum sf_isa a = SF_ISA_REF; a < SF_NISA; a++) {
		if (!sf_cpu_has(a) || sf_cpu_use(a) != 0)
			continue;	/* not on this machine */
		for (size_t i = 0; i < T * m; i++)
			Y[i] = (float)i * 1e-3f;
		sf_codes_colaccum_batch(Y, m, &v, cut, m, idx, X, sel, ldx, T, n);
		sf_codes_colaccum_batch(Y, m, &v, 0, cut, idx, X, sel, ldx, T, n);
		CHECK(memcmp(Y, Yr, T * m * sizeof(float)) == 0,
		      "%s, %s: %zu columns of %zu tokens differ from _ref", sf_isa_name(a),
		      sf_codes_method_name(method), n, T);
	}
	sf_cpu_use_best();
	free(recs), free(X), free(Y), free(Yr), free(idx), free(sel);
}

static int write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	int ok = f && fwrite(p, 1, n, f) == n;
	return (f && fclose(f) == 0 && ok) ? 0 : -1;
}

static unsigned char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = malloc(1 << 22);
	*n = f ? fread(buf, 1, 1 << 22, f) : 0;
	if (f)
		fclose(f);
	return buf;
}

static int sink(void *arg, size_t i, const uint8_t *data, const struct sf_codes_stats *st,
		struct sf_err *e)
{
	(void)st;
	return sf_sfq_writer_section(arg, data, i == 0 ? 4352 : 0, e);
}

static void test_files(const char *root, const char *tmp)
{
	char dir[4096], path[4096], path2[4096], merged[4096], bad[4096];
	struct sf_model m;
	struct sf_err e;
	snprintf(dir, sizeof(dir), "%s/models/mix4-1m", root);
	if (sf_model_open(&m, dir, &e)) {
		CHECK(0, "model: %s", e.msg);
		return;
	}
	snprintf(path, sizeof(path), "%s/test_codes.%d.sfq", tmp, (int)getpid());
	snprintf(path2, sizeof(path2), "%s/test_codes.%d.b.sfq", tmp, (int)getpid());
	snprintf(merged, sizeof(merged), "%s/test_codes.%d.m.sfq", tmp, (int)getpid());
	snprintf(bad, sizeof(bad), "%s/test_codes.%d.bad.sfq", tmp, (int)getpid());

	/* layer 1 attn_out, trellis, through the group encoder with two workers */
	struct sf_sfq d = { 0 };
	d.fingerprint = m.fingerprint;
	d.method = SF_CODES_TRELLIS;
	d.seed = 1;
	sf_sfq_shape_of(&d.shape, &m.cfg);
	CHECK(posix_memalign((void **)&d.codebook, 64, SF_TRELLIS_CODEBOOK * 4) == 0, "alloc");
	sf_trellis_codebook(d.codebook, 1);
	struct sf_sfq_section secs[2];
	sf_sfq_section_init(&secs[0], d.method, &d.shape, 1, SF_GROUP_ATTN_OUT);
	d.sections = secs;
	d.nsections = 1;
	CHECK(secs[0].bytes == 4352, "attn_out section of %llu bytes", (unsigned long long)secs[0].bytes);

	struct sf_pool *pool;
	CHECK(sf_pool_create(&pool, 2) == 0, "pool");
	struct sf_sfq_writer *w;
	CHECK(sf_sfq_writer_open(&w, path, &d, NULL, &e) == 0, "writer: %s", e.msg);
	CHECK(sf_codes_encode_sections(&m, &d, pool, sink, w, &e) == 0, "encode: %s", e.msg);
	CHECK(sf_sfq_writer_close(w, &e) == 0, "close: %s", e.msg);

	struct sf_sfq q;
	CHECK(sf_sfq_open(&q, path, &e) == 0, "open: %s", e.msg);
	CHECK(sf_sfq_check_model(&q, path, &m, &e) == 0, "check: %s", e.msg);
	const struct sf_sfq_section *s = sf_sfq_find(&q, 1, SF_GROUP_ATTN_OUT);
	CHECK(s && !sf_sfq_find(&q, 0, SF_GROUP_ATTN_OUT), "find");
	CHECK(memcmp(q.codebook, d.codebook, SF_TRELLIS_CODEBOOK * 4) == 0, "codebook round trip");
	if (s) {
		/* column 37 of o, encoded alone, is the record in the file */
		struct sf_encoder *enc;
		float col[128];
		uint8_t rec[64], *rp[1] = { rec };
		const float *cp[1] = { col };
		const struct sf_weight *wo = &m.layers[1].wo;
		for (int r = 0; r < 128; r++) {
			const uint16_t *b = wo->data;
			col[r] = sf_bf16_to_f32(b[r * 128 + 37]);
		}
		CHECK(sf_encoder_init(&enc, SF_CODES_TRELLIS, q.codebook, 128) == 0, "encoder");
		CHECK(sf_encoder_run(enc, cp, 1, 128, rp, NULL, 37, &e) == 0, "run");
		CHECK(memcmp(rec, s->data + 37 * s->entry_bytes, s->entry_bytes) == 0,
		      "column 37 alone differs from the group's");
		sf_encoder_free(enc);
	}
	/* a second file with another section, then merge */
	sf_sfq_section_init(&secs[1], d.method, &d.shape, 0, SF_GROUP_ATTN_OUT);
	d.sections = &secs[1];
	CHECK(sf_sfq_writer_open(&w, path2, &d, NULL, &e) == 0, "writer: %s", e.msg);
	CHECK(sf_codes_encode_sections(&m, &d, NULL, sink, w, &e) == 0, "encode: %s", e.msg);
	CHECK(sf_sfq_writer_close(w, &e) == 0, "close: %s", e.msg);
	const char *in[2] = { path, path2 };
	CHECK(sf_sfq_merge(merged, in, 2, NULL, &e) == 0, "merge: %s", e.msg);
	struct sf_sfq mq;
	CHECK(sf_sfq_open(&mq, merged, &e) == 0, "open merged: %s", e.msg);
	CHECK(mq.nsections == 2 && mq.sections[0].layer == 0 && mq.sections[1].layer == 1,
	      "merged sections out of order");
	if (mq.nsections == 2 && s)
		CHECK(memcmp(mq.sections[1].data, s->data, s->bytes) == 0, "merged data differs");
	sf_sfq_close(&mq);
	/* merging a file with itself: the section is in two inputs */
	const char *twice[2] = { path, path };
	CHECK(sf_sfq_merge(merged, twice, 2, NULL, &e) == SF_EMISMATCH, "duplicate merged");
	/* the output may not be one of the inputs: refused before it is touched */
	const char *onto[1] = { merged };
	CHECK(sf_sfq_merge(merged, onto, 1, NULL, &e) == SF_EMISMATCH, "merged onto an input");
	CHECK(strstr(e.msg, "is also an input") != NULL, "merged onto an input: %s", e.msg);
	CHECK(sf_sfq_open(&mq, merged, &e) == 0 && mq.nsections == 2, "input damaged: %s", e.msg);
	sf_sfq_close(&mq);
	/* another model's codes: refused, and every input opened closed (LeakSanitizer) */
	char other[64];
	memcpy(d.fingerprint.weights, "0123456789abcdef", 17);
	CHECK(sf_sfq_writer_open(&w, path2, &d, NULL, &e) == 0, "writer: %s", e.msg);
	CHECK(sf_codes_encode_sections(&m, &d, NULL, sink, w, &e) == 0, "encode: %s", e.msg);
	CHECK(sf_sfq_writer_close(w, &e) == 0, "close: %s", e.msg);
	CHECK(sf_sfq_merge(merged, in, 2, NULL, &e) == SF_EMISMATCH, "another model's codes merged");
	snprintf(other, sizeof(other), "(same shapes, other weights): fingerprint 0123456789abcdef,");
	CHECK(strncmp(e.msg, path2, strlen(path2)) == 0 && strstr(e.msg, other), "message: %s",
	      e.msg);

	sf_sfq_close(&q);

	/* corrupt files */
	size_t n;
	unsigned char *buf = slurp(path, &n);
	CHECK(write_file(bad, buf, n - 100) == 0, "write");
	CHECK(sf_sfq_open(&q, bad, &e) == SF_EFORMAT, "truncated file accepted");
	CHECK(strstr(e.msg, "truncated?") != NULL, "truncated: %s", e.msg);
	buf[0] = 'X';
	CHECK(write_file(bad, buf, n) == 0, "write");
	CHECK(sf_sfq_open(&q, bad, &e) == SF_EFORMAT, "bad magic accepted");
	buf[0] = 'S';
	buf[8] = 9;
	CHECK(write_file(bad, buf, n) == 0, "write");
	CHECK(sf_sfq_open(&q, bad, &e) == SF_EUNSUPPORTED, "version 9 accepted");
	buf[8] = 2;	/* before the weights fingerprint: refused by version */
	CHECK(write_file(bad, buf, n) == 0, "write");
	CHECK(sf_sfq_open(&q, bad, &e) == SF_EUNSUPPORTED && strstr(e.msg, ": codes version 2, "
	      "expected 3: made before fingerprints covered the weights; make it again"),
	      "version 2: %s", e.msg);
	buf[8] = SF_SFQ_VERSION;
	/* a flipped byte in the codebook, a section, or the header's CRC */
	const char *damaged[3] = { "codebook", "layer 1 attn_out", "header" };
	uint64_t hl = sf_get_le64(buf + 16), dat = (24 + hl + 4 + 4095) / 4096 * 4096;
	size_t at[3] = { dat + 100, dat + 266240 + 1000, 24 + hl };
	for (int k = 0; k < 3; k++) {
		buf[at[k]] ^= 0x10;
		CHECK(write_file(bad, buf, n) == 0, "write");
		CHECK(sf_sfq_open(&q, bad, &e) == SF_EFORMAT && strstr(e.msg, damaged[k]) &&
		      strstr(e.msg, "the codes are damaged"), "%s flipped: %s", damaged[k], e.msg);
		buf[at[k]] ^= 0x10;
	}
	char *entries = memmem(buf, n, "\"entries\":128", 13);
	CHECK(entries != NULL, "entries in header");
	if (entries) {
		memcpy(entries, "\"entries\":129", 13);
		CHECK(write_file(bad, buf, n) == 0, "write");
		CHECK(sf_sfq_open(&q, bad, &e) == SF_EFORMAT, "wrong entries accepted");
	}
	CHECK(write_file(bad, buf, 10) == 0, "write");
	CHECK(sf_sfq_open(&q, bad, &e) == SF_EFORMAT, "short file accepted");
	free(buf);

	/* another model's fingerprint */
	memcpy(q.fingerprint.weights, "0123456789abcdef", 17);
	CHECK(sf_sfq_check_model(&q, path, &m, &e) == SF_EMISMATCH, "foreign codes accepted");
	sf_sfq_close(&q);
	sf_sfq_close(NULL);
	unlink(path);
	unlink(path2);
	unlink(merged);
	unlink(bad);
	free(d.codebook);
	sf_pool_destroy(pool);
	sf_model_close(&m);
}

int main(void)
{
	float *cb;
	CHECK(posix_memalign((void **)&cb, 64, SF_TRELLIS_CODEBOOK * sizeof(float)) == 0, "alloc");
	sf_trellis_codebook(cb, SF_TRELLIS_DEFAULT_SEED);
	test_packing();
	for (int k = 0; k < 2; k++) {
		test_records(cb, (enum sf_code_method)k);
		test_colaccum(cb, (enum sf_code_method)k);
		test_colaccum_blocks(cb, (enum sf_code_method)k);
	}
	test_files(unit_env("SF_ROOT", "."), unit_env("SF_TMP", "/tmp"));
	free(cb);
	return unit_exit();
}
