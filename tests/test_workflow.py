"""The Snakemake workflow: a dry run of the default sweep and a real run of a small one."""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path

import pytest

import sweeps
from conftest import REPO


def snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run the project's workflow in ``workdir`` (see tests/sweeps.py)."""
    return sweeps.run(workdir, *args, check=check)


def test_default_sweep_dry_run(tmp_path):
    result = snakemake(tmp_path, "--configfile", str(REPO / "config" / "config.yaml"), "--dry-run")
    assert "rule tables:" in result.stdout and "results/steps/summarize.status" in result.stdout
    assert "results/plots/volume_by_tp.png" in result.stdout


def test_invalid_sweep_fails_before_any_job(tmp_path):
    sweeps.fails_before_any_job(tmp_path, "bad-tp", "tp=3 does not divide the 32 attention heads")


@pytest.mark.slow
def test_small_sweep_runs_end_to_end(tmp_path):
    cfg = sweeps.write_config(tmp_path, "small")
    snakemake(tmp_path, "--configfile", str(cfg))
    results = tmp_path / "results"
    with open(results / "summary.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["tp"] for r in rows} == {"2", "4"}
    assert {r["sp"] for r in rows} == {"False", "True"}
    assert {(r["phase"], r["group"]) for r in rows} >= {("fwd", "TP"), ("ig", "TP"), ("wg", "DP")}
    assert (results / "plots" / "volume_by_tp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The per-point work ran in batches: one log and one benchmark each, a manifest each.
    logs = sorted((results / "logs" / "batch").glob("*.log"))
    assert logs and len(logs) == len(list((results / "benchmarks" / "batch").glob("*.tsv")))
    assert [p.stem for p in logs] == sorted(p.stem for p in (results / "batches").glob("*.json"))
    assert "== generate " in "".join(p.read_text() for p in logs)
    # Nothing changed: a rerun has nothing to do.
    again = snakemake(tmp_path, "--configfile", str(cfg))
    assert "Nothing to be done" in again.stdout + again.stderr


def test_a_given_sweep_replaces_the_default_one(tmp_path):
    """--configfile replaces config/config.yaml: keys it leaves out take the schema's defaults."""
    from commsweep.orchestration import sweep

    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text((REPO / "config" / "config.yaml").read_text())
    mine = sweeps.write_config(tmp_path, "partial")
    # Not the default sweep's AIOB, schedules and networks: 2 points, 2 workloads.
    planned = sweeps.planned(snakemake(tmp_path, "--configfile", str(mine), "--dry-run"))
    assert (planned["points"], planned["workloads"], planned["profiles"]) == (2, 2, 0)
    default_points, _ = sweep.points_from_config(sweep.load_config(REPO / "config" / "config.yaml"))
    assert sweeps.planned(snakemake(tmp_path, "--dry-run"))["points"] == len(default_points)


def test_every_test_sweep_says_what_it_covers_and_a_test_runs_it():
    """tests/sweeps/*.yaml: a first line on what the sweep covers, and a test that names it
    (.ci/workflow_checks.py dry-runs each one)."""
    sources = "".join(p.read_text() for p in (REPO / "tests").glob("test_*.py"))
    for name in sweeps.names():
        assert len(sweeps.covers(name)) > 20, name
        assert f'"{name}"' in sources, f"tests/sweeps/{name}.yaml: no test uses it"
