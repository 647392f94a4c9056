/* CPU features and the one dispatch style of every kernel family (ggml's):
 * each family keeps a table of its implementations indexed by enum sf_isa,
 * a plain C _ref path that always compiles at SF_ISA_REF, and calls
 * table[sf_cpu_isa()]. A family without a path at some level repeats the
 * one below it on its architecture in its table (x86-64: AVX-512 over
 * AVX2 over REF; aarch64: I8MM over DOTPROD over NEON over REF), and every
 * level of the other architecture holds the _ref (never chosen there). */
#ifndef SF_CPU_H
#define SF_CPU_H

#include <stddef.h>

enum sf_isa {
	SF_ISA_REF,	/* portable C, the reference every other path is tested against */
	SF_ISA_AVX2,	/* AVX2 + FMA + F16C (+ POPCNT) */
	SF_ISA_AVX512,	/* AVX-512 F, BW, VL, DQ */
	SF_ISA_NEON,	/* aarch64 Advanced SIMD (every ARMv8.0-A core) */
	SF_ISA_DOTPROD,	/* NEON + ARMv8.2 dot product (SDOT/UDOT: HWCAP_ASIMDDP) */
	SF_ISA_I8MM,	/* DOTPROD + int8 matrix multiply (SMMLA: HWCAP2_I8MM) */
	SF_NISA
};

/* "ref", "avx2", "avx512", "neon", "dotprod", "i8mm". */
const char *sf_isa_name(enum sf_isa isa);
/* 0 and *isa set, or -EINVAL for an unknown name. */
int sf_isa_parse(const char *name, enum sf_isa *isa);

/* Does this CPU (and this build) run isa's paths? */
int sf_cpu_has(enum sf_isa isa);
/* Finer features some families use inside a level ("avx512vpopcntdq"):
 * __builtin_cpu_supports' names, and "amx-int8" (AMX's tiles and int8
 * products, once the kernel grants the process their state: the first
 * call asks); 0 off x86-64. */
int sf_cpu_has_feature(const char *name);

/* Lets (on 1, the default) or keeps (0) the families inside the AVX-512
 * level from AMX's tiles where the CPU has them, so that tests check the
 * paths with and without them on one machine ("amx-int8" then reads 0).
 * Not while kernels are running. */
void sf_cpu_use_amx(int on);

/* The level every family uses now: the best this CPU has, unless
 * sf_cpu_use set another. */
enum sf_isa sf_cpu_isa(void);
/* Makes every family use level isa (SF_ISA_REF: the references; the
 * commands do this for SF_REF=1, tests for each level in turn). 0, or
 * -ENOTSUP when this CPU lacks it. Not while kernels are running. */
int sf_cpu_use(enum sf_isa isa);
/* Back to the best level. */
void sf_cpu_use_best(void);

/* Bytes ahead of its loads that a kernel streaming weights from memory
 * (slabs, tiles) asks for them by software prefetch: 2 KiB on Intel, 4 KiB
 * elsewhere. Measured with tests/bench/qint, 5,632 x 2,048 q4, one and
 * two threads: on a Sapphire Rapids Xeon 2 KiB streams AVX-512 slabs at
 * 16 and 27 GB/s against 13 and 23 at 4 KiB (tiles 16 and 30 against 12
 * and 21; 1 KiB no better); on Zen 5, where 4 KiB was chosen, 0 and 1 KiB
 * were slower in sf-run's decode and 16 KiB no faster. */
size_t sf_cpu_ahead(void);

#endif
