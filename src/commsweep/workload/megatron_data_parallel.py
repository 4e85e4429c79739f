"""The Megatron schedule's data-parallel part: gradients after the backward pass, and the optimizer.

megatron-core's ``distributed/distributed_data_parallel.py`` and ``param_and_grad_buffer.py``
(the gradient reduce), ``optimizer/distrib_optimizer.py`` (the parameter all-gather) and
``distributed/finalize_model_grads.py`` (the sequence-parallel gradients). Once per
iteration, after the backward pass:

* with SP, one TP all-reduce of the sequence-parallel parameters' gradients (norms, and the
  biases of linear_proj and linear_fc2; ``megatron_parameters.sequence_parallel_parameters``);
* with DP > 1 and the distributed optimizer, a reduce-scatter of 4*P gradient bytes and an
  all-gather of 2*P parameter bytes over DP (with context parallelism DP x CP:
  ``dp_cp_group``, SimAI's DP group when all_gpus counts the CP ranks) (P = this rank's parameters outside the routed
  experts), or with plain DDP one all-reduce of the gradients (4*P bytes, 2*P when reduced
  in 16 bits);
* with ep > 1, the same for the routed experts' parameters over the expert-data-parallel
  group (``DP_EP``, world / (etp*ep*pp) ranks; SimAI sizes DP_EP as dp/ep, so with an
  expert TP other than TP the rows' group size is not megatron's: listed as unexpressed).

SimAI runs rows backwards in the backward pass, so these rows come first in the file and
run last; the optimizer's own compute goes on the first row.

With ``overlap_grad_reduce`` (``megatron_buckets``) the reduces and the gathers are written
bucket by bucket, one row each, of the padded sizes megatron's buffer allocates. megatron
issues a bucket's reduce as soon as its last gradient is ready in the last micro-batch's
backward pass (``param_and_grad_buffer.py``, ``register_grad_ready`` calling
``start_grad_sync``), so each reduce row is placed in the layer where its bucket fills
(``place_bucket_reduces``): just before the first row of the transformer layer (or the
embedding, or the output layer) whose backward makes that gradient, so that SimAI, which
runs rows backwards in the backward pass, issues it right after that layer's backward, and
in micro-batch 0's rows, the backward pass SimAI runs last (SimAI runs the micro-batches'
backward passes in reverse file order). A row in the middle of a layer would split the
layer for every reader of the file that counts layers by their rows. SimAI's analytical
model gives a DP collective the same time wherever it stands (its weight-gradient column
is priced alone, under one DP overlap ratio, and stays out of the pipeline bubble), so the
totals do not move; the position is for the Chakra traces and the overlap model
(``simulate/overlap.py``). The
gathers stay after the backward pass, written in reverse so that SimAI runs bucket 0 first,
the optimizer's compute on the one SimAI runs first: those of ``overlap_param_gather``,
issued in the next forward pass before each bucket's first layer, have no DP column there
(the forward column carries TP and EP only). Each bucket row carries when megatron issues it
as a note (``Unexpressed`` with ``in_rows``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..setup.training import TrainingSetup
from .megatron_blocks import BF16, FP32, Block, Build, Comm, Rows, Unexpressed
from . import megatron_fsdp
from .megatron_buckets import Bucket, fill_rows, stage_buckets
from .megatron_parameters import (dense_parameters, expert_parameters, fp8_parameters,
                                  sequence_parallel_parameters)
from .row_names import SP_GRADS_ALLREDUCE, bucket_row, dp_ep, is_bucket_row


def iteration_rows(build: Build, stage: int) -> Rows:
    """The once-per-iteration rows of stage ``stage``: optimizer, SP gradients, DP reduces."""
    out = Rows()
    if build.setup.fsdp != "none":  # FSDP's own buckets and rows; SP's gradients as without it
        out += megatron_fsdp.iteration_rows(build, stage)
        out += _sequence_parallel_grads(build, stage)
        return out
    out += _optimizer(build, stage)
    out += _sequence_parallel_grads(build, stage)
    out += _dense_grads(build, stage)
    out += _expert_grads(build, stage)
    return out


def _grad_bytes(build: Build) -> int:
    return FP32 if build.setup.grad_reduce_in_fp32 else BF16


def _expert_dp(build: Build, stage: int) -> int:
    """The experts' parameters on the rank when the expert-DP group reduces them, else 0."""
    experts = expert_parameters(build.setup, stage)
    return experts if experts > 0 and build.setup.expert_dp > 1 else 0


