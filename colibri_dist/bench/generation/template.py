"""`python -m colibri_dist.bench template [--templates DIR] [--rounds 5] [--renders 200] [--json PATH]`.

Role: measures what a chat-template rendering costs (docs/ARCHITECTURE.md, "Chat templates"): the median
microseconds of one rendering of real templates (Qwen3 and gpt-oss from --templates, default llama.cpp's
models/templates when present; a Mixtral [INST] template always) with a six-message tool-calling conversation
and two tools, for each variant, alternated round by round:
  * plain: jinja2's ImmutableSandboxedEnvironment in the caller, unbounded (the floor);
  * process: ChatTemplate.render, i.e. generate/template_process.py's worker process bounded by a kill, an
    output cap and RLIMIT_AS (the round trip included);
  * bounded: the cooperative in-process sandbox it replaced (template_sandbox.py + template_growth.py): this
    file as of commit 0af6fce measures it beside the others (`git worktree add /tmp/t 0af6fce`, run it there).
Then the worker's cost (cold start, restart after a kill, resident memory), what a hostile template costs a
neighbour thread (pure-Python work per second in the caller while another thread renders a spinning
template until its 1 s bound), and how long each hostile template takes to be refused. Prints the load average.
"""
import argparse
import json
import os
import statistics
import threading
import time

from ...generate import template_process as tp
from ...generate.chat import ChatTemplate
from ...generate.safe_text import TemplateLimits

LLAMA_TEMPLATES = "/work/peers/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates"
MIXTRAL = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
           "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
           "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
           "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                           "parameters": {"type": "object", "required": ["city"], "properties": {
                                               "city": {"type": "string", "description": "City name"},
                                               "unit": {"type": "string", "enum": ["c", "f"]}}}}},
         {"type": "function", "function": {"name": "search", "description": "Search the web", "parameters": {
             "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
CONV = [{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is the weather in Paris? " * 5},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "It is 21 C in Paris."},
        {"role": "user", "content": "And in Berlin? Answer briefly."}]
MIXTRAL_CONV = [{"role": "user", "content": "What is the weather in Paris? " * 5},
                {"role": "assistant", "content": "It is 21 C."}, {"role": "user", "content": "And in Berlin?"}]
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}
SPIN = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
HOSTILE = {"spin": SPIN, "repeat": "{{ 'x' * 3000000000 }}",
           "out-loops": "{% for i in range(100000) %}{% for j in range(30000) %}x{% endfor %}{% endfor %}",
           "nested-lists": "{% set ns = namespace(x=['ab']) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}"
                           "{% endfor %}{{ ns.x }}",
           "recursion": "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"}


def _args(argv):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench template", description=__doc__.split("\n")[0])
    ap.add_argument("--templates", default=LLAMA_TEMPLATES, help="a directory with Qwen-Qwen3-0.6B.jinja and "
                                                                 "openai-gpt-oss-120b.jinja (skipped when absent)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--renders", type=int, default=200, help="renderings per variant per round")
    ap.add_argument("--json", default="bench_template.json")
    return ap.parse_args(argv)


def cases(directory):
    out = []
    for name, file in (("qwen3", "Qwen-Qwen3-0.6B.jinja"), ("gpt-oss", "openai-gpt-oss-120b.jinja")):
        path = os.path.join(directory, file)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                out.append((name, f.read(), CONV, TOOLS))
        else:
            print(f"bench template: {path} not found, {name} skipped")
    return out + [("mixtral", MIXTRAL, MIXTRAL_CONV, None)]


def variants(text, conv, tools):
    """name -> a no-argument function rendering text with conv and tools; every one gives the same text."""
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, **{"ensure_ascii": False, **kw})
    env.globals["strftime_now"] = lambda fmt: time.strftime(fmt)
    plain = env.from_string(text)
    vars_ = dict(messages=conv, tools=tools, documents=None, add_generation_prompt=True, **SPECIAL)
    chat_template = ChatTemplate(text, SPECIAL)
    out = {"plain": lambda: plain.render(**vars_), "process": lambda: chat_template.render(conv, tools=tools)}
    texts = {k: f() for k, f in out.items()}
    if len(set(texts.values())) != 1:
        raise RuntimeError(f"bench template: the variants disagree: { {k: len(v) for k, v in texts.items()} }")
    return out


def per_render(fns, rounds, renders):
    """name -> [median us per rendering, one per round]; the variants alternate inside each round."""
    res = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            times = []
            for _ in range(renders):
                t = time.perf_counter()
                f()
                times.append(time.perf_counter() - t)
            res[k].append(round(statistics.median(times) * 1e6, 1))
    return res


def _status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":")) // 1024


