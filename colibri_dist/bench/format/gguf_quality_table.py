"""Tables of `bench gguf-quality`: pure functions over its report dict (no llama.cpp, no engine), so tests can
check them on a made-up report.

Role: markdown(report) renders (1) colibri on each imported GGUF beside llama.cpp on the same file, (2) every
mode's mean KL divergence / top-1 agreement against the float32 reference per model, with bits per weight, beside
llama.cpp's own Q8_0 / Q4_K_M (its --kl-divergence), and (3) closest_four_bit(): which 4-bit mode of ours comes
closest to llama.cpp's Q4_K_M: of about its bits per weight, the lowest KL (geometric mean over models of our KL /
its KL).
"""
import math

from .gguf_quality_ours import FOUR_BIT, MODES

PEER = ("Q8_0", "Q4_K_M")
TOOL = "llama-perplexity --kl-divergence"
EQUAL_BITS = 0.5        # "equal bits per weight": within this of llama.cpp's Q4_K_M file


def _scored(report):
    return [m for m in report["models"] if "skipped" not in m]


def same_file_table(report):
    rows = [(m["model"], typ, r) for m in _scored(report) for typ, r in m.get("same_file", {}).items()]
    if not rows:
        return ""
    itself = {(m["model"], typ): r for m in _scored(report) for typ, r in m.get("llama_cpp_itself", {}).items()}
    out = ["| model | file | positions | top-1 (+ ties within a code step) | mean KL | max abs d log-prob | "
           "PPL colibri | PPL llama.cpp | ratio | llama.cpp vs itself: top-1 / mean KL |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for name, typ, r in rows:
        own = itself.get((name, typ))
        out.append(f"| {name} | {typ} | {r['positions']} | {r['top1']:.4f} (+{r['top1_code_ties']:.4f}) | "
                   f"{r['mean_kl']:.2e} | {r['max_abs_logprob_diff']:.3g} | {r['ppl']:.3f} | "
                   f"{r['ppl_llama_cpp']:.3f} | {r['ppl_ratio']:.5f} | "
                   + (f"{own['top1']:.4f} / {own['mean_kl']:.2e} |" if own else "- |"))
    return "\n".join(out) + "\n"


def _bits(values):
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return f"{lo:.2f}" if hi - lo < 0.005 else f"{lo:.2f}-{hi:.2f}"


def modes_table(report):
    models = _scored(report)
    if not models:
        return ""
    modes = list(dict.fromkeys(k for m in models for k in m["modes"]))
    out = ["| mode | bits/weight | " + " | ".join(m["model"] for m in models) + " |",
           "|---|---|" + "---|" * len(models)]
    for mode in modes:
        cells = [m["modes"].get(mode) for m in models]
        out.append(f"| colibri {mode} | {_bits([c['bits_per_weight'] for c in cells if c])} | " + " | ".join(
            f"{c['mean_kl']:.2e} / {c['top1']:.3f}" if c else "-" for c in cells) + " |")
    for typ in PEER:
        cells = [m.get("llama_cpp", {}).get(typ) for m in models]
        if any(cells):
            bits = [m["llama_cpp_bits_per_weight"][typ] for m in models if m.get("llama_cpp")]
            out.append(f"| llama.cpp {typ} (its --kl-divergence) | {_bits(bits)} | " + " | ".join(
                f"{c['mean_kl']:.2e} / {c['top1']:.3f}{'' if c.get('kl_source', TOOL) == TOOL else '*'}" if c else "-"
                for c in cells) + " |")
    text = "\n".join(out) + "\n"
    if "*" in text:
        text += ("\n\\* from llama.cpp's two saved log-prob files: its --kl-divergence log lost its last lines three "
                 "times (its logger is not drained at exit, llama.cpp issue 22142); JSON: kl_source.\n")
    return text


def closest_four_bit(report):
    """{mode: {"kl_ratio": geometric mean over models of our KL / llama.cpp Q4_K_M's, "bits_per_weight"}}, and
    the name of our own 4-bit mode (quantized by colibri, not an imported file) of about Q4_K_M's bits per weight
    (within EQUAL_BITS) with the lowest ratio (None without llama.cpp's numbers or no such mode)."""
    models = [m for m in _scored(report) if m.get("llama_cpp", {}).get("Q4_K_M")]
    ratios = {}
    for mode in FOUR_BIT:
        got = [(m["modes"][mode], m["llama_cpp"]["Q4_K_M"]["mean_kl"], m["llama_cpp_bits_per_weight"]["Q4_K_M"])
               for m in models if mode in m["modes"]]
        if got and all(c["mean_kl"] > 0 and kl > 0 for c, kl, _ in got):
            ratios[mode] = {"kl_ratio": math.exp(sum(math.log(c["mean_kl"] / kl) for c, kl, _ in got) / len(got)),
                            "bits_per_weight": sum(c["bits_per_weight"] for c, _, _ in got) / len(got),
                            "llama_cpp_bits_per_weight": sum(b for _, _, b in got) / len(got)}
    equal = {k: v for k, v in ratios.items() if MODES[k][0] == "hf"
             and abs(v["bits_per_weight"] - v["llama_cpp_bits_per_weight"]) <= EQUAL_BITS}
    best = min(equal, key=lambda k: equal[k]["kl_ratio"], default=None)
    return ratios, best


def markdown(report):
    out = []
    skipped = [m for m in report["models"] if "skipped" in m]
    same = same_file_table(report)
    if same:
        out += ["colibri (default mode) on each imported GGUF file against llama.cpp on the same file, "
                "on the tokens llama-perplexity ran; the last column: llama.cpp's --no-repack run of the file "
                "(its plain vec_dot kernels) against its default run (repacked kernels), by its own "
                "--kl-divergence:", "", same]
    elif report.get("llama_cpp_missing"):
        out += [f"No llama.cpp comparison: {report['llama_cpp_missing']}", ""]
    refs = sorted({m["reference"] for m in _scored(report)})
    out += [f"Mean KL divergence / top-1 agreement against the float32 reference ({'; '.join(refs)}), "
            f"{report['chunks']} chunks of {report['ctx']} tokens, the second half of each scored:", "",
            modes_table(report)]
    ratios, best = closest_four_bit(report)
    if ratios:
        out += ["| 4-bit mode | bits/weight | mean KL / llama.cpp Q4_K_M's (geometric mean) |", "|---|---|---|"]
        out += [f"| {k} | {v['bits_per_weight']:.2f} (Q4_K_M {v['llama_cpp_bits_per_weight']:.2f}) | "
                f"{v['kl_ratio']:.3f} |" for k, v in ratios.items()]
        out += ["", f"Our own 4-bit mode within {EQUAL_BITS} bits per weight of llama.cpp's Q4_K_M with the lowest "
                f"mean KL: {best}" + (f" ({ratios[best]['kl_ratio']:.3f} x Q4_K_M's)." if best else "."), ""]
    out += [f"Skipped {m['model']}: {m['skipped']}" for m in skipped]
    return "\n".join(out).rstrip() + "\n"
