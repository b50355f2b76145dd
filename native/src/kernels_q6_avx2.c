/* kernels_q6_avx2.c — the AVX2 w6a8 kernel (int6 weights x prepared int8 activations).
 *
 * Role: the fast path of cb_dot_rows_q6 on the avx2 level, and on avx512 / amx too (no zmm
 * variant yet: no AVX-512 host was at hand to measure one, and at one token the w8a8 / w4a8
 * ymm tiles measured faster than their zmm ones; same bits either way). Per 48 bytes of a row
 * (one 64-block): each 128-bit lane loads the 16 bytes holding its 12 (nothing read past the
 * block), vpshufb spreads each 3 bytes of 4 codes over a dword, one vpmullw and one vpmulhuw
 * move the four 6-bit fields into the dword's bytes (each pair swapped, as cb_q6_prep orders
 * x), xor 0x20 makes u = code + 32; then per token two vpmaddubsw, vpmaddwd, the prepared
 * negated corrections -32 * sum x, one convert and one fma (maddubs_step, kernels_x86.h). Each
 * unpacked row block serves a tile of up to 8 tokens (1 token: 4 rows, the next row tile
 * prefetched). Same bits as kernels_q6.c's reference.
 */
#include <string.h>
#include "cb_internal.h"
#include "kernels.h"
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels_x86.h"

/* An int6 matrix as the tiles walk it. */
typedef struct {
    const unsigned char *data;
    const float *scales;
    size_t rb, k64, nb, nfull;   /* row bytes, cols rounded to 64, 64-blocks (= groups), full blocks */
} q6desc;

static inline q6desc q6desc_of(const cb_matrix *w) {
    size_t K = (size_t)w->cols;
    return (q6desc){(const unsigned char *)w->data, w->scales, (size_t)cb_row_bytes(w->dtype, w->cols),
                    (K + 63) & ~(size_t)63, (K + 63) / 64, K / 64};
}

/* Each dword: bytes [b0, b1, b1, b2] of codes c0..c3 (bits 0-23 of b0 | b1 << 8 | b2 << 16) -> bytes
 * [c1, c0, c3, c2] + 32. Word 0 (b0 | b1 << 8) holds c0 at bits 0-5 and c1 at 6-11, word 1 (b1 | b2 << 8)
 * c2 at 4-9 and c3 at 10-15: vpmullw by 256 / 16 lifts c0 / c2 to bits 8-13, vpmulhuw by 2^10 / 2^6
 * drops c1 / c3 to bits 0-5; xor 0x20 turns each two's-complement field into u = code + 32 (0..63). */
AVX2_FN __m256i fields(__m256i x) {
    __m256i up = _mm256_mullo_epi16(_mm256_and_si256(x, _mm256_set1_epi32(0x03F0003F)), _mm256_set1_epi32(0x00100100));
    __m256i dn = _mm256_mulhi_epu16(_mm256_and_si256(x, _mm256_set1_epi32((int)0xFC000FC0u)), _mm256_set1_epi32(0x00400400));
    return _mm256_xor_si256(_mm256_or_si256(up, dn), _mm256_set1_epi8(0x20));
}

/* One 64-block's 48 bytes at p -> w[h] byte q = u of element 32h + (q ^ 1), h = 0, 1. Each 128-bit lane
 * takes 16 bytes holding its 12 (block bytes 0-15 | 8-23, then 24-39 | 32-47: none past the block), and
 * vpshufb spreads the 12 over the lane's 4 dwords (lane 0 from its bytes 0-11, lane 1 from 4-15). */
AVX2_FN void unpack48(const unsigned char *p, __m256i w[2]) {
    const __m256i spread = _mm256_setr_epi8(0, 1, 1, 2, 3, 4, 4, 5, 6, 7, 7, 8, 9, 10, 10, 11,
                                            4, 5, 5, 6, 7, 8, 8, 9, 10, 11, 11, 12, 13, 14, 14, 15);
    __m256i a = _mm256_loadu2_m128i((const __m128i *)(p + 8), (const __m128i *)p);
    __m256i b = _mm256_loadu2_m128i((const __m128i *)(p + 32), (const __m128i *)(p + 24));
    w[0] = fields(_mm256_shuffle_epi8(a, spread));
    w[1] = fields(_mm256_shuffle_epi8(b, spread));
}

/* Block b of rows row[0..TR) (their scales gs) for TT tokens: each row unpacked, then used by every token
 * before the next row is unpacked (two code registers live, not 2 * TR). */
AVX2_FN void block(int TT, int TR, const unsigned char *const *row, const float *const *gs, size_t b,
                   const q6desc *d, const int8_t *const *xp, __m256 acc[8][4]) {
#pragma GCC unroll 4
    for (int j = 0; j < TR; j++) {
        __m256i w[2];
        unpack48(row[j], w);
        __m256 sc = _mm256_broadcast_ss(gs[j] + b);
#pragma GCC unroll 8
        for (int i = 0; i < TT; i++) {
            const int8_t *x = xp[i] + b * 64;
            acc[i][j] = maddubs_step(w[0], w[1], _mm256_loadu_si256((const __m256i *)x),
                                     _mm256_loadu_si256((const __m256i *)(x + 32)), xp[i] + d->k64 + b * 32, sc, acc[i][j]);
        }
    }
}

