/* dense.c — cb_matmul_batch / cb_matmul: dense products of the whole-model path.
 *
 * Role: every projection outside the experts (attention q/k/v/o, MLA down/up
 * projections, dense MLPs, the LM head) is out = x W^T (+ bias) on any
 * cb_matrix encoding. Work items are (matrix, output-row block, token span);
 * a span is walked in chunks of TOKEN_CHUNK tokens. Each element goes through
 * cb_dot_rows' fixed sequence and the bias is a separate add, so no split,
 * thread or batch size changes a bit (K is never split). With the engine's
 * opt-in w8a8 mode, CB_I8_ROW matrices take per-token int8 activations and
 * exact integer dots (kernels_q8.c), and int4 / int6 matrices take the same activations,
 * prepared per token, through the w4a8 / w6a8 kernels (kernels_q4.c, kernels_q6.c), and llama.cpp's block
 * encodings take its vec_dot types' activations (kernels.c QPATH): k-quant and iq4_xs matrices Q8_K (kernels_kq.c),
 * q8_0 / q5_0 / mxfp4 / iq4_nl Q8_0 and q5_1 Q8_1 (kernels_q80.c), exactly as the experts do.
 */
#include <stdio.h>
#include "cb_internal.h"
#include "kernels.h"

#define ROW_BLOCK 64      /* output rows per item */
#define TOKEN_CHUNK 16    /* tokens per pass over an item's weight rows */
#define MAX_MATS 4096
#define INLINE_WORK 32768.0   /* multiply-adds below which waking the pool costs more than it saves */

typedef struct { int32_t mat, r0, r1; int64_t t0, t1; } mm_item;

typedef struct {
    const cb_matrix *const *ws;
    const float *const *biases, *const *xs;
    float *const *outs;
    int64_t x_stride, out_stride;
    const mm_item *items;
    int16_t *const *xq;        /* w8a8: per matrix its inputs quantized [n, cols] (NULL: f32 path) */
    float *const *sx;          /* w8a8: per matrix the per-token scales [n] */
    int8_t *const *xpre;       /* w4a8 / w6a8: per int4 / int6 matrix its inputs prepared [n, cb_qprep_bytes] */
    unsigned char *const *xk;  /* block paths (Q8_K, Q8_0, Q8_1: kernels.c QPATH): per matrix its inputs as activation
                                * blocks [n, cb_qblocks_bytes] (NULL: other paths) */
} mm_run;

static void mm_block(void *ctx, int64_t item) {
    const mm_run *run = ctx;
    mm_item it = run->items[item];
    const cb_matrix *w = run->ws[it.mat];
    const float *bias = run->biases ? run->biases[it.mat] : NULL;
    const float *xs[TOKEN_CHUNK];
    const int16_t *xq[TOKEN_CHUNK];
    const int8_t *xp[TOKEN_CHUNK];
    const void *xk[TOKEN_CHUNK];
    float *outs[TOKEN_CHUNK];
    const int16_t *q = run->xq ? run->xq[it.mat] : NULL;
    const int8_t *pre = run->xpre ? run->xpre[it.mat] : NULL;
    size_t pre_bytes = pre ? cb_qprep_bytes(w) : 0;
    const unsigned char *kq = run->xk ? run->xk[it.mat] : NULL;
    size_t kq_bytes = kq ? cb_qblocks_bytes(w) : 0;
    for (int64_t c = it.t0; c < it.t1; c += TOKEN_CHUNK) {
        int64_t m = it.t1 - c < TOKEN_CHUNK ? it.t1 - c : TOKEN_CHUNK;
        for (int64_t i = 0; i < m; i++) {
            xs[i] = run->xs[it.mat] + (size_t)(c + i) * (size_t)run->x_stride;
            if (q) xq[i] = q + (size_t)(c + i) * (size_t)w->cols;
            if (pre) xp[i] = pre + (size_t)(c + i) * pre_bytes;
            if (kq) xk[i] = kq + (size_t)(c + i) * kq_bytes;
            outs[i] = run->outs[it.mat] + (size_t)(c + i) * (size_t)run->out_stride;
        }
        if (kq) cb_dot_rows_qblocks(cb_kernels(), w, it.r0, it.r1, xk, outs, m);
        else if (pre) cb_dot_rows_qprep(cb_kernels(), w, it.r0, it.r1, xp, run->sx[it.mat] + c, outs, m);
        else if (q) cb_dot_rows_q8(w, it.r0, it.r1, xq, run->sx[it.mat] + c, outs, m);
        else cb_dot_rows(w, it.r0, it.r1, xs, outs, m);
        if (bias)
            for (int64_t i = 0; i < m; i++)
                for (int32_t r = it.r0; r < it.r1; r++) outs[i][r] = outs[i][r] + bias[r];
    }
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* w8a8 mode: matrices whose encoding has an int16-code path (cb_qpath_of: int8 rows w8a8, int4 w4a8,
 * int6 w6a8) with K inside the exact-int32 range take it; pre_bytes: bytes of one token's prepared
 * input (w4a8 / w6a8; 0: neither). llama.cpp's block encodings take its activation blocks (uses_kq:
 * Q8_K / Q8_0 / Q8_1; sums per block: no K limit). */
