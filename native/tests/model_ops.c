/* Whole-model ops: matmul (bias, batch/thread invariance), rmsnorm, embed, rope (both layouts), log_softmax,
 * kv_write rounding, attention vs a double reference and chunked == whole; one bad-argument case per op. */
#include <math.h>
#include <string.h>
#include "colibri.h"
#include "check.h"
#include "kernels.h"   /* cb_row_decoder_of (tests build with -Isrc) */

static int has(const char *msg, const char *part) { return strstr(msg, part) != NULL; }

static void test_matmul(cb_engine *e1, cb_engine *e3) {
    enum { R = 70, K = 37, N = 37 };
    static float w[R * K], b[R], x[N * K], y[N * R], y1[R], y3[N * R];
    unsigned s = 3;
    for (int i = 0; i < R * K; i++) w[i] = rnd(&s);
    for (int i = 0; i < R; i++) b[i] = rnd(&s);
    for (int i = 0; i < N * K; i++) x[i] = rnd(&s);
    cb_matrix m = {w, NULL, NULL, CB_F32, R, K};
    CHECK_OK(cb_matmul(e3, &m, b, x, N, y));
    for (int t = 0; t < N; t++)
        for (int r = 0; r < R; r++) {
            double ref = b[r];
            for (int k = 0; k < K; k++) ref += (double)w[r * K + k] * x[t * K + k];
            CHECK(fabs(ref - y[t * R + r]) < 1e-4);
        }
    CHECK_OK(cb_matmul(e1, &m, b, x, N, y3));
    CHECK(memcmp(y, y3, sizeof y) == 0);
    CHECK_OK(cb_matmul(e3, &m, b, x + 17 * K, 1, y1));      /* one token == the same token inside 37 */
    CHECK(memcmp(y1, y + 17 * R, sizeof y1) == 0);
    const cb_matrix *ws[2] = {&m, &m};                       /* batch of two on strided inputs/outputs */
    const float *bs[2] = {NULL, b}, *xs[2] = {x, x + K};
    float *os[2] = {y3, y3 + R};
    CHECK_OK(cb_matmul_batch(e3, 2, ws, bs, xs, 2 * K, os, 2 * R, N / 2));
    CHECK(memcmp(y3 + 3 * R, y + 3 * R, R * 4) == 0);        /* matrix 1, token 1 = x row 3 */
    CHECK(y3[2 * R] + b[0] == y[2 * R]);                     /* matrix 0 (no bias), token 1 = x row 2 */
    m.data = NULL;
    CHECK(cb_matmul(e1, &m, NULL, x, 1, y1) == CB_E_INVALID && has(cb_engine_last_error(e1), "matrix 0: data is NULL"));
    m.data = w;
    CHECK(cb_matmul_batch(e1, 2, ws, bs, xs, K - 1, os, R, 2) == CB_E_INVALID && has(cb_engine_last_error(e1), "x_stride"));
}

static void test_rmsnorm_softmax(void) {
    enum { N = 3, D = 19 };
    float x[N * D], wt[D], y[N * D], z[N * D];
    unsigned s = 5;
    for (int i = 0; i < N * D; i++) x[i] = rnd(&s) * 3;
    for (int i = 0; i < D; i++) wt[i] = rnd(&s);
    CHECK_OK(cb_rmsnorm(x, N, D, wt, 1e-5f, y));
    for (int t = 0; t < N; t++) {
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)x[t * D + i] * x[t * D + i];
        for (int i = 0; i < D; i++) CHECK(fabs(x[t * D + i] / sqrt(ss / D + 1e-5) * wt[i] - y[t * D + i]) < 1e-5);
    }
    memcpy(z, x, sizeof z);
    CHECK_OK(cb_rmsnorm(z, N, D, wt, 1e-5f, z));             /* in place */
    CHECK(memcmp(y, z, sizeof y) == 0);
    CHECK(cb_rmsnorm(x, N, 0, wt, 1e-5f, y) == CB_E_INVALID && has(cb_last_error(), "dim 0"));
    CHECK_OK(cb_log_softmax(x, N, D, y));
    for (int t = 0; t < N; t++) {
        double sum = 0;
        for (int i = 0; i < D; i++) sum += exp(y[t * D + i]);
        CHECK(fabs(sum - 1) < 1e-5);
    }
    x[D + 4] = NAN;
    CHECK(cb_log_softmax(x, N, D, y) == CB_E_NONFINITE && has(cb_last_error(), "x[1, 4]"));
}

