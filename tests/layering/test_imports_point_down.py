"""Imports point down only: every intra-package import, at any depth of any module, goes to a lower room.

Walks the AST of every module of colibri_dist (function-level imports included) and fails on an import
of a room at the same rank from another room, or of a higher room. The package's __init__/__main__ are
the facade on top and may import anything.
"""
import ast
import pathlib

import colibri_dist

# rank of each room; a module may import rooms of a strictly lower rank (and its own room)
RANKS = {
    "errors": -1, "encodings": -1, "fsutil": 0, "config": 0, "families": 0,   # encodings: plain data config reads (KV dtypes)
    "format": 1,
    "native": 2,
    "routing": 3, "numa": 3,
    "store": 4,
    "moe_executor": 5,
    "generate": 6,
    "model": 7,
    "pool": 8,
    "testing": 9,      # harnesses for stress runs, tests and bench (Ray set-ups, the pool simulation)
    "front": 9,        # the front door: EngineArgs -> an LLM with its experts in process or on a pool
    "demos": 9,        # the demo models built once into the cache (over config/ and format/)
    "jobs": 10,
    "stress": 10,      # `colibri stress`: the offload stress harness (over front/, testing/, demos/)
    "ray_data": 11,
    "serve": 11,
    "bench": 12,
    "cli": 13,
}
FACADE = {"__init__", "__main__", "_native"}
ROOT = pathlib.Path(colibri_dist.__file__).parent


def _room(parts):
    return parts[0].removesuffix(".py") if parts else None


def _targets(path, tree):
    """(line, room imported) for every import of colibri_dist inside this module."""
    pkg = path.relative_to(ROOT).parent.parts
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(pkg[:len(pkg) - (node.level - 1)]) if node.level > 1 else list(pkg)
                if node.level - 1 > len(pkg):
                    raise AssertionError(f"{path}:{node.lineno}: relative import above the package")
                mod = base + (node.module.split(".") if node.module else [])
                names = [mod + [a.name] for a in node.names] if not node.module and not base else [mod]
                for m in names:
                    yield node.lineno, _room(m)
            elif node.module and node.module.split(".")[0] == "colibri_dist":
                yield node.lineno, _room(node.module.split(".")[1:])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "colibri_dist":
                    yield node.lineno, _room(a.name.split(".")[1:])


def test_every_room_is_ranked():
    rooms = {p.name.removesuffix(".py") for p in ROOT.iterdir()
             if (p.is_dir() and (p / "__init__.py").exists()) or p.suffix == ".py"}
    assert rooms - FACADE - set(RANKS) == set(), "give every room a rank in RANKS"


def test_imports_point_down_only():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        own = _room(path.relative_to(ROOT).parts)
        if own in FACADE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, target in _targets(path, tree):
            if target is None or target == own or target in FACADE - {"_native"}:
                continue
            if target == "_native" and own == "native":
                continue
            if target == "_native" or RANKS[target] >= RANKS[own]:
                bad.append(f"{path.relative_to(ROOT.parent)}:{line}: {own} (rank {RANKS[own]}) imports "
                           f"{target} (rank {RANKS.get(target, '-')})")
    assert not bad, "upward or sideways imports:\n" + "\n".join(bad)


def test_format_does_not_need_the_compiled_core():
    # the layering rule that made `colibri inspect` need the C build
    for path in (ROOT / "format").rglob("*.py"):
        for line, target in _targets(path, ast.parse(path.read_text(encoding="utf-8"))):
            assert target not in ("native", "_native"), f"{path}:{line} imports {target}"


# the only modules that may import ray (top-level or inside a function)
RAY_ALLOWED = ("pool/", "testing/", "serve/ray_serve.py")


def test_ray_is_imported_only_in_pool_testing_and_the_ray_serve_module():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(RAY_ALLOWED):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            if any(n == "ray" or n.startswith("ray.") for n in names):
                bad.append(f"{rel}:{node.lineno}")
    assert not bad, "ray imported outside pool/, testing/ and serve/ray_serve.py:\n" + "\n".join(bad)


def test_nothing_below_imports_serve():
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        own = _room(path.relative_to(ROOT).parts)
        if own in FACADE or own in ("serve", "bench", "cli"):
            continue
        for line, target in _targets(path, ast.parse(path.read_text(encoding="utf-8"))):
            if target == "serve":
                bad.append(f"{path.relative_to(ROOT.parent)}:{line}")
    assert not bad, "only bench/ and cli/ may import serve/:\n" + "\n".join(bad)


# inside jobs/: the job kinds sit on the shared run/ and reports/ machinery, the one runner on the kinds
JOBS_RANKS = {"run": 0, "classifier_head": 0, "reports": 1, "moe_kind": 2, "generation": 2,
              "moe_layer": 3, "token_classification": 3, "pipeline": 4}


def test_jobs_sub_rooms_point_down():
    jobs, bad = ROOT / "jobs", []
    for path in sorted(jobs.rglob("*.py")):
        rel = path.relative_to(jobs).parts
        own = _room(rel)
        if own == "__init__":
            continue
        pkg = ["jobs"] + list(rel[:-1])
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            mod = pkg[:len(pkg) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            if mod[:1] != ["jobs"]:
                continue                      # a room outside jobs/ (the test above checks those)
            for target in [_room(mod[1:])] if len(mod) > 1 else [a.name for a in node.names]:
                if target != own and JOBS_RANKS[target] >= JOBS_RANKS[own]:
                    bad.append(f"jobs/{'/'.join(rel)}:{node.lineno}: {own} imports {target}")
    assert set(JOBS_RANKS) == {_room(p.relative_to(jobs).parts) for p in jobs.iterdir()
                               if p.suffix == ".py" or (p / "__init__.py").exists()} - {"__init__"}, \
        "give every jobs/ room a rank in JOBS_RANKS"
    assert not bad, "upward or sideways imports inside jobs/:\n" + "\n".join(bad)
