"""Model presets, as plain data.

A preset holds the architecture Megatron-LM would train. The Megatron schedule uses all
of it (GQA, swiglu width, biases, norms, tied embeddings); AICB sees only the subset of
fields its command line has (see ``arguments.to_aicb_argv``), exactly as a user running
AICB's ``scripts/megatron_gpt.sh`` would pass them.

Users add their own models under ``models:`` in the sweep config, with these field names.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError


@dataclass(frozen=True)
class ModelSpec:
    """One transformer architecture (decoder-only, Megatron style)."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    ffn_hidden_size: int
    vocab_size: int
    max_position_embeddings: int = 4096
    # GQA: number of key/value heads; None means multi-head attention (= heads).
    num_query_groups: int | None = None
    swiglu: bool = False
    # "learned" (GPT) or "rope" (LLaMA); decides the embedding's SP collectives.
    position_embedding: str = "learned"
    # "layernorm" (weight + bias) or "rmsnorm" (weight only).
    normalization: str = "layernorm"
    add_bias_linear: bool = True
    # Biases on the query, key and value projections only (Qwen), as megatron's add_qkv_bias.
    add_qkv_bias: bool = False
    tie_embeddings: bool = True
    # MoE: None for dense models.
    num_experts: int | None = None
    moe_topk: int = 2
    # Megatron's MoE options (docs/moe.md): each expert's FFN width (None: ffn_hidden_size,
    # which is then the width AICB gives its experts too), the shared experts' total FFN width
    # (None: no shared expert) and their sigmoid gate, one MoE layer every moe_layer_freq
    # layers (the others dense), and the router's load-balancing loss coefficient (> 0 adds
    # its all-reduce of the tokens per expert).
    moe_ffn_hidden_size: int | None = None
    moe_shared_expert_intermediate_size: int | None = None
    moe_shared_expert_gate: bool = False
    moe_layer_freq: int = 1
    moe_aux_loss_coeff: float = 0.0
    # The --model_name AICB writes into its output file name.
    aicb_name: str | None = None

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None

    @property
    def expert_ffn_hidden_size(self) -> int:
        """The FFN width of one routed expert (megatron's moe_ffn_hidden_size)."""
        return self.moe_ffn_hidden_size or self.ffn_hidden_size

    def is_moe_layer(self, layer: int) -> bool:
        """Whether global layer ``layer`` (0-based) is an MoE layer: megatron's integer
        ``moe_layer_freq`` N makes layers 0, N, 2N, ... MoE and the others dense."""
        return self.is_moe and layer % self.moe_layer_freq == 0

    @property
    def kv_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def _gpt(name: str, aicb: str, layers: int, hidden: int, heads: int) -> ModelSpec:
    return ModelSpec(
        name=name,
        aicb_name=aicb,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        ffn_hidden_size=4 * hidden,
        vocab_size=50257,
    )


def _llama(name: str, aicb: str, layers: int, hidden: int, heads: int, ffn: int, *, vocab_size: int = 32000,
           **extra: Any) -> ModelSpec:
    return ModelSpec(
        name=name,
        aicb_name=aicb,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        ffn_hidden_size=ffn,
        vocab_size=vocab_size,
        swiglu=True,
        position_embedding="rope",
        normalization="rmsnorm",
        add_bias_linear=False,
        tie_embeddings=False,
        **extra,
    )


