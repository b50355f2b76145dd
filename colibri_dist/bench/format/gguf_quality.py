"""`python -m colibri_dist.bench gguf-quality`: colibri on GGUF files beside llama.cpp on the same files, and
each of colibri's modes against the float32 model beside llama.cpp's own Q8_0 / Q4_K_M (issue 32's quality table).

Role: for each family's tiny random model at llama.cpp's block sizes (gguf_quality_models.py) and, with
`--olmoe`, the whole-model benchmark's 4-layer OLMoE checkpoint (F16 base file): llama.cpp's tools make the
base / Q8_0 / Q4_K_M files and score them on a real text (gguf_quality_peer.py: llama-perplexity's saved
log-probs, its --kl-divergence); colibri imports each file and scores itself on the tokens llama.cpp ran
(a) against llama.cpp on the same file (top-1, mean KL, max |log-prob diff|, perplexity ratio; beside llama.cpp
against itself on that file, repacked kernels vs --no-repack) and (b) every
mode of gguf_quality_ours.MODES against the base file's log-probs, as llama.cpp scores its own quants. Without a
llama.cpp build the (b) part still runs, against the transformers float32 model, and the JSON names what was
missing. A family the converter or llama.cpp cannot take is skipped with the error. JSON always
(results/format/gguf_quality_<host>.json), `--markdown` writes the tables (gguf_quality_table.py).
"""
import argparse
import json
import os
import socket
import sys
import tempfile

from ...errors import ColibriError
from ...format.tiny import FAMILIES
from . import gguf_quality_ours as ours
from . import gguf_quality_peer as peer
from .gguf_quality_table import markdown


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m colibri_dist.bench gguf-quality", description=__doc__.split("\n")[0])
    ap.add_argument("--families", default=",".join(FAMILIES), help="tiny families (comma-separated, '' for none)")
    ap.add_argument("--olmoe", action="store_true", help="also the 4-layer OLMoE benchmark checkpoint (large)")
    ap.add_argument("--modes", default=",".join(ours.MODES), help="colibri modes: " + ", ".join(ours.MODES))
    ap.add_argument("--types", default=",".join(peer.TYPES),
                    help="llama-quantize types of the base file to score (e.g. Q8_0,Q4_K_M,MXFP4_MOE,IQ4_XS)")
    ap.add_argument("--ctx", type=int, default=128, help="tokens per chunk (llama-perplexity -c)")
    ap.add_argument("--chunks", type=int, default=40, help="chunks; scored tokens = chunks * (ctx/2 - 1)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-llama", action="store_true", help="do not use llama.cpp even when it is built")
    ap.add_argument("--work", default=None, help="folder for checkpoints and files (default: a temporary one)")
    ap.add_argument("--cache", default=os.path.join(os.path.expanduser("~"), ".cache", "colibri"),
                    help="where the OLMoE checkpoint is made once (bench model's cache)")
    ap.add_argument("--json", default=os.path.join("results", "format", f"gguf_quality_{socket.gethostname()}.json"))
    ap.add_argument("--markdown", default=None, help="also write the tables here")
    args = ap.parse_args(argv)
    args.families = [f for f in args.families.split(",") if f]
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    args.types = tuple(t.strip() for t in args.types.split(",") if t.strip())
    for flag, names, known in (("--families", args.families, FAMILIES), ("--modes", args.modes, ours.MODES)):
        bad = [n for n in names if n not in known]
        if bad:
            ap.error(f"{flag}: unknown {bad[0]!r}; choose from {', '.join(known)}")
    if args.ctx < 8 or args.ctx % 2 or args.chunks < 1 or args.threads < 1:
        ap.error("--ctx must be even and >= 8, --chunks and --threads >= 1")
    return args


def subject(name, args, work):
    """(hf_dir, transformers model or None, base GGUF type) of a tiny family or of "olmoe-bench"."""
    if name != "olmoe-bench":
        from .gguf_quality_models import write_family
        hf_dir = os.path.join(work, "hf")
        return hf_dir, write_family(name, hf_dir), "F32"
    from ..model.peer_llama import source_with_tokenizer
    from ..model.run import FULL, checkpoint
    hf_dir, _ = checkpoint(FULL, args.cache)
    return source_with_tokenizer(hf_dir, work), None, "F16"


