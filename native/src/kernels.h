/* kernels.h — the dot-product kernels every matrix product in the core goes through.
 *
 * Role: out[t][r] = W[r,:] . x[t,:] for a range of output rows r and a list of
 * token rows t, on every weight encoding. The exact operation sequence of one
 * output element is fixed (below) and does not depend on how many tokens or
 * rows are computed together, the tile a token lands in, or the thread: that
 * is what makes the engine batch invariant. Every kernel family (portable C,
 * AVX2, AVX-512) follows the same sequence, so they give the same bits; an
 * AVX-512 register carries two independent 8-lane sequences (two rows).
 *
 * Per element (K = cols, K8 = K rounded down to a multiple of 8):
 *   v(k)  = decoded weight: f32 as is; f16/bf16 exact widening; I8_ROW (float)q;
 *           I8_Gg, I4_Gg and I6_G64 (float)q * scale[r, k/g] (rounded to f32); I8_MINMAX (float)(q - zero)
 *   a[l]  = 0;  for k = 0, 8, .., K8-8:  a[l] = fma(v(k+l), x[k+l], a[l])   (l = 0..7)
 *   s     = ((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7))
 *   for k = K8 .. K-1:  s = fma(v(k), x[k], s)
 *   out   = s * scale[r] (I8_ROW), s * scale[0] (I8_MINMAX), else s
 */
#ifndef CB_KERNELS_H
#define CB_KERNELS_H
#include <stdint.h>
#include "colibri.h"

/* Kernel signatures as function types: every level's kernels below are declared with them and a
 * cb_kernel_table holds pointers to them, so one signature is written once. */
typedef void cb_dot_rows_k(const cb_matrix *w, int32_t r0, int32_t r1, const float *const *xs, float *const *outs,
                           int64_t nt);
/* w8a8 (kernels_q8.c): CB_I8_ROW rows x per-token int8 activations held as int16. */
typedef void cb_dot_rows_q8_k(const cb_matrix *w, int32_t r0, int32_t r1, const int16_t *const *xq, const float *sx,
                              float *const *outs, int64_t nt);
/* w4a8 (kernels_q4.c): CB_I4_G32/G64 rows x activations prepared per token by cb_q4_prep. */
typedef void cb_dot_rows_q4_k(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp, const float *sx,
                              float *const *outs, int64_t nt);
/* w6a8 (kernels_q6.c): CB_I6_G64 rows x activations prepared per token by cb_q6_prep (w4a8's signature). */
typedef cb_dot_rows_q4_k cb_dot_rows_q6_k;
/* k-quants x Q8_K (kernels_kq.c): CB_Q4_K / CB_Q5_K / CB_Q6_K (and CB_Q4_K_R8, CB_Q6_K_R16, CB_IQ4_XS) rows x llama.cpp's Q8_K
 * activation blocks (kquants.h cb_q8k_block, one per 256 inputs; xk[t] is token t's row of blocks). */
typedef struct cb_q8k_block cb_q8k_block;
typedef void cb_dot_rows_kq_k(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q8k_block *const *xk,
                              float *const *outs, int64_t nt);
/* x Q8_0 / x Q8_1 (kernels_q80.c): CB_Q8_0, CB_Q5_0, CB_MXFP4 or CB_IQ4_NL rows x llama.cpp's Q8_0 activation blocks
 * (q80.h cb_q80_block, one per 32 inputs; xa[t] is token t's row of blocks), CB_Q5_1 rows x its Q8_1 rows (the Q8_0
 * blocks followed by their s, q80.h). */
typedef struct cb_q80_block cb_q80_block;
typedef void cb_dot_rows_q80_k(const cb_matrix *w, int32_t r0, int32_t r1, const cb_q80_block *const *xa,
                               float *const *outs, int64_t nt);
/* q[k] = clamp(rint(x[k] * inv), -127, 127): one rounded multiply, round half to even. */
typedef void cb_quantize_q8_k(const float *x, int32_t K, float inv, int16_t *q);
typedef float cb_amax_k(const float *x, int32_t K);   /* max |x[k]| (exact in any order) */

/* AMX w8a8 (kernels_amx.c): 16-token blocks of activations packed for the tile unit (K/4 rows of
 * 16 tokens x 4 bytes, tokens >= m zero), then rows r0..r1 of a CB_I8_ROW matrix times one block
 * (m <= 16) or two consecutive blocks (16 < m <= 32).
 * Needs K % 64 == 0; rows that do not fill a 16-row tile go through dot_rows_q8 on xq. */
#define CB_Q8_TILE_TOKENS 16
size_t cb_q8_tiles_bytes(int32_t K);        /* bytes of one packed block (staging included) */
typedef void cb_pack_q8_tiles_k(const int16_t *const *xq, int64_t m, int32_t K, int8_t *packed);
typedef void cb_dot_rows_q8_tiles_k(const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *packed,
                                    const int16_t *const *xq, const float *sx, float *const *outs, int64_t m);

