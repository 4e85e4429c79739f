"""Parity of the aicb schedule with a real AICB checkout, and its speed.

For many AICB command lines (GPT, LLaMA-style and MoE models; TP 1-8, SP, PP 1/2/4,
1-4 micro-batches and uneven global batches, recompute, biases, the default path and the
AIOB path with AICB's Example.txt and with a second profile of fractional times), runs

* AICB itself: ``python -m workload_generator.SimAI_training_workload_generator ARGS`` in a
  fresh working directory, with the checkout on PYTHONPATH, and
* ``commsweep generate ARGS``, as a process,

and counts the configurations where both write the same bytes, or both refuse. Prints the
mismatches (first differing line), then the wall time per workload of each and their ratio,
and the emulation's time in-process.

    AICB_ROOT=/path/to/aicb .venv/bin/python bench/aicb_parity.py [--count 300] [--seed 1]

The AICB checkout needs numpy and pandas in the Python that runs it (``--aicb-python``,
default: this one, whose commsweep install already has both).
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODULE = "workload_generator.SimAI_training_workload_generator"

# (label, AICB arguments of the model); sizes from AICB's scripts/megatron_gpt.sh.
MODELS = [
    ("gpt7b", "--num_layers=32 --hidden_size=4096 --num_attention_heads=32 --vocab_size=50257 --model_name=gpt_7B"),
    ("gpt13b", "--num_layers=40 --hidden_size=5120 --num_attention_heads=40 --vocab_size=50257 --model_name=gpt_13B"),
    ("llama7b", "--num_layers=32 --hidden_size=4096 --num_attention_heads=32 --ffn_hidden_size=11008 "
                "--vocab_size=32000 --swiglu --model_name=llama_7B"),
    ("llama-default-ffn", "--num_layers=30 --hidden_size=2048 --num_attention_heads=16 --swiglu"),
    ("aicb-defaults", ""),
    ("small-bias", "--num_layers=6 --hidden_size=1024 --num_attention_heads=16 --vocab_size=50000 --add_bias_linear"),
    ("moe8x7b", "--num_layers=32 --hidden_size=4096 --num_attention_heads=32 --ffn_hidden_size=14336 "
                "--vocab_size=32000 --swiglu --moe_enable --num_experts=8 --moe_router_topk=2 --model_name=Mixtral_8x7B"),
    ("moe16-k1", "--num_layers=8 --hidden_size=2048 --num_attention_heads=16 --moe_enable --num_experts=16"),
]

# A second AIOB file: fractional times (rounding), an operator AICB files under "other", and
# a section named after a mocked layer, which AICB's lookup then uses for that layer.
QUIRKY_PROFILE = """train_iter:5
Emb:
    time_gpu_max: 900.25
    time_gpu_min: 700.5
    time_gpu_avg: 812.75
layernorm:
    time_gpu_max: 80
    time_gpu_min: 40
    time_gpu_avg: 60.5
atten_qkv:
    time_gpu_max: 1300
    time_gpu_min: 800
    time_gpu_avg: 901.3
atten_flash:
    time_gpu_max: 800
    time_gpu_min: 450
    time_gpu_avg: 511.7
atten_linear:
    time_gpu_max: 950
    time_gpu_min: 300
    time_gpu_avg: 349.9
layernorm2:
    time_gpu_max: 120
    time_gpu_min: 60
    time_gpu_avg: 70.1
mlp_linear_1:
    time_gpu_max: 1900
    time_gpu_min: 1300
    time_gpu_avg: 1408.4
mlp_gelu:
    time_gpu_max: 600
    time_gpu_min: 200
    time_gpu_avg: 257.3
mlp_linear_2:
    time_gpu_max: 1200
    time_gpu_min: 700
    time_gpu_avg: 742.9
final_column:
    time_gpu_max: 3000
    time_gpu_min: 2000
    time_gpu_avg: 2500.5
logit_time:
    time_gpu_max: 15476
    time_gpu_min: 12435
    time_gpu_avg: 12824
param_time:
    time_gpu_max: 23746.5
    time_gpu_min: 16647.25
    time_gpu_avg: 17374.75