def _optimizer(build: Build, stage: int) -> Rows | list[Block]:
    """The optimizer step; with the distributed optimizer, its parameter all-gathers."""
    s = build.setup
    if s.overlap_grad_reduce and s.distributed_optimizer:
        return _bucketed_gathers(build, stage)
    if not s.distributed_optimizer:
        return [Block("optimizer", "optimizer.step", **build.timed("optimizer"))]
    psi = dense_parameters(s, stage, build.release)
    fp8 = fp8_parameters(s, stage)
    rows = [Block("dp_param_allgather", "optimizer.param_allgather",
                  wg=Comm("allgather", "DP", BF16 * (psi - fp8)) if s.dp_cp > 1 else None, **build.timed("optimizer"))]
    if fp8 and s.dp_cp > 1:  # the FP8 weights' buffer of its own: 1 byte per parameter
        rows.append(Block("dp_param_allgather_fp8", "optimizer.param_allgather", wg=Comm("allgather", "DP", fp8)))
    if experts := _expert_dp(build, stage):
        rows.append(Block(dp_ep("param_allgather"), "optimizer.expert_param_allgather",
                          wg=Comm("allgather", "DP_EP", BF16 * experts)))
    return rows


def _sequence_parallel_grads(build: Build, stage: int) -> list[Block]:
    """With SP, the TP all-reduce of the sequence-parallel parameters' gradients (fp32)."""
    if not build.sp:
        return []
    size = FP32 * sequence_parallel_parameters(build.setup, stage, build.release)
    return [Block(SP_GRADS_ALLREDUCE, "finalize_model_grads.sequence_parallel", ig=Comm("allreduce", "TP", size))]


def _dense_grads(build: Build, stage: int) -> Rows | list[Block]:
    """The DP reduce of the dense gradients: reduce-scatter (distributed optimizer) or all-reduce."""
    s = build.setup
    if s.dp_cp == 1:
        return []
    if s.overlap_grad_reduce:
        return _bucketed_reduces(build, stage, experts=False)
    size = _grad_bytes(build) * dense_parameters(s, stage, build.release)
    if s.distributed_optimizer:
        fp8 = _grad_bytes(build) * fp8_parameters(s, stage)
        rows = [Block("dp_grad_reducescatter", "ddp.grad_reducescatter", wg=Comm("reducescatter", "DP", size - fp8))]
        if fp8:  # the FP8 weights' buffer reduces its (bf16 or fp32) gradients apart
            rows.append(Block("dp_grad_reducescatter_fp8", "ddp.grad_reducescatter",
                              wg=Comm("reducescatter", "DP", fp8)))
        return rows
    return [Block("dp_grad_allreduce", "ddp.grad_allreduce", wg=Comm("allreduce", "DP", size))]


def _expert_grads(build: Build, stage: int) -> Rows:
    """The expert-DP reduce of the routed experts' gradients (ep > 1), and, with an expert TP
    other than TP, why SimAI's DP_EP is not megatron's group (for the gather too)."""
    s, out = build.setup, Rows()
    experts = _expert_dp(build, stage)
    if not experts:
        return out
    if s.overlap_grad_reduce:
        return _bucketed_reduces(build, stage, experts=True)
    grads = _grad_bytes(build) * experts
    if s.distributed_optimizer:
        comms = [("ddp.expert_grad_reducescatter", Comm("reducescatter", "DP_EP", grads)),
                 ("optimizer.expert_param_allgather", Comm("allgather", "DP_EP", BF16 * experts))]
    else:
        comms = [("ddp.expert_grad_allreduce", Comm("allreduce", "DP_EP", grads))]
    out.blocks.append(Block(dp_ep(f"grad_{comms[0][1].collective}"), comms[0][0], wg=comms[0][1]))
    if s.expert_tp != s.tp:
        for module, comm in comms:
            out.unexpressed.append(Unexpressed(
                module, "wg", comm,
                f"megatron's expert-data-parallel group has world/(etp*ep*pp) = {s.expert_dp} ranks; "
                f"SimAI sizes DP_EP as dp/ep = {s.dp // s.ep}", in_rows=True))
    return out


_AFTER = "; the row runs after the backward pass"


def _overlap_note(bucket: Bucket, what: str) -> str:
    layers = f"layers {bucket.layers[0]} to {bucket.layers[-1]}" if bucket.layers else "no transformer layer"
    return (f"one of megatron's gradient buckets ({bucket.params} parameters, {bucket.numel} with padding; "
            f"{layers}), {what}{_AFTER}")


def _bucket_rows(buckets: list[Bucket], name: str, module: str, comm_of: Callable[[Bucket], Comm], when: str,
                 timed: dict) -> Rows:
    """One row per bucket, written last bucket first (SimAI runs these rows backwards), with
    the note of what megatron overlaps; ``timed`` goes on the row SimAI runs first."""
    out = Rows()
    for i in reversed(range(len(buckets))):
        comm = comm_of(buckets[i])
        extra = timed if i == 0 else {}
        out.blocks.append(Block(bucket_row(name, i), module, wg=comm, **extra))
        out.unexpressed.append(Unexpressed(module, "wg", comm, _overlap_note(buckets[i], when), in_rows=True))
    return out


