"""llama.cpp's own tools on a model: convert_hf_to_gguf.py, llama-quantize, and the log-probabilities
llama-perplexity saves, read back to compare colibri's logits with llama.cpp's on the same GGUF file.

Role: the peer side of the GGUF import tests and of the quality comparison of issue 32. A Hugging Face checkpoint
becomes a GGUF by llama.cpp's converter, llama-quantize gives it llama.cpp's own mix of types (Q4_K_M: Q4_K with
Q6_K down projections and attn_v on some layers, ...), and `llama-perplexity --kl-divergence-base FILE` saves, for
the second half of every n_ctx chunk of a text, each position's log-softmax over the vocabulary (16-bit codes
over [max - 16, max], tools/perplexity/perplexity.cpp), with the token ids it ran. `compare` scores any logits
function on those same tokens by llama.cpp's own statistics (`--kl-divergence`: top-1 agreement, mean KL
divergence of ours from llama.cpp's), plus the largest log-probability difference. Nothing here runs at
inference; `find` names what is missing on a machine without a llama.cpp build. The tree is
$COLIBRI_LLAMA_CPP (default: the vendored copy in shared/peers).
"""
import os
import subprocess
import sys
from dataclasses import dataclass

import numpy as np

ROOT = os.environ.get("COLIBRI_LLAMA_CPP", "/work/peers/llama_cpp_python-0.3.36/vendor/llama.cpp")


@dataclass(frozen=True)
class Tools:
    converter: str      # convert_hf_to_gguf.py
    quantize: str       # build/bin/llama-quantize
    perplexity: str     # build/bin/llama-perplexity


def find(root=None):
    """(Tools, None) when the llama.cpp tree at `root` has its converter and a build, else (None, what is missing)."""
    root = root or ROOT
    paths = Tools(os.path.join(root, "convert_hf_to_gguf.py"), os.path.join(root, "build", "bin", "llama-quantize"),
                  os.path.join(root, "build", "bin", "llama-perplexity"))
    absent = [p for p in (paths.converter, paths.quantize, paths.perplexity) if not os.path.exists(p)]
    if absent:
        return None, f"llama.cpp is not built here: missing {', '.join(absent)} (set COLIBRI_LLAMA_CPP)"
    return paths, None


def _run(args, what):
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode:
        tail = (done.stderr or done.stdout)[-2000:]
        raise RuntimeError(f"{what} failed ({done.returncode}): {' '.join(map(str, args))}\n{tail}")
    return done.stdout + done.stderr


def convert_hf(tools, hf_dir, out, outtype="f32"):
    """llama.cpp's convert_hf_to_gguf.py on a checkpoint directory -> `out`; returns its log."""
    return _run([sys.executable, tools.converter, str(hf_dir), "--outtype", outtype, "--outfile", str(out)],
                "convert_hf_to_gguf.py")


def quantize(tools, src, dst, ftype, threads=1):
    """llama-quantize SRC DST FTYPE (its own choice of a type per tensor) -> its log."""
    return _run([tools.quantize, str(src), str(dst), ftype, str(threads)], "llama-quantize")


def save_logprobs(tools, model, text, out, n_ctx=128, chunks=40, threads=1, extra=()):
    """llama-perplexity on `text` (a file) saving its log-probabilities to `out`, in float32 all the way (f32 KV
    cache, no flash attention) so only the weights' arithmetic differs from ours (plus the flags `extra`); returns
    its log."""
    return _run([tools.perplexity, "-m", str(model), "-f", str(text), "-c", str(n_ctx), "-b", str(n_ctx),
                 "-t", str(threads), "-ctk", "f32", "-ctv", "f32", "-fa", "off", "--chunks", str(chunks),
                 "--kl-divergence-base", str(out), *extra], "llama-perplexity")


def kl_divergence(tools, model, base, n_ctx=128, chunks=40, threads=1, tries=3, extra=()):
    """llama-perplexity --kl-divergence: `model` scored against the log-probs `base` saved (same settings as
    save_logprobs, plus the flags `extra`; the tokens come from `base`) -> parse_kl of its log. Its logger is a
    thread whose queue is not drained at exit (common/log.cpp leaks the singleton: llama.cpp issue 22142), so a run
    that exits 0 can lose its last lines, the statistics among them (seen here, more often under load): such a run
    is made again, up to `tries` times (the numbers are deterministic), then the ValueError stands (compare_saved is
    the fallback)."""
    args = [tools.perplexity, "-m", str(model), "-c", str(n_ctx), "-b", str(n_ctx), "-t", str(threads), "-ctk", "f32",
            "-ctv", "f32", "-fa", "off", "--chunks", str(chunks), "--kl-divergence-base", str(base), "--kl-divergence",
            *extra]
    for attempt in range(tries):
        try:
            return parse_kl(_run(args, "llama-perplexity --kl-divergence"))
        except ValueError:
            if attempt == tries - 1:
                raise


_KL_LINES = {"Mean    KLD:": "mean_kl", "Same top p:": "top1", "Mean PPL(Q) ": "ppl_q", "Mean PPL(base) ": "ppl_base",
             "Maximum KLD:": "max_kl"}


def parse_kl(log):
    """llama-perplexity --kl-divergence's statistics: {"mean_kl", "max_kl", "top1" (a fraction), "ppl_q",
    "ppl_base" (the quantized and the base model's perplexities)}; a missing one is a ValueError quoting the
    log's tail."""
    out = {}
    for line in log.splitlines():
        line = line.split(" I ", 1)[-1] if line[:1].isdigit() else line     # "0.00.123.456 I " log prefixes
        for head, key in _KL_LINES.items():
            if line.startswith(head):
                value = float(line.split(":", 1)[1].split()[0])
                out[key] = value / 100 if key == "top1" else value
    missing = [k for k in _KL_LINES.values() if k not in out]
    if missing:
        raise ValueError(f"llama-perplexity --kl-divergence printed no {', '.join(missing)}:\n{log[-1500:]}")
    return out


