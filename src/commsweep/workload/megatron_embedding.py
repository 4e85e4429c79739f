"""The ends of the model in the Megatron schedule: the embedding (first stage), the output
layer and the cross entropy (last stage), per micro-batch, over TP.

megatron-core's ``models/common/embeddings/language_model_embedding.py`` and
``tensor_parallel/layers.py`` (``VocabParallelEmbedding``, the output layer's
``ColumnParallelLinear``), ``tensor_parallel/cross_entropy.py``:

* embedding: forward all-reduce u; with SP it is followed by a split to sequence shards
  whose backward all-gathers u, and without a learned position embedding (RoPE) the forward
  all-reduce becomes a reduce-scatter;
* output layer: a column-parallel linear (``megatron_linear``): without SP a backward
  all-reduce u; with SP a forward all-gather u and backward all-gather u (weight gradient)
  + reduce-scatter u;
* cross entropy: three forward all-reduces of b*s fp32 values (the logits' maximum, the
  target's logit, the sum of exponentials).

With context parallelism every size is of the rank's s/c tokens (u = 2*b*(s/c)*h).
"""

from __future__ import annotations

from .megatron_blocks import FP32, Block, Build
from .megatron_linear import column_parallel


def embedding_rows(build: Build, micro_batch: int) -> list[Block]:
    """The first stage's embedding row."""
    if not build.sp:
        fwd, ig = build.tp_comm("allreduce"), None
    elif build.setup.model.position_embedding == "learned":
        fwd, ig = build.tp_comm("allreduce"), build.tp_comm("allgather")
    else:
        fwd, ig = build.tp_comm("reducescatter"), build.tp_comm("allgather")
    return [Block("embedding_layer", "embedding", micro_batch=micro_batch, fwd=fwd, ig=ig, **build.timed("embedding"))]


def output_rows(build: Build, micro_batch: int) -> list[Block]:
    """The last stage's output layer and cross-entropy rows."""
    rows = column_parallel(build, "output_layer", "output_layer", None, micro_batch, kind="output_layer")
    ce_bytes = FP32 * build.setup.micro_batch * build.setup.seq_per_rank
    for what in ("max", "target", "sum_exp"):
        rows.append(Block(f"cross_entropy_{what}", "loss.vocab_parallel_cross_entropy", micro_batch=micro_batch,
                          fwd=build.tp_comm("allreduce", ce_bytes)))
    return rows
