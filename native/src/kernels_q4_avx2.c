/* kernels_q4_avx2.c — the AVX2 w4a8 kernel (int4 weights x prepared int8 activations).
 *
 * Role: the fast path of cb_dot_rows_q4 on AVX2 (and, through the table, on the
 * avx512/amx levels, which have no kernel of their own yet). Per 16 bytes of a
 * row (32 codes): xor 0x88 turns each nibble n into u = code + 8, the low and
 * high nibbles fill one ymm register [even codes | odd codes]; per token,
 * vpmaddubsw (u8 x s8, int16 pairs; |pair| <= 2 * 15 * 127) and vpmaddwd by 1
 * give the 8 int32 lanes of kernels_q4.c, minus the prepared corrections, then
 * one convert and one fma per group and lane. Each decoded weight chunk serves
 * a tile of up to 4 tokens x 2 rows (1 x 4 at one token, with the next row tile
 * prefetched). Same bits as the scalar reference (see kernels_q4.c).
 */
#include <string.h>
#include "kernels.h"
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels_x86.h"

typedef struct {
    const unsigned char *data;
    const float *scales;
    size_t rb, K, k32, ng, nfull;   /* row bytes, cols, cols rounded to 32, groups, full groups */
} q4desc;

/* 16 bytes of codes -> 32 unsigned codes + 8: [low nibbles | high nibbles]. */
AVX2_FN __m256i unpack16(const unsigned char *p) {
    __m128i v = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_set1_epi8((char)0x88));
    __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1);
    return _mm256_and_si256(b, _mm256_set1_epi8(0x0f));
}

/* One group of TT tokens x TR rows: NCH 32-code chunks (w[j][c]), x at byte xo, corrections of group g. */
AVX2_FN void group(int NCH, int TT, int TR, __m256i w[4][2], const __m256 *sc, const int8_t *const *xp,
                   size_t xo, size_t co, __m256 acc[4][4]) {
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
    for (int i = 0; i < TT; i++) {
        const int8_t *x = xp[i] + xo;
        __m256i corr = _mm256_loadu_si256((const __m256i *)(xp[i] + co));
#pragma GCC unroll 4
        for (int j = 0; j < TR; j++) {
            __m256i d = _mm256_maddubs_epi16(w[j][0], _mm256_loadu_si256((const __m256i *)x));
            if (NCH == 2) d = _mm256_add_epi16(d, _mm256_maddubs_epi16(w[j][1], _mm256_loadu_si256((const __m256i *)(x + 32))));
            __m256i p = _mm256_sub_epi32(_mm256_madd_epi16(d, ones), corr);
            acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc[j], acc[i][j]);
        }
    }
}

/* The last, partial group: codes copied into a zeroed buffer (no read past the row; the padding
 * meets x = 0), one or two chunks. */
AVX2_FN void tail_group(int G, int TT, int TR, const q4desc *d, const unsigned char *const *row,
                        const float *const *gs, const int8_t *const *xp, __m256 acc[4][4]) {
    size_t g = d->nfull, off = g * (size_t)G / 2, left = d->rb - off, nch = (d->K - g * (size_t)G + 31) / 32;
    __m256i w[4][2];
    __m256 sc[4];
#pragma GCC unroll 4
    for (int j = 0; j < TR; j++) {
        unsigned char buf[32] = {0};
        memcpy(buf, row[j] + off, left < (size_t)G / 2 ? left : (size_t)G / 2);
        w[j][0] = unpack16(buf);
        w[j][1] = unpack16(buf + 16);
        sc[j] = _mm256_set1_ps(gs[j][g]);
    }
    size_t co = d->k32 + g * 32;
    if (nch == 2) group(2, TT, TR, w, sc, xp, g * (size_t)G, co, acc);
    else group(1, TT, TR, w, sc, xp, g * (size_t)G, co, acc);
}

/* TT tokens x TR rows from row r; pf != 0: prefetch the block pf bytes ahead (the next row tile). */
AVX2_FN void tile(int G, int TT, int TR, const q4desc *d, int32_t r, const int8_t *const *xp, const float *sx,
                  float *const *outs, size_t pf) {
    const int NCH = G / 32;
    const unsigned char *row[4];
    const float *gs[4];
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int j = 0; j < TR; j++) {
        row[j] = d->data + (size_t)(r + j) * d->rb;
        gs[j] = d->scales + (size_t)(r + j) * d->ng;
    }
