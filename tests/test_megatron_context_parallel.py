"""Context parallelism in the Megatron schedule, per ``cp_comm_type``, against hand counts.

The counts and sizes follow TransformerEngine v2.9's
``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``
(``AttnFuncWithCPAndKVP2P``, ``AttnFuncWithCPAndKVAllGather``, ``AttnFuncWithCPAndQKVOA2A``)
as megatron-core core_v0.19.0's ``TEDotProductAttention`` calls them, restated here
independently of ``workload/megatron_context_parallel.py``.

The tiny Llama: h = 64, n = 8 heads of d = 8, g = 2 query groups; b = 2, s = 64.
"""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from commsweep.setup.arguments import add_schedule_arguments, add_training_arguments, setup_from_args, to_commsweep_argv
from commsweep.setup.models import PRESETS
from commsweep.setup.training import TrainingSetup
from commsweep.workload import megatron

from test_megatron import TINY_GPT, TINY_LLAMA


def setup(cp: int, kind: str, tp: int = 1, hierarchical=None, **kw) -> TrainingSetup:
    s = TrainingSetup(model=kw.pop("model", TINY_LLAMA), world_size=kw.pop("world_size", tp * cp * 2), tp=tp,
                      micro_batch=2, global_batch=4, seq_length=64, cp=cp, cp_comm_type=kind,
                      hierarchical_cp=hierarchical, **kw)
    assert s.problems() == [] and megatron.unsupported(s) == []
    return s


def cp_comms(s: TrainingSetup, layer: int = 0, micro_batch: int = 0) -> dict[str, list[tuple[str, str, int]]]:
    """One layer's CP collectives for one micro-batch, per phase."""
    out: dict[str, list] = {"fwd": [], "ig": []}
    for u in megatron.schedule(s).unexpressed:
        if u.comm.group.startswith("CP") and u.layer == layer and u.micro_batch == micro_batch:
            assert u.module == f"decoder.layers.{layer}.self_attention.core_attention" and not u.in_rows
            out[u.phase].append((u.comm.collective, u.comm.group, u.comm.bytes))
    return out


def test_p2p_sends_the_kv_chunk_around_the_ring_and_back_with_its_gradient():
    """t = 2, c = 2: KV = 2 (K, V) * b * s/c * g/t * d * 2 bytes = 2*2*32*1*8*2 = 2048.
    Forward c-1 = 1 step; backward c = 2 steps, the first KV, the last dKV (no middle step).
    c = 4 (t = 1): KV = 2*2*16*2*8*2 = 2048; forward 3 steps; backward KV, 2 KV, 2 KV, KV."""
    assert cp_comms(setup(2, "p2p", tp=2)) == {"fwd": [("sendrecv", "CP", 2048)],
                                               "ig": [("sendrecv", "CP", 2048)] * 2}
    four = cp_comms(setup(4, "p2p"))
    assert four == {"fwd": [("sendrecv", "CP", 2048)] * 3,
                    "ig": [("sendrecv", "CP", 2048), ("sendrecv", "CP", 4096), ("sendrecv", "CP", 4096),
                           ("sendrecv", "CP", 2048)]}
    assert sum(b for _, _, b in four["ig"]) == 2 * (4 - 1) * 2048  # 2(c-1) KV in backward


def test_all_gather_gathers_k_and_v_forward_and_again_backward_then_reduce_scatters_their_gradients():
    """t = 2, c = 2: K of the rank = b * s/c * g/t * d * 2 = 2*32*1*8*2 = 1024 bytes; gathered
    over c = 2 ranks: 2048 (a collective's size is the whole tensor). Forward: K, V gathered;
    backward: gathered again (not kept), dK and dV reduce-scattered."""
    got = cp_comms(setup(2, "all_gather", tp=2))
    assert got == {"fwd": [("allgather", "CP", 2048)] * 2,
                   "ig": [("allgather", "CP", 2048)] * 2 + [("reducescatter", "CP", 2048)] * 2}


def test_a2a_moves_q_k_v_before_the_core_attention_and_o_after():
    """t = 1, c = 2: Q = O = b * s/c * n * d * 2 = 2*32*8*8*2 = 8192 bytes, K = V = b * s/c *
    g * d * 2 = 2*32*2*8*2 = 2048 (the rank's tensors). Forward Q, K, V, then O; backward dO,
    then dQ, dK, dV."""
    qkv = [("alltoall", "CP", 8192), ("alltoall", "CP", 2048), ("alltoall", "CP", 2048)]
    assert cp_comms(setup(2, "a2a")) == {"fwd": qkv + [("alltoall", "CP", 8192)],
                                         "ig": [("alltoall", "CP", 8192)] + qkv}


def test_a2a_p2p_runs_the_all_to_alls_inside_and_the_ring_across():
    """t = 1, c = 4 = 2 (all-to-all) x 2 (ring): Q = 2*16*8*8*2 = 4096, K = 2*16*2*8*2 = 1024,
    the ring's KV 2048 (s*a/c tokens of g/a groups: the same bytes). Forward Q, K, V, one ring
    step, O; backward O and dO, two ring steps (KV, dKV), dQ, dK, dV."""
    qkv = [("alltoall", "CP_A2A", 4096), ("alltoall", "CP_A2A", 1024), ("alltoall", "CP_A2A", 1024)]
    o = ("alltoall", "CP_A2A", 4096)
    got = cp_comms(setup(4, "a2a+p2p", hierarchical=(2, 2)))
    assert got == {"fwd": qkv + [("sendrecv", "CP_P2P", 2048), o],
                   "ig": [o, o, ("sendrecv", "CP_P2P", 2048), ("sendrecv", "CP_P2P", 2048)] + qkv}


