/* kernels_kq_avx2.c — the AVX2 kernel of k-quant weights x Q8_K activations (kernels_kq.c has the spec).
 *
 * Role: cb_dot_rows_kq at the avx2 level. Per 32 codes of a row (one Q4_K / Q5_K sub-block, two Q6_K scale
 * groups) the unsigned codes u8 as one register, per token one vpmaddubsw (u8 x s8 -> int16 pairs,
 * |pair| <= 2 * 63 * 127: no saturation) and one vpmaddwd by the 16-bit scales (the pairs times their scale,
 * summed to int32), as ggml's AVX2 vec_dot does; per super-block the 8 int32 lanes summed exactly. Q6_K's
 * -32 offset: 32 * sum_j sc_j * bsums[j] subtracted (vpmaddwd of the scales and the bsums). Q4_K / Q5_K mins:
 * vpmaddwd of the 8 mins and the 8 bsums32. The integers of up to 8 (token, row) pairs of a tile are reduced
 * together (vphaddd) into one register, and each lane takes the spec's float step (its own fma chain), so the
 * bits are the scalar reference's. Tiles: 1 token x 8 rows (decode, the next tile prefetched), 2 x 4, 3 x 2,
 * and 4-8 tokens x 1 row (prefill: each unpacked sub-block serves all of them).
 */
#include "kernels.h"
#include "kquants.h"
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels_x86.h"

typedef struct {
    const unsigned char *data;
    size_t rb, bb, nb;     /* row bytes, block bytes, blocks per row */
} kqdesc;

/* Byte pairs (2j, 2j+1) repeated: vpshufb of the 16-bit scales picks scale j for every int16 lane. */
static const uint8_t K4_SHUF[8][32] __attribute__((aligned(32))) = {
#define S2(j) 2 * j, 2 * j + 1
#define ROW(j) {S2(j), S2(j), S2(j), S2(j), S2(j), S2(j), S2(j), S2(j), S2(j), S2(j), S2(j), S2(j), S2(j), S2(j), S2(j), S2(j)}
    ROW(0), ROW(1), ROW(2), ROW(3), ROW(4), ROW(5), ROW(6), ROW(7)
#undef ROW
#undef S2
};
/* Q6_K: bytes 2i (x8) then 2i+1 (x8): the two 16-groups' int8 scales of 32-chunk i. */
static const uint8_t K6_SHUF[8][16] __attribute__((aligned(16))) = {
#define ROW6(i) {2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, 2 * i, \
                 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1, 2 * i + 1}
    ROW6(0), ROW6(1), ROW6(2), ROW6(3), ROW6(4), ROW6(5), ROW6(6), ROW6(7)
#undef ROW6
};

/* A row's super-block as the tile uses it: q4/q5 the 16-bit scales in both halves and the 8 mins, q6 its 16 int8 scales. */
typedef struct { __m256i sc; __m128i mins; } kqblock;

AVX2_FN kqblock block_of(int ENC, const unsigned char *blk) {
    kqblock k;
    if (ENC == CB_Q6_K) {
        k.mins = _mm_loadu_si128((const __m128i *)(blk + 192));
        k.sc = _mm256_castsi128_si256(k.mins);
        return k;
    }
    uint32_t u[4];
    cb_q4_k_scales_mins(blk, u);
    __m256i ms = _mm256_cvtepu8_epi16(_mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]));
    __m128i sc = _mm256_castsi256_si128(ms);
    k.sc = _mm256_inserti128_si256(_mm256_castsi128_si256(sc), sc, 1);
    k.mins = _mm256_extracti128_si256(ms, 1);
    return k;
}

/* Chunk pair p (0..3) of a block: the unsigned codes of two 32-chunks (c[0], c[1]), their 16-bit scale
 * vectors (s[0], s[1]), and the chunks' element offsets in the block (off[0], off[1]). */
