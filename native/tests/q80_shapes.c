/* Q8_0 / Q5_0 x Q8_0 on odd shapes: the active level's cb_dot_rows_q80 equals the scalar reference bit for bit,
 * and the scalar reference equals the formula written here from ggml's ggml_vec_dot_q8_0_q8_0 / _q5_0_q8_0 (q5_0's
 * codes as dequantize_row_q5_0 unpacks them; per block the integer sum, then the spec's float step of
 * kernels_q80.c). The quantizer equals ggml-cpu's x86 quantize_row_q8_0 written out
 * (d = f16(amax / 127) by the compiler's _Float16 conversion, codes rint(x * (127 / amax))). K = 1..5 blocks and
 * short last blocks (colibri's own q8_0 rows), row ranges starting mid-matrix, 1..20 tokens, extreme codes (-128,
 * 127) against +-127 activations. The weights end at a PROT_NONE page, so a read past the last row faults. Run per
 * level by `make check`. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "colibri.h"
#include "kernels.h"
#include "q80.h"
#include "check.h"
#include "guarded.h"

enum { MAX_T = 20, MAX_K = 5 * 32, ROWS = 24 };

static cb_q80_block xa[MAX_T][MAX_K / 32];
static float xf[MAX_T][MAX_K], got[MAX_T][ROWS], want[MAX_T][ROWS], naive[MAX_T][ROWS];

static float half(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return cb_f16_to_f32(h);
}

/* Block b's 32 signed codes: q8_0 as stored; q5_0 as ggml's dequantize_row_q5_0 loop builds them. */
static void codes(int32_t dtype, const unsigned char *blk, int32_t c[32]) {
    if (dtype == CB_Q8_0) {
        for (int k = 0; k < 32; k++) c[k] = (int8_t)blk[2 + k];
        return;
    }
    uint32_t qh;
    memcpy(&qh, blk + 2, 4);
    for (int j = 0; j < 16; j++) {
        c[j] = ((blk[6 + j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
        c[j + 16] = ((blk[6 + j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
    }
}

static float spec_dot(int32_t dtype, const unsigned char *row, int32_t nb, size_t bb, const cb_q80_block *x) {
    float s = 0.0f;
    for (int32_t b = 0; b < nb; b++, row += bb, x++) {
        int32_t I = 0, c[32];
        codes(dtype, row, c);
        for (int k = 0; k < 32; k++) I += c[k] * x->qs[k];
        s = fmaf(half(row) * x->d, (float)I, s);
    }
    return s;
}

/* quantize_row_q8_0 (ggml-cpu x86), written out for the n <= 32 inputs of one block (the rest: code 0). */
static int quantizer_ok(const float *x, int n, const cb_q80_block *y) {
    float amax = 0.0f;
    for (int k = 0; k < n; k++) amax = fabsf(x[k]) > amax ? fabsf(x[k]) : amax;
    float d = (float)(_Float16)(amax / 127.0f), id = amax != 0.0f ? 127.0f / amax : 0.0f;
    if (memcmp(&y->d, &d, 4)) return 0;
    for (int k = 0; k < 32; k++)
        if (y->qs[k] != (k < n ? (int32_t)rintf(x[k] * id) : 0)) return 0;
    return 1;
}

static int shape(const cb_matrix *m, int32_t r0, int32_t r1, int64_t nt) {
    const cb_q80_block *xs[MAX_T];
    float *g[MAX_T], *h[MAX_T];
    int32_t nb = (m->cols + 31) / 32;
    size_t bb = m->dtype == CB_Q8_0 ? 34 : 22;
    for (int t = 0; t < MAX_T; t++) xs[t] = xa[t], g[t] = got[t], h[t] = want[t];
    memset(got, 0, sizeof got), memset(want, 0, sizeof want);
    cb_dot_rows_q80(m, r0, r1, xs, g, nt);
    cb_dot_rows_q80_scalar(m, r0, r1, xs, h, nt);
    for (int t = 0; t < nt; t++)
        for (int32_t r = r0; r < r1; r++)
            naive[t][r] = spec_dot(m->dtype, (const unsigned char *)m->data + (size_t)r * (size_t)nb * bb, nb, bb,
                                   xa[t]);
    for (int t = 0; t < nt; t++)
        for (int32_t r = r0; r < r1; r++)
            if (memcmp(&got[t][r], &want[t][r], 4) || memcmp(&want[t][r], &naive[t][r], 4)) return 0;
    return 1;
}

/* Random blocks (finite f16 d, either sign), or extreme ones: q8_0 codes -128 and 127 alternating, q5_0 bytes
 * alternating 0x00 / 0xff (codes -16 and 15), d = 1. */
static void fill(unsigned *s, int32_t dtype, unsigned char *w, size_t nblocks, int32_t K, int extreme) {
    size_t bb = dtype == CB_Q8_0 ? 34 : 22;
    for (size_t b = 0; b < nblocks; b++) {
        unsigned char *blk = w + b * bb;
        uint16_t d = extreme ? 0x3c00 : (uint16_t)(0x1800 + (unsigned)((rnd(s) + 1.0f) * 4096.0f));
        if (!extreme && rnd(s) < 0.0f) d ^= 0x8000;
        memcpy(blk, &d, 2);
        for (size_t k = 2; k < bb; k++)
            blk[k] = extreme ? (dtype == CB_Q8_0 ? (k % 2 ? 0x80 : 0x7f) : (b % 2 ? 0x00 : 0xff))
                             : (unsigned char)(int)(rnd(s) * 128.0f + 128.0f);
    }
    for (int t = 0; t < MAX_T; t++) {
        for (int32_t k = 0; k < K; k++)
            xf[t][k] = extreme ? ((t + k) % 2 ? -1.0f : 1.0f) : rnd(s) * (t % 3 ? 1.0f : 1e-3f);
        if (t == 1) memset(xf[t], 0, 32 * sizeof(float));        /* an all-zero block: d = 0 */
        if (t == 2) xf[t][0] = 1e-5f, memset(xf[t] + 1, 0, 31 * sizeof(float));  /* d a subnormal half */
        cb_quantize_row_q80(xf[t], K, xa[t]);
        for (int32_t b = 0; b * 32 < K; b++)
            CHECK(quantizer_ok(xf[t] + 32 * b, K - 32 * b < 32 ? K - 32 * b : 32, &xa[t][b]));
    }
}

int main(void) {
    printf("simd level %s\n", cb_simd_name());
    static const int32_t Rs[][2] = {{0, 1}, {0, 3}, {0, 4}, {5, 17}, {3, 24}, {23, 24}};
    static const int32_t Ks[] = {32, 64, 96, 128, 160, 40, 70, 17}, DT[] = {CB_Q8_0, CB_Q5_0};
    unsigned s = 23;
    for (size_t e = 0; e < 2 * sizeof Ks / sizeof Ks[0]; e++) {
        int32_t dt = DT[e / (sizeof Ks / sizeof Ks[0])], K = Ks[e % (sizeof Ks / sizeof Ks[0])], nb = (K + 31) / 32;
        size_t bb = dt == CB_Q8_0 ? 34 : 22;
        if (dt == CB_Q5_0 && K % 32) continue;               /* q5_0 rows are whole blocks */
        size_t bytes = (size_t)cb_matrix_data_bytes(dt, ROWS, K), map_bytes;
        CHECK(bytes == (size_t)ROWS * (size_t)nb * bb);
        unsigned char *map, *w = guarded(bytes, &map, &map_bytes);
        CHECK(w != NULL);
        if (!w) return 1;
        for (int extreme = 0; extreme < 2; extreme++) {
            fill(&s, dt, w, bytes / bb, K, extreme);
            cb_matrix m = {w, NULL, NULL, dt, ROWS, K};
            for (size_t b = 0; b < sizeof Rs / sizeof Rs[0]; b++)
                for (int64_t nt = 1; nt <= MAX_T; nt++) {
                    int ok = shape(&m, Rs[b][0], Rs[b][1], nt);
                    CHECK(ok);
                    if (!ok) fprintf(stderr, "  dtype %d K=%d rows [%d, %d) tokens %lld extreme %d\n", (int)dt, (int)K,
                                     (int)Rs[b][0], (int)Rs[b][1], (long long)nt, extreme);
                }
        }
        munmap(map, map_bytes);
    }
    CHECK_DONE();
}
