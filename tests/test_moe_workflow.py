"""MoE sweeps through the workflow: config/moe.yaml plans every point with an audit, and a
small MoE sweep runs end to end with its figure of bytes per group."""

from __future__ import annotations

import csv

import pytest

import sweeps
from commsweep.orchestration import sweep
from conftest import REPO


def test_moe_sweep_plans_an_audit_for_every_point_and_the_group_figure(tmp_path):
    config = REPO / "config" / "moe.yaml"
    points, invalid = sweep.points_from_config(sweep.load_config(config))
    assert {p.model for p in points} == {"mixtral-8x7b", "qwen1.5-moe-a2.7b"}
    assert {p.ep for p in points} == {2, 4} and {p.schedule for p in points} == {"aicb", "megatron"}
    # What AICB and megatron-core refuse is listed, not run: MoE without SP (AICB), TP > 1 without SP (megatron).
    assert invalid and all(not v.values["sp"] for v in invalid)
    result = sweeps.run(tmp_path, "--configfile", str(config), "--dry-run")
    jobs = {row[0]: int(row[1]) for row in (line.split() for line in result.stdout.splitlines())
            if len(row) == 2 and row[1].isdigit()}
    assert jobs["figures"] == 1 and "results/plots/volume_by_group.png" in result.stdout
    assert sweeps.todo(tmp_path, config)["audit"] == sweeps.planned(result)["points"] == len(points)


@pytest.mark.slow
def test_small_moe_sweep_runs_end_to_end(tmp_path):
    cfg = sweeps.write_config(tmp_path, "moe")
    sweeps.run(tmp_path, "--configfile", str(cfg))
    results = tmp_path / "results"
    assert (results / "status.txt").read_text().startswith("all 4 point(s) ok")
    with open(results / "summary.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    megatron = {(r["phase"], r["collective"], r["group"]) for r in rows if r["schedule"] == "megatron"}
    assert {("fwd", "alltoall", "EP"), ("ig", "alltoall", "EP"), ("wg", "reducescatter", "DP_EP"),
            ("wg", "allgather", "DP_EP")} <= megatron
    with open(results / "findings.csv", newline="") as fh:
        findings = list(csv.DictReader(fh))
    aicb = [f for f in findings if "_aicb__" in f["point"]]
    assert {f["expected_name"] for f in aicb} >= {"layer0_moe_dispatch_probs", "dp_ep_grad_reducescatter"}
    assert not [f for f in findings if "_megatron__" in f["point"]]  # the Megatron workloads audit clean
    assert (results / "plots" / "volume_by_group.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
