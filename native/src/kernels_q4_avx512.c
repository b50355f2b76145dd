/* kernels_q4_avx512.c — the AVX-512 VNNI w4a8 kernel (int4 weights x prepared int8 activations).
 *
 * Role: the fast path of cb_dot_rows_q4 on the avx512 and amx levels. One zmm
 * register carries two rows (lanes 0-7 row r, lanes 8-15 row r+1) of the 8-lane
 * sequence of kernels_q4.c, so every element's float steps are the reference's.
 * Per 64-block: the two rows' 32 code bytes in one register, xor 0x88 (nibble ->
 * u = code + 8), a mask and a shift+mask give the even and the odd codes; per
 * token two vpdpbusd (u8 x s8 summed in 4s straight into the int32 lanes) on the
 * block's prepared activations broadcast to both halves, starting from the
 * prepared negated lane corrections (sum u x - 8 sum x = sum code x, exact), then
 * one convert and one fma with the rows' group scales. Integer sums are exact in
 * any order, so the bits equal the scalar reference and the AVX2 kernel.
 * Tiles: up to 4 tokens x 4 row pairs, each unpacked block serving all of them.
 * One token goes to the AVX2 kernel (same bits): at one token the weights stream
 * at memory speed, and its 4-row ymm tile measured 126 vs 140 us per expert on
 * the Zen 5 host of docs/PERFORMANCE.md (no faster zmm tile was found for it).
 */
#include <string.h>
#include "kernels.h"
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels_x86.h"

#define Q4Z_TARGET "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
#define Q4Z_FN static inline __attribute__((always_inline, target(Q4Z_TARGET)))
#define Q4Z_OUTLINE __attribute__((noinline, target(Q4Z_TARGET)))
#define Q4Z_TT 4    /* tokens per tile (measured: 4 x 4 pairs 1.07x over 8 x 2, 4 x 3 and 6 x 3) */
#define Q4Z_TP 4    /* row pairs per tile (<= 4: the w and sc arrays of tile) */

/* The 32 code bytes of block b of rows a and c (zero-padded copies for the partial block). */
Q4Z_FN __m512i load_pair(const unsigned char *a, const unsigned char *c, size_t o) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a + o))),
                              _mm256_loadu_si256((const __m256i *)(c + o)), 1);
}

Q4Z_FN void unpack_pair(__m512i v, __m512i *lo, __m512i *hi) {
    const __m512i m = _mm512_set1_epi8(0x0f);
    v = _mm512_xor_si512(v, _mm512_set1_epi8((char)0x88));
    *lo = _mm512_and_si512(v, m);
    *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m);
}

/* Block b's scales of rows a (lanes 0-7) and c (8-15). int4-g32: lanes 0-3 / 4-7 of each half are the
 * groups 2b and 2b+1 (0 past the last group, which only the partial block can reach: last != 0). */
Q4Z_FN __m512 pair_scale(int G, const q4desc *d, const float *ga, const float *gc, size_t b, int last) {
    if (G == 64) return _mm512_insertf32x8(_mm512_set1_ps(ga[b]), _mm256_set1_ps(gc[b]), 1);
    int two = !last || 2 * b + 1 < d->ng;
    __m128 s = _mm_setr_ps(ga[2 * b], two ? ga[2 * b + 1] : 0.0f, gc[2 * b], two ? gc[2 * b + 1] : 0.0f);
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(s));
}

/* One 64-block of TT tokens x TP row pairs: w[j] = (lo, hi) codes of pair j, x at byte xo, the negated
 * corrections at co. */
Q4Z_FN void block(int TT, int TP, __m512i w[4][2], const __m512 *sc, const int8_t *const *xp, size_t xo,
                  size_t co, __m512 acc[Q4Z_TT][4]) {
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++) {
        const int8_t *x = xp[i] + xo;
        __m512i xa = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x));
        __m512i xb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x + 32)));
        __m512i nc = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(xp[i] + co)));
#pragma GCC unroll 4
        for (int j = 0; j < TP; j++) {
            __m512i p = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(nc, w[j][0], xa), w[j][1], xb);
            acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc[j], acc[i][j]);
        }
    }
}

/* TT tokens x TP pairs of rows from row r; nr rows are real (the last pair may hold one: both halves
 * then compute row r + nr - 1 and one is stored). pf != 0: prefetch the block pf bytes ahead. */
