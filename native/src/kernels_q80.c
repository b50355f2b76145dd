/* kernels_q80.c — weights of 32-blocks x llama.cpp's Q8_0 (and Q8_1) activations: the activation quantizers, the
 * scalar reference and the entry point (AVX2: kernels_q80_avx2.c, AVX-512: kernels_q80_avx512.c, both on
 * kernels_q80_tiles.h).
 *
 * Role: the integer path q8_0, q5_0, mxfp4, iq4_nl (x Q8_0) and q5_1 (x Q8_1) matrices take with the engine's w8a8
 * switch on (the default): the product llama.cpp computes for them (ggml_vec_dot_q8_0_q8_0, _q5_0_q8_0,
 * _mxfp4_q8_0, _iq4_nl_q8_0 on quantize_row_q8_0 activations, ggml_vec_dot_q5_1_q8_1 on quantize_row_q8_1 ones:
 * ggml-cpu's type_traits vec_dot_type). Activations: per 32 inputs one cb_q80_block (q80.h: the values of ggml-cpu's
 * x86 quantize_row_q8_0), for q5_1 followed by the blocks' Q8_1 s (q80.h cb_q81_s).
 *
 * Per output (t, r), with w[k] the weight's integer code (q8_0: the int8 code; q5_0: q - 16, in [-16, 15]; q5_1:
 * q in [0, 31]; mxfp4: kvalues_mxfp4[q] (the E2M1 value doubled, in [-12, 12]); iq4_nl: kvalues_iq4nl[q], in
 * [-127, 113]), a[k] the activation code, and per block b (in order, b = 0 first) dw the weight block's factor (the
 * f16 d widened exactly; mxfp4: ggml_e8m0_to_fp32_half(e), mxfp4.h), da its activation block's d:
 *   I = sum_{k in block b} w[k] * a[k]            (exact int32: |I| <= 32 * 128 * 127 < 2^24, so (float)I is exact)
 *   s = fma(dw * da, (float)I, s)                 (dw * da rounded to f32 first, as ggml's
 *                                                  GGML_CPU_FP16_TO_FP32(x.d) * GGML_CPU_FP16_TO_FP32(y.d))
 *   out = s
 * (q5_0, mxfp4, iq4_nl), while q8_0 and q5_1 take ggml_vec_dot_q8_0_q8_0's / _q5_1_q8_1's own order (their AVX2 code; for q8_0
 * llama.cpp's repacked and tinyBLAS kernels give the same bits, q5_1 is not repacked): 8 lanes, lane l the exact sum
 * of codes 4l .. 4l+3, acc[l] = fma(dw * da, (float)lane, acc[l]) per block, q5_1 also ms = fma(m, sa, ms) (m the
 * block's f16 m, sa the activation block's s), then
 * out = ((acc4 + acc0) + (acc6 + acc2)) + ((acc5 + acc1) + (acc7 + acc3)) (hsum_float_8), q5_1 + ms: the same bits
 * as llama.cpp on the same file. (ggml's q5_0, mxfp4 and iq4_nl loops add 2 blocks per step: those stay in the
 * order above.) Every tile, thread split and SIMD level gives these bits.
 */
#include <math.h>
#include <string.h>
#include "cb_internal.h"
#include "kernels.h"
#include "q80.h"
#include "q5quants.h"
#include "mxfp4.h"
#include "iquants.h"

/* One block of n <= 32 inputs (the rest: code 0); returns the unrounded d = amax / 127 (Q8_1's s needs it). */
static float quantize_block(const cb_kernel_table *kt, const float *x, int32_t n, cb_q80_block *y) {
    int16_t q[CB_QK8_0];
    memset(y, 0, sizeof *y);
    float amax = kt->amax(x, n), d = amax / 127.0f;
    y->d = cb_f16_to_f32(cb_f32_to_f16(d));
    if (!(amax > 0.0f)) return d;                  /* all zero (or not finite: IEEE, unspecified) */
    kt->quantize_q8(x, n, 127.0f / amax, q);       /* rint(x * id): in [-127, 127] already */
    for (int32_t k = 0; k < n; k++) y->qs[k] = (int8_t)q[k];
    return d;
}

