"""Deterministic tiny Hugging Face MoE checkpoints for tests and demos (needs torch + transformers).

Role in the data flow: the source end of the live oracle. `write_tiny(family, dir)`
builds a seeded transformers model of the family, saves it as safetensors
(hub per-expert layout through save_pretrained, or the fused layout of the
transformers >= 5 modules straight from state_dict), and returns the model so
tests compare colibri against `model.model.layers[L].mlp` itself.
torch and transformers are imported lazily: the runtime never needs them.
"""
import os

from .. import families

FAMILIES = tuple(name for name, fam in families.FAMILIES.items() if fam.tiny)   # every family with a tiny config
_COMMON = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=64, initializer_range=0.2,
               tie_word_embeddings=False)


def tiny_config(family):
    """The transformers config of a family's tiny checkpoint: its entry's `tiny` over the common sizes."""
    import transformers
    entry = families.FAMILIES.get(family)
    if entry is None or not entry.tiny:
        raise ValueError(f"unknown tiny family {family!r}; choose from {', '.join(FAMILIES)}")
    cls_name, kwargs = entry.tiny
    return getattr(transformers, cls_name)(**dict(_COMMON, **kwargs))


def tiny_model(family, seed=0):
    """A float32 eval-mode transformers model with seeded weights (non-zero DeepSeek and gpt-oss biases)."""
    import torch
    import transformers
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(family)).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for module in model.modules():
            bias = getattr(module, "e_score_correction_bias", None)
            if bias is not None:
                bias.copy_((torch.rand(bias.shape, generator=gen) - 0.5) * 0.1)
        for name, p in model.named_parameters():        # fused expert biases (gpt-oss) start at zero
            if name.endswith("_proj_bias"):
                p.copy_((torch.rand(p.shape, generator=gen) - 0.5) * 0.2)
    return model


def write_tiny(family, out_dir, seed=0, layout="hub", dtype="float32", max_shard_size=None):
    """Save a tiny checkpoint; returns the float32 model holding exactly the saved weights.

    layout: "hub" (per-expert tensors, save_pretrained) or "fused" (experts.gate_up_proj /
    experts.down_proj as the transformers modules hold them). dtype: float32|bfloat16|float16.
    max_shard_size: e.g. "20KB" for a sharded checkpoint with model.safetensors.index.json.
    """
    import torch
    model = tiny_model(family, seed)
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    model = model.to(torch_dtype)
    os.makedirs(out_dir, exist_ok=True)
    if layout == "hub":
        kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
        model.save_pretrained(out_dir, **kwargs)
    elif layout == "fused":
        _save_fused(model, out_dir)
    else:
        raise ValueError(f"layout must be 'hub' or 'fused', not {layout!r}")
    return model.float()


def _save_fused(model, out_dir):
    from safetensors.torch import save_file
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    model.config.save_pretrained(out_dir)
