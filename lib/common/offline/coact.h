/* Co-activation statistics accumulated from activation traces (sf-coact(1)
 * building .sfc): each block of trace rows is transposed into per-entry
 * bit vectors, whose pairs are counted with a bit-sliced AND + popcount
 * over the pool. The statistics, their memory and the .sfc reader and
 * writer are formats/coact.h's. */
#ifndef SF_OFFLINE_COACT_H
#define SF_OFFLINE_COACT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "formats/coact.h"
#include "formats/trace.h"

/* Sets c up for the slots of a trace within layers [lo, hi] (no big
 * allocation yet: sf_coact_alloc with accumulate); an experts slot counts
 * the step from the layer before when the trace records that layer's
 * experts, inside [lo, hi] or not. name: the trace, in messages. */
int sf_coact_plan_trace(struct sf_coact *c, const struct sf_trace_info *info,
			const char *name, int lo, int hi, struct sf_err *e);
/* Adds a whole trace: it must be of the same model and selection and
 * record every slot of c. Refuses (SF_ELIMIT) before a slot would count
 * more than SF_COACT_MAX_TOKENS tokens. Runs on c->pool. */
int sf_coact_add_trace(struct sf_coact *c, struct sf_trace_reader *r, struct sf_err *e);

/* The pair kernel: for rows i in [i0, i1) and every j > i, adds
 * popcount(bits[i] & bits[j]) over `words` words (a multiple of 8) to
 * the pair counts. bits holds n rows of stride words. At the level of
 * engine/cpu.h: POPCNT at AVX2, VPOPCNTQ at AVX-512 when the CPU has
 * avx512vpopcntdq (else POPCNT). */
void sf_coact_pairs(const uint64_t *bits, size_t stride, size_t words, uint32_t n,
		    uint32_t i0, uint32_t i1, uint32_t *pairs);
void sf_coact_pairs_ref(const uint64_t *bits, size_t stride, size_t words, uint32_t n,
			uint32_t i0, uint32_t i1, uint32_t *pairs);
/* The pair kernel sf_coact_pairs runs now: "avx512" (VPOPCNTQ), "popcnt",
 * "neon" (CNT, aarch64) or "ref". */
const char *sf_coact_kernel(void);

#endif
