"""DeepSeek-style models: the megatron schedule against real megatron-core's multi-latent
attention, shared experts, first dense layers and all-to-all dispatcher.

The ``trace``-marked tests run megatron-core 0.16.1 on 4 gloo processes, one launch for
every case (imports dominate), with the CPU stand-ins for the Transformer Engine modules
of megatron's MLA spec (``trace/model.py``); they skip where the megatron extra is not
installed. The others check the schedule's MLA rows and the scaled setups without megatron.
"""

from __future__ import annotations

import dataclasses

import pytest

from commsweep.setup.models import PRESETS
from commsweep.setup.training import TrainingSetup
from commsweep.trace import compare, runner, scale
from commsweep.trace.records import Trace
from commsweep.workload import megatron, megatron_mla, megatron_releases

MISSING = runner.missing_dependencies()
V3, V2_LITE = PRESETS["deepseek-v3"], PRESETS["deepseek-v2-lite"]
V3_DENSE = dataclasses.replace(V3, name="mla-dense", num_experts=None, moe_first_k_dense=0)  # MLA alone


def point(model, tp: int, ep: int = 1, *, pp: int = 1, etp: int | None = None, sp: bool | None = None) -> TrainingSetup:
    return TrainingSetup(model=model, world_size=64, tp=tp, pp=pp, ep=ep, etp=etp, sp=tp > 1 if sp is None else sp,
                         global_batch=64)


# name -> (setup, DP of the trace); every case runs on 4 processes.
CASES = {
    "v3_tp2_sp_ep2": (point(V3, 2, 2), 1),  # query latent, shared expert, first layer dense, aux loss
    "v3_tp2_sp_etp1_ep2": (point(V3, 2, 2, etp=1), 1),  # DeepSeek's expert TP 1 under TP 2
    "v3_tp1_ep4": (point(V3, 1, 4), 1),  # no TP: MLA moves nothing
    "v3_tp1_ep2_dp4": (point(V3, 1, 2), 4),  # expert gradients on a DP_EP group of 2
    "v3_tp1_pp2_ep2": (point(V3, 1, 2, pp=2), 1),  # the dense layer on stage 0 only
    "v2lite_tp2_sp_ep2": (point(V2_LITE, 2, 2), 1),  # no query latent: linear_q_proj from the hidden state
    "mla_tp2_nosp_dp2": (point(V3_DENSE, 2, sp=False), 2),  # MLA without SP: all-reduces of the latents
    "mla_tp4_sp": (point(V3_DENSE, 4), 1),
}


# -- without megatron ---------------------------------------------------------------------


def rows_of(setup: TrainingSetup, layer: int) -> dict[str, tuple]:
    sched = megatron.schedule(setup)
    return {b.name: (b.module, b.fwd, b.ig, b.wg) for b in sched.blocks if b.layer == layer and b.micro_batch == 0
            and "attention" in b.name}


def test_mla_moves_the_latents_over_tp_not_the_hidden_state():
    setup = point(V3, 8, 8)
    tokens = setup.micro_batch * setup.seq_length
    rows = rows_of(setup, 3)
    u = setup.activation_bytes
    ag, rs = ("allgather", "TP"), ("reducescatter", "TP")
    assert list(rows) == ["layer3_attention_k_rope_gather", "layer3_attention_q_up_proj",
                          "layer3_attention_q_up_proj_wgrad_gather", "layer3_attention_kv_up_proj",
                          "layer3_attention_kv_up_proj_wgrad_gather", "layer3_attention_proj"]
    sizes = {name: ((f.collective, f.group, f.bytes) if f else None, (i.collective, i.group, i.bytes) if i else None)
             for name, (_, f, i, _) in rows.items()}
    assert sizes["layer3_attention_k_rope_gather"] == ((*ag, 2 * tokens * 64), (*rs, 2 * tokens * 64))
    assert sizes["layer3_attention_q_up_proj"] == ((*ag, 2 * tokens * 1536), (*rs, 2 * tokens * 1536))
    assert sizes["layer3_attention_kv_up_proj_wgrad_gather"] == (None, (*ag, 2 * tokens * 512))
    assert sizes["layer3_attention_proj"] == ((*rs, u), (*ag, u))
    # A dense layer's attention gathers u before linear_qkv: MLA's first gathers are latents.
    assert 2 * tokens * (64 + 1536 + 512) < u


