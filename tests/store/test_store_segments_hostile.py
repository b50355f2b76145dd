"""A hostile hot-add manifest (issue 15 fuzz follow-up): deep JSON or wrong types are one
FormatError naming the manifest, never a RecursionError/AttributeError traceback."""
import os

import pytest

from colibri_dist.errors import FormatError
from colibri_dist.store.segments import MANIFEST, Segments, segments_dir


@pytest.mark.parametrize("text", [b"[" * 100000, b'{"layers": []}', b'{"layers": {"0": 5}}', b"\xff"],
                         ids=["deep", "list-layers", "int-record", "bad-utf8"])
def test_hostile_manifest_is_one_format_error(tmp_path, text):
    model = tmp_path / "m.colibri"
    os.makedirs(segments_dir(model))
    with open(os.path.join(segments_dir(model), MANIFEST), "wb") as f:
        f.write(text)
    with pytest.raises(FormatError, match="unreadable hot-add manifest"):
        Segments(model)
