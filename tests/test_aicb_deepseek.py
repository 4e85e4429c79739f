"""AICB's DeepSeek frame (aicb_deepseek) without AICB: its structure, checked against facts.

The expected values come from the model's shapes and from AICB's rules as stated (not from
the emulation's own output): parameter counts summed here from the MLA and expert matrices,
collective sizes from b, s, h, k and t, the FP8 factor from its definition, the rows the
Megatron frame writes where the two frames build the same modules. ``test_aicb_deepseek_real.py``
compares the frame with real AICB byte for byte when AICB_ROOT is set.
"""

from __future__ import annotations

import dataclasses

import pytest

from commsweep.aiob import profile_file
from commsweep.base.errors import ConfigError
from commsweep.orchestration import cli, sweep
from commsweep.orchestration.cli import build_parser
from commsweep.setup.config_schema import validate_config
from commsweep.setup.models import PRESETS, ModelSpec
from commsweep.setup.training import TrainingSetup
from commsweep.workload import aicb, aicb_deepseek
from commsweep.workload import format as wformat
from commsweep.workload.stage import from_arguments

TINY = PRESETS["deepseek-tiny"]  # 4 layers, h 256, 8 heads, 8 experts top-2, 1 dense, 1 shared


def profile():
    """An AIOB file with AICB's Megatron sections and the five MLA sections (times in us)."""
    names = ["Emb", "layernorm", "atten_qkv", "atten_flash", "atten_linear", "layernorm2", "mlp_linear_1",
             "mlp_gelu", "mlp_linear_2", "layernorm_post", "logit_time", "param_time", *aicb.PER_LAYER_KEYS]
    ops = tuple((n, profile_file.OpTime(max=3 * i + 9, min=i + 5, avg=2 * i + 7)) for i, n in enumerate(names))
    return profile_file.AiobProfile(sections=ops)


def setup(**kw):
    base = dict(model=TINY, world_size=8, tp=2, ep=2, sp=True, global_batch=8, seq_length=512)
    return TrainingSetup(**{**base, **kw})


def rows(workload, name):
    return [r for r in workload.rows if r.name == name]


