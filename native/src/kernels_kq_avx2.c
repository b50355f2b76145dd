/* kernels_kq_avx2.c — the AVX2 kernel of k-quant (and iq4_xs) weights x Q8_K activations (kernels_kq.c has the
 * spec).
 *
 * Role: cb_dot_rows_kq at the avx2 level. Per 32 codes of a row (one Q4_K / Q5_K / IQ4_XS sub-block, two Q6_K scale
 * groups) the codes as one register, per token one vpmaddubsw (u8 x s8 -> int16 pairs, no saturation) and one
 * vpmaddwd by the 16-bit scales (the pairs times their scale, summed to int32), as ggml's AVX2 vec_dot does
 * (kernels_kq_x86.h row_ints256). The rest (q4_k / q5_k: per super-block the lanes summed exactly, the mins
 * against bsums32, the float step per (token, row); q6_k / iq4_xs: ggml's 8 lanes kept in float, q6's -32 offset
 * per lane from the bsums by this level's madd_add, vpmaddwd + vpaddd) is kernels_kq_x86.h / kernels_kq_tiles.h,
 * shared with the AVX-512 level: the bits are the scalar reference's. q4_k_r8's r8_ints (two 256-bit halves of
 * 4 rows) feeds kernels_kq_r8.h; q6_k_r16's r16_pass (two 256-bit halves of 8 rows) is kernels_kq_r16.h's pass.
 */
#include "kernels.h"
#include "kquants.h"
#include "kquants_r8.h"
#include "kquants_r16.h"
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels_kq_x86.h"
#define KQ_FN AVX2_FN
#define KQ_OUTLINE AVX2_OUTLINE
#define KQ_ENTRY cb_dot_rows_kq_avx2

AVX2_FN void row_ints(int ENC, int TT, int TR, int j, const unsigned char *blk, const kqblock *kb,
                      const cb_q8k_block *const *xk, size_t b, __m256i iv[8]) {
    row_ints256(ENC, TT, TR, j, blk, kb, xk, b, iv);
}

AVX2_FN __m256i madd_add(__m256i acc, __m256i a, __m256i b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }

/* q4_k_r8 (kernels_kq_r8.h): the AVX-512 level's r8_ints on the unit's two 256-bit halves (rows 0 4 1 5, then
 * 2 6 3 7), one nibble at a time (8 live code registers would not fit 16 with the tokens' sums); vpmaddwd + vpaddd
 * for vpdpwssd; the halves' int32 pairs added by vpphaddd, their qwords put in lane order. The same integers. */
#define R8_MAXT 4       /* tokens per tile */
/* acc + vpmaddwd(s, sum_c vpmaddubsw(q[c], a's qword c broadcast)): one token's sub-block, written out so that
 * gcc neither keeps the broadcasts on the stack nor reassociates the sums. */
AVX2_FN __m256i r8_token(__m256i acc, const __m256i q[4], __m256i s, const int8_t *a) {
    __m256i t0, t1;
    __asm__("vpbroadcastq (%[a]), %[t0]\n\t"
            "vpmaddubsw %[t0], %[q0], %[t0]\n\t"
            "vpbroadcastq 8(%[a]), %[t1]\n\t"
            "vpmaddubsw %[t1], %[q1], %[t1]\n\t"
            "vpaddw %[t1], %[t0], %[t0]\n\t"
            "vpbroadcastq 16(%[a]), %[t1]\n\t"
            "vpmaddubsw %[t1], %[q2], %[t1]\n\t"
            "vpaddw %[t1], %[t0], %[t0]\n\t"
            "vpbroadcastq 24(%[a]), %[t1]\n\t"
            "vpmaddubsw %[t1], %[q3], %[t1]\n\t"
            "vpaddw %[t1], %[t0], %[t0]\n\t"
            "vpmaddwd %[t0], %[s], %[t0]\n\t"
            "vpaddd %[t0], %[acc], %[acc]"
            : [acc] "+x"(acc), [t0] "=&x"(t0), [t1] "=&x"(t1)
            : [q0] "x"(q[0]), [q1] "x"(q[1]), [q2] "x"(q[2]), [q3] "x"(q[3]), [s] "x"(s), [a] "r"(a),
              "m"(*(const int8_t(*)[32])a));
    return acc;
}
AVX2_FN void r8_ints(int TT, const unsigned char *u, const __m256i sc[2], const cb_q8k_block *const *xk, size_t b,
                     __m256i *I) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i part[2][R8_MAXT];
