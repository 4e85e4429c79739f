"""Which model, shard and GPU did AICB's Example.txt come from? The roofline, section by section.

AICB ships ``workload/aiob_inputs/Example.txt`` (a real GPU profile, in us) without saying
what it profiled. This script models every candidate shape (models x TP x sequence x
micro batch x SP) on every GPU of the table with the roofline backend and compares:

1. shape: the ratios between the GEMM sections (qkv, projection, fc1, fc2, logits) do not
   depend on the GPU, TP, sequence or batch, only on h, the FFN width, swiglu and the
   vocabulary: the spread of log(example / roofline) over them picks the architecture;
2. plausibility: the fractions of the GPU's peaks the example implies (GEMMs, FlashAttention,
   param_time's streaming pass, the fastest norm) must be ones real kernels reach, which
   rules GPUs and shards out;
3. fit: for the leading hypotheses, every section next to the roofline with the GPU's
   default efficiencies, and the RMS of log(example / roofline) over the twelve.

Usage: ``.venv/bin/python bench/aiob_vs_example.py [EXAMPLE.txt] [--top N]``
(default: ``$AICB_ROOT/workload/aiob_inputs/Example.txt``, AICB's file in a checkout of
aliyun/aicb). Prints tables; writes nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import os
import sys
from pathlib import Path

from commsweep.aiob import gpus, roofline
from commsweep.aiob import profile_file as pf
from commsweep.setup.models import PRESETS, ModelSpec
from commsweep.setup.training import TrainingSetup

# AICB's own file, in the user's AICB checkout (AICB_ROOT, as for the tests that run AICB).
DEFAULT = Path(os.environ.get("AICB_ROOT", "aicb")) / "workload" / "aiob_inputs" / "Example.txt"
GEMMS = ("atten_qkv", "atten_linear", "mlp_linear_1", "mlp_linear_2", "logit_time")

# Candidate architectures: the presets and Alibaba's own Qwen family (AICB is Alibaba's),
# described as AICB would run them (no GQA in AICB's profiler; biases only with the flag).
QWEN = dict(swiglu=True, position_embedding="rope", normalization="rmsnorm", tie_embeddings=False, add_bias_linear=False)
CANDIDATES: list[ModelSpec] = [
    *(dataclasses.replace(PRESETS[n], add_bias_linear=False) for n in ("gpt-7b", "gpt-13b", "llama-7b", "llama-13b")),
    # AICB's own "-m 7 --swiglu" (scripts/megatron_workload_with_aiob.sh): its default FFN and vocabulary.
    ModelSpec(name="aicb-7b-swiglu", num_layers=36, hidden_size=4096, num_attention_heads=32,
              ffn_hidden_size=10880, vocab_size=50257, **QWEN),
    ModelSpec(name="llama3-8b-mha", num_layers=32, hidden_size=4096, num_attention_heads=32,
              ffn_hidden_size=14336, vocab_size=128256, **QWEN),
    ModelSpec(name="qwen-7b", num_layers=32, hidden_size=4096, num_attention_heads=32,
              ffn_hidden_size=11008, vocab_size=151936, **QWEN),
    ModelSpec(name="qwen-14b", num_layers=40, hidden_size=5120, num_attention_heads=40,
              ffn_hidden_size=13696, vocab_size=152064, **QWEN),
]
TPS, SEQS, BATCHES = (1, 2, 4, 8), (2048, 4096, 8192), (1, 2, 4)


def label(s: TrainingSetup) -> str:
    return f"{s.model.name} tp{s.tp} sp{int(s.sp)} seq{s.seq_length} mb{s.micro_batch}"


def gemm_spread(example: pf.AiobProfile, setup: TrainingSetup, gpu: gpus.GpuSpec) -> float:
    """Std of log(example / roofline) over the GEMM sections: how well the relative GEMM sizes fit."""
    est = {e.section: e for e in roofline.estimate(setup, gpu)}
    logs = [math.log(float(example.get(k).avg) / est[k].time_us) for k in GEMMS]
    mean = sum(logs) / len(logs)
    return math.sqrt(sum((x - mean) ** 2 for x in logs) / len(logs))


def implied(example: pf.AiobProfile, setup: TrainingSetup, gpu: gpus.GpuSpec, embedding_factor: int):
    """The fractions of the GPU's peaks the example's average times imply (launch overhead taken off).

    ``embedding_factor``: AICB's mock counts the word embedding 4 times since November 2024
    (af5cf2b) and 2 times before; Example.txt dates from July 2024 (AICB's first commit).
    """
    est = {e.section: e for e in roofline.estimate(setup, gpu)}

    def busy(k):
        return max(float(example.get(k).avg) - est[k].launch_us, 1e-9) * 1e-6

    gemm = sum(est[k].flops for k in GEMMS) / sum(busy(k) for k in GEMMS) / gpu.peak_flops
    attention = est["atten_flash"].flops / busy("atten_flash") / gpu.peak_flops
    sh = roofline.Shard.of(setup)
    values = (roofline.aicb_model_param(setup) - (4 - embedding_factor) * (sh.vocab // sh.t) * sh.h) // sh.t
    param = 8 * values / busy("param_time") / gpu.peak_bytes
    # The norms' fastest sample against the bandwidth: above ~90 % no real kernel gets.
    norm = est["layernorm"].bytes / (float(example.get("layernorm").min) * 1e-6) / gpu.peak_bytes
    return gemm, attention, param, norm


PLAUSIBLE = {"gemm": (0.30, 0.90), "attention": (0.15, 0.75), "param": (0.50, 0.92), "norm": (0.0, 0.92)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("example", nargs="?", default=str(DEFAULT))
    ap.add_argument("--top", type=int, default=12)
    ns = ap.parse_args(argv)
    if not Path(ns.example).exists():
        print(f"{ns.example}: not found (pass the path of AICB's Example.txt, or set AICB_ROOT to an AICB "
              "checkout)", file=sys.stderr)
        return 2
    example = pf.read(ns.example, require_standard=True)

    # 1. Architecture: GEMM spread, GPU- and shard-independent (one shape per model suffices).
    print("1. Architecture: spread (std) of log(example/roofline) over the GEMM sections qkv, proj, fc1, fc2, logits")
    print("   (independent of GPU, TP, sequence and batch; 0 = the example's GEMMs have exactly these relative sizes)")
    base = gpus.gpu("H100-SXM")
    spreads = []
    for model in CANDIDATES:
        s = TrainingSetup(model=model, world_size=1, seq_length=4096)
        spreads.append((gemm_spread(example, s, base), model))
    spreads.sort(key=lambda x: x[0])
    for spread, model in spreads:
        print(f"   {model.name:<16} h={model.hidden_size:<5} ffn={model.ffn_hidden_size:<6} swiglu={int(model.swiglu)} "
              f"vocab={model.vocab_size:<7} {spread:6.3f}")

    # 2. Shard and GPU: the efficiencies the example implies must be plausible.
    best_models = [m for _, m in spreads[:2]]
    lo = {k: v[0] for k, v in PLAUSIBLE.items()}
    hi = {k: v[1] for k, v in PLAUSIBLE.items()}
    print("\n2. Shard and GPU for the two best architectures: fractions of peak the example implies")
    print("   plausible: GEMMs " + "-".join(f"{x:.0%}" for x in PLAUSIBLE["gemm"])
          + ", FlashAttention-2 forward " + "-".join(f"{x:.0%}" for x in PLAUSIBLE["attention"])
          + ", param_time's fp32 read+write pass " + "-".join(f"{x:.0%}" for x in PLAUSIBLE["param"]) + " of HBM bandwidth,"
          + " the fastest layernorm sample at most 92 % of it")
    print("   AICB's parameter count: word embedding x2 (AICB as of July 2024, when Example.txt was committed) or x4 (today)")
    print(f"   {'shape':<34} {'gpu':<10} {'emb':>3} {'gemm':>6} {'flash':>6} {'param':>6} {'norm':>6}  verdict")
    plausible = []
    total = 0
    for model in best_models:
        for t, s, b, sp in itertools.product(TPS, SEQS, BATCHES, (False, True)):
            if sp and t == 1:
                continue
            setup = TrainingSetup(model=model, world_size=t, tp=t, micro_batch=b, seq_length=s, sp=sp)
            if setup.shard_problems():
                continue
            for gpu in gpus.GPUS.values():
                for factor in (2, 4):
                    g, a, p, n = implied(example, setup, gpu, factor)
                    values = {"gemm": g, "attention": a, "param": p, "norm": n}
                    bad = [k for k, v in values.items() if not lo[k] <= v <= hi[k]]
                    total += 1
                    if not bad:
                        plausible.append((label(setup), gpu.name, factor, g, a, p, n))
                    elif len(bad) == 1 and s == 4096 and b == 1 and t <= 2 and model is best_models[0]:
                        print(f"   {label(setup):<34} {gpu.name:<10} x{factor:<2} {g:6.0%} {a:6.0%} {p:6.0%} {n:6.0%}"
                              f"  implausible {bad[0]}")
    for name, gpu_name, factor, g, a, p, n in plausible:
        print(f"   {name:<34} {gpu_name:<10} x{factor:<2} {g:6.0%} {a:6.0%} {p:6.0%} {n:6.0%}  plausible")
    print(f"   ({len(plausible)} plausible of {total}; shards of the best architecture at seq4096 mb1 tp<=2"
          " failing one bound only are listed too)")

    # 3. Operator by operator for the leading hypotheses, with the GPU's default efficiencies.
    model = best_models[0]
    hypotheses = [
        (TrainingSetup(model=model, world_size=2, tp=2, sp=True, micro_batch=1, seq_length=4096), "A100-40GB"),
        (TrainingSetup(model=model, world_size=2, tp=2, sp=False, micro_batch=1, seq_length=4096), "A100-80GB"),
        (TrainingSetup(model=model, world_size=1, tp=1, micro_batch=1, seq_length=4096), "H200"),
    ]
    for setup, gpu_name in hypotheses:
        gpu = gpus.gpu(gpu_name)
        est = {e.section: e for e in roofline.estimate(setup, gpu)}
        sh = roofline.Shard.of(setup)
        # param_time with AICB's count of July 2024 (word embedding x2), when Example.txt was committed.
        param_bytes = 8 * ((roofline.aicb_model_param(setup) - 2 * (sh.vocab // sh.t) * sh.h) // sh.t)
        print(f"\n3. operator by operator: {label(setup)} on {gpu_name} (peak {gpu.bf16_tflops:g} TFLOP/s, "
              f"{gpu.hbm_tbps:g} TB/s; default efficiencies gemm {gpu.gemm_efficiency:g}, attention "
              f"{gpu.attention_efficiency:g}, memory {gpu.memory_efficiency:g}, launch {gpu.launch_us:g} us)")
        print(f"   {'section':<15} {'example':>8} {'ex min':>7} {'roofline':>9} {'ex/roof':>7} {'floor':>8} {'GFLOP':>8} {'MB':>8}"
              f" {'ex TFLOP/s':>10} {'ex TB/s':>7} {'of peak':>7}  bound")
        logs = []
        for k in pf.STANDARD_SECTIONS:
            e, x, xmin = est[k], float(example.get(k).avg), float(example.get(k).min)
            nbytes, modelled = e.bytes, e.time_us
            if k == "param_time":
                nbytes = param_bytes
                modelled = nbytes / (gpu.peak_bytes * gpu.memory_efficiency) * 1e6 + gpu.launch_us
            floor = roofline.floor_us(e.flops, nbytes, gpu)
            tflops, tbps = e.flops / x / 1e6, nbytes / x / 1e6
            share = tflops / gpu.bf16_tflops if e.bound == "compute" else tbps / gpu.hbm_tbps
            logs.append(math.log(x / modelled))
            flag = "  example min below the physical floor" if xmin < floor else ""
            print(f"   {k:<15} {x:>8.0f} {xmin:>7.0f} {modelled:>9.1f} {x / modelled:>7.2f} {floor:>8.1f} {e.flops / 1e9:>8.1f}"
                  f" {nbytes / 1e6:>8.1f} {tflops:>10.1f} {tbps:>7.2f} {share:>7.0%}  {e.bound}{flag}")
        rms = math.sqrt(sum(v * v for v in logs) / len(logs))
        print(f"   RMS of log(example/roofline): {rms:.3f} (param_time with AICB's July-2024 parameter count)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