void cb_quantize_row_q80(const float *x, int32_t K, cb_q80_block *y) {
    const cb_kernel_table *kt = cb_kernels();
    for (int32_t k0 = 0; k0 < K; k0 += CB_QK8_0, y++)
        quantize_block(kt, x + k0, K - k0 < CB_QK8_0 ? K - k0 : CB_QK8_0, y);
}

void cb_quantize_row_q81(const float *x, int32_t K, cb_q80_block *y) {
    const cb_kernel_table *kt = cb_kernels();
    size_t nb = cb_q80_blocks(K);
    float *s = (float *)(y + nb);
    for (size_t b = 0; b < nb; b++) {
        int32_t k0 = (int32_t)b * CB_QK8_0, sum = 0;
        float d = quantize_block(kt, x + k0, K - k0 < CB_QK8_0 ? K - k0 : CB_QK8_0, &y[b]);
        for (int k = 0; k < CB_QK8_0; k++) sum += y[b].qs[k];
        s[b] = cb_f16_to_f32(cb_f32_to_f16(d * (float)sum));
    }
}

/* Integer code k (0..31) of a block of one of the path's encodings. */
static int32_t code_of(int32_t dtype, const unsigned char *blk, int k) {
    switch (dtype) {
    case CB_Q8_0: return (int8_t)blk[2 + k];
    case CB_Q5_0: return cb_q5_code(blk + 2, (size_t)k) - 16;
    case CB_Q5_1: return cb_q5_code(blk + 4, (size_t)k);
    case CB_MXFP4: return CB_MXFP4_VALUES[(*cb_mxfp4_qs(blk, (size_t)k) >> cb_mxfp4_shift((size_t)k)) & 15];
    default: return CB_IQ4_VALUES[(*cb_iq4_nl_qs(blk, (size_t)k) >> cb_iq4_shift((size_t)k)) & 15];
    }
}

/* The block's factor dw. */
static float dw_of(int32_t dtype, const unsigned char *blk) {
    return dtype == CB_MXFP4 ? cb_e8m0_half(blk[0]) : cb_q5_half(blk);
}

/* q8_0's and q5_1's output (t, r) in ggml's lane order (above). */
static float lanes_dot(int32_t dtype, const unsigned char *row, const cb_q80_block *xa, size_t nb, size_t bb) {
    float acc[8] = {0}, ms = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        const unsigned char *blk = row + b * bb;
        float d = cb_q5_half(blk) * xa[b].d;
        for (int l = 0; l < 8; l++) {
            int32_t lane = 0;
            for (int k = 4 * l; k < 4 * l + 4; k++) lane += code_of(dtype, blk, k) * xa[b].qs[k];
            acc[l] = fmaf(d, (float)lane, acc[l]);
        }
        if (dtype == CB_Q5_1) ms = fmaf(cb_q5_half(blk + 2), cb_q81_s(xa, nb)[b], ms);
    }
    return dtype == CB_Q5_1 ? cb_hsum8_ggml(acc) + ms : cb_hsum8_ggml(acc);
}

void cb_dot_rows_q80_scalar(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q80_block *const *xa,
                            float *const *outs, int64_t nt) {
    size_t nb = cb_q80_blocks(w->cols), bb = (size_t)cb_encoding_of(w->dtype)->block_bytes, rb = nb * bb;
    for (int32_t r = r0; r < r1; r++) {
        const unsigned char *row = (const unsigned char *)w->data + (size_t)r * rb;
        for (int64_t t = 0; t < nt; t++) {
            if (w->dtype == CB_Q8_0 || w->dtype == CB_Q5_1) {
                outs[t][r] = lanes_dot(w->dtype, row, xa[t], nb, bb);
                continue;
            }
            float s = 0.0f;
            for (size_t b = 0; b < nb; b++) {
                const unsigned char *blk = row + b * bb;
                const cb_q80_block *a = &xa[t][b];
                int32_t I = 0;
                for (int k = 0; k < CB_QK8_0; k++) I += code_of(w->dtype, blk, k) * a->qs[k];
                s = fmaf(dw_of(w->dtype, blk) * a->d, (float)I, s);
            }
            outs[t][r] = s;
        }
    }
}

void cb_dot_rows_q80(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q80_block *const *xa, float *const *outs,
                     int64_t nt) {
    cb_kernels()->dot_rows_q80(w, r0, r1, xa, outs, nt);
}
