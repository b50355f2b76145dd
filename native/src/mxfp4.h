/* mxfp4.h — llama.cpp's MXFP4 blocks (OCP microscaling FP4, gpt-oss's experts) as colibri's decoders read them.
 *
 * Role: the block layout of ggml-common.h (block_mxfp4) and, per element, its code and its block's f32 scale,
 * computed as ggml-quants.c dequantize_row_mxfp4 and gguf.quants.MXFP4 compute them. The scalar decoder
 * (decode.c) and the AVX2 8-lane decoder (kernels_lut_avx2.h) both read blocks through these, so they give the
 * same bits. A block holds 32 elements (CB_QK_MXFP4); j below is an element's index inside its block.
 */
#ifndef CB_MXFP4_H
#define CB_MXFP4_H
#include <stdint.h>
#include <string.h>

#define CB_QK_MXFP4 32
/* block_mxfp4, 17 bytes: e (E8M0: a power of two, no mantissa, no sign), qs[16] (element j < 16 is the low
 * nibble of qs[j], element j >= 16 the high nibble of qs[j - 16]). Element j = kv[q] * e8m0_half(e). */
#define CB_MXFP4_BYTES 17

/* ggml's kvalues_mxfp4: the E2M1 values doubled (so they are integers), code 8 is -0 = 0. */
static const int8_t CB_MXFP4_VALUES[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* ggml_e8m0_to_fp32_half: 2^(e-128) (the half undoes kv's doubling); 2^-128 and 2^-127 are subnormal
 * floats for e = 0, 1, built from their bits as ggml builds them. */
static inline float cb_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
static inline const unsigned char *cb_mxfp4_qs(const unsigned char *blk, size_t j) { return blk + 1 + j % 16; }
static inline int cb_mxfp4_shift(size_t j) { return j < 16 ? 0 : 4; }
/* Element j's value: (float)kv * d, one rounded (and exact) product as dequantize_row_mxfp4's x0 * d. */
static inline float cb_mxfp4_value(const unsigned char *blk, size_t j) {
    return (float)CB_MXFP4_VALUES[(*cb_mxfp4_qs(blk, j) >> cb_mxfp4_shift(j)) & 15] * cb_e8m0_half(blk[0]);
}
#endif
