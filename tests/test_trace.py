"""`commsweep trace`: the megatron schedule against real megatron-core on gloo CPU processes.

Tests marked ``trace`` run megatron-core (the ``megatron`` extra) and skip, with the
reason, where torch or megatron-core is not installed; the others check the pieces that
need neither (records, scaling, the comparison's mapping).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import subprocess
import sys

import pytest

from commsweep.base.errors import InputError
from commsweep.setup.models import PRESETS
from commsweep.setup.training import TrainingSetup
from commsweep.trace import compare, records, runner, scale
from commsweep.trace.records import RankInfo, Trace, TraceRecord

MISSING = runner.missing_dependencies()


def point(model: str, tp: int, sp: bool, pp: int = 1) -> TrainingSetup:
    return TrainingSetup(model=PRESETS[model], world_size=16 * tp * pp, tp=tp, pp=pp, sp=sp, global_batch=64)


# -- without torch -----------------------------------------------------------------------


def test_scaled_setup_keeps_the_structure_and_is_valid():
    for name in ("gpt-7b", "llama-7b", "llama-70b"):
        for tp, pp, sp in ((1, 1, False), (2, 1, True), (4, 2, True), (8, 1, False)):
            small = scale.scaled_setup(point(name, tp, sp, pp))
            assert small.problems() == [], (name, tp, pp)
            m, big = small.model, PRESETS[name]
            assert (small.tp, small.pp, small.sp, small.dp) == (tp, pp, sp and tp > 1, 1)
            assert (m.position_embedding, m.normalization, m.swiglu, m.add_bias_linear, m.tie_embeddings) == (
                big.position_embedding, big.normalization, big.swiglu, big.add_bias_linear, big.tie_embeddings)
            assert (m.num_query_groups is not None) == (big.num_query_groups is not None)
            assert small.padded_vocab > m.vocab_size  # megatron's padding is exercised
            assert small.num_microbatches == (2 if pp > 1 else 1)


def test_points_of_one_family_share_a_trace():
    assert scale.trace_key(point("gpt-7b", 2, True)) == scale.trace_key(point("gpt-13b", 2, True)) == "gpt_tp2_pp1_sp1"
    assert scale.scaled_setup(point("gpt-7b", 2, True)) == scale.scaled_setup(point("gpt-175b", 2, True))
    assert scale.trace_key(point("llama-70b", 4, False)) == "llama-gqa_tp4_pp1_sp0"
    assert scale.trace_key(point("llama-7b", 1, True)) == "llama_tp1_pp1_sp0"  # megatron drops SP at TP 1
    odd = dataclasses.replace(PRESETS["gpt-7b"], tie_embeddings=False)
    assert scale.family(odd) == "learned-layernorm-gelu-bias-untied-mha"


def test_trace_csv_round_trips_and_bad_rows_are_named():
    recs = [
        TraceRecord("all_reduce", "allreduce", "TP", 2, 2048, 8192, "forward", "embedding.word_embeddings", None),
        TraceRecord("reduce_scatter_tensor", "reducescatter", "TP", 2, 2048, 8192, "backward",
                    "decoder.layers.1.mlp.linear_fc1", 1, rank=3),
    ]
    text = records.to_csv(recs)
    assert text.splitlines()[0] == "op,group,group_size,elements,bytes,phase,module,layer,rank"
    back = records.read_csv(text)
    assert [(r.op, r.collective, r.elements, r.layer, r.rank) for r in back] == [
        ("all_reduce", "allreduce", 2048, None, 0), ("reduce_scatter_tensor", "reducescatter", 2048, 1, 3)]
    bad = text.replace("8192,backward", "8k,backward")
    with pytest.raises(InputError, match=r"t.csv:3: field 'bytes': expected an integer, got '8k'"):
        records.read_csv(bad, source="t.csv")
    with pytest.raises(InputError, match=r"t.csv:2: field 'phase'"):
        records.read_csv(text.replace(",forward,", ",fwd,"), source="t.csv")


def _hand_trace(drop: int | None = None, grow: int | None = None) -> Trace:
    """What megatron-core issues for a 1-layer GPT at TP 2 without SP (GROUND_TRUTH.md's
    measured table), as one rank's records; optionally one record dropped or enlarged."""
    setup = scale.scaled_setup(point("gpt-7b", 2, False))
    setup = dataclasses.replace(setup, model=dataclasses.replace(setup.model, num_layers=1))
    e = setup.micro_batch * setup.seq_length * setup.model.hidden_size
    ce = setup.micro_batch * setup.seq_length
    calls = [
        ("all_reduce", "forward", "embedding.word_embeddings", None, e, False),
        ("all_reduce", "forward", "decoder.layers.0.self_attention.linear_proj", 0, e, False),
        ("all_reduce", "forward", "decoder.layers.0.mlp.linear_fc2", 0, e, False),
        *[("all_reduce", "forward", "tensor_parallel.cross_entropy._VocabParallelCrossEntropy.forward", None, ce, False)] * 3,
        ("all_reduce", "backward", "output_layer", None, e, True),
        ("all_reduce", "backward", "decoder.layers.0.mlp.linear_fc1", 0, e, True),
        ("all_reduce", "backward", "decoder.layers.0.self_attention.linear_qkv", 0, e, True),
        # A group of one moves nothing: left out of the comparison.
        ("reduce_scatter_tensor", "after_backward",
         "distributed.param_and_grad_buffer._ParamAndGradBucketGroup.start_grad_sync", None, 99, False),
    ]
    recs = []
    for i, (op, phase, module, layer, elements, is_async) in enumerate(calls):
        if i == drop:
            continue
        if i == grow:
            elements *= 2
        size = 1 if op == "reduce_scatter_tensor" else 2
        recs.append(TraceRecord(op, records.collective_of(op), "TP" if size == 2 else "DP", size, elements,
                                4 * elements, phase, module, layer, async_op=is_async))
    return Trace(setup=setup, records=recs, ranks=[RankInfo(rank=0, stage=0, parameters=0, buffer_padding=0)])


