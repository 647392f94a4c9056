/* Co-activation statistics accumulated from activation traces: the pair
 * kernels on engine/cpu.h's levels, the transposition of trace rows into
 * per-entry bit vectors and the pair pass over the pool. See coact.h; the
 * statistics' memory and the .sfc format are formats/coact.c's. */
#include "offline/coact.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

/* Rows of the triangle a worker takes at a time, and the width of the
 * column tiles: two tiles of bit vectors (2 x 32 x 512 bytes) stay in L1. */
#define TILE 32

// ----------------------------------------------------------------------------
// pair kernels

#define INL static inline __attribute__((always_inline))

/* popcount(a & b) over `words` words. */
typedef uint64_t and_count_fn(const uint64_t *a, const uint64_t *b, size_t words);

/* The triangle's rows [i0, i1) in tiles of TILE columns, one body for
 * every kernel: count is inlined into each caller with the caller's
 * target, so that __builtin_popcountll compiles to what the target has. */
INL void pairs_tiles(const uint64_t *bits, size_t stride, size_t words, uint32_t n,
		     uint32_t i0, uint32_t i1, uint32_t *pairs, and_count_fn *count)
{
	for (uint32_t j0 = i0; j0 < n; j0 += TILE) {
		uint32_t j1 = j0 + TILE < n ? j0 + TILE : n;
		for (uint32_t i = i0; i < i1 && i + 1 < j1; i++) {
			const uint64_t *bi = bits + (size_t)i * stride;
			uint32_t *row = pairs + sf_coact_pair_index(n, i, i + 1);
			for (uint32_t j = j0 > i + 1 ? j0 : i + 1; j < j1; j++)
				row[j - i - 1] += (uint32_t)count(bi, bits + (size_t)j * stride, words);
		}
	}
}

INL uint64_t and_count_scalar(const uint64_t *a, const uint64_t *b, size_t words)
{
	uint64_t c = 0;
	for (size_t w = 0; w < words; w++)
		c += (uint64_t)__builtin_popcountll(a[w] & b[w]);
	return c;
}

void sf_coact_pairs_ref(const uint64_t *bits, size_t stride, size_t words, uint32_t n,
			uint32_t i0, uint32_t i1, uint32_t *pairs)
{
	pairs_tiles(bits, stride, words, n, i0, i1, pairs, and_count_scalar);
}

#if defined(__x86_64__)
#define TVPOPCNT __attribute__((target("avx512f,avx512vpopcntdq")))

__attribute__((target("popcnt"))) static void
pairs_popcnt(const uint64_t *bits, size_t stride, size_t words, uint32_t n, uint32_t i0,
	     uint32_t i1, uint32_t *pairs)
{
	pairs_tiles(bits, stride, words, n, i0, i1, pairs, and_count_scalar);
}

/* VPOPCNTQ on 512 bits at a time; one horizontal add per pair and pass. */
INL TVPOPCNT uint64_t and_count_avx512(const uint64_t *a, const uint64_t *b, size_t words)
{
	__m512i acc = _mm512_setzero_si512();
	for (size_t w = 0; w < words; w += 8)
		acc = _mm512_add_epi64(acc, _mm512_popcnt_epi64(_mm512_and_si512(
						    _mm512_loadu_si512(a + w), _mm512_loadu_si512(b + w))));
	return (uint64_t)_mm512_reduce_add_epi64(acc);
}

TVPOPCNT static void pairs_avx512(const uint64_t *bits, size_t stride, size_t words, uint32_t n,
				  uint32_t i0, uint32_t i1, uint32_t *pairs)
{
	pairs_tiles(bits, stride, words, n, i0, i1, pairs, and_count_avx512);
}
#endif

#if defined(__aarch64__)
/* CNT on 128 bits at a time, the byte counts widened into 32-bit sums;
 * one horizontal add per pair and pass. */
INL uint64_t and_count_neon(const uint64_t *a, const uint64_t *b, size_t words)
{
	uint32x4_t acc = vdupq_n_u32(0);
	size_t w = 0;
	for (; w + 2 <= words; w += 2) {
		uint8x16_t c = vcntq_u8(vreinterpretq_u8_u64(vandq_u64(vld1q_u64(a + w),
								      vld1q_u64(b + w))));
		acc = vpadalq_u16(acc, vpaddlq_u8(c));
	}
	uint64_t c = vaddlvq_u32(acc);
	if (w < words)
		c += (uint64_t)__builtin_popcountll(a[w] & b[w]);
	return c;
}