"""


def core_grid() -> list[str]:
    """A systematic grid: every model x TP x SP x path at world 16, plus PP and batch shapes."""
    out = []
    for label, model in MODELS:
        moe = "--moe_enable" in model
        for tp in (1, 2, 4, 8):
            for sp in (False, True):
                ep_values = (1, 2) if moe else (1,)
                for ep in ep_values:
                    args = f"--frame=Megatron --world_size=16 --tensor_model_parallel_size={tp} --global_batch={32 // tp} {model}"
                    if sp:
                        args += " --enable_sequence_parallel"
                    if moe:
                        args += f" --expert_model_parallel_size={ep}"
                    out.append(args)
                    out.append(args + " --aiob_enable --comp_filepath={example}")
    return out


# Corners of AICB's rules: its floors, what it accepts that Megatron would not, and each of
# its refusals.
EDGE_CASES = [
    # global batch below micro_batch * dp: ga = 0, no micro-batch at all (AICB only warns)
    "--world_size=16 --tensor_model_parallel_size=2 --global_batch=4",
    "--world_size=16 --tensor_model_parallel_size=2 --pipeline_model_parallel=2 --global_batch=2 --enable_sequence_parallel",
    # more stages than layers: no layer on a stage (vpp 0)
    "--world_size=8 --pipeline_model_parallel=4 --num_layers=2 --global_batch=8",
    "--world_size=16 --tensor_model_parallel_size=2 --pipeline_model_parallel=4 --num_layers=3 --enable_sequence_parallel",
    # layers not divisible by pp (floored), uneven global batch, odd sequence and micro-batch
    "--world_size=32 --tensor_model_parallel_size=2 --pipeline_model_parallel=4 --num_layers=30 --global_batch=13 "
    "--micro_batch=3 --seq_length=1023 --enable_sequence_parallel",
    "--world_size=24 --tensor_model_parallel_size=8 --pipeline_model_parallel=3 --num_layers=31 --global_batch=7 "
    "--seq_length=999 --enable_sequence_parallel --recompute_activations --aiob_enable --comp_filepath={quirky}",
    # heads that do not divide hidden (AICB uses heads * (hidden // heads)); heads defaulting to layers
    "--world_size=8 --tensor_model_parallel_size=8 --hidden_size=1000 --num_attention_heads=16 --ffn_hidden_size=4000",
    "--world_size=8 --tensor_model_parallel_size=4 --num_layers=12 --hidden_size=768 --enable_sequence_parallel",
    "--world_size=8 --tensor_model_parallel_size=2 --hidden_size=1000 --swiglu --enable_sequence_parallel "
    "--aiob_enable --comp_filepath={example}",
    # TP not dividing the heads or the sequence: AICB does not check
    "--world_size=6 --tensor_model_parallel_size=2 --num_attention_heads=12 --hidden_size=1536 --seq_length=1001 "
    "--enable_sequence_parallel --pipeline_model_parallel=3 --num_layers=9",
    # refusals: qkv / output layer / MLP not divisible by TP
    "--world_size=3 --tensor_model_parallel_size=3 --hidden_size=4096 --num_attention_heads=32",
    "--world_size=3 --tensor_model_parallel_size=3 --hidden_size=3072 --num_attention_heads=32 --ffn_hidden_size=1000",
    "--world_size=16 --tensor_model_parallel_size=16 --hidden_size=1000 --num_attention_heads=8",
    # MoE corners: TP 1 and EP 1 (every MoE comm NONE on the AIOB path), EP = DP (no moe_grad_norm),
    # recompute, top-k above the experts, EP not dividing the experts, fp16 with EP, grouped GEMM dtype
    "--world_size=8 --moe_enable --num_experts=4 --moe_router_topk=2 --enable_sequence_parallel "
    "--aiob_enable --comp_filepath={example}",
    "--world_size=8 --moe_enable --num_experts=4 --moe_router_topk=2 --enable_sequence_parallel",
    "--world_size=16 --tensor_model_parallel_size=2 --moe_enable --num_experts=8 --expert_model_parallel_size=8 "
    "--enable_sequence_parallel --recompute_activations --global_batch=32",
    "--world_size=16 --tensor_model_parallel_size=2 --moe_enable --num_experts=8 --expert_model_parallel_size=8 "
    "--enable_sequence_parallel --recompute_activations --global_batch=32 --aiob_enable --comp_filepath={quirky}",
    "--world_size=8 --tensor_model_parallel_size=2 --moe_enable --num_experts=2 --moe_router_topk=4 "
    "--expert_model_parallel_size=2 --enable_sequence_parallel --pipeline_model_parallel=2",
    "--world_size=16 --moe_enable --num_experts=8 --expert_model_parallel_size=3 --enable_sequence_parallel",
    "--world_size=16 --moe_enable --num_experts=8 --expert_model_parallel_size=2 --enable_sequence_parallel --dtype=float16",
    "--world_size=16 --moe_enable --num_experts=8 --enable_sequence_parallel --moe_grouped_gemm --dtype=float32",
    "--world_size=16 --moe_enable --num_experts=8 --enable_sequence_parallel --moe_grouped_gemm",
    # EP on a dense model: refused with AICB's default of one expert, accepted with --num_experts
    "--world_size=16 --expert_model_parallel_size=2",
    "--world_size=16 --expert_model_parallel_size=2 --num_experts=4 --enable_sequence_parallel",
    # arguments AICB accepts and ignores here
    "--world_size=16 --tensor_model_parallel_size=4 --context-parallel-size=2 --gpu_type=H100 --epoch_num=3 "
    "--dtype=bfloat16 --use_flash_attn --use-distributed-optimizer --stage=2 --overlap_version --pp_rank=0 "
    "--activation_func=gelu --n_dense_layers=1 --begin_size=1024 --workload_only",
    "--world_size=16 --tensor_model_parallel_size=2 --comp_filepath={example}",
    "--world_size=16 --tensor_model_parallel_size=2 --make_vocab_size_divisible_by=1 --vocab_size=50257",
]


def random_configs(count: int, seed: int) -> list[str]:
    """Random AICB command lines over the axes of the issue (some of them refused by AICB)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        label, model = rng.choice(MODELS)
        moe = "--moe_enable" in model
        tp = rng.choice((1, 2, 4, 8))
        pp = rng.choice((1, 1, 2, 4))
        world = tp * pp * rng.choice((1, 2, 4, 8))
        if rng.random() < 0.05:
            world += 1  # not divisible by tp*pp: AICB asserts
        dp = world // (tp * pp)
        mb = rng.choice((1, 1, 2))
        ga = rng.choice((1, 2, 3, 4))
        gb = ga * mb * dp + (rng.choice((0, 0, 0, 1)) if dp * mb > 1 else 0)  # uneven: AICB floors
        seq = rng.choice((1024, 2048, 4096, 3000))
        args = [
            "--frame=Megatron", f"--world_size={world}", f"--tensor_model_parallel_size={tp}",
            f"--pipeline_model_parallel={pp}", f"--global_batch={gb}", f"--micro_batch={mb}",
            f"--seq_length={seq}", model,
        ]
        sp = rng.random() < (0.85 if moe else 0.5)  # MoE without SP: AICB refuses
        if sp:
            args.append("--enable_sequence_parallel")
        if rng.random() < 0.3:
            args.append("--recompute_activations")
        if moe:
            args.append(f"--expert_model_parallel_size={rng.choice((1, 2, 4, 8))}")
        if rng.random() < 0.1:
            args.append("--make_vocab_size_divisible_by=64")
        path = rng.random()
        if path < 0.35:
            args.append("--aiob_enable --comp_filepath={example}")
        elif path < 0.55:
            args.append("--aiob_enable --comp_filepath={quirky}")
        out.append(" ".join(a for a in args if a))
    return out


