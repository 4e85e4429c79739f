"""The distributed optimizer's gradient buckets, as megatron-core cuts its gradient buffer.

megatron-core (release core_r0.16.1 and earlier 0.x) reduces a stage's gradients, and its
distributed optimizer gathers the parameters back, bucket by bucket:

* ``distributed/distributed_data_parallel.py``, ``DistributedDataParallel.__init__``: the
  bucket size, in parameters, is ``ddp_config.bucket_size`` or, when not given,
  ``max(40_000_000, 1_000_000 * dp)`` (dp the data-parallel group without CP); without
  ``overlap_grad_reduce`` it is None (one bucket); on a pipeline stage other than the first,
  and for model chunks after the first (``disable_bucketing``, set by Megatron-LM's
  ``training.py`` for ``model_chunk_idx > 0``), also None;
* ``distributed/param_and_grad_buffer.py``, ``_ParamAndGradBuffer.__init__``: parameters are
  taken in reverse order of registration (roughly the order backprop finishes them); with
  the distributed optimizer each parameter starts at a multiple of 64 elements
  (``_pad_start_of_param_if_needed``) and each bucket ends at a multiple of lcm(D, 128)
  (``_pad_end_of_bucket_if_needed``; lcm(D, 128, 2**16) with
  ``pad_buckets_for_high_nccl_busbw``), D the buffer's data-parallel group (DP x CP for the
  dense parameters, the expert-data-parallel group for the routed experts'); a bucket closes
  once it holds at least the bucket size, and a shared (tied) embedding with pp > 1 gets a
  bucket of its own (``_does_param_require_new_bucket``).

The stage's parameters are listed here in megatron's registration order (GPTModel:
embedding, then each layer's input norm, linear_proj, linear_qkv, pre-MLP norm, linear_fc1,
linear_fc2, then the final norm and the output layer), tensor by tensor for dense layers.
A multi-latent attention and an MoE layer's MLP are entered as one tensor each (their many
small tensors would need megatron's exact module order), so a bucket boundary inside them
falls at the module's end; ``Buffer.exact`` says whether the split is tensor-exact.

Where each bucket fills (``fill_rows``: the part of the model whose backward makes its last
gradient, which is also where the forward pass first needs its parameters) places its reduce
row in the schedule (``megatron_data_parallel.place_bucket_reduces``); ``overlap_rows`` reads
back, from a schedule's row names, which rows megatron overlaps and where, for the Chakra
traces, the overlap model (``simulate/overlap.py``) and the trace comparison.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..setup.training import TrainingSetup
from . import megatron_mla, megatron_moe
from .megatron_releases import Release
from .row_names import bucket_of, bucket_row, kind_of

PARAM_ALIGNMENT = 64  # elements: each parameter starts 128-byte aligned
BUCKET_ALIGNMENT = 128  # elements: each bucket ends 256-byte aligned (and divisible by D)


@dataclass(frozen=True)
class Tensor:
    """One parameter tensor of a rank: its name, elements, and whether it is a tied embedding
    shared across pipeline stages (a bucket of its own with the distributed optimizer)."""

    name: str
    numel: int
    layer: int | None = None
    shared_embedding: bool = False


@dataclass(frozen=True)
class Bucket:
    """One bucket of a gradient buffer: its padded size (what the reduce-scatter and the
    all-gather carry), the parameters it holds without padding, and the layers whose
    gradients it holds (the layer whose backward fills it last is ``layers[-1]``)."""

    numel: int
    params: int
    layers: tuple[int, ...]
    tensors: tuple[str, ...]
    # The parameters themselves, in the bucket's order (where it fills: ``fill_rows``).
    members: tuple[Tensor, ...] = ()


def default_bucket_size(dp: int) -> int:
    """megatron-core's bucket size with overlap_grad_reduce and no --ddp-bucket-size:
    max(40M, 1M * dp) parameters (DistributedDataParallel.__init__)."""
    return max(40_000_000, 1_000_000 * dp)


def _pad(n: int, divisor: int) -> int:
    return -(-n // divisor) * divisor


def split(tensors: list[Tensor], bucket_size: int | None, dp: int, *, distributed_optimizer: bool = True,
          high_busbw: bool = False) -> list[Bucket]:
    """The buckets megatron-core cuts ``tensors`` (in registration order) into, in the order
    it reduces them: a transcription of ``_ParamAndGradBuffer.__init__``'s loop (see the
    module docstring); ``bucket_size`` None means no size limit."""
    divisor = math.lcm(dp, BUCKET_ALIGNMENT, 2**16 if high_busbw else 1)
    pad_param = (lambda i: _pad(i, PARAM_ALIGNMENT)) if distributed_optimizer else (lambda i: i)
    pad_bucket = (lambda i: _pad(i, divisor)) if distributed_optimizer else (lambda i: i)
    buckets: list[Bucket] = []
    members: list[Tensor] = []
    bucket_start = start = end = 0

    def close(param_end: int) -> int:
        nonlocal bucket_start, members
        bucket_end = pad_bucket(param_end)
        layers = tuple(dict.fromkeys(t.layer for t in members if t.layer is not None))
        buckets.append(Bucket(bucket_end - bucket_start, sum(t.numel for t in members), layers,
                              tuple(t.name for t in members), tuple(members)))
        bucket_start, members = bucket_end, []
        return bucket_end

    for tensor in reversed(tensors):
        own = tensor.shared_embedding and distributed_optimizer
        start = pad_param(start)
        if own and members:
            start = close(start)
        end = start + tensor.numel
        members.append(tensor)
        if (bucket_size is not None and end - bucket_start >= bucket_size) or own:
            start = close(end)
        else:
            start = end
    if members:
        close(end)
    return buckets


def _norm(setup: TrainingSetup, name: str, layer: int | None) -> list[Tensor]:
    h = setup.model.hidden_size
    out = [Tensor(f"{name}.weight", h, layer)]
    return out + [Tensor(f"{name}.bias", h, layer)] if setup.model.normalization == "layernorm" else out


def _linear(name: str, weight: int, bias: int, layer: int, has_bias: bool) -> list[Tensor]:
    out = [Tensor(f"{name}.weight", weight, layer)]
    return out + [Tensor(f"{name}.bias", bias, layer)] if has_bias else out


def _attention(setup: TrainingSetup, layer: int, release: Release | None) -> list[Tensor]:
    m, t = setup.model, setup.tp
    if m.is_mla:
        return [Tensor("self_attention", megatron_mla.attention_parameters(setup, release), layer)]
    h, kv = m.hidden_size, m.kv_groups * m.head_dim
    return (_linear("self_attention.linear_proj", h * h // t, h, layer, m.add_bias_linear)
            + _linear("self_attention.linear_qkv", h * (h + 2 * kv) // t, (h + 2 * kv) // t, layer,
                      m.add_bias_linear or m.add_qkv_bias))


def _mlp(setup: TrainingSetup, layer: int) -> list[Tensor]:
    m, t = setup.model, setup.tp
    if m.is_moe_layer(layer):
        routed = megatron_moe.expert_parameters(setup) if setup.ep == 1 else 0
        size = megatron_moe.router_parameters(setup) + megatron_moe.shared_parameters(setup) + routed
        return [Tensor("mlp", size, layer)]
    h, f = m.hidden_size, m.ffn_hidden_size
    fc1 = f * (2 if m.swiglu else 1)
    return (_linear("mlp.linear_fc1", h * fc1 // t, fc1 // t, layer, m.add_bias_linear)
            + _linear("mlp.linear_fc2", f * h // t, h, layer, m.add_bias_linear))


def chunk_tensors(setup: TrainingSetup, stage: int, chunk: int, release: Release | None = None) -> list[Tensor]:
    """The dense (non-expert) parameters of model chunk ``chunk`` of pipeline stage ``stage``
    on one TP rank, in megatron's registration order."""
    m, p, v = setup.model, setup.pp, setup.virtual_pipeline
    first, last = stage == 0 and chunk == 0, stage == p - 1 and chunk == v - 1
    tied = m.tie_embeddings and p > 1
    word = setup.padded_vocab * m.hidden_size // setup.tp
    out: list[Tensor] = []
    if first:
        out.append(Tensor("embedding.word_embeddings.weight", word, shared_embedding=tied))
        if m.position_embedding == "learned":
            out.append(Tensor("embedding.position_embeddings.weight", m.max_position_embeddings * m.hidden_size))
    for layer in setup.chunk_layers(stage, chunk):
        out += _norm(setup, "input_layernorm", layer) + _attention(setup, layer, release)
        out += _norm(setup, "pre_mlp_layernorm", layer) + _mlp(setup, layer)
    if last:
        out += _norm(setup, "decoder.final_layernorm", None)
        if not m.tie_embeddings or p > 1:
            out.append(Tensor("output_layer.weight", word, shared_embedding=tied))
    return out


