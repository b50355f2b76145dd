/* ffn.c — gated expert FFNs on gathered token rows: y = down(act(gate x + bg, up x + bu)) + bd.
 *
 * Role: the executor behind cb_expert_forward, cb_shared_forward and the
 * expert stage of cb_moe_forward. Work is split into items of output rows
 * (never K): phase 1 computes h = act(gate x + bg, up x + bu) for a block of
 * inter rows of one task (SwiGLU or gpt-oss's clamped SwiGLU, silu.c's, the
 * same bits on every SIMD level; a bias is added after its dot, per element),
 * phase 2 computes a block of hidden rows of down h (+ bd). Every
 * element goes through cb_dot_rows' fixed sequence, so neither the item split,
 * the thread, nor the other tasks change a bit of any output.
 */
#include <math.h>
#include "cb_internal.h"
#include "kernels.h"

#define ROW_BLOCK 48    /* output rows per work item (multiple of the 3- and 8-row tiles) */
#define ROW_BLOCK_FEW 192 /* ... when the task has <= TOKEN_CHUNK rows: its weights are streamed once,
                           * and longer items mean fewer cold starts of the row prefetch */
#define TOKEN_CHUNK 16  /* tokens per pass over an item's weights (keeps x in L2) */

typedef struct { int32_t task, r0, r1; } ffn_item;

typedef struct {
    const cb_ffn_task *tasks;
    float ***g, ***u;        /* per task: arrays of n row pointers into the G and U buffers */
    ffn_item *items;
    /* w8a8 only (NULL per task when the task runs in f32): quantized inputs and their scales */
    int16_t ***xq, ***hq;
    float **sx, **sh;
    /* w4a8 / w6a8 (int4 / int6 matrices with w8a8 on; NULL otherwise): xq / hq prepared per token (cb_qprep) */
    int8_t ***xpre, ***hpre;
    /* w8a8 on a level with a tile unit (NULL otherwise): inputs packed per 16-token block */
    int8_t **xp, **hp;
    /* llama.cpp's block encodings with w8a8 on (NULL otherwise): inputs as its Q8_K / Q8_0 / Q8_1 activation blocks,
     * per token cb_qblocks_bytes */
    unsigned char ***xk, ***hk;
    const cb_kernel_table *kt;
} ffn_run;

/* Which integer path gate/up (in) or down (!in) of this task take with w8a8 on: w8a8 for int8 rows,
 * a prepared input for int4 (w4a8) and int6 (w6a8) (gate and up of one dtype: they share the prepared
 * input), llama.cpp's activation blocks for its block encodings (gate and up of one activation type: any two of
 * q4_k / q5_k / q6_k / iq4_xs share Q8_K, of q8_0 / q5_0 / mxfp4 / iq4_nl Q8_0; q5_1 Q8_1), else none (f32). */
enum { Q_NONE, Q_I8, Q_PRE, Q_KQ };
static int q_kind(const cb_engine *e, const cb_ffn_task *t, int in) {
    const cb_matrix *a = in ? &t->ex->gate : &t->ex->down, *b = in ? &t->ex->up : a;
    int path = cb_qpath_of(a->dtype);
    if (!e->w8a8) return Q_NONE;
    if (cb_qpath_blocks(a->dtype)) return cb_qpath_of(b->dtype) == path ? Q_KQ : Q_NONE;
    if (a->dtype != b->dtype || a->cols > CB_Q8_MAX_K) return Q_NONE;
    return path == CB_QPATH_W8A8 ? Q_I8 : path == CB_QPATH_W4A8 || path == CB_QPATH_W6A8 ? Q_PRE : Q_NONE;
}
/* The int16-code paths (w8a8, w4a8, w6a8) and the block ones (Q8_K, Q8_0, Q8_1). */
static int uses_q8(const cb_engine *e, const cb_ffn_task *t, int in) {
    int k = q_kind(e, t, in);
    return k == Q_I8 || k == Q_PRE;
}
static int uses_kq(const cb_engine *e, const cb_ffn_task *t, int in) { return q_kind(e, t, in) == Q_KQ; }
static size_t kq_row_bytes(const cb_ffn_task *t, int in) {
    return cb_qblocks_bytes(in ? &t->ex->gate : &t->ex->down);
}

