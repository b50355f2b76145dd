/* kernels_kq_x86.h — the pieces of the k-quant x Q8_K kernels (kernels_kq.c has the spec) both x86 levels share.
 *
 * Role: the AVX2 building blocks kernels_kq_avx2.c and kernels_kq_avx512.c both use, so the two levels run the same
 * unpacking of a block's scales and mins, the same exact integer reductions and literally the same float step per
 * super-block: a block's 16-bit scales / mins (block_of), one 32-code chunk unpacked for 256-bit registers
 * (chunk_of), the lane reductions (reduce, reduce4), the f16 factors and activation scales per lane
 * (halves, da_of), the float step (kq_step, block_float) and a tile's store (tile_store, the Q8_0 tiles' too). An AVX-512
 * function may inline these (its target includes AVX2's). kernels_kq_tiles.h builds the tiles on them and on the
 * level's row_ints.
 */
#ifndef CB_KERNELS_KQ_X86_H
#define CB_KERNELS_KQ_X86_H
#include "kernels_x86.h"
#include "kquants.h"
#include "iquants.h"

typedef struct {
    const cb_matrix *w;
    const unsigned char *data;
    size_t rb, bb, nb;     /* row bytes, block bytes, blocks per row */
} kqdesc;

/* Byte pairs (2j, 2j+1) repeated: vpshufb of the 16-bit scales picks scale j for every int16 lane. */
static const uint8_t K4_SHUF[8][32] __attribute__((aligned(32))) = {
#define S2(j) 2 * j, 2 * j + 1
#define S8(j) S2(j), S2(j), S2(j), S2(j), S2(j), S2(j), S2(j), S2(j)
#define ROW(j) {S8(j), S8(j)}
    ROW(0), ROW(1), ROW(2), ROW(3), ROW(4), ROW(5), ROW(6), ROW(7)
#undef ROW
#undef S8
#undef S2
};
/* Q6_K: int16 words 2t (x8, low half) then 2t+1 (x8, high half): the two 16-groups' scales of quarter t of a half. */
static const uint8_t K6_SHUF[4][32] __attribute__((aligned(32))) = {
#define W2(w) 2 * (w), 2 * (w) + 1
#define W8(w) W2(w), W2(w), W2(w), W2(w), W2(w), W2(w), W2(w), W2(w)
#define ROW6(t) {W8(2 * t), W8(2 * t + 1)}
    ROW6(0), ROW6(1), ROW6(2), ROW6(3)
#undef ROW6
#undef W8
#undef W2
};

/* The row-interleaved tiles (q4_k_r8, q6_k_r16) prefetch the unit this many units ahead when they multiply at least
 * PF_MIN tokens (q6_k_r16's R16_PF_MIN: each level beside its tile). */
#define R8_PF 4
#define R8_PF_MIN 2
#define R16_PF 2

/* TILE's tokens passes: NAME(nt, grp, nb, xk, outs, r) runs nt tokens over a group as token groups of MAXT (the last
 * one shorter; the group's bytes stay in cache while each token group passes), each by TILE(TT, grp, nb, xk, outs, r)
 * with TT a constant. Cases past MAXT are never taken. */
#define KQ_TT(TT, MAXT) ((TT) < (MAXT) ? (TT) : (MAXT))
#define KQ_TILE_PASS(NAME, MAXT, TILE)                                                                           \
    KQ_FN void NAME(int64_t nt, const unsigned char *grp, size_t nb, const cb_q8k_block *const *xk,              \
                    float *const *outs, int32_t r) {                                                            \
        for (int64_t t = 0; t < nt; t += (MAXT)) {                                                              \
            const cb_q8k_block *const *x = xk + t;                                                              \
            float *const *o = outs + t;                                                                         \
            switch (nt - t < (MAXT) ? nt - t : (MAXT)) {                                                        \
            case 1: TILE(1, grp, nb, x, o, r); break;                                                           \
            case 2: TILE(KQ_TT(2, MAXT), grp, nb, x, o, r); break;                                              \
            case 3: TILE(KQ_TT(3, MAXT), grp, nb, x, o, r); break;                                              \
            case 4: TILE(KQ_TT(4, MAXT), grp, nb, x, o, r); break;                                              \
            case 5: TILE(KQ_TT(5, MAXT), grp, nb, x, o, r); break;                                              \
            case 6: TILE(KQ_TT(6, MAXT), grp, nb, x, o, r); break;                                              \
            case 7: TILE(KQ_TT(7, MAXT), grp, nb, x, o, r); break;                                              \
            default: TILE(KQ_TT(8, MAXT), grp, nb, x, o, r); break;                                             \
            }                                                                                                   \
        }                                                                                                       \
    }

