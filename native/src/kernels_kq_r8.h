/* kernels_kq_r8.h — the q4_k_r8 x Q8_K tiles of an x86 level, included by kernels_kq_avx2.c / kernels_kq_avx512.c.
 *
 * Role: q4_k_r8 (kquants_r8.h: Q4_K blocks, 8 rows interleaved) with its 8 rows in the vector lanes, so nothing is
 * reduced across lanes per (token, row): per token and sub-block the 8 rows' codes times the activation's 8 bytes
 * broadcast (AVX2: vpmaddubsw, 4 pieces summed in int16: |sum| <= 4 * 2 * 15 * 127 < 2^15; AVX-512: vpdpbusd over
 * the 4 pieces, |lane| < 2^15 too), times the 8 rows' scales (vpmaddwd / vpdpwssd) into int32 lanes (2 per row);
 * per super-block I (those two added), M (the 8 mins of each
 * row times the token's bsums32, exact int32) and q4_k's float step on 8 rows at once. I, M and the step are
 * q4_k's (kernels_kq.c), so the outputs are q4_k's bit for bit on every level and tile. Lanes hold the rows in
 * the layout's qword order 0 4 1 5 2 6 3 7 (CB_R8_ROW). The includer defines R8_MAXT (tokens per tile) and, before
 * including, r8_ints(TT, u, sc, xk, b, I): the 8 rows' I of unit u for TT tokens (lane order above) from the scales
 * sc[h] (half h: rows 0 4 1 5 / 2 6 3 7, each row's 8 sub-block scales as bytes in its qword).
 */

/* Rows a, b's 12 scale bytes (at 32 + 12 r) -> per 128-bit lane the 8 scales then the 8 mins (scales_mins_v). */
KQ_FN __m256i r8_scales_mins2(const unsigned char *u, int a, int b) {
    return scales_mins_v(_mm256_loadu2_m128i((const __m128i *)(u + 32 + 12 * b), (const __m128i *)(u + 32 + 12 * a)));
}

/* A unit's scales by half (sc[h]: qwords = rows 0 4 1 5 / 2 6 3 7, 8 byte scales each) and mins widened to int16
 * (mn[k]: rows (0, 2), (4, 6), (1, 3), (5, 7) in the two 128-bit lanes, r8_mins' order). */
KQ_FN void r8_scales(const unsigned char *u, __m256i sc[2], __m256i mn[4]) {
    __m256i p01 = r8_scales_mins2(u, 0, 1), p45 = r8_scales_mins2(u, 4, 5);
    __m256i p23 = r8_scales_mins2(u, 2, 3), p67 = r8_scales_mins2(u, 6, 7);
    sc[0] = _mm256_unpacklo_epi64(p01, p45);
    sc[1] = _mm256_unpacklo_epi64(p23, p67);
    const __m256i z = _mm256_setzero_si256();
    mn[0] = _mm256_unpackhi_epi8(_mm256_permute2x128_si256(p01, p23, 0x20), z);
    mn[1] = _mm256_unpackhi_epi8(_mm256_permute2x128_si256(p45, p67, 0x20), z);
    mn[2] = _mm256_unpackhi_epi8(_mm256_permute2x128_si256(p01, p23, 0x31), z);
    mn[3] = _mm256_unpackhi_epi8(_mm256_permute2x128_si256(p45, p67, 0x31), z);
}

/* The 8 rows' M for one token (lane order 0 4 1 5 2 6 3 7): each row's 8 mins times bsums32, summed exactly. */
KQ_FN __m256i r8_mins(const __m256i mn[4], const cb_q8k_block *x) {
    __m256i bs = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)x->bsums32));
    return _mm256_hadd_epi32(_mm256_hadd_epi32(_mm256_madd_epi16(mn[0], bs), _mm256_madd_epi16(mn[1], bs)),
                             _mm256_hadd_epi32(_mm256_madd_epi16(mn[2], bs), _mm256_madd_epi16(mn[3], bs)));
}

/* The 8 rows' f16 at byte o of the unit, widened, in lane order. */
KQ_FN __m256 r8_halves(const unsigned char *u, size_t o) {
    return _mm256_permutevar8x32_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(u + o))),
                                    _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* TT tokens x the 8 rows of group g: per super-block q4_k's step (kq_step), lanes = rows. One token prefetches
 * nothing (a group is one sequential stream the hardware prefetcher follows; a prefetch two units ahead made it 1.5x
 * slower on Zen 4); from R8_PF_MIN tokens on, with compute between the loads, the unit R8_PF ahead. */
KQ_FN void r8_tile(int TT, const unsigned char *grp, size_t nb, const cb_q8k_block *const *xk, float *const *outs,
                   int32_t r) {
    __m256 acc[R8_MAXT];
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++) acc[i] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const unsigned char *u = grp + b * CB_R8_UNIT;
        if (TT >= R8_PF_MIN) prefetch_span(u, R8_PF * CB_R8_UNIT, (R8_PF + 1) * CB_R8_UNIT);
        __m256i sc[2], mn[4], I[R8_MAXT];
        r8_scales(u, sc, mn);
        r8_ints(TT, u, sc, xk, b, I);
        __m256 d = r8_halves(u, 0), dmin = r8_halves(u, 16);
#pragma GCC unroll 8
        for (int i = 0; i < TT; i++) {
            acc[i] = kq_step(d, dmin, _mm256_broadcast_ss(&xk[i][b].d), I[i], r8_mins(mn, &xk[i][b]), acc[i]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++) {
        float o[8];
        _mm256_storeu_ps(o, acc[i]);
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++) outs[i][r + CB_R8_ROW(q)] = o[q];
    }
}

/* Rows r0..r1 of a q4_k_r8 matrix (KQ_REGROUPED), the partial groups' rows by q4_k's scalar reference. */
KQ_TILE_PASS(r8_pass, R8_MAXT, r8_tile)
KQ_REGROUPED(Q4_K_R8, 8, CB_R8_UNIT, INT64_MAX, r8_pass)
