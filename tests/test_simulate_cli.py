"""`commsweep simulate` (SimAI's flags) and the simulate stage of the workflow."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

import simai_runs
import sweeps
from commsweep.orchestration.cli import main
from commsweep.workload import format as wf
from conftest import REPO

COMMSWEEP = Path(sys.executable).with_name("commsweep")


def run_by_name(name: str):
    runs = [r for r in simai_runs.load_runs() if r.name == name]
    if not runs:
        pytest.skip(f"reference run {name} not found under {simai_runs.ENDTOEND}")
    return runs[0]


def simai_argv(run, out_dir: Path, *extra: str) -> list[str]:
    return run.simulate_argv("--out-dir", str(out_dir), *extra)


def test_simulate_writes_simai_files(tmp_path, capsys):
    run = run_by_name("example_workload_analytical__netA")
    assert main(simai_argv(run, tmp_path, "--ratio-dir", str(simai_runs.RATIO_DIR))) == 0
    assert (tmp_path / f"{run.prefix}EndToEnd.csv").read_bytes() == run.endtoend.read_bytes()
    with open(tmp_path / f"{run.prefix}collectives.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    # One line per collective the workload declares (counted by the workload reader, not the engine).
    assert len(rows) == len(list(wf.collectives(wf.read(run.workload), int(run.flags["-g"]))))
    assert rows[0]["group"] == "DP" and rows[0]["group_size"] == "384"
    assert f"ratio tables: {simai_runs.RATIO_DIR}" in capsys.readouterr().err


def test_console_script_with_single_dash_flags(tmp_path):
    """The installed command, with SimAI's spelling of every flag (and the long ones)."""
    run = run_by_name("example_microAllReduce__netA")
    argv = [str(COMMSWEEP), "simulate", "-w", str(run.workload), "-g", "8", "--gpus-per-server", "8",
            "-n_p_s", "8", "--nvlink", "360", "-nic", "48.5", "-r", run.prefix, "-tp_o", "0", "-pp_o", "1",
            "--ratio-dir", str(simai_runs.RATIO_DIR), "--endtoend", str(tmp_path / "e.csv"),
            "--collectives", str(tmp_path / "c.csv")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "e.csv").read_text() == run.endtoend.read_text()


def test_default_ratios_are_announced(tmp_path, capsys):
    run = run_by_name("example_microAllReduce__netA")
    assert main(simai_argv(run, tmp_path)) == 0
    assert "ratio tables: built-in default (efficiency 1.0" in capsys.readouterr().err


def test_bug_modes_on_the_command_line(tmp_path, capsys):
    run = run_by_name("gpt7b_ws16_tp1_pp1_seq2048_mbs1_ga1_sp0_aiob__netA")
    out = tmp_path / f"{run.prefix}EndToEnd.csv"
    out.write_text("an earlier result\n")
    assert main(simai_argv(run, tmp_path, "--ratio-dir", str(simai_runs.RATIO_DIR), "--simai-bugs", "error")) == 2
    err = capsys.readouterr().err
    assert "one-gpu-group" in err and "row 3 (layernorm ig)" in err
    assert out.read_text() == "an earlier result\n"  # nothing written on failure
    assert main(simai_argv(run, tmp_path, "--ratio-dir", str(simai_runs.RATIO_DIR))) == 0
    assert "warning: SimAI bug 'one-gpu-group'" in capsys.readouterr().err
    assert main(simai_argv(run, tmp_path, "--ratio-dir", str(simai_runs.RATIO_DIR), "--simai-bugs", "reproduce")) == 0
    assert out.read_text() == run.endtoend.read_text()


