"""A Jinja sandbox whose renderings are bounded in time and size (issue 21 item 7), cooperatively.

Role in the data flow: chat.py compiles chat templates in a BoundedEnvironment and renders them inside
`bounded(limits)`. Jinja's ImmutableSandboxedEnvironment already blocks escapes and caps range() at
MAX_RANGE; on top of it:
  * the code generator writes `environment.tick()` at the start of every block body (each loop iteration,
    if-branch, macro call) and routes every write of output (root, macro / set / filter / call buffers)
    through `environment.out_count`, which adds it to the rendering's total;
  * `~` concatenation, the intercepted operators * ** + %, every call, attribute / item access, str.format
    and every filter tick and check the size of what they would build first (template_growth.py) and of
    what they built after.
A tick past the deadline or a size past max_chars raises TemplateOverrun inside the rendering thread, which
unwinds the template like any error: no thread is killed, no signal is used, other threads are untouched,
and no value larger than the bound (times a small factor) is ever built. The per-rendering budget lives in
a ContextVar, so one template may render in many threads (or asyncio tasks) at once.
"""
import contextlib
import contextvars
import functools
import inspect
import time

from jinja2.compiler import CodeGenerator, optimizeconst
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .template_growth import (CALL_GROWTH, FILTER_GROWTH, HUGE, MATERIALIZE, METHOD_GROWTH, STRUCTURAL,
                              binop_size, digits, format_size, is_int, measure, shallow)

INT_DIGITS = 10000            # larger integers are refused (str() refuses > 4300 digits anyway)
_BUDGET = contextvars.ContextVar("colibri_template_budget", default=None)


class TemplateOverrun(Exception):
    """A rendering went past its TemplateLimits (the message names the limit and its setting)."""


class Budget:
    """One rendering's deadline and the characters it has written."""

    def __init__(self, limits, timed=True):
        self.limits, self.max_chars, self.written = limits, limits.max_chars, 0
        self.deadline = time.monotonic() + limits.timeout_s if timed else float("inf")

    def tick(self):
        if time.monotonic() > self.deadline:
            raise TemplateOverrun(f"rendering took longer than {self.limits.timeout_s:g} s ({self.limits.names[0]})")

    def over(self, what):
        raise TemplateOverrun(f"{what} would be more than {self.max_chars} characters ({self.limits.names[1]})")

    def check_size(self, kind, n, what):
        if n is None:
            return
        if kind == "digits" and n > INT_DIGITS:
            raise TemplateOverrun(f"{what} would be an integer of more than {INT_DIGITS} digits")
        if kind == "chars" and n > self.max_chars:
            self.over(what)

    def check_value(self, value, what):
        t = type(value)
        if t is str or t is list or t is dict or t is tuple:      # the common case, first
            if len(value) > self.max_chars:
                self.over(what)
            return value
        if is_int(value):
            if value.bit_length() > 3.33 * INT_DIGITS:
                self.check_size("digits", digits(value), what)
        elif shallow(value) > self.max_chars:
            self.over(what)
        return value

    def measure(self, value):
        return measure(value, self.max_chars, self.tick)

    def deep(self, value):
        return measure(value, self.max_chars, self.tick)[0]

    def check_deep(self, value, what):
        if not isinstance(value, (str, int, float)) and self.deep(value) > self.max_chars:
            self.over(what)


@contextlib.contextmanager
def bounded(limits):
    """Render inside this: the budget every hook of the rendering's thread / task checks."""
    token = _BUDGET.set(Budget(limits))
    try:
        yield
    finally:
        _BUDGET.reset(token)


class BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator plus the ticks and output counting described above."""

    def blockvisit(self, nodes, frame):
        self.writeline("environment.tick()")
        super().blockvisit(nodes, frame)

    def _output_const_repr(self, group):
        return f"environment.out_count({super()._output_const_repr(group)})"

    def _output_child_pre(self, node, frame, finalize):
        self.write("environment.out_count(")
        super()._output_child_pre(node, frame, finalize)
        self.write("environment.out_value(")

    def _output_child_post(self, node, frame, finalize):
        self.write(")")
        super()._output_child_post(node, frame, finalize)
        self.write(")")

    def start_write(self, frame, node=None):        # call blocks, filter blocks, recursive loops
        super().start_write(frame, node)
        self.write("environment.out_count(")

    def end_write(self, frame):
        self.write(")")
        super().end_write(frame)

    def visit_List(self, node, frame):             # literals: a [x, x] doubling inside a loop is refused
        self.write("environment.built(")
        super().visit_List(node, frame)
        self.write(")")

    def visit_Dict(self, node, frame):
        self.write("environment.built(")
        super().visit_Dict(node, frame)
        self.write(")")

    def visit_Tuple(self, node, frame):
        if node.ctx != "load":                       # an assignment target: `{% for a, b in ... %}`
            return super().visit_Tuple(node, frame)
        self.write("environment.built(")
        super().visit_Tuple(node, frame)
        self.write(")")

    @optimizeconst
    def visit_Concat(self, node, frame):            # jinja's, with the parts checked before they are joined
        if frame.eval_ctx.volatile:
            func_name = "(markup_join if context.eval_ctx.volatile else str_join)"
        elif frame.eval_ctx.autoescape:
            func_name = "markup_join"
        else:
            func_name = "str_join"
        self.write(f"{func_name}(environment.concat_parts((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write(")))")


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment + the hooks; `limits` sizes the checks made while compiling (constant
    folding runs filters); call seal() once the filters and globals are set."""
    code_generator_class = BoundedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, limits, **options):
        super().__init__(**options)
        self.limits = limits
        self._untimed = Budget(limits, timed=False)

    def seal(self):
        self.filters = {name: _guard_filter(self, name, fn) for name, fn in self.filters.items()}
        return self

    def budget(self):
        b = _BUDGET.get()
        return self._untimed if b is None else b

    # -- what the generated code calls
    def tick(self):
        if time.monotonic() > (_BUDGET.get() or self._untimed).deadline:
            self.budget().tick()

    def out_value(self, value):
        if type(value) is not str:
            self.budget().check_deep(value, "a value written")
        return value

    def out_count(self, text):
        b = _BUDGET.get() or self._untimed
        b.written += len(text) if type(text) is str else len(str(text))
        if b.written > b.max_chars:
            b.over("the rendered text")
        if time.monotonic() > b.deadline:
            b.tick()
        return text

    def built(self, container):
        """A list / tuple / dict literal: its whole size (shared references counted each time) within the bound,
        so no later comparison, sort, hash or str() of it can run away."""
        b = _BUDGET.get() or self._untimed
        if container and b.deep(container) > b.max_chars:
            b.over("a list, tuple or dict")
        return container

    def concat_parts(self, parts):
        b = self.budget()
        b.tick()
        if sum(b.deep(p) for p in parts) > b.max_chars:
            b.over("'~'")
        if self.autoescape:
            return parts
        # str() here, not inside str_join's map(): a StopIteration from a value's __str__ would end that
        # map silently (dropping the text); raised here it is the rendering's error
        return [p if type(p) is str else str(p) for p in parts]

    # -- sandbox hooks
    def call_binop(self, context, operator, left, right):
        b = _BUDGET.get() or self._untimed
        if time.monotonic() > b.deadline:
            b.tick()
        if operator == "+" and type(left) is str and type(right) is str:        # the common case, first
            if len(left) + len(right) > b.max_chars:
                b.over("'+'")
            return left + right
        grow = binop_size(b, operator, left, right)
        if grow is not None:
            b.check_size(*grow, f"'{operator}'")
        return b.check_value(super().call_binop(context, operator, left, right), f"'{operator}'")

    def getattr(self, obj, attribute):
        b = _BUDGET.get() or self._untimed
        if time.monotonic() > b.deadline:
            b.tick()
        return b.check_value(super().getattr(obj, attribute), f"attribute {attribute!r}")

    def getitem(self, obj, argument):
        b = _BUDGET.get() or self._untimed
        if time.monotonic() > b.deadline:
            b.tick()
        return b.check_value(super().getitem(obj, argument), "an item")

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja's signature
        b = __self.budget()
        b.tick()
        args, what = _check_call(b, __obj, args, kwargs)
        return b.check_value(super().call(__context, __obj, *args, **kwargs), what)

    def wrap_str_format(self, value):
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt, env = value.__self__, self

        def bounded_format(*args, **kwargs):
            b = env.budget()
            b.tick()
            b.check_size("chars", format_size(b, fmt, args, kwargs), f"str.{value.__name__}")
            return b.check_value(wrapped(*args, **kwargs), f"str.{value.__name__}")
        return bounded_format


