"""Progress display: a bar on a terminal, plain log lines otherwise, nothing with `none`."""
import io

from colibri_dist.jobs.run.progress import JobProgress, choose_mode


class FakeTty(io.StringIO):
    def isatty(self):
        return True


def test_auto_mode_picks_bar_on_a_tty_and_log_lines_otherwise():
    assert choose_mode("auto", FakeTty()) == "bar"
    assert choose_mode("auto", io.StringIO()) == "log"
    assert choose_mode("none", FakeTty()) == "none"


def test_bar_shows_tokens_rate_and_cache_hit_rate():
    out = FakeTty()
    p = JobProgress(1000, mode="auto", stream=out)
    for _ in range(10):
        p.advance(100, 0.5)
    p.close()
    text = out.getvalue()
    assert "1.00k/1.00k" in text and "tok/s" in text and "cache hit 50.0%" in text


def test_log_lines_have_tokens_rate_eta_and_hit_rate():
    out = io.StringIO()
    p = JobProgress(300, done_tokens=100, mode="auto", log_every_s=3600, stream=out)
    p.advance(100, None)          # not yet due: no line
    assert out.getvalue() == ""
    p.advance(100, 0.25)          # finished: always logged
    line = out.getvalue().strip()
    assert "300/300 tokens (100%)" in line and "tok/s" in line and "ETA" in line and "cache hit 25.0%" in line


def test_none_mode_is_silent():
    out = FakeTty()
    p = JobProgress(10, mode="none", stream=out)
    p.advance(10, 1.0)
    p.message("hello")
    p.close()
    assert out.getvalue() == ""


def test_a_log_line_before_any_progress_says_eta_unknown_not_nan():
    import io
    out = io.StringIO()
    p = JobProgress(300, done_tokens=0, mode="auto", log_every_s=3600, stream=out)
    p.log_line()
    assert "ETA ?" in out.getvalue() and "nan" not in out.getvalue()


def test_shards_written_together_at_the_end_log_one_line_not_one_each():
    import io
    from types import SimpleNamespace
    from colibri_dist.jobs.run.progress import RequestProgress
    out = io.StringIO()
    p = RequestProgress(8, mode="log", log_every_s=3600, stream=out)
    for _ in range(8):
        p.on_token(SimpleNamespace(finish_reason="stop"))
    for _ in range(4):                       # four shards of 2 rows written in the same instant
        p.rows_done(2, finished=2)
    assert out.getvalue().count("8/8 requests") == 1
