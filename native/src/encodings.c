/* encodings.c — the one table of weight-encoding facts (colibri.h cb_encoding).
 *
 * Role: every rule about how a cb_dtype is stored (bits per element, scale
 * kind, group size, zero point, integer range) lives here, generated from the
 * rows of CB_ENCODING_LIST (colibri.h). The kernels, the
 * argument checks, the .colibri parser and (through the cdef) Python's scheme
 * tables in colibri_dist/encodings.py all read it instead of keeping copies.
 */
#include "cb_internal.h"

/* One entry per row of CB_ENCODING_LIST (colibri.h), at its code. */
#define ENCODING_ROW(ID, CODE, NAME, BITS, IS_INT, SCALE, GROUP, ZERO, QMAX, BLOCK_BYTES, ROW_GROUP) \
    [CB_##ID] = {NAME, CB_##ID, BITS, IS_INT, CB_SCALE_##SCALE, GROUP, ZERO, QMAX, BLOCK_BYTES, ROW_GROUP},
static const cb_encoding TABLE[CB_DTYPE_COUNT] = {CB_ENCODING_LIST(ENCODING_ROW)};

/* The codes are the rows' positions: 0 .. CB_DTYPE_COUNT-1, none skipped or repeated
 * (a container stores them, so a row is never renumbered or moved). */
#define ROW_POSITION(ID, ...) POSITION_##ID,
enum { CB_ENCODING_LIST(ROW_POSITION) N_ROWS };
#define CODE_IS_POSITION(ID, ...) _Static_assert((int)CB_##ID == (int)POSITION_##ID, "CB_ENCODING_LIST: " #ID "'s code is not its row");
CB_ENCODING_LIST(CODE_IS_POSITION)
_Static_assert((int)N_ROWS == (int)CB_DTYPE_COUNT, "CB_ENCODING_LIST: codes must be 0 .. rows-1");

const cb_encoding *cb_encoding_of(int32_t dtype) {
    return dtype >= 0 && dtype < CB_DTYPE_COUNT ? &TABLE[dtype] : NULL;
}

int64_t cb_row_bytes(int32_t dtype, int32_t cols) {
    const cb_encoding *e = cb_encoding_of(dtype);
    if (!e || cols < 0) return -1;
    if (e->scale_kind == CB_SCALE_BLOCK)     /* blocks of `group` codes, the last one may be short */
        return ((int64_t)cols + e->group - 1) / e->group * e->block_bytes;
    if (e->scale_kind == CB_SCALE_SUPER)     /* whole blocks only (llama.cpp never writes a short one) */
        return cols % e->group ? -1 : (int64_t)cols / e->group * e->block_bytes;
    return ((int64_t)cols * e->bits + 7) / 8;
}

int cb_has_scale_array(const cb_encoding *e) {
    return e->scale_kind == CB_SCALE_ROW || e->scale_kind == CB_SCALE_GROUP || e->scale_kind == CB_SCALE_MATRIX;
}

int64_t cb_matrix_data_bytes(int32_t dtype, int32_t rows, int32_t cols) {
    int64_t rb = cb_row_bytes(dtype, cols);
    return rb < 0 || rows < 0 || rows % cb_encoding_of(dtype)->row_group ? -1 : rb * rows;
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
