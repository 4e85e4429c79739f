"""The roofline's multi-latent attention: AICB's DeepSeek AIOB sections, their FLOPs against
DeepSeek-V3's published shapes, TP, and the aicb schedule reading them back."""

from __future__ import annotations

import dataclasses

import pytest

from commsweep.aiob import gpus, mla, roofline
from commsweep.aiob import profile_file as pf
from commsweep.base.errors import ConfigError
from commsweep.orchestration import cli
from commsweep.setup.models import PRESETS
from commsweep.setup.training import TrainingSetup
from commsweep.workload import aicb_deepseek

V3 = PRESETS["deepseek-v3"]


def gemm_flops(s: TrainingSetup, section: str) -> float:
    op = next(o for o in roofline.operators(s) if o.section == section)
    return sum(k.flops for k in op.forward if k.kind == "gemm")


def test_sections_are_aicbs_deepseek_aiob_model_s():
    s = TrainingSetup(model=V3, world_size=8, tp=8, seq_length=4096)
    assert [o.section for o in roofline.operators(s)] == list(pf.DEEPSEEK_SECTIONS)
    profile, _ = roofline.profile(s, gpus.gpu("H100-SXM"))
    assert pf.parse(pf.render(profile), require_standard=True).names() == list(pf.DEEPSEEK_SECTIONS)


def test_gemm_flops_are_twice_deepseek_v3s_attention_weights_per_token():
    # DeepSeek-V3's MLA per layer (config.json shapes): 7168 x 1536 + 1536 x 128*192
    # + 7168 x (512 + 64) + 512 x 128*(128 + 128) + 128*128 x 7168 = 187,105,280 weights.
    s = TrainingSetup(model=V3, world_size=1, seq_length=4096)
    total = sum(gemm_flops(s, name) for name in pf.MLA_SECTIONS)
    assert total == 2 * 4096 * 187_105_280


def test_tp_splits_the_up_projections_and_the_output_not_the_down_projections():
    one, eight = (TrainingSetup(model=V3, world_size=t, tp=t, seq_length=4096) for t in (1, 8))
    for name in ("attention_linear_q_lora", "attention_linear_kv_lora"):
        assert gemm_flops(one, name) == gemm_flops(eight, name)
    for name in ("attention_q_column", "attention_kv_column", "attention_o_row"):
        assert gemm_flops(one, name) == 8 * gemm_flops(eight, name)


def test_the_attention_core_is_causal_over_the_qk_and_v_widths():
    s = TrainingSetup(model=V3, world_size=8, tp=8, micro_batch=2, seq_length=4096)
    op = next(o for o in roofline.operators(s) if o.section == "attention_kv_column")
    (flash,) = [k for k in op.forward if k.kind == "attention"]
    # Q K^T over 192 and P V over 128 (2 FLOPs a product) for b = 2 and 16 local heads, half
    # the s x s products (causal).
    assert flash.flops == 2 * 2 * 4096 * 4096 * 16 * (192 + 128) / 2
    longer = TrainingSetup(model=V3, world_size=8, tp=8, micro_batch=2, seq_length=8192)
    op2 = next(o for o in roofline.operators(longer) if o.section == "attention_kv_column")
    assert [k.flops for k in op2.forward if k.kind == "attention"] == [4 * flash.flops]


def test_without_a_query_latent_the_query_comes_from_the_hidden_state():
    lite = PRESETS["deepseek-v2-lite"]
    s = TrainingSetup(model=lite, world_size=1, seq_length=2048)
    ops = {o.section: o for o in roofline.operators(s)}
    assert ops["attention_linear_q_lora"].forward == ()
    assert gemm_flops(s, "attention_q_column") == 2 * 2048 * 2048 * 16 * 192


def test_aicb_model_param_is_the_deepseek_mock_s_walk_less_its_double_count():
    # The walk (aicb_deepseek.modules, with SP) lists the shared MLP twice and leaves out the
    # h-wide bias beside each layer's norm; model.parameters() counts each parameter once.
    tiny = dataclasses.replace(PRESETS["deepseek-tiny"], add_bias_linear=True)
    for kw in (dict(tp=2, ep=2), dict(tp=1, ep=4, pp=2)):
        s = TrainingSetup(model=tiny, world_size=8, sp=True, global_batch=8, **kw)
        walk, _ = aicb_deepseek.parameter_counts(s)
        layers = tiny.num_layers // s.pp
        moe_layers = layers - tiny.moe_first_k_dense
        part = tiny.expert_ffn_hidden_size // s.tp
        shared = 2 * tiny.hidden_size * part + part + tiny.hidden_size
        assert mla.aicb_model_param(s) == walk - moe_layers * shared + layers * tiny.hidden_size


def test_the_aicb_schedule_reads_the_mla_sections_back(tmp_path):
    out = tmp_path / "p.txt"
    args = ["--model", "deepseek-tiny", "--world_size=8", "--tensor_model_parallel_size=2",
            "--expert_model_parallel_size=2", "--enable_sequence_parallel", "--global_batch=8"]
    assert cli.main(["profile", *args, "-o", str(out)]) == 0
    profile = pf.read(out, require_standard=True)
    w_out = tmp_path / "w.txt"
    assert cli.main(["generate", *args, "--aiob_enable", f"--comp_filepath={out}", "-o", str(w_out)]) == 0
    from commsweep.workload import format as wformat

    rows = wformat.read(w_out).rows
    o_row = next(r for r in rows if r.name == "attention_o_row")
    q_lora = next(r for r in rows if r.name == "attention_linear_q_lora")
    assert o_row.fwd_compute == int(round(float(profile.get("attention_o_row").avg) * 1000) / 2)
    assert q_lora.fwd_compute == round(float(profile.get("attention_linear_q_lora").avg) * 1000)


def test_the_torch_backend_refuses_mla():
    s = TrainingSetup(model=PRESETS["deepseek-tiny"], world_size=1)
    from commsweep.aiob import backends

    with pytest.raises(ConfigError, match="multi-latent attention"):
        backends.make(s, "torch", "H100-SXM")
