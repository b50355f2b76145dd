"""The chat-template worker processes (generate/template_process.py): one per concurrent rendering, replaced when
killed (by its time bound or from outside), never shared with a forked child, and the text round-trips exactly."""
import os
import signal
import threading

import pytest

from colibri_dist.errors import InvalidArgument
from colibri_dist.generate import template_process as tp
from colibri_dist.generate.chat import ChatTemplate
from colibri_dist.generate.safe_text import TemplateLimits

OK = [{"role": "user", "content": "one two"}]
ECHO = "{% for m in messages %}{{ m.role }}: {{ m.content }}|{% endfor %}"
SPIN = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


def test_text_round_trips_exactly_lone_surrogates_included():
    content = "héllo \ud800 日本語 \x00 \U0001f642 \"q\" \\ </s>"
    assert ChatTemplate(ECHO).render([{"role": "user", "content": content}]) == f"user: {content}|"


def test_a_killed_idle_worker_is_replaced():
    t = ChatTemplate(ECHO)
    assert t.render(OK) == "user: one two|"
    pids = tp.idle_pids()
    assert pids
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    assert t.render(OK) == "user: one two|"
    assert not set(pids) & set(tp.idle_pids())


def test_the_time_bound_kills_the_worker_and_the_next_rendering_works():
    spin = ChatTemplate(SPIN, source="m.colibri", limits=TemplateLimits(timeout_s=0.5))
    before = set(tp.idle_pids())
    with pytest.raises(InvalidArgument, match=r"m.colibri: chat template: rendering took longer than 0.5 s"):
        spin.render(OK)
    assert ChatTemplate(ECHO).render(OK) == "user: one two|"
    assert len(before - set(tp.idle_pids())) == 1          # the spinning one is gone, the others stay


def test_a_spinning_template_does_not_hold_up_another_rendering():
    """Each concurrent rendering has its own worker: the neighbour finishes while the spin still runs."""
    spin = ChatTemplate(SPIN, limits=TemplateLimits(timeout_s=5.0))
    errors = []
    th = threading.Thread(target=lambda: errors.append(pytest.raises(InvalidArgument, spin.render, OK)))
    th.start()
    try:
        assert ChatTemplate(ECHO).render(OK) == "user: one two|"
        assert th.is_alive()
    finally:
        th.join(60)
    assert errors and "took longer than 5 s" in str(errors[0].value)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_its_own_workers():
    t = ChatTemplate(ECHO)
    assert t.render(OK) == "user: one two|"
    parent_pids = set(tp.idle_pids())
    pid = os.fork()
    if pid == 0:                                      # the child: exit code 0 only if it used a worker of its own
        try:
            ok = t.render(OK) == "user: one two|" and not parent_pids & set(tp.idle_pids())
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert set(tp.idle_pids()) == parent_pids and t.render(OK) == "user: one two|"
