/* int6-g64 kernels on odd shapes: the active level's cb_dot_rows_q6 (w6a8) equals the scalar reference
 * bit for bit, and the scalar reference equals an independent formula written here from the spec of
 * kernels_q6.c (codes read bit by bit from the row's stream, x from the int16 codes, lanes by k % 32 / 4);
 * the active level's f32 kernel (cb_dot_rows) equals cb_dot_rows_scalar. K off every block and 8-step
 * (odd K included), row ranges starting mid-matrix, 1..20 tokens, extreme codes (-32, 31 and +-127
 * activations). The weights end at a PROT_NONE page, so a read past the last row faults. Run per level
 * by `make check`. */
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
static int8_t prep[MAX_T][1024];
static float xf[MAX_T][MAX_K];
static float sx[MAX_T], scales[ROWS * 8], got[MAX_T][ROWS], want[MAX_T][ROWS], naive[MAX_T][ROWS];

/* Code k of a row, bit by bit: bit i of the row is bit i % 8 of byte i / 8; two's complement. */
static int32_t code_at(const unsigned char *row, int32_t k) {
    int32_t v = 0;
    for (int i = 0; i < 6; i++) v |= ((row[(6 * k + i) / 8] >> ((6 * k + i) % 8)) & 1) << i;
    return v >= 32 ? v - 64 : v;
}

/* The spec, independently: int sums per lane (elements 4l..4l+3 and 32+4l..32+4l+3 of a 64-block),
 * then per block one fma per lane with the block's scale. */
static float spec_dot(const unsigned char *row, int32_t K, const float *gs, const int16_t *x, float s) {
    float a[8] = {0};
    for (int32_t b = 0; b * 64 < K; b++) {
        int32_t p[8] = {0};
        for (int32_t k = b * 64; k < K && k < b * 64 + 64; k++) p[(k % 32) / 4] += code_at(row, k) * x[k];
        for (int l = 0; l < 8; l++) a[l] = fmaf((float)p[l], gs[b], a[l]);
    }
    return (((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))) * s;
}

static int same(int64_t nt, int32_t r0, int32_t r1, int with_naive) {
    for (int t = 0; t < nt; t++)
        for (int32_t r = r0; r < r1; r++)
            if (memcmp(&got[t][r], &want[t][r], 4) || (with_naive && memcmp(&want[t][r], &naive[t][r], 4))) return 0;
    return 1;
}

static int w6a8_shape(const cb_matrix *m, int32_t r0, int32_t r1, int64_t nt) {
    const int8_t *xs[MAX_T];
    float *g[MAX_T], *h[MAX_T];
    int32_t nb = (m->cols + 63) / 64;
    for (int t = 0; t < MAX_T; t++) xs[t] = prep[t], g[t] = got[t], h[t] = want[t];
    memset(got, 0, sizeof got), memset(want, 0, sizeof want);
    cb_dot_rows_q6(m, r0, r1, xs, sx, g, nt);
    cb_dot_rows_q6_scalar(m, r0, r1, xs, sx, h, nt);
    size_t rb = (size_t)(m->cols * 6 + 7) / 8;
    for (int t = 0; t < nt; t++)
        for (int32_t r = r0; r < r1; r++)
            naive[t][r] = spec_dot((const unsigned char *)m->data + (size_t)r * rb, m->cols, scales + r * nb, xq[t], sx[t]);
    return same(nt, r0, r1, 1);
}

static int f32_shape(const cb_matrix *m, int32_t r0, int32_t r1, int64_t nt) {
    const float *xs[MAX_T];
    float *g[MAX_T], *h[MAX_T];
    for (int t = 0; t < MAX_T; t++) xs[t] = xf[t], g[t] = got[t], h[t] = want[t];
    memset(got, 0, sizeof got), memset(want, 0, sizeof want);
    cb_dot_rows(m, r0, r1, xs, g, nt);
    cb_dot_rows_scalar(m, r0, r1, xs, h, nt);
    return same(nt, r0, r1, 0);
}

static void fill(unsigned *s, unsigned char *w, size_t rb, int32_t K, int extreme) {
    static const unsigned char ends[3] = {0xe0, 0x07, 0x7e};   /* fields -32, 31, -32, 31 */
    for (size_t i = 0; i < rb * ROWS; i++)
        w[i] = extreme ? ends[i % rb % 3] : (unsigned char)(rnd(s) * 128.0f + 128.0f);
    for (int t = 0; t < MAX_T; t++) {
        for (int32_t k = 0; k < K; k++) {
            xq[t][k] = (int16_t)(extreme ? ((t + k) % 2 ? -127 : 127) : (int)(rnd(s) * 127.0f));
            xf[t][k] = rnd(s);
        }
        cb_q6_prep(xq[t], K, prep[t]);
    }
}

static void shapes(unsigned *s) {
    static const int32_t Ks[] = {1, 2, 3, 5, 7, 8, 9, 31, 33, 63, 64, 65, 95, 96, 127, 128, 150, 333, 384, 400};
    static const int32_t Rs[][2] = {{0, 1}, {0, 3}, {0, 4}, {5, 17}, {3, 40}, {39, 40}};
    for (size_t a = 0; a < sizeof Ks / sizeof Ks[0]; a++) {
        int32_t K = Ks[a];
        size_t rb = (size_t)(K * 6 + 7) / 8, map_bytes;
        unsigned char *map, *w = guarded(rb * ROWS, &map, &map_bytes);
        CHECK(w != NULL);
        if (!w) return;
        CHECK((int64_t)rb == cb_matrix_data_bytes(CB_I6_G64, 1, K));
        CHECK(cb_q6_prep_bytes(K) <= sizeof prep[0] && cb_q6_prep_bytes(K) % 32 == 0);
        for (int extreme = 0; extreme < 2; extreme++) {
            fill(s, w, rb, K, extreme);
            cb_matrix m = {w, scales, NULL, CB_I6_G64, ROWS, K};
            for (size_t b = 0; b < sizeof Rs / sizeof Rs[0]; b++)
                for (int64_t nt = 1; nt <= MAX_T; nt++) {
                    int ok = w6a8_shape(&m, Rs[b][0], Rs[b][1], nt), okf = f32_shape(&m, Rs[b][0], Rs[b][1], nt);
                    CHECK(ok && okf);
                    if (!ok || !okf) fprintf(stderr, "  K=%d rows [%d, %d) tokens %lld extreme %d: w6a8 %d f32 %d\n", (int)K,
                                             (int)Rs[b][0], (int)Rs[b][1], (long long)nt, extreme, ok, okf);
                }
        }
        munmap(map, map_bytes);
    }
}

int main(void) {
    printf("simd level %s\n", cb_simd_name());
    unsigned s = 13;
    for (int t = 0; t < MAX_T; t++) sx[t] = (rnd(&s) + 1.5f) * 0.01f;
    for (int r = 0; r < ROWS * 8; r++) scales[r] = (rnd(&s) + 1.5f) * 0.003f * (r % 7 ? 1.0f : -1.0f);
    shapes(&s);
    CHECK_DONE();
}