/* Bytes of one token's prepared input (w4a8 / w6a8), 0 when the matrix takes neither path. */
static size_t pre_row_bytes(const cb_engine *e, const cb_ffn_task *t, int in) {
    return q_kind(e, t, in) == Q_PRE ? cb_qprep_bytes(in ? &t->ex->gate : &t->ex->down) : 0;
}

static int64_t blocks(int64_t n, int64_t b) { return (n + b - 1) / b; }

/* ... and through the tile unit (AMX)? Its blocks are TOKEN_CHUNK tokens, and K % 64 == 0. */
_Static_assert(CB_Q8_TILE_TOKENS == 16, "the tile blocks are the token chunks of 16");
#define TILE_MIN_TOKENS 6   /* a 16-token block with fewer tokens runs faster on the vector kernels */
static int uses_tiles(const cb_engine *e, const cb_kernel_table *kt, const cb_ffn_task *t, int in) {
    return kt->pack_q8_tiles && t->n >= TILE_MIN_TOKENS && q_kind(e, t, in) == Q_I8 &&
           (in ? t->ex->gate.cols : t->ex->down.cols) % 64 == 0;
}

/* Tokens of the next pass: TOKEN_CHUNK, or two chunks (one pass per two packed blocks) on the tile path. */
static int64_t chunk(int64_t left, int tiles) {
    int64_t c = tiles ? 2 * TOKEN_CHUNK : TOKEN_CHUNK;
    return left < c ? left : c;
}

static size_t tile_bytes(const cb_ffn_task *t, int in) {
    int32_t K = in ? t->ex->gate.cols : t->ex->down.cols;
    return (size_t)blocks(t->n, 16) * cb_q8_tiles_bytes(K);
}

static int64_t max_items(const cb_ffn_task *t) {
    int64_t a = blocks(t->ex->gate.rows, ROW_BLOCK), b = blocks(t->ex->down.rows, ROW_BLOCK), c = blocks(t->n, TOKEN_CHUNK);
    return a > b ? (a > c ? a : c) : (b > c ? b : c);
}

size_t cb_ffn_scratch_bytes(const cb_engine *e, const cb_ffn_task *tasks, int32_t n_tasks) {
    const cb_kernel_table *kt = cb_kernels();
    size_t bytes = 13 * cb_arena_need(sizeof(void *) * (size_t)(n_tasks + 1));
    int64_t items = 0;
    for (int32_t i = 0; i < n_tasks; i++) {
        size_t n = (size_t)tasks[i].n, inter = (size_t)tasks[i].ex->gate.rows, hidden = (size_t)tasks[i].ex->down.rows;
        bytes += 2 * cb_arena_need(n * inter * sizeof(float)) + 2 * cb_arena_need(n * sizeof(float *));
        if (uses_q8(e, &tasks[i], 1))
            bytes += cb_arena_need(n * hidden * sizeof(int16_t)) + cb_arena_need(n * sizeof(void *)) + cb_arena_need(n * sizeof(float));
        if (uses_q8(e, &tasks[i], 0))
            bytes += cb_arena_need(n * inter * sizeof(int16_t)) + cb_arena_need(n * sizeof(void *)) + cb_arena_need(n * sizeof(float));
        for (int in = 0; in < 2; in++) {
            if (uses_tiles(e, kt, &tasks[i], in)) bytes += cb_arena_need(tile_bytes(&tasks[i], in));
            if (pre_row_bytes(e, &tasks[i], in))
                bytes += cb_arena_need(n * pre_row_bytes(e, &tasks[i], in)) + cb_arena_need(n * sizeof(void *));
            if (uses_kq(e, &tasks[i], in))
                bytes += cb_arena_need(n * kq_row_bytes(&tasks[i], in)) + cb_arena_need(n * sizeof(void *));
        }
        items += max_items(&tasks[i]);
    }
    return bytes + cb_arena_need(sizeof(ffn_item) * (size_t)(items + 1));
}

static void add_bias(float *y, const float *b, int32_t r0, int32_t r1) {
    if (b)
        for (int32_t r = r0; r < r1; r++) y[r] = y[r] + b[r];
}

/* Rows r0..r1 of one token: the biases after the dots, then the expert's gated activation into g. */
static void activate(const cb_kernel_table *kt, const cb_expert *ex, float *g, float *u, int32_t r0, int32_t r1) {
    add_bias(g, ex->gate_bias, r0, r1);
    add_bias(u, ex->up_bias, r0, r1);
    if (ex->act == CB_ACT_SWIGLU_OAI) kt->swiglu_oai(g + r0, u + r0, r1 - r0, ex->alpha, ex->limit);
    else kt->silu_mul(g + r0, u + r0, r1 - r0);
}

