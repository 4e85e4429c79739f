"""A sweep loses nothing: not to one bad point, not to a kill, and it repeats byte for byte."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import sweeps
from commsweep import sweep
from commsweep.aiob import profile_file as pf
from commsweep.workload import format as wf

# -- one bad point never loses the others ----------------------------------------------

# gpt-huge passes the sweep's validation, but its sizes do not fit the 64-bit fields of a
# SimAI workload, which generation finds at run time. The user's AIOB file for gpt-7b
# with tp=2 is corrupted below (min > max), which the AIOB stage finds when it checks it.
BAD_SWEEP = """\
models:
  gpt-huge: {base: gpt-7b, num_layers: 2, hidden_size: 4294967296, ffn_hidden_size: 4294967296}
aiob: {backend: file, file: "profiles/{profile}.txt"}
sweep:
  model: [gpt-7b, gpt-huge]
  world_size: [16]
  tp: [1, 2]
  aiob: [false, true]
  global_batch: [16]
  network: [netA]
"""
GOOD_SWEEP = BAD_SWEEP.replace("model: [gpt-7b, gpt-huge]", "model: [gpt-7b]")
CORRUPT_PROFILE = "train_iter:10\nEmb:\n    time_gpu_max: 5\n    time_gpu_min: 7\n    time_gpu_avg: 6\n"
PER_POINT_RULES = ("profile_file", "generate", "volumes", "simulate", "audit")


def place_profiles(workdir: Path, config: Path, corrupt: str | None = None) -> None:
    """The user's AIOB files (aiob.file) for the points with aiob on."""
    good = pf.AiobProfile(sections=tuple((n, pf.OpTime(max=12, min=10, avg=11)) for n in pf.STANDARD_SECTIONS))
    points, _ = sweep.points_from_config(sweep.load_config(config))
    for key in {p.profile_key for p in points if p.aiob}:
        path = workdir / "profiles" / f"{key}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        if key == corrupt:
            path.write_text(CORRUPT_PROFILE)
        else:
            pf.write(good, path)


