"""`colibri convert | inspect | verify`: make, describe and check .colibri containers.

Role in the data flow: argv -> format.convert / format.reader. Errors are
FormatError (exit 1: damaged or unsupported input) or InvalidArgument (exit 2),
mapped by colibri_dist.cli.main.
"""
import json
import sys

from ..format.layout import SCHEMES
from ..format.presets import PRESETS, gguf_type
from .common import add_progress, progress_enabled


def register(subparsers):
    p = subparsers.add_parser("convert", help="convert a Hugging Face safetensors checkpoint or a GGUF file to .colibri",
                              description="Convert a Hugging Face MoE checkpoint directory (config.json + "
                                          "model.safetensors or sharded with model.safetensors.index.json) "
                                          "to a .colibri container. Families: Mixtral, Qwen2-MoE, Qwen3-MoE, "
                                          "OLMoE, DeepSeek-V3, GLM-4.5. Or import a llama.cpp GGUF file "
                                          "(architectures qwen3moe, qwen2moe, olmoe, llama (Mixtral), glm4moe, "
                                          "deepseek2, gpt-oss; F32/F16/BF16 tensors, Q8_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, "
                                          "IQ4_XS, IQ4_NL and MXFP4 blocks kept bit for bit; needs pip install 'colibri-dist[gguf]'): every "
                                          "matrix keeps its own type in the file (a Q4_K_M file's Q4_K and Q6_K side by "
                                          "side) unless --experts/--dense/--lm-head/--preset choose one for the part.")
    p.add_argument("src", metavar="SRC", help="checkpoint directory, or a .gguf file")
    p.add_argument("dst", metavar="DST", help="output .colibri file (written as DST.partial, then renamed)")
    p.add_argument("--experts", choices=list(SCHEMES), default=None,
                   help="expert weight encoding (default: int8, symmetric per row; a GGUF: the file's)")
    p.add_argument("--dense", choices=list(SCHEMES), default=None,
                   help="encoding of dense matrices: attention projections, dense MLP layers and (unless "
                        "--lm-head) lm_head; int4-g32 / int4-g64 put every matrix in 4 bits, int6-g64 in 6 "
                        "(default: the same as --experts)")
    p.add_argument("--lm-head", dest="lm_head", choices=list(SCHEMES), default=None,
                   help="encoding of lm_head alone (default: the same as --dense); int6-g64 keeps it at 6.5 bits "
                        "per weight, beside llama.cpp's Q6_K")
    p.add_argument("--preset", choices=list(PRESETS), default=None,
                   help="a named choice of the three encodings after the llama.cpp file type of that name "
                        "(q4_k_m: the closest bytes per decode token; convert prints both sizes): " + "; ".join(
                            f"{k} = experts {v[0]}, dense {v[1]}, lm_head {v[2]}" for k, v in PRESETS.items())
                        + " (explicit --experts/--dense/--lm-head win)")
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
    convert(args.src, args.dst, experts=args.experts, dense=args.dense, lm_head=args.lm_head, preset=args.preset,
            force=args.force, progress=progress_enabled(args))
    from ..format.reader import open_model
    with open_model(args.dst) as model:
        c, enc = model.config, model.matrix_encodings()
        files = ", ".join(sorted(model.tokenizer_files())) or "none"
        print(f"wrote {args.dst}: {c.family}, {len(c.moe_layers)} MoE layers x {c.n_experts} experts "
              f"({scheme_text(c.scheme, enc['experts'])}; dense {scheme_text(model.dense_scheme, enc['dense'])}; "
              f"lm_head {model.lm_head_scheme}; tokenizer files {files})")
        print(token_bytes_line(model, gguf_type(args.preset)))
    return 0


def token_bytes_line(model, ftype=None):
    """Weight bytes per decode token of the container and (with a preset) of llama.cpp's file type."""
    from ..format import token_bytes
    ours = token_bytes.ours(model)
    line = (f"bytes per decode token: {ours['total'] / 1e6:,.1f} MB (dense {ours['dense'] / 1e6:,.1f}, "
            f"lm_head {ours['lm_head'] / 1e6:,.1f}, experts {ours['experts'] / 1e6:,.1f})")
    if ftype:
        peer = token_bytes.llama_cpp_estimate(model, ftype)
        line += (f"; llama.cpp {ftype} of this model: {peer['total'] / 1e6:,.1f} MB (dense {peer['dense'] / 1e6:,.1f}, "
                 f"lm_head {peer['lm_head'] / 1e6:,.1f}, experts {peer['experts'] / 1e6:,.1f}), "
                 f"ratio {ours['total'] / peer['total']:.3f}")
    return line


def scheme_text(scheme, counts):
    """A part's scheme as printed: the name, or for a mixed part its encodings with matrix counts
    ("mixed: q4_k 16, q6_k 8 matrices")."""
    if len(counts) < 2:
        return str(scheme)
    return "mixed: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) + " matrices"


def describe(model):
    c, g = model.config, model.config.gating
    experts = [e for e in model.entries if e.kind == 1]
    sizes = {}
    for e in experts:
        sizes[e.nbytes] = sizes.get(e.nbytes, 0) + 1
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
        "expert_blob_sizes": {str(k): v for k, v in sorted(sizes.items())},     # bytes -> blobs (layers may differ)
        "matrix_encodings": model.matrix_encodings(),
        "tensors": len(model.entries),
        "bytes_by_dtype": model.bytes_by_dtype(),
        "file_bytes": model.header["file_size"],
        "dense_scheme": model.dense_scheme,
        "lm_head_scheme": model.lm_head_scheme,
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
          f"experts {info['n_experts']}  top-k {info['top_k']}  "
          f"scheme {scheme_text(info['scheme'], info['matrix_encodings']['experts'])}")
    print(f"  gating {g['kind']}  n_group {g['n_group']}  topk_group {g['topk_group']}  "
          f"norm_topk_prob {g['norm_topk_prob']}  routed_scaling_factor {g['routed_scaling_factor']:g}")
    print(f"  shared expert inter {info['shared_inter']}  sigmoid shared gate {info['shared_gate']}")
    print(f"  layers {info['n_layers']}: MoE {_ranges(info['moe_layers'])}  dense {_ranges(info['dense_layers'])}")
    blobs = ", ".join(f"{n} x {int(b):,}" for b, n in info["expert_blob_sizes"].items()) or "0"
    print(f"  expert blobs {blobs} bytes; {info['tensors']} tensors in the table")
    dense = info["dense_scheme"] and scheme_text(info["dense_scheme"], info["matrix_encodings"]["dense"])
    print(f"  dense matrices {dense or 'as stored (container without whole-model entries)'}; "
          f"lm_head {info['lm_head_scheme'] or 'as stored'}; "
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
