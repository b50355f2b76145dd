/* route.c — cb_route: router logits (kernel dot order) then per-token gating.
 *
 * Role: the first stage of a MoE layer. Tokens are split into blocks across
 * threads; a token's logits and choice depend only on that token, the router
 * and the bias.
 */
#include <math.h>
#include <stdatomic.h>
#include "cb_internal.h"
#include "kernels.h"

#define ROUTE_BLOCK 16

typedef struct {
    const cb_gating *g;
    cb_matrix router;
    const float *bias, *x;
    int64_t n;
    int32_t hidden;
    float *logits;
    int32_t *idx;
    float *w;
    atomic_llong bad;   /* lowest token with non-finite logits, or n */
} route_run;

static void route_block(void *ctx, int64_t item) {
    route_run *r = ctx;
    int64_t t0 = item * ROUTE_BLOCK, t1 = t0 + ROUTE_BLOCK < r->n ? t0 + ROUTE_BLOCK : r->n;
    int32_t E = r->g->n_experts, k = r->g->top_k;
    const float *xs[ROUTE_BLOCK] = {0};
    float *ls[ROUTE_BLOCK] = {0};
    for (int64_t t = t0; t < t1; t++) {
        xs[t - t0] = r->x + (size_t)t * (size_t)r->hidden;
        ls[t - t0] = r->logits + (size_t)t * (size_t)E;
    }
    cb_dot_rows(&r->router, 0, E, xs, ls, t1 - t0);
    for (int64_t t = t0; t < t1; t++)
        if (cb_gate_one(r->g, ls[t - t0], r->bias, r->idx + t * k, r->w + t * k)) {
            long long cur = atomic_load(&r->bad);
            while (t < cur && !atomic_compare_exchange_weak(&r->bad, &cur, t)) {
            }
        }
}

size_t cb_route_scratch_bytes(const cb_gating *g, int64_t n) {
    return cb_arena_need(sizeof(float) * (size_t)n * (size_t)g->n_experts);
}

/* Assumes validated arguments and an arena with cb_route_scratch_bytes free. */
cb_status cb_route_run(cb_engine *e, const cb_gating *g, const float *router, const float *bias,
                       const float *x, int64_t n, int32_t hidden, int32_t *idx, float *w) {
    route_run r = {g, {router, NULL, NULL, CB_F32, g->n_experts, hidden}, bias, x, n, hidden,
                   NULL, idx, w, n};
    r.logits = cb_arena_alloc(e->arena, sizeof(float) * (size_t)n * (size_t)g->n_experts);
    cb_pool_run(e->pool, route_block, &r, (n + ROUTE_BLOCK - 1) / ROUTE_BLOCK);
    long long bad = atomic_load(&r.bad);
    if (bad < n)
        return cb_fail(CB_E_NONFINITE, "router logits of token %lld are not finite (non-finite input or router)", bad);
    return CB_OK;
}

static cb_status check_route_args(const cb_gating *g, const float *router, const float *bias,
                                  const float *x, int64_t n, int32_t hidden) {
    cb_status s = cb_check_gating(g);
    if (s != CB_OK) return s;
    if (!router) return cb_fail(CB_E_INVALID, "router weights are NULL");
    if (hidden <= 0 || hidden > CB_MAX_HIDDEN || n < 0 || n > CB_MAX_ROWS) return cb_fail(CB_E_INVALID, "hidden %d / n %lld invalid", (int)hidden, (long long)n);
    if (n > 0 && !x) return cb_fail(CB_E_INVALID, "input x is NULL");
    for (int32_t e = 0; bias && e < g->n_experts; e++)
        if (!isfinite(bias[e])) return cb_fail(CB_E_NONFINITE, "router bias[%d] is not finite", (int)e);
    return CB_OK;
}

cb_status cb_route(cb_engine *e, const cb_gating *g, const float *router, const float *bias,
                   const float *x, int64_t n, int32_t hidden, int32_t *idx, float *w) {
    if (!e) return cb_fail(CB_E_INVALID, "cb_route: engine is NULL");
    cb_status s = check_route_args(g, router, bias, x, n, hidden);
    if (s == CB_OK && n > 0 && (!idx || !w)) s = cb_fail(CB_E_INVALID, "cb_route: idx or w is NULL");
    if (s == CB_OK) s = cb_engine_scratch(e, cb_route_scratch_bytes(g, n));
    if (s == CB_OK && n > 0) s = cb_route_run(e, g, router, bias, x, n, hidden, idx, w);
    return s == CB_OK ? s : cb_engine_fail(e, s);
}

cb_status cb_check_route_args(const cb_gating *g, const float *router, const float *bias,
                              const float *x, int64_t n, int32_t hidden) {
    return check_route_args(g, router, bias, x, n, hidden);
}
