"""The rules that name each audit finding's cause (the causes themselves: ``catalog.yaml``).

A rule is a predicate over one finding (an ``audit_csv.AuditRow``) and what the point's
other findings tell (``Context``, made once per point, before any rule runs); the first
rule that holds names the finding's cause, a finding of no rule is named by its audit kind
(``FALLBACK``). The rules read the Megatron schedule's row names and AICB's through
``workload/row_names.py``, where the schedule and the AICB emulation take them from.

A rule sees one finding and a context that no rule changes, so a finding's cause does not
depend on the order the findings come in. One cause is a choice among a unit's findings (a
unit's weight-gradient re-gather is one of its missing backward all-gathers): ``classify``
makes it by the findings' own values, not by their order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ...workload import row_names as rn
from ..audit_csv import AuditRow

# Units whose column-parallel linear Megatron re-gathers for the weight gradient with SP.
WGRAD_UNITS = ("attention", "mlp", "output_layer")
# The audit kinds whose cause is the same for every model (a group of one GPU, a size under NONE).
ANY_MODEL_KINDS = ("size1_group", "size_in_none_column")


def expects(f: AuditRow, phase: str, collective: str, group: str = "TP") -> bool:
    """Megatron's side of the finding is ``collective`` on ``group`` in ``phase``."""
    return f.phase == phase and f.expected_collective == collective and f.expected_group == group


def is_fp8_dispatch(f: AuditRow) -> bool:
    """AICB's DeepSeek forward dispatch: 33/64 of a bf16 token all-to-all (int of the product)."""
    return (f.kind == "size" and f.phase == "fwd" and f.found_collective == "alltoall"
            and f.expected_bytes is not None and f.found_bytes == int(f.expected_bytes * (1 + 4 / 128) / 2))


def _is_mla_finding(f: AuditRow) -> bool:
    return f.unit_kind == "attention" and (rn.is_mla(f.expected_kind) or f.found_name in rn.AICB_MLA_ROWS)


@dataclass(frozen=True)
class Context:
    """What a rule may know of the point's other findings (made once, never changed)."""

    # Units where Megatron's forward reduce-scatter is missing (the embedding with RoPE and SP).
    missing_fwd_reducescatter: frozenset[str] = frozenset()
    # The point's pipeline size: with pp > 1 a file holds one stage.
    pp: int = 1
    # An MoE model: Megatron's rows or AICB's name it (not AICB's moe_grad_norm rows, which
    # it writes with 0 bytes for dense models too).
    moe: bool = False
    # Units where Megatron's MLP is dense (a model with MoE and dense layers).
    dense_mlp_units: frozenset[str] = frozenset()
    # Attention units with multi-latent attention (Megatron's MLA rows or AICB's DeepSeek ones).
    mla_units: frozenset[str] = frozenset()
    # Units where AICB wrote its MoE lines (mlp_moelayer).
    moe_line_units: frozenset[str] = frozenset()
    # A DeepSeek point (AICB's DeepSeek frame): MLA findings, or (at TP 1, where MLA moves
    # nothing) AICB's FP8-scaled forward dispatch, which only that frame writes.
    deepseek: bool = False
    # The point's CP size, and for a workload made without CP (AICB's), its micro-batches: each
    # stands for cp of Megatron's, whose later ones it lacks (None: the workload has CP's).
    cp: int = 1
    merged: int | None = None
    # Megatron's schedule shards data parallelism (FSDP's per-micro-batch units are among the
    # findings), or gathers FP8 weights (its distributed optimizer's FP8 buffer is).
    fsdp: bool = False
    fp8: bool = False

    @classmethod
    def of(cls, items: list[AuditRow], pp: int = 1, cp: int = 1, merged: int | None = None) -> Context:
        return cls(
            missing_fwd_reducescatter=frozenset(f.layer for f in items
                                                if f.kind == "missing" and expects(f, "fwd", "reducescatter")),
            pp=pp, cp=cp, merged=merged,
            moe=any(rn.is_moe(f.expected_name) or f.found_name == rn.AICB_MOE_LAYER for f in items),
            dense_mlp_units=frozenset(f.layer for f in items if rn.is_dense_mlp(f.expected_kind)),
            mla_units=frozenset(f.layer for f in items if _is_mla_finding(f)),
            moe_line_units=frozenset(f.layer for f in items if f.found_name == rn.AICB_MOE_LAYER),
            deepseek=any(_is_mla_finding(f) or is_fp8_dispatch(f) for f in items),
            fsdp=any(f.unit_kind == "fsdp" or (f.expected_name or "").startswith("dp_fsdp_") for f in items),
            fp8=any((f.expected_name or "").endswith("_fp8") for f in items),
        )


Rule = Callable[[AuditRow, Context], bool]

