"""A random-weight MoE language model with a byte-level BPE tokenizer and a Qwen3-style chat template.

Role in the data flow: the subject of the structured-output, tool-calling and reasoning tests and
benchmarks. Any text can be tokenized (byte-level BPE over all 256 bytes, trained on a little JSON and
English), `<tool_call>`, `</tool_call>`, `<think>`, `</think>` are added tokens that decode to their text
(as in Qwen3), `<|im_start|>` / `<|im_end|>` are special, and the template renders `tools`, assistant
`tool_calls` and `tool` messages the way Qwen3's does (Hermes-style). Weights are seeded normal noise in
the Mixtral layout, so what it says is random but a function of the seed. numpy + safetensors +
tokenizers only.
"""
import json
import os

import numpy as np

CORPUS = [
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    '{"id": 12, "tags": ["a", "b"], "ok": true, "score": -3.5e2, "none": null}',
    "the quick brown fox jumps over the lazy dog. 0 1 2 3 4 5 6 7 8 9",
    "[{\"x\": 1}, {\"y\": [2, 3]}]  true false null \\n \\t \\\" \\u00e9",
]
ADDED = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "</tool_response>"]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CHAT_TEMPLATE = (        # written with explicit '\n' strings (Jinja's trim_blocks, as transformers renders, drops literal ones)
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions.\\n<tools>' }}"
    "{%- for t in tools %}{{- '\\n' + (t | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'system' and tools %}"
    "{%- elif m.role == 'assistant' and m.tool_calls %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if m.content %}{{- m.content + '\\n' }}{%- endif %}"
    "{%- for tc in m.tool_calls %}{{- '<tool_call>\\n{\"name\": \"' + tc.function.name + '\", \"arguments\": ' }}"
    "{%- if tc.function.arguments is string %}{{- tc.function.arguments }}{%- else %}{{- tc.function.arguments | tojson }}"
    "{%- endif %}{{- '}\\n</tool_call>' }}{%- if not loop.last %}{{- '\\n' }}{%- endif %}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}{{- '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def tokenizer(vocab_size=384):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED])
    return tok


def build_weights(vocab, layers=2, n_experts=8, hidden=64, inter=32, heads=4, kv_heads=2, seed=0):
    """-> (tensors, config) of a seeded random Mixtral-layout model over `vocab` tokens."""
    rng = np.random.default_rng(seed)
    head_dim = hidden // heads
    w = lambda *shape, s=0.1: (rng.standard_normal(shape) * s).astype(np.float32)   # noqa: E731
    t = {"model.embed_tokens.weight": w(vocab, hidden, s=1.0), "model.norm.weight": np.ones(hidden, np.float32),
         "lm_head.weight": w(vocab, hidden, s=0.3)}
    for layer in range(layers):
        p = f"model.layers.{layer}."
        for name, rows in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
            t[f"{p}self_attn.{name}_proj.weight"] = w(rows * head_dim, hidden)
        t[p + "self_attn.o_proj.weight"] = w(hidden, heads * head_dim)
        t[p + "input_layernorm.weight"] = np.ones(hidden, np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(hidden, np.float32)
        t[p + "block_sparse_moe.gate.weight"] = w(n_experts, hidden)
        for e in range(n_experts):
            q = f"{p}block_sparse_moe.experts.{e}."
            t[q + "w1.weight"], t[q + "w3.weight"], t[q + "w2.weight"] = (w(inter, hidden), w(inter, hidden),
                                                                        w(hidden, inter))
    config = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "vocab_size": vocab,
              "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
              "num_attention_heads": heads, "num_key_value_heads": kv_heads, "head_dim": head_dim,
              "num_local_experts": n_experts, "num_experts_per_tok": 2, "rms_norm_eps": 1e-5,
              "max_position_embeddings": 2048, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
              "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "float32"}
    return t, config


def write_checkpoint(out_dir, layers=2, n_experts=8, seed=0, chat_template=CHAT_TEMPLATE):
    """A Hugging Face style checkpoint directory (config, safetensors, tokenizer files with the template)."""
    from safetensors.numpy import save_file
    os.makedirs(out_dir, exist_ok=True)
    tok = tokenizer()
    tensors, config = build_weights(tok.get_vocab_size(), layers=layers, n_experts=n_experts, seed=seed)
    eos = tok.token_to_id("<|im_end|>")
    config.update(bos_token_id=None, eos_token_id=eos)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    _write_json(os.path.join(out_dir, "config.json"), config)
    _write_json(os.path.join(out_dir, "generation_config.json"), {"eos_token_id": [eos, tok.token_to_id("<|endoftext|>")]})
    _write_json(os.path.join(out_dir, "tokenizer_config.json"), {
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": chat_template})
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    return out_dir


def build(path, **kwargs):
    """Write and convert (f32 experts, exact) the model to `path` (a .colibri file); -> path."""
    from ..format.convert import convert
    hf = write_checkpoint(str(path) + ".hf", **kwargs)
    convert(hf, str(path), progress=False)
    return str(path)


def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