/* k_<ID>: the rows r0..r1 of a row-interleaved layout (q4_k_r8, q6_k_r16: G rows a group, UNIT bytes a unit, a
 * group's nb units in a row): whole groups by the level's PASS(nt, grp, nb, xk, outs, r) on at most CHUNK tokens at
 * a time, the rows of a partial group (a range that cuts one) by the scalar cb_dot_regrouped_row. */
#define KQ_REGROUPED(ID, G, UNIT, CHUNK, PASS)                                                                 \
    static KQ_OUTLINE void k_##ID(const kqdesc *d, int32_t r0, int32_t r1, const cb_q8k_block *const *xk,     \
                                  float *const *outs, int64_t nt) {                                           \
        int32_t g0 = (r0 + (G) - 1) / (G), g1 = r1 / (G);     /* whole groups g0 .. g1 - 1 (none: g1 <= g0) */ \
        for (int32_t r = r0; r < r1; r++)                                                                     \
            if (r < (G) * g0 || r >= (G) * g1) cb_dot_regrouped_row(d->w, r, xk, outs, nt);                   \
        for (int32_t g = g0; g < g1; g++) {                                                                   \
            const unsigned char *grp = d->data + (size_t)g * d->nb * (UNIT);                                  \
            for (int64_t t = 0; t < nt; t += (CHUNK))                                                         \
                PASS(nt - t < (CHUNK) ? nt - t : (CHUNK), grp, d->nb, xk + t, outs + t, (G) * g);             \
        }                                                                                                     \
    }

/* q4_k_r8: vpshufb controls widening byte j of each qword (a row's 8 sub-block scales) to its 4 int16 lanes. */
static const int8_t R8_PICK[8][16] __attribute__((aligned(16))) = {
#define P4(j) j, -1, j, -1, j, -1, j, -1
    {P4(0), P4(8)}, {P4(1), P4(9)}, {P4(2), P4(10)}, {P4(3), P4(11)},
    {P4(4), P4(12)}, {P4(5), P4(13)}, {P4(6), P4(14)}, {P4(7), P4(15)}
#undef P4
};
AVX2_FN __m128i r8_pick(int j) { return _mm_load_si128((const __m128i *)R8_PICK[j]); }
/* The same with each scale in the low word of an int32 lane, 0 in the high one (for vpdpwssd on int32 lanes that
 * fit int16: lane * scale exactly). */
static const int8_t R8_PICK_LO[8][16] __attribute__((aligned(16))) = {
#define P2(j) j, -1, -1, -1, j, -1, -1, -1
    {P2(0), P2(8)}, {P2(1), P2(9)}, {P2(2), P2(10)}, {P2(3), P2(11)},
    {P2(4), P2(12)}, {P2(5), P2(13)}, {P2(6), P2(14)}, {P2(7), P2(15)}
#undef P2
};
AVX2_FN __m128i r8_pick_lo(int j) { return _mm_load_si128((const __m128i *)R8_PICK_LO[j]); }
/* 8 activation codes as one 64-bit lane (to broadcast). */
AVX2_FN long long r8_act(const int8_t *a) {
    long long v;
    __builtin_memcpy(&v, a, 8);
    return v;
}

/* A row's super-block as the tiles use it: q4/q5 the 16-bit scales in both halves and the 8 mins, q6 its 16 int8
 * scales (in the low 16 bytes of sc and in mins) and, widened to 16 bits once per block, scales 0-7 (s6[0]) and
 * 8-15 (s6[1]) each in both halves (the AVX2 chunks pick theirs with one vpshufb). */
typedef struct { __m256i sc; __m128i mins; __m256i s6[2]; } kqblock;

/* Q4_K / Q5_K 12-byte scale fields as 8 6-bit scales then 8 mins, 16 bytes per 128-bit lane (get_scale_min_k4 of
 * ggml, vectorised): from the 12 scale bytes s at the start of each lane of v, sc[j] = s[j] & 63 and
 * m[j] = s[j+4] & 63 for j < 4; for j >= 4 the low nibble (sc) or high nibble (m) of s[j+4] with the top two bits
 * of s[j-4] (sc) or s[j] (m) as bits 4, 5. Lane by lane: one block's (scales_mins) or two rows' (q4_k_r8). */
