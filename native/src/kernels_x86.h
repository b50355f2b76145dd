/* kernels_x86.h — pieces the AVX2 and AVX-512 kernel files share (x86-64 GCC/clang only).
 *
 * Role: the weight descriptor, the per-encoding kernel table type and its
 * dispatch (a missing entry falls to the level below), and the fixed 8-lane
 * horizontal sum + scalar tail of kernels.h, compiled for AVX2 and inlined
 * into either family (an AVX-512 function may inline AVX2 code), so both
 * finish every element with literally the same operations.
 */
#ifndef CB_KERNELS_X86_H
#define CB_KERNELS_X86_H
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include "cb_internal.h"
#include "kernels.h"
#include "regrouped.h"

#define AVX2_FN static inline __attribute__((always_inline, target("avx2,fma,f16c")))
#define AVX2_OUTLINE __attribute__((noinline, target("avx2,fma,f16c")))

/* The matrix as the tiles walk it (built once per call: wdesc_of). */
typedef struct {
    const cb_matrix *w;
    const unsigned char *data; /* row 0 start */
    const float *scales;
    size_t row_bytes;
    int32_t cols, ngroups, zero;
} wdesc;

static inline wdesc wdesc_of(const cb_matrix *w) {
    int32_t g = cb_group_size(w->dtype);
    return (wdesc){w, (const unsigned char *)w->data, w->scales, (size_t)cb_row_bytes(w->dtype, w->cols), w->cols,
                   g ? (w->cols + g - 1) / g : 0, w->zero ? w->zero[0] : 0};
}

/* An encoding's facts from CB_ENCODING_LIST as constants (kernels.h CB_BITS_<ID>, ...): the tiles
 * are always_inline, so every kernel specialises on them (and on its decoder) at compile time. */
typedef struct { size_t bits, group; int scale_kind; } kspec;
#define KSPEC(ID) ((kspec){CB_BITS_##ID, CB_GROUP_##ID, CB_SCALE_KIND_##ID})

/* One level's kernel for one encoding, and a level's table of them by cb_dtype code. */
typedef void (*x86_kernel)(const wdesc *d, int32_t r0, int32_t r1, const float *const *xs, float *const *outs,
                           int64_t nt);
/* A level's kernels and their table from its list K(ID, decoder): k_<ID> runs the level file's
 * rows_of on that decoder with the encoding's facts (KSPEC(ID)), compiled with the file's
 * LEVEL_OUTLINE attributes; KERNELS[CB_<ID>] = k_<ID> (designated initializers, NULL elsewhere). */
#define LEVEL_KERNEL_(ID, DEC)                                                                        \
    static LEVEL_OUTLINE void k_##ID(const wdesc *d, int32_t r0, int32_t r1, const float *const *xs, \
                                     float *const *outs, int64_t nt) {                                \
        rows_of(KSPEC(ID), DEC, d, r0, r1, xs, outs, nt);                                            \
    }
#define LEVEL_ENTRY_(ID, DEC) [CB_##ID] = k_##ID,
#define LEVEL_KERNEL_TABLE(LIST) LIST(LEVEL_KERNEL_) static const x86_kernel KERNELS[CB_DTYPE_COUNT] = {LIST(LEVEL_ENTRY_)};

/* A row-interleaved layout (regrouped.h) on the exact-weights path: each row group's blocks gathered back into
 * plain rows and run by the table's kernel of the plain encoding (the same values in the same order: its bits, as
 * the scalar decoder gives). 0 when w is no such layout, the table has no kernel for the plain encoding or no
 * memory (the caller takes the level below). */
