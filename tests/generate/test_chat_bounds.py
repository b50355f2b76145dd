"""Chat templates that raise, loop forever or grow without end (issue 21 items 5 and 7; issue 30 item 5).

Every Python exception a template raises is that conversation's error (InvalidArgument naming the request
and the template), the others go on; rendering runs in a worker process (template_process.py) bounded in time
(TemplateLimits.timeout_s: the worker is killed), in the text written (TemplateLimits.max_chars) and in memory
(RLIMIT_AS: 64 MiB + 16 bytes per character of max_chars), with the overrun a request error naming the bound;
the caller's RAM stays bounded while a bound is hit (the 3 GB string is never built, not even in the worker).
"""
import json
import threading
import tracemalloc

import pytest

from colibri_dist.errors import InvalidArgument
from colibri_dist.generate import SamplingParams
from colibri_dist.generate import template_process as tp
from colibri_dist.generate.api import chat
from colibri_dist.generate.chat import ChatTemplate
from colibri_dist.generate.safe_text import TemplateLimits

from gen_fake_model import FakeStepModel
from gen_tokenizers import byte_level_bpe

TOK = byte_level_bpe()
OK = [{"role": "user", "content": "one two"}]
BOOM = [{"role": "user", "content": "boom"}]

# snippet -> the exception class it raises (rendered only for the conversation whose content is "boom")
RAISING = {
    "{{ 1 // 0 }}": "ZeroDivisionError",
    "{{ 1 % 0 }}": "ZeroDivisionError",
    "{{ range(10)|slice(0)|list }}": "ZeroDivisionError",
    "{{ 2.0 ** 10000 }}": "OverflowError",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}": "RecursionError",
    "{% include messages %}": "TypeError",
    "{% import 'x' as y %}": "TypeError",
    "{{ '%d' % 'x' }}": "TypeError",
    "{{ [1, 'a']|sort }}": "TypeError",
    "{{ 10 ** 5000 }}": "ValueError",
    "{{ '{x}'.format() }}": "KeyError",
    "{{ '{0}'.format() }}": "IndexError",
    "{{ 'é'.encode('ascii') }}": "UnicodeEncodeError",
    "{{ 'x'.encode('nope') }}": "LookupError",
    "{{ (1e308 * 10)|int }}": "OverflowError",
}


def _template(snippet):
    return ChatTemplate("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                        "{% if messages[0].content == 'boom' %}" + snippet + "{% endif %}assistant:",
                        source="m.colibri")


def _chat(template, convs, **kw):
    model = FakeStepModel(vocab_size=TOK.get_vocab_size())
    return chat(model, TOK, template, convs, SamplingParams(max_tokens=3, temperature=0), **kw)


@pytest.mark.parametrize("snippet", list(RAISING), ids=[f"{v}-{i}" for i, v in enumerate(RAISING.values())])
def test_a_raising_template_is_that_requests_error(snippet):
    t = _template(snippet)
    out = _chat(t, [OK, BOOM, OK], request_ids=["a", "b", "c"])
    assert isinstance(out[1].error, InvalidArgument) and out[1].token_ids == []
    msg = str(out[1].error)
    assert msg.startswith("request 'b': m.colibri: chat template") and RAISING[snippet] in msg, msg
    alone = _chat(t, [OK])[0]
    for i in (0, 2):
        assert out[i].error is None and out[i].token_ids == alone.token_ids and len(alone.token_ids) == 3


class _Raises:
    """A message value whose text raises `exc` (what an API caller's object or a tool can do)."""

    def __init__(self, exc):
        self.exc = exc

    def __str__(self):
        raise self.exc


def test_values_that_are_not_json_data_are_request_errors():
    """The worker gets JSON data: an object (even one whose str() raises) is that conversation's error."""
    t = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}", source="m.colibri")
    cyclic = []
    cyclic.append(cyclic)
    for value in (_Raises(MemoryError()), _Raises(RuntimeError("r")), object(), {1, 2}, cyclic):
        out = _chat(t, [OK, [{"role": "user", "content": value}], OK])
        msg = str(out[1].error)
        assert msg.startswith("request '1': m.colibri: chat template input must be JSON data"), msg
        assert out[0].error is None and out[2].error is None


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3)])
def test_interrupts_still_propagate(exc, monkeypatch):
    """An interrupt while waiting for the worker propagates; that worker is killed, the next rendering works."""
    t = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
    used, real = [], tp._Worker.ask

    def interrupted(self, request, deadline):
        used.append(self.proc)
        real(self, request, deadline)
        raise exc
    monkeypatch.setattr(tp._Worker, "ask", interrupted)
    with pytest.raises(type(exc)):
        _chat(t, [OK])
    monkeypatch.undo()
    assert used and used[0].poll() is not None
    assert t.render(OK) == "one two"


