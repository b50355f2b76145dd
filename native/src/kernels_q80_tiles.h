/* kernels_q80_tiles.h — the tiles of a x Q8_0 (x Q8_1) level, included by kernels_q80_avx2.c / kernels_q80_avx512.c.
 *
 * Role: one template for both x86 levels (kernels_q80.c has the spec). The includer defines Q80_FN (its inline
 * attribute), Q80_OUTLINE (its out-of-line attribute), Q80_ENTRY (the name of its cb_dot_rows_q80_k entry) and
 * Q80_DOT4(u, s): the int32 lanes of u8 x s8 products summed in 4s (AVX2: vpmaddubsw then vpmaddwd by ones;
 * AVX512-VNNI: one vpdpbusd, the same exact sums).
 * A block's 32 integer codes as one register (q8_0: loaded; q5_0 / q5_1: the nibbles with the 5th bit, q5_0's
 * where it is clear the high nibble 0xF, so the byte is q - 16, as ggml's bytes_from_bits_32 / andnot; mxfp4,
 * iq4_nl: the nibbles looked up in the 16 values by vpshufb, as ggml's AVX2 vec_dot). Per block and (token, row)
 * pair: |w| as u8 and the activation codes signed by w (vpsignb, as ggml's
 * mul_sum_i8_pairs), Q80_DOT4 (vpmaddubsw, |pair| <= 2 * 128 * 127: no saturation, and vpmaddwd by ones; or one
 * vpdpbusd);
 * the pairs' 8 lanes summed exactly (kernels_kq_x86.h reduce), then per pair the float step
 * s = fma(dw * da, (float)I, s) in one 8-lane register: the scalar reference's bits.
 * q8_0 and q5_1 instead keep ggml's own order (kernels_q80.c): per (token, row) pair an 8-lane float accumulator
 * taking fma(dw * da, lanes) per block and ggml's hsum_float_8 at the end (lanes_tile).
 * Tiles: 1 token x 4 rows (decode, the next tile prefetched), 2 x 4, 3 x 2, 4 x 2; more tokens go in groups of 4
 * (8 x 1 tiles measured 3x slower per token than two 4 x 2 passes: 8 activation d's gathered per block).
 */

typedef struct {
    const unsigned char *data;
    size_t rb, nb, bb;     /* row bytes, blocks per row, block bytes */
} q80desc;

/* The 16 values mxfp4 / iq4_nl codes index (mxfp4.h, iquants.h). */
Q80_FN __m128i q80_lut(int ENC) {
    return _mm_loadu_si128((const __m128i *)(ENC == CB_MXFP4 ? CB_MXFP4_VALUES : CB_IQ4_VALUES));
}

/* The 32 integer codes of a block of encoding ENC (kernels_q80.c code_of). */
Q80_FN __m256i q80_codes(int ENC, const unsigned char *blk) {
    if (ENC == CB_Q8_0) return _mm256_loadu_si256((const __m256i *)(blk + 2));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    if (ENC == CB_MXFP4 || ENC == CB_IQ4_NL) {
        __m128i qs = _mm_loadu_si128((const __m128i *)(blk + (ENC == CB_MXFP4 ? 1 : 2))), lut = q80_lut(ENC);
        return _mm256_set_m128i(_mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(qs, 4), m4)),
                                _mm_shuffle_epi8(lut, _mm_and_si128(qs, m4)));
    }
    size_t qh = ENC == CB_Q5_0 ? 2 : 4;
    uint32_t h;
    __builtin_memcpy(&h, blk + qh, 4);
    __m128i qs = _mm_loadu_si128((const __m128i *)(blk + qh + 4));
    __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), _mm256_set1_epi8(0x0f));
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i bits = _mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)h), shuf),
                                   _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    __m256i set = _mm256_cmpeq_epi8(bits, _mm256_set1_epi64x(-1));          /* 0xff where the 5th bit is 1 */
    if (ENC == CB_Q5_1) return _mm256_or_si256(nib, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
    return _mm256_or_si256(nib, _mm256_andnot_si256(set, _mm256_set1_epi8((char)0xf0)));
}

