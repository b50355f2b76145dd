/* k-quants and iq4_xs x Q8_K on odd shapes: the active level's cb_dot_rows_kq equals the scalar reference bit for
 * bit, and the scalar reference equals an independent formula written here from ggml's block loops (q4_k_r8 /
 * q6_k_r16: their Q4_K / Q6_K blocks interleaved here from colibri.h's description, the formula run on the plain
 * blocks, q6_k_r16's one integer per super-block; row ranges that cut 8- and 16-row groups included) (ggml-quants.c
 * dequantize_row_q4_K / _q5_K / _q6_K walk the codes, ggml_vec_dot_iq4_xs_q8_K_generic the iq4_xs scales; integer
 * sums, then the spec's float order of kernels_kq.c: iq4_xs and q6_k ggml's 8 lanes).
 * The quantizer equals quantize_row_q8_K_ref written out here. K = 1..5 super-blocks, row ranges starting
 * mid-matrix, 1..20 tokens, extreme codes and scales (all 15 / 31 / 63, scale 63 / -128; iq4_xs: blocks of all
 * 0xff (113, ls 63) and all 0x00 (-127, ls 0)) against +-127
 * activations. The weights end at a PROT_NONE page, so a read past the last row faults. Run per level by
 * `make check`. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "colibri.h"
#include "cb_internal.h"
#include "kernels.h"
#include "kquants.h"
#include "kquants_r8.h"
#include "kquants_r16.h"
#include "iquants.h"
#include "check.h"
#include "guarded.h"

enum { MAX_T = 20, MAX_NB = 5, ROWS = 32 };   /* rows: 24, q6_k_r16 32 (whole 16-row groups) */

static cb_q8k_block xk[MAX_T][MAX_NB];
static float xf[MAX_T][MAX_NB * 256], got[MAX_T][ROWS], want[MAX_T][ROWS], naive[MAX_T][ROWS];
static unsigned char plain[ROWS * MAX_NB * 210];    /* q4_k_r8's / q6_k_r16's blocks as Q4_K / Q6_K rows */

/* colibri.h's CB_Q4_K_R8 layout, written out: per 8 rows and block column b a unit of d x 8, dmin x 8, scales
 * 12 x 8, then piece pc = 4p + c of 64 bytes, qword q = row (0 4 1 5 2 6 3 7)[q]'s code bytes 8 pc .. 8 pc + 7. */
