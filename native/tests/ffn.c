/* Expert FFN vs a double-precision scalar reference; SIMD paths and thread counts agree bit for bit;
 * combine order; moe_forward equals its pieces. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "colibri.h"
#include "check.h"

enum { H = 37, I = 21, N = 9, E = 4, K = 2 };

static double silu(double a) { return a / (1.0 + exp(-a)); }

static void ref_ffn(const float *g, const float *u, const float *d, const float *x, double *y) {
    double h[I];
    for (int r = 0; r < I; r++) {
        double a = 0, b = 0;
        for (int c = 0; c < H; c++) { a += (double)g[r * H + c] * x[c]; b += (double)u[r * H + c] * x[c]; }
        h[r] = silu(a) * b;
    }
    for (int r = 0; r < H; r++) {
        y[r] = 0;
        for (int c = 0; c < I; c++) y[r] += (double)d[r * I + c] * h[c];
    }
}

static cb_expert f32_expert(const float *g, const float *u, const float *d) {
    cb_expert ex = {{g, NULL, NULL, CB_F32, I, H}, {u, NULL, NULL, CB_F32, I, H}, {d, NULL, NULL, CB_F32, H, I},
                   NULL, NULL, NULL, CB_ACT_SILU, 0.0f, 0.0f};
    return ex;
}

int main(void) {
    printf("simd level %s\n", cb_simd_name());
    unsigned s = 1;
    static float g[E][I * H], u[E][I * H], d[E][H * I], x[N * H], router[E * H];
    for (int e = 0; e < E; e++)
        for (int i = 0; i < I * H; i++) { g[e][i] = rnd(&s) * 0.3f; u[e][i] = rnd(&s) * 0.3f; d[e][i] = rnd(&s) * 0.3f; }
    for (int i = 0; i < N * H; i++) x[i] = rnd(&s);
    for (int i = 0; i < E * H; i++) router[i] = rnd(&s);
    cb_expert ex[E];
    for (int e = 0; e < E; e++) ex[e] = f32_expert(g[e], u[e], d[e]);

    cb_engine *e1 = NULL, *e3 = NULL;
    CHECK_OK(cb_engine_create(1, NULL, 0, &e1));
    CHECK_OK(cb_engine_create(3, NULL, 0, &e3));
    static float out1[N * H], out3[N * H], outs[N * H];
    CHECK_OK(cb_expert_forward(e1, &ex[0], x, H, NULL, N, out1));
    CHECK_OK(cb_expert_forward(e3, &ex[0], x, H, NULL, N, out3));
    CHECK(memcmp(out1, out3, sizeof out1) == 0);
    for (int t = 0; t < N; t++) {
        double y[H], m = 0, err = 0;
        ref_ffn(g[0], u[0], d[0], x + t * H, y);
        for (int r = 0; r < H; r++) { m = fmax(m, fabs(y[r])); err = fmax(err, fabs(y[r] - out1[t * H + r])); }
        CHECK(err <= 2e-5 * m);
    }
    if (cb_simd_level() != CB_SIMD_SCALAR) { /* same bits on the portable path */
        CHECK_OK(cb_simd_force(0));
        CHECK_OK(cb_expert_forward(e1, &ex[0], x, H, NULL, N, outs));
        CHECK(memcmp(out1, outs, sizeof out1) == 0);
        CHECK_OK(cb_simd_force(-1));
    }
    int32_t rows[3] = {8, 0, 8};          /* gathered rows give the same bits as the full batch */
    CHECK_OK(cb_expert_forward(e3, &ex[0], x, H, rows, 3, outs));
    CHECK(memcmp(outs, out1 + 8 * H, H * 4) == 0 && memcmp(outs + H, out1, H * 4) == 0);

    /* moe_forward == route + expert_forward + combine */
    const cb_expert *table[E] = {&ex[0], &ex[1], &ex[2], &ex[3]};
    cb_moe_layer L = {H, {CB_GATE_SOFTMAX_TOPK_NORM, E, K, 1, 1, 1, 1.0f}, router, NULL, table, 0, NULL, NULL};
    static float y[N * H], y2[N * H], slot[N * K * H], w[N * K], w2[N * K];
    int32_t idx[N * K], idx2[N * K];
    CHECK_OK(cb_moe_forward(e3, &L, x, N, y, idx, w));
    CHECK_OK(cb_route(e1, &L.gating, router, NULL, x, N, H, idx2, w2));
    CHECK(memcmp(idx, idx2, sizeof idx) == 0 && memcmp(w, w2, sizeof w) == 0);
    for (int p = 0; p < N * K; p++) {
        int32_t row = p / K;
        CHECK_OK(cb_expert_forward(e1, &ex[idx[p]], x, H, &row, 1, slot + p * H));
    }
    CHECK_OK(cb_combine(N, K, H, w, slot, NULL, y2));
    CHECK(memcmp(y, y2, sizeof y) == 0);
    for (int c = 0; c < H; c++) {         /* combine adds in slot order without FMA */
        float acc = 0.0f;
        for (int j = 0; j < K; j++) { volatile float p = w[j] * slot[j * H + c]; acc = acc + p; }
        CHECK(acc == y2[c]);
    }

    /* a routed expert that is missing, and a hidden mismatch, are errors (not crashes) */
    table[idx[0]] = NULL;
    CHECK(cb_moe_forward(e3, &L, x, N, y, idx, w) == CB_E_INVALID);
    CHECK(strstr(cb_engine_last_error(e3), "missing") != NULL);
    table[idx[0]] = &ex[idx[0]];
    CHECK(cb_expert_forward(e1, &ex[0], x, H + 1, NULL, N, outs) == CB_E_INVALID);
    uint64_t m0 = cb_engine_mallocs(e3);
    for (int it = 0; it < 3; it++) CHECK_OK(cb_moe_forward(e3, &L, x, N, y, idx, w));
    CHECK(cb_engine_mallocs(e3) == m0);
    /* w8a8 on int8-row weights: exact integer dots, so threads and SIMD paths agree bit for bit */
    static int8_t q[I * H], qd[H * I];
    static float qs[I], qds[H], w1[N * H], w3[N * H], w0[N * H];
    for (int i = 0; i < I * H; i++) { q[i] = (int8_t)(rnd(&s) * 127); qd[i] = (int8_t)(rnd(&s) * 127); }
    for (int i = 0; i < I; i++) qs[i] = 0.01f;
    for (int i = 0; i < H; i++) qds[i] = 0.02f;
    cb_expert qx = {{q, qs, NULL, CB_I8_ROW, I, H}, {q, qs, NULL, CB_I8_ROW, I, H}, {qd, qds, NULL, CB_I8_ROW, H, I},
                  NULL, NULL, NULL, CB_ACT_SILU, 0.0f, 0.0f};
    CHECK_OK(cb_engine_set_w8a8(e1, 1));
    CHECK_OK(cb_engine_set_w8a8(e3, 1));
    CHECK_OK(cb_expert_forward(e1, &qx, x, H, NULL, N, w1));
    CHECK_OK(cb_expert_forward(e3, &qx, x, H, NULL, N, w3));
    CHECK(memcmp(w1, w3, sizeof w1) == 0);
    CHECK_OK(cb_simd_force(0));
    CHECK_OK(cb_expert_forward(e3, &qx, x, H, NULL, N, w3));
    CHECK_OK(cb_simd_force(-1));
    CHECK(memcmp(w1, w3, sizeof w1) == 0);
    CHECK_OK(cb_engine_set_w8a8(e1, 0));
    CHECK_OK(cb_expert_forward(e1, &qx, x, H, NULL, N, w0));
    double num = 0, d0 = 0, d1 = 0;                    /* close to the weight-only result */
    for (int i = 0; i < N * H; i++) { num += (double)w0[i] * w1[i]; d0 += (double)w0[i] * w0[i]; d1 += (double)w1[i] * w1[i]; }
    CHECK(num / sqrt(d0 * d1) > 0.999);

    /* int4 per group of 32: each level gives the scalar bits; the encoding table sizes it */
    static uint8_t q4g[I * ((H + 1) / 2)], q4d[H * ((I + 1) / 2)];
    static float s4g[I * 2], s4d[H * 1], f1[N * H], f0[N * H];
    for (size_t i = 0; i < sizeof q4g; i++) q4g[i] = (uint8_t)(rnd(&s) * 127 + 128);
    for (size_t i = 0; i < sizeof q4d; i++) q4d[i] = (uint8_t)(rnd(&s) * 127 + 128);
    for (int i = 0; i < I * 2; i++) s4g[i] = 0.05f + 0.01f * (float)i;
    for (int i = 0; i < H; i++) s4d[i] = 0.03f;
    CHECK(cb_matrix_data_bytes(CB_I4_G32, I, H) == (int64_t)sizeof q4g && cb_matrix_scale_count(CB_I4_G32, I, H) == I * 2);
    CHECK(strcmp(cb_encoding_of(CB_I4_G32)->name, "int4-g32") == 0 && cb_encoding_of(CB_DTYPE_COUNT) == NULL);
    cb_expert q4 = {{q4g, s4g, NULL, CB_I4_G32, I, H}, {q4g, s4g, NULL, CB_I4_G32, I, H},
                    {q4d, s4d, NULL, CB_I4_G32, H, I},
                  NULL, NULL, NULL, CB_ACT_SILU, 0.0f, 0.0f};
    CHECK_OK(cb_expert_forward(e3, &q4, x, H, NULL, N, f1));
    CHECK_OK(cb_simd_force(0));
    CHECK_OK(cb_expert_forward(e3, &q4, x, H, NULL, N, f0));
    CHECK_OK(cb_simd_force(-1));
    CHECK(memcmp(f0, f1, sizeof f0) == 0);
    cb_engine_destroy(e1);
    cb_engine_destroy(e3);
    CHECK_DONE();
}
