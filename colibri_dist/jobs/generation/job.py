"""Job kinds `generate` and `score`, run against an LLM object, and their resumable runner.

Role in the data flow: `run_generation_job(cfg, llm)` plans shards of `job.input` (JSONL/Parquet),
skips those the manifest already holds (resume), and per shard: rows -> prompts (rows.py)
-> ONE llm.generate / llm.score call over all of the shard's good rows (the scheduler batches them
continuously) -> one JSONL output row per input row, written atomically -> manifest -> report.json.

The LLM object (the whole-model engine's `LLM`, a fake in tests) provides:
    llm.tokenizer       tokenizers.Tokenizer or None        llm.chat_template  ChatTemplate or None
    llm.generate(list of token-id lists, list of SamplingParams[, on_token=callable]) -> [Completion]
    llm.score(list of token-id lists) -> [Score]
    (each asked errors="return", use_tqdm=False when it takes them: a row's error stays in its output row)
Output rows:
    generate: id, generated_text, generated_tokens, num_input_tokens, num_generated_tokens, finish_reason
              (+ logprobs: [{token_id, logprob, rank, top: [[id, logprob], ...]}] when asked)
    score:    id, prompt_logprobs, total_logprob, num_tokens
    a bad row: id, error (what is wrong); `job.on_error: fail` stops at the first and names the row.
"""
import inspect
import io
import json
import os
import sys
import time

from ...errors import InvalidArgument, NumericalError
from ...fsutil import atomic_write
from .metrics import GenerationMeter
from ..reports.generation import write_all
from .rows import RowReader, check_sampling_defaults, row_error_text
from ..run.executors import view_of
from ..run.progress import RequestProgress
from ..reports.report import without_limit
from .each import generate_each
from .partial import PartialRows
from .plan import identity_of, plan_generation

DEFAULT_OUT = "colibri-out"
PER_ROW = dict(errors="return", use_tqdm=False)    # a bad row is that row's error; the job has its own progress
EXAMPLES_PER_SHARD = 5


class _GenerationKind:
    kind = None

    def __init__(self, cfg, llm):
        self.cfg, self.job, self.llm = cfg, cfg.job, llm
        self.reader = RowReader(cfg.job, self.kind, getattr(llm, "tokenizer", None),
                                lambda: getattr(llm, "chat_template", None),
                                model_defaults=getattr(llm, "generation_defaults", None))

    def run_group(self, shards, progress, out_dir, meter=None, partial=None):
        """Generate for the rows of several shards in ONE llm call (the scheduler keeps its batch full
        across shard boundaries), then write each shard atomically; -> [(shard, output name, info)].
        partial: PartialRows (partial.py): rows an interrupted run finished are taken from it, not run
        again, and each row finishing now is added to it."""
        per_shard = [self.reader.read(s) for s in shards]
        kept = _restore(shards, per_shard, partial)
        for rows in per_shard:
            self._fail_fast(rows)
        good = [r for rows in per_shard for r in rows if r.error is None and id(r) not in kept]
        results = self._run(good, progress, meter, self._keeper(good, shards, per_shard, partial)) if good else []
        if meter is not None:
            meter.add_results(results)
        result_of = {}
        for r, res in zip(good, results):
            if res.error is not None:
                r.error, r.fault = row_error_text(res.error), res.error
            result_of[id(r)] = res
        for rows in per_shard:
            self._fail_fast(rows)
        return [self._write(shard, rows, result_of, out_dir, kept) for shard, rows in zip(shards, per_shard)]

    def _keeper(self, good, shards, per_shard, partial):
        """on_done(i, result) adding good[i]'s output line to the partial file of its shard (None: no file)."""
        if partial is None:
            return None
        shard_of = {id(r): s.name for s, rows in zip(shards, per_shard) for r in rows}

        def on_done(i, res):
            r = good[i]
            partial.add(shard_of[id(r)], r.index, self._line(r, res), isinstance(res.error, NumericalError))
        return on_done

    def _line(self, row, res):
        """The output row's JSON text, as _write writes it."""
        if res is not None and res.error is not None:
            return json.dumps({"id": row.id, "error": row_error_text(res.error)}, default=str)
        return json.dumps(self._out_row(row, res), default=str)

    def run_objects(self, objs, where="row"):
        """Rows given as dicts (a Ray Data batch) -> output dicts with exactly the job's output columns.
        A row without `id` keeps id None and draws its default seed from a hash of its content, so its
        output never depends on the batch it came in."""
        rows = []
        for i, obj in enumerate(objs):
            own_id = self.job.id_field in obj
            keyed = obj if own_id else {**obj, self.job.id_field: content_key(obj)}
            row = self.reader.parse(i, f"{where} {i}", keyed)
            if not own_id:
                row.id = None
            rows.append(row)
        good = [r for r in rows if r.error is None]
        results = self._run(good, _NO_PROGRESS, None) if good else []
        result_of = {}
        for r, res in zip(good, results):
            if res.error is not None:
                r.error = row_error_text(res.error)
            result_of[id(r)] = res
        return [self._out_row(r, result_of.get(id(r))) for r in rows]

    def _write(self, shard, rows, result_of, out_dir, kept=None):
        name = f"{shard.name}.jsonl"
        kept = kept or {}
        lines = [kept[id(r)] if id(r) in kept else self._line(r, result_of.get(id(r))) for r in rows]
        data = ("\n".join(lines) + ("\n" if lines else "")).encode()
        atomic_write(os.path.join(out_dir, name), [data])
        ok = [json.loads(line) for r, line in zip(rows, lines) if r.error is None]
        bad = [r for r in rows if r.error is not None]
        examples = [{"id": r.id, "where": r.where, "error": r.error} for r in bad[:EXAMPLES_PER_SHARD]]
        return shard, name, dict(self._summary(ok), rows=len(rows), errors=len(bad), bytes=len(data),
                                 error_examples=examples)

    def _fail_fast(self, rows):
        if self.job.on_error == "fail":
            bad = next((r for r in rows if r.error is not None), None)
            if bad is not None:        # a numerical fault stays one (exit 4), anything else is the row's (exit 2)
                kind = NumericalError if isinstance(bad.fault, NumericalError) else InvalidArgument
                raise kind(f"{bad.where}: row {bad.id!r}: {bad.error} (job.on_error: fail; fix the row, "
                           f"or set job.on_error: continue to write it as an error row and go on)")


