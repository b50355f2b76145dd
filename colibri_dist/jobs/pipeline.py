"""The one job runner behind `colibri run`: rows -> engine -> shards, every kind, resumable.

Role in the data flow:
    config -> KINDS[job.kind] (the table below) -> kind.check (before the disk) -> the demo model and data
    when `model: null` -> inputs -> --out (created; one run at a time: run/outlock.py)
    -> plan (run/plan.py: shards, resume signature, manifest, pending; a refused resume or a finished job
       opens no engine and starts no pool)
    -> the kind's engine (through front.py: the MoE executor alone, or a whole LLM; in process or on a pool)
    -> per group of pending shards: kind.run_group (rows -> engine -> output rows, one atomic write per
       shard) -> manifest, partial rows dropped -> one Progress, one Meter
    -> report.json, report.html, summary (reports/report.py); a failed run still reports what it wrote.
A kind is a class with these hooks (moe_kind.MoeKind and generation/job.py hold them for their kinds):
    input_exts, input_hint         the input files it reads        unit, shards_word   what progress counts
    partial_rows                   keeps finished rows of unwritten shards (run/partial.py)
    check(cfg), demo(cfg, log) -> (model, data dir, extra report fields(out, paths) | None)   class methods
    opened(cfg, model_path, openers) -> context manager of the kind (what counting and reading rows needs)
    count_rows(path), settings() (its part of the resume signature), size(shard, info) (progress units)
    open_engine(cfg, offload_dir, log, openers), attach(engine), meter(engine, heat) -> reports.metrics.Meter
    groups(pending), run_group(shards, out_dir, meter, progress, partial) -> [(shard, output name, info)]
    report_fields(rep, cfg, done, meter, run), run_keys, summary_rows(rep), figures(rep, meter), workers(rep)
"""
import dataclasses
import io
import json
import os
import shutil
import sys
import tempfile
import time

from ..errors import ColibriError, InvalidArgument
from .generation.job import KINDS as GENERATION_KINDS
from .moe_layer import MoeLayer
from .reports.report import finish, build_report, print_error_count
from .run.executors import attaches_to_named_pool, uses_pool
from .run.outlock import LOCK_NAME, hold_output_dir
from .run.partial import PartialRows
from .run.plan import plan_job
from .run.progress import Progress
from .run.shards import MANIFEST, clean_temp_files, discover_inputs, refuse_overlap
from .token_classification import TokenClassification

KINDS = {**GENERATION_KINDS, "token-classification": TokenClassification, "moe-layer": MoeLayer}
DEFAULT_OUT = "colibri-out"


@dataclasses.dataclass
class Openers:
    """What a caller opens instead of the real thing (None: the real one, through front.py)."""
    executor: object = None     # (cfg, model path, offload dir) -> the MoE executor (MoE kinds)
    model: object = None        # path -> context manager of the container (MoE kinds)
    llm: object = None          # cfg -> the LLM (generate, score); closed at the end
    engine: object = None       # an engine already open (run_generation_job): used, not closed

    def any(self):
        return any(v is not None for v in (self.model, self.llm, self.engine))


@dataclasses.dataclass
class Job:
    cfg: object
    kind: type
    paths: list
    out_dir: str
    stream: object
    log: object
    extra: object = None        # extra(out_dir, paths) -> fields merged into the report (the demo's accuracy)


def run_job(cfg, out_dir=None, restart=False, executor_factory=None, stream=None, model_opener=None,
            llm_factory=None):
    """Run (or resume) the job described by a JobConfig; returns the report dict (also report.json,
    report.html, the summary table). executor_factory(cfg, model_path, offload_dir), model_opener(path) and
    llm_factory(cfg) replace the real openers (tests)."""
    return _run(cfg, out_dir, restart, stream, Openers(executor_factory, model_opener, llm_factory))


def run_generation_job(cfg, llm, out_dir=None, restart=False, stream=None):
    """A generate/score job on an LLM already open (no demo, no model file needed; the LLM stays open)."""
    return _run(cfg, out_dir, restart, stream, Openers(engine=llm))


