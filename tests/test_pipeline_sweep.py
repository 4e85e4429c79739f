"""Interleaved and uneven pipelines answered by the sweep and by generate: the vpp and
pipeline_layout axes, megatron's rules for them, the layout's parser and the fullest stage."""

from __future__ import annotations

import pytest

from commsweep.base.errors import ConfigError
from commsweep.orchestration import sweep
from commsweep.setup import pipeline_layout
from commsweep.workload import megatron
from commsweep.workload.stage import GENERATE
from test_causes import default_config


def llama(**axes) -> dict:
    config = default_config(model=["llama-7b"], tp=[2], pp=[4], sp=[True], aiob=[False], network=["netA"],
                            world_size=[8], seq_length=[1024], global_batch=[16])
    config["sweep"].update(axes)
    return config


def test_vpp_1_and_no_layout_keep_the_keys_and_tables_of_a_sweep_without_the_axes():
    plain, _ = sweep.expand(llama())
    with_axes, _ = sweep.expand(llama(vpp=[1], pipeline_layout=[None]))
    assert [p.point_key for p in plain] == [p.point_key for p in with_axes]
    assert sweep.table_csv(plain) == sweep.table_csv(with_axes)


def test_the_axes_name_interleaved_and_uneven_points_and_generate_passes_them_on():
    config = llama(vpp=[1, 2], pipeline_layout=[None, "Et*7|t*9|t*9|t*7L"])
    points, invalid = sweep.expand(config)
    keys = {p.point_key: p for p in points}
    vpp2 = keys["llama-7b_ws8_tp2_pp4_ep1_sp1_mb1_gb16_seq1024_vpp2_megatron__netA"]
    uneven = keys["llama-7b_ws8_tp2_pp4_ep1_sp1_mb1_gb16_seq1024_pl7-9-9-7_megatron__netA"]
    assert "llama-7b_ws8_tp2_pp4_ep1_sp1_mb1_gb16_seq1024_megatron__netA" in keys and len(points) == 5
    assert vpp2.setup.virtual_pipeline == 2 and uneven.setup.stage_layout == (7, 9, 9, 7)
    argv = GENERATE.argv(GENERATE.job(uneven, config, (None,), ("w.txt",)))
    assert "--pipeline-model-parallel-layout=Et*7|t*9|t*9|t*7L" in argv
    assert "--virtual-pipeline=2" in GENERATE.argv(GENERATE.job(vpp2, config, (None,), ("w.txt",)))
    reasons = {r for bad in invalid for r in bad.reasons}
    # AICB's point of an interleaved setup is AICB's plain 1F1B workload (AICB has no such schedule).
    aicb = keys["llama-7b_ws8_tp2_pp4_ep1_sp1_mb1_gb16_seq1024_vpp2_aicb__netA"]
    assert aicb.ignores_vpp and "(AICB's plain 1F1B schedule)" in aicb.describe()
    assert GENERATE.job(aicb, config, (None,), ("w.txt",)).setup.virtual_pipeline == 1
    assert any(r.startswith("AICB has no uneven pipeline stages") for r in reasons)
    assert "pipeline_layout has 4 stages, pp*vpp is 8" in reasons  # the layout fixes vpp
    header = sweep.table_csv(points).splitlines()[0].split(",")
    assert header[header.index("nic_gbps") + 1:header.index("nic_gbps") + 3] == ["vpp", "pipeline_layout"]
    # The second stage holds 9 layers: more memory than the even split's fullest stage.
    memory = {p.point_key: sweep.memory_columns(p)["memory_gib"] for p in points}
    assert float(memory[uneven.point_key]) > float(memory[keys[
        "llama-7b_ws8_tp2_pp4_ep1_sp1_mb1_gb16_seq1024_megatron__netA"].point_key])


def test_the_interleaved_schedule_needs_pp_to_divide_the_micro_batches():
    _, invalid = sweep.expand(llama(vpp=[2], global_batch=[6], schedule=["megatron"]))
    assert invalid and "needs pp=4 to divide the 6 micro-batches" in invalid[0].reasons[0]


@pytest.mark.parametrize("axes, key, message", [
    (dict(vpp=[0]), "sweep.vpp", "values must be positive integers, got 0"),
    (dict(pipeline_layout=["Et*7|tx|L"]), "sweep.pipeline_layout", "unknown layer letter(s) 'x'"),
    (dict(pipeline_layout=["t*8|Et*8|L"]), "sweep.pipeline_layout", "must start with the embedding"),
    (dict(pipeline_layout=["Et|m|L"]), "sweep.pipeline_layout", "multi-token prediction"),
])
def test_bad_pipeline_values_name_their_key(axes, key, message):
    with pytest.raises(ConfigError) as err:
        sweep.expand(llama(**axes))
    assert err.value.key == key and message in str(err.value)


