/* llama.cpp's table-valued 4-bit blocks (MXFP4) against their specs written here independently: blocks built
 * from chosen codes and scales, decoded by cb_embed (the scalar row decoder) and by the active level's
 * cb_dot_rows on one-hot tokens (its 8-lane decoder: fma(v, 1, 0) plus zeros is exact), both equal to the spec's
 * value bit for bit; cols that are not whole blocks are refused naming the multiple. Run per level by
 * `make check`. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "colibri.h"
#include "kernels.h"
#include "check.h"

enum { ROWS = 3, COLS = 64 };

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

/* Row r of m decoded both ways: cb_embed into emb, the active level's dot on one-hot tokens into dot. */
static void decode_both(const cb_matrix *m, float emb[ROWS][COLS], float dot[ROWS][COLS]) {
    static float eye[COLS][COLS], out[COLS][ROWS];
    const float *xs[COLS];
    float *outs[COLS];
    for (int k = 0; k < COLS; k++) {
        memset(eye[k], 0, sizeof eye[k]);
        eye[k][k] = 1.0f;
        xs[k] = eye[k], outs[k] = out[k];
    }
    for (int32_t r = 0; r < ROWS; r++) CHECK_OK(cb_embed(m, &r, 1, emb[r]));
    cb_dot_rows(m, 0, ROWS, xs, outs, COLS);
    for (int r = 0; r < ROWS; r++)
        for (int k = 0; k < COLS; k++) dot[r][k] = out[k][r];
}

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* OCP MX FP4 (E2M1): sign bit 3, then 2 exponent bits and 1 mantissa bit (0 0.5 1 1.5 2 3 4 6); the block's
 * value is E2M1 * 2^(e - 127), e the E8M0 byte. Code 8 (-0) is +0: ggml's table holds 0 there. */
static float e2m1(int q) {
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    return q == 8 ? 0.0f : q & 8 ? -mag[q & 7] : mag[q & 7];
}

static void test_mxfp4(void) {
    static const uint8_t es[ROWS * COLS / 32] = {0, 1, 2, 127, 130, 200};   /* subnormal 2^-127 .. 2^73 */
    unsigned char data[ROWS * COLS / 32 * 17];
    float want[ROWS][COLS], emb[ROWS][COLS], dot[ROWS][COLS];
    unsigned s = 5;
    for (int b = 0; b < ROWS * COLS / 32; b++) {
        unsigned char *blk = data + 17 * b;
        blk[0] = es[b];
        for (int j = 0; j < 16; j++) {
            s = s * 1664525u + 1013904223u;
            blk[1 + j] = (unsigned char)(s >> 24);
        }
        for (int j = 0; j < 32; j++) {
            int q = j < 16 ? blk[1 + j] & 15 : blk[1 + j - 16] >> 4;
            want[b / 2][b % 2 * 32 + j] = ldexpf(e2m1(q), es[b] - 127);
        }
    }
    cb_matrix m = {data, NULL, NULL, CB_MXFP4, ROWS, COLS};
    decode_both(&m, emb, dot);
    int ok = 1;
    for (int r = 0; r < ROWS; r++)
        for (int k = 0; k < COLS; k++) ok &= same_bits(emb[r][k], want[r][k]) && same_bits(dot[r][k], want[r][k]);
    CHECK(ok);
    int32_t id = 0;
    m.cols = 40;
    CHECK(cb_embed(&m, &id, 1, emb[0]) == CB_E_INVALID && has(cb_last_error(), "mxfp4 needs cols a multiple of 32"));
}

int main(void) {
    test_mxfp4();
    CHECK_DONE();
}