class GenerateKind(_GenerationKind):
    kind = "generate"

    def _run(self, rows, progress, meter, on_done=None):
        return generate_each(self.llm, [r.prompt_ids for r in rows], [r.params for r in rows], on_done,
                             on_token=progress.on_token, on_step=meter and meter.on_step)

    def _out_row(self, row, c):
        if row.error is not None:
            return {"id": row.id, "error": row.error}
        out = {"id": row.id, "generated_text": c.text, "generated_tokens": list(c.token_ids),
               "num_input_tokens": len(c.prompt_token_ids), "num_generated_tokens": len(c.token_ids),
               "finish_reason": c.finish_reason}
        if row.params.logprobs is not None:
            out["logprobs"] = [lp.to_dict() for lp in c.logprobs]
        return out

    def _summary(self, ok):
        """ok: the output rows (dicts) of the good rows."""
        reasons = {}
        for o in ok:
            reasons[o["finish_reason"]] = reasons.get(o["finish_reason"], 0) + 1
        return {"tokens": sum(o["num_generated_tokens"] for o in ok),
                "input_tokens": sum(o["num_input_tokens"] for o in ok), "finish_reasons": reasons}


class ScoreKind(_GenerationKind):
    kind = "score"

    def _run(self, rows, progress, meter, on_done=None):
        """on_done: not used (a score row is one prefill; its shard is written whole)."""
        kwargs = _callbacks(self.llm.score, on_step=meter and meter.on_step, **PER_ROW)
        return self.llm.score([r.prompt_ids for r in rows], **kwargs)

    def _out_row(self, row, s):
        if row.error is not None:
            return {"id": row.id, "error": row.error}
        return {"id": row.id, "prompt_logprobs": list(s.token_logprobs), "total_logprob": s.total_logprob,
                "num_tokens": s.num_tokens}

    def _summary(self, ok):
        return {"tokens": 0, "input_tokens": sum(o["num_tokens"] for o in ok), "finish_reasons": {}}


KINDS = {"generate": GenerateKind, "score": ScoreKind}


class _NoProgress:
    on_token = None


_NO_PROGRESS = _NoProgress()


def _restore(shards, per_shard, partial):
    """{id(row): output line} of the rows the partial files kept; a kept error row gets its error back."""
    kept = {}
    if partial is None:
        return kept
    for shard, rows in zip(shards, per_shard):
        saved = partial.load(shard.name)
        for r in rows:
            if r.error is None and r.index in saved:
                line, numerical = saved[r.index]
                kept[id(r)] = line
                error = json.loads(line).get("error")
                if error is not None:
                    r.error, r.fault = error, NumericalError(error) if numerical else None
    return kept


