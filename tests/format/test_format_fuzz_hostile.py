"""Bounded container fuzzing (issue 15, "keep them found"): seeded mutations of real containers
through `colibri inspect`, `colibri verify`, the MoeExecutor (mmap and tiny budget) and the C reader
built with ASan/UBSan. Every case must end in a clear error or a correct result:

  - a signal, a hang (> DEADLINE_S per case), a traceback (anything but ColibriError) fails;
  - a mutation the checksums cover must give an error or exactly the original outputs;
  - a mutation with its checksums recomputed (a different, maybe hostile, model) must give an
    error or the same result on every budget, and both readers must agree on structure.

Fixed case counts and seeds: the same cases on every run, a few seconds in all.
"""
import contextlib
import io
import os
import re
import shutil
import signal
import struct
import subprocess

import numpy as np
import pytest

import colibri_dist as cd
from colibri_dist import cli
from colibri_dist.cli import main
from colibri_dist.errors import ColibriError
from colibri_dist.format import spec
from container_edit import entries, entry_base, fix_crcs, fix_entry_crc, set_meta

DEADLINE_S = 10
HOSTILE = [0, 1, -1, 7, 63, 64, 4095, 4096, 2 ** 31 - 1, -2 ** 31, 2 ** 32 - 1, 2 ** 62 + 16,
           2 ** 63 - 1, -2 ** 63, 2 ** 64 - 1]
# header fields (offset, struct code) that are not covered by anything but the header CRC
HEADER_FIELDS = [(8, "<I"), (16, "<I"), (24, "<Q"), (32, "<Q"), (40, "<Q"), (48, "<Q"), (56, "<Q"),
                 (120, "<i"), (124, "<i"), (128, "<i"), (132, "<i"), (136, "<i"), (140, "<i"), (144, "<i"),
                 (148, "<i"), (152, "<i"), (156, "<i"), (160, "<i"), (164, "<i"), (168, "<i"), (172, "<f")]
ENTRY_FIELDS = [(128, "<H"), (130, "<H"), (132, "<i"), (136, "<i"), (140, "<I"), (144, "<q"), (152, "<q"),
                (160, "<q"), (176, "<Q"), (184, "<Q")] + \
               [(200 + 48 * m + off, code) for m in range(3)
                for off, code in ((0, "<i"), (4, "<i"), (8, "<i"), (12, "<i"), (16, "<q"), (24, "<q"),
                                  (32, "<q"), (40, "<q"))]
BAD_META = [b"\xff\xfe\xfd", b"{", b"[" * 50000, b"null", b'{"a": NaN}', b"\x00" * 64, b'{"source_config": 7}']


@contextlib.contextmanager
def deadline(seconds, what):
    def expired(signum, frame):
        raise TimeoutError(f"case {what} ran longer than {seconds} s (a hang)")
    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _pack(raw, at, code, value):
    try:
        struct.pack_into(code, raw, at, value)
    except struct.error:                       # value out of the field's range: wrap it
        size = struct.calcsize(code)
        struct.pack_into("<" + {1: "B", 2: "H", 4: "I", 8: "Q"}[size], raw, at, value % (1 << 8 * size))


def _hostile(rng, raw):
    if rng.random() < 0.3:                         # an overlapping / neighbouring real value
        e = entries(raw)[int(rng.integers(0, len(entries(raw))))]
        return int(rng.choice([e.offset, e.nbytes, e.offset + e.nbytes, e.offset - 64]))
    return int(rng.choice(HOSTILE))


def mutations(original, seed):
    """Yield (name, bytes, covered): covered = a checksum protects the change (else CRCs were fixed)."""
    rng = np.random.default_rng(seed)
    ents = entries(original)
    h = spec.unpack_header(bytes(original[:spec.HEADER_SIZE]))
    t0, t1 = h["table_offset"], h["table_offset"] + len(ents) * spec.ENTRY_SIZE
    covered = [(0, spec.HEADER_SIZE), (t0, t1), (h["meta_offset"], h["meta_offset"] + h["meta_bytes"])] + \
              [(e.offset, e.offset + e.nbytes) for e in ents]
    for i in range(40):                            # single bit flips inside checksummed bytes
        a, b = covered[int(rng.integers(0, len(covered)))]
        raw = bytearray(original)
        pos = int(rng.integers(a, b))
        raw[pos] ^= 1 << int(rng.integers(0, 8))
        yield f"flip@{pos}", raw, True
    for i in range(12):                            # truncations
        yield f"trunc{i}", bytearray(original[:int(rng.integers(0, len(original)))]), True
    for i in range(40):                            # header fields, CRC fixed
        raw = bytearray(original)
        at, code = HEADER_FIELDS[int(rng.integers(0, len(HEADER_FIELDS)))]
        _pack(raw, at, code, float(rng.choice([np.nan, np.inf, -1.0, 1e30])) if code == "<f" else _hostile(rng, raw))
        yield f"header@{at}", fix_crcs(raw), False
    for i in range(70):                            # table entry fields, CRCs fixed
        raw = bytearray(original)
        k = int(rng.integers(0, len(ents)))
        at, code = ENTRY_FIELDS[int(rng.integers(0, len(ENTRY_FIELDS)))]
        _pack(raw, entry_base(raw, k) + at, code, _hostile(rng, raw))
        yield f"entry{k}@{at}", fix_crcs(raw), False
    for i in range(6):                             # duplicated names
        raw = bytearray(original)
        a, b = rng.choice(len(ents), 2, replace=False)
        raw[entry_base(raw, int(b)):entry_base(raw, int(b)) + 128] = raw[entry_base(raw, int(a)):entry_base(raw, int(a)) + 128]
        yield f"dup{a}-{b}", fix_crcs(raw), False
    for i, meta in enumerate(BAD_META):
        yield f"meta{i}", set_meta(bytearray(original), meta), False
    for i in range(20):                            # tensor data rewritten, its CRC fixed (NaN scales & co)
        raw = bytearray(original)
        k = int(rng.integers(0, len(ents)))
        e = ents[k]
        pos = e.offset + int(rng.integers(0, e.nbytes - 3))
        raw[pos:pos + 4] = struct.pack("<f", float(rng.choice([np.nan, np.inf, -np.inf, 3e38, 0.0])))
        fix_entry_crc(raw, k)
        yield f"data{k}@{pos}", fix_crcs(raw), False