# Sizes: GPT-3 paper table 2.1 and AICB's scripts/megatron_gpt.sh (gpt_7B with 32 layers,
# as in AICB's reference workloads); LLaMA and LLaMA-2 papers; Mixtral 8x7B: its model card
# and config.json (huggingface.co/mistralai/Mixtral-8x7B-v0.1: router_aux_loss_coef 0.02);
# Qwen1.5-MoE-A2.7B: its config.json (huggingface.co/Qwen/Qwen1.5-MoE-A2.7B: hidden 2048,
# 24 layers, 16 heads and 16 key/value heads, vocabulary 151936, 60 experts, top-4,
# moe_intermediate_size 1408, shared_expert_intermediate_size 5632, decoder_sparse_step 1,
# router_aux_loss_coef 0.001, untied) and transformers' Qwen2MoE model (qkv biases, a
# sigmoid shared_expert_gate, swiglu, RMSNorm, RoPE).
PRESETS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        _gpt("gpt-7b", "gpt_7B", 32, 4096, 32),
        _gpt("gpt-13b", "gpt_13B", 40, 5120, 40),
        _gpt("gpt-22b", "gpt_22B", 48, 6144, 64),
        _gpt("gpt-175b", "gpt_175B", 96, 12288, 96),
        _llama("llama-7b", "llama_7B", 32, 4096, 32, 11008),
        _llama("llama-13b", "llama_13B", 40, 5120, 40, 13824),
        _llama("llama-70b", "llama_70B", 80, 8192, 64, 28672, num_query_groups=8),
        _llama(
            "mixtral-8x7b", "Mixtral_8x7B", 32, 4096, 32, 14336,
            num_query_groups=8, num_experts=8, moe_topk=2, moe_aux_loss_coeff=0.02,
        ),
        _llama(
            "qwen1.5-moe-a2.7b", "Qwen1.5_MoE_A2.7B", 24, 2048, 16, 5632,
            vocab_size=151936, max_position_embeddings=8192, add_qkv_bias=True,
            num_experts=60, moe_topk=4, moe_ffn_hidden_size=1408,
            moe_shared_expert_intermediate_size=5632, moe_shared_expert_gate=True, moe_aux_loss_coeff=0.001,
        ),
    )
}

_FIELDS = {f.name: f for f in dataclasses.fields(ModelSpec)}


def model_from_dict(name: str, values: dict[str, Any], *, key: str = "models") -> ModelSpec:
    """Build a user-defined model from config, naming the offending key on error.

    ``base: <preset>`` starts from a preset and overrides the listed fields.
    """
    values = dict(values)
    base_name = values.pop("base", None)
    if base_name is not None:
        if not isinstance(base_name, str) or base_name not in PRESETS:
            raise ConfigError(f"unknown base model {base_name!r}; presets: {', '.join(PRESETS)}", key=f"{key}.{name}.base")
        start = dataclasses.asdict(PRESETS[base_name])
    else:
        start = {}
    for field_name in values:
        if field_name not in _FIELDS or field_name == "name":
            raise ConfigError(f"unknown model field {field_name!r}", key=f"{key}.{name}.{field_name}")
    merged = {**start, **values, "name": name}
    missing = [f for f, spec in _FIELDS.items() if f not in merged and spec.default is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"missing model fields: {', '.join(missing)}", key=f"{key}.{name}")
    model = ModelSpec(**merged)
    optional = ("num_query_groups", "num_experts", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size")
    for field_name in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "vocab_size",
                       "max_position_embeddings", "moe_topk", "moe_layer_freq", *optional):
        value = getattr(model, field_name)
        if value is None and field_name in optional:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"must be a positive integer, got {value!r}", key=f"{key}.{name}.{field_name}")
    coeff = model.moe_aux_loss_coeff
    if isinstance(coeff, bool) or not isinstance(coeff, (int, float)) or coeff < 0:
        raise ConfigError(f"must be a number >= 0, got {coeff!r}", key=f"{key}.{name}.moe_aux_loss_coeff")
    for field_name in ("swiglu", "add_bias_linear", "add_qkv_bias", "tie_embeddings", "moe_shared_expert_gate"):
        if not isinstance(getattr(model, field_name), bool):
            raise ConfigError(f"must be true or false, got {getattr(model, field_name)!r}", key=f"{key}.{name}.{field_name}")
    if model.aicb_name is not None and not isinstance(model.aicb_name, str):
        raise ConfigError(f"must be a string, got {model.aicb_name!r}", key=f"{key}.{name}.aicb_name")
    if model.position_embedding not in ("learned", "rope"):
        raise ConfigError("must be 'learned' or 'rope'", key=f"{key}.{name}.position_embedding")
    if model.normalization not in ("layernorm", "rmsnorm"):
        raise ConfigError("must be 'layernorm' or 'rmsnorm'", key=f"{key}.{name}.normalization")
    return model


def resolve_model(name: str, custom: dict[str, ModelSpec] | None = None) -> ModelSpec:
    """A model by name: the config's own models first, then the presets."""
    if custom and name in custom:
        return custom[name]
    if name in PRESETS:
        return PRESETS[name]
    known = sorted({*PRESETS, *(custom or {})})
    raise ConfigError(f"unknown model {name!r}; known: {', '.join(known)}", key="sweep.model")