AVX2_FN void pair_of(int ENC, const unsigned char *blk, const kqblock *kb, int p, __m256i c[2], __m256i s[2], int off[2]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    if (ENC == CB_Q6_K) {             /* half h = p / 2, quarters t = p % 2 and t + 2 */
        int h = p >> 1, t = p & 1;
        __m256i ql = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32 * t));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
        const __m256i m30 = _mm256_set1_epi8(0x30);
        __m256i ha = t ? _mm256_slli_epi16(qh, 2) : _mm256_slli_epi16(qh, 4);   /* bits 2t, 2t+1 -> 4, 5 */
        __m256i hb = t ? _mm256_srli_epi16(qh, 2) : qh;                          /* bits 2t+4, 2t+5 -> 4, 5 */
        c[0] = _mm256_or_si256(_mm256_and_si256(ql, m4), _mm256_and_si256(ha, m30));
        c[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql, 4), m4), _mm256_and_si256(hb, m30));
        off[0] = 128 * h + 32 * t, off[1] = off[0] + 64;
        __m128i sc = _mm256_castsi256_si128(kb->sc);
        s[0] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, _mm_load_si128((const __m128i *)K6_SHUF[off[0] / 32])));
        s[1] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, _mm_load_si128((const __m128i *)K6_SHUF[off[1] / 32])));
        return;
    }
    __m256i qs = _mm256_loadu_si256((const __m256i *)(blk + (ENC == CB_Q5_K ? 48 : 16) + 32 * p));
    c[0] = _mm256_and_si256(qs, m4);
    c[1] = _mm256_and_si256(_mm256_srli_epi16(qs, 4), m4);
    if (ENC == CB_Q5_K) {             /* 5th bits: bit 2p (chunk 2p) and 2p+1 of each qh byte */
        __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 16)), one = _mm256_set1_epi8(1);
        __m256i b0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p)), one);
        __m256i b1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p + 1)), one);
        c[0] = _mm256_or_si256(c[0], _mm256_slli_epi16(b0, 4));
        c[1] = _mm256_or_si256(c[1], _mm256_slli_epi16(b1, 4));
    }
    off[0] = 64 * p, off[1] = 64 * p + 32;
    s[0] = _mm256_shuffle_epi8(kb->sc, _mm256_load_si256((const __m256i *)K4_SHUF[2 * p]));
    s[1] = _mm256_shuffle_epi8(kb->sc, _mm256_load_si256((const __m256i *)K4_SHUF[2 * p + 1]));
}

/* sum(scale * pairs of u * a) of one pair of chunks for one token, as 8 int32 lanes. */
AVX2_FN __m256i pair_dot(const __m256i c[2], const __m256i s[2], const int8_t *a, const int off[2]) {
    __m256i p0 = _mm256_maddubs_epi16(c[0], _mm256_loadu_si256((const __m256i *)(a + off[0])));
    __m256i p1 = _mm256_maddubs_epi16(c[1], _mm256_loadu_si256((const __m256i *)(a + off[1])));
    return _mm256_add_epi32(_mm256_madd_epi16(s[0], p0), _mm256_madd_epi16(s[1], p1));
}

/* Lane n of the result = the sum of v[n]'s 8 lanes, n < N (N <= 4: the sums in the low half, the rest 0): exact. */
AVX2_FN __m256i reduce(int N, const __m256i v[8]) {
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    if (N <= 4)
        return _mm256_zextsi128_si256(_mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1)));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}
/* Lane n = the sum of v[n]'s 4 lanes, n < N. */
AVX2_FN __m256i reduce4(int N, const __m128i v[8]) {
    __m128i a = _mm_hadd_epi32(_mm_hadd_epi32(v[0], v[1]), _mm_hadd_epi32(v[2], v[3]));
    if (N <= 4) return _mm256_zextsi128_si256(a);
    __m128i b = _mm_hadd_epi32(_mm_hadd_epi32(v[4], v[5]), _mm_hadd_epi32(v[6], v[7]));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
}

/* The f16 at byte o of each lane's block (lane n = token n / TR, row n % TR) widened (lanes past TT * TR: 0), built in
 * registers (a store of 8 halves and a vector load would stall store forwarding). */
