"""MoE: the megatron schedule against real megatron-core's all-to-all token dispatcher.

The ``trace``-marked tests run megatron-core 0.16.1 on 4 gloo processes (one launch for
every case: imports dominate) and skip where the megatron extra is not installed. The
others check what needs no megatron: gloo's collectives as megatron's MoE layer calls
them, and the scaled setups.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import tempfile

import pytest

from commsweep.setup.models import PRESETS
from commsweep.setup.training import TrainingSetup
from commsweep.trace import compare, runner, scale
from commsweep.trace.records import Trace
from commsweep.workload import megatron

MISSING = runner.missing_dependencies()
MIXTRAL, QWEN = PRESETS["mixtral-8x7b"], PRESETS["qwen1.5-moe-a2.7b"]
# Top-1 routing, no shared expert, one MoE layer every two (layer 0 MoE, layer 1 dense).
TOP1 = dataclasses.replace(MIXTRAL, name="top1-mixed", moe_topk=1, moe_layer_freq=2, moe_aux_loss_coeff=0.0)


def point(model, tp: int, ep: int, *, pp: int = 1, etp: int | None = None) -> TrainingSetup:
    return TrainingSetup(model=model, world_size=64, tp=tp, pp=pp, ep=ep, etp=etp, sp=tp > 1, global_batch=64)


# name -> (setup, DP of the trace); every case runs on 4 processes.
CASES = {
    "mixtral_tp1_ep4": (point(MIXTRAL, 1, 4), 1),
    "mixtral_tp1_ep2_dp4": (point(MIXTRAL, 1, 2), 4),  # experts' gradients on a DP_EP group of 2
    "mixtral_tp1_pp2_ep2": (point(MIXTRAL, 1, 2, pp=2), 1),
    "qwen_tp2_sp_ep2": (point(QWEN, 2, 2), 1),  # top-4, shared expert and gate, load-balancing loss
    "top1_tp2_sp_ep2": (point(TOP1, 2, 2), 1),
    "qwen_tp2_sp_etp1_ep2": (point(QWEN, 2, 2, etp=1), 1),  # expert TP 1 under TP 2
}


# -- without megatron ---------------------------------------------------------------------


def test_scaled_moe_setups_keep_the_structure_and_balance_the_experts():
    for name, (setup, dp) in CASES.items():
        small = scale.scaled_setup(setup, dp=dp)
        m, big = small.model, setup.model
        assert small.problems() == [] and megatron.unsupported(small) == [], name
        assert small.world_size == 4, name
        assert (small.ep, small.expert_tp, small.tp, small.pp) == (setup.ep, setup.expert_tp, setup.tp, setup.pp)
        assert (m.moe_topk, m.moe_layer_freq, m.moe_shared_expert_gate, m.moe_aux_loss_coeff) == (
            big.moe_topk, big.moe_layer_freq, big.moe_shared_expert_gate, big.moe_aux_loss_coeff)
        assert (m.moe_shared_expert_intermediate_size is None) == (big.moe_shared_expert_intermediate_size is None)
        tokens = small.micro_batch * small.seq_length // small.tp
        assert m.num_experts % small.ep == 0 and m.num_experts // small.ep >= 2
        assert (tokens * m.moe_topk) % m.num_experts == 0  # the balanced router's every expert gets the same


def test_trace_keys_name_the_moe_structure():
    assert scale.trace_key(point(QWEN, 2, 2)) == "llama-qkvbias-moe-k4-shared-gate-aux_tp2_pp1_sp1_ep2"
    assert scale.trace_key(point(MIXTRAL, 1, 4)) == "llama-gqa-moe-k2-aux_tp1_pp1_sp0_ep4"
    assert scale.trace_key(point(QWEN, 2, 2, etp=1)).endswith("_ep2_etp1")
    assert scale.pipeline_dp(point(MIXTRAL, 1, 4)) == 4  # EP is carved out of DP
    no_sp = dataclasses.replace(point(MIXTRAL, 2, 2), sp=False)  # megatron refuses it: not traced
    assert scale.trace_setups([no_sp, point(MIXTRAL, 2, 2)]) == {scale.trace_key(point(MIXTRAL, 2, 2)): point(MIXTRAL, 2, 2)}


def _gather(rank: int, store: str, out) -> None:
    import torch
    import torch.distributed as dist

    from commsweep.trace import collectives

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        # megatron's _gather_along_first_dim with split sizes, as after uneven routing.
        sizes = [1, 3]
        mine = torch.arange(sizes[rank] * 2, dtype=torch.float32).view(-1, 2) + 10 * rank
        outputs = [torch.empty(n, 2) for n in sizes]
        raw = dist.all_gather
        try:
            raw(outputs, mine)
            refused = ""
        except RuntimeError as err:
            refused = str(err)
        calls = []
        collectives.install(calls.append)
        try:
            dist.all_gather(outputs, mine)
        finally:
            collectives.install(lambda call: None)
        out.put((rank, refused, [o.tolist() for o in outputs], [(c.op, c.elements) for c in calls]))
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(MISSING is not None, reason=f"needs torch: {MISSING}")
def test_gloo_refuses_uneven_all_gather_and_the_trace_gathers_it_as_megatron_calls_it():
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_gather, args=(rank, store, queue)) for rank in (0, 1)]
        for p in procs:
            p.start()
        results = sorted(queue.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(timeout=60)
    for rank, refused, outputs, calls in results:
        assert "invalid tensor size" in refused  # torch 2.13.0's gloo
        assert outputs == [[[0.0, 1.0]], [[10.0, 11.0], [12.0, 13.0], [14.0, 15.0]]]
        assert calls == [("all_gather", 8)]  # one call, megatron's, with the whole gathered tensor


# -- with megatron-core --------------------------------------------------------------------


@pytest.fixture(scope="module")
def traces() -> dict[str, Trace]:
    setups = {name: scale.scaled_setup(s, dp=dp) for name, (s, dp) in CASES.items()}
    return dict(zip(setups, runner.run(list(setups.values()), timeout=900)))


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
def test_moe_schedule_matches_megatron_core(traces, case):
    trace = traces[case]
    setup = trace.setup
    assert compare.rank_differences(trace) == []
    rows = compare.compare(trace)
    assert compare.differences(rows) == [], compare.summary(rows)
    kinds = {(r.phase, r.collective, r.group) for r in rows}
    moe_layers = [layer for layer in range(setup.model.num_layers) if setup.model.is_moe_layer(layer)]
    dispatcher = [r for r in rows if r.module.endswith(".mlp") and r.layer in moe_layers]
    if setup.ep > 1:
        assert {("forward", "alltoall", "EP"), ("backward", "alltoall", "EP")} <= kinds
        # Per MoE layer: tokens out and back, their probabilities, forward and backward.
        per_layer = {(r.layer, r.phase): 0 for r in dispatcher if r.collective == "alltoall"}
        for r in dispatcher:
            if r.collective == "alltoall":
                per_layer[(r.layer, r.phase)] += r.trace_count
        assert set(per_layer.values()) == {3 * setup.num_microbatches}
        assert all(r.note.startswith("sized for balanced routing") for r in dispatcher if r.collective == "alltoall")
    if setup.expert_tp > 1:
        assert ("forward", "allgather", "TP") in {(r.phase, r.collective, r.group) for r in dispatcher}
    if setup.ep > 1 and setup.expert_dp > 1:
        assert {("after_backward", "reducescatter", "DP_EP"), ("after_backward", "allgather", "DP_EP")} <= kinds
    if setup.model.moe_shared_expert_intermediate_size and setup.tp > 1:
        assert any(".shared_experts.linear_fc1" in r.module for r in rows)
    if setup.expert_tp != setup.tp:
        assert any(r.group == "DP_EP" and "SimAI sizes DP_EP" in r.note for r in rows) or setup.expert_dp == 1
    # Dense layers of a mixed model keep the dense MLP's collectives.
    dense = [layer for layer in range(setup.model.num_layers) if layer not in moe_layers]
    for layer in dense:
        assert any(r.module == f"decoder.layers.{layer}.mlp.linear_fc1" for r in rows)
