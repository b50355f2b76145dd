/* ggml_mul_mat.c — the peer of `python -m colibri_dist.bench kquants`: ggml's CPU mul_mat of a matrix of llama.cpp
 * blocks (the k-quants, Q8_0, MXFP4, IQ4_XS, IQ4_NL, Q5_1).
 *
 * Role: times what llama.cpp runs for one weight matrix [rows, cols] of one of those block types times
 * `tokens` f32 columns on its CPU backend with `threads` threads: the weights live in the backend's first
 * extra buffer type when that type takes the tensor (the REPACK layout llama.cpp loads Q4_K into on AVX2),
 * else in the plain CPU buffer; the activations are quantized to the type's vec_dot_type (Q8_K, Q8_0 or Q8_1)
 * inside the op, as in a model. The
 * matrix is copied into enough tensors to fill `mib` MiB (weights stream from memory); one graph runs one
 * mul_mat per copy. Built against the llama.cpp build by the benchmark (not part of libcolibri).
 * Usage: ggml_mul_mat TYPE ROWS COLS TOKENS THREADS MIB REPS (TYPE: a name of TYPES below)
 * Prints: median_ms=<ms per mul_mat, median over REPS graph runs> best_ms=<...> buffer=<buffer type name>
 */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The backend's first extra buffer type that supports a mul_mat with weight w (NULL: none). */