def test_comparison_maps_phases_modules_and_sizes():
    rows = compare.compare(_hand_trace())
    assert compare.differences(rows) == []
    by_module = {(r.phase, r.module): r for r in rows}
    ce = by_module[("forward", "loss.vocab_parallel_cross_entropy")]
    assert (ce.schedule_count, ce.trace_count, ce.elements, ce.schedule_bytes) == (3, 3, 32, 128)  # fp32 both sides
    emb = by_module[("forward", "embedding")]
    # The schedule writes bf16 activations (2 bytes per element), the trace ran fp32.
    assert (emb.elements, emb.schedule_bytes, emb.trace_bytes) == (2048, 4096, 8192)
    assert by_module[("backward", "output_layer")].note == "asynchronous in megatron"


def test_comparison_reports_a_missing_and_a_resized_collective():
    missing = compare.differences(compare.compare(_hand_trace(drop=7)))
    assert [(r.status, r.module, r.schedule_count, r.trace_count) for r in missing] == [
        ("only in schedule", "decoder.layers.0.mlp.linear_fc1", 1, 0)]
    resized = compare.differences(compare.compare(_hand_trace(grow=1)))
    assert sorted((r.status, r.elements) for r in resized) == [("only in schedule", 2048), ("only in trace", 4096)]


def test_the_sweep_check_names_every_difference():
    table = compare.check_table({
        "gpt_tp2_pp1_sp0": compare.to_csv(compare.compare(_hand_trace())),
        "gpt_tp2_pp1_sp1": compare.to_csv(compare.compare(_hand_trace(drop=7))),
    })
    rows = list(csv.DictReader(io.StringIO(table)))
    assert [r["trace"] for r in rows] == ["gpt_tp2_pp1_sp0", "gpt_tp2_pp1_sp1"]
    assert rows[0]["differing"] == "0" and rows[0]["matching"] == rows[0]["rows"]
    assert rows[0]["verdict"] == "the megatron schedule issues exactly what megatron-core issues"
    assert rows[1]["differing"] == "1"
    assert "only in schedule: stage 0 backward decoder.layers.0.mlp.linear_fc1 (layer 0) allreduce TP" in rows[1]["verdict"]


# -- with megatron-core --------------------------------------------------------------------

CASES = {
    "gpt_tp2_sp0": point("gpt-7b", 2, False),
    "gpt_tp2_sp1": point("gpt-7b", 2, True),
    "gpt_tp4_sp1": point("gpt-7b", 4, True),
    "gpt_tp2_sp1_dp2": point("gpt-7b", 2, True),
    "llama-gqa_tp2_pp2_sp1": point("llama-70b", 2, True, pp=2),
}


@pytest.fixture(scope="module")
def traces() -> dict[str, Trace]:
    """Every case traced in two launches (2 and 4 processes): imports dominate a trace."""
    setups = {name: scale.scaled_setup(s, dp=2 if name.endswith("_dp2") else 1) for name, s in CASES.items()}
    return dict(zip(setups, runner.run(list(setups.values()), timeout=900)))


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
def test_megatron_schedule_matches_the_trace(traces, case):
    trace = traces[case]
    assert compare.rank_differences(trace) == []
    rows = compare.compare(trace)
    assert compare.differences(rows) == [], compare.summary(rows)
    kinds = {(r.phase, r.collective, r.group) for r in rows}
    assert ("forward", "allreduce", "TP") in kinds  # cross entropy at least
    if trace.setup.sp:
        assert {("backward", "allgather", "TP"), ("after_backward", "allreduce", "TP")} <= kinds
    if trace.setup.dp > 1:
        assert {("after_backward", "reducescatter", "DP"), ("after_backward", "allgather", "DP")} <= kinds
    if trace.setup.pp > 1:
        assert {("forward", "sendrecv", "PP"), ("backward", "sendrecv", "PP")} <= kinds
    # Per layer: every transformer layer of every stage issues the same collectives.
    per_layer: dict[int, list] = {}
    for r in rows:
        if r.layer is not None:
            per_layer.setdefault(r.layer, []).append((r.phase, r.module.split(".", 3)[-1], r.collective, r.trace_count))
    assert len(per_layer) == trace.setup.model.num_layers
    assert len({tuple(sorted(v)) for v in per_layer.values()}) == 1


