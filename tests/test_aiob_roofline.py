"""The roofline backend: physical limits, scaling with TP, sequence and micro batch, and
the sections AICB's profiler times (SP, recompute, GQA, swiglu, MoE, param_time)."""

from __future__ import annotations

import csv
import dataclasses
import io
import re

import pytest

from commsweep.aiob import gpus, roofline
from commsweep.aiob import profile_file as pf
from commsweep.base.errors import ConfigError
from commsweep.setup.models import PRESETS, ModelSpec
from commsweep.setup.training import TrainingSetup


def setup(model: str | ModelSpec = "gpt-7b", **kw) -> TrainingSetup:
    m = PRESETS[model] if isinstance(model, str) else model
    kw.setdefault("world_size", kw.get("tp", 1) * kw.get("pp", 1) * kw.get("ep", 1))
    return TrainingSetup(model=m, **kw)


def times(s: TrainingSetup, gpu: str = "H100-SXM") -> dict[str, roofline.SectionEstimate]:
    return {e.section: e for e in roofline.estimate(s, gpus.gpu(gpu))}


def hand_flops(s: TrainingSetup) -> dict[str, float]:
    """Forward FLOPs of the GEMM and attention sections, written out from the shapes."""
    m, t = s.model, s.tp
    n = s.micro_batch * s.seq_length
    d = m.hidden_size // m.num_attention_heads
    kv = m.num_query_groups or m.num_attention_heads
    fc1 = m.ffn_hidden_size * (2 if m.swiglu else 1)
    return {
        "atten_qkv": 2 * n * m.hidden_size * (m.num_attention_heads + 2 * kv) * d / t,
        # causal: half of 4 * b * s^2 * heads * head_dim
        "atten_flash": 2 * s.micro_batch * s.seq_length**2 * m.num_attention_heads * d / t,
        "atten_linear": 2 * n * m.hidden_size * m.hidden_size / t,
        "mlp_linear_1": 2 * n * m.hidden_size * fc1 / t,
        "mlp_linear_2": 2 * n * m.ffn_hidden_size * m.hidden_size / t,
        "logit_time": 2 * n * m.hidden_size * s.padded_vocab / t,
    }


SETUPS = [
    setup("gpt-7b"),
    setup("gpt-7b", tp=2, sp=True),
    setup("gpt-13b", tp=8, micro_batch=2, seq_length=4096),
    setup("llama-7b", tp=4, sp=True),
    setup("llama-70b", tp=8, pp=4, sp=True),
]


@pytest.mark.parametrize("gpu", gpus.known_gpus())
@pytest.mark.parametrize("s", SETUPS, ids=lambda s: f"{s.model.name}-tp{s.tp}-sp{int(s.sp)}")
def test_never_faster_than_the_physical_limits(s, gpu):
    spec = gpus.gpu(gpu)
    est = times(s, gpu)
    for section, flops in hand_flops(s).items():
        assert est[section].time_us >= flops / spec.peak_flops * 1e6, section
    for e in est.values():
        assert e.time_us >= roofline.floor_us(e.flops, e.bytes, spec), e.section
        assert e.time_us > 0
    # param_time streams AICB's fp32 buffer in and out: 8 bytes per value at most at full bandwidth.
    values = roofline.aicb_model_param(s) // s.tp
    assert est["param_time"].time_us >= 8 * values / spec.peak_bytes * 1e6


@pytest.mark.parametrize("section", ["atten_qkv", "atten_flash", "atten_linear", "mlp_linear_1", "mlp_linear_2", "logit_time"])
def test_forward_flops_are_those_of_the_shapes(section):
    for s in SETUPS:
        assert times(s)[section].flops == pytest.approx(hand_flops(s)[section], rel=1e-12)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_gemms_scale_with_one_over_tp(t):
    one, many = times(setup(tp=1)), times(setup(tp=t))
    for section in ("atten_qkv", "atten_flash", "atten_linear", "mlp_linear_1", "mlp_linear_2"):
        assert many[section].flops * t == pytest.approx(one[section].flops)
        # The shard's work takes 1/t of the time; the launch overhead does not shrink.
        work = [(x[section].time_us - x[section].launch_us) for x in (one, many)]
        assert work[0] / work[1] == pytest.approx(t), section
        assert 0.5 * t <= one[section].time_us / many[section].time_us < t, section
    # The vocabulary is padded to 128 t, so logits are at least 1/t.
    assert many["logit_time"].flops * t >= one["logit_time"].flops
    # Without SP the norms see the whole sequence whatever t is.
    assert many["layernorm"].time_us == one["layernorm"].time_us