def expert_tensors(setup: TrainingSetup, stage: int, chunk: int) -> list[Tensor]:
    """The routed experts' parameters of the chunk (ep > 1: a buffer of their own), one
    entry per MoE layer."""
    if setup.ep == 1:
        return []
    return [Tensor("mlp.experts", megatron_moe.expert_parameters(setup), layer)
            for layer in setup.chunk_layers(stage, chunk) if setup.model.is_moe_layer(layer)]


def stage_buckets(setup: TrainingSetup, stage: int, release: Release | None = None, *,
                  experts: bool = False) -> list[Bucket]:
    """The buckets of stage ``stage``'s dense gradient buffer (``experts``: the routed
    experts' buffer), model chunk after model chunk, each chunk's in reduce order.

    Bucketing follows the setup's ``overlap_grad_reduce`` and ``ddp_bucket_size`` and is off
    (one bucket per chunk, but for a tied embedding's own) where megatron turns it off."""
    s = setup
    size = None
    if s.overlap_grad_reduce:
        size = s.ddp_bucket_size if s.ddp_bucket_size is not None else default_bucket_size(s.dp)
    group = s.expert_dp if experts else s.dp_cp
    out: list[Bucket] = []
    for chunk in range(s.virtual_pipeline):
        tensors = expert_tensors(s, stage, chunk) if experts else chunk_tensors(s, stage, chunk, release)
        if tensors:
            bucketed = size if stage == 0 and chunk == 0 else None
            out += split(tensors, bucketed, group, distributed_optimizer=s.distributed_optimizer)
    return out


