"""`colibri experts add|list|remove [--pool NAME | --server URL]`: change a running model's experts.

Role: CLI shell over Pool.attach(name).add_expert / list_experts / remove_expert, or, with --server, over
a running `colibri serve`'s /admin/experts routes (the files are read here and sent as a safetensors body).
The weights file is a safetensors file with three tensors named gate, up, down
(suffixes gate_proj/up_proj/down_proj or w1/w3/w2 are accepted too); the router
row ([hidden] float32) comes from --router-row (.npy or .safetensors with one
tensor) or from a `router_row` tensor inside the weights file.
"""
import numpy as np

from ..errors import InvalidArgument
from .common import add_pool_name

_ALIASES = {"gate": ("gate", "gate_proj", "w1"), "up": ("up", "up_proj", "w3"), "down": ("down", "down_proj", "w2")}


def register(subparsers):
    parser = subparsers.add_parser("experts", help="hot-add, list or remove experts of a running pool")
    sub = parser.add_subparsers(dest="experts_command", metavar="{add,list,remove}")
    sub.required = True
    a = sub.add_parser("add", help="hot-add one expert to a layer of a running pool")
    a.add_argument("--layer", type=int, required=True)
    a.add_argument("--weights", required=True, metavar="FILE.safetensors")
    a.add_argument("--router-row", default=None, metavar="FILE", help=".npy or .safetensors with the [hidden] router row")
    a.add_argument("--bias", type=float, default=0.0, help="correction bias of the new expert (DeepSeek-V3)")
    a.set_defaults(func=run_add)
    l = sub.add_parser("list", help="experts per MoE layer")
    l.set_defaults(func=run_list)
    r = sub.add_parser("remove", help="stop routing to an expert")
    r.add_argument("--layer", type=int, required=True)
    r.add_argument("--expert", type=int, required=True)
    r.set_defaults(func=run_remove)
    for p in (a, l, r):
        add_pool_name(p)
        p.add_argument("--address", default=None, help="Ray address (default: the one recorded by `pool start`)")
        p.add_argument("--server", default=None, metavar="URL",
                       help="a running `colibri serve` instead of a pool (its /admin/experts; needs --api-key)")
        p.add_argument("--api-key", default=None, metavar="KEY", help="with --server: the server's key")


def _read_safetensors(path):
    from safetensors.numpy import load_file
    try:
        return load_file(path)
    except FileNotFoundError:
        raise InvalidArgument(f"{path}: no such file") from None
    except Exception as exc:
        raise InvalidArgument(f"{path}: not a readable safetensors file ({exc})") from None


def _pick(tensors, role, path):
    for name, arr in tensors.items():
        leaf = name.rsplit(".", 2)[-2] if name.endswith(".weight") else name.rsplit(".", 1)[-1]
        if leaf in _ALIASES[role]:
            return np.ascontiguousarray(arr, dtype=np.float32)
    raise InvalidArgument(f"{path}: no {role} tensor (expected a name ending in one of "
                          f"{', '.join(_ALIASES[role])}; found {', '.join(sorted(tensors)) or 'none'})")


def load_expert(weights_path, router_row_path=None):
    """(weights {"gate","up","down"} float32, router_row float32[h]) from files, with named errors."""
    tensors = _read_safetensors(weights_path)
    weights = {role: _pick(tensors, role, weights_path) for role in _ALIASES}
    if router_row_path is None:
        if "router_row" not in tensors:
            raise InvalidArgument(f"{weights_path}: no router_row tensor and no --router-row file given")
        row = tensors["router_row"]
    elif router_row_path.endswith(".npy"):
        try:
            row = np.load(router_row_path)
        except (OSError, ValueError) as exc:
            raise InvalidArgument(f"{router_row_path}: cannot read router row ({exc})") from None
    else:
        rows = _read_safetensors(router_row_path)
        if len(rows) != 1:
            raise InvalidArgument(f"{router_row_path}: expected exactly one tensor, found {sorted(rows)}")
        row = next(iter(rows.values()))
    row = np.ascontiguousarray(np.asarray(row, dtype=np.float32).reshape(-1))
    return weights, row


def _attach(args):
    from ..front import attach
    return attach(args.pool, ray_address=args.address)


def _admin(args, method, path, body=None):
    """One call to a server's admin route -> its JSON; a non-2xx answer is an error naming its message."""
    import json
    import urllib.error
    import urllib.request
    from ..errors import ColibriError
    req = urllib.request.Request(args.server.rstrip("/") + path, data=body, method=method,
                                 headers={"Authorization": f"Bearer {args.api_key or ''}",
                                          "Content-Type": "application/octet-stream"})
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read())["error"]["message"]
        except Exception:
            message = exc.reason
        raise ColibriError(f"{args.server}: {exc.code} {message}") from None
    except urllib.error.URLError as exc:
        raise ColibriError(f"{args.server}: cannot connect ({exc.reason})") from None


def run_add(args):
    weights, row = load_expert(args.weights, args.router_row)
    if args.server:
        from safetensors.numpy import save
        out = _admin(args, "POST", f"/admin/experts?layer={args.layer}&bias={args.bias}",
                     save(dict(weights, router_row=row)))
        print(f"layer {args.layer}: added expert {out['expert']} ({out['applies_to']})")
        return 0
    pool = _attach(args)
    try:
        new_id = pool.add_expert(args.layer, weights, row, bias=args.bias)
    finally:
        pool.shutdown()
    print(f"layer {args.layer}: added expert {new_id}")
    return 0


def run_list(args):
    if args.server:
        experts = {int(k): v for k, v in _admin(args, "GET", "/admin/experts")["experts"].items()}
        for layer, ids in sorted(experts.items()):
            print(f"layer {layer}: {len(ids)} experts: {' '.join(str(e) for e in ids)}")
        return 0
    pool = _attach(args)
    try:
        experts = pool.list_experts()
    finally:
        pool.shutdown()
    for layer, ids in sorted(experts.items()):
        print(f"layer {layer}: {len(ids)} experts: {' '.join(str(e) for e in ids)}")
    return 0


def run_remove(args):
    if args.server:
        _admin(args, "DELETE", f"/admin/experts/{args.layer}/{args.expert}")
        print(f"layer {args.layer}: removed expert {args.expert}")
        return 0
    pool = _attach(args)
    try:
        pool.remove_expert(args.layer, args.expert)
    finally:
        pool.shutdown()
    print(f"layer {args.layer}: removed expert {args.expert}")
    return 0
