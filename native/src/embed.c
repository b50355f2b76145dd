/* embed.c — cb_embed: token ids -> decoded embedding rows.
 *
 * Role: the first step of the whole-model forward. A row is decoded exactly
 * as format/quantize.py's dequantize (and the kernels) define the encoding:
 * f16/bf16 widened, int8 kinds (float)q times the row/group/matrix scale.
 */
#include "cb_internal.h"
#include "kernels.h"

static void decode_row(const cb_matrix *w, int32_t r, float *out) {
    size_t K = (size_t)w->cols, base = (size_t)r * K;
    const int8_t *q = (const int8_t *)w->data + base;
    switch (w->dtype) {
    case CB_F32:
        for (size_t k = 0; k < K; k++) out[k] = ((const float *)w->data)[base + k];
        break;
    case CB_F16:
        for (size_t k = 0; k < K; k++) out[k] = cb_f16_to_f32(((const uint16_t *)w->data)[base + k]);
        break;
    case CB_BF16:
        for (size_t k = 0; k < K; k++) out[k] = cb_bf16_to_f32(((const uint16_t *)w->data)[base + k]);
        break;
    case CB_I8_ROW:
        for (size_t k = 0; k < K; k++) out[k] = (float)q[k] * w->scales[r];
        break;
    case CB_I8_MINMAX:
        for (size_t k = 0; k < K; k++) out[k] = (float)((int32_t)q[k] - w->zero[0]) * w->scales[0];
        break;
    case CB_I4_G32:
    case CB_I4_G64: {   /* two codes per byte, low nibble = even column, two's complement */
        size_t g = (size_t)cb_group_size(w->dtype), ng = (K + g - 1) / g, rb = (K + 1) / 2;
        const unsigned char *b = (const unsigned char *)w->data + (size_t)r * rb;
        const float *sc = w->scales + (size_t)r * ng;
        for (size_t k = 0; k < K; k++) out[k] = (float)cb_i4_at(b, k) * sc[k / g];
        break;
    }
    default: {   /* CB_I8_G32 / G64 / G128 (cb_embed rejects every other code) */
        size_t g = (size_t)cb_group_size(w->dtype), ng = (K + g - 1) / g;
        const float *sc = w->scales + (size_t)r * ng;
        for (size_t k = 0; k < K; k++) out[k] = (float)q[k] * sc[k / g];
    }
    }
}

cb_status cb_embed(const cb_matrix *w, const int32_t *ids, int64_t n, float *out) {
    if (!w) return cb_fail(CB_E_INVALID, "cb_embed: matrix is NULL");
    cb_status s = cb_check_matrix(w, "embedding matrix", w->rows, w->cols);
    if (s != CB_OK) return s;
    if (!cb_encoding_of(w->dtype))
        return cb_fail(CB_E_UNSUPPORTED, "cb_embed: no row decoder for dtype %d", (int)w->dtype);
    if (n < 0 || n > CB_MAX_ROWS) return cb_fail(CB_E_INVALID, "cb_embed: n %lld invalid", (long long)n);
    if (n > 0 && (!ids || !out)) return cb_fail(CB_E_INVALID, "cb_embed: ids or out is NULL");
    for (int64_t t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= w->rows)
            return cb_fail(CB_E_INVALID, "cb_embed: ids[%lld] = %d outside [0, %d)", (long long)t, (int)ids[t],
                           (int)w->rows);
    for (int64_t t = 0; t < n; t++) decode_row(w, ids[t], out + (size_t)t * (size_t)w->cols);
    return CB_OK;
}
