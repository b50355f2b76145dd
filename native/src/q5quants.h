/* q5quants.h — llama.cpp's Q5_0 / Q5_1 blocks (block_q5_0, block_q5_1 of ggml-common.h) as colibri's decoders
 * read them.
 *
 * Role: the layouts and, per element, its 5-bit code, in the order ggml-quants.c dequantize_row_q5_0 / _q5_1 and
 * gguf.quants compute the values. llama-quantize falls back to these for rows not made of 256-blocks (Q4_K ->
 * Q5_0, Q5_K -> Q5_1 when a row is a multiple of 32 only). A block holds 32 elements; j below is an element's
 * index inside its block. The scalar decoders (decode.c) and the AVX2 8-lane decoders (kernels_avx2.c) read
 * blocks through these, so they give the same bits.
 *   Q5_0, 22 bytes: f16 d, qh[4] (little-endian uint32, bit j: element j's 5th bit), qs[16] (element j < 16 the
 *         low nibble of byte j, j >= 16 the high nibble of byte j - 16). Value (float)(q - 16) * d.
 *   Q5_1, 24 bytes: f16 d, f16 m, then qh and qs as Q5_0's. Value (float)q * d + m (the product rounded first).
 */
#ifndef CB_Q5QUANTS_H
#define CB_Q5QUANTS_H
#include <stdint.h>
#include <string.h>
#include "kernels.h"

#define CB_QK5 32
#define CB_Q5_0_BYTES 22
#define CB_Q5_1_BYTES 24

/* Offset of qh in a block (the codes follow 4 bytes later). */
static inline size_t cb_q5_qh_at(int32_t dtype) { return dtype == CB_Q5_0 ? 2 : 4; }
static inline size_t cb_q5_block_bytes(int32_t dtype) { return dtype == CB_Q5_0 ? CB_Q5_0_BYTES : CB_Q5_1_BYTES; }

static inline float cb_q5_half(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return cb_f16_to_f32(h);
}

/* The unsigned 5-bit code (0..31) of element j of a block whose qh starts at qh. */
static inline int32_t cb_q5_code(const unsigned char *qh, size_t j) {
    uint32_t h;
    memcpy(&h, qh, 4);
    int32_t lo = (qh[4 + j % 16] >> (j < 16 ? 0 : 4)) & 15;
    return lo | (int32_t)(((h >> j) & 1u) << 4);
}
#endif
