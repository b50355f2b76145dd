/* model_fuzz.c — seeded mutation fuzzing of the C .colibri reader, run by `make check`
 * under ASan+UBSan (issue 15). Builds a tiny valid container in memory (1 MoE layer,
 * 2 f32 experts, router, one plain tensor), then opens 600 mutations of it: bit flips,
 * truncations, header and table fields set to huge/negative/overlapping values with the
 * CRCs recomputed. Each must be accepted or rejected with CB_E_FORMAT/CB_E_IO; an accepted
 * one is walked (every router/expert/tensor byte read, one cb_moe_forward) so a bad
 * pointer faults here. Also the regression cases: an overflowing shape product, a
 * duplicated name, a duplicated expert slot, a NaN scale-free f32 weight with fixed CRC; the header scheme
 * "mixed" (code -1, each matrix in its own dtype) opens, a "mixed" name or code alone does not. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include "check.h"
#include "colibri.h"

enum { H = 8, I = 4, E = 2, NENT = 4, BLOB = 3 * H * I * 4 };
enum { ROUTER_AT = 4096, X0_AT = 8192, X1_AT = 12288, NORM_AT = 12672, TABLE_AT = 12736 };
enum { META_AT = TABLE_AT + NENT * 384, FILE_SIZE = META_AT + 2 };

static uint8_t base[FILE_SIZE];

static void w16(uint8_t *p, uint16_t v) { p[0] = v; p[1] = v >> 8; }
static void w32(uint8_t *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i); }
static void w64(uint8_t *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> 8 * i); }
static uint32_t r32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t r64(const uint8_t *p) { return r32(p) | (uint64_t)r32(p + 4) << 32; }

static void matrix(uint8_t *q, int32_t rows, int32_t cols, int64_t off) {
    w32(q, 0); w32(q + 4, (uint32_t)rows); w32(q + 8, (uint32_t)cols); w32(q + 12, 0);
    w64(q + 16, (uint64_t)off); w64(q + 24, (uint64_t)rows * cols * 4); w64(q + 32, (uint64_t)-1); w64(q + 40, (uint64_t)-1);
}

static void entry(uint8_t *f, int i, const char *name, int kind, int dtype, int layer, int expert,
                  int ndim, int64_t s0, int64_t s1, uint64_t off, uint64_t nbytes) {
    uint8_t *r = f + TABLE_AT + 384 * i;
    memset(r, 0, 384);
    memcpy(r, name, strlen(name));
    w16(r + 128, (uint16_t)kind); w16(r + 130, (uint16_t)dtype);
    w32(r + 132, (uint32_t)layer); w32(r + 136, (uint32_t)expert); w32(r + 140, (uint32_t)ndim);
    w64(r + 144, (uint64_t)s0); w64(r + 152, (uint64_t)s1);
    w64(r + 176, off); w64(r + 184, nbytes);
    if (kind == 1) { matrix(r + 200, I, H, 0); matrix(r + 248, I, H, H * I * 4); matrix(r + 296, H, I, 2 * H * I * 4); }
}

/* recompute entry data CRCs (all = 1) or only the table, meta and header CRCs (all = 0) */
static void fix(uint8_t *f, size_t size, int all) {
    for (int i = 0; all && i < NENT; i++) {
        uint8_t *r = f + TABLE_AT + 384 * i;
        uint64_t off = r64(r + 176), n = r64(r + 184);
        if (off <= size && n <= size - off) w32(r + 192, cb_crc32_update(0, f + off, n));
    }
    w32(f + 64, cb_crc32_update(0, f + TABLE_AT, NENT * 384));
    w32(f + 68, cb_crc32_update(0, f + META_AT, 2));
    w32(f + 508, cb_crc32_update(0, f, 508));
}

