/* Q8_0 / Q5_0 / MXFP4 / IQ4_NL x Q8_0 and Q5_1 x Q8_1 on odd shapes: the active level's cb_dot_rows_q80 equals the
 * scalar reference bit for bit, and the scalar reference equals the formula written here from ggml's
 * ggml_vec_dot_q5_0_q8_0 / _mxfp4_q8_0 / _iq4_nl_q8_0 generic loops (per block the integer sum, then the spec's
 * float step of kernels_q80.c; mxfp4's factor 2^(e - 128) by ldexpf) and, for q8_0 and q5_1, from
 * ggml_vec_dot_q8_0_q8_0's / _q5_1_q8_1's AVX2 loops (their 8 float lanes and hsum_float_8). The quantizer equals
 * ggml-cpu's x86 quantize_row_q8_0 / _q8_1 written out (d = f16(amax / 127) by the compiler's _Float16 conversion,
 * codes rint(x * (127 / amax)), s = f16(amax / 127 * sum)). K = 1..5 blocks and short last blocks (colibri's own
 * q8_0 rows), row ranges starting mid-matrix, 1..20 tokens, extreme codes (-128, 127; the other encodings' ends)
 * against +-127 activations. The weights end at a PROT_NONE page, so a read past the last row faults. Run per
 * level by `make check`. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "colibri.h"
#include "kernels.h"
#include "q80.h"
#include "mxfp4.h"
#include "iquants.h"
#include "check.h"
#include "guarded.h"

enum { MAX_T = 20, MAX_K = 5 * 32, ROWS = 24 };

static cb_q80_block xa[MAX_T][2 * MAX_K / 32];    /* room for a Q8_1 row: the blocks, then their s */
static float xf[MAX_T][MAX_K], got[MAX_T][ROWS], want[MAX_T][ROWS], naive[MAX_T][ROWS];

static float half(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return cb_f16_to_f32(h);
}

static size_t block_bytes(int32_t dtype) {
    return dtype == CB_Q8_0 ? 34 : dtype == CB_Q5_0 ? 22 : dtype == CB_Q5_1 ? 24 : dtype == CB_MXFP4 ? 17 : 18;
}

/* Block b's 32 integer codes: q8_0 as stored; q5_0 / q5_1 as ggml's generic vec_dot loops build them; mxfp4 and
 * iq4_nl the value of each nibble (qs[j] & 0xf: element j, qs[j] >> 4: element j + 16). */
