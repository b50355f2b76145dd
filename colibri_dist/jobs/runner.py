"""The batch-job runner behind `colibri run`: shards in, outputs + report.json + report.html out.

Role in the data flow:
    config -> (demo model/dataset if `model: null`) -> open model -> job kind -> plan shards
    -> manifest (resume: skip shards already written) -> executor (Pool or Engine)
    -> per shard: batches through the kind, atomic output write, manifest update
    -> report (json, html, summary table)
Re-running into the same output dir resumes at the first incomplete shard.
"""
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time

from ..errors import ColibriError, InvalidArgument
from .reports import report as report_mod
from .run.executors import open_executor
from .reports.metrics import Meter
from .moe_layer import MoeLayer
from .run.outlock import LOCK_NAME, hold_output_dir
from .run.progress import JobProgress
from .run.shards import Manifest, clean_temp_files, discover_inputs, plan_shards, refuse_overlap
from .token_classification import TokenClassification, find_tokenizer

KINDS = {"token-classification": TokenClassification, "moe-layer": MoeLayer}
GENERATION_KINDS = ("generate", "score")
DEFAULT_OUT = "colibri-out"


def run_job(cfg, out_dir=None, restart=False, executor_factory=open_executor, stream=None, model_opener=None,
            llm_factory=None):
    """Run (or resume) the job described by a JobConfig; returns the report dict.

    executor_factory(cfg, model_path, offload_dir) and model_opener(path) are injectable for tests.
    `generate`/`score` jobs run on llm_factory(cfg) -> an LLM (default: generation.llm.open_job_llm).
    """
    stream = stream or sys.stderr
    if cfg.job.kind in GENERATION_KINDS:
        return _run_generation(cfg, out_dir, restart, stream, llm_factory)
    out_dir = os.path.abspath(out_dir or cfg.job.output or DEFAULT_OUT)
    log = _logger(cfg, stream)
    model_path, input_spec, tokenizer = resolve_sources(cfg, log)
    if model_opener is None:
        from ..format.reader import open_model as model_opener
    with model_opener(model_path) as model:
        kind = KINDS[cfg.job.kind](cfg, model, model_path, find_tokenizer(cfg.job, model_path, model) or tokenizer)
        paths = discover_inputs(input_spec, kind.input_exts, log=log, hint=getattr(kind, "input_hint", None))
        refuse_overlap(out_dir, paths, model_path)
        shards = plan_shards(paths, kind.count_rows, cfg.job.shard_rows)
        os.makedirs(out_dir, exist_ok=True)      # only once the job is accepted: a rejected config leaves no dir
        with hold_output_dir(out_dir):           # one run per output dir (OutputBusy names the holder's pid)
            return _run_shards(cfg, kind, model_path, paths, shards, out_dir, restart, executor_factory, stream, log)


def _run_shards(cfg, kind, model_path, paths, shards, out_dir, restart, executor_factory, stream, log):
    signature = job_signature(cfg, model_path, paths, kind)
    manifest = Manifest.open(out_dir, signature, [s.name for s in shards], restart=restart)
    clean_temp_files(out_dir)
    pending = [s for s in shards if not manifest.is_done(s.name)]
    if not pending and os.path.isfile(os.path.join(out_dir, "report.json")):
        log(f"nothing to do: all {len(shards)} shards in {out_dir} are already written (--restart redoes them)")
        with open(os.path.join(out_dir, "report.json")) as fh:
            return json.load(fh)
    if len(pending) < len(shards):
        log(f"resuming in {out_dir}: {len(shards) - len(pending)} of {len(shards)} shards already written")
    return _execute(cfg, kind, model_path, shards, pending, manifest, out_dir, executor_factory, stream)


