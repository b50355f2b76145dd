"""Tiny GGUF files for the import tests, written as llama.cpp's converter writes them.

Names come from the gguf package's own TensorNameMap (llama.cpp's Hugging Face -> GGUF mapping, not
colibri's table, so the import is checked against an independent mapping), metadata from GGUFWriter's
add_* methods (llama.cpp's key names); the experts are stacked [experts, rows, cols] as
convert_hf_to_gguf.py stacks them. `qtype` Q8_0 quantizes every 2-D weight except the router with
gguf.quants.quantize (llama.cpp's reference quantizer), as `convert_hf_to_gguf.py --outtype q8_0` does.
`qtype` Q4_K_M (Q5_K_M) picks each tensor's type as llama-quantize does (src/llama-quant.cpp,
llama_tensor_get_type_impl, the rules a model of fewer than 8 experts meets): Q6_K for the output matrix, Q6_K
for attn_v and every FFN down projection (ffn_down_exps, ffn_down_shexp, ffn_down) of the `use_more_bits`
layers, Q4_K (Q5_K) for every other 2-D weight but the router: the mix of a real file, down projections of one
layer Q4_K and of the next Q6_K (the gguf package has no k-quant quantizer: colibri's reference one,
format/kquants.py, makes the blocks; gguf.quants.dequantize stays the independent reader). The k-quants
need cols in whole 256-element super-blocks, so such a model's sizes are multiples of 256. `qtype` IQ4_XS
(IQ4_NL) is the same mix with IQ4_XS (IQ4_NL) blocks (colibri's format/iquants.py) in place of Q4_K, Q5_0 (Q5_1)
with Q5_0 (Q5_1) blocks by gguf.quants (llama-quantize's fallback for rows not in 256-blocks); MXFP4_MOE
is llama-quantize's gpt-oss type: the expert stacks MXFP4, every other matrix Q8_0 (both by gguf.quants).
"""
import re

import numpy as np

gguf = __import__("pytest").importorskip("gguf")

ARCHES = {"qwen3_moe": "qwen3moe", "qwen2_moe": "qwen2moe", "olmoe": "olmoe", "mixtral": "llama",
          "glm4_moe": "glm4moe", "deepseek_v3": "deepseek2", "gpt_oss": "gpt-oss"}   # model_type -> llama.cpp arch
F32_ONLY = ("ffn_gate_inp",)       # llama.cpp keeps the router in F32


def hf_tensors(model):
    """name -> float32 numpy of a transformers Qwen3-MoE model, the experts as llama.cpp's stacks."""
    if model.config.model_type == "gpt_oss":
        return gpt_oss_tensors(model)
    out = {}
    for name, t in model.state_dict().items():
        v = t.detach().float().numpy()
        if name.endswith("mlp.experts.gate_up_proj"):
            inter = v.shape[1] // 2
            base = name[:-len("gate_up_proj")]
            out[base + "gate_proj.weight"], out[base + "up_proj.weight"] = v[:, :inter], v[:, inter:]
        elif name.endswith("mlp.experts.down_proj"):
            out[name + ".weight"] = v
        else:
            out[name] = v
    return out


