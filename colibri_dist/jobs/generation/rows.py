"""Input rows of the `generate` and `score` jobs: JSONL (or Parquet) rows -> prompts, params, errors.

Role in the data flow: the generation job kinds read a shard's rows here. A row has one of
`prompt` (text, encoded with the model's tokenizer and its special tokens), `messages` (a
conversation rendered with the model's chat template, encoded without added special tokens) or
`prompt_token_ids`, an optional `id` (default: the row's index in its file) and optional per-row
`sampling_params` (over the job's defaults). Everything wrong with one row (invalid UTF-8 or JSON,
no or several prompt fields (a null field counts as absent), bad types, an unknown sampling key, a tokenizer failure) becomes that
row's `error`; the model's own checks (empty, too long, token id outside the vocabulary) come back
from generation the same way.
"""
import json
import re
from dataclasses import dataclass

from ...errors import ColibriError, ConfigError, InvalidArgument
from ...generate.params import SamplingParams
from ...generate.safe_text import TemplateLimits, safe_encode
from ...generate.sampler import derive_seed

INPUT_EXTS = (".jsonl", ".parquet")


@dataclass
class Row:
    index: int                   # row number in its file (0-based, blank lines not counted)
    where: str                   # "file:line" (JSONL) or "file:row N" (Parquet)
    id: object
    prompt_ids: list | None = None
    params: SamplingParams | None = None
    error: str | None = None
    fault: Exception | None = None   # the exception behind a generation error (on_error: fail raises its kind)


def count_rows(path):
    if path.endswith(".parquet"):
        return len(_parquet_rows(path))
    with open(path, "rb") as fh:
        return sum(1 for line in fh if line.strip())


def iter_objects(path, start, stop):
    """-> (index, where, dict | None, error | None) for rows start..stop-1 of a file."""
    if path.endswith(".parquet"):
        for i, obj in enumerate(_parquet_rows(path)[start:stop], start):
            yield i, f"{path}:row {i}", obj, None
        return
    index = -1
    with open(path, "rb") as fh:
        for line_no, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            index += 1
            if index < start:
                continue
            if index >= stop:
                break
            yield (index, f"{path}:{line_no}") + _parse_line(raw)


def _parse_line(raw):
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"invalid UTF-8 at byte {exc.start} of the line"
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, f"not valid JSON ({exc})"
    if not isinstance(obj, dict):
        return None, f"expected a JSON object per line, got {type(obj).__name__}"
    return obj, None


def _parquet_rows(path):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InvalidArgument(f"{path}: Parquet input needs the `pyarrow` package (pip install pyarrow)") from None
    return pq.read_table(path).to_pylist()


def check_sampling_defaults(job):
    """job.sampling_params validated like SamplingParams -> dict; ConfigError naming file:line:column."""
    data = dict(job.sampling_params)
    for key in data:
        try:
            SamplingParams.from_dict({key: data[key]})
        except InvalidArgument as exc:
            where = getattr(job.sampling_params, "where", {}).get(key) or getattr(job.sampling_params, "at", "")
            raise ConfigError(f"{where}: job.sampling_params.{key}: {exc}") from None
    try:
        SamplingParams.from_dict(data)
    except InvalidArgument as exc:
        raise ConfigError(f"{getattr(job.sampling_params, 'at', '')}: job.sampling_params: {exc}") from None
    return data


_REQUEST_PREFIX = re.compile(r"^request '?[0-9]+'?: ")       # LLM.generate's default ids: '0', '1', ...


def row_error_text(exc):
    """A generation error as a row's `error`: without the `request N: ` the LLM puts first (N is the row's
    place in one llm call, which depends on the batching and on where a resume started; the output row
    already carries the row's id, the report its file:line)."""
    return _REQUEST_PREFIX.sub("", str(exc), count=1)


class RowReader:
    """Turns a shard's rows into Row records for one job kind ("generate" or "score")."""

    def __init__(self, job, kind, tokenizer=None, chat_template=None, model_defaults=None):
        """chat_template: a ChatTemplate, None, or a callable returning one (asked on the first
        `messages` row; an InvalidArgument it raises, e.g. "no chat template", is that row's error).
        model_defaults: the model's generation_config sampling defaults, under the job's."""
        self.job, self.kind = job, kind
        self.tokenizer, self._template = tokenizer, chat_template
        self.defaults = {**(model_defaults or {}), **check_sampling_defaults(job)} if kind == "generate" else {}
        self.limits = TemplateLimits.from_settings(job, "job")

    def chat_template(self):
        if callable(self._template) and not hasattr(self._template, "render"):
            self._template = self._template()
        return self._template

    def read(self, shard):
        return [self._row(i, where, obj, err) for i, where, obj, err in iter_objects(shard.path, shard.start,
                                                                                      shard.stop)]

    def parse(self, index, where, obj):
        """One row given as a dict (not read from a file) -> Row."""
        if not isinstance(obj, dict):
            return self._row(index, where, None, f"expected a mapping per row, got {type(obj).__name__}")
        return self._row(index, where, obj, None)

    def _row(self, index, where, obj, err):
        row = Row(index, where, index)
        if err is not None:
            row.error = err
            return row
        row.id = obj.get(self.job.id_field, index)
        try:
            row.prompt_ids = self._prompt_ids(obj)
            if self.kind == "generate":
                row.params = self._params(obj, row.id)
        except (ColibriError, ValueError, TypeError) as exc:
            row.error, row.prompt_ids = str(exc), None
        return row

    def _prompt_ids(self, obj):
        j = self.job
        fields = [f for f in (j.prompt_field, j.messages_field, j.prompt_ids_field) if obj.get(f) is not None]
        if self.kind == "score" and j.messages_field in fields:
            raise InvalidArgument(f"score rows take '{j.prompt_field}' or '{j.prompt_ids_field}', "
                                  f"not '{j.messages_field}'")
        if len(fields) != 1:
            what = "no" if not fields else "more than one"
            raise InvalidArgument(f"row has {what} prompt field (exactly one of '{j.prompt_field}', "
                                  f"'{j.messages_field}', '{j.prompt_ids_field}')")
        value = obj[fields[0]]
        if fields[0] == j.prompt_ids_field:
            if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
                raise InvalidArgument(f"'{j.prompt_ids_field}' must be a list of integer token ids")
            return value
        if fields[0] == j.messages_field:
            template = self.chat_template()
            if template is None:
                raise InvalidArgument(f"'{j.messages_field}' needs a chat template, and the model has none")
            return self._encode(template.render(value, add_generation_prompt=True, limits=self.limits), False)
        if not isinstance(value, str):
            raise InvalidArgument(f"'{j.prompt_field}' must be a string, got {type(value).__name__}")
        return self._encode(value, True)

    def _encode(self, text, add_special_tokens):
        if self.tokenizer is None:
            raise InvalidArgument("text prompts need the model's tokenizer, and none was found")
        return safe_encode(self.tokenizer, text, None, add_special_tokens)

    def _params(self, obj, row_id):
        own = obj.get(self.job.sampling_field)
        if own is not None and not isinstance(own, dict):
            raise InvalidArgument(f"'{self.job.sampling_field}' must be a mapping, got {type(own).__name__}")
        params = SamplingParams.from_dict({**self.defaults, **(own or {})})
        if params.seed is None:
            params = SamplingParams.from_dict({**params.to_dict(), "seed": derive_seed(self.job.seed, row_id)})
        return params
