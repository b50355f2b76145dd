/* gating.c — per-token expert selection and weights for the three gating kinds.
 *
 * Role: turns one token's router logits into (idx[k], w[k]) exactly as the
 * transformers 5.x routers define them, ties to the lower expert index:
 *   SOFTMAX_TOPK_NORM  top-k on raw logits (softmax is monotone), only the
 *                      winners exponentiated: w_j = e_j / sum_j e_j, e_j = exp(l_j - l_max)
 *                      (= softmax over the top-k logits: gpt-oss's router)
 *   SOFTMAX_TOPK       same selection, w_j = exp(l_j - l_max) / sum_all exp(l_e - l_max)
 *   (softmax kinds with a bias: l_e = logit_e + bias_e first, the router's linear bias)
 *   SIGMOID_GROUP      s = sigmoid(l); choice c = s + bias; groups ranked by the sum of
 *                      their top-2 c; top-k of c inside the topk_group best groups;
 *                      w_j = s_j (/ (sum + 1e-20) if norm_topk_prob) * routed_scaling_factor
 * Slots come out in descending score order.
 */
#include <math.h>
#include <string.h>
#include "cb_internal.h"

#define MAX_GROUPS 256

/* Insert (x, e) into the descending top list of length *n (capacity k); strict '>' keeps ties in index order. */
static void topk_push(float x, int32_t e, int32_t k, int32_t *n, float *val, int32_t *idx) {
    int32_t p;
    if (*n < k) p = (*n)++;
    else if (x > val[k - 1]) p = k - 1;
    else return;
    while (p > 0 && x > val[p - 1]) {
        val[p] = val[p - 1];
        idx[p] = idx[p - 1];
        p--;
    }
    val[p] = x;
    idx[p] = e;
}

