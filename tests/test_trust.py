"""A sweep never reports stale, partial or mixed results as current (what users did, issue 13).

Real Snakemake runs of small test sweeps in a temporary folder; the Ctrl-C, kill -9 and
failing-step cases are in test_resilience.py. What each test shows is named by its name.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sweeps
from commsweep import __version__
from conftest import REPO
from test_resilience import jobs_to_run

# -- the profile -------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["repository root", "another folder"])
def test_the_default_profile_is_loaded_by_a_plain_snakemake(tmp_path, where):
    """`make run` runs Snakemake from the repository root; a user may run it from anywhere
    with -s: Snakemake's own argument parser finds profiles/default either way."""
    cwd, args = (REPO, []) if where == "repository root" else (tmp_path, ["-s", str(REPO / "Snakefile")])
    code = ("import sys\nfrom snakemake.cli import parse_args\n_, a = parse_args(sys.argv[1:])\n"
            "print(a.keep_going, a.rerun_incomplete, a.show_failed_logs, a.scheduler)")
    result = subprocess.run([sys.executable, "-c", code, *args, "--dry-run"], cwd=cwd, capture_output=True,
                            text=True, env=sweeps.env(), check=True)
    assert result.stdout.split() == ["True", "True", "True", "greedy"]
    assert "Using workflow specific profile" in result.stderr and "profiles/default" in result.stderr


