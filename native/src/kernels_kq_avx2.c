/* kernels_kq_avx2.c — the AVX2 kernel of k-quant (and iq4_xs) weights x Q8_K activations (kernels_kq.c has the
 * spec).
 *
 * Role: cb_dot_rows_kq at the avx2 level. Per 32 codes of a row (one Q4_K / Q5_K / IQ4_XS sub-block, two Q6_K scale
 * groups) the codes as one register, per token one vpmaddubsw (u8 x s8 -> int16 pairs, no saturation) and one
 * vpmaddwd by the 16-bit scales (the pairs times their scale, summed to int32), as ggml's AVX2 vec_dot does
 * (kernels_kq_x86.h row_ints256). The rest (q4_k / q5_k: per super-block the lanes summed exactly, the mins
 * against bsums32, the float step per (token, row); q6_k / iq4_xs: ggml's 8 lanes kept in float, q6's -32 offset
 * per lane from the bsums by this level's madd_add, vpmaddwd + vpaddd) is kernels_kq_x86.h / kernels_kq_tiles.h,
 * shared with the AVX-512 level: the bits are the scalar reference's.
 */
#include "kernels.h"
#include "kquants.h"
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels_kq_x86.h"

AVX2_FN void row_ints(int ENC, int TT, int TR, int j, const unsigned char *blk, const kqblock *kb,
                      const cb_q8k_block *const *xk, size_t b, __m256i iv[8]) {
    row_ints256(ENC, TT, TR, j, blk, kb, xk, b, iv);
}

AVX2_FN __m256i madd_add(__m256i acc, __m256i a, __m256i b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }

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
