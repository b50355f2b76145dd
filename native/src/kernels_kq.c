/* kernels_kq.c — k-quant weights (q4_k, q5_k, q6_k) and iq4_xs x llama.cpp's Q8_K activations: the activation
 * quantizer, the scalar reference and the entry point (AVX2: kernels_kq_avx2.c, AVX-512: kernels_kq_avx512.c).
 *
 * Role: the integer path these encodings (and iq4_xs) take with the engine's w8a8 switch on (the default): the
 * product llama.cpp computes for them (ggml_vec_dot_q4_K_q8_K / _q5_K_ / _q6_K_ / _iq4_xs_q8_K on quantize_row_q8_K
 * activations).
 * Activations: per 256 inputs one cb_q8k_block (kquants.h: ggml's quantize_row_q8_K_ref values).
 *
 * Per output (t, r), with q[k] the weight's unsigned code, a[k] the activation code, and per super-block b
 * (in order, s = 0 first) d, dmin the weight block's f16 factors (exact widening), da its activation block's d:
 *   q4_k, q5_k: I = sum_{j<8} sc_j * sum_{k in 32-sub-block j} q[k] * a[k]            (exact int32)
 *               M = sum_{j<8} m_j * (bsums[2j] + bsums[2j+1])                             (exact int32)
 *               s = fma(d * da, (float)I, s);   s = fma(-(dmin * da), (float)M, s)
 *   out = s
 *   q6_k, in ggml_vec_dot_q6_K_q8_K's own order (its AVX2 code, which its AVX-512 builds run too; llama.cpp does
 *   not repack Q6_K on x86, so this is what it runs): 8 lanes, lane l = sum_{k: (k % 32) / 4 = l} sc_{k/16} *
 *   q[k] * a[k] - 32 * (sc_{2l} * bsums[2l] + sc_{2l+1} * bsums[2l+1]) with q the unsigned 6-bit code (exact
 *   int32), acc[l] = fma(d * da, (float)lane, acc[l]) per super-block, then hsum_float_8 (as iq4_xs below).
 *   iq4_xs, in ggml_vec_dot_iq4_xs_q8_K's own order (its AVX2 code; llama.cpp does not repack iq4_xs, so this is
 *   what it runs): 8 lanes, lane l = sum_{j<8} (ls_j - 32) * sum_{k = 32j+4l .. 32j+4l+3} kvalues_iq4nl[q[k]] * a[k]
 *   (exact int32, |lane| < 2^24), acc[l] = fma(d * da, (float)lane, acc[l]) per super-block, then
 *   out = ((acc4 + acc0) + (acc6 + acc2)) + ((acc5 + acc1) + (acc7 + acc3)) (hsum_float_8): ggml's bits.
 * Each product d * da rounded to f32, (float)I rounded to nearest. For q4_k / q5_k ggml combines the integers in
 * other float orders (vec_dot: 8 lanes and a separate mins sum; x86 runs Q4_K repacked: one fma per two
 * sub-blocks in its gemm of 4 tokens, one per super-block in its gemv of the rest, mins in a second accumulator),
 * so a token's bits there depend on its batch; the q4_k / q5_k order above is ours, and every tile, thread split
 * and SIMD level gives its bits (|I| < 2^28: 256 * 63 * 127 * 128). q4_k_r8 (the same blocks, 8 rows interleaved:
 * kquants_r8.h) computes q4_k's I, M and steps, so its outputs are q4_k's bit for bit (kernels_kq_r8.h on x86).
 *   q6_k_r16 (q6_k's blocks, 16 rows interleaved: kquants_r16.h) takes q4_k's order, not ggml's lanes: one integer
 *   per super-block, I = sum_{j<16} sc_j * sum_{k in 16-sub-block j} (q[k] - 32) * a[k] (exact int32,
 *   |I| <= 16 * 128 * 16 * 32 * 127 < 2^28), s = fma(d * da, (float)I, s), out = s: its outputs differ from q6_k's
 *   in the last bits (ggml sums 8 float lanes), and are the same on every level, tile and batch (kernels_kq_r16.h).
 */