def test_moe_traffic_with_the_fp8_dispatch():
    s = setup(micro_batch=2)
    w = aicb_deepseek.generate(s, profile())
    u = 2 * 2 * 512 * 256  # 2bsh
    k, t = TINY.moe_topk, 2
    moe = rows(w, "mlp_moelayer")
    # 3 MoE layers (the first is dense) x 5 rows x g micro-batches.
    assert len(moe) == 3 * 5 * s.num_microbatches
    gather, dispatch, tp_gather, tp_scatter, combine = moe[:5]
    assert (gather.fwd_comm, gather.fwd_size) == ("ALLGATHER", 2 * 2 * 8 * 2)  # 2 x ep x experts x tp
    # DeepEP's FP8: one byte per element plus a 4-byte scale per 128, over bf16's two: 33/64.
    assert (dispatch.fwd_comm, dispatch.fwd_size) == ("ALLTOALL_EP", (u * k // t) * 33 // 64)
    assert (dispatch.ig_comm, dispatch.ig_size) == ("ALLTOALL_EP", u * k // t)
    assert combine.fwd_size == combine.ig_size == u * k // t
    assert tp_gather.fwd_size == tp_scatter.fwd_size == u * k


def test_mla_tp_traffic_is_sized_on_the_hidden_size():
    u = 2 * 1 * 512 * 256
    for ranks in ((96, 64), (16, 512)):
        model = dataclasses.replace(TINY, q_lora_rank=ranks[0], kv_lora_rank=ranks[1])
        w = aicb_deepseek.generate(setup(model=model), profile())
        for name, comm in (("attention_q_column", "ALLGATHER"), ("attention_kv_column", "ALLGATHER"),
                           ("attention_o_row", "REDUCESCATTER")):
            assert {(r.fwd_comm, r.fwd_size) for r in rows(w, name)} == {(comm, u)}
        # The down projections are unsharded: compute only.
        assert {r.fwd_comm for r in rows(w, "attention_linear_kv_lora")} == {"NONE"}


def test_mla_compute_times_are_the_per_layer_sections():
    p, w = profile(), aicb_deepseek.generate(setup(), profile())
    for name in aicb.PER_LAYER_KEYS:
        avg = p.get(name).avg * 1000  # us -> ns
        first = rows(w, name)[0]
        # Sharded linears: AICB halves the time of row and column lines.
        expected = int(avg / 2) if name.endswith(("_column", "_row")) else avg
        assert first.fwd_compute == first.ig_compute == expected
    # Without the sections (a Megatron AIOB file) AICB's table holds 0 for them.
    plain = profile_file.AiobProfile(sections=tuple((n, op) for n, op in p.sections if n not in aicb.PER_LAYER_KEYS))
    assert {r.fwd_compute for r in rows(aicb_deepseek.generate(setup(), plain), "attention_q_column")} == {0}


def mla_params(m: ModelSpec, t: int = 1) -> int:
    """One layer's MLA weights (no biases) and its two latent norms' weight and bias, per TP rank."""
    h, heads, q, kv = m.hidden_size, m.num_attention_heads, m.q_lora_rank or 0, m.kv_lora_rank
    nope, rope, v = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim
    return (h * q + q * heads * (nope + rope) // t + h * (kv + rope) + kv * heads * (nope + v) // t
            + heads * v * h // t + 2 * q + 2 * kv)


def test_parameters_of_deepseek_v3_and_the_shared_experts_counted_twice():
    v3 = PRESETS["deepseek-v3"]
    s = TrainingSetup(model=v3, world_size=16, ep=8, sp=True, global_batch=16, seq_length=4096)
    total, moe = aicb_deepseek.parameter_counts(s)
    h, f = v3.hidden_size, v3.moe_ffn_hidden_size
    shared = 2 * h * f  # AICB's shared MLP: fc1 and fc2 as wide as a routed expert (no gate)
    # DeepSeek-V3's 58 MoE layers hold 256 routed experts of three h x 2048 matrices each
    # (config.json), 32 per rank with EP 8, plus the shared MLP inside AICB's MoE layer.
    assert moe == 58 * (32 * 3 * h * f + shared)
    vocab = s.padded_vocab
    dense_mlp = 2 * h * f  # AICB's dense layers take --ffn_hidden_size (the expert width) too
    expected = (4 * vocab * h + 4096 * h  # AICB's embedding: 4 x V' rows, a position table of s rows
                + 61 * (mla_params(v3) + 2 * h)  # MLA and the MLP's norm
                + 3 * dense_mlp + moe + 58 * shared  # the shared MLP again as its own module
                + h * vocab)  # the output layer
    assert total == expected
    w = aicb_deepseek.generate(s, profile())
    assert rows(w, "grad_gather")[0].wg_size == 2 * (total - moe)  # dense DP: the shared MLP in it
    assert rows(w, "moe_grad_norm1")[0].wg_size == 2 * moe  # DP_EP: the shared MLP in it too


def test_each_pipeline_stage_restarts_the_dense_layers():
    model = dataclasses.replace(TINY, num_layers=7, moe_first_k_dense=2)
    s = setup(model=model, world_size=16, pp=2, global_batch=4)
    w = aicb_deepseek.generate(s, profile())
    assert w.header.vpp == 7 // 2  # AICB floors the layers per stage
    per_batch = s.num_microbatches
    # Layers 0 and 1 of the stage are dense (their MLP rows), layer 2 is MoE (5 rows).
    assert len(rows(w, "mlp_moelayer")) == 1 * 5 * per_batch
    assert len(rows(w, "mlp_column")) == (2 + 1) * per_batch  # two dense MLPs and the shared one


def test_without_sp_the_blocks_are_whole_and_the_shared_mlp_is_a_layer_of_its_own():
    s = setup(sp=False, ep=1, world_size=2, global_batch=1)
    w = aicb_deepseek.generate(s, None, moe_enable=False)
    names = [r.name for r in w.rows if r.name not in ("grad_norm", "layernorm", "embedding_norm")
             and not r.name.startswith(("cross_entropy", "optimizer"))]
    assert names == ["embedding_layer", "attention_layer_mla", "mlp_layer"] + 3 * [
        "attention_layer_mla", "mlp_moelayer", "mlp_layer"]
    assert {r.fwd_comm for r in w.rows if r.name.startswith(("attention", "mlp"))} == {"ALLREDUCE"}


def test_dense_rows_are_the_megatron_frames():
    # All-dense DeepSeek layers and a dense Megatron model of the same widths build the same
    # embedding, MLP, output layer and tail; only the attention differs.
    dense = dataclasses.replace(TINY, num_experts=None, moe_ffn_hidden_size=None,
                                moe_shared_expert_intermediate_size=None, ffn_hidden_size=128)
    gpt = dataclasses.replace(dense, kv_lora_rank=None, q_lora_rank=None, qk_nope_head_dim=None,
                              qk_rope_head_dim=None, v_head_dim=None)
    kw = dict(world_size=4, tp=2, sp=True, global_batch=4, seq_length=512)
    ours = aicb_deepseek.generate(TrainingSetup(model=dense, **kw), profile())
    theirs = aicb.generate(TrainingSetup(model=gpt, **kw), profile())
    shared = {"embedding_layer", "mlp_column", "mlp_row", "final_column", "embedding_grads",
              *(f"cross_entropy{i}" for i in (1, 2, 3)), *(f"optimizer{i}" for i in (1, 2, 3, 4))}
    assert ours.header == theirs.header

    def drop_times(rs):
        # The compute times leak from the row before (AICB's variables), which differs.
        return [(r.name, r.fwd_comm, r.fwd_size, r.ig_comm, r.ig_size, r.wg_comm) for r in rs if r.name in shared]

    assert drop_times(ours.rows) == drop_times(theirs.rows)


@pytest.mark.parametrize("extra, says", [
    (["--enable_sequence_parallel", "--moe_enable"], ["'NoneType' object has no attribute 'keys'", "--enable_sequence_parallel", "--aiob_enable"]),
    (["--moe_enable"], ["moe must be enabled with sequence parallel", "--moe_enable"]),
    (["--enable_sequence_parallel", "--n_dense_layers=1", "AIOB"], ["'SIMAI_workload' object has no attribute 'expert_model_parallel_size'", "--moe_enable"]),
    (["--tensor_model_parallel_size=4", "--num_attention_heads=6", "--qk_nope_dim=7", "--qk_rope_dim=5",
      "--v_head_dim=5"], ["attention output layer needs tp=4", "heads x v_head_dim = 30"]),
])
def test_refusals_name_aicbs_behaviour_write_nothing_and_exit_2(extra, says, tmp_path, capsys):
    aiob = tmp_path / "p.txt"
    profile_file.write(profile(), aiob)
    extra = [a for a in extra if a != "AIOB"] + (["--aiob_enable", f"--comp_filepath={aiob}"] if "AIOB" in extra else [])
    out = tmp_path / "w.txt"
    argv = ["generate", "--frame=DeepSeek", "--world_size=8", "--global_batch=8", "--num_layers=3",
            "--hidden_size=256", "--num_attention_heads=8", "--ffn_hidden_size=128", "--num_experts=4", *extra,
            "-o", str(out)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert all(s in err for s in says), err
    assert not out.exists()


def test_the_sweep_takes_the_deepseek_frame_on_aiobs_path_only():
    base = {"model": ["deepseek-tiny"], "world_size": [8], "tp": [2], "ep": [2], "sp": [True],
            "global_batch": [8], "schedule": ["aicb"]}
    cfg = {"sweep": {**base, "aiob": [False, True]}}
    validate_config(cfg)
    points, invalid = sweep.expand(cfg)
    assert [p.aiob for p in points] == [True]
    assert "'NoneType' object has no attribute 'keys'" in " ".join(invalid[0].reasons)


def test_a_preset_on_the_command_line_is_its_aicb_command_line(tmp_path):
    # generate --model deepseek-tiny is what to_aicb_argv passes AICB (--frame DeepSeek, its flags).
    aiob = tmp_path / "p.txt"
    profile_file.write(profile(), aiob)
    common = ["--world_size=8", "--tensor_model_parallel_size=2", "--expert_model_parallel_size=2",
              "--enable_sequence_parallel", "--global_batch=8", "--aiob_enable", f"--comp_filepath={aiob}"]
    from commsweep.setup.arguments import to_aicb_argv

    by_preset, _ = from_arguments(build_parser().parse_args(["generate", "--model", "deepseek-tiny", *common]))
    s = TrainingSetup(model=TINY, world_size=8, tp=2, ep=2, sp=True, global_batch=8)
    spelled = [a for a in to_aicb_argv(s) if not a.startswith("--model_name")]
    by_flags, _ = from_arguments(build_parser().parse_args(["generate", *spelled, *common]))
    assert by_preset == by_flags
    assert wformat.parse(by_preset).header.ep == 2
    with pytest.raises(ConfigError, match="AICB's Megatron frame cannot build"):
        from_arguments(build_parser().parse_args(["generate", "--model", "deepseek-tiny", "--frame=Megatron"]))
