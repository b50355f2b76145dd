/* kernels_kq_tiles.h — the tiles of a k-quant x Q8_K level, included by kernels_kq_avx2.c / kernels_kq_avx512.c.
 *
 * Role: one template for both x86 levels. The includer defines KQ_FN (its inline attribute), KQ_OUTLINE (its
 * out-of-line attribute), KQ_ENTRY (the name of its cb_dot_rows_kq_k entry) and, before including,
 * madd_add(acc, a, b) (acc plus vpmaddwd(a, b), exact) and
 * row_ints(ENC, TT, TR, j, blk, kb, xk, b, iv): row j's integer lanes of super-block b added to iv[i * TR + j]
 * for each token i (8 int32 lanes, lane l holding the elements k with (k % 32) / 4 = l: ggml's lanes, which the
 * iq4_xs and q6_k tiles keep; q4_k / q5_k use only their sum). Everything after the integers (q6's offset, the
 * mins, the reductions, the float steps) is shared code (here and kernels_kq_x86.h), so the levels give the same
 * bits. Tiles: 1 token x 4 rows (decode, the next tile prefetched), 2 x 4, 3 x 2, 4-8 tokens x 1 row. q4_k_r8's
 * and q6_k_r16's rows of the table are kernels_kq_r8.h's k_Q4_K_R8 and kernels_kq_r16.h's k_Q6_K_R16 (included before
 * this file).
 */

/* q6's offset, per token: lanes plus (-32 sc_2l) * bsums[2l] + (-32 sc_2l+1) * bsums[2l+1] (ggml's q8sclsub
 * subtracted; |32 sc| <= 4096 fits int16), by the level's madd_add (AVX2: vpmaddwd + vpaddd; AVX-512: vpdpwssd). */
KQ_FN void q6_offset(int TT, int TR, int j, const kqblock *kb, const cb_q8k_block *const *xk, size_t b,
                     __m256i *iv) {
    __m256i nsc = _mm256_sub_epi16(_mm256_setzero_si256(),
                                   _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(kb->sc)), 5));
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++)
        iv[i * TR + j] = madd_add(iv[i * TR + j], nsc, _mm256_loadu_si256((const __m256i *)xk[i][b].bsums));
}

/* The integer lanes of one q4_k / q5_k super-block b: rows one at a time (a row's scales live once), against
 * every token, reduced to one sum per (token, row); the mins sums M. */
KQ_FN void block_ints(int ENC, int TT, int TR, const unsigned char *const *blk, const cb_q8k_block *const *xk,
                      size_t b, __m256i *I, __m256i *M) {
    __m256i iv[8];
    __m128i mins[8], mv[8];
#pragma GCC unroll 8
    for (int n = 0; n < 8; n++) iv[n] = _mm256_setzero_si256(), mv[n] = _mm_setzero_si128();
#pragma GCC unroll 8
    for (int j = 0; j < TR; j++) {
        kqblock kb = block_of(ENC, blk[j]);
        mins[j] = kb.mins;
        row_ints(ENC, TT, TR, j, blk[j], &kb, xk, b, iv);
    }
    *I = reduce(TT * TR, iv);
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++) {
        __m128i bs = _mm_loadu_si128((const __m128i *)xk[i][b].bsums32);
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) mv[i * TR + j] = _mm_madd_epi16(mins[j], bs);
    }
    *M = reduce4(TT * TR, mv);
}

/* iq4_xs and q6_k in ggml_vec_dot_iq4_xs_q8_K's / _q6_K_q8_K's order (kernels_kq.c): per (token, row) pair 8 float
 * lanes taking each super-block's 8 integer lanes times d * da, ggml's hsum at the end. */
KQ_FN void lanes_tile(int ENC, int TT, int TR, const kqdesc *d, int32_t r, const cb_q8k_block *const *xk,
                      float *const *outs, size_t pf) {
    const unsigned char *row = d->data + (size_t)r * d->rb;
    __m256 acc[8];
#pragma GCC unroll 8
    for (int n = 0; n < TT * TR; n++) acc[n] = _mm256_setzero_ps();
    for (size_t b = 0; b < d->nb; b++) {
        if (pf) prefetch_span(row + pf, b * d->bb * (size_t)TR, (b + 1) * d->bb * (size_t)TR);
        __m256i iv[8];
#pragma GCC unroll 8
        for (int n = 0; n < 8; n++) iv[n] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) {
            const unsigned char *blk = row + (size_t)j * d->rb + b * d->bb;
            kqblock kb = block_of(ENC, blk);
            row_ints(ENC, TT, TR, j, blk, &kb, xk, b, iv);
            if (ENC == CB_Q6_K) q6_offset(TT, TR, j, &kb, xk, b, iv);
            uint16_t h;
            __builtin_memcpy(&h, blk + (ENC == CB_Q6_K ? 208 : 0), 2);
            float dw = _cvtsh_ss(h);
#pragma GCC unroll 8
            for (int i = 0; i < TT; i++) {
                __m256 lanes = _mm256_cvtepi32_ps(iv[i * TR + j]);
                acc[i * TR + j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * xk[i][b].d), lanes, acc[i * TR + j]);
            }
        }
    }
    lanes_store(TT, TR, acc, NULL, outs, r);
}