@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
def test_backward_collectives_are_attributed_to_the_linear_that_issued_them(traces):
    trace = traces["gpt_tp2_sp1"]
    backward = [r for r in trace.rank_records(0) if r.phase == "backward" and r.layer is not None]
    # SP: linear_qkv and linear_fc1 re-gather their input for the weight gradient and
    # reduce-scatter the input gradient; linear_proj and linear_fc2 gather the output gradient.
    by_module = {}
    for r in backward:
        by_module.setdefault(r.module.rsplit(".", 1)[-1], []).append(r.op)
    assert by_module == {
        "linear_qkv": ["all_gather_into_tensor", "reduce_scatter_tensor"] * 2,
        "linear_fc1": ["all_gather_into_tensor", "reduce_scatter_tensor"] * 2,
        "linear_proj": ["all_gather_into_tensor"] * 2,
        "linear_fc2": ["all_gather_into_tensor"] * 2,
    }


@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
def test_trace_command_writes_the_csv_and_the_comparison(tmp_path):
    out, cmp = tmp_path / "trace.csv", tmp_path / "compare.csv"
    result = subprocess.run(
        [sys.executable, "-m", "commsweep", "trace", "--tensor_model_parallel_size", "2", "--enable_sequence_parallel",
         "--num_layers", "2", "--hidden_size", "64", "--num_attention_heads", "4", "--seq_length", "16",
         "--micro_batch", "2", "--global_batch", "2", "--vocab_size", "128", "--max_position_embeddings", "16",
         "--format", "csv", "-o", str(out), "--compare", str(cmp)],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr
    recs = records.read_csv(out.read_text(), source=str(out))
    counts: dict = {}
    for r in recs:
        counts[(r.phase, r.op)] = counts.get((r.phase, r.op), 0) + 1
    # GROUND_TRUTH.md's measured two-layer GPT, SP on, learned positions (plus the DP
    # collectives megatron issues on its group of one).
    assert counts == {
        ("forward", "all_reduce"): 1 + 3, ("forward", "all_gather_into_tensor"): 5,
        ("forward", "reduce_scatter_tensor"): 4, ("backward", "all_gather_into_tensor"): 10,
        ("backward", "reduce_scatter_tensor"): 5, ("after_backward", "all_reduce"): 1,
        ("after_backward", "reduce_scatter_tensor"): 1, ("after_backward", "all_gather_into_tensor"): 1,
    }
    assert cmp.read_text().splitlines()[0] == ",".join(compare.COLUMNS)
    assert "match: " in result.stderr and "only in" not in result.stderr


def test_one_trace_per_family_tp_pp_and_sp_of_a_sweep():
    setups = [point(m, tp, sp) for m in ("gpt-7b", "gpt-13b", "llama-70b", "mixtral-8x7b")
              for tp in (1, 2) for sp in (False, True)]
    traces = scale.trace_setups(setups)
    # Mixtral at TP 2 without SP is left out: megatron refuses MoE there.
    assert sorted(traces) == ["gpt_tp1_pp1_sp0", "gpt_tp2_pp1_sp0", "gpt_tp2_pp1_sp1",
                              "llama-gqa-moe-k2-aux_tp1_pp1_sp0_ep1", "llama-gqa-moe-k2-aux_tp2_pp1_sp1_ep1",
                              "llama-gqa_tp1_pp1_sp0", "llama-gqa_tp2_pp1_sp0", "llama-gqa_tp2_pp1_sp1"]
    assert [scale.pipeline_dp(traces[k]) for k in ("gpt_tp1_pp1_sp0", "gpt_tp2_pp1_sp1")] == [2, 2]
    assert scale.pipeline_dp(point("gpt-7b", 4, True)) == 1


def test_measured_reference_plans_one_trace_job_per_key(tmp_path):
    from test_workflow import snakemake

    import sweeps

    cfg = sweeps.write_config(tmp_path, "measured")
    result = snakemake(tmp_path, "--configfile", str(cfg), "--dry-run")
    planned = {line.split()[1].strip(",") for line in result.stdout.splitlines() if line.strip().startswith("output: results/traces/")}
    assert planned == {f"results/traces/{k}.csv" for k in ("gpt_tp1_pp1_sp0", "gpt_tp2_pp1_sp0", "gpt_tp2_pp1_sp1")}
    assert "rule trace_check:" in result.stdout  # the sweep's verdict on the schedule
    cfg.write_text(cfg.read_text().replace("reference: measured\n", ""))
    assert "rule trace" not in snakemake(tmp_path, "--configfile", str(cfg), "--dry-run").stdout
