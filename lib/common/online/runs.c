/* Runs of positions under a placement, with access collapse and 4 KiB
 * block accounting (man/sf-place.1, --eval). */

#include "online/runs.h"

const uint32_t sf_runs_gaps[SF_RUNS_NGAPS] = { 0, 1, 2, 4, 8, 16 };
const char *const sf_runs_hist_names[SF_RUNS_NHIST] = {
	"1", "2", "3-4", "5-8", "9-16", "17-32", "33-64", "65+",
};

void sf_runs_inverse(const uint32_t *perm, uint32_t n, uint32_t *inv)
{
	for (uint32_t p = 0; p < n; p++)
		inv[perm[p]] = p;
}

size_t sf_runs_positions(const uint32_t *inv, uint32_t n, const uint32_t *active, size_t k,
			 uint64_t *scratch, uint32_t *pos)
{
	size_t words = ((size_t)n + 63) / 64, out = 0;

	/* a bitmap sorts in O(k + n / 64), cheaper than a comparison sort at
	 * the densities a decoder sees */
	for (size_t i = 0; i < k; i++)
		scratch[inv[active[i]] / 64] |= 1ull << (inv[active[i]] % 64);
	for (size_t w = 0; w < words && out < k; w++) {
		uint64_t b = scratch[w];
		scratch[w] = 0;
		while (b) {
			pos[out++] = (uint32_t)(w * 64 + (size_t)__builtin_ctzll(b));
			b &= b - 1;
		}
	}
	return out;
}

size_t sf_runs_plan(const uint32_t *pos, size_t k, uint32_t gap, struct sf_run *runs)
{
	size_t r = 0;

	for (size_t i = 0; i < k; i++) {
		/* positions strictly between the previous run's end and pos[i] */
		if (r && (uint64_t)pos[i] - runs[r - 1].start - runs[r - 1].len <= gap)
			runs[r - 1].len = pos[i] - runs[r - 1].start + 1;
		else
			runs[r++] = (struct sf_run){ pos[i], 1 };
	}
	return r;
}

uint64_t sf_runs_bytes(const struct sf_run *runs, size_t nruns, uint64_t entry_bytes,
		       uint64_t block)
{
	uint64_t blocks = 0, next = 0;	/* first block not yet counted */

	for (size_t i = 0; i < nruns; i++) {
		uint64_t first = (uint64_t)runs[i].start * entry_bytes / block;
		uint64_t end = ((uint64_t)runs[i].start + runs[i].len) * entry_bytes;
		uint64_t last = (end + block - 1) / block;	/* exclusive */
		if (first < next)
			first = next;	/* a block shared with the previous run is read once */
		if (last > first) {
			blocks += last - first;
			next = last;
		}
	}
	return blocks * block;
}

uint64_t sf_runs_bundle_bytes(const struct sf_config *c, enum sf_group g, enum sf_dtype dt)
{
	uint64_t hd = (uint64_t)c->head_dim, rows = 0;

	switch (g) {
	case SF_GROUP_ATTN_IN: rows = hd * ((uint64_t)c->n_heads + 2 * (uint64_t)c->n_kv_heads); break;
	case SF_GROUP_ATTN_OUT: rows = (uint64_t)c->dim; break;
	case SF_GROUP_FFN_IN: rows = 2 * (uint64_t)c->hidden_dim; break;
	case SF_GROUP_FFN_OUT: rows = (uint64_t)c->dim; break;
	case SF_NGROUPS: break;
	}
	return rows * sf_dtype_size(dt);
}

static int hist_bucket(uint32_t len)
{
	int b = 0;
	/* 1 -> 0, 2 -> 1, 3-4 -> 2, 5-8 -> 3, ... */
	if (len > 1)
		b = 1 + (31 - __builtin_clz(len - 1));
	return b < SF_RUNS_NHIST ? b : SF_RUNS_NHIST - 1;
}

void sf_runs_tally_add(struct sf_runs_tally *t, const uint32_t *pos, size_t k,
		       uint64_t entry_bytes, struct sf_run *scratch)
{
	t->tokens++;
	t->active += k;
	for (int g = 0; g < SF_RUNS_NGAPS; g++) {
		size_t nr = sf_runs_plan(pos, k, sf_runs_gaps[g], scratch);
		t->runs[g] += nr;
		for (size_t i = 0; i < nr; i++) {
			t->read[g] += scratch[i].len;
			if (g == 0)
				t->hist[hist_bucket(scratch[i].len)]++;
		}
		t->bytes[g] += sf_runs_bytes(scratch, nr, entry_bytes, SF_RUNS_BLOCK);
	}
}
