/* kquants_r16.h — CB_Q6_K_R16: llama.cpp's Q6_K blocks, every byte kept, laid out 16 rows at a time (colibri.h).
 *
 * Role: where a row's block lives in the interleaved layout, and that block gathered back into a plain block_q6_K
 * (the decoder, the scalar kernel and the x86 kernels' leftover rows read it so). Rows 16g .. 16g+15 are nb units
 * of CB_R16_UNIT bytes; unit b holds their blocks b: the 16 f16 d (row order), the 16 x 16 int8 scales (scale j of
 * the 16 rows at 32 + 16j), then the code bytes as 48 pieces of 64 bytes, 4 bytes per row (row r at 4r): for half h
 * and i (0..7) piece 24h + 3i holds ql bytes 64h + 4i .. +3, piece 24h + 3i + 1 ql bytes 64h + 32 + 4i .., piece
 * 24h + 3i + 2 qh bytes 128 + 32h + 4i ... So one 512-bit load holds 16 rows' 4 bytes, and the codes of elements
 * 128h + 32q + 4i .. +3 (q = 0..3, each in one 16-element sub-block) come from pieces (h, i) alone: the x86
 * kernels' lanes (kernels_kq_r16.h).
 */
#ifndef CB_KQUANTS_R16_H
#define CB_KQUANTS_R16_H
#include <stddef.h>
#include <string.h>
#include "kquants.h"

#define CB_R16_UNIT (16 * CB_Q6_K_BYTES)      /* 3360 */
#define CB_R16_SCALES 32                     /* the scale bytes' offset in a unit */
#define CB_R16_CODES 288                     /* the first piece's */

/* Unit b of row group g (rows 16g .. 16g+15) of a matrix with nb blocks per row. */
static inline const unsigned char *cb_r16_unit(const void *data, size_t nb, size_t g, size_t b) {
    return (const unsigned char *)data + (g * nb + b) * CB_R16_UNIT;
}

/* Piece k (0: ql dword i, 1: ql dword i + 8, 2: qh dword i) of half h. */
static inline const unsigned char *cb_r16_piece(const unsigned char *u, size_t h, size_t i, size_t k) {
    return u + CB_R16_CODES + 64 * (24 * h + 3 * i + k);
}

/* Row r's block b as a plain block_q6_K (210 bytes: ql 128, qh 64, scales 16, d). */
static inline void cb_r16_block(const void *data, size_t nb, size_t r, size_t b, unsigned char *blk) {
    const unsigned char *u = cb_r16_unit(data, nb, r / 16, b);
    size_t j = r % 16;
    for (size_t h = 0; h < 2; h++)
        for (size_t i = 0; i < 8; i++) {
            memcpy(blk + 64 * h + 4 * i, cb_r16_piece(u, h, i, 0) + 4 * j, 4);
            memcpy(blk + 64 * h + 32 + 4 * i, cb_r16_piece(u, h, i, 1) + 4 * j, 4);
            memcpy(blk + 128 + 32 * h + 4 * i, cb_r16_piece(u, h, i, 2) + 4 * j, 4);
        }
    for (size_t s = 0; s < 16; s++) blk[192 + s] = u[CB_R16_SCALES + 16 * s + j];
    memcpy(blk + 208, u + 2 * j, 2);
}

#endif
