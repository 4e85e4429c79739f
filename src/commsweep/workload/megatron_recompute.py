"""Full recompute in the Megatron schedule: each layer's forward again, collectives included.

megatron-core's ``transformer/transformer_block.py`` (``_checkpointed_forward``) with
``--recompute-granularity full --recompute-method uniform --recompute-num-layers 1``
re-runs each layer's forward at the start of its backward pass. Dense layers only (the
schedule refuses full recompute of MoE layers and of multi-latent attention).
"""

from __future__ import annotations

from .megatron_blocks import Block, Build
from .row_names import in_layer, recompute_row

# The forward's TP collectives of one part (attention or MLP), in the order the rows are
# written: SimAI runs rows backwards in backward, so the last written runs first.
_FORWARD = {False: ("allreduce",), True: ("reducescatter", "allgather")}


def layer_rows(build: Build, layer: int, micro_batch: int) -> list[Block]:
    """The recompute rows of one layer and micro-batch, written after the layer's own.

    SimAI runs the rows backwards in the backward pass, one collective per row and
    column, so the recompute is written after the layer's last row, in reverse: the
    attention's forward (compute and its collectives) runs first, then the MLP's. Each
    row carries one of the forward's collectives in its ``ig`` column (all-reduce after
    the projection and after fc2; with SP the all-gather before and the reduce-scatter
    after each), and the compute of that part of the forward (on the row that runs first).
    """
    module = f"decoder.layers.{layer}.recompute"
    collectives = _FORWARD[build.sp]
    rows = []
    for part in ("mlp", "attention"):
        for collective in collectives:
            timed = build.timed(f"recompute_{part}") if collective == collectives[-1] else {}
            rows.append(Block(in_layer(layer, recompute_row(part, collective)), module, layer, micro_batch,
                              ig=build.tp_comm(collective), **timed))
    return rows
