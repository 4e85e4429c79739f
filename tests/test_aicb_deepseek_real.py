"""AICB's DeepSeek frame against real AICB: randomized command lines, every byte and every refusal.

Runs only when AICB_ROOT points to an AICB checkout (aliyun/aicb, commit 23eec3c48ca2).
``COMMSWEEP_DEEPSEEK_CASES`` command lines (default 60, kept small for CI) are drawn with the
seed ``COMMSWEEP_DEEPSEEK_SEED`` (default 23) over everything the frame reads: TP, EP, PP, SP,
micro-batch, gradient accumulation, recompute, biases, the MLA ranks and head widths, shared
experts and dense layers, ``--moe_enable`` or not, default and AIOB paths, and values AICB
refuses or crashes on. Real AICB runs them all in one process (``runpy``, one fresh working
directory per line: AICB's start-up is most of its time), then commsweep: the file AICB
writes must be commsweep's byte for byte, and where AICB writes none, commsweep must refuse.
"""

from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from commsweep.aiob import gpus, mla, profile_file, roofline
from commsweep.base.errors import ConfigError
from commsweep.orchestration.cli import build_parser
from commsweep.setup.arguments import setup_from_args
from commsweep.setup.models import PRESETS
from commsweep.setup.training import TrainingSetup
from commsweep.workload import aicb
from commsweep.workload.stage import from_arguments

ROOT = os.environ.get("AICB_ROOT")
SCRIPT = Path("workload_generator") / "SimAI_training_workload_generator.py"
CASES = int(os.environ.get("COMMSWEEP_DEEPSEEK_CASES", "60"))
SEED = int(os.environ.get("COMMSWEEP_DEEPSEEK_SEED", "23"))

pytestmark = pytest.mark.skipif(
    not ROOT or not (Path(ROOT) / SCRIPT).is_file(),
    reason="AICB_ROOT does not point to an AICB checkout (set AICB_ROOT=/path/to/aicb to compare with real AICB)",
)

# Runs real AICB's generator as ``python -m`` would, once per command line, in one process.
DRIVER = r"""
import base64, contextlib, io, json, os, runpy, sys, tempfile
results = []
for argv in json.load(sys.stdin):
    with tempfile.TemporaryDirectory() as work:
        os.chdir(work)
        sys.argv = ["SimAI_training_workload_generator.py", *argv]
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                runpy.run_module("workload_generator.SimAI_training_workload_generator", run_name="__main__")
            names = os.listdir("results/workload")
            data = open(os.path.join("results/workload", names[0]), "rb").read() if len(names) == 1 else None
            counts = [line for line in out.getvalue().splitlines() if line.isdigit()]
            results.append({"file": base64.b64encode(data).decode() if data else None, "error": None,
                             "params": int(counts[0]) if counts else None})
        except BaseException as err:  # an assert, a crash, or argparse's SystemExit
            results.append({"file": None, "error": f"{type(err).__name__}: {err}"})
        os.chdir("/")
sys.__stdout__.write(json.dumps(results))
"""


def real_aicb(lines: list[list[str]]) -> list[dict]:
    proc = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps(lines), capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT}, check=True)
    return json.loads(proc.stdout)


def mla_profile(tmp: Path) -> Path:
    """AICB's example AIOB file plus the five per-layer MLA sections its DeepSeek AIOB model writes."""
    example = profile_file.read(Path(ROOT) / "workload" / "aiob_inputs" / "Example.txt")
    text = profile_file.render(example).rstrip("\n") + "\n"
    for i, name in enumerate(aicb.PER_LAYER_KEYS):
        text += f"{name}:\n    time_gpu_max: {900 + i}\n    time_gpu_min: {800 + i}\n    time_gpu_avg: {850.4 + 7 * i}\n"
    path = tmp / "mla.txt"
    path.write_text(text)
    return path


def roofline_profile(tmp: Path) -> Path:
    """commsweep's own roofline profile of a DeepSeek model (AICB's DeepSeek sections)."""
    s = TrainingSetup(model=PRESETS["deepseek-tiny"], world_size=2, tp=2, sp=True)
    path = tmp / "roofline.txt"
    profile_file.write(roofline.profile(s, gpus.gpu("H100-SXM"))[0], path)
    return path


