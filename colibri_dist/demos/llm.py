"""The demo LLM: a small MoE language model whose behaviour is known, built (not trained) at first run.

Role in the data flow: `colibri run` with no config makes this model once into the cache, converts it
and runs a `generate` job over prompts of its tiny language; the report shows the task accuracy
beside the throughput. Everything is numpy + safetensors + tokenizers: no torch, no download.

The language: four successor tasks — counting in words ("count: seven eight" -> "nine ten ..."
up to "ninety-nine", then end of text), the alphabet ("spell: c d" -> "e f ... z"), weekdays and
months (cyclic). The model (Mixtral layout: attention + MoE in every layer) computes
next = successor(token) by construction: the hidden state is split into one subspace per layer,
token x enters subspace 0 as a unit vector; layer l's router sends x to the expert of x's group
(read from subspace l), whose SwiGLU rows fire only for the tokens of that group and write the
next layer's subspace: layer 0 writes successor(x), later layers copy. lm_head reads the last
subspace, so argmax is successor(x) for every token. Attention has small random weights, so its
path runs but cannot change the answer. It is a bigram machine dressed as an MoE LLM: its value is
that a person can check every generated word.
"""
import json
import os

import numpy as np

NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
           "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
WEEK = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december"]
SPECIALS = ["<s>", "</s>", "<unk>"]
TASKS = {"count:": ("numbers", False), "spell:": ("letters", False), "week:": ("week", True),
         "month:": ("months", True)}
EOS = 1


def number_words():
    return NUMBERS + [t if u == 0 else f"{t}-{NUMBERS[u]}" for t in TENS for u in range(10)]


def sequences():
    return {"numbers": number_words(), "letters": [chr(c) for c in range(ord("a"), ord("z") + 1)],
            "week": WEEK, "months": MONTHS}


def vocabulary():
    words = list(SPECIALS) + list(TASKS)
    for seq in sequences().values():
        words += seq
    return words


def successor_table():
    """next[token id] = the id the language continues with (EOS after the last number/letter)."""
    vocab = vocabulary()
    ids = {w: i for i, w in enumerate(vocab)}
    nxt = np.full(len(vocab), EOS, dtype=np.int64)
    for name, seq in sequences().items():
        cyclic = next(c for (s, c) in TASKS.values() if s == name)
        for i, w in enumerate(seq):
            nxt[ids[w]] = ids[seq[(i + 1) % len(seq)]] if (i + 1 < len(seq) or cyclic) else EOS
    return nxt


def _groups(vocab_size, layer, n_experts):
    """Expert of each token in this layer (a different spread per layer, so expert heat differs)."""
    return (np.arange(vocab_size) * (2 * layer + 3) + layer) % n_experts


def _down_scale(layer, beta, gamma, scale_in, n_experts):
    """Down weight that writes a unit component: the residual then holds layer + 1 unit components,
    so rmsnorm feeds this layer's rows n = sqrt(hidden / (layer + 1)); the own expert's routing weight
    is its softmax share of the top 2 (the runner-up has logit 0)."""
    n = scale_in / np.sqrt(layer + 1)
    w_own = 1.0 / (1.0 + np.exp(-gamma * n))
    silu = beta * n / (1.0 + np.exp(-beta * n))
    return float(1.0 / (w_own * silu * n))


