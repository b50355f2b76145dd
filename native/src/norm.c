/* norm.c — row-wise normalisations of the whole-model path: RMSNorm and log-softmax.
 *
 * Role: the pre-attention / pre-MLP / final norms and the log-probabilities of
 * the LM head. Each row is reduced in double in ascending index order, so the
 * bits of a row depend only on that row. Single thread (cheap next to the
 * matrix products). RMSNorm's scale is ggml_compute_forward_rms_norm_f32's:
 * float squares summed in double, the mean rounded to float, 1.0f / sqrtf(mean
 * + eps) in float (torch's x.pow(2).mean() and rsqrt are float too); then
 * (x * scale) * weight, as llama.cpp's rms_norm and mul and transformers'
 * RMSNorm apply them. Computing the scale in double instead moved it by an ulp
 * now and then, and after an int8 activation quantization that flipped codes
 * sitting on a rounding tie (inputs decoded from IQ4_XS blocks have many).
 */
#include <math.h>
#include "cb_internal.h"

cb_status cb_rmsnorm(const float *x, int64_t n, int32_t dim, const float *weight, float eps, float *out) {
    if (!x || !out) return cb_fail(CB_E_INVALID, "cb_rmsnorm: x or out is NULL");
    if (n < 0 || n > CB_MAX_ROWS || dim <= 0 || dim > CB_MAX_HIDDEN)
        return cb_fail(CB_E_INVALID, "cb_rmsnorm: n %lld / dim %d invalid", (long long)n, (int)dim);
    if (!(eps >= 0.0f) || !isfinite(eps))
        return cb_fail(CB_E_INVALID, "cb_rmsnorm: eps %g must be finite and >= 0", (double)eps);
    for (int64_t t = 0; t < n; t++) {
        const float *xr = x + (size_t)t * (size_t)dim;
        float *o = out + (size_t)t * (size_t)dim;
        double ss = 0.0;
        for (int32_t i = 0; i < dim; i++) ss += (double)(xr[i] * xr[i]);
        float mean = (float)(ss / (double)dim);
        float inv = 1.0f / sqrtf(mean + eps);
        if (weight)
            for (int32_t i = 0; i < dim; i++) o[i] = (xr[i] * inv) * weight[i];
        else
            for (int32_t i = 0; i < dim; i++) o[i] = xr[i] * inv;
    }
    return CB_OK;
}

cb_status cb_log_softmax(const float *x, int64_t n, int32_t dim, float *out) {
    if (!x || !out) return cb_fail(CB_E_INVALID, "cb_log_softmax: x or out is NULL");
    if (n < 0 || n > CB_MAX_ROWS || dim <= 0)
        return cb_fail(CB_E_INVALID, "cb_log_softmax: n %lld / dim %d invalid", (long long)n, (int)dim);
    for (int64_t t = 0; t < n; t++) {
        const float *xr = x + (size_t)t * (size_t)dim;
        float m = -INFINITY;
        for (int32_t i = 0; i < dim; i++) {
            if (isnan(xr[i]) || xr[i] == INFINITY)
                return cb_fail(CB_E_NONFINITE, "cb_log_softmax: x[%lld, %d] is %g", (long long)t, (int)i, (double)xr[i]);
            if (xr[i] > m) m = xr[i];
        }
        if (m == -INFINITY) return cb_fail(CB_E_NONFINITE, "cb_log_softmax: row %lld is all -inf", (long long)t);
        double sum = 0.0;
        for (int32_t i = 0; i < dim; i++) sum += exp((double)(xr[i] - m));
        float lse = (float)log(sum);
        float *o = out + (size_t)t * (size_t)dim;
        for (int32_t i = 0; i < dim; i++) o[i] = (xr[i] - m) - lse;
    }
    return CB_OK;
}
