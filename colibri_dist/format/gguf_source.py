"""Read a GGUF file (llama.cpp) as the converter reads a safetensors checkpoint.

Role in the data flow: convert.py's window on a `.gguf`, with SafetensorsSource's interface (refs,
ref, read_f32, read_rows_f32, chunks) under Hugging Face names, plus the config.json the file's
metadata stands for (the family entry's gguf row, families/_gguf.py, maps both). The file is parsed by the `gguf` package
(llama.cpp's own reader: the optional extra `colibri-dist[gguf]`), never by hand. Every tensor's
name and type is checked when the source opens, so an unsupported file fails before anything is
written. Block-quantized tensors kept as they are (Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS, IQ4_NL, MXFP4, Q5_0, Q5_1 -> the
encodings of those names in lower case: a Q4_K_M, Q5_K_M or IQ4_XS file's blocks, gpt-oss's MXFP4 experts) are
also offered raw (`stored_scheme`, `read_encoded`, `read_rows_encoded`): the converter copies their blocks
instead of requantizing; read_f32 decodes them with the package's own `dequantize`. MLA's split form (attn_k_b,
attn_v_b: the absorbed per-head matrices) is offered as k_b_proj / v_b_proj, its heads stacked by rows.
"""
import os
import re
from dataclasses import dataclass

import numpy as np

from .. import families
from ..errors import FormatError
from ..families._gguf import MLA_SPLIT
from .gguf_families import ARCHES, EXPERT_BIAS_STACKS, EXPERT_STACKS, GLOBAL_TENSORS, REQUIRED, ROW_VECTORS
from .hf_source import to_f32
from .quantize import Encoded

FLOAT_TYPES = ("F32", "F16", "BF16")          # imported as the same float encodings
BLOCK_TYPES = {"Q8_0": "q8_0", "Q4_K": "q4_k", "Q5_K": "q5_k", "Q6_K": "q6_k",   # GGML type -> encoding keeping it
               "MXFP4": "mxfp4", "IQ4_XS": "iq4_xs", "IQ4_NL": "iq4_nl", "Q5_0": "q5_0", "Q5_1": "q5_1"}
INSTALL_HINT = "pip install 'colibri-dist[gguf]'"
_LAYER = re.compile(r"^blk\.(\d+)\.(.+)$")
MAX_INT = 2 ** 31        # metadata integers past this are refused by name (context_length 2^40 is no model's)
# llama arch: q/k rows permuted for interleaved rope, by the head count of the metadata key
ROPE_PERMUTED = {"attn_q.weight": "attention.head_count", "attn_k.weight": "attention.head_count_kv"}


def gguf_package(path):
    """The `gguf` module; FormatError naming the file and the extra to install when it is missing."""
    try:
        import gguf
    except ImportError as exc:
        raise FormatError(f"{path}: reading GGUF files needs the gguf package: {INSTALL_HINT}") from exc
    return gguf


def is_gguf(path):
    """True when `path` is a file starting with the GGUF magic."""
    try:
        with open(path, "rb") as fh:
            return os.path.isfile(path) and fh.read(4) == b"GGUF"
    except OSError:
        return False


@dataclass(frozen=True)
class GgufRef:
    name: str           # Hugging Face name
    file: str
    dtype: str          # GGML type name: F32, F16, BF16, or one of BLOCK_TYPES
    shape: tuple        # numpy order (rows last-but-one, cols last); one expert's matrix for a stack slice
    nbytes: int
    tensor: str         # GGUF tensor name
    index: int = None   # expert index inside a stacked tensor


