/* kquants.h — llama.cpp's k-quant super-blocks (Q4_K, Q5_K, Q6_K) as colibri's decoders read them.
 *
 * Role: the block layouts of ggml-common.h (block_q4_K, block_q5_K, block_q6_K) and, per element,
 * its code and its sub-block's f32 factors, computed in the order ggml-quants.c dequantize_row_q4_K /
 * _q5_K / _q6_K and gguf.quants compute them. The scalar decoders (decode.c) and the AVX2
 * 8-lane decoders (kernels_avx2.c) both read blocks through these, so they give the same bits.
 * A super-block holds 256 elements (CB_QK_K); k below is an element's index inside its block.
 */
#ifndef CB_KQUANTS_H
#define CB_KQUANTS_H
#include <stdint.h>
#include <string.h>
#include "kernels.h"

#define CB_QK_K 256

static inline float cb_kq_half(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return cb_f16_to_f32(h);
}

/* block_q4_K, 144 bytes: f16 d, f16 dmin, scales[12] (6-bit scale and min of 8 sub-blocks of 32),
 * qs[128] (sub-blocks 2p and 2p+1 share bytes 32p .. 32p+31: low nibbles, then high nibbles).
 * Element k = d1 * q - m1 with d1 = d * sc and m1 = dmin * m (each rounded to f32: get_scale_min_k4). */
#define CB_Q4_K_BYTES 144
static inline void cb_q4_k_scale_min(const unsigned char *blk, size_t k, int *sc, int *m) {
    const unsigned char *q = blk + 4;
    size_t s = k / 32;
    if (s < 4) {
        *sc = q[s] & 63;
        *m = q[s + 4] & 63;
    } else {
        *sc = (q[s + 4] & 0xF) | ((q[s - 4] >> 6) << 4);
        *m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
    }
}
/* The factors from d and dmin widened by the caller (any exact f16 widening: the same floats). */
static inline void cb_q4_k_factors_of(const unsigned char *blk, size_t k, float d, float dmin, float *d1, float *m1) {
    int sc, m;
    cb_q4_k_scale_min(blk, k, &sc, &m);
    *d1 = d * (float)sc;
    *m1 = dmin * (float)m;
}
static inline void cb_q4_k_factors(const unsigned char *blk, size_t k, float *d1, float *m1) {
    cb_q4_k_factors_of(blk, k, cb_kq_half(blk), cb_kq_half(blk + 2), d1, m1);
}
static inline const unsigned char *cb_q4_k_qs(const unsigned char *blk, size_t k) {   /* byte of code k */
    return blk + 16 + 32 * (k / 64) + k % 32;
}
static inline int cb_q4_k_shift(size_t k) { return (k / 32) & 1 ? 4 : 0; }            /* its nibble */

/* block_q5_K, 176 bytes: f16 d, f16 dmin, scales[12] (as Q4_K's: cb_q4_k_factors reads them), qh[32]
 * (bit s of byte l: the 5th bit of element 32 s + l), qs[128] (Q4_K's nibbles, 32 bytes further on).
 * Element k = d1 * (nibble | bit << 4) - m1. */
#define CB_Q5_K_BYTES 176
static inline const unsigned char *cb_q5_k_qs(const unsigned char *blk, size_t k) { return cb_q4_k_qs(blk, k) + 32; }
static inline const unsigned char *cb_q5_k_qh(const unsigned char *blk, size_t k) { return blk + 16 + k % 32; }

/* block_q6_K, 210 bytes: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16] (one per 16
 * elements), f16 d. In each half of 128 elements, quarter t (32 elements) takes ql bytes
 * 32 (t & 1) .. +31 of the half's 64 (low nibbles for t < 2, high for t >= 2) and bits 2t, 2t+1 of
 * the half's 32 qh bytes. Element k = (d * scale[k / 16]) * (q - 32), the product rounded to f32 first. */
#define CB_Q6_K_BYTES 210
static inline float cb_q6_k_factor_of(const unsigned char *blk, size_t k, float d) {
    return d * (float)(int8_t)blk[192 + k / 16];
}
static inline float cb_q6_k_factor(const unsigned char *blk, size_t k) { return cb_q6_k_factor_of(blk, k, cb_kq_half(blk + 208)); }
static inline const unsigned char *cb_q6_k_ql(const unsigned char *blk, size_t k) {
    return blk + 64 * (k / 128) + 32 * (k / 32 & 1) + k % 32;
}
static inline const unsigned char *cb_q6_k_qh(const unsigned char *blk, size_t k) {
    return blk + 128 + 32 * (k / 128) + k % 32;
}
static inline int cb_q6_k_lo_shift(size_t k) { return (k % 128) / 64 ? 4 : 0; }
static inline int cb_q6_k_hi_shift(size_t k) { return 2 * (int)(k % 128 / 32); }
static inline int32_t cb_q6_k_code(const unsigned char *blk, size_t k) {   /* q - 32, in [-32, 31] */
    return (int32_t)(((*cb_q6_k_ql(blk, k) >> cb_q6_k_lo_shift(k)) & 15)
                     | (((*cb_q6_k_qh(blk, k) >> cb_q6_k_hi_shift(k)) & 3) << 4)) - 32;
}

/* llama.cpp's Q8_K activations (the vec_dot type of Q4_K / Q5_K / Q6_K; values of ggml's quantize_row_q8_K_ref),
 * one block per 256 inputs (kernels_kq.c cb_quantize_row_q8k): d = 1 / (-127 / max), max the first input of the
 * largest |x| (d = 0, codes 0 when every input is 0); qs[k] = min(127, rint((-127 / max) * x[k])) (one rounded
 * multiply, ties to even); bsums[j] = sum of qs[16 j .. 16 j + 15]. bsums32[j] = bsums[2 j] + bsums[2 j + 1]
 * (the sums the Q4_K / Q5_K mins multiply) is colibri's addition. 320 bytes: a multiple of a cache line. */
struct cb_q8k_block {
    int8_t qs[CB_QK_K];
    int16_t bsums[16];
    int16_t bsums32[8];
    float d;
    int32_t pad[3];
};
_Static_assert(sizeof(struct cb_q8k_block) == 320, "cb_q8k_block is 320 bytes");
#endif
