/* kernels_avx2.c — AVX2/FMA/F16C dot-product kernels, selected at run time.
 *
 * Role: the fast path of cb_dot_rows. Register tiles of TT tokens x TR rows
 * keep one 8-lane accumulator per output element, reuse each decoded weight
 * vector across the token tile, and finish every element with the same
 * horizontal sum and scalar tail as kernels_scalar.c (see kernels.h), so the
 * tile shape never changes a bit. Compiled with per-function target
 * attributes: no global -m flags.
 */
#include "kernels.h"
#include "cb_internal.h"
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels_x86.h"

/* Indices are size_t throughout: the Python build adds -fwrapv, which makes
 * int32 induction variables cost a sign extension per load. */
AVX2_FN __m256 dec8(int dtype, const unsigned char *row, const float *gscale, int32_t zero, size_t k) {
    switch (dtype) {
    case CB_F32: return _mm256_loadu_ps((const float *)row + k);
    case CB_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
    case CB_BF16: {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    }
    case CB_I8_ROW:
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(row + k))));
    case CB_I8_MINMAX: {
        __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(row + k)));
        return _mm256_cvtepi32_ps(_mm256_sub_epi32(q, _mm256_set1_epi32(zero)));
    }
    default: {
        __m256i qi = cb_is_i4(dtype) ? i4x8(row, k) : _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(row + k)));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(qi), _mm256_set1_ps(gscale[k >> group_shift(dtype)]));
    }
    }
}

/* TT tokens x TR rows starting at row r. pf != 0: software-prefetch the weights pf bytes
 * ahead (the next row tile; prefetch_span). */
AVX2_FN void tile(int dtype, int TT, int TR, const wdesc *d, int32_t r, const float *const *xs,
                  float *const *outs, size_t pf) {
    __m256 acc[4][8];
    const unsigned char *row[8];
    const float *gs[8], *xp[4];
    size_t K8 = (size_t)d->cols - (size_t)d->cols % 8;
#pragma GCC unroll 8
    for (int j = 0; j < TR; j++) {
        row[j] = d->data + (size_t)(r + j) * d->row_bytes;
        gs[j] = d->ngroups ? d->scales + (size_t)(r + j) * (size_t)d->ngroups : NULL;
    }
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++) {
        xp[i] = xs[i];
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) acc[i][j] = _mm256_setzero_ps();
    }
    size_t bits = elem_bits(dtype);
    for (size_t k = 0; k < K8; k += 8) {
        if (pf && TR == 8) /* 8 contiguous rows: walk the next tile's block linearly */
            prefetch_span(row[0] + pf, k * 8 * bits / 8, (k + 8) * 8 * bits / 8);
        else if (pf)
#pragma GCC unroll 8
            for (int j = 0; j < TR; j++) prefetch_span(row[j] + pf, k * bits / 8, (k + 8) * bits / 8);
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) {
            __m256 w = dec8(dtype, row[j], gs[j], d->zero, k);
#pragma GCC unroll 8
            for (int i = 0; i < TT; i++) acc[i][j] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xp[i] + k), acc[i][j]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++)
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) outs[i][r + j] = finish(dtype, d, r + j, acc[i][j], row[j], gs[j], xp[i]);
}