static ggml_backend_buffer_type_t extra_buft(ggml_backend_t be, struct ggml_tensor *op) {
    ggml_backend_dev_t dev = ggml_backend_get_device(be);
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    ggml_backend_dev_get_extra_bufts_t get =
        (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    if (!get) return NULL;
    for (ggml_backend_buffer_type_t *b = get(dev); b && *b; b++) {
        struct ggml_tensor *w = op->src[0];
        ggml_backend_buffer_t probe = ggml_backend_buft_alloc_buffer(*b, ggml_nbytes(w) + 4096);
        if (!probe) continue;
        w->buffer = probe;                       /* supports_op looks at the weight's buffer type */
        int ok = ggml_backend_dev_supports_op(dev, op);
        w->buffer = NULL;
        ggml_backend_buffer_free(probe);
        if (ok) return *b;
    }
    return NULL;
}

/* The block types by colibri's encoding names. */
static const struct { const char *name; enum ggml_type type; } TYPES[] = {
    {"q4_k", GGML_TYPE_Q4_K}, {"q5_k", GGML_TYPE_Q5_K}, {"q6_k", GGML_TYPE_Q6_K}, {"q8_0", GGML_TYPE_Q8_0},
    {"mxfp4", GGML_TYPE_MXFP4}, {"iq4_xs", GGML_TYPE_IQ4_XS}, {"iq4_nl", GGML_TYPE_IQ4_NL}, {"q5_1", GGML_TYPE_Q5_1},
};

static enum ggml_type type_of(const char *name) {
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (!strcmp(name, TYPES[i].name)) return TYPES[i].type;
    return GGML_TYPE_COUNT;
}

typedef struct {
    enum ggml_type type;
    int rows, cols, tokens, threads, copies;
    size_t wbytes;
} job;

/* Random weights quantized by ggml into every copy, random activations. */
static void fill(const job *j, struct ggml_tensor **w, struct ggml_tensor *x) {
    size_t nw = (size_t)j->rows * (size_t)j->cols, nx = (size_t)j->cols * (size_t)j->tokens;
    float *src = malloc(sizeof(float) * nw), *xs = malloc(sizeof(float) * nx);
    void *q = malloc(j->wbytes);
    unsigned s = 7;
    for (size_t i = 0; i < nw; i++) s = s * 1664525u + 1013904223u, src[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 0.04f;
    for (size_t i = 0; i < nx; i++) s = s * 1664525u + 1013904223u, xs[i] = (float)(s >> 8) / 8388608.0f - 1.0f;
    ggml_quantize_chunk(j->type, src, q, 0, j->rows, j->cols, NULL);
    for (int i = 0; i < j->copies; i++) ggml_backend_tensor_set(w[i], q, 0, j->wbytes);
    ggml_backend_tensor_set(x, xs, 0, ggml_nbytes(x));
    free(src), free(xs), free(q);
}

/* Median and best ms per mul_mat over reps runs of the graph (one mul_mat per copy). */
static void timed(ggml_backend_t be, struct ggml_cgraph *gf, const job *j, int reps, double *median, double *best) {
    double *ms = malloc(sizeof(double) * (size_t)reps);
    ggml_backend_graph_compute(be, gf);                                 /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t = now();
        ggml_backend_graph_compute(be, gf);
        ms[r] = (now() - t) * 1e3 / j->copies;
    }
    qsort(ms, (size_t)reps, sizeof *ms, cmp);
    *median = ms[reps / 2], *best = ms[0];
    free(ms);
}

static int run(const job *j, int reps) {
    ggml_backend_t be = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(be, j->threads);
    size_t meta = ggml_tensor_overhead() * (size_t)(j->copies + 8);
    struct ggml_context *cw = ggml_init((struct ggml_init_params){meta, NULL, true});
    struct ggml_context *ca = ggml_init((struct ggml_init_params){meta, NULL, true});
    struct ggml_context *cg = ggml_init((struct ggml_init_params){
        meta + ggml_graph_overhead_custom((size_t)j->copies + 8, false), NULL, true});
    struct ggml_tensor *x = ggml_new_tensor_2d(ca, GGML_TYPE_F32, j->cols, j->tokens), **w, *out0 = NULL;
    w = malloc(sizeof *w * (size_t)j->copies);
    struct ggml_cgraph *gf = ggml_new_graph_custom(cg, (size_t)j->copies + 8, false);
    for (int i = 0; i < j->copies; i++) {
        w[i] = ggml_new_tensor_2d(cw, j->type, j->cols, j->rows);
        struct ggml_tensor *o = ggml_mul_mat(ca, w[i], x);
        ggml_build_forward_expand(gf, o);
        if (!out0) out0 = o;
    }
    ggml_backend_buffer_type_t buft = extra_buft(be, out0);
    if (!buft) buft = ggml_backend_get_default_buffer_type(be);
    ggml_backend_buffer_t bw = ggml_backend_alloc_ctx_tensors_from_buft(cw, buft);
    ggml_backend_buffer_t ba = ggml_backend_alloc_ctx_tensors(ca, be);
    if (!bw || !ba) {
        fprintf(stderr, "allocation failed\n");
        return 1;
    }
    fill(j, w, x);
    double median, best;
    timed(be, gf, j, reps, &median, &best);
    printf("median_ms=%.4f best_ms=%.4f buffer=%s\n", median, best, ggml_backend_buft_name(buft));
    free(w);
    ggml_backend_buffer_free(bw), ggml_backend_buffer_free(ba);
    ggml_free(cg), ggml_free(cw), ggml_free(ca);
    ggml_backend_free(be);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: %s TYPE ROWS COLS TOKENS THREADS MIB REPS (TYPE: q4_k, q5_k, q6_k, q8_0, mxfp4, "
                "iq4_xs, iq4_nl, q5_1)\n", argv[0]);
        return 2;
    }
    job j = {type_of(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), 0, 0};
    int mib = atoi(argv[6]), reps = atoi(argv[7]);
    if (j.type == GGML_TYPE_COUNT || j.rows <= 0 || j.cols <= 0 || j.cols % ggml_blck_size(j.type) || j.tokens <= 0 ||
        j.threads <= 0 || mib <= 0 || reps <= 0) {
        fprintf(stderr, "bad arguments: %s %s %s %s %s %s %s\n", argv[1], argv[2], argv[3], argv[4], argv[5], argv[6],
                argv[7]);
        return 2;
    }
    j.wbytes = ggml_row_size(j.type, j.cols) * (size_t)j.rows;
    j.copies = (int)(((size_t)mib << 20) / j.wbytes) + 1;
    if (j.copies < 2) j.copies = 2;
    return run(&j, reps);
}
