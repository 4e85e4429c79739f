"""What AICB gets wrong about MoE layers, by cause: names for the audit's MoE findings.

The audit (``audit.py``) pairs every collective of a workload with the Megatron schedule's
and reports what differs; for an MoE model each finding also names the Megatron row it
stands for (``expected_name``, e.g. ``layer3_moe_dispatch_probs``) and the workload's row
(``found_name``, AICB's ``mlp_moelayer``). That is enough to say why: ``classify`` gives
each finding of an MoE point its cause, one of ``CAUSES`` (or None for a finding that is
not about MoE, whose cause is the dense model's), by the first rule of ``RULES`` that
holds. Sources: AICB 23eec3c (``SimAI_training_workload_generator.py``, the five
``mlp_moelayer`` lines and ``moe_grad_norm1/2``; ``../shared/reference/aicb/SPEC.md``) and
megatron-core 0.16.1 (``workload/megatron_moe.py``).

A finding is read as a row of ``audit.csv`` (a dict of its columns), so the rules work on
the files the pipeline writes as well as on ``audit.audit``'s findings (``as_row``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    slug: str
    label: str
    explanation: str


def _causes(*entries: tuple[str, str, str]) -> dict[str, Cause]:
    return {slug: Cause(slug, label, text) for slug, label, text in entries}


CAUSES: dict[str, Cause] = _causes(
    ("moe_probs_alltoall_missing", "MoE routing probabilities' all-to-alls dropped",
     "Megatron's all-to-all dispatcher sends every routed token's probability with it: a second all-to-all "
     "over EP of T x k bf16 values (T the rank's tokens, k the top-k) beside the tokens', forward and "
     "backward. AICB writes only the tokens' all-to-alls."),
    ("moe_probs_gather_missing", "MoE probabilities' expert-TP gathers dropped",
     "With expert TP above 1, Megatron all-gathers the routing probabilities over the expert-TP group with "
     "the tokens (forward) and reduce-scatters their gradient (backward). AICB has no such collective; "
     "where a row of its small token-count all-gather stands in that place, it is counted here too."),
    ("moe_metadata_gather", "MoE token-count all-gather sized and placed by AICB",
     "Before dispatching, Megatron all-gathers every rank's E token counts per expert (int64) over the "
     "expert-TP x EP group: 8 x etp x ep x E bytes, on EP at TP 1 and on TP at EP 1 (SimAI has no TP x EP "
     "group, so with both above 1 it is not in the Megatron workload). AICB's first mlp_moelayer line "
     "all-gathers 2 x ep x E x t bytes on TP, whatever TP and EP are."),
    ("moe_router_allreduce_missing", "MoE load-balancing all-reduce dropped",
     "With a load-balancing loss (moe_aux_loss_coeff > 0), Megatron's router all-reduces each MoE layer's "
     "E int64 token counts over TP in every micro-batch. AICB does not write it."),
    ("moe_shared_expert_missing", "shared experts' TP collectives dropped",
     "Megatron runs the shared experts as a dense MLP on TP with SP: an all-gather before linear_fc1 and a "
     "reduce-scatter after linear_fc2 forward; two all-gathers (one reversing the reduce-scatter, one "
     "re-gathering linear_fc1's input for its weight gradient) and a reduce-scatter backward. AICB has no "
     "shared experts."),
    ("moe_token_exchange", "MoE token all-to-alls and expert-TP gathers sized differently",
     "The tokens' dispatch and combine all-to-alls (u x k / t bytes under balanced routing) and their "
     "expert-TP all-gather and reduce-scatter (u x k x etp / t bytes). AICB sizes them from TP, not expert "
     "TP, and writes them on every layer whatever EP and expert TP are."),
    ("moe_layer_where_megatron_is_dense", "MoE lines on a dense layer",
     "Megatron makes one layer in moe_layer_freq an MoE layer and the others dense; AICB writes its five "
     "mlp_moelayer lines on every layer, so a dense layer's MLP collectives are missing and the MoE ones "
     "extra."),
    ("moe_expert_grads_sized_by_mock", "expert gradient sync sized by AICB's count",
     "AICB sizes its expert gradient sync on DP_EP (moe_grad_norm1/2: 2 P_moe and 4 P_moe bytes) by its "
     "mock's 2 x h x f x E/ep / t parameters per layer: no SwiGLU gate (Megatron's experts have 3 x h x f), "
     "the expert FFN split over TP rather than expert TP."),
    ("moe_experts_in_dp_sync", "DP gradient sync sized with the experts' parameters",
     "AICB's default path sizes the DP gradient reduce-scatter (grad_norm, 4P) by a P that includes the "
     "experts' P_moe, which it syncs again over DP_EP (moe_grad_norm2). Megatron syncs expert parameters "
     "over DP_EP only (ep > 1); its DP sync moves the dense parameters. The finding's bytes also hold the "
     "rest of AICB's mocked parameter count (a word embedding 4x too large, ...); the experts are most of "
     "it. (The all-gather, 2P, runs on TP: a finding of its own.)"),
)

_ROW = re.compile(r"layer\d+_(.*)")


def _megatron_row(row: Mapping[str, str]) -> str:
    """The expected side's Megatron row kind, e.g. ``moe_dispatch_probs`` (layer number dropped)."""
    match = _ROW.fullmatch(row.get("expected_name", ""))
    return match.group(1) if match else row.get("expected_name", "")