def _check_call(b, obj, args, kwargs):
    """Size check before a call: str/bytes methods and globals of the growth tables. -> (args, what).
    Calls inside loops / blocks carry jinja's own _loop_vars / _block_vars (for macros; Context.call drops
    them for anything else): they are not the callee's arguments."""
    if "_loop_vars" in kwargs or "_block_vars" in kwargs:
        kwargs = {k: v for k, v in kwargs.items() if k not in _JINJA_KWARGS}
    owner, name = getattr(obj, "__self__", None), getattr(obj, "__name__", "a call")
    if isinstance(owner, (str, bytes)):
        what = f"str.{name}"
        for v in list(args) + list(kwargs.values()):
            b.check_deep(v, f"the argument of {what}")
        grow = METHOD_GROWTH.get(name)
        if name == "join" and args and not isinstance(args[0], (list, tuple, str)):
            args = (list(args[0]),) + tuple(args[1:])
        if grow is not None:
            b.check_size("chars", _estimate(grow, b, owner, args, kwargs, (obj,)), what)
        return args, what
    grow = CALL_GROWTH.get(obj) if _hashable(obj) else None
    if grow is not None:
        b.check_size("chars", _estimate(grow, b, None, args, kwargs, (obj,)), f"{name}()")
    return args, f"{name}()"


def _guard_filter(env, name, fn):
    skip = 1 if getattr(fn, "jinja_pass_arg", None) is not None else 0
    grow, structural, materialize = FILTER_GROWTH.get(name), name in STRUCTURAL, name in MATERIALIZE
    what, what_in = f"the {name} filter", f"the input of the {name} filter"
    real = (fn, functools.partial(fn, None)) if skip else (fn,)     # wrapped filters may not show the pass-arg

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        b = _BUDGET.get() or env._untimed
        if time.monotonic() > b.deadline:
            b.tick()
        if materialize and len(args) > skip and not isinstance(args[skip], _SIZED) and \
                hasattr(args[skip], "__iter__"):
            args = args[:skip] + (list(args[skip]),) + args[skip + 1:]
        if not structural:
            for v in args[skip:]:
                if type(v) not in _FLAT:
                    b.check_deep(v, what_in)
            for v in kwargs.values():
                b.check_deep(v, what_in)
        if grow is not None:
            b.check_size("chars", _estimate(grow, b, None, args[skip:], kwargs, real), what)
        result = fn(*args, **kwargs)
        if type(result) is str:
            if len(result) > b.max_chars:
                b.over(what)
            return result
        return b.check_value(result, what)
    return guarded


_FLAT = {str, int, float, bool, type(None)}
_JINJA_KWARGS = ("_loop_vars", "_block_vars")
_SIZED = (str, list, tuple, dict)


def _estimate(grow, b, owner, args, kwargs, real):
    """The table's bound; None when the arguments fit none of the `real` signatures either (the call raises
    then). Arguments the callee takes but the table does not understand: no bound known, so refuse (HUGE)."""
    try:
        return grow(b, *([owner] if owner is not None else []), *args, **kwargs)
    except TypeError:
        return HUGE if any(_binds(f, args, kwargs) for f in real) else None


def _binds(fn, args, kwargs):
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return False
    return True


def _hashable(obj):
    try:
        hash(obj)
    except TypeError:
        return False
    return True
