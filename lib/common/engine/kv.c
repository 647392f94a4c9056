/* The KV cache's rows: see kv.h. */
#include "engine/kv.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "base/bytes.h"
#include "base/quant.h"
#include "base/vocab.h"
#include "engine/cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

static const char *const type_names[] = { "f32", "f16", "q8_0" };

const char *sf_kv_type_name(enum sf_kv_type t)
{
	return type_names[t];
}

int sf_kv_type_parse(const char *name, enum sf_kv_type *t)
{
	for (size_t i = 0; i < sizeof(type_names) / sizeof(type_names[0]); i++)
		if (!strcmp(name, type_names[i])) {
			*t = (enum sf_kv_type)i;
			return 0;
		}
	return -1;
}

int sf_kv_type_fits(enum sf_kv_type t, size_t head_dim)
{
	return t != SF_KV_Q8_0 || head_dim % SF_KV_Q8_0_BLOCK == 0;
}

size_t sf_kv_row_bytes(enum sf_kv_type t, size_t n)
{
	switch (t) {
	case SF_KV_F16: return 2 * n;
	case SF_KV_Q8_0: return n / SF_KV_Q8_0_BLOCK * SF_KV_Q8_0_BYTES;
	default: return 4 * n;
	}
}

void sf_kv_put(void *row, enum sf_kv_type t, const float *x, size_t n)
{
	uint8_t *r = row;

	switch (t) {
	case SF_KV_F32:
		memcpy(r, x, n * sizeof(float));
		break;
	case SF_KV_F16:
		for (size_t i = 0; i < n; i++)
			sf_put_le16(r + 2 * i, sf_f32_to_f16(x[i]));
		break;
	case SF_KV_Q8_0:
		for (size_t b = 0; b < n / SF_KV_Q8_0_BLOCK; b++, r += SF_KV_Q8_0_BYTES) {
			const float *v = x + b * SF_KV_Q8_0_BLOCK;
			float amax = 0.0f;
			for (size_t i = 0; i < SF_KV_Q8_0_BLOCK; i++)
				amax = sf_q8_amax(amax, v[i]);
			/* id 0 (d 0, or below about 2^-128 where 1 / d
			 * overflows, or non-finite): codes 0; a non-finite
			 * input leaves d, and so the block, non-finite */
			float d = amax / 127.0f, id = 1.0f / d;
			id = id <= FLT_MAX ? id : 0.0f;
			sf_put_le16(r, sf_f32_to_f16(d));
			for (size_t i = 0; i < SF_KV_Q8_0_BLOCK; i++)
				r[2 + i] = id != 0.0f ? (uint8_t)(int8_t)roundf(v[i] * id) : 0;
		}
		break;
	}
}

/* Element i of the row at r. */
static float kv_at(const uint8_t *r, enum sf_kv_type t, size_t i)
{
	float f;

	switch (t) {
	case SF_KV_F16:
		return sf_f16_to_f32(sf_get_le16(r + 2 * i));
	case SF_KV_Q8_0: {
		const uint8_t *b = r + i / SF_KV_Q8_0_BLOCK * SF_KV_Q8_0_BYTES;
		return sf_f16_to_f32(sf_get_le16(b)) * (float)(int8_t)b[2 + i % SF_KV_Q8_0_BLOCK];
	}
	default:
		memcpy(&f, r + 4 * i, 4);
		return f;
	}
}

void sf_kv_widen_ref(float *out, const void *rows, enum sf_kv_type t, size_t ld, size_t off,
		     size_t n, size_t d)
{
	for (size_t p = 0; p < n; p++)
		for (size_t i = 0; i < d; i++)
			out[p * d + i] = kv_at((const uint8_t *)rows + p * ld, t, off + i);
}

typedef void kv_widen_fn(float *out, const void *rows, enum sf_kv_type t, size_t ld, size_t off,
			 size_t n, size_t d);

#if defined(__x86_64__)

#define T256 __attribute__((target("avx2,fma,f16c")))
#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

/* f16 eight at a time; q8_0 a block at a time, its scale times the codes
 * widened to f32 (one rounding, as kv_at); f32 and the tails as the _ref. */
static T256 void kv_widen_avx2(float *out, const void *rows, enum sf_kv_type t, size_t ld,
			       size_t off, size_t n, size_t d)
{
	for (size_t p = 0; p < n; p++) {
		const uint8_t *r = (const uint8_t *)rows + p * ld;
		float *o = out + p * d;
		size_t i = 0;
		if (t == SF_KV_F16)
			for (; i + 8 <= d; i += 8)
				_mm256_storeu_ps(o + i, _mm256_cvtph_ps(_mm_loadu_si128(
					(const __m128i *)(r + 2 * (off + i)))));
		if (t == SF_KV_Q8_0)
			for (; i < d; i += SF_KV_Q8_0_BLOCK) {
				const uint8_t *b = r + (off + i) / SF_KV_Q8_0_BLOCK * SF_KV_Q8_0_BYTES;
				__m256 s = _mm256_set1_ps(sf_f16_to_f32(sf_get_le16(b)));
				for (size_t j = 0; j < SF_KV_Q8_0_BLOCK; j += 8) {
					__m256i c = _mm256_cvtepi8_epi32(_mm_loadl_epi64(
						(const __m128i *)(b + 2 + j)));
					_mm256_storeu_ps(o + i + j, _mm256_mul_ps(s, _mm256_cvtepi32_ps(c)));
				}
			}
		if (i < d)
			sf_kv_widen_ref(o + i, r, t, ld, off + i, 1, d - i);
	}
}