#pragma GCC unroll 1
    for (int h = 0; h < 2; h++) {                  /* one half at a time (both at once do not fit 16 registers) */
        const cb_q8k_block *const *xh = xk;
        __asm__("" : "+r"(xh));                    /* opaque per half: gcc would hoist both halves' broadcasts */
        __m256i acc[R8_MAXT];
#pragma GCC unroll 4
        for (int i = 0; i < TT; i++) acc[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {              /* sub-block j: run j / 2, its low (even j) or high nibbles */
            int p = j / 2, shift = 4 * (j & 1);
            __m256i q[4];
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(u + 128 + 256 * p + 64 * c + 32 * h));
                q[c] = _mm256_and_si256(_mm256_srli_epi16(v, shift), m4);
            }
            __m256i s = _mm256_shuffle_epi8(sc[h], _mm256_broadcastsi128_si256(r8_pick(j)));
#pragma GCC unroll 4
            for (int i = 0; i < TT; i++) acc[i] = r8_token(acc[i], q, s, xh[i][b].qs + 32 * j);
        }
#pragma GCC unroll 4
        for (int i = 0; i < TT; i++) part[h][i] = acc[i];
    }
#pragma GCC unroll 4
    for (int i = 0; i < TT; i++) I[i] = _mm256_permute4x64_epi64(_mm256_hadd_epi32(part[0][i], part[1][i]), 0xD8);
}

/* q6_k_r16 (kernels_kq_r16.h): the unit's two 256-bit halves (rows 0-7, then 8-15) one after the other, and in a
 * half one sub-block at a time (its 4 code registers, the tokens' sums: 16 ymm hold it); per token vpmaddubsw of two
 * code dwords summed in int16 (|sum| <= 2 * 2 * 63 * 127 < 2^15), each sum times the rows' scale by vpmaddwd of
 * (scale, scale) pairs; the -32 offsets once per super-block, sum_j scale_j * bsums[j] by vpmaddwd of (scale j,
 * scale j + 1) pairs. The same integers as the AVX-512 tile. A pass of more than one token tile unpacks each unit's
 * codes once (r16_unpacked) and its tiles load them. */
/* The 8 rows' codes of sub-block j's dword ii (half rh): (nibble & 0x0f) | (high bits & 0x30) per byte. */
AVX2_FN __m256i r16_code(const unsigned char *u, int j, int ii, int rh) {
    int h = j / 8, qp = (j / 2) & 1, ih = j & 1, hi = (j / 4) & 1;
    const unsigned char *pc = cb_r16_piece(u, (size_t)h, (size_t)(4 * ih + ii), 0) + 32 * rh;
    __m256i ql = _mm256_loadu_si256((const __m256i *)(pc + 64 * qp));
    __m256i qh = _mm256_loadu_si256((const __m256i *)(pc + 128));
    int up = hi ? -2 * qp : 4 - 2 * qp;                  /* qh's bits to 4-5: q1 << 4, q2 << 2, q3 as is, q4 >> 2 */
    qh = up > 0 ? _mm256_slli_epi32(qh, up) : up < 0 ? _mm256_srli_epi32(qh, -up) : qh;
    if (hi) ql = _mm256_srli_epi32(ql, 4);
    return _mm256_or_si256(_mm256_and_si256(ql, _mm256_set1_epi8(0x0f)), _mm256_and_si256(qh, _mm256_set1_epi8(0x30)));
}
/* The 8 rows' scales of sub-blocks a and b (at sp + 16 a, sp + 16 b) as int16 (a, b) pairs, row r in lane r. */
AVX2_FN __m256i r16_pairs(const unsigned char *sp, int a, int b) {
    __m128i x = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(sp + 16 * a)));
    __m128i y = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(sp + 16 * b)));
    return _mm256_set_m128i(_mm_unpackhi_epi16(x, y), _mm_unpacklo_epi16(x, y));
}

/* acc + vpmaddwd(s2, sum_{c<2} vpmaddubsw(c[c], a's dword c broadcast)) + the same of dwords 2, 3: one token's
 * sub-block (a: its first activation dword). */
