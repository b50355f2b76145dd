"""Job progress, every kind: a tqdm bar on a terminal, plain timestamped log lines otherwise.

Role in the data flow: the runner creates one `Progress(total, done, unit=kind.unit, ...)`. A kind counting
tokens (moe-layer, token-classification) calls `advance(tokens, hit_rate)` after each batch: tokens, tokens/s,
ETA and the cache hit rate. A kind counting requests (generate, score) hands `on_token` to the scheduler (one
call per generated token; a request that ends counts as finished at once) and the runner calls
`written(info)` per shard written: requests finished, generated tokens/s, ETA. `report.progress` picks the
mode: auto (bar on a tty, log lines when piped), bar, log or none. A line is printed when `log_every_s` has
passed or the count is complete, never twice for the same state.
"""
import sys
import time


def choose_mode(setting, stream=None):
    stream = stream or sys.stderr
    if setting != "auto":
        return setting
    return "bar" if hasattr(stream, "isatty") and stream.isatty() else "log"


def _columns():
    """Terminal width, or 100 when the terminal reports none (e.g. a pty of size 0x0)."""
    import shutil
    cols = shutil.get_terminal_size((0, 0)).columns
    return cols if cols > 20 else 100


class Progress:
    BAR_EVERY_S = 0.2
    unit = "tokens"                      # or "requests"

    def __init__(self, total, done=0, mode="auto", log_every_s=5.0, stream=None, unit=None):
        self.unit = unit or self.unit
        self.stream = stream or sys.stderr
        self.mode = choose_mode(mode, self.stream)
        self.total, self.done, self.start_done = total, done, done
        self.in_flight_done = 0              # requests finished whose shard is not written yet
        self.tokens, self.hit_rate, self.log_every_s = 0, None, log_every_s
        self.t0 = self.last_log = self.last_bar = time.perf_counter()
        self.bar, self._last_state = None, None
        if self.mode == "bar":
            from tqdm import tqdm
            tokens = self.unit == "tokens"
            self.bar = tqdm(total=total, initial=done, unit="tok" if tokens else "req", unit_scale=tokens,
                            file=self.stream, desc="colibri run", ncols=_columns(), mininterval=0)

    def finished(self):
        return min(self.total, self.done + self.in_flight_done)

    def advance(self, tokens, hit_rate=None):
        """A batch of `tokens` went through (the kinds counting tokens)."""
        self.done += tokens
        self.tokens += tokens
        self.hit_rate = hit_rate
        self._tick(force=self.done >= self.total)

    def on_token(self, event):
        """The scheduler's per-token callback (the kinds counting requests)."""
        self.tokens += 1
        if event.finish_reason is not None:
            self.in_flight_done += 1
        self._tick()

    def rows_done(self, n, finished=None):
        """A shard of n rows is written (`finished` of them had been counted by on_token as they ended)."""
        self.done += n
        self.in_flight_done = max(0, self.in_flight_done - (n if finished is None else finished))
        self._tick(force=True)

    def written(self, info):
        """The runner wrote a shard (its manifest info); a count of tokens moved with every batch already."""
        if self.unit == "requests":
            self.rows_done(info["rows"], finished=info["rows"] - info.get("errors", 0))

    def _tick(self, force=False):
        now = time.perf_counter()
        if self.bar is not None:
            if force or now - self.last_bar >= self.BAR_EVERY_S:
                self.last_bar = now
                self.bar.n = self.finished()
                self.bar.set_postfix_str(self._postfix(now), refresh=False)
                self.bar.refresh()
        elif self.mode == "log" and (force or now - self.last_log >= self.log_every_s):
            state = (self.finished(), self.tokens)
            if state != self._last_state:   # the shards written at the end: one line, not four
                self.last_log, self._last_state = now, state
                self.log_line(now)

    def _rate(self, now):
        return self.tokens / (now - self.t0) if now > self.t0 else 0.0

    def _postfix(self, now):
        if self.unit == "requests":
            return f"{self.tokens:,} tok, {self._rate(now):,.0f} tok/s"
        return "" if self.hit_rate is None else f"cache hit {self.hit_rate:.1%}"

    def log_line(self, now=None):
        now = now or time.perf_counter()
        done = self.finished()
        rate = (done - self.start_done) / (now - self.t0) if now > self.t0 else 0.0
        eta = _eta((self.total - done) / rate if rate > 0 else float("nan"))
        if self.unit == "requests":
            text = (f"{done}/{self.total} requests, {self.tokens} tokens generated, {self._rate(now):,.0f} tok/s, "
                    f"ETA {eta}")
        else:
            hit = "n/a" if self.hit_rate is None else f"{self.hit_rate:.1%}"
            pct = 100.0 * done / self.total if self.total else 100.0
            text = f"{done}/{self.total} tokens ({pct:.0f}%), {rate:,.0f} tok/s, ETA {eta}, cache hit {hit}"
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=self.stream, flush=True)

    def message(self, text):
        """A line between the progress lines (above the bar on a terminal); nothing with `none`."""
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        elif self.mode != "none":
            print(text, file=self.stream, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.n = self.finished()
            self.bar.close()
            self.bar = None


class JobProgress(Progress):
    """Progress counted in tokens (the name the token kinds' callers and tests use)."""

    def __init__(self, total_tokens, done_tokens=0, **kwargs):
        super().__init__(total_tokens, done_tokens, unit="tokens", **kwargs)


class RequestProgress(Progress):
    """Progress counted in requests (generate, score)."""
    unit = "requests"


def _eta(seconds):
    """'12s', or '?' before anything finished (no rate yet: it printed 'ETA nans')."""
    return f"{seconds:.0f}s" if seconds == seconds and seconds != float("inf") else "?"
