/* kernels.c — the cb_dot_rows entry point (active kernel table), the integer paths per encoding
 * and weight-matrix validation.
 *
 * Role: the single entry point cb_dot_rows used by routing and the FFNs, which
 * encodings take an integer-activation path with w8a8 on (and the dispatch of the
 * prepared-activation paths w4a8 / w6a8), and the argument
 * checks every public call runs on cb_matrix / cb_expert.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "cb_internal.h"
#include "kernels.h"
#include "kquants.h"
#include "q80.h"

void cb_dot_rows(const cb_matrix *w, int32_t r0, int32_t r1, const float *const *xs,
                 float *const *outs, int64_t nt) {
    cb_kernels()->dot_rows(w, r0, r1, xs, outs, nt);
}

/* Encodings with an integer-activation kernel family (kernels_q8.c, kernels_q4.c, kernels_q6.c, kernels_kq.c,
 * kernels_q80.c); others: f32. The block paths follow ggml-cpu's type_traits_cpu vec_dot_type: Q8_K for the
 * k-quants and IQ4_XS, Q8_0 for Q8_0 / Q5_0 / MXFP4 / IQ4_NL, Q8_1 for Q5_1. */
static const int QPATH[CB_DTYPE_COUNT] = {
    [CB_I8_ROW] = CB_QPATH_W8A8,
    [CB_I4_G32] = CB_QPATH_W4A8,
    [CB_I4_G64] = CB_QPATH_W4A8,
    [CB_I6_G64] = CB_QPATH_W6A8,
    [CB_Q4_K] = CB_QPATH_KQ,
    [CB_Q4_K_R8] = CB_QPATH_KQ,
    [CB_Q6_K_R16] = CB_QPATH_KQ,
    [CB_Q5_K] = CB_QPATH_KQ,
    [CB_Q6_K] = CB_QPATH_KQ,
    [CB_Q8_0] = CB_QPATH_Q80,
    [CB_Q5_0] = CB_QPATH_Q80,
    [CB_MXFP4] = CB_QPATH_Q80,
    [CB_IQ4_NL] = CB_QPATH_Q80,
    [CB_Q5_1] = CB_QPATH_Q81,
    [CB_IQ4_XS] = CB_QPATH_KQ,
};

int cb_qpath_of(int32_t dtype) { return dtype >= 0 && dtype < CB_DTYPE_COUNT ? QPATH[dtype] : CB_QPATH_NONE; }

size_t cb_qprep_bytes(const cb_matrix *w) {
    switch (cb_qpath_of(w->dtype)) {
    case CB_QPATH_W4A8: return cb_q4_prep_bytes(w->cols, cb_group_size(w->dtype));
    case CB_QPATH_W6A8: return cb_q6_prep_bytes(w->cols);
    default: return 0;
    }
}

void cb_qprep(const cb_matrix *w, const int16_t *xq, int8_t *out) {
    if (cb_qpath_of(w->dtype) == CB_QPATH_W6A8) cb_q6_prep(xq, w->cols, out);
    else cb_q4_prep(xq, w->cols, cb_group_size(w->dtype), out);
}

void cb_dot_rows_qprep(const cb_kernel_table *kt, const cb_matrix *w, int32_t r0, int32_t r1, const int8_t *const *xp,
                       const float *sx, float *const *outs, int64_t nt) {
    if (cb_qpath_of(w->dtype) == CB_QPATH_W6A8) kt->dot_rows_q6(w, r0, r1, xp, sx, outs, nt);
    else kt->dot_rows_q4(w, r0, r1, xp, sx, outs, nt);
}

size_t cb_qblocks_bytes(const cb_matrix *w) {
    switch (cb_qpath_of(w->dtype)) {
    case CB_QPATH_Q80: return sizeof(cb_q80_block) * cb_q80_blocks(w->cols);
    case CB_QPATH_Q81: return cb_q81_bytes(w->cols);
    default: return sizeof(cb_q8k_block) * (size_t)(w->cols / CB_QK_K);
    }
}

void cb_qblocks(const cb_matrix *w, const float *x, void *out) {
    switch (cb_qpath_of(w->dtype)) {
    case CB_QPATH_Q80: cb_quantize_row_q80(x, w->cols, out); break;
    case CB_QPATH_Q81: cb_quantize_row_q81(x, w->cols, out); break;
    default: cb_quantize_row_q8k(x, w->cols, out);
    }
}

/* Q8_0 and Q8_1 rows both go to the 32-block kernel (a Q8_1 row: Q8_0 blocks, then s). */
void cb_dot_rows_qblocks(const cb_kernel_table *kt, const cb_matrix *w, int32_t r0, int32_t r1, const void *const *xa,
                         float *const *outs, int64_t nt) {
    if (cb_qpath_of(w->dtype) == CB_QPATH_KQ) kt->dot_rows_kq(w, r0, r1, (const cb_q8k_block *const *)xa, outs, nt);
    else kt->dot_rows_q80(w, r0, r1, (const cb_q80_block *const *)xa, outs, nt);
}

