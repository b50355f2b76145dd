"""The GGUF side of a family entry: llama.cpp's names -> the Hugging Face config and tensor names.

Role in the data flow: a family whose models llama.cpp also writes carries `gguf=GgufArch(...)` (its row);
format/gguf_source.py reads a GGUF file through it. A row says, for one llama.cpp `general.architecture`,
which metadata keys `<arch>.<key>` fill which config.json keys (required or with llama.cpp's default),
the config values llama.cpp fixes in its graph code instead of storing them (Qwen3-MoE always
renormalises its top-k weights: src/models/qwen3moe.cpp; Qwen2-MoE never: qwen2moe.cpp), and the
per-layer tensor names beyond the common ones below. The result is the config.json and the tensor names
the safetensors converter already understands, so convert.py runs unchanged from there on. Adding an
architecture = a `gguf=` row in its family file. Plain data, like the rest of families/.
"""
from dataclasses import dataclass, field

# Whole-model tensors: GGUF name -> Hugging Face name.
GLOBAL_TENSORS = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                  "output.weight": "lm_head.weight"}

# Per-layer tensors every imported architecture has: `blk.N.<key>` -> `model.layers.N.<value>`.
LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate_inp.weight": "mlp.gate.weight",
}

# The routed experts: one GGUF tensor per matrix holding every expert, [experts, rows, cols] in numpy order;
# expert e becomes `model.layers.N.mlp.experts.e.<part>.weight`.
EXPERT_STACKS = {"ffn_gate_exps.weight": "gate_proj", "ffn_up_exps.weight": "up_proj",
                 "ffn_down_exps.weight": "down_proj"}
# ... and their biases (gpt-oss), [experts, rows]: expert e's becomes `model.layers.N.mlp.experts.e.<part>.bias`.
EXPERT_BIAS_STACKS = {"ffn_gate_exps.bias": "gate_proj", "ffn_up_exps.bias": "up_proj",
                      "ffn_down_exps.bias": "down_proj"}

QK_NORM = {"attn_q_norm.weight": "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight"}
QKV_BIAS = {"attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
            "attn_v.bias": "self_attn.v_proj.bias"}
SHARED_EXPERT = {"ffn_gate_shexp.weight": "mlp.shared_expert.gate_proj.weight",
                 "ffn_up_shexp.weight": "mlp.shared_expert.up_proj.weight",
                 "ffn_down_shexp.weight": "mlp.shared_expert.down_proj.weight",
                 "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight"}

# GLM-4.5 / DeepSeek-V3 style: a dense SwiGLU MLP in the first layers, shared experts, the correction bias
# (convert_hf_to_gguf.py renames e_score_correction_bias to e_score_correction.bias before mapping it).
DENSE_MLP = {"ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
             "ffn_down.weight": "mlp.down_proj.weight"}
SHARED_EXPERTS = {"ffn_gate_shexp.weight": "mlp.shared_experts.gate_proj.weight",
                  "ffn_up_shexp.weight": "mlp.shared_experts.up_proj.weight",
                  "ffn_down_shexp.weight": "mlp.shared_experts.down_proj.weight"}
# DeepSeek-V3 multi-head latent attention. Newer llama.cpp writes kv_b_proj split (MLA absorption):
# attn_k_b [heads, kv_lora_rank, qk_nope] (k transposed) and attn_v_b [heads, v_head_dim, kv_lora_rank], the
# absorbed per-head matrices themselves; gguf_source.py offers them as k_b_proj [heads * kv_lora_rank, qk_nope] and
# v_b_proj [heads * v_head_dim, kv_lora_rank] (heads stacked by rows, blocks as they are in the file).
MLA = {"attn_q_a.weight": "self_attn.q_a_proj.weight", "attn_q_a_norm.weight": "self_attn.q_a_layernorm.weight",
       "attn_q_b.weight": "self_attn.q_b_proj.weight",
       "attn_kv_a_mqa.weight": "self_attn.kv_a_proj_with_mqa.weight",
       "attn_kv_a_norm.weight": "self_attn.kv_a_layernorm.weight", "attn_kv_b.weight": "self_attn.kv_b_proj.weight"}
