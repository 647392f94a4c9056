/* Unit test of lib/common/online/cache.c: S3-FIFO and LRU give the same hit/miss
 * sequence as plain array-based reference implementations written here
 * (uniform and Zipf traces, several sizes, seg-admit 1 and 0), with the
 * right bytes on every hit; pinned entries always hit and never leave;
 * seg-admit 0 never admits in-run entries, 1 always; the admission draws
 * are reproducible from the seed and admit at the asked rate. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "online/cache.h"
#include "unit.h"

#define LAYERS 2
#define TOKEN 16	/* entries looked up together */

static const uint64_t bundle[SF_NGROUPS] = { 100, 64, 200, 36 };

static uint64_t rng(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* The bytes a bundle holds: a function of its key and group. */
static void fill(unsigned char *b, int g, uint32_t layer, uint32_t entry)
{
	uint64_t s = ((uint64_t)layer << 32 | entry) * 0x9e3779b97f4a7c15ull + (uint64_t)g + 1;
	for (uint64_t k = 0; k < bundle[g]; k++)
		b[k] = (unsigned char)(rng(&s) >> 13);
}

static int bytes_ok(const void *slot, int g, uint32_t layer, uint32_t entry)
{
	unsigned char want[256];
	fill(want, g, layer, entry);
	return !memcmp(slot, want, bundle[g]);
}

// ----------------------------------------------------------------------------
// Reference caches: arrays in queue order (index 0 oldest), linear search

struct robj {
	uint64_t key;
	int freq;
	uint64_t stamp;		/* LRU: last use */
};

struct ref {
	int lru;
	size_t cap, small_cap, main_cap, ghost_cap;
	struct robj *small, *main;
	uint64_t *ghost;
	size_t ns, nm, ng;
	uint64_t clock, admissions, evictions;
};

static void ref_init(struct ref *r, int lru, size_t cap)
{
	memset(r, 0, sizeof(*r));
	r->lru = lru;
	r->cap = cap;
	if (!lru) {
		/* the paper: 10% small, the rest main, as many ghosts as main */
		r->small_cap = cap / 10 ? cap / 10 : (cap ? 1 : 0);
		r->main_cap = cap - r->small_cap;
		r->ghost_cap = r->main_cap;
	}
	r->small = malloc((cap + 1) * sizeof(*r->small));
	r->main = malloc((cap + 1) * sizeof(*r->main));
	r->ghost = malloc((r->ghost_cap + 1) * sizeof(*r->ghost));
}

static void ref_free(struct ref *r)
{
	free(r->small);
	free(r->main);
	free(r->ghost);
}

static long find(const struct robj *q, size_t n, uint64_t key)
{
	for (size_t i = 0; i < n; i++)
		if (q[i].key == key)
			return (long)i;
	return -1;
}

static struct robj pop_at(struct robj *q, size_t *n, size_t i)
{
	struct robj o = q[i];
	memmove(q + i, q + i + 1, (*n - i - 1) * sizeof(*q));
	(*n)--;
	return o;
}

static int ref_lookup(struct ref *r, uint64_t key)
{
	long i;
	if ((i = find(r->small, r->ns, key)) >= 0) {
		if (r->small[i].freq < 3)
			r->small[i].freq++;
		return 1;
	}
	if ((i = find(r->main, r->nm, key)) >= 0) {
		if (r->main[i].freq < 3)
			r->main[i].freq++;
		r->main[i].stamp = ++r->clock;
		return 1;
	}
	return 0;
}

static void ref_ghost_push(struct ref *r, uint64_t key)
{
	if (!r->ghost_cap)
		return;
	if (r->ng == r->ghost_cap) {
		memmove(r->ghost, r->ghost + 1, (r->ng - 1) * sizeof(*r->ghost));
		r->ng--;
	}
	r->ghost[r->ng++] = key;
}

static void ref_evict(struct ref *r)
{
	if (r->lru) {
		size_t old = 0;
		for (size_t i = 1; i < r->nm; i++)
			if (r->main[i].stamp < r->main[old].stamp)
				old = i;
		pop_at(r->main, &r->nm, old);
		r->evictions++;
	} else if (r->nm > r->main_cap || r->ns == 0) {
		while (r->nm) {
			struct robj t = pop_at(r->main, &r->nm, 0);
			if (t.freq > 0) {
				t.freq--;
				r->main[r->nm++] = t;
			} else {
				r->evictions++;
				return;
			}
		}
	} else {
		while (r->ns) {
			struct robj t = pop_at(r->small, &r->ns, 0);
			if (t.freq >= 2) {
				t.freq = 0;
				r->main[r->nm++] = t;
			} else {
				r->evictions++;
				ref_ghost_push(r, t.key);
				return;
			}
		}
	}
}

/* admit: the admission decision (seg-admit 0 or 1 needs no draws) */
static int ref_insert(struct ref *r, uint64_t key, int admit)
{
	int to_main = 0;
	if (!r->cap || find(r->small, r->ns, key) >= 0 || find(r->main, r->nm, key) >= 0 || !admit)
		return 0;
	for (size_t i = 0; i < r->ng; i++)
		if (r->ghost[i] == key) {
			memmove(r->ghost + i, r->ghost + i + 1, (r->ng - i - 1) * sizeof(*r->ghost));
			r->ng--;
			to_main = 1;
			break;
		}
	while (r->ns + r->nm >= r->cap)
		ref_evict(r);
	if (r->lru || to_main)
		r->main[r->nm++] = (struct robj){ key, 0, ++r->clock };
	else
		r->small[r->ns++] = (struct robj){ key, 0, 0 };
	r->admissions++;
	return 1;
}

// ----------------------------------------------------------------------------
// Traces

struct trace {
	size_t ntok;
	uint8_t *group;		/* (ntok) */
	uint32_t *layer;	/* (ntok) */
	uint32_t *entry;	/* (ntok, TOKEN) distinct within a token */
	uint8_t *in_run;	/* (ntok, TOKEN) */
};

/* Entries 0..n-1 drawn uniformly (zipf 0) or with P(i) ~ 1 / (i+1)^zipf. */
static void make_trace(struct trace *t, size_t ntok, uint32_t n, double zipf, int groups,
		       uint64_t seed)
{
	double *cdf = malloc(n * sizeof(*cdf)), sum = 0;
	for (uint32_t i = 0; i < n; i++)
		cdf[i] = sum += zipf ? pow(i + 1.0, -zipf) : 1.0;
	t->ntok = ntok;
	t->group = malloc(ntok);
	t->layer = malloc(ntok * sizeof(*t->layer));
	t->entry = malloc(ntok * TOKEN * sizeof(*t->entry));
	t->in_run = malloc(ntok * TOKEN);
	for (size_t k = 0; k < ntok; k++) {
		t->group[k] = (uint8_t)(rng(&seed) % (uint64_t)groups);
		t->layer[k] = (uint32_t)(rng(&seed) % LAYERS);
		for (int j = 0; j < TOKEN; j++) {
			uint32_t e;
			int dup;
			do {
				double u = (double)(rng(&seed) >> 11) * 0x1p-53 * sum;
				uint32_t lo = 0, hi = n - 1;
				while (lo < hi) {
					uint32_t mid = (lo + hi) / 2;
					if (cdf[mid] > u)
						hi = mid;
					else
						lo = mid + 1;
				}
				e = lo;
				dup = 0;
				for (int q = 0; q < j; q++)
					dup |= t->entry[k * TOKEN + q] == e;
			} while (dup);
			t->entry[k * TOKEN + j] = e;
			t->in_run[k * TOKEN + j] = (uint8_t)(rng(&seed) & 1);
		}
	}
	free(cdf);
}

static void free_trace(struct trace *t)
{
	free(t->group);
	free(t->layer);
	free(t->entry);
	free(t->in_run);
}

/* Runs t on c: lookup of each token's list, then insertion of its misses.
 * Writes the hit (1) / miss (0) of every lookup to hits (ntok * TOKEN);
 * checks the bytes of every hit. Returns the number of bad bytes. */
static size_t replay(struct sf_cache *c, const struct trace *t, uint8_t *hits)
{
	const void *slots[TOKEN];
	uint32_t miss[TOKEN];
	unsigned char b[256];
	size_t bad = 0, nmiss;

	for (size_t k = 0; k < t->ntok; k++) {
		int g = t->group[k];
		const uint32_t *ent = t->entry + k * TOKEN;
		size_t h = sf_cache_lookup(c, t->layer[k], (enum sf_group)g, ent, TOKEN, slots, miss,
					   &nmiss);
		size_t m = 0, hh = 0;
		for (int j = 0; j < TOKEN; j++) {
			hits[k * TOKEN + j] = slots[j] != NULL;
			if (slots[j]) {
				hh++;
				bad += !bytes_ok(slots[j], g, t->layer[k], ent[j]);
			} else if (m < nmiss && miss[m] == ent[j]) {
				m++;
			} else {
				bad++;	/* the miss list skipped or reordered a miss */
			}
		}
		bad += (h != hh) + (m != nmiss) + (h + nmiss != TOKEN);
		for (int j = 0; j < TOKEN; j++)
			if (!slots[j]) {
				fill(b, g, t->layer[k], ent[j]);
				sf_cache_insert(c, t->layer[k], (enum sf_group)g, ent[j], b,
						bundle[g], t->in_run[k * TOKEN + j]);
			}
	}
	return bad;
}

/* The same with one reference cache per group. */
static void ref_replay(struct ref *r, const struct trace *t, double seg_admit, uint8_t *hits)
{
	for (size_t k = 0; k < t->ntok; k++) {
		struct ref *rg = &r[t->group[k]];
		const uint32_t *ent = t->entry + k * TOKEN;
		for (int j = 0; j < TOKEN; j++)
			hits[k * TOKEN + j] = (uint8_t)ref_lookup(rg, (uint64_t)t->layer[k] << 32 | ent[j]);
		for (int j = 0; j < TOKEN; j++)
			if (!hits[k * TOKEN + j])
				ref_insert(rg, (uint64_t)t->layer[k] << 32 | ent[j],
					   !t->in_run[k * TOKEN + j] || seg_admit == 1.0);
	}
}

static struct sf_cache *open_cache(enum sf_cache_policy pol, uint32_t slots, double seg_admit,
				   uint64_t seed)
{
	struct sf_cache_opts o;
	struct sf_cache *c = NULL;
	struct sf_err e = { 0 };

	sf_cache_opts_default(&o);
	o.policy = pol;
	o.seg_admit = seg_admit;
	o.seed = seed;
	for (int g = 0; g < SF_NGROUPS; g++) {
		o.bundle_bytes[g] = bundle[g];
		o.slots[g] = slots + (uint32_t)g;	/* sizes differ per group */
	}
	CHECK(sf_cache_open(&c, &o, &e) == 0, "open: %s", e.msg);
	return c;
}

static void compare(const char *name, const struct trace *t, enum sf_cache_policy pol,
		    uint32_t slots, double seg_admit)
{
	size_t n = t->ntok * TOKEN, first = SIZE_MAX, nhit = 0;
	uint8_t *got = malloc(n), *want = malloc(n);
	struct ref r[SF_NGROUPS];
	struct sf_cache *c = open_cache(pol, slots, seg_admit, 5);
	struct sf_cache_stats st;
	uint64_t radm = 0, revict = 0;

	if (!c)
		goto out;
	for (int g = 0; g < SF_NGROUPS; g++)
		ref_init(&r[g], pol == SF_CACHE_LRU, slots + (size_t)g);
	CHECK(replay(c, t, got) == 0, "%s %s slots %u: bad bytes or miss list",
	      sf_cache_policy_name(pol), name, slots);
	ref_replay(r, t, seg_admit, want);
	for (size_t i = 0; i < n; i++) {
		if (got[i] != want[i] && first == SIZE_MAX)
			first = i;
		nhit += got[i];
	}
	CHECK(first == SIZE_MAX, "%s %s slots %u seg-admit %g: lookup %zu of %zu: %s, reference %s",
	      sf_cache_policy_name(pol), name, slots, seg_admit, first, n,
	      first < n && got[first] ? "hit" : "miss", first < n && want[first] ? "hit" : "miss");
	sf_cache_stats(c, SF_NGROUPS, &st);
	for (int g = 0; g < SF_NGROUPS; g++) {
		radm += r[g].admissions;
		revict += r[g].evictions;
		ref_free(&r[g]);
	}
	CHECK(st.lookups == n && st.hits == nhit && st.misses == n - nhit,
	      "%s: stats %llu lookups %llu hits", name, (unsigned long long)st.lookups,
	      (unsigned long long)st.hits);
	CHECK(st.admissions == radm && st.evictions == revict,
	      "%s %s slots %u: admissions %llu evictions %llu, reference %llu %llu",
	      sf_cache_policy_name(pol), name, slots, (unsigned long long)st.admissions,
	      (unsigned long long)st.evictions, (unsigned long long)radm,
	      (unsigned long long)revict);
	CHECK(st.admissions - st.evictions == st.resident, "%s: resident %llu", name,
	      (unsigned long long)st.resident);
	/* a test that could not tell policies apart would pass on all-miss */
	if (slots >= 64)
		CHECK(nhit > n / 50, "%s slots %u: only %zu hits of %zu", name, slots, nhit, n);
	sf_cache_close(c);
out:
	free(got);
	free(want);
}

// ----------------------------------------------------------------------------

/* seg-admit 0 admits no in-run entry, 1 every one; outliers always. */
static void test_seg_admit_bounds(void)
{
	unsigned char b[256];
	const void *slot;
	for (int p = 0; p <= 1; p++) {
		struct sf_cache *c = open_cache(SF_CACHE_S3FIFO, 200, p, 9);
		int bad = 0;
		if (!c)
			continue;
		for (uint32_t e = 0; e < 2000; e++) {
			int in_run = (e % 3) != 0;
			fill(b, 2, 1, e);
			int adm = sf_cache_insert(c, 1, SF_GROUP_FFN_IN, e, b, bundle[2], in_run);
			size_t hit = sf_cache_lookup(c, 1, SF_GROUP_FFN_IN, &e, 1, &slot, NULL, NULL);
			bad += adm != (!in_run || p == 1) || (size_t)adm != hit;
		}
		CHECK(!bad, "seg-admit %d: %d wrong admissions", p, bad);
		sf_cache_close(c);
	}
}

/* The same seed gives the same sequence; another seed another; the
 * admitted share of in-run entries is about seg-admit. */
static void test_determinism(const struct trace *t)
{
	size_t n = t->ntok * TOKEN;
	uint8_t *a = malloc(n), *b = malloc(n), *d = malloc(n);
	struct sf_cache *c1 = open_cache(SF_CACHE_S3FIFO, 100, 0.3, 77);
	struct sf_cache *c2 = open_cache(SF_CACHE_S3FIFO, 100, 0.3, 77);
	struct sf_cache *c3 = open_cache(SF_CACHE_S3FIFO, 100, 0.3, 78);
	struct sf_cache_stats s1, s3;

	if (c1 && c2 && c3) {
		replay(c1, t, a);
		replay(c2, t, b);
		replay(c3, t, d);
		CHECK(!memcmp(a, b, n), "same seed, different hit sequences");
		CHECK(memcmp(a, d, n), "seeds 77 and 78 gave the same hit sequence");
		sf_cache_stats(c1, SF_NGROUPS, &s1);
		sf_cache_stats(c3, SF_NGROUPS, &s3);
		CHECK(s1.rejected != s3.rejected || s1.admissions != s3.admissions,
		      "seeds 77 and 78: same admissions");
		/* rejected / in-run offers, about 1 - 0.3 */
		uint64_t offers = 0;
		uint8_t *h = a;
		for (size_t i = 0; i < n; i++)
			offers += !h[i] && t->in_run[i];
		double rate = (double)s1.rejected / (double)offers;
		CHECK(offers > 5000 && fabs(rate - 0.7) < 0.03, "rejected %.3f of %llu in-run offers",
		      rate, (unsigned long long)offers);
	}
	sf_cache_close(c1);
	sf_cache_close(c2);
	sf_cache_close(c3);
	free(a);
	free(b);
	free(d);
}

/* Pinned entries: hits with their bytes on every lookup, never evicted,
 * across the busiest trace; refused twice or beyond their capacity. */
static void test_pinned(const struct trace *t, enum sf_cache_policy pol)
{
	struct sf_cache_opts o;
	struct sf_cache *c = NULL;
	struct sf_err e = { 0 };
	struct sf_cache_stats st;
	size_t n = t->ntok * TOKEN;
	uint8_t *hits = malloc(n);
	void *slot;
	uint64_t want_pin_hits = 0;
	int bad = 0;

	sf_cache_opts_default(&o);
	o.policy = pol;
	for (int g = 0; g < SF_NGROUPS; g++) {
		o.bundle_bytes[g] = bundle[g];
		o.slots[g] = 50;
		o.pin_slots[g] = 8;
	}
	CHECK(sf_cache_open(&c, &o, &e) == 0, "open: %s", e.msg);
	if (!c)
		goto out;
	/* the Zipf head of layer 0, entries 0..7 of every group */
	for (int g = 0; g < SF_NGROUPS; g++)
		for (uint32_t k = 0; k < 8; k++) {
			CHECK(sf_cache_pin(c, 0, (enum sf_group)g, k, &slot) == 0, "pin %d/%u", g, k);
			fill(slot, g, 0, k);
		}
	CHECK(sf_cache_pin(c, 0, SF_GROUP_ATTN_IN, 3, &slot) == -EEXIST, "pinned twice");
	CHECK(sf_cache_pin(c, 1, SF_GROUP_ATTN_IN, 3, &slot) == -ENOSPC, "pinned beyond capacity");
	CHECK(replay(c, t, hits) == 0, "%s pinned: bad bytes", sf_cache_policy_name(pol));
	for (size_t k = 0; k < t->ntok; k++)
		for (int j = 0; j < TOKEN; j++)
			if (t->layer[k] == 0 && t->entry[k * TOKEN + j] < 8) {
				bad += !hits[k * TOKEN + j];
				want_pin_hits++;
			}
	CHECK(!bad, "%s: %d lookups of pinned entries missed", sf_cache_policy_name(pol), bad);
	sf_cache_stats(c, SF_NGROUPS, &st);
	CHECK(st.pin_hits == want_pin_hits && st.pinned == 32 &&
	      st.resident <= (pol == SF_CACHE_NONE ? 0 : 200),
	      "%s: %llu pin hits of %llu, %llu pinned, %llu resident", sf_cache_policy_name(pol),
	      (unsigned long long)st.pin_hits, (unsigned long long)want_pin_hits,
	      (unsigned long long)st.pinned, (unsigned long long)st.resident);
	if (pol == SF_CACHE_NONE)
		CHECK(st.hits == st.pin_hits && st.admissions == 0, "none cached something");
	else
		CHECK(st.evictions > 0 && st.hits > st.pin_hits, "%s: trace too gentle",
		      sf_cache_policy_name(pol));
	{
		unsigned char b[256];
		fill(b, 0, 0, 5);
		CHECK(sf_cache_insert(c, 0, SF_GROUP_ATTN_IN, 5, b, bundle[0], 0) == 0,
		      "a pinned entry admitted again");
	}
	sf_cache_close(c);
out:
	free(hits);
}

static void test_options(void)
{
	struct sf_cache_opts o;
	struct sf_cache *c = NULL;
	struct sf_err e = { 0 };
	enum sf_cache_policy p;

	CHECK(sf_cache_policy_parse("s3fifo", &p) == 0 && p == SF_CACHE_S3FIFO &&
	      sf_cache_policy_parse("lru", &p) == 0 && p == SF_CACHE_LRU &&
	      sf_cache_policy_parse("none", &p) == 0 && p == SF_CACHE_NONE &&
	      sf_cache_policy_parse("arc", &p) == -EINVAL, "policy names");
	CHECK(!strcmp(sf_cache_policy_name(SF_CACHE_LRU), "lru"), "lru name");

	sf_cache_opts_default(&o);
	o.seg_admit = 1.5;
	CHECK(sf_cache_open(&c, &o, &e) == -EINVAL && !c &&
	      !strcmp(e.msg, "cache: seg-admit 1.5: expected 0 to 1"), "seg-admit: %s", e.msg);
	sf_cache_opts_default(&o);
	o.slots[SF_GROUP_FFN_OUT] = 10;
	CHECK(sf_cache_open(&c, &o, &e) == -EINVAL &&
	      !strcmp(e.msg, "cache: ffn_out: 10 slots, 0 pinned of 0-byte bundles: expected a "
		      "bundle size"), "no bundle size: %s", e.msg);
	sf_cache_opts_default(&o);
	o.small_ratio = 0;
	CHECK(sf_cache_open(&c, &o, &e) == -EINVAL && strstr(e.msg, "small queue ratio"),
	      "ratio: %s", e.msg);

	/* the footprint covers the slots and grows with them */
	sf_cache_opts_default(&o);
	o.bundle_bytes[SF_GROUP_FFN_IN] = 1000;
	o.slots[SF_GROUP_FFN_IN] = 100;
	uint64_t f100 = sf_cache_footprint(&o);
	o.slots[SF_GROUP_FFN_IN] = 200;
	uint64_t f200 = sf_cache_footprint(&o);
	CHECK(f100 >= 100 * 1024 && f200 - f100 >= 100 * 1024 &&
	      f200 - f100 <= 100 * sf_cache_entry_bytes(1000) + 4096,
	      "footprint %llu, %llu", (unsigned long long)f100, (unsigned long long)f200);
	o.slots[SF_GROUP_FFN_IN] = UINT32_MAX - 1;
	o.bundle_bytes[SF_GROUP_FFN_IN] = UINT64_MAX / 4;
	CHECK(sf_cache_footprint(&o) == UINT64_MAX, "footprint overflow");

	/* groups are separate: the same (layer, entry) in two groups */
	c = open_cache(SF_CACHE_LRU, 10, 1, 1);
	if (c) {
		unsigned char b[256];
		const void *s0, *s3;
		uint32_t ent = 4;
		fill(b, 0, 2, 4);
		sf_cache_insert(c, 2, SF_GROUP_ATTN_IN, 4, b, bundle[0], 0);
		fill(b, 3, 2, 4);
		sf_cache_insert(c, 2, SF_GROUP_FFN_OUT, 4, b, bundle[3], 0);
		sf_cache_lookup(c, 2, SF_GROUP_ATTN_IN, &ent, 1, &s0, NULL, NULL);
		sf_cache_lookup(c, 2, SF_GROUP_FFN_OUT, &ent, 1, &s3, NULL, NULL);
		CHECK(s0 && s3 && s0 != s3 && bytes_ok(s0, 0, 2, 4) && bytes_ok(s3, 3, 2, 4),
		      "groups share a slot");
		CHECK((uintptr_t)s0 % SF_CACHE_SLOT_ALIGN == 0 && (uintptr_t)s3 % SF_CACHE_SLOT_ALIGN == 0,
		      "slots not aligned");
		CHECK(sf_cache_insert(c, 2, SF_GROUP_ATTN_IN, 4, b, bundle[0], 0) == 0, "admitted twice");
		CHECK(sf_cache_insert(c, 2, SF_GROUP_ATTN_IN, 9, b, bundle[0] + 1, 0) == 0,
		      "a bundle larger than the slot admitted");
		sf_cache_close(c);
	}
	sf_cache_close(NULL);
}

int main(void)
{
	struct trace uni, zipf, zipf1;
	static const uint32_t sizes[] = { 1, 2, 7, 64, 300 };

	make_trace(&uni, 1500, 1200, 0, SF_NGROUPS, 11);
	make_trace(&zipf, 1500, 4096, 1.0, SF_NGROUPS, 12);
	make_trace(&zipf1, 3000, 4096, 0.9, 1, 13);

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		compare("uniform", &uni, SF_CACHE_S3FIFO, sizes[k], 1);
		compare("zipf", &zipf, SF_CACHE_S3FIFO, sizes[k], 1);
		compare("uniform", &uni, SF_CACHE_LRU, sizes[k], 1);
		compare("zipf", &zipf, SF_CACHE_LRU, sizes[k], 1);
	}
	compare("zipf", &zipf, SF_CACHE_S3FIFO, 300, 0);
	compare("zipf", &zipf, SF_CACHE_LRU, 64, 0);
	compare("zipf one group", &zipf1, SF_CACHE_S3FIFO, 500, 1);
	compare("zipf one group", &zipf1, SF_CACHE_S3FIFO, 500, 0);

	test_seg_admit_bounds();
	test_determinism(&zipf1);
	test_pinned(&zipf, SF_CACHE_S3FIFO);
	test_pinned(&zipf, SF_CACHE_LRU);
	test_pinned(&zipf, SF_CACHE_NONE);
	test_options();

	free_trace(&uni);
	free_trace(&zipf);
	free_trace(&zipf1);
	return unit_exit();
}
