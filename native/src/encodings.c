/* encodings.c — the one table of weight-encoding facts (colibri.h cb_encoding).
 *
 * Role: every rule about how a cb_dtype is stored (bits per element, scale
 * kind, group size, zero point, integer range) lives here. The kernels, the
 * argument checks, the .colibri parser and (through the cdef) Python's scheme
 * tables in colibri_dist/encodings.py all read it instead of keeping copies.
 */
#include "cb_internal.h"

static const cb_encoding TABLE[CB_DTYPE_COUNT] = {
    {"f32", CB_F32, 32, 0, CB_SCALE_NONE, 0, 0, 0},
    {"f16", CB_F16, 16, 0, CB_SCALE_NONE, 0, 0, 0},
    {"bf16", CB_BF16, 16, 0, CB_SCALE_NONE, 0, 0, 0},
    {"int8", CB_I8_ROW, 8, 1, CB_SCALE_ROW, 0, 0, 127},
    {"int8-g32", CB_I8_G32, 8, 1, CB_SCALE_GROUP, 32, 0, 127},
    {"int8-g64", CB_I8_G64, 8, 1, CB_SCALE_GROUP, 64, 0, 127},
    {"int8-g128", CB_I8_G128, 8, 1, CB_SCALE_GROUP, 128, 0, 127},
    {"int8-minmax", CB_I8_MINMAX, 8, 1, CB_SCALE_MATRIX, 0, 1, 127},
    {"int4-g32", CB_I4_G32, 4, 1, CB_SCALE_GROUP, 32, 0, 7},
    {"int4-g64", CB_I4_G64, 4, 1, CB_SCALE_GROUP, 64, 0, 7},
};

const cb_encoding *cb_encoding_of(int32_t dtype) {
    return dtype >= 0 && dtype < CB_DTYPE_COUNT ? &TABLE[dtype] : NULL;
}

int64_t cb_row_bytes(int32_t dtype, int32_t cols) {
    const cb_encoding *e = cb_encoding_of(dtype);
    if (!e || cols < 0) return -1;
    return ((int64_t)cols * e->bits + 7) / 8;
}

int64_t cb_matrix_data_bytes(int32_t dtype, int32_t rows, int32_t cols) {
    int64_t rb = cb_row_bytes(dtype, cols);
    return rb < 0 || rows < 0 ? -1 : rb * rows;
}

int64_t cb_matrix_scale_count(int32_t dtype, int32_t rows, int32_t cols) {
    const cb_encoding *e = cb_encoding_of(dtype);
    if (!e || rows < 0 || cols < 0) return -1;
    switch (e->scale_kind) {
    case CB_SCALE_ROW: return rows;
    case CB_SCALE_GROUP: return (int64_t)rows * ((cols + e->group - 1) / e->group);
    case CB_SCALE_MATRIX: return 1;
    default: return 0;
    }
}
