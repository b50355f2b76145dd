/* kernels_q4.c — w4a8: int4 weights (CB_I4_G32/G64) x per-token int8 activations.
 *
 * Role: the integer-dot path for int4 matrices when the engine's w8a8 switch is
 * on. Activations are quantized exactly as for w8a8 (cb_quantize_row_q8: qx, sx)
 * and then prepared once per token (cb_q4_prep), the same for both group sizes:
 * per 64-element block b, 32 bytes A = [x(64b+2i), i < 16 | x(64b+32+2i), i < 16]
 * and 32 bytes B = the odd elements likewise (the order in which 32 bytes of int4
 * codes split into low and high nibbles), then per block the negated lane
 * corrections ncorr[b][l] = -8 * sum of x over the block's lane l.
 *
 * Per element (r, t), lane(k) = (k % 64) / 8 (8 consecutive elements per lane):
 *   p_g[l] = sum over k in group g with lane(k) = l of code[r,k] * qx[k]   (exact int32)
 *   a[l]   = 0; per 64-block b in order, for l = 0..7:
 *              int4-g64: a[l] = fma((float)p_b[l], scale[r,b], a[l])
 *              int4-g32: a[l] = fma((float)p_g[l], s, a[l]) with g = 2b + l / 4,
 *                        s = scale[r,g] (0 when g is past the last group, p_g = 0 then)
 *   out    = (((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7))) * sx[t]
 * The integer part is exact in any order and the float part one fixed sequence, so
 * every tile shape, thread split and SIMD level gives the same bits. The scalar
 * reference computes p_g from the codes directly; the AVX2 kernel multiplies the
 * unsigned codes u = code + 8 (vpmaddubsw, u8 x s8 -> int16, vpmaddwd -> int32
 * lanes) and adds ncorr: sum (code + 8) x - 8 sum x = sum code x (the AVX-512
 * kernel starts its vpdpbusd sums from ncorr).
 */
#include <math.h>
#include <string.h>
#include "kernels.h"

/* Position of element k in the prepared int8 row. */
static size_t prep_pos(size_t k) {
    size_t j = k & 63;
    return (k & ~(size_t)63) + (j & 1) * 32 + (j >> 5) * 16 + ((j & 31) >> 1);
}

static size_t round64(size_t k) { return (k + 63) & ~(size_t)63; }

size_t cb_q4_prep_bytes(int32_t K, int32_t G) {
    (void)G;                       /* one layout for both group sizes */
    return cb_prep64_bytes(K);
}

/* One full 64-block: even / odd elements of each half, and the 8 negated lane corrections. */
static void prep_block(const int16_t *x, int8_t *out, int32_t *corr) {
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 16; i++) {
            out[h * 16 + i] = (int8_t)x[h * 32 + 2 * i];
            out[32 + h * 16 + i] = (int8_t)x[h * 32 + 2 * i + 1];
        }
    for (int l = 0; l < 8; l++) {
        int32_t c = 0;
        for (int i = 0; i < 8; i++) c += x[l * 8 + i];
        corr[l] = -8 * c;
    }
}

void cb_q4_prep(const int16_t *xq, int32_t K, int32_t G, int8_t *out) {
    (void)G;
    cb_prep64(xq, K, out, prep_block);
}

/* The reference: lane sums of one 64-block from the codes, no correction, then the float step. */
static void block(const cb_matrix *w, const unsigned char *row, const float *gs, size_t b, const int8_t *x, float a[8]) {
    size_t K = (size_t)w->cols, ng = (K + (size_t)cb_group_size(w->dtype) - 1) / (size_t)cb_group_size(w->dtype);
    int32_t p[8] = {0};
    for (size_t k = b * 64; k < K && k < b * 64 + 64; k++) p[(k & 63) >> 3] += cb_i4_at(row, k) * (int32_t)x[prep_pos(k)];
    for (int l = 0; l < 8; l++) {
        size_t g = w->dtype == CB_I4_G64 ? b : 2 * b + (size_t)l / 4;
        a[l] = fmaf((float)p[l], g < ng ? gs[g] : 0.0f, a[l]);
    }
}

void cb_dot_rows_q4_scalar(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp,
                           const float *sx, float *const *outs, int64_t nt) {
    size_t K = (size_t)w->cols, G = (size_t)cb_group_size(w->dtype), ng = (K + G - 1) / G, rb = (K + 1) / 2;
    for (int32_t r = r0; r < r1; r++) {
        const unsigned char *row = (const unsigned char *)w->data + (size_t)r * rb;
        for (int64_t t = 0; t < nt; t++) {
            float a[8] = {0};
            for (size_t b = 0; b < round64(K) / 64; b++) block(w, row, w->scales + (size_t)r * ng, b, xp[t], a);
            outs[t][r] = cb_hsum8(a) * sx[t];
        }
    }
}

void cb_dot_rows_q4(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp, const float *sx,
                    float *const *outs, int64_t nt) {
    cb_kernels()->dot_rows_q4(w, r0, r1, xp, sx, outs, nt);
}