class GgufSource:
    def __init__(self, path):
        self.dir = self.path = os.fspath(path)
        self._gguf = gguf_package(self.path)
        try:
            self._reader = self._gguf.GGUFReader(self.path)
        except (ValueError, OSError, IndexError, KeyError, TypeError) as exc:
            raise FormatError(f"{self.path}: not a readable GGUF file ({type(exc).__name__}: {exc})") from exc
        self.model_type, self.arch = self._arch()
        self._tensors = {t.name: t for t in self._reader.tensors}
        self.n_layers = self._main_layers()
        self._stacks = {**{k: (p, "weight") for k, p in zip(EXPERT_STACKS, self.arch.expert_parts)},
                        **{k: (p, "bias") for k, p in zip(EXPERT_BIAS_STACKS, self.arch.expert_parts)}}
        self._order = {}        # GGUF tensor -> its rows' order in the Hugging Face matrix (rope-permuted q/k)
        self.refs = {}
        for t in self._reader.tensors:
            for ref in self._refs_of(t):
                if ref.name in self.refs:
                    raise FormatError(f"{self.path}: tensor {ref.tensor!r} appears twice (as {ref.name!r})")
                self.refs[ref.name] = ref

    # ---- metadata -------------------------------------------------------------------------------------
    def field(self, key, default=REQUIRED):
        """The value of metadata `key`; FormatError naming the file and key when it is required and absent."""
        f = self._reader.get_field(key)
        if f is None:
            if default is REQUIRED:
                raise FormatError(f"{self.path}: GGUF metadata key {key!r} is missing "
                                  f"(needed for architecture {self._arch_name()!r})")
            return default
        return _contents(self.path, key, f)

    def has_field(self, key):
        return self._reader.get_field(key) is not None

    def _arch_name(self):
        f = self._reader.get_field("general.architecture")
        return None if f is None else _contents(self.path, "general.architecture", f)

    def _arch(self):
        name = self.field("general.architecture")
        if not isinstance(name, str) or name not in ARCHES:
            raise FormatError(f"{self.path}: GGUF architecture {name!r} is not supported; "
                              f"supported: {', '.join(sorted(ARCHES))}")
        return ARCHES[name]

    def _main_layers(self):
        """The decoder's layer count: block_count less the row's trailing extra (NextN) layers."""
        a = self.arch
        n = _scalar(self.path, f"{a.arch}.block_count", self.field(f"{a.arch}.block_count"))
        extra = _scalar(self.path, f"{a.arch}.{a.extra_layers}", self.field(f"{a.arch}.{a.extra_layers}", 0)) \
            if a.extra_layers else 0
        if not isinstance(n, int) or not isinstance(extra, int) or n - extra <= 0:
            raise FormatError(f"{self.path}: GGUF metadata {a.arch}.block_count = {n!r}"
                              + (f" less {a.arch}.{a.extra_layers} = {extra!r}" if extra else "")
                              + " leaves no decoder layer")
        blocks = 1 + max((int(m.group(1)) for m in map(_LAYER.match, self._tensors) if m), default=-1)
        if n != blocks:
            raise FormatError(f"{self.path}: GGUF metadata {a.arch}.block_count = {n} but the file's tensors are of "
                              f"{blocks} blocks (blk.0 .. blk.{blocks - 1})")
        return n - extra

    def hf_config(self):
        """The config.json this file's metadata stands for (the family's keys, llama.cpp's fixed values)."""
        a = self.arch
        hf = {"model_type": self.model_type, "architectures": [a.architecture], "hidden_act": "silu"}
        for key, hf_key, default in a.config:
            value = self.field(f"{a.arch}.{key}", default)
            if value is not None:
                hf[hf_key] = _scalar(self.path, f"{a.arch}.{key}", value)
                if key in a.positive and not hf[hf_key] > 0:
                    raise FormatError(f"{self.path}: GGUF metadata {a.arch}.{key} = {value!r}: must be > 0 "
                                      f"(a {a.arch} file without it is a dense model; colibri imports MoE models)")
        for key, allowed in a.checks.items():     # required: absent, llama.cpp may run another default
            value = self.field(f"{a.arch}.{key}")    # (deepseek2 without expert_gating_func: V2's softmax)
            if value not in allowed:
                raise FormatError(f"{self.path}: GGUF metadata {a.arch}.{key} = {value!r} is not imported "
                                  f"(colibri's {self.model_type} runs "
                                  f"{' or '.join(map(repr, allowed))})")
        hf["num_hidden_layers"] = self.n_layers
        for hf_key, tensor in a.flags.items():
            hf[hf_key] = any(f"blk.{i}.{tensor}" in self._tensors for i in range(self.n_layers))
        if a.partial_rotary:
            hf["partial_rotary_factor"] = self._rotary_factor(hf)
        if a.mla:
            hf.update(self._mla_dims(hf))
        self._check_experts(hf)
        scaling = self.field(f"{a.arch}.rope.scaling.type", None)
        if scaling == "yarn" and a.yarn:
            hf["rope_parameters"] = self._yarn(hf)
        elif scaling not in (None, "none"):
            raise FormatError(f"{self.path}: GGUF metadata {a.arch}.rope.scaling.type = {scaling!r}: "
                              f"rope scaling is not imported yet")
        hf.update(a.fixed)
        hf["vocab_size"] = int(self.ref("model.embed_tokens.weight").shape[0])
        hf["tie_word_embeddings"] = "lm_head.weight" not in self.refs
        self._check_family(hf)
        return hf

    def _check_family(self, hf):
        """The family's own checks of the config (need(), ...) once here, named by file and metadata key."""
        family = families.FAMILIES[self.model_type]
        try:
            family.moe(hf)
            family.attention(hf, hf["num_hidden_layers"], self.path)
        except FormatError as exc:
            raise self.config_error(exc) from exc

    def config_error(self, exc):
        """A config check's FormatError ("config.json: 'moe_intermediate_size' ...") as this file's, naming the
        metadata keys behind the config keys it names."""
        text = str(exc).removeprefix("config.json: ").removeprefix(f"{self.path}: ")
        keys = [f"{self.arch.arch}.{k}" for k, c, _ in self.arch.config if c in text]
        return FormatError(f"{self.path}: GGUF metadata {', '.join(keys) or '(as a whole)'}: {text}")

    def _rotary_factor(self, hf):
        a = self.arch
        key = f"{a.arch}.rope.dimension_count"
        if not hf["num_attention_heads"] > 0:
            raise FormatError(f"{self.path}: GGUF metadata {a.arch}.attention.head_count = "
                              f"{hf['num_attention_heads']!r}: must be > 0")
        head_dim = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
        dims = _scalar(self.path, key, self.field(key))
        if not isinstance(dims, int) or not 0 < dims <= head_dim or dims % 2:
            raise FormatError(f"{self.path}: GGUF metadata {key} = {dims!r}: must be even, in 1..{head_dim} (head_dim)")
        return dims / head_dim

    def _yarn(self, hf):
        """DeepSeek-V3's yarn rope_parameters of llama.cpp's keys: yarn_log_multiplier is 0.1 * mscale_all_dim
        (convert_hf_to_gguf.py); the file has no separate mscale, and llama.cpp's deepseek2 graph runs it equal
        to mscale_all_dim (as DeepSeek-V3's config has them), so both are that value."""
        key = f"{self.arch.arch}.rope.scaling."
        value = {k: _scalar(self.path, key + k, self.field(key + k, d)) for k, d in (
            ("factor", REQUIRED), ("original_context_length", REQUIRED), ("yarn_log_multiplier", 0.0),
            ("yarn_beta_fast", 32.0), ("yarn_beta_slow", 1.0))}
        if not value["factor"] > 1 or not value["original_context_length"] > 0:
            raise FormatError(f"{self.path}: GGUF metadata {key}factor = {value['factor']!r} must be > 1 and "
                              f"{key}original_context_length = {value['original_context_length']!r} > 0")
        mscale = round(value["yarn_log_multiplier"] / 0.1, 6)
        return {"rope_type": "yarn", "rope_theta": hf.get("rope_theta", 10000.0), "factor": value["factor"],
                "original_max_position_embeddings": value["original_context_length"], "mscale": mscale,
                "mscale_all_dim": mscale, "beta_fast": value["yarn_beta_fast"], "beta_slow": value["yarn_beta_slow"]}

    def _mla_dims(self, hf):
        """qk_nope_head_dim / v_head_dim: key_length_mla / value_length_mla (newer files, whose key_length and
        value_length are the MQA form's kv_lora_rank + rope and kv_lora_rank), else key_length / value_length."""
        a = self.arch.arch
        k = self.field(f"{a}.attention.key_length_mla", None)
        pair = ("key_length_mla", "value_length_mla") if k is not None else ("key_length", "value_length")
        k, v = (_scalar(self.path, f"{a}.attention.{p}", self.field(f"{a}.attention.{p}")) for p in pair)
        rope = hf["qk_rope_head_dim"]
        if not isinstance(k, int) or not isinstance(v, int) or k <= rope or v <= 0:
            raise FormatError(f"{self.path}: GGUF metadata {a}.attention.{pair[0]} = {k!r} must exceed "
                              f"{a}.rope.dimension_count = {rope!r}, {a}.attention.{pair[1]} = {v!r} be > 0")
        out = {"qk_nope_head_dim": k - rope, "v_head_dim": v}
        if not hf.get("q_lora_rank"):
            out["q_lora_rank"] = None          # 0 / absent: a plain q_proj (attn_q)
        return out

    def _check_experts(self, hf):
        """The expert stacks hold expert_count experts (a named error before anything is read)."""
        a = self.arch
        n = next((hf.get(c) for key, c, _ in a.config if key == "expert_count"), None)
        for t in self._tensors.values():
            m = _LAYER.match(t.name)
            if m and m.group(2) in self._stacks and int(m.group(1)) < self.n_layers:
                if int(t.shape[-1]) != n:
                    raise FormatError(f"{self.path}: tensor {t.name!r} holds {int(t.shape[-1])} experts but GGUF "
                                      f"metadata {a.arch}.expert_count is {n!r}")

    # ---- tensor names and types -----------------------------------------------------------------------
    def _mla_split(self, layer, shape):
        """attn_k_b [heads, kv_lora_rank, qk_nope] / attn_v_b [heads, v_head_dim, kv_lora_rank] (MLA split form) as
        the 2-D stack of its heads' matrices [heads * rows, cols]; the two halves of a layer must agree."""
        names = [f"blk.{layer}.{n}" for n in MLA_SPLIT]
        k, v = (self._tensors.get(n) for n in names)
        k, v = (None if x is None else tuple(int(d) for d in reversed(x.shape.tolist())) for x in (k, v))
        if not (k and v and len(k) == len(v) == 3 and k[0] == v[0] and k[1] == v[2]):
            found = ", ".join(f"{n} {list(s) if s else '(absent)'}" for n, s in zip(names, (k, v)))
            raise FormatError(f"{self.path}: tensors {found}: not MLA's split kv_b_proj, [heads, kv_lora_rank, "
                              f"qk_nope] and [heads, v_head_dim, kv_lora_rank]")
        return (shape[0] * shape[1], shape[2])

    def _refs_of(self, t):
        name, gtype = t.name, t.tensor_type.name
        if gtype not in FLOAT_TYPES and gtype not in BLOCK_TYPES:
            raise FormatError(f"{self.path}: tensor {name!r} is {gtype}: not supported yet (supported: "
                              f"{', '.join(FLOAT_TYPES + tuple(BLOCK_TYPES))}); nothing was written")
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        if any(d <= 0 for d in shape) or int(t.n_bytes) <= 0:
            raise FormatError(f"{self.path}: tensor {name!r} has shape {list(shape)}: an empty tensor")
        m = _LAYER.match(name)
        if self.arch.mla and m and m.group(2) in MLA_SPLIT and int(m.group(1)) < self.n_layers:
            return [GgufRef(f"model.layers.{int(m.group(1))}.{MLA_SPLIT[m.group(2)]}", self.path, gtype,
                            self._mla_split(m.group(1), shape), int(t.n_bytes), name)]
        if m and int(m.group(1)) >= self.n_layers:     # a trailing extra (NextN) layer: named, never converted
            return [GgufRef(f"model.layers.{int(m.group(1))}.{m.group(2)}", self.path, gtype, shape,
                            int(t.n_bytes), name)]
        if m and m.group(2) in self._stacks:
            (part, kind), layer = self._stacks[m.group(2)], int(m.group(1))
            if len(shape) != (3 if kind == "weight" else 2):
                raise FormatError(f"{self.path}: tensor {name!r} has shape {list(shape)}, "
                                  f"expected [experts, rows{', cols' if kind == 'weight' else ''}]")
            per = int(t.n_bytes) // shape[0]
            return [GgufRef(f"model.layers.{layer}.mlp.experts.{e}.{part}.{kind}", self.path, gtype, shape[1:], per,
                            name, e) for e in range(shape[0])]
        layer_names = self.arch.layer_names()
        hf = GLOBAL_TENSORS.get(name) if not m else (
            None if m.group(2) not in layer_names else f"model.layers.{int(m.group(1))}.{layer_names[m.group(2)]}")
        if hf is not None and m and self.arch.rope_permuted and m.group(2) in ROPE_PERMUTED:
            self._order[name] = self._rope_order(name, shape, ROPE_PERMUTED[m.group(2)])
        if hf is None:
            raise FormatError(f"{self.path}: tensor {name!r} has no place in a {self.arch.arch} model "
                              f"(its family's gguf row, families/_gguf.py); nothing was written")
        if m and m.group(2) in ROW_VECTORS and len(shape) == 1:
            shape = (1,) + shape
        return [GgufRef(hf, self.path, gtype, shape, int(t.n_bytes), name)]

    def _rope_order(self, name, shape, heads_key):
        """The rows of llama.cpp's permuted q/k (per head [d/2, 2]) in Hugging Face's order (per head [2, d/2])."""
        key = f"{self.arch.arch}.{heads_key}"
        heads = _scalar(self.path, key, self.field(key))
        if not isinstance(heads, int) or heads <= 0 or shape[0] % (2 * heads):
            raise FormatError(f"{self.path}: tensor {name!r} has {shape[0]} rows: not {key} = {heads!r} heads of an "
                              f"even width")
        return np.arange(shape[0]).reshape(heads, shape[0] // heads // 2, 2).swapaxes(1, 2).reshape(-1)

    def __contains__(self, name):
        return name in self.refs

    def total_bytes(self):
        return sum(r.nbytes for r in self.refs.values())

    def ref(self, name):
        ref = self.refs.get(name)
        if ref is None:
            raise FormatError(f"{self.path}: GGUF file is missing the tensor for {name!r}")
        return ref

    def close(self):
        self._reader = self._tensors = None

    # ---- data -----------------------------------------------------------------------------------------
    def _raw(self, ref):
        """The tensor's (or stack slice's) bytes as a uint8 view of the mapped file."""
        raw = self._tensors[ref.tensor].data.reshape(-1).view(np.uint8)
        order = self._order.get(ref.tensor)
        if order is not None:
            raw = raw.reshape(len(order), -1)[order].reshape(-1)
        return raw if ref.index is None else raw[ref.index * ref.nbytes:(ref.index + 1) * ref.nbytes]

    def _decode(self, ref, raw, rows):
        if ref.dtype in FLOAT_TYPES:
            return to_f32(raw, ref.dtype).reshape(rows, -1)
        qtype = self._gguf.GGMLQuantizationType[ref.dtype]
        return self._gguf.quants.dequantize(raw.reshape(rows, -1), qtype).astype(np.float32, copy=False)

    def _check(self, ref, shape):
        if tuple(ref.shape) != tuple(shape):
            raise FormatError(f"{self.path}: tensor {ref.tensor!r} ({ref.name}) has shape {list(ref.shape)}, "
                              f"expected {list(shape)}")

    def read_f32(self, name, shape, index=None):
        """Tensor `name` as float32 of `shape` (block types decoded as gguf.quants.dequantize does)."""
        ref = self.ref(name)
        if index is not None:
            raise FormatError(f"{self.path}: {name!r}: a GGUF source has no fused expert tensors")
        want = tuple(shape)
        self._check(ref, want)
        rows = int(np.prod(ref.shape[:-1])) if len(ref.shape) > 1 else 1
        return np.array(self._decode(ref, self._raw(ref), rows)).reshape(want)

    def read_rows_f32(self, name, r0, r1):
        ref = self.ref(name)
        rb = ref.nbytes // ref.shape[0]
        return np.array(self._decode(ref, self._raw(ref)[r0 * rb:r1 * rb], r1 - r0))

    def stored_scheme(self, name):
        """The colibri encoding that keeps tensor `name`'s blocks as they are (None: a float or other type)."""
        return BLOCK_TYPES.get(self.ref(name).dtype)

    def read_encoded(self, name, shape):
        """A block-quantized matrix's bytes as they are in the file: Encoded(scheme, rows, cols, data)."""
        ref = self.ref(name)
        self._check(ref, shape)
        return Encoded(BLOCK_TYPES[ref.dtype], ref.shape[0], ref.shape[1], self._raw(ref).reshape(ref.shape[0], -1))

    def read_rows_encoded(self, name, r0, r1):
        ref = self.ref(name)
        raw = self._raw(ref).reshape(ref.shape[0], -1)[r0:r1]
        return Encoded(BLOCK_TYPES[ref.dtype], r1 - r0, ref.shape[1], raw)

    def chunks(self, ref, chunk_bytes=64 << 20):
        raw = self._raw(ref)
        for start in range(0, ref.nbytes, chunk_bytes):
            yield raw[start:start + chunk_bytes].tobytes()


def _contents(path, key, f):
    """A metadata field's value; a value the reader cannot decode (bad UTF-8, ...) is a FormatError naming the key."""
    try:
        return f.contents()
    except (ValueError, IndexError, TypeError, KeyError) as exc:
        raise FormatError(f"{path}: GGUF metadata {key!r} cannot be read ({type(exc).__name__}: {exc})") from exc


def _scalar(path, key, value):
    """One metadata number; a float32 one as the shortest decimal that is that float32 (the config.json value
    llama.cpp's converter stored: 1e-06, not 9.999999974752427e-07)."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, (int, float)):
        raise FormatError(f"{path}: GGUF metadata {key!r} = {value!r}: expected one number")
    if isinstance(value, int) and not 0 <= value < MAX_INT:
        raise FormatError(f"{path}: GGUF metadata {key!r} = {value}: out of range (0 .. 2^31-1)")
    if isinstance(value, float) and not np.isfinite(value):
        raise FormatError(f"{path}: GGUF metadata {key!r} = {value}: not a finite number")
    return float(str(np.float32(value))) if isinstance(value, float) else value