Q4Z_FN void tile(int G, int TT, int TP, const q4desc *d, int32_t r, int nr, const int8_t *const *xp,
                 const float *sx, float *const *outs, size_t pf) {
    const unsigned char *row[8];
    const float *gs[8];
    __m512 acc[Q4Z_TT][4], sc[4];
    __m512i w[4][2];
#pragma GCC unroll 8
    for (int j = 0; j < 2 * TP; j++) {
        int jj = j < nr ? j : nr - 1;
        row[j] = d->data + (size_t)(r + jj) * d->rb;
        gs[j] = d->scales + (size_t)(r + jj) * d->ng;
    }
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++)
#pragma GCC unroll 4
        for (int j = 0; j < TP; j++) acc[i][j] = _mm512_setzero_ps();
    for (size_t b = 0; b < d->nfull; b++) {
        if (pf) prefetch_span(row[0] + pf, b * 32 * (size_t)(2 * TP), (b + 1) * 32 * (size_t)(2 * TP));
#pragma GCC unroll 4
        for (int j = 0; j < TP; j++) {
            unpack_pair(load_pair(row[2 * j], row[2 * j + 1], b * 32), &w[j][0], &w[j][1]);
            sc[j] = pair_scale(G, d, gs[2 * j], gs[2 * j + 1], b, 0);
        }
        block(TT, TP, w, sc, xp, b * 64, d->k64 + b * 32, acc);
    }
    if (d->nfull * 64 < d->K) {     /* the last, partial block: codes from zeroed copies (x is 0 there) */
        size_t b = d->nfull, left = d->rb - b * 32;
#pragma GCC unroll 4
        for (int j = 0; j < TP; j++) {
            unsigned char ba[32] = {0}, bc[32] = {0};
            memcpy(ba, row[2 * j] + b * 32, left < 32 ? left : 32);
            memcpy(bc, row[2 * j + 1] + b * 32, left < 32 ? left : 32);
            unpack_pair(load_pair(ba, bc, 0), &w[j][0], &w[j][1]);
            sc[j] = pair_scale(G, d, gs[2 * j], gs[2 * j + 1], b, 1);
        }
        block(TT, TP, w, sc, xp, b * 64, d->k64 + b * 32, acc);
    }
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++)
#pragma GCC unroll 4
        for (int j = 0; j < TP; j++) {
            outs[i][r + 2 * j] = hsum(_mm512_castps512_ps256(acc[i][j])) * sx[i];
            if (2 * j + 1 < nr) outs[i][r + 2 * j + 1] = hsum(_mm512_extractf32x8_ps(acc[i][j], 1)) * sx[i];
        }
}

/* TT tokens (<= Q4Z_TT) over rows r0..r1 in tiles of Q4Z_TP pairs; pf: prefetch the next tile. */
Q4Z_FN void rows_tokens(int G, int TT, const q4desc *d, int32_t r0, int32_t r1, const int8_t *const *xp,
                        const float *sx, float *const *outs, int pf) {
    const int nr = 2 * Q4Z_TP;
    int32_t r = r0;
    for (; r + nr <= r1; r += nr) tile(G, TT, Q4Z_TP, d, r, nr, xp, sx, outs, pf ? (size_t)nr * d->rb : 0);
    for (; r < r1; r += 2) tile(G, TT, 1, d, r, r1 - r < 2 ? 1 : 2, xp, sx, outs, 0);
}

/* Token tiles of Q4Z_TT outer (their prepared rows stay in L1), rows inner. */
_Static_assert(Q4Z_TT == 4, "rows_for_group's switch covers tiles of 1-4 tokens");
Q4Z_FN void rows_for_group(int G, const q4desc *d, int32_t r0, int32_t r1, const int8_t *const *xp,
                           const float *sx, float *const *outs, int64_t nt) {
    for (int64_t t = 0; t < nt; t += Q4Z_TT) {
        int64_t m = nt - t < Q4Z_TT ? nt - t : Q4Z_TT;
        const int8_t *const *x = xp + t;
        int pf = t == 0;
        switch (m) {
        case 4: rows_tokens(G, 4, d, r0, r1, x, sx + t, outs + t, pf); break;
        case 3: rows_tokens(G, 3, d, r0, r1, x, sx + t, outs + t, pf); break;
        case 2: rows_tokens(G, 2, d, r0, r1, x, sx + t, outs + t, pf); break;
        default: rows_tokens(G, 1, d, r0, r1, x, sx + t, outs + t, pf); break;
        }
    }
}

Q4_LEVEL_KERNELS(Q4Z_OUTLINE)

void cb_dot_rows_q4_avx512(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp,
                           const float *sx, float *const *outs, int64_t nt) {
    if (nt == 1) {      /* one token streams at memory speed: the AVX2 tile measured 1.1x faster on Zen 5 */
        cb_dot_rows_q4_avx2(w, r0, r1, xp, sx, outs, nt);
        return;
    }
    run_q4(w, r0, r1, xp, sx, outs, nt);
}
#else
void cb_dot_rows_q4_avx512(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp,
                           const float *sx, float *const *outs, int64_t nt) {
    cb_dot_rows_q4_scalar(w, r0, r1, xp, sx, outs, nt);
}
#endif
