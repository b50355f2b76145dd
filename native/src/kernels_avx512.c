/* kernels_avx512.c — AVX-512 kernel family (placeholder: the AVX2 kernels until the zmm tiles land). */
#include "kernels.h"

void cb_dot_rows_avx512(const cb_matrix *w, int32_t r0, int32_t r1, const float *const *xs,
                        float *const *outs, int64_t nt) {
    cb_dot_rows_avx2(w, r0, r1, xs, outs, nt);
}
void cb_dot_rows_q8_avx512(const cb_matrix *w, int32_t r0, int32_t r1, const int16_t *const *xq,
                           const float *sx, float *const *outs, int64_t nt) {
    cb_dot_rows_q8_avx2(w, r0, r1, xq, sx, outs, nt);
}
void cb_quantize_q8_avx512(const float *x, int32_t K, float inv, int16_t *q) { cb_quantize_q8_avx2(x, K, inv, q); }
