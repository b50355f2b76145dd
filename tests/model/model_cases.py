"""Tiny whole-model checkpoints for the oracle tests: every family, sizes that are not round.

The cases live in the family table entries (`cases`); this module builds and seeds the models.

Odd hidden sizes and vocabularies, GQA ratios 1, 3 and 4, explicit head_dim, q/k/v biases,
QK-norm per head and over the projection with clip_qkv, a sliding window shorter than the
prompt (all layers for Mixtral, per layer_types for Qwen2-MoE), dense MLP layers
(mlp_only_layers, first_k_dense_replace), DeepSeek MLA with and without q_lora_rank under yarn,
GLM-4.5 partial rotary with q/k/v biases and per-head QK-norm; gpt-oss with attention sinks, sliding
layers, biased experts under a clamping swiglu_limit and yarn rope.
"""
import os

from colibri_dist import families

COMMON = dict(vocab_size=97, num_hidden_layers=3, max_position_embeddings=128, initializer_range=0.15,
              tie_word_embeddings=False, rms_norm_eps=1e-6)

# every family's whole-model cases, from its table entry (colibri_dist/families/<model_type>.py)
CASES = {name: case for fam in families.FAMILIES.values() for name, case in fam.cases.items()}


def make_model(case, seed=0, **overrides):
    """The case's seeded float32 transformers model; overrides: config values over the case's."""
    import torch
    import transformers
    cls_name, kw = CASES[case]
    cfg = getattr(transformers, cls_name)(**dict(COMMON, **dict(kw, **overrides)))
    torch.manual_seed(seed)
    # eager attention and experts: the reference written as plain loops (grouped_mm wants 16-byte strides)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager",
                                                          experts_implementation="eager").eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:     # non-trivial norms
                p.copy_(1.0 + 0.2 * (torch.rand(p.shape, generator=gen) - 0.5))
            elif name.endswith((".bias", "_bias")):                    # gpt-oss: experts' gate_up/down biases
                p.copy_(0.1 * (torch.rand(p.shape, generator=gen) - 0.5))
            elif name.endswith(".sinks"):                               # gpt-oss: sinks near the scores' scale
                p.copy_(3.0 * (torch.rand(p.shape, generator=gen) - 0.3))
        for module in model.modules():
            bias = getattr(module, "e_score_correction_bias", None)
            if bias is not None:
                bias.copy_((torch.rand(bias.shape, generator=gen) - 0.5) * 0.1)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def write_case(case, out_dir, seed=0):
    model = make_model(case, seed)
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    return model
