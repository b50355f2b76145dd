"""Chat templates compiled and rendered in worker processes, bounded by the kernel, not by cooperation.

Role in the data flow: chat.py sends (template text, variables as JSON, limits) to an idle worker (a new one
when all are busy: one per concurrent rendering) and gets back the text or the template's error. The worker
is `python -c BOOT this_file`: stdlib and jinja2 only, transformers' conventions (sandboxed, trim_blocks +
lstrip_blocks, loopcontrols, `{% generation %}`, raise_exception, tojson, strftime_now). Bounds:
  * time: the caller waits timeout_s, then SIGKILLs the worker (a fresh one starts on the next request);
  * the text: the worker stops once the written pieces pass max_chars;
  * memory: while it compiles or renders, the worker's address space is capped (RLIMIT_AS) at its size then
    plus memory_allowance(max_chars); a MemoryError or a death is the template's error, that worker retires.
Nothing of a rendering runs in the caller's process: not its time, not its GIL, not its memory.
"""
import atexit
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection

BOOT = "import runpy, sys; sys.path.pop(0); runpy.run_path(sys.argv[1], run_name='__colibri_template_worker__')"
MiB = 1 << 20
START_TIMEOUT_S = 60.0


def memory_allowance(max_chars):
    """Bytes a rendering may add to the worker: 64 MiB, plus 16 bytes per character of the text bound."""
    return 64 * MiB + 16 * max_chars


class RenderError(Exception):
    """The template's error (syntax, raised, or past a bound), worded to follow '<source>: '."""


class _Worker:
    def __init__(self):
        to_child, self._w = os.pipe()
        self._r, from_child = os.pipe()
        self.proc = subprocess.Popen([sys.executable, "-c", BOOT, os.path.abspath(__file__), str(to_child),
                                      str(from_child)], pass_fds=(to_child, from_child), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, start_new_session=True)
        os.close(to_child)
        os.close(from_child)
        self.tx, self.rx = Connection(self._w, readable=False), Connection(self._r, writable=False)
        try:                                          # started (jinja2 imported): the rendering clock starts after
            ready = self.rx.recv_bytes() if self.rx.poll(START_TIMEOUT_S) else b"no answer"
        except (EOFError, OSError):
            ready = f"exit code {self.proc.wait()}".encode()
        if ready != b"ready":
            self.close()
            raise RuntimeError(f"the chat-template render process ({sys.executable}) did not start: "
                               f"{ready.decode(errors='replace')}")

    def ask(self, request, deadline):
        """-> (kind, payload); ('timeout', None) / ('died', exit code) when the worker cannot answer."""
        try:
            self.tx.send_bytes(request)
            if not self.rx.poll(max(0.0, deadline - time.monotonic())):
                return "timeout", None
            return tuple(json.loads(self.rx.recv_bytes()))
        except (EOFError, OSError):
            return "died", self.proc.wait()

    def close(self):
        self.proc.kill()
        self.proc.wait()
        self.tx.close()
        self.rx.close()


_IDLE, _LOCK, _PID = [], threading.Lock(), [os.getpid()]


def _take():
    """-> (worker, reused): an idle worker of this process, else a new one."""
    with _LOCK:
        if _PID[0] != os.getpid():                   # a forked child: the parent's workers are not its own
            _IDLE.clear()
            _PID[0] = os.getpid()
        while _IDLE:
            worker = _IDLE.pop()
            if worker.proc.poll() is None:
                return worker, True
            worker.close()
    return _Worker(), False


def idle_pids():
    with _LOCK:
        return [w.proc.pid for w in _IDLE]


def close_all():
    """Stop the idle workers (the next rendering starts a fresh one)."""
    with _LOCK:
        workers = list(_IDLE) if _PID[0] == os.getpid() else []
        _IDLE.clear()
    for w in workers:
        w.close()


atexit.register(close_all)


def template_key(template):
    """What a worker caches a compiled template under (the text travels once per worker)."""
    return hashlib.sha256(template.encode("utf-8", "surrogatepass")).hexdigest()


