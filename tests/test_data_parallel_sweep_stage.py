"""A sweep's point with uneven stages holds its fullest stage by default: its workload, its audit
and its timeline's command all name that stage; even stages and an explicit setting keep theirs."""

from __future__ import annotations

import pytest

from commsweep.orchestration import sweep
from commsweep.orchestration.batch import point_argv
from commsweep.workload import megatron
from commsweep.workload.generate import pipeline_stage
from test_pipeline_sweep import llama


def _jobs(config: dict) -> dict:
    from commsweep.analysis.stage import AUDIT
    from commsweep.workload.stage import GENERATE

    out = {}
    for p in sweep.expand(config)[0]:
        if p.schedule == "megatron":
            generate = GENERATE.job(p, config, (None,), ("w",))
            audit = AUDIT.job(p, config, ("w",), ("a",))
            timeline = point_argv(p, config)
            out[p.setup.stage_layout] = (p.setup, generate.pp_stage, audit.pp_stage,
                                         timeline[timeline.index("--pp-stage") + 1])
    return out


def test_uneven_stages_hold_the_fullest_stage_by_default():
    jobs = _jobs(llama(pipeline_layout=[None, "Et*7|t*9|t*9|t*7L"]))
    setup, *stages = jobs[(7, 9, 9, 7)]
    assert stages == ["fullest"] * 3 and pipeline_stage("fullest", setup) == 1
    # the workload holds the second stage's nine layers
    assert len(megatron.stage_layers(setup, pipeline_stage(stages[0], setup))) == 9
    even, *stages = jobs[None]
    assert stages == ["first"] * 3


@pytest.mark.parametrize("setting", ["last", "fullest"])
def test_a_configured_stage_other_than_first_is_kept(setting):
    config = llama(pipeline_layout=[None, "Et*7|t*9|t*9|t*7L"])
    config["generator"] = {**config.get("generator", {}), "megatron_pp_stage": setting}
    for _, *stages in _jobs(config).values():
        assert stages == [setting] * 3