AVX2_FN __m256i r16_act(const int8_t *a, int dw) {     /* activation dword dw broadcast (from memory) */
    int32_t v;
    __builtin_memcpy(&v, a + 4 * dw, 4);
    return _mm256_set1_epi32(v);
}
AVX2_FN __m256i r16_token(__m256i acc, const __m256i c[4], __m256i s2, const int8_t *a) {
    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(c[0], r16_act(a, 0)), _mm256_maddubs_epi16(c[1], r16_act(a, 1)));
    __m256i q = _mm256_add_epi16(_mm256_maddubs_epi16(c[2], r16_act(a, 2)), _mm256_maddubs_epi16(c[3], r16_act(a, 3)));
    acc = _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(p, s2), _mm256_madd_epi16(q, s2)));
    __asm__("" : "+x"(acc));    /* summed here: gcc's reassociation would keep all 16 products to the end */
    return acc;
}

#define R16_MAXT 4      /* tokens per tile */
#define R16_CHUNK 32    /* tokens per pass over a group (acc[R16_CHUNK][16] on the stack) */
/* Prefetch from one token on: at one token this tile's compute per byte is high enough that, without it, memory and
 * compute add up (the LM head, 50304 x 2048, 2 threads: 3.2-5.8 -> 2.3-2.7 ms). */
#define R16_PF_MIN 1
/* A unit's codes and scale pairs as r16_half takes them (half rh, sub-block jj in its order), unpacked once for a
 * pass of more than one token tile: each tile then loads them instead of unpacking them again. */
typedef struct {
    __m256i c[2][16][4], s2[2][16];
} r16_unpacked;

/* The first of sub-block j's 4 activation dwords (its 16 elements' place in the Q8_K block). */
AVX2_FN int r16_dword(int j) { return 32 * (j / 8) + 8 * ((j / 2) & 1) + 4 * (j & 1) + 16 * ((j / 4) & 1); }
AVX2_FN int r16_sub(int jj) { return 8 * (jj / 8) + (jj % 8) / 2 + 4 * (jj & 1); }  /* j, j + 4 adjacent: one ql/qh */

AVX2_FN void r16_unpack(const unsigned char *u, r16_unpacked *k) {
#pragma GCC unroll 2
    for (int rh = 0; rh < 2; rh++)
#pragma GCC unroll 16
        for (int jj = 0; jj < 16; jj++) {
            int j = r16_sub(jj);
#pragma GCC unroll 4
            for (int ii = 0; ii < 4; ii++) k->c[rh][jj][ii] = r16_code(u, j, ii, rh);
            k->s2[rh][jj] = r16_pairs(u + CB_R16_SCALES + 8 * rh, j, j);
        }
}

/* Half rh's I for TT tokens: -32 * sum_j scale_j * bsums[j], then each sub-block's sum times its scale; the codes
 * from k when given, else unpacked here. */
AVX2_FN void r16_half(int TT, const unsigned char *u, const r16_unpacked *k, int rh, const cb_q8k_block *const *xk,
                      size_t b, __m256i *I) {
    const unsigned char *sp = u + CB_R16_SCALES + 8 * rh;
#pragma GCC unroll 4
    for (int t = 0; t < TT; t++) I[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int q = 0; q < 8; q++) {
        __m256i pr = r16_pairs(sp, 2 * q, 2 * q + 1);
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) {
            int32_t v;
            __builtin_memcpy(&v, xk[t][b].bsums + 2 * q, 4);
            I[t] = _mm256_add_epi32(I[t], _mm256_madd_epi16(pr, _mm256_set1_epi32(v)));
            __asm__("" : "+x"(I[t]));
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < TT; t++) I[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(I[t], 5));
    if (k) {
#pragma GCC unroll 1
        for (int jj = 0; jj < 16; jj++) {          /* a loop, not 16 copies (unrolled: 7-10% slower at 32 tokens) */
            /* r16_dword(r16_sub(jj)) simplified (called as is: 6% slower at 32 tokens in cache) */
            int dw = 32 * (jj / 8) + 4 * ((jj % 8) / 2) + 16 * (jj & 1);
#pragma GCC unroll 4
            for (int t = 0; t < TT; t++) I[t] = r16_token(I[t], k->c[rh][jj], k->s2[rh][jj], xk[t][b].qs + 4 * dw);
        }
        return;
    }
#pragma GCC unroll 16
    for (int jj = 0; jj < 16; jj++) {
        int j = r16_sub(jj);
        __m256i c[4], s2;
#pragma GCC unroll 4
        for (int ii = 0; ii < 4; ii++) c[ii] = r16_code(u, j, ii, rh);
        s2 = r16_pairs(sp, j, j);
        int dw = r16_dword(j);
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) I[t] = r16_token(I[t], c, s2, xk[t][b].qs + 4 * dw);
    }
}

