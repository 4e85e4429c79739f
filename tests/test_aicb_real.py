"""The aicb schedule against real AICB, and the adapter that runs a user's AICB.

Runs only when AICB_ROOT points to an AICB checkout (aliyun/aicb, commit 23eec3c48ca2);
the Python running the tests runs AICB too (it needs numpy and pandas, which commsweep's
own dependencies bring). ``bench/aicb_parity.py`` compares many more configurations.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import yaml

from commsweep.aiob import profile_file
from commsweep.base.errors import ConfigError
from commsweep.orchestration.cli import build_parser
from commsweep.setup.models import PRESETS
from commsweep.setup.training import TrainingSetup
from commsweep.workload import aicb, aicb_runner
from commsweep.workload.stage import from_arguments

from conftest import REPO

ROOT = os.environ.get("AICB_ROOT")
SCRIPT = Path("workload_generator") / "SimAI_training_workload_generator.py"

pytestmark = pytest.mark.skipif(
    not ROOT or not (Path(ROOT) / SCRIPT).is_file(),
    reason="AICB_ROOT does not point to an AICB checkout (set AICB_ROOT=/path/to/aicb to compare with real AICB)",
)


def example() -> Path:
    return Path(ROOT) / "workload" / "aiob_inputs" / "Example.txt"


def real_aicb(argv: list[str]) -> tuple[bytes | None, str]:
    """AICB's file (or None) and its output, run in a fresh directory."""
    with tempfile.TemporaryDirectory() as work:
        proc = subprocess.run(
            [sys.executable, "-m", aicb_runner.MODULE, *argv], cwd=work, capture_output=True, text=True,
            env={**os.environ, "PYTHONPATH": ROOT},
        )
        files = list((Path(work) / "results" / "workload").glob("*.txt"))
        return (files[0].read_bytes() if proc.returncode == 0 and len(files) == 1 else None), proc.stdout + proc.stderr


GPT = "--num_layers=8 --hidden_size=4096 --num_attention_heads=32 --vocab_size=50257"
LLAMA = "--num_layers=8 --hidden_size=4096 --num_attention_heads=32 --ffn_hidden_size=11008 --vocab_size=32000 --swiglu"
MOE = (f"{LLAMA} --ffn_hidden_size=14336 --moe_enable --num_experts=8 --moe_router_topk=2 "
       "--enable_sequence_parallel")
AIOB = "--aiob_enable --comp_filepath={example}"
CONFIGS = [
    f"--world_size=16 --tensor_model_parallel_size={tp} --global_batch={16 // tp * ga} {model} {sp} {path}"
    for tp, ga in ((1, 1), (2, 3), (4, 2), (8, 4))
    for model in (GPT, LLAMA)
    for sp in ("", "--enable_sequence_parallel")
    for path in ("", AIOB)
] + [
    f"--world_size=32 --tensor_model_parallel_size=2 --pipeline_model_parallel={pp} --global_batch=21 "
    f"--micro_batch=2 {GPT} --enable_sequence_parallel --recompute_activations {path}"
    for pp in (1, 2, 4) for path in ("", AIOB)
] + [
    f"--world_size=16 --tensor_model_parallel_size={tp} --expert_model_parallel_size={ep} --global_batch=16 {MOE} {path}"
    for tp, ep in ((1, 1), (2, 4), (4, 2), (1, 8)) for path in ("", AIOB)
] + [
    f"--world_size=16 --tensor_model_parallel_size=2 {GPT} --recompute_activations {AIOB}",
    f"--world_size=16 --tensor_model_parallel_size=2 {LLAMA.replace('--swiglu', '')} --moe_enable --num_experts=4",
    "--world_size=12 --tensor_model_parallel_size=4 --pipeline_model_parallel=2 --num_layers=5 --global_batch=1",
]


@pytest.mark.parametrize("line", CONFIGS, ids=range(len(CONFIGS)))
def test_emulation_matches_real_aicb(line):
    argv = shlex.split(line.format(example=example()))
    theirs, output = real_aicb(argv)
    ns = build_parser().parse_args(["generate", *argv])
    if theirs is None:
        with pytest.raises(ConfigError):
            from_arguments(ns)
        return
    ours, _ = from_arguments(ns)
    assert ours.encode() == theirs


