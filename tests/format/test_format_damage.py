"""Bad input: every case raises FormatError naming the file (Python reader, converter, C reader)."""
import errno
import json
import os
import shutil
import struct

import pytest

import colibri_dist as cd
from colibri_dist.errors import FormatError
from colibri_dist.format import spec, writer
from colibri_dist.format.hf_source import SafetensorsSource


@pytest.fixture
def good(converted, tmp_path):
    """A private copy of a converted DeepSeek-V3 tiny model (shared experts, dense layer 0)."""
    path, _ = converted("deepseek_v3", "f32")
    dst = tmp_path / "m.colibri"
    shutil.copy(path, dst)
    return dst


def c_open(path, verify=1):
    """cb_model_open through cffi -> (status, message)."""
    from colibri_dist._native import ffi, lib
    out = ffi.new("cb_model **")
    status = lib.cb_model_open(os.fsencode(path), verify, out)
    message = ffi.string(lib.cb_last_error()).decode()
    if status == 0:
        lib.cb_model_close(out[0])
    return status, message


def _patch(path, offset, data):
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


def test_truncated_file(good):
    size = os.path.getsize(good)
    for keep in (size // 2, 100):
        os.truncate(good, keep)
        with pytest.raises(FormatError, match="truncated") as info:
            cd.open_model(good)
        assert str(good) in str(info.value)
        status, msg = c_open(good)
        assert status == 4 and "truncated" in msg and str(good) in msg


def test_flipped_byte_in_expert_blob(good):
    with cd.open_model(good) as model:
        offset, nbytes, _ = model.expert_location(1, 5)
    _patch(good, offset + nbytes // 2, b"\x5a")
    with cd.open_model(good) as model:            # open is lazy: still opens
        model.read_expert(1, 4)                    # neighbours are fine
        with pytest.raises(FormatError, match="layer 1 expert 5") as info:
            model.read_expert(1, 5)
        assert str(good) in str(info.value) and "damaged" in str(info.value)
        with pytest.raises(FormatError, match=r"1 damaged: layer 1 expert 5$"):
            model.verify(progress=False)
    status, msg = c_open(good, verify=1)
    assert status == 4 and "layer 1 expert 5" in msg and str(good) in msg
    assert c_open(good, verify=0)[0] == 0       # without verify the C reader only checks structure


def test_wrong_magic(good):
    _patch(good, 0, b"NOTCOLIB")
    with pytest.raises(FormatError, match="not a .colibri file") as info:
        cd.open_model(good)
    assert str(good) in str(info.value)
    status, msg = c_open(good)
    assert status == 4 and "bad magic" in msg and str(good) in msg


def test_newer_format_version(good):
    with open(good, "rb") as fh:
        header = bytearray(fh.read(spec.HEADER_SIZE))
    struct.pack_into("<I", header, 8, spec.VERSION + 1)
    struct.pack_into("<I", header, spec.HEADER_CRC_SPAN, spec.crc32(bytes(header[:spec.HEADER_CRC_SPAN])))
    _patch(good, 0, bytes(header))
    with pytest.raises(FormatError, match=f"version {spec.VERSION + 1} is newer") as info:
        cd.open_model(good)
    assert str(good) in str(info.value)
    status, msg = c_open(good)
    assert status == 4 and "newer" in msg


def test_damaged_header_and_table(good):
    _patch(good, 124, struct.pack("<i", 999))       # hidden size, header CRC now wrong
    with pytest.raises(FormatError, match="header is damaged"):
        cd.open_model(good)
    assert c_open(good)[0] == 4


def test_damaged_table(good):
    table_offset = spec.unpack_header(open(good, "rb").read(spec.HEADER_SIZE))["table_offset"]
    _patch(good, table_offset + 5, b"\xff")
    with pytest.raises(FormatError, match="tensor table is damaged"):
        cd.open_model(good)
    status, msg = c_open(good)
    assert status == 4 and "table" in msg


def test_missing_file_names_it(tmp_path):
    with pytest.raises(FormatError, match="nope.colibri"):
        cd.open_model(tmp_path / "nope.colibri")
    assert c_open(tmp_path / "nope.colibri")[0] == 3


# -- converter input ------------------------------------------------------------

def _write_safetensors(path, tensors):
    """tensors: name -> (dtype string, shape, raw bytes); the safetensors layout by hand."""
    header, blobs, pos = {}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [pos, pos + len(raw)]}
        blobs.append(raw)
        pos += len(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def _edited_checkpoint(tiny_dir, tmp_path, edit):
    """Copy the tiny Mixtral checkpoint as one file, applying edit(dict) to its tensors."""
    src, _ = tiny_dir("mixtral")
    source = SafetensorsSource(src)
    tensors = {n: (r.dtype, r.shape, source.read_raw(r)) for n, r in source.refs.items()}
    source.close()
    edit(tensors)
    out = tmp_path / "ckpt"
    out.mkdir(parents=True)
    shutil.copy(src / "config.json", out / "config.json")
    _write_safetensors(out / "model.safetensors", tensors)
    return out


def _convert_fails(src, tmp_path, pattern):
    dst = tmp_path / "out.colibri"
    with pytest.raises(FormatError, match=pattern) as info:
        cd.convert(src, dst, experts="f32", progress=False)
    assert not dst.exists() and not os.path.exists(str(dst) + ".partial")
    return str(info.value)


def test_checkpoint_missing_tensor(tiny_dir, tmp_path):
    name = "model.layers.1.block_sparse_moe.experts.3.w2.weight"
    src = _edited_checkpoint(tiny_dir, tmp_path, lambda t: t.pop(name))
    msg = _convert_fails(src, tmp_path, "missing tensor")
    assert name in msg and str(src) in msg


def test_checkpoint_mismatched_shape(tiny_dir, tmp_path):
    name = "model.layers.0.block_sparse_moe.experts.2.w1.weight"

    def edit(t):
        t[name] = ("F32", (8, 32), bytes(8 * 32 * 4))
    msg = _convert_fails(_edited_checkpoint(tiny_dir, tmp_path, edit), tmp_path, r"shape \[8, 32\], expected \[16, 32\]")
    assert name in msg and "model.safetensors" in msg


def test_unsupported_dtype_dense_and_expert(tiny_dir, tmp_path):
    def fp8_norm(t):
        t["model.norm.weight"] = ("F8_E4M3", (32,), bytes(32))
    msg = _convert_fails(_edited_checkpoint(tiny_dir, tmp_path / "a", fp8_norm), tmp_path,
                         "unsupported dtype F8_E4M3")
    assert "model.norm.weight" in msg

    def int8_expert(t):
        t["model.layers.0.block_sparse_moe.experts.0.w3.weight"] = ("I8", (16, 32), bytes(16 * 32))
    _convert_fails(_edited_checkpoint(tiny_dir, tmp_path / "b", int8_expert), tmp_path, "unsupported dtype I8")


def test_unsupported_architecture_lists_supported(tiny_dir, tmp_path):
    src, _ = tiny_dir("mixtral")
    bad = tmp_path / "llama"
    shutil.copytree(src, bad)
    cfg = json.load(open(bad / "config.json"))
    cfg["model_type"] = "llama"
    json.dump(cfg, open(bad / "config.json", "w"))
    msg = _convert_fails(bad, tmp_path, "unsupported architecture")
    for family in ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v3"):
        assert family in msg


def test_truncated_source_shard(tiny_dir, tmp_path):
    src, _ = tiny_dir("mixtral")
    bad = tmp_path / "cut"
    shutil.copytree(src, bad)
    os.truncate(bad / "model.safetensors", os.path.getsize(bad / "model.safetensors") - 100)
    _convert_fails(bad, tmp_path, "past the end of the file")


@pytest.mark.parametrize("fail_at", ["write", "fsync"])
def test_disk_full_during_write_leaves_no_file(tiny_dir, tmp_path, monkeypatch, fail_at):
    src, _ = tiny_dir("mixtral")
    budget = {"left": 60_000}
    real_write = writer._write_all

    def full_disk(fd, data):
        budget["left"] -= len(memoryview(data).cast("B"))
        if budget["left"] < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(fd, data)

    def failing_fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if fail_at == "write":
        monkeypatch.setattr(writer, "_write_all", full_disk)
    else:
        monkeypatch.setattr(writer, "_fsync", failing_fsync)
    msg = _convert_fails(src, tmp_path, "No space left on device")
    assert "out.colibri" in msg
    assert os.listdir(tmp_path) == []


def test_exception_mid_conversion_removes_partial(tiny_dir, tmp_path, monkeypatch):
    from colibri_dist.format import convert as convert_mod
    src, _ = tiny_dir("mixtral")
    calls = {"n": 0}
    real = convert_mod.pack

    def boom(*args):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real(*args)
    monkeypatch.setattr(convert_mod, "pack", boom)
    with pytest.raises(KeyboardInterrupt):
        cd.convert(src, tmp_path / "out.colibri", experts="f32", progress=False)
    assert os.listdir(tmp_path) == []


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 KiB tmpfs (root only; skipped elsewhere): a disk that really fills up."""
    import subprocess
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_real_full_disk_leaves_no_file(tiny_dir, tiny_tmpfs):
    src, _ = tiny_dir("mixtral")                  # converts to ~150 KB, the disk holds 64 KiB
    dst = tiny_tmpfs / "m.colibri"
    with pytest.raises(FormatError, match="No space left on device") as info:
        cd.convert(src, dst, experts="f32", progress=False)
    assert str(dst) in str(info.value)
    assert os.listdir(tiny_tmpfs) == []