def _outputs(path, x, cache_bytes):
    """('ok', [outputs per MoE layer]) or ('error', type name); non-ColibriError exceptions propagate."""
    try:
        with cd.MoeExecutor(path, threads=1, cache_bytes=cache_bytes, lookahead=False) as eng:
            return "ok", [eng.moe_forward(layer, x) for layer in eng.model.moe_layers]
    except ColibriError as exc:
        assert str(path) in str(exc) or "layer" in str(exc), str(exc)
        return "error", type(exc).__name__


def _cli(args):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(args)
    lines = err.getvalue().strip().splitlines()
    assert code in (0, 1) and len(lines) <= 1 and all(line.startswith("colibri: error:") for line in lines), lines
    return code


def _python_rejects(path):
    try:
        with cd.open_model(path) as m:
            m.verify(progress=False)
    except ColibriError:
        return True
    return False


def _c_status(path):
    from colibri_dist._native import ffi, lib
    out = ffi.new("cb_model **")
    status = lib.cb_model_open(os.fsencode(path), 0, out)
    if status == 0:
        lib.cb_model_close(out[0])
    return status


@pytest.fixture(scope="module", autouse=True)
def one_parser():
    """`colibri`'s argparse parser built once for the module, not once per CLI call (~10 ms each, ~1,200
    calls): the same parser `main` builds, each call still parses its argv and dispatches through `main`."""
    parser = cli.build_parser()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cli, "build_parser", lambda: parser)
        yield


@pytest.fixture(scope="module")
def asan_driver(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.join(here, "..", "..", "native")
    srcs = [os.path.join(root, "src", f) for f in ("model.c", "model_parse.c", "encodings.c", "crc32.c", "crc32_fast.c", "status.c")]
    exe = tmp_path_factory.mktemp("asan") / "driver"
    subprocess.run([cc, "-std=c11", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    "-D_GNU_SOURCE", "-I" + os.path.join(root, "include"), "-I" + os.path.join(root, "src"),
                    os.path.join(here, "format_asan_driver.c"), *srcs, "-o", str(exe)], check=True,
                   capture_output=True)
    return str(exe)


@pytest.mark.parametrize("family,scheme,seed", [("qwen2_moe", "int8", 11), ("deepseek_v3", "int8-minmax", 12),
                                                ("mixtral", "f16", 13)])
def test_container_mutations_end_in_error_or_correct_result(converted, tmp_path, asan_driver, family, scheme, seed):
    path, _ = converted(family, scheme)
    original = bytearray(open(path, "rb").read())
    with cd.open_model(path) as m:
        x = np.random.default_rng(seed).standard_normal((24, m.config.hidden)).astype(np.float32)
    want = _outputs(path, x, None)
    assert want[0] == "ok"
    files, stats = [], {"error": 0, "ok": 0}
    for i, (name, raw, covered) in enumerate(mutations(original, seed)):
        work = tmp_path / f"{i:03d}.colibri"
        work.write_bytes(bytes(raw))
        with deadline(DEADLINE_S, name):
            _cli(["inspect", str(work)])
            _cli(["verify", str(work), "--no-progress"])
            outcomes = [_outputs(work, x, budget) for budget in (None, 1)]
            c = _c_status(work)
        assert c in (0, 3, 4), (name, c)
        for got in outcomes:
            stats[got[0]] += 1
            if covered and got[0] == "ok":             # the checksums must have caught any change
                assert all(np.array_equal(a, b) for a, b in zip(got[1], want[1])), f"{name}: silently different"
        kinds = [o[0] for o in outcomes]
        assert kinds[0] == kinds[1], f"{name}: outcome depends on the budget: {outcomes}"
        if kinds[0] == "ok":
            assert all(np.array_equal(a, b) for a, b in zip(outcomes[0][1], outcomes[1][1])), name
        if not name.startswith(("data", "meta", "flip", "trunc")):   # structure only: readers agree
            assert (c == 0) == (not _python_rejects(work)), f"{name}: C status {c}, Python disagrees"
        files.append(str(work))
    assert stats["error"] > 100 and stats["ok"] > 0, stats
    res = subprocess.run([asan_driver, *files], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, ASAN_OPTIONS="detect_leaks=1"))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ERROR" not in res.stderr and "runtime error" not in res.stderr, res.stderr[-3000:]
    assert re.match(r"\d+ rejected of %d" % len(files), res.stdout)
