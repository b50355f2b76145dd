"""Worst-case sizes of what a chat-template operation would build, known before it is built.

Role in the data flow: template_sandbox.py asks here before it runs an operation that can make a value
far larger than its inputs: a sequence times a count, a power, a width, a separator joined between many
items, a replacement per match, a format spec, an indent per line. Each estimate is an upper bound in
characters (or items) from the inputs alone; integers are sized in decimal digits. Operations not in the
tables grow their input by a small factor and are checked after they run.
"""
import math
import re
import string

from jinja2.runtime import Undefined
from jinja2.utils import Namespace, generate_lorem_ipsum

HUGE = float("inf")
_PRINTF = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[a-zA-Z%]")
_DIGITS = re.compile(r"\d+")


def digits(n):
    """Decimal digits of an int, from its bit length (never converts it)."""
    return int(abs(n).bit_length() * 0.30103) + 1


def is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def shallow(x):
    """Characters of a string, items of a container, 1 for anything else."""
    if isinstance(x, (str, bytes, bytearray, list, tuple, dict, set, frozenset)):
        return len(x)
    return 1


def measure(x, cap, tick=None):
    """-> (size, depth): about the characters str()/json would write for x (a str: exactly its length),
    and its nesting depth. Stops once size > cap, so a structure of shared references that doubles at every
    level costs at most `cap` steps; tick() is called every 4096 nodes (the time bound)."""
    if isinstance(x, str):
        return len(x), 0
    total, deepest, stack, n = 0, 0, [(x, 0)], 0
    while stack:
        v, d = stack.pop()
        n += 1
        if tick is not None and not n & 4095:
            tick()
        deepest = max(deepest, d)
        if isinstance(v, (str, bytes, bytearray)):
            total += len(v) + 2
        elif isinstance(v, Undefined):
            continue
        elif is_int(v):
            total += digits(v)
        elif isinstance(v, (list, tuple, set, frozenset, dict)):
            total += 2 + 2 * len(v)
            if total <= cap:
                stack.extend((c, d + 1) for c in (_pairs(v) if isinstance(v, dict) else v))
        elif isinstance(v, Namespace):
            stack.append((object.__getattribute__(v, "_Namespace__attrs"), d + 1))
        else:
            total += 24                     # numbers, None, loop / macro / generator objects
        if total > cap:
            return total, deepest
    return total, deepest


def _pairs(d):
    for k, v in d.items():
        yield k
        yield v


def _int(x):
    return abs(x) if is_int(x) else 0


def _text_len(x, b):
    return len(x) if isinstance(x, (str, bytes)) else b.deep(x)


def _max_int(values):
    return max((abs(v) for v in values if is_int(v)), default=0)


def _spec_int(token, ints):
    if token is None:
        return 0
    if token == "*":
        return ints
    return HUGE if len(token) > 18 else int(token)


def printf_size(b, fmt, args):
    """`fmt % args` (the % operator and the format filter)."""
    if not isinstance(fmt, (str, bytes)):
        return None
    items = tuple(args.values()) if isinstance(args, dict) else args if isinstance(args, tuple) else (args,)
    ints, biggest = _max_int(items), b.deep(items)
    total = len(fmt)
    for m in _PRINTF.finditer(fmt if isinstance(fmt, str) else fmt.decode("latin-1")):
        width = max(_spec_int(m.group(1), ints), _spec_int(m.group(2), ints))
        total += max(width, 4 * biggest) + 2
    return total


def format_size(b, fmt, args, kwargs):
    """`fmt.format(*args, **kwargs)` / format_map (nested {} in a spec: the largest integer given)."""
    values = list(args) + list(kwargs.values())
    if len(values) == 1 and isinstance(values[0], dict):
        values += list(values[0].values())
    ints, biggest = _max_int(values), b.deep(values)
    total = 0
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return None                          # the real call raises the same error
    for literal, name, spec, _ in fields:
        total += len(literal)
        if name is not None:
            spec = spec or ""
            width = max([HUGE if len(d) > 18 else int(d) for d in _DIGITS.findall(spec)] +
                        [ints if "{" in spec else 0])
            total += max(width, 4 * biggest) + 2
    return total


def binop_size(b, op, left, right):
    """-> ("chars" | "digits", bound) for an intercepted binary operator, or None (no growth)."""
    if op == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, bytes)) and is_int(n):
                return "chars", len(seq) * max(n, 0)
            if isinstance(seq, (list, tuple)) and is_int(n):      # [[x] * 1000] * 1000: the whole size
                return "chars", (b.deep(seq) if seq else 2) * max(n, 0)
        if is_int(left) and is_int(right):
            return "digits", digits(left) + digits(right)
    elif op == "**":
        if is_int(left) and is_int(right) and right > 0 and abs(left) > 1:
            if right.bit_length() > 60:
                return "digits", HUGE
            return "digits", int(right * math.log10(abs(left))) + 1
    elif op == "+":
        if isinstance(left, (str, bytes)) and isinstance(right, (str, bytes)):
            return "chars", len(left) + len(right)
        if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
            return "chars", b.deep(left) + b.deep(right)
    elif op == "%":
        if isinstance(left, (str, bytes)):
            return "chars", printf_size(b, left, right)
    return None


