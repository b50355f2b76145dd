"""A random-weight bf16 checkpoint with real layer shapes (shapes.py), written with numpy + safetensors (no torch).

Role: build(out_dir, cfg, routing) writes config.json, model-NNNNN.safetensors shards of at most `shard_bytes`
(one tensor in memory at a time, the shard's tensors until it is written) and model.safetensors.index.json,
as the hub lays out a sharded checkpoint; a `.complete` marker makes a half-written folder rebuild.
Weights are bf16 bit patterns made straight from random bytes (sign, a mantissa and one of four exponents
around the initializer's 0.02: |w| in [2^-9, 2^-5) = [0.0020, 0.031)), seeded per tensor name so any shard is
reproducible. The embedding is made in row chunks (one DeepSeek-V3 table is 3.7 GB as float32).

Routing: random weights route either too uniformly or too narrowly (a token's experts then say nothing of
the next token's, or all tokens share a few). Two knobs make it controlled, and scale.routing measures what
they give:
  skew      every router row gets s * z_e along one shared direction u that every embedding row also
            carries, so expert e has a fixed popularity z_e ~ N(0, 1) on top of its token-dependent score;
            0 = every expert equally popular.
  locality  the attention output projection's scale: the attention output (a mix of the context, which
            moves slowly from one token to the next) then weighs more against the token's own embedding in
            the router's input, so consecutive tokens share more experts; 0 = no attention output at all.
"""
import hashlib
import json
import os
import shutil

import numpy as np

from ...format.quantize import bf16_bits_to_f32, f32_to_bf16_bits
from . import shapes

EXP0 = 121            # bf16 biased exponent of 2^-6 = 0.0156: |w| spans four octaves below 0.031
EMBED_COMMON = 0.2    # rms of the shared direction in an embedding row (its own N(0, 1) part: 1)
DEFAULT_SKEW, DEFAULT_LOCALITY = 0.3, 2.5   # Qwen3 shape, 8 layers: next-token reuse 0.21 (chance 0.06), top-10% share 0.46
EMBED_CHUNK_ROWS = 16384


def _rng(name, seed):
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest()
    return np.random.Generator(np.random.SFC64(int.from_bytes(digest, "little")))


def random_bf16(rng, n):
    """n random bf16 bit patterns (uint16): random sign and mantissa, exponent EXP0 - {0..3}."""
    r = rng.integers(0, 1 << 16, n, dtype=np.uint16)
    exp = np.uint16(EXP0) - ((r >> np.uint16(7)) & np.uint16(3))
    return (r & np.uint16(0x807F)) | (exp << np.uint16(7))


def _embedding(rng, shape, u):
    """N(0, 1) rows + c sqrt(h) u, as bf16 bits, EMBED_CHUNK_ROWS rows at a time."""
    out = np.empty(shape, dtype=np.uint16)
    common = u * np.float32(EMBED_COMMON * np.sqrt(shape[1]))
    for r0 in range(0, shape[0], EMBED_CHUNK_ROWS):
        rows = rng.standard_normal((min(shape[0], r0 + EMBED_CHUNK_ROWS) - r0, shape[1]), dtype=np.float32)
        out[r0:r0 + len(rows)] = f32_to_bf16_bits(rows + common)
    return out.reshape(-1)


def shared_direction(h, seed):
    """The unit vector u every embedding row and (scaled by skew) every router row carries."""
    u = _rng("shared-direction", seed).standard_normal(h).astype(np.float32)
    return u / np.linalg.norm(u)


def tensor_bits(name, shape, kind, routing, u, seed):
    """The tensor's bytes source: uint16 bf16 bits (or float32 for the correction bias)."""
    n, rng = int(np.prod(shape)), _rng(name, seed)
    if kind == "norm":
        return np.full(n, 0x3F80, dtype=np.uint16)                       # 1.0
    if kind == "bias":
        return np.zeros(n, dtype=np.float32)
    if kind == "w":
        return random_bf16(rng, n)
    if kind == "o":                                  # locality / sqrt(layer + 1): the residual stream sums the
        if routing["locality"] == 0:                 # layers' attention outputs, so the same scale everywhere
            return np.zeros(n, dtype=np.uint16)      # would make deeper layers ever more local
        scale = routing["locality"] / np.sqrt(_layer(name) + 1)
        return f32_to_bf16_bits(bf16_bits_to_f32(random_bf16(rng, n)) * np.float32(scale))
    if kind == "embed":
        return _embedding(rng, shape, u)
    if kind == "router":                                                   # N(0, 0.02^2) + (s/c) 0.02 z_e u
        rows = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
        z = rng.standard_normal(shape[0]).astype(np.float32)
        rows += np.outer(z * np.float32(routing["skew"] / EMBED_COMMON * 0.02), u)   # u.x ~ c sqrt(h): z_e weighs s
        return f32_to_bf16_bits(rows).reshape(-1)
    raise ValueError(f"unknown tensor kind {kind!r} for {name}")


def _layer(name):
    return int(name.split(".")[2])


def _dtype(kind):
    return "float32" if kind == "bias" else "bfloat16"


def _write_shard(path, items):
    from safetensors import serialize_file
    try:
        from safetensors import TensorSpec
    except ImportError:
        raise RuntimeError("bench scale writes bf16 through safetensors.TensorSpec: pip install 'safetensors>=0.8'") \
            from None
    specs = {name: TensorSpec(dtype=_dtype(kind), shape=list(shape), data_ptr=a.ctypes.data, data_len=a.nbytes)
             for name, shape, kind, a in items}
    serialize_file(specs, path, metadata={"format": "pt"})


def _shards(items, shard_bytes):
    """Groups [(name, shape, kind)] in order into lists of at most shard_bytes (a bigger tensor alone)."""
    group, size = [], 0
    for name, shape, kind in items:
        n = int(np.prod(shape)) * (4 if kind == "bias" else 2)
        if group and size + n > shard_bytes:
            yield group
            group, size = [], 0
        group.append((name, shape, kind))
        size += n
    if group:
        yield group


def build(out_dir, cfg, routing, seed=0, shard_bytes=1 << 30, log=print):
    """Writes the checkpoint into out_dir (made anew unless complete with the same config and routing)."""
    marker = os.path.join(out_dir, ".complete")
    want = {"config": cfg, "routing": routing, "seed": seed}
    if os.path.exists(marker):
        with open(marker) as f:
            if json.load(f) == want:
                return out_dir
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    u = shared_direction(cfg["hidden_size"], seed)
    groups = list(_shards(shapes.tensors(cfg), shard_bytes))
    weight_map = {}
    for i, group in enumerate(groups):
        fname = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        items = [(name, shape, kind, tensor_bits(name, shape, kind, routing, u, seed)) for name, shape, kind in group]
        _write_shard(os.path.join(out_dir, fname), items)
        weight_map.update({name: fname for name, _, _ in group})
        log(f"bench scale: checkpoint shard {i + 1}/{len(groups)} written")
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": shapes.nbytes(cfg)}, "weight_map": weight_map}, f)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(marker, "w") as f:
        json.dump(want, f)
    return out_dir
