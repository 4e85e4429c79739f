"""A sweep loses nothing: not to one bad point or step, not to a kill, and it repeats byte for byte."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import sweeps
from commsweep.workload import format as wf

# -- one bad point never loses the others ----------------------------------------------

# failing.yaml's gpt-huge passes the sweep's validation, but its sizes do not fit the 64-bit
# fields of a SimAI workload, which generation finds at run time. The user's AIOB file for
# gpt-7b with tp=2 is corrupted below (min > max), which the AIOB stage finds when it checks it.
HUGE_POINT = "gpt-huge_ws16_tp1_pp1_ep1_sp0_mb1_gb16_seq2048_megatron__netA"


def summary_rows(workdir: Path) -> list[dict[str, str]]:
    with open(workdir / "results" / "summary.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def jobs_to_run(workdir: Path, config: Path, *args: str) -> dict[str, int]:
    """Snakemake's dry-run job counts (rule -> jobs)."""
    out = sweeps.run(workdir, "--configfile", str(config), "--dry-run", *args).stdout
    counts: dict[str, int] = {}
    lines = out.split("Job stats:")[1].splitlines() if "Job stats:" in out else []
    for line in lines[3:]:
        parts = line.split()
        if len(parts) != 2 or parts[0] == "total":
            break
        counts[parts[0]] = int(parts[1])
    return counts