# ---------------------------------------------------------------- filters (value first, as the filter takes it)

def _join(b, value, d="", attribute=None):
    items = value if isinstance(value, (list, tuple)) else ()
    return b.deep(items) + len(items) * _text_len(d, b)


def _replace(b, s, old, new, count=None):
    """str(s).replace(str(old), str(new), count): a bound on the matches times the replacement."""
    n_s = _text_len(s, b)
    if is_int(count) and count >= 0:
        n = count
    elif isinstance(s, (str, bytes)) and type(old) is type(s) and old:
        n = s.count(old)
    else:
        n = n_s + 1
    return n_s + n * _text_len(new, b)


def _indent(b, s, width=4, first=False, blank=False):
    per_line = len(width) if isinstance(width, str) else _int(width)
    lines = s.count("\n") + 2 if isinstance(s, str) else _text_len(s, b) + 1
    return _text_len(s, b) + lines * per_line


def _wordwrap(b, s, width=79, break_long_words=True, wrapstring=None, break_on_hyphens=True):
    n = _text_len(s, b)
    return n + (n + 1) * (len(wrapstring) if isinstance(wrapstring, str) else 1)


def _tojson(b, x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    size, depth = b.measure(x)
    ind = len(indent) if isinstance(indent, str) else _int(indent)
    sep = sum(_text_len(s, b) for s in separators) if isinstance(separators, (list, tuple)) else 2
    return size * (6 if ensure_ascii else 2) * (1 + ind * (depth + 1) + sep)


def _urlize(b, value, *args, **kwargs):
    extra = sum(_text_len(v, b) for v in list(args) + list(kwargs.values()) if isinstance(v, str))
    n = _text_len(value, b)
    return 3 * n + (n // 4 + 1) * (extra + 48)


def _sum(b, iterable, attribute=None, start=0):
    if isinstance(start, (int, float)) or not isinstance(iterable, (list, tuple)):
        return None
    total = b.deep(start) + b.deep(iterable)
    return total * max(1, len(iterable))      # each step copies the running sum: the work, not just the result


FILTER_GROWTH = {
    "center": lambda b, value, width=80: max(_text_len(value, b), _int(width)),
    "indent": _indent,
    "wordwrap": _wordwrap,
    "join": _join,
    "replace": _replace,
    "format": lambda b, value, *args, **kwargs: printf_size(b, value, kwargs or args),
    "tojson": _tojson,
    "pprint": lambda b, value: (lambda s: s[0] * (2 + s[1]))(b.measure(value)),
    "batch": lambda b, value, linecount, fill_with=None: shallow(value) + (_int(linecount) if fill_with is not None
                                                                           else 0),
    "slice": lambda b, value, slices, fill_with=None: shallow(value) + _int(slices),
    "sum": _sum,
    "urlize": _urlize,
    "xmlattr": lambda b, d, autospace=True: 6 * b.deep(d) + 2,
    "truncate": lambda b, s, length=255, killwords=False, end="...", leeway=None: _text_len(s, b) + _text_len(end, b),
}
# filters that may take the whole conversation without writing it out: no deep size check of their arguments
STRUCTURAL = {"length", "count", "first", "last", "reverse", "list", "select", "reject", "selectattr",
              "rejectattr", "map", "batch", "slice", "groupby", "sort", "unique", "dictsort", "items", "attr",
              "default", "d", "min", "max", "random", "sum", "join", "tojson", "pprint"}
MATERIALIZE = {"join", "sum"}             # an iterator argument becomes a list first (sized, then passed on)


# ---------------------------------------------------------------- methods of str / bytes and globals

def _expandtabs(b, s, tabsize=8):
    return len(s) + s.count("\t" if isinstance(s, str) else b"\t") * _int(tabsize)


def _translate(b, s, table):
    values = table.values() if isinstance(table, dict) else ()
    return len(s) * max([1] + [_text_len(v, b) for v in values if isinstance(v, (str, bytes))])


def _str_join(b, s, items):
    items = items if isinstance(items, (list, tuple)) else ()
    return b.deep(items) + len(items) * len(s)


METHOD_GROWTH = {
    "center": lambda b, s, width, *a: max(len(s), _int(width)),
    "ljust": lambda b, s, width, *a: max(len(s), _int(width)),
    "rjust": lambda b, s, width, *a: max(len(s), _int(width)),
    "zfill": lambda b, s, width: max(len(s), _int(width)),
    "expandtabs": _expandtabs,
    "replace": _replace,
    "join": _str_join,
    "translate": _translate,
}
CALL_GROWTH = {      # global functions by identity
    generate_lorem_ipsum: lambda b, n=5, html=True, min=20, max=100: _int(n) * _int(max) * 16,
}
