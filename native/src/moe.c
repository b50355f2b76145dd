/* moe.c — cb_moe_forward: route, group tokens by expert, run the FFNs, combine.
 *
 * Role: the fused in-process MoE layer. It calls exactly the pieces a
 * distributed caller would (cb_route_run, the FFN executor behind
 * cb_expert_forward / cb_shared_forward, cb_combine_rows), so its output is
 * bit-identical to doing those calls separately. Each routed expert runs
 * once per call on all of its (token, slot) rows: its weights are read once.
 */
#include "cb_internal.h"

#define COMBINE_BLOCK 16

typedef struct {
    int64_t n;
    int32_t k, hidden;
    const float *w, *slot_out, *shared;
    float *y;
} combine_run;

static void combine_block(void *ctx, int64_t item) {
    combine_run *c = ctx;
    int64_t t0 = item * COMBINE_BLOCK, t1 = t0 + COMBINE_BLOCK < c->n ? t0 + COMBINE_BLOCK : c->n;
    cb_combine_rows(t0, t1, c->k, c->hidden, c->w, c->slot_out, c->shared, c->y);
}

static cb_status check_layer(const cb_moe_layer *L, const float *x, int64_t n, const float *y,
                             const int32_t *idx, const float *w) {
    if (!L) return cb_fail(CB_E_INVALID, "cb_moe_forward: layer is NULL");
    if (n < 0 || n > CB_MAX_ROWS || L->hidden <= 0 || L->hidden > CB_MAX_HIDDEN) return cb_fail(CB_E_INVALID, "cb_moe_forward: n %lld / hidden %d invalid", (long long)n, (int)L->hidden);
    if (n > 0 && (!x || !y || !idx || !w)) return cb_fail(CB_E_INVALID, "cb_moe_forward: x, y, idx_out and w_out must not be NULL");
    if (!L->experts) return cb_fail(CB_E_INVALID, "cb_moe_forward: experts array is NULL");
    cb_status s = cb_check_route_args(&L->gating, L->router, L->bias, x, n, L->hidden);
    if (s != CB_OK) return s;
    if (L->n_shared < 0 || L->n_shared > 1) return cb_fail(CB_E_INVALID, "cb_moe_forward: n_shared %d (0 or 1)", (int)L->n_shared);
    if (L->n_shared == 1) return cb_check_expert(L->shared, L->hidden, "shared expert");
    return CB_OK;
}

/* Counts rows per expert and checks every routed expert. */
static cb_status count_rows(const cb_moe_layer *L, const int32_t *idx, int64_t pairs, int64_t *count) {
    int32_t E = L->gating.n_experts;
    for (int32_t e = 0; e < E; e++) count[e] = 0;
    for (int64_t p = 0; p < pairs; p++) count[idx[p]]++;
    for (int32_t e = 0; e < E; e++) {
        if (!count[e]) continue;
        char name[32];
        snprintf(name, sizeof name, "expert %d", (int)e);
        if (!L->experts[e]) return cb_fail(CB_E_INVALID, "expert %d is routed to but missing (NULL)", (int)e);
        cb_status s = cb_check_expert(L->experts[e], L->hidden, name);
        if (s != CB_OK) return s;
    }
    return CB_OK;
}

static int32_t plan_tasks(const cb_moe_layer *L, int64_t n, const int64_t *count,
                          cb_ffn_task *tasks) {
    int32_t T = 0;
    for (int32_t e = 0; e < L->gating.n_experts; e++)
        if (count[e]) tasks[T++] = (cb_ffn_task){L->experts[e], NULL, NULL, NULL, count[e]};
    if (L->n_shared == 1) tasks[T++] = (cb_ffn_task){L->shared, NULL, NULL, NULL, n};
    return T;
}

cb_status cb_moe_forward(cb_engine *e, const cb_moe_layer *L, const float *x, int64_t n,
                         float *y, int32_t *idx, float *w) {
    if (!e) return cb_fail(CB_E_INVALID, "cb_moe_forward: engine is NULL");
    cb_status s = check_layer(L, x, n, y, idx, w);
    if (s == CB_OK) s = cb_engine_scratch(e, cb_route_scratch_bytes(&L->gating, n));
    if (s == CB_OK && n > 0) s = cb_route_run(e, &L->gating, L->router, L->bias, x, n, L->hidden, idx, w);
    if (s != CB_OK || n == 0) return s == CB_OK ? s : cb_engine_fail(e, s);

    int32_t E = L->gating.n_experts, k = L->gating.top_k, H = L->hidden;
    int64_t pairs = n * k, count[CB_MAX_EXPERTS];
    static _Thread_local cb_ffn_task tasks[CB_MAX_EXPERTS + 1];
    if ((s = count_rows(L, idx, pairs, count)) != CB_OK) return cb_engine_fail(e, s);
    int32_t T = plan_tasks(L, n, count, tasks);
    size_t shared_bytes = L->n_shared ? cb_arena_need(sizeof(float) * (size_t)(n * H)) + cb_arena_need(sizeof(float) * (size_t)n) : 0;
    size_t bytes = cb_ffn_scratch_bytes(e, tasks, T) + cb_arena_need(sizeof(float) * (size_t)pairs * (size_t)H) +
                   2 * cb_arena_need(sizeof(void *) * (size_t)(pairs + n)) + cb_arena_need(sizeof(int64_t) * (size_t)(E + 1)) + shared_bytes;
    if ((s = cb_engine_scratch(e, bytes)) != CB_OK) return cb_engine_fail(e, s);

    float *slot_out = cb_arena_alloc(e->arena, sizeof(float) * (size_t)pairs * (size_t)H);
    const float **xs = cb_arena_alloc(e->arena, sizeof(void *) * (size_t)(pairs + n));
    float **outs = cb_arena_alloc(e->arena, sizeof(void *) * (size_t)(pairs + n));
    int64_t *start = cb_arena_alloc(e->arena, sizeof(int64_t) * (size_t)(E + 1));
    start[0] = 0;
    for (int32_t q = 0; q < E; q++) start[q + 1] = start[q] + count[q];
    for (int64_t p = 0; p < pairs; p++) {   /* stable: each expert's rows in (token, slot) order */
        int64_t at = start[idx[p]]++;
        xs[at] = x + (size_t)(p / k) * (size_t)H;
        outs[at] = slot_out + (size_t)p * (size_t)H;
    }
    int64_t off = 0;
    for (int32_t t = 0, q = 0; q < E; q++) {
        if (!count[q]) continue;
        tasks[t].xs = xs + off;
        tasks[t].outs = outs + off;
        off += count[q];
        t++;
    }
    float *shared = NULL;
    if (L->n_shared) {
        shared = cb_arena_alloc(e->arena, sizeof(float) * (size_t)(n * H));
        float *sig = L->shared_gate ? cb_arena_alloc(e->arena, sizeof(float) * (size_t)n) : NULL;
        for (int64_t t = 0; t < n; t++) {
            xs[pairs + t] = x + (size_t)t * (size_t)H;
            outs[pairs + t] = shared + (size_t)t * (size_t)H;
            if (sig) sig[t] = cb_sigmoid_gate(L->shared_gate, xs[pairs + t], H);
        }
        tasks[T - 1].xs = xs + pairs;
        tasks[T - 1].outs = outs + pairs;
        tasks[T - 1].row_scale = sig;
    }
    cb_ffn_run(e, tasks, T);
    combine_run c = {n, k, H, w, slot_out, shared, y};
    cb_pool_run(e->pool, combine_block, &c, (n + COMBINE_BLOCK - 1) / COMBINE_BLOCK);
    return CB_OK;
}