# -- where a bucket fills: the row of the schedule after whose backward its reduce is issued --

# The parts of the model outside the transformer layers, by a parameter's or a row's module:
# the embedding, and at the end the final norm, the output layer and the loss.
_OUTER = (("embedding", "embedding"), ("decoder.final_layernorm", "output"), ("output_layer", "output"),
          ("loss", "output"))


def _part(path: str, layer: int | None) -> object:
    """The part of the model (a transformer layer, the embedding, the output) a module path
    or a parameter's name belongs to; None for none of them."""
    if layer is not None:
        return layer
    return next((part for prefix, part in _OUTER if path == prefix or path.startswith(prefix + ".")), None)


def fill_rows(blocks, buckets: list[Bucket], micro_batch: int = 0) -> list[int | None]:
    """Where each bucket's reduce goes among ``blocks`` (a schedule's rows): the index to
    insert it at, so that SimAI, which runs rows backwards in the backward pass, issues it
    right after the backward of the part of the model (a transformer layer, the embedding,
    the output layer with the final norm) in which the bucket's last gradient is made: the
    first row of that part in ``micro_batch``. The last gradient is that of the member that
    comes first in forward order, which backprop reaches last; the forward pass first needs
    the bucket's parameters at that same row. A bucket is placed at the end of its part's
    backward, not at the module inside it: megatron issues it up to part of a layer's
    backward earlier. None for a bucket no row of the micro-batch holds."""
    first: dict[object, int] = {}
    for i, b in enumerate(blocks):
        if b.micro_batch == micro_batch and (part := _part(b.module, b.layer)) is not None:
            first.setdefault(part, i)
    out: list[int | None] = []
    for bucket in buckets:
        found = [first[p] for t in bucket.members if (p := _part(t.name, t.layer)) in first]
        out.append(min(found) if found else None)
    return out


@dataclass(frozen=True)
class OverlapRows:
    """Where a schedule's bucket rows run when megatron overlaps them (row indexes of the
    schedule): ``reduces``, the rows whose gradient reduce runs beside the backward pass
    (``overlap_grad_reduce``); ``join``, the row before whose backward the reduces are waited
    for (``finish_grad_sync``, before the optimizer); ``gathers``, with
    ``overlap_param_gather``, each chain of parameter all-gathers (dense, experts) in forward
    order as (gather row, the row whose forward needs it)."""

    reduces: tuple[int, ...] = ()
    join: int | None = None
    gathers: tuple[tuple[tuple[int, int], ...], ...] = ()


def micro_batch_start(names: Sequence[str]) -> int:
    """The first row of the micro-batches in a Megatron schedule's rows (by name: the
    embedding or a transformer layer's row); the rows before it run once per iteration."""
    return next((i for i, n in enumerate(names) if n == "embedding_layer" or kind_of(n) != n), len(names))


def overlap_rows(names: Sequence[str], overlap_grad_reduce: bool, overlap_param_gather: bool) -> OverlapRows:
    """The bucket rows of a Megatron schedule's rows (``names``, its workload's row names)
    that megatron overlaps (``OverlapRows``): the reduce rows (placed where their buckets
    fill), the last row before the backward pass ends that is not one of them, and each
    gather paired with its bucket's reduce row by name (``<reduce>_bucket<i>``,
    ``<gather>_bucket<i>``), needed by the first row after that reduce row's run of bucket
    rows."""
    if not overlap_grad_reduce:
        return OverlapRows()
    reduce_prefixes = ("dp_grad_reducescatter", "dp_grad_allreduce", "dp_ep_grad_reducescatter", "dp_ep_grad_allreduce")
    first = micro_batch_start(names)
    buckets = {i: bucket_of(n) for i, n in enumerate(names)}
    reduces = {n: i for i, n in enumerate(names) if buckets[i] and buckets[i][0] in reduce_prefixes}
    join = max((i for i in range(first) if names[i] not in reduces), default=None)
    chains = []
    for gather, reduce in (("dp_param_allgather", "dp_grad_reducescatter"),
                           ("dp_ep_param_allgather", "dp_ep_grad_reducescatter")):
        chain = []
        for i in range(first):
            if overlap_param_gather and buckets[i] and buckets[i][0] == gather:
                at = reduces.get(bucket_row(reduce, buckets[i][1]))
                if at is not None:
                    target = next((j for j in range(at, len(names)) if names[j] not in reduces), len(names) - 1)
                    chain.append((target, -buckets[i][1], i))
        chains.append(tuple((row, target) for target, _, row in sorted(chain)))
    return OverlapRows(tuple(sorted(reduces.values())), join if reduces else None, tuple(c for c in chains if c))
