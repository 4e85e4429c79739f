"""The `commsweep` command line as a user runs it."""

from __future__ import annotations

import subprocess
import sys

import sweeps
from commsweep.workload import format as wf


def run(*args, check=True):
    return subprocess.run([sys.executable, "-m", "commsweep", *args], capture_output=True, text=True, check=check)


def test_generate_megatron_to_file_and_stdout(tmp_path):
    out = tmp_path / "w.txt"
    args = ["generate", "--schedule", "megatron", "--model", "gpt-7b", "--world_size=16",
            "--tensor_model_parallel_size=4", "--global_batch=8", "--enable_sequence_parallel"]
    run(*args, "-o", str(out))
    workload = wf.read(out)
    assert workload.header.tp == 4 and workload.header.ga == 2
    assert run(*args).stdout == out.read_text()


def test_generate_rejects_inconsistent_arguments():
    result = run("generate", "--schedule", "megatron", "--world_size=10", "--tensor_model_parallel_size=4", check=False)
    assert result.returncode == 2
    assert "world_size=10 is not divisible by tp*pp=4" in result.stderr


def test_generate_rejects_unknown_arguments():
    result = run("generate", "--schedule", "megatron", "--wrld_size=8", check=False)
    assert result.returncode == 2
    assert "unrecognized arguments: --wrld_size=8" in result.stderr


def test_aiob_without_profile_is_explained():
    result = run("generate", "--schedule", "megatron", "--aiob_enable", check=False)
    assert result.returncode == 2
    assert "--aiob_enable needs --comp_filepath" in result.stderr


def test_sweep_lists_points(tmp_path):
    cfg = sweeps.path("skip-invalid")
    result = run("sweep", str(cfg))
    assert result.stdout.startswith("2 valid point(s), 1 invalid combination(s)")
    table = tmp_path / "t.csv"
    run("sweep", str(cfg), "--table", str(table))
    assert "skipped: tp=3 does not divide the 32 attention heads" in table.read_text()


def test_sweep_reports_bad_config():
    cfg = sweeps.path("bad-type")
    result = run("sweep", str(cfg), check=False)
    assert result.returncode == 2
    assert f"{cfg}: sweep.tp[0]: 'one' is not of type 'integer'" in result.stderr
