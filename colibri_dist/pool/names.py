"""Pool names: checked once before they reach a path, an actor name or a Ray namespace.

Role: a pool name becomes `<state dir>/pools/<name>.json`, `<name>.ray.log` and the actor
names `<name>:router` / `<name>:worker:<i>`, so PoolConfig, the state file helpers
(service.py) and the CLI all call check_name: 1-64 characters from [A-Za-z0-9._-],
starting with a letter or digit, never "..": no path separator, no escape from the state
directory, nothing a shell or Ray would read specially.
"""
import re

from ..errors import InvalidArgument

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_name(name, what="pool name"):
    """name if it is a safe pool name, else InvalidArgument naming it and the rule."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise InvalidArgument(f"{what} {name!r} is not allowed: use 1-64 characters from A-Z a-z 0-9 . _ -, "
                              f"starting with a letter or digit, without '..' or path separators")
    return name
