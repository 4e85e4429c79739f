"""The Megatron schedule's parts, one by one: each module's rows for one layer or one
iteration, against sizes worked out by hand here (GROUND_TRUTH.md's formulas, megatron-core's
``tensor_parallel/layers.py`` and ``mappings.py``)."""

from __future__ import annotations

import dataclasses

import pytest

from commsweep.setup.training import TrainingSetup
from commsweep.workload import (megatron, megatron_attention, megatron_data_parallel, megatron_embedding,
                                megatron_linear, megatron_mlp, megatron_pipeline, megatron_recompute,
                                megatron_releases, megatron_times)
from commsweep.workload.megatron_blocks import Block, Build, Comm, Rows, Timing, Unexpressed

from test_megatron import TINY_GPT, TINY_LLAMA

# b=2, s=64, h=64: u = 2*2*64*64 bytes.
U = 2 * 2 * 64 * 64


def build(sp: bool = False, tp: int = 2, timing: Timing = Timing(), **kw) -> Build:
    setup = TrainingSetup(model=kw.pop("model", TINY_GPT), world_size=kw.pop("world_size", tp * 2), tp=tp, sp=sp,
                          micro_batch=2, global_batch=kw.pop("global_batch", 4), seq_length=64, **kw)
    assert setup.problems() == []
    return Build(setup, megatron_releases.release(), timing)


def cells(blocks: list[Block]) -> list[tuple]:
    return [(b.name, *((c.collective, c.group, c.bytes) if (c := b.comm(p)) else None for p in ("fwd", "ig", "wg")))
            for b in blocks]


def test_column_parallel_gathers_with_sp_and_all_reduces_the_input_gradient_without():
    with_sp = megatron_linear.column_parallel(build(sp=True), "x", "m", 3, 1, size=100)
    assert cells(with_sp) == [("x", ("allgather", "TP", 100), ("reducescatter", "TP", 100), None),
                              ("x_wgrad_gather", None, ("allgather", "TP", 100), None)]
    assert cells(megatron_linear.column_parallel(build(), "x", "m", 3, 1)) == [("x", None, ("allreduce", "TP", U), None)]
    # At t = 1 the row stays, with no collective; SP is off there, as megatron switches it off.
    assert cells(megatron_linear.column_parallel(build(sp=True, tp=1), "x", "m", 3, 1)) == [("x", None, None, None)]


def test_row_parallel_reduce_scatters_with_sp_and_all_reduces_the_output_without():
    assert cells(megatron_linear.row_parallel(build(sp=True), "y", "m", 0, 0)) == [
        ("y", ("reducescatter", "TP", U), ("allgather", "TP", U), None)]
    assert cells(megatron_linear.row_parallel(build(), "y", "m", 0, 0)) == [("y", ("allreduce", "TP", U), None, None)]


def test_attention_rows_are_linear_qkv_then_linear_proj_and_carry_their_times():
    timing = Timing({"attention_qkv": (1, 2, 3), "attention_proj": (4, 5, 6)})
    rows = megatron_attention.layer_rows(build(sp=True, timing=timing, model=TINY_LLAMA), 2, 1)
    assert [(b.name, b.module, b.layer, b.micro_batch) for b in rows.blocks] == [
        ("layer2_attention_qkv", "decoder.layers.2.self_attention.linear_qkv", 2, 1),
        ("layer2_attention_qkv_wgrad_gather", "decoder.layers.2.self_attention.linear_qkv", 2, 1),
        ("layer2_attention_proj", "decoder.layers.2.self_attention.linear_proj", 2, 1)]
    assert [(b.fwd_compute, b.ig_compute, b.wg_compute) for b in rows.blocks] == [(1, 2, 3), (0, 0, 0), (4, 5, 6)]
    assert rows.unexpressed == []


def test_dense_mlp_rows_are_fc1_then_fc2():
    rows = megatron_mlp.layer_rows(build(), 1, 0)
    assert cells(rows.blocks) == [("layer1_mlp_fc1", None, ("allreduce", "TP", U), None),
                                  ("layer1_mlp_fc2", ("allreduce", "TP", U), None, None)]


def test_embedding_reduce_scatters_with_sp_and_rope_and_the_loss_all_reduces_b_times_s_fp32_values():
    rope = build(sp=True, model=TINY_LLAMA)
    assert cells(megatron_embedding.embedding_rows(rope, 0)) == [
        ("embedding_layer", ("reducescatter", "TP", U), ("allgather", "TP", U), None)]
    learned = build(sp=True)
    assert cells(megatron_embedding.embedding_rows(learned, 0)) == [
        ("embedding_layer", ("allreduce", "TP", U), ("allgather", "TP", U), None)]
    out = megatron_embedding.output_rows(build(), 0)
    ce = 4 * 2 * 64
    assert cells(out) == [("output_layer", None, ("allreduce", "TP", U), None)] + [
        (f"cross_entropy_{w}", ("allreduce", "TP", ce), None, None) for w in ("max", "target", "sum_exp")]