/* TT tokens x TR rows from row r (TT * TR <= 8); pf != 0: prefetch the bytes pf ahead (the next row tile). */
KQ_FN void tile(int ENC, int TT, int TR, const kqdesc *d, int32_t r, const cb_q8k_block *const *xk,
                float *const *outs, size_t pf) {
    if (ENC == CB_IQ4_XS || ENC == CB_Q6_K) {
        lanes_tile(ENC, TT, TR, d, r, xk, outs, pf);
        return;
    }
    const unsigned char *row = d->data + (size_t)r * d->rb, *blk[8];
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < d->nb; b++) {
        if (pf) prefetch_span(row + pf, b * d->bb * (size_t)TR, (b + 1) * d->bb * (size_t)TR);
#pragma GCC unroll 8
        for (int j = 0; j < TR; j++) blk[j] = row + (size_t)j * d->rb + b * d->bb;
        __m256i I, M = _mm256_setzero_si256();
        block_ints(ENC, TT, TR, blk, xk, b, &I, &M);
        acc = block_float(TT, TR, blk, I, M, da_of(TT, TR, xk, b), acc);
    }
    tile_store(TT, TR, acc, outs, r);
}

/* The rows r0..r1 for a group of m <= 8 tokens: 1 x 4 (one token, the tile two tiles ahead prefetched: streamed from
 * memory it measured 5-15% faster than 1 x 8, fewer concurrent row streams, on Zen 3 with the next tile prefetched;
 * two ahead measured ~10% faster than one in whole-model decode of 1 sequence on Zen 4, 2 threads, at both x86
 * levels, four ahead between the two, sixteen 30% slower), 2 x 4, 3 x 2,
 * else m x 1 (the first token group prefetches the next row); leftover rows one at a time. */
KQ_FN void rows_for(int ENC, const kqdesc *d, int32_t r0, int32_t r1, const cb_q8k_block *const *xk,
                    float *const *outs, int64_t m, int first) {
    int32_t r = r0;
#define KQ_ROWS(TT, TR, PF) \
    for (; r + TR <= r1; r += TR) tile(ENC, TT, TR, d, r, xk, outs, PF);
    switch (m) {
    case 1: KQ_ROWS(1, 4, 8 * d->rb) break;
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
KQ_FN void rows_of(int ENC, const kqdesc *d, int32_t r0, int32_t r1, const cb_q8k_block *const *xk,
                   float *const *outs, int64_t nt) {
    for (int64_t t = 0; t < nt; t += 8) rows_for(ENC, d, r0, r1, xk + t, outs + t, nt - t < 8 ? nt - t : 8, t == 0);
}

#define KQ_KERNEL(ID)                                                                                    \
    static KQ_OUTLINE void k_##ID(const kqdesc *d, int32_t r0, int32_t r1, const cb_q8k_block *const *xk, \
                                  float *const *outs, int64_t nt) {                                      \
        rows_of(CB_##ID, d, r0, r1, xk, outs, nt);                                                        \
    }
KQ_KERNEL(Q4_K)
KQ_KERNEL(Q5_K)
KQ_KERNEL(Q6_K)
KQ_KERNEL(IQ4_XS)
#undef KQ_KERNEL
typedef void kq_kernel(const kqdesc *d, int32_t r0, int32_t r1, const cb_q8k_block *const *xk, float *const *outs,
                       int64_t nt);
static kq_kernel *const KQ_KERNELS[CB_DTYPE_COUNT] = {
    [CB_Q4_K] = k_Q4_K, [CB_Q5_K] = k_Q5_K, [CB_Q6_K] = k_Q6_K, [CB_IQ4_XS] = k_IQ4_XS, [CB_Q4_K_R8] = k_Q4_K_R8,
    [CB_Q6_K_R16] = k_Q6_K_R16,
};

void KQ_ENTRY(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q8k_block *const *xk, float *const *outs,
              int64_t nt) {
    size_t nb = (size_t)w->cols / CB_QK_K, rb = (size_t)cb_row_bytes(w->dtype, w->cols);
    kqdesc d = {w, (const unsigned char *)w->data, rb, rb / nb, nb};
    KQ_KERNELS[w->dtype](&d, r0, r1, xk, outs, nt);
}
