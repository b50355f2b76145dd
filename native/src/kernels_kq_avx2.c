/* kernels_kq_avx2.c — the AVX2 kernel of k-quant weights x Q8_K activations (kernels_kq.c has the spec).
 *
 * Role: cb_dot_rows_kq at the avx2 level. Per 32 codes of a row (one Q4_K / Q5_K sub-block, two Q6_K scale
 * groups) the unsigned codes u8 as one register, per token one vpmaddubsw (u8 x s8 -> int16 pairs,
 * |pair| <= 2 * 63 * 127: no saturation) and one vpmaddwd by the 16-bit scales (the pairs times their scale,
 * summed to int32), as ggml's AVX2 vec_dot does. The rest (per super-block the lanes summed exactly, q6's
 * -32 offset as 32 * sum_g sc_g * bsums[g], the mins against bsums32, the float step per (token, row) lane)
 * is kernels_kq_x86.h / kernels_kq_tiles.h, shared with the AVX-512 level: the bits are the scalar reference's.
 */
#include "kernels.h"
#include "kquants.h"
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels_kq_x86.h"

/* Row j's integer lanes of super-block b for every token: four pairs of 32-code chunks. */
AVX2_FN void row_ints(int ENC, int TT, int TR, int j, const unsigned char *blk, const kqblock *kb,
                      const cb_q8k_block *const *xk, size_t b, __m256i iv[8]) {
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        __m256i c[2], s[2];
        int off[2];
        pair_of(ENC, blk, kb, p, c, s, off);
#pragma GCC unroll 8
        for (int i = 0; i < TT; i++)
            iv[i * TR + j] = _mm256_add_epi32(iv[i * TR + j], pair_dot(c, s, xk[i][b].qs, off));
    }
}

#define KQ_FN AVX2_FN
#define KQ_OUTLINE AVX2_OUTLINE
#define KQ_ENTRY cb_dot_rows_kq_avx2
#include "kernels_kq_tiles.h"
#else
void cb_dot_rows_kq_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q8k_block *const *xk,
                         float *const *outs, int64_t nt) {
    cb_dot_rows_kq_scalar(w, r0, r1, xk, outs, nt);
}
#endif