static T512 void kv_widen_avx512(float *out, const void *rows, enum sf_kv_type t, size_t ld,
				 size_t off, size_t n, size_t d)
{
	for (size_t p = 0; p < n; p++) {
		const uint8_t *r = (const uint8_t *)rows + p * ld;
		float *o = out + p * d;
		size_t i = 0;
		if (t == SF_KV_F16)
			for (; i + 16 <= d; i += 16)
				_mm512_storeu_ps(o + i, _mm512_cvtph_ps(_mm256_loadu_si256(
					(const __m256i *)(r + 2 * (off + i)))));
		if (t == SF_KV_Q8_0)
			for (; i < d; i += SF_KV_Q8_0_BLOCK) {
				const uint8_t *b = r + (off + i) / SF_KV_Q8_0_BLOCK * SF_KV_Q8_0_BYTES;
				__m512 s = _mm512_set1_ps(sf_f16_to_f32(sf_get_le16(b)));
				for (size_t j = 0; j < SF_KV_Q8_0_BLOCK; j += 16) {
					__m512i c = _mm512_cvtepi8_epi32(_mm_loadu_si128(
						(const __m128i *)(b + 2 + j)));
					_mm512_storeu_ps(o + i + j, _mm512_mul_ps(s, _mm512_cvtepi32_ps(c)));
				}
			}
		if (i < d)
			sf_kv_widen_ref(o + i, r, t, ld, off + i, 1, d - i);
	}
}

#endif /* __x86_64__ */

#if defined(__aarch64__)

/* NEON: f16 four at a time (FCVTL); q8_0 a block at a time, its scale
 * times the codes widened to f32 (one rounding, as kv_at); f32 and the
 * tails as the _ref. */
static void kv_widen_neon(float *out, const void *rows, enum sf_kv_type t, size_t ld, size_t off,
			  size_t n, size_t d)
{
	for (size_t p = 0; p < n; p++) {
		const uint8_t *r = (const uint8_t *)rows + p * ld;
		float *o = out + p * d;
		size_t i = 0;
		if (t == SF_KV_F16)
			for (; i + 4 <= d; i += 4)
				vst1q_f32(o + i, vcvt_f32_f16(vreinterpret_f16_u16(
					vld1_u16((const uint16_t *)(r + 2 * (off + i))))));
		if (t == SF_KV_Q8_0)
			for (; i < d; i += SF_KV_Q8_0_BLOCK) {
				const uint8_t *b = r + (off + i) / SF_KV_Q8_0_BLOCK * SF_KV_Q8_0_BYTES;
				float s = sf_f16_to_f32(sf_get_le16(b));
				for (size_t j = 0; j < SF_KV_Q8_0_BLOCK; j += 8) {
					int16x8_t c = vmovl_s8(vld1_s8((const int8_t *)(b + 2 + j)));
					vst1q_f32(o + i + j, vmulq_n_f32(vcvtq_f32_s32(
						vmovl_s16(vget_low_s16(c))), s));
					vst1q_f32(o + i + j + 4, vmulq_n_f32(vcvtq_f32_s32(
						vmovl_high_s16(c)), s));
				}
			}
		if (i < d)
			sf_kv_widen_ref(o + i, r, t, ld, off + i, 1, d - i);
	}
}

#endif /* __aarch64__ */

// ----------------------------------------------------------------------------
// the family's table, indexed by enum sf_isa (engine/cpu.h)

static kv_widen_fn *const kv_widen_table[SF_NISA] = {
	[SF_ISA_REF] = sf_kv_widen_ref,
#if defined(__x86_64__)
	[SF_ISA_AVX2] = kv_widen_avx2,
	[SF_ISA_AVX512] = kv_widen_avx512,
#else
	[SF_ISA_AVX2] = sf_kv_widen_ref,
	[SF_ISA_AVX512] = sf_kv_widen_ref,
#endif
#if defined(__aarch64__)
	[SF_ISA_NEON] = kv_widen_neon,
	[SF_ISA_DOTPROD] = kv_widen_neon,
	[SF_ISA_I8MM] = kv_widen_neon,
#else
	[SF_ISA_NEON] = sf_kv_widen_ref,
	[SF_ISA_DOTPROD] = sf_kv_widen_ref,
	[SF_ISA_I8MM] = sf_kv_widen_ref,
#endif
};

void sf_kv_widen(float *out, const void *rows, enum sf_kv_type t, size_t ld, size_t off,
		 size_t n, size_t d)
{
	kv_widen_table[sf_cpu_isa()](out, rows, t, ld, off, n, d);
}
