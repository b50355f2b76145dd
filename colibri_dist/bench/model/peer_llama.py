"""The llama.cpp side of `python -m colibri_dist.bench peer`: GGUF files of the benchmark checkpoint and
llama-batched-bench runs, as subprocesses of a llama.cpp build outside this repository.

Role: tools(bin_dir) finds llama-batched-bench / llama-quantize and the converter beside them
(../shared/peers/build-llama-cpp.sh builds that tree); gguf_files() converts the bf16 HF checkpoint once
to GGUF f16 (convert_hf_to_gguf.py, in a copy of the checkpoint folder that gains a small byte-level BPE
tokenizer: the random benchmark model has none, and the converter needs one) and quantizes it to each
requested type; batched() runs one llama-batched-bench call and parses its JSONL lines; gguf_token_bytes()
reads a GGUF's tensor table (its gguf-py) for the weight bytes one decode token reads.
"""
import json
import os
import subprocess
import sys

TOKENIZER_VOCAB = 1024      # the converter pads the rest of the model's vocabulary with [PAD] tokens


class Tools:
    def __init__(self, bin_dir):
        self.bin = os.path.abspath(bin_dir)
        self.root = os.path.dirname(os.path.dirname(self.bin))     # <llama.cpp>/build/bin -> <llama.cpp>
        self.batched_bench = os.path.join(self.bin, "llama-batched-bench")
        self.quantize = os.path.join(self.bin, "llama-quantize")
        self.converter = os.path.join(self.root, "convert_hf_to_gguf.py")
        self.gguf_py = os.path.join(self.root, "gguf-py")


def tools(bin_dir):
    """Tools of a llama.cpp build; a clear error naming what is missing."""
    t = Tools(bin_dir)
    for path in (t.batched_bench, t.quantize, t.converter):
        if not os.path.exists(path):
            raise FileNotFoundError(f"--llama-bin {bin_dir}: {path} is missing (build llama.cpp with "
                                    f"../shared/peers/build-llama-cpp.sh DIR and pass the bin folder it prints)")
    return t


def _tokenizer(dst, vocab):
    """A byte-level BPE tokenizer of at most `vocab` tokens (trained on a fixed synthetic text) + its config, in dst."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=min(TOKENIZER_VOCAB, vocab), special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    text = [" ".join(f"w{(i * 7919 + j * 104729) % 5003} {j}" for j in range(64)) for i in range(2000)]
    tok.train_from_iterator(text, trainer)
    tok.save(os.path.join(dst, "tokenizer.json"))
    with open(os.path.join(dst, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>",
                   "bos_token": "<|endoftext|>", "model_max_length": 4096}, f)


def source_with_tokenizer(hf_dir, work):
    src = os.path.join(work, "hf-with-tokenizer")
    os.makedirs(src, exist_ok=True)
    for name in os.listdir(hf_dir):
        link = os.path.join(src, name)
        if not os.path.lexists(link) and not name.startswith("tokenizer"):
            os.symlink(os.path.abspath(os.path.join(hf_dir, name)), link)
    if not os.path.exists(os.path.join(src, "tokenizer.json")):
        with open(os.path.join(hf_dir, "config.json")) as f:
            _tokenizer(src, int(json.load(f)["vocab_size"]))
    return src


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
    return r.stdout


def gguf_files(t, hf_dir, work, types, threads):
    """{type: path} of GGUF files of the checkpoint: f16 by the converter, then llama-quantize per type (once)."""
    os.makedirs(work, exist_ok=True)
    f16 = os.path.join(work, "model-f16.gguf")
    if not os.path.exists(f16):
        src = source_with_tokenizer(hf_dir, work)
        env = dict(os.environ, PYTHONPATH=t.gguf_py + os.pathsep + os.environ.get("PYTHONPATH", ""))
        run([sys.executable, t.converter, src, "--outtype", "f16", "--outfile", f16 + ".partial"], env)
        os.replace(f16 + ".partial", f16)
    out = {}
    for typ in types:
        path = os.path.join(work, f"model-{typ}.gguf")
        if not os.path.exists(path):
            run([t.quantize, f16, path + ".partial", typ, str(threads)])
            os.replace(path + ".partial", path)
        out[typ] = path
    return out


def batched_cmd(t, gguf, threads, prompt, gen, parallel, extra=()):
    """The llama-batched-bench command line of one run (extra: e.g. ["--no-repack"])."""
    ctx = max(parallel) * (prompt + gen)
    ctx = -(-ctx // 256) * 256
    return [t.batched_bench, "-m", gguf, "-t", str(threads), "-tb", str(threads), "-c", str(ctx), "-b", "2048",
            "-ub", "512", "-npp", str(prompt), "-ntg", str(gen), "-npl", ",".join(map(str, parallel)),
            "--output-format", "jsonl", *extra]


def batched(t, gguf, threads, prompt, gen, parallel):
    """One llama-batched-bench run -> {pl: {"prefill_tok_s", "decode_tok_s", "t_pp", "t_tg"}}."""
    cmd = batched_cmd(t, gguf, threads, prompt, gen, parallel)
    return parse_batched(run(cmd)), cmd


def parse_batched(stdout):
    """llama-batched-bench --output-format jsonl lines -> {pl: speeds}; other lines are ignored."""
    out = {}
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        out[int(r["pl"])] = {"prefill_tok_s": float(r["speed_pp"]), "decode_tok_s": float(r["speed_tg"]),
                             "t_pp": float(r["t_pp"]), "t_tg": float(r["t_tg"]), "n_kv": int(r["n_kv"])}
    if not out:
        raise RuntimeError(f"llama-batched-bench printed no JSONL result lines:\n{stdout[-2000:]}")
    return out


def gguf_token_bytes(t, path, top_k, n_experts):
    """Weight bytes one decode token reads from a GGUF: every 2-D weight but token_embd, top_k/n_experts
    of each 3-D expert tensor (and their type names, for the report)."""
    if t.gguf_py not in sys.path:
        sys.path.insert(0, t.gguf_py)
    from gguf import GGUFReader
    total, types = 0, {}
    for ts in GGUFReader(path).tensors:
        if ts.name == "token_embd.weight" or len(ts.shape) < 2:
            continue
        n = int(ts.n_bytes)
        if "_exps." in ts.name:
            n = n * top_k // n_experts
        total += n
        types[ts.name] = ts.tensor_type.name
    return total, types