static void test_embed(void) {
    uint16_t w[3 * 4] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0, 0, 0, 0, 0x3800, 0x3800, 0x3800, 0x3800};
    cb_matrix m = {w, NULL, NULL, CB_F16, 3, 4};
    int32_t ids[2] = {0, 2};
    float out[8];
    CHECK_OK(cb_embed(&m, ids, 2, out));
    CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == ldexpf(1.0f, -24) && out[3] == 65504.0f && out[5] == 0.5f);
    int8_t q[2 * 3] = {1, -2, 127, 4, 5, 6};
    float sc[2] = {0.5f, 0.25f};
    cb_matrix mi = {q, sc, NULL, CB_I8_ROW, 2, 3};
    ids[0] = 1;
    CHECK_OK(cb_embed(&mi, ids, 1, out));
    CHECK(out[0] == 1.0f && out[1] == 1.25f && out[2] == 1.5f);
    ids[1] = 3;
    CHECK(cb_embed(&m, ids, 2, out) == CB_E_INVALID && has(cb_last_error(), "ids[1] = 3 outside [0, 3)"));
}

/* Every row of CB_ENCODING_LIST is in the encoding table at its code and has the required scalar
 * kernel (its row decoder); a code past the list is refused. */
static void test_encoding_tables(void) {
    for (int32_t d = 0; d < CB_DTYPE_COUNT; d++)
        CHECK(cb_encoding_of(d) && cb_encoding_of(d)->dtype == d && cb_row_decoder_of(d) != NULL);
    CHECK(cb_row_decoder_of(CB_DTYPE_COUNT) == NULL && cb_encoding_of(-1) == NULL);
    float w[4] = {0}, out[4];
    int32_t id = 0;
    cb_matrix m = {w, NULL, NULL, CB_DTYPE_COUNT, 1, 4};
    CHECK(cb_embed(&m, &id, 1, out) == CB_E_INVALID && has(cb_last_error(), "unknown dtype"));
    /* k-quants (scale kind SUPER): a row of cols that are not whole 256-element super-blocks is refused */
    static unsigned char blk[144];
    float row[256];
    cb_matrix k = {blk, NULL, NULL, CB_Q4_K, 1, 255};
    CHECK(cb_matrix_data_bytes(CB_Q4_K, 1, 255) == -1 && cb_matrix_data_bytes(CB_Q4_K, 2, 512) == 2 * 2 * 144);
    CHECK(cb_embed(&k, &id, 1, row) == CB_E_INVALID && has(cb_last_error(), "q4_k needs cols a multiple of 256"));
    k.cols = 256;
    CHECK_OK(cb_embed(&k, &id, 1, row));
}

static void test_rope(void) {
    enum { H = 2, D = 10, ROT = 6 };
    float inv[ROT / 2] = {1.0f, 0.1f, 0.01f}, x[2 * H * D], y[2 * H * D];
    int32_t pos[2] = {0, 7};
    unsigned s = 9;
    for (int i = 0; i < 2 * H * D; i++) x[i] = rnd(&s);
    for (int il = 0; il < 2; il++) {
        memcpy(y, x, sizeof y);
        cb_rope r = {ROT, il, 1.0f, inv};
        CHECK_OK(cb_rope_apply(&r, y, 2, H, H * D, D, 2, pos));
        for (int h = 0; h < H; h++) {
            const float *a = x + (H + h) * D + 2, *o = y + (H + h) * D + 2;
            for (int i = 0; i < ROT / 2; i++) {
                double ang = 7.0 * inv[i], u = il ? a[2 * i] : a[i], v = il ? a[2 * i + 1] : a[i + ROT / 2];
                CHECK(fabs(o[i] - (u * cos(ang) - v * sin(ang))) < 1e-5);
                CHECK(fabs(o[i + ROT / 2] - (v * cos(ang) + u * sin(ang))) < 1e-5);
            }
            CHECK(y[(H + h) * D] == x[(H + h) * D] && y[(H + h) * D + 9] == x[(H + h) * D + 9]);  /* outside: kept */
            for (int i = 0; il && i < ROT / 2; i++)              /* position 0, interleaved: de-interleaved copy */
                CHECK(y[h * D + 2 + i] == x[h * D + 2 + 2 * i] && y[h * D + 2 + ROT / 2 + i] == x[h * D + 3 + 2 * i]);
        }
        if (!il) CHECK(memcmp(y, x, H * D * 4) == 0);        /* position 0, rotate-half: identity */
    }
    cb_rope bad = {5, 0, 1.0f, inv};
    CHECK(cb_rope_apply(&bad, y, 2, H, H * D, D, 2, pos) == CB_E_INVALID && has(cb_last_error(), "rot_dim 5"));
}