static void build(void) {
    unsigned seed = 7;
    uint8_t *f = base;
    memcpy(f, "COLIBRI\0", 8);
    w32(f + 8, 1); w32(f + 12, 512); w32(f + 20, 384);
    w64(f + 24, TABLE_AT); w64(f + 32, NENT); w64(f + 40, META_AT); w64(f + 48, 2); w64(f + 56, FILE_SIZE);
    memcpy(f + 72, "mixtral", 7); memcpy(f + 104, "f32", 3);
    int32_t hdr[] = {0, H, I, E, 1, 1, 1, 0, 0, 0, 1, 1, 0};   /* scheme_code .. norm_topk_prob */
    for (int i = 0; i < 13; i++) w32(f + 120 + 4 * i, (uint32_t)hdr[i]);
    float one = 1.0f; memcpy(f + 172, &one, 4);
    f[176] = 1;                                               /* layer 0 is MoE */
    for (int k = 0; k < E * H; k++) { float v = rnd(&seed); memcpy(f + ROUTER_AT + 4 * k, &v, 4); }
    for (int k = 0; k < 3 * H * I; k++) {
        float a = 0.3f * rnd(&seed), b = 0.3f * rnd(&seed);
        memcpy(f + X0_AT + 4 * k, &a, 4); memcpy(f + X1_AT + 4 * k, &b, 4);
    }
    for (int k = 0; k < H; k++) { float v = 1.0f + 0.1f * rnd(&seed); memcpy(f + NORM_AT + 4 * k, &v, 4); }
    entry(f, 0, "model.layers.0.block_sparse_moe.gate.weight", 3, 0, 0, -1, 2, E, H, ROUTER_AT, E * H * 4);
    entry(f, 1, "model.layers.0.block_sparse_moe.experts.0", 1, 4, 0, 0, 1, BLOB, 0, X0_AT, BLOB);
    entry(f, 2, "model.layers.0.block_sparse_moe.experts.1", 1, 4, 0, 1, 1, BLOB, 0, X1_AT, BLOB);
    entry(f, 3, "model.norm.weight", 0, 0, -1, -1, 1, H, 0, NORM_AT, H * 4);
    memcpy(f + META_AT, "{}", 2);
    fix(f, FILE_SIZE, 1);
}

static volatile float sink;

static void walk(cb_model *m, cb_engine *eng) {
    cb_model_info info;
    CHECK_OK(cb_model_get_info(m, &info));
    for (int32_t l = -1; l <= info.n_layers; l++) {
        cb_moe_layer L;
        if (cb_model_moe_layer(m, l, &L) != CB_OK) continue;
        float acc = 0;
        for (int64_t k = 0; k < (int64_t)info.n_experts * info.hidden; k++) acc += L.router[k];
        for (int32_t e = 0; e < info.n_experts; e++) {
            const cb_matrix *ms[3] = {&L.experts[e]->gate, &L.experts[e]->up, &L.experts[e]->down};
            for (int j = 0; j < 3; j++)
                for (int64_t k = 0; k < (int64_t)ms[j]->rows * ms[j]->cols; k++) acc += ((const float *)ms[j]->data)[k];
        }
        sink = acc;
        if (info.hidden == H && info.n_experts <= 64) {
            float x[2 * H], y[2 * H], w[2 * 64];
            int32_t idx[2 * 64];
            for (int k = 0; k < 2 * H; k++) x[k] = 0.25f * (float)(k % 5) - 0.5f;
            cb_moe_forward(eng, &L, x, 2, y, idx, w);      /* any status; must not fault */
        }
    }
    const float *d; int64_t shape[4]; int32_t nd;
    if (cb_model_tensor_f32(m, "model.norm.weight", &d, shape, &nd) == CB_OK && nd == 1 && shape[0] <= 1 << 20) {
        float acc = 0;
        for (int64_t k = 0; k < shape[0]; k++) acc += d[k];
        sink = acc;
    }
}

static cb_status open_bytes(const char *path, const uint8_t *f, size_t n, cb_engine *eng) {
    FILE *fp = fopen(path, "wb");
    if (!fp) return CB_E_IO;
    fwrite(f, 1, n, fp);
    fclose(fp);
    cb_model *m = NULL;
    cb_status s = cb_model_open(path, 1, &m);
    if (s == CB_OK) { walk(m, eng); cb_model_close(m); }
    return s;
}

static const uint64_t hostile[] = {0, 1, 7, 63, 64, 384, 4095, 4096, 8192, 12288, TABLE_AT, META_AT, FILE_SIZE,
                                   0x7fffffffu, 0x80000000u, 0xffffffffu, (1ull << 62) + 8, 0x7fffffffffffffffull,
                                   0x8000000000000000ull, 0xffffffffffffffffull};
static const int fields[][2] = {{8, 4}, {24, 8}, {32, 8}, {40, 8}, {48, 8}, {56, 8}, {124, 4}, {128, 4}, {132, 4},
                                {136, 4}, {140, 4}, {144, 4}, {148, 4}, {156, 4}, {160, 4}, {164, 4}};
static const int efields[][2] = {{128, 2}, {130, 2}, {132, 4}, {136, 4}, {140, 4}, {144, 8}, {152, 8}, {176, 8},
                                 {184, 8}, {200, 4}, {204, 4}, {208, 4}, {212, 4}, {216, 8}, {224, 8}, {232, 8},
                                 {248 + 16, 8}, {296 + 24, 8}};

