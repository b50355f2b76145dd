/* q80.h — llama.cpp's Q8_0 activation blocks as colibri's Q8_0 x Q8_0 kernels read them.
 *
 * Role: the vec_dot type of Q8_0 and Q5_0 weights (ggml-cpu's type_traits: Q8_0 x Q8_0, Q5_0 x Q8_0). One block per 32 inputs with the
 * values of ggml-cpu's x86 quantize_row_q8_0 (kernels_q80.c cb_quantize_row_q80): amax = max |x| over the block,
 * d = f16(amax / 127) (round to nearest even), qs[k] = rint(x[k] * (127 / amax)) (one rounded multiply, ties to
 * even; 0 when amax = 0). d is kept widened to f32 (the exact value of the half ggml stores). 36 bytes.
 * A short last block (cols not a multiple of 32, colibri's own q8_0 matrices) is the zero-padded block's.
 */
#ifndef CB_Q80_H
#define CB_Q80_H
#include <stdint.h>
#include "kernels.h"

#define CB_QK8_0 32
#define CB_Q8_0_BYTES 34        /* a weight block: f16 d, then 32 int8 codes */

struct cb_q80_block {
    float d;
    int8_t qs[CB_QK8_0];
};
_Static_assert(sizeof(struct cb_q80_block) == 36, "cb_q80_block is 36 bytes");

static inline size_t cb_q80_blocks(int32_t K) { return ((size_t)K + CB_QK8_0 - 1) / CB_QK8_0; }
#endif
