/* mktrace: writes a synthetic activation trace of a realistic shape for
 * benchmarks of sf-coact (tests/bench/coact.sh): one layer, one group of
 * N entries, T tokens, exactly round(D*N) active entries per token drawn
 * with skewed per-entry probabilities. Written to stdout or -o FILE. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cli.h"
#include "formats/trace.h"

#define DEFAULT_ENTRIES 11008
#define DEFAULT_TOKENS 65536
#define DEFAULT_DENSITY 0.3

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t next_rand(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dull;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "entries", required_argument, NULL, 'n' },
		{ "tokens", required_argument, NULL, 'T' },
		{ "density", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t n = DEFAULT_ENTRIES, tokens = DEFAULT_TOKENS;
	double density = DEFAULT_DENSITY;
	const char *output = NULL;
	int c;

	sf_progname = "mktrace";
	while ((c = getopt_long(argc, argv, "o:h", lo, NULL)) != -1) {
		switch (c) {
		case 'o': output = optarg; break;
		case 'n': n = sf_opt_u64("--entries", optarg, 1, SF_TRACE_MAX_ENTRIES); break;
		case 'T': tokens = sf_opt_u64("--tokens", optarg, 1, UINT32_MAX); break;
		case 'd': density = sf_opt_f64("--density", optarg, 1e-9, 1.0); break;
		case 'h':
			printf("Usage: mktrace [-o FILE] [--entries N] [--tokens T] [--density D]\n"
			       "Synthetic trace: one layer, ffn_out of N entries (default %d), T tokens\n"
			       "(default %d), density D (default %g).\n", DEFAULT_ENTRIES,
			       DEFAULT_TOKENS, DEFAULT_DENSITY);
			return 0;
		default: return 2;
		}
	}
	uint32_t entries[SF_NKINDS] = { 4096, 4096, 4096, (uint32_t)n, 0 };
	struct sf_trace_info info;
	struct sf_trace_writer *w = NULL;
	struct sf_out out;
	struct sf_err e = { 0 };
	json_t *meta = json_pack("{s:s, s:s}", "task", "synthetic", "producer", "mktrace");
	int ret = sf_trace_info_init(&info, &(struct sf_fingerprint){ "5e5e5e5e5e5e5e5e", "5e5e5e5e5e5e5e5e" }, 1, entries, 0, 0, 0,
				     1u << SF_GROUP_FFN_OUT, SF_TRACE_DENSITY, density, meta, &e);
	json_decref(meta);
	if (ret || (ret = sf_out_open(&out, output, 1, NULL)) ||
	    (ret = sf_trace_writer_open(&w, out.f, out.path, &info, &e))) {
		if (e.msg[0])
			sf_error("%s", e.msg);
		return 1;
	}
	/* entry i is drawn with weight ~ 1 / (1 + i % 97): some entries hot,
	 * most cold, in a pattern that is not the index order */
	uint32_t k = info.slots[0].k;
	for (uint64_t t = 0; t < tokens && !ret; t++) {
		uint64_t *row = sf_trace_writer_row(w, 0);
		uint32_t got = 0;
		while (got < k) {
			uint32_t i = (uint32_t)(next_rand() % n);
			uint32_t hot = (uint32_t)(i * 2654435761u % 97);
			if (next_rand() % (1 + hot / 8) != 0 || (row[i / 64] >> (i % 64) & 1))
				continue;
			row[i / 64] |= 1ull << (i % 64);
			got++;
		}
		ret = sf_trace_writer_token(w, &e);
	}
	if (!ret)
		ret = sf_trace_writer_finish(w, &e);
	if (ret)
		sf_error("%s", e.msg);
	sf_trace_writer_free(w);
	sf_trace_info_free(&info);
	if (!ret)
		ret = sf_out_commit(&out);
	sf_out_abort(&out);
	return ret ? 1 : 0;
}