def test_a_template_that_cannot_compile_is_invalid_argument():
    with pytest.raises(InvalidArgument, match="m.colibri: chat template cannot be compiled.*RecursionError"):
        ChatTemplate("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", source="m.colibri")


def test_limits_defaults_and_checks():
    assert TemplateLimits() == TemplateLimits(timeout_s=2.0, max_chars=4 << 20)
    for bad in ({"timeout_s": 0}, {"timeout_s": float("nan")}, {"timeout_s": "1"}, {"max_chars": 0},
                {"max_chars": 1.5}, {"max_chars": True}):
        with pytest.raises(InvalidArgument, match=list(bad)[0]):
            TemplateLimits(**bad)


# ---------------------------------------------------------------- time

SPIN = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


def test_nested_loops_hit_the_time_bound():
    t = ChatTemplate("{% if messages[0].content == 'boom' %}" + SPIN + "{% endif %}x", source="m.colibri",
                     limits=TemplateLimits(timeout_s=1.0))
    out = _chat(t, [OK, BOOM, OK])
    assert "request '1': m.colibri: chat template: rendering took longer than 1 s (TemplateLimits.timeout_s)" in \
        str(out[1].error)
    assert out[0].error is None and out[2].error is None


@pytest.mark.parametrize("spin", [
    SPIN,
    "{% set s = 'ab' * 500000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
    "{% macro f(n) %}{% for i in range(100000) %}{{ f(n - 1) if n > 5 else '' }}{% endfor %}{% endmacro %}"
    "{{ f(9) }}",
    "{% for i in range(100000) recursive %}{% for j in range(100000) %}{% if j < 0 %}{{ loop([]) }}{% endif %}"
    "{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% set x = j * j %}{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}",
], ids=["range", "string", "macro", "recursive-loop", "set", "output"])
def test_every_loop_form_is_bounded(spin):
    with pytest.raises(InvalidArgument, match="took longer than 0.05 s"):
        ChatTemplate(spin).render(OK, limits=TemplateLimits(timeout_s=0.05))


def test_default_limits_stop_the_dos_template():
    """The issue's template with the defaults (2 s): a daemon thread, so a regression fails instead of hanging."""
    t, got = ChatTemplate(SPIN), []

    def run():
        try:
            t.render(OK)
        except InvalidArgument as exc:
            got.append(exc)
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(60)
    assert not th.is_alive() and got and "took longer than 2 s" in str(got[0])


# ---------------------------------------------------------------- size

