"""FSDP (megatron-fsdp's sharding strategies, torch FSDP2) and FP8 parameter gathers in the
Megatron schedule, against hand counts; their sweep axes, refusals, Chakra export and audit.

The sizes restate megatron-core core_v0.16.1's ``megatron_fsdp/param_and_grad_buffer.py``
(``_get_parameter_groups``, ``build_data_parallel_buffer_index``) and torch's ``fully_shard``
by hand for the tiny Llama (h = 64, 8 heads, 2 query groups, SwiGLU FFN 176, RMSNorm, no
biases, untied, vocabulary 1000 padded to 1024), TP 1, DP 2, so that one layer holds:
norm 64, linear_proj [64, 64], linear_qkv [96, 64], norm 64, linear_fc1 [352, 64],
linear_fc2 [64, 176]: 44,160 parameters, 44,032 of them the four linear weights.
"""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from commsweep.analysis import audit
from commsweep.base.errors import ConfigError
from commsweep.orchestration import sweep
from commsweep.setup.arguments import add_schedule_arguments, add_training_arguments, setup_from_args, to_commsweep_argv
from commsweep.setup.training import TrainingSetup
from commsweep.workload import chakra_graph, megatron, megatron_fsdp
from commsweep.workload.generate import build

from test_megatron import TINY_LLAMA

LAYER = 44_160
LINEAR_WEIGHTS = 44_032
WORD = 1024 * 64


def tiny(fsdp: str = "none", **kw) -> TrainingSetup:
    s = TrainingSetup(model=TINY_LLAMA, world_size=kw.pop("world_size", 2), micro_batch=1,
                      global_batch=kw.pop("global_batch", 4), seq_length=64, fsdp=fsdp, **kw)
    assert s.problems() == [] and megatron.unsupported(s) == []
    return s


def dp_comms(s: TrainingSetup):
    """The schedule's DP collectives: (name or anchor, micro-batch, phase, collective, bytes),
    rows and unexpressed ones."""
    sc = megatron.schedule(s)
    rows = [(b.name, b.micro_batch, "wg", b.wg.collective, b.wg.bytes) for b in sc.blocks
            if b.wg is not None and b.wg.group == "DP"]
    gathers = [(u.anchor, u.micro_batch, u.phase, u.comm.collective, u.comm.bytes) for u in sc.unexpressed
               if u.module.startswith("fsdp.")]
    return rows, gathers


def test_megatron_fsdp_packs_and_pads_a_layer_as_its_buffer_index_does():
    # Rows sorted: fc2 (176), proj, qkv, fc1 (64), the norms (1); the factor grows to
    # lcm(176, 64) = 704 at linear_proj, whose 4,096 leave 576 of a 704-row (6 rows, 4,224),
    # filled with the two norms; linear_qkv's 6,144 take 9 rows (6,336); fc2 and fc1 fit
    # whole rows. 11,264 + 4,224 + 6,336 + 22,528 = 44,352, padded to 2 x 704: 45,056.
    s = tiny("optim_grads_params")
    factor, ordered = megatron_fsdp.chunk_factor(megatron_fsdp.layer_params(s, 0))
    assert factor == 704 and ordered[0].name == "mlp.linear_fc2.weight"
    assert megatron_fsdp.packed_size([q.numel for q in ordered], factor) == 44_352
    buckets = megatron_fsdp.stage_buckets(s, 0)
    # The embedding, final norm and output layer outside any unit: one bucket, rows of 64,
    # 65,536 + 64 + 65,536 = 131,136 padded to 2 x 64: 131,200; then one bucket per layer.
    assert [(b.unit, b.numel, b.params) for b in buckets] == [(None, 131_200, 2 * WORD + 64)] + [
        (layer, 45_056, LAYER) for layer in range(4)]


