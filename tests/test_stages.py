"""The stages (``base.stage.Stage``) and the stage table (``orchestration.stages``).

A batch runs each task in-process on its typed job; the same task run as its command (a
process of its own, or by hand) parses its command line. Both must do the same work, so every
task a sweep plans must parse back to the job it was planned with; and the setup a stage runs
(``as_commanded``) must be the one its command line gives back. Adding a stage is its own
class and one line of the table: the batch planner and provenance reach the stages only
through the table.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from commsweep.base.paths import Layout
from commsweep.base.stage import LEVELS, Stage
from commsweep.orchestration import batch, provenance, stages, sweep
from commsweep.setup import models
from commsweep.setup.arguments import as_commanded, setup_from_args, to_commsweep_argv
from commsweep.setup.network import Network

ROOT = Path(__file__).resolve().parent.parent
# Every sweep of the project but those meant to fail their check (tests/sweeps/bad-*.yaml).
SWEEPS = [*sorted((ROOT / "config").glob("*.yaml")),
          *sorted(p for p in (ROOT / "tests" / "sweeps").glob("*.yaml") if not p.name.startswith("bad-"))]


def plannable(path: Path, folder: Path):
    """A sweep's config, points and external inputs, planned from ``folder``, with stand-ins
    there for the files of the user's it reads (AIOB files, SimAI_simulator, ASTRA-sim: planning checksums
    them, it does not run them); None for a sweep needing the reference's ratio tables."""
    import os

    from commsweep.aiob.backends import user_file
    from commsweep.base.errors import ConfigError

    simulator = folder / "simai" / "bin" / "SimAI_simulator"
    simulator.parent.mkdir(parents=True, exist_ok=True)
    simulator.write_text("#!/bin/sh\nexit 1  # a stand-in: planned, never run\n")
    simulator.chmod(0o755)
    os.environ["SIMAI_ROOT"] = str(simulator.parent.parent)  # the ns3 sweep's simulator.ns3.root
    astra = folder / "AstraSim_Analytical_Congestion_Unaware"
    astra.write_text("#!/bin/sh\nexit 1  # a stand-in: planned, never run\n")
    astra.chmod(0o755)
    config = sweep.load_config(str(path))
    if config["simulator"]["astra"]["root"]:  # config/astra-sim.yaml's, $ASTRA_SIM_ROOT
        config["simulator"]["astra"]["root"] = str(astra)
    points, _ = sweep.points_from_config(config)
    if config["aiob"]["backend"] == "file":
        for p in points:
            stand_in = folder / user_file(config["aiob"]["file"], p.profile_key)
            stand_in.parent.mkdir(parents=True, exist_ok=True)
            stand_in.write_text(p.profile_key)
    try:
        inputs = provenance.check_external(config, points)
    except ConfigError as err:
        assert "$REFERENCE" in str(err), err  # the reference's ratio tables (tests/sweeps/networks.yaml)
        return None
    return config, points, inputs


def normal(job):
    """A job as its stage runs it: the setup and the network as its command line stands for them
    (the job of a point keeps the point's, which its stage's ``run`` takes as commanded)."""
    from commsweep.simulate.stage import as_commanded as network_as_commanded

    changes = {}
    if hasattr(job, "setup"):
        changes["setup"] = as_commanded(job.setup)
    if isinstance(getattr(job, "network", None), Network):
        changes["network"] = network_as_commanded(job.network)
    return dataclasses.replace(job, **changes)


def test_the_table_lists_each_stage_under_its_name_after_those_it_reads():
    assert list(stages.STAGES) == ["profile", "generate", "volumes", "simulate", "packet", "audit"]
    order = list(stages.STAGES)
    for name, stage in stages.STAGES.items():
        assert isinstance(stage, Stage) and stage.name == name, name
        assert stage.per in LEVELS, name
        assert stage.outputs and all(hasattr(Layout(), f) for f in stage.inputs + stage.outputs), name
        assert len(stage.kinds) == len(stage.outputs) and set(stage.kinds) <= {None, *batch.FILE_KINDS}, name
        assert all(order.index(up) < order.index(name) for up in stage.upstream), name
        # Its command is in the table: its own parser, or that of the stage whose command it shares.
        assert stage.command in stages.STAGE_COMMANDS and stage.job_type.command == stage.command, name


