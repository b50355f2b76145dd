/* attn_simd.c — the element-wise loops of cb_attention's value pass, scalar and AVX2.
 *
 * Role: acc[c] = acc[c] + p[j] * v_j[c] for a run of value rows j in ascending
 * order (the PV accumulation: separate multiply and add, so every lane width
 * rounds each element the same way; the AVX2 version keeps a 64-column tile
 * of acc in registers across the rows), and exact f16 -> f32 row decoding
 * (F16C or cb_f16_to_f32). Both give the same bits on every SIMD level; the
 * level's kernel table (simd.c) names which one runs.
 */
#include "kernels.h"
#include "kv_internal.h"

void cb_pv_rows_scalar(float *acc, const float *p, const float *const *v, int32_t nj, int32_t n) {
    for (int32_t c = 0; c < n; c++) {
        float a = acc[c];
        for (int32_t j = 0; j < nj; j++) a = a + p[j] * v[j][c];
        acc[c] = a;
    }
}

void cb_f16_row_scalar(const uint16_t *src, float *dst, int32_t n) {
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

AVX2_OUTLINE void cb_pv_rows_avx2(float *acc, const float *p, const float *const *v, int32_t nj, int32_t n) {
    int32_t c = 0;
    for (; c + 64 <= n; c += 64) pv_tile(8, acc, p, v, nj, c);
    for (; c + 8 <= n; c += 8) pv_tile(1, acc, p, v, nj, c);
    for (; c < n; c++) {
        float a = acc[c];
        for (int32_t j = 0; j < nj; j++) a = a + p[j] * v[j][c];
        acc[c] = a;
    }
}

AVX2_OUTLINE void cb_f16_row_avx2(const uint16_t *src, float *dst, int32_t n) {
    int32_t c = 0;
    for (; c + 8 <= n; c += 8) _mm256_storeu_ps(dst + c, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + c))));
    for (; c < n; c++) dst[c] = cb_f16_to_f32(src[c]);
}
#else
void cb_pv_rows_avx2(float *acc, const float *p, const float *const *v, int32_t nj, int32_t n) {
    cb_pv_rows_scalar(acc, p, v, nj, n);
}
void cb_f16_row_avx2(const uint16_t *src, float *dst, int32_t n) { cb_f16_row_scalar(src, dst, n); }
#endif

/* The active level's loops (simd.c's table). */
void cb_pv_rows(float *acc, const float *p, const float *const *v, int32_t nj, int32_t n) {
    cb_kernels()->pv_rows(acc, p, v, nj, n);
}

void cb_f16_row(const uint16_t *src, float *dst, int32_t n) { cb_kernels()->f16_row(src, dst, n); }