def test_optim_grads_params_gathers_each_layer_forward_and_backward_and_reduces_it_each_micro_batch():
    s = tiny("optim_grads_params")
    rows, gathers = dp_comms(s)
    assert s.num_microbatches == 2
    # Per micro-batch: the reduce-scatter of each layer (fp32) and of the bucket outside them,
    # written before the rows they follow in backward; no DP row once per iteration.
    assert [r for r in rows if r[1] == 0] == [("fsdp_grad_reducescatter_bucket0", 0, "wg", "reducescatter", 4 * 131_200)] + [
        (f"fsdp_grad_reducescatter_layer{i}", 0, "wg", "reducescatter", 4 * 45_056) for i in range(4)]
    assert len(rows) == 2 * 5
    # The gathers: the outer bucket before the embedding (first micro-batch only: megatron-fsdp
    # releases a unit's bucket only), each layer before its first row (forward) and its last
    # (backward), in bf16.
    assert [g for g in gathers if g[1] == 0][0] == ("embedding_layer", 0, "fwd", "allgather", 2 * 131_200)
    assert [g for g in gathers if g[1] == 1] == [
        g for i in range(4) for g in ((f"layer{i}_attention_qkv", 1, "fwd", "allgather", 2 * 45_056),
                                      (f"layer{i}_mlp_fc2", 1, "ig", "allgather", 2 * 45_056))]
    sc = megatron.schedule(s)
    names = [b.name for b in sc.blocks]
    assert names.index("fsdp_grad_reducescatter_layer2") + 1 == names.index("layer2_attention_qkv")


def test_optim_and_optim_grads_gather_once_per_iteration():
    for strategy, per_micro_batch in (("optim", False), ("optim_grads", True)):
        s = tiny(strategy)
        # No unit: one bucket of every parameter (no bucket size without overlap_grad_reduce),
        # its factor lcm(176, 64) = 704; packed and padded to 2 x 704.
        [bucket] = megatron_fsdp.stage_buckets(s, 0)
        assert bucket.params == 2 * WORD + 64 + 4 * LAYER and bucket.numel % 1408 == 0
        rows, gathers = dp_comms(s)
        assert gathers == []
        once = [r for r in rows if r[1] is None]
        assert ("dp_fsdp_param_allgather_bucket0", None, "wg", "allgather", 2 * bucket.numel) in once
        reduces = [r for r in rows if r[3] == "reducescatter"]
        assert [r[1] for r in reduces] == ([0, 1] if per_micro_batch else [None])
        assert {r[4] for r in reduces} == {4 * bucket.numel}


def test_no_shard_all_reduces_unpadded_buckets_in_the_last_micro_batch():
    s = tiny("no_shard", overlap_grad_reduce=True, ddp_bucket_size=100_000)
    buckets = megatron_fsdp.stage_buckets(s, 0)
    # Registration order, cut once a bucket holds 100,000 parameters: the embedding and layer
    # 0 (65,536 + 44,160), layers 1 to 3 (121,216 = 4,096 + ...), the rest. Packed on rows
    # of lcm(176, 64) = 704 as any bucket, but the end not padded to DP.
    assert [b.params for b in buckets] == [WORD + LAYER, 121_216, 76_864]
    params = megatron_fsdp.stage_params(s, 0)
    first = megatron_fsdp.chunk_factor(params[:1 + 6])
    assert buckets[0].numel == megatron_fsdp.packed_size([q.numel for q in first[1]], first[0]) == 109_824
    rows, gathers = dp_comms(s)
    assert gathers == [] and [r[3] for r in rows] == ["allreduce"] * len(buckets)
    assert [r[4] for r in rows] == [4 * b.numel for b in buckets]


def test_torch_fsdp2_units_are_the_root_the_embedding_each_layer_and_the_output_layer():
    s = tiny("torch_fsdp2")
    units = megatron_fsdp.torch_units(s)
    # Each parameter's first dimension padded to a multiple of 2: all even here.
    assert [u.numel for u in units] == [64, WORD, LAYER, LAYER, LAYER, LAYER, WORD]
    rows, gathers = dp_comms(s)
    mb0 = [g for g in gathers if g[1] == 0]
    # bf16 gathers: every unit before its forward and again before its backward (megatron
    # reshards the root too: its backward gather as the backward pass starts, the last row).
    assert [(g[0], g[2], g[4]) for g in mb0] == (
        [("embedding_layer", "fwd", 128), ("cross_entropy_sum_exp", "ig", 128),
         ("embedding_layer", "fwd", 2 * WORD), ("embedding_layer", "ig", 2 * WORD)]
        + [g for i in range(4) for g in ((f"layer{i}_attention_qkv", "fwd", 2 * LAYER),
                                         (f"layer{i}_mlp_fc2", "ig", 2 * LAYER))]
        + [("output_layer", "fwd", 2 * WORD), ("output_layer", "ig", 2 * WORD)])
    # bf16 gradients, reduce-scattered every micro-batch; in file order the embedding's before
    # the root's (SimAI runs them backwards: the root's first, as FSDP2's final callback does).
    assert [r[4] for r in rows if r[1] == 0] == [2 * WORD, 128] + [2 * LAYER] * 4 + [2 * WORD]


