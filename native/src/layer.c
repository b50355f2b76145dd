/* layer.c — cb_layer_forward: one GQA decoder layer of a step in one call.
 *
 * Role: the decode hot path without a return to Python between ops. For the n tokens of a step:
 *   x = rmsnorm(h, ln_attn); q, k, v = x W^T (+ b); [qk-norm full]; [clip]; [qk-norm per head];
 *   rope(q), rope(k); kv_write(k, v); a = attention(q); h += a O^T (+ b);
 *   x = rmsnorm(h, ln_mlp); h += moe(x) (route + experts + shared + combine) or mlp(x)
 * Each op is the C function the op-by-op path (model/attention.py, model/decoder.py) calls, in the
 * same order on the same values, and the residual adds are plain f32 adds as numpy's: the bits equal
 * the op-by-op layer's. Layer buffers live in the engine's layer buffer (grown like the arena, which
 * every op below resets for its own scratch).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "cb_internal.h"

typedef struct { float *x, *qkv, *q, *k, *v, *att, *o; } bufs;

static size_t q_cols(const cb_decoder_layer *L) { return (size_t)L->attn.n_heads * (size_t)L->attn.qk_dim; }
static size_t kv_cols(const cb_decoder_layer *L) { return (size_t)L->attn.n_kv_heads * (size_t)L->attn.qk_dim; }

static cb_status layer_bufs(cb_engine *e, const cb_decoder_layer *L, int64_t n, bufs *b) {
    size_t H = (size_t)L->hidden, att = (size_t)L->attn.n_heads * (size_t)L->attn.v_dim;
    size_t floats = (size_t)n * (2 * H + 2 * (q_cols(L) + 2 * kv_cols(L)) + att);
    if (floats > e->layer_cap) {
        float *fresh = malloc(floats * sizeof(float));
        if (!fresh) return cb_fail(CB_E_NOMEM, "cb_layer_forward: cannot allocate %zu floats", floats);
        free(e->layer_buf);
        e->layer_buf = fresh;
        e->layer_cap = floats;
        e->mallocs++;
    }
    b->x = e->layer_buf;
    b->o = b->x + (size_t)n * H;
    b->qkv = b->o + (size_t)n * H;
    b->q = b->qkv + (size_t)n * (q_cols(L) + 2 * kv_cols(L));
    b->k = b->q + (size_t)n * q_cols(L);
    b->v = b->k + (size_t)n * kv_cols(L);
    b->att = b->v + (size_t)n * kv_cols(L);
    return CB_OK;
}

static cb_status check_layer(const cb_decoder_layer *L, const cb_step *s, const float *h, int64_t n) {
    if (!L || !s || !h) return cb_fail(CB_E_INVALID, "cb_layer_forward: layer, step or h is NULL");
    if (!L->q || !L->k || !L->v || !L->o || !L->ln_attn || !L->ln_mlp || (!L->moe == !L->mlp))
        return cb_fail(CB_E_INVALID, "cb_layer_forward: q/k/v/o, both norms and exactly one of moe, mlp are required");
    if (L->attn.v_dim != L->attn.qk_dim || L->attn.v_row != L->attn.qk_dim)
        return cb_fail(CB_E_INVALID, "cb_layer_forward: GQA only (v_dim = v_row = qk_dim)");
    if (L->qk_norm < CB_QK_NORM_NONE || L->qk_norm > CB_QK_NORM_HEAD || (L->qk_norm && (!L->norm_q || !L->norm_k)))
        return cb_fail(CB_E_INVALID, "cb_layer_forward: qk_norm %d needs both norm weights", (int)L->qk_norm);
    if (n < 0 || n != (s->n_seqs >= 0 && s->seq_start ? s->seq_start[s->n_seqs] - s->seq_start[0] : -1))
        return cb_fail(CB_E_INVALID, "cb_layer_forward: n %lld is not the step's token count", (long long)n);
    return CB_OK;
}

static void clip(float *a, size_t count, float c) {
    for (size_t i = 0; i < count; i++) a[i] = fminf(fmaxf(a[i], -c), c);
}

/* q, k, v in one product (rows side by side, as matmul_many), then each contiguous: a view of the
 * one token's row when n == 1, else copied out per token. */
static cb_status qkv_product(cb_engine *e, const cb_decoder_layer *L, int64_t n, bufs *b) {
    size_t rq = q_cols(L), rk = kv_cols(L), R = rq + 2 * rk;
    const cb_matrix *ws[3] = {L->q, L->k, L->v};
    const float *bias[3] = {L->bias_q, L->bias_k, L->bias_v}, *xs[3] = {b->x, b->x, b->x};
    float *outs[3] = {b->qkv, b->qkv + rq, b->qkv + rq + rk};
    cb_status st = cb_matmul_batch(e, 3, ws, bias, xs, L->hidden, outs, (int64_t)R, n);
    if (st != CB_OK) return st;
    if (n == 1) {
        b->q = outs[0], b->k = outs[1], b->v = outs[2];
        return CB_OK;
    }
    for (int64_t t = 0; t < n; t++) {
        const float *row = b->qkv + (size_t)t * R;
        memcpy(b->q + (size_t)t * rq, row, rq * sizeof(float));
        memcpy(b->k + (size_t)t * rk, row + rq, rk * sizeof(float));
        memcpy(b->v + (size_t)t * rk, row + rq + rk, rk * sizeof(float));
    }
    return CB_OK;
}