/* Attention's value pass (attn_simd.c; kv_internal.h cb_pv_rows / cb_f16_row). */
typedef void cb_pv_rows_k(float *acc, const float *p, const float *const *v, int32_t nj, int32_t n);
typedef void cb_f16_row_k(const uint16_t *src, float *dst, int32_t n);
/* SwiGLU's g = silu(g) * u on n elements (silu.c: one exp sequence, the same bits on every level). */
typedef void cb_silu_mul_k(float *g, const float *u, int32_t n);
/* gpt-oss's clamped SwiGLU g = swiglu_oai(g, u) on n elements (silu.c; colibri.h CB_ACT_SWIGLU_OAI). */
typedef void cb_swiglu_oai_k(float *g, const float *u, int32_t n, float alpha, float limit);

/* One kernel family (simd.c holds one per cb_simd level; cb_kernels() is the active one). */
typedef struct {
    int32_t level;                  /* cb_simd */
    const char *name;               /* "scalar" | "avx2" | "avx512" (COLIBRI_SIMD, simd_force) */
    cb_dot_rows_k *dot_rows;
    cb_dot_rows_q8_k *dot_rows_q8;
    cb_dot_rows_q4_k *dot_rows_q4;
    cb_dot_rows_q6_k *dot_rows_q6;  /* avx512 and amx use the avx2 kernel */
    cb_dot_rows_kq_k *dot_rows_kq;  /* amx uses the avx512 kernel */
    cb_dot_rows_q80_k *dot_rows_q80; /* amx uses the avx512 kernel */
    cb_quantize_q8_k *quantize_q8;
    cb_amax_k *amax;
    cb_pack_q8_tiles_k *pack_q8_tiles;        /* NULL: this level has no tile unit */
    cb_dot_rows_q8_tiles_k *dot_rows_q8_tiles;
    cb_pv_rows_k *pv_rows;          /* avx512 and amx use the avx2 loops */
    cb_f16_row_k *f16_row;
    cb_silu_mul_k *silu_mul;
    cb_swiglu_oai_k *swiglu_oai;
} cb_kernel_table;
const cb_kernel_table *cb_kernels(void);

/* The entry points everything calls (the active table's kernels), then each level's kernels. */
cb_dot_rows_k cb_dot_rows, cb_dot_rows_scalar, cb_dot_rows_avx2, cb_dot_rows_avx512;
#define CB_Q8_MAX_K 131072   /* w8a8: int32 sums of K products of |127| stay exact below this */
void cb_quantize_row_q8(const float *x, int32_t K, int16_t *q, float *scale);
cb_dot_rows_q8_k cb_dot_rows_q8, cb_dot_rows_q8_scalar, cb_dot_rows_q8_avx2, cb_dot_rows_q8_avx512;
/* w4a8 (kernels_q4.c): the w8a8 activation codes (int16 from cb_quantize_row_q8) of one token
 * prepared for an int4 matrix of group size G: int8, 32-chunks reordered, negated lane corrections. */
/* The prepared-activation layout w4a8 and w6a8 share: per 64-block of a token its 64 bytes (each kernel's order),
 * then per block 8 int32 lane corrections; block() fills one block from 64 codes (the last one zero-padded). */
typedef void cb_prep_block_k(const int16_t *x, int8_t *out, int32_t *corr);
size_t cb_prep64_bytes(int32_t K);               /* a multiple of 32 */
void cb_prep64(const int16_t *xq, int32_t K, int8_t *out, cb_prep_block_k *block);
/* The fixed horizontal sum of 8 lane accumulators every integer path ends with. */
static inline float cb_hsum8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}
size_t cb_q4_prep_bytes(int32_t K, int32_t G);   /* a multiple of 32 */
void cb_q4_prep(const int16_t *xq, int32_t K, int32_t G, int8_t *out);
cb_dot_rows_q4_k cb_dot_rows_q4, cb_dot_rows_q4_scalar, cb_dot_rows_q4_avx2, cb_dot_rows_q4_avx512;
/* w6a8 (kernels_q6.c): the same activation codes of one token prepared for an int6 matrix: int8, each
 * pair of elements swapped (the AVX2 unpack's order), then per 64-block the negated lane corrections. */
