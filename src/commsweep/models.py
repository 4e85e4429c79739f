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
    tie_embeddings: bool = True
    # MoE: None for dense models.
    num_experts: int | None = None
    moe_topk: int = 2
    # The --model_name AICB writes into its output file name.
    aicb_name: str | None = None

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None

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


def _llama(name: str, aicb: str, layers: int, hidden: int, heads: int, ffn: int, **extra: Any) -> ModelSpec:
    return ModelSpec(
        name=name,
        aicb_name=aicb,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        ffn_hidden_size=ffn,
        vocab_size=32000,
        swiglu=True,
        position_embedding="rope",
        normalization="rmsnorm",
        add_bias_linear=False,
        tie_embeddings=False,
        **extra,
    )


# Sizes: GPT-3 paper table 2.1 and AICB's scripts/megatron_gpt.sh (gpt_7B with 32 layers,
# as in AICB's reference workloads); LLaMA and LLaMA-2 papers; Mixtral 8x7B model card.
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
            num_query_groups=8, num_experts=8, moe_topk=2,
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
    for field_name in ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "vocab_size",
                       "max_position_embeddings", "moe_topk", "num_query_groups", "num_experts"):
        value = getattr(model, field_name)
        if value is None and field_name in ("num_query_groups", "num_experts"):
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"must be a positive integer, got {value!r}", key=f"{key}.{name}.{field_name}")
    for field_name in ("swiglu", "add_bias_linear", "tie_embeddings"):
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