def _run_generation(cfg, out_dir, restart, stream, llm_factory):
    """generate/score: the demo LLM when `model: null`, the LLM (Engine or pool), the job, its report."""
    import dataclasses

    from .generation.job import check_config
    from .generation.rows import INPUT_EXTS
    check_config(cfg)
    log, extra = _logger(cfg, stream), None
    if cfg.model is None:
        from ..demos.llm_cache import accuracy_of_outputs, ensure_demo_llm
        art = ensure_demo_llm(cfg.demo_llm, log=log)
        cfg = dataclasses.replace(cfg, model=art.model, job=dataclasses.replace(cfg.job, input=cfg.job.input or art.data_dir))
        extra = lambda out, paths: {"task_accuracy": accuracy_of_outputs(paths, out)}   # noqa: E731
    paths = discover_inputs(cfg.job.input, INPUT_EXTS)     # a missing input is rejected before --out exists
    if llm_factory is None:
        check_model_path(cfg.model)
    out_dir = os.path.abspath(out_dir or cfg.job.output or DEFAULT_OUT)
    refuse_overlap(out_dir, paths, cfg.model)
    existed = os.path.isdir(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    try:
        with hold_output_dir(out_dir):           # one run per output dir, generation jobs too
            return _generation_in(cfg, out_dir, restart, stream, llm_factory, extra, log)
    except ColibriError:
        if not existed and _nothing_written(out_dir):    # rejected (e.g. a damaged model) before any shard
            shutil.rmtree(out_dir, ignore_errors=True)   # was written: leave no dir
        raise


def _nothing_written(out_dir):
    """Only the lock and a manifest without shards (the plan is made before the model opens)."""
    from .run.shards import MANIFEST
    names = set(os.listdir(out_dir)) - {LOCK_NAME}
    if names - {MANIFEST}:
        return False
    if not names:
        return True
    try:
        with open(os.path.join(out_dir, MANIFEST)) as fh:
            return not json.load(fh).get("done")
    except (OSError, ValueError, AttributeError):
        return False


def _generation_in(cfg, out_dir, restart, stream, llm_factory, extra, log):
    """Plan first (a refused resume or a finished job opens no model and starts no pool), then run."""
    from .run.executors import uses_pool
    from .generation.job import finished_job, run_generation_job
    from .generation.llm import open_job_llm
    from .generation.plan import identity_of, plan_generation
    clean_temp_files(out_dir)                      # a killed run's leftovers, before this run's offload dir
    plan = plan_generation(cfg, out_dir, restart, identity_of(cfg.model))
    if not plan.pending:
        return finished_job(cfg, plan, stream, log, extra)
    offload_dir, made_offload = _offload_dir(cfg, out_dir)
    log(_executor_line(cfg, offload_dir))
    t0 = time.perf_counter()
    try:
        llm = llm_factory(cfg) if llm_factory else open_job_llm(cfg, offload_dir, log=log)
        try:
            return run_generation_job(cfg, llm, stream=stream, extra=extra, startup_s=time.perf_counter() - t0,
                                      executor="pool" if uses_pool(cfg) else "engine", plan=plan)
        finally:
            if hasattr(llm, "close"):
                llm.close()
    finally:
        if made_offload:
            shutil.rmtree(offload_dir, ignore_errors=True)


def check_model_path(path):
    """A generate/score model must be a .colibri file; a Hugging Face directory gets the command to convert it."""
    if not os.path.exists(path):
        raise InvalidArgument(f"model: {path}: no such file")
    if os.path.isdir(path):
        hf = os.path.isfile(os.path.join(path, "config.json"))
        raise InvalidArgument(f"model: {path} is a directory" + (
            f" holding a Hugging Face checkpoint; convert it first: `colibri convert {path} MODEL.colibri`, "
            f"then pass --model MODEL.colibri" if hf else "; expected a .colibri file (see `colibri convert`)"))


def resolve_sources(cfg, log):
    """-> (model path, input spec, tokenizer path or None); builds the demo when `model: null`."""
    if cfg.model is not None:
        check_model_path(cfg.model)
        return cfg.model, cfg.job.input, None
    from ..demos.classifier import ensure_demo
    art = ensure_demo(cfg.demo, log=log)
    return art.model, cfg.job.input or art.data_dir, art.tokenizer


def job_signature(cfg, model_path, paths, kind):
    """What decides the outputs' content: changing it makes an old output dir unusable for resume."""
    st = os.stat(model_path)
    files = [[os.path.abspath(p), os.path.getsize(p), os.stat(p).st_mtime_ns] for p in paths]
    return {"kind": cfg.job.kind, "model": os.path.abspath(model_path), "model_bytes": st.st_size,
            "model_mtime_ns": st.st_mtime_ns, "expert_table": _expert_table_digest(model_path),
            "inputs": files, "shard_rows": cfg.job.shard_rows, "job.w8a8": bool(cfg.job.w8a8),
            "kind_settings": kind.signature(),
            "inputs_digest": hashlib.sha256(repr(files).encode()).hexdigest()[:16]}


def _expert_table_digest(model_path):
    """Hash of the hot-added/removed experts persisted beside the model (None if never changed)."""
    from ..store import segments_dir
    manifest = os.path.join(segments_dir(model_path), "MANIFEST.json")
    if not os.path.isfile(manifest):
        return None
    with open(manifest, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()[:16]


def _execute(cfg, kind, model_path, shards, pending, manifest, out_dir, executor_factory, stream):
    done_tokens = sum(info["tokens"] for info in manifest.done.values())
    pending_tokens = sum(kind.count_tokens(s) for s in pending)
    offload_dir, made_offload = _offload_dir(cfg, out_dir)
    _logger(cfg, stream)(_executor_line(cfg, offload_dir))
    t_start = time.perf_counter()
    executor = executor_factory(cfg, model_path, offload_dir)
    progress = None
    try:
        startup_s = time.perf_counter() - t_start
        progress = JobProgress(done_tokens + pending_tokens, done_tokens=done_tokens, mode=cfg.report.progress,
                               log_every_s=cfg.report.log_every_s, stream=stream)
        meter = Meter(executor, kind.n_experts_by_layer(), heat=cfg.report.expert_heat)
        for shard in pending:
            name = kind.output_name(shard)
            info = kind.run_shard(shard, meter, progress, os.path.join(out_dir, name))
            manifest.mark_done(shard.name, dict(info, output=name))
            meter.shards_written.append(shard.name)
        final_stats = meter.finish()
    finally:
        if progress is not None:
            progress.close()
        executor.close()
        if made_offload:
            shutil.rmtree(offload_dir, ignore_errors=True)
    rep = report_mod.build_report(cfg, meter, final_stats, manifest, executor.kind, startup_s, model_path)
    report_mod.write_all(rep, meter, out_dir, cfg.report, stream)
    return rep


def _executor_line(cfg, offload_dir):
    from .run.executors import attaches_to_named_pool, uses_pool
    if attaches_to_named_pool(cfg):
        return f"attaching to the running pool {cfg.pool.name!r} (its own cache and offload settings apply)"
    pool = uses_pool(cfg)
    cache = "no cache limit (experts served from the mmap)" if cfg.pool.cache_bytes is None else \
        f"expert cache {cfg.pool.cache_bytes / 2**20:.2f} MiB{' per worker' if pool else ''}, offload to {offload_dir}"
    if pool:
        where = cfg.pool.ray_address or "a local Ray on loopback"
        return f"starting a pool of {cfg.pool.workers} workers on {where}; {cache}"
    return f"running in-process on the Engine (no Ray); {cache}"


def _offload_dir(cfg, out_dir):
    """pool.offload_dir, or a fresh temp dir inside the output dir (removed at the end) when a cache is set."""
    from .run.executors import attaches_to_named_pool
    if attaches_to_named_pool(cfg):
        return None, False            # the running pool has its own cache and offload settings
    if cfg.pool.offload_dir:
        return cfg.pool.offload_dir, False
    if cfg.pool.cache_bytes is None:
        return None, False
    return tempfile.mkdtemp(prefix=".offload-", dir=out_dir), True


def _logger(cfg, stream):
    def log(text):
        if cfg.report.progress != "none":
            print(f"colibri: {text}", file=stream, flush=True)
    return log