/* TT tokens' float step on unit u (super-block b) of the group: acc[t][row] += d[row] * da_t * I (acc[t][8 rh ..]:
 * the rows of half rh). */
AVX2_FN void r16_step(int TT, const unsigned char *u, const r16_unpacked *k, const cb_q8k_block *const *xk, size_t b,
                      __m256 (*acc)[2]) {
#pragma GCC unroll 1
    for (int rh = 0; rh < 2; rh++) {
        __m256i I[R16_MAXT];
        const cb_q8k_block *const *xh = xk;
        __asm__("" : "+r"(xh));      /* opaque per half: gcc would hoist both halves' broadcasts to the stack */
        r16_half(TT, u, k, rh, xh, b, I);
        __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(u + 16 * rh)));
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++)
            acc[t][rh] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(xk[t][b].d)), _mm256_cvtepi32_ps(I[t]),
                                         acc[t][rh]);
    }
}

/* TT <= R16_MAXT tokens x the group's 16 rows: one tile, the codes unpacked as it goes, the sums in registers. */
AVX2_FN void r16_tile(int TT, const unsigned char *grp, size_t nb, const cb_q8k_block *const *xk, float *const *outs,
                      int32_t r) {
    __m256 acc[R16_MAXT][2];
#pragma GCC unroll 4
    for (int t = 0; t < TT; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const unsigned char *u = grp + b * CB_R16_UNIT;
        if (TT >= R16_PF_MIN) prefetch_span(u, R16_PF * CB_R16_UNIT, (R16_PF + 1) * CB_R16_UNIT);
        r16_step(TT, u, NULL, xk, b, acc);
    }
#pragma GCC unroll 4
    for (int t = 0; t < TT; t++) {
        _mm256_storeu_ps(outs[t] + r, acc[t][0]);
        _mm256_storeu_ps(outs[t] + r + 8, acc[t][1]);
    }
}
KQ_TILE_PASS(r16_tiles, R16_MAXT, r16_tile)

/* nt <= R16_CHUNK tokens x the group's 16 rows: one tile (r16_tile), or unit by unit with the float sums in acc, each
 * unit's codes unpacked once (r16_unpacked, 5 KB, stays in L1) and loaded by each tile of R16_MAXT (256 x 2048 in
 * cache, 32 tokens: 110 -> 93 ns per row-block). The same float steps in the same order as one tile: the same bits. */
static AVX2_OUTLINE void r16_units(int64_t nt, const unsigned char *grp, size_t nb, const cb_q8k_block *const *xk,
                                    float *const *outs, int32_t r) {
    __m256 acc[R16_CHUNK][2];
    r16_unpacked k;
    for (int64_t t = 0; t < nt; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const unsigned char *u = grp + b * CB_R16_UNIT;
        prefetch_span(u, R16_PF * CB_R16_UNIT, (R16_PF + 1) * CB_R16_UNIT);
        r16_unpack(u, &k);
        for (int64_t t = 0; t < nt; t += R16_MAXT) {
            switch (nt - t < R16_MAXT ? nt - t : R16_MAXT) {
            case 1: r16_step(1, u, &k, xk + t, b, acc + t); break;
            case 2: r16_step(2, u, &k, xk + t, b, acc + t); break;
            case 3: r16_step(3, u, &k, xk + t, b, acc + t); break;
            default: r16_step(4, u, &k, xk + t, b, acc + t); break;
            }
        }
    }
    for (int64_t t = 0; t < nt; t++) {
        _mm256_storeu_ps(outs[t] + r, acc[t][0]);
        _mm256_storeu_ps(outs[t] + r + 8, acc[t][1]);
    }
}
AVX2_FN void r16_pass(int64_t nt, const unsigned char *grp, size_t nb, const cb_q8k_block *const *xk,
                      float *const *outs, int32_t r) {
    if (nt <= R16_MAXT) r16_tiles(nt, grp, nb, xk, outs, r);
    else r16_units(nt, grp, nb, xk, outs, r);
}

#include "kernels_kq_r8.h"
#include "kernels_kq_r16.h"
#include "kernels_kq_tiles.h"
#else
void cb_dot_rows_kq_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q8k_block *const *xk,
                         float *const *outs, int64_t nt) {
    cb_dot_rows_kq_scalar(w, r0, r1, xk, outs, nt);
}
#endif
