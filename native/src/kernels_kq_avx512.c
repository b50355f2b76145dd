/* kernels_kq_avx512.c — TEMPORARY: forwards to the AVX2 kernel until the zmm kernel is written. */
#include "kernels.h"
void cb_dot_rows_kq_avx512(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q8k_block *const *xk,
                           float *const *outs, int64_t nt) {
    cb_dot_rows_kq_avx2(w, r0, r1, xk, outs, nt);
}
