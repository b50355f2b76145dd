"""`colibri convert | inspect | verify`: make, describe and check .colibri containers.

Role in the data flow: argv -> format.convert / format.reader. Errors are
FormatError (exit 1: damaged or unsupported input) or InvalidArgument (exit 2),
mapped by colibri_dist.cli.main.
"""
import json
import sys

from ..format.layout import SCHEMES
from .common import add_progress, progress_enabled


def register(subparsers):
    p = subparsers.add_parser("convert", help="convert a Hugging Face safetensors checkpoint to .colibri",
                              description="Convert a Hugging Face MoE checkpoint directory (config.json + "
                                          "model.safetensors or sharded with model.safetensors.index.json) "
                                          "to a .colibri container. Families: Mixtral, Qwen2-MoE, Qwen3-MoE, "
                                          "OLMoE, DeepSeek-V3.")
    p.add_argument("src", metavar="SRC", help="checkpoint directory")
    p.add_argument("dst", metavar="DST", help="output .colibri file (written as DST.partial, then renamed)")
    p.add_argument("--experts", choices=list(SCHEMES), default="int8",
                   help="expert weight encoding (default: int8, symmetric per row)")
    p.add_argument("--dense", choices=list(SCHEMES), default=None,
                   help="encoding of dense matrices: attention projections, lm_head, dense MLP layers "
                        "(default: the same as --experts)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing DST and drop its hot-added experts (DST.experts/)")
    add_progress(p)
    p.set_defaults(func=run_convert)

    p = subparsers.add_parser("inspect", help="show a .colibri file's config, layers, experts and bytes by dtype")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run_inspect)

    p = subparsers.add_parser("verify", help="check every checksum of a .colibri file (exit 1 on damage)")
    p.add_argument("path", metavar="PATH")
    add_progress(p)
    p.set_defaults(func=run_verify)


def run_convert(args):
    from ..format.convert import convert
    convert(args.src, args.dst, experts=args.experts, dense=args.dense, force=args.force,
            progress=progress_enabled(args))
    from ..format.reader import open_model
    with open_model(args.dst) as model:
        c = model.config
        files = ", ".join(sorted(model.tokenizer_files())) or "none"
        print(f"wrote {args.dst}: {c.family}, {len(c.moe_layers)} MoE layers x {c.n_experts} experts "
              f"({args.experts}; dense {model.dense_scheme}; tokenizer files {files})")
    return 0


def describe(model):
    c, g = model.config, model.config.gating
    experts = [e for e in model.entries if e.kind == 1]
    return {
        "path": model.path,
        "format_version": model.header["version"],
        "family": c.family, "scheme": c.scheme, "hidden": c.hidden, "inter": c.inter,
        "n_experts": c.n_experts, "top_k": c.top_k, "n_layers": c.n_layers,
        "moe_layers": list(c.moe_layers),
        "dense_layers": [i for i in range(c.n_layers) if i not in c.moe_layers],
        "shared_inter": c.shared_inter, "shared_gate": c.shared_gate,
        "gating": {"kind": g.kind, "n_group": g.n_group, "topk_group": g.topk_group,
                   "norm_topk_prob": norm_topk_prob(g), "routed_scaling_factor": g.routed_scaling_factor},
        "experts_total": len(experts),
        "expert_blob_bytes": experts[0].nbytes if experts else 0,
        "tensors": len(model.entries),
        "bytes_by_dtype": model.bytes_by_dtype(),
        "file_bytes": model.header["file_size"],
        "dense_scheme": model.dense_scheme,
        "tokenizer_files": sorted(model.tokenizer_files()),
        "hot_added": hot_added(model.path),
    }


def norm_topk_prob(g):
    """Whether the top-k weights are renormalised: the softmax kinds say it by name (softmax_topk_norm vs
    softmax_topk; their spec field keeps its default), sigmoid_group by the field."""
    if g.kind.startswith("softmax"):
        return g.kind == "softmax_topk_norm"
    return bool(g.norm_topk_prob)


def hot_added(path):
    """{layer: {"added": [ids], "removed": [ids]}} from the container's hot-add directory ({} if none)."""
    from ..store.segments import Segments
    seg = Segments(path)
    layers = seg.layers()
    out = {}
    for layer in layers:
        added, removed = list(seg.added(layer)), sorted(seg.removed(layer))
        if added or removed:
            out[str(layer)] = {"added": added, "removed": removed}
    return out


def run_inspect(args):
    from ..format.reader import open_model
    with open_model(args.path) as model:
        info = describe(model)
    if args.json:
        json.dump(info, sys.stdout, indent=2)
        print()
        return 0
    g = info["gating"]
    print(f"{info['path']}  (.colibri v{info['format_version']}, {info['file_bytes']:,} bytes)")
    print(f"  family {info['family']}  hidden {info['hidden']}  expert inter {info['inter']}  "
          f"experts {info['n_experts']}  top-k {info['top_k']}  scheme {info['scheme']}")
    print(f"  gating {g['kind']}  n_group {g['n_group']}  topk_group {g['topk_group']}  "
          f"norm_topk_prob {g['norm_topk_prob']}  routed_scaling_factor {g['routed_scaling_factor']:g}")
    print(f"  shared expert inter {info['shared_inter']}  sigmoid shared gate {info['shared_gate']}")
    print(f"  layers {info['n_layers']}: MoE {_ranges(info['moe_layers'])}  dense {_ranges(info['dense_layers'])}")
    print(f"  expert blobs {info['experts_total']} x {info['expert_blob_bytes']:,} bytes; "
          f"{info['tensors']} tensors in the table")
    print(f"  dense matrices {info['dense_scheme'] or 'as stored (container without whole-model entries)'}; "
          f"tokenizer {', '.join(info['tokenizer_files']) or 'none'}")
    if info["hot_added"]:
        for layer, h in info["hot_added"].items():
            print(f"  hot-added experts, layer {layer}: added {h['added'] or '-'}  removed {h['removed'] or '-'}")
    else:
        print("  hot-added experts: none")
    print("  bytes by dtype:")
    for key, n in sorted(info["bytes_by_dtype"].items()):
        print(f"    {key:<16} {n:>16,}")
    return 0


def _ranges(values):
    if not values:
        return "-"
    out, start = [], values[0]
    for a, b in zip(values, values[1:] + [None]):
        if b != a + 1:
            out.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ",".join(out)


def _fast_checks():
    """Load the compiled core when present: it registers the fast CRC (format/integrity.py)."""
    try:
        from .. import native  # noqa: F401
    except ImportError:
        pass


def run_verify(args):
    _fast_checks()
    from ..format.reader import open_model
    with open_model(args.path) as model:
        model.verify(progress=progress_enabled(args))
        total = sum(e.nbytes for e in model.entries)
        print(f"{args.path}: OK ({len(model.entries)} tensors, {total:,} bytes, all checksums match)")
    return 0
