/* kernels_q80.c — Q8_0 and Q5_0 weights x llama.cpp's Q8_0 activations: the activation quantizer, the scalar
 * reference and the entry point (AVX2: kernels_q80_avx2.c, AVX-512: kernels_q80_avx512.c, both on
 * kernels_q80_tiles.h).
 *
 * Role: the integer path q8_0 and q5_0 matrices take with the engine's w8a8 switch on (the default): the product
 * llama.cpp computes for them (ggml_vec_dot_q8_0_q8_0 / ggml_vec_dot_q5_0_q8_0 on quantize_row_q8_0 activations;
 * the vec_dot_type of Q8_0 and of Q5_0 is Q8_0). Activations: per 32 inputs one cb_q80_block (q80.h: the values of
 * ggml-cpu's x86 quantize_row_q8_0).
 *
 * Per output (t, r), with w[k] the weight's signed code (q8_0: the int8 code; q5_0: q - 16, in [-16, 15]), a[k] the
 * activation code, and per block b (in order, b = 0 first) dw the weight block's f16 d (exact widening), da its
 * activation block's d:
 *   I = sum_{k in block b} w[k] * a[k]            (exact int32: |I| <= 32 * 128 * 127 < 2^24, so (float)I is exact)
 *   s = fma(dw * da, (float)I, s)                 (dw * da rounded to f32 first, as ggml's
 *                                                  GGML_CPU_FP16_TO_FP32(x.d) * GGML_CPU_FP16_TO_FP32(y.d))
 *   out = s
 * ggml's AVX2 level adds the same per-block products lane-wise (8 float lanes of 4-code sums, one hsum at the
 * end); this one order is ours, and every tile, thread split and SIMD level gives its bits.
 */
#include <math.h>
#include <string.h>
#include "cb_internal.h"
#include "kernels.h"
#include "q80.h"
#include "q5quants.h"

void cb_quantize_row_q80(const float *x, int32_t K, cb_q80_block *y) {
    const cb_kernel_table *kt = cb_kernels();
    int16_t q[CB_QK8_0];
    for (int32_t k0 = 0; k0 < K; k0 += CB_QK8_0, y++) {
        int32_t n = K - k0 < CB_QK8_0 ? K - k0 : CB_QK8_0;
        memset(y, 0, sizeof *y);
        float amax = kt->amax(x + k0, n);
        y->d = cb_f16_to_f32(cb_f32_to_f16(amax / 127.0f));
        if (!(amax > 0.0f)) continue;                  /* all zero (or not finite: IEEE, unspecified) */
        kt->quantize_q8(x + k0, n, 127.0f / amax, q);  /* rint(x * id): in [-127, 127] already */
        for (int32_t k = 0; k < n; k++) y->qs[k] = (int8_t)q[k];
    }
}

/* Signed code k (0..31) of a q8_0 or q5_0 block. */
static int32_t code_of(int32_t dtype, const unsigned char *blk, int k) {
    return dtype == CB_Q8_0 ? (int32_t)(int8_t)blk[2 + k] : cb_q5_code(blk + 2, (size_t)k) - 16;
}

void cb_dot_rows_q80_scalar(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q80_block *const *xa,
                            float *const *outs, int64_t nt) {
    size_t nb = cb_q80_blocks(w->cols), bb = w->dtype == CB_Q8_0 ? CB_Q8_0_BYTES : CB_Q5_0_BYTES, rb = nb * bb;
    for (int32_t r = r0; r < r1; r++) {
        const unsigned char *row = (const unsigned char *)w->data + (size_t)r * rb;
        for (int64_t t = 0; t < nt; t++) {
            float s = 0.0f;
            for (size_t b = 0; b < nb; b++) {
                const unsigned char *blk = row + b * bb;
                const cb_q80_block *a = &xa[t][b];
                int32_t I = 0;
                for (int k = 0; k < CB_QK8_0; k++) I += code_of(w->dtype, blk, k) * a->qs[k];
                uint16_t h;
                memcpy(&h, blk, 2);
                s = fmaf(cb_f16_to_f32(h) * a->d, (float)I, s);
            }
            outs[t][r] = s;
        }
    }
}

void cb_dot_rows_q80(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q80_block *const *xa, float *const *outs,
                     int64_t nt) {
    cb_kernels()->dot_rows_q80(w, r0, r1, xa, outs, nt);
}
