/* kv_check.c — argument validation of the paged-KV calls (cb_attention, cb_kv_write).
 *
 * Role: everything a bad caller can get wrong about the cache geometry, the
 * sequences and their block tables is rejected here with a message naming the
 * sequence, position and table entry, before any cache byte is read or written.
 */
#include <math.h>
#include "cb_internal.h"
#include "kv_internal.h"

#define MAX_SEQS (1 << 20)
#define MAX_BLOCK (1 << 20)
#define MAX_HEADS (1 << 16)
#define MAX_POOL_WORDS 1099511627776.0   /* 2^40 words per pool: every index stays far inside size_t */

static cb_status check_spec(const char *fn, const cb_attn *a) {
    if (!a) return cb_fail(CB_E_INVALID, "%s: attention spec is NULL", fn);
    if (a->n_heads <= 0 || a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads || a->n_heads > MAX_HEADS)
        return cb_fail(CB_E_INVALID, "%s: n_heads %d must be a positive multiple of n_kv_heads %d (at most %d)", fn,
                       (int)a->n_heads, (int)a->n_kv_heads, MAX_HEADS);
    if (a->qk_dim <= 0 || a->qk_dim > CB_MAX_HIDDEN || a->v_dim <= 0 || a->v_dim > a->v_row || a->v_row > CB_MAX_HIDDEN)
        return cb_fail(CB_E_INVALID, "%s: qk_dim %d / v_dim %d / v_row %d invalid (need 0 < v_dim <= v_row)", fn,
                       (int)a->qk_dim, (int)a->v_dim, (int)a->v_row);
    if (a->block_size <= 0 || a->block_size > MAX_BLOCK)
        return cb_fail(CB_E_INVALID, "%s: block_size %d outside 1..%d", fn, (int)a->block_size, MAX_BLOCK);
    if (a->cache_dtype != CB_F32 && a->cache_dtype != CB_F16 && a->cache_dtype != CB_BF16)
        return cb_fail(CB_E_INVALID, "%s: cache_dtype %d must be CB_F32, CB_F16 or CB_BF16", fn, (int)a->cache_dtype);
    if (a->window < 0) return cb_fail(CB_E_INVALID, "%s: window %d < 0", fn, (int)a->window);
    if (!isfinite(a->scale)) return cb_fail(CB_E_INVALID, "%s: scale is not finite", fn);
    for (int32_t h = 0; a->sinks && h < a->n_heads; h++)
        if (!isfinite(a->sinks[h])) return cb_fail(CB_E_INVALID, "%s: sinks[%d] is not finite", fn, (int)h);
    return CB_OK;
}

static cb_status check_table(const char *fn, const cb_attn *a, int64_t n_blocks, int32_t s, const int32_t *table,
                             int32_t n_entries, int32_t lo, int32_t hi) {
    int32_t bs = a->block_size;
    if (n_entries < 0 || (int64_t)hi / bs >= n_entries)
        return cb_fail(CB_E_INVALID, "%s: sequence %d: position %d needs block_tables[%d][%d] but n_table[%d] = %d", fn,
                       (int)s, (int)hi, (int)s, (int)(hi / bs), (int)s, (int)n_entries);
    if (!table) return cb_fail(CB_E_INVALID, "%s: block_tables[%d] is NULL", fn, (int)s);
    for (int32_t b = lo / bs; b <= hi / bs; b++)
        if (table[b] < 0 || table[b] >= n_blocks)
            return cb_fail(CB_E_INVALID, "%s: sequence %d: block_tables[%d][%d] = %d outside [0, %lld)", fn, (int)s,
                           (int)s, (int)b, (int)table[b], (long long)n_blocks);
    return CB_OK;
}

cb_status cb_kv_check(const char *fn, const cb_attn *a, const void *k_cache, int64_t n_blocks, int32_t n_seqs,
                      const int32_t *seq_start, const int32_t *pos0, const int32_t *const *block_tables,
                      const int32_t *n_table, int attend, int64_t *n_tok) {
    cb_status st = check_spec(fn, a);
    if (st != CB_OK) return st;
    if (!k_cache) return cb_fail(CB_E_INVALID, "%s: k_cache is NULL", fn);
    double row = a->qk_dim > a->v_row ? a->qk_dim : a->v_row;
    if (n_blocks <= 0 || (double)n_blocks * a->n_kv_heads * a->block_size * row > MAX_POOL_WORDS)
        return cb_fail(CB_E_INVALID, "%s: n_blocks %lld empty or too large for this geometry", fn, (long long)n_blocks);
    if (n_seqs < 0 || n_seqs > MAX_SEQS) return cb_fail(CB_E_INVALID, "%s: n_seqs %d invalid", fn, (int)n_seqs);
    *n_tok = 0;
    if (n_seqs == 0) return CB_OK;
    if (!seq_start || !pos0 || !block_tables || !n_table)
        return cb_fail(CB_E_INVALID, "%s: seq_start, pos0, block_tables or n_table is NULL", fn);
    if (seq_start[0] < 0) return cb_fail(CB_E_INVALID, "%s: seq_start[0] = %d < 0", fn, (int)seq_start[0]);
    for (int32_t s = 0; s < n_seqs; s++) {
        int32_t len = seq_start[s + 1] - seq_start[s];
        if (seq_start[s + 1] < seq_start[s])
            return cb_fail(CB_E_INVALID, "%s: seq_start[%d] = %d < seq_start[%d] = %d", fn, (int)(s + 1),
                           (int)seq_start[s + 1], (int)s, (int)seq_start[s]);
        if (pos0[s] < 0 || (int64_t)pos0[s] + len > INT32_MAX)
            return cb_fail(CB_E_INVALID, "%s: pos0[%d] = %d invalid", fn, (int)s, (int)pos0[s]);
        if (len == 0) continue;
        int32_t hi = pos0[s] + len - 1, lo = attend ? cb_kv_lo(a, pos0[s]) : pos0[s];
        if ((st = check_table(fn, a, n_blocks, s, block_tables[s], n_table[s], lo, hi)) != CB_OK) return st;
    }
    *n_tok = seq_start[n_seqs];
    return CB_OK;
}