static void phase_gate_up(void *ctx, int64_t item) {
    ffn_run *run = ctx;
    ffn_item it = run->items[item];
    const cb_ffn_task *t = &run->tasks[it.task];
    float **g = run->g[it.task], **u = run->u[it.task];
    for (int64_t c = 0, m; c < t->n; c += m) {
        m = chunk(t->n - c, run->xp[it.task] != NULL);
        if (run->xp[it.task] && m >= TILE_MIN_TOKENS) {
            const int16_t *const *xq = (const int16_t *const *)run->xq[it.task] + c;
            const int8_t *p = run->xp[it.task] + (size_t)(c / 16) * cb_q8_tiles_bytes(t->ex->gate.cols);
            run->kt->dot_rows_q8_tiles(&t->ex->gate, it.r0, it.r1, p, xq, run->sx[it.task] + c, g + c, m);
            run->kt->dot_rows_q8_tiles(&t->ex->up, it.r0, it.r1, p, xq, run->sx[it.task] + c, u + c, m);
        } else if (run->xk[it.task]) {
            const void *const *xk = (const void *const *)run->xk[it.task] + c;
            cb_dot_rows_qblocks(run->kt, &t->ex->gate, it.r0, it.r1, xk, g + c, m);
            cb_dot_rows_qblocks(run->kt, &t->ex->up, it.r0, it.r1, xk, u + c, m);
        } else if (run->xpre[it.task]) {
            const int8_t *const *xp = (const int8_t *const *)run->xpre[it.task] + c;
            cb_dot_rows_qprep(run->kt, &t->ex->gate, it.r0, it.r1, xp, run->sx[it.task] + c, g + c, m);
            cb_dot_rows_qprep(run->kt, &t->ex->up, it.r0, it.r1, xp, run->sx[it.task] + c, u + c, m);
        } else if (run->xq[it.task]) {
            const int16_t *const *xq = (const int16_t *const *)run->xq[it.task] + c;
            cb_dot_rows_q8(&t->ex->gate, it.r0, it.r1, xq, run->sx[it.task] + c, g + c, m);
            cb_dot_rows_q8(&t->ex->up, it.r0, it.r1, xq, run->sx[it.task] + c, u + c, m);
        } else {
            cb_dot_rows(&t->ex->gate, it.r0, it.r1, t->xs + c, g + c, m);
            cb_dot_rows(&t->ex->up, it.r0, it.r1, t->xs + c, u + c, m);
        }
        for (int64_t i = c; i < c + m; i++) activate(run->kt, t->ex, g[i], u[i], it.r0, it.r1);
    }
}

static void phase_down(void *ctx, int64_t item) {
    ffn_run *run = ctx;
    ffn_item it = run->items[item];
    const cb_ffn_task *t = &run->tasks[it.task];
    const float *const *h = (const float *const *)run->g[it.task];
    for (int64_t c = 0, m; c < t->n; c += m) {
        m = chunk(t->n - c, run->hp[it.task] != NULL);
        if (run->hp[it.task] && m >= TILE_MIN_TOKENS)
            run->kt->dot_rows_q8_tiles(&t->ex->down, it.r0, it.r1,
                                       run->hp[it.task] + (size_t)(c / 16) * cb_q8_tiles_bytes(t->ex->down.cols),
                                       (const int16_t *const *)run->hq[it.task] + c, run->sh[it.task] + c,
                                       t->outs + c, m);
        else if (run->hk[it.task])
            cb_dot_rows_qblocks(run->kt, &t->ex->down, it.r0, it.r1, (const void *const *)run->hk[it.task] + c,
                                t->outs + c, m);
        else if (run->hpre[it.task])
            cb_dot_rows_qprep(run->kt, &t->ex->down, it.r0, it.r1, (const int8_t *const *)run->hpre[it.task] + c,
                              run->sh[it.task] + c, t->outs + c, m);
        else if (run->hq[it.task])
            cb_dot_rows_q8(&t->ex->down, it.r0, it.r1, (const int16_t *const *)run->hq[it.task] + c,
                           run->sh[it.task] + c, t->outs + c, m);
        else
            cb_dot_rows(&t->ex->down, it.r0, it.r1, h + c, t->outs + c, m);
        for (int64_t i = c; i < c + m && t->ex->down_bias; i++) add_bias(t->outs[i], t->ex->down_bias, it.r0, it.r1);
        if (t->row_scale)
            for (int64_t i = c; i < c + m; i++)
                for (int32_t r = it.r0; r < it.r1; r++) t->outs[i][r] = t->row_scale[i] * t->outs[i][r];
    }
}