def test_bad_flags(tmp_path, capsys):
    run = run_by_name("example_microAllReduce__netA")
    argv = simai_argv(run, tmp_path)
    without = argv[:argv.index("-g_p_s")] + argv[argv.index("-g_p_s") + 2:]
    with pytest.raises(SystemExit) as exit_:
        main(without)
    assert exit_.value.code == 2 and "-g_p_s" in capsys.readouterr().err
    bad = [v if v != "360" else "fast" for v in argv]
    with pytest.raises(SystemExit):
        main(bad)
    assert "expected a number, got 'fast'" in capsys.readouterr().err
    assert main(argv + ["--backend", "simai"]) == 2
    assert "needs the root of a built SimAI" in capsys.readouterr().err
    assert main(argv[:argv.index("-n_p_s") + 1] + ["0"] + argv[argv.index("-n_p_s") + 2:]) == 2
    assert "nics_per_server: must be a positive integer" in capsys.readouterr().err


# -- the workflow ------------------------------------------------------------------------------


from test_workflow import snakemake  # noqa: E402


def test_one_simulation_per_point(tmp_path):
    config = REPO / "config" / "config.yaml"
    result = snakemake(tmp_path, "--configfile", str(config), "--dry-run")
    from commsweep.orchestration import sweep

    points, _ = sweep.points_from_config(sweep.load_config(config))
    assert len({p.network for p in points}) > 1  # the default sweep shares workloads across networks
    planned = sweeps.planned(result)
    assert planned["points"] == len(points) and planned["workloads"] == len(points) // 2
    todo = sweeps.todo(tmp_path, config)
    assert todo["simulate"] == len(points) and todo["generate"] == todo["volumes"] == len(points) // 2


@pytest.mark.slow
def test_simulated_times_join_the_summary(tmp_path):
    if not simai_runs.RATIO_DIR.exists():
        pytest.skip("SimAI's ratio tables not found")
    cfg = sweeps.write_config(tmp_path, "networks")
    assert f"ratio_dir: {simai_runs.RATIO_DIR}\n" in cfg.read_text()
    snakemake(tmp_path, "--configfile", str(cfg))
    results = tmp_path / "results"
    with open(results / "summary.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["network"] for r in rows} == {"netA", "netB"}
    for r in rows:
        assert float(r["sim_total_us"]) > 0
        assert int(r["sim_total_us"]) >= int(r["sim_compute_us"]) + int(r["sim_exposed_us"]) - 1
        if r["group"] in ("TP", "DP"):
            assert float(r["time_us"]) > 0
        if r["group"] == "DP":
            assert float(r["exposed_us"]) < float(r["time_us"])  # dp overlap 0.5
    point = rows[0]["point"]
    assert (results / "points" / point / "EndToEnd.csv").read_text().startswith("File name, ")
    logs = "".join(p.read_text() for p in (results / "logs" / "batch").glob("*.log"))
    assert f"== simulate {point} " in logs and f"ratio tables: {simai_runs.RATIO_DIR}" in logs
    assert list((results / "benchmarks" / "batch").glob("*.tsv"))


def test_a_one_off_simulation_writes_into_the_current_directory(tmp_path, monkeypatch):
    """Without --out-dir, a simulation run from a sweep's folder leaves its results/ alone."""
    run = run_by_name("example_microAllReduce__netA")
    monkeypatch.chdir(tmp_path)
    assert main(run.simulate_argv()) == 0
    assert (tmp_path / f"{run.prefix}EndToEnd.csv").read_bytes() == run.endtoend.read_bytes()
    assert (tmp_path / f"{run.prefix}collectives.csv").is_file()
    assert not (tmp_path / "results").exists()


def test_the_usage_line_shows_the_network_flags_required_unless_ns3(capsys):
    with pytest.raises(SystemExit) as done:
        main(["simulate", "--help"])
    assert done.value.code == 0
    usage = capsys.readouterr().out.split("\n\n")[0]
    for shown in ("-g_p_s GPUS_PER_SERVER", "-n_p_s NICS_PER_SERVER", "-nv NVLINK_GBPS", "-nic NIC_GBPS"):
        assert shown in usage and f"[{shown}]" not in usage, shown
    assert "required unless --backend ns3" in usage
