"""Job progress: a tqdm bar on a terminal, plain timestamped log lines otherwise.

Role in the data flow: the runner creates one `JobProgress(total_tokens, ...)`
and calls `advance(tokens, hit_rate)` after each batch; it shows tokens,
tokens/s, ETA and the cache hit rate. Generation jobs use `RequestProgress`, fed per token. `report.progress` picks the mode:
auto (bar on a tty, log lines when piped), bar, log or none.
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


class JobProgress:
    def __init__(self, total_tokens, done_tokens=0, mode="auto", log_every_s=5.0, stream=None):
        self.stream = stream or sys.stderr
        self.mode = choose_mode(mode, self.stream)
        self.total = total_tokens
        self.done = done_tokens
        self.start_done = done_tokens
        self.log_every_s = log_every_s
        self.t0 = time.perf_counter()
        self.last_log = self.t0
        self.bar = None
        if self.mode == "bar":
            from tqdm import tqdm
            self.bar = tqdm(total=total_tokens, initial=done_tokens, unit="tok", unit_scale=True,
                            file=self.stream, desc="colibri run", ncols=_columns())

    def advance(self, tokens, hit_rate=None):
        self.done += tokens
        if self.bar is not None:
            if hit_rate is not None:
                self.bar.set_postfix_str(f"cache hit {hit_rate:.1%}", refresh=False)
            self.bar.update(tokens)
        elif self.mode == "log":
            now = time.perf_counter()
            if now - self.last_log >= self.log_every_s or self.done >= self.total:
                self.last_log = now
                self.log_line(hit_rate)

    def log_line(self, hit_rate=None):
        elapsed = time.perf_counter() - self.t0
        rate = (self.done - self.start_done) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        hit = "n/a" if hit_rate is None else f"{hit_rate:.1%}"
        pct = 100.0 * self.done / self.total if self.total else 100.0
        print(f"[{time.strftime('%H:%M:%S')}] {self.done}/{self.total} tokens ({pct:.0f}%), "
              f"{rate:,.0f} tok/s, ETA {_eta(eta)}, cache hit {hit}", file=self.stream, flush=True)

    def message(self, text):
        if self.mode == "none":
            return
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class RequestProgress:
    """Progress of a generation job as it happens: requests finished, generated tokens/s and ETA, updated
    on every token (`on_token`, the scheduler's per-token callback) and not only when a shard group is
    written: a bar on a tty (redrawn at most every `BAR_EVERY_S`), else a log line every `log_every_s`."""
    BAR_EVERY_S = 0.2

    def __init__(self, total_rows, done_rows=0, mode="auto", log_every_s=5.0, stream=None):
        self.stream = stream or sys.stderr
        self.mode = choose_mode(mode, self.stream)
        self.total, self.done, self.start_done = total_rows, done_rows, done_rows
        self.in_flight_done = 0              # requests finished whose shard is not written yet
        self.tokens, self.log_every_s = 0, log_every_s
        self.t0 = self.last_log = self.last_bar = time.perf_counter()
        self.bar, self._last_state = None, None
        if self.mode == "bar":
            from tqdm import tqdm
            self.bar = tqdm(total=total_rows, initial=done_rows, unit="req", file=self.stream,
                            desc="colibri run", ncols=_columns(), mininterval=0)

    def finished(self):
        return min(self.total, self.done + self.in_flight_done)

    def on_token(self, event):
        self.tokens += 1
        if event.finish_reason is not None:
            self.in_flight_done += 1
        self._tick()

    def rows_done(self, n, finished=None):
        """A shard of n rows is written (`finished` of them had been counted by on_token as they ended)."""
        self.done += n
        self.in_flight_done = max(0, self.in_flight_done - (n if finished is None else finished))
        self._tick(force=True)

    def _tick(self, force=False):
        now = time.perf_counter()
        if self.bar is not None:
            if force or now - self.last_bar >= self.BAR_EVERY_S:
                self.last_bar = now
                self.bar.n = self.finished()
                self.bar.set_postfix_str(f"{self.tokens:,} tok, {self._rate(now):,.0f} tok/s", refresh=False)
                self.bar.refresh()
        elif self.mode == "log" and (force or now - self.last_log >= self.log_every_s):
            line = self._line_state()
            if line != self._last_state:   # the shards written at the end: one line, not four
                self.last_log, self._last_state = now, line
                self.log_line(now)

    def _line_state(self):
        return self.finished(), self.tokens

    def _rate(self, now):
        return self.tokens / (now - self.t0) if now > self.t0 else 0.0

    def log_line(self, now):
        done = self.finished()
        rows_rate = (done - self.start_done) / (now - self.t0) if now > self.t0 else 0.0
        eta = (self.total - done) / rows_rate if rows_rate > 0 else float("nan")
        print(f"[{time.strftime('%H:%M:%S')}] {done}/{self.total} requests, {self.tokens} tokens generated, "
              f"{self._rate(now):,.0f} tok/s, ETA {_eta(eta)}", file=self.stream, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _eta(seconds):
    """'12s', or '?' before anything finished (no rate yet: it printed 'ETA nans')."""
    return f"{seconds:.0f}s" if seconds == seconds and seconds != float("inf") else "?"
