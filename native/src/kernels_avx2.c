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
#include "kquants.h"
#include "kernels_lut_avx2.h"

/* Indices are size_t throughout: the Python build adds -fwrapv, which makes
 * int32 induction variables cost a sign extension per load. */

/* The 8-lane decoders: codes k..k+7 of a row as floats, before any group scale (the tile applies
 * it: (float)q * scale, as kernels.h defines v(k)). One per storage format; a kernel names its own. */
typedef __m256 (*dec8_fn)(const unsigned char *row, int32_t zero, size_t k);

AVX2_FN __m256 dec8_f32(const unsigned char *row, int32_t zero, size_t k) {
    return _mm256_loadu_ps((const float *)row + k);
}

AVX2_FN __m256 dec8_f16(const unsigned char *row, int32_t zero, size_t k) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
}

AVX2_FN __m256 dec8_bf16(const unsigned char *row, int32_t zero, size_t k) {
    __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

AVX2_FN __m256 dec8_i8(const unsigned char *row, int32_t zero, size_t k) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(row + k))));
}

AVX2_FN __m256 dec8_i8_zero(const unsigned char *row, int32_t zero, size_t k) {
    __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(row + k)));
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(q, _mm256_set1_epi32(zero)));
}

AVX2_FN __m256 dec8_i4(const unsigned char *row, int32_t zero, size_t k) {
    return _mm256_cvtepi32_ps(i4x8(row, k));
}

/* int6 codes k..k+7 (k a multiple of 8: the 6 bytes from byte k / 8 * 6): codes 0-3 from that
 * group's bytes 0-3, codes 4-7 from its bytes 2-5 (no byte past the 6 read), each field
 * shifted to the top of its lane, then an arithmetic shift sign-extends it. */
AVX2_FN __m256 dec8_i6(const unsigned char *row, int32_t zero, size_t k) {
    int32_t lo, hi;
    __builtin_memcpy(&lo, row + k / 8 * 6, 4);
    __builtin_memcpy(&hi, row + k / 8 * 6 + 2, 4);
    __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi32(lo)), _mm_set1_epi32(hi), 1);
    __m256i t = _mm256_sllv_epi32(v, _mm256_setr_epi32(26, 20, 14, 8, 18, 12, 6, 0));
    return _mm256_cvtepi32_ps(_mm256_srai_epi32(t, 26));
}

/* llama.cpp Q8_0 codes k..k+7 (k a multiple of 8, so inside one 34-byte block) times the block's f16
 * scale: (float)q * (float)d rounded, the scalar decoder's value (decode.c dec_q8_0). */
AVX2_FN __m256 dec8_q8_0(const unsigned char *row, int32_t zero, size_t k) {
    const unsigned char *blk = row + k / 32 * 34;
    __m256 d = _mm256_cvtph_ps(_mm_set1_epi16((short)(blk[0] | blk[1] << 8)));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 + k % 32)))), d);
}

/* llama.cpp Q5_0 / Q5_1 codes k..k+7 (k a multiple of 8: inside one block, q5quants.h) as floats: 8 nibble bytes
 * widened and shifted (element j >= 16: the high nibble), the 5th bits from qh by a variable shift; then the scalar
 * decoder's value ((float)(q - 16) * d, or (float)q * d + m: two rounded operations). */
AVX2_FN __m256 dec8_q5(const unsigned char *blk, size_t qh_at, size_t j, __m256i *q) {
    uint32_t h;
    __builtin_memcpy(&h, blk + qh_at, 4);
    __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + qh_at + 4 + j % 16)));
    lo = _mm256_and_si256(_mm256_srli_epi32(lo, j < 16 ? 0 : 4), _mm256_set1_epi32(15));
    __m256i hi = _mm256_srlv_epi32(_mm256_set1_epi32((int)h), _mm256_add_epi32(_mm256_set1_epi32((int)j),
                                                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
    *q = _mm256_or_si256(lo, _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(1)), 4));
    return _mm256_cvtph_ps(_mm_set1_epi16((short)(blk[0] | blk[1] << 8)));
}
AVX2_FN __m256 dec8_q5_0(const unsigned char *row, int32_t zero, size_t k) {
    __m256i q;
    __m256 d = dec8_q5(row + k / 32 * 22, 2, k % 32, &q);
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q, _mm256_set1_epi32(16))), d);
}
AVX2_FN __m256 dec8_q5_1(const unsigned char *row, int32_t zero, size_t k) {
    const unsigned char *blk = row + k / 32 * 24;
    __m256i q;
    __m256 d = dec8_q5(blk, 4, k % 32, &q), m = _mm256_cvtph_ps(_mm_set1_epi16((short)(blk[2] | blk[3] << 8)));
    return _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(q), d), m);
}