static void pairs_neon(const uint64_t *bits, size_t stride, size_t words, uint32_t n,
		       uint32_t i0, uint32_t i1, uint32_t *pairs)
{
	pairs_tiles(bits, stride, words, n, i0, i1, pairs, and_count_neon);
}
#endif

typedef void pairs_fn(const uint64_t *, size_t, size_t, uint32_t, uint32_t, uint32_t,
		      uint32_t *);

/* The family's table, indexed by enum sf_isa: POPCNT belongs to the AVX2
 * level, VPOPCNTQ to AVX-512 when the CPU has avx512vpopcntdq beside it
 * (pairs_level), CNT to both aarch64 levels. */
static const struct {
	const char *name;
	pairs_fn *fn;
} pairs_table[SF_NISA] = {
	[SF_ISA_REF] = { "ref", sf_coact_pairs_ref },
#if defined(__x86_64__)
	[SF_ISA_AVX2] = { "popcnt", pairs_popcnt },
	[SF_ISA_AVX512] = { "avx512", pairs_avx512 },
#else
	[SF_ISA_AVX2] = { "ref", sf_coact_pairs_ref },
	[SF_ISA_AVX512] = { "ref", sf_coact_pairs_ref },
#endif
#if defined(__aarch64__)
	[SF_ISA_NEON] = { "neon", pairs_neon },
	[SF_ISA_DOTPROD] = { "neon", pairs_neon },
	[SF_ISA_I8MM] = { "neon", pairs_neon },
#else
	[SF_ISA_NEON] = { "ref", sf_coact_pairs_ref },
	[SF_ISA_DOTPROD] = { "ref", sf_coact_pairs_ref },
	[SF_ISA_I8MM] = { "ref", sf_coact_pairs_ref },
#endif
};

/* The level the pair kernels use: sf_cpu_isa(), one below when AVX-512
 * lacks VPOPCNTQ. Read on every call, so nothing is cached to race on. */
static enum sf_isa pairs_level(void)
{
	enum sf_isa isa = sf_cpu_isa();
	if (isa == SF_ISA_AVX512 && !sf_cpu_has_feature("avx512vpopcntdq"))
		isa = SF_ISA_AVX2;
	return isa;
}

const char *sf_coact_kernel(void)
{
	return pairs_table[pairs_level()].name;
}

void sf_coact_pairs(const uint64_t *bits, size_t stride, size_t words, uint32_t n,
		    uint32_t i0, uint32_t i1, uint32_t *pairs)
{
	pairs_table[pairs_level()].fn(bits, stride, words, n, i0, i1, pairs);
}

// ----------------------------------------------------------------------------
// planning

/* A trace's provenance as the .sfc header lists it. */
static json_t *trace_source(const struct sf_trace_info *info, const char *name)
{
	static const char *const keys[] = { "task", "corpora", "producer", "options" };
	json_t *src = json_pack("{s:s}", "trace", name);
	for (size_t k = 0; src && k < sizeof(keys) / sizeof(*keys); k++) {
		json_t *v = json_object_get(info->header, keys[k]);
		if (v)
			json_object_set(src, keys[k], v);
	}
	return src;
}

/* Whether a trace's slot (layer, g) counts the step from the layer
 * before: experts whose layer before's experts the trace records. */
static int has_step(const struct sf_trace_info *info, int layer, enum sf_group g)
{
	return g == SF_GROUP_EXPERTS && sf_trace_slot_index(info, layer - 1, g) >= 0;
}

/* The model and selection of a trace against c's. */
static int check_trace(const struct sf_coact *c, const struct sf_trace_info *info,
		       const char *name, struct sf_err *e)
{
	double v = info->select == SF_TRACE_DENSITY ? info->density : info->threshold;
	int ret = sf_fingerprint_check(&info->fingerprint, name, "trace", &c->fingerprint,
				       c->first, e);

	if (ret)
		return ret;
	if (info->n_layers != c->n_layers ||
	    memcmp(info->entries, c->entries, sizeof(c->entries)) != 0)
		return sf_err_set(e, SF_EMISMATCH, "%s: model shape differs from %s's", name,
				  c->first);
	if (info->select != c->select || v != c->value)
		return sf_err_set(e, SF_EMISMATCH, "%s: selection %s %g differs from %s's %s %g",
				  name, info->select == SF_TRACE_DENSITY ? "density" : "threshold",
				  v, c->first, c->select == SF_TRACE_DENSITY ? "density" : "threshold",
				  c->value);
	for (int s = 0; s < c->nslots; s++) {
		const struct sf_coact_slot *sl = &c->slots[s];
		if (sf_trace_slot_index(info, sl->layer, sl->group) < 0)
			return sf_err_set(e, SF_EMISMATCH, "%s: does not record layer %d %s, which "
					  "%s does", name, sl->layer, sf_group_name(sl->group),
					  c->first);
		if (sl->step != has_step(info, sl->layer, sl->group))
			return sf_err_set(e, SF_EMISMATCH, "%s: layer %d experts: %s layer %d's, "
					  "%s %s", name, sl->layer, sl->step ? "does not record"
					  : "records", sl->layer - 1, c->first,
					  sl->step ? "does" : "does not");
	}
	return 0;
}