GROW = {   # each would build (or write) hundreds of megabytes or more without the bounds, or run for hours
    "out-loops": "{% for i in range(100000) %}{% for j in range(30000) %}x{% endfor %}{% endfor %}",
    "out-value": "{% set s = 'y' * 5000 %}{% for i in range(100000) %}{{ s }}{% endfor %}",
    "macro-buffer": "{% macro m() %}{% for i in range(100000) %}{% for j in range(30000) %}x{% endfor %}{% endfor %}"
                    "{% endmacro %}{% set r = m() %}",
    "set-block": "{% set r %}{% for i in range(100000) %}{% for j in range(30000) %}x{% endfor %}{% endfor %}"
                 "{% endset %}",
    "filter-block": "{% for i in range(100000) %}{% filter upper %}{{ 'x' * 5000 }}{% endfilter %}{% endfor %}",
    "call-block": "{% macro m() %}{{ caller() }}{% endmacro %}{% for i in range(100000) %}{% call m() %}"
                  "{{ 'x' * 5000 }}{% endcall %}{% endfor %}",
    "repeat": "{{ 'x' * 3000000000 }}",
    "repeat-list": "{{ ([1] * 3000000000)|length }}",
    "center-filter": "{{ 'x'|center(3000000000) }}",
    "center-method": "{{ 'x'.center(3000000000) }}",
    "zfill": "{{ '1'.zfill(3000000000) }}",
    "printf": "{{ '%3000000000d' % 1 }}",
    "printf-star": "{{ '%*d' % (3000000000, 1) }}",
    "format-method": "{{ '{:>3000000000}'.format(1) }}",
    "format-nested": "{{ '{:>{w}}'.format(1, w=3000000000) }}",
    "format-filter": "{{ '%3000000000s'|format('x') }}",
    "concat-doubling": "{% set ns = namespace(s='xy') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                       "{% endfor %}{{ ns.s|length }}",
    "plus-doubling": "{% set ns = namespace(s='xy') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
                     "{% endfor %}{{ ns.s|length }}",
    "concat-chain": "{% set s = 'x' * 2000000 %}{% set t = s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s %}"
                    "{% set u = t ~ t ~ t ~ t ~ t ~ t ~ t ~ t ~ t ~ t %}{{ u|length }}",
    "nested-lists": "{% set ns = namespace(x=['ab']) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}"
                    "{% endfor %}{{ ns.x }}",
    "nested-lists-string": "{% set ns = namespace(x=['ab']) %}{% for i in range(60) %}"
                           "{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x|string|length }}",
    "nested-tojson": "{% set ns = namespace(x=['ab']) %}{% for i in range(60) %}"
                     "{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x|tojson|length }}",
    "replace-empty": "{% set s = 'x' * 20000 %}{{ s|replace('', s)|length }}",
    "replace-method": "{% set s = 'x' * 20000 %}{{ s.replace('x', s)|length }}",
    "join-filter": "{% set s = 'x' * 20000 %}{{ ([s] * 20000)|join(s)|length }}",
    "join-method": "{% set s = 'x' * 20000 %}{{ s.join([s] * 20000)|length }}",
    "join-generator": "{% set s = 'x' * 50000 %}{{ range(10000)|map('string')|join(s)|length }}",
    "indent": "{% set s = 'x\n' * 20000 %}{{ s|indent(s)|length }}",
    "indent-width": "{{ 'a\nb'|indent(3000000000)|length }}",
    "wordwrap": "{% set s = 'x ' * 20000 %}{{ s|wordwrap(1, wrapstring=s)|length }}",
    "tojson-indent": "{{ range(1000)|list|tojson(indent=3000000)|length }}",
    "expandtabs": "{{ ('\t' * 4000).expandtabs(1000000)|length }}",
    "translate": "{% set s = 'x' * 20000 %}{{ s.translate({120: s})|length }}",
    "batch-fill": "{{ [1]|batch(3000000000, 'x')|list|length }}",
    "slice-fill": "{{ range(3)|slice(3000000000, 'x')|list|length }}",
    "sum-lists": "{{ ([[1] * 4000] * 4000)|sum(start=[])|length }}",
    "lipsum": "{{ lipsum(100000)|length }}",
    "urlize": "{% set s = 'x' * 100000 %}{{ ('http://a.com ' * 1500)|urlize(target=s)|length }}",
    "list-of-str": "{{ ('x' * 20000)|list|join(' ' * 20000)|length }}",
    "method-in-loop": "{% for m in messages %}{{ m.content.ljust(3000000000) }}{% endfor %}",
    "method-in-macro": "{% macro f() %}{{ 'x'.center(3000000000) }}{% endmacro %}{% for m in messages %}{{ f() }}"
                       "{% endfor %}",
    "lipsum-in-loop": "{% for m in messages %}{{ lipsum(100000)|length }}{% endfor %}",
    "format-in-loop": "{% for m in messages %}{{ '{:>{w}}'.format(1, w=3000000000) }}{% endfor %}",
    "compare-shared": "{% set ns = namespace(a=['x'], b=['x']) %}{% for i in range(60) %}{% set ns.a = [ns.a, ns.a] %}"
                      "{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}",
    "plus-lists": "{% set ns = namespace(l=[[1] * 100]) %}{% for i in range(100000) %}{% set ns.l = ns.l + ns.l %}"
                  "{% endfor %}{{ ns.l|length }}",
}

LIMITS = TemplateLimits(timeout_s=2.0, max_chars=20000)
BOUND = (r"m.colibri: chat template: ("
         r"the rendered text would be more than 20000 characters \(TemplateLimits.max_chars\)"
         r"|rendering needed more than 64 MiB \(64 MiB \+ 16 bytes per character of TemplateLimits.max_chars = 20000\)"
         r"|rendering took longer than 2 s \(TemplateLimits.timeout_s\))$")


