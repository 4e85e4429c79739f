"""The memory model against Korthikanti et al. 2022's figures, and the sweep's fits verdict."""

from __future__ import annotations

import csv
import dataclasses
import io

import pytest

from commsweep.orchestration import sweep
from commsweep.setup import memory
from commsweep.setup.models import PRESETS, ModelSpec
from commsweep.setup.training import TrainingSetup
from commsweep.workload.megatron import expert_parameters, local_parameters, stage_layers

from conftest import REPO

GIB = 1 << 30
# Korthikanti et al. 2022, Figure 1 (A100 80GB, Table 3's configurations): GiB per GPU of
# the parameters with their gradients and optimizer states (the transformer layers' 12h^2
# per layer at 18 bytes), and of the activations without parallelism beyond TP ("none")
# and with sequence parallelism and selective recompute ("seqsel").
FIGURE_1 = {
    # model: (layers, hidden, heads, t, p, micro batch, global batch, v), (states, none, seqsel)
    "22B": ((48, 6144, 64, 8, 1, 4, 4, 1), (45.5625, 59.25, 9.5625)),
    "175B": ((96, 12288, 96, 8, 8, 1, 64, 3), (45.5625, 66.84375, 12.3515625)),
    "530B": ((105, 20480, 128, 8, 35, 1, 280, 3), (31.640625, 114.0234375, 23.076171875)),
    "1T": ((128, 25600, 160, 8, 64, 1, 512, 1), (32.958984375, 131.25, 26.5625)),
}


def paper_setup(name: str, **kw) -> TrainingSetup:
    (layers, h, heads, t, p, mb, gb, v), _ = FIGURE_1[name]
    model = ModelSpec(name=name, num_layers=layers, hidden_size=h, num_attention_heads=heads, ffn_hidden_size=4 * h,
                      vocab_size=51200, max_position_embeddings=2048)
    kw = {"sp": False, "recompute": False, "distributed_optimizer": False, **kw}
    return TrainingSetup(model=model, world_size=t * p, tp=t, pp=p, micro_batch=mb, global_batch=gb,
                         virtual_pipeline=v, **kw)


def estimate(setup: TrainingSetup, **kw) -> memory.Memory:
    params = {stage: local_parameters(setup, stage) for stage in {0, setup.pp - 1}}
    return memory.estimate(setup, params, flash_attention=kw.pop("flash_attention", False), dropout=kw.pop("dropout", True))


@pytest.mark.parametrize("name", FIGURE_1)
def test_activations_are_korthikanti_figure_1(name):
    _, (_, none, seqsel) = FIGURE_1[name]
    plain, ours = estimate(paper_setup(name)), estimate(paper_setup(name, sp=True, recompute=True))
    assert plain.stage == ours.stage == 0  # the first stage holds the most micro-batches
    if name == "22B":  # one stage: the first is also the last, with the cross entropy's fp32 logits
        logits = 4 * 2048 * 4 * 51200 // 8 + 2 * 2048 * 4 * 6144
        assert (plain.activations - logits) / GIB == pytest.approx(none, rel=1e-6)
        assert (ours.activations - logits) / GIB == pytest.approx(seqsel, rel=1e-6)
    else:
        assert plain.activations / GIB == pytest.approx(none, rel=1e-6)
        assert ours.activations / GIB == pytest.approx(seqsel, rel=1e-6)


@pytest.mark.parametrize("name", FIGURE_1)
def test_model_states_are_18_bytes_per_parameter(name):
    setup = paper_setup(name)
    mem = estimate(setup)
    params = local_parameters(setup, mem.stage)
    assert (mem.weights, mem.gradients, mem.optimizer) == (2 * params, 4 * params, 12 * params)
    # The figure counts the layers' 12 h^2 per layer only; the embeddings and biases add
    # to it (most for 1T: its first stage has two layers beside the word embedding).
    _, (states, _, _) = FIGURE_1[name]
    assert states <= (mem.weights + mem.gradients + mem.optimizer) / GIB <= states * 1.12