def _run(cfg, out_dir, restart, stream, openers):
    stream, kind = stream or sys.stderr, KINDS[cfg.job.kind]
    log, extra = _logger(cfg, stream), None
    kind.check(cfg)
    if cfg.model is None and openers.engine is None:
        model, data, extra = kind.demo(cfg, log)
        cfg = dataclasses.replace(cfg, model=model, job=dataclasses.replace(cfg.job, input=cfg.job.input or data))
    paths = discover_inputs(cfg.job.input, kind.input_exts, log=log, hint=kind.input_hint)
    if not openers.any():
        check_model_path(cfg.model)
    out_dir = os.path.abspath(out_dir or cfg.job.output or DEFAULT_OUT)
    refuse_overlap(out_dir, paths, cfg.model)
    existed = os.path.isdir(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    try:
        with hold_output_dir(out_dir):           # one run per output dir (OutputBusy names the holder's pid)
            return _in_dir(Job(cfg, kind, paths, out_dir, stream, log, extra), restart, openers)
    except ColibriError:
        if not existed and _nothing_written(out_dir):    # rejected (a bad setting, a damaged model) before
            shutil.rmtree(out_dir, ignore_errors=True)   # any shard was written: leave no dir
        raise


def _in_dir(job, restart, openers):
    """Plan first (a refused resume or a finished job opens no engine and starts no pool), then run."""
    cfg = job.cfg
    clean_temp_files(job.out_dir)                 # a killed run's leftovers, before this run's offload dir
    with job.kind.opened(cfg, cfg.model, openers) as kind:
        plan = plan_job(cfg, kind, job.paths, job.out_dir, restart)
        kept = _kept_report(plan) if not plan.pending else None
        if kept is not None:
            job.log(f"nothing to do: all {len(plan.shards)} {kind.shards_word} in {plan.out_dir} are already "
                    f"written; report kept: {os.path.join(plan.out_dir, 'report.json')} (--restart redoes the job)")
            print_error_count(kept, job.stream)
            return kept
        units = {s.name: kind.size(s, plan.manifest.done.get(s.name)) for s in plan.shards}
        done = sum(n for name, n in units.items() if plan.manifest.is_done(name))
        offload_dir, made_offload = _offload_dir(cfg, job.out_dir)
        engine, t0 = openers.engine, time.perf_counter()
        try:
            if engine is None:
                job.log(_executor_line(cfg, offload_dir))
                engine = kind.open_engine(cfg, offload_dir, job.log, openers)
            kind.attach(engine)
            return _loop(job, kind, plan, engine, (sum(units.values()), done), time.perf_counter() - t0)
        finally:
            if openers.engine is None and hasattr(engine, "close"):
                engine.close()
            if made_offload:
                shutil.rmtree(offload_dir, ignore_errors=True)


def _loop(job, kind, plan, engine, units, startup_s):
    cfg, written = job.cfg, []
    resumed = f", resuming with {len(plan.shards) - len(plan.pending)} already written" \
        if len(plan.pending) < len(plan.shards) else ""
    job.log(f"{cfg.job.kind} job: {sum(s.rows for s in plan.shards)} rows in {len(plan.shards)} shard(s){resumed}; "
            f"output {plan.out_dir}")
    progress = Progress(*units, mode=cfg.report.progress, log_every_s=cfg.report.log_every_s, stream=job.stream,
                        unit=kind.unit)
    meter = kind.meter(engine, cfg.report.expert_heat)
    partial = PartialRows(plan.out_dir, plan.manifest.signature) if kind.partial_rows else None
    t0 = time.perf_counter()

    def report(stream):
        run = {"written": len(written), "elapsed_s": time.perf_counter() - t0, "startup_s": startup_s,
               "executor": getattr(meter.moe, "kind", None) or ("pool" if uses_pool(cfg) else "engine"),
               "model": os.path.abspath(cfg.model) if cfg.model else None}
        return finish(cfg, kind, plan, build_report(cfg, kind, plan.manifest, meter, run), meter, stream, job.extra)
    try:
        for group in kind.groups(plan.pending):
            for shard, name, info in kind.run_group(group, plan.out_dir, meter, progress, partial):
                plan.manifest.mark_done(shard.name, dict(info, output=name))
                if partial is not None:
                    partial.drop(shard.name)
                written.append(shard.name)
                progress.written(info)
    except Exception:                   # a failed run still reports what it wrote (complete: false); resume merges
        progress.close()
        _quietly(lambda: report(io.StringIO()))
        raise
    finally:                            # Ctrl-C too: the finished rows of the shards in flight reach the disk
        if partial is not None:
            partial.close()
    progress.close()
    return report(job.stream)


def _quietly(write):
    try:
        write()
    except Exception:                   # the run's own error is the one to show
        pass


def _kept_report(plan):
    """report.json of a finished job, when it says so (else None: written again from the manifest)."""
    try:
        with open(os.path.join(plan.out_dir, "report.json"), encoding="utf-8") as fh:
            report = json.load(fh)
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) and report.get("complete") else None


def _nothing_written(out_dir):
    """Only the lock and a manifest without shards (the plan is made before the engine opens)."""
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


def check_model_path(path):
    """A model must be a .colibri file; a Hugging Face directory gets the command to convert it."""
    if not os.path.exists(path):
        raise InvalidArgument(f"model: {path}: no such file")
    if os.path.isdir(path):
        hf = os.path.isfile(os.path.join(path, "config.json"))
        raise InvalidArgument(f"model: {path} is a directory" + (
            f" holding a Hugging Face checkpoint; convert it first: `colibri convert {path} MODEL.colibri`, "
            f"then pass --model MODEL.colibri" if hf else "; expected a .colibri file (see `colibri convert`)"))


def _executor_line(cfg, offload_dir):
    if attaches_to_named_pool(cfg):
        return f"attaching to the running pool {cfg.pool.name!r} (its own cache and offload settings apply)"
    pool = uses_pool(cfg)
    cache = "no cache limit (experts served from the mmap)" if cfg.pool.cache_bytes is None else \
        f"expert cache {cfg.pool.cache_bytes / 2**20:.2f} MiB{' per worker' if pool else ''}, offload to {offload_dir}"
    if pool:
        where = cfg.pool.ray_address or "a local Ray on loopback"
        return f"starting a pool of {cfg.pool.workers} workers on {where}; {cache}"
    return f"running in-process on the MoeExecutor (no Ray); {cache}"


def _offload_dir(cfg, out_dir):
    """pool.offload_dir, or a fresh temp dir inside the output dir (removed at the end) when a cache is set."""
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
