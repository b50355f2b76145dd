"""The llama.cpp side of `bench gguf-quality`: its GGUF files of a checkpoint and its own quality statistics.

Role: files() makes, with llama.cpp's tools (testing/llama_cpp.py), the base GGUF (F32 by convert_hf_to_gguf.py;
F16 for the large OLMoE checkpoint) and llama-quantize's Q8_0 and Q4_K_M of it (or other types); runs() saves llama-perplexity's
log-probabilities of each file on the text (f32 KV cache, no flash attention: only the weights' arithmetic
differs from colibri's), its perplexity from those (testing/llama_cpp.saved_ppl), and runs `llama-perplexity
--kl-divergence` of each quantized file against the base one's saved log-probs: llama.cpp's own mean KL, top-1
("Same top p"), perplexity ratio (or the same computed from its two saved files when its log loses them), and
itself(): llama.cpp against llama.cpp on the same quantized file, its kernels for repacked weights (its default on
x86 for Q4_K, IQ4_NL, MXFP4; Q6_K and Q8_0 are not repacked there) against its plain vec_dot ones (--no-repack):
the agreement two of its own summation orders reach, the floor beside colibri's same-file numbers. The tokens llama.cpp ran are in the saved files;
colibri scores itself on exactly those (gguf_quality_ours.py).
"""
import os

from ...testing import llama_cpp

TYPES = ("Q8_0", "Q4_K_M")


def files(tools, hf_dir, work, base="F32", threads=1, types=TYPES):
    """{"F32" (or "F16"): the converter's file, then each of `types` ("Q8_0", "Q4_K_M", or any other llama-quantize
    type, e.g. "MXFP4_MOE": MXFP4 experts, the rest Q8_0, as gpt-oss ships): llama-quantize's} in `work` (made
    once)."""
    out = {base: os.path.join(work, f"{base}.gguf")}
    if not os.path.exists(out[base]):
        llama_cpp.convert_hf(tools, hf_dir, out[base] + ".partial", outtype=base.lower())
        os.replace(out[base] + ".partial", out[base])
    for typ in types:
        out[typ] = os.path.join(work, f"{typ}.gguf")
        if not os.path.exists(out[typ]):
            llama_cpp.quantize(tools, out[base], out[typ] + ".partial", typ, threads)
            os.replace(out[typ] + ".partial", out[typ])
    return out


def runs(tools, ggufs, text, work, n_ctx, chunks, threads=1):
    """-> ({type: SavedLogprobs}, {type: {"ppl", and for the quantized types llama.cpp's KL statistics vs the base
    file: "mean_kl", "max_kl", "top1", "ppl_base"}}); the base type is the first of `ggufs`."""
    saved, stats = {}, {}
    for typ, path in ggufs.items():
        kld = os.path.join(work, f"{typ}.kld")
        llama_cpp.save_logprobs(tools, path, text, kld, n_ctx=n_ctx, chunks=chunks, threads=threads)
        saved[typ] = llama_cpp.read_logprobs(kld)
        ppl, clipped = llama_cpp.saved_ppl(saved[typ])
        stats[typ] = {"ppl": ppl, "ppl_clipped_positions": clipped}
    first = next(iter(ggufs))
    for typ in list(ggufs)[1:]:
        stats[typ].update(kl_stats(tools, ggufs[typ], saved[first], saved[typ], os.path.join(work, f"{first}.kld"),
                                   n_ctx, chunks, threads))
    return saved, stats


def itself(tools, ggufs, saved, text, work, n_ctx, chunks, threads):
    """{quantized type: llama.cpp's --kl-divergence statistics of the file run with --no-repack against its default
    run's saved log-probs (runs() made them: `saved`)}; when its log loses them, the same computed from the
    --no-repack run's own saved file (compare_saved; "kl_source" says which)."""
    out, flag = {}, ("--no-repack",)
    for typ in list(ggufs)[1:]:
        try:
            out[typ] = llama_cpp.kl_divergence(tools, ggufs[typ], os.path.join(work, f"{typ}.kld"), n_ctx=n_ctx,
                                               chunks=chunks, threads=threads, extra=flag)
            out[typ]["kl_source"] = "llama-perplexity --kl-divergence"
        except ValueError:
            other = os.path.join(work, f"{typ}-no-repack.kld")
            llama_cpp.save_logprobs(tools, ggufs[typ], text, other, n_ctx=n_ctx, chunks=chunks, threads=threads,
                                    extra=flag)
            out[typ] = dict(llama_cpp.compare_saved(saved[typ], llama_cpp.read_logprobs(other)),
                            kl_source="its two saved log-prob files")
    return out


def kl_stats(tools, path, base, saved, base_path, n_ctx, chunks, threads):
    """llama.cpp's statistics of one quantized file against the base: its --kl-divergence's when its log keeps
    them (testing/llama_cpp.kl_divergence), else the same computed from its two saved files (compare_saved);
    "kl_source" says which, the "saved_*" keys are always the computed ones."""
    mine = llama_cpp.compare_saved(base, saved)
    out = {"saved_mean_kl": mine["mean_kl"], "saved_top1": mine["top1"]}
    try:
        out.update(llama_cpp.kl_divergence(tools, path, base_path, n_ctx=n_ctx, chunks=chunks, threads=threads),
                   kl_source="llama-perplexity --kl-divergence")
    except ValueError:
        out.update(mean_kl=mine["mean_kl"], top1=mine["top1"], kl_source="its two saved log-prob files (the "
                   "--kl-divergence log lost its statistics three times: llama.cpp issue 22142)")
    return out


def bos(path):
    """The id llama-perplexity puts first in each chunk (tokenizer.ggml.add_bos_token true), else None."""
    import gguf
    fields = gguf.GGUFReader(str(path)).fields
    add = fields.get("tokenizer.ggml.add_bos_token")
    if add is None or not add.contents():
        return None
    return int(fields["tokenizer.ggml.bos_token_id"].contents())