/* An f16 at p widened with F16C (exact: the same float as kquants.h cb_kq_half). */
AVX2_FN float half_f16c(const unsigned char *p) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(p[0] | p[1] << 8)));
}

/* llama.cpp Q4_K codes k..k+7 (k a multiple of 8: one sub-block of 32, kquants.h): 8 code bytes widened,
 * the sub-block's nibble shifted down, then d1 * q - m1 with the scalar decoder's f32 factors (two rounded
 * operations, no fma: decode.c dec_q4_k's bits). */
AVX2_FN __m256 dec8_q4_k(const unsigned char *row, int32_t zero, size_t k) {
    const unsigned char *blk = row + k / CB_QK_K * CB_Q4_K_BYTES;
    size_t j = k % CB_QK_K;
    float d1, m1;
    cb_q4_k_factors_of(blk, j, half_f16c(blk), half_f16c(blk + 2), &d1, &m1);
    __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)cb_q4_k_qs(blk, j)));
    q = _mm256_and_si256(_mm256_srl_epi32(q, _mm_cvtsi32_si128(cb_q4_k_shift(j))), _mm256_set1_epi32(15));
    return _mm256_sub_ps(_mm256_mul_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(q)), _mm256_set1_ps(m1));
}

/* llama.cpp Q5_K codes k..k+7 (one sub-block of 32): Q4_K's nibbles joined with their qh bit, then d1 * q - m1
 * with the scalar decoder's factors (decode.c dec_q5_k's bits). */
AVX2_FN __m256 dec8_q5_k(const unsigned char *row, int32_t zero, size_t k) {
    const unsigned char *blk = row + k / CB_QK_K * CB_Q5_K_BYTES;
    size_t j = k % CB_QK_K;
    float d1, m1;
    cb_q4_k_factors_of(blk, j, half_f16c(blk), half_f16c(blk + 2), &d1, &m1);
    __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)cb_q5_k_qs(blk, j)));
    __m256i hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)cb_q5_k_qh(blk, j)));
    lo = _mm256_and_si256(_mm256_srl_epi32(lo, _mm_cvtsi32_si128(cb_q4_k_shift(j))), _mm256_set1_epi32(15));
    hi = _mm256_and_si256(_mm256_srl_epi32(hi, _mm_cvtsi32_si128((int)(j / 32))), _mm256_set1_epi32(1));
    __m256i q = _mm256_or_si256(lo, _mm256_slli_epi32(hi, 4));
    return _mm256_sub_ps(_mm256_mul_ps(_mm256_set1_ps(d1), _mm256_cvtepi32_ps(q)), _mm256_set1_ps(m1));
}

/* llama.cpp Q6_K codes k..k+7 (k a multiple of 8: one scale's 16, one quarter's 32, kquants.h): low nibbles
 * and high bit pairs widened and joined, minus 32, times the scalar decoder's factor d * scale. */
AVX2_FN __m256 dec8_q6_k(const unsigned char *row, int32_t zero, size_t k) {
    const unsigned char *blk = row + k / CB_QK_K * CB_Q6_K_BYTES;
    size_t j = k % CB_QK_K;
    __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)cb_q6_k_ql(blk, j)));
    __m256i hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)cb_q6_k_qh(blk, j)));
    lo = _mm256_and_si256(_mm256_srl_epi32(lo, _mm_cvtsi32_si128(cb_q6_k_lo_shift(j))), _mm256_set1_epi32(15));
    hi = _mm256_and_si256(_mm256_srl_epi32(hi, _mm_cvtsi32_si128(cb_q6_k_hi_shift(j))), _mm256_set1_epi32(3));
    __m256i q = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    return _mm256_mul_ps(_mm256_set1_ps(cb_q6_k_factor_of(blk, j, half_f16c(blk + 208))), _mm256_cvtepi32_ps(q));
}

/* TT tokens x TR rows starting at row r. pf != 0: software-prefetch the weights pf bytes
 * ahead (the next row tile; prefetch_span). */
AVX2_FN void tile(kspec ks, dec8_fn dec, int TT, int TR, const wdesc *d, int32_t r, const float *const *xs,
                  float *const *outs, size_t pf) {
    __m256 acc[4][8];
    const unsigned char *row[8];
    const float *gs[8], *xp[4];
    size_t K8 = (size_t)d->cols - (size_t)d->cols % 8;
    tile_rows(d, r, TR, TR, row, gs);
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++) {
        xp[i] = xs[i];
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) acc[i][j] = _mm256_setzero_ps();
    }
    size_t bits = ks.bits;
    for (size_t k = 0; k < K8; k += 8) {
        if (pf && TR == 8) /* 8 contiguous rows: walk the next tile's block linearly */
            prefetch_span(row[0] + pf, k * 8 * bits / 8, (k + 8) * 8 * bits / 8);
        else if (pf)
#pragma GCC unroll 8
            for (int j = 0; j < TR; j++) prefetch_span(row[j] + pf, k * bits / 8, (k + 8) * bits / 8);
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) {
            __m256 w = dec(row[j], d->zero, k);
            if (ks.group) w = _mm256_mul_ps(w, _mm256_set1_ps(gs[j][k / ks.group]));
#pragma GCC unroll 8
            for (int i = 0; i < TT; i++) acc[i][j] = _mm256_fmadd_ps(w, _mm256_loadu_ps(xp[i] + k), acc[i][j]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++)
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) outs[i][r + j] = hsum(acc[i][j]);
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++)
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) outs[i][r + j] = finish(ks, d, r + j, outs[i][r + j], xp[i]);
}

