/* decode.c — the row decoders: the scalar kernel of every encoding (the one part a new
 * encoding must write for the portable level).
 *
 * Role: a decoder turns elements k0 .. k0+n-1 of row r into the values v(k) of kernels.h
 * (f16/bf16 widened exactly, (float)q, (float)(q - zero), (float)q * group scale). The
 * scalar dot kernels (kernels_scalar.c), the SIMD kernels' scalar tails (kernels_x86.h)
 * and cb_embed (embed.c, times cb_post_scale) all decode through these, so every path
 * agrees on an encoding's values by construction. One table entry per CB_ENCODING_LIST
 * row (designated initializers); cb_check_matrix refuses a dtype whose entry is missing.
 */
#include <string.h>
#include "cb_internal.h"
#include "kernels.h"
#include "kquants.h"
#include "regrouped.h"
#include "mxfp4.h"
#include "iquants.h"
#include "q5quants.h"

static const unsigned char *row_of(const cb_matrix *w, int32_t r) {
    return (const unsigned char *)w->data + (size_t)r * (size_t)cb_row_bytes(w->dtype, w->cols);
}

/* Group scales of row r (CB_SCALE_GROUP). */
static const float *group_scales(const cb_matrix *w, int32_t r) {
    size_t g = (size_t)cb_group_size(w->dtype);
    return w->scales + (size_t)r * (((size_t)w->cols + g - 1) / g);
}

static void dec_f32(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    memcpy(out, (const float *)row_of(w, r) + k0, n * sizeof(float));
}

static void dec_f16(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    const uint16_t *h = (const uint16_t *)row_of(w, r) + k0;
    for (size_t k = 0; k < n; k++) out[k] = cb_f16_to_f32(h[k]);
}

static void dec_bf16(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    const uint16_t *h = (const uint16_t *)row_of(w, r) + k0;
    for (size_t k = 0; k < n; k++) out[k] = cb_bf16_to_f32(h[k]);
}

/* int8 codes, the scale applied after the dot (CB_I8_ROW). */
static void dec_i8(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    const int8_t *q = (const int8_t *)row_of(w, r) + k0;
    for (size_t k = 0; k < n; k++) out[k] = (float)q[k];
}

/* int8 codes minus the matrix's zero point (CB_I8_MINMAX). */
static void dec_i8_zero(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    const int8_t *q = (const int8_t *)row_of(w, r) + k0;
    int32_t zero = w->zero[0];
    for (size_t k = 0; k < n; k++) out[k] = (float)((int32_t)q[k] - zero);
}

/* int8 codes times their group's scale (CB_I8_G*). */
static void dec_i8_group(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    const int8_t *q = (const int8_t *)row_of(w, r);
    const float *gs = group_scales(w, r);
    size_t g = (size_t)cb_group_size(w->dtype);
    for (size_t k = k0; k < k0 + n; k++) out[k - k0] = (float)q[k] * gs[k / g];
}

/* int4 codes (colibri.h nibble order) times their group's scale (CB_I4_G*). */
static void dec_i4_group(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    const unsigned char *b = row_of(w, r);
    const float *gs = group_scales(w, r);
    size_t g = (size_t)cb_group_size(w->dtype);
    for (size_t k = k0; k < k0 + n; k++) out[k - k0] = (float)cb_i4_at(b, k) * gs[k / g];
}

/* int6 codes (colibri.h bit order) times their group's scale (CB_I6_G64). */
static void dec_i6_group(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    const unsigned char *b = row_of(w, r);
    const float *gs = group_scales(w, r);
    size_t g = (size_t)cb_group_size(w->dtype);
    for (size_t k = k0; k < k0 + n; k++) out[k - k0] = (float)cb_i6_at(b, k) * gs[k / g];
}

/* llama.cpp Q8_0 blocks (CB_Q8_0): element k is code k % 32 of block k / 32 times that block's f16 scale,
 * (float)q * (float)d rounded to f32, as ggml's dequantize_row_q8_0 and gguf.quants compute it. */
