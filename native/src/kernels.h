/* kernels.h — the dot-product kernels every matrix product in the core goes through.
 *
 * Role: out[t][r] = W[r,:] . x[t,:] for a range of output rows r and a list of
 * token rows t, on every weight encoding. The exact operation sequence of one
 * output element is fixed (below) and does not depend on how many tokens or
 * rows are computed together, the tile a token lands in, or the thread: that
 * is what makes the engine batch invariant. Both kernel families (AVX2 and
 * portable C) follow the same sequence, so they give the same bits.
 *
 * Per element (K = cols, K8 = K rounded down to a multiple of 8):
 *   v(k)  = decoded weight: f32 as is; f16/bf16 exact widening; I8_ROW (float)q;
 *           I8_Gg (float)q * scale[r, k/g] (rounded to f32); I8_MINMAX (float)(q - zero)
 *   a[l]  = 0;  for k = 0, 8, .., K8-8:  a[l] = fma(v(k+l), x[k+l], a[l])   (l = 0..7)
 *   s     = ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7))
 *   for k = K8 .. K-1:  s = fma(v(k), x[k], s)
 *   out   = s * scale[r] (I8_ROW), s * scale[0] (I8_MINMAX), else s
 */
#ifndef CB_KERNELS_H
#define CB_KERNELS_H
#include <stdint.h>
#include "colibri.h"

void cb_dot_rows(const cb_matrix *w, int32_t r0, int32_t r1, const float *const *xs,
                 float *const *outs, int64_t nt);
void cb_dot_rows_scalar(const cb_matrix *w, int32_t r0, int32_t r1, const float *const *xs,
                        float *const *outs, int64_t nt);
void cb_dot_rows_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const float *const *xs,
                      float *const *outs, int64_t nt);

/* w8a8 (kernels_q8.c): CB_I8_ROW weights x per-row int8 activations held as int16. */
#define CB_Q8_MAX_K 131072   /* int32 sums of K products of |127| stay exact below this */
void cb_quantize_row_q8(const float *x, int32_t K, int16_t *q, float *scale);
void cb_dot_rows_q8(const cb_matrix *w, int32_t r0, int32_t r1, const int16_t *const *xq, const float *sx,
                    float *const *outs, int64_t nt);
void cb_dot_rows_q8_scalar(const cb_matrix *w, int32_t r0, int32_t r1, const int16_t *const *xq,
                           const float *sx, float *const *outs, int64_t nt);
void cb_dot_rows_q8_avx2(const cb_matrix *w, int32_t r0, int32_t r1, const int16_t *const *xq,
                         const float *sx, float *const *outs, int64_t nt);

/* Exact f16 -> f32 (IEEE half, subnormals included). */
static inline float cb_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);
    else if (exp != 0) bits = sign | ((exp + 112u) << 23) | (man << 13);
    else if (man == 0) bits = sign;
    else {
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400u));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    union { uint32_t u; float f; } v = {bits};
    return v.f;
}

static inline float cb_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}

static inline int32_t cb_group_size(int32_t dtype) {
    return dtype == CB_I8_G32 ? 32 : dtype == CB_I8_G64 ? 64 : dtype == CB_I8_G128 ? 128 : 0;
}
#endif