def run(template, variables, timeout_s, max_chars, names, key=None, compile_only=False):
    """The rendered text (compile_only: ''), else RenderError naming the bound (names: the settings of
    (timeout_s, max_chars)). TypeError / ValueError when a variable is not JSON data (str, number, bool, None,
    list, dict)."""
    key = key or template_key(template)
    # ensure_ascii: lone surrogates travel as \udXXX escapes
    tail = json.dumps([variables, max_chars, memory_allowance(max_chars), list(names), compile_only])[1:]
    for _ in range(2):
        worker, reused = _take()
        deadline = time.monotonic() + timeout_s         # a worker's start is not the template's time
        try:
            kind, payload = worker.ask(f'["{key}", null, {tail}'.encode("ascii"), deadline)
            if kind == "unknown":       # a new worker, or one whose cache let it go
                kind, payload = worker.ask(f'["{key}", {json.dumps(template)}, {tail}'.encode("ascii"), deadline)
        except BaseException:
            worker.close()
            raise
        if kind != "died" or not reused:
            break
        worker.close()                  # killed while idle (the OOM killer, a stray signal): not this rendering's doing
    if kind in ("ok", "error"):
        with _LOCK:
            _IDLE.append(worker)
        if kind == "ok":
            return payload
        raise RenderError(payload)
    worker.close()
    if kind == "timeout":
        raise RenderError(f"chat template: rendering took longer than {timeout_s:g} s ({names[0]})")
    if kind == "memory":
        raise RenderError(f"chat template: rendering needed more than {memory_allowance(max_chars) // MiB} MiB "
                          f"(64 MiB + 16 bytes per character of {names[1]} = {max_chars})")
    raise RenderError(f"chat template: its render process died ({payload})")


# ---------------------------------------------------------------- the worker (stdlib and jinja2 only)

def _environment():
    import datetime
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}` (assistant-mask markers) renders its body unchanged."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.intercepted_binops = frozenset({"*", "**", "+", "%"})   # computed when rendering, not folded when compiling
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env


def _describe(exc):
    try:
        text = str(exc)
    except Exception:                  # noqa: BLE001 - a hostile __str__
        text = "<unprintable>"
    text = text if len(text) <= 500 else text[:500] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _line(exc):
    """' (template line N)': the innermost frame of the compiled template in the traceback, mapped back."""
    tb, line = exc.__traceback__, None
    while tb is not None:
        template = tb.tb_frame.f_globals.get("__jinja_template__")
        if template is not None:
            line = template.get_corresponding_lineno(tb.tb_lineno)
        tb = tb.tb_next
    return f" (template line {line})" if line else ""


def _compile(env, cache, key, text):
    import jinja2
    if key not in cache:
        try:
            template = env.from_string(text)
        except jinja2.TemplateSyntaxError as exc:
            return None, f"chat template syntax error at line {exc.lineno}: {exc.message}"
        except MemoryError:
            raise
        except Exception as exc:      # noqa: BLE001 - e.g. RecursionError from a deeply nested expression
            return None, f"chat template cannot be compiled: {_describe(exc)}"
        if len(cache) >= 16:
            cache.clear()
        cache[key] = template
    return cache[key], None


def _render(env, cache, key, text, variables, max_chars, names, compile_only):
    import jinja2
    if text is None and key not in cache:
        return ["unknown", None]
    template, error = _compile(env, cache, key, text)
    if error is not None or compile_only:
        return ["error", error] if error else ["ok", ""]
    out, n = [], 0
    try:
        # root_render_func, not Template.render: rewriting a 1000-frame RecursionError traceback is slow
        for piece in template.root_render_func(template.new_context(variables)):
            n += len(piece)
            if n > max_chars:
                return ["error", f"chat template: the rendered text would be more than {max_chars} characters "
                                 f"({names[1]})"]
            out.append(piece)
    except jinja2.TemplateError as exc:
        return ["error", f"chat template: {exc}"]
    except MemoryError:
        raise
    except Exception as exc:      # noqa: BLE001 - any Python error a template raises is the request's error
        return ["error", f"chat template raised {_describe(exc)}{_line(exc)}"]
    return ["ok", "".join(out)]


def _address_space():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None                   # no /proc (not Linux): no memory cap, the time bound still holds


def _serve(rx, tx):
    import resource
    env, cache, (soft, hard) = _environment(), {}, resource.getrlimit(resource.RLIMIT_AS)
    tx.send_bytes(b"ready")
    while True:
        try:
            key, text, variables, max_chars, allowance, names, compile_only = json.loads(rx.recv_bytes())
        except EOFError:                # the caller went away
            return
        size = _address_space()
        try:
            if size is not None:
                cap = size + allowance if soft == resource.RLIM_INFINITY else min(size + allowance, soft)
                resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
            reply = _render(env, cache, key, text, variables, max_chars, names, compile_only)
        except MemoryError:
            reply = ["memory", None]
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        tx.send_bytes(json.dumps(reply).encode("ascii"))
        if reply[0] == "memory":        # retire: what a MemoryError left half-built is not worth keeping
            return


if __name__ == "__colibri_template_worker__":
    _serve(Connection(int(sys.argv[2]), writable=False), Connection(int(sys.argv[3]), readable=False))