static void test_kv_write(void) {
    cb_attn a = {1, 1, 8, 8, 8, 2, CB_F16, 0, 1.0f, NULL};
    uint16_t kc[2 * 2 * 8];
    float k[8] = {1.0f, 65520.0f, 65519.0f, ldexpf(1.0f, -24), ldexpf(3.0f, -26), -0.0f, 1.0f + ldexpf(1.0f, -11), NAN};
    int32_t start[2] = {0, 1}, pos0[1] = {3}, tbl[2] = {1, 0}, nt[1] = {2};
    const int32_t *tables[1] = {tbl};
    memset(kc, 0, sizeof kc);
    CHECK_OK(cb_kv_write(&a, kc, NULL, 2, 1, start, pos0, tables, nt, k, NULL));
    const uint16_t *row = kc + (0 * 2 + 1) * 8;               /* position 3: block tbl[1] = 0, slot 1 */
    CHECK(row[0] == 0x3c00 && row[1] == 0x7c00 && row[2] == 0x7bff && row[3] == 0x0001 && row[4] == 0x0001);
    CHECK(row[5] == 0x8000 && row[6] == 0x3c00 && (row[7] & 0x7c00) == 0x7c00 && (row[7] & 0x3ff));
    pos0[0] = 4;
    CHECK(cb_kv_write(&a, kc, NULL, 2, 1, start, pos0, tables, nt, k, NULL) == CB_E_INVALID &&
          has(cb_last_error(), "position 4 needs block_tables[0][2] but n_table[0] = 2"));
}

/* Double-precision causal GQA reference over f32 keys/values held densely [pos, kv head, dim]. */
static void ref_attn(const float *q, const float *kd, const float *vd, int P, int NH, int NKV, int D, int window,
                     int p, double *out) {
    for (int h = 0; h < NH; h++) {
        int g = h / (NH / NKV), lo = window && p - window + 1 > 0 ? p - window + 1 : 0;
        double s[64], m = -1e300, sum = 0;
        for (int j = lo; j <= p; j++) {
            s[j] = 0;
            for (int c = 0; c < D; c++) s[j] += (double)q[h * D + c] * kd[(j * NKV + g) * D + c];
            s[j] *= 0.5;
            m = fmax(m, s[j]);
        }
        for (int j = lo; j <= p; j++) sum += exp(s[j] - m);
        for (int c = 0; c < D; c++) {
            out[h * D + c] = 0;
            for (int j = lo; j <= p; j++) out[h * D + c] += exp(s[j] - m) / sum * vd[(j * NKV + g) * D + c];
        }
    }
    (void)P;
}

static void test_attention(cb_engine *e1, cb_engine *e3) {
    enum { P = 40, NH = 4, NKV = 2, D = 8, BS = 4, NB = 12 };   /* big enough for the pooled path */
    static float q[P * NH * D], k[P * NKV * D], v[P * NKV * D], kc[NB * NKV * BS * D], vc[NB * NKV * BS * D];
    static float out[P * NH * D], part[P * NH * D];
    unsigned s = 21;
    for (int i = 0; i < P * NH * D; i++) q[i] = rnd(&s);
    for (int i = 0; i < P * NKV * D; i++) { k[i] = rnd(&s); v[i] = rnd(&s); }
    int32_t tbl[10] = {2, 0, 3, 11, 5, 9, 1, 10, 4, 7}, nt[1] = {10}, start[2] = {0, P}, pos0[1] = {0};
    const int32_t *tables[1] = {tbl};
    for (int window = 0; window <= 13; window += 13) {
        cb_attn a = {NH, NKV, D, D, D, BS, CB_F32, window, 0.5f, NULL};
        CHECK_OK(cb_kv_write(&a, kc, vc, NB, 1, start, pos0, tables, nt, k, v));
        CHECK_OK(cb_attention(e3, &a, kc, vc, NB, 1, start, pos0, tables, nt, q, out));
        for (int p = 0; p < P; p++) {
            double ref[NH * D];
            ref_attn(q + p * NH * D, k, v, P, NH, NKV, D, window, p, ref);
            for (int i = 0; i < NH * D; i++) CHECK(fabs(ref[i] - out[p * NH * D + i]) < 1e-5);
        }
        for (int p = 0; p < P; p++) {                        /* token by token (decode) == one call, 1 thread */
            int32_t st1[2] = {0, 1}, p1[1] = {p};
            CHECK_OK(cb_attention(e1, &a, kc, vc, NB, 1, st1, p1, tables, nt, q + p * NH * D, part + p * NH * D));
        }
        CHECK(memcmp(out, part, sizeof out) == 0);
    }
    cb_attn a = {NH, NKV, D, D, D, BS, CB_F32, 0, 0.5f, NULL};
    tbl[1] = NB;
    CHECK(cb_attention(e1, &a, kc, vc, NB, 1, start, pos0, tables, nt, q, out) == CB_E_INVALID &&
          has(cb_engine_last_error(e1), "block_tables[0][1] = 12 outside [0, 12)"));
    tbl[1] = 0;
    a.n_heads = 3;
    CHECK(cb_attention(e1, &a, kc, vc, NB, 1, start, pos0, tables, nt, q, out) == CB_E_INVALID &&
          has(cb_engine_last_error(e1), "multiple of n_kv_heads"));
}