#include <math.h>
#include <string.h>
#include "cb_internal.h"
#include "kernels.h"
#include "kquants.h"
#include "iquants.h"
#include "regrouped.h"

void cb_quantize_row_q8k(const float *x, int32_t K, cb_q8k_block *y) {
    const cb_kernel_table *kt = cb_kernels();
    int16_t q[CB_QK_K];
    for (int32_t b = 0; b < K / CB_QK_K; b++, x += CB_QK_K, y++) {
        memset(y, 0, sizeof *y);
        float amax = kt->amax(x, CB_QK_K);
        if (!(amax > 0.0f)) continue;                   /* all zero (or not finite: IEEE, unspecified) */
        int j = 0;
        while (j < CB_QK_K - 1 && fabsf(x[j]) != amax) j++;   /* the first input of the largest |x| */
        float iscale = -127.0f / x[j];
        kt->quantize_q8(x, CB_QK_K, iscale, q);         /* rint(x * iscale), in [-127, 127] already */
        for (int k = 0; k < CB_QK_K; k++) y->qs[k] = (int8_t)q[k];
        for (int g = 0; g < 16; g++) {
            int32_t s = 0;
            for (int k = 0; k < 16; k++) s += q[16 * g + k];
            y->bsums[g] = (int16_t)s;
        }
        for (int g = 0; g < 8; g++) y->bsums32[g] = (int16_t)(y->bsums[2 * g] + y->bsums[2 * g + 1]);
        y->d = 1.0f / iscale;
    }
}

/* Unsigned code k (0..255) of a q4_k / q5_k block. */
static int32_t code_q45(int32_t dtype, const unsigned char *blk, size_t k) {
    if (dtype == CB_Q4_K) return (*cb_q4_k_qs(blk, k) >> cb_q4_k_shift(k)) & 15;
    return ((*cb_q5_k_qs(blk, k) >> cb_q4_k_shift(k)) & 15) | (((*cb_q5_k_qh(blk, k) >> (k / 32)) & 1) << 4);
}

/* One super-block's 8 integer lanes of iq4_xs / q6_k in ggml's order (above). */
static void block_lanes(int32_t dtype, const unsigned char *blk, const cb_q8k_block *x, int32_t lane[8]) {
    for (size_t k = 0; k < CB_QK_K; k++) {
        int32_t l = (int32_t)(k % 32 / 4);
        if (dtype == CB_IQ4_XS)
            lane[l] += cb_iq4_xs_scale(blk, k / 32) * CB_IQ4_VALUES[(*cb_iq4_xs_qs(blk, k) >> cb_iq4_shift(k)) & 15]
                       * x->qs[k];
        else
            lane[l] += (int32_t)(int8_t)blk[192 + k / 16] * (cb_q6_k_code(blk, k) + 32) * x->qs[k];
    }
    if (dtype == CB_Q6_K)
        for (int l = 0; l < 8; l++)
            lane[l] -= 32 * ((int8_t)blk[192 + 2 * l] * x->bsums[2 * l] + (int8_t)blk[193 + 2 * l] * x->bsums[2 * l + 1]);
}

/* iq4_xs's / q6_k's output (t, r) in ggml's lane order (above). */
static float lanes_dot(int32_t dtype, const unsigned char *row, const cb_q8k_block *x, size_t nb, size_t bb) {
    float acc[8] = {0};
    for (size_t b = 0; b < nb; b++, row += bb, x++) {
        int32_t lane[8] = {0};
        block_lanes(dtype, row, x, lane);
        float d = (dtype == CB_IQ4_XS ? cb_iq_half(row) : cb_kq_half(row + 208)) * x->d;
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lane[l], acc[l]);
    }
    return cb_hsum8_ggml(acc);
}

