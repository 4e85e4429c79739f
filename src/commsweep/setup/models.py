"""Models: the architecture Megatron-LM would train, and the presets.

The Megatron schedule uses all of a model (GQA, swiglu width, biases, norms, tied
embeddings); AICB sees only the subset of fields its command line has (see
``arguments.to_aicb_argv``), exactly as a user running AICB's ``scripts/megatron_gpt.sh``
would pass them.

Users add their own models under ``models:`` in the sweep config. The presets are package
data in the same form (``presets/models.yaml``), read by the same function
(``model_from_dict``), and both are checked by the config schema's ``$defs/model``, the one
home of what each field means (docs/config.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..base.errors import ConfigError


@dataclass(frozen=True)
class ModelSpec:
    """One transformer architecture (decoder-only, Megatron style).

    Its fields are a ``models:`` entry's; their meanings are in the config schema's
    ``$defs/model`` (which a test keeps in step with this class), their defaults here.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    ffn_hidden_size: int
    vocab_size: int
    max_position_embeddings: int = 4096
    num_query_groups: int | None = None
    swiglu: bool = False
    position_embedding: str = "learned"
    normalization: str = "layernorm"
    add_bias_linear: bool = True
    add_qkv_bias: bool = False
    tie_embeddings: bool = True
    num_experts: int | None = None
    moe_topk: int = 2
    moe_ffn_hidden_size: int | None = None
    moe_shared_expert_intermediate_size: int | None = None
    moe_shared_expert_gate: bool = False
    moe_layer_freq: int = 1
    moe_aux_loss_coeff: float = 0.0
    moe_first_k_dense: int = 0
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    aicb_name: str | None = None

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None

    @property
    def expert_ffn_hidden_size(self) -> int:
        """The FFN width of one routed expert (megatron's moe_ffn_hidden_size)."""
        return self.moe_ffn_hidden_size or self.ffn_hidden_size

    def is_moe_layer(self, layer: int) -> bool:
        """Whether global layer ``layer`` (0-based) is an MoE layer: the first
        ``moe_first_k_dense`` layers are dense (DeepSeek), and of the others megatron's integer
        ``moe_layer_freq`` N makes layers 0, N, 2N, ... MoE and the rest dense."""
        return self.is_moe and layer >= self.moe_first_k_dense and layer % self.moe_layer_freq == 0

    @property
    def is_mla(self) -> bool:
        """Multi-latent attention (DeepSeek-V2/V3): keys and values through a compressed latent."""
        return self.kv_lora_rank is not None

    @property
    def qk_head_dim(self) -> int:
        """One head's query/key width: MLA's no-RoPE plus RoPE parts, else hidden / heads."""
        if self.is_mla:
            assert self.qk_nope_head_dim is not None and self.qk_rope_head_dim is not None
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.head_dim

    @property
    def kv_groups(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


PRESET_FILE = "presets/models.yaml"


def _preset_path():
    from importlib import resources  # here, not at import: it costs the per-point commands ~5 ms

    return resources.files("commsweep").joinpath(PRESET_FILE)


@cache
def preset_entries() -> dict[str, dict[str, Any]]:
    """The presets as written in ``presets/models.yaml``: ``models:`` entries, each with its source."""
    import yaml

    text = _preset_path().read_text(encoding="utf-8")
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@cache
def presets() -> dict[str, ModelSpec]:
    """The presets by name, read as a user's models are (a preset may start from an earlier one).

    Read on first use, not at import: the per-point commands never name a preset, and they
    should not pay for YAML and the schema check thousands of times.
    """
    source = _preset_path()
    out: dict[str, ModelSpec] = {}
    for name, values in preset_entries().items():
        out[name] = model_from_dict(name, values, key="", bases=out, source=source)
    return out


def __getattr__(name: str) -> Any:
    # ``models.PRESETS``: the presets by name, read on first use (see ``presets``).
    if name == "PRESETS":
        return presets()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def model_from_dict(
    name: str, values: dict[str, Any], *, key: str = "models", bases: dict[str, ModelSpec] | None = None,
    source: Any = None,
) -> ModelSpec:
    """One ``models:`` entry (a user's, or a preset) as a ModelSpec, naming the offending key on error.

    The entry is checked against the schema's ``$defs/model`` (types, ranges, required
    fields, no unknown ones); ``base: <preset>`` starts from a preset (of ``bases``,
    default: the presets) and the other fields override it. ``source`` (the file the entry
    is in) goes into error messages.
    """
    from .config_schema import validate_model

    where = f"{key}.{name}" if key else name
    validate_model(values, key=where, source=source)
    fields = {k: v for k, v in values.items() if k not in ("base", "source")}
    if "base" in values:
        known = presets() if bases is None else bases
        if values["base"] not in known:
            raise ConfigError(f"unknown base model {values['base']!r}; presets: {', '.join(known)}",
                              key=f"{where}.base", source=source)
        fields = {**dataclasses.asdict(known[values["base"]]), **fields}
    spec = ModelSpec(**{**fields, "name": name})
    for problem, field in mla_problems(spec):
        raise ConfigError(problem, key=f"{where}.{field}", source=source)
    return spec


_MLA_DIMS = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def mla_problems(m: ModelSpec) -> list[tuple[str, str]]:
    """(sentence, field) for each way the MLA fields do not make one attention: MLA needs
    ``kv_lora_rank`` and the three head widths together; ``q_lora_rank`` only with MLA."""
    if not m.is_mla:
        given = [f for f in ("q_lora_rank", *_MLA_DIMS) if getattr(m, f) is not None]
        return [(f"{f} describes multi-latent attention, which needs kv_lora_rank too", f) for f in given]
    return [(f"multi-latent attention (kv_lora_rank={m.kv_lora_rank}) needs {f} too", f)
            for f in _MLA_DIMS if getattr(m, f) is None]


def preset(name: str, *, key: str = "--model") -> ModelSpec:
    """A preset by name; a ConfigError naming ``key`` and listing the presets otherwise."""
    if name in presets():
        return presets()[name]
    raise ConfigError(f"unknown preset {name!r}; presets: {', '.join(presets())}", key=key)


def resolve_model(name: str, custom: dict[str, ModelSpec] | None = None) -> ModelSpec:
    """A model by name: the config's own models first, then the presets."""
    if custom and name in custom:
        return custom[name]
    if name in presets():
        return presets()[name]
    known = sorted({*presets(), *(custom or {})})
    raise ConfigError(f"unknown model {name!r}; known: {', '.join(known)}", key="sweep.model")
