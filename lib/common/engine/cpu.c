/* CPU features and the level every kernel family uses: see cpu.h. */
#include "engine/cpu.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

static const char *const isa_names[SF_NISA] = { "ref", "avx2", "avx512", "neon", "dotprod",
						  "i8mm" };

const char *sf_isa_name(enum sf_isa isa)
{
	return (unsigned)isa < SF_NISA ? isa_names[isa] : "?";
}

int sf_isa_parse(const char *name, enum sf_isa *isa)
{
	for (int i = 0; i < SF_NISA; i++)
		if (!strcmp(name, isa_names[i])) {
			*isa = (enum sf_isa)i;
			return 0;
		}
	return -EINVAL;
}

int sf_cpu_has(enum sf_isa isa)
{
	switch (isa) {
	case SF_ISA_REF:
		return 1;
#if defined(__x86_64__)
	case SF_ISA_AVX2:
		__builtin_cpu_init();
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
		       __builtin_cpu_supports("f16c") && __builtin_cpu_supports("popcnt");
	case SF_ISA_AVX512:
		__builtin_cpu_init();
		return sf_cpu_has(SF_ISA_AVX2) && __builtin_cpu_supports("avx512f") &&
		       __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
		       __builtin_cpu_supports("avx512dq");
#endif
#if defined(__aarch64__)
	case SF_ISA_NEON:
		return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0;
	case SF_ISA_DOTPROD:
		return sf_cpu_has(SF_ISA_NEON) && (getauxval(AT_HWCAP) & HWCAP_ASIMDDP);
	case SF_ISA_I8MM:
		return sf_cpu_has(SF_ISA_DOTPROD) && (getauxval(AT_HWCAP2) & HWCAP2_I8MM);
#endif
	default:
		return 0;
	}
}

#if defined(__x86_64__)
/* Linux's request for a process's leave to use a state component
 * (asm/prctl.h), and AMX's tile data's */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* AMX's tiles and their int8 products (CPUID leaf 7: EDX bits 24 and 25)
 * with the kernel's leave to use them: Linux gives a process the tiles'
 * 8 KB of state only when asked (5.16 on; an older kernel refuses, and
 * then there is no AMX). Asked once; racing first callers ask twice,
 * which changes nothing. */
static int amx_int8(void)
{
	static _Atomic int amx = -1;
	int a = atomic_load_explicit(&amx, memory_order_relaxed);
	unsigned eax, ebx, ecx, edx;

	if (a < 0) {
		a = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx >> 24 & 1) &&
		    (edx >> 25 & 1) &&
		    syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
		atomic_store_explicit(&amx, a, memory_order_relaxed);
	}
	return a;
}
#endif

static _Atomic int amx_on = 1;

void sf_cpu_use_amx(int on)
{
	atomic_store_explicit(&amx_on, on != 0, memory_order_relaxed);
}

int sf_cpu_has_feature(const char *name)
{
#if defined(__x86_64__)
	if (!strcmp(name, "amx-int8"))
		return atomic_load_explicit(&amx_on, memory_order_relaxed) && amx_int8();
	__builtin_cpu_init();
	/* __builtin_cpu_supports takes only literals */
	if (!strcmp(name, "avx512vpopcntdq"))
		return __builtin_cpu_supports("avx512vpopcntdq");
	if (!strcmp(name, "avx512bf16"))
		return __builtin_cpu_supports("avx512bf16");
	if (!strcmp(name, "avx512vnni"))
		return __builtin_cpu_supports("avx512vnni");
	if (!strcmp(name, "avx512vbmi"))
		return __builtin_cpu_supports("avx512vbmi");
#endif

	(void)name;
	return 0;
}

/* -1 until first use; racing first callers store the same value */
static _Atomic int isa_now = -1;

static enum sf_isa best(void)
{
	for (int i = SF_NISA - 1; i > SF_ISA_REF; i--)
		if (sf_cpu_has((enum sf_isa)i))
			return (enum sf_isa)i;
	return SF_ISA_REF;
}

enum sf_isa sf_cpu_isa(void)
{
	int i = atomic_load_explicit(&isa_now, memory_order_relaxed);
	if (i < 0) {
		i = (int)best();
		atomic_store_explicit(&isa_now, i, memory_order_relaxed);
	}
	return (enum sf_isa)i;
}

int sf_cpu_use(enum sf_isa isa)
{
	if ((unsigned)isa >= SF_NISA || !sf_cpu_has(isa))
		return -ENOTSUP;
	atomic_store_explicit(&isa_now, (int)isa, memory_order_relaxed);
	return 0;
}

void sf_cpu_use_best(void)
{
	atomic_store_explicit(&isa_now, (int)best(), memory_order_relaxed);
}

size_t sf_cpu_ahead(void)
{
	static _Atomic size_t ahead;	/* 0 until first use, as isa_now */
	size_t a = atomic_load_explicit(&ahead, memory_order_relaxed);

	if (!a) {
		a = 4096;
#if defined(__x86_64__)
		__builtin_cpu_init();
		if (__builtin_cpu_is("intel"))
			a = 2048;
#endif
		atomic_store_explicit(&ahead, a, memory_order_relaxed);
	}
	return a;
}
