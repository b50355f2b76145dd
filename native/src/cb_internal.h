/* cb_internal.h — private declarations shared by the C core's translation units.
 *
 * Role: glue between the public API files (route.c, ffn.c, moe.c, combine.c,
 * engine.c) and the machinery under them (errors, SIMD level, arena, thread
 * pool, dot-product kernels). Nothing here is part of the public header.
 */
#ifndef CB_INTERNAL_H
#define CB_INTERNAL_H
#include "colibri.h"
#include <stdio.h>
#include "threadpool.h"

/* Size caps of one call: keep every byte count (rows * k * hidden * 4) far inside size_t. */
#define CB_MAX_ROWS (INT64_C(1) << 30)
#define CB_MAX_HIDDEN (1 << 20)

/* ---- errors (status.c) ---- */
/* Records a thread-local message (printf style) and returns s. */
cb_status cb_fail(cb_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- engine (engine.c) ---- */
struct cb_engine {
    cb_pool *pool;
    cb_arena *arena;
    uint64_t mallocs;
    float *layer_buf;        /* cb_layer_forward's buffers (layer.c), grown like the arena */
    size_t layer_cap;        /* floats in layer_buf */
    int32_t w8a8;            /* CB_I8_ROW matrices use per-token int8 activations (kernels_q8.c) */
    char last_error[256];
};
/* Make the engine arena hold at least `bytes`, reset it. Counts reallocations. */
cb_status cb_engine_scratch(cb_engine *e, size_t bytes);
/* Copy the thread-local message into the engine and return s (for engine calls). */
cb_status cb_engine_fail(cb_engine *e, cb_status s);
/* Bytes one arena allocation of `bytes` may consume (alignment padding). */
static inline size_t cb_arena_need(size_t bytes) { return (bytes + 63u) & ~(size_t)63u; }

/* ---- encodings (encodings.c) ---- */
int64_t cb_row_bytes(int32_t dtype, int32_t cols);    /* bytes of one stored row; -1 bad dtype, or cols not
                                                         a whole number of a CB_SCALE_SUPER encoding's blocks */
int cb_has_scale_array(const cb_encoding *e);          /* 1: scale kind ROW / GROUP / MATRIX (a scales array) */

/* ---- validation (kernels.c) ---- */
cb_status cb_check_matrix(const cb_matrix *m, const char *what, int32_t rows, int32_t cols);
cb_status cb_check_expert(const cb_expert *ex, int32_t hidden, const char *what);

/* ---- the ffn executor (ffn.c): one task = one expert on a gathered row list ---- */
typedef struct {
    const cb_expert *ex;
    const float *const *xs;   /* [n] input rows (hidden) */
    float *const *outs;       /* [n] output rows (hidden) */
    const float *row_scale;   /* [n] multiply each output row (shared gate), or NULL */
    int64_t n;
} cb_ffn_task;
size_t cb_ffn_scratch_bytes(const cb_engine *e, const cb_ffn_task *tasks, int32_t n_tasks);
/* Runs every task; scratch comes from the engine arena (already sized). */
void cb_ffn_run(cb_engine *e, const cb_ffn_task *tasks, int32_t n_tasks);

/* ---- routing helpers (gating.c, route.c) ---- */
#define CB_MAX_EXPERTS 1024
#define CB_MAX_TOPK 64
int cb_gate_one(const cb_gating *g, const float *logits, const float *bias, int32_t *idx, float *w);
size_t cb_route_scratch_bytes(const cb_gating *g, int64_t n);
cb_status cb_check_gating(const cb_gating *g);
cb_status cb_check_route_args(const cb_gating *g, const float *router, const float *bias,
                              const float *x, int64_t n, int32_t hidden);
cb_status cb_route_run(cb_engine *e, const cb_gating *g, const float *router, const float *bias,
                       const float *x, int64_t n, int32_t hidden, int32_t *idx, float *w);

/* ---- combine (combine.c) ---- */
void cb_combine_rows(int64_t t0, int64_t t1, int32_t k, int32_t hidden, const float *w,
                     const float *slot_out, const float *shared, float *y);
/* Sigmoid gate dot: sig[t] = 1 / (1 + exp(-(g . x[t]))) with the kernel's dot order. */
float cb_sigmoid_gate(const float *g, const float *x, int32_t hidden);
#endif
