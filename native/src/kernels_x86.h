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
    default: {
        float q = cb_is_i4(dtype) ? (float)cb_i4_at(row, k) : (float)((const int8_t *)row)[k];
        return q * gscale[k / (size_t)cb_group_size(dtype)];
    }
    }
}

AVX2_FN float hsum(__m256 a) {
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
    return _mm_cvtss_f32(v);
}

/* Bits per stored element (constant-folds inside the per-dtype kernels). */
AVX2_FN size_t elem_bits(int dtype) {
    return dtype == CB_F32 ? 32 : (dtype == CB_F16 || dtype == CB_BF16) ? 16 : cb_is_i4(dtype) ? 4 : 8;
}

/* log2 of the group size of a group-scaled dtype. */
AVX2_FN size_t group_shift(int dtype) {
    return (dtype == CB_I8_G32 || dtype == CB_I4_G32) ? 5 : (dtype == CB_I8_G64 || dtype == CB_I4_G64) ? 6 : 7;
}

/* Software prefetch (into L2: T0 measured ~30% slower, it crowds L1's miss buffers) of the
 * 64-byte lines of base[from, to), both rounded up to a line: callers walk a block in
 * consecutive spans, so each line is requested once. */
AVX2_FN void prefetch_span(const unsigned char *base, size_t from, size_t to) {
    for (size_t b = (from + 63) & ~(size_t)63; b < ((to + 63) & ~(size_t)63); b += 64)
        _mm_prefetch((const char *)base + b, _MM_HINT_T1);
}

/* Signed int4 codes k..k+7 of an int4 row (k a multiple of 8) as 8 int32 lanes: nibble l
 * shifted to the top of lane l, then an arithmetic shift sign-extends it. */
AVX2_FN __m256i i4x8(const unsigned char *row, size_t k) {
    int32_t v;
    __builtin_memcpy(&v, row + k / 2, 4);
    __m256i t = _mm256_sllv_epi32(_mm256_set1_epi32(v), _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0));
    return _mm256_srai_epi32(t, 28);
}

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
