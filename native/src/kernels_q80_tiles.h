/* kernels_q80_tiles.h — the tiles of a Q8_0 x Q8_0 level, included by kernels_q80_avx2.c / kernels_q80_avx512.c.
 *
 * Role: one template for both x86 levels (kernels_q80.c has the spec). The includer defines Q80_FN (its inline
 * attribute), Q80_OUTLINE (its out-of-line attribute) and Q80_ENTRY (the name of its cb_dot_rows_q80_k entry).
 * A block's 32 signed codes as one register (q8_0: loaded; q5_0: the nibbles, and where the 5th bit is clear the
 * high nibble 0xF, so the byte is q - 16, as ggml's bytes_from_bits_32 / andnot). Per block and (token, row) pair:
 * |w| as u8 and the activation codes signed by w (vpsignb, as ggml's
 * mul_sum_i8_pairs), one vpmaddubsw (|pair| <= 2 * 128 * 127: no saturation), one vpmaddwd by ones (int32 lanes);
 * the pairs' 8 lanes summed exactly (kernels_kq_x86.h reduce), then per pair the float step
 * s = fma(dw * da, (float)I, s) in one 8-lane register: the scalar reference's bits.
 * Tiles: 1 token x 4 rows (decode, the next tile prefetched), 2 x 4, 3 x 2, 4 x 2; more tokens go in groups of 4
 * (8 x 1 tiles measured 3x slower per token than two 4 x 2 passes: 8 activation d's gathered per block).
 */

typedef struct {
    const unsigned char *data;
    size_t rb, nb, bb;     /* row bytes, blocks per row, block bytes */
} q80desc;

/* The 32 signed codes of a q8_0 (ENC == CB_Q8_0) or q5_0 block. */
Q80_FN __m256i q80_codes(int ENC, const unsigned char *blk) {
    if (ENC == CB_Q8_0) return _mm256_loadu_si256((const __m256i *)(blk + 2));
    uint32_t h;
    __builtin_memcpy(&h, blk + 2, 4);
    __m128i qs = _mm_loadu_si128((const __m128i *)(blk + 6));
    __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), _mm256_set1_epi8(0x0f));
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i bits = _mm256_or_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)h), shuf),
                                   _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    __m256i set = _mm256_cmpeq_epi8(bits, _mm256_set1_epi64x(-1));          /* 0xff where the 5th bit is 1 */
    return _mm256_or_si256(nib, _mm256_andnot_si256(set, _mm256_set1_epi8((char)0xf0)));
}

/* The activation blocks' d per lane (token n / TR), in registers. */
Q80_FN __m256 q80_da(int TT, int TR, const cb_q80_block *const *xa, size_t b) {
    if (TT == 1) return _mm256_broadcast_ss(&xa[0][b].d);
    float d[8];
#pragma GCC unroll 8
    for (int n = 0; n < 8; n++) d[n] = n < TT * TR ? xa[n / TR][b].d : 0.0f;
    return _mm256_setr_ps(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]);
}

/* TT tokens x TR rows from row r (TT * TR <= 8); pf != 0: prefetch the bytes pf ahead (the next row tile). */
Q80_FN void q80_tile(int ENC, int TT, int TR, const q80desc *d, int32_t r, const cb_q80_block *const *xa,
                     float *const *outs, size_t pf) {
    const unsigned char *row = d->data + (size_t)r * d->rb, *blk[8];
    const __m256i ones = _mm256_set1_epi16(1);
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
                iv[i * TR + j] = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sy), ones);
            }
        }
        __m256i I = reduce(TT * TR, iv);
        __m256 dd = _mm256_mul_ps(halves(TT, TR, blk, 0), q80_da(TT, TR, xa, b));
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
#define Q80_KERNEL(ID)                                                                                      \
    static Q80_OUTLINE void q80_##ID(const q80desc *d, int32_t r0, int32_t r1, const cb_q80_block *const *xa, \
                                     float *const *outs, int64_t nt) {                                     \
        for (int64_t t = 0; t < nt; t += 4)                                                                \
            q80_rows_for(CB_##ID, d, r0, r1, xa + t, outs + t, nt - t < 4 ? nt - t : 4, t == 0);           \
    }
Q80_KERNEL(Q8_0)
Q80_KERNEL(Q5_0)
#undef Q80_KERNEL

Q80_OUTLINE void Q80_ENTRY(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q80_block *const *xa,
                           float *const *outs, int64_t nt) {
    size_t nb = cb_q80_blocks(w->cols), bb = w->dtype == CB_Q8_0 ? CB_Q8_0_BYTES : CB_Q5_0_BYTES;
    q80desc d = {(const unsigned char *)w->data, nb * bb, nb, bb};
    if (w->dtype == CB_Q8_0) q80_Q8_0(&d, r0, r1, xa, outs, nt);
    else q80_Q5_0(&d, r0, r1, xa, outs, nt);
}
