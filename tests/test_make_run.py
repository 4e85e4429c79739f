"""`make run` as a user types it: with nothing to do it starts no Snakemake (Snakemake itself
agrees there is nothing to do), and the report is made again only when what it shows changed
(bench/first_hour.py times it). tests/test_current.py covers each kind of change."""

from __future__ import annotations

import subprocess

import pytest

import sweeps

pytestmark = pytest.mark.slow

NOTHING_TO_DO = "commsweep: nothing to do: results/ are as the last run of sweep.yaml left them (all 2 point(s) ok"


def snakemake_started(done: subprocess.CompletedProcess) -> bool:
    return "Building DAG of jobs" in done.stdout + done.stderr


def test_make_run_skips_snakemake_only_when_nothing_changed_and_the_report_only_when_no_result_did(tmp_path):
    project = sweeps.project(tmp_path / "project")
    (project / "sweep.yaml").write_text(sweeps.text("two-points"))
    report = project / "results" / "report.html"
    first = sweeps.make(project, "run", "CONFIG=sweep.yaml")
    assert snakemake_started(first)
    assert report.read_text(errors="replace").count("volume_by_tp.png") >= 1
    made = report.stat().st_mtime_ns

    # Nothing to do: Snakemake is not started, and the report stays as it was.
    again = sweeps.make(project, "run", "CONFIG=sweep.yaml")
    assert NOTHING_TO_DO in again.stderr and not snakemake_started(again)
    assert "'results/report.html' is up to date" in again.stdout
    assert "--report" not in again.stdout
    assert report.stat().st_mtime_ns == made
    # Snakemake, asked, agrees (and a dry run changes nothing).
    dry = subprocess.run([str(sweeps.SNAKEMAKE), "-n", "--cores", "2", "--configfile", "sweep.yaml"], cwd=project,
                         capture_output=True, text=True, env=sweeps.env())
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout + dry.stderr
    assert NOTHING_TO_DO in sweeps.make(project, "run", "CONFIG=sweep.yaml").stderr

    # A change Snakemake finds nothing to do about (a log removed): it is started, decides so,
    # and the next run is a no-op again.
    (project / "results" / "logs" / "check.log").unlink()
    looked = sweeps.make(project, "run", "CONFIG=sweep.yaml")
    assert snakemake_started(looked) and "Nothing to be done" in looked.stdout + looked.stderr
    assert NOTHING_TO_DO in sweeps.make(project, "run", "CONFIG=sweep.yaml").stderr

    # A result removed by hand: Snakemake runs, remakes it, the check writes a new verdict,
    # and the report follows.
    (project / "results" / "plots" / "timeline.png").unlink()
    redone = sweeps.make(project, "run", "CONFIG=sweep.yaml")
    assert snakemake_started(redone) and (project / "results" / "plots" / "timeline.png").exists()
    assert "--report results/report.html" in redone.stdout
    assert report.stat().st_mtime_ns > made

