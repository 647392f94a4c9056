/* sf-serve's continuous batching against sf-run, bit for bit: eight
 * requests in four slots, run as sf-serve's decoder runs them (each
 * prompt in passes of its own, every slot past its prompt one token in a
 * pass of all of them through sf_forward_multi, prompts of 1 to 525
 * tokens starting at different rounds, slots reused with a prefix of the
 * request before kept in their f16 KV cache and its longer tail left
 * there), and each alone as sf-run runs it (the prompt in passes, then
 * one token a pass): every row of logits the same floats. On the
 * embedded mix4-1m in RAM, and from images of it as sf-serve decodes
 * them: BF16, q8 and q4 top tiers, every group held in RAM at budget 1
 * and with two tiers, and two tiers read from flash. SF_MODEL=DIR runs
 * the dense part on another model (the TinyLlama-shape one of
 * docs/RESULTS.md). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/pool.h"
#include "base/rng.h"
#include "engine/forward.h"
#include "formats/image.h"
#include "formats/model.h"
#include "imagetest.h"
#include "online/sparse.h"
#include "online/uring.h"
#include "unit.h"

/* 600 positions: job 3 and job 7 after it cross the 512 positions of an
 * f16 KV cache's chunk in attention (mix4-1m's heads of 32) */
enum { SEQ_LEN = 600, BATCH = 8, SLOTS = 4, JOBS = 8, ROUNDS = 200 };

/* A request: its tokens (prompt, then the tokens fed after it), the slot
 * it takes at round start, and how many of its first tokens that slot's
 * KV cache holds from the request before. */
struct job {
	int id, nprompt, ntok, slot, start, reused;
};

static const struct job jobs[JOBS] = {
	{ 0, 3, 20, 0, 0, 0 },	{ 1, 17, 12, 1, 0, 0 }, { 2, 1, 30, 2, 2, 0 },
	{ 3, 509, 7, 3, 1, 0 },	{ 4, 12, 10, 0, 30, 10 }, { 5, 5, 8, 1, 40, 3 },
	{ 6, 2, 9, 2, 45, 1 },	{ 7, 525, 6, 3, 90, 505 },
};

static int32_t ids[JOBS][SEQ_LEN];

/* One engine as a command holds it: the model, and from an image the
 * sparse decoder every state of the command shares. */
struct engine {
	const struct sf_model *m;
	struct sf_sparse *sp;
	struct sf_pool *pool;
};

static int state(const struct engine *en, struct sf_runstate *s, int batch, int last)
{
	struct sf_err e = { 0 };
	struct sf_state_opts o = { .seq_len = SEQ_LEN, .batch = batch, .kv_k = SF_KV_F16,
				   .kv_v = SF_KV_F16, .last_logits = last };
	int ret = sf_state_init_opts(s, &en->m->cfg, &o, &e);
	CHECK(!ret, "%s", e.msg);
	s->pool = en->pool;
	s->exec = en->sp ? sf_sparse_exec(en->sp) : NULL;
	return ret;
}

/* The prompt's next pass of a slot (BATCH tokens at most) from at; its
 * logits when it ends the prompt, else NULL. */
static const float *prompt_pass(const struct engine *en, struct sf_runstate *s,
				const struct job *j, int *at)
{
	int T = j->nprompt - *at < BATCH ? j->nprompt - *at : BATCH;
	s->skip_logits = *at + T < j->nprompt;
	const float *l = sf_forward_batch(en->m, s, ids[j->id] + *at, T, *at, 0);
	*at += T;
	return l;
}

/* sf-run: the logits after the prompt and after each token fed,
 * (ntok + 1, vocab). */
static float *alone(const struct engine *en, const struct job *j)
{
	size_t vocab = (size_t)en->m->cfg.vocab_size;
	float *out = calloc((size_t)(j->ntok + 1) * vocab, sizeof(float));
	struct sf_runstate s;
	const float *l = NULL;
	int at = 0;

	if (state(en, &s, BATCH, 1))
		return out;
	while (at < j->nprompt)
		l = prompt_pass(en, &s, j, &at);
	for (int i = 0; l && i <= j->ntok; i++) {
		memcpy(out + (size_t)i * vocab, l, vocab * sizeof(float));
		if (i < j->ntok)
			l = sf_forward(en->m, &s, ids[j->id][j->nprompt + i], j->nprompt + i);
	}
	CHECK(l != NULL, "job %d alone: a pass failed", j->id);
	sf_state_free(&s);
	return out;
}

