"""The subjects of `bench gguf-quality`: each family's tiny random model at llama.cpp's block sizes, and a real text.

Role: write_family(family, dir) saves the family's tiny transformers model (format/tiny.py's config: same
experts, routing and layer kinds) with every matrix's rows in whole 256-element super-blocks (hidden 256, every
intermediate size 256, head_dim 64, DeepSeek's MLA ranks and no-rope head 256), so llama-quantize makes real
Q4_K / Q6_K blocks instead of falling back to Q5_0 (which colibri does not import), plus the byte-level BPE
tokenizer of testing/random_llm.py that llama.cpp's converter takes. text(path) writes >= `min_chars` of real
English and code: the repository's README and docs/ (no network, no data set), read in a fixed order.
"""
import json
import os

SIZES = dict(hidden_size=256, intermediate_size=256, moe_intermediate_size=256, head_dim=64, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512, num_hidden_layers=2, initializer_range=0.05,
             rms_norm_eps=1e-6)
FAMILY_SIZES = {   # over SIZES: the fields a family's tiny config names differently or adds
    "qwen2_moe": dict(shared_expert_intermediate_size=256),
    "deepseek_v3": dict(num_key_value_heads=4, q_lora_rank=256, kv_lora_rank=256, qk_rope_head_dim=64,
                        qk_nope_head_dim=256, v_head_dim=64, scoring_func="sigmoid", topk_method="noaux_tc"),
    "glm4_moe": dict(num_nextn_predict_layers=0),     # transformers' model has no MTP layer the converter would count
    "olmoe": dict(num_key_value_heads=4),   # llama.cpp's OLMoE graph takes attn_k_norm over n_embd: no GQA
    "gpt_oss": dict(sliding_window=64, swiglu_limit=7.0,          # llama.cpp fixes the limit at 7.0 and yarn
                    rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
                                     "beta_slow": 1.0, "truncate": True, "original_max_position_embeddings": 4096}),
}
SPECIAL_TOKENS = {"glm4_moe": ["[gMASK]", "<|user|>", "<|observation|>"]}   # the converter's GLM vocab needs them
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def family_config(family, vocab_size):
    """The family's tiny transformers config at SIZES (+ FAMILY_SIZES) and this vocabulary."""
    from ...format.tiny import tiny_config
    cfg = tiny_config(family)
    for key, value in dict(SIZES, vocab_size=vocab_size, **FAMILY_SIZES.get(family, {})).items():
        if key == "head_dim" and not hasattr(cfg, key):
            continue
        setattr(cfg, key, value)
    return cfg


def write_family(family, out_dir, seed=0):
    """Save the family's model + tokenizer files in out_dir; -> the float32 transformers model."""
    import torch
    import transformers
    from ...testing.random_llm import CHAT_TEMPLATE, tokenizer
    tok = tokenizer()
    tok.add_special_tokens(SPECIAL_TOKENS.get(family, []))
    cfg = family_config(family, tok.get_vocab_size())
    cfg.eos_token_id, cfg.bos_token_id = tok.token_to_id("<|im_end|>"), None
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():           # non-zero biases (DeepSeek/GLM correction, gpt-oss experts and sinks)
        for name, p in model.named_parameters():
            if name.endswith(("_bias", "sinks", "e_score_correction_bias")):
                p.copy_((torch.rand(p.shape, generator=gen) - 0.5) * 0.2)
    model.save_pretrained(out_dir)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "chat_template": CHAT_TEMPLATE,
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f)
    return model


def text(path, min_chars=200_000, root=ROOT):
    """Write README.md then docs/*.md (name order) until >= min_chars into `path`; -> path."""
    names = [os.path.join(root, "README.md")] + sorted(
        os.path.join(root, "docs", n) for n in os.listdir(os.path.join(root, "docs")) if n.endswith(".md"))
    parts, size = [], 0
    for name in names:
        with open(name, encoding="utf-8") as f:
            parts.append(f.read())
        size += len(parts[-1])
        if size >= min_chars:
            break
    if size < min_chars:
        raise FileNotFoundError(f"{root}: README.md + docs/*.md hold {size} characters, fewer than {min_chars}")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join(parts))
    return path
