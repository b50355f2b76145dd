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

/* Row j's integer lanes of super-block b for every token: the eight 32-code chunks one at a time, each against every
 * token (one code and one scale register live beside the tile's accumulators). */
AVX2_FN void row_ints(int ENC, int TT, int TR, int j, const unsigned char *blk, const kqblock *kb,
                      const cb_q8k_block *const *xk, size_t b, __m256i iv[8]) {
#pragma GCC unroll 8
    for (int ch = 0; ch < 8; ch++) {
        __m256i c, s;
        int off = chunk_of(ENC, blk, kb, ch, &c, &s);
#pragma GCC unroll 8
        for (int i = 0; i < TT; i++) {
            __m256i p = _mm256_maddubs_epi16(c, _mm256_loadu_si256((const __m256i *)(xk[i][b].qs + off)));
            iv[i * TR + j] = _mm256_add_epi32(iv[i * TR + j], _mm256_madd_epi16(s, p));
            __asm__("" : "+x"(iv[i * TR + j]));   /* the sum stays one chain in a register: gcc would re-associate
                                                     * it into a tree of spilled partial sums (10-15% slower) */
        }
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
