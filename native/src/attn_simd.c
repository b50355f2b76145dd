/* attn_simd.c — the element-wise loops of cb_attention's value pass, scalar and AVX2.
 *
 * Role: acc[c] = acc[c] + p[j] * v_j[c] for a run of value rows j in ascending
 * order (the PV accumulation: separate multiply and add, so every lane width
 * rounds each element the same way; the AVX2 version keeps a 64-column tile
 * of acc in registers across the rows), and exact f16 -> f32 row decoding
 * (F16C or cb_f16_to_f32). Both give the same bits on every SIMD level.
 */
#include "kernels.h"
#include "kv_internal.h"

static void pv_scalar(float *acc, const float *p, const float *const *v, int32_t nj, int32_t n) {
    for (int32_t c = 0; c < n; c++) {
        float a = acc[c];
        for (int32_t j = 0; j < nj; j++) a = a + p[j] * v[j][c];
        acc[c] = a;
    }
}

static void f16_scalar(const uint16_t *src, float *dst, int32_t n) {
    for (int32_t c = 0; c < n; c++) dst[c] = cb_f16_to_f32(src[c]);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AVX2_FN static inline __attribute__((always_inline, target("avx2,f16c")))
#define AVX2_OUTLINE __attribute__((noinline, target("avx2,f16c")))

/* W ymm accumulators (8 columns each) starting at column c, over every row. */
AVX2_FN void pv_tile(int W, float *acc, const float *p, const float *const *v, int32_t nj, int32_t c) {
    __m256 a[8];
#pragma GCC unroll 8
    for (int w = 0; w < W; w++) a[w] = _mm256_loadu_ps(acc + c + 8 * w);
    for (int32_t j = 0; j < nj; j++) {
        __m256 pj = _mm256_set1_ps(p[j]);
        const float *vr = v[j] + c;
#pragma GCC unroll 8
        for (int w = 0; w < W; w++) a[w] = _mm256_add_ps(a[w], _mm256_mul_ps(pj, _mm256_loadu_ps(vr + 8 * w)));
    }
#pragma GCC unroll 8
    for (int w = 0; w < W; w++) _mm256_storeu_ps(acc + c + 8 * w, a[w]);
}

static AVX2_OUTLINE void pv_avx2(float *acc, const float *p, const float *const *v, int32_t nj, int32_t n) {
    int32_t c = 0;
    for (; c + 64 <= n; c += 64) pv_tile(8, acc, p, v, nj, c);
    for (; c + 8 <= n; c += 8) pv_tile(1, acc, p, v, nj, c);
    for (; c < n; c++) {
        float a = acc[c];
        for (int32_t j = 0; j < nj; j++) a = a + p[j] * v[j][c];
        acc[c] = a;
    }
}

static AVX2_OUTLINE void f16_avx2(const uint16_t *src, float *dst, int32_t n) {
    int32_t c = 0;
    for (; c + 8 <= n; c += 8) _mm256_storeu_ps(dst + c, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + c))));
    for (; c < n; c++) dst[c] = cb_f16_to_f32(src[c]);
}
#define FAST (cb_simd_level() >= 2)
#else
#define pv_avx2 pv_scalar
#define f16_avx2 f16_scalar
#define FAST 0
#endif

void cb_pv_rows(float *acc, const float *p, const float *const *v, int32_t nj, int32_t n) {
    if (FAST) pv_avx2(acc, p, v, nj, n);
    else pv_scalar(acc, p, v, nj, n);
}

void cb_f16_row(const uint16_t *src, float *dst, int32_t n) {
    if (FAST) f16_avx2(src, dst, n);
    else f16_scalar(src, dst, n);
}
