/* kernels_scalar.c — portable C dot-product kernels (the COLIBRI_SIMD=scalar path).
 *
 * Role: the reference implementation of the per-element sequence in
 * kernels.h, emulating the 8 AVX2 lanes with fmaf so both paths agree bit for
 * bit. Speed is secondary here; correctness and portability are the job.
 */
#include <math.h>
#include "kernels.h"

static float decode1(const cb_matrix *w, int32_t r, int32_t k) {
    size_t i = (size_t)r * (size_t)w->cols + (size_t)k;
    switch (w->dtype) {
    case CB_F32: return ((const float *)w->data)[i];
    case CB_F16: return cb_f16_to_f32(((const uint16_t *)w->data)[i]);
    case CB_BF16: return cb_bf16_to_f32(((const uint16_t *)w->data)[i]);
    case CB_I8_ROW: return (float)((const int8_t *)w->data)[i];
    case CB_I8_MINMAX: return (float)((int32_t)((const int8_t *)w->data)[i] - w->zero[0]);
    default: {
        int32_t g = cb_group_size(w->dtype), ng = (w->cols + g - 1) / g;
        float q = cb_is_i4(w->dtype)
                      ? (float)cb_i4_at((const unsigned char *)w->data + (size_t)r * (size_t)((w->cols + 1) / 2), (size_t)k)
                      : (float)((const int8_t *)w->data)[i];
        return q * w->scales[(size_t)r * (size_t)ng + (size_t)(k / g)];
    }
    }
}

static float post_scale(const cb_matrix *w, int32_t r, float s) {
    if (w->dtype == CB_I8_ROW) return s * w->scales[r];
    if (w->dtype == CB_I8_MINMAX) return s * w->scales[0];
    return s;
}

static float hsum8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

/* One row against up to 4 tokens: each weight chunk is decoded once. */
static void row_tile(const cb_matrix *w, int32_t r, const float *const *xs, float *const *outs, int nt) {
    int32_t K = w->cols, K8 = K - K % 8;
    float acc[4][8] = {{0}};
    float v[8];
    for (int32_t k = 0; k < K8; k += 8) {
        for (int l = 0; l < 8; l++) v[l] = decode1(w, r, k + l);
        for (int t = 0; t < nt; t++)
            for (int l = 0; l < 8; l++) acc[t][l] = fmaf(v[l], xs[t][k + l], acc[t][l]);
    }
    for (int t = 0; t < nt; t++) {
        float s = hsum8(acc[t]);
        for (int32_t k = K8; k < K; k++) s = fmaf(decode1(w, r, k), xs[t][k], s);
        outs[t][r] = post_scale(w, r, s);
    }
}

void cb_dot_rows_scalar(const cb_matrix *w, int32_t r0, int32_t r1, const float *const *xs,
                        float *const *outs, int64_t nt) {
    for (int64_t t = 0; t < nt; t += 4) {
        int n = nt - t < 4 ? (int)(nt - t) : 4;
        for (int32_t r = r0; r < r1; r++) row_tile(w, r, xs + t, outs + t, n);
    }
}