AVX2_FN void rows_for_dtype(int dtype, const wdesc *d, int32_t r0, int32_t r1, const float *const *xs,
                            float *const *outs, int64_t nt) {
    size_t rb = d->row_bytes;
    if (nt == 1) {           /* decode: memory bound, prefetch the next 8-row tile */
        int32_t r = r0;
        for (; r + 8 <= r1; r += 8) tile(dtype, 1, 8, d, r, xs, outs, 8 * rb);
        for (; r < r1; r++) tile(dtype, 1, 1, d, r, xs, outs, 0);
        return;
    }
    if (nt < 4) {     /* 2-3 tokens (an expert's share of a small batch): decode each weight once */
        int32_t r = r0;
        if (nt == 2)
            for (; r + 4 <= r1; r += 4) tile(dtype, 2, 4, d, r, xs, outs, 4 * rb);
        else
            for (; r + 3 <= r1; r += 3) tile(dtype, 3, 3, d, r, xs, outs, 3 * rb);
        for (; r < r1; r++)
            for (int64_t t = 0; t < nt; t++) tile(dtype, 1, 1, d, r, xs + t, outs + t, 0);
        return;
    }
    /* Row tiles outer, token tiles inner: the tile's weight rows stay in L1 while token rows
     * stream from L2 (the caller keeps a token chunk L2-sized); the first token tile of a
     * row tile prefetches the next row tile from memory. */
    int32_t r = r0;
    for (; r + 3 <= r1; r += 3) {
        int64_t t = 0;
        for (; t + 4 <= nt; t += 4) tile(dtype, 4, 3, d, r, xs + t, outs + t, t == 0 ? 3 * rb : 0);
        for (; t < nt; t++) tile(dtype, 1, 3, d, r, xs + t, outs + t, 0);
    }
    for (; r < r1; r++) {
        int64_t t = 0;
        for (; t + 4 <= nt; t += 4) tile(dtype, 4, 1, d, r, xs + t, outs + t, 0);
        for (; t < nt; t++) tile(dtype, 1, 1, d, r, xs + t, outs + t, 0);
    }
}

#define DTYPE_KERNEL(NAME, DT)                                                                       \
    static AVX2_OUTLINE void NAME(const wdesc *d, int32_t r0, int32_t r1, const float *const *xs,   \
                                  float *const *outs, int64_t nt) {                                  \
        rows_for_dtype(DT, d, r0, r1, xs, outs, nt);                                                 \
    }
DTYPE_KERNEL(k_f32, CB_F32)
DTYPE_KERNEL(k_f16, CB_F16)
DTYPE_KERNEL(k_bf16, CB_BF16)
DTYPE_KERNEL(k_i8row, CB_I8_ROW)
DTYPE_KERNEL(k_i8g32, CB_I8_G32)
DTYPE_KERNEL(k_i8g64, CB_I8_G64)
DTYPE_KERNEL(k_i8g128, CB_I8_G128)
DTYPE_KERNEL(k_i8mm, CB_I8_MINMAX)
DTYPE_KERNEL(k_i4g32, CB_I4_G32)
DTYPE_KERNEL(k_i4g64, CB_I4_G64)

void cb_dot_rows_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const float *const *xs,
                      float *const *outs, int64_t nt) {
    int32_t g = cb_group_size(w->dtype);
    wdesc d = {(const unsigned char *)w->data, w->scales, (size_t)cb_row_bytes(w->dtype, w->cols), w->cols,
               g ? (w->cols + g - 1) / g : 0, w->zero ? w->zero[0] : 0};
    switch (w->dtype) {
    case CB_F32: k_f32(&d, r0, r1, xs, outs, nt); break;
    case CB_F16: k_f16(&d, r0, r1, xs, outs, nt); break;
    case CB_BF16: k_bf16(&d, r0, r1, xs, outs, nt); break;
    case CB_I8_ROW: k_i8row(&d, r0, r1, xs, outs, nt); break;
    case CB_I8_G32: k_i8g32(&d, r0, r1, xs, outs, nt); break;
    case CB_I8_G64: k_i8g64(&d, r0, r1, xs, outs, nt); break;
    case CB_I8_G128: k_i8g128(&d, r0, r1, xs, outs, nt); break;
    case CB_I4_G32: k_i4g32(&d, r0, r1, xs, outs, nt); break;
    case CB_I4_G64: k_i4g64(&d, r0, r1, xs, outs, nt); break;
    default: k_i8mm(&d, r0, r1, xs, outs, nt); break;
    }
}
#else
void cb_dot_rows_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const float *const *xs,
                      float *const *outs, int64_t nt) {
    cb_dot_rows_scalar(w, r0, r1, xs, outs, nt);
}
#endif