def test_a_new_stage_is_a_class_and_a_line_in_the_table(tmp_path, monkeypatch):
    """A stage added to the table alone (here: each workload's volumes as JSON too) is planned,
    run in-process by the batches and checked by provenance, with no other change."""
    from commsweep.analysis import volumes
    from commsweep.analysis.stage import VolumesJob, VolumesStage
    from commsweep.workload import format as wformat

    asked = []

    class JsonVolumes(VolumesStage):
        name = "volumes_json"
        summary = "a workload's volumes as JSON"
        kinds = (None,)

        def check_external(self, config, points):
            asked.append(len(list(points)))
            return {}

        def job(self, point, config, inputs, outputs):
            return VolumesJob(workload=inputs[0], output=outputs[0], format="json")

        def files(self, layout, key, config):
            return (layout.volumes(key).removesuffix(".csv") + ".json",)

        def status(self, layout, key, config):
            return layout.workload_status("volumes_json", key)

    monkeypatch.setitem(stages.STAGES, "volumes_json", JsonVolumes())
    monkeypatch.chdir(tmp_path)
    config = sweep.load_config(str(ROOT / "tests" / "sweeps" / "two-points.yaml"))
    points, _ = sweep.points_from_config(config)
    run = provenance.Run(config=config, inputs=provenance.check_external(config, points))
    assert asked == [len(points)]
    plans = batch.plan(points, config, Layout(), run)
    added = [t for b in plans.values() for t in b.tasks if t.stage == "volumes_json"]
    assert sorted(t.key for t in added) == sorted({p.workload_key for p in points})
    assert "volumes_json" in batch.describe_pending(plans)
    for name, b in plans.items():
        outcome = batch.run(b, 1, Layout().batch_manifest(name), running_dir=".running")
        assert not outcome.failed, [t.status for t in outcome.failed]
    for task in added:
        [generate] = [t for b in plans.values() for t in b.tasks if t.status in task.after]
        assert generate.stage == "generate"
        written = Path(task.outputs[0]).read_text(encoding="utf-8")
        assert written == volumes.to_json(volumes.tally(wformat.read(generate.outputs[0])))


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_every_planned_task_parses_back_to_its_job(path, tmp_path, monkeypatch):
    """The command a task's stage writes is the command of its job: parsing it gives the job
    back, so the task does the same work in-process and as a command."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SIMAI_ROOT", "")
    planned = plannable(path, tmp_path)
    if planned is None:
        pytest.skip(f"{path.name} needs the reference's ratio tables ($REFERENCE)")
    config, points, inputs = planned
    run = provenance.Run(config=config, inputs=inputs)
    parsers = {}
    tasks = [t for b in batch.plan(points, config, Layout(), run).values() for t in b.tasks]
    assert tasks and all(t.job is not None for t in tasks)
    if path.name == "ns3.yaml":
        assert any(t.stage == "packet" for t in tasks)
    for task in tasks:
        stage = stages.STAGES[task.stage]
        assert tuple(stage.argv(task.job)) == task.command
        if task.command[0] not in parsers:
            parsers[task.command[0]] = stages.build_parser(task.command[0])
        back = stage.from_args(parsers[task.command[0]].parse_args(list(task.command)))
        assert normal(back) == normal(task.job), task.command


def test_a_stage_runs_the_setup_its_command_line_gives_back(tmp_path, monkeypatch):
    """``as_commanded`` is what parsing ``to_commsweep_argv`` gives, for every preset (and its
    profile's setup) and every point of the sweeps."""
    from commsweep.aiob.backends import profile_setup

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SIMAI_ROOT", "")
    parser = stages.build_parser("generate")
    setups = []
    for path in SWEEPS:
        planned = plannable(path, tmp_path)
        if planned is not None:
            setups += [s for p in planned[1] for s in (p.setup, profile_setup(p.setup))]
    from commsweep.setup.training import TrainingSetup

    for model in models.presets().values():
        try:
            setups.append(TrainingSetup(model=model, world_size=64, tp=2, pp=2, ep=1))
        except Exception:  # noqa: BLE001 - a preset these sizes do not fit
            continue
    assert len(setups) > 100
    for setup in setups:
        back = setup_from_args(parser.parse_args(["generate", *to_commsweep_argv(setup)]))
        assert back == as_commanded(setup), setup.model.name
        assert as_commanded(back) == back  # a parsed setup is as its command line gives it


def imported(path: Path) -> set[str]:
    """The commsweep modules a file imports (absolute names)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ".".join(["commsweep", "orchestration"][: 3 - node.level] + ([node.module] if node.module else []))
            found.add(base)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("module", ["batch.py", "provenance.py"])
def test_the_batch_runner_and_provenance_reach_the_stages_only_through_the_table(module):
    """Adding a stage touches its own module and the stage table only: the planner, the
    runner and provenance import no stage's contract module but the table's."""
    contracts = {type(stage).__module__ for stage in stages.STAGES.values()}
    found = imported(ROOT / "src" / "commsweep" / "orchestration" / module)
    assert not found & contracts, f"{module} imports {sorted(found & contracts)}: go through orchestration.stages"
    stage_internals = {"commsweep.workload.aicb_runner", "commsweep.simulate.simai", "commsweep.aiob.backends",
                       "commsweep.simulate.ns3.runner", "commsweep.simulate.ratio", "commsweep.simulate.run"}
    assert not found & stage_internals, f"{module} imports stage internals {sorted(found & stage_internals)}"