/* The weight blocks' factor dw per lane (row n % TR): the f16 d, or mxfp4's E8M0 half built from its bits in
 * registers as cb_e8m0_half builds them: (e - 1) << 23, and 0x00200000 << e for e < 2 (lanes past TT * TR: e = 0,
 * a finite factor against an integer sum of 0). */
Q80_FN __m256 q80_dw(int ENC, int TT, int TR, const unsigned char *const *blk) {
    if (ENC != CB_MXFP4) return halves(TT, TR, blk, 0);
    short v[8];
#pragma GCC unroll 8
    for (int n = 0; n < 8; n++) v[n] = n < TT * TR ? (short)blk[n % TR][0] : 0;
    __m256i e = _mm256_cvtepu16_epi32(_mm_setr_epi16(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]));
    __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small));
}

/* The activation blocks' d per lane (token n / TR), in registers. */
Q80_FN __m256 q80_da(int TT, int TR, const cb_q80_block *const *xa, size_t b) {
    if (TT == 1) return _mm256_broadcast_ss(&xa[0][b].d);
    float d[8];
#pragma GCC unroll 8
    for (int n = 0; n < 8; n++) d[n] = n >= TT * TR ? 0.0f : xa[n / TR][b].d;
    return _mm256_setr_ps(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]);
}

/* q8_0 and q5_1 in ggml_vec_dot_q8_0_q8_0's / _q5_1_q8_1's order (kernels_q80.c): per (token, row) pair 8 float
 * lanes, each block's 4-code lane sums times dw * da added lane-wise, the lanes summed at the end (q5_1: its m * s
 * terms in a separate scalar sum added last). */
Q80_FN void lanes_tile(int ENC, int TT, int TR, const q80desc *d, int32_t r, const cb_q80_block *const *xa,
                       float *const *outs, size_t pf) {
    const unsigned char *row = d->data + (size_t)r * d->rb;
    __m256 acc[8];
    float ms[8] = {0};
#pragma GCC unroll 8
    for (int n = 0; n < TT * TR; n++) acc[n] = _mm256_setzero_ps();
    for (size_t b = 0; b < d->nb; b++) {
        if (pf) prefetch_span(row + pf, b * d->bb * (size_t)TR, (b + 1) * d->bb * (size_t)TR);
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) {
            const unsigned char *blk = row + (size_t)j * d->rb + b * d->bb;
            __m256i w = q80_codes(ENC, blk), aw = _mm256_sign_epi8(w, w);
            uint16_t h[2];
            __builtin_memcpy(h, blk, 4);
            float dw = _cvtsh_ss(h[0]), m = _cvtsh_ss(h[1]);           /* F16C: exact, as cb_f16_to_f32 */
#pragma GCC unroll 8
            for (int i = 0; i < TT; i++) {
                __m256i sy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)xa[i][b].qs), w);
                __m256 lanes = _mm256_cvtepi32_ps(Q80_DOT4(aw, sy));
                acc[i * TR + j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xa[i][b].d), lanes, acc[i * TR + j]);
                if (ENC == CB_Q5_1) ms[i * TR + j] = fmaf(m, cb_q81_s(xa[i], d->nb)[b], ms[i * TR + j]);
            }
        }
    }
    lanes_store(TT, TR, acc, ENC == CB_Q5_1 ? ms : NULL, outs, r);
}

