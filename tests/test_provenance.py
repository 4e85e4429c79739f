"""The package side of trustworthy runs: external inputs, the run's name, stale outputs,
locks, limits, config overrides and rule commands (commsweep.orchestration.provenance, locks, limits,
configfile, pipeline). The Snakemake runs that use them are in test_trust.py."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import sweeps
from commsweep.base import paths
from commsweep.base.errors import ConfigError
from commsweep.orchestration import limits, locks, pipeline, provenance, sweep
from commsweep.setup import configfile
from commsweep.setup.models import resolve_model
from commsweep.setup.training import TrainingSetup
from commsweep.simulate.stage import RATIO_FILES
from commsweep.workload import generate

# -- external inputs ---------------------------------------------------------------------


def small_points(text: str = "", name: str = "small"):
    config = configfile.load([sweeps.path(name)], [text] if text else [])
    points, _ = sweep.points_from_config(config)
    return config, points


def make_simai(root: Path) -> Path:
    binary = root / "bin" / "SimAI_analytical"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    ratio = root / "astra-sim-alibabacloud" / "inputs" / "ratio"
    ratio.mkdir(parents=True)
    for name in RATIO_FILES:
        (ratio / name).write_text(f"{name}\n")
    return binary


def test_a_simai_root_is_checked_and_its_binary_and_ratio_tables_checksummed(tmp_path):
    config, points = small_points(f"simulator={{backend: simai, root: {tmp_path / 'simai'}}}")
    with pytest.raises(ConfigError, match=r"^simulator.root: .*/simai: SimAI checkout not found"):
        provenance.check_external(config, points)
    binary = make_simai(tmp_path / "simai")
    found = provenance.check_external(config, points)
    assert found["simulator.root"].digest == provenance.file_digest(binary)
    ratios = found["simulator.ratio_dir"]
    assert ratios.key == "simulator.root"  # the ratio tables of the SimAI checkout
    run = provenance.Run(config=config, inputs=found)
    words = run.job_provenance("simulator.root", "simulator.ratio_dir")
    assert words == [f"commsweep={run.commsweep}", f"simulator.root={binary and found['simulator.root'].digest}",
                     f"simulator.ratio_dir={ratios.digest}"]
    # A rebuilt binary or an edited table: new checksums, a new run.
    binary.write_text("#!/bin/sh\necho rebuilt\n")
    (binary.parents[1] / "astra-sim-alibabacloud/inputs/ratio/nic_ratio.csv").write_text("changed\n")
    again = provenance.check_external(config, points)
    assert again["simulator.root"].digest != found["simulator.root"].digest
    assert again["simulator.ratio_dir"].digest != ratios.digest
    assert provenance.Run(config=config, inputs=again).id != run.id
    binary.unlink()
    with pytest.raises(ConfigError, match=r"simulator.root: .*bin/SimAI_analytical: SimAI_analytical \(build SimAI"):
        provenance.check_external(config, points)


def test_an_aicb_root_is_checksummed_by_its_python_sources(tmp_path):
    root = tmp_path / "aicb"
    config, points = small_points(f"generator={{aicb_root: {root}}}", name="small")
    config["sweep"]["schedule"] = ["aicb"]
    points, _ = sweep.points_from_config(config)
    with pytest.raises(ConfigError, match="generator.aicb_root: .*/aicb: AICB checkout not found"):
        provenance.check_external(config, points)
    script = root / "workload_generator" / "SimAI_training_workload_generator.py"
    script.parent.mkdir(parents=True)
    script.write_text("print('workload')\n")
    (root / "results").mkdir()
    (root / "results" / "old.py").write_text("x = 1\n")
    first = provenance.check_external(config, points)["generator.aicb_root"].digest
    (root / "results" / "old.py").write_text("x = 2\n")  # AICB's own outputs are not its code
    (root / "README.md").write_text("docs\n")
    assert provenance.check_external(config, points)["generator.aicb_root"].digest == first
    script.write_text("print('workload, changed')\n")
    assert provenance.check_external(config, points)["generator.aicb_root"].digest != first
    # A megatron-schedule sweep does not run AICB: no check, no checksum.
    config["sweep"]["schedule"] = ["megatron"]
    points, _ = sweep.points_from_config(config)
    assert "generator.aicb_root" not in provenance.check_external(config, points)


def test_the_run_is_named_by_content_not_by_key_order_or_file_name(tmp_path):
    config, _ = small_points()
    reordered = json.loads(json.dumps(dict(reversed(list(config.items())))))
    a = provenance.Run(config=config, config_files=("a.yaml",))
    b = provenance.Run(config=reordered, config_files=("elsewhere/b.yaml",))
    assert a.id == b.id and len(a.id) == 12
    assert provenance.Run(config={**config, "skip_invalid": True}).id != a.id
    assert provenance.Run(config=config, commsweep="9.9").id != a.id
    record = json.loads(a.record())
    # Where the results go is not what they are made of: the same run, and the key not recorded.
    assert provenance.Run(config={**config, "results": "results/elsewhere"}).id == a.id
    assert record["run"] == a.id and record["config_files"] == ["a.yaml"]
    # (the sweep keys added later, at their defaults, are left out: the record reads as before them)
    assert record["config"] == provenance.without_quiet_defaults({k: v for k, v in config.items() if k != "results"})
    assert "overlap_grad_reduce" not in record["config"]["sweep"] and "overlap_grad_reduce" in config["sweep"]


def test_outputs_of_points_not_in_the_sweep_are_listed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, points = small_points()
    layout = paths.Layout()
    kept = points[0]
    for folder in (layout.point_dir(kept.point_key), layout.workload_dir(kept.workload_key),
                   layout.point_dir("old_point__netA"), layout.workload_dir("old_workload"),
                   layout.profile_dir("torch"), layout.profile_dir("roofline")):
        Path(folder).mkdir(parents=True)
    Path(layout.profile("roofline", "llama-3.1-8b_H100-SXM_tp2")).write_text("x")
    Path(layout.profile_status("roofline", "llama-3.1-8b_H100-SXM_tp2")).write_text("x")
    Path(layout.trace("gpt_tp2_pp1_sp0")).parent.mkdir(parents=True)
    Path(layout.trace_compare("gpt_tp2_pp1_sp0")).write_text("x")
    found = provenance.stale_outputs(layout, points[:1], backend="roofline", traces=())
    assert found == ["results/points/old_point__netA", "results/workloads/old_workload",
                     "results/aiob/roofline/llama-3.1-8b_H100-SXM_tp2.*", "results/aiob/torch",
                     "results/traces/gpt_tp2_pp1_sp0.*"]
    assert provenance.stale_outputs(layout, points[:1], backend="roofline", traces=["gpt_tp2_pp1_sp0"]) == found[:-1]


def test_traces_of_releases_not_in_the_sweep_are_listed(tmp_path, monkeypatch):
    """megatron_core: traces named <release>/<key>; a release no longer traced is stale whole,
    and so is a key of a traced release the sweep no longer has."""
    monkeypatch.chdir(tmp_path)
    _, points = small_points()
    layout = paths.Layout()
    for name in ("0.8.0/gpt_tp2_pp1_sp0", "0.8.0/gpt_tp4_pp1_sp0", "0.16.1/gpt_tp2_pp1_sp0"):
        Path(layout.trace(name)).parent.mkdir(parents=True, exist_ok=True)
        Path(layout.trace(name)).write_text("x")
        Path(layout.trace_status(name)).write_text("x")
    found = provenance.stale_outputs(layout, points[:1], backend="roofline", traces=["0.8.0/gpt_tp2_pp1_sp0"])
    assert found == ["results/traces/0.16.1", "results/traces/0.8.0/gpt_tp4_pp1_sp0.*"]
    assert provenance.stale_outputs(layout, points[:1], backend="roofline", traces=["gpt_tp2_pp1_sp0"]) == [
        "results/traces/0.16.1", "results/traces/0.8.0"]


# -- locks ---------------------------------------------------------------------------------


def lock(workdir: Path) -> None:
    folder = workdir / locks.LOCK_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "0.input.lock").write_text("results/sweep.csv\n")
    (folder / "0.output.lock").write_text("results/summary.csv\n")


def test_a_stale_lock_is_cleared(tmp_path):
    assert locks.clear_stale(tmp_path) is None  # no lock, nothing to say
    lock(tmp_path)
    holder = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / locks.HOLDER).parent.mkdir(parents=True)
    (tmp_path / locks.HOLDER).write_text(json.dumps(
        {"pid": int(holder.stdout), "host": socket.gethostname(), "started": "2026-01-01 10:00:00", "command": "snakemake"}))
    said = locks.clear_stale(tmp_path)
    assert said.startswith(f"cleared a stale lock left by Snakemake PID {int(holder.stdout)} on {socket.gethostname()}")
    assert not list((tmp_path / locks.LOCK_DIR).iterdir()) and not (tmp_path / locks.HOLDER).exists()


def test_a_live_snakemake_keeps_its_lock_and_is_named(tmp_path):
    """A real process running a program called snakemake, in the locked folder."""
    lock(tmp_path)
    fake = tmp_path / "bin" / "snakemake"
    fake.parent.mkdir()
    fake.write_text("import sys, time\nprint('up', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, str(fake), "--cores", "2"], cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "up\n"
        with pytest.raises(locks.LockHeld, match=rf"another Snakemake is running in .* \(PID {proc.pid}: .*snakemake "
                                                 r"--cores 2\); .*its lock is never broken"):
            locks.clear_stale(tmp_path)
    finally:
        proc.kill()
        proc.wait()
    assert len(list((tmp_path / locks.LOCK_DIR).iterdir())) == 2
    assert "cleared a stale lock" in locks.clear_stale(tmp_path)


def test_a_lock_taken_on_another_machine_is_never_broken(tmp_path):
    lock(tmp_path)
    (tmp_path / locks.HOLDER).parent.mkdir(parents=True)
    (tmp_path / locks.HOLDER).write_text(json.dumps(
        {"pid": 4242, "host": "login2", "started": "2026-01-01 10:00:00", "command": "snakemake --cores 2"}))
    with pytest.raises(locks.LockHeld, match="locked by Snakemake PID 4242 on login2, .*on another machine"):
        locks.clear_stale(tmp_path)
    assert len(list((tmp_path / locks.LOCK_DIR).iterdir())) == 2


# -- limits --------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["gpt-7b", "llama-7b", "mixtral-8x7b"])
@pytest.mark.parametrize("schedule", ["aicb", "megatron"])
def test_the_row_estimate_bounds_the_real_workload(model, schedule):
    for tp, pp, sp, mb, gb in [(1, 1, False, 1, 16), (2, 2, True, 1, 64), (8, 1, True, 2, 64), (4, 4, False, 1, 128)]:
        setup = TrainingSetup(model=resolve_model(model, {}), world_size=tp * pp * 2, tp=tp, pp=pp, ep=1, sp=sp,
                              micro_batch=mb, global_batch=gb, seq_length=2048, recompute=False)
        if setup.problems() or sweep.schedule_problems(setup, schedule):
            continue
        rows = len(generate.build(setup, schedule).rows)
        assert rows <= limits.workload_rows(setup) <= 6 * rows, (tp, pp, sp, mb, gb)


def test_points_over_a_limit_are_named_with_their_estimate():
    config = configfile.load([sweeps.path("small")], ["sweep={global_batch: [65536]}"])
    with pytest.raises(ConfigError) as err:
        sweep.points_from_config(config)
    lines = str(err.value).splitlines()
    assert lines[0] == ("limits: 4 point(s) over the limits, checked before any job; shrink them, or raise the limit "
                        "deliberately under limits: in the config")
    assert lines[1].startswith("  - gpt-7b_ws16_tp2_pp1_ep1_sp0_mb1_gb65536_seq2048_megatron__netA: about 2,228,224 "
                               "workload rows (8 per layer x 34 layers x 8,192 micro-batches)")
    config["limits"] = {"workload_rows": 5_000_000, "job_memory_mb": 16_000, "gpus": 2**31 - 1}
    assert len(sweep.points_from_config(config)[0]) == 4


# -- config files and --config -------------------------------------------------------------


def test_config_overrides_are_yaml_and_merge_like_snakemake():
    loaded = configfile.load([sweeps.path("small")], ["skip_invalid=true", 'sweep={"tp": [2, 3]}',
                                                      "analysis={timeline_point: null}"])
    assert loaded["skip_invalid"] is True
    assert loaded["sweep"]["tp"] == [2, 3] and loaded["sweep"]["model"] == ["gpt-7b"]  # merged, not replaced
    assert loaded["limits"] == limits.DEFAULTS  # defaults filled after the merge
    with pytest.raises(ConfigError, match=r"^--config sweep:1:8: invalid YAML"):
        configfile.load([], ["sweep={tp: [2}"])
    with pytest.raises(ConfigError, match=r"--config: skip_invalid: 'yes please' is not of type 'boolean'"):
        configfile.load([sweeps.path("small")], ["skip_invalid=yes please"])


def test_later_config_files_win_key_by_key(tmp_path):
    extra = tmp_path / "extra.yaml"
    extra.write_text("aiob: {gpu: A100-80GB}\n")
    loaded = configfile.load([sweeps.path("aiob-file"), extra])
    assert loaded["aiob"] == {"backend": "file", "file": "profiles/{profile}.txt", "gpu": "A100-80GB"}


# -- the rules' command lines ----------------------------------------------------------------


def test_rule_commands_expand_to_the_declared_files():
    from types import SimpleNamespace

    job = {"input": SimpleNamespace(sweep="s.csv", status=["a.status", "b.status"]),
           "output": ["o.csv", "st.status"], "params": SimpleNamespace(run="abc", attempt=2)}
    job["output"] = type("Out", (list,), {"status": "st.status"})(["o.csv", "st.status"])
    argv = pipeline.expand_command(["check", "--sweep", "<input.sweep>", "--status", "<input.status>", "--run",
                                    "<params.run>", "-o", "<output>", "--x=<input.sweep>"], job)
    assert argv == ["check", "--sweep", "s.csv", "--status", "a.status", "b.status", "--run", "abc", "-o", "o.csv",
                    "st.status", "--x=<input.sweep>"]
    with pytest.raises(KeyError, match="the rule has no input named 'nope'"):
        pipeline.expand_command(["<input.nope>"], job)


# -- simulate -g -----------------------------------------------------------------------------


def test_simulate_warns_or_fails_when_g_is_not_the_workloads_gpus(tmp_path):
    workload = tmp_path / "w.txt"
    run = lambda *a: subprocess.run([sys.executable, "-m", "commsweep", *a], capture_output=True, text=True)  # noqa: E731
    run("generate", "--tensor_model_parallel_size", "8", "--pipeline_model_parallel", "2", "--world_size", "16",
        "--schedule", "megatron", "-o", str(workload))
    net = ["-g_p_s", "8", "-n_p_s", "8", "-nv", "360", "-nic", "48.5", "-r", "x-", "--out-dir", str(tmp_path)]
    warned = run("simulate", "-w", str(workload), "-g", "8", *net)
    assert warned.returncode == 0
    assert ("warning: -g 8 differs from the workload's all_gpus: 16; SimAI then takes DP = floor(8 / (tp 8 x pp 2)) = 0, "
            "and drops every DP collective (--strict makes this an error)") in warned.stderr
    failed = run("simulate", "-w", str(workload), "-g", "24", "--strict", *net)
    assert failed.returncode == 2
    assert "error: -g 24 differs from the workload's all_gpus: 16; SimAI then takes DP = floor(24 / (tp 8 x pp 2)) = 1 " \
           "(24 is not a multiple of 16)" in failed.stderr
    assert "warning" not in run("simulate", "-w", str(workload), "-g", "16", "--strict", *net).stderr


def test_the_report_command_of_a_run_takes_its_config_files_and_overrides():
    assert provenance.report_command(["my sweep.yaml"]) == "make report CONFIG='my sweep.yaml'"
    # make report takes one config file and no overrides: Snakemake's own command takes both.
    assert provenance.report_command(["a.yaml", "b.yaml"]) == (
        ".venv/bin/snakemake --cores 2 --configfile a.yaml b.yaml --report results/report.html")
    assert provenance.report_command(["a.yaml"], ["analysis={timeline_point: x}"]) == (
        ".venv/bin/snakemake --cores 2 --configfile a.yaml --config 'analysis={timeline_point: x}' "
        "--report results/report.html")
    record = json.loads(provenance.Run(config={}, config_files=("a.yaml",), overrides=("tp=2",)).record())
    assert (record["config_files"], record["config_overrides"]) == (["a.yaml"], ["tp=2"])
