"""`make run` as a user types it: with nothing to do it starts no Snakemake (Snakemake itself
agrees there is nothing to do), and the report is made again only when what it shows changed
(bench/first_hour.py times it). tests/test_current.py covers each kind of change."""

from __future__ import annotations

import re
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

    # One Snakemake made the results and the report (--report-after-run), and said nothing of a
    # command that makes the report.
    assert (first.stdout + first.stderr).count("Using workflow specific profile") == 1
    assert "--report results/report.html --report-after-run" in first.stdout + first.stderr
    assert "the HTML report of these results" not in first.stderr
    # The two batches start first, side by side: the sweep table and the run record, ready as
    # early, are not on the road to the tables and figures.
    started = re.findall(r"^localrule (\w+):", first.stdout + first.stderr, re.M)
    assert started[:2] == ["batch", "batch"], started

    # Nothing to do: Snakemake is not started, and the report stays as it was.
    again = sweeps.make(project, "run", "CONFIG=sweep.yaml")
    assert NOTHING_TO_DO in again.stderr and not snakemake_started(again)
    assert "--report" not in again.stdout + again.stderr
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
    assert "--report results/report.html --report-after-run" in redone.stdout + redone.stderr
    assert report.stat().st_mtime_ns > made

    # The report removed by hand: made alone, Snakemake having nothing else to do.
    report.unlink()
    alone = sweeps.make(project, "run", "CONFIG=sweep.yaml")
    assert NOTHING_TO_DO in alone.stderr and report.exists()


def test_a_sweep_in_a_folder_of_its_own_keeps_the_others_answer_and_the_two_compare(tmp_path):
    """`make run RESULTS=DIR` (or the config's `results`): the sweep's results, report and
    record are in DIR; the default folder's sweep stays as it was, with nothing to do; and
    `make compare-sweeps` sets the two answers side by side."""
    project = sweeps.project(tmp_path / "project")
    (project / "sweep.yaml").write_text(sweeps.text("two-points"))
    (project / "other.yaml").write_text(sweeps.text("two-points") + "results: results/other\n")
    sweeps.make(project, "run", "CONFIG=sweep.yaml")
    default = {p: p.stat().st_mtime_ns for p in (project / "results").rglob("*") if p.is_file()}

    other = sweeps.make(project, "run", "CONFIG=other.yaml")
    assert (project / "results" / "other" / "status.txt").read_text().startswith("all 2 point(s) ok")
    assert (project / "results" / "other" / "report.html").exists()
    assert "the answer: results/other/answer.md" in other.stderr
    assert {p: p.stat().st_mtime_ns for p in default} == default
    assert NOTHING_TO_DO in sweeps.make(project, "run", "CONFIG=sweep.yaml").stderr
    # A folder on the command line (make run RESULTS=DIR passes it so): every output in it.
    third = subprocess.run([str(sweeps.SNAKEMAKE), "-n", "--cores", "2", "--configfile", "sweep.yaml", "--config",
                            "results=results/third"], cwd=project, capture_output=True, text=True, env=sweeps.env())
    outputs = re.findall(r"output: (.*)", third.stdout + third.stderr)
    assert outputs and all(path.startswith("results/third/") for line in outputs for path in line.split(", "))

    compared = sweeps.make(project, "compare-sweeps", "A=results", "B=results/other", "OUT=compared.csv")
    assert "2 point(s) in both sweeps (0 differ)" in compared.stderr
    assert (project / "compared.csv").read_text().startswith("point,measure,cause,a,b,difference\n")

    # Another sweep in the default folder: the points of the first are named, with how to be rid
    # of them; Snakemake's reasons to rerun name digests, not the config as JSON.
    (project / "sweep.yaml").write_text(sweeps.text("two-points").replace("tp: [2, 4]", "tp: [2]"))
    dry = subprocess.run([str(sweeps.SNAKEMAKE), "-n", "--cores", "2", "--configfile", "sweep.yaml"], cwd=project,
                         capture_output=True, text=True, env=sweeps.env())
    said = dry.stdout + dry.stderr
    assert "commsweep: 2 folder(s) or file(s) in results/ are of points not in this sweep" in said, said[-3000:]
    assert "make clean RESULTS=results" in said
    reasons = [line for line in said.splitlines() if line.strip().startswith("reason:")]
    assert any("Params have changed" in line for line in reasons)
    assert max(map(len, reasons)) < 2000, max(reasons, key=len)

