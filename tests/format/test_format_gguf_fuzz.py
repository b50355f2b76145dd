"""Bad GGUF input (issue 32): 500 seeded mutations of one small GGUF file, each imported with convert().

Every import ends either in success with a container that opens and verifies, or in a FormatError /
InvalidArgument naming the file; never another exception type, and after a failure neither the output nor
its `.partial` exists. The mutations: truncation at a random offset, byte flips in the header / metadata /
tensor-info region, a tensor's data offset past the end, wrong dims, wrong types (block counts), a tensor
name duplicated, absurd metadata values (expert_count 0 / 1e9, block_count 0, ...), an unknown architecture;
plus a few files written with absurd values of other types (context_length 2^40 as uint64, a string count).
The base file is written once and mutated in memory; 100 more mutations of it with a tokenizer (whose
metadata is then most of the header; slower to parse, so fewer) and 200 of a tiny DeepSeek-V3 in newer
llama.cpp's MLA form (attn_k_b + attn_v_b joined on import).
"""
import os

import numpy as np
import pytest

from colibri_dist import convert
from colibri_dist.errors import FormatError, InvalidArgument

torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")
from gguf_tiny import write_gguf  # noqa: E402  (needs gguf)
from test_format_gguf import tokenizer_and_writer  # noqa: E402

N_MUTATIONS = 500
ARCH = "qwen3moe"


def tiny_model():
    """A one-layer Qwen3-MoE of 4 experts and 32 tokens: a ~30 KB file, a fast import."""
    import transformers
    from colibri_dist.format.tiny import _COMMON
    torch.manual_seed(7)
    cfg = transformers.Qwen3MoeConfig(**dict(_COMMON, vocab_size=32, hidden_size=16, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                             intermediate_size=16, moe_intermediate_size=8, num_experts=4,
                                             num_experts_per_tok=2, norm_topk_prob=True))
    return transformers.AutoModelForCausalLM.from_config(cfg).eval()


def part_offset(field, k):
    return field.offset + sum(int(p.nbytes) for p in field.parts[:k])


class Base:
    """The base file's bytes and where its fields are (offsets of the values to mutate)."""

    def __init__(self, path):
        self.data = open(path, "rb").read()
        r = gguf.GGUFReader(path)
        self.header_end = r.data_offset
        self.ints = [(part_offset(f, 3), f.parts[3].dtype.itemsize, name) for name, f in r.fields.items()
                     if len(f.parts) == 4 and f.parts[3].dtype.kind in "ui"]
        self.tensors = [t.field for t in r.tensors]
        self.arch_at = part_offset(r.fields["general.architecture"], 4)
        self.arch = r.fields["general.architecture"].contents()


def mutate(base, rng):
    """One mutated copy of the base bytes, and what was done (for the failure message)."""
    data = bytearray(base.data)
    kind = rng.integers(0, 8)
    if kind == 0:
        cut = int(rng.integers(0, len(data)))
        return bytes(data[:cut]), f"truncated at {cut}"
    if kind == 1:
        spots = rng.integers(0, base.header_end, int(rng.integers(1, 5)))
        for s in spots:
            data[s] ^= 1 << int(rng.integers(0, 8))
        return bytes(data), f"bits flipped at {sorted(spots.tolist())}"
    t = base.tensors[int(rng.integers(0, len(base.tensors)))]
    if kind == 2:                               # data offset past the end (or anywhere)
        value = int(rng.choice([len(data), 2 ** 40, int(rng.integers(0, len(data)))]))
        at = part_offset(t, 5)
        data[at:at + 8] = value.to_bytes(8, "little")
        return bytes(data), f"tensor data offset {value}"
    if kind == 3:                               # wrong dims
        at = part_offset(t, 3) + 8 * int(rng.integers(0, len(t.parts[3])))
        value = int(rng.choice([0, 1, 3, 7, 2 ** 20, 2 ** 62]))
        data[at:at + 8] = value.to_bytes(8, "little")
        return bytes(data), f"dim {value}"
    if kind == 4:                               # wrong type: block counts no longer match the data
        at = part_offset(t, 4)
        value = int(rng.choice([1, 2, 8, 12, 14, 30, 39, 255, 2 ** 31]))
        data[at:at + 4] = value.to_bytes(4, "little")
        return bytes(data), f"type {value}"
    if kind == 5:                               # a tensor name duplicated (a same-length name overwritten)
        name = bytes(t.parts[1])
        same = [u for u in base.tensors if bytes(u.parts[1]) != name and len(u.parts[1]) == len(name)]
        if same:
            u = same[int(rng.integers(0, len(same)))]
            at = part_offset(u, 1)
            data[at:at + len(name)] = name
        return bytes(data), f"name {name!r} duplicated"
    if kind == 6:                               # absurd integer metadata
        at, size, key = base.ints[int(rng.integers(0, len(base.ints)))]
        value = int(rng.choice([0, 1, 10 ** 9, 2 ** (8 * size) - 1]))
        data[at:at + size] = value.to_bytes(size, "little")
        return bytes(data), f"{key} = {value}"
    at = base.arch_at + int(rng.integers(0, len(base.arch)))   # an unknown architecture
    data[at] = ord(rng.choice(list("xyz0")))
    return bytes(data), "architecture renamed"


