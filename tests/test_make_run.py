"""`make run` as a user types it: the report is made again only when what it shows changed, so
a run with nothing to do does nothing (bench/first_hour.py times it)."""

from __future__ import annotations

import pytest

import sweeps

pytestmark = pytest.mark.slow


def test_make_run_rebuilds_the_report_only_when_a_result_changed(tmp_path):
    project = sweeps.project(tmp_path / "project")
    (project / "sweep.yaml").write_text(sweeps.text("two-points"))
    report = project / "results" / "report.html"
    sweeps.make(project, "run", "CONFIG=sweep.yaml")
    assert report.read_text(errors="replace").count("volume_by_tp.png") >= 1
    made = report.stat().st_mtime_ns

    # Nothing to do: Snakemake runs no job and the report stays as it was.
    again = sweeps.make(project, "run", "CONFIG=sweep.yaml")
    assert "Nothing to be done" in again.stdout + again.stderr
    assert "'results/report.html' is up to date" in again.stdout
    assert "--report" not in again.stdout
    assert report.stat().st_mtime_ns == made

    # A result removed by hand: the run remakes it, the check writes a new verdict, and the
    # report follows.
    (project / "results" / "plots" / "timeline.png").unlink()
    redone = sweeps.make(project, "run", "CONFIG=sweep.yaml")
    assert "--report results/report.html" in redone.stdout
    assert report.stat().st_mtime_ns > made
