"""Megatron's (interleaved) 1F1B schedule as events: the order each pipeline rank runs its
forward and backward passes in, and when each ends, to check the engine's bubble against.

The order is megatron-core's (0.16.1, ``megatron/core/pipeline_parallel/schedules.py``):
``get_pp_rank_microbatches`` gives rank r's warm-up forward passes, ``(p - r - 1) * 2 +
(v - 1) * group`` interleaved (``p - r - 1`` without interleaving), at most g*v;
``get_schedule_table`` orders the virtual micro-batches (micro-batch groups of ``group`` = p,
``microbatch_group_size_per_vp_stage``'s default, each group through chunk 0, then chunk 1,
...); ``forward_backward_pipelining_with_interleaving`` runs the warm-up forwards, then one
forward and one backward at a time, then the remaining backwards, the k-th backward on
chunk ``v - 1 - chunk(k)`` (``get_model_chunk_id(k, forward=False)``).

The events: a pass of virtual stage s (chunk c of rank r is s = c*p + r) takes its chunk's
forward or backward time; a forward waits for the same micro-batch's forward on stage s - 1,
a backward for its backward on s + 1 (the last stage's for its own forward), each plus the
send's time; a rank runs its passes one at a time, in megatron's order. Sends do not hold
the sender (the ideal of ``--overlap-p2p-communication``). The iteration ends with the last pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Pass:
    """One forward or backward pass of a micro-batch on a model chunk of a rank."""

    backward: bool
    micro_batch: int
    chunk: int


def schedule_table(g: int, v: int, group: int) -> list[tuple[int, int]]:
    """The (micro-batch, chunk) of each virtual micro-batch id, as ``get_schedule_table``."""
    table = []
    for start in range(0, g, group):
        end = g if start + group >= g else start + group
        table += [(mb, chunk) for chunk in range(v) for mb in range(start, end)]
    return table


def rank_order(p: int, v: int, g: int, rank: int, group: int | None = None) -> list[Pass]:
    """The passes rank ``rank`` runs, in megatron's order (``v == 1``: the plain 1F1B)."""
    group = p if group is None else group
    total = g * v
    warmup = p - rank - 1 if v == 1 else (p - rank - 1) * 2 + (v - 1) * group
    warmup = min(warmup, total)
    table = schedule_table(g, v, group)

    def forward(k: int) -> Pass:
        return Pass(False, table[k][0], table[k][1])

    def backward(k: int) -> Pass:
        return Pass(True, table[k][0], v - 1 - table[k][1])

    order = [forward(k) for k in range(warmup)]
    for i in range(total - warmup):
        order += [forward(warmup + i), backward(i)]
    return order + [backward(k) for k in range(total - warmup, total)]


def iteration_time(p: int, v: int, g: int, forward: Sequence[float], backward: Sequence[float],
                   send: float = 0.0) -> float:
    """When the last pass of the iteration ends: ``forward[s]``, ``backward[s]`` the times of
    one micro-batch's passes on virtual stage s (p*v of each), ``send`` one send's time."""
    stages = p * v
    if len(forward) != stages or len(backward) != stages:
        raise ValueError(f"need {stages} forward and backward times, one per virtual stage")
    orders = [rank_order(p, v, g, r) for r in range(p)]
    done: dict[tuple[bool, int, int], float] = {}
    clock, step = [0.0] * p, [0] * p
    while any(step[r] < len(orders[r]) for r in range(p)):
        progressed = False
        for r in range(p):
            while step[r] < len(orders[r]):
                ready = _ready(orders[r][step[r]], r, p, stages, done, send)
                if ready is None:
                    break
                op = orders[r][step[r]]
                stage = op.chunk * p + r
                clock[r] = max(clock[r], ready) + (backward[stage] if op.backward else forward[stage])
                done[(op.backward, op.micro_batch, stage)] = clock[r]
                step[r] += 1
                progressed = True
        if not progressed:
            raise RuntimeError("the schedule deadlocks")  # megatron's order never does
    return max(clock)


def _ready(op: Pass, rank: int, p: int, stages: int, done: dict, send: float) -> float | None:
    """When ``op``'s input has arrived (None: not yet produced)."""
    stage = op.chunk * p + rank
    if not op.backward:
        if stage == 0:
            return 0.0
        end = done.get((False, op.micro_batch, stage - 1))
        return None if end is None else end + send
    if stage == stages - 1:
        return done.get((False, op.micro_batch, stage))
    end = done.get((True, op.micro_batch, stage + 1))
    return None if end is None else end + send

