"""The names of workload rows that the analysis recognizes, made and matched from one definition.

The Megatron schedule (``megatron.py``, ``megatron_moe.py``, ``megatron_mla.py``) names each
row after what it stands for: ``layer3_moe_dispatch_probs`` is the probabilities' all-to-all
of layer 3's MoE dispatcher. The audit keeps that name with each expected collective, and the
causes' rules (``analysis/causes/rules.py``) read it back to tell which of Megatron's
collectives a finding is about; AICB's own row names (``aicb.py``, ``aicb_deepseek.py``, as
AICB 23eec3c writes them) tell the rules which of AICB's rows they look at. Both sides take
the names from here, so that a renamed row cannot silently stop matching.

A row of a transformer layer is ``layer<n>_<kind>`` (``in_layer``); ``kind_of`` gives the
kind back, the part the rules compare.
"""

from __future__ import annotations

import re

# -- a transformer layer's rows -------------------------------------------------------------

_IN_LAYER = re.compile(r"layer\d+_(.*)")


def in_layer(layer: int, kind: str) -> str:
    """The row of ``kind`` in transformer layer ``layer`` (global index): ``layer3_mlp_fc1``."""
    return f"layer{layer}_{kind}"


def kind_of(name: str) -> str:
    """A row's kind without its layer (``layer3_moe_router`` -> ``moe_router``); a row of no
    layer is its own kind."""
    match = _IN_LAYER.fullmatch(name)
    return match.group(1) if match else name


def layer_of(name: str) -> int | None:
    """A row's transformer layer (``layer3_mlp_fc1`` -> 3), None for a row of no layer."""
    match = _IN_LAYER_INDEX.match(name)
    return int(match.group(1)) if match else None


_IN_LAYER_INDEX = re.compile(r"layer(\d+)_")


def wgrad_gather(kind: str) -> str:
    """The row that re-gathers a column-parallel layer's input for its weight gradient (with SP)."""
    return f"{kind}_wgrad_gather"


# Dense layers: a part's column- and row-parallel linear (``dense``): attention_qkv,
# attention_proj, mlp_fc1, mlp_fc2.
ATTENTION = "attention"
MLP = "mlp"


def dense(part: str, linear: str) -> str:
    """A dense layer's linear: ``dense(MLP, "fc1")`` is ``mlp_fc1``."""
    return f"{part}_{linear}"


def is_dense_mlp(kind: str) -> bool:
    """A dense MLP's row kind (its linears and their weight-gradient gathers)."""
    return kind.startswith(MLP + "_")


def recompute_row(part: str, collective: str) -> str:
    """A full recompute's row of ``part``'s forward collective: ``recompute_mlp_allreduce``."""
    return f"recompute_{part}_{collective}"


# The MoE layer (megatron_moe.py): what megatron-core's all-to-all token dispatcher issues.
MOE = "moe"
MOE_SHARED_FC1 = "moe_shared_fc1"
MOE_SHARED_FC1_WGRAD = wgrad_gather(MOE_SHARED_FC1)
MOE_SHARED_FC2 = "moe_shared_fc2"
MOE_ROUTER = "moe_router"
MOE_DISPATCH_METADATA = "moe_dispatch_metadata"
MOE_TP_DISPATCH = "moe_tp_dispatch"
MOE_DISPATCH = "moe_dispatch"
MOE_DISPATCH_PROBS = "moe_dispatch_probs"
MOE_EXPERT_FC1 = "moe_expert_fc1"
MOE_EXPERT_PROBS_GATHER = "moe_expert_probs_gather"
MOE_EXPERT_FC2 = "moe_expert_fc2"
MOE_COMBINE = "moe_combine"
MOE_TP_COMBINE = "moe_tp_combine"


def is_moe_shared_expert(kind: str) -> bool:
    """A row of the shared experts' dense MLP."""
    return kind.startswith("moe_shared_")


# Multi-latent attention (megatron_mla.py): its TP collectives replace linear_qkv's.
MLA_K_ROPE_GATHER = "attention_k_rope_gather"
MLA_Q_UP_PROJ = "attention_q_up_proj"
MLA_Q_PROJ = "attention_q_proj"  # a model without a query latent
MLA_KV_UP_PROJ = "attention_kv_up_proj"
MLA_PROJ = "attention_proj"  # as a dense attention's linear_proj
MLA_ROWS = (MLA_K_ROPE_GATHER, MLA_Q_UP_PROJ, MLA_Q_PROJ, MLA_KV_UP_PROJ)


def is_mla(kind: str) -> bool:
    """A row kind only multi-latent attention has (its weight-gradient gathers included)."""
    return kind.startswith(MLA_ROWS)


# -- once per iteration --------------------------------------------------------------------

# With SP: the sequence-parallel parameters' (the layernorms') gradient all-reduce over TP.
# The distributed optimizer's bucket rows (``megatron_data_parallel``): ``dp_grad_reducescatter_bucket3``.
_BUCKET = re.compile(r"(.+)_bucket(\d+)")


def bucket_row(name: str, index: int) -> str:
    """The row of bucket ``index`` of a DP collective ``name``: ``dp_grad_reducescatter_bucket3``."""
    return f"{name}_bucket{index}"


def bucket_of(name: str) -> tuple[str, int] | None:
    """(collective's row name, bucket index) of a bucket row; None for any other row."""
    match = _BUCKET.fullmatch(name)
    return (match.group(1), int(match.group(2))) if match else None


def is_bucket_row(name: str) -> bool:
    return bucket_of(name) is not None


SP_GRADS_ALLREDUCE = "sp_grads_allreduce"
DP_EP_PREFIX = "dp_ep_"


def dp_ep(what: str) -> str:
    """An expert-data-parallel (DP_EP) row: ``dp_ep_grad_reducescatter``."""
    return DP_EP_PREFIX + what


def is_moe(name: str) -> bool:
    """A Megatron row only an MoE model has: an MoE layer's, or the experts' DP_EP sync."""
    return name.startswith(DP_EP_PREFIX) or kind_of(name).startswith(MOE + "_")


# -- AICB's rows (aliyun/aicb @ 23eec3c, workload_generator/SimAI_training_workload_generator.py,
# and its DeepSeek frame) --------------------------------------------------------------------

AICB_MOE_LAYER = "mlp_moelayer"  # its five MoE lines, every layer
AICB_GRAD_NORM = "grad_norm"  # the default path's DP all-gather (2P) and reduce-scatter (4P)
AICB_LAYERNORM = "layernorm"  # the layernorm grads all-reduce of 2P bytes with SP off
# The DeepSeek frame's MLA rows.
AICB_MLA_Q_LORA = "attention_linear_q_lora"
AICB_MLA_KV_LORA = "attention_linear_kv_lora"
AICB_MLA_Q_COLUMN = "attention_q_column"
AICB_MLA_KV_COLUMN = "attention_kv_column"
AICB_MLA_ROWS = (AICB_MLA_Q_LORA, AICB_MLA_KV_LORA, AICB_MLA_Q_COLUMN, AICB_MLA_KV_COLUMN)