/* Random geometries under ASan: pools sized exactly (any stray index is caught), two sequences in one call vs
 * each token alone; f32/f16/bf16, windows, odd block sizes, MLA-style shared pools. */
static void test_attention_random(cb_engine *e1, cb_engine *e3) {
    unsigned s = 77;
    for (int it = 0; it < 40; it++) {
        int nkv = 1 + (int)((rnd(&s) + 1) * 1.5f), G = 1 + (int)((rnd(&s) + 1) * 2.5f), mla = nkv == 1 && rnd(&s) > 0;
        int qk = 2 + (int)((rnd(&s) + 1) * 20), vd = mla ? 1 + (int)((rnd(&s) + 1) * 0.49f * (qk - 1)) : 1 + (int)((rnd(&s) + 1) * 9);
        int vrow = mla ? qk : vd + (int)((rnd(&s) + 1) * 1.5f), bs = 1 + (int)((rnd(&s) + 1) * 4);
        int dt = (int)((rnd(&s) + 1) * 1.5f), window = rnd(&s) > 0 ? 0 : 1 + (int)((rnd(&s) + 1) * 6);
        int len[2] = {1 + (int)((rnd(&s) + 1) * 15), 1 + (int)((rnd(&s) + 1) * 15)}, n = len[0] + len[1];
        cb_attn a = {nkv * G, nkv, qk, vd, vrow, bs, dt, window, 0.3f, NULL};
        int32_t nt[2] = {(len[0] + bs - 1) / bs, (len[1] + bs - 1) / bs}, nb = nt[0] + nt[1];
        int32_t *tbl = malloc(sizeof(int32_t) * (size_t)nb), start[3] = {0, len[0], n}, pos0[2] = {0, 0};
        for (int i = 0; i < nb; i++) tbl[i] = (i * 7 + 3) % nb;
        const int32_t *tables[2] = {tbl, tbl + nt[0]};
        size_t word = dt == CB_F32 ? 4 : 2, kw = (size_t)nb * nkv * bs * qk, vw = (size_t)nb * nkv * bs * vrow;
        void *kc = calloc(kw, word), *vc = mla ? kc : calloc(vw, word);
        float *k = malloc(sizeof(float) * (size_t)n * nkv * qk), *v = malloc(sizeof(float) * (size_t)n * nkv * vrow);
        float *q = malloc(sizeof(float) * (size_t)n * a.n_heads * qk);
        float *o1 = malloc(sizeof(float) * (size_t)n * a.n_heads * vd), *o2 = malloc(sizeof(float) * (size_t)n * a.n_heads * vd);
        for (size_t i = 0; i < (size_t)n * nkv * qk; i++) k[i] = rnd(&s);
        for (size_t i = 0; i < (size_t)n * nkv * vrow; i++) v[i] = rnd(&s);
        for (size_t i = 0; i < (size_t)n * a.n_heads * qk; i++) q[i] = rnd(&s);
        CHECK_OK(cb_kv_write(&a, kc, mla ? NULL : vc, nb, 2, start, pos0, tables, nt, k, mla ? NULL : v));
        CHECK_OK(cb_attention(e3, &a, kc, vc, nb, 2, start, pos0, tables, nt, q, o1));
        for (int sq = 0; sq < 2; sq++)
            for (int i = 0; i < len[sq]; i++) {
                int32_t st1[2] = {0, 1}, p1[1] = {i};
                size_t tok = (size_t)start[sq] + i;
                CHECK_OK(cb_attention(e1, &a, kc, vc, nb, 1, st1, p1, tables + sq, nt + sq, q + tok * a.n_heads * qk,
                                      o2 + tok * a.n_heads * vd));
            }
        CHECK(memcmp(o1, o2, sizeof(float) * (size_t)n * a.n_heads * vd) == 0);
        free(tbl); free(k); free(v); free(q); free(o1); free(o2); free(kc);
        if (!mla) free(vc);
    }
}

int main(void) {
    cb_engine *e1 = NULL, *e3 = NULL;
    CHECK_OK(cb_engine_create(1, NULL, 0, &e1));
    CHECK_OK(cb_engine_create(3, NULL, 0, &e3));
    test_matmul(e1, e3);
    test_rmsnorm_softmax();
    test_embed();
    test_encoding_tables();
    test_rope();
    test_kv_write();
    test_attention(e1, e3);
    test_attention_random(e1, e3);
    cb_engine_destroy(e1);
    cb_engine_destroy(e3);
    CHECK_DONE();
}