def batch_pid(session: int) -> int | None:
    """The PID of a batch job's process (workflow/scripts/batch.py) running in the given session."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(fields[3]) == session and any(arg.endswith(b".batch.py") for arg in cmdline[:3]):
            return int(stat.parent.name)
    return None


def task_under_way(workdir: Path) -> str | None:
    """The status file of the task a batch job runs now (commsweep.orchestration.batch.RUNNING), if any."""
    for marker in (workdir / ".snakemake" / "commsweep" / "batches").glob("*.running"):
        with contextlib.suppress(OSError):
            if text := marker.read_text().strip():
                return text
    return None


@pytest.mark.slow
def test_a_killed_job_does_not_stop_the_other_points(tmp_path):
    """keep-going and show-failed-logs: a batch job killed outside commsweep's guard (out of
    memory, say) fails, the other batches still run, and the terminal says which job failed.
    The next run finishes the killed batch, the task it was killed in in a process of its own."""
    config = sweeps.write_config(tmp_path, "small")
    proc = subprocess.Popen(
        sweeps.command(tmp_path, "--configfile", str(config), "--cores", "1"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=sweeps.env(), start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while (pid := batch_pid(proc.pid)) is None or (killed_in := task_under_way(tmp_path)) is None:
        assert proc.poll() is None and time.monotonic() < deadline, "no job to kill"
        time.sleep(0.002)
    os.kill(pid, signal.SIGKILL)
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode != 0
    assert "Error in rule batch" in output and "Exiting because a job execution failed" in output
    # The other batches went on and finished: all but the killed one left their manifest.
    assert len(list((tmp_path / "results" / "batches").glob("*.json"))) == sweeps.planned(output)["batches"] - 1
    assert not (tmp_path / "results" / "status.txt").exists()  # no verdict for a run cut short
    sweeps.run(tmp_path, "--configfile", str(config))
    assert (tmp_path / "results" / "status.txt").read_text().startswith("all 4 point(s) ok")
    logs = "".join(p.read_text() for p in (tmp_path / "results" / "logs" / "batch").glob("*.log"))
    key = Path(killed_in).parent.name
    assert re.search(rf"^== \w+ {re.escape(key)} \(attempt 1, own process\)$", logs, re.MULTILINE), logs


# -- external inputs -----------------------------------------------------------------------


def sha256(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_external_inputs_are_checked_before_any_job_and_tracked_by_content(tmp_path):
    config = sweeps.write_config(tmp_path, "aiob-file")
    files = sweeps.place_aiob_files(tmp_path, config)
    sweeps.run(tmp_path, "--configfile", str(config))
    results = tmp_path / "results"
    before = sweeps.result_files(tmp_path)

    # Every status records what made the outputs: commsweep, the run's config, the inputs read.
    record = json.loads((results / "run.json").read_text())
    assert record["commsweep"] == __version__
    assert record["external_inputs"]["aiob.file"][files[0].stem] == {
        "path": f"profiles/{files[0].name}", "sha256": sha256(files[0]).removeprefix("sha256:")}
    profile_status = json.loads((results / "aiob" / "file" / f"{files[0].stem}.status").read_text())
    assert profile_status["provenance"] == {
        "commsweep": __version__, "config": record["config_digest"], "inputs": {"aiob.file": sha256(files[0])}}
    simulated = json.loads(next(results.glob("points/*/simulate.status")).read_text())
    assert simulated["provenance"] == {"commsweep": __version__, "config": record["config_digest"]}
    with open(results / "summary.csv") as fh:
        assert {line.rstrip("\n").rsplit(",", 1)[1] for line in list(fh)[1:]} == {record["run"]}

    # aiob.file moved away: the run stops before any job, naming the key and the path.
    moved = tmp_path / "moved.yaml"
    moved.write_text(config.read_text().replace("profiles/{profile}", "moved/{profile}"))
    result = sweeps.run(tmp_path, "--configfile", str(moved), check=False)
    assert result.returncode != 0
    assert f"aiob.file: 2 of 2 AIOB file(s) not found: moved/{files[0].name}" in result.stdout + result.stderr
    assert sweeps.result_files(tmp_path) == before
    # So do a SimAI, its ratio tables or an AICB checkout that are not there.
    for override, message in (
        ("simulator={backend: simai, root: nowhere}", "simulator.root: nowhere: SimAI checkout not found"),
        ("simulator={ratio_dir: nowhere}", "simulator.ratio_dir: nowhere/nvlink_ratio.csv: ratio table not found"),
        ("generator={aicb_root: nowhere}", "generator.aicb_root: nowhere: AICB checkout not found"),
    ):
        result = sweeps.run(tmp_path, "--configfile", str(config), "--config", override,
                            "sweep={schedule: [aicb]}", "--dry-run", check=False)
        assert result.returncode != 0 and message in result.stdout + result.stderr, result.stdout[-2000:]

    # One AIOB file edited, its time set back: its checksum reruns exactly the tasks that read it.
    stamp = files[0].stat().st_mtime
    files[0].write_text(files[0].read_text().replace("time_gpu_max: 12", "time_gpu_max: 13", 1))
    os.utime(files[0], (stamp, stamp))
    assert sweeps.todo(tmp_path, config) == {"profile_file": 1, "generate": 1, "volumes": 1, "simulate": 1, "audit": 1}
    jobs = jobs_to_run(tmp_path, config)
    assert jobs["batch"] == 1 and jobs["run_record"] == jobs["tables"] == jobs["check"] == 1
    before = sweeps.status_times(tmp_path)
    sweeps.run(tmp_path, "--configfile", str(config))
    profile = files[0].stem
    with open(results / "sweep.csv") as fh:
        (point,) = [row.split(",")[0] for row in fh if f",{profile}," in row]
    workload = point.split("__")[0]
    rewritten = sweeps.rewritten(before, sweeps.status_times(tmp_path))
    assert [path for path in rewritten if not path.startswith("steps/")] == [
        f"aiob/file/{profile}.status", f"points/{point}/audit.status", f"points/{point}/simulate.status",
        f"workloads/{workload}/volumes.status", f"workloads/{workload}/workload.status"]


# -- limits, and config values as the user typed them ---------------------------------------


@pytest.mark.parametrize("override, message", [
    ("sweep={global_batch: [1073741824]}",
     "gpt-7b_ws16_tp2_pp1_ep1_sp0_mb1_gb1073741824_seq2048_megatron__netA: about 36,507,222,016 workload rows "
     "(8 per layer x 34 layers x 134,217,728 micro-batches) > limits.workload_rows = 2,000,000; about 71,303,232 MB "
     "of memory for one job > limits.job_memory_mb = 8,192"),
    ("sweep={world_size: [1099511627776], global_batch: [1099511627776]}",
     "world_size 1,099,511,627,776 > limits.gpus = 2,147,483,647 (SimAI reads the GPU count as a C int)"),
])
def test_an_unbounded_point_stops_the_run_before_any_job(tmp_path, override, message):
    """A huge batch (a workload of billions of rows) or world size: refused with the estimate."""
    config = sweeps.write_config(tmp_path, "small")
    result = sweeps.run(tmp_path, "--configfile", str(config), "--config", override, "--dry-run", check=False)
    said = result.stdout + result.stderr
    assert result.returncode != 0 and "point(s) over the limits, checked before any job" in said
    assert message in said
    assert not (tmp_path / "results").exists()


def test_the_limits_key_raises_a_limit(tmp_path):
    config = sweeps.write_config(tmp_path, "small")
    big = "sweep={global_batch: [65536]}"  # 4,352,000 rows at TP 4
    result = sweeps.run(tmp_path, "--configfile", str(config), "--config", big, "--dry-run", check=False)
    assert "> limits.workload_rows = 2,000,000" in result.stdout + result.stderr
    raised = sweeps.run(tmp_path, "--configfile", str(config), "--config", big,
                        "limits={workload_rows: 10000000, job_memory_mb: 20000}", "--dry-run")
    assert sweeps.planned(raised)["points"] == 4 and "batch" in raised.stdout


def test_config_values_are_read_as_yaml(tmp_path):
    """--config skip_invalid=true and a flow mapping, as a user types them."""
    config = sweeps.write_config(tmp_path, "small")
    args = ("--configfile", str(config), "--config", 'sweep={"tp": [2, 3]}')
    refused = sweeps.run(tmp_path, *args, "--dry-run", check=False)
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "2 invalid sweep point(s); fix the axes or set skip_invalid: true" in said
    planned = sweeps.run(tmp_path, *args, "skip_invalid=true", "--dry-run")
    # The flow merges into small.yaml's sweep: TP 2 (its 2 SP values) run; TP 3 is skipped.
    assert sweeps.planned(planned)["points"] == 2


def test_a_schema_error_names_the_key_not_a_jsonschema_dump(tmp_path):
    result = sweeps.run(tmp_path, "--configfile", str(sweeps.path("bad-type")), "--dry-run", check=False)
    assert result.returncode != 0
    said = result.stdout + result.stderr
    assert f"{sweeps.path('bad-type')}: sweep.tp[0]: 'one' is not of type 'integer'" in said
    assert "Failed validating" not in said


def test_make_run_names_a_yaml_error_with_file_line_and_column(tmp_path):
    project = sweeps.project(tmp_path / "project")
    (project / "bad.yaml").write_text("sweep:\n  tp: [1, 2\n  sp: [true]\n")
    result = sweeps.make(project, "run", "CONFIG=bad.yaml", check=False)
    message = "commsweep sweep: error: bad.yaml:3:5: invalid YAML: expected ',' or ']', but got ':'"
    assert result.returncode != 0 and message in result.stderr
    assert "Error 2" in result.stderr  # commsweep's own exit status, before Snakemake starts
    assert not (project / "results").exists()


# -- outputs others can read, and a report of the right sweep ---------------------------------


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640)])
def test_outputs_honour_the_umask(tmp_path, umask, mode):
    out = tmp_path / "w.txt"
    subprocess.run([sys.executable, "-m", "commsweep", "generate", "--schedule", "megatron", "-o", str(out)],
                   check=True, capture_output=True, preexec_fn=lambda: os.umask(umask), env=sweeps.env())
    assert out.stat().st_mode & 0o777 == mode