static inline int run_regrouped(const x86_kernel *table, const cb_matrix *w, int32_t r0, int32_t r1,
                                const float *const *xs, float *const *outs, int64_t nt) {
    const cb_regrouped *L = &CB_REGROUPED[w->dtype];
    size_t nb = (size_t)w->cols / CB_QK_K, rb = nb * L->block;
    if (!L->group || !table[L->plain]) return 0;
    float **o = malloc((size_t)L->group * rb + (size_t)nt * sizeof *o);
    if (!o) return 0;
    unsigned char *buf = (unsigned char *)(o + nt);
    cb_matrix m = {buf, NULL, NULL, L->plain, L->group, w->cols};
    wdesc d = wdesc_of(&m);
    for (int32_t g = r0 - r0 % L->group; g < r1; g += L->group) {
        int32_t a = g > r0 ? g : r0, b = g + L->group < r1 ? g + L->group : r1;
        for (int32_t r = a; r < b; r++)
            for (size_t blk = 0; blk < nb; blk++)
                L->gather(w->data, nb, (size_t)r, blk, buf + (size_t)(r - g) * rb + blk * L->block);
        for (int64_t t = 0; t < nt; t++) o[t] = outs[t] + g;
        table[L->plain](&d, a - g, b - g, xs, (float *const *)o, nt);
    }
    free(o);
    return 1;
}

/* Runs the table's kernel for w's encoding; 0 when the level has none (the caller takes the level below). */
static inline int run_kernel(const x86_kernel *table, const cb_matrix *w, int32_t r0, int32_t r1,
                             const float *const *xs, float *const *outs, int64_t nt) {
    x86_kernel k = table[w->dtype];
    if (!k) return 0;
    wdesc d = wdesc_of(w);
    k(&d, r0, r1, xs, outs, nt);
    return 1;
}

/* An int4 matrix as the w4a8 kernels walk it (kernels_q4_avx2.c, kernels_q4_avx512.c). */
typedef struct {
    const unsigned char *data;
    const float *scales;
    size_t rb, K, k64, ng, nfull;   /* row bytes, cols, cols rounded to 64, groups, full 64-blocks */
} q4desc;

static inline q4desc q4desc_of(const cb_matrix *w) {
    size_t K = (size_t)w->cols, G = (size_t)cb_group_size(w->dtype);
    return (q4desc){(const unsigned char *)w->data, w->scales, (K + 1) / 2, K, (K + 63) & ~(size_t)63,
                    (K + G - 1) / G, K / 64};
}

/* A w4a8 level's kernels: k_q4g32 / k_q4g64 run the level file's rows_for_group(G, ...) with G a
 * compile-time constant, compiled with OUTLINE; run_q4 picks one by the matrix's group size. */
#define Q4_LEVEL_KERNELS(OUTLINE)                                                                        \
    static OUTLINE void k_q4g32(const q4desc *d, int32_t r0, int32_t r1, const int8_t *const *xp,       \
                                const float *sx, float *const *outs, int64_t nt) {                      \
        rows_for_group(32, d, r0, r1, xp, sx, outs, nt);                                                 \
    }                                                                                                    \
    static OUTLINE void k_q4g64(const q4desc *d, int32_t r0, int32_t r1, const int8_t *const *xp,       \
                                const float *sx, float *const *outs, int64_t nt) {                      \
        rows_for_group(64, d, r0, r1, xp, sx, outs, nt);                                                 \
    }                                                                                                    \
    static void run_q4(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp,             \
                       const float *sx, float *const *outs, int64_t nt) {                               \
        q4desc d = q4desc_of(w);                                                                         \
        if (cb_group_size(w->dtype) == 32) k_q4g32(&d, r0, r1, xp, sx, outs, nt);                        \
        else k_q4g64(&d, r0, r1, xp, sx, outs, nt);                                                      \
    }

AVX2_FN float hsum(__m256 a) {
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
    return _mm_cvtss_f32(v);
}

/* Row pointers of a tile: entry j < n is row r + min(j, nr - 1) of d, with its group scales
 * (NULL when d is not group-scaled); entries past nr repeat the last row. */
