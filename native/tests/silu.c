/* silu.c — the SwiGLU step (src/silu.c) of this run's level gives the scalar reference's bits on every input,
 * specials included, at every length and offset, and stays within its error bound of double-precision SiLU. */
#include <math.h>
#include <string.h>
#include "colibri.h"
#include "kernels.h"
#include "check.h"

enum { N = 4099 };

static void fill(float *g, float *u) {
    static const float specials[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-45f, 1.0f, -1.0f, 86.9f, -86.9f, 87.0f,
                                     -87.0f, 87.5f, -87.5f, 88.0f, -88.0f, 88.5f, -88.5f, 89.0f, -89.0f, 100.0f,
                                     -100.0f, 1e30f, -1e30f, 3.4e38f, -3.4e38f, INFINITY, -INFINITY, NAN, -NAN,
                                     0.34657359f, -0.34657359f, 20.0f, -20.0f};
    unsigned s = 11;
    size_t ns = sizeof specials / sizeof specials[0];
    for (int i = 0; i < N; i++) {
        g[i] = i < (int)ns ? specials[i] : rnd(&s) * (i % 3 ? 12.0f : 90.0f);
        u[i] = rnd(&s) * 3.0f;
    }
}

int main(void) {
    printf("simd level %s\n", cb_simd_name());
    static float g[N], u[N], got[N], want[N];
    fill(g, u);
    memcpy(got, g, sizeof g);
    memcpy(want, g, sizeof g);
    cb_kernels()->silu_mul(got, u, N);
    cb_silu_mul_scalar(want, u, N);
    CHECK(memcmp(got, want, sizeof got) == 0);       /* bit for bit, NaNs included */
    static float g2[N], w2[N];
    for (int off = 0; off < 17; off++)                /* every tail length and alignment */
        for (int n = 0; n < 40; n++) {
            memcpy(g2, g, sizeof g);
            memcpy(w2, g, sizeof g);
            cb_kernels()->silu_mul(g2 + off, u + off, n);
            cb_silu_mul_scalar(w2 + off, u + off, n);
            CHECK(memcmp(g2, w2, sizeof g2) == 0);
        }
    int bad = 0;
    for (int i = 0; i < N; i++) {                     /* accuracy where SiLU is not tiny */
        if (!isfinite(g[i]) || fabsf(g[i]) > 80.0f) continue;
        double ref = (double)g[i] / (1.0 + exp(-(double)g[i])) * (double)u[i];
        if (fabs((double)want[i] - ref) > 1e-6 * fabs(ref) + 1e-38) bad++;
    }
    CHECK(bad == 0);
    CHECK(want[0] == 0.0f && want[1] == 0.0f);                       /* silu(+-0) = 0 */
    CHECK(isnan(want[27]) && isnan(want[28]));                        /* NaN stays NaN */
    CHECK(want[25] == (u[25] > 0 ? INFINITY : -INFINITY));            /* silu(+inf) = +inf */
    CHECK(want[26] == (u[26] > 0 ? -INFINITY : INFINITY));            /* -inf over e^88: not a NaN */
    CHECK(want[9] == 87.0f * u[9] && want[19] == 100.0f * u[19]);    /* e^-87 and below: silu(g) = g */
    CHECK_DONE();
}
