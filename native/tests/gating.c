/* Gating: top-k ties to the lower index, softmax weights, DeepSeek group selection, bad configs. */
#include <math.h>
#include "colibri.h"
#include "check.h"

int main(void) {
    cb_gating g = {CB_GATE_SOFTMAX_TOPK_NORM, 6, 3, 1, 1, 1, 1.0f};
    float l[6] = {1, 3, 3, 0, 3, 2};
    int32_t idx[8];
    float w[8];
    CHECK_OK(cb_gate_logits(&g, l, NULL, 1, idx, w));
    CHECK(idx[0] == 1 && idx[1] == 2 && idx[2] == 4);
    CHECK(fabsf(w[0] - 1.0f / 3) < 1e-7f && fabsf(w[0] + w[1] + w[2] - 1.0f) < 1e-6f);

    g.kind = CB_GATE_SOFTMAX_TOPK;   /* weights are full-softmax probabilities */
    g.top_k = 2;
    CHECK_OK(cb_gate_logits(&g, l, NULL, 1, idx, w));
    double den = 0;
    for (int e = 0; e < 6; e++) den += exp(l[e] - 3.0);
    CHECK(fabs(w[0] - 1.0 / den) < 1e-6 && idx[0] == 1 && idx[1] == 2);

    /* sigmoid group: 4 groups of 2; bias moves selection, not weights */
    cb_gating d = {CB_GATE_SIGMOID_GROUP, 8, 2, 4, 1, 1, 2.0f};
    float dl[8] = {0, 0, 1, -1, 0.5f, 0.4f, 0, 0};
    float bias[8] = {0, 0, 0, 0, 0, 0, 5, 0};
    CHECK_OK(cb_gate_logits(&d, dl, bias, 1, idx, w));
    CHECK(idx[0] == 6 && idx[1] == 7);                 /* group 3 wins through the bias */
    CHECK(fabsf(w[0] - 1.0f) < 1e-6f && fabsf(w[1] - 1.0f) < 1e-6f);   /* 2 * 0.5/(0.5+0.5) */
    CHECK_OK(cb_gate_logits(&d, dl, NULL, 1, idx, w));
    CHECK(idx[0] == 4 && idx[1] == 5);                 /* group 2: 0.62+0.60 beats group 1: 0.73+0.27 */

    /* invalid configurations and non-finite logits */
    cb_gating bad = d;
    bad.n_group = 3;
    CHECK(cb_gate_logits(&bad, dl, NULL, 1, idx, w) == CB_E_INVALID);
    bad = g;
    bad.top_k = 7;
    CHECK(cb_gate_logits(&bad, l, NULL, 1, idx, w) == CB_E_INVALID);
    float nan_l[6] = {0, NAN, 0, 0, 0, 0};
    CHECK(cb_gate_logits(&g, nan_l, NULL, 1, idx, w) == CB_E_NONFINITE);
    CHECK(cb_last_error()[0] != '\0');
    CHECK_DONE();
}