/* w8a8: quantize a block of a task's input rows (phase 0: x for gate/up; phase 1b: h for down). */
static void quantize_block(ffn_run *run, int64_t item, int in) {
    ffn_item it = run->items[item];
    const cb_ffn_task *t = &run->tasks[it.task];
    unsigned char **kq = in ? run->xk[it.task] : run->hk[it.task];
    if (kq) {                                   /* block encodings: Q8_K / Q8_0 / Q8_1 straight from the f32 rows */
        for (int64_t i = it.r0; i < it.r1; i++)
            cb_qblocks(in ? &t->ex->gate : &t->ex->down, in ? t->xs[i] : run->g[it.task][i], kq[i]);
        return;
    }
    for (int64_t i = it.r0; i < it.r1; i++) {
        if (in) cb_quantize_row_q8(t->xs[i], t->ex->gate.cols, run->xq[it.task][i], &run->sx[it.task][i]);
        else cb_quantize_row_q8(run->g[it.task][i], t->ex->down.cols, run->hq[it.task][i], &run->sh[it.task][i]);
    }
    int8_t **pre = in ? run->xpre[it.task] : run->hpre[it.task];
    if (pre) {
        const cb_matrix *m = in ? &t->ex->gate : &t->ex->down;
        int16_t **q = in ? run->xq[it.task] : run->hq[it.task];
        for (int64_t i = it.r0; i < it.r1; i++) cb_qprep(m, q[i], pre[i]);
    }
    int8_t *packed = in ? run->xp[it.task] : run->hp[it.task];   /* items are 16-token chunks */
    if (packed) {
        int32_t K = in ? t->ex->gate.cols : t->ex->down.cols;
        run->kt->pack_q8_tiles((const int16_t *const *)(in ? run->xq[it.task] : run->hq[it.task]) + it.r0,
                               it.r1 - it.r0, K, packed + (size_t)(it.r0 / 16) * cb_q8_tiles_bytes(K));
    }
}
static void phase_quantize_x(void *ctx, int64_t item) { quantize_block(ctx, item, 1); }
static void phase_quantize_h(void *ctx, int64_t item) { quantize_block(ctx, item, 0); }

enum { ITEMS_GATE_UP, ITEMS_DOWN, ITEMS_QUANT_X, ITEMS_QUANT_H };

static int64_t make_items(ffn_run *run, int32_t n_tasks, int kind) {
    int64_t k = 0;
    for (int32_t i = 0; i < n_tasks; i++) {
        const cb_ffn_task *t = &run->tasks[i];
        if (t->n == 0) continue;
        if (kind >= ITEMS_QUANT_X) {
            if (!(kind == ITEMS_QUANT_X ? run->xq[i] || run->xk[i] : run->hq[i] || run->hk[i])) continue;
            for (int64_t c = 0; c < t->n; c += TOKEN_CHUNK)
                run->items[k++] = (ffn_item){i, (int32_t)c, (int32_t)(c + TOKEN_CHUNK < t->n ? c + TOKEN_CHUNK : t->n)};
            continue;
        }
        int32_t rows = kind == ITEMS_DOWN ? t->ex->down.rows : t->ex->gate.rows;
        int32_t step = t->n <= TOKEN_CHUNK ? ROW_BLOCK_FEW : ROW_BLOCK;
        for (int32_t r = 0; r < rows; r += step)
            run->items[k++] = (ffn_item){i, r, r + step < rows ? r + step : rows};
    }
    return k;
}

static int8_t **pre_buffers(cb_engine *e, size_t n, size_t bytes) {
    if (!bytes) return NULL;
    int8_t *buf = cb_arena_alloc(e->arena, n * bytes), **rows = cb_arena_alloc(e->arena, n * sizeof(void *));
    for (size_t t = 0; t < n; t++) rows[t] = buf + t * bytes;
    return rows;
}

static unsigned char **kq_buffers(cb_engine *e, size_t n, size_t bytes) {
    if (!bytes) return NULL;
    unsigned char *buf = cb_arena_alloc(e->arena, n * bytes), **rows = cb_arena_alloc(e->arena, n * sizeof(void *));
    for (size_t t = 0; t < n; t++) rows[t] = buf + t * bytes;
    return rows;
}

