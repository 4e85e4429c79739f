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
"""

from __future__ import annotations

from .megatron_blocks import BF16, FP32, Block, Build, Comm, Rows, Unexpressed
from .megatron_parameters import dense_parameters, expert_parameters, sequence_parallel_parameters
from .row_names import SP_GRADS_ALLREDUCE, dp_ep


def iteration_rows(build: Build, stage: int) -> Rows:
    """The once-per-iteration rows of stage ``stage``: optimizer, SP gradients, DP reduces."""
    out = Rows()
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


def _optimizer(build: Build, stage: int) -> list[Block]:
    """The optimizer step; with the distributed optimizer, its parameter all-gathers."""
    s = build.setup
    if not s.distributed_optimizer:
        return [Block("optimizer", "optimizer.step", **build.timed("optimizer"))]
    psi = dense_parameters(s, stage, build.release)
    rows = [Block("dp_param_allgather", "optimizer.param_allgather",
                  wg=Comm("allgather", "DP", BF16 * psi) if s.dp_cp > 1 else None, **build.timed("optimizer"))]
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


def _dense_grads(build: Build, stage: int) -> list[Block]:
    """The DP reduce of the dense gradients: reduce-scatter (distributed optimizer) or all-reduce."""
    s = build.setup
    if s.dp_cp == 1:
        return []
    size = _grad_bytes(build) * dense_parameters(s, stage, build.release)
    if s.distributed_optimizer:
        return [Block("dp_grad_reducescatter", "ddp.grad_reducescatter", wg=Comm("reducescatter", "DP", size))]
    return [Block("dp_grad_allreduce", "ddp.grad_allreduce", wg=Comm("allreduce", "DP", size))]


def _expert_grads(build: Build, stage: int) -> Rows:
    """The expert-DP reduce of the routed experts' gradients (ep > 1), and, with an expert TP
    other than TP, why SimAI's DP_EP is not megatron's group (for the gather too)."""
    s, out = build.setup, Rows()
    experts = _expert_dp(build, stage)
    if not experts:
        return out
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
