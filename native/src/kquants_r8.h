/* kquants_r8.h — CB_Q4_K_R8: llama.cpp's Q4_K blocks, every byte kept, laid out 8 rows at a time (colibri.h).
 *
 * Role: where a row's block lives in the interleaved layout, and that block gathered back into a plain block_q4_K
 * (the decoder, the scalar kernel and the x86 kernels' leftover rows read it so). Rows 8g .. 8g+7 are nb units of
 * CB_R8_UNIT bytes; unit b holds their blocks b: the 8 f16 d (row order), the 8 f16 dmin, the 8 x 12 scale bytes,
 * then the code bytes by 64-byte piece (run p, piece c): its qword q holds row CB_R8_ROW(q)'s code bytes
 * 32p + 8c .. +7. So one 512-bit load holds 8 rows' 8 code bytes and the two 256-bit halves rows (0 4 1 5) and
 * (2 6 3 7): the x86 kernels' lane order (kernels_kq_r8.h).
 */
#ifndef CB_KQUANTS_R8_H
#define CB_KQUANTS_R8_H
#include <stddef.h>
#include <string.h>
#include "kquants.h"

#define CB_R8_UNIT (8 * CB_Q4_K_BYTES)       /* 1152 */
#define CB_R8_ROW(q) (((q) & 1) * 4 + (q) / 2)  /* the row (0..7) in qword q of a piece: 0 4 1 5 2 6 3 7 */
#define CB_R8_QWORD(r) (((r) & 3) * 2 + (r) / 4) /* ... and the qword of row r */

/* Unit b of row group g (rows 8g .. 8g+7) of a matrix with nb blocks per row. */
static inline const unsigned char *cb_r8_unit(const void *data, size_t nb, size_t g, size_t b) {
    return (const unsigned char *)data + (g * nb + b) * CB_R8_UNIT;
}

/* Row r's block b as a plain block_q4_K (144 bytes). */
static inline void cb_r8_block(const void *data, size_t nb, size_t r, size_t b, unsigned char *blk) {
    const unsigned char *u = cb_r8_unit(data, nb, r / 8, b);
    size_t j = r % 8, q = CB_R8_QWORD(j);
    memcpy(blk, u + 2 * j, 2);
    memcpy(blk + 2, u + 16 + 2 * j, 2);
    memcpy(blk + 4, u + 32 + 12 * j, 12);
    for (size_t pc = 0; pc < 16; pc++) memcpy(blk + 16 + 8 * pc, u + 128 + 64 * pc + 8 * q, 8);
}

#endif