static void q8_buffers(cb_engine *e, size_t n, size_t cols, int16_t ***rows, float **scales) {
    int16_t *buf = cb_arena_alloc(e->arena, n * cols * sizeof(int16_t));
    *rows = cb_arena_alloc(e->arena, n * sizeof(void *));
    *scales = cb_arena_alloc(e->arena, n * sizeof(float));
    for (size_t t = 0; t < n; t++) (*rows)[t] = buf + t * cols;
}

void cb_ffn_run(cb_engine *e, const cb_ffn_task *tasks, int32_t n_tasks) {
    ffn_run run = {.tasks = tasks, .kt = cb_kernels()};
    size_t ptrs = sizeof(void *) * (size_t)(n_tasks + 1);
    run.g = cb_arena_alloc(e->arena, ptrs);
    run.u = cb_arena_alloc(e->arena, ptrs);
    run.xq = cb_arena_alloc(e->arena, ptrs);
    run.hq = cb_arena_alloc(e->arena, ptrs);
    run.sx = cb_arena_alloc(e->arena, ptrs);
    run.sh = cb_arena_alloc(e->arena, ptrs);
    run.xp = cb_arena_alloc(e->arena, ptrs);
    run.hp = cb_arena_alloc(e->arena, ptrs);
    run.xpre = cb_arena_alloc(e->arena, ptrs);
    run.hpre = cb_arena_alloc(e->arena, ptrs);
    run.xk = cb_arena_alloc(e->arena, ptrs);
    run.hk = cb_arena_alloc(e->arena, ptrs);
    int64_t items = 0, q8_in = 0, q8_down = 0;
    for (int32_t i = 0; i < n_tasks; i++) {
        size_t n = (size_t)tasks[i].n, inter = (size_t)tasks[i].ex->gate.rows;
        float *gb = cb_arena_alloc(e->arena, n * inter * sizeof(float));
        float *ub = cb_arena_alloc(e->arena, n * inter * sizeof(float));
        run.g[i] = cb_arena_alloc(e->arena, n * sizeof(float *));
        run.u[i] = cb_arena_alloc(e->arena, n * sizeof(float *));
        for (size_t t = 0; t < n; t++) {
            run.g[i][t] = gb + t * inter;
            run.u[i][t] = ub + t * inter;
        }
        run.xq[i] = run.hq[i] = NULL;
        run.sx[i] = run.sh[i] = NULL;
        if (uses_q8(e, &tasks[i], 1)) q8_in++, q8_buffers(e, n, (size_t)tasks[i].ex->gate.cols, &run.xq[i], &run.sx[i]);
        if (uses_q8(e, &tasks[i], 0)) q8_down++, q8_buffers(e, n, inter, &run.hq[i], &run.sh[i]);
        run.xpre[i] = pre_buffers(e, n, pre_row_bytes(e, &tasks[i], 1));
        run.hpre[i] = pre_buffers(e, n, pre_row_bytes(e, &tasks[i], 0));
        run.xk[i] = kq_buffers(e, n, uses_kq(e, &tasks[i], 1) ? kq_row_bytes(&tasks[i], 1) : 0);
        run.hk[i] = kq_buffers(e, n, uses_kq(e, &tasks[i], 0) ? kq_row_bytes(&tasks[i], 0) : 0);
        q8_in += run.xk[i] != NULL, q8_down += run.hk[i] != NULL;
        run.xp[i] = uses_tiles(e, run.kt, &tasks[i], 1) ? cb_arena_alloc(e->arena, tile_bytes(&tasks[i], 1)) : NULL;
        run.hp[i] = uses_tiles(e, run.kt, &tasks[i], 0) ? cb_arena_alloc(e->arena, tile_bytes(&tasks[i], 0)) : NULL;
        items += max_items(&tasks[i]);
    }
    run.items = cb_arena_alloc(e->arena, sizeof(ffn_item) * (size_t)(items + 1));
    if (q8_in) cb_pool_run(e->pool, phase_quantize_x, &run, make_items(&run, n_tasks, ITEMS_QUANT_X));
    cb_pool_run(e->pool, phase_gate_up, &run, make_items(&run, n_tasks, ITEMS_GATE_UP));
    if (q8_down) cb_pool_run(e->pool, phase_quantize_h, &run, make_items(&run, n_tasks, ITEMS_QUANT_H));
    cb_pool_run(e->pool, phase_down, &run, make_items(&run, n_tasks, ITEMS_DOWN));
}

