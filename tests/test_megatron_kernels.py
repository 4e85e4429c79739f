"""Megatron's kernels per schedule row: FLOPs from the shapes, physical floors, wave
quantization, recompute, the optimizer's passes, and one 22B layer against the paper."""

from __future__ import annotations

import dataclasses
import math

import pytest

from commsweep.aiob import gpus
from commsweep.aiob import megatron_kernels as mk
from commsweep.setup.models import PRESETS, ModelSpec
from commsweep.setup.training import TrainingSetup

GPT_22B = ModelSpec(name="22b", num_layers=48, hidden_size=6144, num_attention_heads=64, ffn_hidden_size=24576,
                    vocab_size=51200, max_position_embeddings=2048)
LAYER_KINDS = ("attention_qkv", "attention_proj", "mlp_fc1", "mlp_fc2")


def setup(model: ModelSpec = GPT_22B, **kw) -> TrainingSetup:
    kw = {"world_size": 8, "tp": 8, "micro_batch": 4, "global_batch": 4, **kw}
    return TrainingSetup(model=model, **kw)


def flops(ks, kind: str | None = None) -> float:
    return sum(k.flops for k in ks if kind is None or k.kind == kind)


@pytest.mark.parametrize("attention", ["unfused", "flash"])
@pytest.mark.parametrize("t", [1, 2, 8])
def test_layer_flops_are_narayanans_formula(attention, t):
    """Forward GEMM FLOPs of a GPT layer: 24 b s h^2 (1 + s / 6h) / t (Narayanan et al.
    2021, eq. 3 per layer and pass); the backward's are twice that."""
    s = setup(tp=t, world_size=t)
    sw = dataclasses.replace(mk.software("2022"), attention=attention)
    parts = mk.kernels(s, sw).parts
    b, seq, h = 4, 2048, 6144
    fwd = sum(flops(parts[k].fwd) for k in LAYER_KINDS)
    bwd = sum(flops(parts[k].ig) + flops(parts[k].wg) for k in LAYER_KINDS)
    if attention == "flash":  # causal: flash computes half of the s^2 products, and 2.5x that backward
        expected = (24 * b * seq * h * h + 2 * b * seq * seq * h) / t
        assert fwd == pytest.approx(expected)
        assert bwd == pytest.approx(2 * 24 * b * seq * h * h / t + 2.5 * 2 * b * seq * seq * h / t)
    else:
        expected = 24 * b * seq * h * h * (1 + seq / (6 * h)) / t
        assert fwd == pytest.approx(expected)
        assert bwd == pytest.approx(2 * expected)


@pytest.mark.parametrize("gpu", gpus.known_gpus())
@pytest.mark.parametrize("s", [setup(), setup(sp=True), setup(PRESETS["llama-70b"], pp=4, world_size=32, micro_batch=1)],
                         ids=["22b", "22b-sp", "llama-70b"])
def test_no_kernel_beats_the_physical_limits(gpu, s):
    spec = gpus.gpu(gpu)
    for sw in mk.SOFTWARE.values():
        for part in mk.kernels(s, sw).parts.values():
            for k in (*part.fwd, *part.ig, *part.wg):
                floor = max(k.flops / spec.peak_flops, k.bytes / spec.peak_bytes) * 1e6
                assert mk.kernel_us(k, spec) >= floor
                assert mk.kernel_us(k, spec) >= spec.launch_us


def test_wave_quantization():
    a100 = gpus.gpu("A100-80GB")
    full = mk.gemm("g", 108 * 256, 4096, 128)  # exactly one wave of 256x128 tiles
    assert mk.gemm_efficiency(a100, full) == pytest.approx(a100.gemm_efficiency)
    # One row more: 109 tiles of 256x128 need two waves (109/216 busy); 217 of 128x128, three
    # waves (217/324): cuBLAS takes the better.
    one_more = mk.gemm("g", 108 * 256 + 1, 4096, 128)
    assert mk.gemm_efficiency(a100, one_more) == pytest.approx(a100.gemm_efficiency * 217 / 324)
    # Few tiles: split-K puts more SMs on them, in slices of K of at least 256: 8 tiles of
    # 128x128 split 8 ways over K = 2048 keep 64 of the 108 SMs busy.
    few = mk.gemm("g", 256, 2048, 512)
    assert mk.gemm_efficiency(a100, few) == pytest.approx(a100.gemm_efficiency * 64 / 108)
    # A batch tiles each matrix.
    assert mk.gemm_efficiency(a100, mk.gemm("g", 256, 64, 128, batch=108)) == pytest.approx(a100.gemm_efficiency)


def test_a_measured_table_replaces_the_model():
    table = ((1e9, 0.3), (1e12, 0.9))
    gpu = dataclasses.replace(gpus.gpu("A100-80GB"), gemm_table=table)
    assert mk.gemm_efficiency(gpu, mk.gemm("g", 10, 10, 10)) == 0.3
    assert mk.gemm_efficiency(gpu, mk.gemm("g", 10000, 10000, 10000)) == 0.9
    middle = mk.gemm("g", 1, 1, round(10 ** 10.5 / 2))  # 10^10.5 FLOPs: half way in log
    assert mk.gemm_efficiency(gpu, middle) == pytest.approx(0.6, rel=1e-3)


def test_recompute_runs_the_forward_again():
    a100, sw = gpus.gpu("A100-80GB"), mk.software("2022")
    none = mk.row_times(setup(), a100, sw, parameters=1)
    selective = mk.row_times(setup(recompute=True), a100, sw, parameters=1)
    full = mk.row_times(setup(recompute=True, recompute_granularity="full"), a100, sw, parameters=1)
    core = mk.total_us(mk.kernels(setup(), sw).attention_core, a100)
    assert selective.get("attention_proj")[1] == pytest.approx(none.get("attention_proj")[1] + core)
    assert full.get("recompute_attention") == (0.0, none.get("attention_qkv")[0] + none.get("attention_proj")[0], 0.0)
    assert full.get("recompute_mlp") == (0.0, none.get("mlp_fc1")[0] + none.get("mlp_fc2")[0], 0.0)
    assert "recompute_attention" not in selective.rows