def test_attention_is_quadratic_and_gemms_linear_in_sequence_length():
    short, long = times(setup(seq_length=2048)), times(setup(seq_length=4096))
    assert long["atten_flash"].flops == 4 * short["atten_flash"].flops
    assert 3.5 <= long["atten_flash"].time_us / short["atten_flash"].time_us <= 4
    for section in ("atten_qkv", "mlp_linear_1", "mlp_linear_2", "logit_time", "layernorm", "mlp_gelu"):
        assert long[section].flops == 2 * short[section].flops
        assert 1.6 <= long[section].time_us / short[section].time_us <= 2, section


def test_micro_batch_scales_every_section_but_param_time_linearly():
    one, two = times(setup(micro_batch=1)), times(setup(micro_batch=2))
    for section in pf.STANDARD_SECTIONS:
        if section == "param_time":
            assert two[section].time_us == one[section].time_us
            continue
        assert two[section].flops == 2 * one[section].flops, section
        assert 1.5 <= two[section].time_us / one[section].time_us <= 2, section


def test_sequence_parallelism_shrinks_the_norms_only():
    off, on = times(setup(tp=4)), times(setup(tp=4, sp=True))
    for section in ("layernorm", "layernorm2", "layernorm_post"):
        assert on[section].bytes < off[section].bytes / 3.9
    for section in ("Emb", "atten_qkv", "atten_flash", "atten_linear", "mlp_linear_1", "mlp_gelu", "mlp_linear_2", "logit_time"):
        assert on[section] == off[section]
    # At t = 1 there is nothing to split (Megatron switches SP off there).
    assert times(setup(tp=1, sp=True)) == times(setup(tp=1))


def test_recompute_and_data_parallelism_do_not_change_the_profile():
    base = setup(tp=2)
    assert times(dataclasses.replace(base, recompute=True)) == times(base)
    assert times(dataclasses.replace(base, world_size=16, global_batch=64)) == times(base)


