/* kernels_q8.c — opt-in w8a8 path: int8 weights (CB_I8_ROW) x per-token int8 activations.
 *
 * Role: the integer-dot alternative to cb_dot_rows for engines with w8a8 on.
 * Activations are quantized per row: amax = max|x|, qx = rint(x * (127/amax))
 * (clamped to +-127), sx = amax / 127. The dot is an exact int32 sum, so the
 * reduction order is irrelevant and every tiling, thread split and SIMD path
 * gives the same bits: out = ((float)sum_k qw[r,k] * qx[k] * sx) * scale[r].
 * The AVX2 path multiplies int16 pairs with vpmaddwd (16 MACs per instruction).
 */
#include <math.h>
#include "kernels.h"

/* max |x[k]|: exact in any order (finite inputs), so the SIMD versions give the same value. */
float cb_amax_scalar(const float *x, int32_t K) {
    float amax = 0.0f;
    for (int32_t k = 0; k < K; k++) amax = fabsf(x[k]) > amax ? fabsf(x[k]) : amax;
    return amax;
}

void cb_quantize_q8_scalar(const float *x, int32_t K, float inv, int16_t *q) {
    for (int32_t k = 0; k < K; k++) {
        float v = rintf(x[k] * inv);
        q[k] = (int16_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
__attribute__((target("avx2,fma,f16c")))
float cb_amax_avx2(const float *x, int32_t K) {
    size_t n = (size_t)K, n8 = n - n % 8;
    __m256 m = _mm256_setzero_ps(), mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (size_t k = 0; k < n8; k += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + k), mask));
    float lanes[8], amax = cb_amax_scalar(x + n8, (int32_t)(n - n8));
    _mm256_storeu_ps(lanes, m);
    for (int l = 0; l < 8; l++) amax = lanes[l] > amax ? lanes[l] : amax;
    return amax;
}

/* Same bits as quantize_scalar: one rounded multiply, round-to-nearest-even, clamp. */
__attribute__((target("avx2,fma,f16c")))
void cb_quantize_q8_avx2(const float *x, int32_t K, float inv, int16_t *q) {
    size_t n = (size_t)K, n8 = n - n % 8;
    __m256 vinv = _mm256_set1_ps(inv), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    for (size_t k = 0; k < n8; k += 8) {
        __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k), vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256i i = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(v, hi), lo));
        __m128i p = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
        _mm_storeu_si128((__m128i *)(q + k), p);
    }
    cb_quantize_q8_scalar(x + n8, (int32_t)(n - n8), inv, q + n8);
}
#endif

void cb_quantize_row_q8(const float *x, int32_t K, int16_t *q, float *scale) {
    float amax = cb_kernels()->amax(x, K);
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    cb_kernels()->quantize_q8(x, K, inv, q);
    *scale = amax / 127.0f;
}

static float finish_q8(const cb_matrix *w, int32_t r, int32_t isum, float sx) {
    return ((float)isum * sx) * w->scales[r];
}

void cb_dot_rows_q8_scalar(const cb_matrix *w, int32_t r0, int32_t r1, const int16_t *const *xq,
                           const float *sx, float *const *outs, int64_t nt) {
    size_t K = (size_t)w->cols;
    for (int32_t r = r0; r < r1; r++) {
        const int8_t *row = (const int8_t *)w->data + (size_t)r * K;
        for (int64_t t = 0; t < nt; t++) {
            int32_t s = 0;
            for (size_t k = 0; k < K; k++) s += (int32_t)row[k] * (int32_t)xq[t][k];
            outs[t][r] = finish_q8(w, r, s, sx[t]);
        }
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define Q8_FN static inline __attribute__((always_inline, target("avx2,fma,f16c")))

Q8_FN int32_t hsum_i32(__m256i a) {
    __m128i v = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    v = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 1));
    return _mm_cvtsi128_si32(v);
}