def test_selective_recompute_runs_the_core_attentions_cp_forward_again_in_backward():
    s = dataclasses.replace(setup(2, "all_gather", tp=2), recompute=True)
    got = cp_comms(s)
    assert got["ig"] == got["fwd"] + [("allgather", "CP", 2048)] * 2 + [("reducescatter", "CP", 2048)] * 2


def test_every_layer_and_micro_batch_has_its_cp_collectives_and_none_is_a_row():
    s = setup(2, "p2p", tp=2, world_size=4)
    sched = megatron.schedule(s)
    cp = [u for u in sched.unexpressed if u.comm.group == "CP"]
    # 4 layers, d = 4 / (2 * 2) = 1, g = 4 / (b * d) = 2 micro-batches, 3 collectives each.
    assert s.num_microbatches == 2 and len(cp) == 4 * 2 * 3
    assert all(c.group != "CP" for b in sched.blocks for p in ("fwd", "ig", "wg") if (c := b.comm(p)))
    assert len([e for e in sched.expected() if e.comm.group == "CP" and e.row is None]) == len(cp)


def test_cp_shrinks_the_rows_by_c_and_reduces_gradients_over_dp_times_cp():
    """c = 2, t = 2, world 4: d = 1, but gradients are reduced over DP x CP = 2 ranks, SimAI's
    DP group (all_gpus / (t * p)). Every TP collective is of s/c = 32 tokens: u = 2*2*32*64."""
    s = setup(2, "p2p", tp=2, world_size=4, sp=True)
    assert (s.dp, s.dp_cp, s.num_microbatches) == (1, 2, 2)
    rows = {r.name: r for r in megatron.schedule(s).workload().rows}
    assert rows["layer0_attention_qkv"].fwd_size == 2 * 2 * 32 * 64
    assert rows["cross_entropy_max"].fwd_size == 4 * 2 * 32  # fp32 values of b * s/c tokens
    psi = megatron.dense_parameters(s)
    assert (rows["dp_grad_reducescatter"].wg_comm, rows["dp_grad_reducescatter"].wg_size) == ("REDUCESCATTER", 4 * psi)
    assert rows["dp_param_allgather"].wg_size == 2 * psi
    header = megatron.schedule(s).header
    assert (header.all_gpus, header.ga, header.tp) == (4, 2, 2)
    no_cp = TrainingSetup(model=TINY_LLAMA, world_size=2, tp=2, micro_batch=2, global_batch=4, seq_length=64, sp=True)
    assert "dp_grad_reducescatter" not in {r.name for r in megatron.schedule(no_cp).workload().rows}


def test_cp_1_ignores_the_comm_type():
    plain = TrainingSetup(model=TINY_GPT, world_size=4, tp=2, global_batch=4, seq_length=64)
    a, b = megatron.schedule(plain), megatron.schedule(dataclasses.replace(plain, cp_comm_type="a2a"))
    assert (a.blocks, a.unexpressed, a.workload()) == (b.blocks, b.unexpressed, b.workload())


def test_megatrons_rules_and_the_schedules_limits_are_named():
    base = dict(model=TINY_LLAMA, micro_batch=1, global_batch=4)
    assert TrainingSetup(**base, world_size=8, cp=3, seq_length=68).problems() == [
        "context parallelism needs 2*cp=6 to divide seq_length=68 (the sequence is split into 2*cp chunks)",
        "world_size=8 is not divisible by tp*cp*pp=3"]
    assert TrainingSetup(**base, world_size=8, tp=2, cp=2, seq_length=64, cp_comm_type="a2a").problems() == [
        "the all-to-all of cp_comm_type a2a scatters the 1 query groups of a TP rank over 2 ranks: they must divide"]
    assert TrainingSetup(**base, world_size=8, cp=4, seq_length=64, cp_comm_type="a2a+p2p").problems() == [
        "cp_comm_type a2a+p2p needs two hierarchical CP sizes above 1 whose product is cp=4 (got None)"]
    assert TrainingSetup(**base, world_size=8, cp=2, seq_length=64, cp_comm_type="ring").problems() == [
        "cp_comm_type must be one of p2p, all_gather, a2a, a2a+p2p, got 'ring'"]
    moe = TrainingSetup(model=PRESETS["mixtral-8x7b"], world_size=16, tp=2, sp=True, cp=2, global_batch=16)
    assert "the megatron schedule does not model context parallelism with MoE layers" in megatron.unsupported(moe)
    gather = TrainingSetup(**base, world_size=8, cp=2, seq_length=64, cp_comm_type="all_gather")
    assert megatron.unsupported(gather, "0.10.0") == []
    assert megatron.unsupported(gather, "0.9.0") == [
        "megatron-core 0.9.0 has no cp_comm_type (from 0.10): its context parallelism is the p2p ring"]
    full = TrainingSetup(**base, world_size=8, cp=2, seq_length=64, recompute=True, recompute_granularity="full")
    assert megatron.unsupported(full) == ["the megatron schedule does not model full recompute with context parallelism"]


@pytest.mark.parametrize("kind, hierarchical", [("p2p", None), ("a2a+p2p", (2, 2))])
def test_the_command_line_carries_cp(kind, hierarchical):
    s = setup(4, kind, hierarchical=hierarchical)
    parser = argparse.ArgumentParser()
    add_training_arguments(parser)
    add_schedule_arguments(parser)
    back = setup_from_args(parser.parse_args(to_commsweep_argv(s)))
    assert (back.cp, back.cp_comm_type, back.hierarchical_cp) == (4, kind, hierarchical)
