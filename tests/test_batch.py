"""Batches of points (commsweep.orchestration.batch): what the per-stage commands write, byte for byte;
only what changed rerun; a batch killed mid-task resumed, the task in a process of its own;
a failed task recorded, the others kept, and retried.

The tasks write under results/ relative to the working folder, as in the pipeline: each test
runs in its own temporary folder (monkeypatch.chdir).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import sweeps
from conftest import KILLER, STAND_IN_AICB
from commsweep.base import status
from commsweep.base.paths import Layout
from commsweep.base.status import CONFIG_DIGEST_ENV
from commsweep.orchestration import batch, provenance, sweep


def planned(config: dict) -> dict[str, batch.Batch]:
    """The batches of a sweep config as the workflow plans them (common.smk)."""
    points, _ = sweep.points_from_config(config)
    run = provenance.Run(config=config, inputs=provenance.check_external(config, points))
    return batch.plan(points, config, Layout(), run)


def config_of(name: str = "batches", **changes) -> dict:
    """A test sweep's config (commsweep's reader, defaults filled in), with ``changes``."""
    config = sweep.load_config(sweeps.path(name))
    for key, value in changes.items():
        config[key] = value if not isinstance(value, dict) else {**config.get(key, {}), **value}
    return config


def run_all(batches: dict[str, batch.Batch], attempt: int = 1) -> dict[str, batch.Outcome]:
    return {name: batch.run(b, attempt, Layout().batch_manifest(name), running_dir=".running")
            for name, b in sorted(batches.items())}


def files_under(folder: Path, *, skip: tuple[str, ...] = ("batches",)) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.relative_to(folder).parts[0] not in skip}


def ran(outcomes: dict[str, batch.Outcome]) -> list[tuple[str, str]]:
    return sorted((t.rule, t.key) for o in outcomes.values() for t in o.ran)


# -- the plan ---------------------------------------------------------------------------------


def test_points_that_share_work_share_a_batch_and_adding_one_moves_no_other():
    config = config_of()
    batches = planned(config)
    points, _ = sweep.points_from_config(config)
    of = batch.batch_of_points(batches)
    assert sorted(of) == sorted(p.point_key for p in points)
    # A workload's networks, and an AIOB profile's workloads, fall in one batch.
    for p in points:
        for q in points:
            if p.workload_key == q.workload_key or (p.aiob and q.aiob and p.profile_key == q.profile_key):
                assert of[p.point_key] == of[q.point_key]
    # Each profile and workload is made once, before the tasks that read it.
    for b in batches.values():
        made: set[str] = set()
        for task in b.tasks:
            assert set(task.after) <= made
            made.add(task.status)
    tasks = [t for b in batches.values() for t in b.tasks]
    assert len(tasks) == len({t.status for t in tasks}) == 1 + 4 * 2 + 8 * 2

    # One more model: every point already there keeps its batch (8 batches either way).
    more = planned(config_of(sweep={**config["sweep"], "model": ["gpt-7b", "llama-7b"]}))
    assert len(batch.batch_of_points(more)) == 16
    assert {p: b for p, b in batch.batch_of_points(more).items() if p in of} == of


def test_the_number_of_batches_is_a_power_of_two_of_about_the_points_asked_for():
    assert [batch.batch_count(n, 64) for n in (1, 64, 512, 513, 1024, 10_000)] == [8, 8, 8, 16, 16, 256]
    assert batch.batch_count(1024, 16) == 64
    config = config_of(batch={"points": 1})
    assert {name.split("-of-")[1] for name in planned(config)} == {"8"}


def test_a_task_is_the_per_stage_command_and_its_digest_follows_what_it_reads():
    batches = planned(config_of())
    tasks = {(t.rule, t.key): t for b in batches.values() for t in b.tasks}
    point = "gpt-7b_ws16_tp2_pp1_ep1_sp0_mb1_gb16_seq2048_aicb_aiob__netB"
    simulate = tasks[("simulate", point)]
    assert simulate.command[:5] == ("simulate", "-w", f"results/workloads/{point.split('__')[0]}/workload.txt",
                                    "-g", "16")
    assert simulate.outputs == (f"results/points/{point}/EndToEnd.csv", f"results/points/{point}/collectives.csv",
                                f"results/points/{point}/times.csv")
    assert simulate.guard_argv(3)[:2] == ["guard", "--status"] and "--job" in simulate.guard_argv(3)
    generate = tasks[("generate", point.split("__")[0])]
    assert simulate.after == (generate.status,)
    # Another network: another simulation, the same workload. Another generator root: another workload.
    other = planned(config_of(networks={"netB": {"gpus_per_server": 8, "nics_per_server": 4, "nvlink_gbps": 200,
                                                 "nic_gbps": 50}}))
    again = {(t.rule, t.key): t for b in other.values() for t in b.tasks}
    assert again[("generate", generate.key)].digest == generate.digest
    assert again[("simulate", point)].digest != simulate.digest
    profile = next(t for t in tasks.values() if t.rule == "profile_roofline")
    retuned = planned(config_of(aiob={"gpu": "A100-80GB"}))
    moved = {t.rule: t for b in retuned.values() for t in b.tasks if t.key.startswith(point.split("__")[0])}
    # The profile's key names the GPU: a new profile, and the workloads on it change with it.
    assert all(t.key != profile.key for b in retuned.values() for t in b.tasks if t.rule == "profile_roofline")
    assert moved["generate"].digest != generate.digest


# -- running batches --------------------------------------------------------------------------


@pytest.mark.slow
def test_a_batch_writes_what_the_per_stage_commands_write(tmp_path, monkeypatch):
    """Every output and status, byte for byte, as `commsweep guard -- COMMAND` writes it in a
    process per task (what the pipeline ran before batches)."""
    config = config_of()
    batches = planned(config)
    env = {**sweeps.env(), CONFIG_DIGEST_ENV: "sha256:test"}
    monkeypatch.setenv(CONFIG_DIGEST_ENV, "sha256:test")
    (tmp_path / "batched").mkdir()
    monkeypatch.chdir(tmp_path / "batched")
    outcomes = run_all(batches)
    assert not [t for o in outcomes.values() for t in o.failed]
    (tmp_path / "per-stage").mkdir()
    for b in batches.values():
        for task in b.tasks:
            subprocess.run([sys.executable, "-m", "commsweep", *task.guard_argv(1)], cwd=tmp_path / "per-stage",
                           env=env, check=True, capture_output=True)
    batched, per_stage = files_under(tmp_path / "batched" / "results"), files_under(tmp_path / "per-stage" / "results")
    assert len(batched) == 3 + 4 * 4 + 8 * 6
    assert sweeps.differences(batched, per_stage) == []


def test_the_batches_causes_put_together_are_the_sweeps(tmp_path, monkeypatch):
    """Each batch works out the difference by cause of its AICB points; put together in the
    sweep's order, they are what `commsweep causes` works out from every point's files."""
    from commsweep.analysis import causes
    from commsweep.base.paths import PointFiles

    monkeypatch.chdir(tmp_path)
    config = config_of(sweep={**config_of()["sweep"], "tp": [2, 4], "sp": [False, True]})
    points, invalid = sweep.points_from_config(config)
    batches = planned(config)
    run_all(batches)
    Path("results/sweep.csv").write_text(sweep.table_csv(points, invalid))
    parts = [path for b in batches.values() for path in b.files["causes"]]
    assert len(parts) == len(batches) > 1
    whole = causes.difference_by_cause(Path("results/sweep.csv"), PointFiles.under("results"))
    assert len(whole.splitlines()) > 100
    assert causes.assemble(Path("results/sweep.csv"), parts) == whole
    # A batch's part that failed is an error of the step, naming it.
    Path(parts[0]).write_text("commsweep: no result: difference_by_cause: boom\n")
    with pytest.raises(Exception, match=f"{parts[0]}:1: commsweep: no result: difference_by_cause: boom"):
        causes.assemble(Path("results/sweep.csv"), parts)


def test_the_release_reaches_the_megatron_generation_and_the_audit(tmp_path, monkeypatch):
    """generator.megatron_version reaches the batches' commands as it reached the per-point
    rules (--megatron-version: megatron schedule's generation, every audit), and a batch that
    audits the same workload under two releases one after the other (its cached reference)
    writes what a process per task writes."""
    config = sweep.load_config(sweeps.path("moe"))
    config["sweep"]["tp"] = [2]
    old = {**config, "generator": {**config["generator"], "megatron_version": "0.8.0"}}
    tasks = {(t.rule, t.key.split("__")[0].rsplit("_", 1)[-1]): t for b in planned(old).values() for t in b.tasks}
    generate, audit_aicb = tasks[("generate", "megatron")], tasks[("audit", "aicb")]
    assert generate.command[-4:-2] == ("--megatron-version", "0.8.0")
    assert "--megatron-version" not in tasks[("generate", "aicb")].command
    assert audit_aicb.command[audit_aicb.command.index("--megatron-version") + 1] == "0.8.0"
    newest = {(t.rule, t.key): t for b in planned(config).values() for t in b.tasks}
    assert newest[("generate", generate.key)].digest != generate.digest  # a new release reruns it
    assert newest[("generate", tasks[("generate", "aicb")].key)].digest == tasks[("generate", "aicb")].digest

    env = {**sweeps.env(), CONFIG_DIGEST_ENV: "sha256:test"}
    monkeypatch.setenv(CONFIG_DIGEST_ENV, "sha256:test")
    for folder in ("batched", "per-stage"):
        (tmp_path / folder).mkdir()
    monkeypatch.chdir(tmp_path / "batched")
    run_all(planned(config))
    assert not [t for o in run_all(planned(old)).values() for t in o.failed]
    for b in planned(old).values():
        for task in b.tasks:
            subprocess.run([sys.executable, "-m", "commsweep", *task.guard_argv(1)], cwd=tmp_path / "per-stage",
                           env=env, check=True, capture_output=True)
    batched, per_stage = files_under(tmp_path / "batched" / "results"), files_under(tmp_path / "per-stage" / "results")
    assert sweeps.differences(batched, per_stage) == []
    # Audited against 0.8.0, the 0.8.0 megatron workload is clean; AICB's misses 0.8's TP routing.
    audits = {key: text for key, text in batched.items() if key.endswith("audit.csv")}
    assert [len(text.splitlines()) for key, text in sorted(audits.items()) if "_megatron_" in key] == [1]
    assert any(b"moe_tp_dispatch" in text for key, text in audits.items() if "_aicb_" in key)


def test_only_the_tasks_whose_inputs_changed_run_again(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = config_of()
    first = run_all(planned(config))
    assert len(ran(first)) == 25
    # Nothing changed: every task is current.
    assert ran(run_all(planned(config))) == []
    # One network's NICs: its 4 points' simulations and audits, nothing else.
    faster = config_of(networks={"netB": {"gpus_per_server": 8, "nics_per_server": 4, "nvlink_gbps": 200,
                                          "nic_gbps": 50}})
    again = ran(run_all(planned(faster)))
    assert {rule for rule, _ in again} == {"simulate", "audit"} and len(again) == 8
    assert all(key.endswith("__netB") for _, key in again)
    # A file removed by hand: its batch's attempt grows (Snakemake reruns it), and only its task runs.
    batches = planned(faster)
    name, b = next((n, b) for n, b in batches.items() if any(t.rule == "volumes" for t in b.tasks))
    volumes = next(t for t in b.tasks if t.rule == "volumes")
    assert batch.attempt(b, Layout().batch_manifest(name)) == 1
    Path(volumes.outputs[0]).unlink()
    assert batch.pending(b) == [volumes]
    assert batch.attempt(b, Layout().batch_manifest(name)) == 2
    # Without a shared filesystem the points' files are not here to look at (the storage has
    # them; Snakemake reruns a batch whose declared file is missing there): only failures count.
    assert batch.attempt(b, Layout().batch_manifest(name), outputs_here=False) == 1
    outcome = batch.run(b, 2, Layout().batch_manifest(name), running_dir=".running")
    assert [t.key for t in outcome.ran] == [volumes.key] and outcome.skipped == len(b.tasks) - 1
    assert json.loads(Path(volumes.status).read_text())["attempt"] == 1  # a success stays attempt 1
    assert batch.attempt(b, Layout().batch_manifest(name)) == 2


def test_a_failed_task_is_recorded_the_others_kept_and_retried(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    huge = {"gpt-huge": {"base": "gpt-7b", "num_layers": 2, "hidden_size": 4294967296, "ffn_hidden_size": 4294967296}}
    config = config_of(models=huge, sweep={**config_of()["sweep"], "model": ["gpt-7b", "gpt-huge"], "aiob": [False]})
    batches = planned(config)
    outcomes = run_all(batches)
    failed = sorted((t.rule, t.key) for o in outcomes.values() for t in o.failed)
    # The huge model's 2 workloads fail to generate; their volumes, simulations and audits
    # are not run, and say so, naming the failed generation; every gpt-7b task is ok.
    assert len(failed) == 2 * 2 + 4 * 2 and all(key.startswith("gpt-huge") for _, key in failed)
    statuses = [json.loads(Path(t.status).read_text()) for b in batches.values() for t in b.tasks]
    assert sum(s["status"] == "ok" for s in statuses) == len(statuses) - len(failed)
    roots = {s["upstream"] or "" for s in statuses if s["status"] == "failed"} - {""}
    assert len(roots) == 2 and all(root.endswith("/workload.status") for root in roots)
    for s in statuses:
        if s["status"] == "failed" and s["stage"] != "generate":
            assert s["upstream"] in roots and s["error"].startswith(f"not run: {s['upstream']} failed: generate: ")
    for name, b in batches.items():
        record = batch.read_manifest(Layout().batch_manifest(name))
        holds_huge = any(p.startswith("gpt-huge") for p in b.points)
        assert bool(record["failed"]) == holds_huge
        assert batch.attempt(b, Layout().batch_manifest(name)) == (2 if holds_huge else 1)
        assert batch.attempt(b, Layout().batch_manifest(name), outputs_here=False) == (2 if holds_huge else 1)
    # The retry runs exactly the failed tasks, as their attempt 2.
    retried = {name: batch.run(b, 2, Layout().batch_manifest(name), running_dir=".running")
               for name, b in batches.items() if batch.attempt(b, Layout().batch_manifest(name)) == 2}
    assert ran(retried) == failed
    assert {json.loads(Path(t.status).read_text())["attempt"] for o in retried.values() for t in o.ran} == {2}




RUN_ONE_BATCH = """
import sys
from commsweep.base import status
from commsweep.base.paths import Layout
from commsweep.orchestration import batch, provenance, sweep
config = sweep.load_config(sys.argv[1])
points, _ = sweep.points_from_config(config)
run = provenance.Run(config=config, inputs=provenance.check_external(config, points))
plans = batch.plan(points, config, Layout(), run)
tasks = tuple(t for b in plans.values() for t in b.tasks)
files = {kind: tuple(f for b in plans.values() for f in b.files[kind]) for kind in batch.FILE_KINDS}
one = batch.Batch("all", tuple(p for b in plans.values() for p in b.points), tasks, files)
print(batch.run(one, 1, Layout().batch_manifest("all")).line("all"))
"""


def test_a_task_that_kills_its_batch_runs_in_its_own_process_then_is_recorded_failed(tmp_path):
    """A task that kills the batch's process is found on the next run and run in a process
    of its own; killed again, it is recorded as failed (the tasks that read its output as not
    run, naming it), and the batch goes on."""
    aicb = tmp_path / "aicb"
    (aicb / "workload_generator").mkdir(parents=True)
    (aicb / "workload_generator" / "SimAI_training_workload_generator.py").write_text(STAND_IN_AICB)
    config = tmp_path / "sweep.yaml"
    config.write_text(f"sweep:\n  model: [gpt-7b]\n  world_size: [16]\n  tp: [2]\n  global_batch: [16, {KILLER}]\n  schedule: [aicb]\n"
                      f"generator:\n  aicb_root: {aicb}\n")
    marker = tmp_path / batch.RUNNING / "all.running"

    def run_batch() -> subprocess.CompletedProcess:
        # TMPDIR: the working directory of the AICB run killed last stays until a next run.
        return subprocess.run([sys.executable, "-c", RUN_ONE_BATCH, str(config)], cwd=tmp_path,
                              env={**sweeps.env(), "TMPDIR": str(tmp_path)}, capture_output=True, text=True)

    runs = [run_batch()]  # killed: the marker names the task under way, which has no status
    assert runs[0].returncode == -signal.SIGKILL, runs[0].stderr[-2000:]
    under_way = marker.read_text().strip()
    assert under_way.endswith(f"gb{KILLER}_seq2048_aicb/workload.status") and not (tmp_path / under_way).exists()
    runs.append(run_batch())  # that task in its own process, killed again: recorded; the batch goes on
    assert runs[1].returncode == 0, runs[1].stderr[-2000:]
    assert not marker.exists()
    record = json.loads((tmp_path / Layout().batch_manifest("all")).read_text())
    statuses = {path: json.loads((tmp_path / path).read_text()) for path in record["files"]["status"]}
    big = sorted(path for path in statuses if f"gb{KILLER}_" in path)
    assert big and all(path in record["failed"] for path in big)
    # The workload's task was killed twice: in the batch's process, then in its own.
    (workload,) = [path for path in big if path.endswith("/workload.status")]
    assert workload == under_way
    assert f"{Path(workload).parent.name} (attempt 1, own process)" in runs[1].stderr
    killed = statuses[workload]
    assert killed["status"] == "failed" and killed["upstream"] is None
    assert killed["error"].startswith(f"{batch.KILLED} SIGKILL")
    # What reads its workload did not run: each says so, naming the task that was killed and why.
    for path in set(big) - {workload}:
        assert statuses[path]["upstream"] == workload, path
        assert statuses[path]["error"] == f"not run: {workload} failed: generate: {killed['error']}", path
    # The summary's reason for the big point is the root cause, once; the small point is whole.
    found = [(path, status.read(tmp_path / path)) for path in big]
    assert status.reasons(found) == f"generate: {killed['error']}"
    assert [st["status"] for path, st in statuses.items() if "gb16_" in path] == ["ok"] * len(big)
    # The retry runs the killed task in its own process again, and those not run in the batch's.
    runs.append(run_batch())
    assert runs[2].returncode == 0, runs[2].stderr[-2000:]
    retried = [line for line in runs[2].stderr.splitlines() if line.startswith("== ")]
    assert len(retried) == len(big) and all(f"gb{KILLER}_" in line for line in retried)
    assert [line for line in retried if "own process" in line] == [f"== generate {Path(workload).parent.name} "
                                                                   "(attempt 2, own process)"]