def gpt_oss_tensors(model):
    """convert_hf_to_gguf.py GptOssModel on float experts: gate_up_proj [E, H, 2I] transposed, split into the gate
    (even rows) and up (odd rows) stacks, down_proj transposed, the biases split the same way; sinks as .weight."""
    out = {}
    for name, t in model.state_dict().items():
        v = t.detach().float().numpy()
        base = name.rsplit(".", 1)[0] + "."
        if name.endswith("mlp.experts.gate_up_proj"):
            v = v.transpose(0, 2, 1)
            out[base + "gate_proj.weight"], out[base + "up_proj.weight"] = v[:, 0::2], v[:, 1::2]
        elif name.endswith("mlp.experts.gate_up_proj_bias"):
            out[base + "gate_proj.bias"], out[base + "up_proj.bias"] = v[..., 0::2], v[..., 1::2]
        elif name.endswith("mlp.experts.down_proj"):
            out[base + "down_proj.weight"] = v.transpose(0, 2, 1)
        elif name.endswith("mlp.experts.down_proj_bias"):
            out[base + "down_proj.bias"] = v
        else:
            out[name + ".weight" if name.endswith("sinks") else name] = v
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def write_gguf(model, path, qtype="F32", tokenizer=None, drop_keys=(), extra_tensors=None, raw_tensors=None,
               arch=None, values=None, split_kv_b=True, drop_tensors=()):
    """Write `model` (a transformers Qwen3MoeForCausalLM) as a GGUF file; returns {gguf name: stored array}.
    extra_tensors: more F32 tensors; raw_tensors: {name: (uint8 bytes, GGML type name)} stored in place of or
    beside the model's tensor of that name; arch: general.architecture (the metadata keys follow it); values:
    metadata values written in place of the model's ({key: value}). drop_tensors: GGUF names not written.
    split_kv_b (deepseek2): kv_b_proj written as newer llama.cpp writes it, attn_k_b (transposed) + attn_v_b with
    the MQA-form key/value lengths; False: attn_kv_b."""
    c = model.config
    name = ARCHES[c.model_type]
    w = gguf.GGUFWriter(str(path), arch or name)
    nextn = getattr(c, "num_nextn_predict_layers", 0) if name == "glm4moe" else 0
    meta = {"context_length": (w.add_context_length, c.max_position_embeddings),
            "embedding_length": (w.add_embedding_length, c.hidden_size),
            "block_count": (w.add_block_count, c.num_hidden_layers + nextn),
            "feed_forward_length": (w.add_feed_forward_length, c.intermediate_size),
            "attention.head_count": (w.add_head_count, c.num_attention_heads),
            "attention.head_count_kv": (w.add_head_count_kv, c.num_key_value_heads),
            "attention.key_length": (w.add_key_length, getattr(c, "head_dim", None)),
            "attention.value_length": (w.add_value_length, getattr(c, "head_dim", None)),
            "expert_shared_feed_forward_length": (w.add_expert_shared_feed_forward_length,
                                                  getattr(c, "shared_expert_intermediate_size", None)),
            "rope.freq_base": (w.add_rope_freq_base, c.rope_parameters["rope_theta"]),
            "attention.layer_norm_rms_epsilon": (w.add_layer_norm_rms_eps, c.rms_norm_eps),
            "expert_count": (w.add_expert_count, next(getattr(c, k) for k in ("num_experts", "num_local_experts",
                                                                              "n_routed_experts") if hasattr(c, k))),
            "expert_used_count": (w.add_expert_used_count, c.num_experts_per_tok),
            "expert_feed_forward_length": (w.add_expert_feed_forward_length, getattr(c, "moe_intermediate_size", None)),
            "attention.clamp_kqv": (w.add_clamp_kqv, getattr(c, "clip_qkv", None))}
    if name == "deepseek2":    # convert_hf_to_gguf.py DeepseekV2Model.set_gguf_parameters
        nope, rope, v, rank = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank
        meta.update({
            "attention.head_count_kv": (w.add_head_count_kv, 1 if split_kv_b else c.num_key_value_heads),
            "attention.key_length": (w.add_key_length, rank + rope if split_kv_b else nope + rope),
            "attention.value_length": (w.add_value_length, rank if split_kv_b else v),
            "attention.key_length_mla": (w.add_key_length_mla, nope + rope if split_kv_b else None),
            "attention.value_length_mla": (w.add_value_length_mla, v if split_kv_b else None),
            "attention.q_lora_rank": (w.add_q_lora_rank, c.q_lora_rank),
            "attention.kv_lora_rank": (w.add_kv_lora_rank, rank),
            "rope.dimension_count": (w.add_rope_dimension_count, rope)})
        yarn = c.rope_parameters if c.rope_parameters.get("rope_type") == "yarn" else None
        if yarn:
            meta.update({"rope.scaling.type": (w.add_rope_scaling_type, gguf.RopeScalingType.YARN),
                         "rope.scaling.factor": (w.add_rope_scaling_factor, yarn["factor"]),
                         "rope.scaling.original_context_length": (w.add_rope_scaling_orig_ctx_len,
                                                                  yarn["original_max_position_embeddings"]),
                         "rope.scaling.yarn_log_multiplier": (w.add_rope_scaling_yarn_log_mul,
                                                              0.1 * yarn["mscale_all_dim"])})
    if name == "gpt-oss":      # convert_hf_to_gguf.py GptOssModel.set_gguf_parameters (TextModel's yarn keys)
        yarn = c.rope_parameters
        meta.update({"attention.sliding_window": (w.add_sliding_window, c.sliding_window),
                     "expert_feed_forward_length": (w.add_expert_feed_forward_length, c.intermediate_size),
                     "rope.scaling.type": (w.add_rope_scaling_type, gguf.RopeScalingType.YARN),
                     "rope.scaling.factor": (w.add_rope_scaling_factor, yarn["factor"]),
                     "rope.scaling.original_context_length": (w.add_rope_scaling_orig_ctx_len,
                                                              yarn["original_max_position_embeddings"]),
                     "rope.scaling.yarn_beta_fast": (w.add_rope_scaling_yarn_beta_fast, yarn["beta_fast"]),
                     "rope.scaling.yarn_beta_slow": (w.add_rope_scaling_yarn_beta_slow, yarn["beta_slow"])})
    if name in ("glm4moe", "deepseek2"):
        meta.update({
            "expert_shared_count": (w.add_expert_shared_count, c.n_shared_experts),
            "leading_dense_block_count": (w.add_leading_dense_block_count, c.first_k_dense_replace),
            "expert_gating_func": (w.add_expert_gating_func, gguf.ExpertGatingFuncType.SIGMOID),
            "expert_weights_scale": (w.add_expert_weights_scale, c.routed_scaling_factor),
            "expert_weights_norm": (w.add_expert_weights_norm, c.norm_topk_prob),
            "expert_group_count": (w.add_expert_group_count, c.n_group),
            "expert_group_used_count": (w.add_expert_group_used_count, c.topk_group)})
    if name == "glm4moe":      # convert_hf_to_gguf.py Glm4MoeModel.set_gguf_parameters
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        meta.update({
            "rope.dimension_count": (w.add_rope_dimension_count,
                                     int(head_dim * c.rope_parameters.get("partial_rotary_factor", 0.5))),
            "nextn_predict_layers": (w.add_nextn_predict_layers, nextn)})
    for key, (add, value) in meta.items():
        value = (values or {}).get(key, value)
        if key not in drop_keys and value is not None:
            add(value)
    w.add_file_type({"Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "Q4_K_M": gguf.LlamaFileType.MOSTLY_Q4_K_M,
                     "Q5_K_M": gguf.LlamaFileType.MOSTLY_Q5_K_M, "IQ4_XS": gguf.LlamaFileType.MOSTLY_IQ4_XS,
                     "IQ4_NL": gguf.LlamaFileType.MOSTLY_IQ4_NL, "MXFP4_MOE": gguf.LlamaFileType.MOSTLY_MXFP4_MOE,
                     }.get(qtype, gguf.LlamaFileType.ALL_F32))
    if tokenizer:
        tokenizer(w)
    names = gguf.get_tensor_name_map(model_arch(name), c.num_hidden_layers + nextn)
    stored = {}
    raw_tensors = dict(raw_tensors or {})
    llama = name == "llama"
    tensors = hf_tensors(model)
    if name == "deepseek2" and split_kv_b:
        tensors = split_kv(tensors, c)
    counts = quant_counts(names.get_name(n, try_suffixes=(".weight", ".bias")) for n in tensors)
    for hf_name, v in tensors.items():
        if llama and hf_name.endswith(("q_proj.weight", "k_proj.weight")):
            v = permute(v, c.num_attention_heads if "q_proj" in hf_name else c.num_key_value_heads)
        hf_name = hf_name.replace("e_score_correction_bias", "e_score_correction.bias")   # as the converter does
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert name is not None, hf_name
        if name not in raw_tensors and name not in drop_tensors:
            stored[name] = _store(w, name, v, tensor_type(name, v, qtype, counts))
    for name, (raw, gtype) in raw_tensors.items():
        w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=gguf.GGMLQuantizationType[gtype])
        stored[name] = raw
    for name, v in (extra_tensors or {}).items():
        stored[name] = _store(w, name, v, "F32")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


