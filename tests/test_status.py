"""Per-point status files: `commsweep guard`, the summary's failed rows and `commsweep check`."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

import sweeps
from commsweep.analysis import summary
from commsweep.base import paths, status
from commsweep.base.errors import InputError
from commsweep.setup.points import read_points
from commsweep.workload import format as wf

GENERATE = ["generate", "--schedule", "megatron", "--model", "gpt-7b", "--world_size=16",
            "--tensor_model_parallel_size=2", "--global_batch=16"]


def commsweep(*args, check=True):
    return subprocess.run([sys.executable, "-m", "commsweep", *args], capture_output=True, text=True, check=check)


def test_guard_records_success_and_the_outputs(tmp_path):
    out, st = tmp_path / "w.txt", tmp_path / "workload.status"
    result = commsweep("guard", "--status", str(st), "--outputs", str(out), str(st), "--", *GENERATE, "-o", str(out))
    assert result.returncode == 0
    assert status.read(st) == status.Status(ok=True, stage="generate", outputs=(str(out),))
    assert wf.read(out).header.tp == 2


def test_guard_records_a_failure_leaves_markers_and_exits_zero(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("train_iter:10\nEmb:\n    time_gpu_max: 1\n")
    out, st = tmp_path / "w.txt", tmp_path / "workload.status"
    result = commsweep(
        "guard", "--status", str(st), "--outputs", str(out), "--attempt", "3", "--",
        *GENERATE, "--aiob_enable", f"--comp_filepath={bad}", "-o", str(out),
    )
    assert result.returncode == 0
    recorded = status.read(st)
    assert not recorded.ok and recorded.stage == "generate" and recorded.attempt == 3
    assert recorded.error == f"{bad}:2: field 'time_gpu_min': section 'Emb' lacks time_gpu_min, time_gpu_avg"
    # The error is in the log (stderr), and the output is a marker no reader accepts.
    assert recorded.error in result.stderr
    assert status.is_marker(out)
    with pytest.raises(InputError, match="expected the mode"):
        wf.read(out)


def test_guard_after_a_failed_job_does_not_run_and_keeps_the_root_cause(tmp_path):
    upstream = tmp_path / "workload.status"
    status.write(upstream, status.Status(ok=False, stage="generate", error="m.yaml: models.x: boom"))
    ran = []
    out = tmp_path / "volumes.csv"
    st = status.guard("volumes", lambda: ran.append(1), status_path=tmp_path / "volumes.status",
                      outputs=[out], after=[upstream])
    assert ran == []
    # Recorded as not run, naming the task that failed, not as a failure of its own.
    assert (st.ok, st.stage, st.upstream, st.ran) == (False, "volumes", str(upstream), False)
    assert st.error == f"not run: {upstream} failed: generate: m.yaml: models.x: boom"
    assert status.read(tmp_path / "volumes.status") == st
    assert out.read_text().startswith(f"commsweep: no result: volumes: not run: {upstream} failed: generate: m.yaml")
    # A task after that one names the root (the task that failed), and the summary gives its cause once.
    later = status.guard("simulate", lambda: ran.append(1), status_path=tmp_path / "simulate.status",
                         after=[tmp_path / "volumes.status"])
    assert ran == [] and later.upstream == str(upstream)
    assert later.error == f"not run: {upstream} failed: generate: m.yaml: models.x: boom"
    found = [(upstream, status.read(upstream)), (tmp_path / "volumes.status", st), (tmp_path / "simulate.status", later)]
    assert status.reasons(found) == "generate: m.yaml: models.x: boom"
    assert status.read(upstream).ran and status.read(upstream).cause() == "generate: m.yaml: models.x: boom"


def test_guard_turns_bad_arguments_missing_outputs_and_bugs_into_failures(tmp_path):
    st = tmp_path / "x.status"
    result = commsweep("guard", "--status", str(st), "--", "volumes", "w.txt", "--bogus")
    assert result.returncode == 0
    assert status.read(st).error == "invalid arguments: commsweep: error: unrecognized arguments: --bogus"

    missing = status.guard("volumes", lambda: None, status_path=st, outputs=[tmp_path / "never.csv"])
    assert missing.error == f"did not write {tmp_path / 'never.csv'}"

    def bug():
        raise KeyError("oops")

    crashed = status.guard("volumes", bug, status_path=st)
    assert crashed.error == "internal error: KeyError: 'oops'"
    # An interruption is not a point failure: it propagates (and no status is written).
    st.unlink()

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        status.guard("volumes", interrupted, status_path=st)
    assert not st.exists()


def test_next_attempt_grows_only_after_a_failure(tmp_path):
    st = tmp_path / "w.status"
    assert status.next_attempt(st) == 1  # never ran
    status.write(st, status.Status(ok=False, stage="generate", error="e", attempt=1))
    assert status.next_attempt(st) == 2
    status.write(st, status.Status(ok=True, stage="generate", attempt=2))
    assert status.next_attempt(st) == 2
    st.write_text("garbage")
    assert status.next_attempt(st) == 1


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "not a status file (Expecting value)"),
        ("[1]", "not a status file (expected a JSON object"),
        ('{"status": "maybe"}', "not a status file (expected a JSON object"),
        ('{"status": "ok", "outputs": "a"}', "field 'outputs': expected a list of paths"),
        ('{"status": "ok", "attempt": 0}', "field 'attempt': expected a positive integer, got 0"),
    ],
)
def test_bad_status_files_are_named(tmp_path, text, message):
    path = tmp_path / "s.status"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        status.read(path)
    assert str(err.value).startswith(f"{path}:1: ") and message in str(err.value)


def make_results(tmp_path):
    """Two points of one sweep, run as the rules run them; the second's generation fails."""
    from commsweep.orchestration import cli

    results = tmp_path / "results"
    table = tmp_path / "sweep.csv"
    commsweep("sweep", str(sweeps.path("two-points")), "--table", str(table))
    points = read_points(table)
    for p, pp in zip(points, (1, 5)):  # tp*pp = 20 does not divide the world size
        wdir = results / "workloads" / p.workload
        argv = [*GENERATE[:5], f"--world_size={p.world_size}", f"--tensor_model_parallel_size={p.tp}",
                "--global_batch=16", f"--pipeline_model_parallel={pp}", "-o", str(wdir / "workload.txt")]
        cli.main(["guard", "--status", str(wdir / "workload.status"), "--outputs", str(wdir / "workload.txt"),
                  "--", *argv])
        cli.main(["guard", "--status", str(wdir / "volumes.status"), "--outputs", str(wdir / "volumes.csv"),
                  "--after", str(wdir / "workload.status"), "--",
                  "volumes", str(wdir / "workload.txt"), "--format", "csv", "-o", str(wdir / "volumes.csv")])
    return table, results, points