MLA_SPLIT = {"attn_k_b.weight": "self_attn.k_b_proj.weight", "attn_v_b.weight": "self_attn.v_b_proj.weight"}
CORRECTION_BIAS = {"exp_probs_b.bias": "mlp.gate.e_score_correction_bias"}

# Per-layer vectors GGUF stores as [h] where the Hugging Face checkpoint holds [1, h].
ROW_VECTORS = ("ffn_gate_inp_shexp.weight",)

REQUIRED = object()     # a config row without a default: the file must carry the key

# Metadata `<arch>.<key>` -> config.json key, default (REQUIRED, or llama.cpp's value when the key is absent).
COMMON_CONFIG = (
    ("context_length", "max_position_embeddings", REQUIRED),
    ("embedding_length", "hidden_size", REQUIRED),
    ("block_count", "num_hidden_layers", REQUIRED),
    ("attention.head_count", "num_attention_heads", REQUIRED),
    ("attention.head_count_kv", "num_key_value_heads", REQUIRED),
    ("attention.layer_norm_rms_epsilon", "rms_norm_eps", REQUIRED),
    ("rope.freq_base", "rope_theta", 10000.0),
    ("expert_count", "num_experts", REQUIRED),
    ("expert_used_count", "num_experts_per_tok", REQUIRED),
    ("expert_feed_forward_length", "moe_intermediate_size", REQUIRED),
)
HEAD_DIM = (("attention.key_length", "head_dim", None),)
# The grouped sigmoid router with shared experts and dense first layers (DeepSeek-V3, GLM-4.5): its config rows
GROUPED_SIGMOID_MOE = (
    ("expert_shared_count", "n_shared_experts", 0),
    ("leading_dense_block_count", "first_k_dense_replace", 0),
    ("expert_weights_scale", "routed_scaling_factor", 1.0),
    ("expert_weights_norm", "norm_topk_prob", False),
    ("expert_group_count", "n_group", 1),
    ("expert_group_used_count", "topk_group", 1))


def config_rows(*drop, rename=None, add=()):
    """COMMON_CONFIG without the metadata keys `drop`, config keys renamed by {metadata key: config key},
    plus the rows `add`."""
    rename = rename or {}
    return tuple((k, rename.get(k, c), d) for k, c, d in COMMON_CONFIG if k not in drop) + tuple(add)



@dataclass(frozen=True)
class GgufArch:
    arch: str                   # llama.cpp general.architecture
    architecture: str           # config.json "architectures"[0]
    config: tuple = COMMON_CONFIG
    fixed: dict = field(default_factory=dict)       # config values llama.cpp's graph code fixes for the arch
    layer_tensors: dict = field(default_factory=dict)   # per-layer names beyond LAYER_TENSORS
    flags: dict = field(default_factory=dict)    # config key -> per-layer GGUF tensor whose presence sets it True
    checks: dict = field(default_factory=dict)   # metadata key -> the value(s) colibri runs (others, absent: named)
    positive: tuple = ()        # metadata keys that must be > 0 (llama without experts is a dense model)
    extra_layers: str = ""      # metadata key: trailing blocks past the decoder's (GLM-4.5's NextN/MTP layer)
    rope_permuted: bool = False     # attn_q/attn_k rows in llama.cpp's interleaved-rope order (LlamaModel.permute)
    partial_rotary: bool = False    # rope.dimension_count / head_dim -> partial_rotary_factor
    yarn: bool = False          # rope.scaling.type yarn imported (DeepSeek-V3's reading of its keys)
    mla: bool = False           # MLA dims from key_length(_mla)/value_length(_mla); attn_k_b / attn_v_b kept
    expert_parts: tuple = ("gate_proj", "up_proj", "down_proj")   # the family's per-expert stems of the stacks

    def layer_names(self):
        return dict(LAYER_TENSORS, **self.layer_tensors)