static int uses_q8(const cb_engine *e, const cb_matrix *w) {
    int path = cb_qpath_of(w->dtype);
    return e->w8a8 && path != CB_QPATH_NONE && !cb_qpath_blocks(w->dtype) && w->cols <= CB_Q8_MAX_K;
}
static int uses_kq(const cb_engine *e, const cb_matrix *w) { return e->w8a8 && cb_qpath_blocks(w->dtype); }
static size_t kq_bytes(const cb_matrix *w, int64_t n) { return cb_qblocks_bytes(w) * (size_t)n; }
static size_t pre_bytes(const cb_engine *e, const cb_matrix *w) {
    return uses_q8(e, w) ? cb_qprep_bytes(w) : 0;
}

/* Tokens per item: all of them when the row blocks alone give every thread several items,
 * else fewer (a multiple of TOKEN_CHUNK) so prefill of a small matrix still spreads. */
static int64_t token_span(int64_t row_items, int64_t n, int32_t threads) {
    int64_t want = 4 * (int64_t)threads;
    if (threads <= 1 || row_items >= want || n <= TOKEN_CHUNK) return n;
    int64_t spans = ceil_div(want, row_items), span = ceil_div(ceil_div(n, spans), TOKEN_CHUNK) * TOKEN_CHUNK;
    return span < n ? span : n;
}

static cb_status check_args(int32_t n_mats, const cb_matrix *const *ws, const float *const *xs, int64_t x_stride,
                            float *const *outs, int64_t out_stride, int64_t n) {
    if (n_mats <= 0 || n_mats > MAX_MATS)
        return cb_fail(CB_E_INVALID, "cb_matmul_batch: n_mats %d outside 1..%d", (int)n_mats, MAX_MATS);
    if (!ws || !xs || !outs) return cb_fail(CB_E_INVALID, "cb_matmul_batch: ws, xs or outs is NULL");
    if (n < 0 || n > CB_MAX_ROWS) return cb_fail(CB_E_INVALID, "cb_matmul_batch: n %lld invalid", (long long)n);
    for (int32_t i = 0; i < n_mats; i++) {
        char name[48];
        snprintf(name, sizeof name, "matrix %d", (int)i);
        if (!ws[i]) return cb_fail(CB_E_INVALID, "%s is NULL", name);
        cb_status s = cb_check_matrix(ws[i], name, ws[i]->rows, ws[i]->cols);
        if (s != CB_OK) return s;
        if (n > 0 && (!xs[i] || !outs[i])) return cb_fail(CB_E_INVALID, "%s: input or output is NULL", name);
        if (n > 1 && (x_stride < ws[i]->cols || out_stride < ws[i]->rows))
            return cb_fail(CB_E_INVALID, "%s [%d, %d]: x_stride %lld / out_stride %lld smaller than a row", name,
                           (int)ws[i]->rows, (int)ws[i]->cols, (long long)x_stride, (long long)out_stride);
    }
    return CB_OK;
}