static void codes(int32_t dtype, const unsigned char *blk, int32_t c[32]) {
    if (dtype == CB_Q8_0) {
        for (int k = 0; k < 32; k++) c[k] = (int8_t)blk[2 + k];
        return;
    }
    if (dtype == CB_MXFP4 || dtype == CB_IQ4_NL) {
        const int8_t *kv = dtype == CB_MXFP4 ? CB_MXFP4_VALUES : CB_IQ4_VALUES;
        const unsigned char *qs = blk + (dtype == CB_MXFP4 ? 1 : 2);
        for (int j = 0; j < 16; j++) c[j] = kv[qs[j] & 0xf], c[j + 16] = kv[qs[j] >> 4];
        return;
    }
    size_t o = dtype == CB_Q5_0 ? 2 : 4;
    int32_t off = dtype == CB_Q5_0 ? 16 : 0;
    uint32_t qh;
    memcpy(&qh, blk + o, 4);
    for (int j = 0; j < 16; j++) {
        c[j] = ((blk[o + 4 + j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - off;
        c[j + 16] = ((blk[o + 4 + j] >> 4) | ((qh >> (j + 12)) & 0x10)) - off;
    }
}

/* q8_0 / q5_1: ggml_vec_dot_q8_0_q8_0's / _q5_1_q8_1's AVX2 loops written out: 8 float lanes (lane l: codes
 * 4l .. 4l+3) taking fma(d_x * d_y, lane sum) per block, then hsum_float_8 (high half + low half, then movehl, then
 * movehdup); q5_1 adds its summs (m * s per block, contracted to an fma as gcc builds ggml) last. */
static float ggml_lanes_dot(int32_t dtype, const unsigned char *row, int32_t nb, size_t bb, const cb_q80_block *x) {
    float acc[8] = {0}, h[4], summs = 0.0f;
    const float *sa = (const float *)(x + nb);
    for (int32_t b = 0; b < nb; b++, row += bb) {
        int32_t c[32];
        codes(dtype, row, c);
        float d = half(row) * x[b].d;
        for (int l = 0; l < 8; l++) {
            int32_t sum = 0;
            for (int k = 4 * l; k < 4 * l + 4; k++) sum += c[k] * x[b].qs[k];
            acc[l] = fmaf(d, (float)sum, acc[l]);
        }
        if (dtype == CB_Q5_1) summs = fmaf(half(row + 2), sa[b], summs);
    }
    for (int i = 0; i < 4; i++) h[i] = acc[i + 4] + acc[i];
    float lo = h[0] + h[2], hi = h[1] + h[3];
    return (lo + hi) + summs;
}

static float spec_dot(int32_t dtype, const unsigned char *row, int32_t nb, size_t bb, const cb_q80_block *x) {
    if (dtype == CB_Q8_0 || dtype == CB_Q5_1) return ggml_lanes_dot(dtype, row, nb, bb, x);
    float s = 0.0f;
    for (int32_t b = 0; b < nb; b++, row += bb) {
        int32_t I = 0, c[32];
        codes(dtype, row, c);
        for (int k = 0; k < 32; k++) I += c[k] * x[b].qs[k];
        float dw = dtype == CB_MXFP4 ? ldexpf(1.0f, (int)row[0] - 128) : half(row);
        s = fmaf(dw * x[b].d, (float)I, s);
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

/* quantize_row_q8_1's s of that block: f16(amax / 127 * sum of its codes). */
static int q81_s_ok(const float *x, const cb_q80_block *y, float s) {
    float amax = 0.0f;
    int32_t sum = 0;
    for (int k = 0; k < 32; k++) amax = fabsf(x[k]) > amax ? fabsf(x[k]) : amax, sum += y->qs[k];
    float want = (float)(_Float16)(amax / 127.0f * (float)sum);
    return !memcmp(&s, &want, 4);
}

static int shape(const cb_matrix *m, int32_t r0, int32_t r1, int64_t nt) {
    const cb_q80_block *xs[MAX_T];
    float *g[MAX_T], *h[MAX_T];
    int32_t nb = (m->cols + 31) / 32;
    size_t bb = block_bytes(m->dtype);
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

/* Random blocks (finite f16 d and q5_1 m, either sign; mxfp4 E8M0 bytes 112..143), or extreme ones: q8_0 codes -128
 * and 127 alternating, the others' bytes alternating 0x00 / 0xff by block (q5_0 codes -16 / 15, q5_1 0 / 31, iq4_nl
 * -127 / 113, mxfp4 0 / -12), d = 1 (mxfp4: e = 128, a factor of 1). */
static void fill(unsigned *s, int32_t dtype, unsigned char *w, size_t nblocks, int32_t K, int extreme) {
    size_t bb = block_bytes(dtype);
    for (size_t b = 0; b < nblocks; b++) {
        unsigned char *blk = w + b * bb;
        for (size_t k = 0; k < bb; k++)
            blk[k] = extreme ? (dtype == CB_Q8_0 ? (k % 2 ? 0x80 : 0x7f) : (b % 2 ? 0x00 : 0xff))
                             : (unsigned char)(int)(rnd(s) * 128.0f + 128.0f);
        if (dtype == CB_MXFP4) {
            blk[0] = extreme ? 128 : (unsigned char)(128 + (int)(rnd(s) * 16.0f));
            continue;
        }
        for (int o = 0; o < (dtype == CB_Q5_1 ? 4 : 2); o += 2) {     /* d (and q5_1's m) */
            uint16_t d = extreme ? 0x3c00 : (uint16_t)(0x1800 + (unsigned)((rnd(s) + 1.0f) * 4096.0f));
            if (!extreme && rnd(s) < 0.0f) d ^= 0x8000;
            memcpy(blk + o, &d, 2);
        }
    }
    for (int t = 0; t < MAX_T; t++) {
        for (int32_t k = 0; k < K; k++)
            xf[t][k] = extreme ? ((t + k) % 2 ? -1.0f : 1.0f) : rnd(s) * (t % 3 ? 1.0f : 1e-3f);
        if (t == 1) memset(xf[t], 0, 32 * sizeof(float));        /* an all-zero block: d = 0 */
        if (t == 2) xf[t][0] = 1e-5f, memset(xf[t] + 1, 0, 31 * sizeof(float));  /* d a subnormal half */
        if (dtype == CB_Q5_1) cb_quantize_row_q81(xf[t], K, xa[t]);
        else cb_quantize_row_q80(xf[t], K, xa[t]);
        for (int32_t b = 0; b * 32 < K; b++) {
            CHECK(quantizer_ok(xf[t] + 32 * b, K - 32 * b < 32 ? K - 32 * b : 32, &xa[t][b]));
            if (dtype == CB_Q5_1) CHECK(q81_s_ok(xf[t] + 32 * b, &xa[t][b], cb_q81_s(xa[t], (size_t)K / 32)[b]));
        }
    }
}

int main(void) {
    printf("simd level %s\n", cb_simd_name());
    static const int32_t Rs[][2] = {{0, 1}, {0, 3}, {0, 4}, {5, 17}, {3, 24}, {23, 24}};
    static const int32_t Ks[] = {32, 64, 96, 128, 160, 40, 70, 17};
    static const int32_t DT[] = {CB_Q8_0, CB_Q5_0, CB_Q5_1, CB_MXFP4, CB_IQ4_NL};
    enum { NK = sizeof Ks / sizeof Ks[0] };
    unsigned s = 23;
    for (size_t e = 0; e < sizeof DT / sizeof DT[0] * NK; e++) {
        int32_t dt = DT[e / NK], K = Ks[e % NK], nb = (K + 31) / 32;
        size_t bb = block_bytes(dt);
        if (dt != CB_Q8_0 && K % 32) continue;                /* the others' rows are whole blocks */
        if (dt != CB_Q8_0 && dt != CB_Q5_0 && K != 64 && K != 96) continue;   /* the newer three: two widths */
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
