"""The Megatron schedule of MoE layers against megatron-core 0.16.1's all-to-all token
dispatcher, restated here independently of ``workload/megatron_moe.py``."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from commsweep.analysis import audit, volumes
from commsweep.setup.models import PRESETS
from commsweep.setup.training import TrainingSetup
from commsweep.workload import format as wf
from commsweep.workload import megatron

from test_megatron import TINY_LLAMA, expected_volumes

TINY_MOE = dataclasses.replace(TINY_LLAMA, name="tiny-moe", num_query_groups=4, num_experts=8, moe_topk=2, moe_ffn_hidden_size=96)
SHARED = dataclasses.replace(TINY_MOE, name="tiny-moe-shared", moe_shared_expert_intermediate_size=128,
                             moe_shared_expert_gate=True, moe_aux_loss_coeff=0.01, add_qkv_bias=True)
MIXED = dataclasses.replace(SHARED, name="tiny-moe-mixed", moe_layer_freq=2, moe_topk=1)


def moe_volumes(s: TrainingSetup, stage: int) -> dict[tuple, tuple[int, int]]:
    """(phase, collective, group) -> (count, payload bytes) of the MoE layers alone."""
    m = s.model
    t, ep, e, k, E = s.tp, s.ep, s.expert_tp, m.moe_topk, m.num_experts
    g = s.num_microbatches
    layers = [layer for layer in range(stage * s.layers_per_stage, (stage + 1) * s.layers_per_stage)
              if layer % m.moe_layer_freq == 0]
    n = g * len(layers)
    u = 2 * s.micro_batch * s.seq_length * m.hidden_size
    tokens = s.micro_batch * s.seq_length // t  # SP shards the sequence (MoE with t > 1 needs SP)
    out: dict[tuple, list[int]] = {}

    def add(key, count, size):
        if key[0] == "fwd" and 0 < size < 4096:
            size = 4096
        if count:
            entry = out.setdefault(key, [0, 0])
            entry[0] += count
            entry[1] += count * size

    if t > 1 and m.moe_shared_expert_intermediate_size:  # the shared experts: a dense MLP with SP
        add(("fwd", "allgather", "TP"), n, u)
        add(("fwd", "reducescatter", "TP"), n, u)
        add(("ig", "allgather", "TP"), 2 * n, u)
        add(("ig", "reducescatter", "TP"), n, u)
    if t > 1 and m.moe_aux_loss_coeff:
        add(("fwd", "allreduce", "TP"), n, 8 * E)  # int64 token counts per expert
    if e > 1 and ep == 1:
        add(("fwd", "allgather", "TP"), n, 8 * e * E)  # the dispatcher's metadata
    if e == 1 and ep > 1:
        add(("fwd", "allgather", "EP"), n, 8 * ep * E)
    if ep > 1:
        for phase in ("fwd", "ig"):
            add((phase, "alltoall", "EP"), 2 * n, u * k // t)  # dispatch and combine
            add((phase, "alltoall", "EP"), n, 2 * tokens * k)  # the routing probabilities
    if e > 1:
        add(("fwd", "allgather", "TP"), n, u * k * e // t)
        add(("fwd", "allgather", "TP"), n, 2 * tokens * k * e)
        add(("fwd", "reducescatter", "TP"), n, u * k * e // t)
        add(("ig", "reducescatter", "TP"), n, u * k * e // t)
        add(("ig", "reducescatter", "TP"), n, 2 * tokens * k * e)
        add(("ig", "allgather", "TP"), n, u * k * e // t)
    return {key: tuple(v) for key, v in out.items()}


def expert_params(s: TrainingSetup) -> int:
    m = s.model
    f = m.moe_ffn_hidden_size or m.ffn_hidden_size
    return m.num_experts // s.ep * (2 * m.hidden_size * f + f * m.hidden_size) // s.expert_tp  # swiglu fc1 is 2f wide


def measured(workload: wf.Workload) -> dict[tuple, tuple[int, int]]:
    out: dict[tuple, list[int]] = {}
    for v in volumes.tally(workload):
        entry = out.setdefault((v.phase, v.collective, v.group), [0, 0])
        entry[0] += v.count
        entry[1] += v.payload_bytes
    return {k: tuple(v) for k, v in out.items()}


def without(total: dict, part: dict) -> dict:
    """``total`` less the counts and bytes of ``part`` (keys left at zero dropped)."""
    out = dict(total)
    for key, (count, size) in part.items():
        c, b = out.get(key, (0, 0))
        assert c >= count and b >= size, (key, (c, b), (count, size))
        if (c - count, b - size) == (0, 0):
            out.pop(key)
        else:
            out[key] = (c - count, b - size)
    return out


CASES = [
    pytest.param(model, tp, ep, etp, pp, stage, id=f"{model.name}-tp{tp}-ep{ep}-etp{etp}-pp{pp}-s{stage}")
    for model, tp, ep, etp, pp in itertools.product((TINY_MOE, SHARED, MIXED), (1, 2, 4), (1, 2, 4), (None, 1), (1, 2))
    for stage in sorted({0, pp - 1})
    if not (etp == 1 and tp == 1)
]


@pytest.mark.parametrize("model, tp, ep, etp, pp, stage", CASES)
def test_moe_layers_follow_the_token_dispatcher(model, tp, ep, etp, pp, stage):
    setup = TrainingSetup(model=model, world_size=tp * pp * 8, tp=tp, pp=pp, ep=ep, etp=etp, sp=tp > 1,
                          micro_batch=2, global_batch=2 * 8 * 3, seq_length=64)
    assert setup.problems() == [] and megatron.unsupported(setup) == []
    schedule = megatron.schedule(setup, stage=stage)
    workload = schedule.workload()
    assert wf.parse(workload.render()) == workload
    got = measured(workload)
    # Everything outside the MoE layers is the dense model's (GROUND_TRUTH.md's formulas)
    # apart from the data-parallel and sequence-parallel gradients, checked below.
    moe = moe_volumes(setup, stage)
    rest = without(got, moe)
    dense = expected_volumes(dataclasses.replace(setup, model=dataclasses.replace(model, num_experts=None)), stage)
    for key in (("wg", "reducescatter", "DP"), ("wg", "allgather", "DP"), ("ig", "allreduce", "TP")):
        dense.pop(key, None)
        rest.pop(key, None)
    moe_layers = [layer for layer in range(stage * setup.layers_per_stage, (stage + 1) * setup.layers_per_stage)
                  if model.is_moe_layer(layer)]
    # A dense layer's MLP, which MoE layers do not have: 2 TP collectives forward, 3 backward with SP.
    if tp > 1:
        u, g, n = 2 * 2 * 64 * model.hidden_size, setup.num_microbatches, len(moe_layers)
        dense = without(dense, {("fwd", "allgather", "TP"): (g * n, g * n * u),
                                ("fwd", "reducescatter", "TP"): (g * n, g * n * u),
                                ("ig", "allgather", "TP"): (2 * g * n, 2 * g * n * u),
                                ("ig", "reducescatter", "TP"): (g * n, g * n * u)})
    rest.pop(("wg", "reducescatter", "DP_EP"), None)
    rest.pop(("wg", "allgather", "DP_EP"), None)
    assert rest == dense
    # Expert gradients: over DP_EP (world / (etp*ep*pp) ranks) when ep > 1, else with the dense ones.
    experts = len(moe_layers) * expert_params(setup)
    dp_ep = {k: v for k, v in got.items() if k[2] == "DP_EP"}
    if ep > 1 and setup.expert_dp > 1:
        assert dp_ep == {("wg", "reducescatter", "DP_EP"): (1, 4 * experts), ("wg", "allgather", "DP_EP"): (1, 2 * experts)}
    else:
        assert dp_ep == {}
    assert megatron.expert_parameters(setup, stage) == (experts if ep > 1 else 0)


def test_qwen_preset_per_layer_bytes():
    """Qwen1.5-MoE-A2.7B at TP 2, EP 4 with SP: one MoE layer's collectives in bytes."""
    setup = TrainingSetup(model=PRESETS["qwen1.5-moe-a2.7b"], world_size=16, tp=2, ep=4, sp=True,
                          micro_batch=1, global_batch=8, seq_length=4096)
    rows = {r.name: r for r in megatron.schedule(setup).workload().rows}
    u = 2 * 4096 * 2048
    assert rows["layer0_moe_shared_fc1"].fwd_comm == "ALLGATHER" and rows["layer0_moe_shared_fc1"].fwd_size == u
    assert (rows["layer0_moe_router"].fwd_comm, rows["layer0_moe_router"].fwd_size) == ("ALLREDUCE", 8 * 60)
    assert "layer0_moe_dispatch_metadata" not in rows  # expert TP x EP: no SimAI group
    assert (rows["layer0_moe_dispatch"].fwd_comm, rows["layer0_moe_dispatch"].fwd_size) == ("ALLTOALL_EP", u * 4 // 2)
    assert rows["layer0_moe_dispatch"].ig_comm == "ALLTOALL_EP"
    assert rows["layer0_moe_dispatch_probs"].fwd_size == 2 * 2048 * 4
    assert (rows["layer0_moe_expert_fc1"].fwd_comm, rows["layer0_moe_expert_fc1"].fwd_size) == ("ALLGATHER", u * 4)
    assert (rows["layer0_moe_expert_fc2"].fwd_comm, rows["layer0_moe_expert_fc2"].ig_comm) == ("REDUCESCATTER", "ALLGATHER")
    sched = megatron.schedule(setup)
    metadata = [u for u in map(megatron.as_unexpressed, sched.unexpressed) if not u.in_rows and u.layer == 0]
    assert [(x.comm.collective, x.comm.group, x.comm.bytes) for x in metadata] == [("allgather", "TP_EP", 8 * 2 * 4 * 60)]
    routed = {x.module for x in map(megatron.as_unexpressed, sched.unexpressed) if x.in_rows}
    assert routed == {f"decoder.layers.{i}.mlp" for i in range(24)}


def test_expert_tp_other_than_tp_is_listed_as_unexpressed():
    setup = TrainingSetup(model=TINY_MOE, world_size=16, tp=4, ep=2, etp=2, sp=True, global_batch=8, seq_length=64)
    assert megatron.unsupported(setup) == []
    sched = megatron.schedule(setup)
    groups = {c.group for c in wf.collectives(sched.workload())}
    assert "ETP" not in groups and "TP_EP" not in groups
    left = [x for x in map(megatron.as_unexpressed, sched.unexpressed) if not x.in_rows]
    assert {x.comm.group for x in left} == {"ETP", "TP_EP"}
    sizes = [x for x in map(megatron.as_unexpressed, sched.unexpressed) if x.comm.group == "DP_EP"]
    assert all("SimAI sizes DP_EP as dp/ep = 2" in x.why and "4 ranks" in x.why for x in sizes) and len(sizes) == 2


def test_refusals_name_megatron_rules():
    mix = PRESETS["mixtral-8x7b"]
    no_sp = TrainingSetup(model=mix, world_size=16, tp=2, ep=2, sp=False, global_batch=8)
    assert megatron.unsupported(no_sp) == [
        "megatron-core refuses MoE with tensor parallelism but without sequence parallelism"]
    bias = TrainingSetup(model=dataclasses.replace(mix, add_bias_linear=True), world_size=16, tp=2, ep=2, sp=True,
                         global_batch=8)
    assert "linear biases" in megatron.unsupported(bias)[0]
    assert TrainingSetup(model=mix, world_size=16, tp=2, ep=2, etp=3, sp=True, global_batch=8).problems() != []


def test_moe_schedule_audits_clean():
    setup = TrainingSetup(model=SHARED, world_size=16, tp=2, ep=4, sp=True, micro_batch=2, global_batch=32,
                          seq_length=64)
    assert audit.audit(megatron.schedule(setup).workload(), setup) == []