def test_gqa_swiglu_and_moe_shapes():
    llama70 = times(setup("llama-70b", tp=8))
    n, h = 2048, 8192
    assert llama70["atten_qkv"].flops == 2 * n * h * (64 + 2 * 8) * 128 / 8  # 8 kv groups, not 64
    assert llama70["mlp_linear_1"].flops == 2 * llama70["mlp_linear_2"].flops  # gate and up
    assert llama70["mlp_gelu"].kernels == 2  # silu, product
    mixtral = setup("mixtral-8x7b", tp=2, ep=2, sp=True)
    est = times(mixtral)
    assert est["mlp_linear_1"].kernels == 1 + 4  # the router's GEMM; 8 experts over ep 2: 4 local GEMMs
    tokens = 2048 * 2 * 2 // 8  # AICB: s * b * topk * ep / E per local expert
    assert est["mlp_linear_2"].flops == 4 * 2 * tokens * (14336 // 2) * 4096


def test_param_time_is_aicb_grad_buffer_pass():
    s = setup(tp=2)
    e = times(s)["param_time"]
    assert e.bytes == 8 * (roofline.aicb_model_param(s) // 2)
    assert e.bound == "memory"
    # A pipeline stage holds a quarter of the layers: a smaller buffer.
    assert times(setup(tp=2, pp=4))["param_time"].time_us < e.time_us / 2


@pytest.mark.parametrize(
    "model, kw, expected",
    [
        # Parameter counts printed by AICB 23eec3c's MockedMegatron for these arguments.
        (dict(ffn_hidden_size=16384, vocab_size=50257), dict(tp=2, seq_length=2048), 3746430976),
        (dict(ffn_hidden_size=11008, vocab_size=32000, swiglu=True, add_bias_linear=True),
         dict(tp=2, sp=True, seq_length=4096), 2862083712),
        (dict(ffn_hidden_size=14336, vocab_size=32000, num_experts=8, moe_topk=2),
         dict(tp=2, ep=2, sp=True, seq_length=4096), 8934785024),
        (dict(ffn_hidden_size=16384, vocab_size=32000), dict(tp=2, pp=2, seq_length=4096), 1955266560),
    ],
)
def test_aicb_model_param_matches_aicb(model, kw, expected):
    m = ModelSpec(name="m", num_layers=32, hidden_size=4096, num_attention_heads=32, **{"add_bias_linear": False, **model})
    assert roofline.aicb_model_param(setup(m, **kw)) == expected


def test_faster_parts_give_faster_profiles():
    s = setup(tp=2)
    a100, h100, h200, b200, h20 = (times(s, g) for g in ("A100-80GB", "H100-SXM", "H200", "B200", "H20"))
    for section in pf.STANDARD_SECTIONS:
        assert b200[section].time_us <= h200[section].time_us <= h100[section].time_us <= a100[section].time_us
    # The H20: capped tensor cores, more bandwidth than an H100.
    assert h20["mlp_linear_1"].time_us > 4 * h100["mlp_linear_1"].time_us
    assert h20["param_time"].time_us < h100["param_time"].time_us
    assert times(s, "A100-40GB")["param_time"].time_us > a100["param_time"].time_us


def test_profile_is_a_valid_aicb_file_and_the_csv_holds_the_same_numbers(tmp_path):
    s = setup("llama-7b", tp=2, sp=True)
    profile, estimates = roofline.profile(s, gpus.gpu("H200"), train_iter=7)
    path = tmp_path / "p.txt"
    pf.write(profile, path)
    text = path.read_text()
    again = pf.read(path, require_standard=True)
    assert again == profile and again.train_iter == 7
    # AICB's reader takes digits and one decimal point: never an exponent.
    assert re.findall(r"time_gpu_\w+: (\S+)", text) and all(
        re.fullmatch(r"\d+(\.\d+)?", v) for v in re.findall(r"time_gpu_\w+: (\S+)", text)
    )
    times_ns = pf.aicb_compute_times(again)
    e = {x.section: x for x in estimates}
    expected_attention = sum(e[k].time_us for k in ("layernorm", "atten_qkv", "atten_flash", "atten_linear")) * 1000
    assert times_ns.attention == pytest.approx(expected_attention, abs=4)
    rows = list(csv.DictReader(io.StringIO(roofline.tidy_csv(profile, backend="roofline", gpu="H200", estimates=estimates))))
    assert [r["section"] for r in rows] == list(pf.STANDARD_SECTIONS)
    for row in rows:
        op = profile.get(row["section"])
        assert float(row["time_gpu_avg"]) == op.avg == float(row["roofline_us"])
        assert int(row["flops"]) == int(e[row["section"]].flops)
        assert float(row["bwd_roofline_us"]) >= 0


def test_backward_gemms_cost_twice_the_forward_flops():
    e = times(setup(tp=2))
    for section in ("atten_qkv", "atten_linear", "mlp_linear_1", "mlp_linear_2", "logit_time"):
        assert e[section].bwd_flops == 2 * e[section].flops
    assert e["atten_flash"].bwd_flops == 2.5 * e["atten_flash"].flops
    assert e["param_time"].bwd_flops == 0


def test_gpu_table():
    for name, spec in gpus.GPUS.items():
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]*", name)
        assert spec.source and spec.bf16_tflops > 0 and spec.hbm_tbps > 0
        for eff in (spec.gemm_efficiency, spec.attention_efficiency, spec.memory_efficiency):
            assert 0 < eff <= 1
    assert {"A100-40GB", "A100-80GB", "H100-SXM", "H800", "H20", "H200", "B200"} <= set(gpus.GPUS)
    assert gpus.gpu("h100-sxm") is gpus.GPUS["H100-SXM"]
    with pytest.raises(ConfigError) as info:
        gpus.gpu("V100", key="aiob.gpu")
    assert str(info.value).startswith("aiob.gpu: unknown GPU type 'V100'; known: A100-40GB, A100-80GB, H100-SXM")
    with pytest.raises(ConfigError, match="--gemm-efficiency: must be in"):
        gpus.GPUS["H200"].with_overrides(gemm_efficiency=1.5)
    faster = gpus.GPUS["H200"].with_overrides(gemm_efficiency=1.0, launch_us=0)
    assert times(setup(), "H200")["atten_qkv"].time_us > roofline.estimate(setup(), faster)[2].time_us


def test_invalid_shard_is_named():
    with pytest.raises(ConfigError, match="tp=3 does not divide the 32 attention heads"):
        roofline.estimate(setup(tp=3), gpus.gpu("H100-SXM"))