/* w8a8: the per-token int8 codes and scales of one matrix input (n rows, x_stride apart). */
static cb_status quantize_input(cb_engine *e, const cb_matrix *w, const float *x, int64_t x_stride, int64_t n,
                                int16_t **xq, float **sx) {
    *xq = cb_arena_alloc(e->arena, sizeof(int16_t) * (size_t)n * (size_t)w->cols);
    *sx = cb_arena_alloc(e->arena, sizeof(float) * (size_t)n);
    if (!*xq || !*sx) return cb_fail(CB_E_NOMEM, "cb_matmul_batch: scratch exhausted");
    for (int64_t t = 0; t < n; t++)
        cb_quantize_row_q8(x + (size_t)t * (size_t)x_stride, w->cols, *xq + (size_t)t * (size_t)w->cols, &(*sx)[t]);
    return CB_OK;
}

/* w4a8 / w6a8: matrix i's quantized input prepared for its encoding (shared with an earlier matrix
 * of the same input, width and encoding). */
static cb_status prepare_input(cb_engine *e, const cb_matrix *const *ws, const float *const *xs, int16_t *const *xq,
                               int8_t **xpre, int32_t i, int64_t n) {
    const cb_matrix *w = ws[i];
    for (int32_t j = 0; j < i; j++)
        if (xpre[j] && xs[j] == xs[i] && ws[j]->cols == w->cols && ws[j]->dtype == w->dtype) {
            xpre[i] = xpre[j];
            return CB_OK;
        }
    size_t bytes = pre_bytes(e, w);
    if (!(xpre[i] = cb_arena_alloc(e->arena, bytes * (size_t)n))) return cb_fail(CB_E_NOMEM, "cb_matmul_batch: scratch exhausted");
    for (int64_t t = 0; t < n; t++) cb_qprep(w, xq[i] + (size_t)t * (size_t)w->cols, xpre[i] + (size_t)t * bytes);
    return CB_OK;
}

/* Block paths: matrix i's input as activation blocks (shared with an earlier matrix of the same input, width and
 * path: Q8_K, Q8_0 or Q8_1). */
static cb_status kq_input(cb_engine *e, const cb_matrix *const *ws, const float *const *xs, int64_t x_stride,
                          unsigned char **xk, int32_t i, int64_t n) {
    const cb_matrix *w = ws[i];
    for (int32_t j = 0; j < i; j++)
        if (xk[j] && xs[j] == xs[i] && ws[j]->cols == w->cols &&
            cb_qpath_of(ws[j]->dtype) == cb_qpath_of(w->dtype)) {
            xk[i] = xk[j];
            return CB_OK;
        }
    if (!(xk[i] = cb_arena_alloc(e->arena, kq_bytes(w, n))))
        return cb_fail(CB_E_NOMEM, "cb_matmul_batch: scratch exhausted");
    size_t bytes = cb_qblocks_bytes(w);
    for (int64_t t = 0; t < n; t++) cb_qblocks(w, xs[i] + (size_t)t * (size_t)x_stride, xk[i] + (size_t)t * bytes);
    return CB_OK;
}

/* Scratch bytes of the integer paths' inputs (w8a8 mode). */
static size_t q_scratch(const cb_engine *e, int32_t n_mats, const cb_matrix *const *ws, int64_t n) {
    size_t bytes = 4 * cb_arena_need(sizeof(void *) * (size_t)n_mats);
    for (int32_t i = 0; i < n_mats; i++) {
        if (uses_q8(e, ws[i]))
            bytes += cb_arena_need(sizeof(int16_t) * (size_t)n * (size_t)ws[i]->cols) +
                     cb_arena_need(sizeof(float) * (size_t)n) + cb_arena_need(pre_bytes(e, ws[i]) * (size_t)n);
        if (uses_kq(e, ws[i])) bytes += cb_arena_need(kq_bytes(ws[i], n));
    }
    return bytes;
}

