/* AMX's tiles inside the AVX-512 level (x86-64), for the kernel families
 * that use them where the CPU has them (sf_cpu_has_feature "amx-int8"):
 * the target every such function compiles for, and LDTILECFG's operand.
 * A function configures the tiles, runs, and releases them before it
 * returns, so that no state outlives a call. */
#ifndef SF_AMX_H
#define SF_AMX_H

#include <stdint.h>

#define SF_TAMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni," \
				      "avx512vbmi,f16c,fma,amx-tile,amx-int8")))

/* LDTILECFG's 64 bytes (palette 1): each tile's rows and bytes a row. */
struct sf_amx_config {
	uint8_t palette, start_row, reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
} __attribute__((aligned(64)));

/* LDTILECFG of *cfg. GCC 12's _tile_loadconfig tells the compiler it
 * reads 8 bytes, which let it drop the stores of the rows and widths
 * before it (the tiles unconfigured: SIGILL); this asm reads all 64. */
static inline SF_TAMX void sf_amx_load_config(const struct sf_amx_config *cfg)
{
	__asm__ volatile("ldtilecfg %0" : : "m"(*cfg));
}

#endif