def test_fp8_param_gather_halves_the_linear_weights_gather_of_the_distributed_optimizer():
    s, plain = tiny(fp8_param_gather=True), tiny()
    rows, _ = dp_comms(s)
    psi = 2 * WORD + 64 + 4 * LAYER
    fp8 = 4 * LINEAR_WEIGHTS
    gathers = {r[0]: r[4] for r in rows if r[3] == "allgather"}
    assert gathers == {"dp_param_allgather": 2 * (psi - fp8), "dp_param_allgather_fp8": fp8}
    # The gradients keep their type (fp32), in the two buffers.
    assert sum(r[4] for r in rows if r[3] == "reducescatter") == 4 * psi
    assert sum(r[4] for r in dp_comms(plain)[0] if r[3] == "allgather") == 2 * psi


def test_fp8_param_gather_gives_megatron_fsdp_a_float8_bucket_per_layer():
    s = tiny("optim_grads_params", fp8_param_gather=True)
    layer0 = [b for b in megatron_fsdp.stage_buckets(s, 0) if b.unit == 0]
    assert [(b.fp8, b.params) for b in layer0] == [(False, 128), (True, LINEAR_WEIGHTS)]
    _, gathers = dp_comms(s)
    fwd = [g[4] for g in gathers if g[0] == "layer0_attention_qkv" and g[1] == 0]
    assert fwd == [b.gather_bytes() for b in layer0] and layer0[1].gather_bytes() == layer0[1].numel


def test_megatrons_argument_checks_are_refused_by_name():
    base = TrainingSetup(model=TINY_LLAMA, world_size=4, pp=2, global_batch=4, seq_length=64)
    assert ("torch FSDP2 is not supported with pipeline parallelism (megatron's --use-torch-fsdp2)"
            in dataclasses.replace(base, fsdp="torch_fsdp2").problems())
    tied = dataclasses.replace(base, pp=1, model=dataclasses.replace(TINY_LLAMA, tie_embeddings=True),
                               fsdp="torch_fsdp2")
    assert any("untied embeddings" in p for p in tied.problems())
    assert ("fp8_param_gather needs the distributed optimizer or FSDP"
            in dataclasses.replace(base, distributed_optimizer=False, fp8_param_gather=True).problems())
    assert any("fsdp must be one of" in p for p in dataclasses.replace(base, fsdp="zero3").problems())
    assert megatron.unsupported(dataclasses.replace(base, pp=2, virtual_pipeline=2, fsdp="optim"))


def _parse(argv):
    parser = argparse.ArgumentParser()
    add_training_arguments(parser)
    add_schedule_arguments(parser)
    return setup_from_args(parser.parse_args(argv))


def test_flags_parse_and_round_trip_through_the_command_line():
    for s in (tiny("optim_grads"), tiny("torch_fsdp2"), tiny(fp8_param_gather=True)):
        back = _parse(to_commsweep_argv(s))
        assert (back.fsdp, back.fp8_param_gather) == (s.fsdp, s.fp8_param_gather)
    base = to_commsweep_argv(tiny())
    assert _parse(base + ["--use-megatron-fsdp"]).fsdp == "no_shard"
    with pytest.raises(SystemExit):
        _parse(base + ["--use-megatron-fsdp", "--use-torch-fsdp2"])


def test_the_aicb_schedule_ignores_fsdp_as_aicb_does():
    s = tiny("optim_grads_params", fp8_param_gather=True)
    assert build(s, "aicb").render() == build(tiny(), "aicb").render()


