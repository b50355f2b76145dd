/* rope.c — cb_rope_apply: rotary position embedding in place on q / k heads.
 *
 * Role: between the q/k projections and the KV-cache write / attention. The
 * angle of pair i at position p is (float)p * inv_freq[i] (one f32 multiply,
 * like transformers' outer product); cos/sin are taken in double and rounded
 * once, then scaled by attention_factor (YaRN mscale; 1 otherwise). A token's
 * bits depend only on its position and its own values.
 */
#include <math.h>
#include "cb_internal.h"

#define MAX_ROT 4096

static void rotate_head(float *x, int32_t half, int32_t interleaved, const float *c, const float *s) {
    float a[MAX_ROT / 2], b[MAX_ROT / 2];
    for (int32_t i = 0; i < half; i++) {
        a[i] = interleaved ? x[2 * i] : x[i];
        b[i] = interleaved ? x[2 * i + 1] : x[i + half];
    }
    for (int32_t i = 0; i < half; i++) {
        x[i] = a[i] * c[i] - b[i] * s[i];
        x[i + half] = b[i] * c[i] + a[i] * s[i];
    }
}

static cb_status check_rope(const cb_rope *r, const float *x, int64_t n, int32_t n_heads, int64_t token_stride,
                            int32_t head_stride, int32_t offset, const int32_t *positions) {
    if (!r || !r->inv_freq) return cb_fail(CB_E_INVALID, "cb_rope_apply: rope or inv_freq is NULL");
    if (r->rot_dim <= 0 || r->rot_dim % 2 || r->rot_dim > MAX_ROT)
        return cb_fail(CB_E_INVALID, "cb_rope_apply: rot_dim %d must be even and in 2..%d", (int)r->rot_dim, MAX_ROT);
    if (!isfinite(r->attention_factor)) return cb_fail(CB_E_INVALID, "cb_rope_apply: attention_factor is not finite");
    for (int32_t i = 0; i < r->rot_dim / 2; i++)
        if (!isfinite(r->inv_freq[i])) return cb_fail(CB_E_INVALID, "cb_rope_apply: inv_freq[%d] is not finite", (int)i);
    if (n < 0 || n > CB_MAX_ROWS || n_heads <= 0 || offset < 0 || head_stride < offset + r->rot_dim)
        return cb_fail(CB_E_INVALID, "cb_rope_apply: n %lld, n_heads %d, offset %d + rot_dim %d, head_stride %d invalid",
                       (long long)n, (int)n_heads, (int)offset, (int)r->rot_dim, (int)head_stride);
    if (n > 1 && token_stride < (int64_t)(n_heads - 1) * head_stride + offset + r->rot_dim)
        return cb_fail(CB_E_INVALID, "cb_rope_apply: token_stride %lld smaller than %d heads of stride %d",
                       (long long)token_stride, (int)n_heads, (int)head_stride);
    if (n > 0 && (!x || !positions)) return cb_fail(CB_E_INVALID, "cb_rope_apply: x or positions is NULL");
    for (int64_t t = 0; t < n; t++)
        if (positions[t] < 0)
            return cb_fail(CB_E_INVALID, "cb_rope_apply: positions[%lld] = %d < 0", (long long)t, (int)positions[t]);
    return CB_OK;
}

cb_status cb_rope_apply(const cb_rope *r, float *x, int64_t n, int32_t n_heads, int64_t token_stride,
                        int32_t head_stride, int32_t offset, const int32_t *positions) {
    cb_status st = check_rope(r, x, n, n_heads, token_stride, head_stride, offset, positions);
    if (st != CB_OK) return st;
    int32_t half = r->rot_dim / 2;
    float c[MAX_ROT / 2], s[MAX_ROT / 2];
    for (int64_t t = 0; t < n; t++) {
        for (int32_t i = 0; i < half; i++) {
            float a = (float)positions[t] * r->inv_freq[i];
            c[i] = (float)cos((double)a) * r->attention_factor;
            s[i] = (float)sin((double)a) * r->attention_factor;
        }
        for (int32_t h = 0; h < n_heads; h++)
            rotate_head(x + (size_t)t * (size_t)token_stride + (size_t)h * (size_t)head_stride + (size_t)offset, half,
                        r->interleaved, c, s);
    }
    return CB_OK;
}
