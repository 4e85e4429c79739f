"""The AIOB rules in the workflow: one profile per key, shared by points, fed to the workload."""

from __future__ import annotations

import shutil

import pytest
import sweeps
from test_workflow import snakemake

from commsweep.aiob import profile_file as pf
from commsweep.orchestration import sweep
from commsweep.workload import format as wf

from conftest import REPO

def test_default_sweep_makes_roofline_profiles(tmp_path):
    result = snakemake(tmp_path, "--configfile", str(REPO / "config" / "config.yaml"), "--dry-run")
    points, _ = sweep.points_from_config(sweep.load_config(REPO / "config" / "config.yaml"))
    keys = {p.profile_key for p in points if p.aiob}
    # Two networks and two values of aiob, one profile per TP and SP.
    assert len(keys) == 8 < len(points)
    assert sweeps.planned(result)["profiles"] == len(keys)
    assert sweeps.todo(tmp_path, REPO / "config" / "config.yaml")["profile_roofline"] == len(keys)


def test_unknown_gpu_fails_before_any_job(tmp_path):
    sweeps.fails_before_any_job(tmp_path, "bad-gpu", "aiob.gpu: unknown GPU type 'V100'; known: A100-40GB")


@pytest.mark.slow
def test_torch_profiles_feed_the_workloads(tmp_path):
    pytest.importorskip("torch", reason="PyTorch is not installed (pip install '.[torch]')")
    cfg = sweeps.write_config(tmp_path, "torch")
    snakemake(tmp_path, "--configfile", str(cfg))
    results = tmp_path / "results"
    profiles = sorted((results / "aiob" / "torch").glob("*.txt"))
    # Two world sizes, one profile.
    assert [p.name for p in profiles] == ["tiny_H100-SXM_tp2_ep1_sp1_mb1_seq128.txt"]
    profile = pf.read(profiles[0], require_standard=True)
    assert profiles[0].with_suffix(".csv").exists()
    assert "== profile_torch " in "".join(p.read_text() for p in (results / "logs" / "batch").glob("*.log"))
    for workload in (results / "workloads").glob("*_aiob/workload.txt"):
        rows = {r.name: r for r in wf.read(workload).rows}
        emb_ns = round(float(profile.get("Emb").avg) * 1000)
        assert rows["embedding_layer"].fwd_compute == emb_ns
    again = snakemake(tmp_path, "--configfile", str(cfg))
    assert "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.slow
def test_file_backend_takes_one_file_per_profile(reference, tmp_path):
    example = reference("aicb", "aiob_inputs", "Example.txt")
    mine = tmp_path / "profiles"
    mine.mkdir()
    keys = ["gpt-7b_A100-80GB_tp1_ep1_sp0_mb1_seq2048", "gpt-7b_A100-80GB_tp2_ep1_sp0_mb1_seq2048"]
    for key in keys:
        shutil.copy(example, mine / f"{key}.txt")
    cfg = sweeps.write_config(tmp_path, "aiob-example")
    snakemake(tmp_path, "--configfile", str(cfg))
    for key in keys:
        assert (tmp_path / "results" / "aiob" / "file" / f"{key}.txt").read_bytes() == example.read_bytes()
