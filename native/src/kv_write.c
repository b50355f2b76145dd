/* kv_write.c — cb_kv_write: store a step's keys/values into the paged cache pools.
 *
 * Role: after the k/v projections (and RoPE on k), before cb_attention. Token
 * i of sequence s goes to position pos0[s] + i, i.e. block
 * block_tables[s][p / block_size], slot p % block_size (kv_internal.h).
 * f16 / bf16 words are rounded to nearest even (NaN stays NaN, overflow -> inf).
 */
#include <math.h>
#include <string.h>
#include "cb_internal.h"
#include "kv_internal.h"

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static uint16_t f32_to_f16(float f) {
    uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));   /* NaN, quiet */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);                           /* >= 65520: inf */
    if (ax >= 0x38800000u) {                                                            /* normal half */
        uint32_t r = ax - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    float v = fabsf(f) * 16777216.0f;   /* subnormal half: units of 2^-24, exact scaling */
    return (uint16_t)(sign | (uint32_t)nearbyintf(v));
}

static uint16_t f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static void store_row(int32_t dtype, void *pool, size_t at, const float *src, int32_t n) {
    if (dtype == CB_F32) memcpy((float *)pool + at, src, sizeof(float) * (size_t)n);
    else if (dtype == CB_F16)
        for (int32_t i = 0; i < n; i++) ((uint16_t *)pool)[at + i] = f32_to_f16(src[i]);
    else
        for (int32_t i = 0; i < n; i++) ((uint16_t *)pool)[at + i] = f32_to_bf16(src[i]);
}

cb_status cb_kv_write(const cb_attn *a, void *k_cache, void *v_cache, int64_t n_blocks, int32_t n_seqs,
                      const int32_t *seq_start, const int32_t *pos0, const int32_t *const *block_tables,
                      const int32_t *n_table, const float *k, const float *v) {
    int64_t n_tok = 0;
    cb_status st = cb_kv_check("cb_kv_write", a, k_cache, n_blocks, n_seqs, seq_start, pos0, block_tables, n_table,
                               0, &n_tok);
    if (st != CB_OK) return st;
    if (v && (!v_cache || v_cache == k_cache))
        return cb_fail(CB_E_INVALID, "cb_kv_write: v given but v_cache is NULL or the K pool (MLA writes k only)");
    if (!v && v_cache && v_cache != k_cache)
        return cb_fail(CB_E_INVALID, "cb_kv_write: v is NULL but v_cache is a separate pool");
    if (n_tok > 0 && !k) return cb_fail(CB_E_INVALID, "cb_kv_write: k is NULL");
    int32_t bs = a->block_size, nkv = a->n_kv_heads;
    for (int32_t s = 0; s < n_seqs; s++)
        for (int32_t t = seq_start[s]; t < seq_start[s + 1]; t++) {
            int32_t p = pos0[s] + (t - seq_start[s]), block = block_tables[s][p / bs], slot = p % bs;
            for (int32_t h = 0; h < nkv; h++) {
                size_t src = (size_t)t * (size_t)nkv + (size_t)h;
                store_row(a->cache_dtype, k_cache, cb_kv_row(a, block, h, slot, a->qk_dim), k + src * (size_t)a->qk_dim,
                          a->qk_dim);
                if (v)
                    store_row(a->cache_dtype, v_cache, cb_kv_row(a, block, h, slot, a->v_row),
                              v + src * (size_t)a->v_row, a->v_row);
            }
        }
    return CB_OK;
}
