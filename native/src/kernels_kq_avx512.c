/* kernels_kq_avx512.c — the AVX-512 kernel of k-quant weights x Q8_K activations (kernels_kq.c has the spec).
 *
 * Role: cb_dot_rows_kq at the avx512 and amx levels: the AVX2 kernel's arithmetic on 64 codes per register.
 * Per 64 consecutive elements of a row (Q4_K / Q5_K: the two 32-sub-blocks of one 32-byte code run, their low
 * and high nibbles; Q6_K: two 32-quarters of a 128-half, the low or high nibbles of its 64 ql bytes) one zmm of
 * unsigned codes (the 32 code bytes broadcast to both halves, one variable shift per half), the scales per int16
 * lane by one vpermw, then per token one vpmaddubsw and one vpdpwssd (AVX512-VNNI: the AVX2 level's vpmaddwd and
 * vpaddd in one instruction, the same non-saturating int32 sums) into a 16-lane int32 accumulator whose halves are
 * added into the 8 lanes the shared code reduces (or, for q6_k, keeps: ggml's lanes). The integer sums are exact,
 * and the rest (q6's offset, by this level's madd_add = vpdpwssd, the mins, the reductions, the float steps) is the
 * AVX2 code (kernels_kq_x86.h, kernels_kq_tiles.h): the same bits as the scalar reference (the level tests compare
 * it with the scalar kernel where the CPU has AVX-512; run on Zen 4). IQ4_XS (signed codes) runs the AVX2 level's
 * 256-bit row_ints256 compiled for this target. q4_k_r8's r8_ints (8 rows per zmm) feeds kernels_kq_r8.h;
 * q6_k_r16's r16_tile (16 rows per zmm) makes kernels_kq_r16.h's pass (KQ_TILE_PASS).
 */
#include "kernels.h"
#include "kquants.h"
#include "kquants_r8.h"
#include "kquants_r16.h"
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels_kq_x86.h"

#define A512_TARGET "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c"
#define A512_FN static inline __attribute__((always_inline, target(A512_TARGET)))
#define A512_OUTLINE __attribute__((noinline, target(A512_TARGET)))

/* int16 lane n of a vpermw index: the scale of the 16 elements (two int16 pair sums per 4 bytes) lane n covers. */
static const int16_t PERM4[4][32] __attribute__((aligned(64))) = {     /* q4/q5 pair p: sc[2p] | sc[2p+1] */
#define H16(v) v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v
    {H16(0), H16(1)}, {H16(2), H16(3)}, {H16(4), H16(5)}, {H16(6), H16(7)}
#undef H16
};
static const int16_t PERM6[4][32] __attribute__((aligned(64))) = {     /* q6 run u: groups 4u .. 4u+3, 8 lanes each */
#define Q8(v) v, v, v, v, v, v, v, v
    {Q8(0), Q8(1), Q8(2), Q8(3)}, {Q8(4), Q8(5), Q8(6), Q8(7)}, {Q8(8), Q8(9), Q8(10), Q8(11)},
    {Q8(12), Q8(13), Q8(14), Q8(15)}
#undef Q8
};

/* Per-int16 shift counts: the low half of a zmm by lo, the high half by hi. */
A512_FN __m512i halves_by(int lo, int hi) {
    return _mm512_inserti64x4(_mm512_set1_epi16((short)lo), _mm256_set1_epi16((short)hi), 1);
}

/* Run u (0..3) of a block: 64 consecutive unsigned codes (elements e .. e+63) and their 16-bit scales. */
A512_FN __m512i run_of(int ENC, const unsigned char *blk, const kqblock *kb, int u, __m512i *sc, int *e) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i c;
    if (ENC == CB_Q6_K) {     /* half h = u / 2, v = u % 2: quarters 2v, 2v+1 (ql nibble v, qh bits 4v, 4v+2) */
        int h = u >> 1, v = u & 1;
        __m512i ql = _mm512_loadu_si512((const void *)(blk + 64 * h));
        c = _mm512_and_si512(v ? _mm512_srli_epi16(ql, 4) : ql, m4);
        __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)));
        __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(qh, halves_by(4 * v, 4 * v + 2)), _mm512_set1_epi8(3));
        c = _mm512_or_si512(c, _mm512_slli_epi16(hb, 4));
        __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(kb->sc)));
        *sc = _mm512_permutexvar_epi16(_mm512_load_si512((const void *)PERM6[u]), sc16);
        *e = 128 * h + 64 * v;
        return c;
    }
    const unsigned char *q = blk + (ENC == CB_Q5_K ? 48 : 16) + 32 * u;
    __m512i qs = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)q));
    c = _mm512_and_si512(_mm512_srlv_epi16(qs, halves_by(0, 4)), m4);
    if (ENC == CB_Q5_K) {              /* 5th bits: bit 2u (low half) and 2u+1 (high half) of each qh byte */
        __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16)));
        __m512i hb = _mm512_and_si512(_mm512_srlv_epi16(qh, halves_by(2 * u, 2 * u + 1)), _mm512_set1_epi8(1));
        c = _mm512_or_si512(c, _mm512_slli_epi16(hb, 4));
    }
    *sc = _mm512_permutexvar_epi16(_mm512_load_si512((const void *)PERM4[u]), _mm512_castsi256_si512(kb->sc));
    *e = 64 * u;
    return c;
}

