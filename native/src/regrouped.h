/* regrouped.h — the layouts of another encoding's blocks by row groups, one row each: q4_k_r8 (kquants_r8.h) and
 * q6_k_r16 (kquants_r16.h).
 *
 * Role: what a path that does not run a layout's own tiles needs to fall back on its plain encoding: the plain
 * encoding, rows per group, its block bytes and one row's block gathered back. The row decoder (decode.c) and the
 * x86 exact-weights path (kernels_x86.h) read this table; a new layout adds its row here.
 */
#ifndef CB_REGROUPED_H
#define CB_REGROUPED_H
#include <stddef.h>
#include "colibri.h"
#include "kquants_r8.h"
#include "kquants_r16.h"

#define CB_REGROUPED_MAX_BLOCK CB_Q6_K_BYTES     /* the largest block among the rows below */

typedef struct {
    int32_t plain, group;      /* plain == 0 (f32): not a layout */
    size_t block;
    void (*gather)(const void *data, size_t nb, size_t r, size_t b, unsigned char *blk);
} cb_regrouped;

static const cb_regrouped CB_REGROUPED[CB_DTYPE_COUNT] = {
    [CB_Q4_K_R8] = {CB_Q4_K, 8, CB_Q4_K_BYTES, cb_r8_block},
    [CB_Q6_K_R16] = {CB_Q6_K, 16, CB_Q6_K_BYTES, cb_r16_block},
};

#endif