@pytest.mark.slow
def test_failed_points_and_steps_leave_the_others_intact_and_are_retried(tmp_path):
    corrupt = "gpt-7b_H100-SXM_tp2_ep1_sp0_mb1_seq2048"
    bad_point = "gpt-7b_ws16_tp2_pp1_ep1_sp0_mb1_gb16_seq2048_megatron_aiob__netA"

    # The reference: only the good points, every profile valid.
    ref = tmp_path / "ref"
    ref_config = sweeps.write_config(ref, "aiob-file")
    sweeps.place_aiob_files(ref, ref_config)
    sweeps.run(ref, "--configfile", str(ref_config))
    assert (ref / "results" / "status.txt").read_text().startswith("all 4 point(s) ok")

    # The same folder, then the failing sweep, its timeline drawn from a point that fails
    # (analysis given with --config, as YAML): no verdict, table or figure of the good run
    # may survive as this run's.
    run = tmp_path / "run"
    shutil.copytree(ref, run, symlinks=True)
    config = sweeps.write_config(run, "failing")
    sweeps.place_aiob_files(run, config, corrupt=corrupt)
    first = sweeps.run(run, "--configfile", str(config), "--config", f"analysis={{timeline_point: {HUGE_POINT}}}",
                       check=False)
    # The run fails, at the very end, naming the failed points and steps, on the terminal too.
    assert first.returncode != 0
    verdict = (run / "results" / "status.txt").read_text()
    assert verdict.startswith("failed: 5 of 8 point(s) failed (run ")
    assert bad_point in verdict and HUGE_POINT in verdict
    assert "failed: 1 sweep-wide step(s) failed" in verdict
    assert "  plot_timeline: generate: arguments: the model is too large for a SimAI workload" in verdict
    assert verdict in first.stderr

    rows = summary_rows(run)
    run_id = verdict.split("(run ")[1].split(")")[0]
    assert {r["run"] for r in rows} == {run_id} != {r["run"] for r in summary_rows(ref)}
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
        for name in ("workload.txt", "volumes.csv"):
            assert run_files[f"workloads/{w}/{name}"] == ref_files[f"workloads/{w}/{name}"]
    ok_rows = [{**r, "run": ""} for r in rows if r["status"] == "ok"]
    assert ok_rows == [{**r, "run": ""} for r in summary_rows(ref) if r["point"] != bad_point]
    for name in ("volume_by_tp.png", "tp_bytes_by_phase.png", "exposed_by_group.png"):
        assert (run / "results" / "plots" / name).read_bytes()[:4] == b"\x89PNG"
    # The timeline of the failed point is a marker, not the good run's figure: not drawn, because
    # the point's workload failed to generate.
    timeline = (run / "results" / "plots" / "timeline.png").read_text()
    assert timeline.startswith(f"commsweep: no result: timeline: not run: results/workloads/{HUGE_POINT.split('__')[0]}/"
                               "workload.status failed: generate: arguments: the model is too large"), timeline
    verdicts = (run / "results" / "verdicts.csv").read_text()
    assert bad_point not in verdicts and "gpt-huge" not in verdicts  # failed points carry no verdict

    # A failed job's outputs are markers, which no reader takes for data.
    marker = run / "results" / "workloads" / bad_point.split("__")[0] / "workload.txt"
    assert marker.read_text().startswith(f"commsweep: no result: generate: not run: results/aiob/file/{corrupt}.status "
                                         f"failed: profile: profiles/{corrupt}.txt:5:"), marker.read_text()
    with pytest.raises(Exception, match="expected the mode"):
        wf.read(marker)

    # The next run retries exactly the failed tasks: the corrupt profile and, for each of
    # the 5 failed points, its workload, volumes, simulation and audit (in the batches that
    # hold them); then the steps.
    assert sweeps.todo(run, config) == {"profile_file": 1, "generate": 5, "volumes": 5, "simulate": 5, "audit": 5}
    todo = jobs_to_run(run, config, "--config", f"analysis={{timeline_point: {HUGE_POINT}}}")
    assert 1 <= todo["batch"] < sweeps.planned(first)["batches"]
    assert todo["tables"] == todo["figures"] == todo["check"] == 1
    before = sweeps.status_times(run)
    retried = sweeps.run(run, "--configfile", str(config), "--config", f"analysis={{timeline_point: {HUGE_POINT}}}",
                         check=False)
    assert retried.returncode != 0  # the same points fail again
    again = [p for p in sweeps.rewritten(before, sweeps.status_times(run)) if not p.startswith("steps/")]
    assert len(again) == 1 + 5 * 4 and f"points/{bad_point}/simulate.status" in again
    assert {p.split("/")[1] for p in again if p.startswith("points/")} == {bad_point} | {
        r["point"] for r in rows if r["point"].startswith("gpt-huge_")}
    # Fixed input and the model dropped: everything runs, equal to the clean run.
    sweeps.place_aiob_files(run, config)
    config.write_text(sweeps.text("aiob-file"))
    final = sweeps.run(run, "--configfile", str(config))
    verdict = (run / "results" / "status.txt").read_text().splitlines()
    assert verdict[0] == (ref / "results" / "status.txt").read_text().rstrip("\n")
    # gpt-huge's folders are left from the failing sweep: listed, never read.
    assert verdict[1].startswith("ignored: 10 output(s) of points not in this sweep")
    assert all("gpt-huge" in line for line in verdict[2:]) and len(verdict) == 12
    assert "commsweep: 10 folder(s) or file(s) in results/ are of points not in this sweep" in final.stderr
    assert (run / "results" / "summary.csv").read_bytes() == (ref / "results" / "summary.csv").read_bytes()
    assert jobs_to_run(run, config) == {}, final.stdout


# -- interruption ----------------------------------------------------------------------


