"""`commsweep profile` and the file backend: users' AIOB files, bad files, unknown GPUs,
and what the sweep passes to the profile jobs."""

from __future__ import annotations

import csv
import dataclasses
import subprocess
import sys

import pytest

from commsweep.aiob import backends
from commsweep.aiob import profile_file as pf
from commsweep.base.errors import ConfigError, InputError
from commsweep.orchestration import sweep


def profile(*args, check=True):
    return subprocess.run(
        [sys.executable, "-m", "commsweep", "profile", *args], capture_output=True, text=True, check=check
    )


GPT7B_TP2 = ["--model", "gpt-7b", "--world_size=8", "--tensor_model_parallel_size=2"]


def test_roofline_cli_writes_the_file_and_csv(tmp_path):
    out, table = tmp_path / "p.txt", tmp_path / "p.csv"
    profile("--backend", "roofline", "--gpu", "A100-80GB", *GPT7B_TP2, "--epoch_num=5", "-o", str(out), "--csv", str(table))
    p = pf.read(out, require_standard=True)
    assert p.train_iter == 5
    rows = list(csv.DictReader(table.open()))
    assert [r["section"] for r in rows] == list(pf.STANDARD_SECTIONS)
    assert {r["gpu"] for r in rows} == {"A100-80GB"} and {r["backend"] for r in rows} == {"roofline"}
    # The same command prints the file when no -o is given.
    assert profile("--gpu", "A100-80GB", *GPT7B_TP2, "--epoch_num=5").stdout == out.read_text()
    # An efficiency override changes the GEMMs.
    slower = profile("--gpu", "A100-80GB", *GPT7B_TP2, "--gemm_efficiency=0.4").stdout
    assert pf.parse(slower).get("atten_qkv").avg > p.get("atten_qkv").avg


def test_unknown_gpu_is_refused_with_the_known_ones(tmp_path):
    out = tmp_path / "p.txt"
    result = profile("--gpu", "V100", *GPT7B_TP2, "-o", str(out), check=False)
    assert result.returncode == 2
    assert "--gpu: unknown GPU type 'V100'; known: A100-40GB, A100-80GB, H100-SXM, H800, H20, H200, B200" in result.stderr
    assert not out.exists()
    listing = profile("--list_gpus").stdout
    assert "H20" in listing and "datasheet" in listing


def test_file_backend_copies_a_users_file_byte_for_byte(reference, tmp_path):
    example = reference("aicb", "aiob_inputs", "Example.txt")
    out, table = tmp_path / "p.txt", tmp_path / "p.csv"
    result = profile("--backend", "file", "--file", str(example), "--gpu", "H100-SXM", "--model", "llama-7b",
                     "-o", str(out), "--csv", str(table))
    assert out.read_bytes() == example.read_bytes()
    assert f"validated {example}" in result.stderr
    rows = {r["section"]: r for r in csv.DictReader(table.open())}
    assert rows["logit_time"]["time_gpu_avg"] == "12824"
    assert float(rows["logit_time"]["roofline_us"]) > 0 and rows["logit_time"]["backend"] == "file"
    # A GPU the table does not know is only a label here: no roofline columns.
    profile("--backend", "file", "--file", str(example), "--gpu", "MyGPU", "-o", str(out), "--csv", str(table))
    assert {r["roofline_us"] for r in csv.DictReader(table.open())} == {""}


def test_file_backend_accepts_aicb_unfused_attention(tmp_path):
    sections = [s for s in pf.STANDARD_SECTIONS if s != "atten_flash"] + list(backends._UNFUSED_ATTENTION)
    text = "train_iter:2\n" + "".join(
        f"{s}:\n    time_gpu_max: 3\n    time_gpu_min: 1\n    time_gpu_avg: 2.5\n" for s in sections
    )
    path = tmp_path / "unfused.txt"
    path.write_text(text)
    assert backends.read_user_file(path).get("atten_core_softmax").avg == 2.5


def _without(section: str) -> str:
    return "train_iter:1\n" + "".join(
        f"{s}:\n    time_gpu_max: 1\n    time_gpu_min: 1\n    time_gpu_avg: 1\n" for s in pf.STANDARD_SECTIONS if s != section
    )