def test_distributed_optimizer_shards_only_the_optimizer_states():
    plain = estimate(paper_setup("175B"))
    setup = dataclasses.replace(paper_setup("175B"), world_size=64 * 4, global_batch=256)
    sharded = estimate(dataclasses.replace(setup, distributed_optimizer=True))
    assert (sharded.weights, sharded.gradients) == (plain.weights, plain.gradients)
    assert sharded.optimizer == -(-plain.optimizer // 4)


def test_recompute_and_flash_attention_shrink_the_activations_in_order():
    base = paper_setup("175B")
    none, selective, full = (estimate(dataclasses.replace(base, recompute=r != "none",
                                                          recompute_granularity="full" if r == "full" else "selective"))
                             for r in ("none", "selective", "full"))
    assert none.activations > selective.activations > full.activations
    # Flash attention keeps no s^2 tensor: what selective recompute saves, it never stores.
    flash = estimate(base, flash_attention=True)
    assert flash.activations < selective.activations * 1.01
    # Sequence parallelism splits what TP replicates.
    assert estimate(dataclasses.replace(base, sp=True)).activations < none.activations


def test_in_flight_micro_batches_follow_the_schedule():
    setup = paper_setup("175B")  # p = 8, v = 3, 64 micro-batches
    assert memory.in_flight(setup, 0) == pytest.approx(8 * (1 + 7 / 24))
    assert memory.in_flight(dataclasses.replace(setup, virtual_pipeline=1), 0) == 8
    assert memory.in_flight(dataclasses.replace(setup, virtual_pipeline=1), 7) == 1
    few = dataclasses.replace(setup, global_batch=2, virtual_pipeline=1)
    assert memory.in_flight(few, 0) == 2


def test_fits_keeps_a_reserve():
    mem = estimate(paper_setup("22B", sp=True, recompute=True))
    assert mem.fits(80) and not mem.fits(40)
    assert not mem.fits(mem.total_gib + memory.RESERVE_GIB / 2)


SWEEP = """
sweep:
  model: [gpt-175b]
  world_size: [{world}]
  tp: [8]
  pp: [1, 8]
  ep: [1]
  sp: [true]
  aiob: [false]
  schedule: [megatron]
  micro_batch: [1]
  global_batch: [64]
  seq_length: [2048]
  recompute: [false]
  network: [net]
networks:
  net: {{gpus_per_server: 8, nics_per_server: 8, nvlink_gbps: 300, nic_gbps: 25}}
aiob: {{backend: roofline, gpu: A100-40GB}}
skip_invalid: {skip}
"""


def load(tmp_path, **kw):
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP.format(**kw))
    return sweep.load_config(path)


def test_a_sweep_marks_the_points_that_do_not_fit(tmp_path):
    # GPT-175B on 512 A100-40GB: with TP 8 alone a GPU holds 22B parameters (too much); with PP 8 it fits.
    points, invalid = sweep.points_from_config(load(tmp_path, world=512, skip="false"))
    assert not invalid
    table = list(csv.DictReader(io.StringIO(sweep.table_csv(points))))
    verdict = {(row["pp"], row["fits"]) for row in table}
    assert verdict == {("1", "False"), ("8", "True")}
    big = next(row for row in table if row["pp"] == "1")
    assert float(big["memory_gib"]) > 40 * 3
    # With skip_invalid the point is dropped, with the reason.
    points, invalid = sweep.points_from_config(load(tmp_path, world=512, skip="true"))
    assert [p.pp for p in points] == [8]
    (dropped,) = invalid
    assert dropped.values["pp"] == 1
    assert dropped.reasons[0].startswith(f"needs {float(big['memory_gib']):.1f} GiB per GPU; the A100-40GB has 40 GiB")
    assert "skipped: needs" in sweep.table_csv(points, invalid)


def test_an_unknown_gpu_label_leaves_the_verdict_empty():
    setup = paper_setup("22B")
    assert sweep.memory_verdict(setup, "my-lab-gpu")[1] is None
    assert sweep.memory_verdict(setup, "A100-80GB")[1] is not None


# MoE layers: one expert of the dense MLP's width, top-1, is the dense layer plus what routing
# adds; the routed experts' optimizer states are sharded over the expert data-parallel group.
ONE_EXPERT = dataclasses.replace(PRESETS["llama-7b"], name="llama-7b-one-expert", num_experts=1, moe_topk=1)