def test_full_recompute_writes_the_mlps_forward_collectives_then_the_attentions():
    timing = Timing({"recompute_attention": (0, 7, 0), "recompute_mlp": (0, 9, 0)})
    rows = megatron_recompute.layer_rows(build(sp=True, timing=timing), 0, 0)
    assert [(b.name, b.ig.collective, b.ig_compute) for b in rows] == [
        ("layer0_recompute_mlp_reducescatter", "reducescatter", 0), ("layer0_recompute_mlp_allgather", "allgather", 9),
        ("layer0_recompute_attention_reducescatter", "reducescatter", 0),
        ("layer0_recompute_attention_allgather", "allgather", 7)]
    assert [b.name for b in megatron_recompute.layer_rows(build(timing=timing), 0, 0)] == [
        "layer0_recompute_mlp_allreduce", "layer0_recompute_attention_allreduce"]


def test_pipeline_sends_per_chunk_and_direction_and_the_tied_embedding_between_the_ends():
    setup = TrainingSetup(model=dataclasses.replace(TINY_GPT, num_layers=8), world_size=8, tp=2, pp=4, sp=True,
                          global_batch=4, seq_length=64, virtual_pipeline=2)
    assert megatron_pipeline.stage_layers(setup, 1) == [1, 5]
    assert megatron_pipeline.pipeline_bytes(setup) == 2 * 64 * 64 // 2  # u/t with SP
    # The first stage: each chunk sends on; only its second chunk sends back (to the last stage).
    first = megatron_pipeline.sends(setup, 0)
    assert [u.module for u in first] == ["pipeline.send_forward", "pipeline.send_forward", "pipeline.send_backward"]
    middle = megatron_pipeline.sends(setup, 1)
    assert len(middle) == 4 and all(u.comm == Comm("sendrecv", "PP", 4096) for u in middle)
    tied = megatron_pipeline.tied_embedding(setup, 3)
    assert [(u.module, u.phase, u.comm) for u in tied] == [
        ("finalize_model_grads.embedding", "after", Comm("allreduce", "EMB", 4 * setup.padded_vocab * 64 // 2))]
    assert megatron_pipeline.tied_embedding(setup, 1) == []
    assert megatron_pipeline.sends(dataclasses.replace(setup, pp=1, virtual_pipeline=1), 0) == []


@pytest.mark.parametrize("distributed", [True, False])
def test_data_parallel_reduces_fp32_gradients_and_gathers_bf16_parameters_over_dp(distributed):
    b = build(sp=True, world_size=8, global_batch=8, distributed_optimizer=distributed)
    psi = megatron.dense_parameters(b.setup)
    rows = megatron_data_parallel.iteration_rows(b, 0)
    sp_grads = ("sp_grads_allreduce", None, ("allreduce", "TP", 4 * megatron.sequence_parallel_parameters(b.setup)), None)
    if distributed:
        assert cells(rows.blocks) == [("dp_param_allgather", None, None, ("allgather", "DP", 2 * psi)), sp_grads,
                                      ("dp_grad_reducescatter", None, None, ("reducescatter", "DP", 4 * psi))]
    else:
        assert cells(rows.blocks) == [("optimizer", None, None, None), sp_grads,
                                      ("dp_grad_allreduce", None, None, ("allreduce", "DP", 4 * psi))]
    # DP 1: the optimizer row stays, without a collective.
    alone = megatron_data_parallel.iteration_rows(build(tp=2, world_size=2, global_batch=2), 0)
    assert cells(alone.blocks) == [("dp_param_allgather", None, None, None)]


def test_profile_times_estimate_the_backward_and_full_recompute_runs_the_forward_again(reference):
    from commsweep.aiob import profile_file

    profile = profile_file.read(reference("aicb", "aiob_inputs", "Example.txt"))
    ns = megatron_times.timing(profile, None, recompute=True, full_recompute=True).ns
    assert ns["recompute_attention"] == (0, ns["attention_qkv"][0] + ns["attention_proj"][0], 0)
    assert ns["recompute_mlp"] == (0, ns["mlp_fc1"][0] + ns["mlp_fc2"][0], 0)
    assert megatron_times.timing(None, None, recompute=False, full_recompute=False) == Timing({})


def test_rows_add_up_blocks_and_unexpressed_in_order():
    a, b = Block("a", "m"), Block("b", "m")
    u = Unexpressed("m", "fwd", Comm("allreduce", "TP", 1), "why")
    rows = Rows([a])
    rows += Rows([b], [u])
    rows += [a]
    assert rows.blocks == [a, b, a] and rows.unexpressed == [u]