#pragma GCC unroll 4
    for (int i = 0; i < TT; i++)
#pragma GCC unroll 4
        for (int j = 0; j < TR; j++) acc[i][j] = _mm256_setzero_ps();
    for (size_t g = 0; g < d->nfull; g++) {
        size_t off = g * (size_t)G / 2;
        if (pf) prefetch_span(row[0] + pf, off * (size_t)TR, (off + (size_t)G / 2) * (size_t)TR);
        __m256i w[4][2];
        __m256 sc[4];
#pragma GCC unroll 4
        for (int j = 0; j < TR; j++) {
            w[j][0] = unpack16(row[j] + off);
            if (NCH == 2) w[j][1] = unpack16(row[j] + off + 16);
            sc[j] = _mm256_broadcast_ss(gs[j] + g);
        }
        group(NCH, TT, TR, w, sc, xp, g * (size_t)G, d->k32 + g * 32, acc);
    }
    if (d->nfull < d->ng) tail_group(G, TT, TR, d, row, gs, xp, acc);
#pragma GCC unroll 4
    for (int i = 0; i < TT; i++)
#pragma GCC unroll 4
        for (int j = 0; j < TR; j++) outs[i][r + j] = hsum(acc[i][j]) * sx[i];
}

/* Token tiles of 4 outer (their prepared rows stay in L1), row pairs inner; 1 token: 1 x 4 rows,
 * prefetched; 2-3 tokens: one tile of all of them x 2 rows. */
AVX2_FN void rows_for_group(int G, const q4desc *d, int32_t r0, int32_t r1, const int8_t *const *xp,
                            const float *sx, float *const *outs, int64_t nt) {
    if (nt == 1) {
        int32_t r = r0;
        for (; r + 4 <= r1; r += 4) tile(G, 1, 4, d, r, xp, sx, outs, 4 * d->rb);
        for (; r < r1; r++) tile(G, 1, 1, d, r, xp, sx, outs, 0);
        return;
    }
    for (int64_t t = 0; t < nt; t += 4) {
        int64_t m = nt - t < 4 ? nt - t : 4;
        const int8_t *const *x = xp + t;
        int32_t r = r0;
        for (; r + 2 <= r1; r += 2) {
            size_t pf = t == 0 ? 2 * d->rb : 0;
            if (m == 4) tile(G, 4, 2, d, r, x, sx + t, outs + t, pf);
            else if (m == 3) tile(G, 3, 2, d, r, x, sx + t, outs + t, pf);
            else if (m == 2) tile(G, 2, 2, d, r, x, sx + t, outs + t, pf);
            else tile(G, 1, 2, d, r, x, sx + t, outs + t, pf);
        }
        for (; r < r1; r++)
            for (int64_t i = 0; i < m; i++) tile(G, 1, 1, d, r, x + i, sx + t + i, outs + t + i, 0);
    }
}

static AVX2_OUTLINE void k_q4g32(const q4desc *d, int32_t r0, int32_t r1, const int8_t *const *xp,
                                 const float *sx, float *const *outs, int64_t nt) {
    rows_for_group(32, d, r0, r1, xp, sx, outs, nt);
}

static AVX2_OUTLINE void k_q4g64(const q4desc *d, int32_t r0, int32_t r1, const int8_t *const *xp,
                                 const float *sx, float *const *outs, int64_t nt) {
    rows_for_group(64, d, r0, r1, xp, sx, outs, nt);
}

void cb_dot_rows_q4_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp,
                         const float *sx, float *const *outs, int64_t nt) {
    size_t K = (size_t)w->cols, G = (size_t)cb_group_size(w->dtype);
    q4desc d = {(const unsigned char *)w->data, w->scales, (K + 1) / 2, K, (K + 31) & ~(size_t)31,
                (K + G - 1) / G, K / G};
    if (G == 32) k_q4g32(&d, r0, r1, xp, sx, outs, nt);
    else k_q4g64(&d, r0, r1, xp, sx, outs, nt);
}
#else
void cb_dot_rows_q4_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp,
                         const float *sx, float *const *outs, int64_t nt) {
    cb_dot_rows_q4_scalar(w, r0, r1, xp, sx, outs, nt);
}
#endif
