/* kernels_x86.h — pieces the AVX2 and AVX-512 kernel files share (x86-64 GCC/clang only).
 *
 * Role: the weight descriptor, the scalar decode of one element, and the fixed
 * 8-lane horizontal sum of kernels.h, compiled for AVX2 and inlined into
 * either family (an AVX-512 function may inline AVX2 code), so both finish
 * every element with literally the same operations.
 */
#ifndef CB_KERNELS_X86_H
#define CB_KERNELS_X86_H
#include <immintrin.h>
#include <math.h>
#include "kernels.h"

#define AVX2_FN static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define AVX2_OUTLINE __attribute__((noinline, target("avx2,fma,f16c")))

typedef struct {
    const unsigned char *data; /* row 0 start */
    const float *scales;
    size_t row_bytes;
    int32_t cols, ngroups, zero;
} wdesc;

AVX2_FN float dec1(int dtype, const unsigned char *row, const float *gscale, int32_t zero, size_t k) {
    switch (dtype) {
    case CB_F32: return ((const float *)row)[k];
    case CB_F16: return cb_f16_to_f32(((const uint16_t *)row)[k]);
    case CB_BF16: return cb_bf16_to_f32(((const uint16_t *)row)[k]);
    case CB_I8_ROW: return (float)((const int8_t *)row)[k];
    case CB_I8_MINMAX: return (float)((int32_t)((const int8_t *)row)[k] - zero);
    default: return (float)((const int8_t *)row)[k] * gscale[k / (size_t)cb_group_size(dtype)];
    }
}

AVX2_FN float hsum(__m256 a) {
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
    return _mm_cvtss_f32(v);
}

AVX2_FN size_t elem_bytes(int dtype) { return dtype == CB_F32 ? 4 : (dtype == CB_F16 || dtype == CB_BF16) ? 2 : 1; }

/* One element's end of the kernels.h sequence: 8-lane sum, scalar tail, row/matrix scale. */
AVX2_FN float finish(int dtype, const wdesc *d, int32_t r, __m256 acc, const unsigned char *row,
                     const float *gscale, const float *x) {
    size_t K = (size_t)d->cols, K8 = K - K % 8;
    float s = hsum(acc);
    for (size_t k = K8; k < K; k++) s = fmaf(dec1(dtype, row, gscale, d->zero, k), x[k], s);
    if (dtype == CB_I8_ROW) s = s * d->scales[r];
    else if (dtype == CB_I8_MINMAX) s = s * d->scales[0];
    return s;
}

#endif