# Megatron's context-parallel groups (``analysis.audit.CP_GROUPS``), which no SimAI row carries.
CP_GROUPS = ("CP", "CP_A2A", "CP_P2P")


def micro_batch_of(f: AuditRow) -> int | None:
    """The micro-batch of a finding's unit (its ``layer`` label, ``mb3/layer0/attention``);
    None for a once-per-iteration unit."""
    head = f.layer.split("/", 1)[0]
    return int(head[2:]) if head.startswith("mb") and head[2:].isdigit() else None


def _in_merged_microbatch(f: AuditRow, s: Context) -> bool:
    """Megatron's collective of a micro-batch beyond the ones a workload made without CP has."""
    mb = micro_batch_of(f)
    return s.merged is not None and f.kind == "missing" and mb is not None and mb >= s.merged


def _sized_on_whole_sequence(f: AuditRow, s: Context) -> bool:
    """A collective of a workload made without CP, cp times Megatron's: its micro-batch holds
    whole sequences where Megatron's holds s/cp tokens of each."""
    return (s.merged is not None and f.kind == "size" and f.expected_bytes is not None
            and f.found_bytes == s.cp * f.expected_bytes)


# What a workload made without context parallelism (AICB's) misses against Megatron's schedule
# with it; first, as a CP point's other findings are those of its merged micro-batches.
CP_RULES: tuple[tuple[str, Rule], ...] = (
    ("cp_attention_exchange_missing", lambda f, s: f.kind == "missing" and f.expected_group in CP_GROUPS),
    ("cp_microbatches_merged", _in_merged_microbatch),
    ("cp_sized_on_whole_sequence", _sized_on_whole_sequence),
)
CP_CAUSES = tuple(slug for slug, _ in CP_RULES)

# What a workload of a setup without FSDP or FP8 gathers (AICB's: it has no such flag) misses
# against Megatron's schedule with them (``workload/megatron_fsdp.py``).
FSDP_RULES: tuple[tuple[str, Rule], ...] = (
    ("fsdp_param_gathers_missing", lambda f, s: f.kind == "missing" and f.unit_kind == "fsdp"
     and f.expected_collective == "allgather"),
    ("fsdp_grad_reducescatters_missing", lambda f, s: f.kind == "missing" and f.unit_kind == "fsdp"
     and f.expected_collective == "reducescatter"),
    ("fsdp_dp_sync_as_distributed_optimizer", lambda f, s: s.fsdp and f.unit_kind == "dp"),
    ("fp8_param_gather_in_bf16", lambda f, s: s.fp8 and f.unit_kind == "dp" and f.kind in ("missing", "size")),
)
FSDP_CAUSES = tuple(slug for slug, _ in FSDP_RULES)


def _embedding_allreduce_for_reducescatter(f: AuditRow, ctx: Context) -> bool:
    if f.unit_kind != "embedding" or f.layer not in ctx.missing_fwd_reducescatter:
        return False
    return (f.kind == "missing" and expects(f, "fwd", "reducescatter")) or (
        f.kind == "extra" and f.phase == "fwd" and f.found_collective == "allreduce")


def _wgrad_allgather(f: AuditRow, ctx: Context) -> bool:
    """A unit's weight-gradient re-gather: Megatron issues one per column-parallel unit (the
    other missing backward all-gather, where there is one, reverses the forward reduce-scatter,
    and the AIOB path writes that one). Which of the unit's findings it is: ``classify``."""
    return f.kind == "missing" and expects(f, "ig", "allgather") and f.unit_kind in WGRAD_UNITS


def _moe(rule: Rule) -> Rule:
    """An MoE rule: for an MoE point, and not for the kinds whose cause is the same for dense
    and MoE models."""
    return lambda f, s: s.moe and f.kind not in ANY_MODEL_KINDS and rule(f, s)


def _moe_layer_where_megatron_is_dense(f: AuditRow, s: Context) -> bool:
    # (AICB's DeepSeek frame writes its first layers dense too: there only where it wrote MoE lines.)
    return (f.layer in s.dense_mlp_units and (rn.is_dense_mlp(f.expected_kind) or f.found_name == rn.AICB_MOE_LAYER)
            and (not s.deepseek or f.layer in s.moe_line_units))


def _moe_metadata_gather(f: AuditRow, s: Context) -> bool:
    return f.expected_kind == rn.MOE_DISPATCH_METADATA or (
        not f.expected_collective and f.found_name == rn.AICB_MOE_LAYER and f.found_collective == "allgather"
        and f.phase == "fwd" and (f.found_bytes or 0) < 1 << 20)