static void dec_q8_0(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    const unsigned char *b = row_of(w, r);
    for (size_t k = k0; k < k0 + n; k++) {
        const unsigned char *blk = b + k / 32 * 34;
        uint16_t d;
        memcpy(&d, blk, 2);
        out[k - k0] = (float)(int8_t)blk[2 + k % 32] * cb_f16_to_f32(d);
    }
}

/* llama.cpp Q4_K super-blocks (CB_Q4_K, kquants.h): d1 * q - m1, the sub-block's factors rounded to f32
 * first, as ggml's dequantize_row_q4_K and gguf.quants compute it. */
static void dec_q4_k(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    const unsigned char *b = row_of(w, r);
    for (size_t k = k0; k < k0 + n; k++) {
        const unsigned char *blk = b + k / CB_QK_K * CB_Q4_K_BYTES;
        size_t j = k % CB_QK_K;
        float d1, m1;
        cb_q4_k_factors(blk, j, &d1, &m1);
        out[k - k0] = d1 * (float)((*cb_q4_k_qs(blk, j) >> cb_q4_k_shift(j)) & 15) - m1;
    }
}

/* A row-interleaved layout (regrouped.h: q4_k_r8, q6_k_r16): block by block, row r's block gathered back, then
 * its plain encoding's decoder on it (the same values). */
static void dec_regrouped(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    const cb_regrouped *L = &CB_REGROUPED[w->dtype];
    size_t nb = (size_t)w->cols / CB_QK_K;
    unsigned char blk[CB_REGROUPED_MAX_BLOCK];
    cb_matrix one = {blk, NULL, NULL, L->plain, 1, CB_QK_K};
    for (size_t k = k0; k < k0 + n;) {
        size_t j = k % CB_QK_K, m = CB_QK_K - j < k0 + n - k ? CB_QK_K - j : k0 + n - k;
        L->gather(w->data, nb, (size_t)r, k / CB_QK_K, blk);
        cb_row_decoder_of(L->plain)(&one, 0, j, m, out + (k - k0));
        k += m;
    }
}

/* llama.cpp Q5_K super-blocks (CB_Q5_K, kquants.h): d1 * q - m1 as Q4_K, q's 5th bit from qh. */
static void dec_q5_k(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    const unsigned char *b = row_of(w, r);
    for (size_t k = k0; k < k0 + n; k++) {
        const unsigned char *blk = b + k / CB_QK_K * CB_Q5_K_BYTES;
        size_t j = k % CB_QK_K;
        float d1, m1;
        cb_q4_k_factors(blk, j, &d1, &m1);
        int32_t q = ((*cb_q5_k_qs(blk, j) >> cb_q4_k_shift(j)) & 15) | (((*cb_q5_k_qh(blk, j) >> (j / 32)) & 1) << 4);
        out[k - k0] = d1 * (float)q - m1;
    }
}

/* llama.cpp Q6_K super-blocks (CB_Q6_K, kquants.h): (d * scale) * (q - 32), as dequantize_row_q6_K. */
static void dec_q6_k(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    const unsigned char *b = row_of(w, r);
    for (size_t k = k0; k < k0 + n; k++) {
        const unsigned char *blk = b + k / CB_QK_K * CB_Q6_K_BYTES;
        size_t j = k % CB_QK_K;
        out[k - k0] = cb_q6_k_factor(blk, j) * (float)cb_q6_k_code(blk, j);
    }
}

/* llama.cpp MXFP4 blocks (CB_MXFP4, mxfp4.h): kv[q] * e8m0_half(e), as dequantize_row_mxfp4. */
static void dec_mxfp4(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    const unsigned char *b = row_of(w, r);
    for (size_t k = k0; k < k0 + n; k++)
        out[k - k0] = cb_mxfp4_value(b + k / CB_QK_MXFP4 * CB_MXFP4_BYTES, k % CB_QK_MXFP4);
}

