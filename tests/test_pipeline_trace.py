"""Interleaved and uneven pipelines traced on real megatron-core (gloo CPU processes): the
schedule's rows match the trace's, and each rank's sends come in the order of
megatron's interleaved 1F1B as ``simulate/pipeline_schedule.py`` lays it out."""

from __future__ import annotations

import pytest

from commsweep.setup.models import PRESETS
from commsweep.setup.training import TrainingSetup
from commsweep.simulate.pipeline_schedule import rank_order
from commsweep.trace import compare, runner, scale

MISSING = runner.missing_dependencies()

GPT = PRESETS["gpt-7b"]
CASES = {
    "interleaved": TrainingSetup(model=GPT, world_size=4, pp=4, virtual_pipeline=2, global_batch=8),
    "uneven": TrainingSetup(model=GPT, world_size=4, pp=4, global_batch=8, stage_layout=(7, 9, 9, 7)),
}


def test_scaled_pipelines_keep_their_chunks_and_their_pattern():
    interleaved, uneven = (scale.scaled_setup(s) for s in CASES.values())
    assert (interleaved.virtual_pipeline, interleaved.model.num_layers, interleaved.num_microbatches) == (2, 8, 4)
    assert not interleaved.problems() and not uneven.problems()
    assert uneven.stage_layout == (1, 2, 2, 1) and uneven.model.num_layers == 6
    assert scale.trace_key(interleaved) == "gpt_tp1_pp4_sp0_vpp2"
    assert scale.trace_key(uneven) == "gpt_tp1_pp4_sp0_pl1-2-2-1"


@pytest.fixture(scope="module")
def traces():
    setups = {name: scale.scaled_setup(s) for name, s in CASES.items()}
    return dict(zip(setups, runner.run(list(setups.values()), timeout=900)))


@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
@pytest.mark.parametrize("case", list(CASES))
def test_the_schedule_matches_megatron_core_row_by_row(traces, case):
    trace = traces[case]
    assert compare.rank_differences(trace) == []
    rows = compare.compare(trace)
    assert compare.differences(rows) == [], compare.summary(rows)
    sends = {(r.stage, r.phase): r.trace_count for r in rows if r.collective == "sendrecv"}
    p, v, g = trace.setup.pp, trace.setup.virtual_pipeline, trace.setup.num_microbatches
    # Each chunk hands on once per micro-batch, but the last virtual stage's forward and the first's backward.
    assert sends[(0, "forward")] == sends[(p - 1, "backward")] == v * g
    assert sends.get((0, "backward"), 0) == sends.get((p - 1, "forward"), 0) == (v - 1) * g


@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
def test_each_ranks_sends_follow_megatrons_interleaved_order(traces):
    trace = traces["interleaved"]
    p, v, g = trace.setup.pp, trace.setup.virtual_pipeline, trace.setup.num_microbatches
    for rank in range(p):
        traced = [r.phase for r in trace.rank_records(rank) if r.collective == "send"]
        passes = rank_order(p, v, g, rank)
        expected = ["backward" if op.backward else "forward" for op in passes
                    if (op.chunk * p + rank) != (0 if op.backward else p * v - 1)]
        assert traced == expected