# What AICB gets wrong about MoE layers, by the Megatron row each finding stands for and
# AICB's row (``AuditRow.expected_kind``, ``found_name``); before the dense rules, which would
# name some of these findings for the dense model's collectives of the same kind.
MOE_RULES: tuple[tuple[str, Rule], ...] = (
    ("moe_layer_where_megatron_is_dense", _moe(_moe_layer_where_megatron_is_dense)),
    ("moe_probs_alltoall_missing", _moe(lambda f, s: f.expected_kind == rn.MOE_DISPATCH_PROBS)),
    ("moe_probs_gather_missing", _moe(lambda f, s: f.expected_kind == rn.MOE_EXPERT_PROBS_GATHER)),
    ("moe_metadata_gather", _moe(_moe_metadata_gather)),
    ("moe_tp_routing_missing", _moe(lambda f, s: f.expected_kind in (rn.MOE_TP_DISPATCH, rn.MOE_TP_COMBINE) or (
        f.expected_kind == rn.MOE_ROUTER and f.expected_collective in ("allgather", "reducescatter")))),
    ("moe_router_allreduce_missing", _moe(lambda f, s: f.expected_kind == rn.MOE_ROUTER)),
    ("moe_shared_expert_missing", _moe(lambda f, s: rn.is_moe_shared_expert(f.expected_kind))),
    ("moe_token_exchange", _moe(lambda f, s: f.expected_kind in (rn.MOE_DISPATCH, rn.MOE_COMBINE, rn.MOE_EXPERT_FC1,
                                                                 rn.MOE_EXPERT_FC2)
                                or (not f.expected_collective and f.found_name == rn.AICB_MOE_LAYER))),
    ("moe_expert_grads_sized_by_mock", _moe(lambda f, s: f.unit_kind == "moe_dp" and f.kind == "size")),
    ("moe_experts_in_dp_sync", _moe(lambda f, s: f.unit_kind == "dp" and f.found_name == rn.AICB_GRAD_NORM
                                    and f.kind == "size")),
)
MOE_CAUSES = tuple(slug for slug, _ in MOE_RULES)


def _mla(rule: Rule) -> Rule:
    """An MLA rule: a finding of an MLA attention unit, not of the kinds whose cause is the
    same for every model."""
    return lambda f, s: f.layer in s.mla_units and f.kind not in ANY_MODEL_KINDS and rule(f, s)


def _involves(f: AuditRow, collective: str) -> bool:
    return collective in (f.expected_collective, f.found_collective)


# What AICB's DeepSeek frame gets wrong: MLA's TP collectives, by phase and collective (the
# audit pairs a unit's collectives of one kind in file order, so which Megatron row a finding
# names is not meant; the kind is), and its MoE quirks; before the MoE and dense rules, which
# would name these findings for other models' collectives of the same kind.
DEEPSEEK_RULES: tuple[tuple[str, Rule], ...] = (
    ("mla_gathers_sized_on_hidden", _mla(lambda f, s: f.phase == "fwd" and _involves(f, "allgather"))),
    ("mla_latent_reducescatters", _mla(lambda f, s: f.phase == "ig" and _involves(f, "reducescatter"))),
    ("mla_latent_wgrad_gathers_missing", _mla(lambda f, s: f.kind == "missing" and expects(f, "ig", "allgather"))),
    ("mla_latent_allreduces_missing", _mla(lambda f, s: f.kind == "missing" and expects(f, "ig", "allreduce"))),
    ("moe_dispatch_fp8_scaled", _moe(lambda f, s: is_fp8_dispatch(f))),
    ("moe_shared_expert_backward_dropped", _moe(lambda f, s: s.deepseek and rn.is_moe_shared_expert(f.expected_kind))),
    ("moe_shared_experts_in_expert_sync", _moe(lambda f, s: s.deepseek and f.unit_kind == "moe_dp"
                                               and f.kind == "size")),
    ("dp_sync_sized_by_deepseek_mock", lambda f, s: s.deepseek and f.unit_kind == "dp" and f.kind == "size"),
)
DEEPSEEK_CAUSES = tuple(slug for slug, _ in DEEPSEEK_RULES)