def split_kv(tensors, c):
    """convert_hf_to_gguf.py DeepseekV2Model: kv_b_proj [heads * (nope + v), rank] -> k_b_proj [heads, rank, nope]
    (transposed) and v_b_proj [heads, v, rank]."""
    out = {}
    for name, v in tensors.items():
        if name.endswith("kv_b_proj.weight"):
            kv = v.reshape(c.num_key_value_heads, c.qk_nope_head_dim + c.v_head_dim, v.shape[-1])
            k_b = kv[:, :c.qk_nope_head_dim].transpose(0, 2, 1)
            out[name.replace("kv_b_proj", "k_b_proj")] = np.ascontiguousarray(k_b)
            out[name.replace("kv_b_proj", "v_b_proj")] = np.ascontiguousarray(kv[:, c.qk_nope_head_dim:])
        else:
            out[name] = v
    return out


def model_arch(name):
    """gguf.MODEL_ARCH of a llama.cpp architecture name (glm4moe is MODEL_ARCH.GLM4_MOE)."""
    return next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == name)


def permute(v, heads):
    """convert_hf_to_gguf.py LlamaModel.permute: each head's rows [2, d/2] -> [d/2, 2] (interleaved rope)."""
    return v.reshape(heads, 2, v.shape[0] // heads // 2, *v.shape[1:]).swapaxes(1, 2).reshape(v.shape)


_LAYER = re.compile(r"^blk\.(\d+)\.")
MORE_BITS = ("attn_v", "ffn_down")     # llama.cpp's ATTENTION_V and FFN_DOWN categories (exps, shexp, dense)


def quant_counts(gguf_names):
    """{category: number of its tensors}: llama-quantize's n_attention_wv / n_ffn_down, the `n` of use_more_bits."""
    kinds = [n.split(".")[2] for n in gguf_names if n and n.startswith("blk.")]
    return {k: sum(1 for kind in kinds if kind.startswith(k)) for k in MORE_BITS}


def use_more_bits(i, n):
    """llama.cpp's use_more_bits(i_layer, n_layers)."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensor_type(name, v, qtype, counts=None):
    """The GGML type `write_gguf` stores tensor `name` (value v) in for `qtype`; counts: quant_counts of the file
    (K-quant mixes: attn_v's index is its layer, as llama.cpp counts them one per layer; ffn_down's layer is parsed
    from the name, as llama.cpp does for a model with experts)."""
    if v.ndim < 2 or any(k in name for k in F32_ONLY) or qtype == "F32" or not name.endswith(".weight"):
        return "F32"                        # convert_hf_to_gguf.py quantizes .weight tensors only (not biases)
    if qtype == "MXFP4_MOE":                # llama-quantize: the expert stacks MXFP4, every other matrix Q8_0
        return "MXFP4" if "_exps.weight" in name else "Q8_0"
    if qtype in ("Q4_K_M", "Q5_K_M"):
        m, kind = _LAYER.match(name), name.split(".")[2] if name.startswith("blk.") else ""
        more = next((k for k in MORE_BITS if kind.startswith(k)), None)
        if name.startswith("output.") or (m and more and use_more_bits(int(m.group(1)), counts[more])):
            return "Q6_K"
        return qtype[:4]
    if qtype in ("IQ4_XS", "IQ4_NL", "Q5_0", "Q5_1"):
        return "Q6_K" if name.startswith("output.") else qtype
    return qtype


OURS = ("Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "IQ4_NL")     # types gguf.quants cannot write: colibri's quantizers


def _store(w, name, v, kind):
    if kind in OURS:
        from colibri_dist.format.quantize import quantize_matrix
        q = quantize_matrix(np.ascontiguousarray(v, np.float32).reshape(-1, v.shape[-1]), kind.lower())[0]
        q = q.reshape(v.shape[:-1] + (-1,))
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType[kind])
        return q
    if kind in ("Q8_0", "MXFP4", "Q5_0", "Q5_1"):
        q = gguf.quants.quantize(v, gguf.GGMLQuantizationType[kind])
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType[kind])
        return q
    if kind in ("F16", "BF16"):
        if kind == "F16":
            w.add_tensor(name, v.astype(np.float16))
            return v.astype(np.float16)
        q = gguf.quants.quantize(v, gguf.GGMLQuantizationType.BF16)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.BF16)
        return q
    w.add_tensor(name, np.ascontiguousarray(v, dtype=np.float32))
    return v


def file_values(path):
    """{GGUF tensor name: (float32 values in numpy order, GGML type name)} of a GGUF file, every tensor decoded by
    gguf.quants.dequantize (the oracle), whatever wrote the file (write_gguf or llama.cpp's tools)."""
    out = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        out[t.name] = (np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32).reshape(shape),
                       t.tensor_type.name)
    return out


def dequantized_model(model, path):
    """A copy of `model` (a transformers Qwen3-MoE) whose every weight is the value GGUF file `path` stores."""
    import copy
    import torch
    values = {k: v for k, (v, _) in file_values(path).items()}
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3MOE, model.config.num_hidden_layers)
    hf = {n: values[names.get_name(n, try_suffixes=(".weight", ".bias"))] for n in hf_tensors(model)}
    out = copy.deepcopy(model)
    with torch.no_grad():
        for name, t in out.state_dict().items():
            base = name[:-len("gate_up_proj")]
            if name.endswith("gate_up_proj"):
                v = np.concatenate([hf[base + "gate_proj.weight"], hf[base + "up_proj.weight"]], axis=1)
            else:
                v = hf[name + ".weight" if name.endswith("experts.down_proj") else name]
            t.copy_(torch.from_numpy(np.array(v, np.float32)).reshape(t.shape))
    return out