def build_weights(layers=4, n_experts=16, heads=4, kv_heads=2, seed=0):
    """-> (tensors {name: float32 array}, config dict) of the constructed model (Mixtral names)."""
    rng = np.random.default_rng(seed)
    V = len(vocabulary())
    hidden = V * (layers + 1)
    nxt = successor_table()
    basis = lambda l, t: l * V + t                                   # noqa: E731 (dimension of token t in subspace l)
    scale_in = np.sqrt(hidden)                                       # rmsnorm puts unit vectors at ~sqrt(hidden)
    beta, gamma = 0.2, 0.15
    inter = int(np.bincount(_groups(V, 0, n_experts)).max())
    t = {"model.embed_tokens.weight": np.zeros((V, hidden), np.float32), "model.norm.weight": np.ones(hidden, np.float32)}
    t["model.embed_tokens.weight"][np.arange(V), basis(0, np.arange(V))] = 1.0
    head_dim = hidden // heads
    for layer in range(layers):
        p = f"model.layers.{layer}."
        for name, rows in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
            t[f"{p}self_attn.{name}_proj.weight"] = (rng.standard_normal((rows * head_dim, hidden)) * 0.02).astype(np.float32)
        t[p + "self_attn.o_proj.weight"] = (rng.standard_normal((hidden, heads * head_dim)) * 1e-4).astype(np.float32)   # small: runs, cannot change the answer
        t[p + "input_layernorm.weight"] = np.ones(hidden, np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(hidden, np.float32)
        group = _groups(V, layer, n_experts)
        router = np.zeros((n_experts, hidden), np.float32)
        router[group, basis(layer, np.arange(V))] = gamma
        t[p + "block_sparse_moe.gate.weight"] = router
        for e in range(n_experts):
            gate, up = np.zeros((inter, hidden), np.float32), np.zeros((inter, hidden), np.float32)
            down = np.zeros((hidden, inter), np.float32)
            for i, tok in enumerate(np.flatnonzero(group == e)):
                target = nxt[tok] if layer == 0 else tok     # layer 0 moves to the successor, later layers copy
                gate[i, basis(layer, tok)], up[i, basis(layer, tok)] = beta, 1.0
                down[basis(layer + 1, target), i] = _down_scale(layer, beta, gamma, scale_in, n_experts)
            q = f"{p}block_sparse_moe.experts.{e}."
            t[q + "w1.weight"], t[q + "w3.weight"], t[q + "w2.weight"] = gate, up, down
    lm = np.zeros((V, hidden), np.float32)
    lm[np.arange(V), basis(layers, np.arange(V))] = 0.6          # logit margin ~16 at the last layer's scale
    t["lm_head.weight"] = lm
    config = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "vocab_size": V,
              "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
              "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
              "num_local_experts": n_experts, "num_experts_per_tok": 2, "rms_norm_eps": 1e-5,
              "max_position_embeddings": 256, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
              "sliding_window": None, "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": EOS,
              "torch_dtype": "float32"}
    return t, config


CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% if not loop.last %} {% endif %}{% endfor %}"


def write_checkpoint(out_dir, layers=4, n_experts=16, seed=0, chat_template=CHAT_TEMPLATE):
    """A Hugging Face style checkpoint directory: config.json, model.safetensors, tokenizer files (with
    chat_template, the demo's plain join of the contents unless given)."""
    from safetensors.numpy import save_file
    os.makedirs(out_dir, exist_ok=True)
    tensors, config = build_weights(layers=layers, n_experts=n_experts, seed=seed)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    _write_json(os.path.join(out_dir, "config.json"), config)
    # greedy by default (vLLM's generation_config="auto" reads temperature): the demo's tasks have one answer
    _write_json(os.path.join(out_dir, "generation_config.json"), {"eos_token_id": EOS, "bos_token_id": 0,
                                                                  "temperature": 0.0})
    _write_json(os.path.join(out_dir, "tokenizer_config.json"), {
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "chat_template": chat_template})
    tokenizer().save(os.path.join(out_dir, "tokenizer.json"))
    return out_dir


def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocabulary())}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")      # joins words with single spaces
    tok.add_special_tokens(SPECIALS)                   # decoded text leaves them out (vLLM's default)
    return tok


def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)


def prompts(n, seed=0, max_tokens=8):
    """n job rows {"id", "prompt", "task", "expected", "sampling_params"} over the four tasks."""
    rng = np.random.default_rng(seed)
    seqs, rows, markers = sequences(), [], list(TASKS)
    for i in range(n):
        marker = markers[i % len(markers)]
        name, cyclic = TASKS[marker]
        seq = seqs[name]
        k = int(rng.integers(1, 4))
        start = int(rng.integers(0, len(seq) - (0 if cyclic else k)))
        shown = [seq[(start + j) % len(seq)] for j in range(k)]
        expected = []
        for j in range(k, k + max_tokens):
            if not cyclic and start + j >= len(seq):
                break
            expected.append(seq[(start + j) % len(seq)])
        rows.append({"id": f"demo-{i:05d}", "prompt": " ".join([marker] + shown), "task": name,
                     "expected": " ".join(expected), "sampling_params": {"max_tokens": max_tokens}})
    return rows


def task_accuracy(rows, outputs):
    """Fraction of expected words generated in place (a row whose language ends stops with eos)."""
    right = total = 0
    by_task = {}
    for row, out in zip(rows, outputs):
        want, got = row["expected"].split(), (out or "").split()
        hits = sum(1 for a, b in zip(want, got) if a == b)
        n = max(len(want), 1)
        right, total = right + hits, total + n
        t = by_task.setdefault(row["task"], [0, 0])
        t[0], t[1] = t[0] + hits, t[1] + n
    return {"accuracy": right / max(total, 1), "by_task": {k: a / max(b, 1) for k, (a, b) in by_task.items()}}
