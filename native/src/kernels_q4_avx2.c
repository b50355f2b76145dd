/* kernels_q4_avx2.c — the AVX2 w4a8 kernel (int4 weights x prepared int8 activations).
 *
 * Role: the fast path of cb_dot_rows_q4 on AVX2 (kernels_q4_avx512.c is the
 * avx512/amx levels' kernel). Per 32 bytes of a
 * row (a 64-block): xor 0x88 turns each nibble n into u = code + 8, one mask and
 * one shift+mask give the even and the odd codes; per token two vpmaddubsw
 * (u8 x s8 -> int16, each lane 4 products, |sum| <= 4 * 15 * 127) added, vpmaddwd
 * by 1 -> the 8 int32 lanes of kernels_q4.c, plus the prepared negated corrections, then
 * one convert and one fma (int4-g32: the two groups' scales in the two halves).
 * Each unpacked block serves a tile of up to 8 tokens (1 token: 4 rows, with the
 * next row tile prefetched). Same bits as the scalar reference (kernels_q4.c).
 */
#include <string.h>
#include "kernels.h"
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels_x86.h"

/* 32 bytes of codes (one 64-block) -> lo = u of the even elements, hi = u of the odd ones (u = code + 8). */
AVX2_FN void unpack32(const unsigned char *p, __m256i *lo, __m256i *hi) {
    __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)p), _mm256_set1_epi8((char)0x88));
    const __m256i m = _mm256_set1_epi8(0x0f);
    *lo = _mm256_and_si256(v, m);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
}

/* The block's scale per lane: int4-g64 one group; int4-g32 groups 2b (lanes 0-3) and 2b+1 (4-7, 0 past the end). */
AVX2_FN __m256 block_scale(int G, const q4desc *d, const float *gs, size_t b) {
    if (G == 64) return _mm256_broadcast_ss(gs + b);
    __m128 s0 = _mm_broadcast_ss(gs + 2 * b), s1 = 2 * b + 1 < d->ng ? _mm_broadcast_ss(gs + 2 * b + 1) : _mm_setzero_ps();
    return _mm256_insertf128_ps(_mm256_castps128_ps256(s0), s1, 1);
}

/* TT tokens x TR rows from row r; pf != 0: prefetch the block pf bytes ahead (the next row tile). */
AVX2_FN void tile(int G, int TT, int TR, const q4desc *d, int32_t r, const int8_t *const *xp, const float *sx,
                  float *const *outs, size_t pf) {
    const unsigned char *row[4];
    const float *gs[4];
    __m256 acc[8][4];
    __m256i w[4][2];
    __m256 sc[4];
#pragma GCC unroll 4
    for (int j = 0; j < TR; j++) {
        row[j] = d->data + (size_t)(r + j) * d->rb;
        gs[j] = d->scales + (size_t)(r + j) * d->ng;
    }
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++)
#pragma GCC unroll 4
        for (int j = 0; j < TR; j++) acc[i][j] = _mm256_setzero_ps();
    for (size_t b = 0; b < d->nfull; b++) {
        if (pf) prefetch_span(row[0] + pf, b * 32 * (size_t)TR, (b + 1) * 32 * (size_t)TR);
#pragma GCC unroll 4
        for (int j = 0; j < TR; j++) {
            unpack32(row[j] + b * 32, &w[j][0], &w[j][1]);
            sc[j] = block_scale(G, d, gs[j], b);
        }
        maddubs_block(TT, TR, w, sc, xp, b * 64, d->k64 + b * 32, acc);
    }
    if (d->nfull * 64 < d->K) {     /* the last, partial block: codes from a zeroed copy (x is 0 there) */
        size_t b = d->nfull, left = d->rb - b * 32;
#pragma GCC unroll 4
        for (int j = 0; j < TR; j++) {
            unsigned char buf[32] = {0};
            memcpy(buf, row[j] + b * 32, left < 32 ? left : 32);
            unpack32(buf, &w[j][0], &w[j][1]);
            sc[j] = block_scale(G, d, gs[j], b);
        }
        maddubs_block(TT, TR, w, sc, xp, b * 64, d->k64 + b * 32, acc);
    }
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++)
#pragma GCC unroll 4
        for (int j = 0; j < TR; j++) outs[i][r + j] = hsum(acc[i][j]) * sx[i];
}

#ifndef Q4_TT
#define Q4_TT 8    /* tokens per tile (<= 8) */
#endif
#ifndef Q4_TR
#define Q4_TR 1    /* rows per tile (<= 4) */
#endif
#ifndef Q4_TR1
#define Q4_TR1 4   /* rows per tile at one token (<= 4) */
#endif

/* Token tiles of Q4_TT outer (their prepared rows stay in L1), Q4_TR rows inner: each unpacked
 * block serves every token of the tile. One token: 1 x Q4_TR1 rows, the next tile prefetched. */
AVX2_FN void rows_for_group(int G, const q4desc *d, int32_t r0, int32_t r1, const int8_t *const *xp,
                            const float *sx, float *const *outs, int64_t nt) {
    if (nt == 1) {
        int32_t r = r0;
        for (; r + Q4_TR1 <= r1; r += Q4_TR1) tile(G, 1, Q4_TR1, d, r, xp, sx, outs, Q4_TR1 * d->rb);
        for (; r < r1; r++) tile(G, 1, 1, d, r, xp, sx, outs, 0);
        return;
    }
    for (int64_t t = 0; t < nt; t += Q4_TT) {
        int64_t m = nt - t < Q4_TT ? nt - t : Q4_TT;
        const int8_t *const *x = xp + t;
        int32_t r = r0;
        for (; r + Q4_TR <= r1; r += Q4_TR) {
            size_t pf = t == 0 ? Q4_TR * d->rb : 0;
            switch (m) {
#if Q4_TT > 4
            case 8: tile(G, 8, Q4_TR, d, r, x, sx + t, outs + t, pf); break;
            case 7: tile(G, 7, Q4_TR, d, r, x, sx + t, outs + t, pf); break;
            case 6: tile(G, 6, Q4_TR, d, r, x, sx + t, outs + t, pf); break;
            case 5: tile(G, 5, Q4_TR, d, r, x, sx + t, outs + t, pf); break;
#endif
            case 4: tile(G, 4, Q4_TR, d, r, x, sx + t, outs + t, pf); break;
            case 3: tile(G, 3, Q4_TR, d, r, x, sx + t, outs + t, pf); break;
            case 2: tile(G, 2, Q4_TR, d, r, x, sx + t, outs + t, pf); break;
            default: tile(G, 1, Q4_TR, d, r, x, sx + t, outs + t, pf); break;
            }
        }
        for (; r < r1; r++)
            for (int64_t i = 0; i < m; i++) tile(G, 1, 1, d, r, x + i, sx + t + i, outs + t + i, 0);
    }
}

Q4_LEVEL_KERNELS(AVX2_OUTLINE)

void cb_dot_rows_q4_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp,
                         const float *sx, float *const *outs, int64_t nt) {
    run_q4(w, r0, r1, xp, sx, outs, nt);
}
#else
void cb_dot_rows_q4_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp,
                         const float *sx, float *const *outs, int64_t nt) {
    cb_dot_rows_q4_scalar(w, r0, r1, xp, sx, outs, nt);
}
#endif