@pytest.mark.parametrize(
    "text, words",
    [
        (_without("logit_time"), "field 'logit_time': missing sections: logit_time"),
        (_without("atten_flash"), "field 'atten_flash': missing sections: atten_flash"),
        ("train_iter:1\nEmb:\n    time_gpu_max: 1\n    time_gpu_min: 2\n    time_gpu_avg: 1\n",
         ":5: field 'time_gpu_avg': section 'Emb' needs time_gpu_min <= time_gpu_avg <= time_gpu_max"),
        ("Emb:\n", ":1: field 'train_iter'"),
        # A valid number, but AICB's reader would take the min of 0.1 as 1.
        (_without("").replace("time_gpu_min: 1\n    time_gpu_avg: 1\nparam_time", "time_gpu_min: 1e-1\n    time_gpu_avg: 1\nparam_time"),
         ":44: field 'time_gpu_min': AICB reads '1e-1' as 1; write times as plain decimals"),
    ],
)
def test_bad_user_files_are_refused_and_nothing_is_overwritten(tmp_path, text, words):
    bad = tmp_path / "bad.txt"
    bad.write_text(text)
    out = tmp_path / "p.txt"
    out.write_text("an earlier result\n")
    result = profile("--backend", "file", "--file", str(bad), "-o", str(out), "--csv", str(tmp_path / "p.csv"), check=False)
    assert result.returncode == 2
    assert str(bad) in result.stderr and words in result.stderr
    assert out.read_text() == "an earlier result\n"
    assert not (tmp_path / "p.csv").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left behind


def test_file_backend_needs_an_existing_file(tmp_path):
    result = profile("--backend", "file", "-o", str(tmp_path / "p.txt"), check=False)
    assert result.returncode == 2 and "the file backend needs an AIOB file" in result.stderr
    result = profile("--backend", "file", "--file", str(tmp_path / "nope.txt"), check=False)
    assert result.returncode == 2 and "nope.txt: no such file" in result.stderr


def test_profile_refuses_a_shard_that_cannot_exist():
    result = profile("--model", "gpt-7b", "--tensor_model_parallel_size=3", check=False)
    assert result.returncode == 2 and "tp=3 does not divide the 32 attention heads" in result.stderr


def _config(**aiob) -> dict:
    return {
        "sweep": {"model": ["gpt-7b"], "world_size": [16, 32], "tp": [2], "pp": [1, 2], "ep": [1], "sp": [True],
                  "aiob": [True], "schedule": ["megatron"], "micro_batch": [1], "global_batch": [32], "seq_length": [2048],
                  "recompute": [False], "network": ["n"]},
        "networks": {"n": {"gpus_per_server": 8, "nics_per_server": 8, "nvlink_gbps": 360, "nic_gbps": 48.5}},
        "aiob": aiob,
    }


def test_sweep_checks_the_aiob_block():
    with pytest.raises(ConfigError) as info:
        sweep.expand(_config(backend="roofline", gpu="V100"))
    assert str(info.value).startswith("aiob.gpu: unknown GPU type 'V100'; known: ")
    with pytest.raises(ConfigError, match="aiob.file: the file backend needs"):
        sweep.expand(_config(backend="file", gpu="H100-SXM"))
    # torch and file only use the name as a label.
    points, _ = sweep.expand(_config(backend="torch", gpu="MyGPU"))
    assert points and all(p.gpu == "MyGPU" for p in points)
    # With aiob off nothing is checked.
    config = _config(backend="roofline", gpu="V100")
    config["sweep"]["aiob"] = [False]
    assert sweep.expand(config)[0]


def test_points_sharing_a_profile_key_give_the_same_profile_arguments():
    from commsweep.setup.arguments import to_commsweep_argv

    points, _ = sweep.expand(_config(backend="roofline", gpu="H200"))
    keys = {p.profile_key for p in points}
    # World size does not enter the key; the pipeline stage's size does (param_time).
    assert keys == {"gpt-7b_H200_tp2_ep1_sp1_mb1_seq2048", "gpt-7b_H200_tp2_ep1_sp1_mb1_seq2048_pp2"}
    for key in keys:
        argvs = {tuple(to_commsweep_argv(backends.profile_setup(p.setup))) for p in points if p.profile_key == key}
        assert len(argvs) == 1
    p = points[0]
    assert backends.profile_setup(dataclasses.replace(p.setup, recompute=True)) == backends.profile_setup(p.setup)
    assert backends.user_file("profiles/{profile}.txt", p.profile_key) == f"profiles/{p.profile_key}.txt"


def test_read_user_file_names_the_file(tmp_path):
    with pytest.raises(InputError) as info:
        backends.read_user_file(tmp_path / "missing.txt")
    assert info.value.file == str(tmp_path / "missing.txt")