SETUPS = [
    TrainingSetup(model=PRESETS["gpt-7b"], world_size=16, tp=4, sp=True, global_batch=8),
    TrainingSetup(model=PRESETS["llama-7b"], world_size=16, tp=2, pp=2, global_batch=12, recompute=True),
    TrainingSetup(model=PRESETS["mixtral-8x7b"], world_size=16, tp=2, ep=4, sp=True, global_batch=8),
]


@pytest.mark.parametrize("aiob", [False, True], ids=["default", "aiob"])
@pytest.mark.parametrize("setup", SETUPS, ids=["gpt-7b", "llama-7b", "mixtral"])
def test_runner_writes_what_the_emulation_writes(setup, aiob, capsys):
    profile = example() if aiob else None
    text = aicb_runner.run(ROOT, setup, profile_path=profile)
    expected = aicb.generate(setup, profile_file.read(profile) if profile else None).render()
    assert text == expected
    assert "workload save in" in capsys.readouterr().err  # AICB's own output goes to the log


def test_runner_fails_with_aicbs_own_error(capsys):
    moe_no_sp = TrainingSetup(model=PRESETS["mixtral-8x7b"], world_size=16, tp=2, ep=2, global_batch=8)
    with pytest.raises(aicb_runner.AicbError, match="AssertionError: moe must be enabled with sequence parallel"):
        aicb_runner.run(ROOT, moe_no_sp)
    assert "Traceback" in capsys.readouterr().err


def test_parallel_runs_do_not_clash():
    # SP off and on, default and AIOB path: AICB gives all four the same file name.
    base = SETUPS[0]
    jobs = [(TrainingSetup(**{**base.__dict__, "sp": sp}), path) for sp in (False, True) for path in (None, example())]
    results: dict[int, str] = {}

    def work(i, setup, path):
        results[i] = aicb_runner.run(ROOT, setup, profile_path=path, log=open(os.devnull, "w"))

    threads = [threading.Thread(target=work, args=(i, *job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, (setup, path) in enumerate(jobs):
        assert results[i] == aicb.generate(setup, profile_file.read(path) if path else None).render()


def test_command_line_runs_the_users_aicb(tmp_path):
    out = tmp_path / "w.txt"
    args = ["generate", "--aicb-root", ROOT, "--world_size=16", "--tensor_model_parallel_size=2",
            "--enable_sequence_parallel", "--aiob_enable", f"--comp_filepath={example()}"]
    result = subprocess.run([sys.executable, "-m", "commsweep", *args, "-o", str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "comp_filepath:" in result.stderr  # AICB's own print
    emulated = subprocess.run([sys.executable, "-m", "commsweep", *args[:1], *args[3:]], capture_output=True,
                              text=True, check=True).stdout
    assert out.read_text() == emulated
    failed = subprocess.run([sys.executable, "-m", "commsweep", "generate", "--aicb-root", ROOT, "--moe_enable"],
                            capture_output=True, text=True)
    assert failed.returncode == 2
    assert "AICB failed (exit 1): AssertionError: moe must be enabled with sequence parallel" in failed.stderr


@pytest.mark.slow
def test_sweep_with_the_users_aicb(tmp_path):
    cfg = tmp_path / "aicb.yaml"
    cfg.write_text(yaml.safe_dump({
        "sweep": {"model": ["gpt-13b"], "tp": [2], "sp": [False, True], "schedule": ["aicb"], "global_batch": [8]},
        "generator": {"aicb_root": ROOT},
    }))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(
        [str(Path(sys.executable).with_name("snakemake")), "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path),
         "--cores", "2", "--configfile", str(cfg)],
        check=True, capture_output=True, text=True, env=env, timeout=600,
    )
    for sp in (0, 1):
        key = f"gpt-13b_ws16_tp2_pp1_ep1_sp{sp}_mb1_gb8_seq2048_aicb"
        setup = TrainingSetup(model=PRESETS["gpt-13b"], world_size=16, tp=2, sp=bool(sp), global_batch=8)
        assert (tmp_path / "results" / "workloads" / key / "workload.txt").read_text() == aicb.generate(setup).render()
        logs = "".join(p.read_text() for p in (tmp_path / "results" / "logs" / "batch").glob("*.log"))
        assert f"== generate {key} " in logs and "workload save in" in logs