def test_summary_lists_the_failed_point_and_check_fails(tmp_path):
    table, results, points = make_results(tmp_path)
    text = summary.summarize(table, paths.PointFiles.under(results))
    rows = list(csv.DictReader(text.splitlines()))
    good = [r for r in rows if r["point"] == points[0].point]
    bad = [r for r in rows if r["point"] == points[1].point]
    assert good and all(r["status"] == "ok" and r["payload_bytes"] for r in good)
    assert len(bad) == 1
    assert bad[0]["status"] == (
        "failed: generate: arguments: pp=5 does not divide num_layers=32; world_size=16 is not divisible by tp*pp=20"
    )
    assert bad[0]["tp"] == "4" and bad[0]["phase"] == ""

    ok, text = status.check(points, paths.PointFiles.under(results))
    assert not ok and text.startswith("failed: 1 of 2 point(s) failed")
    assert f"{points[1].point}: generate: arguments: pp=5 does not divide num_layers=32; world_size=16 is not divisible" in text
    assert status.check(points[:1], paths.PointFiles.under(results)) == (True, "all 1 point(s) ok\n")

    # Through the CLI: a non-zero exit with the list, which -o records too (the verdict of this run).
    verdict = tmp_path / "status.txt"
    verdict.write_text("all 2 point(s) ok\n")  # an earlier run's
    result = commsweep("check", "--sweep", str(table), "--results", str(results), "-o", str(verdict), check=False)
    assert result.returncode == 2 and "1 of 2 point(s) failed" in result.stderr
    assert verdict.read_text() == text
    # As the pipeline runs it: the verdict written, exit 0 (the run itself fails afterwards).
    result = commsweep("check", "--sweep", str(table), "--results", str(results), "-o", str(verdict), "--exit-zero")
    assert verdict.read_text() == text


def test_check_counts_a_point_without_any_status_as_failed(tmp_path):
    table, results, points = make_results(tmp_path)
    for f in (results / "workloads" / points[0].workload).glob("*.status"):
        f.unlink()
    ok, text = status.check(points[:1], paths.PointFiles.under(results))
    assert not ok and "no status file: its jobs never ran" in text


def test_guard_records_an_unreadable_upstream_status_as_a_failure(tmp_path):
    upstream = tmp_path / "workload.status"
    upstream.write_text("edited by hand")
    st = status.guard("volumes", lambda: None, status_path=tmp_path / "volumes.status", after=[upstream])
    assert not st.ok and st.error.startswith(f"unreadable upstream status: {upstream}:1: not a status file")
