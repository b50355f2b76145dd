/* kernels_q80_avx2.c — the AVX2 kernel of 32-block weights x Q8_0 / Q8_1 activations (kernels_q80.c has the spec).
 *
 * Role: cb_dot_rows_q80 at the avx2 level: kernels_q80_tiles.h compiled for avx2 (the bits are the scalar
 * reference's).
 */
#include "kernels.h"
#include "q80.h"
#include "q5quants.h"
#include "mxfp4.h"
#include "iquants.h"
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include "kernels_kq_x86.h"

#define Q80_FN AVX2_FN
#define Q80_OUTLINE AVX2_OUTLINE
#define Q80_ENTRY cb_dot_rows_q80_avx2
#define Q80_DOT4(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
#include "kernels_q80_tiles.h"
#else
void cb_dot_rows_q80_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q80_block *const *xa,
                          float *const *outs, int64_t nt) {
    cb_dot_rows_q80_scalar(w, r0, r1, xa, outs, nt);
}
#endif
