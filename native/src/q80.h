/* q80.h — llama.cpp's Q8_0 and Q8_1 activation blocks as colibri's x Q8_0 / x Q8_1 kernels read them.
 *
 * Role: the vec_dot type of Q8_0, Q5_0, MXFP4 and IQ4_NL weights (ggml-cpu's type_traits: Q8_0 x Q8_0, Q5_0 x Q8_0,
 * MXFP4 x Q8_0, IQ4_NL x Q8_0) and of Q5_1 weights (Q5_1 x Q8_1). One block per 32 inputs with the
 * values of ggml-cpu's x86 quantize_row_q8_0 (kernels_q80.c cb_quantize_row_q80): amax = max |x| over the block,
 * d = f16(amax / 127) (round to nearest even), qs[k] = rint(x[k] * (127 / amax)) (one rounded multiply, ties to
 * even; 0 when amax = 0). d is kept widened to f32 (the exact value of the half ggml stores). 36 bytes.
 * A short last block (cols not a multiple of 32, colibri's own q8_0 matrices) is the zero-padded block's.
 * Q8_1 (ggml-cpu's x86 quantize_row_q8_1) has the same d and codes plus s = f16(amax / 127 * (float)sum_k qs[k])
 * (the unrounded f32 d times the exact code sum, rounded to f32, then to f16 to nearest even): a token's Q8_1 row is
 * its nb Q8_0 blocks followed by the nb values of s widened to f32 (cb_q81_s), so the Q8_0 tiles read both.
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
/* The s values of a Q8_1 row of nb blocks (after its Q8_0 blocks), and the bytes of such a row. */
static inline const float *cb_q81_s(const cb_q80_block *row, size_t nb) { return (const float *)(row + nb); }
static inline size_t cb_q81_bytes(int32_t K) { return cb_q80_blocks(K) * (sizeof(cb_q80_block) + sizeof(float)); }
#endif
