/* classify.c — the demo MoE token classifier in plain C on libcolibri.a (no Python).
 *
 * Reads a .colibri demo model (docs/ARCHITECTURE.md "Demo model"), embeds the
 * token ids given on the command line, runs every MoE layer with
 * cb_moe_forward, and prints each token's routing and its 5-class
 * probabilities:
 *   h = E[ids]; per layer i: h = h + moe_i(rmsnorm(h) * n_i)
 *   probs = softmax(rmsnorm(h) * n @ score.W^T + score.b)        (rmsnorm eps 1e-5)
 *
 * usage: classify MODEL.colibri [--threads N] [--verify] TOKEN_ID...
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "colibri.h"

#define EPS 1e-5f

typedef struct { const float *data; int64_t shape[8]; int32_t ndim; } tensor;

static int fail(const char *what, cb_status s, const char *detail) {
    fprintf(stderr, "classify: %s: %s: %s\n", what, cb_status_str(s), detail ? detail : "");
    return 1;
}

static int get(cb_model *m, const char *name, tensor *t) {
    cb_status s = cb_model_tensor_f32(m, name, &t->data, t->shape, &t->ndim);
    return s == CB_OK ? 0 : fail(name, s, cb_model_last_error(m));
}

static void rmsnorm(const float *x, const float *w, int32_t h, float *out) {
    float ss = 0.0f;
    for (int32_t c = 0; c < h; c++) ss += x[c] * x[c];
    float inv = 1.0f / sqrtf(ss / (float)h + EPS);
    for (int32_t c = 0; c < h; c++) out[c] = (x[c] * inv) * w[c];
}

static int run_layers(cb_model *m, cb_engine *eng, const cb_model_info *info, float *h, int64_t n) {
    int32_t H = info->hidden, k = info->top_k;
    float *a = malloc(sizeof(float) * (size_t)(n * H)), *y = malloc(sizeof(float) * (size_t)(n * H));
    float *w = malloc(sizeof(float) * (size_t)(n * k));
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)(n * k));
    int rc = (!a || !y || !w || !idx) ? fail("malloc", CB_E_NOMEM, "") : 0;
    for (int32_t layer = 0; !rc && layer < info->n_layers; layer++) {
        char name[128];
        tensor norm;
        cb_moe_layer L;
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", (int)layer);
        cb_status s = cb_model_moe_layer(m, layer, &L);
        if (s != CB_OK) { rc = fail("cb_model_moe_layer", s, cb_model_last_error(m)); break; }
        if ((rc = get(m, name, &norm))) break;
        for (int64_t t = 0; t < n; t++) rmsnorm(h + t * H, norm.data, H, a + t * H);
        s = cb_moe_forward(eng, &L, a, n, y, idx, w);
        if (s != CB_OK) { rc = fail("cb_moe_forward", s, cb_engine_last_error(eng)); break; }
        for (int64_t i = 0; i < n * H; i++) h[i] = h[i] + y[i];
        printf("layer %d routing:", (int)layer);
        for (int64_t t = 0; t < n; t++) {
            printf(" [");
            for (int32_t j = 0; j < k; j++) printf("%s%d:%.3f", j ? " " : "", (int)idx[t * k + j], (double)w[t * k + j]);
            printf("]");
        }
        printf("\n");
    }
    free(a); free(y); free(w); free(idx);
    return rc;
}

static int classify(cb_model *m, const cb_model_info *info, const float *h, int64_t n) {
    tensor norm, score, bias;
    if (get(m, "model.norm.weight", &norm) || get(m, "score.weight", &score) || get(m, "score.bias", &bias)) return 1;
    int32_t H = info->hidden, C = (int32_t)score.shape[0];
    float *a = malloc(sizeof(float) * (size_t)H), *logit = malloc(sizeof(float) * (size_t)C);
    if (!a || !logit) { free(a); free(logit); return fail("malloc", CB_E_NOMEM, ""); }
    for (int64_t t = 0; t < n; t++) {
        rmsnorm(h + t * H, norm.data, H, a);
        float mx = -INFINITY, sum = 0.0f;
        for (int32_t c = 0; c < C; c++) {
            float z = bias.data[c];
            for (int32_t i = 0; i < H; i++) z += score.data[(size_t)c * H + i] * a[i];
            logit[c] = z;
            mx = z > mx ? z : mx;
        }
        for (int32_t c = 0; c < C; c++) sum += (logit[c] = expf(logit[c] - mx));
        int32_t best = 0;
        printf("token %lld probs:", (long long)t);
        for (int32_t c = 0; c < C; c++) {
            printf(" %.4f", (double)(logit[c] / sum));
            if (logit[c] > logit[best]) best = c;
        }
        printf("  -> class %d\n", (int)best);
    }
    free(a); free(logit);
    return 0;
}

int main(int argc, char **argv) {
    int threads = 0, verify = 0, first_id = 0;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--verify")) verify = 1;
        else if (!path) path = argv[i];
        else { first_id = i; break; }
    }
    if (!path || !first_id) {
        fprintf(stderr, "usage: %s MODEL.colibri [--threads N] [--verify] TOKEN_ID...\n", argv[0]);
        return 2;
    }
    cb_model *m = NULL;
    cb_engine *eng = NULL;
    cb_model_info info;
    cb_status s = cb_model_open(path, verify, &m);
    if (s != CB_OK) return fail(path, s, cb_last_error());
    if ((s = cb_model_get_info(m, &info)) != CB_OK) { cb_model_close(m); return fail("info", s, cb_model_last_error(m)); }
    tensor embed;
    int rc = get(m, "model.embed_tokens.weight", &embed);
    int64_t n = argc - first_id, H = info.hidden;
    float *h = rc ? NULL : malloc(sizeof(float) * (size_t)(n * H));
    for (int64_t t = 0; !rc && t < n; t++) {
        char *end;
        long id = strtol(argv[first_id + t], &end, 10);
        if (*end || id < 0 || id >= embed.shape[0]) {
            fprintf(stderr, "classify: token id %s outside 0..%lld\n", argv[first_id + t], (long long)embed.shape[0] - 1);
            rc = 2;
        } else memcpy(h + t * H, embed.data + (size_t)id * (size_t)H, sizeof(float) * (size_t)H);
    }
    if (!rc && (s = cb_engine_create(threads, NULL, 0, &eng)) != CB_OK) rc = fail("cb_engine_create", s, cb_last_error());
    if (!rc) {
        printf("model %s: hidden %d, %d layers, %d experts, top %d, simd %s\n", path, (int)info.hidden,
               (int)info.n_layers, (int)info.n_experts, (int)info.top_k, cb_simd_name());
        rc = run_layers(m, eng, &info, h, n);
    }
    if (!rc) rc = classify(m, &info, h, n);
    free(h);
    cb_engine_destroy(eng);
    cb_model_close(m);
    return rc;
}