/* One super-block of the reference (q4_k, q5_k): the integer sums from the codes, then the float step. */
static float block_step(int32_t dtype, const unsigned char *blk, const cb_q8k_block *x, float s) {
    int32_t I = 0, M = 0;
    for (size_t j = 0; j < 8; j++) {
        int sc, m;
        int32_t p = 0;
        cb_q4_k_scale_min(blk, 32 * j, &sc, &m);
        for (size_t k = 32 * j; k < 32 * j + 32; k++) p += code_q45(dtype, blk, k) * x->qs[k];
        I += sc * p;
        M += m * (x->bsums[2 * j] + x->bsums[2 * j + 1]);
    }
    s = fmaf(cb_kq_half(blk) * x->d, (float)I, s);
    return fmaf(-(cb_kq_half(blk + 2) * x->d), (float)M, s);
}

/* One super-block of q6_k_r16's order (above): its block gathered back into Q6_K's bytes, one integer
 * I = sum_j sc_j * sum_{k in j} (q - 32) * a, then s = fma(d * da, I, s). */
static float r16_block_step(const unsigned char *blk, const cb_q8k_block *x, float s) {
    int32_t I = 0;
    for (size_t j = 0; j < 16; j++) {
        int32_t p = 0;
        for (size_t k = 16 * j; k < 16 * j + 16; k++) p += cb_q6_k_code(blk, k) * x->qs[k];
        I += (int32_t)(int8_t)blk[192 + j] * p;
    }
    return fmaf(cb_kq_half(blk + 208) * x->d, (float)I, s);
}

/* Row r of a row-interleaved layout (regrouped.h) for nt tokens: each of its blocks gathered back once, then the
 * layout's step for every token (outs[t][r] the running sum): q4_k_r8 q4_k's (its bits), q6_k_r16 its own order. */
void cb_dot_regrouped_row(const cb_matrix *w, int32_t r, const cb_q8k_block *const *xk, float *const *outs,
                          int64_t nt) {
    const cb_regrouped *L = &CB_REGROUPED[w->dtype];
    size_t nb = (size_t)w->cols / CB_QK_K;
    unsigned char blk[CB_REGROUPED_MAX_BLOCK];
    for (int64_t t = 0; t < nt; t++) outs[t][r] = 0.0f;
    for (size_t b = 0; b < nb; b++) {
        L->gather(w->data, nb, (size_t)r, b, blk);
        for (int64_t t = 0; t < nt; t++)
            outs[t][r] = w->dtype == CB_Q6_K_R16 ? r16_block_step(blk, &xk[t][b], outs[t][r])
                                                 : block_step(L->plain, blk, &xk[t][b], outs[t][r]);
    }
}

void cb_dot_rows_kq_scalar(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q8k_block *const *xk,
                           float *const *outs, int64_t nt) {
    size_t nb = (size_t)w->cols / CB_QK_K, rb = (size_t)cb_row_bytes(w->dtype, w->cols), bb = rb / nb;
    for (int32_t r = r0; r < r1; r++) {
        if (CB_REGROUPED[w->dtype].plain) {
            cb_dot_regrouped_row(w, r, xk, outs, nt);
            continue;
        }
        const unsigned char *row = (const unsigned char *)w->data + (size_t)r * rb;
        for (int64_t t = 0; t < nt; t++) {
            if (w->dtype == CB_IQ4_XS || w->dtype == CB_Q6_K) {
                outs[t][r] = lanes_dot(w->dtype, row, xk[t], nb, bb);
                continue;
            }
            float s = 0.0f;
            for (size_t b = 0; b < nb; b++) s = block_step(w->dtype, row + b * bb, &xk[t][b], s);
            outs[t][r] = s;
        }
    }
}

void cb_dot_rows_kq(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q8k_block *const *xk, float *const *outs,
                    int64_t nt) {
    cb_kernels()->dot_rows_kq(w, r0, r1, xk, outs, nt);
}