def test_mla_without_sp_all_reduces_the_latent_gradients_and_v2_lite_projects_queries_from_the_hidden_state():
    rows = rows_of(point(V3_DENSE, 4, sp=False), 0)
    setup = point(V3_DENSE, 4, sp=False)
    tokens = setup.micro_batch * setup.seq_length
    assert [(n, f and f.collective, i and (i.collective, i.bytes)) for n, (_, f, i, _) in rows.items()] == [
        ("layer0_attention_q_up_proj", None, ("allreduce", 2 * tokens * 1536)),
        ("layer0_attention_kv_up_proj", None, ("allreduce", 2 * tokens * 512)),
        ("layer0_attention_proj", "allreduce", None),
    ]
    lite = rows_of(point(V2_LITE, 2, 2), 1)
    assert lite["layer1_attention_q_proj"][0] == "decoder.layers.1.self_attention.linear_q_proj"
    assert lite["layer1_attention_q_proj"][1].bytes == point(V2_LITE, 2, 2).activation_bytes


def test_mla_parameters_count_the_duplicated_down_projections_whole_and_join_the_sp_all_reduce():
    h = 7168
    down = h * 1536 + 1536 + h * (512 + 64) + 512  # q and kv down projections, whole; the latent norms
    split = 1536 * 128 * 192 + 512 * 128 * (128 + 128) + 128 * 128 * h  # up projections and linear_proj
    for t in (1, 2, 8):
        assert megatron_mla.attention_parameters(point(V3_DENSE, t)) == down + split // t
    one_layer = point(dataclasses.replace(V3_DENSE, num_layers=1), 2)
    assert megatron.sequence_parallel_parameters(one_layer) == 2 * h + down + h  # norms; the final norm
    lite = 2048 * 16 * 192 // 2 + 2048 * (512 + 64) + 512 + 512 * 16 * 256 // 2 + 16 * 128 * 2048 // 2
    older = megatron_releases.release("0.18.2")
    assert megatron_mla.attention_parameters(point(V2_LITE, 2, 2), older) == lite
    # From 0.19 linear_q_proj fuses a norm of the hidden state in: h more, reduced with SP.
    assert megatron_mla.attention_parameters(point(V2_LITE, 2, 2)) == lite + 2048
    sp = megatron_mla.sequence_parallel_parameters
    assert sp(point(V2_LITE, 2, 2)) - sp(point(V2_LITE, 2, 2), older) == 2048


def test_mla_releases_before_014_are_refused_with_the_reason():
    assert megatron.unsupported(point(V3, 2, 2)) == []
    (why,) = megatron.unsupported(point(V3, 2, 2), "0.13.1")
    assert "column parallel" in why and "0.14" in why
    (why,) = [p for p in megatron.unsupported(point(V3_DENSE, 2), "0.9.0")]
    assert "lacks multi-latent attention" in why
    assert megatron_releases.mla_problems(point(V3_DENSE, 2), megatron_releases.release("0.14.0")) == []


def test_scaled_mla_setups_keep_the_structure():
    for name, (setup, dp) in CASES.items():
        small = scale.scaled_setup(setup, dp=dp)
        m, big = small.model, setup.model
        assert small.problems() == [] and megatron.unsupported(small) == [], name
        assert small.world_size == 4, name
        assert m.is_mla and (m.q_lora_rank is None) == (big.q_lora_rank is None), name
        assert (m.moe_first_k_dense > 0) == (big.moe_first_k_dense > 0), name
        widths = {m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim, m.v_head_dim, m.qk_nope_head_dim} - {None}
        assert len(widths) == 4 + (m.q_lora_rank is not None), name  # each latent's collectives told apart
    assert scale.trace_key(point(V3, 2, 2)) == "llama-moe-k8-shared-firstdense-aux-mla_tp2_pp1_sp1_ep2"
    assert scale.family(V2_LITE).endswith("-mla-noqlora")