cb_status cb_check_matrix(const cb_matrix *m, const char *what, int32_t rows, int32_t cols) {
    if (!m->data) return cb_fail(CB_E_INVALID, "%s: data is NULL", what);
    const cb_encoding *enc = cb_encoding_of(m->dtype);
    if (!enc) return cb_fail(CB_E_INVALID, "%s: unknown dtype %d", what, (int)m->dtype);
    if (!cb_row_decoder_of(m->dtype))
        return cb_fail(CB_E_UNSUPPORTED, "%s: encoding %s has no row decoder (native/src/decode.c)", what, enc->name);
    if (m->rows != rows || m->cols != cols)
        return cb_fail(CB_E_INVALID, "%s: shape [%d, %d], expected [%d, %d]", what, (int)m->rows,
                       (int)m->cols, (int)rows, (int)cols);
    if (rows <= 0 || cols <= 0 || rows > CB_MAX_HIDDEN || cols > CB_MAX_HIDDEN)
        return cb_fail(CB_E_INVALID, "%s: shape [%d, %d] empty or above %d", what, (int)rows, (int)cols, CB_MAX_HIDDEN);
    if (cb_row_bytes(m->dtype, cols) < 0)
        return cb_fail(CB_E_INVALID, "%s: %s needs cols a multiple of %d (whole blocks), got %d", what,
                       enc->name, (int)enc->group, (int)cols);
    if (rows % enc->row_group)
        return cb_fail(CB_E_INVALID, "%s: %s stores rows in groups of %d, got %d rows", what, enc->name,
                       (int)enc->row_group, (int)rows);
    if (cb_has_scale_array(enc) && !m->scales)
        return cb_fail(CB_E_INVALID, "%s: %s matrix without scales", what, enc->name);
    if (enc->zero_point) {
        if (!m->zero) return cb_fail(CB_E_INVALID, "%s: int8-minmax matrix without zero point", what);
        if (m->zero[0] < -(1 << 23) || m->zero[0] > (1 << 23))
            return cb_fail(CB_E_INVALID, "%s: zero point %d out of range", what, (int)m->zero[0]);
    }
    return CB_OK;
}

cb_status cb_check_expert(const cb_expert *ex, int32_t hidden, const char *what) {
    if (!ex) return cb_fail(CB_E_INVALID, "%s: expert is NULL", what);
    int32_t inter = ex->gate.rows;
    char name[96];
    cb_status s;
    snprintf(name, sizeof name, "%s.gate", what);
    if ((s = cb_check_matrix(&ex->gate, name, inter, hidden)) != CB_OK) return s;
    snprintf(name, sizeof name, "%s.up", what);
    if ((s = cb_check_matrix(&ex->up, name, inter, hidden)) != CB_OK) return s;
    snprintf(name, sizeof name, "%s.down", what);
    if ((s = cb_check_matrix(&ex->down, name, hidden, inter)) != CB_OK) return s;
    if (ex->act != CB_ACT_SILU && ex->act != CB_ACT_SWIGLU_OAI)
        return cb_fail(CB_E_INVALID, "%s: unknown activation %d", what, (int)ex->act);
    if (ex->act == CB_ACT_SWIGLU_OAI && !(isfinite(ex->alpha) && isfinite(ex->limit) && ex->limit > 0))
        return cb_fail(CB_E_INVALID, "%s: swiglu_oai needs a finite alpha and a finite limit > 0, got %g, %g", what,
                       (double)ex->alpha, (double)ex->limit);
    return CB_OK;
}

static size_t round64(size_t k) { return (k + 63) & ~(size_t)63; }

size_t cb_prep64_bytes(int32_t K) {
    size_t k64 = round64((size_t)K);
    return k64 + k64 / 64 * 8 * sizeof(int32_t);
}

void cb_prep64(const int16_t *xq, int32_t K, int8_t *out, cb_prep_block_k *block) {
    size_t n = (size_t)K, k64 = round64(n), nb = k64 / 64;
    int32_t c[8];
    for (size_t b = 0; b < nb; b++) {
        int16_t tail[64] = {0};                 /* the last, partial block: zero-padded */
        const int16_t *x = b * 64 + 64 <= n ? xq + b * 64 : (memcpy(tail, xq + b * 64, (n - b * 64) * sizeof *xq), tail);
        block(x, out + b * 64, c);
        memcpy(out + k64 + b * sizeof c, c, sizeof c);
    }
}
