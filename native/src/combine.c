/* combine.c — y[t] = shared[t] + sum_j w[t,j] * slot_out[t,j,:], in slot order, no FMA.
 *
 * Role: the last stage of a MoE layer, shared by cb_moe_forward and every
 * distributed path (pool workers return slot outputs, the caller combines),
 * so all paths add the same terms in the same order.
 */
#include "cb_internal.h"

void cb_combine_rows(int64_t t0, int64_t t1, int32_t k, int32_t hidden, const float *w,
                     const float *slot_out, const float *shared, float *y) {
    for (int64_t t = t0; t < t1; t++) {
        float *yt = y + (size_t)t * (size_t)hidden;
        const float *st = shared ? shared + (size_t)t * (size_t)hidden : NULL;
        for (int32_t c = 0; c < hidden; c++) yt[c] = st ? st[c] : 0.0f;
        for (int32_t j = 0; j < k; j++) {
            float wj = w[t * k + j];
            const float *o = slot_out + ((size_t)t * (size_t)k + (size_t)j) * (size_t)hidden;
            for (int32_t c = 0; c < hidden; c++) {
                float p = wj * o[c];   /* rounded product (built with -ffp-contract=off) */
                yt[c] = yt[c] + p;
            }
        }
    }
}

cb_status cb_combine(int64_t n, int32_t k, int32_t hidden, const float *w, const float *slot_out,
                     const float *shared, float *y) {
    if (n < 0 || n > CB_MAX_ROWS || k < 1 || k > CB_MAX_TOPK || hidden < 1 || hidden > CB_MAX_HIDDEN) return cb_fail(CB_E_INVALID, "cb_combine: n %lld, k %d, hidden %d invalid", (long long)n, (int)k, (int)hidden);
    if (n > 0 && (!w || !slot_out || !y)) return cb_fail(CB_E_INVALID, "cb_combine: NULL tensor");
    cb_combine_rows(0, n, k, hidden, w, slot_out, shared, y);
    return CB_OK;
}