# Before the weight-gradient rule: those that may name a missing backward TP all-gather.
_BEFORE_WGRAD: tuple[tuple[str, Rule], ...] = (
    ("pipeline_send_bytes", lambda f, s: f.phase == "pp"),
    *CP_RULES,
    *FSDP_RULES,
    ("size_in_none_column", lambda f, s: f.kind == "size_in_none_column"),
    *DEEPSEEK_RULES,
    *MOE_RULES,
    ("extra_layernorm_grad_allreduce", lambda f, s: f.unit_kind == "layernorm_grads" and not f.expected_collective
     and f.found_collective == "allreduce"),
    ("missing_sp_layernorm_grad_allreduce", lambda f, s: f.unit_kind == "sp_grads" and f.kind == "missing"),
    ("extra_embedding_norm_allreduce", lambda f, s: f.unit_kind == "embedding_norm" and not f.expected_collective),
    ("extra_embedding_grad_allreduce", lambda f, s: f.unit_kind == "embedding_grads" and not f.expected_collective),
    ("optimizer_scalar_allreduce", lambda f, s: f.unit_kind == "optimizer" and not f.expected_collective),
    ("moe_grad_sync_on_dense_model", lambda f, s: f.unit_kind == "moe_dp" and f.kind == "zero_bytes"
     and not f.expected_collective),
    ("dp_allgather_on_tp", lambda f, s: f.unit_kind == "dp" and f.kind == "group" and f.expected_group == "DP"
     and f.found_group == "TP"),
    ("dp_buckets", lambda f, s: f.unit_kind in ("dp", "moe_dp") and f.kind == "missing"
     and rn.is_bucket_row(f.expected_name)),
    ("dp_sync_sized_by_mock_params", lambda f, s: f.unit_kind == "dp" and f.kind == "size"),
    ("cross_entropy_once_per_iteration", lambda f, s: f.unit_kind == "loss" and f.kind == "missing"),
    ("size1_group", lambda f, s: f.kind == "size1_group"),
    ("embedding_allreduce_for_reducescatter", _embedding_allreduce_for_reducescatter),
    ("extra_embedding_bwd_allreduce", lambda f, s: f.kind == "extra" and f.unit_kind == "embedding"
     and f.phase == "ig" and f.found_collective == "allreduce"),
    ("module_on_every_stage", lambda f, s: s.pp > 1 and not f.expected_collective and f.kind in ("extra", "zero_bytes")
     and (f.unit_kind in ("output_layer", "loss") or (f.unit_kind == "embedding" and f.phase == "fwd"))),
    ("recompute_doubled_fwd", lambda f, s: f.kind == "size" and f.phase == "fwd" and f.unit_kind == "attention"
     and f.found_bytes == 2 * (f.expected_bytes or 0)),
    ("zero_byte_reducescatter", lambda f, s: f.kind == "zero_bytes" and expects(f, "ig", "reducescatter")),
    ("missing_bwd_tp_allreduce", lambda f, s: f.kind == "missing" and expects(f, "ig", "allreduce")),
    ("missing_bwd_tp_reducescatter", lambda f, s: f.kind == "missing" and expects(f, "ig", "reducescatter")),
)
WGRAD_CAUSE = "missing_wgrad_allgather"
_AFTER_WGRAD: tuple[tuple[str, Rule], ...] = (
    ("missing_bwd_tp_allgather", lambda f, s: f.kind == "missing" and expects(f, "ig", "allgather")),
    ("missing_fwd_tp_collective", lambda f, s: f.kind == "missing" and f.phase == "fwd" and f.expected_group == "TP"),
)
RULES: tuple[tuple[str, Rule], ...] = (*_BEFORE_WGRAD, (WGRAD_CAUSE, _wgrad_allgather), *_AFTER_WGRAD)
# A finding of no rule: by the audit's kind.
FALLBACK = {"missing": "other_missing", "extra": "other_extra", "size": "other_size", "group": "other_group",
            "zero_bytes": "other_zero_bytes", "size1_group": "size1_group",
            "size_in_none_column": "size_in_none_column"}


def _first_rule(f: AuditRow, ctx: Context, rules: tuple[tuple[str, Rule], ...] = RULES) -> str:
    return next((slug for slug, rule in rules if rule(f, ctx)), None) or FALLBACK.get(f.kind, "other_" + f.kind)


def _wgrad_key(f: AuditRow) -> tuple:
    return (f.row is None, f.row or 0, f.expected_bytes or 0, f.expected_name)


def classify(items: Iterable[AuditRow], pp: int = 1, *, cp: int = 1, merged: int | None = None) -> list[str]:
    """The cause of each of one point's findings, in order (``pp``: the point's pipeline size;
    ``cp``: its CP size, ``merged``: the micro-batches of a workload made without CP).

    A unit's weight-gradient re-gather (``missing_wgrad_allgather``) is one of its missing
    backward TP all-gathers that no earlier rule names: the one of the lowest row (then the
    smallest, then by its Megatron row), whatever the order of the findings. The unit's other
    ones, where the AIOB path left out the all-gather that reverses the forward reduce-scatter
    too, go to the rules after it; the two move the same bytes."""
    items = list(items)
    ctx = Context.of(items, pp, cp, merged)
    named = [_first_rule(f, ctx) for f in items]
    chosen: dict[str, int] = {}
    for i, (f, slug) in enumerate(zip(items, named)):
        if slug == WGRAD_CAUSE:
            best = chosen.get(f.layer)
            if best is None or _wgrad_key(f) < _wgrad_key(items[best]):
                chosen[f.layer] = i
    keep = set(chosen.values())
    return [_first_rule(f, ctx, _AFTER_WGRAD) if slug == WGRAD_CAUSE and i not in keep else slug
            for i, (f, slug) in enumerate(zip(items, named))]
