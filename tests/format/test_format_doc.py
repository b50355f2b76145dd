"""docs/FORMAT.md's header and entry tables match the structures the code packs."""
import os
import re
import struct

import pytest

from colibri_dist.format import spec

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "FORMAT.md")


def _doc_rows(section):
    text = open(DOC, encoding="utf-8").read()
    body = text.split(section, 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|[^|]*\|\s*(\w+)\s*\|", body, re.M)
    return [(int(off), int(size), name) for off, size, name in rows]


def _code_rows(fields):
    rows, off = [], 0
    for name, code in fields:
        size = struct.calcsize("<" + code)
        rows.append((off, size, name))
        off += size
    return rows


@pytest.mark.parametrize("section,fields", [("## Header (512 bytes at offset 0)", spec.HEADER_FIELDS),
                                            ("## Tensor table entry (384 bytes)", spec.ENTRY_FIELDS)])
def test_doc_tables_match_spec(section, fields):
    assert _doc_rows(section) == _code_rows(fields)