def test_the_chakra_traces_carry_the_gathers_in_each_ranks_order():
    s = tiny("optim_grads_params", global_batch=2)
    nodes, _ = chakra_graph.megatron_traces([megatron.schedule(s)])
    order = [(n.name, n.collective, n.size) for n in nodes[1] if n.kind == "coll" and n.group == "DP"]
    forward = [n for n in order if n[0].endswith(".fwd.allgather")]
    assert [n[2] for n in forward] == [2 * 131_200] + [2 * 45_056] * 4
    backward = order[len(forward):]
    # Backward, last layer first: each layer's gather before its reduce-scatter; the outer
    # bucket's reduce-scatter last.
    assert [n[1] for n in backward] == ["allgather", "reducescatter"] * 4 + ["reducescatter"]
    assert backward[0][0] == "fsdp.unit.param_allgather.layer3.mb0.ig.allgather"
    # Each gather is placed at its row (forward: the layer's first; backward: its last), on
    # the DP group of the rank, one chain with the rows' nodes.
    sc = megatron.schedule(s)
    rows = {n.name: n.row for n in nodes[1]}
    assert sc.blocks[rows["fsdp.unit.param_allgather.layer1.mb0.fwd.allgather"]].name == "layer1_attention_qkv"
    assert sc.blocks[rows["fsdp.unit.param_allgather.layer1.mb0.ig.allgather"]].name == "layer1_mlp_fc2"
    chain = [n for n in nodes[1]]
    assert all(n.deps == (chain[i - 1].id,) for i, n in enumerate(chain) if i)


def fsdp_config(**axes) -> dict:
    from test_causes import default_config

    config = default_config(model=["llama-7b"], tp=[8], sp=[True], aiob=[False], network=["netA"], global_batch=[8],
                            world_size=[16])
    config["sweep"].update(axes)
    return config


def test_the_defaults_keep_the_keys_and_the_axes_name_the_points():
    plain, _ = sweep.expand(fsdp_config())
    same, _ = sweep.expand(fsdp_config(fsdp=["none"], fp8_param_gather=[False]))
    assert [p.point_key for p in plain] == [p.point_key for p in same]
    assert sweep.table_csv(plain) == sweep.table_csv(same)
    points, invalid = sweep.expand(fsdp_config(fsdp=["none", "optim_grads_params", "torch_fsdp2"],
                                               fp8_param_gather=[False, True]))
    keys = {p.point_key for p in points}
    assert "llama-7b_ws16_tp8_pp1_ep1_sp1_mb1_gb8_seq2048_fsdpogp_fp8g_megatron__netA" in keys
    assert "llama-7b_ws16_tp8_pp1_ep1_sp1_mb1_gb8_seq2048_fsdptorch2_megatron__netA" in keys
    # torch FSDP2 with FP8 gathers is refused (megatron turns them off), with the reason.
    assert all(p.fsdp != "torch_fsdp2" or not p.fp8_param_gather for p in points)
    assert any("torch FSDP2 with fp8_param_gather" in r for bad in invalid for r in bad.reasons)
    header = sweep.table_csv(points).splitlines()[0].split(",")
    assert "fsdp" in header and "fp8_param_gather" in header


@pytest.mark.parametrize("axes, key", [({"fsdp": ["zero3"]}, "sweep.fsdp"),
                                       ({"fp8_param_gather": ["yes"]}, "sweep.fp8_param_gather"),
                                       ({"fsdp": []}, "sweep.fsdp")])
def test_bad_axis_values_name_the_key(axes, key):
    with pytest.raises(ConfigError) as err:
        sweep.expand(fsdp_config(**axes))
    assert err.value.key == key


@pytest.fixture(scope="module")
def ogp(tmp_path_factory):
    """An optim_grads_params setting made as the rules make it: AICB's default path and Megatron's."""
    from test_causes import run_sweep

    results = tmp_path_factory.mktemp("fsdp") / "results"
    run_sweep(results, fsdp_config(fsdp=["optim_grads_params"], fp8_param_gather=[True]))
    return results


def test_the_causes_add_up_on_an_fsdp_point(ogp):
    from commsweep.analysis import causes, volumes
    from commsweep.base import paths

    from test_causes import point_totals

    [pc] = causes.sweep_causes(ogp / "sweep.csv", paths.PointFiles.under(ogp))
    megatron_point = next(p for p in sweep.points_from_config(fsdp_config(fsdp=["optim_grads_params"],
                                                                          fp8_param_gather=[True]))[0]
                          if p.schedule == "megatron")
    gathers = sum(v.payload_bytes for v in volumes.fsdp_gathers(megatron_point.setup))
    want_bytes, want_ns = point_totals(ogp, pc.point.cells, {"workload": megatron_point.workload_key,
                                                            "point": megatron_point.point_key})
    assert sum(r.bytes for r in pc.rows) == want_bytes - gathers
    assert sum(r.exposed_ns for r in pc.rows) == want_ns
    total = {c: sum(r.bytes for r in pc.rows if r.cause == c) for c in {r.cause for r in pc.rows}}
    assert total["fsdp_param_gathers_missing"] == -gathers
    assert total["fsdp_grad_reducescatters_missing"] < 0 < total["fsdp_dp_sync_as_distributed_optimizer"]
    assert "unattributed" not in total