def random_line(rng: random.Random, profiles: list[Path]) -> list[str]:
    """One DeepSeek command line: mostly valid, sometimes what AICB refuses or crashes on."""
    tp, pp, dp = rng.choice([1, 1, 2, 2, 4]), rng.choice([1, 1, 2, 3]), rng.choice([1, 2, 4])
    world = tp * pp * dp + (rng.choice([1, 2]) if rng.random() < 0.05 else 0)
    heads = rng.choice([4, 6, 8, 5])
    argv = [
        "--frame=DeepSeek", f"--world_size={world}", f"--tensor_model_parallel_size={tp}",
        f"--pipeline_model_parallel={pp}", f"--num_layers={rng.randint(1, 7)}",
        f"--hidden_size={rng.choice([96, 128, 256])}", f"--num_attention_heads={heads}",
        f"--seq_length={rng.choice([64, 128, 256])}", f"--micro_batch={rng.choice([1, 1, 2])}",
        f"--global_batch={rng.choice([1, 2, 4, 8, 12, 16, 32])}", f"--vocab_size={rng.choice([1000, 4096, 32000])}",
    ]
    if rng.random() < 0.9:
        argv.append(f"--ffn_hidden_size={rng.choice([64, 96, 128, 90, 48])}")
    ep = rng.choice([1, 2, 2, 4])
    if ep > 1 or rng.random() < 0.3:
        argv.append(f"--expert_model_parallel_size={ep}")
    if rng.random() < 0.9:  # mostly a multiple of EP
        experts = ep * rng.choice([1, 2, 3]) if rng.random() < 0.85 else rng.choice([1, 2, 6])
        argv.append(f"--num_experts={experts}")
    if rng.random() < 0.8:
        argv.append(f"--moe_router_topk={rng.choice([1, 2, 4])}")
    for flag, values in (("--n_dense_layers", [0, 1, 1, 2, 5]), ("--n_shared_expert", [0, 1, 2]),
                         ("--q_lora_rank", [0, 24, 48]), ("--kv_lora_rank", [16, 32]), ("--qk_nope_dim", [8, 16, 9]),
                         ("--qk_rope_dim", [4, 8]), ("--v_head_dim", [8, 12, 16, 6])):
        if rng.random() < 0.85:  # left out: AICB's default (1536, 512, ... for the MLA widths)
            argv.append(f"{flag}={rng.choice(values)}")
    sp = rng.random() < 0.7
    if sp:
        argv.append("--enable_sequence_parallel")
    if rng.random() < (0.85 if sp else 0.25):
        argv.append("--moe_enable")
    for flag, p in (("--recompute_activations", 0.3), ("--add_bias_linear", 0.3), ("--swiglu", 0.1)):
        if rng.random() < p:
            argv.append(flag)
    if rng.random() < 0.05:
        argv.append("--dtype=float16")
    if rng.random() < 0.05:
        argv.append("--moe_grouped_gemm")
    if rng.random() < 0.1:
        argv.append(f"--make_vocab_size_divisible_by={rng.choice([64, 100])}")
    if rng.random() < 0.7:
        argv += ["--aiob_enable", f"--comp_filepath={rng.choice(profiles)}"]
    return argv


# The AICB errors commsweep's refusal quotes, each with the AICB text that identifies it.
QUOTED = ("moe must be enabled with sequence parallel", "'NoneType' object has no attribute 'keys'",
          "'SIMAI_workload' object has no attribute 'expert_model_parallel_size'")


def test_randomized_deepseek_lines_match_real_aicb(tmp_path):
    profiles = [Path(ROOT) / "workload" / "aiob_inputs" / "Example.txt", mla_profile(tmp_path),
                roofline_profile(tmp_path)]
    rng = random.Random(SEED)
    lines = [random_line(rng, profiles) for _ in range(CASES)]
    theirs = real_aicb(lines)
    written = refused = 0
    mismatches = []
    for argv, result in zip(lines, theirs):
        ns = build_parser().parse_args(["generate", *argv])
        try:
            ours, _ = from_arguments(ns)
        except ConfigError as err:
            ours, why = None, str(err)
        if result["file"] is None:
            quoted = [q for q in QUOTED if q in result["error"]]
            if ours is not None or any(q not in why for q in quoted):
                mismatches.append((argv, f"AICB: {result['error']}; commsweep: {why if ours is None else 'wrote a file'}"))
            refused += 1
        elif ours is None or ours.encode() != base64.b64decode(result["file"]):
            mismatches.append((argv, "different file" if ours is not None else f"commsweep refused: {why}"))
        else:
            written += 1
            # AICB prints its model's parameter count, the model_param of its AIOB model.
            if result["params"] != mla.aicb_model_param(setup_from_args(ns)):
                mismatches.append((argv, f"AICB's model_param {result['params']}, commsweep's "
                                         f"{mla.aicb_model_param(setup_from_args(ns))}"))
    print(f"{written} files byte for byte, {refused} refusals matched, of {len(lines)} lines (seed {SEED})")
    assert mismatches == [], "\n".join(f"{' '.join(a)}\n  {m}" for a, m in mismatches[:10])
    # The draw covers both outcomes and both paths with SP.
    assert written > CASES // 5 and refused > CASES // 10


@pytest.mark.parametrize("moe_enable", [True, False])
def test_the_adapter_runs_real_aicb_on_deepseek_lines(moe_enable, tmp_path, capsys):
    line = ["--frame=DeepSeek", "--world_size=8", "--tensor_model_parallel_size=2", "--num_layers=3",
            "--hidden_size=128", "--num_attention_heads=4", "--ffn_hidden_size=64", "--num_experts=4",
            "--n_dense_layers=1", "--kv_lora_rank=32", "--q_lora_rank=0", "--global_batch=4"]
    line += ["--moe_enable", "--enable_sequence_parallel", "--aiob_enable",
             f"--comp_filepath={mla_profile(tmp_path)}"] if moe_enable else []
    ns = build_parser().parse_args(["generate", "--aicb-root", ROOT, *line])
    theirs, _ = from_arguments(ns)
    ours, _ = from_arguments(build_parser().parse_args(["generate", *line]))
    assert theirs == ours
    assert "workload save in" in capsys.readouterr().err