@dataclass
class Context:
    """What a rule may know of the point's other findings."""

    moe: bool = False  # the point's Megatron schedule has MoE layers
    dense_mlp_units: frozenset = frozenset()  # units where Megatron's MLP is dense

    @classmethod
    def of(cls, rows: list[Mapping[str, str]]) -> Context:
        # An MoE model: Megatron's rows or AICB's name it (not AICB's moe_grad_norm rows, which
        # it writes with 0 bytes for dense models too).
        moe = any(r.get("expected_name", "").startswith("dp_ep_") or "_moe_" in r.get("expected_name", "")
                  or r.get("found_name") == "mlp_moelayer" for r in rows)
        dense = frozenset(r["layer"] for r in rows if _megatron_row(r).startswith("mlp_"))
        return cls(moe=moe, dense_mlp_units=dense)


Rule = Callable[[Mapping[str, str], Context], bool]


def _kind(row: Mapping[str, str]) -> str:
    return _megatron_row(row)


RULES: tuple[tuple[str, Rule], ...] = (
    ("moe_layer_where_megatron_is_dense", lambda r, c: r["layer"] in c.dense_mlp_units and (
        _kind(r).startswith("mlp_") or r.get("found_name") == "mlp_moelayer")),
    ("moe_probs_alltoall_missing", lambda r, c: _kind(r) == "moe_dispatch_probs"),
    ("moe_probs_gather_missing", lambda r, c: _kind(r) == "moe_expert_probs_gather"),
    ("moe_metadata_gather", lambda r, c: _kind(r) == "moe_dispatch_metadata" or (
        not r["expected_collective"] and r.get("found_name") == "mlp_moelayer" and r["found_collective"] == "allgather"
        and r["phase"] == "fwd" and int(r["found_bytes"] or 0) < 1 << 20)),
    ("moe_router_allreduce_missing", lambda r, c: _kind(r) == "moe_router"),
    ("moe_shared_expert_missing", lambda r, c: _kind(r).startswith("moe_shared_")),
    ("moe_token_exchange", lambda r, c: _kind(r) in ("moe_dispatch", "moe_combine", "moe_expert_fc1", "moe_expert_fc2")
     or (not r["expected_collective"] and r.get("found_name") == "mlp_moelayer")),
    ("moe_expert_grads_sized_by_mock", lambda r, c: r["layer"].endswith("/moe_dp") and r["kind"] == "size"),
    ("moe_experts_in_dp_sync", lambda r, c: c.moe and r["layer"].endswith("/dp") and r.get("found_name") == "grad_norm"
     and r["kind"] == "size"),
)
# Kinds whose cause is the same for dense and MoE models (a group of one GPU, a size under NONE).
GENERIC_KINDS = ("size1_group", "none_with_size")


def classify(rows: Iterable[Mapping[str, str]]) -> list[str | None]:
    """The MoE cause of each of one point's audit rows (columns of ``audit.COLUMNS``), in
    order; None for a row whose cause is not about MoE, or for every row of a dense point."""
    rows = list(rows)
    ctx = Context.of(rows)
    if not ctx.moe:
        return [None] * len(rows)
    return [None if r["kind"] in GENERIC_KINDS else next((slug for slug, rule in RULES if rule(r, ctx)), None)
            for r in rows]


def summary(rows: Iterable[Mapping[str, str]]) -> list[tuple[Cause, int, int, float | None]]:
    """Per MoE cause of one point's audit rows: (cause, findings, summed delta_bytes,
    summed delta_us or None), in ``CAUSES`` order."""
    rows = list(rows)
    acc: dict[str, list] = {}
    for row, slug in zip(rows, classify(rows)):
        if slug is None:
            continue
        entry = acc.setdefault(slug, [0, 0, None])
        entry[0] += 1
        entry[1] += int(row["delta_bytes"])
        if row["delta_us"]:
            entry[2] = (entry[2] or 0.0) + float(row["delta_us"])
    return [(CAUSES[slug], *acc[slug]) for slug in CAUSES if slug in acc]