def _bucketed_reduces(build: Build, stage: int, *, experts: bool) -> Rows:
    """With overlap_grad_reduce: the gradient reduce of each bucket (reduce-scatter with the
    distributed optimizer, else all-reduce)."""
    s = build.setup
    if (s.expert_dp if experts else s.dp_cp) == 1:
        return Rows()
    op = "reducescatter" if s.distributed_optimizer else "allreduce"
    group = "DP_EP" if experts else "DP"
    name = dp_ep(f"grad_{op}") if experts else f"dp_grad_{op}"
    module = f"ddp.expert_grad_{op}" if experts else f"ddp.grad_{op}"
    buckets = stage_buckets(s, stage, build.release, experts=experts)
    return _bucket_rows(buckets, name, module, lambda b: Comm(op, group, _grad_bytes(build) * b.numel),
                        "issued in the backward pass once its last gradient is ready" + _etp_note(s, experts), {})


def _etp_note(s: TrainingSetup, experts: bool) -> str:
    """With an expert TP other than TP, why SimAI's DP_EP rows are not megatron's group."""
    if not experts or s.expert_tp == s.tp:
        return ""
    return (f"; megatron's expert-data-parallel group has world/(etp*ep*pp) = {s.expert_dp} ranks, "
            f"SimAI sizes DP_EP as dp/ep = {s.dp // s.ep}")


def _bucketed_gathers(build: Build, stage: int) -> Rows:
    """With overlap_grad_reduce and the distributed optimizer: the parameter all-gather of
    each bucket (in the next forward pass with overlap_param_gather), dense then experts."""
    s = build.setup
    when = ("issued in the next forward pass before its first layer runs" if s.overlap_param_gather
            else "issued by the optimizer step")
    out = Rows()
    if s.dp_cp > 1:
        out += _bucket_rows(stage_buckets(s, stage, build.release), "dp_param_allgather",
                            "optimizer.param_allgather", lambda b: Comm("allgather", "DP", BF16 * b.numel),
                            when, build.timed("optimizer"))
    else:
        out.blocks.append(Block("dp_param_allgather", "optimizer.param_allgather", **build.timed("optimizer")))
    if _expert_dp(build, stage):
        out += _bucket_rows(stage_buckets(s, stage, build.release, experts=True), dp_ep("param_allgather"),
                            "optimizer.expert_param_allgather", lambda b: Comm("allgather", "DP_EP", BF16 * b.numel),
                            when + _etp_note(s, True), {})
    return out


def _reduce_prefix(s: TrainingSetup, experts: bool) -> str:
    op = "reducescatter" if s.distributed_optimizer else "allreduce"
    return dp_ep(f"grad_{op}") if experts else f"dp_grad_{op}"


def place_bucket_reduces(build: Build, stage: int, rows: Rows) -> Rows:
    """With overlap_grad_reduce: each bucket's reduce row moved from the rows after the
    backward pass to where the bucket fills (the module docstring), its note saying so.
    A bucket no row of micro-batch 0 holds stays where it was."""
    s = build.setup
    if not s.overlap_grad_reduce:
        return rows
    found: list[tuple[Block, Bucket]] = []
    for experts in (False, True):
        prefix = _reduce_prefix(s, experts)
        for i, bucket in enumerate(stage_buckets(s, stage, build.release, experts=experts)):
            block = next((b for b in rows.blocks if b.name == bucket_row(prefix, i) and b.micro_batch is None), None)
            if block is not None:
                found.append((block, bucket))
    taken = {id(block) for block, _ in found}
    blocks = [b for b in rows.blocks if id(b) not in taken]
    first = next(i for i, b in enumerate(blocks) if b.micro_batch is not None)
    moves = list(zip((block for block, _ in found), fill_rows(blocks, [bucket for _, bucket in found])))
    after: dict[str, str] = {}
    # From the last place up, so that earlier places keep their index; at one place the
    # buckets go in one after another, so that bucket 0 (the later layers) stands last and
    # SimAI runs it first.
    for block, at in sorted(moves, key=lambda m: -(first if m[1] is None else m[1])):
        if at is not None:  # else where it was: after the backward pass
            after[block.name] = blocks[at].name if at < len(blocks) else blocks[-1].name
        blocks.insert(first if at is None else at, block)
    return Rows(blocks, _placed_notes(rows, after))


def _placed_notes(rows: Rows, after: dict[str, str]) -> list[Unexpressed]:
    """The bucket rows' notes, each moved row's saying which row it follows (the notes of a
    module's bucket rows are in the order of its rows)."""
    names: dict[str, list[str]] = {}
    for b in rows.blocks:
        if b.micro_batch is None and is_bucket_row(b.name):
            names.setdefault(b.module, []).append(b.name)
    out = []
    for u in rows.unexpressed:
        name = names.get(u.module, [None]).pop(0) if u.in_rows and names.get(u.module) else None
        if name in after:
            u = dataclasses.replace(u, why=u.why.replace(_AFTER, f"; the row follows {after[name]} in SimAI's "
                                                        "backward pass, micro-batch 0's (the one SimAI runs last)"))
        out.append(u)
    return out