def run_one(name, args, tools, text):
    """The record of one model: its reference, llama.cpp's statistics, the same-file and the modes' scores."""
    work = os.path.join(args.work, name)
    os.makedirs(work, exist_ok=True)
    hf_dir, model, base = subject(name, args, work)
    rec, ggufs, saved, bos = {"model": name}, {}, None, None
    if tools:
        ggufs = peer.files(tools, hf_dir, work, base, args.threads, args.types)
        saved, rec["llama_cpp"] = peer.runs(tools, ggufs, text, work, args.ctx, args.chunks, args.threads)
        rec["llama_cpp_bits_per_weight"] = {t: ours.gguf_bits(p) for t, p in ggufs.items()}
        bos, ref = peer.bos(ggufs[base]), saved[base]
        rec["reference"] = f"llama.cpp on the {base} file (llama-perplexity --kl-divergence-base)"
        rec["same_file"] = same_file(ggufs, saved, rec["llama_cpp"], work, args.threads, bos)
        rec["llama_cpp_itself"] = peer.itself(tools, ggufs, saved, text, work, args.ctx, args.chunks, args.threads)
    elif model is None:
        raise RuntimeError(f"{name}: scored against llama.cpp's base file only, and llama.cpp is missing")
    else:
        ref = ours.reference(model, ours.tokens(hf_dir, text, args.ctx, args.chunks))
        rec["reference"] = "transformers float32"
    rec["modes"] = {}
    for mode in args.modes:
        if ours.MODES[mode][0] != "hf" and ours.MODES[mode][0] not in ggufs:   # needs llama.cpp's file of the type
            continue
        path = ours.container(mode, hf_dir, ggufs, work)
        rec["modes"][mode] = ours.score(path, ref, ours.MODES[mode][2], args.threads, bos)
        print(f"{name} {mode}: KL {rec['modes'][mode]['mean_kl']:.3g} top-1 {rec['modes'][mode]['top1']:.4f}",
              flush=True)
    return rec


def same_file(ggufs, saved, stats, work, threads, bos):
    """{type: colibri (default mode) on the imported file vs llama.cpp on it + both perplexities}."""
    import math

    from ...format.convert import convert
    out = {}
    for typ, path in ggufs.items():
        dst = os.path.join(work, f"imported-{typ}.colibri")
        if not os.path.exists(dst):
            convert(path, dst, progress=False)
        r = ours.score(dst, saved[typ], {"w8a8": True}, threads, bos)
        r["ppl"], r["ppl_llama_cpp"] = math.exp(r["nll"]), stats[typ]["ppl"]
        r["ppl_ratio"] = r["ppl"] / r["ppl_llama_cpp"]
        out[typ] = r
        print(f"{os.path.basename(work)} {typ} vs llama.cpp: top-1 {r['top1']:.4f} KL {r['mean_kl']:.3g} "
              f"ppl ratio {r['ppl_ratio']:.5f}", flush=True)
    return out


def main(argv=None):
    from ...testing import llama_cpp
    from ..kernels.run import machine
    from .gguf_quality_models import text as write_text
    args = parse_args(list(sys.argv[2:] if argv is None else argv))
    tools, missing = (None, "--no-llama") if args.no_llama else llama_cpp.find()
    report = {"command": " ".join([sys.executable, "-m", "colibri_dist.bench", "gguf-quality"] +
                                  list(sys.argv[2:] if argv is None else argv)),
              "machine": machine(), "llama_cpp": llama_cpp.ROOT if tools else None, "llama_cpp_missing": missing,
              "ctx": args.ctx, "chunks": args.chunks, "models": []}
    with tempfile.TemporaryDirectory() as tmp:
        args.work = args.work or tmp
        os.makedirs(args.work, exist_ok=True)
        text = write_text(os.path.join(args.work, "text.txt"))
        for name in args.families + (["olmoe-bench"] if args.olmoe else []):
            try:
                report["models"].append(run_one(name, args, tools, text))
            except (RuntimeError, ValueError, OSError, ColibriError) as exc:    # converter / llama.cpp / import
                report["models"].append({"model": name, "skipped": f"{type(exc).__name__}: {str(exc)[-600:]}"})
                print(f"{name}: skipped: {exc}", file=sys.stderr, flush=True)
    report["machine"]["loadavg_after"] = list(os.getloadavg())
    tables = markdown(report)
    print(tables)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(tables)
    print(f"wrote {args.json}")
    return 0
