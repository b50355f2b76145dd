/* kernels_q4.c — w4a8: int4 weights (CB_I4_G32/G64) x per-token int8 activations.
 *
 * Role: the integer-dot path for int4 matrices when the engine's w8a8 switch is
 * on. Activations are quantized exactly as for w8a8 (cb_quantize_row_q8: qx, sx)
 * and then prepared once per token (cb_q4_prep): qx as int8, each 32-element
 * chunk reordered [x0 x2 .. x30 | x1 x3 .. x31] to match how one 16-byte run of
 * int4 codes unpacks into a register (low nibbles, then high nibbles), followed
 * by per-group lane corrections corr[g][l] = 8 * sum of the group's x in lane l.
 *
 * Per element (r, t), G = group size, lane(k) = (j & 1) * 4 + (j >> 3) with j = k % 32:
 *   p_g[l] = sum over k in group g with lane(k) = l of code[r,k] * qx[k]   (exact int32)
 *   a[l]   = 0;  for g = 0 .. ng-1:  a[l] = fma((float)p_g[l], scale[r,g], a[l])   (l = 0..7)
 *   out    = (((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7))) * sx[t]
 * The integer part is exact in any order and the float part is one fixed sequence,
 * so every tile shape, thread split and SIMD level gives the same bits. The scalar
 * reference computes p_g from the codes directly; the AVX2 kernel multiplies the
 * unsigned codes u = code + 8 (vpmaddubsw, u8 x s8 -> int16 pairs, vpmaddwd -> int32
 * lanes) and subtracts corr: sum (code + 8) x - 8 sum x = sum code x.
 */
#include <math.h>
#include <string.h>
#include "kernels.h"

static int32_t lane_of(size_t k) {
    size_t j = k & 31;
    return (int32_t)((j & 1) * 4 + (j >> 3));
}

/* Position of element k in the prepared (chunk-reordered) int8 row. */
static size_t prep_pos(size_t k) {
    size_t j = k & 31;
    return (k & ~(size_t)31) + (j & 1) * 16 + (j >> 1);
}

static size_t round32(size_t k) { return (k + 31) & ~(size_t)31; }

size_t cb_q4_prep_bytes(int32_t K, int32_t G) {
    size_t ng = ((size_t)K + (size_t)G - 1) / (size_t)G;
    return round32((size_t)K) + ng * 8 * sizeof(int32_t);
}

void cb_q4_prep(const int16_t *xq, int32_t K, int32_t G, int8_t *out) {
    size_t n = (size_t)K, k32 = round32(n), ng = (n + (size_t)G - 1) / (size_t)G;
    memset(out, 0, k32);
    for (size_t k = 0; k < n; k++) out[prep_pos(k)] = (int8_t)xq[k];
    for (size_t g = 0; g < ng; g++) {
        int32_t c[8] = {0};
        size_t end = (g + 1) * (size_t)G < n ? (g + 1) * (size_t)G : n;
        for (size_t k = g * (size_t)G; k < end; k++) c[lane_of(k)] += 8 * (int32_t)xq[k];
        memcpy(out + k32 + g * sizeof c, c, sizeof c);
    }
}

static float hsum8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* The reference: p_g from the codes, no correction, the float sequence of the header. */
void cb_dot_rows_q4_scalar(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp,
                           const float *sx, float *const *outs, int64_t nt) {
    size_t K = (size_t)w->cols, G = (size_t)cb_group_size(w->dtype), ng = (K + G - 1) / G, rb = (K + 1) / 2;
    for (int32_t r = r0; r < r1; r++) {
        const unsigned char *row = (const unsigned char *)w->data + (size_t)r * rb;
        for (int64_t t = 0; t < nt; t++) {
            float a[8] = {0};
            for (size_t g = 0; g < ng; g++) {
                int32_t p[8] = {0};
                size_t end = (g + 1) * G < K ? (g + 1) * G : K;
                for (size_t k = g * G; k < end; k++) p[lane_of(k)] += cb_i4_at(row, k) * (int32_t)xp[t][prep_pos(k)];
                float s = w->scales[(size_t)r * ng + g];
                for (int l = 0; l < 8; l++) a[l] = fmaf((float)p[l], s, a[l]);
            }
            outs[t][r] = hsum8(a) * sx[t];
        }
    }
}

void cb_dot_rows_q4(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp, const float *sx,
                    float *const *outs, int64_t nt) {
    cb_kernels()->dot_rows_q4(w, r0, r1, xp, sx, outs, nt);
}
