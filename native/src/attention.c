/* attention.c — cb_attention: causal attention over a paged KV cache, optionally with a sliding window and
 * per-head sinks (gpt-oss).
 *
 * Role: the attention core of a decoder layer, between cb_kv_write and the o
 * projection. GQA, MQA and MLA-style shared values (v_cache == k_cache) are
 * the same code. A work item is (sequence, kv head, chunk of <= 64 query
 * vectors; pick_chunk chooses the size per call) where the group's query
 * vectors are listed token-major (token, head in group); the item's vectors
 * are the token list of cb_dot_rows over each K block (tile reuse); scores
 * for whole blocks are computed and masked afterwards (each element is
 * independent). Then, per vector: scale, max (over the sink too), e_j =
 * exp(s_j - max) summed in double in ascending j (then the head's sink term
 * exp(sink - max), when the layer has sinks), p_j = (float)(e_j / sum), out =
 * sum_j p_j * v_j in ascending j with separate multiply and add (attn_simd.c). Nothing depends
 * on the item split, the thread, the other sequences or the SIMD level.
 *
 * While a block's scores run, the next block's keys and this block's values are prefetched (decode of 32
 * sequences, AVX2, Zen 4: the attention's share of the time 13.5% -> 10.7%; a cache hint, no effect on results).
 *
 * Scratch: one slot per engine thread (scores, e, accumulators), claimed by
 * an item for its duration; at most n_threads items run at once.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include "cb_internal.h"
#include "kernels.h"
#include "kv_internal.h"

#define QMAX 64                      /* most query vectors per item */
#define INLINE_WORK 32768.0          /* multiply-adds below which the caller runs every item itself */
#define VBLOCK 64                    /* value rows decoded and accumulated together */
#define SCORE_BUDGET (16u << 20)      /* bytes of one slot's score rows before the chunk shrinks */

typedef struct { int32_t seq, kvh, v0, v1; } at_item;

typedef struct {
    float *scores;   /* [chunk][lk_max] */
    double *e;       /* [lk_max] */
    float *acc;      /* [chunk][v_dim] */
    float *vbuf;     /* [VBLOCK][v_dim] decoded value rows */
} at_slot;

typedef struct {
    const cb_attn *a;
    const unsigned char *k, *v;
    const int32_t *seq_start, *pos0;
    const int32_t *const *tables;
    const float *q;
    float *out;
    const at_item *items;
    at_slot *slots;
    atomic_int *busy;
    int32_t n_slots, chunk;
    int64_t lk_max;
} at_run;

static int claim(at_run *r) {
    for (int32_t i = 0;; i = (i + 1) % r->n_slots) {
        int expect = 0;
        if (atomic_compare_exchange_strong(&r->busy[i], &expect, 1)) return i;
    }
}

/* Asks for `bytes` at p in the caches (a hint: no effect on results). */
static void prefetch_bytes(const unsigned char *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 2);
}

/* Scores of nq query vectors against keys [lo, hi] (indices relative to base), block by block. */
static void scores(const at_run *r, const at_item *it, const float *const *qp, float *const *srow, int nq,
                   int32_t lo, int32_t hi, int32_t base) {
    const cb_attn *a = r->a;
    int32_t bs = a->block_size;
    size_t word = cb_kv_word(a->cache_dtype);
    float *outs[QMAX];
    for (int32_t b = lo / bs; b <= hi / bs; b++) {
        int32_t bid = r->tables[it->seq][b], first = b * bs;
        cb_matrix m = {r->k + cb_kv_row(a, bid, it->kvh, 0, a->qk_dim) * word, NULL, NULL, a->cache_dtype, bs, a->qk_dim};
        int32_t r0 = (lo > first ? lo : first) - first, r1 = (hi < first + bs - 1 ? hi : first + bs - 1) - first + 1;
        for (int i = 0; i < nq; i++) outs[i] = srow[i] + (first - base);
        if (b < hi / bs)                  /* the next block's keys stream in while these are multiplied */
            prefetch_bytes(r->k + cb_kv_row(a, r->tables[it->seq][b + 1], it->kvh, 0, a->qk_dim) * word,
                           (size_t)bs * (size_t)a->qk_dim * word);
        if (r->v != r->k)                 /* and this block's values, read after the softmax */
            prefetch_bytes(r->v + cb_kv_row(a, bid, it->kvh, 0, a->v_row) * word, (size_t)bs * (size_t)a->v_row * word);
        cb_dot_rows(&m, r0, r1, qp, outs, nq);
    }
}

/* One vector's scores over its keys [lo, p] -> probabilities, in place. sink: the head's sink logit, one
 * more softmax term whose probability is dropped (NULL: none). */
static void softmax_row(float *s, double *e, int32_t n, float scale, const float *sink) {
    float m = sink ? *sink : -INFINITY;
    for (int32_t j = 0; j < n; j++) {
        s[j] = s[j] * scale;
        if (s[j] > m) m = s[j];
    }
    double sum = 0.0;
    for (int32_t j = 0; j < n; j++) {
        e[j] = exp((double)(s[j] - m));
        sum += e[j];
    }
    if (sink) sum += exp((double)(*sink - m));
    for (int32_t j = 0; j < n; j++) s[j] = (float)(e[j] / sum);
}