@pytest.mark.parametrize("name", list(GROW))
def test_size_bound_is_a_request_error_and_ram_stays_bounded(name):
    """Each is refused by one of the worker's bounds, named; the caller builds nothing of it."""
    t = ChatTemplate(GROW[name], source="m.colibri")
    tracemalloc.start()
    try:
        with pytest.raises(InvalidArgument, match=BOUND):
            t.render(OK, limits=LIMITS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"{name}: peak {peak} bytes while rendering"


@pytest.mark.parametrize("text", ["{{ 'x' * 3000000000 }}", "{{ (2 ** 10000000000) > 1 }}",
                                  "{{ ([1] * 3000000000)|length }}"])
def test_the_worker_memory_is_capped(text):
    """Without the RLIMIT_AS cap these would build gigabytes (then hit the text bound, or print True)."""
    with pytest.raises(InvalidArgument, match=r"rendering needed more than 64 MiB \(64 MiB \+ 16 bytes per "
                                              r"character of TemplateLimits.max_chars = 20000\)"):
        ChatTemplate(text).render(OK, limits=LIMITS)


HARMLESS = {   # shared references the in-process bounds refused by their whole size: cheap to build and compare
    "sort-shared": "{% set ns = namespace(a=['x'], b=['y']) %}{% for i in range(60) %}{% set ns.a = (ns.a, ns.a) %}"
                   "{% set ns.b = (ns.b, ns.b) %}{% endfor %}{{ [ns.a, ns.b]|sort|length }}",
    "dict-shared": "{% set ns = namespace(d={}) %}{% for i in range(60) %}{% set ns.d = {'a': ns.d, 'b': ns.d} %}"
                   "{% endfor %}{{ ns.d|length }}",
    "repeat-nested": "{% set a = [[[1] * 1000] * 1000] * 1000 %}{{ a == a|list }}",
    "big-integers": "{% set a = 7 ** 12000 %}{{ a > 1 }}{{ (10 ** 9999 * 10 ** 9999) > 1 }}",
}


@pytest.mark.parametrize("name", list(HARMLESS))
def test_cheap_structures_render(name):
    expected = {"sort-shared": "2", "dict-shared": "2", "repeat-nested": "True", "big-integers": "TrueTrue"}
    assert ChatTemplate(HARMLESS[name]).render(OK, limits=LIMITS) == expected[name]


def test_size_overrun_names_the_request_and_the_others_go_on():
    t = ChatTemplate("{% if messages[0].content == 'boom' %}" + GROW["out-loops"] + "{% endif %}x",
                     source="m.colibri", limits=LIMITS)
    out = _chat(t, [OK, BOOM])
    assert "request '1': m.colibri: chat template: " in str(out[1].error) and out[0].error is None


def test_output_at_the_bound_is_fine_and_one_over_is_not():
    t = ChatTemplate("{{ messages[0].content }}{{ 'x' * (messages|length) }}")
    limits = TemplateLimits(max_chars=100)
    assert t.render([{"role": "user", "content": "y" * 99}], limits=limits) == "y" * 99 + "x"
    with pytest.raises(InvalidArgument, match="more than 100 characters"):
        t.render([{"role": "user", "content": "y" * 100}], limits=limits)


def test_template_limits_attribute_is_the_default_for_render():
    t = ChatTemplate(GROW["out-value"], limits=TemplateLimits(max_chars=1000))
    assert t.limits.max_chars == 1000
    with pytest.raises(InvalidArgument, match="more than 1000 characters"):
        t.render(OK)


LLAMA3 = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
          "'<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
          "{% if add_generation_prompt %}"
          "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
CONVERSATIONS = [
    [{"role": "user", "content": "one two three?"}],
    [{"role": "system", "content": "Count."}, {"role": "user", "content": "  one  "},
     {"role": "assistant", "content": "two"}, {"role": "user", "content": "héllo 日本語 {\"json\": 1} <b>"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": None}],
]


def test_real_templates_render_as_plain_jinja_does():
    """Bounds never change a normal template's text (test_chat.py checks against transformers too)."""
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    plain = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    plain.filters["tojson"] = lambda x, **kw: json.dumps(x, **{"ensure_ascii": False, **kw})
    extra = ("{% for m in messages %}{{ m.content|upper|center(20)|indent(2) }}{{ m|tojson }}{{ '%5s|%-3d' % "
             "(m.role, loop.index) }}{{ '{:>6}'.format(m.role) }}{{ [m.role] * 2 }}{{ m.content.replace(' ', '_') }}"
             "{{ m.content.split()|join(', ') }}{% endfor %}{{ range(3)|batch(2, 0)|list }}{{ (2 ** 64) * 3 }}")
    for text in (LLAMA3, extra):
        t = ChatTemplate(text, {"bos_token": "<s>"})
        for conv in CONVERSATIONS:
            msgs = [{k: v for k, v in m.items() if v is not None} for m in conv]     # as render() passes them
            assert t.render(conv) == plain.from_string(text).render(messages=msgs, bos_token="<s>",
                                                                    add_generation_prompt=True)
    big = [{"role": "user", "content": "word " * 200000}]            # 1 MB of content: under the default
    assert len(ChatTemplate(LLAMA3, {"bos_token": "<s>"}).render(big)) > 10 ** 6