def compare_saved(base, other):
    """compare() of two of llama-perplexity's saved files on the same tokens (e.g. its Q4_K_M run against its F32
    run: what its --kl-divergence computes, with both sides at the 16-bit codes' precision)."""
    if base.tokens.shape != other.tokens.shape or not np.array_equal(base.tokens, other.tokens):
        raise ValueError("the two saved log-prob files are not of the same tokens")
    rows = iter(other.logprobs)

    def logits_of(chunk):
        out = np.zeros((len(chunk), other.logprobs.shape[-1]), np.float32)
        out[base.first:-1] = next(rows)
        return out
    return compare(base, logits_of)


def saved_ppl(saved):
    """(perplexity, clipped) as llama-perplexity computes it, from its own saved log-probs of each next token on
    the positions it scores (the second half of every chunk), to the 16-bit codes' precision; clipped: the fraction
    of those next tokens below the codes' floor (max - 16), where the saved value is the floor: the perplexity is
    then an underestimate."""
    nll, clipped = 0.0, 0
    for chunk, base, coded in zip(saved.tokens, saved.logprobs, saved.coded):
        at = (np.arange(len(base)), chunk[saved.first + 1:])
        nll -= float(base[at].sum())
        clipped += int((~coded[at]).sum())
    n = saved.logprobs.shape[0] * saved.logprobs.shape[1]
    return float(np.exp(nll / n)), clipped / n


@dataclass(frozen=True)
class SavedLogprobs:
    tokens: np.ndarray      # int32 [chunks, n_ctx]: the ids llama.cpp ran, chunk by chunk from position 0
    logprobs: np.ndarray    # float32 [chunks, n_ctx - 1 - first, vocab]: positions first .. n_ctx - 2
    coded: np.ndarray       # bool, same shape: above the floor (max - 16) the 16-bit code cannot go below
    steps: np.ndarray       # float32 [chunks, positions, 1]: each row's code step (max - min) / 65535
    first: int              # n_ctx // 2

    @property
    def step(self):
        return float(self.steps.max())


def read_logprobs(path):
    """The file `llama-perplexity --kl-divergence-base` writes: "_logits_", n_ctx, n_vocab, n_chunk (int32),
    the tokens, then per scored position (2 * ceil(n_vocab / 2) + 4) uint16: f32 scale, f32 min_log_prob, codes."""
    raw = open(path, "rb").read()
    if raw[:8] != b"_logits_":
        raise ValueError(f"{path}: not a llama-perplexity logits file")
    n_ctx, n_vocab, n_chunk = (int(v) for v in np.frombuffer(raw, np.int32, 3, 8))
    first, nv = n_ctx // 2, 2 * ((n_vocab + 1) // 2) + 4
    tokens = np.frombuffer(raw, np.int32, n_chunk * n_ctx, 20).reshape(n_chunk, n_ctx)
    rows = np.frombuffer(raw, np.uint16, offset=20 + 4 * tokens.size).reshape(n_chunk, n_ctx - 1 - first, nv)
    head = np.ascontiguousarray(rows[..., :4]).view(np.float32)         # [.., 2]: scale, min_log_prob
    codes = rows[..., 4:4 + n_vocab].astype(np.float32)
    logprobs = head[..., 1:2] + head[..., 0:1] * codes
    return SavedLogprobs(tokens, logprobs, codes > 0, head[..., 0:1], first)


def log_softmax(logits):
    x = np.asarray(logits, np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def compare(saved, logits_of, bos=None):
    """Score logits_of(token ids of one chunk) -> [n_ctx, vocab] against llama.cpp's saved log-probabilities, as
    `llama-perplexity --kl-divergence` scores two of its own runs: {"positions", "top1" (same argmax),
    "top1_code_ties" (the other positions where our top token's saved code is within one step of the saved top's:
    a tie the 16-bit codes cannot order), "mean_kl" (KL(llama.cpp || ours) over its entries above e^-16),
    "max_abs_logprob_diff" (over coded entries), "nll" (our mean negative log-likelihood of each next token over the
    same positions: the log of the perplexity llama-perplexity reports)}. bos: the id llama-perplexity put first in
    each chunk when the vocabulary adds one (tokenizer.ggml.add_bos_token; the file keeps the text's own first id)."""
    same = ties = positions = 0
    kl = worst = nll = 0.0
    for chunk, base, coded, step in zip(saved.tokens, saved.logprobs, saved.coded, saved.steps):
        if bos is not None:
            chunk = np.concatenate([[bos], chunk[1:]]).astype(chunk.dtype)
        ours = log_softmax(logits_of(chunk))[saved.first:-1]
        nll -= float(ours[np.arange(len(ours)), chunk[saved.first + 1:]].sum())
        top = ours.argmax(axis=1)
        agree = top == base.argmax(axis=1)
        same += int(agree.sum())
        ties += int((~agree & (base[np.arange(len(top)), top] >= base.max(axis=1) - step[:, 0])).sum())
        positions += len(base)
        kl += float((np.exp(base) * (base - ours) * (base > -16)).sum())
        worst = max(worst, float(np.abs(ours - base)[coded].max()))
    return {"positions": positions, "top1": same / positions, "top1_code_ties": ties / positions,
            "mean_kl": kl / positions, "max_abs_logprob_diff": worst, "nll": nll / positions}
