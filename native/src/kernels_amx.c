/* kernels_amx.c — AMX-INT8 tiles for the w8a8 products (the "amx" level).
 *
 * Role: C[16 rows x 16 tokens] += W[16 rows x 64 k] . X[64 k x 16 tokens] per tdpbssd
 * (16384 int8 multiply-adds). The weights load as they are stored (row-major int8);
 * the activations of a 16-token block are packed once per block into the tile layout
 * (row q = bytes k = 4q..4q+3 of each token, tokens side by side). int32 sums are exact,
 * so the bits equal every other level: out = ((float)sum * sx) * scale[r].
 */
#include <string.h>
#include "cb_internal.h"
#include "kernels.h"
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,amx-tile,amx-int8")))

int cb_amx_request(void) {
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

size_t cb_q8_tiles_bytes(int32_t K) { return 2 * (size_t)CB_Q8_TILE_TOKENS * (size_t)K; }

/* Staging (16 int8 rows of K) in the second half, then one dword gather per k-quad. */
AMX_FN void cb_pack_q8_tiles_amx(const int16_t *const *xq, int64_t m, int32_t K, int8_t *packed) {
    size_t n = (size_t)K;
    int8_t *stage = packed + (size_t)CB_Q8_TILE_TOKENS * n;
    for (int64_t i = 0; i < CB_Q8_TILE_TOKENS; i++) {
        int8_t *row = stage + (size_t)i * n;
        if (i >= m) {
            memset(row, 0, n);
            continue;
        }
        for (size_t k = 0; k < n; k += 32)   /* K % 64 == 0 */
            _mm256_storeu_si256((__m256i *)(row + k), _mm512_cvtepi16_epi8(_mm512_loadu_si512((const void *)(xq[i] + k))));
    }
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(K));
    for (size_t q = 0; q < n / 4; q++)
        _mm512_storeu_si512((void *)(packed + q * 64), _mm512_i32gather_epi32(idx, (const void *)(stage + 4 * q), 1));
}

/* out[i][r + j] = ((float)c[j][i] * sx[i]) * scale[r + j]: column i of C gathered, 16 rows at once. */
AMX_FN static void finish_tile(const cb_matrix *w, int32_t r, const int32_t c[16][16], const float *sx,
                               float *const *outs, int64_t m) {
    const __m512i col = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(16));
    __m512 sc = _mm512_loadu_ps(w->scales + r);
    for (int64_t i = 0; i < m; i++) {
        __m512 v = _mm512_cvtepi32_ps(_mm512_i32gather_epi32(col, (const void *)(&c[0][0] + i), 4));
        _mm512_storeu_ps(outs[i] + r, _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(sx[i])), sc));
    }
}

/* One or two 16-token blocks (m <= 32; the second block follows the first in `packed`) against
 * 32- then 16-row weight tiles: up to 2 x 2 accumulator tiles, each A and B tile loaded once per K step. */
AMX_FN void cb_dot_rows_q8_tiles_amx(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *packed,
                                     const int16_t *const *xq, const float *sx, float *const *outs, int64_t m) {
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;   /* tmm0-3 C, tmm4-5 A, tmm6-7 B */
    _tile_loadconfig(&cfg);
    size_t K = (size_t)w->cols;
    const int8_t *W = (const int8_t *)w->data, *p0 = packed, *p1 = packed + cb_q8_tiles_bytes((int32_t)K);
    int two = m > CB_Q8_TILE_TOKENS;
    int64_t m0 = two ? CB_Q8_TILE_TOKENS : m, m1 = m - m0;
    int32_t c[4][16][16];
    int32_t r = r0;
    for (; r + 32 <= r1; r += 32) {
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        for (size_t k = 0; k < K; k += 64) {
            _tile_loadd(4, W + (size_t)r * K + k, (long)K);
            _tile_loadd(5, W + (size_t)(r + 16) * K + k, (long)K);
            _tile_loadd(6, p0 + k * 16, 64);
            _tile_dpbssd(0, 4, 6);
            _tile_dpbssd(1, 5, 6);
            if (two) {
                _tile_loadd(7, p1 + k * 16, 64);
                _tile_dpbssd(2, 4, 7);
                _tile_dpbssd(3, 5, 7);
            }
        }
        _tile_stored(0, c[0], 64); _tile_stored(1, c[1], 64);
        finish_tile(w, r, (const int32_t(*)[16])c[0], sx, outs, m0);
        finish_tile(w, r + 16, (const int32_t(*)[16])c[1], sx, outs, m0);
        if (two) {
            _tile_stored(2, c[2], 64); _tile_stored(3, c[3], 64);
            finish_tile(w, r, (const int32_t(*)[16])c[2], sx + 16, outs + 16, m1);
            finish_tile(w, r + 16, (const int32_t(*)[16])c[3], sx + 16, outs + 16, m1);
        }
    }
    for (; r + 16 <= r1; r += 16) {
        _tile_zero(0); _tile_zero(2);
        for (size_t k = 0; k < K; k += 64) {
            _tile_loadd(4, W + (size_t)r * K + k, (long)K);
            _tile_loadd(6, p0 + k * 16, 64);
            _tile_dpbssd(0, 4, 6);
            if (two) {
                _tile_loadd(7, p1 + k * 16, 64);
                _tile_dpbssd(2, 4, 7);
            }
        }
        _tile_stored(0, c[0], 64);
        finish_tile(w, r, (const int32_t(*)[16])c[0], sx, outs, m0);
        if (two) {
            _tile_stored(2, c[2], 64);
            finish_tile(w, r, (const int32_t(*)[16])c[2], sx + 16, outs + 16, m1);
        }
    }
    _tile_release();
    if (r < r1) cb_dot_rows_q8_avx512(w, r, r1, xq, sx, outs, m);
}
#else
int cb_amx_request(void) { return 0; }
size_t cb_q8_tiles_bytes(int32_t K) { return 2 * (size_t)CB_Q8_TILE_TOKENS * (size_t)K; }
void cb_pack_q8_tiles_amx(const int16_t *const *xq, int64_t m, int32_t K, int8_t *packed) {}
void cb_dot_rows_q8_tiles_amx(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *packed,
                              const int16_t *const *xq, const float *sx, float *const *outs, int64_t m) {
    cb_dot_rows_q8(w, r0, r1, xq, sx, outs, m);
}
#endif