AVX2_FN void tile_rows(const wdesc *d, int32_t r, int nr, int n, const unsigned char **row, const float **gs) {
#pragma GCC unroll 16
    for (int j = 0; j < n; j++) {
        int jj = j < nr ? j : nr - 1;
        row[j] = d->data + (size_t)(r + jj) * d->row_bytes;
        gs[j] = d->ngroups ? d->scales + (size_t)(r + jj) * (size_t)d->ngroups : NULL;
    }
}

/* Software prefetch (into L2: T0 measured ~30% slower, it crowds L1's miss buffers) of the
 * 64-byte lines of base[from, to), both rounded up to a line: callers walk a block in
 * consecutive spans, so each line is requested once. */
AVX2_FN void prefetch_span(const unsigned char *base, size_t from, size_t to) {
    for (size_t b = (from + 63) & ~(size_t)63; b < ((to + 63) & ~(size_t)63); b += 64)
        _mm_prefetch((const char *)base + b, _MM_HINT_T1);
}

/* Signed int4 codes k..k+7 of an int4 row (k a multiple of 8) as 8 int32 lanes: nibble l
 * shifted to the top of lane l, then an arithmetic shift sign-extends it. */
AVX2_FN __m256i i4x8(const unsigned char *row, size_t k) {
    int32_t v;
    __builtin_memcpy(&v, row + k / 2, 4);
    __m256i t = _mm256_sllv_epi32(_mm256_set1_epi32(v), _mm256_setr_epi32(28, 24, 20, 16, 12, 8, 4, 0));
    return _mm256_srai_epi32(t, 28);
}

/* One 64-block of one row and one token on prepared activations (the w4a8 and w6a8 AVX2 kernels): the row's
 * unsigned codes u in w0, w1 times the token's prepared bytes in xa, xb (two vpmaddubsw, u8 x s8 -> int16, added:
 * each int16 lane is 4 products, |sum| <= 4 * 63 * 127, no saturation), vpmaddwd by 1 -> 8 int32 lanes, plus the
 * prepared negated lane corrections at nc (exact: sum u x + ncorr = sum code x); returns fma((float)lanes, sc, acc). */
AVX2_FN __m256 maddubs_step(__m256i w0, __m256i w1, __m256i xa, __m256i xb, const int8_t *nc, __m256 sc, __m256 acc) {
    __m256i d = _mm256_add_epi16(_mm256_maddubs_epi16(w0, xa), _mm256_maddubs_epi16(w1, xb));
    __m256i p = _mm256_add_epi32(_mm256_madd_epi16(d, _mm256_set1_epi16(1)), _mm256_loadu_si256((const __m256i *)nc));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc, acc);
}

/* maddubs_step on a 64-block of TT tokens x TR rows: w[j] = row j's codes, the tokens' bytes at xo, corrections at co. */
AVX2_FN void maddubs_block(int TT, int TR, __m256i w[4][2], const __m256 *sc, const int8_t *const *xp, size_t xo,
                           size_t co, __m256 acc[8][4]) {
#pragma GCC unroll 8
    for (int i = 0; i < TT; i++) {
        const int8_t *x = xp[i] + xo;
        __m256i xa = _mm256_loadu_si256((const __m256i *)x), xb = _mm256_loadu_si256((const __m256i *)(x + 32));
#pragma GCC unroll 4
        for (int j = 0; j < TR; j++) acc[i][j] = maddubs_step(w[j][0], w[j][1], xa, xb, xp[i] + co, sc[j], acc[i][j]);
    }
}

/* One element's end of the kernels.h sequence, s its 8-lane sum (hsum): scalar tail (through the
 * encoding's row decoder, as the scalar kernels do), row/matrix scale. Tiles call it once their
 * accumulators are dead, so the tail's call never makes them spill. */
AVX2_FN float finish(kspec ks, const wdesc *d, int32_t r, float s, const float *x) {
    if (d->cols % 8) s = cb_dot_tail(d->w, r, x, s);
    if (ks.scale_kind == CB_SCALE_ROW) s = s * d->scales[r];
    else if (ks.scale_kind == CB_SCALE_MATRIX) s = s * d->scales[0];
    return s;
}

#endif