static void to_r8(const unsigned char *q4k, unsigned char *r8, int32_t rows, int32_t nb) {
    static const int ROW_OF[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    for (int32_t g = 0; g < rows / 8; g++)
        for (int32_t b = 0; b < nb; b++) {
            unsigned char *u = r8 + ((size_t)g * nb + b) * 1152;
            for (int j = 0; j < 8; j++) {
                const unsigned char *blk = q4k + ((size_t)(8 * g + j) * nb + b) * 144;
                memcpy(u + 2 * j, blk, 2), memcpy(u + 16 + 2 * j, blk + 2, 2), memcpy(u + 32 + 12 * j, blk + 4, 12);
            }
            for (int pc = 0; pc < 16; pc++)
                for (int q = 0; q < 8; q++)
                    memcpy(u + 128 + 64 * pc + 8 * q, q4k + ((size_t)(8 * g + ROW_OF[q]) * nb + b) * 144 + 16 + 8 * pc, 8);
        }
}

/* colibri.h's CB_Q6_K_R16 layout, written out: per 16 rows and block column b a unit of d x 16, then scale j of
 * rows 0..15 at 32 + 16j, then for half h and i < 8 three 64-byte pieces holding row r's 4 bytes at 4r: ql bytes
 * 64h + 4i, ql bytes 64h + 32 + 4i, qh bytes 128 + 32h + 4i. */
static void to_r16(const unsigned char *q6k, unsigned char *r16, int32_t rows, int32_t nb) {
    for (int32_t g = 0; g < rows / 16; g++)
        for (int32_t b = 0; b < nb; b++) {
            unsigned char *u = r16 + ((size_t)g * nb + b) * 3360;
            for (int j = 0; j < 16; j++) {
                const unsigned char *blk = q6k + ((size_t)(16 * g + j) * nb + b) * 210;
                memcpy(u + 2 * j, blk + 208, 2);
                for (int s = 0; s < 16; s++) u[32 + 16 * s + j] = blk[192 + s];
                for (int h = 0; h < 2; h++)
                    for (int i = 0; i < 8; i++) {
                        unsigned char *pc = u + 288 + 64 * (24 * h + 3 * i);
                        memcpy(pc + 4 * j, blk + 64 * h + 4 * i, 4);
                        memcpy(pc + 64 + 4 * j, blk + 64 * h + 32 + 4 * i, 4);
                        memcpy(pc + 128 + 4 * j, blk + 128 + 32 * h + 4 * i, 4);
                    }
            }
        }
}

static float half(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return cb_f16_to_f32(h);
}

/* ggml's loops: codes[256] (unsigned; iq4_xs: the kvalues_iq4nl value), per 32 (q4/q5, iq4_xs: ls - 32) or 16 (q6)
 * elements a scale, per 32 a min. */
static void unpack(int32_t dtype, const unsigned char *b, int32_t q[256], int32_t sc[16], int32_t mn[8]) {
    if (dtype == CB_IQ4_XS) {
        uint16_t h;
        memcpy(&h, b + 2, 2);
        for (int ib = 0; ib < 8; ib += 2, h >>= 4) {
            sc[ib] = ((b[4 + ib / 2] & 0xf) | ((h << 4) & 0x30)) - 32;
            sc[ib + 1] = ((b[4 + ib / 2] >> 4) | ((h << 2) & 0x30)) - 32;
        }
        for (int ib = 0; ib < 8; ib++)
            for (int j = 0; j < 16; j++) {
                q[32 * ib + j] = CB_IQ4_VALUES[b[8 + 16 * ib + j] & 0xf];
                q[32 * ib + j + 16] = CB_IQ4_VALUES[b[8 + 16 * ib + j] >> 4];
            }
        return;
    }
    if (dtype == CB_Q6_K) {
        const unsigned char *ql = b, *qh = b + 128;
        for (int n = 0; n < 256; n += 128, ql += 64, qh += 32)
            for (int l = 0; l < 32; l++) {
                q[n + l] = (ql[l] & 0xF) | ((qh[l] >> 0 & 3) << 4);
                q[n + l + 32] = (ql[l + 32] & 0xF) | ((qh[l] >> 2 & 3) << 4);
                q[n + l + 64] = (ql[l] >> 4) | ((qh[l] >> 4 & 3) << 4);
                q[n + l + 96] = (ql[l + 32] >> 4) | ((qh[l] >> 6 & 3) << 4);
            }
        for (int j = 0; j < 16; j++) sc[j] = (int8_t)b[192 + j];
        return;
    }
    const unsigned char *s = b + 4, *qs = b + (dtype == CB_Q5_K ? 48 : 16), *qh = b + 16;
    for (int j = 0; j < 8; j++) {
        sc[j] = j < 4 ? s[j] & 63 : (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        mn[j] = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
    for (int j = 0; j < 256; j += 64, qs += 32)
        for (int l = 0; l < 32; l++) {
            q[j + l] = qs[l] & 0xF, q[j + l + 32] = qs[l] >> 4;
            if (dtype != CB_Q5_K) continue;
            q[j + l] += (qh[l] >> (j / 32) & 1) << 4;
            q[j + l + 32] += (qh[l] >> (j / 32 + 1) & 1) << 4;
        }
}

/* iq4_xs and q6_k: ggml_vec_dot_iq4_xs_q8_K's / _q6_K_q8_K's AVX2 loops written out: 8 lanes (lane l: elements
 * 4l .. 4l+3 of each 32; q6: its unsigned codes, then minus 32 * (sc[2l] * bsum[2l] + sc[2l+1] * bsum[2l+1]), the
 * bsums of 16 activation codes counted here), their super-block's integers times d * y.d added per lane, then
 * hsum_float_8. */
static float ggml_lanes_dot(int32_t dtype, const unsigned char *row, int32_t nb, size_t bb, const cb_q8k_block *x) {
    float acc[8] = {0}, h[4];
    for (int32_t b = 0; b < nb; b++, row += bb, x++) {
        int32_t q[256], sc[16], mn[8], lane[8] = {0}, g = dtype == CB_Q6_K ? 16 : 32;
        unpack(dtype, row, q, sc, mn);
        for (int k = 0; k < 256; k++) lane[(k % 32) / 4] += sc[k / g] * q[k] * x->qs[k];
        for (int l = 0; l < 8 && dtype == CB_Q6_K; l++)
            for (int k = 32 * l; k < 32 * l + 32; k++) lane[l] -= 32 * sc[k / 16] * x->qs[k];
        float d = half(row + (dtype == CB_Q6_K ? 208 : 0)) * x->d;
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lane[l], acc[l]);
    }
    for (int i = 0; i < 4; i++) h[i] = acc[i + 4] + acc[i];
    float lo = h[0] + h[2], hi = h[1] + h[3];
    return lo + hi;
}

/* q6_k_r16's order on its plain Q6_K blocks: one integer per super-block, sum sc[k / 16] * (q - 32) * a, then
 * s = fma(d * y.d, I, s). */
static float one_integer_q6_dot(const unsigned char *row, int32_t nb, const cb_q8k_block *x) {
    float s = 0.0f;
    for (int32_t b = 0; b < nb; b++, row += 210, x++) {
        int32_t q[256], sc[16], mn[8], I = 0;
        unpack(CB_Q6_K, row, q, sc, mn);
        for (int k = 0; k < 256; k++) I += sc[k / 16] * (q[k] - 32) * x->qs[k];
        s = fmaf(half(row + 208) * x->d, (float)I, s);
    }
    return s;
}

static float spec_dot(int32_t dtype, const unsigned char *row, int32_t nb, size_t bb, const cb_q8k_block *x) {
    if (dtype == CB_Q6_K_R16) return one_integer_q6_dot(row, nb, x);
    if (dtype == CB_IQ4_XS || dtype == CB_Q6_K) return ggml_lanes_dot(dtype, row, nb, bb, x);
    float s = 0.0f;
    for (int32_t b = 0; b < nb; b++, row += bb, x++) {
        int32_t q[256], sc[16], mn[8], I = 0, M = 0;
        unpack(dtype, row, q, sc, mn);
        for (int k = 0; k < 256; k++) I += sc[k / 32] * q[k] * x->qs[k];
        for (int k = 0; k < 256; k++) M += mn[k / 32] * x->qs[k];
        s = fmaf(half(row) * x->d, (float)I, s);
        s = fmaf(-(half(row + 2) * x->d), (float)M, s);
    }
    return s;
}

/* quantize_row_q8_K_ref, written out: the first largest |x| sets iscale = -127 / max; codes rint, min 127. */
static int quantizer_ok(const float *x, const cb_q8k_block *y) {
    float amax = 0.0f, max = 0.0f;
    for (int k = 0; k < 256; k++)
        if (fabsf(x[k]) > amax) amax = fabsf(x[k]), max = x[k];
    float iscale = amax ? -127.0f / max : 0.0f;
    if (memcmp(&y->d, &(float){amax ? 1.0f / iscale : 0.0f}, 4)) return 0;
    for (int g = 0; g < 16; g++) {
        int32_t sum = 0;
        for (int k = 16 * g; k < 16 * g + 16; k++) {
            float v = rintf(iscale * x[k]);
            int32_t c = amax ? (int32_t)(v < 127.0f ? v : 127.0f) : 0;
            if (y->qs[k] != c) return 0;
            sum += c;
        }
        if (y->bsums[g] != sum || (g % 2 && y->bsums32[g / 2] != y->bsums[g - 1] + sum)) return 0;
    }
    return 1;
}

/* The plain encoding of a row-interleaved one (q4_k_r8: Q4_K, q6_k_r16: Q6_K), else 0. */
static int32_t plain_of(int32_t dtype) {
    return dtype == CB_Q4_K_R8 ? CB_Q4_K : dtype == CB_Q6_K_R16 ? CB_Q6_K : 0;
}

/* q4_k_r8 / q6_k_r16 on the exact-weights path (w8a8 off, f32 inputs): the level's cb_dot_rows gives the plain
 * matrix's bits (the scalar decoder's, whatever the level). */
static int exact_regrouped(const cb_matrix *m, int32_t r0, int32_t r1, int64_t nt) {
    const float *xs[MAX_T];
    float *g[MAX_T], *h[MAX_T];
    for (int t = 0; t < MAX_T; t++) xs[t] = xf[t], g[t] = got[t], h[t] = want[t];
    cb_matrix q = {plain, NULL, NULL, plain_of(m->dtype), m->rows, m->cols};
    cb_dot_rows(m, r0, r1, xs, g, nt);
    cb_dot_rows_scalar(&q, r0, r1, xs, h, nt);
    for (int t = 0; t < nt; t++)
        for (int32_t r = r0; r < r1; r++)
            if (memcmp(&got[t][r], &want[t][r], 4)) return 0;
    return 1;
}

static int shape(const cb_matrix *m, int32_t r0, int32_t r1, int64_t nt) {
    const cb_q8k_block *xs[MAX_T];
    float *g[MAX_T], *h[MAX_T];
    int32_t nb = m->cols / 256;
    size_t rb = (size_t)cb_row_bytes(m->dtype, m->cols);
    for (int t = 0; t < MAX_T; t++) xs[t] = xk[t], g[t] = got[t], h[t] = want[t];
    memset(got, 0, sizeof got), memset(want, 0, sizeof want);
    cb_dot_rows_kq(m, r0, r1, xs, g, nt);
    cb_dot_rows_kq_scalar(m, r0, r1, xs, h, nt);
    int laid = plain_of(m->dtype) != 0;         /* the formula on the plain blocks (q4_k_r8: Q4_K's) */
    for (int t = 0; t < nt; t++)
        for (int32_t r = r0; r < r1; r++)
            naive[t][r] = spec_dot(m->dtype == CB_Q4_K_R8 ? CB_Q4_K : m->dtype,
                                   (laid ? plain : (const unsigned char *)m->data) + (size_t)r * rb, nb,
                                   rb / (size_t)nb, xk[t]);
    for (int t = 0; t < nt; t++)
        for (int32_t r = r0; r < r1; r++)
            if (memcmp(&got[t][r], &want[t][r], 4) || memcmp(&want[t][r], &naive[t][r], 4)) return 0;
    return !laid || exact_regrouped(m, r0, r1, nt);
}

/* Random blocks (finite f16 factors), or extreme ones: every code and scale byte at its top, d = 1. */
static void fill(unsigned *s, int32_t dtype, unsigned char *w, size_t bytes, size_t bb, int32_t K, int extreme) {
    for (size_t i = 0; i < bytes; i++) w[i] = extreme ? 0xff : (unsigned char)(rnd(s) * 128.0f + 128.0f);
    for (size_t b = 0; b < bytes / bb; b++) {
        unsigned char *blk = w + b * bb;
        uint16_t d = extreme ? 0x3c00 : (uint16_t)(0x2000 + (unsigned)((rnd(s) + 1.0f) * 4096.0f)), dm = d ^ 0x8000;
        if (dtype == CB_IQ4_XS && extreme && b % 2) memset(blk, 0, bb);   /* codes -127, ls - 32 = -32 */
        if (dtype == CB_Q6_K) {
            memcpy(blk + 208, &d, 2);
            if (extreme) memset(blk + 192, 0x80, 8);    /* half the scales -128, half -1 (0xff) */
        } else {
            memcpy(blk, &d, 2);
            if (dtype != CB_IQ4_XS) memcpy(blk + 2, &dm, 2);
        }
    }
    for (int t = 0; t < MAX_T; t++) {
        for (int32_t k = 0; k < K; k++)
            xf[t][k] = extreme ? ((t + k) % 2 ? -1.0f : 1.0f) : rnd(s) * (t % 3 ? 1.0f : 1e-3f);
        if (t == 1) memset(xf[t], 0, 256 * sizeof(float));     /* an all-zero block: d = 0 */
        cb_quantize_row_q8k(xf[t], K, xk[t]);
        for (int32_t b = 0; b < K / 256; b++) CHECK(quantizer_ok(xf[t] + 256 * b, &xk[t][b]));
    }
}

int main(void) {
    printf("simd level %s\n", cb_simd_name());
    /* row ranges; those past a matrix's rows are skipped (the last row of each matrix is in some range) */
    static const int32_t Rs[][2] = {{0, 1}, {0, 3}, {0, 4}, {5, 17}, {3, 24}, {23, 24}, {8, 24}, {0, 16},
                                    {16, 32}, {7, 32}};
    static const int32_t DT[] = {CB_Q4_K, CB_Q5_K, CB_Q6_K, CB_IQ4_XS, CB_Q4_K_R8, CB_Q6_K_R16};
    unsigned s = 17;
    for (int e = 0; e < 6; e++)
        for (int32_t nb = 1; nb <= (DT[e] == CB_IQ4_XS || DT[e] == CB_Q6_K_R16 ? 3 : MAX_NB); nb++) {
            int32_t K = 256 * nb;
            int32_t rows = DT[e] == CB_Q6_K_R16 ? 32 : 24;
            size_t bytes = (size_t)cb_matrix_data_bytes(DT[e], rows, K), map_bytes;
            unsigned char *map, *w = guarded(bytes, &map, &map_bytes);
            CHECK(w != NULL);
            if (!w) return 1;
            for (int extreme = 0; extreme < 2; extreme++) {
                if (DT[e] == CB_Q4_K_R8) {      /* Q4_K blocks, then their interleaving */
                    fill(&s, CB_Q4_K, plain, bytes, 144, K, extreme);
                    to_r8(plain, w, rows, nb);
                } else if (DT[e] == CB_Q6_K_R16) {
                    fill(&s, CB_Q6_K, plain, bytes, 210, K, extreme);
                    to_r16(plain, w, rows, nb);
                } else
                    fill(&s, DT[e], w, bytes, bytes / (size_t)rows / (size_t)nb, K, extreme);
                cb_matrix m = {w, NULL, NULL, DT[e], rows, K};
                for (size_t b = 0; b < sizeof Rs / sizeof Rs[0]; b++)
                    for (int64_t nt = 1; nt <= MAX_T && Rs[b][1] <= rows; nt++) {
                        int ok = shape(&m, Rs[b][0], Rs[b][1], nt);
                        CHECK(ok);
                        if (!ok) fprintf(stderr, "  dtype %d K=%d rows [%d, %d) tokens %lld extreme %d\n", (int)DT[e],
                                         (int)K, (int)Rs[b][0], (int)Rs[b][1], (long long)nt, extreme);
                    }
            }
            munmap(map, map_bytes);
        }
    CHECK_DONE();
}