AVX2_FN __m256 halves(int TT, int TR, const unsigned char *const *blk, size_t o) {
    uint16_t h[8];
#pragma GCC unroll 8
    for (int j = 0; j < TR; j++) __builtin_memcpy(&h[j], blk[j] + o, 2);
    if (TR == 1) return _mm256_cvtph_ps(_mm_set1_epi16((short)h[0]));
    short v[8];
#pragma GCC unroll 8
    for (int n = 0; n < 8; n++) v[n] = n < TT * TR ? (short)h[n % TR] : 0;
    return _mm256_cvtph_ps(_mm_setr_epi16(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]));
}
/* The activation blocks' d per lane (token n / TR), in registers. */
AVX2_FN __m256 da_of(int TT, int TR, const cb_q8k_block *const *xk, size_t b) {
    if (TT == 1) return _mm256_broadcast_ss(&xk[0][b].d);
    float d[8];
#pragma GCC unroll 8
    for (int n = 0; n < 8; n++) d[n] = n < TT * TR ? xk[n / TR][b].d : 0.0f;
    return _mm256_setr_ps(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]);
}

/* One super-block's float step for the tile's TT x TR lanes (kernels_kq.c): acc = fma(d * da, I, acc), and for
 * q4/q5 acc = fma(-(dmin * da), M, acc). I, M as integer lanes; da the activation blocks' d per lane. */
AVX2_FN __m256 block_float(int ENC, int TT, int TR, const unsigned char *const *blk, __m256i I, __m256i M, __m256 da,
                           __m256 acc) {
    __m256 d = halves(TT, TR, blk, ENC == CB_Q6_K ? 208 : 0);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(I), acc);
    if (ENC == CB_Q6_K) return acc;
    __m256 dmin = halves(TT, TR, blk, 2);
    return _mm256_fnmadd_ps(_mm256_mul_ps(dmin, da), _mm256_cvtepi32_ps(M), acc);
}

/* The integer lanes of one super-block b: row j's codes (one row at a time: its scales live once) against
 * every token; q6's offset correction per (token, row), q4/q5's mins sums M. */
AVX2_FN void block_ints(int ENC, int TT, int TR, const unsigned char *const *blk, const cb_q8k_block *const *xk,
                        size_t b, __m256i *I, __m256i *M) {
    __m256i iv[8];
    __m128i mins[8], mv[8];
#pragma GCC unroll 8
    for (int n = 0; n < 8; n++) iv[n] = _mm256_setzero_si256(), mv[n] = _mm_setzero_si128();
#pragma GCC unroll 8
    for (int j = 0; j < TR; j++) {
        kqblock kb = block_of(ENC, blk[j]);
        mins[j] = kb.mins;
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            __m256i c[2], s[2];
            int off[2];
            pair_of(ENC, blk[j], &kb, p, c, s, off);
#pragma GCC unroll 8
            for (int i = 0; i < TT; i++) iv[i * TR + j] = _mm256_add_epi32(iv[i * TR + j], pair_dot(c, s, xk[i][b].qs, off));
        }
        if (ENC == CB_Q6_K) {              /* minus 32 * sum_g sc_g * bsums[g] */
            __m256i sc16 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(kb.sc));
#pragma GCC unroll 8
            for (int i = 0; i < TT; i++) {
                __m256i cs = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)xk[i][b].bsums));
                iv[i * TR + j] = _mm256_sub_epi32(iv[i * TR + j], _mm256_slli_epi32(cs, 5));
            }
        }
    }
    *I = reduce(TT * TR, iv);
    if (ENC == CB_Q6_K) return;
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++) {
        __m128i bs = _mm_loadu_si128((const __m128i *)xk[i][b].bsums32);
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) mv[i * TR + j] = _mm_madd_epi16(mins[j], bs);
    }
    *M = reduce4(TT * TR, mv);
}

