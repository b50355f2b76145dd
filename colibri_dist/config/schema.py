"""The typed schema of colibri's YAML configs: one dataclass per section, field types, choices, defaults.

Role in the data flow: config/yaml_binding.py builds these from a YAML file (or a plain dict) and checks
them; every room reads the resulting objects (JobConfig, ServiceConfig, PoolSection, ...). Plain data:
no YAML here. The meaning of each key is documented in docs/CONFIG.md.

    PoolSection is the YAML `pool:` section; pool/config.py's PoolConfig is the validated runtime object the
    Pool builds from it (config/engine_args.py: of_service / of_job, the one mapping).
    parse_size("64MiB") -> int;  defaults_of(cls) -> {key: default};  as_dict(obj) -> dict
"""
import dataclasses
import decimal
import re
import typing
from dataclasses import dataclass, field
from typing import Optional, Union

from ..encodings import KV_CACHE_DTYPES

# ---------------------------------------------------------------- schema helpers


class Size(int):
    """Marker type: a byte count given as an int or a string like "64MiB"."""


class RawMapping(dict):
    """Marker type: a free-form mapping validated by the room that uses it (e.g. job.sampling_params,
    checked against SamplingParams by the generation jobs). `where[key]` is "file:line:column" of
    each key, `at` that of the mapping, so those checks can name the position too."""
    where = {}
    at = ""


def one_of(*choices, default, doc=""):
    """A str field whose value must be one of `choices`."""
    return field(default=default, metadata={"choices": choices, "doc": doc})


def _opt(default, doc=""):
    return field(default=default, metadata={"doc": doc})


REQUIRED = dataclasses.MISSING

# ---------------------------------------------------------------- the schema


@dataclass
class BalancerConfig:
    kind: str = one_of("token-bucket", "round-robin", "home", default="token-bucket")
    window: int = 64
    threshold: float = 1.3      # most / least loaded worker (routing/balancer.py): 2 workers -> 1.13 x mean


@dataclass
class NumaConfig:
    enabled: bool = True
    workers_per_node: int = 1
    mem_policy: str = one_of("bind", "interleave", "preferred", "none", default="bind")
    sysfs_root: Optional[str] = None


@dataclass
class PoolSection:
    """The YAML `pool:` section (engine_args.of_job / of_service map it onto EngineArgs and the Pool's PoolConfig)."""
    name: Optional[str] = None
    workers: int = 2
    threads_per_worker: Optional[int] = None
    cache_bytes: Optional[Size] = None
    offload_dir: Optional[str] = None
    offload_compression: str = one_of("none", "zstd", default="none")
    policy: str = one_of("lru", "lfu", "lfru", default="lru")
    replicas: int = 0
    balancer: BalancerConfig = field(default_factory=BalancerConfig)
    ray_address: Optional[str] = None
    numa: NumaConfig = field(default_factory=NumaConfig)
    w8a8: Optional[bool] = None    # the workers' arithmetic; None: job.w8a8 (a `colibri pool start` pool: true)


@dataclass
class RoutingConfig:
    policy: str = one_of("exact", "balanced", default="exact")


@dataclass
class JobSection:
    kind: str = field(default=REQUIRED, metadata={"choices": ("moe-layer", "token-classification", "generate",
                                                               "score")})
    input: Optional[str] = None
    output: Optional[str] = None
    batch_tokens: int = 1024
    layers: Union[str, int, list] = "all"          # "all" | layer number | list of layer numbers
    shard_rows: Optional[int] = None
    input_format: str = one_of("auto", "ids", "text", default="auto")
    ids_field: str = "input_ids"
    text_field: str = "text"
    id_field: str = "id"
    tokenizer: Optional[str] = None
    executor: str = one_of("pool", "engine", default="pool")
    threads: Optional[int] = None
    # generate / score
    prompt_field: str = "prompt"
    messages_field: str = "messages"
    prompt_ids_field: str = "prompt_token_ids"
    sampling_field: str = "sampling_params"
    sampling_params: RawMapping = field(default_factory=RawMapping)
    seed: int = 0
    on_error: Optional[str] = one_of("continue", "fail", default=None)
    max_num_seqs: int = 64
    prefill_chunk: Optional[int] = None
    w8a8: bool = True        # int8/4/6 x int8 activations (w8a8/w4a8/w6a8), k-quants x Q8_K; false = exact weights
    kv_cache_bytes: Optional[Size] = None
    kv_cache_dtype: str = one_of(*KV_CACHE_DTYPES, default="f32")
    max_seq_len: Optional[int] = None
    chat_template_timeout_s: float = 2.0        # = generate.safe_text.TemplateLimits() (tests check they agree)
    chat_template_max_chars: int = 4 << 20