def worker_cost(text, conv, tools):
    """Cold start (ms), the first rendering after a kill (ms), and the worker's VmRSS / VmHWM (MiB)."""
    names, vars_ = TemplateLimits().names, dict(messages=conv, tools=tools, add_generation_prompt=True, **SPECIAL)
    tp.close_all()
    t = time.perf_counter()
    tp.run(text, vars_, 2.0, 4 << 20, names)
    cold = (time.perf_counter() - t) * 1e3
    pid = tp.idle_pids()[0]
    rss, hwm = _status(pid, "VmRSS"), _status(pid, "VmHWM")
    try:
        tp.run(SPIN, {}, 0.2, 4 << 20, names)
    except tp.RenderError:
        pass
    t = time.perf_counter()
    tp.run(text, vars_, 2.0, 4 << 20, names)
    return {"cold_start_ms": round(cold, 1), "after_kill_ms": round((time.perf_counter() - t) * 1e3, 1),
            "rss_mib": rss, "hwm_mib": hwm}


def _work_rate(seconds, stop_early=None):
    """Units of pure-Python work per second in this thread (what the engine's loop stands for)."""
    n, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end and not (stop_early and stop_early.is_set()):
        sum(range(2000))
        n += 1
    return n / seconds


def neighbour(rounds):
    """Work per second of a thread while another renders SPIN until its 1 s bound: quiet / bounded / process."""
    t = ChatTemplate(SPIN, limits=TemplateLimits(timeout_s=1.0))
    bomb = {"process": lambda: t.render([{"role": "user", "content": "x"}])}
    res = {k: [] for k in ["quiet", *bomb]}
    for _ in range(rounds):
        res["quiet"].append(round(_work_rate(0.9)))
        for k, f in bomb.items():
            th = threading.Thread(target=_swallow, args=(f,))
            th.start()
            time.sleep(0.05)
            res[k].append(round(_work_rate(0.9)))
            th.join()
    return res


def _swallow(f):
    try:
        f()
    except Exception:     # noqa: BLE001 - the bound's error is the expected end
        pass


def hostile(rounds):
    """Seconds until each hostile template is refused, and the start of the message, per variant."""
    limits = TemplateLimits(timeout_s=2.0, max_chars=20000)
    out = {}
    for name, text in HOSTILE.items():
        t = ChatTemplate(text, limits=limits)
        fns = {"process": lambda: t.render([{"role": "user", "content": "x"}])}
        for k, f in fns.items():
            times = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                try:
                    f()
                    msg = "no error"
                except Exception as exc:     # noqa: BLE001 - the refusal is what is measured
                    msg = str(exc)
                times.append(time.perf_counter() - t0)
            out[f"{name}/{k}"] = {"s": round(statistics.median(times), 3), "message": msg[:110]}
    return out


def main(argv=None):
    a = _args(argv)
    result = {"load_before": os.getloadavg()}
    for name, text, conv, tools in cases(a.templates):
        fns = variants(text, conv, tools)
        result[name] = per_render(fns, a.rounds, a.renders)
        print(f"{name:8s} median us per rendering, per round: {result[name]}", flush=True)
    name, text, conv, tools = cases(a.templates)[0]
    result["worker"] = worker_cost(text, conv, tools)
    print(f"worker ({name}): {result['worker']}", flush=True)
    result["neighbour"] = neighbour(a.rounds)
    print(f"neighbour thread, work per second, per round: {result['neighbour']}", flush=True)
    result["hostile"] = hostile(max(1, a.rounds // 2))
    for k, v in result["hostile"].items():
        print(f"  {k:24s} {v['s']:7.3f} s  {v['message']}")
    result["load_after"] = os.getloadavg()
    print(f"load average before {result['load_before']}, after {result['load_after']}")
    with open(a.json, "w") as f:
        json.dump(result, f, indent=1)
    return 0