# -- with megatron-core --------------------------------------------------------------------


@pytest.fixture(scope="module")
def traces() -> dict[str, Trace]:
    setups = {name: scale.scaled_setup(s, dp=dp) for name, (s, dp) in CASES.items()}
    return dict(zip(setups, runner.run(list(setups.values()), timeout=900)))


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
def test_mla_schedule_matches_megatron_core(traces, case):
    trace = traces[case]
    setup, m = trace.setup, trace.setup.model
    assert compare.rank_differences(trace) == []
    rows = compare.compare(trace)
    assert compare.differences(rows) == [], compare.summary(rows)
    assert "mla_transformer_engine_stand_ins" in trace.ranks[0].workarounds
    attention = [r for r in rows if ".self_attention" in r.module]
    if setup.tp == 1:
        assert all(r.group != "TP" for r in attention)
        return
    tokens = setup.micro_batch * setup.seq_length
    latents = {m.kv_lora_rank * tokens} | ({m.q_lora_rank * tokens} if m.q_lora_rank else set())
    up = {r.elements for r in attention if "_up_proj" in r.module}
    assert up == latents  # the latents cross TP, whole
    if setup.sp:
        rope = [r for r in attention if r.module.endswith(".self_attention")]
        assert {(r.collective, r.elements) for r in rope} == {("allgather", tokens * m.qk_rope_head_dim),
                                                             ("reducescatter", tokens * m.qk_rope_head_dim)}
    if m.q_lora_rank is None:
        assert any(r.module.endswith(".linear_q_proj") and r.elements == tokens * m.hidden_size for r in attention)
    if m.moe_first_k_dense and trace.setup.pp == 1:
        assert any(r.module == "decoder.layers.0.mlp.linear_fc1" for r in rows)


# -- the newest traced release -------------------------------------------------------------

NEWEST_CASES = ("v3_tp2_sp_ep2", "v2lite_tp2_sp_ep2")


@pytest.fixture(scope="module")
def newest_traces() -> dict[str, Trace]:
    """Two cases traced by the newest traced release (one launch; its folder as test_versions makes it)."""
    from commsweep.trace import versions
    from test_versions import _make

    env = _make(versions.newest_traced(), versions.cache_root())
    setups = {name: scale.scaled_setup(CASES[name][0], dp=CASES[name][1]) for name in NEWEST_CASES}
    return dict(zip(setups, runner.run(list(setups.values()), timeout=900, environment=env)))


@pytest.mark.trace
@pytest.mark.skipif(MISSING is not None, reason=f"cannot trace: {MISSING}")
def test_the_newest_release_matches_its_mla_schedule_and_norms_linear_q_proj(traces, newest_traces):
    """0.19.2 matches its own schedule row by row; without a query latent it differs from
    0.16.1 by the norm it fuses into linear_q_proj (h per layer: the SP all-reduce and the DP
    collectives grow by it), with a query latent not at all."""
    for case, trace in newest_traces.items():
        assert trace.ranks[0].megatron_core == megatron_releases.NEWEST
        rows = compare.compare(trace)
        assert compare.differences(rows) == [], f"{case}:\n{compare.summary(rows)}"

    def sp_allreduce(trace: Trace) -> int:
        return next(r.elements for r in compare.compare(trace) if r.module == "finalize_model_grads.sequence_parallel")

    lite = newest_traces["v2lite_tp2_sp_ep2"]
    hidden, layers = lite.setup.model.hidden_size, lite.setup.model.num_layers
    assert sp_allreduce(lite) - sp_allreduce(traces["v2lite_tp2_sp_ep2"]) == layers * hidden
    assert sp_allreduce(newest_traces["v3_tp2_sp_ep2"]) == sp_allreduce(traces["v3_tp2_sp_ep2"])
