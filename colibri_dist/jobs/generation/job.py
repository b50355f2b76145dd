"""Job kinds `generate` and `score`: rows -> prompts -> one LLM call per group of shards -> output rows.

Role in the data flow: the runner (runner.py) plans the shards with `count_rows` and `settings()` before any
model opens, then opens the whole LLM (`open_engine`: llm.open_job_llm -> front.open_llm) and hands each
group of shards to `run_group`: rows -> prompts (rows.py) -> ONE llm.generate / llm.score call over all of
the group's good rows (the scheduler batches them continuously) -> one JSONL output row per input row,
each shard written atomically. `run_objects` does the same for row dicts (a Ray Data batch, batch.py).

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
A generate row that finishes is kept at once in the shard's partial file (run/partial.py): a resume runs
only the others.
"""
import contextlib
import inspect
import json
import os

from ...errors import InvalidArgument, NumericalError
from ...fsutil import atomic_write
from ..reports import generation as report
from ..reports.generation_plots import figures
from ..reports.metrics import Meter
from .each import generate_each
from .rows import INPUT_EXTS, RowReader, check_sampling_defaults, count_rows, row_error_text

PER_ROW = dict(errors="return", use_tqdm=False)    # a bad row is that row's error; the job has its own progress
EXAMPLES_PER_SHARD = 5


class _GenerationKind:
    kind = None
    input_exts, input_hint = INPUT_EXTS, None
    unit, shards_word = "requests", "shard(s)"
    run_keys = ("throughput", "latency", "cache", "preemptions")
    count_rows = staticmethod(count_rows)
    report_fields = staticmethod(report.fields)
    summary_rows = staticmethod(report.summary_rows)
    figures, workers = staticmethod(figures), staticmethod(report.workers)

    def __init__(self, cfg, llm=None):
        self.cfg, self.job, self.llm = cfg, cfg.job, None
        if llm is not None:
            self.attach(llm)

    @classmethod
    def check(cls, cfg):
        """What a generation job checks before touching the disk (ConfigError naming file:line:column)."""
        if cfg.job.kind == "generate":
            check_sampling_defaults(cfg.job)

    @classmethod
    def demo(cls, cfg, log):
        """`model: null`: the demo LLM and its prompts -> (model, prompts dir, extra: the task accuracy)."""
        from ...demos.llm_cache import accuracy_of_outputs, ensure_demo_llm
        art = ensure_demo_llm(cfg.demo_llm, log=log)
        return art.model, art.data_dir, lambda out, paths: {"task_accuracy": accuracy_of_outputs(paths, out)}

    @classmethod
    @contextlib.contextmanager
    def opened(cls, cfg, model_path, openers):
        """Nothing to open for the plan: the rows are counted without the model (it opens after the plan)."""
        yield cls(cfg)

    def settings(self):
        """Its part of the resume signature (run/signature.py): what decides how rows are read and sampled."""
        j = self.job
        return {"job.kv_cache_dtype": j.kv_cache_dtype, "job.kv_cache_bytes": j.kv_cache_bytes,
                "job.max_seq_len": j.max_seq_len, "job.sampling_params": dict(j.sampling_params), "job.seed": j.seed,
                "job.chat_template_timeout_s": j.chat_template_timeout_s,
                "job.chat_template_max_chars": j.chat_template_max_chars,
                "job (row fields)": [j.prompt_field, j.messages_field, j.prompt_ids_field, j.sampling_field,
                                     j.id_field]}

    def open_engine(self, cfg, offload_dir, log, openers):
        if openers.llm is not None:
            return openers.llm(cfg)
        from . import llm
        return llm.open_job_llm(cfg, offload_dir, log=log)

    def attach(self, llm):
        self.llm = llm
        self.reader = RowReader(self.job, self.kind, getattr(llm, "tokenizer", None),
                                lambda: getattr(llm, "chat_template", None),
                                model_defaults=getattr(llm, "generation_defaults", None))

    def meter(self, llm, heat):
        from ..run.executors import view_of
        cache = getattr(llm, "cache", None)
        return Meter(view_of(llm, self.job.threads), heat=heat, kv_blocks=getattr(cache, "n_blocks", None),
                     prefix=getattr(cache, "prefix", None))

    def size(self, shard, info=None):
        return shard.rows

    def groups(self, pending):
        """Consecutive shards with >= 4 x max_num_seqs rows together (one llm call each), so small shards
        do not drain the batch at every boundary; one shard at a time with `on_error: fail` (stop there)."""
        target = 0 if self.job.on_error == "fail" else 4 * self.job.max_num_seqs
        group, rows = [], 0
        for shard in pending:
            group.append(shard)
            rows += shard.rows
            if rows >= target:
                yield group
                group, rows = [], 0
        if group:
            yield group

    def run_group(self, shards, out_dir, meter=None, progress=None, partial=None):
        """Generate for the rows of several shards in ONE llm call (the scheduler keeps its batch full
        across shard boundaries), then write each shard atomically; -> [(shard, output name, info)].
        partial: PartialRows (run/partial.py): rows an interrupted run finished are taken from it, not run
        again, and each row finishing now is added to it."""
        per_shard = [self.reader.read(s) for s in shards]
        kept = _restore(shards, per_shard, partial)
        for rows in per_shard:
            self._fail_fast(rows)
        good = [r for rows in per_shard for r in rows if r.error is None and id(r) not in kept]
        results = self._run(good, progress, meter, self._keeper(good, shards, per_shard, partial)) if good else []
        if meter is not None:
            meter.add_results(results)
        result_of = _results(good, results)
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
        result_of = _results(good, self._run(good, None, None) if good else [])
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
    partial_rows = True              # rows finish one by one: each is kept at once for a resume

    def _run(self, rows, progress, meter, on_done=None):
        return generate_each(self.llm, [r.prompt_ids for r in rows], [r.params for r in rows], on_done,
                             on_token=progress and progress.on_token, on_step=meter and meter.on_step)

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
    partial_rows = False             # a score row is one prefill; its shard is written whole

    def _run(self, rows, progress, meter, on_done=None):
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


def _results(good, results):
    """{id(row): its result}; a result's error becomes its row's error (the fault kept for on_error: fail)."""
    for r, res in zip(good, results):
        if res.error is not None:
            r.error, r.fault = row_error_text(res.error), res.error
    return {id(r): res for r, res in zip(good, results)}


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
