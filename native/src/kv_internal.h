/* kv_internal.h — private helpers shared by the paged-KV files (attention.c, kv_write.c, kv_check.c).
 *
 * Role: one definition of where position j of a sequence lives in the cache
 * pools and one validator of cb_attn + the sequence/block-table arguments, so
 * the writer and the reader can never disagree.
 */
#ifndef CB_KV_INTERNAL_H
#define CB_KV_INTERNAL_H
#include "colibri.h"

/* Bytes of one cache word (CB_F32 4, CB_F16/CB_BF16 2). */
static inline size_t cb_kv_word(int32_t dtype) { return dtype == CB_F32 ? 4 : 2; }

/* Element index of row (block, kv head, slot) in a pool whose rows have `row` words. */
static inline size_t cb_kv_row(const cb_attn *a, int32_t block, int32_t kvh, int32_t slot, int32_t row) {
    return (((size_t)block * (size_t)a->n_kv_heads + (size_t)kvh) * (size_t)a->block_size + (size_t)slot) * (size_t)row;
}

/* First position a token at position p may see. */
static inline int32_t cb_kv_lo(const cb_attn *a, int32_t p) {
    return a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
}

/* Validates a, the pools and every sequence's positions and table entries (attend: the
 * visible range from cb_kv_lo(first position); else the written positions). fn names the
 * caller in messages. *n_tok = seq_start[n_seqs]. */
cb_status cb_kv_check(const char *fn, const cb_attn *a, const void *k_cache, int64_t n_blocks, int32_t n_seqs,
                      const int32_t *seq_start, const int32_t *pos0, const int32_t *const *block_tables,
                      const int32_t *n_table, int attend, int64_t *n_tok);
/* attn_simd.c: acc[c] = acc[c] + p[j] * v[j][c] for j = 0 .. nj-1 in order, c < n (no FMA), and exact
 * f16 -> f32 rows; same bits on every SIMD level. */
void cb_pv_rows(float *acc, const float *p, const float *const *v, int32_t nj, int32_t n);
void cb_f16_row(const uint16_t *src, float *dst, int32_t n);
#endif
