/* kernels_scalar.c — portable C dot-product kernels (the COLIBRI_SIMD=scalar path).
 *
 * Role: the reference implementation of the per-element sequence in
 * kernels.h, emulating the 8 AVX2 lanes with fmaf so both paths agree bit for
 * bit. Works on every encoding through its row decoder (decode.c): a chunk of
 * a row is decoded once and serves every token of the tile. Speed is
 * secondary here; correctness and portability are the job.
 */
#include <math.h>
#include "kernels.h"

#define CHUNK 256   /* decoded weights per step (a multiple of 8) */

float cb_dot_tail(const cb_matrix *w, int32_t r, const float *x, float s) {
    size_t K = (size_t)w->cols, K8 = K - K % 8;
    float v[8];
    cb_decode_row(w, r, K8, K - K8, v);
    for (size_t k = K8; k < K; k++) s = fmaf(v[k - K8], x[k], s);
    return s;
}

/* One row against up to 4 tokens: each weight chunk is decoded once. */
static void row_tile(const cb_matrix *w, cb_row_decoder dec, int32_t r, const float *const *xs,
                     float *const *outs, int nt) {
    size_t K = (size_t)w->cols, K8 = K - K % 8;
    float acc[4][8] = {{0}};
    float v[CHUNK];
    for (size_t k0 = 0; k0 < K8; k0 += CHUNK) {
        size_t n = K8 - k0 < CHUNK ? K8 - k0 : CHUNK;
        dec(w, r, k0, n, v);
        for (size_t k = 0; k < n; k += 8)
            for (int t = 0; t < nt; t++)
                for (int l = 0; l < 8; l++) acc[t][l] = fmaf(v[k + l], xs[t][k0 + k + l], acc[t][l]);
    }
    dec(w, r, K8, K - K8, v);
    const float *post = cb_post_scale(w, r);
    for (int t = 0; t < nt; t++) {
        float s = cb_hsum8(acc[t]);
        for (size_t k = K8; k < K; k++) s = fmaf(v[k - K8], xs[t][k], s);
        outs[t][r] = post ? s * *post : s;
    }
}

void cb_dot_rows_scalar(const cb_matrix *w, int32_t r0, int32_t r1, const float *const *xs,
                        float *const *outs, int64_t nt) {
    cb_row_decoder dec = cb_row_decoder_of(w->dtype);
    for (int64_t t = 0; t < nt; t += 4) {
        int n = nt - t < 4 ? (int)(nt - t) : 4;
        for (int32_t r = r0; r < r1; r++) row_tile(w, dec, r, xs + t, outs + t, n);
    }
}