int sf_coact_plan_trace(struct sf_coact *c, const struct sf_trace_info *info,
			const char *name, int lo, int hi, struct sf_err *e)
{
	int ret;

	memset(c, 0, sizeof(*c));
	c->fingerprint = info->fingerprint;
	c->n_layers = info->n_layers;
	memcpy(c->entries, info->entries, sizeof(c->entries));
	c->select = info->select;
	c->value = info->select == SF_TRACE_DENSITY ? info->density : info->threshold;
	c->first = name;
	for (int s = 0; s < info->nslots; s++) {
		const struct sf_trace_slot *sl = &info->slots[s];
		if (sl->layer >= lo && sl->layer <= hi &&
		    (ret = sf_coact_add_slot(c, sl->layer, sl->group,
					     has_step(info, sl->layer, sl->group), NULL, e)))
			goto fail;
	}
	if (!c->nslots) {
		ret = sf_err_set(e, -EINVAL, "%s: records layers %d-%d, none in %d-%d", name,
				 info->layer_lo, info->layer_hi, lo, hi);
		goto fail;
	}
	if (!(c->sources = json_array())) {
		ret = sf_err_set(e, -ENOMEM, "%s: %s", name, sf_strerror(-ENOMEM));
		goto fail;
	}
	return 0;
fail:
	sf_coact_free(c);
	return ret;
}

// ----------------------------------------------------------------------------
// accumulation from traces

struct flush_task {
	pairs_fn *pairs;	/* the kernel, chosen once per pass by the caller */
	struct sf_coact_slot *slot;
	size_t words;
	atomic_uint next;	/* next tile of rows to take */
	uint32_t ntiles;
};

/* Tiles are taken in order, largest rows of the triangle first, so the
 * threads end together without a static split of the triangle. */
static void flush_worker(void *arg, int ith, int nth)
{
	struct flush_task *t = arg;
	uint32_t n = t->slot->entries, tile;
	(void)ith;
	(void)nth;
	while ((tile = atomic_fetch_add(&t->next, 1)) < t->ntiles) {
		uint32_t i0 = tile * TILE, i1 = i0 + TILE < n ? i0 + TILE : n;
		t->pairs(t->slot->bits, SF_COACT_BLOCK_WORDS, t->words, n, i0, i1, t->slot->pairs);
	}
}

/* Adds the pending tokens' pairs and clears the bit vectors. */
static void flush_pairs(struct sf_coact *c)
{
	if (!c->pending)
		return;
	size_t words = ((c->pending + 511) / 512) * 8;
	pairs_fn *pairs = pairs_table[pairs_level()].fn;
	for (int s = 0; s < c->nslots; s++) {
		struct sf_coact_slot *sl = &c->slots[s];
		struct flush_task t = { .pairs = pairs, .slot = sl, .words = words,
					.ntiles = (sl->entries + TILE - 1) / TILE };
		atomic_init(&t.next, 0);
		if (c->pool)
			sf_pool_run(c->pool, flush_worker, &t);
		else
			flush_worker(&t, 0, 1);
		for (uint32_t i = 0; i < sl->entries; i++)
			memset(sl->bits + (size_t)i * SF_COACT_BLOCK_WORDS, 0, words * 8);
	}
	c->pending = 0;
}

/* The steps of tokens [0, ntok) of a block: expert i picked in before's
 * row and j in now's, each a bitmap of words words; k small, so the
 * picks' products are few. */
static void count_steps(struct sf_coact_slot *sl, const uint64_t *before, const uint64_t *now,
			uint32_t words, uint32_t ntok)
{
	uint32_t n = sl->entries;
	for (uint32_t t = 0; t < ntok; t++) {
		const uint64_t *a = before + (size_t)t * words, *b = now + (size_t)t * words;
		for (uint32_t wa = 0; wa < words; wa++)
			for (uint64_t x = a[wa]; x; x &= x - 1) {
				uint32_t *row = sl->steps + (size_t)(wa * 64 + __builtin_ctzll(x)) * n;
				for (uint32_t wb = 0; wb < words; wb++)
					for (uint64_t y = b[wb]; y; y &= y - 1)
						row[wb * 64 + __builtin_ctzll(y)]++;
			}
	}
}