def content_key(obj):
    """A stable stand-in id for a row that has none: a hash of its JSON content."""
    import hashlib
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return "sha256:" + hashlib.sha256(blob).hexdigest()[:16]


def _callbacks(method, **callbacks):
    """The callbacks and options `method` accepts (an LLM may not take on_step, on_token, errors or use_tqdm)."""
    params = inspect.signature(method).parameters
    return {k: v for k, v in callbacks.items() if v is not None and k in params}


def check_config(cfg):
    """What a generation job checks before touching the disk (ConfigError naming file:line:column)."""
    if cfg.job.kind not in KINDS:
        raise InvalidArgument(f"job.kind {cfg.job.kind!r} is not a generation job (generate | score)")
    if cfg.job.kind == "generate":
        check_sampling_defaults(cfg.job)


def run_generation_job(cfg, llm, out_dir=None, restart=False, stream=None, model_signature=None, extra=None,
                       startup_s=None, executor=None, offload_dir=None, plan=None):
    """Run (or resume) a generate/score job on `llm`; returns the report dict (also report.json, report.html,
    the summary table). extra(out_dir, input paths) -> dict merged into the report (the demo's accuracy).
    plan: the runner's Plan (made before the model was opened); else planned here (model_signature: the
    model's content identity, default: read from cfg.model when it is a file)."""
    check_config(cfg)
    stream = stream or sys.stderr
    if plan is None:
        out = os.path.abspath(out_dir or cfg.job.output or DEFAULT_OUT)
        ident = model_signature if model_signature is not None else identity_of(cfg.model)
        plan = plan_generation(cfg, out, restart, ident, keep=[offload_dir])
    kind = KINDS[cfg.job.kind](cfg, llm)
    shards, pending, manifest, out_dir = plan.shards, plan.pending, plan.manifest, plan.out_dir
    total = sum(s.rows for s in shards)
    if cfg.report.progress != "none":
        resumed = f", {len(shards) - len(pending)} already written" if len(pending) < len(shards) else ""
        print(f"colibri: {cfg.job.kind} job: {total} rows in {len(shards)} shard(s){resumed}; output {out_dir}",
              file=stream, flush=True)
    progress = RequestProgress(total, sum(s.rows for s in shards if s not in pending),
                               mode=cfg.report.progress, log_every_s=cfg.report.log_every_s, stream=stream)
    cache = getattr(llm, "cache", None)
    meter = GenerationMeter(moe=view_of(llm, cfg.job.threads), heat=cfg.report.expert_heat,
                            kv_blocks=getattr(cache, "n_blocks", None), prefix=getattr(cache, "prefix", None))

    def this_report(n_written, elapsed_s, quiet=False):
        report = build_report(cfg, manifest, n_written, elapsed_s)
        report["job"].update(model=getattr(llm, "path", None), executor=executor)
        report["startup_s"] = startup_s
        report["this_run"] = meter.report()
        without_limit(report["this_run"].get("cache"), cfg)
        return finish_report(cfg, plan, report, meter, io.StringIO() if quiet else stream, extra)
    t0, written = time.perf_counter(), []
    partial = PartialRows(out_dir, manifest.signature) if cfg.job.kind == "generate" else None
    try:
        for group in _groups(pending, cfg.job):
            for shard, name, info in kind.run_group(group, progress, out_dir, meter, partial):
                manifest.mark_done(shard.name, dict(info, output=name))
                if partial is not None:
                    partial.drop(shard.name)
                written.append(shard.name)
                progress.rows_done(info["rows"], finished=info["rows"] - info["errors"])
    except Exception:                   # a failed run still reports what it wrote (complete: false); resume merges
        progress.close()
        _report_quietly(lambda: this_report(len(written), time.perf_counter() - t0, quiet=True))
        raise
    finally:                            # Ctrl-C too: the finished rows of the shards in flight reach the disk
        if partial is not None:
            partial.close()
    progress.close()
    return this_report(len(written), time.perf_counter() - t0)


def _report_quietly(write):
    try:
        write()
    except Exception:                   # the run's own error is the one to show
        pass


def finish_report(cfg, plan, report, meter, stream, extra=None):
    """Errors, the earlier runs of a resumed job, the demo's extra fields -> report.json/html + summary."""
    report["error_examples"] = error_examples(plan.out_dir, plan.manifest)
    report["runs"] = merge_runs(plan.out_dir, report) if plan.resumed else [run_entry(report)]
    if extra is not None:
        report.update(extra(plan.out_dir, plan.paths) or {})
    print_error_count(report, stream)
    write_all(report, meter, plan.out_dir, cfg.report, stream)
    return report


