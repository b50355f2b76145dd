/* w4a8 kernel on odd shapes: the active level's cb_dot_rows_q4 equals the scalar reference bit for
 * bit, and the scalar reference equals an independent formula written here from the spec of
 * kernels_q4.c (codes from the nibbles, x from the int16 codes, lanes by k % 64 / 8), for int4-g32 and
 * int4-g64, K off every chunk and group width (odd K included), row ranges starting mid-matrix,
 * 1..20 tokens, extreme codes (-8, 7 and +-127 activations). The weights end at a PROT_NONE page,
 * so a read past the last row faults. Run per level by `make check`. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "colibri.h"
#include "kernels.h"
#include "check.h"
#include "guarded.h"

enum { MAX_T = 20, MAX_K = 400, ROWS = 40 };

static int16_t xq[MAX_T][MAX_K];
static int8_t prep[MAX_T][2048];
static float sx[MAX_T], scales[ROWS * 16], got[MAX_T][ROWS], want[MAX_T][ROWS], naive[MAX_T][ROWS];

/* The spec, independently: int sums per lane (8 consecutive elements of a 64-block) over the
 * natural order, then per block one fma per lane with that lane's group scale (0 past the end). */
static float spec_dot(const unsigned char *row, int32_t K, int32_t G, const float *gs, const int16_t *x, float s) {
    float a[8] = {0};
    int32_t ng = (K + G - 1) / G;
    for (int32_t b = 0; b * 64 < K; b++) {
        int32_t p[8] = {0};
        for (int32_t k = b * 64; k < K && k < b * 64 + 64; k++) {
            int32_t nib = (row[k / 2] >> (4 * (k % 2))) & 15, code = nib >= 8 ? nib - 16 : nib;
            p[(k - b * 64) / 8] += code * x[k];
        }
        for (int l = 0; l < 8; l++) {
            int32_t g = G == 64 ? b : 2 * b + l / 4;
            a[l] = fmaf((float)p[l], g < ng ? gs[g] : 0.0f, a[l]);
        }
    }
    return (((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))) * s;
}

static int one_shape(const cb_matrix *m, int32_t r0, int32_t r1, int64_t nt) {
    const int8_t *xs[MAX_T];
    float *g[MAX_T], *h[MAX_T];
    int32_t G = m->dtype == CB_I4_G32 ? 32 : 64, ng = (m->cols + G - 1) / G;
    for (int t = 0; t < MAX_T; t++) xs[t] = prep[t], g[t] = got[t], h[t] = want[t];
    memset(got, 0, sizeof got), memset(want, 0, sizeof want);
    cb_dot_rows_q4(m, r0, r1, xs, sx, g, nt);
    cb_dot_rows_q4_scalar(m, r0, r1, xs, sx, h, nt);
    size_t rb = (size_t)(m->cols + 1) / 2;
    for (int t = 0; t < nt; t++)
        for (int32_t r = r0; r < r1; r++)
            naive[t][r] = spec_dot((const unsigned char *)m->data + (size_t)r * rb, m->cols, G, scales + r * ng, xq[t], sx[t]);
    for (int t = 0; t < nt; t++)
        for (int32_t r = r0; r < r1; r++)
            if (memcmp(&got[t][r], &want[t][r], 4) || memcmp(&want[t][r], &naive[t][r], 4)) return 0;
    return 1;
}

static void shapes(unsigned *s, int32_t dtype) {
    static const int32_t Ks[] = {1, 2, 31, 32, 33, 63, 64, 65, 95, 96, 127, 128, 150, 160, 333, 384};
    static const int32_t Rs[][2] = {{0, 1}, {0, 3}, {0, 4}, {5, 17}, {3, 40}, {39, 40}};
    int32_t G = dtype == CB_I4_G32 ? 32 : 64;
    for (size_t a = 0; a < sizeof Ks / sizeof Ks[0]; a++) {
        int32_t K = Ks[a];
        size_t rb = (size_t)(K + 1) / 2, map_bytes;
        unsigned char *map, *w = guarded(rb * ROWS, &map, &map_bytes);
        CHECK(w != NULL);
        if (!w) return;
        CHECK(cb_q4_prep_bytes(K, G) <= sizeof prep[0] && cb_q4_prep_bytes(K, G) % 32 == 0 &&
              cb_q4_prep_bytes(K, 32) == cb_q4_prep_bytes(K, 64));
        for (int extreme = 0; extreme < 2; extreme++) {
            for (size_t i = 0; i < rb * ROWS; i++)
                w[i] = extreme ? (i % 3 ? 0x88 : 0x77) : (unsigned char)(rnd(s) * 128.0f + 128.0f);
            for (int t = 0; t < MAX_T; t++) {
                for (int32_t k = 0; k < K; k++)
                    xq[t][k] = (int16_t)(extreme ? ((t + k) % 2 ? -127 : 127) : (int)(rnd(s) * 127.0f));
                cb_q4_prep(xq[t], K, G, prep[t]);
            }
            cb_matrix m = {w, scales, NULL, dtype, ROWS, K};
            for (size_t b = 0; b < sizeof Rs / sizeof Rs[0]; b++)
                for (int64_t nt = 1; nt <= MAX_T; nt++) {
                    int ok = one_shape(&m, Rs[b][0], Rs[b][1], nt);
                    CHECK(ok);
                    if (!ok) fprintf(stderr, "  G=%d K=%d rows [%d, %d) tokens %lld extreme %d\n", (int)G, (int)K,
                                     (int)Rs[b][0], (int)Rs[b][1], (long long)nt, extreme);
                }
        }
        munmap(map, map_bytes);
    }
}

int main(void) {
    printf("simd level %s\n", cb_simd_name());
    unsigned s = 11;
    for (int t = 0; t < MAX_T; t++) sx[t] = (rnd(&s) + 1.5f) * 0.01f;
    for (int r = 0; r < ROWS * 16; r++) scales[r] = (rnd(&s) + 1.5f) * 0.003f * (r % 7 ? 1.0f : -1.0f);
    shapes(&s, CB_I4_G32);
    shapes(&s, CB_I4_G64);
    CHECK_DONE();
}