/* w8a8 mode: every matrix's input in its path's form (q/k/v share one input: quantized once). */
static cb_status quantize_inputs(cb_engine *e, int32_t n_mats, const cb_matrix *const *ws, const float *const *xs,
                                 int64_t x_stride, int64_t n, mm_run *run) {
    size_t ptrs = sizeof(void *) * (size_t)n_mats;
    int16_t **xq = cb_arena_alloc(e->arena, ptrs);
    float **sx = cb_arena_alloc(e->arena, ptrs);
    int8_t **xpre = cb_arena_alloc(e->arena, ptrs);
    unsigned char **xk = cb_arena_alloc(e->arena, ptrs);
    if (!xq || !sx || !xpre || !xk) return cb_fail(CB_E_NOMEM, "cb_matmul_batch: scratch exhausted");
    run->xq = xq, run->sx = sx, run->xpre = xpre, run->xk = xk;
    cb_status s = CB_OK;
    for (int32_t i = 0; i < n_mats; i++) {
        xq[i] = NULL, sx[i] = NULL, xpre[i] = NULL, xk[i] = NULL;
        if (uses_kq(e, ws[i]) && (s = kq_input(e, ws, xs, x_stride, xk, i, n)) != CB_OK) return s;
        if (!uses_q8(e, ws[i])) continue;
        int32_t j = 0;
        while (j < i && !(xq[j] && xs[j] == xs[i] && ws[j]->cols == ws[i]->cols)) j++;
        if (j < i) xq[i] = xq[j], sx[i] = sx[j];
        else if ((s = quantize_input(e, ws[i], xs[i], x_stride, n, &xq[i], &sx[i])) != CB_OK) return s;
        if (pre_bytes(e, ws[i]) && (s = prepare_input(e, ws, xs, xq, xpre, i, n)) != CB_OK) return s;
    }
    return CB_OK;
}

cb_status cb_matmul_batch(cb_engine *e, int32_t n_mats, const cb_matrix *const *ws, const float *const *biases,
                          const float *const *xs, int64_t x_stride, float *const *outs, int64_t out_stride, int64_t n) {
    if (!e) return cb_fail(CB_E_INVALID, "cb_matmul_batch: engine is NULL");
    cb_status s = check_args(n_mats, ws, xs, x_stride, outs, out_stride, n);
    if (s != CB_OK || n == 0) return s == CB_OK ? s : cb_engine_fail(e, s);
    int64_t row_items = 0, n_items = 0;
    double work = 0.0;
    for (int32_t i = 0; i < n_mats; i++) {
        row_items += ceil_div(ws[i]->rows, ROW_BLOCK);
        work += (double)ws[i]->rows * (double)ws[i]->cols * (double)n;
    }
    int64_t span = token_span(row_items, n, cb_engine_threads(e));
    n_items = row_items * ceil_div(n, span);
    size_t q_bytes = e->w8a8 ? q_scratch(e, n_mats, ws, n) : 0;
    if ((s = cb_engine_scratch(e, cb_arena_need(sizeof(mm_item) * (size_t)n_items) + q_bytes)) != CB_OK)
        return cb_engine_fail(e, s);
    mm_item *items = cb_arena_alloc(e->arena, sizeof(mm_item) * (size_t)n_items);
    mm_run run = {ws, biases, xs, outs, x_stride, out_stride, items, NULL, NULL, NULL, NULL};
    if (e->w8a8 && (s = quantize_inputs(e, n_mats, ws, xs, x_stride, n, &run)) != CB_OK) return cb_engine_fail(e, s);
    int64_t k = 0;
    for (int64_t t = 0; t < n; t += span)          /* token spans outer: early items start on the first tokens */
        for (int32_t i = 0; i < n_mats; i++)
            for (int32_t r = 0; r < ws[i]->rows; r += ROW_BLOCK)
                items[k++] = (mm_item){i, r, r + ROW_BLOCK < ws[i]->rows ? r + ROW_BLOCK : ws[i]->rows,
                                       t, t + span < n ? t + span : n};
    if (work < INLINE_WORK)                        /* tiny (decode of a small matrix): the caller alone */
        for (int64_t i = 0; i < n_items; i++) mm_block(&run, i);
    else
        cb_pool_run(e->pool, mm_block, &run, n_items);
    return CB_OK;
}

cb_status cb_matmul(cb_engine *e, const cb_matrix *w, const float *bias, const float *x, int64_t n, float *out) {
    if (!e) return cb_fail(CB_E_INVALID, "cb_matmul: engine is NULL");
    if (!w) return cb_engine_fail(e, cb_fail(CB_E_INVALID, "cb_matmul: matrix is NULL"));
    const cb_matrix *ws[1] = {w};
    const float *bs[1] = {bias}, *xs[1] = {x};
    float *os[1] = {out};
    return cb_matmul_batch(e, 1, ws, bs, xs, w->cols, os, w->rows, n);
}