/* sf-serve: the rounds of its decoder; the rows whose logits differ
 * from the job's alone. */
static int served(const struct engine *en, float *const *want, const char *what)
{
	size_t vocab = (size_t)en->m->cfg.vocab_size;
	struct sf_runstate slot[SLOTS], pass, *seqs[SLOTS];
	int cur[SLOTS], at[SLOTS], made[SLOTS], pos[SLOTS], who[SLOTS], bad = 0;
	int32_t tok[SLOTS];

	for (int i = 0; i < SLOTS; i++) {
		state(en, &slot[i], BATCH, 1);
		cur[i] = -1;
	}
	state(en, &pass, SLOTS, 0);
	for (int round = 0; round < ROUNDS; round++) {
		int n = 0;
		for (int k = 0; k < JOBS; k++)
			if (jobs[k].start == round) {
				int sl = jobs[k].slot;
				CHECK(cur[sl] < 0, "%s: slot %d busy at round %d", what, sl, round);
				cur[sl] = k;
				at[sl] = jobs[k].reused;
				made[sl] = 0;
			}
		for (int sl = 0; sl < SLOTS; sl++) {
			const struct job *j = cur[sl] < 0 ? NULL : &jobs[cur[sl]];
			if (j && at[sl] < j->nprompt) {
				const float *l = prompt_pass(en, &slot[sl], j, &at[sl]);
				if (l && memcmp(l, want[j->id], vocab * sizeof(float)))
					CHECK(0, "%s: job %d: the prompt's logits differ", what, j->id);
			} else if (j) {
				seqs[n] = &slot[sl];
				tok[n] = ids[j->id][at[sl]];
				pos[n] = at[sl];
				who[n++] = sl;
			}
		}
		if (!n)
			continue;
		const float *lm = sf_forward_multi(en->m, &pass, seqs, tok, pos, n);
		CHECK(lm != NULL, "%s round %d: the pass failed", what, round);
		for (int i = 0; lm && i < n; i++) {
			int sl = who[i];
			const struct job *j = &jobs[cur[sl]];
			at[sl]++;
			if (memcmp(lm + (size_t)i * vocab, want[j->id] + (size_t)++made[sl] * vocab,
				   vocab * sizeof(float))) {
				if (!bad++)
					fprintf(stderr, "%s round %d: job %d's token %d, row %d of a pass "
						"of %d: logits differ\n", what, round, j->id, made[sl], i,
						n);
			}
			if (made[sl] == j->ntok)
				cur[sl] = -1;
		}
	}
	for (int i = 0; i < SLOTS; i++) {
		CHECK(cur[i] < 0, "%s: slot %d still busy", what, i);
		sf_state_free(&slot[i]);
	}
	sf_state_free(&pass);
	return bad;
}

/* run: sf-run's engine, serve: sf-serve's (the same one in RAM) */
static void check(const struct engine *run, const struct engine *serve, const char *what)
{
	float *want[JOBS];

	for (int k = 0; k < JOBS; k++)
		want[k] = alone(run, &jobs[k]);
	int bad = served(serve, want, what);
	CHECK(!bad, "%s: %d rows of logits differ from sf-run's", what, bad);
	for (int k = 0; k < JOBS; k++)
		free(want[k]);
}

/* An image's engine: sf-serve's sparse decoder (its pass tokens, its
 * options), one for each command. */
static void check_image(const char *path, const struct sf_sparse_opts *o, int threads,
			const char *what)
{
	struct sf_image img = { 0 };
	struct sf_model m = { 0 };
	struct sf_err e = { 0 };
	struct engine run = { .m = &m }, serve = { .m = &m };
	struct sf_sparse_opts so = *o;

	so.tokens = BATCH;
	if (sf_image_open(&img, path, &e) || sf_image_model(&img, &m, &e) ||
	    sf_pool_create(&run.pool, threads) || sf_pool_create(&serve.pool, threads) ||
	    sf_sparse_open(&run.sp, &img, &m, run.pool, &so, &e) ||
	    sf_sparse_open(&serve.sp, &img, &m, serve.pool, &so, &e)) {
		CHECK(0, "%s: %s", what, e.msg);
		goto out;
	}
	check(&run, &serve, what);
	CHECK(!sf_sparse_error(run.sp, &e) && !sf_sparse_error(serve.sp, &e), "%s: %s", what,
	      e.msg);
out:
	sf_sparse_close(run.sp);
	sf_sparse_close(serve.sp);
	sf_pool_destroy(run.pool);
	sf_pool_destroy(serve.pool);
	sf_model_close(&m);
	sf_image_close(&img);
}