static const float *value_row(const at_run *r, const at_item *it, int32_t j, float *buf) {
    const cb_attn *a = r->a;
    int32_t bid = r->tables[it->seq][j / a->block_size];
    size_t at = cb_kv_row(a, bid, it->kvh, j % a->block_size, a->v_row);
    if (a->cache_dtype == CB_F32) return (const float *)r->v + at;
    const uint16_t *w = (const uint16_t *)r->v + at;
    if (a->cache_dtype == CB_F16) cb_f16_row(w, buf, a->v_dim);
    else
        for (int32_t c = 0; c < a->v_dim; c++) buf[c] = cb_bf16_to_f32(w[c]);
    return buf;
}

static void attend_item(void *ctx, int64_t index) {
    at_run *r = ctx;
    const at_item *it = &r->items[index];
    const cb_attn *a = r->a;
    int32_t G = a->n_heads / a->n_kv_heads, nq = it->v1 - it->v0, vd = a->v_dim, slot = claim(r);
    at_slot *sl = &r->slots[slot];
    const float *qp[QMAX];
    float *srow[QMAX];
    int32_t lo_q[QMAX], p_q[QMAX];
    for (int i = 0; i < nq; i++) {
        int32_t v = it->v0 + i, tok = r->seq_start[it->seq] + v / G, head = it->kvh * G + v % G;
        qp[i] = r->q + ((size_t)tok * (size_t)a->n_heads + (size_t)head) * (size_t)a->qk_dim;
        srow[i] = sl->scores + (size_t)i * (size_t)r->lk_max;
        p_q[i] = r->pos0[it->seq] + v / G;
        lo_q[i] = cb_kv_lo(a, p_q[i]);
    }
    int32_t lo = lo_q[0], hi = p_q[nq - 1], base = lo / a->block_size * a->block_size;
    scores(r, it, qp, srow, nq, lo, hi, base);
    for (int i = 0; i < nq; i++) {
        const float *sink = a->sinks ? a->sinks + it->kvh * G + (it->v0 + i) % G : NULL;
        softmax_row(srow[i] + (lo_q[i] - base), sl->e, p_q[i] - lo_q[i] + 1, a->scale, sink);
    }
    memset(sl->acc, 0, sizeof(float) * (size_t)nq * (size_t)vd);
    const float *vrows[VBLOCK];
    for (int32_t jb = lo; jb <= hi; jb += VBLOCK) {       /* value rows in blocks of VBLOCK, ascending */
        int32_t je = jb + VBLOCK - 1 < hi ? jb + VBLOCK - 1 : hi;
        for (int32_t j = jb; j <= je; j++)
            vrows[j - jb] = value_row(r, it, j, sl->vbuf + (size_t)(j - jb) * (size_t)vd);
        for (int i = 0; i < nq; i++) {
            int32_t j0 = jb > lo_q[i] ? jb : lo_q[i], j1 = je < p_q[i] ? je : p_q[i];
            if (j0 <= j1)
                cb_pv_rows(sl->acc + (size_t)i * (size_t)vd, srow[i] + (j0 - base), vrows + (j0 - jb), j1 - j0 + 1, vd);
        }
    }
    for (int i = 0; i < nq; i++) {
        int32_t v = it->v0 + i, tok = r->seq_start[it->seq] + v / G, head = it->kvh * G + v % G;
        memcpy(r->out + ((size_t)tok * (size_t)a->n_heads + (size_t)head) * (size_t)vd, sl->acc + (size_t)i * (size_t)vd,
               sizeof(float) * (size_t)vd);
    }
    atomic_store(&r->busy[slot], 0);
}

/* Items of every (sequence, kv head, chunk of query vectors); returns the count and the widest key span. */
static int64_t make_items(const cb_attn *a, int32_t n_seqs, const int32_t *seq_start, const int32_t *pos0,
                          int32_t chunk, at_item *items, int64_t *lk_max) {
    int32_t G = a->n_heads / a->n_kv_heads, bs = a->block_size;
    int64_t k = 0;
    *lk_max = 1;
    for (int32_t s = 0; s < n_seqs; s++) {
        int32_t nv = (seq_start[s + 1] - seq_start[s]) * G;
        for (int32_t v0 = 0; v0 < nv; v0 += chunk) {
            int32_t v1 = v0 + chunk < nv ? v0 + chunk : nv, lo = cb_kv_lo(a, pos0[s] + v0 / G);
            int64_t span = (int64_t)pos0[s] + (v1 - 1) / G - lo / bs * bs + 1;
            if (span > *lk_max) *lk_max = span;
            for (int32_t h = 0; h < a->n_kv_heads; h++)
                if (items) items[k + h] = (at_item){s, h, v0, v1};
            k += a->n_kv_heads;
        }
    }
    return k;
}

