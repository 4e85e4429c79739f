"""The audit of AICB's MoE workloads (both paths) against Megatron's MoE schedule, and the
MoE causes (``analysis/causes/``) it names. AICB's files come from the emulation, byte for byte AICB's own
(``tests/test_aicb_real.py`` checks the emulation against a real AICB)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from commsweep.aiob import roofline
from commsweep.aiob.gpus import GPUS
from commsweep.analysis import audit, causes
from commsweep.analysis.audit_csv import AuditRow
from commsweep.setup.models import PRESETS
from commsweep.setup.training import TrainingSetup
from commsweep.workload import aicb, megatron

QWEN, MIXTRAL = PRESETS["qwen1.5-moe-a2.7b"], PRESETS["mixtral-8x7b"]


def setup(model, tp: int, ep: int, *, layers: int = 2, etp: int | None = None) -> TrainingSetup:
    model = dataclasses.replace(model, num_layers=layers)
    return TrainingSetup(model=model, world_size=16, tp=tp, ep=ep, etp=etp, sp=True, micro_batch=1,
                         global_batch=32 // tp, seq_length=2048)


def audited(s: TrainingSetup, path: str) -> tuple[list[AuditRow], list[str | None]]:
    """The audit rows of AICB's file for ``s`` (default or AIOB path) and their MoE causes."""
    profile = roofline.profile(s, GPUS["H100-SXM"])[0] if path == "aiob" else None
    workload = aicb.generate(s, profile)
    rows = [audit.record(f) for f in audit.audit(workload, s)]
    return rows, [c if c in causes.MOE_CAUSES else None for c in causes.classify(rows)]


def per_cause(rows, causes) -> Counter:
    return Counter(c for c in causes if c is not None)


@pytest.mark.parametrize("path", ["default", "aiob"])
def test_qwen_aicb_lacks_probabilities_router_and_shared_experts(path):
    s = setup(QWEN, tp=2, ep=4)
    rows, causes = audited(s, path)
    g, L = s.num_microbatches, s.model.num_layers
    counts = per_cause(rows, causes)
    # Per MoE layer and micro-batch: the probabilities' all-to-all forward and backward, their
    # expert-TP gather and its backward, the router's all-reduce, and the shared experts' five.
    assert counts["moe_probs_alltoall_missing"] == 2 * g * L
    assert counts["moe_probs_gather_missing"] == 2 * g * L
    assert counts["moe_router_allreduce_missing"] == g * L
    assert counts["moe_shared_expert_missing"] == 5 * g * L
    assert counts["moe_expert_grads_sized_by_mock"] == 2
    # AICB's token all-to-alls and expert-TP gathers are Megatron's, byte for byte.
    assert "moe_token_exchange" not in counts
    u = 2 * s.micro_batch * s.seq_length * s.model.hidden_size
    shared = [r for r, c in zip(rows, causes) if c == "moe_shared_expert_missing"]
    assert {r.expected_bytes for r in shared} == {u}
    assert {r.expected_name for r in shared} == {f"layer{i}_moe_{p}" for i in range(L)
                                                   for p in ("shared_fc1", "shared_fc1_wgrad_gather", "shared_fc2")}
    probs = [r for r, c in zip(rows, causes) if c == "moe_probs_alltoall_missing"]
    tokens = s.micro_batch * s.seq_length // s.tp
    assert {(r.kind, r.expected_group, r.expected_bytes) for r in probs} == {("missing", "EP", 2 * tokens * 4)}
    # AICB's expert gradients: its mock's 2hf per expert against SwiGLU's 3hf.
    grads = [r for r, c in zip(rows, causes) if c == "moe_expert_grads_sized_by_mock"]
    assert all(r.found_bytes * 3 == r.expected_bytes * 2 for r in grads)


def test_default_path_counts_the_experts_in_its_dp_sync_too():
    s = setup(MIXTRAL, tp=2, ep=2)
    rows, causes = audited(s, "default")
    dp = [(r.found_name, r.kind) for r, c in zip(rows, causes) if c == "moe_experts_in_dp_sync"]
    assert dp == [("grad_norm", "size")]
    aiob_rows, aiob_causes = audited(s, "aiob")  # grad_gather and grad_param_comm leave P_moe out
    assert "moe_experts_in_dp_sync" not in aiob_causes


@pytest.mark.parametrize("path", ["default", "aiob"])
def test_token_count_gather_at_tp1(path):
    """At TP 1 Megatron gathers the token counts on EP (8 ep E bytes); AICB on a TP group of one GPU."""
    s = setup(MIXTRAL, tp=1, ep=2)
    rows, causes = audited(s, path)
    metadata = [r for r, c in zip(rows, causes) if c == "moe_metadata_gather"]
    assert len(metadata) == s.num_microbatches * s.model.num_layers
    assert {(r.kind, r.expected_group, r.expected_bytes, r.found_group, r.found_bytes)
            for r in metadata} == {("group", "EP", 8 * 2 * 8, "TP", 2 * 2 * 8 * 1)}


def test_expert_tp_one_makes_aicbs_tp_gathers_extra():
    s = setup(MIXTRAL, tp=2, ep=2, etp=1)
    rows, causes = audited(s, "default")
    extra = [r for r, c in zip(rows, causes) if c == "moe_token_exchange"]
    assert extra and all(r.kind == "extra" and r.found_group == "TP" for r in extra)
    assert len(extra) == 4 * s.num_microbatches * s.model.num_layers  # AICB's TP all-gather and reduce-scatter, both ways


def test_mixed_dense_and_moe_layers():
    mixed = dataclasses.replace(MIXTRAL, moe_layer_freq=2)
    s = setup(mixed, tp=2, ep=2, layers=4)
    rows, causes = audited(s, "default")
    dense = {r.layer.split("/")[1] for r, c in zip(rows, causes) if c == "moe_layer_where_megatron_is_dense"}
    assert dense == {"layer1", "layer3"}  # megatron: layers 0 and 2 MoE, 1 and 3 dense


def test_dense_points_get_no_moe_cause():
    s = TrainingSetup(model=PRESETS["gpt-7b"], world_size=16, tp=2, sp=True, global_batch=16)
    rows = [audit.record(f) for f in audit.audit(aicb.generate(s), s)]
    named = causes.classify(rows)
    assert rows and not set(named) & set(causes.MOE_CAUSES)


def test_megatron_moe_workload_audits_clean_and_the_table_names_causes():
    s = setup(QWEN, tp=2, ep=4)
    assert audit.audit(megatron.schedule(s).workload(), s) == []
    findings = audit.audit(aicb.generate(s), s)
    table = audit.to_table(findings, causes.cause_families(findings))
    assert "MoE causes (docs/moe.md):" in table
    assert "moe_shared_expert_missing:" in table and "layer0_moe_shared_fc1" in table