/* Row j's integer lanes of super-block b for every token: four runs of 64 codes, the 16 lanes folded to 8 (lane L
 * of a run holds elements 4L .. 4L+3 of its 64, so lanes L and L + 8 fold into ggml's lane L: q6_k keeps them). */
A512_FN void row_ints(int ENC, int TT, int TR, int j, const unsigned char *blk, const kqblock *kb,
                      const cb_q8k_block *const *xk, size_t b, __m256i iv[8]) {
    if (ENC == CB_IQ4_XS) {           /* signed codes: vpsignb has no zmm form; the 256-bit chunks */
        row_ints256(ENC, TT, TR, j, blk, kb, xk, b, iv);
        return;
    }
    __m512i acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++) acc[i] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int u = 0; u < 4; u++) {
        __m512i sc;
        int e;
        __m512i c = run_of(ENC, blk, kb, u, &sc, &e);
#pragma GCC unroll 8
        for (int i = 0; i < TT; i++) {
            __m512i p = _mm512_maddubs_epi16(c, _mm512_loadu_si512((const void *)(xk[i][b].qs + e)));
            acc[i] = _mm512_dpwssd_epi32(acc[i], sc, p);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++)
        iv[i * TR + j] = _mm256_add_epi32(iv[i * TR + j], _mm256_add_epi32(_mm512_castsi512_si256(acc[i]),
                                                                           _mm512_extracti64x4_epi64(acc[i], 1)));
}

A512_FN __m256i madd_add(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_epi32(acc, a, b); }

/* q4_k_r8 (kernels_kq_r8.h): the 8 rows of a unit in one zmm per 64-byte piece (qword q: row CB_R8_ROW(q)'s 8
 * code bytes), per token the activation's 8 bytes broadcast to every qword; vpdpbusd (AVX512-VNNI: u8 codes x s8
 * activations, 4 products summed into each int32 lane) over a sub-block's 4 pieces gives each row two int32 lanes
 * of 16 products each, |lane| <= 16 * 15 * 127 < 2^15, so the lane is its own low int16 word (the high one its
 * sign): one vpdpwssd by (scale, 0) word pairs multiplies it by the row's sub-block scale exactly. I per row = its
 * two int32 lanes added. */
A512_FN void r8_ints(int TT, const unsigned char *u, const __m256i sc[2], const cb_q8k_block *const *xk, size_t b,
                     __m256i *I) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i scales = _mm512_inserti64x4(_mm512_castsi256_si512(sc[0]), sc[1], 1);
    __m512i acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++) acc[i] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        __m512i lo[4], hi[4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i v = _mm512_loadu_si512((const void *)(u + 128 + 256 * p + 64 * c));
            lo[c] = _mm512_and_si512(v, m4);
            hi[c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        }
        __m512i s0 = _mm512_shuffle_epi8(scales, _mm512_broadcast_i32x4(r8_pick_lo(2 * p)));
        __m512i s1 = _mm512_shuffle_epi8(scales, _mm512_broadcast_i32x4(r8_pick_lo(2 * p + 1)));
#pragma GCC unroll 8
        for (int i = 0; i < TT; i++) {
            const int8_t *a = xk[i][b].qs + 64 * p;
            __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[0], _mm512_set1_epi64(r8_act(a)));
            __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[0], _mm512_set1_epi64(r8_act(a + 32)));
#pragma GCC unroll 3
            for (int c = 1; c < 4; c++) {
                p0 = _mm512_dpbusd_epi32(p0, lo[c], _mm512_set1_epi64(r8_act(a + 8 * c)));
                p1 = _mm512_dpbusd_epi32(p1, hi[c], _mm512_set1_epi64(r8_act(a + 32 + 8 * c)));
            }
            acc[i] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(acc[i], s0, p0), s1, p1);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++) I[i] = _mm512_cvtepi64_epi32(_mm512_add_epi32(acc[i], _mm512_srli_epi64(acc[i], 32)));
}

/* q6_k_r16 (kernels_kq_r16.h): per piece pair (h, i) of a unit, 16 rows' codes of elements 128h + 32q + 4i .. +3
 * as one zmm: (ql nibble) | (qh bits 2q, 2q+1 moved to bits 4, 5), one vpternlogd each. Per token and sub-block
 * j the sum over its 4 code dwords by vpdpbusd (u8 codes x s8 activation dword broadcast, into an int32 lane per
 * row, starting from -32 * bsums[j]: the lane is then sum (q - 32) * a, |lane| < 2^17), times the rows' scales
 * (vpmulld), added into I. */
