/* kernels_kq_r16.h — the q6_k_r16 x Q8_K rows of an x86 level, included by kernels_kq_avx2.c / kernels_kq_avx512.c.
 *
 * Role: q6_k_r16 (kquants_r16.h: Q6_K blocks, 16 rows interleaved) with its 16 rows in the vector lanes, one int32
 * lane per row: per token and 16-element sub-block j the 16 rows' codes (one byte per element, unpacked from the
 * three 64-byte pieces) times the activation's 4 bytes broadcast, summed over the sub-block's 4 dwords from
 * -32 * bsums[j], times the rows' scale j (vpmulld); per super-block I (the 16 such products added) and the float
 * step s = fma(d * da, (float)I, s) on the 16 rows at once (kernels_kq.c: q6_k_r16's order; the same on every
 * level, tile and thread split). The includer defines R16_MAXT (tokens per tile) and, before including,
 * r16_tile(TT, grp, nb, xk, outs, r): TT tokens x the 16 rows of the group at grp, outs[i][r + row].
 */

/* Rows r0..r1 of a q6_k_r16 matrix: whole groups by the tiles (per group its token groups of R16_MAXT, the last
 * one shorter: a group's bytes stay in cache while each token group passes), rows of a partial group by the scalar reference. */
static KQ_OUTLINE void k_Q6_K_R16(const kqdesc *d, int32_t r0, int32_t r1, const cb_q8k_block *const *xk,
                                  float *const *outs, int64_t nt) {
    const cb_matrix *w = d->w;
    size_t nb = d->nb;
    int32_t g0 = (r0 + 15) / 16, g1 = r1 / 16;         /* the whole groups g0 .. g1 - 1 (none when g1 <= g0) */
    for (int32_t r = r0; r < r1; r++)
        if (r < 16 * g0 || r >= 16 * g1) cb_dot_r16_row(w, r, xk, outs, nt);
    for (int32_t g = g0; g < g1; g++) {
        const unsigned char *grp = cb_r16_unit(d->data, nb, (size_t)g, 0);
        for (int64_t t = 0; t < nt; t += R16_MAXT) {
            int64_t m = nt - t < R16_MAXT ? nt - t : R16_MAXT;
            switch (m) {
#define R16_CASE(TT) case TT: r16_tile(TT, grp, nb, xk + t, outs + t, 16 * g); break;
            R16_CASE(1) R16_CASE(2) R16_CASE(3)
#if R16_MAXT > 4
            R16_CASE(4) R16_CASE(5) R16_CASE(6) R16_CASE(7)
#endif
            default: r16_tile(R16_MAXT, grp, nb, xk + t, outs + t, 16 * g); break;
#undef R16_CASE
            }
        }
    }
}