AVX2_FN __m256i scales_mins_v(__m256i v) {
#define SM_B(...) _mm256_broadcastsi128_si256(_mm_setr_epi8(__VA_ARGS__))
    const __m256i a = _mm256_shuffle_epi8(v, SM_B(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m256i t = _mm256_shuffle_epi8(v, SM_B(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    __m256i lo = _mm256_and_si256(a, SM_B(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(a, 4), SM_B(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
#undef SM_B
    __m256i top = _mm256_and_si256(_mm256_srli_epi16(t, 2), _mm256_set1_epi8(0x30));
    return _mm256_or_si256(_mm256_or_si256(lo, hi), top);
}
/* One block's (the 16-byte load ends inside the block: bytes 4 .. 19 of 144 / 176). */
AVX2_FN __m128i scales_mins(const unsigned char *blk) {
    return _mm256_castsi256_si128(scales_mins_v(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(blk + 4)))));
}

AVX2_FN kqblock block_of(int ENC, const unsigned char *blk) {
    kqblock k;
    if (ENC == CB_IQ4_XS) {           /* the 8 ls - 32 as int16, in both halves (as q4/q5's scales) */
        __m128i sc = _mm_setr_epi16((short)cb_iq4_xs_scale(blk, 0), (short)cb_iq4_xs_scale(blk, 1),
                                    (short)cb_iq4_xs_scale(blk, 2), (short)cb_iq4_xs_scale(blk, 3),
                                    (short)cb_iq4_xs_scale(blk, 4), (short)cb_iq4_xs_scale(blk, 5),
                                    (short)cb_iq4_xs_scale(blk, 6), (short)cb_iq4_xs_scale(blk, 7));
        k.sc = _mm256_inserti128_si256(_mm256_castsi128_si256(sc), sc, 1);
        k.mins = _mm_setzero_si128();
        return k;
    }
    if (ENC == CB_Q6_K) {
        k.mins = _mm_loadu_si128((const __m128i *)(blk + 192));
        k.sc = _mm256_castsi128_si256(k.mins);
        __m256i s16 = _mm256_cvtepi8_epi16(k.mins);
        k.s6[0] = _mm256_permute2x128_si256(s16, s16, 0x00);
        k.s6[1] = _mm256_permute2x128_si256(s16, s16, 0x11);
        return k;
    }
    __m256i ms = _mm256_cvtepu8_epi16(scales_mins(blk));
    __m128i sc = _mm256_castsi256_si128(ms);
    k.sc = _mm256_inserti128_si256(_mm256_castsi128_si256(sc), sc, 1);
    k.mins = _mm256_extracti128_si256(ms, 1);
    return k;
}

/* Chunk ch (0..7) of a block, 32 codes: their unsigned codes (*c; iq4_xs: signed), their 16-bit scales per int16
 * lane (*s); returns the chunk's element offset in the block. IQ4_XS chunk ch is sub-block ch. Q4_K / Q5_K chunk ch is sub-block ch (the low nibbles of code bytes
 * 32 (ch / 2) .. for even ch, the high ones for odd); Q6_K chunk ch is quarter t = (ch / 2) % 2 + 2 (ch % 2) of
 * half h = ch / 4 (the low or high nibbles of 32 ql bytes, or'ed with qh bits 2t, 2t+1 moved to bits 4, 5). */
AVX2_FN int chunk_of(int ENC, const unsigned char *blk, const kqblock *kb, int ch, __m256i *c, __m256i *s) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    int hi = ch & 1, p = ch >> 1;
    if (ENC == CB_IQ4_XS) {           /* signed: kvalues_iq4nl of sub-block ch's 16 bytes' low, then high nibbles */
        const __m128i lut = _mm_loadu_si128((const __m128i *)CB_IQ4_VALUES), m = _mm_set1_epi8(0x0f);
        __m128i qs = _mm_loadu_si128((const __m128i *)(blk + 8 + 16 * ch));
        *c = _mm256_set_m128i(_mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(qs, 4), m)),
                              _mm_shuffle_epi8(lut, _mm_and_si128(qs, m)));
        *s = _mm256_shuffle_epi8(kb->sc, _mm256_load_si256((const __m256i *)K4_SHUF[ch]));
        return 32 * ch;
    }
    if (ENC == CB_Q6_K) {
        int h = p >> 1, t = (p & 1) + 2 * hi, off = 128 * h + 32 * t;
        __m256i ql = _mm256_loadu_si256((const __m256i *)(blk + 64 * h + 32 * (p & 1)));
        __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h));
        /* bits 2t, 2t+1 of each qh byte -> bits 4, 5 (what crosses a byte inside the 16-bit shift is masked off) */
        __m256i hb = t == 0 ? _mm256_slli_epi16(qh, 4) : t == 1 ? _mm256_slli_epi16(qh, 2) : t == 2 ? qh
                   : _mm256_srli_epi16(qh, 2);
        *c = _mm256_or_si256(_mm256_and_si256(hi ? _mm256_srli_epi16(ql, 4) : ql, m4),
                             _mm256_and_si256(hb, _mm256_set1_epi8(0x30)));
        *s = _mm256_shuffle_epi8(kb->s6[h], _mm256_load_si256((const __m256i *)K6_SHUF[t]));   /* groups 8h + 2t, +1 */
        return off;
    }
    __m256i qs = _mm256_loadu_si256((const __m256i *)(blk + (ENC == CB_Q5_K ? 48 : 16) + 32 * p));
    *c = _mm256_and_si256(hi ? _mm256_srli_epi16(qs, 4) : qs, m4);
    if (ENC == CB_Q5_K) {             /* the 5th bit: bit ch of each qh byte */
        __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + 16));
        __m256i b = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(ch)), _mm256_set1_epi8(1));
        *c = _mm256_or_si256(*c, _mm256_slli_epi16(b, 4));
    }
    *s = _mm256_shuffle_epi8(kb->sc, _mm256_load_si256((const __m256i *)K4_SHUF[ch]));
    return 32 * ch;
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