def finished_job(cfg, plan, stream, log, extra=None):
    """Every shard is written already: keep report.json (or write one from the manifest when a kill came
    between the last shard and the report), say so, start nothing."""
    path = os.path.join(plan.out_dir, "report.json")
    log(f"nothing to do: all {len(plan.shards)} shard(s) in {plan.out_dir} are already written; report kept: "
        f"{path} (--restart redoes the job)")
    try:
        with open(path, encoding="utf-8") as fh:
            report = json.load(fh)
    except (OSError, ValueError):
        report = None
    if isinstance(report, dict) and report.get("complete"):
        print_error_count(report, stream)
        return report
    report, meter = build_report(cfg, plan.manifest, 0, 0.0), GenerationMeter()
    report["this_run"] = meter.report()
    return finish_report(cfg, plan, report, meter, stream, extra)


def run_entry(report):
    """One run's line in report["runs"] (a resumed job keeps every earlier run's)."""
    run = report.get("this_run") or {}
    return {"shards_written": report["shards"]["written_this_run"], "elapsed_s": report.get("elapsed_s_this_run"),
            "startup_s": report.get("startup_s"), "executor": report["job"].get("executor"),
            "throughput": run.get("throughput"), "latency": run.get("latency"), "cache": run.get("cache"),
            "preemptions": run.get("preemptions")}


def merge_runs(out_dir, report):
    try:
        with open(os.path.join(out_dir, "report.json"), encoding="utf-8") as fh:
            old = json.load(fh)
    except (OSError, ValueError):
        old = None
    earlier = old.get("runs") if isinstance(old, dict) and isinstance(old.get("runs"), list) else []
    return earlier + [run_entry(report)]


def print_error_count(report, stream):
    """The bad rows first, before the summary, with where the first one is and what to do next."""
    n = report.get("errors") or 0
    if not n:
        return
    first = (report.get("error_examples") or [{}])[0]
    where = f"{first.get('where')}: row {first.get('id')!r}: " if first.get("where") else ""
    accepted = report["job"].get("on_error") == "continue"
    print(f"colibri: {n} of {report['rows']} rows failed (first: {where}{first.get('error')}); each has an "
          f"`error` output row, and report.json `error_examples` lists them. "
          + ("job.on_error: continue accepts them (exit 0)." if accepted else
             f"Exit code {EXIT_ROW_ERRORS}: fix those rows and rerun with --restart, or set job.on_error: continue "
             f"to accept them."), file=stream, flush=True)


EXIT_ROW_ERRORS = 3


def error_examples(out_dir, manifest, limit=20):
    """The first `limit` bad rows over the shards written: {id, where (file:line), error}."""
    out = []
    for name in manifest.shard_names:
        info = manifest.done.get(name) or {}
        out += info.get("error_examples") or []
    return out[:limit]


def _groups(pending, job):
    """Consecutive shards with >= 4 x max_num_seqs rows together (one llm call each), so small shards
    do not drain the batch at every boundary; one shard at a time with `on_error: fail` (stop there)."""
    target = 0 if job.on_error == "fail" else 4 * job.max_num_seqs
    group, rows = [], 0
    for shard in pending:
        group.append(shard)
        rows += shard.rows
        if rows >= target:
            yield group
            group, rows = [], 0
    if group:
        yield group


def build_report(cfg, manifest, shards_this_run, elapsed_s):
    done = list(manifest.done.values())
    reasons = {}
    for info in done:
        for k, v in info.get("finish_reasons", {}).items():
            reasons[k] = reasons.get(k, 0) + v
    generated = sum(i.get("tokens", 0) for i in done)
    return {"job": {"kind": cfg.job.kind, "config": os.path.abspath(cfg.source) if cfg.source else None,
                    "on_error": cfg.job.on_error},
            "rows": sum(i["rows"] for i in done), "errors": sum(i["errors"] for i in done),
            "generated_tokens": generated, "input_tokens": sum(i.get("input_tokens", 0) for i in done),
            "finish_reasons": reasons,
            "shards": {"total": len(manifest.shard_names), "written_this_run": shards_this_run},
            "complete": len(manifest.done) == len(manifest.shard_names),
            "elapsed_s_this_run": elapsed_s}