def summary_rows(workdir: Path) -> list[dict[str, str]]:
    with open(workdir / "results" / "summary.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def jobs_to_run(workdir: Path, config: Path) -> dict[str, int]:
    """Snakemake's dry-run job counts (rule -> jobs)."""
    out = sweeps.run(workdir, "--configfile", str(config), "--dry-run").stdout
    counts: dict[str, int] = {}
    lines = out.split("Job stats:")[1].splitlines() if "Job stats:" in out else []
    for line in lines[3:]:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        counts[parts[0]] = int(parts[1])
    return counts


@pytest.mark.slow
def test_failed_points_leave_the_others_intact_and_are_retried(tmp_path):
    corrupt = "gpt-7b_H100-SXM_tp2_ep1_sp0_mb1_seq2048"
    bad_point = "gpt-7b_ws16_tp2_pp1_ep1_sp0_mb1_gb16_seq2048_megatron_aiob__netA"

    # The reference: only the good points, every profile valid.
    ref = tmp_path / "ref"
    ref_config = sweeps.write_config(ref, GOOD_SWEEP)
    place_profiles(ref, ref_config)
    sweeps.run(ref, "--configfile", str(ref_config))

    run = tmp_path / "run"
    config = sweeps.write_config(run, BAD_SWEEP)
    place_profiles(run, config, corrupt=corrupt)
    first = sweeps.run(run, "--configfile", str(config), check=False)
    # The run fails, at the very end, naming the failed points.
    assert first.returncode != 0
    check_log = (run / "results" / "logs" / "check.log").read_text()
    assert "5 of 8 point(s) failed" in check_log and bad_point in check_log

    rows = summary_rows(run)
    failed = {r["point"]: r["status"] for r in rows if r["status"] != "ok"}
    assert len(failed) == 5
    reason = failed.pop(bad_point)
    assert reason.startswith(f"failed: profile: profiles/{corrupt}.txt:5: field 'time_gpu_avg'")
    assert "needs time_gpu_min <= time_gpu_avg <= time_gpu_max" in reason
    for point, reason in failed.items():
        assert point.startswith("gpt-huge_"), point
        assert reason.startswith("failed: generate: arguments: the model is too large for a SimAI workload")
    for r in rows:
        if r["status"] != "ok":
            assert r["phase"] == r["payload_bytes"] == ""  # one row, no volumes

    # Every good point's results are those of the clean run, byte for byte.
    ref_files, run_files = sweeps.result_files(ref), sweeps.result_files(run)
    good_workloads = {r["workload"] for r in summary_rows(ref)} - {bad_point.split("__")[0]}
    assert len(good_workloads) == 3
    for w in good_workloads:
        for name in ("workload.txt", "volumes.csv", "workload.status", "volumes.status"):
            assert run_files[f"workloads/{w}/{name}"] == ref_files[f"workloads/{w}/{name}"]
    ok_rows = [r for r in rows if r["status"] == "ok"]
    assert ok_rows == [r for r in summary_rows(ref) if r["point"] != bad_point]
    for name in ("volume_by_tp.png", "tp_bytes_by_phase.png", "exposed_by_group.png"):
        assert (run / "results" / "plots" / name).exists()
    verdicts = (run / "results" / "verdicts.csv").read_text()
    assert bad_point not in verdicts and "gpt-huge" not in verdicts  # failed points carry no verdict

    # A failed job's outputs are markers, which no reader takes for data.
    marker = run / "results" / "workloads" / bad_point.split("__")[0] / "workload.txt"
    assert marker.read_text().startswith("commsweep: no result: profile:")
    with pytest.raises(Exception, match="expected the mode"):
        wf.read(marker)

    # The next run retries exactly the failed jobs: the corrupt profile and, for each of
    # the 5 failed points, its workload, volumes, simulation and audit; then the tables.
    todo = jobs_to_run(run, config)
    assert {rule: todo.get(rule, 0) for rule in PER_POINT_RULES} == {
        "profile_file": 1, "generate": 5, "volumes": 5, "simulate": 5, "audit": 5,
    }
    assert todo["summarize"] == todo["check"] == 1
    # Fixed input and the model dropped: everything runs, equal to the clean run.
    place_profiles(run, config)
    config.write_text(GOOD_SWEEP)
    final = sweeps.run(run, "--configfile", str(config))
    assert "all 4 point(s) ok" in (run / "results" / "status.txt").read_text()
    assert (run / "results" / "summary.csv").read_bytes() == (ref / "results" / "summary.csv").read_bytes()
    assert jobs_to_run(run, config) == {}, final.stdout


# -- interruption ----------------------------------------------------------------------


def test_atomic_write_killed_midway_leaves_no_partial_file(tmp_path):
    """SIGKILL while commsweep.files writes: the target keeps its old bytes, never a part."""
    target = tmp_path / "out.txt"
    target.write_text("old\n")
    script = (
        "import sys, time\n"
        "from commsweep.files import atomic_open\n"
        "with atomic_open(sys.argv[1]) as fh:\n"
        "    for i in range(10**6):\n"
        "        fh.write('x' * 1000 + '\\n'); fh.flush()\n"
        "        if i == 100: print('writing', flush=True)\n"
        "        time.sleep(0.001)\n"
    )
    proc = subprocess.Popen(
        [os.sys.executable, "-c", script, str(target)], stdout=subprocess.PIPE, text=True, env=sweeps.env()
    )
    assert proc.stdout.readline() == "writing\n"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert target.read_text() == "old\n"
    leftovers = [p.name for p in tmp_path.iterdir() if p != target]
    # Only the hidden temporary file remains, and nothing reads it.
    assert len(leftovers) == 1 and leftovers[0].startswith(".out.txt.") and leftovers[0].endswith(".tmp")


def running_job(session: int) -> bool:
    """Whether a `commsweep guard` process runs in the given session."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[3]) == session and b"guard" in cmdline and b"commsweep" in cmdline:
            return True
    return False


INTERRUPTED_SWEEP = """\
sweep:
  model: [gpt-7b, llama-7b]
  world_size: [16]
  tp: [1, 2, 4, 8]
  sp: [false, true]
  network: [netA]
"""


@pytest.mark.slow
def test_sigkill_mid_sweep_then_rerun_gives_identical_results(tmp_path):
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref_config = sweeps.write_config(ref, INTERRUPTED_SWEEP)
    config = sweeps.write_config(run, INTERRUPTED_SWEEP)
    sweeps.run(ref, "--configfile", str(ref_config))
    reference = sweeps.result_files(ref)

    # One job at a time, so the kill lands mid-sweep: after some jobs, before the summary.
    proc = subprocess.Popen(
        sweeps.command(run, "--configfile", str(config), "--cores", "1"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=sweeps.env(), start_new_session=True,
    )
    workloads = run / "results" / "workloads"
    deadline = time.monotonic() + 300
    # Kill while a job runs (a `commsweep guard` in the session), after a few are done.
    while len(list(workloads.glob("*/volumes.status"))) < 3 or not running_job(proc.pid):
        assert proc.poll() is None, "the sweep ended before it could be killed"
        assert time.monotonic() < deadline, "the sweep did not start"
        time.sleep(0.01)
    # The whole session: Snakemake and the job it is running, as a crash would.
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (run / "results" / "summary.csv").exists()
    # The kill cut a job short: Snakemake had marked its outputs incomplete.
    assert list((run / ".snakemake" / "incomplete").iterdir())

    # What the kill left: every finished output is complete (equal to the reference).
    # A job cut short leaves at most a hidden temporary file, or outputs without a status
    # that Snakemake marks incomplete and makes again.
    partial = sweeps.result_files(run)
    for rel, data in partial.items():
        name = Path(rel).name
        if name.startswith(".") and name.endswith(".tmp"):
            continue
        assert data == reference[rel], f"{rel} differs from the uninterrupted run"

    # Snakemake's lock survives a SIGKILL; the rerun unlocks, then finishes the sweep.
    locked = sweeps.run(run, "--configfile", str(config), check=False)
    assert locked.returncode != 0 and "unlock" in (locked.stdout + locked.stderr).lower()
    sweeps.run(run, "--configfile", str(config), "--unlock")
    sweeps.run(run, "--configfile", str(config))
    final = {
        rel: data for rel, data in sweeps.result_files(run).items()
        if not (Path(rel).name.startswith(".") and Path(rel).name.endswith(".tmp"))
    }
    assert sweeps.differences(reference, final) == []


# -- determinism -----------------------------------------------------------------------


@pytest.mark.slow
def test_default_sweep_is_byte_identical_across_runs(tmp_path):
    """Two runs of the default sweep: identical tables, workloads, statuses and PNGs."""
    from conftest import REPO

    first, second = tmp_path / "a", tmp_path / "b"
    for workdir in (first, second):
        workdir.mkdir()
        sweeps.run(workdir, "--configfile", str(REPO / "config" / "config.yaml"))
    a, b = sweeps.result_files(first), sweeps.result_files(second)
    assert "plots/volume_by_tp.png" in a and "summary.csv" in a
    assert sweeps.differences(a, b) == []