@pytest.mark.parametrize("tp, sp", [(1, False), (2, True), (4, True), (2, False)])
def test_an_moe_layer_of_one_expert_is_the_dense_layer_plus_its_routing(tp, sp):
    dense = TrainingSetup(model=PRESETS["llama-7b"], world_size=8, tp=tp, sp=sp, micro_batch=2, global_batch=16,
                          seq_length=2048)
    moe = dataclasses.replace(dense, model=ONE_EXPERT)
    s, b, h = 2048, 2, ONE_EXPERT.hidden_size
    tokens = s * b // tp if sp else s * b
    received = tokens * (tp if sp else 1)  # the experts' input is gathered over ETP (= TP) with SP
    routing = 4 * tokens * (1 + 1) + 2 * received * h + 2 * tokens * h  # router; experts' input; unpermute
    for flash in (True, False):
        kept, _ = memory.layer_activations(dense, flash_attention=flash, dropout=True)
        moe_kept, _ = memory.layer_activations(moe, flash_attention=flash, dropout=True, moe=True)
        assert moe_kept - kept == pytest.approx(routing, abs=1)


def test_top_k_routing_keeps_k_copies_of_the_tokens():
    base = TrainingSetup(model=dataclasses.replace(ONE_EXPERT, num_experts=8, moe_topk=1), world_size=8, tp=2, sp=True,
                         ep=4, micro_batch=1, global_batch=8, seq_length=4096)
    top2 = dataclasses.replace(base, model=dataclasses.replace(base.model, moe_topk=2))
    one, two = (memory.moe_mlp_activations(s) for s in (base, top2))
    tokens = 4096 // 2
    # All but the router's softmax output (T x E fp32) doubles with k; the probabilities add T x 4.
    router_softmax = 4 * tokens * 8
    assert two - router_softmax - 4 * tokens * 2 == pytest.approx(2 * (one - router_softmax - 4 * tokens))


def test_moe_optimizer_states_add_up_to_12_bytes_per_parameter_over_the_world():
    # Summed over every rank, the distributed optimizer holds each parameter's 12 bytes once
    # (the norms, replicated over TP, a little more), the experts sharded over DP_EP.
    model = PRESETS["mixtral-8x7b"]
    whole = TrainingSetup(model=model, world_size=1, micro_batch=1, global_batch=1, seq_length=4096)
    total = local_parameters(whole, 0)
    for ws, tp, ep, pp in [(64, 2, 4, 1), (64, 1, 8, 2), (128, 4, 8, 4)]:
        setup = TrainingSetup(model=model, world_size=ws, tp=tp, ep=ep, pp=pp, sp=tp > 1, micro_batch=1,
                              global_batch=ws, seq_length=4096, distributed_optimizer=True)
        stages = range(pp)
        summed = 0
        for stage in stages:
            mem = memory.estimate(setup, {stage: local_parameters(setup, stage)},
                                  expert_parameters={stage: expert_parameters(setup, stage)},
                                  moe_layers={stage: sum(map(model.is_moe_layer, stage_layers(setup, stage)))})
            summed += mem.optimizer * ws // pp
        assert summed == pytest.approx(12 * total, rel=2e-3), (ws, tp, ep, pp)


def test_the_moe_sweep_says_which_points_fit_and_keeps_them_when_asked(tmp_path):
    config = sweep.load_config(REPO / "config" / "moe.yaml")
    points, _ = sweep.points_from_config(config)
    table = list(csv.DictReader(io.StringIO(sweep.table_csv(points))))
    fits = {(row["model"], row["fits"]) for row in table}
    # Mixtral-8x7B at EP 2 or 4 on 16 H100s needs more than 80 GiB; Qwen1.5-MoE fits.
    assert fits == {("mixtral-8x7b", "False"), ("qwen1.5-moe-a2.7b", "True")}
    assert all(float(row["memory_gib"]) > 0 for row in table)
    dropped, invalid = sweep.points_from_config({**config, "skip_unfit": None})
    assert {p.model for p in dropped} == {"qwen1.5-moe-a2.7b"}
    assert any(r.startswith("needs ") and "the H100-SXM has 80 GiB" in r for i in invalid for r in i.reasons)