static void check_images(const struct sf_model *M, const char *model_dir)
{
	static const int dt[] = { SF_IMAGE_DTYPE_KEEP, SF_DTYPE_Q8, SF_DTYPE_Q4 };
	static const char *const name[] = { "bf16", "q8", "q4" };
	char tmp[4096], file[32], path[4200], what[64];
	struct sf_placement pl;
	struct sf_sfq Q;
	struct sf_err e = { 0 };
	uint64_t rng = 0x9e3779b97f4a7c15ull;

	mkdir(unit_env("SF_TMP", "/tmp"), 0777);
	snprintf(tmp, sizeof(tmp), "%s/test_serve_batch.XXXXXX", unit_env("SF_TMP", "/tmp"));
	if (!mkdtemp(tmp)) {
		CHECK(0, "%s: cannot create", tmp);
		return;
	}
	imagetest_shuffled(M, &rng, &pl);
	imagetest_codes(M, &Q, SF_CODES_SCALAR, (1u << SF_NGROUPS) - 1);
	for (int d = 0; d < 3; d++) {
		snprintf(file, sizeof(file), "%s.sfimg", name[d]);
		CHECK(!imagetest_pack(tmp, file, M, model_dir, &pl, &Q, NULL, 0, dt[d], &e), "%s: %s",
		      file, e.msg);
		snprintf(path, sizeof(path), "%s/%s.sfimg", tmp, name[d]);
		for (int v = 0; v < 3; v++) {
			struct sf_sparse_opts o;
			sf_sparse_opts_default(&o);
			if (v) {	/* two tiers, as a calibrated budget below 1 */
				o.select = SF_SPARSE_FRACTIONS;
				o.top = 0.3;
				o.mid = 0.25;
			}
			if (v < 2)	/* every group held in RAM */
				o.ram = 1ull << 30;
			else if (d == 0) {	/* read from flash, where O_DIRECT is allowed */
				struct sf_uring *u = NULL;
				int ret = sf_uring_open(&u, path, &(struct sf_uring_opts){ 0 }, &e);
				sf_uring_close(u);
				if (ret)
					continue;
			} else
				continue;
			snprintf(what, sizeof(what), "%s %s%s", name[d], v ? "two tiers" : "budget 1",
				 v < 2 ? ", held" : ", read");
			check_image(path, &o, 2, what);
		}
		unlink(path);
	}
	rmdir(tmp);
	sf_sfq_close(&Q);
	sf_placement_free(&pl);
}

int main(void)
{
	char dir[4096];
	struct sf_model m;
	struct sf_err e = { 0 };
	const char *other = getenv("SF_MODEL");

	snprintf(dir, sizeof(dir), "%s/models/mix4-1m", unit_env("SF_ROOT", "."));
	if (sf_model_open(&m, other ? other : dir, &e)) {
		CHECK(0, "%s", e.msg);
		return unit_exit();
	}
	uint64_t rng = 7;
	for (int k = 0; k < JOBS; k++)
		for (int i = 0; i < SEQ_LEN; i++)
			ids[k][i] = (int32_t)(sf_rng_unit(&rng) * (double)m.cfg.vocab_size);
	/* the prefixes the slots keep: job 4 begins as job 0, 5 as 1, 6 as 2,
	 * 7 as 3 */
	memcpy(ids[4], ids[0], 10 * sizeof(int32_t));
	memcpy(ids[7], ids[3], 505 * sizeof(int32_t));
	memcpy(ids[5], ids[1], 3 * sizeof(int32_t));
	ids[6][0] = ids[2][0];
	for (int threads = 1; threads <= 2; threads++) {
		struct engine en = { .m = &m };
		CHECK(!sf_pool_create(&en.pool, threads), "pool of %d", threads);
		check(&en, &en, threads == 1 ? "dense -t 1" : "dense -t 2");
		sf_pool_destroy(en.pool);
	}
	if (!other)
		check_images(&m, dir);
	sf_model_close(&m);
	return unit_exit();
}
