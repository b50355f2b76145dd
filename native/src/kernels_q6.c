/* kernels_q6.c — w6a8: int6 weights (CB_I6_G64) x per-token int8 activations: the activation
 * preparation, the scalar reference and the entry point (the AVX2 kernel: kernels_q6_avx2.c).
 *
 * Role: the integer-dot path for int6 matrices when the engine's w8a8 switch is on.
 * Activations are quantized exactly as for w8a8 (cb_quantize_row_q8: qx, sx) and then
 * prepared once per token (cb_q6_prep): per 64-element block b, 64 bytes, byte p holding
 * qx[64b + (p ^ 1)] (each pair of elements swapped: the order in which the AVX2 unpack
 * leaves the codes), zero past K; then per block the negated lane corrections
 * ncorr[b][l] = -32 * sum of qx over the block's lane l.
 *
 * Per element (r, t), lane(k) = (k % 32) / 4 (lane l: elements 4l..4l+3 and 32+4l..32+4l+3
 * of each 64-block, the int32 lanes of the two 32-byte halves' vpmaddwd):
 *   p_b[l] = sum over k in block b with lane(k) = l of code[r,k] * qx[k]   (exact int32)
 *   a[l]   = 0; per block b in order, l = 0..7: a[l] = fma((float)p_b[l], scale[r,b], a[l])
 *   out    = (((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7))) * sx[t]
 * The integer part is exact in any order and the float part one fixed sequence, so every
 * tile shape, thread split and SIMD level gives the same bits. This reference computes p_b
 * from the codes directly; the AVX2 kernel multiplies u = code + 32 and adds ncorr.
 */
#include <math.h>
#include <string.h>
#include "cb_internal.h"
#include "kernels.h"

static size_t round64(size_t k) { return (k + 63) & ~(size_t)63; }

size_t cb_q6_prep_bytes(int32_t K) { return cb_prep64_bytes(K); }

/* One 64-block (zero-padded past K): swapped pairs, and the 8 negated lane corrections. */
static void prep_block(const int16_t *x, int8_t *out, int32_t *corr) {
    for (int k = 0; k < 64; k++) out[k ^ 1] = (int8_t)x[k];
    for (int l = 0; l < 8; l++) {
        int32_t c = 0;
        for (int i = 0; i < 4; i++) c += x[4 * l + i] + x[32 + 4 * l + i];
        corr[l] = -32 * c;
    }
}

void cb_q6_prep(const int16_t *xq, int32_t K, int8_t *out) {
    cb_prep64(xq, K, out, prep_block);
}

/* The reference step of one 64-block: lane sums from the codes (x of element k at byte k ^ 1), then the fma. */
static void block(const unsigned char *row, size_t K, size_t b, float s, const int8_t *x, float a[8]) {
    int32_t p[8] = {0};
    for (size_t k = b * 64; k < K && k < b * 64 + 64; k++) p[(k & 31) >> 2] += cb_i6_at(row, k) * (int32_t)x[k ^ 1];
    for (int l = 0; l < 8; l++) a[l] = fmaf((float)p[l], s, a[l]);
}

void cb_dot_rows_q6_scalar(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp,
                           const float *sx, float *const *outs, int64_t nt) {
    size_t K = (size_t)w->cols, nb = round64(K) / 64, rb = (size_t)cb_row_bytes(w->dtype, w->cols);
    for (int32_t r = r0; r < r1; r++) {
        const unsigned char *row = (const unsigned char *)w->data + (size_t)r * rb;
        const float *gs = w->scales + (size_t)r * nb;
        for (int64_t t = 0; t < nt; t++) {
            float a[8] = {0};
            for (size_t b = 0; b < nb; b++) block(row, K, b, gs[b], xp[t], a);
            outs[t][r] = cb_hsum8(a) * sx[t];
        }
    }
}

void cb_dot_rows_q6(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp, const float *sx,
                    float *const *outs, int64_t nt) {
    cb_kernels()->dot_rows_q6(w, r0, r1, xp, sx, outs, nt);
}