float cb_sigmoid_gate(const float *g, const float *x, int32_t hidden) {
    cb_matrix m = {g, NULL, NULL, CB_F32, 1, hidden};
    float z = 0.0f, *zp = &z;
    cb_dot_rows(&m, 0, 1, &x, &zp, 1);
    return 1.0f / (1.0f + expf(-z));
}

cb_status cb_expert_forward(cb_engine *e, const cb_expert *ex, const float *x, int32_t hidden,
                            const int32_t *rows, int64_t n_rows, float *out) {
    if (!e) return cb_fail(CB_E_INVALID, "cb_expert_forward: engine is NULL");
    if (!x || !out || n_rows < 0 || n_rows > CB_MAX_ROWS || hidden <= 0 || hidden > CB_MAX_HIDDEN)
        return cb_engine_fail(e, cb_fail(CB_E_INVALID, "cb_expert_forward: NULL tensor or bad size"));
    cb_status s = cb_check_expert(ex, hidden, "expert");
    if (s != CB_OK) return cb_engine_fail(e, s);
    for (int64_t i = 0; rows && i < n_rows; i++)
        if (rows[i] < 0) return cb_engine_fail(e, cb_fail(CB_E_INVALID, "cb_expert_forward: rows[%lld] = %d < 0", (long long)i, (int)rows[i]));
    if (n_rows == 0) return CB_OK;
    cb_ffn_task task = {ex, NULL, NULL, NULL, n_rows};
    size_t bytes = 2 * cb_arena_need(sizeof(float *) * (size_t)n_rows) + cb_ffn_scratch_bytes(e, &task, 1);
    if ((s = cb_engine_scratch(e, bytes)) != CB_OK) return cb_engine_fail(e, s);
    const float **xs = cb_arena_alloc(e->arena, sizeof(float *) * (size_t)n_rows);
    float **outs = cb_arena_alloc(e->arena, sizeof(float *) * (size_t)n_rows);
    for (int64_t i = 0; i < n_rows; i++) {
        xs[i] = x + (size_t)(rows ? rows[i] : i) * (size_t)hidden;
        outs[i] = out + (size_t)i * (size_t)hidden;
    }
    task.xs = xs;
    task.outs = outs;
    cb_ffn_run(e, &task, 1);
    return CB_OK;
}

cb_status cb_shared_forward(cb_engine *e, const cb_expert *shared, const float *shared_gate,
                            const float *x, int64_t n, int32_t hidden, float *out) {
    if (!e) return cb_fail(CB_E_INVALID, "cb_shared_forward: engine is NULL");
    if (!x || !out || n < 0 || n > CB_MAX_ROWS || hidden <= 0 || hidden > CB_MAX_HIDDEN)
        return cb_engine_fail(e, cb_fail(CB_E_INVALID, "cb_shared_forward: NULL tensor or bad size"));
    cb_status s = cb_check_expert(shared, hidden, "shared expert");
    if (s != CB_OK) return cb_engine_fail(e, s);
    if (n == 0) return CB_OK;
    cb_ffn_task task = {shared, NULL, NULL, NULL, n};
    size_t bytes = 2 * cb_arena_need(sizeof(float *) * (size_t)n) + cb_arena_need(sizeof(float) * (size_t)n) +
                   cb_ffn_scratch_bytes(e, &task, 1);
    if ((s = cb_engine_scratch(e, bytes)) != CB_OK) return cb_engine_fail(e, s);
    const float **xs = cb_arena_alloc(e->arena, sizeof(float *) * (size_t)n);
    float **outs = cb_arena_alloc(e->arena, sizeof(float *) * (size_t)n);
    float *sig = shared_gate ? cb_arena_alloc(e->arena, sizeof(float) * (size_t)n) : NULL;
    for (int64_t i = 0; i < n; i++) {
        xs[i] = x + (size_t)i * (size_t)hidden;
        outs[i] = out + (size_t)i * (size_t)hidden;
        if (sig) sig[i] = cb_sigmoid_gate(shared_gate, xs[i], hidden);
    }
    task.xs = xs;
    task.outs = outs;
    task.row_scale = sig;
    cb_ffn_run(e, &task, 1);
    return CB_OK;
}