/* TT tokens x TR rows from row r (TT * TR <= 8); pf != 0: prefetch the bytes pf ahead (the next row tile). */
AVX2_FN void tile(int ENC, int TT, int TR, const kqdesc *d, int32_t r, const cb_q8k_block *const *xk,
                  float *const *outs, size_t pf) {
    const unsigned char *row = d->data + (size_t)r * d->rb, *blk[8];
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < d->nb; b++) {
        if (pf) prefetch_span(row + pf, b * d->bb * (size_t)TR, (b + 1) * d->bb * (size_t)TR);
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) blk[j] = row + (size_t)j * d->rb + b * d->bb;
        __m256i I, M = _mm256_setzero_si256();
        block_ints(ENC, TT, TR, blk, xk, b, &I, &M);
        acc = block_float(ENC, TT, TR, blk, I, M, da_of(TT, TR, xk, b), acc);
    }
    float out[8];
    _mm256_storeu_ps(out, acc);
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++)
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) outs[i][r + j] = out[i * TR + j];
}

/* The rows r0..r1 for a group of m <= 8 tokens: 1 x 8 (one token, the next tile prefetched), 2 x 4, 3 x 2,
 * else m x 1 (the first token group prefetches the next row); leftover rows one at a time. */
AVX2_FN void rows_for(int ENC, const kqdesc *d, int32_t r0, int32_t r1, const cb_q8k_block *const *xk,
                      float *const *outs, int64_t m, int first) {
    int32_t r = r0;
#define KQ_ROWS(TT, TR, PF) \
    for (; r + TR <= r1; r += TR) tile(ENC, TT, TR, d, r, xk, outs, PF);
    switch (m) {
    case 1: KQ_ROWS(1, 8, 8 * d->rb) break;
    case 2: KQ_ROWS(2, 4, first ? 4 * d->rb : 0) break;
    case 3: KQ_ROWS(3, 2, first ? 2 * d->rb : 0) break;
    case 4: KQ_ROWS(4, 1, first ? d->rb : 0) break;
    case 5: KQ_ROWS(5, 1, first ? d->rb : 0) break;
    case 6: KQ_ROWS(6, 1, first ? d->rb : 0) break;
    case 7: KQ_ROWS(7, 1, first ? d->rb : 0) break;
    default: KQ_ROWS(8, 1, first ? d->rb : 0) break;
    }
#undef KQ_ROWS
    for (; r < r1; r++)
        for (int64_t i = 0; i < m; i++) tile(ENC, 1, 1, d, r, xk + i, outs + i, 0);
}

/* Token groups of 8 outer (their activation blocks stay in L1), rows inner. */
AVX2_FN void rows_of(int ENC, const kqdesc *d, int32_t r0, int32_t r1, const cb_q8k_block *const *xk,
                     float *const *outs, int64_t nt) {
    for (int64_t t = 0; t < nt; t += 8) rows_for(ENC, d, r0, r1, xk + t, outs + t, nt - t < 8 ? nt - t : 8, t == 0);
}

#define KQ_KERNEL(ID)                                                                                      \
    static AVX2_OUTLINE void k_##ID(const kqdesc *d, int32_t r0, int32_t r1, const cb_q8k_block *const *xk, \
                                    float *const *outs, int64_t nt) {                                      \
        rows_of(CB_##ID, d, r0, r1, xk, outs, nt);                                                          \
    }
KQ_KERNEL(Q4_K)
KQ_KERNEL(Q5_K)
KQ_KERNEL(Q6_K)

void cb_dot_rows_kq_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q8k_block *const *xk,
                         float *const *outs, int64_t nt) {
    size_t nb = (size_t)w->cols / CB_QK_K, rb = (size_t)cb_row_bytes(w->dtype, w->cols);
    kqdesc d = {(const unsigned char *)w->data, rb, rb / nb, nb};
    if (w->dtype == CB_Q4_K) k_Q4_K(&d, r0, r1, xk, outs, nt);
    else if (w->dtype == CB_Q5_K) k_Q5_K(&d, r0, r1, xk, outs, nt);
    else k_Q6_K(&d, r0, r1, xk, outs, nt);
}
#else
void cb_dot_rows_kq_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q8k_block *const *xk,
                         float *const *outs, int64_t nt) {
    cb_dot_rows_kq_scalar(w, r0, r1, xk, outs, nt);
}
#endif
