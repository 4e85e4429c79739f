"""The audit of AICB's DeepSeek workloads (its AIOB path; the default path crashes or refuses
them) against Megatron's MLA and MoE schedule, and the DeepSeek causes (``analysis/causes/``)
it names. AICB's files come from the emulation, byte for byte AICB's own
(``tests/test_aicb_deepseek_real.py`` checks it against a real AICB)."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import pytest

from commsweep.aiob import roofline
from commsweep.aiob.gpus import GPUS
from commsweep.analysis import audit, causes
from commsweep.setup.models import PRESETS
from commsweep.setup.training import TrainingSetup
from commsweep.workload import aicb_deepseek, megatron

V3, LITE, TINY = PRESETS["deepseek-v3"], PRESETS["deepseek-v2-lite"], PRESETS["deepseek-tiny"]


def setup(model, tp: int, ep: int, *, layers: int = 4, sp: bool = True) -> TrainingSetup:
    model = dataclasses.replace(model, num_layers=layers)
    return TrainingSetup(model=model, world_size=16, tp=tp, ep=ep, sp=sp, micro_batch=1, global_batch=32 // tp,
                         seq_length=1024)


def by_cause(s: TrainingSetup) -> dict[str, tuple[int, int]]:
    """(findings, summed delta bytes) per cause of AICB's AIOB-path file for ``s``."""
    profile = roofline.profile(s, GPUS["H100-SXM"])[0]
    workload = aicb_deepseek.generate(s, profile)
    rows = [audit.record(f) for f in audit.audit(workload, s)]
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r, slug in zip(rows, causes.classify(rows)):
        out[slug][0] += 1
        out[slug][1] += r.delta_bytes
    return {slug: (n, b) for slug, (n, b) in out.items()}


@pytest.mark.parametrize("model", [V3, TINY])
def test_mla_tp_traffic_by_cause(model):
    """Per attention layer and micro-batch, AICB all-gathers u twice (attention_q_column,
    attention_kv_column) where megatron gathers the two latents and the key's RoPE part; it
    writes two 0-byte reduce-scatters where megatron reduce-scatters all three; it lacks the
    latents' weight-gradient re-gathers."""
    s = setup(model, 2, 2)
    m, mb = s.model, s.num_microbatches
    tokens = s.micro_batch * s.seq_length
    latents = 2 * tokens * (m.q_lora_rank + m.kv_lora_rank)
    rope = 2 * tokens * m.qk_rope_head_dim
    per = m.num_layers * mb
    found = by_cause(s)
    assert found["mla_gathers_sized_on_hidden"][1] == per * (2 * s.activation_bytes - latents - rope)
    assert found["mla_latent_reducescatters"][1] == -per * (latents + rope)
    assert found["mla_latent_wgrad_gathers_missing"] == (2 * per, -per * latents)
    assert not [c for c in found if c.startswith("other_") or c == "unattributed"], found


def test_deepseek_moe_quirks_by_cause():
    s = setup(TINY, 2, 2)
    m, mb = s.model, s.num_microbatches
    moe_layers = sum(m.is_moe_layer(layer) for layer in range(m.num_layers))
    found = by_cause(s)
    tokens_out = s.activation_bytes * m.moe_topk // s.tp  # the bf16 dispatch
    fp8 = int(tokens_out * (1 + 4 / 128) / 2)
    assert found["moe_dispatch_fp8_scaled"] == (moe_layers * mb, moe_layers * mb * (fp8 - tokens_out))
    # The shared experts' backward: linear_fc1's weight-gradient gather and input-gradient
    # reduce-scatter (u each) per MoE layer and micro-batch, dropped or of 0 bytes.
    assert found["moe_shared_expert_backward_dropped"][1] == -2 * moe_layers * mb * s.activation_bytes
    # AICB's expert sync holds the shared experts too (2 bytes gathered, 4 reduced per parameter),
    # as its mock counts them: fc1 and fc2 split over TP, no SwiGLU gate.
    shared = moe_layers * 2 * m.hidden_size * m.moe_shared_expert_intermediate_size // s.tp
    assert found["moe_shared_experts_in_expert_sync"] == (2, 6 * shared)
    assert "moe_shared_expert_missing" not in found  # AICB's DeepSeek frame has shared experts
    # The first layer is dense in both: no MoE cause there.
    assert "moe_layer_where_megatron_is_dense" not in found


def test_v2_lite_without_a_query_latent():
    """No query latent: megatron's linear_q_proj gathers u from the hidden state, as AICB's
    attention_q_column does, so only the key/value latent and the RoPE part differ."""
    s = setup(LITE, 2, 2, layers=2)
    tokens, m = s.micro_batch * s.seq_length, s.model
    per = m.num_layers * s.num_microbatches
    found = by_cause(s)
    assert found["mla_gathers_sized_on_hidden"][1] == per * (s.activation_bytes - 2 * tokens * (
        m.kv_lora_rank + m.qk_rope_head_dim))
    assert found["mla_latent_wgrad_gathers_missing"][1] == -per * (s.activation_bytes + 2 * tokens * m.kv_lora_rank)


def test_dense_and_megatron_points_get_no_deepseek_cause():
    dense = TrainingSetup(model=PRESETS["gpt-7b"], world_size=16, tp=2, sp=True, global_batch=16)
    profile = roofline.profile(dense, GPUS["H100-SXM"])[0]
    from commsweep.workload import aicb

    rows = [audit.record(f) for f in audit.audit(aicb.generate(dense, profile), dense)]
    assert not set(causes.classify(rows)) & set(causes.DEEPSEEK_CAUSES)
    s = setup(TINY, 2, 2)
    assert audit.audit(megatron.schedule(s).workload(), s) == []


def test_the_audit_table_lists_the_deepseek_causes():
    s = setup(TINY, 2, 2)
    profile = roofline.profile(s, GPUS["H100-SXM"])[0]
    findings = audit.audit(aicb_deepseek.generate(s, profile), s)
    table = audit.to_table(findings, causes.cause_families(findings))
    assert "DeepSeek causes (docs/deepseek.md):" in table
    assert "mla_gathers_sized_on_hidden" in table and "moe_dispatch_fp8_scaled" in table


def test_each_finding_names_its_cause_in_the_table_and_the_csv():
    """A finding says what makes it: AICB's DP all-gather, sized by its DeepSeek mock's
    parameter count, is a `size` finding of cause dp_sync_sized_by_deepseek_mock."""
    s = setup(TINY, 2, 2)
    profile = roofline.profile(s, GPUS["H100-SXM"])[0]
    findings = audit.audit(aicb_deepseek.generate(s, profile), s)
    [gather] = [f for f in findings if f.layer == "iteration/dp" and f.found.collective == "allgather"]
    assert (gather.kind, gather.cause) == ("size", "dp_sync_sized_by_deepseek_mock")
    table = audit.to_table(findings)
    [line] = [line for line in table.splitlines() if line.split()[1:2] == [gather.row_name]]
    assert " size " in line and " dp_sync_sized_by_deepseek_mock " in line
    rows = [audit.record(f) for f in findings]
    assert all(r.cause in causes.CAUSES for r in rows)
    assert [r.cause for r in rows] == causes.classify(rows)
    assert audit.to_csv(findings).splitlines()[0].endswith(",expected_name,cause")
