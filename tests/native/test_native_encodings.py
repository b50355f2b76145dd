"""The Python copy of the weight-encoding table (colibri_dist/encodings.py) equals the C table."""
from colibri_dist import encodings
from colibri_dist._native import lib
from colibri_dist.native.encoding_table import encoding_table


def test_python_table_equals_cb_encoding_of():
    assert encodings.ENCODINGS == encoding_table()
    assert (encodings.SCALE_NONE, encodings.SCALE_ROW, encodings.SCALE_GROUP, encodings.SCALE_MATRIX,
            encodings.SCALE_BLOCK, encodings.SCALE_SUPER) == \
        (lib.CB_SCALE_NONE, lib.CB_SCALE_ROW, lib.CB_SCALE_GROUP, lib.CB_SCALE_MATRIX, lib.CB_SCALE_BLOCK,
         lib.CB_SCALE_SUPER)
    assert lib.cb_encoding_of(len(encodings.ENCODINGS)) == lib.cb_encoding_of(-1)    # NULL past the end


def test_row_bytes_equal_the_c_rule():
    for e in encodings.ENCODINGS:
        for rows, cols in ((1, 1), (3, 31), (2, 32), (5, 64), (4, 100), (3, 256), (2, 768)):
            if e.scale_kind == encodings.SCALE_SUPER and cols % e.group:      # llama.cpp's blocks: whole only
                assert e.data_bytes(rows, cols) == -1
            assert e.data_bytes(rows, cols) == lib.cb_matrix_data_bytes(e.dtype, rows, cols), (e.name, cols)
            assert e.scale_count(rows, cols) == lib.cb_matrix_scale_count(e.dtype, rows, cols), (e.name, cols)
    assert encodings.BY_NAME["q8_0"].data_bytes(3, 64) == 3 * 2 * 34       # llama.cpp's block_q8_0: 2 + 32 bytes
    assert encodings.BY_NAME["q4_k"].data_bytes(3, 512) == 3 * 2 * 144     # block_q4_K: 2 + 2 + 12 + 128 bytes
    assert encodings.BY_NAME["q6_k"].data_bytes(3, 512) == 3 * 2 * 210     # block_q6_K: 128 + 64 + 16 + 2 bytes
    assert encodings.BY_NAME["q5_k"].data_bytes(3, 512) == 3 * 2 * 176     # block_q5_K: 2 + 2 + 12 + 32 + 128 bytes
    assert encodings.BY_NAME["mxfp4"].data_bytes(3, 64) == 3 * 2 * 17      # block_mxfp4: 1 + 16 bytes
    assert encodings.BY_NAME["iq4_xs"].data_bytes(3, 512) == 3 * 2 * 136   # block_iq4_xs: 2 + 2 + 4 + 128 bytes
    assert encodings.BY_NAME["iq4_nl"].data_bytes(3, 64) == 3 * 2 * 18     # block_iq4_nl: 2 + 16 bytes
    assert encodings.BY_NAME["q5_0"].data_bytes(3, 64) == 3 * 2 * 22       # block_q5_0: 2 + 4 + 16 bytes
    assert encodings.BY_NAME["q5_1"].data_bytes(3, 64) == 3 * 2 * 24       # block_q5_1: 2 + 2 + 4 + 16 bytes
