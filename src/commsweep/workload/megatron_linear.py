"""What megatron's tensor-parallel linears issue over TP, per micro-batch.

megatron-core's ``tensor_parallel/layers.py`` (``ColumnParallelLinear``,
``RowParallelLinear``) and ``mappings.py``; Shoeybi et al. 2019 (TP) and Korthikanti et al.
2022 (SP). The attention's linear_qkv and linear_proj, the MLP's linear_fc1 and linear_fc2,
multi-latent attention's up projections and the output layer are such linears; each part
names its rows and says how large the linear's input is (u = 2*b*s*h unless given).

* Column parallel without SP: backward all-reduce of the input gradient. With SP:
  forward all-gather of the sequence shards, backward reduce-scatter of the input
  gradient and all-gather of the input again for the weight gradient (a row of its own,
  ``<name>_wgrad_gather``: SimAI carries one collective per column).
* Row parallel without SP: forward all-reduce of the output. With SP: forward
  reduce-scatter to sequence shards, backward all-gather.

At t = 1 the rows stay, with no collective.
"""

from __future__ import annotations

from .megatron_blocks import Block, Build
from .row_names import wgrad_gather


def column_parallel(build: Build, name: str, module: str, layer: int | None, micro_batch: int, *,
                    size: int | None = None, kind: str | None = None) -> list[Block]:
    """A column-parallel linear's rows; its input is ``size`` bytes whole (default u), the
    first row carries row kind ``kind``'s compute."""
    tp_comm = build.tp_comm
    if build.sp:
        return [
            Block(name, module, layer, micro_batch, fwd=tp_comm("allgather", size), ig=tp_comm("reducescatter", size),
                  **build.timed(kind)),
            Block(wgrad_gather(name), module, layer, micro_batch, ig=tp_comm("allgather", size)),
        ]
    return [Block(name, module, layer, micro_batch, ig=tp_comm("allreduce", size), **build.timed(kind))]


def row_parallel(build: Build, name: str, module: str, layer: int | None, micro_batch: int, *,
                 kind: str | None = None) -> list[Block]:
    """A row-parallel linear's row (its output is u whole), carrying ``kind``'s compute."""
    if build.sp:
        return [Block(name, module, layer, micro_batch, fwd=build.tp_comm("reducescatter"),
                      ig=build.tp_comm("allgather"), **build.timed(kind))]
    return [Block(name, module, layer, micro_batch, fwd=build.tp_comm("allreduce"), **build.timed(kind))]