def run_aicb(root: Path, python: str, argv: list[str]) -> tuple[bytes | None, str, float]:
    """(file bytes or None, AICB's last output line, seconds)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    with tempfile.TemporaryDirectory() as work:
        start = time.perf_counter()
        proc = subprocess.run([python, "-m", MODULE, *argv], cwd=work, env=env, capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        files = sorted((Path(work) / "results" / "workload").glob("*.txt"))
        if proc.returncode != 0 or len(files) != 1:
            lines = [x for x in (proc.stdout + proc.stderr).splitlines() if x.strip()]
            return None, lines[-1] if lines else "", elapsed
        return files[0].read_bytes(), "", elapsed


def run_commsweep(argv: list[str]) -> tuple[bytes | None, str, float]:
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "w.txt"
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "commsweep", "generate", *argv, "-o", str(out)],
                              capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            return None, proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "", elapsed
        return out.read_bytes(), "", elapsed


def in_process_seconds(argv: list[str], repeat: int = 5) -> float:
    from commsweep.orchestration.cli import build_parser
    from commsweep.workload.stage import from_arguments

    parser = build_parser()
    start = time.perf_counter()
    for _ in range(repeat):
        from_arguments(parser.parse_args(["generate", *argv]))
    return (time.perf_counter() - start) / repeat


def first_difference(a: bytes, b: bytes) -> str:
    la, lb = a.decode().split("\n"), b.decode().split("\n")
    for i, (x, y) in enumerate(zip(la, lb), start=1):
        if x != y:
            return f"line {i}: AICB {x!r} vs commsweep {y!r}"
    return f"AICB has {len(la)} lines, commsweep {len(lb)}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aicb-root", default=os.environ.get("AICB_ROOT"), help="AICB checkout (default: $AICB_ROOT)")
    ap.add_argument("--aicb-python", default=sys.executable, help="the Python that runs AICB")
    ap.add_argument("--count", type=int, default=300, help="random configurations beside the core grid")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only-edges", action="store_true", help="run the corner cases only")
    ns = ap.parse_args()
    if not ns.aicb_root:
        print("set AICB_ROOT (or --aicb-root) to an AICB checkout; nothing to compare against")
        return 2
    root = Path(ns.aicb_root).resolve()
    example = root / "workload" / "aiob_inputs" / "Example.txt"
    with tempfile.TemporaryDirectory() as tmp:
        quirky = Path(tmp) / "quirky.txt"
        quirky.write_text(QUIRKY_PROFILE)
        configs = EDGE_CASES if ns.only_edges else core_grid() + EDGE_CASES + random_configs(ns.count, ns.seed)
        matched = identical = refused = 0
        aicb_times, ours_times, in_proc = [], [], []
        mismatches = []
        for line in configs:
            argv = shlex.split(line.format(example=example, quirky=quirky))
            theirs, their_err, t_aicb = run_aicb(root, ns.aicb_python, argv)
            ours, our_err, t_ours = run_commsweep(argv)
            if theirs is not None and ours == theirs:
                matched += 1
                identical += 1
                aicb_times.append(t_aicb)
                ours_times.append(t_ours)
                if len(in_proc) < 40:
                    in_proc.append(in_process_seconds(argv))
            elif theirs is None and ours is None:
                matched += 1
                refused += 1
            else:
                if theirs is None:
                    why = f"AICB refused ({their_err}), commsweep wrote a file"
                elif ours is None:
                    why = f"commsweep refused ({our_err}), AICB wrote a file"
                else:
                    why = first_difference(theirs, ours)
                mismatches.append((line, why))
    for line, why in mismatches:
        print(f"MISMATCH {line}\n    {why}")
    print(f"{matched} of {len(configs)} configurations match real AICB "
          f"({identical} byte-identical workload files, {refused} refused by both)")
    if aicb_times:
        a, o = statistics.median(aicb_times), statistics.median(ours_times)
        p = statistics.median(in_proc)
        print(f"per workload (median of {len(aicb_times)}): AICB {a:.3f} s, commsweep generate {o:.3f} s per process "
              f"-> {a / o:.1f}x faster; emulation in-process {p * 1000:.2f} ms -> {a / p:.0f}x")
    return 0 if not mismatches else 1


if __name__ == "__main__":
    sys.exit(main())