A512_FN __m512i r16_code(__m512i nib, __m512i hb) {      /* (nib & 0x0f) | (hb & 0x30), per byte */
    return _mm512_ternarylogic_epi32(nib, _mm512_and_si512(hb, _mm512_set1_epi8(0x30)), _mm512_set1_epi8(0x0f), 0xEC);
}
A512_FN __m512i r16_act(const int8_t *qs, int dw) {     /* activation dword dw broadcast */
    int32_t v;
    __builtin_memcpy(&v, qs + 4 * dw, 4);
    return _mm512_set1_epi32(v);
}

#define R16_MAXT 8      /* tokens per tile */
#define R16_PF_MIN 2    /* prefetch from 2 tokens (one token: a sequential stream the hardware follows) */
A512_FN void r16_tile(int TT, const unsigned char *grp, size_t nb, const cb_q8k_block *const *xk, float *const *outs,
                      int32_t r) {
    float acc[R16_MAXT][16] __attribute__((aligned(64)));  /* in memory: the registers hold codes and I */
    int32_t n32[R16_MAXT][16] __attribute__((aligned(64)));  /* -32 * bsums, broadcast from memory */
    for (int t = 0; t < TT; t++) _mm512_store_ps(acc[t], _mm512_setzero_ps());
    for (size_t b = 0; b < nb; b++) {
        const unsigned char *u = grp + b * CB_R16_UNIT;
        if (TT >= R16_PF_MIN) prefetch_span(u, R16_PF * CB_R16_UNIT, (R16_PF + 1) * CB_R16_UNIT);
        __m512i I[R16_MAXT];
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++) {
            __m512i bs = _mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)xk[t][b].bsums));
            _mm512_store_si512((void *)n32[t], _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(bs, 5)));
            I[t] = _mm512_setzero_si512();
        }
        __asm__ volatile("" : : "r"(n32), "r"(acc) : "memory");   /* read them back from memory, not lanes */
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 2
            for (int ih = 0; ih < 2; ih++)
#pragma GCC unroll 2
                for (int qp = 0; qp < 2; qp++) {      /* sub-blocks jl (q = qp, low nibbles) and jl + 4 (q = qp + 2) */
                    int jl = 8 * h + 2 * qp + ih;
                    __m512i lo[4], hi[4];
#pragma GCC unroll 4
                    for (int ii = 0; ii < 4; ii++) {
                        const unsigned char *pc = cb_r16_piece(u, (size_t)h, (size_t)(4 * ih + ii), 0);
                        __m512i ql = _mm512_loadu_si512((const void *)(pc + 64 * qp));
                        __m512i qh = _mm512_loadu_si512((const void *)(pc + 128));
                        lo[ii] = r16_code(ql, qp ? _mm512_slli_epi32(qh, 2) : _mm512_slli_epi32(qh, 4));
                        hi[ii] = r16_code(_mm512_srli_epi32(ql, 4), qp ? _mm512_srli_epi32(qh, 2) : qh);
                    }
                    const unsigned char *sp = u + CB_R16_SCALES + 16 * jl;       /* scales jl, jl + 4 */
                    __m512i sl = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)sp));
                    __m512i sh = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(sp + 64)));
                    int dl = 32 * h + 8 * qp + 4 * ih, dh = dl + 16;      /* the activation dwords of q, q + 2 */
#pragma GCC unroll 8
                    for (int t = 0; t < TT; t++) {
                        const int8_t *a = xk[t][b].qs;
                        __m512i pl = _mm512_set1_epi32(n32[t][jl]), ph = _mm512_set1_epi32(n32[t][jl + 4]);
#pragma GCC unroll 4
                        for (int ii = 0; ii < 4; ii++) {
                            pl = _mm512_dpbusd_epi32(pl, lo[ii], r16_act(a, dl + ii));
                            ph = _mm512_dpbusd_epi32(ph, hi[ii], r16_act(a, dh + ii));
                        }
                        I[t] = _mm512_add_epi32(I[t], _mm512_add_epi32(_mm512_mullo_epi32(pl, sl),
                                                                       _mm512_mullo_epi32(ph, sh)));
                        __asm__("" : "+v"(I[t]));     /* token by token: gcc would hoist every token's sums */
                    }
                }
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)u));
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++)
            _mm512_store_ps(acc[t], _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(xk[t][b].d)),
                                                    _mm512_cvtepi32_ps(I[t]), _mm512_load_ps(acc[t])));
    }
    for (int t = 0; t < TT; t++) _mm512_storeu_ps(outs[t] + r, _mm512_load_ps(acc[t]));
}

#define KQ_FN A512_FN
#define KQ_OUTLINE A512_OUTLINE
#define KQ_ENTRY cb_dot_rows_kq_avx512
#define R8_MAXT 8
KQ_TILE_PASS(r16_pass, R16_MAXT, r16_tile)
#define R16_CHUNK INT64_MAX      /* every token in one pass: token tiles, each over the group */
#include "kernels_kq_r8.h"
#include "kernels_kq_r16.h"
#include "kernels_kq_tiles.h"
#else
void cb_dot_rows_kq_avx512(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q8k_block *const *xk,
                           float *const *outs, int64_t nt) {
    cb_dot_rows_kq_scalar(w, r0, r1, xk, outs, nt);
}
#endif