/* Largest chunk (64, 32, 16 vectors) that still gives every thread an item and keeps a slot's score
 * rows within SCORE_BUDGET: big groups (MLA: all heads share one latent cache) read K once per
 * 64 vectors instead of once per 16. Only the schedule depends on it, never a bit. */
static int32_t pick_chunk(const cb_attn *a, int32_t n_seqs, const int32_t *seq_start, const int32_t *pos0,
                          int32_t threads) {
    for (int32_t c = QMAX; c > 16; c /= 2) {
        int64_t lk, items = make_items(a, n_seqs, seq_start, pos0, c, NULL, &lk);
        if (items >= threads && (size_t)c * (size_t)lk * sizeof(float) <= SCORE_BUDGET) return c;
    }
    return 16;
}

static size_t slot_bytes(const cb_attn *a, int32_t chunk, int64_t lk) {
    size_t vd = (size_t)a->v_dim;
    return cb_arena_need(sizeof(float) * (size_t)chunk * (size_t)lk) + cb_arena_need(sizeof(double) * (size_t)lk) +
           cb_arena_need(sizeof(float) * (size_t)chunk * vd) + cb_arena_need(sizeof(float) * VBLOCK * vd);
}

static void carve_slots(cb_engine *e, const cb_attn *a, at_run *r) {
    for (int32_t i = 0; i < r->n_slots; i++) {
        r->slots[i].scores = cb_arena_alloc(e->arena, sizeof(float) * (size_t)r->chunk * (size_t)r->lk_max);
        r->slots[i].e = cb_arena_alloc(e->arena, sizeof(double) * (size_t)r->lk_max);
        r->slots[i].acc = cb_arena_alloc(e->arena, sizeof(float) * (size_t)r->chunk * (size_t)a->v_dim);
        r->slots[i].vbuf = cb_arena_alloc(e->arena, sizeof(float) * VBLOCK * (size_t)a->v_dim);
        atomic_init(&r->busy[i], 0);
    }
}

cb_status cb_attention(cb_engine *e, const cb_attn *a, const void *k_cache, const void *v_cache, int64_t n_blocks,
                       int32_t n_seqs, const int32_t *seq_start, const int32_t *pos0,
                       const int32_t *const *block_tables, const int32_t *n_table, const float *q, float *out) {
    if (!e) return cb_fail(CB_E_INVALID, "cb_attention: engine is NULL");
    int64_t n_tok = 0, lk_max = 1;
    cb_status st = cb_kv_check("cb_attention", a, k_cache, n_blocks, n_seqs, seq_start, pos0, block_tables, n_table,
                               1, &n_tok);
    if (st == CB_OK && !v_cache) st = cb_fail(CB_E_INVALID, "cb_attention: v_cache is NULL (MLA passes k_cache)");
    if (st == CB_OK && v_cache == k_cache && a->v_row != a->qk_dim)
        st = cb_fail(CB_E_INVALID, "cb_attention: shared K/V pool needs v_row %d == qk_dim %d", (int)a->v_row,
                     (int)a->qk_dim);
    if (st == CB_OK && n_tok > 0 && (!q || !out)) st = cb_fail(CB_E_INVALID, "cb_attention: q or out is NULL");
    if (st == CB_OK && n_tok * a->n_heads > INT32_MAX)
        st = cb_fail(CB_E_INVALID, "cb_attention: %lld tokens x %d heads is above 2^31 query vectors", (long long)n_tok,
                     (int)a->n_heads);
    if (st != CB_OK) return cb_engine_fail(e, st);
    if (n_tok == 0) return CB_OK;
    int32_t n_slots = cb_engine_threads(e), chunk = pick_chunk(a, n_seqs, seq_start, pos0, n_slots);
    int64_t n_items = make_items(a, n_seqs, seq_start, pos0, chunk, NULL, &lk_max);
    size_t bytes = cb_arena_need(sizeof(at_item) * (size_t)n_items) + cb_arena_need(sizeof(at_slot) * (size_t)n_slots) +
                   cb_arena_need(sizeof(atomic_int) * (size_t)n_slots) + (size_t)n_slots * slot_bytes(a, chunk, lk_max);
    if ((st = cb_engine_scratch(e, bytes)) != CB_OK) return cb_engine_fail(e, st);
    at_run r = {a, k_cache, v_cache, seq_start, pos0, block_tables, q, out, NULL, NULL, NULL, n_slots, chunk, lk_max};
    at_item *items = cb_arena_alloc(e->arena, sizeof(at_item) * (size_t)n_items);
    make_items(a, n_seqs, seq_start, pos0, chunk, items, &lk_max);
    r.items = items;
    r.slots = cb_arena_alloc(e->arena, sizeof(at_slot) * (size_t)n_slots);
    r.busy = cb_arena_alloc(e->arena, sizeof(atomic_int) * (size_t)n_slots);
    carve_slots(e, a, &r);
    double work = (double)n_tok * a->n_heads * (double)lk_max * (a->qk_dim + a->v_dim);
    if (work < INLINE_WORK)
        for (int64_t i = 0; i < n_items; i++) attend_item(&r, i);
    else
        cb_pool_run(e->pool, attend_item, &r, n_items);
    return CB_OK;
}
