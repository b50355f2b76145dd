/* llama.cpp's table-valued 4-bit blocks (MXFP4, IQ4_NL, IQ4_XS) against their specs written here independently:
 * blocks built from chosen codes and scales, decoded by cb_embed (the scalar row decoder) and by the active
 * level's cb_dot_rows on one-hot tokens (its 8-lane decoder: fma(v, 1, 0) plus zeros is exact), both equal to the
 * spec's value bit for bit (but the dot's zeros, +0); cols that are not whole blocks are refused naming the
 * multiple. Run per level by `make check`. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "colibri.h"
#include "kernels.h"
#include "check.h"

enum { ROWS = 3, COLS = 512 };

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

/* emb equals want bit for bit; dot too, but for the sign of a zero (fma(-0, 1, +0) is +0: the sum's zero). */
static int all_same(float emb[ROWS][COLS], float dot[ROWS][COLS], float want[ROWS][COLS]) {
    int ok = 1;
    for (int r = 0; r < ROWS; r++)
        for (int k = 0; k < COLS; k++)
            ok &= same_bits(emb[r][k], want[r][k]) && (same_bits(dot[r][k], want[r][k]) || dot[r][k] == want[r][k]);
    return ok;
}

static unsigned char rnd_byte(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (unsigned char)(*s >> 24);
}

static void test_mxfp4(void) {
    static const uint8_t es[6] = {0, 1, 2, 127, 130, 200};      /* subnormal 2^-127 .. 2^73 */
    static unsigned char data[ROWS * COLS / 32 * 17];
    static float want[ROWS][COLS], emb[ROWS][COLS], dot[ROWS][COLS];
    unsigned s = 5;
    for (int b = 0; b < ROWS * COLS / 32; b++) {
        unsigned char *blk = data + 17 * b;
        blk[0] = es[b % 6];
        for (int j = 0; j < 16; j++) blk[1 + j] = rnd_byte(&s);
        for (int j = 0; j < 32; j++) {
            int q = j < 16 ? blk[1 + j] & 15 : blk[1 + j - 16] >> 4;
            want[b / (COLS / 32)][b % (COLS / 32) * 32 + j] = ldexpf(e2m1(q), es[b % 6] - 127);
        }
    }
    cb_matrix m = {data, NULL, NULL, CB_MXFP4, ROWS, COLS};
    decode_both(&m, emb, dot);
    CHECK(all_same(emb, dot, want));
    int32_t id = 0;
    m.cols = 40;
    CHECK(cb_embed(&m, &id, 1, emb[0]) == CB_E_INVALID && has(cb_last_error(), "mxfp4 needs cols a multiple of 32"));
}

/* kvalues_iq4nl (ggml-common.h): the 16 levels an i-quant index selects. */
static const int LEVELS[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
/* f16 d values as bits and the floats they are (normal, subnormal 2^-24, largest, negative). */
static const uint16_t HALF_BITS[6] = {0x3C00, 0x3800, 0xC000, 0x0001, 0x7BFF, 0xB266};
static const float HALF_VALUE[6] = {1.0f, 0.5f, -2.0f, 0x1p-24f, 65504.0f, -0.199951171875f};

/* 32 indices packed as 16 bytes (element j < 16 the low nibble of byte j, j >= 16 the high nibble of byte
 * j - 16), drawn at random; their levels into lv. */
static void index_run(unsigned char *qs, int *lv, unsigned *s) {
    for (int j = 0; j < 16; j++) {
        qs[j] = rnd_byte(s);
        lv[j] = LEVELS[qs[j] & 15], lv[16 + j] = LEVELS[qs[j] >> 4];
    }
}

/* IQ4_NL: blocks of 32, an f16 d then 16 index bytes; value d * level. */
static void test_iq4_nl(void) {
    static unsigned char data[ROWS * COLS / 32 * 18];
    static float want[ROWS][COLS], emb[ROWS][COLS], dot[ROWS][COLS];
    unsigned s = 7;
    int lv[32];
    for (int b = 0; b < ROWS * COLS / 32; b++) {
        unsigned char *blk = data + 18 * b;
        blk[0] = HALF_BITS[b % 6] & 0xff, blk[1] = HALF_BITS[b % 6] >> 8;
        index_run(blk + 2, lv, &s);
        float *w = want[b / (COLS / 32)] + b % (COLS / 32) * 32;
        for (int j = 0; j < 32; j++) w[j] = HALF_VALUE[b % 6] * (float)lv[j];
    }
    cb_matrix m = {data, NULL, NULL, CB_IQ4_NL, ROWS, COLS};
    decode_both(&m, emb, dot);
    CHECK(all_same(emb, dot, want));
}

/* IQ4_XS: super-blocks of 256, an f16 d, 16 bits scales_h and 4 bytes scales_l holding 8 six-bit ls (low 4
 * bits in scales_l, nibble s % 2 of byte s / 2; high 2 bits at bit 2s of scales_h), then 8 runs of 16 index
 * bytes; value (d * (ls - 32)) * level, the factor rounded to f32 first. */
static void test_iq4_xs(void) {
    static unsigned char data[ROWS * COLS / 256 * 136];
    static float want[ROWS][COLS], emb[ROWS][COLS], dot[ROWS][COLS];
    unsigned s = 9;
    int lv[32];
    for (int b = 0; b < ROWS * COLS / 256; b++) {
        unsigned char *blk = data + 136 * b;
        blk[0] = HALF_BITS[b % 6] & 0xff, blk[1] = HALF_BITS[b % 6] >> 8;
        uint16_t h = 0;
        memset(blk + 4, 0, 4);
        for (int sb = 0; sb < 8; sb++) {
            int ls = sb == 0 ? 0 : sb == 1 ? 63 : sb == 2 ? 32 : rnd_byte(&s) % 64;
            blk[4 + sb / 2] |= (unsigned char)((ls & 15) << (4 * (sb % 2)));
            h |= (uint16_t)((ls >> 4) << (2 * sb));
            index_run(blk + 8 + 16 * sb, lv, &s);
            float dl = HALF_VALUE[b % 6] * (float)(ls - 32);
            float *w = want[b / (COLS / 256)] + b % (COLS / 256) * 256 + 32 * sb;
            for (int j = 0; j < 32; j++) w[j] = dl * (float)lv[j];
        }
        blk[2] = h & 0xff, blk[3] = h >> 8;
    }
    cb_matrix m = {data, NULL, NULL, CB_IQ4_XS, ROWS, COLS};
    decode_both(&m, emb, dot);
    CHECK(all_same(emb, dot, want));
    int32_t id = 0;
    m.cols = 288;
    CHECK(cb_embed(&m, &id, 1, emb[0]) == CB_E_INVALID && has(cb_last_error(), "iq4_xs needs cols a multiple of 256"));
}

int main(void) {
    test_mxfp4();
    test_iq4_nl();
    test_iq4_xs();
    CHECK_DONE();
}
