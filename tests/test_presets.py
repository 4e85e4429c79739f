"""Every preset through the command line, as a user runs it: `commsweep generate` and `commsweep profile`."""

from __future__ import annotations

import pytest

from commsweep.aiob import gpus
from commsweep.aiob import profile_file as pf
from commsweep.orchestration import cli, sweep
from commsweep.setup.models import presets
from commsweep.setup.training import TrainingSetup
from commsweep.workload import format as wformat
from commsweep.workload import generate


def setup_args(name):
    """A small valid setup of the preset: 8 GPUs, TP 2, and for MoE EP 2 with SP (AICB needs it)."""
    moe = presets()[name].is_moe
    args = ["--model", name, "--world_size=8", "--tensor_model_parallel_size=2", "--global_batch=8"]
    return args + (["--expert_model_parallel_size=2", "--enable_sequence_parallel"] if moe else [])


def schedules(name):
    m = presets()[name]
    setup = TrainingSetup(model=m, world_size=8, tp=2, ep=2 if m.is_moe else 1, sp=m.is_moe, global_batch=8)
    # AICB's DeepSeek frame writes expert-parallel traffic on its AIOB path only.
    return [s for s in generate.SCHEDULES if not generate.schedule_problems(setup, s, aiob=m.is_mla)]


@pytest.mark.parametrize("name", list(presets()))
def test_preset_generates(name, tmp_path):
    assert schedules(name), f"{name}: no schedule can write it"
    aiob = []
    if presets()[name].is_mla:
        assert cli.main(["profile", *setup_args(name), "-o", str(tmp_path / "p.txt")]) == 0
        aiob = ["--aiob_enable", f"--comp_filepath={tmp_path / 'p.txt'}"]
    for schedule in schedules(name):
        out = tmp_path / f"{schedule}.txt"
        assert cli.main(["generate", *setup_args(name), *aiob, "--schedule", schedule, "-o", str(out)]) == 0
        workload = wformat.read(out)
        assert workload.header.all_gpus == 8
        assert len(workload.rows) >= presets()[name].num_layers


@pytest.mark.parametrize("name", list(presets()))
def test_preset_profiles_on_every_gpu(name, tmp_path):
    attention = "attention_kv_column" if presets()[name].is_mla else "atten_qkv"
    for gpu in gpus.known_gpus():
        out = tmp_path / f"{gpu}.txt"
        assert cli.main(["profile", *setup_args(name), "--gpu", gpu, "-o", str(out)]) == 0
        profile = pf.read(out, require_standard=True)
        assert float(profile.get(attention).avg) > 0 and float(profile.get("mlp_linear_1").avg) > 0


def test_unknown_preset_is_a_config_error(capsys):
    assert cli.main(["generate", "--model", "gpt-9b"]) == 2
    err = capsys.readouterr().err
    assert "--model: unknown preset 'gpt-9b'; presets: gpt-7b, gpt-13b" in err


def test_deepseek_presets_keep_their_published_layout():
    v3, lite = presets()["deepseek-v3"], presets()["deepseek-v2-lite"]
    # DeepSeek-V3: 3 dense layers, then 58 MoE layers; V2-Lite: 1, then 26.
    assert [v3.is_moe_layer(i) for i in range(61)] == [False] * 3 + [True] * 58
    assert sum(map(lite.is_moe_layer, range(27))) == 26
    assert v3.qk_head_dim == 192 and lite.q_lora_rank is None and lite.is_mla


@pytest.mark.parametrize("fields, key", [
    ({"kv_lora_rank": 64, "qk_rope_head_dim": 16, "v_head_dim": 32}, "models.m.qk_nope_head_dim"),
    ({"q_lora_rank": 64}, "models.m.q_lora_rank"),
])
def test_incomplete_mla_is_a_config_error_naming_the_field(fields, key):
    from commsweep.base.errors import ConfigError
    from commsweep.setup.models import model_from_dict

    with pytest.raises(ConfigError) as err:
        model_from_dict("m", {"base": "gpt-7b", **fields})
    assert err.value.key == key


@pytest.mark.parametrize("name, billions", [("deepseek-v3", 671), ("deepseek-v2-lite", 15.7)])
def test_deepseek_presets_have_their_published_size(name, billions):
    # DeepSeek-V3 report: 671B parameters (the MTP module aside); DeepSeek-V2 paper: V2-Lite 15.7B.
    from commsweep.workload.megatron import local_parameters

    whole = TrainingSetup(model=presets()[name], world_size=1, seq_length=4096)
    assert local_parameters(whole) / 1e9 == pytest.approx(billions, rel=0.005)