static void put(uint8_t *p, int size, uint64_t v) {
    if (size == 2) w16(p, (uint16_t)v); else if (size == 4) w32(p, (uint32_t)v); else w64(p, v);
}

int main(void) {
    char path[] = "/tmp/colibri-model-fuzz-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) CHECK_DONE();
    close(fd);
    cb_engine *eng = NULL;
    CHECK_OK(cb_engine_create(1, NULL, 0, &eng));
    build();
    static uint8_t f[FILE_SIZE];
    CHECK_OK(open_bytes(path, base, FILE_SIZE, eng));             /* the pristine file opens */
    unsigned s = 2024;
    int accepted = 0, rejected = 0;
    for (int i = 0; i < 600; i++) {
        memcpy(f, base, FILE_SIZE);
        size_t n = FILE_SIZE;
        s = s * 1664525u + 1013904223u;
        unsigned r = s >> 8, kind = i % 4;
        if (kind == 0) f[r % FILE_SIZE] ^= (uint8_t)(1u << (r >> 20 & 7));
        else if (kind == 1) n = r % FILE_SIZE;
        else if (kind == 2) {
            const int *fl = fields[r % (sizeof fields / sizeof fields[0])];
            put(f + fl[0], fl[1], hostile[(r >> 12) % (sizeof hostile / sizeof hostile[0])]);
            fix(f, n, 0);
        } else {
            const int *fl = efields[r % (sizeof efields / sizeof efields[0])];
            put(f + TABLE_AT + 384 * ((r >> 10) % NENT) + fl[0], fl[1], hostile[(r >> 14) % (sizeof hostile / sizeof hostile[0])]);
            fix(f, n, 0);
        }
        cb_status st = open_bytes(path, f, n, eng);
        CHECK(st == CB_OK || st == CB_E_FORMAT || st == CB_E_IO);
        if (st == CB_OK) accepted++; else rejected++;
    }
    CHECK(rejected > 300 && accepted > 0);
    /* regressions (issue 15): each must be CB_E_FORMAT */
    memcpy(f, base, FILE_SIZE);                                  /* shape [2^62 + 8] x f32 "matches" 32 bytes */
    w64(f + TABLE_AT + 3 * 384 + 144, (1ull << 62) + H); fix(f, FILE_SIZE, 0);
    CHECK(open_bytes(path, f, FILE_SIZE, eng) == CB_E_FORMAT);
    memcpy(f, base, FILE_SIZE);                                  /* duplicate name */
    memcpy(f + TABLE_AT + 3 * 384, f + TABLE_AT, 128); fix(f, FILE_SIZE, 0);
    CHECK(open_bytes(path, f, FILE_SIZE, eng) == CB_E_FORMAT);
    memcpy(f, base, FILE_SIZE);                                  /* expert 1 claims slot 0 */
    w32(f + TABLE_AT + 2 * 384 + 136, 0); fix(f, FILE_SIZE, 0);
    CHECK(open_bytes(path, f, FILE_SIZE, eng) == CB_E_FORMAT);
    memcpy(f, base, FILE_SIZE);                                  /* NaN weight, CRCs fixed */
    float nan = NAN; memcpy(f + X1_AT + 12, &nan, 4); fix(f, FILE_SIZE, 1);
    CHECK(open_bytes(path, f, FILE_SIZE, eng) == CB_E_FORMAT);
    memcpy(f, base, FILE_SIZE);                                  /* header scheme "mixed" (code -1) opens */
    memset(f + 104, 0, 16); memcpy(f + 104, "mixed", 5); w32(f + 120, (uint32_t)-1); fix(f, FILE_SIZE, 0);
    CHECK_OK(open_bytes(path, f, FILE_SIZE, eng));
    w32(f + 120, 0); fix(f, FILE_SIZE, 0);                        /* ... but not named "mixed" with code 0 */
    CHECK(open_bytes(path, f, FILE_SIZE, eng) == CB_E_FORMAT);
    memcpy(f, base, FILE_SIZE);                                  /* nor code -1 named "f32" */
    w32(f + 120, (uint32_t)-1); fix(f, FILE_SIZE, 0);
    CHECK(open_bytes(path, f, FILE_SIZE, eng) == CB_E_FORMAT);
    cb_engine_destroy(eng);
    unlink(path);
    printf("model fuzz: %d accepted, %d rejected\n", accepted, rejected);
    CHECK_DONE();
}
