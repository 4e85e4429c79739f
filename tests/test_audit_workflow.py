"""The audit stage in the Snakemake workflow: per-point audits, the comparison, the figures
and the HTML report with their captions."""

from __future__ import annotations

import csv

import pytest

import sweeps
from conftest import REPO
from test_workflow import snakemake


def test_dry_run_plans_an_audit_per_point_and_the_figures(tmp_path):
    config = REPO / "config" / "config.yaml"
    result = snakemake(tmp_path, "--configfile", str(config), "--dry-run")
    for rule in ("batch", "compare", "figures"):
        assert rule in result.stdout
    # One job draws every figure.
    for figure in ("tp_bytes_by_phase", "exposed_by_group", "timeline", "audit_by_kind"):
        assert f"results/plots/{figure}.png" in result.stdout
    assert sweeps.todo(tmp_path, config)["audit"] == sweeps.planned(result)["points"] == 64


def test_an_unknown_timeline_point_fails_before_any_job(tmp_path):
    sweeps.fails_before_any_job(tmp_path, "bad-timeline-point", "analysis.timeline_point: 'nowhere' is not a point of this sweep",
                                "--dry-run")


@pytest.mark.slow
def test_small_sweep_audits_compares_and_reports(tmp_path):
    cfg = sweeps.write_config(tmp_path, "audit")
    snakemake(tmp_path, "--configfile", str(cfg))
    results = tmp_path / "results"
    audits = sorted(results.glob("points/*/audit.csv"))
    assert len(audits) == 4
    # The Megatron schedule audits clean: only the header in every audit, in findings.csv
    # (the point's key, then the audit's columns) and in the totals per point and kind.
    for path in [*audits, results / "findings.csv", results / "findings_by_kind.csv"]:
        assert len(path.read_text().splitlines()) == 1
    assert (results / "findings.csv").read_text().startswith("point,row,layer,phase,kind,")
    with open(results / "verdicts.csv", newline="") as fh:
        verdicts = list(csv.DictReader(fh))
    assert len(verdicts) == 4 and {v["matches_megatron"] for v in verdicts} == {"yes"}
    with open(results / "comparison.csv", newline="") as fh:
        comparison = list(csv.DictReader(fh))
    assert {r["tp"] for r in comparison} == {"1", "2"} and all(r["megatron"] for r in comparison
                                                             if r["quantity"] == "payload_bytes")
    for name in ("tp_bytes_by_phase", "exposed_by_group", "timeline", "audit_by_kind"):
        assert (results / "plots" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "== audit " in "".join(p.read_text() for p in (results / "logs" / "batch").glob("*.log"))
    assert list((results / "benchmarks" / "batch").glob("*.tsv"))
    snakemake(tmp_path, "--configfile", str(cfg), "--report", str(results / "report.html"))
    html = (results / "report.html").read_text()
    for caption in ("Tensor-parallel bytes per iteration", "One simulated iteration", "Every finding of the audit",
                    "The audit summed per point and kind"):
        assert caption in html