/* Tokens [t0, t0 + cnt) of a block's rows into the bit vectors at the
 * pending position, counting each active entry. */
static void transpose(struct sf_coact_slot *sl, const uint64_t *rows, uint32_t words,
		      uint32_t t0, uint32_t cnt, uint32_t pending)
{
	for (uint32_t t = 0; t < cnt; t++) {
		const uint64_t *row = rows + (size_t)(t0 + t) * words;
		uint32_t col = pending + t;
		uint64_t bit = 1ull << (col % 64);
		uint64_t *base = sl->bits + col / 64;
		for (uint32_t w = 0; w < words; w++) {
			for (uint64_t b = row[w]; b; b &= b - 1) {
				uint32_t i = w * 64 + (uint32_t)__builtin_ctzll(b);
				base[(size_t)i * SF_COACT_BLOCK_WORDS] |= bit;
				sl->counts[i]++;
			}
		}
	}
}

int sf_coact_add_trace(struct sf_coact *c, struct sf_trace_reader *r, struct sf_err *e)
{
	const struct sf_trace_info *info = sf_trace_reader_info(r);
	const char *name = sf_trace_reader_name(r);
	int *map = NULL, *prev;
	uint32_t ntok;
	int ret;

	if ((ret = check_trace(c, info, name, e)))
		return ret;
	if (!(map = malloc(2 * (size_t)c->nslots * sizeof(*map))))
		return sf_err_set(e, -ENOMEM, "%s: %s", name, sf_strerror(-ENOMEM));
	prev = map + c->nslots;	/* the trace's slot of the layer before's experts */
	for (int s = 0; s < c->nslots; s++) {
		const struct sf_coact_slot *sl = &c->slots[s];
		map[s] = sf_trace_slot_index(info, sl->layer, sl->group);
		prev[s] = sl->step ? sf_trace_slot_index(info, sl->layer - 1, sl->group) : -1;
	}
	uint64_t before = c->slots[0].tokens;
	while ((ret = sf_trace_next(r, &ntok, e)) > 0) {
		if (c->slots[0].tokens + ntok > SF_COACT_MAX_TOKENS) {
			ret = sf_err_set(e, SF_ELIMIT, "%s: more than %u tokens: 32-bit pair counts "
					 "would overflow; split the corpus and keep each .sfc apart",
					 name, SF_COACT_MAX_TOKENS);
			break;
		}
		for (uint32_t t0 = 0; t0 < ntok;) {
			uint32_t cnt = ntok - t0;
			if (cnt > SF_COACT_BLOCK_TOKENS - c->pending)
				cnt = SF_COACT_BLOCK_TOKENS - c->pending;
			for (int s = 0; s < c->nslots; s++)
				transpose(&c->slots[s], sf_trace_rows(r, map[s]),
					  info->slots[map[s]].words, t0, cnt, c->pending);
			c->pending += cnt;
			t0 += cnt;
			if (c->pending == SF_COACT_BLOCK_TOKENS)
				flush_pairs(c);
		}
		for (int s = 0; s < c->nslots; s++) {
			c->slots[s].tokens += ntok;
			if (prev[s] >= 0)
				count_steps(&c->slots[s], sf_trace_rows(r, prev[s]),
					    sf_trace_rows(r, map[s]), info->slots[map[s]].words, ntok);
		}
		if (c->progress)
			c->progress(c->progress_ctx, c->slots[0].tokens);
	}
	flush_pairs(c);
	if (ret == 0) {
		uint64_t added = c->slots[0].tokens - before;
		for (int s = 0; s < c->nslots && ret == 0; s++) {
			const double *sums = sf_trace_sums(r, map[s]);
			for (uint32_t i = 0; i < c->slots[s].entries; i++)
				c->slots[s].sums[i] += sums[i];
			if (sf_coact_add_task(c->slots[s].tasks, info->task, added))
				ret = sf_err_set(e, -ENOMEM, "%s: %s", name, sf_strerror(-ENOMEM));
		}
		if (!ret && json_array_append_new(c->sources, trace_source(info, name)))
			ret = sf_err_set(e, -ENOMEM, "%s: %s", name, sf_strerror(-ENOMEM));
	}
	free(map);
	return ret;
}