size_t cb_q6_prep_bytes(int32_t K);              /* a multiple of 32 */
void cb_q6_prep(const int16_t *xq, int32_t K, int8_t *out);
cb_dot_rows_q6_k cb_dot_rows_q6, cb_dot_rows_q6_scalar, cb_dot_rows_q6_avx2;
/* k-quants x Q8_K (kernels_kq.c): x [K] (K a multiple of 256) -> K / 256 activation blocks. */
void cb_quantize_row_q8k(const float *x, int32_t K, cb_q8k_block *y);
cb_dot_rows_kq_k cb_dot_rows_kq, cb_dot_rows_kq_scalar, cb_dot_rows_kq_avx2, cb_dot_rows_kq_avx512;
/* Row r of a row-interleaved layout (regrouped.h: q4_k_r8, q6_k_r16) for nt tokens by the scalar reference (the x86
 * kernels' partial row groups; kernels_kq.c). */
void cb_dot_regrouped_row(const cb_matrix *w, int32_t r, const cb_q8k_block *const *xk, float *const *outs,
                          int64_t nt);
/* x Q8_0 (kernels_q80.c): x [K] -> ceil(K / 32) activation blocks (a short last block: the zero-padded one);
 * x Q8_1: the same blocks, then their s (q80.h cb_q81_bytes in all). */
void cb_quantize_row_q80(const float *x, int32_t K, cb_q80_block *y);
void cb_quantize_row_q81(const float *x, int32_t K, cb_q80_block *y);
cb_dot_rows_q80_k cb_dot_rows_q80, cb_dot_rows_q80_scalar, cb_dot_rows_q80_avx2, cb_dot_rows_q80_avx512;
cb_quantize_q8_k cb_quantize_q8_scalar, cb_quantize_q8_avx2, cb_quantize_q8_avx512;
cb_amax_k cb_amax_scalar, cb_amax_avx2;
cb_pack_q8_tiles_k cb_pack_q8_tiles_amx;
cb_dot_rows_q8_tiles_k cb_dot_rows_q8_tiles_amx;
int cb_amx_request(void);   /* asks the OS for the AMX tile state once; 1 when granted */
cb_pv_rows_k cb_pv_rows_scalar, cb_pv_rows_avx2;
cb_f16_row_k cb_f16_row_scalar, cb_f16_row_avx2;
cb_silu_mul_k cb_silu_mul_scalar, cb_silu_mul_avx2, cb_silu_mul_avx512;
cb_swiglu_oai_k cb_swiglu_oai_scalar, cb_swiglu_oai_avx2, cb_swiglu_oai_avx512;

/* ggml's hsum_float_8 of 8 float lanes, in its order: ((v4 + v0) + (v6 + v2)) + ((v5 + v1) + (v7 + v3)) (the
 * scalar references of the encodings that take ggml's own lane order: q8_0, q5_1, iq4_xs). */
static inline float cb_hsum8_ggml(const float v[8]) {
    return ((v[4] + v[0]) + (v[6] + v[2])) + ((v[5] + v[1]) + (v[7] + v[3]));
}

/* Exact f16 -> f32 (IEEE half, subnormals included). */
static inline float cb_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);
    else if (exp != 0) bits = sign | ((exp + 112u) << 23) | (man << 13);
    else if (man == 0) bits = sign;
    else {
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400u));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    union { uint32_t u; float f; } v = {bits};
    return v.f;
}

/* f32 -> IEEE half, round to nearest even (subnormals included; NaN stays a quiet NaN), as F16C's vcvtps2ph. */
static inline uint16_t cb_f32_to_f16(float f) {
    union { float f; uint32_t u; } v = {f};
    uint32_t x = v.u, sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));   /* NaN, quiet */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);                           /* >= 65520: inf */
    if (ax >= 0x38800000u) {                                                            /* normal half */
        uint32_t r = ax - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    union { uint32_t u; float f; } a = {ax};
    float s = a.f * 16777216.0f;        /* subnormal half: units of 2^-24, exact scaling; round half to even */
    float r = (s + 8388608.0f) - 8388608.0f;
    return (uint16_t)(sign | (uint32_t)r);
}

static inline float cb_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}

/* Signed 4-bit code k of an int4 row (colibri.h nibble order). */
static inline int32_t cb_i4_at(const unsigned char *row, size_t k) {
    int32_t b = row[k >> 1];
    return ((((k & 1) ? b >> 4 : b) & 15) ^ 8) - 8;
}

/* Signed 6-bit code k of an int6 row (colibri.h bit order: bits 6k .. 6k+5 of the row), from the
 * one byte or two bytes that hold it (never a byte past the code). */
static inline int32_t cb_i6_at(const unsigned char *row, size_t k) {
    size_t bit = 6 * k, i = bit >> 3;
    unsigned sh = (unsigned)(bit & 7);
    uint32_t v = (uint32_t)row[i] >> sh;
    if (sh > 2) v |= (uint32_t)row[i + 1] << (8 - sh);
    return (int32_t)((v & 63) ^ 32) - 32;
}