@pytest.mark.trace
def test_a_megatron_core_layer_keeps_what_the_model_counts(tmp_path):
    """Measured, not derived: one layer of real megatron-core (its local GPT spec, on the
    CPU) keeps for backward what ``layer_activations`` counts without flash attention or
    dropout, to the norms' statistics (two fp32 values per token and norm)."""
    import json
    import os
    import subprocess
    import sys

    from commsweep.trace import runner

    missing = runner.missing_dependencies()
    if missing:
        pytest.skip(missing)
    s, b, h, a, f = 128, 2, 256, 4, 1024
    out = subprocess.run([sys.executable, "-m", "commsweep.trace.activations", "--hidden", str(h), "--heads", str(a),
                          "--ffn", str(f), "--seq", str(s), "--micro-batch", str(b)],
                         capture_output=True, text=True, timeout=600, check=True,
                         env={**os.environ, "TMPDIR": str(tmp_path)})
    assert not list(tmp_path.glob("commsweep-*"))  # no folder of ours left in the temporary directory
    measured = json.loads(out.stdout.splitlines()[-1])["saved_bytes_16bit"]
    model = ModelSpec(name="layer", num_layers=1, hidden_size=h, num_attention_heads=a, ffn_hidden_size=f,
                      vocab_size=128, max_position_embeddings=s)
    setup = TrainingSetup(model=model, world_size=1, micro_batch=b, global_batch=b, seq_length=s)
    stored, _ = memory.layer_activations(setup, flash_attention=False, dropout=False)
    norm_statistics = 2 * 2 * 4 * s * b // 2  # two norms, mean and rstd, fp32, per 16-bit value
    assert measured == stored + norm_statistics


# Multi-latent attention: against a multi-head layer of the same widths (qk = v = hidden/heads)
# it adds the latents and the key's RoPE part, and its heads' Q, K, V widths replace hidden's.
@pytest.mark.parametrize("tp, sp", [(1, False), (2, False), (2, True), (4, True)])
def test_mla_keeps_its_latents_and_its_heads_q_k_v(tp, sp):
    mha = dataclasses.replace(PRESETS["llama-7b"], name="llama-7b-mha")
    d = mha.hidden_size // mha.num_attention_heads  # 128
    mla_model = dataclasses.replace(mha, name="llama-7b-mla", q_lora_rank=1536, kv_lora_rank=512,
                                    qk_nope_head_dim=d - 64, qk_rope_head_dim=64, v_head_dim=d)
    s, b = 4096, 2
    dense = TrainingSetup(model=mha, world_size=8, tp=tp, sp=sp, micro_batch=b, global_batch=16, seq_length=s)
    mla = dataclasses.replace(dense, model=mla_model)
    # Q, K, V and the projection's input are as wide as the dense layer's (qk = v = d), so
    # only the latents differ: norm inputs 2sb(q + kv) and the key's RoPE 2sb*64, split over
    # TP with SP only; the up projections' inputs 2sb(q + kv), on every rank whole.
    replicated = 2 * s * b * (1536 + 512 + 64)
    whole = 2 * s * b * (1536 + 512)
    expected = (replicated / tp if sp and tp > 1 else replicated) + whole
    for flash in (True, False):
        kept, _ = memory.layer_activations(dense, flash_attention=flash, dropout=True)
        mla_kept, _ = memory.layer_activations(mla, flash_attention=flash, dropout=True)
        assert mla_kept - kept == pytest.approx(expected, abs=1)


def test_mla_heads_widths_scale_q_k_v():
    v3 = PRESETS["deepseek-v3"]
    base = TrainingSetup(model=v3, world_size=8, tp=8, sp=True, ep=8, micro_batch=1, global_batch=8, seq_length=4096)
    wider = dataclasses.replace(base, model=dataclasses.replace(v3, v_head_dim=v3.v_head_dim + 64))
    a, s = v3.num_attention_heads, 4096
    # V and the output projection's input, 2sb*a*v each, over t = 8.
    extra = 2 * (2 * s * a * 64) / 8
    assert (memory.layer_activations(wider, flash_attention=True, dropout=True)[0]
            - memory.layer_activations(base, flash_attention=True, dropout=True)[0]) == pytest.approx(extra, abs=1)