def test_sequence_parallelism_shrinks_the_element_wise_work_only():
    a100, sw = gpus.gpu("A100-80GB"), mk.software("2022")
    off, on = mk.kernels(setup(), sw).parts, mk.kernels(setup(sp=True), sw).parts
    for kind in LAYER_KINDS:
        assert flops(on[kind].fwd, "gemm") == flops(off[kind].fwd, "gemm")
    assert mk.total_us(on["mlp_fc1"].fwd, a100) < mk.total_us(off["mlp_fc1"].fwd, a100)


def test_optimizer_passes():
    s = setup()
    assert sum(mk.optimizer_bytes_per_parameter(mk.software("2021").configure(s), mk.software("2021")).values()) == 60
    assert sum(mk.optimizer_bytes_per_parameter(mk.software("2022").configure(s), mk.software("2022")).values()) == 46
    a100 = gpus.gpu("A100-80GB")
    sw = mk.software("2022")
    plain = mk.optimizer_us(sw.configure(s), a100, sw, 10**9)
    # 46 bytes per parameter and the 4-byte gradient buffer cleared, streamed at the memory efficiency.
    assert plain == pytest.approx(50e9 / (a100.peak_bytes * a100.memory_efficiency) * 1e6)
    sharded = dataclasses.replace(sw.configure(s), distributed_optimizer=True, world_size=64, global_batch=32)
    assert mk.optimizer_us(sharded, a100, sw, 10**9) == pytest.approx((46e9 / 8 + 4e9) / 50e9 * plain)


def test_gradient_accumulation_without_fusion_is_a_pass_per_micro_batch():
    a100 = gpus.gpu("A100-80GB")
    fused, unfused = (mk.kernels(setup(), mk.software(v)).parts["mlp_fc1"].wg for v in ("2022", "2021"))
    assert [k.name for k in unfused if k.kind == "memory"][0] == "fc1.grad_accumulate"
    assert mk.total_us(unfused, a100) > mk.total_us(fused, a100)


def test_a_22b_layer_is_korthikanti_table_4(reference):
    """One 22B layer (b 4, TP 8) forward and backward, TP communication at NCCL's ~230 GB/s
    on NVLink, against Korthikanti et al.'s Table 4 (not used for the fit): within 6%."""
    import csv

    path = reference("published", "korthikanti2022_table4.csv")
    rows = {r["experiment"]: r for r in csv.DictReader(path.open())}
    a100, sw = gpus.gpu("A100-80GB"), mk.software("2022")
    u = 2 * 4 * 2048 * 6144
    allreduce, gather = u * 2 * 7 / 8 / 230e9 * 1e6, u * 7 / 8 / 230e9 * 1e6
    cases = {
        "baseline_no_recompute": (setup(), 2 * allreduce, 0),
        "sequence_parallel": (setup(sp=True), 4 * gather, 2 * gather),
        "full_recompute": (setup(recompute=True, recompute_granularity="full"), 2 * allreduce, 2 * allreduce),
        "selective_recompute": (setup(recompute=True), 2 * allreduce, 0),
        "selective_recompute_and_sequence_parallel": (setup(sp=True, recompute=True), 4 * gather, 2 * gather),
    }
    for name, (s, fwd_comm, bwd_comm) in cases.items():
        t = mk.row_times(s, a100, sw, parameters=1)
        fwd = sum(t.get(k)[0] for k in LAYER_KINDS) + fwd_comm
        bwd = sum(t.get(k)[1] + t.get(k)[2] for k in (*LAYER_KINDS, "recompute_attention", "recompute_mlp")) + bwd_comm
        measured = float(rows[name]["combined_ms"]) * 1000
        assert (fwd + bwd) / measured == pytest.approx(1, abs=0.06), name
        assert math.isclose(fwd / 1000, float(rows[name]["forward_ms"]), rel_tol=0.1), name


@pytest.mark.parametrize("attention", ["unfused", "flash"])
@pytest.mark.parametrize("sp", [False, True])
def test_mla_projections_and_attention_flops(attention, sp):
    """DeepSeek-V3's multi-latent attention at TP 8 (workload/megatron_mla.py): the down
    projections whole over the rank's tokens (its sequence shard with SP), the up projections
    and linear_proj split over TP; the core with query/key heads of 192 and value heads of 128."""
    m = PRESETS["deepseek-v3"]
    s = TrainingSetup(model=m, world_size=8, tp=8, sp=sp, micro_batch=1, global_batch=1, seq_length=4096)
    sw = dataclasses.replace(mk.software("2022"), attention=attention)
    parts = mk.kernels(s, sw).parts
    n, h, a = 4096, 7168, 128 // 8
    rows = n // 8 if sp else n
    down = 2 * rows * h * (1536 + 512 + 64)
    up = 2 * n * (1536 * a * 192 + 512 * a * (128 + 128))
    assert flops(parts["attention_qkv"].fwd) == down + up
    assert flops(parts["attention_qkv"].ig) == flops(parts["attention_qkv"].wg) == down + up
    proj = 2 * n * a * 128 * h
    core = 2 * n * n * a * (192 + 128)  # Q K^T over 192, the context over 128
    core = core / 2 if attention == "flash" else core  # causal
    assert flops(parts["attention_proj"].fwd) == pytest.approx(proj + core)