/* pf != 0: prefetch into L2 the block pf bytes ahead (the next row tile), linearly over the k loop. */
Q8_FN void tile_q8(int TT, int TR, const cb_matrix *w, int32_t r, const int16_t *const *xq, const float *sx,
                   float *const *outs, size_t pf) {
    size_t K = (size_t)w->cols, K16 = K - K % 16;
    const int8_t *row[4];
    __m256i acc[4][4];
#pragma GCC unroll 4
    for (int j = 0; j < TR; j++) row[j] = (const int8_t *)w->data + (size_t)(r + j) * K;
#pragma GCC unroll 4
    for (int i = 0; i < TT; i++)
#pragma GCC unroll 4
        for (int j = 0; j < TR; j++) acc[i][j] = _mm256_setzero_si256();
    for (size_t k = 0; k < K16; k += 16) {
        if (pf && (k & 63) == 0)
            for (size_t b = 0; b < (size_t)TR * 64; b += 64)
                _mm_prefetch((const char *)row[0] + pf + k * (size_t)TR + b, _MM_HINT_T1);
#pragma GCC unroll 4
        for (int j = 0; j < TR; j++) {
            __m256i wv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(row[j] + k)));
#pragma GCC unroll 4
            for (int i = 0; i < TT; i++)
                acc[i][j] = _mm256_add_epi32(acc[i][j], _mm256_madd_epi16(wv, _mm256_loadu_si256((const __m256i *)(xq[i] + k))));
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < TT; i++)
#pragma GCC unroll 4
        for (int j = 0; j < TR; j++) {
            int32_t s = hsum_i32(acc[i][j]);
            for (size_t k = K16; k < K; k++) s += (int32_t)row[j][k] * (int32_t)xq[i][k];
            outs[i][r + j] = finish_q8(w, r + j, s, sx[i]);
        }
}

/* 4 tokens x 2 rows keeps 8 accumulators + temporaries in the 16 ymm registers
 * (4 x 3 spilled); 2-3 tokens share each widened weight; a lone token uses 1 x 4
 * with the next tile prefetched (decode is memory bound). */
__attribute__((target("avx2,fma,f16c")))
void cb_dot_rows_q8_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const int16_t *const *xq,
                         const float *sx, float *const *outs, int64_t nt) {
    size_t rb = (size_t)w->cols;
    int64_t t = 0;
    if (nt > 1 && nt < 4) {
        int32_t r = r0;
        for (; r + 3 <= r1; r += 3)
            if (nt == 2) tile_q8(2, 3, w, r, xq, sx, outs, 3 * rb);
            else tile_q8(3, 3, w, r, xq, sx, outs, 3 * rb);
        for (; r < r1; r++)
            for (t = 0; t < nt; t++) tile_q8(1, 1, w, r, xq + t, sx + t, outs + t, 0);
        return;
    }
    for (; t + 4 <= nt; t += 4) {
        int32_t r = r0;
        for (; r + 2 <= r1; r += 2) tile_q8(4, 2, w, r, xq + t, sx + t, outs + t, 0);
        for (; r < r1; r++) tile_q8(4, 1, w, r, xq + t, sx + t, outs + t, 0);
    }
    for (; t < nt; t++) {
        int32_t r = r0;
        for (; r + 4 <= r1; r += 4) tile_q8(1, 4, w, r, xq + t, sx + t, outs + t, nt == 1 ? 4 * rb : 0);
        for (; r < r1; r++) tile_q8(1, 1, w, r, xq + t, sx + t, outs + t, 0);
    }
}
#else
float cb_amax_avx2(const float *x, int32_t K) { return cb_amax_scalar(x, K); }
void cb_quantize_q8_avx2(const float *x, int32_t K, float inv, int16_t *q) { cb_quantize_q8_scalar(x, K, inv, q); }
void cb_dot_rows_q8_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const int16_t *const *xq,
                         const float *sx, float *const *outs, int64_t nt) {
    cb_dot_rows_q8_scalar(w, r0, r1, xq, sx, outs, nt);
}
#endif

void cb_dot_rows_q8(const cb_matrix *w, int32_t r0, int32_t r1, const int16_t *const *xq, const float *sx,
                    float *const *outs, int64_t nt) {
    cb_kernels()->dot_rows_q8(w, r0, r1, xq, sx, outs, nt);
}