/* q, k, v projections, the family's normalisations, rope, then the cache write. */
static cb_status project_qkv(cb_engine *e, const cb_decoder_layer *L, const cb_step *s, int64_t n, bufs *b) {
    const cb_attn *a = &L->attn;
    int32_t hd = a->qk_dim;
    cb_status st = qkv_product(e, L, n, b);
    if (st == CB_OK && L->qk_norm == CB_QK_NORM_FULL) {
        st = cb_rmsnorm(b->q, n, (int32_t)q_cols(L), L->norm_q, L->rms_eps, b->q);
        if (st == CB_OK) st = cb_rmsnorm(b->k, n, (int32_t)kv_cols(L), L->norm_k, L->rms_eps, b->k);
    }
    if (st != CB_OK) return st;
    if (L->clip_qkv > 0) {
        clip(b->q, (size_t)n * q_cols(L), L->clip_qkv);
        clip(b->k, (size_t)n * kv_cols(L), L->clip_qkv);
        clip(b->v, (size_t)n * kv_cols(L), L->clip_qkv);
    }
    if (L->qk_norm == CB_QK_NORM_HEAD) {
        st = cb_rmsnorm(b->q, n * a->n_heads, hd, L->norm_q, L->rms_eps, b->q);
        if (st == CB_OK) st = cb_rmsnorm(b->k, n * a->n_kv_heads, hd, L->norm_k, L->rms_eps, b->k);
    }
    if (st == CB_OK) st = cb_rope_apply(&L->rope, b->q, n, a->n_heads, (int64_t)q_cols(L), hd, 0, s->positions);
    if (st == CB_OK) st = cb_rope_apply(&L->rope, b->k, n, a->n_kv_heads, (int64_t)kv_cols(L), hd, 0, s->positions);
    if (st == CB_OK)
        st = cb_kv_write(a, L->k_cache, L->v_cache, L->n_blocks, s->n_seqs, s->seq_start, s->pos0, s->block_tables,
                         s->n_table, b->k, b->v);
    return st;
}

static void add_rows(float *h, const float *d, size_t count) {
    for (size_t i = 0; i < count; i++) h[i] += d[i];
}

static cb_status attention_block(cb_engine *e, const cb_decoder_layer *L, const cb_step *s, float *h, int64_t n,
                                 bufs *b) {
    cb_status st = cb_rmsnorm(h, n, L->hidden, L->ln_attn, L->rms_eps, b->x);
    if (st == CB_OK) st = project_qkv(e, L, s, n, b);
    if (st == CB_OK)
        st = cb_attention(e, &L->attn, L->k_cache, L->v_cache, L->n_blocks, s->n_seqs, s->seq_start, s->pos0,
                          s->block_tables, s->n_table, b->q, b->att);
    const float *att = b->att;
    if (st == CB_OK)
        st = cb_matmul_batch(e, 1, &L->o, &L->bias_o, &att, (int64_t)q_cols(L), &b->o, L->hidden, n);
    if (st == CB_OK) add_rows(h, b->o, (size_t)n * (size_t)L->hidden);
    return st;
}

static cb_status mlp_block(cb_engine *e, const cb_decoder_layer *L, float *h, int64_t n, bufs *b,
                           int32_t *idx, float *w) {
    cb_status st = cb_rmsnorm(h, n, L->hidden, L->ln_mlp, L->rms_eps, b->x);
    if (st != CB_OK) return st;
    if (L->moe) st = cb_moe_forward(e, L->moe, b->x, n, b->o, idx, w);
    else st = cb_shared_forward(e, L->mlp, NULL, b->x, n, L->hidden, b->o);
    if (st == CB_OK) add_rows(h, b->o, (size_t)n * (size_t)L->hidden);
    return st;
}

cb_status cb_layer_forward(cb_engine *e, const cb_decoder_layer *L, const cb_step *s, float *h, int64_t n,
                           int32_t *idx, float *w) {
    if (!e) return cb_fail(CB_E_INVALID, "cb_layer_forward: engine is NULL");
    cb_status st = check_layer(L, s, h, n);
    if (st == CB_OK && L->moe && (!idx || !w)) st = cb_fail(CB_E_INVALID, "cb_layer_forward: idx and w are required");
    if (st != CB_OK || n == 0) return st == CB_OK ? st : cb_engine_fail(e, st);
    bufs b;
    if ((st = layer_bufs(e, L, n, &b)) != CB_OK) return cb_engine_fail(e, st);
    st = attention_block(e, L, s, h, n, &b);
    if (st == CB_OK) st = mlp_block(e, L, h, n, &b, idx, w);
    if (st == CB_OK && cb_count_nonfinite(h, (size_t)n * (size_t)L->hidden, 0) != 0)
        st = cb_fail(CB_E_NONFINITE, "non-finite hidden state after the layer (its weights overflow float32 on this input)");
    return st == CB_OK ? st : cb_engine_fail(e, st);
}