AVX2_FN void rows_of(kspec ks, dec8_fn dec, const wdesc *d, int32_t r0, int32_t r1, const float *const *xs,
                            float *const *outs, int64_t nt) {
    size_t rb = d->row_bytes;
    if (nt == 1) {           /* decode: memory bound, prefetch the next 8-row tile */
        int32_t r = r0;
        for (; r + 8 <= r1; r += 8) tile(ks, dec, 1, 8, d, r, xs, outs, 8 * rb);
        for (; r < r1; r++) tile(ks, dec, 1, 1, d, r, xs, outs, 0);
        return;
    }
    if (nt < 4) {     /* 2-3 tokens (an expert's share of a small batch): decode each weight once */
        int32_t r = r0;
        if (nt == 2)
            for (; r + 4 <= r1; r += 4) tile(ks, dec, 2, 4, d, r, xs, outs, 4 * rb);
        else
            for (; r + 3 <= r1; r += 3) tile(ks, dec, 3, 3, d, r, xs, outs, 3 * rb);
        for (; r < r1; r++)
            for (int64_t t = 0; t < nt; t++) tile(ks, dec, 1, 1, d, r, xs + t, outs + t, 0);
        return;
    }
    /* Row tiles outer, token tiles inner: the tile's weight rows stay in L1 while token rows
     * stream from L2 (the caller keeps a token chunk L2-sized); the first token tile of a
     * row tile prefetches the next row tile from memory. */
    int32_t r = r0;
    for (; r + 3 <= r1; r += 3) {
        int64_t t = 0;
        for (; t + 4 <= nt; t += 4) tile(ks, dec, 4, 3, d, r, xs + t, outs + t, t == 0 ? 3 * rb : 0);
        for (; t < nt; t++) tile(ks, dec, 1, 3, d, r, xs + t, outs + t, 0);
    }
    for (; r < r1; r++) {
        int64_t t = 0;
        for (; t + 4 <= nt; t += 4) tile(ks, dec, 4, 1, d, r, xs + t, outs + t, 0);
        for (; t < nt; t++) tile(ks, dec, 1, 1, d, r, xs + t, outs + t, 0);
    }
}

/* This level's kernels: K(ID, its 8-lane decoder) per encoding that has one (an encoding without
 * runs the scalar kernel). LEVEL_KERNEL_TABLE (kernels_x86.h) makes each
 * k_<ID>, rows_of on that decoder, and the table KERNELS [CB_<ID>] = k_<ID>. */
#define AVX2_KERNELS(K)                                                                           \
    K(F32, dec8_f32) K(F16, dec8_f16) K(BF16, dec8_bf16)                                          \
    K(I8_ROW, dec8_i8) K(I8_G32, dec8_i8) K(I8_G64, dec8_i8) K(I8_G128, dec8_i8)                  \
    K(I8_MINMAX, dec8_i8_zero) K(I4_G32, dec8_i4) K(I4_G64, dec8_i4) K(I6_G64, dec8_i6)            \
    K(Q8_0, dec8_q8_0) K(Q4_K, dec8_q4_k) K(Q6_K, dec8_q6_k) K(Q5_K, dec8_q5_k)                   \
    K(MXFP4, dec8_mxfp4) K(IQ4_XS, dec8_iq4_xs) K(IQ4_NL, dec8_iq4_nl) K(Q5_0, dec8_q5_0) K(Q5_1, dec8_q5_1)
#define LEVEL_OUTLINE AVX2_OUTLINE
LEVEL_KERNEL_TABLE(AVX2_KERNELS)

void cb_dot_rows_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const float *const *xs,
                      float *const *outs, int64_t nt) {
    if (run_regrouped(KERNELS, w, r0, r1, xs, outs, nt)) return;
    if (!run_kernel(KERNELS, w, r0, r1, xs, outs, nt)) cb_dot_rows_scalar(w, r0, r1, xs, outs, nt);
}
#else
void cb_dot_rows_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const float *const *xs,
                      float *const *outs, int64_t nt) {
    cb_dot_rows_scalar(w, r0, r1, xs, outs, nt);
}
#endif
