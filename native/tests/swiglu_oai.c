/* swiglu_oai.c — gpt-oss's experts: the clamped SwiGLU step (silu.c) of this run's level gives the scalar
 * reference's bits on every input (specials, tails, offsets) and stays close to double precision; an expert
 * with biases and that activation matches a double-precision reference, and gives the same bits on every
 * thread count and the scalar level; bad activation parameters are refused naming them. */
#include <math.h>
#include <string.h>
#include "colibri.h"
#include "kernels.h"
#include "check.h"

enum { N = 2051, H = 29, I = 19, T = 7 };
static const float ALPHA = 1.702f, LIMIT = 0.9f;

static double ref_act(double g, double u) {
    g = fmin(g, LIMIT);
    u = fmax(fmin(u, LIMIT), -LIMIT);
    return (u + 1.0) * g / (1.0 + exp(-g * ALPHA));
}

static void kernel_checks(void) {
    static const float specials[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 0.9f, -0.9f, 0.95f, -0.95f, 7.0f, -7.0f,
                                     60.0f, -60.0f, 100.0f, -100.0f, 3.4e38f, -3.4e38f, INFINITY, -INFINITY, NAN};
    static float g[N], u[N], got[N], want[N];
    unsigned s = 5;
    size_t ns = sizeof specials / sizeof specials[0];
    for (int i = 0; i < N; i++) {
        g[i] = i < (int)ns ? specials[i] : rnd(&s) * (i % 3 ? 2.0f : 80.0f);
        u[i] = i < (int)ns ? specials[ns - 1 - i] : rnd(&s) * 2.0f;
    }
    memcpy(got, g, sizeof g);
    memcpy(want, g, sizeof g);
    cb_kernels()->swiglu_oai(got, u, N, ALPHA, LIMIT);
    cb_swiglu_oai_scalar(want, u, N, ALPHA, LIMIT);
    CHECK(memcmp(got, want, sizeof got) == 0);                   /* bit for bit, NaNs included */
    for (int off = 0; off < 17; off++)                            /* every tail length and alignment */
        for (int n = 0; n < 40; n++) {
            memcpy(got, g, sizeof g);
            memcpy(want, g, sizeof g);
            cb_kernels()->swiglu_oai(got + off, u + off, n, ALPHA, LIMIT);
            cb_swiglu_oai_scalar(want + off, u + off, n, ALPHA, LIMIT);
            CHECK(memcmp(got, want, sizeof got) == 0);
        }
    memcpy(want, g, sizeof g);
    cb_swiglu_oai_scalar(want, u, N, ALPHA, LIMIT);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        if (!isfinite(g[i]) || !isfinite(u[i]) || g[i] * ALPHA < -80.0f) continue;   /* e^x clamps at e^88 */
        double r = ref_act(g[i], u[i]);
        double arg = fabs((double)fminf(g[i], LIMIT) * ALPHA);      /* f32 rounding of g * alpha, scaled by e^x */
        if (fabs((double)want[i] - r) > (1e-6 + 1.2e-7 * arg) * fabs(r) + 1e-30) bad++;
    }
    CHECK(bad == 0);
    CHECK(isnan(want[18]));                                       /* a NaN gate stays NaN */
    float at_limit[1] = {LIMIT};                                  /* a gate of +inf or 7 acts as the limit */
    cb_swiglu_oai_scalar(at_limit, &u[16], 1, ALPHA, LIMIT);
    CHECK(want[16] == at_limit[0]);
    at_limit[0] = LIMIT;
    cb_swiglu_oai_scalar(at_limit, &u[8], 1, ALPHA, LIMIT);
    CHECK(want[8] == at_limit[0]);
}

static void expert_checks(void) {
    unsigned s = 9;
    static float g[I * H], u[I * H], d[H * I], bg[I], bu[I], bd[H], x[T * H], out1[T * H], out3[T * H], outs[T * H];
    for (int i = 0; i < I * H; i++) { g[i] = rnd(&s) * 0.4f; u[i] = rnd(&s) * 0.4f; d[i] = rnd(&s) * 0.4f; }
    for (int i = 0; i < I; i++) { bg[i] = rnd(&s) * 0.5f; bu[i] = rnd(&s) * 0.5f; }
    for (int i = 0; i < H; i++) bd[i] = rnd(&s) * 0.5f;
    for (int i = 0; i < T * H; i++) x[i] = rnd(&s);
    cb_expert ex = {{g, NULL, NULL, CB_F32, I, H}, {u, NULL, NULL, CB_F32, I, H}, {d, NULL, NULL, CB_F32, H, I},
                    bg, bu, bd, CB_ACT_SWIGLU_OAI, ALPHA, LIMIT};
    cb_engine *e1 = NULL, *e3 = NULL;
    CHECK_OK(cb_engine_create(1, NULL, 0, &e1));
    CHECK_OK(cb_engine_create(3, NULL, 0, &e3));
    CHECK_OK(cb_expert_forward(e1, &ex, x, H, NULL, T, out1));
    CHECK_OK(cb_expert_forward(e3, &ex, x, H, NULL, T, out3));
    CHECK(memcmp(out1, out3, sizeof out1) == 0);
    int clamped = 0;
    for (int t = 0; t < T; t++) {
        double h[I], m = 0, err = 0;
        for (int r = 0; r < I; r++) {
            double a = bg[r], b = bu[r];
            for (int c = 0; c < H; c++) {
                a += (double)g[r * H + c] * x[t * H + c];
                b += (double)u[r * H + c] * x[t * H + c];
            }
            clamped += a > LIMIT || fabs(b) > LIMIT;
            h[r] = ref_act(a, b);
        }
        for (int r = 0; r < H; r++) {
            double y = bd[r];
            for (int c = 0; c < I; c++) y += (double)d[r * I + c] * h[c];
            m = fmax(m, fabs(y));
            err = fmax(err, fabs(y - out1[t * H + r]));
        }
        CHECK(err <= 2e-5 * m);
    }
    CHECK(clamped > 10);                                          /* the clamps are exercised */
    if (cb_simd_level() != CB_SIMD_SCALAR) {
        CHECK_OK(cb_simd_force(0));
        CHECK_OK(cb_expert_forward(e3, &ex, x, H, NULL, T, outs));
        CHECK(memcmp(out1, outs, sizeof out1) == 0);
        CHECK_OK(cb_simd_force(-1));
    }
    ex.limit = 0.0f;
    CHECK(cb_expert_forward(e1, &ex, x, H, NULL, T, outs) == CB_E_INVALID);
    CHECK(strstr(cb_engine_last_error(e1), "limit") != NULL);
    ex.limit = LIMIT, ex.alpha = NAN;
    CHECK(cb_expert_forward(e1, &ex, x, H, NULL, T, outs) == CB_E_INVALID);
    ex.alpha = ALPHA, ex.act = 7;
    CHECK(cb_expert_forward(e1, &ex, x, H, NULL, T, outs) == CB_E_INVALID);
    CHECK(strstr(cb_engine_last_error(e1), "activation 7") != NULL);
    cb_engine_destroy(e1);
    cb_engine_destroy(e3);
}

int main(void) {
    printf("simd level %s\n", cb_simd_name());
    kernel_checks();
    expert_checks();
    CHECK_DONE();
}