/* ---- per-encoding kernel tables: one entry per CB_ENCODING_LIST row (colibri.h), by cb_dtype code ----
 * Scalar level (decode.c, required for every encoding): the row decoder, elements k0 .. k0+n-1 of
 * row r as the values v(k) above; the row / matrix scale applied after the dot is cb_post_scale's. */
typedef void (*cb_row_decoder)(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out);
cb_row_decoder cb_row_decoder_of(int32_t dtype);           /* NULL: none (an unknown code) */
static inline void cb_decode_row(const cb_matrix *w, int32_t r, size_t k0, size_t n, float *out) {
    cb_row_decoder_of(w->dtype)(w, r, k0, n, out);
}
const float *cb_post_scale(const cb_matrix *w, int32_t r);  /* scale kind ROW: &scales[r]; MATRIX: scales; else NULL */
/* The sequence's scalar tail for row r (kernels_scalar.c): s = fma(v(k), x[k], s) for k = K8 .. K-1. */
float cb_dot_tail(const cb_matrix *w, int32_t r, const float *x, float s);
/* The integer-activation path an encoding takes with the engine's w8a8 switch on (kernels.c):
 * CB_QPATH_W8A8 cb_dot_rows_q8, CB_QPATH_W4A8 cb_dot_rows_q4, CB_QPATH_W6A8 cb_dot_rows_q6,
 * CB_QPATH_KQ cb_dot_rows_kq on Q8_K activations (llama.cpp's), CB_QPATH_Q80 cb_dot_rows_q80 on Q8_0 activations
 * (llama.cpp's), CB_QPATH_Q81 cb_dot_rows_q80 on Q8_1 activations (llama.cpp's), CB_QPATH_NONE the f32 kernels. */
enum { CB_QPATH_NONE = 0, CB_QPATH_W8A8 = 1, CB_QPATH_W4A8 = 2, CB_QPATH_W6A8 = 3, CB_QPATH_KQ = 4, CB_QPATH_Q80 = 5,
       CB_QPATH_Q81 = 6 };
int cb_qpath_of(int32_t dtype);
/* The block-activation paths (KQ, Q80, Q81: llama.cpp's vec_dot types), for the callers (dense.c, ffn.c): whether w
 * takes one, bytes of one token's activation blocks for w, the blocks from an f32 row, and the product through table
 * kt's kernel. Two matrices share activation blocks when their paths and widths are equal. */
static inline int cb_qpath_blocks(int32_t dtype) {
    int p = cb_qpath_of(dtype);
    return p == CB_QPATH_KQ || p == CB_QPATH_Q80 || p == CB_QPATH_Q81;
}
size_t cb_qblocks_bytes(const cb_matrix *w);
void cb_qblocks(const cb_matrix *w, const float *x, void *out);
void cb_dot_rows_qblocks(const cb_kernel_table *kt, const cb_matrix *w, int32_t r0, int32_t r1, const void *const *xa,
                         float *const *outs, int64_t nt);
/* The paths on prepared activations (w4a8, w6a8), for the callers (dense.c, ffn.c): bytes of one
 * token's prepared input for w (0 when w takes neither path), its preparation from the
 * cb_quantize_row_q8 codes, and the product through table kt's kernel for w's path. */
size_t cb_qprep_bytes(const cb_matrix *w);
void cb_qprep(const cb_matrix *w, const int16_t *xq, int8_t *out);
void cb_dot_rows_qprep(const cb_kernel_table *kt, const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp,
                       const float *sx, float *const *outs, int64_t nt);

/* The list's facts as compile-time constants CB_BITS_<ID>, CB_GROUP_<ID> (0: no group-scale array) and
 * CB_SCALE_KIND_<ID>, for the SIMD kernels that specialise on an encoding (kernels_x86.h). */
#define CB_FACT_BITS_(ID, CODE, NAME, BITS, ...) CB_BITS_##ID = BITS,
#define CB_FACT_GROUP_(ID, CODE, NAME, BITS, IS_INT, SCALE, GROUP, ...) \
    CB_GROUP_##ID = CB_SCALE_##SCALE == CB_SCALE_GROUP ? GROUP : 0,
#define CB_FACT_SCALE_(ID, CODE, NAME, BITS, IS_INT, SCALE, ...) CB_SCALE_KIND_##ID = CB_SCALE_##SCALE,
enum { CB_ENCODING_LIST(CB_FACT_BITS_) };
enum { CB_ENCODING_LIST(CB_FACT_GROUP_) };
enum { CB_ENCODING_LIST(CB_FACT_SCALE_) };

/* Group size of a CB_SCALE_GROUP dtype (0 otherwise), from the encoding table. */
static inline int32_t cb_group_size(int32_t dtype) {
    const cb_encoding *e = cb_encoding_of(dtype);
    return e && e->scale_kind == CB_SCALE_GROUP ? e->group : 0;
}
#endif