/* TT tokens x TR rows from row r; pf != 0: prefetch the next row tile (its blocks pf bytes ahead, its scales). */
AVX2_FN void tile(int TT, int TR, const q6desc *d, int32_t r, const int8_t *const *xp, const float *sx,
                  float *const *outs, size_t pf) {
    const unsigned char *row[4], *at[4];
    const float *gs[4];
    __m256 acc[8][4];
#pragma GCC unroll 4
    for (int j = 0; j < TR; j++) {
        row[j] = d->data + (size_t)(r + j) * d->rb;
        gs[j] = d->scales + (size_t)(r + j) * d->nb;
    }
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++)
#pragma GCC unroll 4
        for (int j = 0; j < TR; j++) acc[i][j] = _mm256_setzero_ps();
    if (pf) prefetch_span((const unsigned char *)(gs[0] + (size_t)TR * d->nb), 0, (size_t)TR * d->nb * sizeof(float));
    for (size_t b = 0; b < d->nfull; b++) {
        if (pf) prefetch_span(row[0] + pf, b * 48 * (size_t)TR, (b + 1) * 48 * (size_t)TR);
#pragma GCC unroll 4
        for (int j = 0; j < TR; j++) at[j] = row[j] + b * 48;
        block(TT, TR, at, gs, b, d, xp, acc);
    }
    if (d->nfull < d->nb) {     /* the last, partial block: codes from zeroed copies (x is 0 there) */
        unsigned char buf[4][48] = {{0}};
#pragma GCC unroll 4
        for (int j = 0; j < TR; j++) {
            memcpy(buf[j], row[j] + d->nfull * 48, d->rb - d->nfull * 48);
            at[j] = buf[j];
        }
        block(TT, TR, at, gs, d->nfull, d, xp, acc);
    }
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++)
#pragma GCC unroll 4
        for (int j = 0; j < TR; j++) outs[i][r + j] = hsum(acc[i][j]) * sx[i];
}

#define Q6_TT 8    /* tokens per tile (<= 8) */
#define Q6_TR1 4   /* rows per tile at one token (<= 4) */

/* Token tiles of Q6_TT outer (their prepared rows stay in L1), one row each inner: each unpacked
 * block serves every token of the tile. One token: 1 x Q6_TR1 rows, the next tile prefetched. */
_Static_assert(Q6_TT == 8, "the switch below covers tiles of 1-8 tokens");
AVX2_FN void rows_q6(const q6desc *d, int32_t r0, int32_t r1, const int8_t *const *xp, const float *sx,
                     float *const *outs, int64_t nt) {
    if (nt == 1) {
        int32_t r = r0;
        for (; r + Q6_TR1 <= r1; r += Q6_TR1) tile(1, Q6_TR1, d, r, xp, sx, outs, Q6_TR1 * d->rb);
        for (; r < r1; r++) tile(1, 1, d, r, xp, sx, outs, 0);
        return;
    }
    for (int64_t t = 0; t < nt; t += Q6_TT) {
        int64_t m = nt - t < Q6_TT ? nt - t : Q6_TT;
        const int8_t *const *x = xp + t;
        for (int32_t r = r0; r < r1; r++) {
            size_t pf = t == 0 ? d->rb : 0;
            switch (m) {
            case 8: tile(8, 1, d, r, x, sx + t, outs + t, pf); break;
            case 7: tile(7, 1, d, r, x, sx + t, outs + t, pf); break;
            case 6: tile(6, 1, d, r, x, sx + t, outs + t, pf); break;
            case 5: tile(5, 1, d, r, x, sx + t, outs + t, pf); break;
            case 4: tile(4, 1, d, r, x, sx + t, outs + t, pf); break;
            case 3: tile(3, 1, d, r, x, sx + t, outs + t, pf); break;
            case 2: tile(2, 1, d, r, x, sx + t, outs + t, pf); break;
            default: tile(1, 1, d, r, x, sx + t, outs + t, pf); break;
            }
        }
    }
}

static AVX2_OUTLINE void k_q6(const q6desc *d, int32_t r0, int32_t r1, const int8_t *const *xp, const float *sx,
                              float *const *outs, int64_t nt) {
    rows_q6(d, r0, r1, xp, sx, outs, nt);
}

void cb_dot_rows_q6_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp,
                         const float *sx, float *const *outs, int64_t nt) {
    q6desc d = q6desc_of(w);
    k_q6(&d, r0, r1, xp, sx, outs, nt);
}
#else
void cb_dot_rows_q6_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp,
                         const float *sx, float *const *outs, int64_t nt) {
    cb_dot_rows_q6_scalar(w, r0, r1, xp, sx, outs, nt);
}
#endif
