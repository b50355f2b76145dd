"""The Python copy of the weight-encoding table (colibri_dist/encodings.py) equals the C table."""
from colibri_dist import encodings
from colibri_dist._native import lib
from colibri_dist.native.encoding_table import encoding_table


def test_python_table_equals_cb_encoding_of():
    assert encodings.ENCODINGS == encoding_table()
    assert (encodings.SCALE_NONE, encodings.SCALE_ROW, encodings.SCALE_GROUP, encodings.SCALE_MATRIX) == \
        (lib.CB_SCALE_NONE, lib.CB_SCALE_ROW, lib.CB_SCALE_GROUP, lib.CB_SCALE_MATRIX)
    assert lib.cb_encoding_of(len(encodings.ENCODINGS)) == lib.cb_encoding_of(-1)    # NULL past the end