def test_layouts_read_as_megatron_core_reads_them():
    layout = pytest.importorskip("megatron.core.transformer.pipeline_parallel_layer_layout")
    from megatron.core.transformer.enums import LayerType

    for text, pp in (("Et*7|t*9|t*9|t*7L", 4), ("Ett|(tt|)*6tL", 4), ("E|t*4|t*4,L", 3)):
        theirs = layout.PipelineParallelLayerLayout(text, pp)
        counts = pipeline_layout.parse(text, pp, theirs.flatten_layout.count(LayerType.decoder))
        v = theirs.virtual_pipeline_model_parallel_size
        assert counts == tuple(theirs.layout[i][c].count(LayerType.decoder) for c in range(v) for i in range(pp))
        assert pipeline_layout.parse(pipeline_layout.text(counts), pp, sum(counts)) == counts


def test_first_and_last_stage_flags_split_the_rest_evenly():
    assert pipeline_layout.first_last(32, 4, 1, 6, 6) == (6, 10, 10, 6)
    assert pipeline_layout.first_last(30, 4, 2, 6, None) == (3, 4, 4, 4, 3, 4, 4, 4)
    with pytest.raises(ValueError, match="not divisible by the 3 other stages"):
        pipeline_layout.first_last(32, 4, 1, 6, None)


def test_an_uneven_stage_holds_its_layers_in_the_schedule():
    point = next(p for p in sweep.expand(llama(pipeline_layout=["Et*7|t*9|t*9|t*7L"]))[0]
                 if p.schedule == "megatron")
    assert megatron.stage_layers(point.setup, 1) == list(range(7, 16))
    interleaved = next(p for p in sweep.expand(llama(pipeline_layout=["Ett|(tttt|)*6t*6L"]))[0]
                       if p.schedule == "megatron").setup
    assert interleaved.virtual_pipeline == 2 and megatron.stage_layers(interleaved, 0) == [0, 1, 14, 15, 16, 17]
    assert megatron.stage_layers(interleaved, 3) == [10, 11, 12, 13, *range(26, 32)]


def test_aicbs_workload_of_an_interleaved_setup_differs_only_in_its_pipeline_sends():
    """AICB has no interleaved schedule and writes the stage's L/p layers as the header's vpp:
    against Megatron's v chunks the audit names one finding apart from those of the plain
    pipeline, its sends, counted (L/p)/v times over."""
    from collections import Counter
    from dataclasses import replace

    from commsweep.analysis import audit
    from commsweep.workload.generate import build

    plain = next(p for p in sweep.expand(llama(schedule=["aicb"]))[0]).setup
    workload = build(plain, "aicb")
    for v in (1, 2, 4):
        findings = audit.audit(workload, replace(plain, virtual_pipeline=v))
        sends = [f for f in findings if f.phase == "pp"]
        assert [f.cause for f in sends] == ["pipeline_send_bytes"]
        assert sends[0].ratio == (32 // 4) / v  # pp_comm alike (u/t with SP), vpp L/p against v
        # The rest as at v = 1, but on the interleaved stage's layer ids (0-3 and 16-19 at v = 2).
        rest = Counter((f.unit.micro_batch, f.unit.kind, f.phase, f.kind, f.cause, f.delta_bytes)
                       for f in findings if f.phase != "pp")
        layers = {f.unit.layer for f in findings if f.unit.layer is not None}
        assert layers == set(megatron.stage_layers(replace(plain, virtual_pipeline=v), 0))
        others = rest if v == 1 else others
        assert rest == others


def test_the_fullest_stage_is_the_first_holding_the_most_layers():
    from commsweep.workload.generate import pipeline_stage

    even, uneven = (next(p for p in sweep.expand(llama(pipeline_layout=[layout]))[0] if p.schedule == "megatron").setup
                    for layout in (None, "Et*7|t*9|t*9|t*7L"))
    assert pipeline_stage("fullest", even) == 0 and pipeline_stage("fullest", uneven) == 1
    assert pipeline_stage("last", uneven) == 3
    with pytest.raises(ConfigError, match="first, last, fullest or 0..3"):
        pipeline_stage("middle", uneven)