@dataclass
class DemoDatasetConfig:
    shards: int = 8
    rows_per_shard: int = 64
    seq_len: int = 32


@dataclass
class DemoConfig:
    seed: int = 0
    vocab_size: int = 512
    hidden: int = 128
    inter: int = 256
    layers: int = 4
    experts: int = 8
    top_k: int = 2
    classes: int = 5
    scheme: str = one_of("int8", "int8-g32", "int8-g64", "int8-g128", "int8-minmax", "f16", "bf16", "f32",
                        default="int8")
    cache_dir: Optional[str] = None
    dataset: DemoDatasetConfig = field(default_factory=DemoDatasetConfig)


@dataclass
class DemoLLMConfig:
    seed: int = 0
    layers: int = 4
    experts: int = 16
    scheme: str = one_of("int8", "int8-g32", "int8-g64", "int8-g128", "int8-minmax", "f16", "bf16", "f32",
                        default="int8")
    prompts: int = 64
    shards: int = 4
    max_tokens: int = 8
    cache_dir: Optional[str] = None


@dataclass
class ReportConfig:
    html: bool = True
    summary: bool = True
    progress: str = one_of("auto", "bar", "log", "none", default="auto")
    expert_heat: bool = True
    log_every_s: float = 5.0


@dataclass
class JobConfig:
    job: JobSection = REQUIRED
    model: Optional[str] = None
    pool: PoolSection = field(default_factory=PoolSection)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    demo: DemoConfig = field(default_factory=DemoConfig)
    demo_llm: DemoLLMConfig = field(default_factory=DemoLLMConfig)
    report: ReportConfig = field(default_factory=ReportConfig)
    source: Optional[str] = field(default=None, metadata={"internal": True})


@dataclass
class ServiceConfig:
    model: Optional[str] = None
    pool: PoolSection = field(default_factory=PoolSection)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    source: Optional[str] = field(default=None, metadata={"internal": True})


SERVICE_IGNORES = ("job", "demo", "demo_llm", "report")   # known sections a service/pool file may carry

# ---------------------------------------------------------------- sizes

_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1000, "kib": 1024, "m": 1024 ** 2, "mb": 1000 ** 2,
               "mib": 1024 ** 2, "g": 1024 ** 3, "gb": 1000 ** 3, "gib": 1024 ** 3,
               "t": 1024 ** 4, "tb": 1000 ** 4, "tib": 1024 ** 4}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


MAX_SIZE = 2 ** 63 - 1     # what an off_t / int64 byte count can hold


def parse_size(value):
    """int or "64MiB"/"1.5GB"/"512k" -> bytes (0 <= int <= MAX_SIZE). Raises ValueError with what was expected."""
    if isinstance(value, bool):
        raise ValueError("expected a byte size (int or string like '64MiB')")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("expected a non-negative byte size")
        if value > MAX_SIZE:
            raise ValueError(f"byte size {value} is larger than {MAX_SIZE}")
        return value
    if isinstance(value, str):
        m = _SIZE_RE.match(value)
        if m and m.group(2).lower() in _SIZE_UNITS:
            size = int(decimal.Decimal(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])   # exact, no float overflow
            if size > MAX_SIZE:
                raise ValueError(f"byte size {value[:40]!r}{'...' if len(value) > 40 else ''} is larger than "
                                 f"{MAX_SIZE} bytes")
            return size
    raise ValueError(f"expected a byte size like 1048576, '64MiB', '512KB' or '2GiB', got {value!r}")


def defaults_of(cls):
    """{key: default} for a schema class (nested sections as dicts, REQUIRED for required keys)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        if dataclasses.is_dataclass(hints[f.name]):
            out[f.name] = defaults_of(hints[f.name])
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = f.default
    return out


def as_dict(obj):
    """A config dataclass -> plain dict (for manifests and reports)."""
    data = dataclasses.asdict(obj)
    data.pop("source", None)
    return data
