/* attn_simd.c — the two element-wise loops of cb_attention's value pass, scalar and AVX2.
 *
 * Role: acc += p * v (the PV accumulation, separate multiply and add: every
 * lane width rounds each element the same way) and exact f16 -> f32 row
 * decoding (F16C or cb_f16_to_f32). Both give the same bits on every SIMD
 * level; the AVX2 versions only make the value pass cheaper.
 */
#include "kernels.h"
#include "kv_internal.h"

static void acc_scalar(float *acc, float p, const float *v, int32_t n) {
    for (int32_t c = 0; c < n; c++) acc[c] = acc[c] + p * v[c];
}

static void f16_scalar(const uint16_t *src, float *dst, int32_t n) {
    for (int32_t c = 0; c < n; c++) dst[c] = cb_f16_to_f32(src[c]);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AVX2_OUTLINE __attribute__((noinline, target("avx2,f16c")))

static AVX2_OUTLINE void acc_avx2(float *acc, float p, const float *v, int32_t n) {
    __m256 pv = _mm256_set1_ps(p);
    int32_t c = 0;
    for (; c + 8 <= n; c += 8)
        _mm256_storeu_ps(acc + c, _mm256_add_ps(_mm256_loadu_ps(acc + c), _mm256_mul_ps(pv, _mm256_loadu_ps(v + c))));
    for (; c < n; c++) acc[c] = acc[c] + p * v[c];
}

static AVX2_OUTLINE void f16_avx2(const uint16_t *src, float *dst, int32_t n) {
    int32_t c = 0;
    for (; c + 8 <= n; c += 8) _mm256_storeu_ps(dst + c, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + c))));
    for (; c < n; c++) dst[c] = cb_f16_to_f32(src[c]);
}
#define FAST (cb_simd_level() >= 2)
#else
#define acc_avx2 acc_scalar
#define f16_avx2 f16_scalar
#define FAST 0
#endif

void cb_acc_scaled(float *acc, float p, const float *v, int32_t n) {
    if (FAST) acc_avx2(acc, p, v, n);
    else acc_scalar(acc, p, v, n);
}

void cb_f16_row(const uint16_t *src, float *dst, int32_t n) {
    if (FAST) f16_avx2(src, dst, n);
    else f16_scalar(src, dst, n);
}
