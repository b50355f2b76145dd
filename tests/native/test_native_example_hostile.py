"""native/examples/classify on a container whose embedding shape overflows (issue 15, defect 3):
shape [2^62 + V, h] f32 'matched' V*h*4 bytes in the C reader, and a large token id then read
far outside the mapping (segfault). Now the C reader refuses the file at open."""
import os
import subprocess
import sys


ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "format"))
from container_edit import entries, find, fix_crcs, set_entry  # noqa: E402


def test_classify_refuses_overflowing_embedding_shape(tmp_path):
    from colibri_dist.config import DemoConfig
    from colibri_dist.demos.classifier import ensure_demo
    model = ensure_demo(DemoConfig(cache_dir=str(tmp_path), layers=1), log=lambda *a: None).model
    subprocess.run(["make", "-s", "-j2", "-C", f"{ROOT}/native", "example"], check=True, capture_output=True, timeout=300)
    raw = bytearray(open(model, "rb").read())
    i = find(raw, lambda e: e.name == "model.embed_tokens.weight")
    rows, cols = entries(raw)[i].shape
    set_entry(raw, i, "shape0", 2 ** 62 + rows)
    bad = tmp_path / "bad.colibri"
    bad.write_bytes(bytes(fix_crcs(raw)))
    proc = subprocess.run([f"{ROOT}/native/examples/classify", str(bad), str(2 ** 40)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "embed_tokens" in proc.stderr, (proc.returncode, proc.stderr)