def check_import(src, dst, what):
    try:
        convert(src, dst, progress=False)
    except (FormatError, InvalidArgument) as exc:
        assert str(src) in str(exc), f"{what}: the error does not name the file: {exc}"
        assert not os.path.exists(dst) and not os.path.exists(f"{dst}.partial"), f"{what}: output left behind"
        return False
    except Exception as exc:      # noqa: BLE001  (the point: any other type is the defect)
        raise AssertionError(f"{what}: {type(exc).__name__}: {exc}") from exc
    import colibri_dist as cd
    with cd.open_model(dst) as m:
        assert m.config.n_experts > 0, what
    os.remove(dst)
    return True


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    model = tiny_model()
    write_gguf(model, d / "base.gguf")
    return model, d / "base.gguf", Base(str(d / "base.gguf"))


def test_500_mutations_import_or_fail_by_name(base, tmp_path):
    fuzz(base[1], base[2], tmp_path, N_MUTATIONS, seed=32)


def test_tokenizer_metadata_mutations_import_or_fail_by_name(base, tmp_path):
    write_gguf(base[0], tmp_path / "base.gguf", tokenizer=tokenizer_and_writer()[1])
    fuzz(tmp_path / "base.gguf", Base(str(tmp_path / "base.gguf")), tmp_path, 100, seed=34)


def test_mla_split_form_mutations_import_or_fail_by_name(tmp_path):
    from colibri_dist.format.tiny import tiny_model as family_model
    write_gguf(family_model("deepseek_v3"), tmp_path / "base.gguf")
    fuzz(tmp_path / "base.gguf", Base(str(tmp_path / "base.gguf")), tmp_path, 200, seed=33)


def fuzz(path, b, tmp_path, n, seed):
    rng = np.random.default_rng(seed)
    outcomes = []
    for i in range(n):
        data, what = mutate(b, rng)
        src = tmp_path / f"m{i}.gguf"
        src.write_bytes(data)
        outcomes.append(check_import(src, tmp_path / f"m{i}.colibri", f"mutation {i} ({what})"))
        os.remove(src)
    assert 0 < sum(outcomes) < n                # some variants still import, most do not
    assert check_import(path, tmp_path / "base.colibri", "the base file")


@pytest.mark.parametrize("what", ["context_length 2^40", "expert_count 1e9", "expert_count 0", "count a string",
                                  "block_count 0"])
def test_absurd_metadata_values_are_named(base, tmp_path, what):
    model = base[0]
    key = {"context_length 2^40": "context_length", "count a string": "expert_count"}.get(what, what.split()[0])
    value = {"context_length 2^40": 2 ** 40, "expert_count 1e9": 10 ** 9, "expert_count 0": 0,
             "count a string": "eight", "block_count 0": 0}[what]

    def add(w):
        full = f"{ARCH}.{key}"
        if isinstance(value, str):
            w.add_string(full, value)
        elif value >= 2 ** 32:
            w.add_uint64(full, value)
        else:
            w.add_uint32(full, value)
    write_gguf(model, tmp_path / "m.gguf", drop_keys=(key,), tokenizer=add)
    dst = tmp_path / "out.colibri"
    with pytest.raises(FormatError, match=rf"m\.gguf: .*{ARCH}\.{key}"):
        convert(tmp_path / "m.gguf", dst, progress=False)
    assert os.listdir(tmp_path) == ["m.gguf"]
