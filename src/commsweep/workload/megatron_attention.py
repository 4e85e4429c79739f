"""The Megatron schedule's attention part: one layer's self-attention, per micro-batch.

megatron-core's ``transformer/attention.py`` (``SelfAttention``: linear_qkv column parallel,
core attention, linear_proj row parallel; MHA and GQA alike, the query groups only change
linear_qkv's width, not what crosses TP) with the TP collectives of ``megatron_linear``;
multi-latent attention (``ModelSpec.is_mla``) from ``megatron_mla``. The core attention
issues no collective, except with context parallelism (``megatron_context_parallel``:
TransformerEngine's exchange of the sequence's keys and values over the CP group, which
SimAI's format cannot carry: listed as unexpressed between linear_qkv and linear_proj).
"""

from __future__ import annotations

from . import megatron_context_parallel, megatron_mla
from .megatron_blocks import Build, Rows
from .megatron_linear import column_parallel, row_parallel
from .row_names import ATTENTION, dense, in_layer


def layer_rows(build: Build, layer: int, micro_batch: int) -> Rows:
    """One layer's attention rows for one micro-batch, in megatron's forward order."""
    if build.setup.model.is_mla:
        return Rows(megatron_mla.layer_blocks(build, layer, micro_batch))
    module = f"decoder.layers.{layer}.self_attention"
    out = Rows(column_parallel(build, in_layer(layer, dense(ATTENTION, "qkv")), f"{module}.linear_qkv", layer, micro_batch,
                               kind="attention_qkv"))
    out.unexpressed += megatron_context_parallel.layer_unexpressed(build, layer, micro_batch)
    out += row_parallel(build, in_layer(layer, dense(ATTENTION, "proj")), f"{module}.linear_proj", layer, micro_batch, kind="attention_proj")
    return out