/* llama.cpp IQ4_XS super-blocks (CB_IQ4_XS, iquants.h): dl * kv[q], dl = d * (ls - 32): dequantize_row_iq4_xs. */
static void dec_iq4_xs(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    const unsigned char *b = row_of(w, r);
    for (size_t k = k0; k < k0 + n; k++) {
        const unsigned char *blk = b + k / CB_QK_IQ4_XS * CB_IQ4_XS_BYTES;
        size_t j = k % CB_QK_IQ4_XS;
        out[k - k0] = cb_iq4_xs_factor(blk, j) * cb_iq4_value(cb_iq4_xs_qs(blk, j), j);
    }
}

/* llama.cpp IQ4_NL blocks (CB_IQ4_NL, iquants.h): d * kv[q], as dequantize_row_iq4_nl. */
static void dec_iq4_nl(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    const unsigned char *b = row_of(w, r);
    for (size_t k = k0; k < k0 + n; k++) {
        const unsigned char *blk = b + k / CB_QK_IQ4_NL * CB_IQ4_NL_BYTES;
        size_t j = k % CB_QK_IQ4_NL;
        out[k - k0] = cb_iq_half(blk) * cb_iq4_value(cb_iq4_nl_qs(blk, j), j);
    }
}

/* llama.cpp Q5_0 / Q5_1 blocks (CB_Q5_0, CB_Q5_1, q5quants.h): (float)(q - 16) * d, or (float)q * d + m with the
 * product rounded first, as dequantize_row_q5_0 / _q5_1 and gguf.quants compute them. */
static void dec_q5(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    const unsigned char *b = row_of(w, r);
    size_t bb = cb_q5_block_bytes(w->dtype), qh = cb_q5_qh_at(w->dtype);
    for (size_t k = k0; k < k0 + n; k++) {
        const unsigned char *blk = b + k / CB_QK5 * bb;
        int32_t q = cb_q5_code(blk + qh, k % CB_QK5);
        out[k - k0] = w->dtype == CB_Q5_0 ? (float)(q - 16) * cb_q5_half(blk)
                                          : (float)q * cb_q5_half(blk) + cb_q5_half(blk + 2);
    }
}

/* The scalar kernel of every encoding, by code (encodings that share a storage format share one). */
static const cb_row_decoder DECODERS[CB_DTYPE_COUNT] = {
    [CB_F32] = dec_f32, [CB_F16] = dec_f16, [CB_BF16] = dec_bf16,
    [CB_I8_ROW] = dec_i8, [CB_I8_MINMAX] = dec_i8_zero,
    [CB_I8_G32] = dec_i8_group, [CB_I8_G64] = dec_i8_group, [CB_I8_G128] = dec_i8_group,
    [CB_I4_G32] = dec_i4_group, [CB_I4_G64] = dec_i4_group, [CB_I6_G64] = dec_i6_group,
    [CB_Q8_0] = dec_q8_0, [CB_Q4_K] = dec_q4_k, [CB_Q6_K] = dec_q6_k, [CB_Q5_K] = dec_q5_k,
    [CB_MXFP4] = dec_mxfp4, [CB_IQ4_XS] = dec_iq4_xs, [CB_IQ4_NL] = dec_iq4_nl,
    [CB_Q5_0] = dec_q5, [CB_Q5_1] = dec_q5, [CB_Q4_K_R8] = dec_regrouped, [CB_Q6_K_R16] = dec_regrouped,
};

cb_row_decoder cb_row_decoder_of(int32_t dtype) {
    return dtype >= 0 && dtype < CB_DTYPE_COUNT ? DECODERS[dtype] : NULL;
}

const float *cb_post_scale(const cb_matrix *w, int32_t r) {
    switch (cb_encoding_of(w->dtype)->scale_kind) {
    case CB_SCALE_ROW: return w->scales + r;
    case CB_SCALE_MATRIX: return w->scales;
    default: return NULL;
    }
}