/* One q4_k / q5_k super-block's float step on 8 lanes (kernels_kq.c): acc = fma(d * da, I, acc), then
 * acc = fma(-(dmin * da), M, acc); d, dmin the weight blocks' factors, da the activation blocks' d, I, M the
 * integer sums, per lane. The row tiles (block_float) and q4_k_r8's (kernels_kq_r8.h) both step through it. */
AVX2_FN __m256 kq_step(__m256 d, __m256 dmin, __m256 da, __m256i I, __m256i M, __m256 acc) {
    acc = _mm256_fmadd_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(I), acc);
    return _mm256_fnmadd_ps(_mm256_mul_ps(dmin, da), _mm256_cvtepi32_ps(M), acc);
}
/* block_float: kq_step for the tile's TT x TR lanes, the factors read from each lane's block. */
AVX2_FN __m256 block_float(int TT, int TR, const unsigned char *const *blk, __m256i I, __m256i M, __m256 da,
                           __m256 acc) {
    return kq_step(halves(TT, TR, blk, 0), halves(TT, TR, blk, 2), da, I, M, acc);
}

/* Row j's integer lanes of super-block b for every token, 256 bits wide: the eight 32-code chunks one at a time, each
 * against every token (one code and one scale register live beside the tile's accumulators); per token one
 * vpmaddubsw (u8 x s8 -> int16 pairs; iq4_xs's signed codes as |w| and the activations signed by w, as ggml's
 * mul_add_epi8; |pair| <= 2 * 127 * 127: no saturation) and one vpmaddwd by the 16-bit scales. The AVX2 level's
 * row_ints, and the AVX-512 level's for iq4_xs. */
AVX2_FN void row_ints256(int ENC, int TT, int TR, int j, const unsigned char *blk, const kqblock *kb,
                         const cb_q8k_block *const *xk, size_t b, __m256i iv[8]) {
#pragma GCC unroll 8
    for (int ch = 0; ch < 8; ch++) {
        __m256i c, s;
        int off = chunk_of(ENC, blk, kb, ch, &c, &s);
        __m256i u = ENC == CB_IQ4_XS ? _mm256_sign_epi8(c, c) : c;
#pragma GCC unroll 8
        for (int i = 0; i < TT; i++) {
            __m256i a = _mm256_loadu_si256((const __m256i *)(xk[i][b].qs + off));
            __m256i p = _mm256_maddubs_epi16(u, ENC == CB_IQ4_XS ? _mm256_sign_epi8(a, c) : a);
            iv[i * TR + j] = _mm256_add_epi32(iv[i * TR + j], _mm256_madd_epi16(s, p));
            __asm__("" : "+x"(iv[i * TR + j]));   /* the sum stays one chain in a register: gcc would re-associate
                                                     * it into a tree of spilled partial sums (10-15% slower) */
        }
    }
}

/* ggml's hsum_float_8: ((v4 + v0) + (v6 + v2)) + ((v5 + v1) + (v7 + v3)) (the q8_0, q5_1, iq4_xs and q6_k tiles' last step). */
AVX2_FN float hsum_ggml(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

/* The lane tiles' store: pair n = i * TR + j (token i, row j) has its own 8 float lanes acc[n]; outs[i][r + j] =
 * hsum_ggml(acc[n]), plus extra[n] when extra is given (q5_1's m * s sums, added last as ggml adds them). */
AVX2_FN void lanes_store(int TT, int TR, const __m256 *acc, const float *extra, float *const *outs, int32_t r) {
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++)
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) {
            float s = hsum_ggml(acc[i * TR + j]);
            outs[i][r + j] = extra ? s + extra[i * TR + j] : s;
        }
}

/* A tile's 8 lanes (lane n = token n / TR, row n % TR) written to outs[token][r + row]. */
AVX2_FN void tile_store(int TT, int TR, __m256 acc, float *const *outs, int32_t r) {
    float out[8];
    _mm256_storeu_ps(out, acc);
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++)
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) outs[i][r + j] = out[i * TR + j];
}

#endif
