"""The Megatron schedule's MLP part: one layer's MLP, per micro-batch.

A dense layer's MLP is megatron-core's ``transformer/mlp.py``: linear_fc1 column parallel,
the activation, linear_fc2 row parallel, with the TP collectives of ``megatron_linear``.
An MoE layer (``ModelSpec.is_moe_layer``) is the router, the token dispatcher and the
experts instead (``megatron_moe``).
"""

from __future__ import annotations

from . import megatron_moe
from .megatron_blocks import Build, Rows
from .megatron_linear import column_parallel, row_parallel
from .row_names import MLP, dense, in_layer


def layer_rows(build: Build, layer: int, micro_batch: int) -> Rows:
    """One layer's MLP rows for one micro-batch, in megatron's forward order."""
    if build.setup.model.is_moe_layer(layer):
        return megatron_moe.layer_rows(build, layer, micro_batch)
    module = f"decoder.layers.{layer}.mlp"
    out = Rows(column_parallel(build, in_layer(layer, dense(MLP, "fc1")), f"{module}.linear_fc1", layer, micro_batch, kind="mlp_fc1"))
    out += row_parallel(build, in_layer(layer, dense(MLP, "fc2")), f"{module}.linear_fc2", layer, micro_batch, kind="mlp_fc2")
    return out
