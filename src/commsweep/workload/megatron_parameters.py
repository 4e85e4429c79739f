"""The parameters one rank of a pipeline stage holds, as megatron-core allocates them.

What the data-parallel part reduces and gathers (``megatron_data_parallel``), what the
memory model and the validation count. Dense parameters are reduced over DP; the routed
experts' over the expert-data-parallel group when ep > 1; the sequence-parallel ones (norms,
row-parallel biases, the router) also over TP with SP.
"""

from __future__ import annotations

from ..setup.training import TrainingSetup
from . import megatron_mla, megatron_moe
from .megatron_pipeline import stage_layers
from .megatron_releases import Release


def local_parameters(setup: TrainingSetup, stage: int = 0, release: Release | None = None) -> int:
    """Parameters one TP rank of pipeline stage ``stage`` holds."""
    return dense_parameters(setup, stage, release) + expert_parameters(setup, stage)


def expert_parameters(setup: TrainingSetup, stage: int = 0) -> int:
    """The routed experts' parameters on one rank of the stage when ep > 1 (reduced over
    DP_EP); 0 with ep = 1, where megatron reduces them over DP with the dense ones."""
    if setup.ep == 1:
        return 0
    moe_layers = sum(setup.model.is_moe_layer(layer) for layer in stage_layers(setup, stage))
    return moe_layers * megatron_moe.expert_parameters(setup)


def _norm(setup: TrainingSetup) -> int:
    """One norm's parameters: weight (and bias for LayerNorm)."""
    h = setup.model.hidden_size
    return 2 * h if setup.model.normalization == "layernorm" else h


def _attention(setup: TrainingSetup, release: Release | None) -> int:
    """One layer's attention parameters on one TP rank, with its two norms."""
    m, t = setup.model, setup.tp
    if m.is_mla:
        return megatron_mla.attention_parameters(setup, release) + 2 * _norm(setup)
    h = m.hidden_size
    kv = m.kv_groups * m.head_dim
    bias = 1 if m.add_bias_linear else 0
    qkv_bias = 1 if m.add_bias_linear or m.add_qkv_bias else 0
    return (
        h * (h + 2 * kv) // t + qkv_bias * (h + 2 * kv) // t  # linear_qkv
        + h * h // t + bias * h  # linear_proj (a row-parallel bias is whole on every rank)
        + 2 * _norm(setup)  # input and pre-MLP norms
    )


def _mlp(setup: TrainingSetup, layer: int) -> int:
    """One layer's MLP parameters on one TP rank outside ``expert_parameters``."""
    m, t = setup.model, setup.tp
    if m.is_moe_layer(layer):
        routed = megatron_moe.expert_parameters(setup) if setup.ep == 1 else 0
        return megatron_moe.router_parameters(setup) + megatron_moe.shared_parameters(setup) + routed
    h, f = m.hidden_size, m.ffn_hidden_size
    fc1_out = f * (2 if m.swiglu else 1)
    bias = 1 if m.add_bias_linear else 0
    return (
        h * fc1_out // t + bias * fc1_out // t  # linear_fc1
        + f * h // t + bias * h  # linear_fc2
    )


def dense_parameters(setup: TrainingSetup, stage: int = 0, release: Release | None = None) -> int:
    """Parameters one TP rank of pipeline stage ``stage`` holds outside ``expert_parameters``
    (what DP reduces)."""
    m = setup.model
    attention = _attention(setup, release)
    total = sum(attention + _mlp(setup, layer) for layer in stage_layers(setup, stage))
    word = setup.padded_vocab * m.hidden_size // setup.tp
    if stage == 0:
        total += word
        if m.position_embedding == "learned":
            total += m.max_position_embeddings * m.hidden_size
    if stage == setup.pp - 1:
        total += _norm(setup)  # final norm
        if not m.tie_embeddings or setup.pp > 1:
            total += word  # output layer (or the last stage's copy of the tied embedding)
    return total


def sequence_parallel_parameters(setup: TrainingSetup, stage: int = 0, release: Release | None = None) -> int:
    """Parameters whose gradients SP all-reduces over TP: norms, and the biases of
    linear_proj and linear_fc2 (replicated across TP ranks but fed sequence shards)."""
    m, h = setup.model, setup.model.hidden_size
    total = 0
    for layer in stage_layers(setup, stage):
        total += 2 * _norm(setup)
        if m.is_mla:
            total += megatron_mla.sequence_parallel_parameters(setup, release)
        if m.is_moe_layer(layer):  # the router's weights and a shared experts' gate (no MLP biases)
            total += megatron_moe.sequence_parallel_parameters(setup) + (h if m.add_bias_linear else 0)
        else:
            total += 2 * h if m.add_bias_linear else 0
    if stage == setup.pp - 1:
        total += _norm(setup)
    return total


def fp8_parameters(setup: TrainingSetup, stage: int = 0) -> int:
    """With fp8_param_gather, the parameters one TP rank of the stage holds as FP8 weights
    (the transformer layers' linear weights, TransformerEngine modules under ``fp8_model_init``;
    the distributed optimizer keeps them in a uint8 buffer of their own); 0 without it."""
    if not setup.fp8_param_gather:
        return 0
    from .megatron_fsdp import stage_params

    return sum(q.numel for q in stage_params(setup, stage) if q.fp8)