def test_atomic_write_killed_midway_leaves_no_partial_file(tmp_path):
    """SIGKILL while commsweep.base.files writes: the target keeps its old bytes, never a part."""
    target = tmp_path / "out.txt"
    target.write_text("old\n")
    script = (
        "import sys, time\n"
        "from commsweep.base.files import atomic_open\n"
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
    """Whether a batch job's process (workflow/scripts/batch.py) runs in the given session."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[3]) == session and b".batch.py" in cmdline:
            return True
    return False


def start_mid_sweep(folder: Path, config: Path, terminal=subprocess.DEVNULL) -> subprocess.Popen:
    """Snakemake on ``config`` in ``folder``, one job at a time, in its own session; returns
    once a few workloads are done and a job is running (so an interruption lands mid-sweep).
    ``terminal``: where its output goes (a file)."""
    proc = subprocess.Popen(
        sweeps.command(folder, "--configfile", str(config), "--cores", "1"),
        stdout=terminal, stderr=subprocess.STDOUT, env=sweeps.env(), start_new_session=True,
        # Ctrl-C as in a terminal: a suite started in the background (`cmd &` in a script)
        # would hand Snakemake an ignored SIGINT, and it would run on to the end.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    workloads = folder / "results" / "workloads"
    deadline = time.monotonic() + 300
    while len(list(workloads.glob("*/volumes.status"))) < 3 or not running_job(proc.pid):
        assert proc.poll() is None, "the sweep ended before it could be interrupted"
        assert time.monotonic() < deadline, "the sweep did not start"
        time.sleep(0.01)
    return proc


def without_temporaries(files: dict[str, bytes]) -> dict[str, bytes]:
    return {rel: data for rel, data in files.items()
            if not (Path(rel).name.startswith(".") and Path(rel).name.endswith(".tmp"))}


@pytest.mark.slow
def test_sigkill_mid_sweep_then_make_run_gives_identical_results(tmp_path):
    ref = tmp_path / "ref"
    ref_config = sweeps.write_config(ref, "interrupted")
    sweeps.run(ref, "--configfile", str(ref_config))
    reference = sweeps.result_files(ref)

    # Killed as a crash would be: Snakemake and the job it runs (the whole session).
    run = sweeps.project(tmp_path / "run")
    config = sweeps.write_config(run, "interrupted")
    proc = start_mid_sweep(run, config)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert not (run / "results" / "summary.csv").exists()
    # The kill cut a job short: Snakemake had marked its outputs incomplete, and its lock stays.
    assert list((run / ".snakemake" / "incomplete").iterdir())
    assert list((run / ".snakemake" / "locks").iterdir())

    # What the kill left: every finished output is complete (equal to the reference).
    # A job cut short leaves at most a hidden temporary file, or outputs without a status
    # that Snakemake marks incomplete and makes again.
    for rel, data in without_temporaries(sweeps.result_files(run)).items():
        assert data == reference[rel], f"{rel} differs from the uninterrupted run"

    # A plain `make run` clears the stale lock, remakes the incomplete job and finishes.
    result = sweeps.make(run, "run", "CONFIG=sweep.yaml")
    assert "commsweep: cleared a stale lock left by Snakemake PID" in result.stderr
    final = without_temporaries(sweeps.result_files(run))
    assert (run / "results" / "report.html").exists()
    assert sweeps.differences(reference, {k: v for k, v in final.items() if k != "report.html"}) == []


@pytest.mark.slow
def test_ctrl_c_mid_sweep_then_make_run_finishes_it(tmp_path):
    """Ctrl-C (SIGINT to Snakemake): the next plain `make run` finishes the sweep. A second
    Snakemake on the same folder meanwhile is refused, naming the live run's PID."""
    run = sweeps.project(tmp_path / "run")
    config = sweeps.write_config(run, "interrupted")
    with open(tmp_path / "terminal.txt", "w") as terminal:
        proc = start_mid_sweep(run, config, terminal)
    # Paused (still live processes: Snakemake and its job) so that it cannot finish the sweep
    # meanwhile, however slow the machine: the second run is refused, naming it.
    os.killpg(proc.pid, signal.SIGSTOP)
    second = sweeps.run(run, "--configfile", str(config), check=False)
    assert second.returncode != 0
    assert f"another Snakemake is running in {run.resolve()} (PID {proc.pid}:" in second.stderr
    assert "its lock is never broken" in second.stderr
    # Ctrl-C in a terminal (Snakemake and its job), pending until they go on.
    os.killpg(proc.pid, signal.SIGINT)
    os.killpg(proc.pid, signal.SIGCONT)
    proc.wait(timeout=120)
    assert proc.returncode != 0
    # What the terminal shows of it is short: no traceback, and the batch's log is one line.
    said = (tmp_path / "terminal.txt").read_text()
    after = said[said.index("Terminating processes on user request"):]
    assert "Traceback" not in said and "KeyboardInterrupt" not in said
    logs = re.findall(r"={80}\n(.*?)={80}\n", after, flags=re.S)
    assert all(re.fullmatch(r"batch \S+: interrupted \(Ctrl-C\); the tasks it finished are kept, "
                            r"the next run does the others\n", log) for log in logs), after
    assert len(after.splitlines()) <= 20 * max(1, len(logs)), after
    assert "commsweep: the run did not finish (above: why); the same command again keeps what is done" in after
    # No verdict and no tables: the run did not end.
    assert not (run / "results" / "status.txt").exists() and not (run / "results" / "summary.csv").exists()

    # Under umask 022, as on most machines: everything a run writes is readable by colleagues.
    result = sweeps.make(run, "run", "CONFIG=sweep.yaml", umask=0o022)
    assert "IncompleteFilesException" not in result.stdout + result.stderr
    assert (run / "results" / "status.txt").read_text().startswith("all 16 point(s) ok (run ")
    modes = {oct(p.stat().st_mode & 0o777) for p in (run / "results").rglob("*") if p.is_file()}
    assert modes == {"0o644"}

    # The report of another sweep's results is refused, naming the config they came from;
    # the report of this one names its run.
    run_id = json.loads((run / "results" / "run.json").read_text())["run"]
    refused = sweeps.make(run, "report", check=False)
    assert refused.returncode != 0
    assert f"results/run.json is run {run_id}, made from another config (sweep.yaml)" in refused.stderr
    (run / "results" / "report.html").unlink()
    sweeps.make(run, "report", "CONFIG=sweep.yaml")
    assert run_id in (run / "results" / "report.html").read_text(errors="replace")


# -- Ctrl-C at any moment: one line per process, no traceback --------------------------


def test_a_job_started_with_ctrl_c_held_back_says_one_line_when_it_takes_it(tmp_path):
    """A job starts with SIGINT held back (blocked, as the threads of Snakemake that start jobs
    hold it: commsweep.orchestration.interrupts): a Ctrl-C while Python starts and Snakemake's
    preamble runs waits, and the job's code takes it with one line, its log that line."""
    from commsweep.orchestration import interrupts

    log = tmp_path / "job.log"
    script = ("import sys\n"
              "print('in the preamble', flush=True)\n"
              "sys.stdin.readline()  # a Ctrl-C lands here, held back\n"
              "from commsweep.orchestration.interrupts import accepting\n"
              f"with accepting('batch 1-of-8: interrupted (Ctrl-C)', {str(log)!r}):\n"
              "    print('not reached', flush=True)\n")
    with interrupts.held():
        job = subprocess.Popen([os.sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=sweeps.env(),
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert job.stdout.readline() == "in the preamble\n"
    job.send_signal(signal.SIGINT)
    out, err = job.communicate("go on\n", timeout=60)
    assert (job.returncode, out, err) == (-signal.SIGINT, "", "")
    assert log.read_text() == "batch 1-of-8: interrupted (Ctrl-C)\n"


def test_ctrl_c_during_the_run_stops_snakemakes_asyncio_loop_cleanly(tmp_path):
    """Snakemake's main thread schedules jobs through an asyncio runner: a Ctrl-C forwarded to
    it meanwhile cancels the runner's coroutine (as asyncio's own SIGINT handler does), and the
    runner ends with KeyboardInterrupt and closes, rather than a KeyboardInterrupt raised inside
    the running loop (after which Snakemake's teardown could end in "Cannot close a running
    event loop")."""
    script = ("import asyncio, os, signal\n"
              "from commsweep.orchestration import interrupts\n"
              "interrupts.begin('reading')\n"
              "interrupts.during_run()\n"
              "async def scheduling():\n"
              "    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C\n"
              "    try:\n"
              "        await asyncio.sleep(60)\n"
              "    except asyncio.CancelledError:\n"
              "        print('cancelled', flush=True)\n"
              "        raise\n"
              "runner = asyncio.Runner()\n"
              "try:\n"
              "    runner.run(scheduling())\n"
              "except KeyboardInterrupt:\n"
              "    print('KeyboardInterrupt', flush=True)\n"
              "runner.close()\n"
              "print('closed', flush=True)\n")
    done = subprocess.run([os.sys.executable, "-c", script], capture_output=True, text=True, env=sweeps.env(),
                          timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "cancelled\nKeyboardInterrupt\nclosed\n", "")


def session_processes(session: int) -> list[tuple[int, bytes]]:
    """The processes of a session (a `make run` started as from a terminal): PID and command line."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[3]) == session:
            found.append((int(stat.parent.name), cmdline))
    return found


def interrupted_make_run(folder: Path, terminal: Path, ready) -> tuple[int, str, int]:
    """`make run` in ``folder`` as from a terminal; once ``ready(session)`` holds, Ctrl-C: the
    whole session paused first (SIGSTOP), so it lands at that moment however slow the
    machine, then let go. Returns make's exit status, what the terminal showed and the session."""
    with open(terminal, "w") as out:
        proc = subprocess.Popen(["make", "-o", ".venv/.base-installed", "run", "CONFIG=sweep.yaml"], cwd=folder,
                                stdout=out, stderr=subprocess.STDOUT, env=sweeps.env(), start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = time.monotonic() + 300
        while not ready(proc.pid):
            assert proc.poll() is None, terminal.read_text()[-3000:]
            assert time.monotonic() < deadline, "the moment never came"
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGSTOP)
        os.killpg(proc.pid, signal.SIGINT)
        os.killpg(proc.pid, signal.SIGCONT)
        proc.wait(timeout=300)
    return proc.returncode, terminal.read_text(), proc.pid


def reading_the_workflow(folder: Path):
    """Snakemake has said how many points the sweep holds: it is reading the workflow."""
    return lambda session: "workload(s)" in (folder.parent / "terminal.txt").read_text()


def a_job_starting(session: int) -> bool:
    """A job's Python has started (Snakemake's script preamble, or the job itself)."""
    return any(b".snakemake/scripts/" in cmdline for _, cmdline in session_processes(session))


def drawing_figures(folder: Path):
    """The figures job has opened its log: its commands run, in worker processes."""
    log = folder / "results" / "logs" / "figures.log"
    return lambda session: log.exists() and any(b".commsweep.py" in c for _, c in session_processes(session))


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["reading the workflow", "a job starting", "drawing the figures"])
def test_ctrl_c_in_make_run_says_one_line_per_process_at_any_moment(tmp_path, moment):
    """`make run` interrupted while Snakemake reads the workflow, while a job's Python starts
    (Snakemake's preamble: a pickle tens of kilobytes long on one line), or while the figures'
    workers draw: no traceback, each process one line, and the next `make run` finishes."""
    folder = sweeps.project(tmp_path / "run")
    (folder / "sweep.yaml").write_text(sweeps.text("two-points"))
    ready = {"reading the workflow": reading_the_workflow(folder), "a job starting": a_job_starting,
             "drawing the figures": drawing_figures(folder)}[moment]
    status, said, session = interrupted_make_run(folder, tmp_path / "terminal.txt", ready)
    assert status != 0
    assert "Traceback" not in said and "KeyboardInterrupt" not in said and "^^^" not in said, said[-4000:]
    assert max(map(len, said.splitlines())) < 2000 and len(said) < 40_000
    ours = [line for line in said.splitlines() if "interrupted" in line and "make:" not in line]
    assert ours and all(re.fullmatch(r"(commsweep \w+: interrupted|"
                                     r"commsweep: interrupted while Snakemake read the workflow; nothing was "
                                     r"changed|batch \S+: interrupted \(Ctrl-C\); the tasks it finished are kept, "
                                     r"the next run does the others|rule \w+: interrupted \(Ctrl-C\); the next run "
                                     r"does it again)", line) for line in ours), ours
    if moment == "drawing the figures":
        assert "rule figures: interrupted (Ctrl-C); the next run does it again" in ours
    # Nothing outlives the run (the figures' workers are ended and waited for).
    assert not session_processes(session)
    done = sweeps.make(folder, "run", "CONFIG=sweep.yaml")
    assert (folder / "results" / "status.txt").read_text().startswith("all 2 point(s) ok")
    assert "Traceback" not in done.stdout + done.stderr


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