/* TT tokens x TR rows from row r (TT * TR <= 8); pf != 0: prefetch the bytes pf ahead (the next row tile). */
Q80_FN void q80_tile(int ENC, int TT, int TR, const q80desc *d, int32_t r, const cb_q80_block *const *xa,
                     float *const *outs, size_t pf) {
    if (ENC == CB_Q8_0 || ENC == CB_Q5_1) {
        lanes_tile(ENC, TT, TR, d, r, xa, outs, pf);
        return;
    }
    const unsigned char *row = d->data + (size_t)r * d->rb, *blk[8];
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < d->nb; b++) {
        if (pf) prefetch_span(row + pf, b * d->bb * (size_t)TR, (b + 1) * d->bb * (size_t)TR);
        __m256i iv[8];
#pragma GCC unroll 8
        for (int n = TT * TR; n < 8; n++) iv[n] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) {
            blk[j] = row + (size_t)j * d->rb + b * d->bb;
            __m256i w = q80_codes(ENC, blk[j]), aw = _mm256_sign_epi8(w, w);
#pragma GCC unroll 8
            for (int i = 0; i < TT; i++) {
                __m256i sy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)xa[i][b].qs), w);
                iv[i * TR + j] = Q80_DOT4(aw, sy);
            }
        }
        __m256i I = reduce(TT * TR, iv);
        __m256 dd = _mm256_mul_ps(q80_dw(ENC, TT, TR, blk), q80_da(TT, TR, xa, b));
        acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(I), acc);
    }
    tile_store(TT, TR, acc, outs, r);
}

/* The rows r0..r1 for a group of m <= 4 tokens (the first group prefetches the next tile); leftover rows one at
 * a time. */
Q80_FN void q80_rows_for(int ENC, const q80desc *d, int32_t r0, int32_t r1, const cb_q80_block *const *xa,
                         float *const *outs, int64_t m, int first) {
    int32_t r = r0;
#define Q80_ROWS(TT, TR, PF) \
    for (; r + TR <= r1; r += TR) q80_tile(ENC, TT, TR, d, r, xa, outs, PF);
    switch (m) {
    case 1: Q80_ROWS(1, 4, 4 * d->rb) break;
    case 2: Q80_ROWS(2, 4, first ? 4 * d->rb : 0) break;
    case 3: Q80_ROWS(3, 2, first ? 2 * d->rb : 0) break;
    default: Q80_ROWS(4, 2, first ? 2 * d->rb : 0) break;
    }
#undef Q80_ROWS
    for (; r < r1; r++)
        for (int64_t i = 0; i < m; i++) q80_tile(ENC, 1, 1, d, r, xa + i, outs + i, 0);
}

/* Token groups of 4 outer (their activation blocks stay in L1), rows inner; one specialisation per encoding. */
typedef void q80_kernel(const q80desc *d, int32_t r0, int32_t r1, const cb_q80_block *const *xa, float *const *outs,
                        int64_t nt);
#define Q80_KERNEL(ID)                                                                                      \
    static Q80_OUTLINE void q80_##ID(const q80desc *d, int32_t r0, int32_t r1, const cb_q80_block *const *xa, \
                                     float *const *outs, int64_t nt) {                                     \
        for (int64_t t = 0; t < nt; t += 4)                                                                \
            q80_rows_for(CB_##ID, d, r0, r1, xa + t, outs + t, nt - t < 4 ? nt - t : 4, t == 0);           \
    }
Q80_KERNEL(Q8_0)
Q80_KERNEL(Q5_0)
Q80_KERNEL(Q5_1)
Q80_KERNEL(MXFP4)
Q80_KERNEL(IQ4_NL)
#undef Q80_KERNEL
static q80_kernel *const Q80_KERNELS[CB_DTYPE_COUNT] = {
    [CB_Q8_0] = q80_Q8_0, [CB_Q5_0] = q80_Q5_0, [CB_Q5_1] = q80_Q5_1, [CB_MXFP4] = q80_MXFP4, [CB_IQ4_NL] = q80_IQ4_NL,
};

Q80_OUTLINE void Q80_ENTRY(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q80_block *const *xa,
                           float *const *outs, int64_t nt) {
    size_t nb = cb_q80_blocks(w->cols), bb = (size_t)cb_encoding_of(w->dtype)->block_bytes;
    q80desc d = {(const unsigned char *)w->data, nb * bb, nb, bb};
    Q80_KERNELS[w->dtype](&d, r0, r1, xa, outs, nt);
}
