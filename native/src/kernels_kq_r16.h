/* kernels_kq_r16.h — the q6_k_r16 x Q8_K rows of an x86 level, included by kernels_kq_avx2.c / kernels_kq_avx512.c.
 *
 * Role: q6_k_r16 (kquants_r16.h: Q6_K blocks, 16 rows interleaved) with its 16 rows in the vector lanes, one int32
 * lane per row: per token and 16-element sub-block j the 16 rows' codes (one byte per element, unpacked from the
 * three 64-byte pieces) times the activation's 4 bytes broadcast, summed over the sub-block's 4 dwords, times the
 * rows' scale j, with -32 * scale j * bsums[j] (AVX-512: the sums start from -32 * bsums[j], one vpmulld; AVX2: each
 * pair of dwords' int16 sums by vpmaddwd of (scale, scale), the offsets once per super-block by vpmaddwd of scale
 * pairs: the same int32); per super-block I (the 16 such products added) and the float
 * step s = fma(d * da, (float)I, s) on the 16 rows at once (kernels_kq.c: q6_k_r16's order; the same on every
 * level, tile and thread split). The includer defines R16_CHUNK (tokens per pass) and, before including,
 * r16_pass(nt, grp, nb, xk, outs, r): nt <= R16_CHUNK tokens x the 16 rows of the group at grp, outs[i][r + row]
 * (AVX-512: KQ_TILE_PASS of its r16_tile; AVX2: its own, kernels_kq_avx2.c).
 */

/* Rows r0..r1 of a q6_k_r16 matrix (KQ_REGROUPED), the partial groups' rows by the scalar reference. */
KQ_REGROUPED(Q6_K_R16, 16, CB_R16_UNIT, R16_CHUNK, r16_pass)