/* Top-k of v[0..E): once the list is full, blocks of 8 whose maximum cannot enter are skipped. */
static int32_t topk_scan(const float *v, int32_t E, int32_t k, float *val, int32_t *idx) {
    int32_t n = 0, e = 0;
    for (; e < E && n < k; e++) topk_push(v[e], e, k, &n, val, idx);
    for (; e + 8 <= E; e += 8) {
        float m = v[e];
        for (int l = 1; l < 8; l++) m = v[e + l] > m ? v[e + l] : m;
        if (!(m > val[k - 1])) continue;
        for (int l = 0; l < 8; l++) topk_push(v[e + l], e + l, k, &n, val, idx);
    }
    for (; e < E; e++) topk_push(v[e], e, k, &n, val, idx);
    return n;
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

static void softmax_kinds(const cb_gating *g, const float *l, int32_t *idx, float *w) {
    int32_t k = g->top_k, E = g->n_experts;
    float val[CB_MAX_TOPK] = {0};
    topk_scan(l, E, k, val, idx);
    float m = val[0], sum = 0.0f;
    if (g->kind == CB_GATE_SOFTMAX_TOPK_NORM) {
        for (int32_t j = 0; j < k; j++) sum += (w[j] = expf(val[j] - m));
    } else {
        for (int32_t e = 0; e < E; e++) sum += expf(l[e] - m);
        for (int32_t j = 0; j < k; j++) w[j] = expf(val[j] - m);
    }
    for (int32_t j = 0; j < k; j++) w[j] = w[j] / sum;
}

/* The router's linear bias of a softmax kind: every logit, before selection and weights. */
static void softmax_biased(const cb_gating *g, const float *l, const float *bias, int32_t *idx, float *w) {
    float biased[CB_MAX_EXPERTS];
    for (int32_t e = 0; e < g->n_experts; e++) biased[e] = l[e] + bias[e];
    softmax_kinds(g, biased, idx, w);
}

static void sigmoid_group(const cb_gating *g, const float *l, const float *bias, int32_t *idx, float *w) {
    int32_t E = g->n_experts, k = g->top_k, gsz = E / g->n_group, n = 0;
    float c[CB_MAX_EXPERTS], val[CB_MAX_TOPK];
    unsigned char allowed[MAX_GROUPS];
    for (int32_t e = 0; e < E; e++) c[e] = sigmoidf(l[e]) + (bias ? bias[e] : 0.0f);
    for (int32_t q = 0; q < g->n_group; q++) allowed[q] = 1;
    if (g->n_group > 1) {
        float gs[MAX_GROUPS], top2[2], gval[MAX_GROUPS];
        int32_t t2i[2], gidx[MAX_GROUPS], ng = 0;
        for (int32_t q = 0; q < g->n_group; q++) {
            int32_t m = 0;
            for (int32_t e = q * gsz; e < (q + 1) * gsz; e++) topk_push(c[e], e, gsz > 1 ? 2 : 1, &m, top2, t2i);
            gs[q] = gsz > 1 ? top2[0] + top2[1] : top2[0];
            allowed[q] = 0;
        }
        for (int32_t q = 0; q < g->n_group; q++) topk_push(gs[q], q, g->topk_group, &ng, gval, gidx);
        for (int32_t j = 0; j < ng; j++) allowed[gidx[j]] = 1;
    }
    if (g->n_group == 1) n = topk_scan(c, E, k, val, idx);
    else
        for (int32_t e = 0; e < E; e++)
            if (allowed[e / gsz]) topk_push(c[e], e, k, &n, val, idx);
    float sum = 0.0f;
    for (int32_t j = 0; j < k; j++) sum += (w[j] = sigmoidf(l[idx[j]]));
    if (g->norm_topk_prob) {
        float den = sum + 1e-20f;
        for (int32_t j = 0; j < k; j++) w[j] = w[j] / den;
    }
    for (int32_t j = 0; j < k; j++) w[j] = w[j] * g->routed_scaling_factor;
}

/* 0 on success, 1 if a logit is not finite. */
int cb_gate_one(const cb_gating *g, const float *logits, const float *bias, int32_t *idx, float *w) {
    uint32_t bad = 0;      /* branch-free (vectorizable) test of the exponent bits */
    for (int32_t e = 0; e < g->n_experts; e++) {
        uint32_t b;
        memcpy(&b, &logits[e], sizeof b);
        bad |= (b & 0x7f800000u) == 0x7f800000u;
    }
    if (bad) return 1;
    if (g->kind == CB_GATE_SIGMOID_GROUP) sigmoid_group(g, logits, bias, idx, w);
    else if (bias) softmax_biased(g, logits, bias, idx, w);
    else softmax_kinds(g, logits, idx, w);
    return 0;
}

cb_status cb_check_gating(const cb_gating *g) {
    if (!g) return cb_fail(CB_E_INVALID, "gating is NULL");
    if (g->kind < CB_GATE_SOFTMAX_TOPK_NORM || g->kind > CB_GATE_SIGMOID_GROUP)
        return cb_fail(CB_E_INVALID, "gating: unknown kind %d", (int)g->kind);
    if (g->n_experts < 1 || g->n_experts > CB_MAX_EXPERTS)
        return cb_fail(CB_E_INVALID, "gating: n_experts %d outside 1..%d", (int)g->n_experts, CB_MAX_EXPERTS);
    if (g->top_k < 1 || g->top_k > g->n_experts || g->top_k > CB_MAX_TOPK)
        return cb_fail(CB_E_INVALID, "gating: top_k %d outside 1..min(n_experts=%d, %d)", (int)g->top_k,
                       (int)g->n_experts, CB_MAX_TOPK);
    if (g->kind != CB_GATE_SIGMOID_GROUP) return CB_OK;
    if (g->n_group < 1 || g->n_group > MAX_GROUPS || g->n_experts % g->n_group != 0)
        return cb_fail(CB_E_INVALID, "gating: n_group %d must divide n_experts %d (max %d groups)",
                       (int)g->n_group, (int)g->n_experts, MAX_GROUPS);
    if (g->topk_group < 1 || g->topk_group > g->n_group)
        return cb_fail(CB_E_INVALID, "gating: topk_group %d outside 1..n_group=%d", (int)g->topk_group, (int)g->n_group);
    if (g->top_k > g->topk_group * (g->n_experts / g->n_group))
        return cb_fail(CB_E_INVALID, "gating: top_k %d exceeds the experts of %d groups", (int)g->top_k, (int)g->topk_group);
    if (!isfinite(g->routed_scaling_factor))
        return cb_fail(CB_E_INVALID, "gating: routed_scaling_factor is not finite");
    return CB_OK;
}

cb_status cb_gate_logits(const cb_gating *g, const float *logits, const float *bias, int64_t n,
                         int32_t *idx, float *w) {
    cb_status s = cb_check_gating(g);
    if (s != CB_OK) return s;
    if (n < 0 || n > CB_MAX_ROWS || (n > 0 && (!logits || !idx || !w))) return cb_fail(CB_E_INVALID, "cb_gate_logits: NULL tensor or n < 0");
    for (int32_t e = 0; bias && e < g->n_experts; e++)
        if (!isfinite(bias[e])) return cb_fail(CB_E_NONFINITE, "cb_gate_logits: bias[%d] is not finite", (int)e);
    int32_t E = g->n_experts, k = g->top_k;
    for (int64_t t = 0; t < n; t++)
        if (cb_gate_one(g, logits + t * E, bias, idx + t * k, w + t * k))
            return cb_fail(CB_E_NONFINITE, "router logits of token %lld are not finite", (long long)t);
    return CB_OK;
}
