/* embed.c — cb_embed: token ids -> decoded embedding rows.
 *
 * Role: the first step of the whole-model forward. A row is decoded exactly
 * as format/quantize.py's dequantize (and the kernels) define the encoding,
 * by the encoding's row decoder (decode.c): f16/bf16 widened, integer kinds
 * (float)q times the row/group/matrix scale.
 */
#include "cb_internal.h"
#include "kernels.h"

/* Row r decoded by the encoding's row decoder (the one the scalar kernels use), times the
 * scale the kernels apply after the dot (int8 row / matrix scale), rounded per element. */
static void embed_row(const cb_matrix *w, int32_t r, float *out) {
    size_t K = (size_t)w->cols;
    cb_decode_row(w, r, 0, K, out);
    const float *post = cb_post_scale(w, r);
    if (post)
        for (size_t k = 0; k < K; k++) out[k] = out[k] * *post;
}

cb_status cb_embed(const cb_matrix *w, const int32_t *ids, int64_t n, float *out) {
    if (!w) return cb_fail(CB_E_INVALID, "cb_embed: matrix is NULL");
    cb_status s = cb_check_matrix(w, "embedding matrix", w->rows, w->cols);
    if (s != CB_OK) return s;
    if (n < 0 || n > CB_MAX_ROWS) return cb_fail(CB_E_INVALID, "cb_embed: n %lld invalid", (long long)n);
    if (n > 0 && (!ids || !out)) return cb_fail(CB_E_INVALID, "cb_embed: ids or out is NULL");
    for (int64_t t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= w->rows)
            return cb_fail(CB_E_INVALID, "cb_embed: ids[%lld] = %d outside [0, %d)", (long long)t, (int)ids[t],
                           (int)w->rows);
    for (int64_t t = 0; t < n; t++) embed_row(w, ids[t], out + (size_t)t * (size_t)w->cols);
    return CB_OK;
}