def test_the_megatron_workload_misses_only_the_gathers(ogp):
    from commsweep.base import paths
    from commsweep.workload import format as wf

    megatron_point = next(p for p in sweep.points_from_config(fsdp_config(fsdp=["optim_grads_params"],
                                                                          fp8_param_gather=[True]))[0]
                          if p.schedule == "megatron")
    findings = audit.audit(wf.read(paths.workload_file(ogp, megatron_point.workload_key)), megatron_point.setup)
    assert {f.cause for f in findings} == {"fsdp_param_gathers_missing"}
    from commsweep.analysis import volumes

    assert sum(-f.delta_bytes for f in findings) == sum(v.payload_bytes
                                                        for v in volumes.fsdp_gathers(megatron_point.setup))


def test_the_generate_jobs_parse_back_with_their_notes():
    from commsweep.orchestration import stages
    from commsweep.workload.stage import GENERATE
    from test_stages import normal

    config = fsdp_config(fsdp=["optim_grads_params"], fp8_param_gather=[True])
    parser = stages.build_parser("generate")
    for point in sweep.points_from_config(config)[0]:
        job = GENERATE.job(point, config, (None,), ("w.txt",))
        back = GENERATE.from_args(parser.parse_args(list(GENERATE.argv(job))))
        assert normal(back) == normal(job)
        argv = GENERATE.argv(job)
        if point.schedule == "megatron":
            assert "--data-parallel-sharding-strategy=optim_grads_params" in argv and "--fp8-param-gather" in argv
            assert job.notes == (megatron_fsdp.NOTE,)
        else:  # AICB's job is what AICB runs: no FSDP flag
            assert not any("fsdp" in a or "fp8" in a for a in argv) and job.setup.fsdp == "none"


def test_volumes_of_the_chakra_traces_show_the_per_layer_gathers(tmp_path):
    from commsweep.analysis import volumes
    from commsweep.orchestration import cli

    s = tiny("optim_grads_params")
    argv = [a for a in to_commsweep_argv(s) if not a.startswith("--frame")]
    assert cli.main(["chakra", "--megatron", *argv, "-o", str(tmp_path / "traces")]) == 0
    assert cli.main(["volumes", str(tmp_path / "traces"), "--format", "csv", "-o", str(tmp_path / "v.csv")]) == 0
    table = {(v.phase, v.collective, v.group): (v.count, v.payload_bytes)
             for v in volumes.read_csv((tmp_path / "v.csv").read_text())}
    # 2 micro-batches: the outer bucket (once) and 4 layers gathered forward, the 4 layers backward.
    assert table[("fwd", "allgather", "DP")] == (1 + 2 * 4, 2 * 131_200 + 2 * 4 * 2 * 45_056)
    assert table[("ig", "allgather", "DP")] == (2 * 4, 2 * 4 * 2 * 45_056)
    assert table[("wg", "reducescatter", "DP")] == (2 * 5, 2 * (4 * 131_200 + 4 * 4 * 45_056))


def test_the_landing_pages_settings_tell_fsdp_apart(ogp):
    from commsweep.analysis.causes.panels import setting_label
    from commsweep.setup.points import read_points

    [aicb] = [p for p in read_points(ogp / "sweep.csv") if p.schedule == "aicb"]
    assert aicb.fsdp == "optim_grads_params" and aicb.fp8_param_gather is True
    assert setting_label(aicb).endswith(", FSDP optim_grads_params, FP8 gathers")
    point = next(p for p in sweep.points_from_config(fsdp_config(fsdp=["optim_grads_params"],
                                                                 fp8_param_gather=[True]))[0] if p.schedule == "aicb")
    assert point.ignores_fsdp and "(AICB has no FSDP or FP8 gathers)" in point.describe()
