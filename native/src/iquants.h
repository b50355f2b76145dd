/* iquants.h — llama.cpp's non-linear 4-bit i-quants (IQ4_XS, IQ4_NL) as colibri's decoders read them.
 *
 * Role: the block layouts of ggml-common.h (block_iq4_xs, block_iq4_nl) and, per element, its index into
 * kvalues_iq4nl and its (sub-)block's f32 factor, computed in the order ggml-quants.c dequantize_row_iq4_xs /
 * dequantize_row_iq4_nl and gguf.quants compute them. The scalar decoders (decode.c) and the AVX2 8-lane
 * decoders (kernels_lut_avx2.h) both read blocks through these, so they give the same bits. j below is an
 * element's index inside its block (IQ4_XS: 256, IQ4_NL: 32).
 */
#ifndef CB_IQUANTS_H
#define CB_IQUANTS_H
#include <stdint.h>
#include <string.h>
#include "kernels.h"

/* ggml's kvalues_iq4nl: the 16 non-linear levels both formats index. */
static const int8_t CB_IQ4_VALUES[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static inline float cb_iq_half(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return cb_f16_to_f32(h);
}
/* Inside a run of 32 elements sharing 16 index bytes: element j < 16 the low nibble of byte j, j >= 16 the
 * high nibble of byte j - 16 (both formats, and MXFP4). */
static inline int cb_iq4_shift(size_t j) { return j % 32 < 16 ? 0 : 4; }

/* block_iq4_xs, 136 bytes: f16 d, u16 scales_h (2 bits per sub-block), scales_l[4] (4 bits per sub-block),
 * qs[128] (16 bytes per sub-block of 32). Sub-block s = j / 32 has ls = (scales_l[s/2] >> 4 (s%2)) & 15
 * | ((scales_h >> 2s) & 3) << 4; element j = dl * kv[q] with dl = d * (ls - 32) rounded to f32 first. */
#define CB_QK_IQ4_XS 256
#define CB_IQ4_XS_BYTES 136
/* Sub-block s's ls - 32 (in [-32, 31]). */
static inline int cb_iq4_xs_scale(const unsigned char *blk, size_t s) {
    int h = ((blk[2] | (blk[3] << 8)) >> (2 * s)) & 3;
    return (((blk[4 + s / 2] >> (4 * (s % 2))) & 15) | (h << 4)) - 32;
}
/* The sub-block's factor dl from d widened by the caller (any exact f16 widening: the same float). */
static inline float cb_iq4_xs_factor_of(const unsigned char *blk, size_t j, float d) {
    return d * (float)cb_iq4_xs_scale(blk, j / 32);
}
static inline float cb_iq4_xs_factor(const unsigned char *blk, size_t j) {
    return cb_iq4_xs_factor_of(blk, j, cb_iq_half(blk));
}
static inline const unsigned char *cb_iq4_xs_qs(const unsigned char *blk, size_t j) {
    return blk + 8 + 16 * (j / 32) + j % 16;
}

/* block_iq4_nl, 18 bytes: f16 d, qs[16]. Element j = d * kv[q]. */
#define CB_QK_IQ4_NL 32
#define CB_IQ4_NL_BYTES 18
static inline const unsigned char *cb_iq4_nl_qs(const unsigned char *blk, size_t j) { return blk + 2 + j % 16; }

/* kv[q] of the element whose index byte is *p. */
static inline float cb_iq4_value(const unsigned char *p, size_t j) {
    return (float)CB_IQ4_VALUES[(*p >> cb_iq4_shift(j)) & 15];
}
#endif
