"""What each AICB path gets wrong, by cause: every AICB point against its Megatron point.

The audit (``analysis/audit.py``) lists every difference between a workload and
Megatron's schedule, row by row. This module names the *cause* of each difference and
adds up, per point and cause, what it does to the bytes SimAI moves and to the exposed
communication time SimAI simulates, signed (+ in excess of Megatron, - short of it) and
never netted: a dropped all-reduce stays a negative row even where an extra one
outweighs it.

For an AICB point, its *Megatron point* is the point of the same setting (every axis
but the schedule) with schedule megatron and the same ``aiob`` (like with like); when
the sweep has only the other ``aiob`` value, that one stands in exactly, since the two
Megatron files differ only in compute times, and SimAI's exposed time of a collective
does not depend on compute (``trunc(t * (1 - overlap))``).

Per point, the rows add up exactly:

* **bytes**: the AICB point's payload bytes (``volumes.csv``: what SimAI executes, NONE
  skipped, forward messages under 4096 bytes counted as 4096) minus the Megatron point's;
* **exposed_us**: the AICB point's simulated exposed communication (its collectives'
  exposed times, from ``collectives.csv``, plus the exposed pipeline time) minus the
  Megatron point's. A finding's time is what its own collectives took in the two
  simulations: the AICB row's exposed time (found) and Megatron's for the same collective
  (expected); collectives that match byte for byte take the same time in both and add 0.

A difference no cause accounts for would be a defect of commsweep; it is written as the
cause ``unattributed`` (and never happens in the tests), so the sums always hold.

The causes are one table (``CAUSES``) and one function (``classify``): to name a new
cause (e.g. for MoE), add its entry to ``CAUSES`` and its rule to ``RULES``.
"""

from __future__ import annotations

import csv
import io
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from ..base import paths
from ..base.errors import InputError
from ..base.files import read_text
from ..setup.points import PointRow, boolean, read_points
from ..simulate import engine
from ..simulate import times as sim_times
from ..workload import format as wf
from . import audit

COLUMNS = (
    "point", "model", "tp", "sp", "aiob", "path", "cause", "phase", "collective", "group",
    "rows", "bytes", "exposed_us", "explanation",
)


@dataclass(frozen=True)
class Cause:
    """A named reason an AICB workload differs from Megatron: a slug, a label, plain words."""

    slug: str
    label: str
    explanation: str


def _causes(*entries: tuple[str, str, str]) -> dict[str, Cause]:
    return {slug: Cause(slug, label, text) for slug, label, text in entries}


# The causes, in the order tables and figures list them. Sources: AICB 23eec3c
# (workload_generator/SimAI_training_workload_generator.py), Megatron-LM's schedule as
# workload/megatron.py writes it (its sources: NVIDIA/Megatron-LM, megatron/core/tensor_parallel/).
CAUSES: dict[str, Cause] = _causes(
    ("missing_bwd_tp_allreduce", "backward TP all-reduces dropped",
     "Without SP, Megatron all-reduces on TP the input gradients of linear_qkv and linear_fc1 in every layer "
     "and of the output layer, once per micro-batch. The AIOB path writes NONE as their backward type, and "
     "neither path has a backward all-reduce for the output layer; SimAI skips a NONE: no bytes, no time."),
    ("extra_layernorm_grad_allreduce", "layernorm all-reduce of 2P bytes",
     "With SP off, both AICB paths write a 'layernorm' row that all-reduces 2 x the model's parameter count in "
     "bytes on TP in the backward pass (AICB 23eec3c, the layernorm Work_Item under 'if not "
     "enable_sequence_parallel'), on top of the DP all-gather (2P) and reduce-scatter (4P). Megatron "
     "all-reduces layernorm gradients on TP only with SP, and only the layernorm parameters."),
    ("extra_embedding_grad_allreduce", "embedding_grads all-reduce",
     "The AIOB path writes an 'embedding_grads' row that all-reduces one activation (2bsh bytes) on TP once per "
     "iteration when TP > 1. Megatron sends no such TP collective (its embedding-gradient all-reduce runs "
     "between the first and last pipeline stage, with tied embeddings and PP > 1)."),
    ("extra_embedding_bwd_allreduce", "embedding backward all-reduce",
     "Without SP, the default path all-reduces the embedding's gradient on TP in every micro-batch's backward "
     "pass. Megatron's embedding backward sends nothing on TP (the backward of its forward all-reduce is the "
     "identity)."),
    ("extra_embedding_norm_allreduce", "embedding_norm all-reduce of 2Vh",
     "The default path writes an 'embedding_norm' row in every micro-batch that all-reduces 2 x vocabulary x "
     "hidden bytes on TP in the forward pass. Megatron sends nothing of the kind."),
    ("missing_wgrad_allgather", "weight-gradient all-gathers dropped",
     "With SP, Megatron all-gathers the input of every column-parallel layer (linear_qkv, linear_fc1, the "
     "output layer) again in the backward pass to compute its weight gradient. Neither AICB path writes it."),
    ("zero_byte_reducescatter", "backward reduce-scatters of 0 bytes",
     "With SP, Megatron reduce-scatters the input gradient of every column-parallel layer in the backward "
     "pass. The AIOB path writes these reduce-scatters with size 0, so SimAI moves nothing."),
    ("missing_bwd_tp_reducescatter", "backward TP reduce-scatters dropped",
     "With SP, Megatron reduce-scatters the input gradient of every column-parallel layer in the backward "
     "pass. The default path writes NONE there (the size sits in the NONE column), which SimAI skips."),
    ("missing_bwd_tp_allgather", "backward TP all-gathers dropped",
     "With SP, Megatron all-gathers the gradient in the backward pass wherever the forward pass "
     "reduce-scattered or split the sequence (after linear_proj, linear_fc2 and the embedding). The path "
     "writes NONE there, or no row, and SimAI skips a NONE."),
    ("missing_fwd_tp_collective", "forward TP collective dropped",
     "A forward collective Megatron issues on TP (with SP: the embedding's all-reduce) that the workload "
     "writes as NONE, with its size in the NONE column; SimAI skips it."),
    ("embedding_allreduce_for_reducescatter", "embedding all-reduce instead of reduce-scatter",
     "With SP and rotary position embeddings, Megatron reduce-scatters the embedding's output on TP into the "
     "sequence-parallel region (without them it all-reduces, then splits). AICB all-reduces it (AIOB path) or "
     "writes NONE (default path): the reduce-scatter is missing, the all-reduce extra."),
    ("module_on_every_stage", "embedding, output layer or loss on a stage without it",
     "With PP > 1 AICB writes the embedding's, the output layer's and the cross entropy's collectives into "
     "every stage's file; Megatron runs the embedding on the first pipeline stage only and the output layer "
     "and loss on the last, so the stage this file describes has none of them."),
    ("missing_sp_layernorm_grad_allreduce", "SP layernorm-gradient all-reduce dropped",
     "With SP, Megatron all-reduces the gradients of the sequence-parallel parameters (the layernorms) on TP "
     "once per iteration, after the backward pass. Neither AICB path writes it."),
    ("cross_entropy_once_per_iteration", "cross-entropy all-reduces once, not per micro-batch",
     "Megatron's vocabulary-parallel cross entropy all-reduces three b x s fp32 tensors on TP in every "
     "micro-batch. AICB writes its three cross_entropy rows once per iteration, after the last micro-batch."),
    ("optimizer_scalar_allreduce", "optimizer's 4-byte all-reduces",
     "AICB writes four optimizer rows that all-reduce 4 bytes each on TP, which SimAI counts as 4096 bytes "
     "(its smallest forward message). Megatron's optimizer step issues scalar all-reduces of this kind "
     "(gradient norm, ...), which the Megatron schedule leaves out, so they count as extra here."),
    ("dp_sync_sized_by_mock_params", "DP sync sized by AICB's parameter count",
     "AICB sizes the DP gradient reduce-scatter (4P) and parameter all-gather (2P) by its mocked model's "
     "parameter count P (a word embedding 4x too large, qkv always 3h wide, no swiglu doubling, ...). "
     "Megatron's distributed optimizer moves the stage's real parameters."),
    ("dp_allgather_on_tp", "DP all-gather run on TP",
     "The default path writes the DP parameter all-gather (2P) in the forward column of its grad_norm row, "
     "which SimAI runs on the TP group: the all-gather is missing on DP and extra on TP (sized by AICB's "
     "parameter count)."),
    ("recompute_doubled_fwd", "forward size doubled by recompute",
     "With activation recomputation the default path doubles the attention rows' forward TP size (2u); the "
     "Megatron schedule's forward collective moves u."),
    ("size1_group", "TP collectives on a group of one GPU",
     "At TP 1 AICB still writes TP collectives, on a group of one GPU, where Megatron issues none (or, for "
     "the cross entropy, ones that move nothing). SimAI counts their bytes; in time, one GPU exchanges "
     "nothing (SimAI itself prints an overflowed time there, see docs/simulate.md)."),
    ("moe_grad_sync_on_dense_model", "MoE gradient sync on a dense model",
     "AICB writes its two MoE gradient-sync rows (moe_grad_norm1/2, on DP_EP) whenever EP differs from DP, so "
     "a dense model gets them with 0 bytes: no traffic, no time."),
    # MoE models (docs/moe.md): AICB's five mlp_moelayer lines and moe_grad_norm rows against
    # megatron-core's all-to-all token dispatcher (workload/megatron_moe.py).
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
    ("moe_tp_routing_missing", "MoE routing over TP dropped (megatron-core 0.8)",
     "At TP above 1, megatron-core 0.8 routes the whole sequence on every TP rank: the router all-gathers "
     "the bf16 logits of the sequence (b x s x E values) over TP (a reduce-scatter backward), and the "
     "dispatcher turns each rank's sequence shard into a hidden shard of the whole sequence with an "
     "all-to-all of u/t bytes over TP before the EP dispatch and back after the EP combine, both ways. "
     "AICB writes none of these (the audit's reference is 0.8 with --megatron-version 0.8.0)."),
    ("moe_router_allreduce_missing", "MoE load-balancing all-reduce dropped",
     "With a load-balancing loss (moe_aux_loss_coeff > 0), Megatron's router all-reduces each MoE layer's "
     "E int64 token counts over TP in every micro-batch (megatron-core 0.9 and 0.10 also without the loss). "
     "AICB does not write it."),
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
     "it. The all-gather (2P) runs on TP: a finding of its own."),
    # DeepSeek models (docs/deepseek.md): AICB's DeepSeek frame (MockedDeepSeek, its AIOB path)
    # against megatron-core's multi-latent attention (workload/megatron_mla.py).
    ("mla_gathers_sized_on_hidden", "MLA's forward gathers sized on the hidden size",
     "With SP, Megatron's MLA all-gathers over TP the compressed query and key/value latents before their up "
     "projections (2bs x q_lora_rank and 2bs x kv_lora_rank bytes) and the key's RoPE part (2bs x "
     "qk_rope_head_dim); its down projections are duplicated on every TP rank and gather nothing. AICB's "
     "DeepSeek frame all-gathers one activation of the hidden size (2bsh) before each of attention_q_column and "
     "attention_kv_column, and has no RoPE gather."),
    ("mla_latent_reducescatters", "MLA's backward reduce-scatters of the latents dropped",
     "With SP, Megatron reduce-scatters over TP the gradients of the query latent, the key/value latent and the "
     "key's RoPE part in the backward pass. AICB's DeepSeek frame writes two of them (attention_q_column, "
     "attention_kv_column) with 0 bytes and none for the RoPE part: SimAI moves nothing."),
    ("mla_latent_wgrad_gathers_missing", "MLA's weight-gradient gathers of the latents dropped",
     "With SP, Megatron all-gathers the query and key/value latents again in the backward pass for the up "
     "projections' weight gradients, as for every column-parallel layer. AICB's DeepSeek frame does not write "
     "them."),
    ("mla_latent_allreduces_missing", "MLA's backward all-reduces of the latents dropped",
     "Without SP, Megatron all-reduces over TP the input gradients of the up projections (the query and "
     "key/value latents, 2bs x rank bytes each) in the backward pass. AICB's DeepSeek frame does not write them."),
    ("moe_dispatch_fp8_scaled", "MoE forward dispatch scaled to FP8",
     "AICB's DeepSeek frame sizes the forward token dispatch all-to-all as FP8 with its scales, (1 + 4/128)/2 "
     "= 33/64 of the bf16 tokens (DeepEP's FP8 dispatch). Megatron's all-to-all dispatcher sends the tokens in "
     "bf16 (u x k / t bytes)."),
    ("moe_shared_expert_backward_dropped", "shared experts' backward TP collectives dropped",
     "AICB's DeepSeek frame writes the shared experts as a dense MLP (mlp_column, mlp_row after the MoE lines) "
     "but, as for its other column-parallel layers, without the weight-gradient all-gather of linear_fc1's "
     "input and with its backward reduce-scatter of 0 bytes; Megatron runs both on TP with SP."),
    ("moe_shared_experts_in_expert_sync", "shared experts synced as experts",
     "AICB's DeepSeek frame sizes its expert gradient sync on DP_EP (moe_grad_norm1/2) by its MoE layers' "
     "parameters, the shared experts included (and split over TP, not expert TP). Megatron reduces and gathers "
     "the shared experts with the dense parameters over DP; over DP_EP only the routed experts."),
    ("dp_sync_sized_by_deepseek_mock", "DP sync sized by AICB's DeepSeek parameter count",
     "AICB sizes the DP gradient reduce-scatter (4P) and parameter all-gather (2P) by its DeepSeek mock's "
     "parameter count P: a word embedding 4x too large, a learned position embedding (s x h) a RoPE model does "
     "not have, MLPs without SwiGLU's second input half, norms with biases. Megatron's distributed optimizer "
     "moves the stage's real dense parameters."),
    ("size_in_none_column", "size written under NONE",
     "A NONE column holding a size: SimAI skips a NONE collective entirely, size and all, so it adds no "
     "bytes and no time. Listed for what it says about the file; the collective it stands for is counted "
     "under its own cause."),
    ("pipeline_send_bytes", "pipeline sends sized differently",
     "SimAI derives the pipeline sends from the header (2 x vpp x ga messages of pp_comm bytes); the "
     "header's pp_comm or vpp differs from Megatron's 1F1B sends of one activation per micro-batch."),
    ("other_missing", "other missing collectives",
     "A collective Megatron issues that the workload lacks, of no cause named above."),
    ("other_extra", "other extra collectives",
     "A collective Megatron does not issue, of no cause named above."),
    ("other_size", "other size differences",
     "The right collective with other bytes, of no cause named above."),
    ("other_group", "other collectives on a wrong group or phase",
     "A collective Megatron issues on another group or in another phase, of no cause named above: missing "
     "where Megatron has it, extra where the workload has it."),
    ("other_zero_bytes", "other collectives of 0 bytes",
     "A collective of 0 bytes, of no cause named above."),
    ("unattributed", "not accounted for by a finding",
     "The part of the point's difference from Megatron that no audit finding accounts for: a defect of "
     "commsweep; please report it."),
)


@dataclass(frozen=True)
class Item:
    """One audit finding (a row of ``audit.csv``), as ``classify`` sees it."""

    row: int | None
    unit: str  # e.g. mb0/layer3/attention, iteration/dp
    phase: str
    kind: str
    expected_collective: str
    expected_group: str
    expected_bytes: int | None
    found_collective: str
    found_group: str
    found_bytes: int | None
    found_name: str = ""  # the workload's row (AICB's mlp_moelayer, ...)
    expected_name: str = ""  # the Megatron schedule's row (layer3_moe_dispatch_probs, ...)

    @cached_property
    def module(self) -> str:
        """The unit's module kind: attention, mlp, embedding, output_layer, loss, dp, sp_grads, ...
        (kept: every rule of a point's thousands of findings asks for it)"""
        return self.unit.rsplit("/", 1)[-1]

    def expects(self, phase: str, collective: str, group: str = "TP") -> bool:
        return self.phase == phase and self.expected_collective == collective and self.expected_group == group

    @cached_property
    def megatron_row(self) -> str:
        """The expected side's Megatron row kind, without its layer: ``moe_dispatch_probs``, ``mlp_fc1``."""
        match = _LAYER_ROW.fullmatch(self.expected_name)
        return match.group(1) if match else self.expected_name


_LAYER_ROW = re.compile(r"layer\d+_(.*)")


def _is_fp8_dispatch(f: Item) -> bool:
    """AICB's DeepSeek forward dispatch: 33/64 of a bf16 token all-to-all (int of the product)."""
    return (f.kind == "size" and f.phase == "fwd" and f.found_collective == "alltoall"
            and f.expected_bytes is not None and f.found_bytes == int(f.expected_bytes * (1 + 4 / 128) / 2))


# Units whose column-parallel linear Megatron re-gathers for the weight gradient with SP.
WGRAD_UNITS = ("attention", "mlp", "output_layer")
# The Megatron schedule's MLA rows (workload/megatron_mla.py) and AICB's DeepSeek attention rows.
MLA_ROWS = ("attention_k_rope", "attention_q_up_proj", "attention_kv_up_proj", "attention_q_proj")
AICB_MLA_ROWS = ("attention_linear_q_lora", "attention_linear_kv_lora", "attention_q_column", "attention_kv_column")

@dataclass
class Context:
    """What a rule may know of the point's other findings."""

    # Units where Megatron's forward reduce-scatter is missing (the embedding with RoPE and SP).
    missing_fwd_reducescatter: set = field(default_factory=set)
    # Units whose weight-gradient all-gather was already named.
    wgrad_named: set = field(default_factory=set)
    # The point's pipeline size: with pp > 1 a file holds one stage.
    pp: int = 1
    # An MoE model: Megatron's rows or AICB's name it (not AICB's moe_grad_norm rows, which
    # it writes with 0 bytes for dense models too).
    moe: bool = False
    # Units where Megatron's MLP is dense (a model with MoE and dense layers).
    dense_mlp_units: set = field(default_factory=set)
    # Attention units with multi-latent attention (Megatron's MLA rows or AICB's DeepSeek ones).
    mla_units: set = field(default_factory=set)
    # Units where AICB wrote its MoE lines (mlp_moelayer).
    moe_line_units: set = field(default_factory=set)
    # A DeepSeek point (AICB's DeepSeek frame): MLA findings, or (at TP 1, where MLA moves
    # nothing) AICB's FP8-scaled forward dispatch, which only that frame writes.
    deepseek: bool = False

    @classmethod
    def of(cls, items: list[Item], pp: int = 1) -> Context:
        return cls(
            missing_fwd_reducescatter={f.unit for f in items if f.kind == "missing" and f.expects("fwd", "reducescatter")},
            pp=pp,
            moe=any(f.expected_name.startswith("dp_ep_") or "_moe_" in f.expected_name or f.found_name == "mlp_moelayer"
                    for f in items),
            dense_mlp_units={f.unit for f in items if f.megatron_row.startswith("mlp_")},
            mla_units={f.unit for f in items if f.module == "attention" and (
                f.megatron_row.startswith(MLA_ROWS) or f.found_name in AICB_MLA_ROWS)},
            moe_line_units={f.unit for f in items if f.found_name == "mlp_moelayer"},
            deepseek=any((f.module == "attention" and (f.megatron_row.startswith(MLA_ROWS)
                          or f.found_name in AICB_MLA_ROWS)) or _is_fp8_dispatch(f) for f in items),
        )


# (slug, rule): the first rule that holds names the finding's cause.
Rule = Callable[[Item, Context], bool]


def _first_wgrad_allgather(f: Item, ctx: Context) -> bool:
    """A unit's first missing backward all-gather is its weight-gradient re-gather: Megatron
    issues one per column-parallel unit (the other, where there is one, reverses the
    forward reduce-scatter, and the AIOB path writes that one)."""
    if f.kind == "missing" and f.expects("ig", "allgather") and f.module in WGRAD_UNITS and f.unit not in ctx.wgrad_named:
        ctx.wgrad_named.add(f.unit)
        return True
    return False


def _embedding_allreduce_for_reducescatter(f: Item, ctx: Context) -> bool:
    if f.module != "embedding" or f.unit not in ctx.missing_fwd_reducescatter:
        return False
    return (f.kind == "missing" and f.expects("fwd", "reducescatter")) or (
        f.kind == "extra" and f.phase == "fwd" and f.found_collective == "allreduce")


def _moe(rule: Rule) -> Rule:
    """An MoE rule: for an MoE point, and not for the kinds whose cause is the same for dense
    and MoE models (a group of one GPU, a size under NONE)."""
    return lambda f, s: s.moe and f.kind not in ("size1_group", "none_with_size") and rule(f, s)


# What AICB gets wrong about MoE layers, by the Megatron row each finding stands for and
# AICB's row (``Item.megatron_row``, ``found_name``); before the dense rules, which would
# name some of these findings for the dense model's collectives of the same kind.
MOE_RULES: tuple[tuple[str, Rule], ...] = (
    # (AICB's DeepSeek frame writes its first layers dense too: there only where it wrote MoE lines.)
    ("moe_layer_where_megatron_is_dense", _moe(lambda f, s: f.unit in s.dense_mlp_units and (
        f.megatron_row.startswith("mlp_") or f.found_name == "mlp_moelayer")
        and (not s.deepseek or f.unit in s.moe_line_units))),
    ("moe_probs_alltoall_missing", _moe(lambda f, s: f.megatron_row == "moe_dispatch_probs")),
    ("moe_probs_gather_missing", _moe(lambda f, s: f.megatron_row == "moe_expert_probs_gather")),
    ("moe_metadata_gather", _moe(lambda f, s: f.megatron_row == "moe_dispatch_metadata" or (
        not f.expected_collective and f.found_name == "mlp_moelayer" and f.found_collective == "allgather"
        and f.phase == "fwd" and (f.found_bytes or 0) < 1 << 20))),
    ("moe_tp_routing_missing", _moe(lambda f, s: f.megatron_row in ("moe_tp_dispatch", "moe_tp_combine") or (
        f.megatron_row == "moe_router" and f.expected_collective in ("allgather", "reducescatter")))),
    ("moe_router_allreduce_missing", _moe(lambda f, s: f.megatron_row == "moe_router")),
    ("moe_shared_expert_missing", _moe(lambda f, s: f.megatron_row.startswith("moe_shared_"))),
    ("moe_token_exchange", _moe(lambda f, s: f.megatron_row in ("moe_dispatch", "moe_combine", "moe_expert_fc1",
                                                                "moe_expert_fc2")
                                or (not f.expected_collective and f.found_name == "mlp_moelayer"))),
    ("moe_expert_grads_sized_by_mock", _moe(lambda f, s: f.module == "moe_dp" and f.kind == "size")),
    ("moe_experts_in_dp_sync", _moe(lambda f, s: f.module == "dp" and f.found_name == "grad_norm"
                                    and f.kind == "size")),
)
MOE_CAUSES = tuple(slug for slug, _ in MOE_RULES)


def _mla(rule: Rule) -> Rule:
    """An MLA rule: a finding of an MLA attention unit, not of the kinds whose cause is the
    same for every model (a group of one GPU, a size under NONE)."""
    return lambda f, s: f.unit in s.mla_units and f.kind not in ("size1_group", "none_with_size") and rule(f, s)


def _involves(f: Item, collective: str) -> bool:
    return collective in (f.expected_collective, f.found_collective)


def _fp8_dispatch(f: Item, s: Context) -> bool:
    return _is_fp8_dispatch(f)


# What AICB's DeepSeek frame gets wrong: MLA's TP collectives, by phase and collective (the
# audit pairs a unit's collectives of one kind in file order, so which Megatron row a finding
# names is not meant; the kind is), and its MoE quirks; before the MoE and dense rules, which
# would name these findings for other models' collectives of the same kind.
DEEPSEEK_RULES: tuple[tuple[str, Rule], ...] = (
    ("mla_gathers_sized_on_hidden", _mla(lambda f, s: f.phase == "fwd" and _involves(f, "allgather"))),
    ("mla_latent_reducescatters", _mla(lambda f, s: f.phase == "ig" and _involves(f, "reducescatter"))),
    ("mla_latent_wgrad_gathers_missing", _mla(lambda f, s: f.kind == "missing" and f.expects("ig", "allgather"))),
    ("mla_latent_allreduces_missing", _mla(lambda f, s: f.kind == "missing" and f.expects("ig", "allreduce"))),
    ("moe_dispatch_fp8_scaled", _moe(_fp8_dispatch)),
    ("moe_shared_expert_backward_dropped", _moe(lambda f, s: s.deepseek and f.megatron_row.startswith("moe_shared_"))),
    ("moe_shared_experts_in_expert_sync", _moe(lambda f, s: s.deepseek and f.module == "moe_dp" and f.kind == "size")),
    ("dp_sync_sized_by_deepseek_mock", lambda f, s: s.deepseek and f.module == "dp" and f.kind == "size"),
)
DEEPSEEK_CAUSES = tuple(slug for slug, _ in DEEPSEEK_RULES)

RULES: tuple[tuple[str, Rule], ...] = (
    ("pipeline_send_bytes", lambda f, s: f.phase == "pp"),
    ("size_in_none_column", lambda f, s: f.kind == "none_with_size"),
    *DEEPSEEK_RULES,
    *MOE_RULES,
    ("extra_layernorm_grad_allreduce", lambda f, s: f.module == "sp_grads" and not f.expected_collective
     and f.found_collective == "allreduce"),
    ("missing_sp_layernorm_grad_allreduce", lambda f, s: f.module == "sp_grads" and f.kind == "missing"),
    ("extra_embedding_norm_allreduce", lambda f, s: f.module == "embedding_norm" and not f.expected_collective),
    ("extra_embedding_grad_allreduce", lambda f, s: f.module == "embedding_grads" and not f.expected_collective),
    ("optimizer_scalar_allreduce", lambda f, s: f.module == "optimizer" and not f.expected_collective),
    ("moe_grad_sync_on_dense_model", lambda f, s: f.module == "moe_dp" and f.kind == "zero_bytes"
     and not f.expected_collective),
    ("dp_allgather_on_tp", lambda f, s: f.module == "dp" and f.kind == "group" and f.expected_group == "DP"
     and f.found_group == "TP"),
    ("dp_sync_sized_by_mock_params", lambda f, s: f.module == "dp" and f.kind == "size"),
    ("cross_entropy_once_per_iteration", lambda f, s: f.module == "loss" and f.kind == "missing"),
    ("size1_group", lambda f, s: f.kind == "size1_group"),
    ("embedding_allreduce_for_reducescatter", _embedding_allreduce_for_reducescatter),
    ("extra_embedding_bwd_allreduce", lambda f, s: f.kind == "extra" and f.module == "embedding"
     and f.phase == "ig" and f.found_collective == "allreduce"),
    ("module_on_every_stage", lambda f, s: s.pp > 1 and not f.expected_collective and f.kind in ("extra", "zero_bytes")
     and (f.module in ("output_layer", "loss") or (f.module == "embedding" and f.phase == "fwd"))),
    ("recompute_doubled_fwd", lambda f, s: f.kind == "size" and f.phase == "fwd" and f.module == "attention"
     and f.found_bytes == 2 * (f.expected_bytes or 0)),
    ("zero_byte_reducescatter", lambda f, s: f.kind == "zero_bytes" and f.expects("ig", "reducescatter")),
    ("missing_bwd_tp_allreduce", lambda f, s: f.kind == "missing" and f.expects("ig", "allreduce")),
    ("missing_bwd_tp_reducescatter", lambda f, s: f.kind == "missing" and f.expects("ig", "reducescatter")),
    ("missing_wgrad_allgather", _first_wgrad_allgather),
    ("missing_bwd_tp_allgather", lambda f, s: f.kind == "missing" and f.expects("ig", "allgather")),
    ("missing_fwd_tp_collective", lambda f, s: f.kind == "missing" and f.phase == "fwd" and f.expected_group == "TP"),
)
# A finding of no rule: by the audit's kind.
FALLBACK = {"missing": "other_missing", "extra": "other_extra", "size": "other_size", "group": "other_group",
            "zero_bytes": "other_zero_bytes", "size1_group": "size1_group", "none_with_size": "size_in_none_column"}


def classify(items: Iterable[Item], pp: int = 1) -> list[str]:
    """The cause of each of one point's findings, in order (findings in the audit's order;
    ``pp``: the point's pipeline size)."""
    items = list(items)
    ctx = Context.of(items, pp)
    out = []
    for f in items:
        slug = next((slug for slug, rule in RULES if rule(f, ctx)), None)
        out.append(slug or FALLBACK.get(f.kind, "other_" + f.kind))
    return out


# -- reading a point's audit and simulations -----------------------------------------------


def _int_or_none(text: str) -> int | None:
    return int(text) if text != "" else None


def item(r: dict[str, str]) -> Item:
    """One row of an audit CSV (``audit.read_csv``, ``audit.as_rows``) as an Item (ValueError
    for a bad number)."""
    return Item(
        row=_int_or_none(r["row"]), unit=r["layer"], phase=r["phase"], kind=r["kind"],
        expected_collective=r["expected_collective"], expected_group=r["expected_group"],
        expected_bytes=_int_or_none(r["expected_bytes"]),
        found_collective=r["found_collective"], found_group=r["found_group"],
        found_bytes=_int_or_none(r["found_bytes"]),
        found_name=r.get("found_name", ""), expected_name=r.get("expected_name", ""),
    )


def read_items(path: Path) -> list[Item]:
    """A point's audit.csv (``audit.COLUMNS``) as Items, naming the line of a bad field.

    (Rows read as lists, ``audit.read_rows``, not as ``audit.read_csv``'s dicts: a sweep's
    audits hold millions.)"""
    out = []
    for n, r in audit.read_rows(path):
        row, layer, phase, kind, e_coll, e_group, e_bytes, f_coll, f_group, f_bytes, _, _, f_name, e_name = r
        try:
            out.append(Item(_int_or_none(row), layer, phase, kind, e_coll, e_group, _int_or_none(e_bytes),
                            f_coll, f_group, _int_or_none(f_bytes), f_name, e_name))
        except ValueError as err:
            raise InputError(f"expected integers in row and byte columns ({err})", file=path, line=n) from None
    return out


@dataclass
class Simulated:
    """What one point's simulation says, in whole ns: per collective, and in all.

    A collective's time depends only on its phase, type, group and size (within one
    point), so one lookup serves every row: ``by_collective[(phase, collective, group,
    bytes)]`` with the bytes SimAI times it with (``engine.effective_size``)."""

    by_collective: dict[tuple[str, str, str, int], int] = field(default_factory=dict)
    exposed: int = 0  # all collectives' exposed time, plus the exposed pipeline time
    pipeline: int = 0  # the exposed pipeline time
    # The bytes its simulator times a declared size with (phase, size -> bytes): the
    # analytical model's, or SimAI_simulator's for a packet-level point.
    sizing: Callable[[str, int], int] = engine.effective_size

    def exposed_of(self, phase: str, collective: str, group: str, size: int) -> int | None:
        return self.by_collective.get((phase, collective, group, self.sizing(phase, size)))


def read_simulated(files: paths.PointFiles, point: str, *, packet: bool = False) -> Simulated | None:
    """A point's collectives.csv and times.csv, or None when it has no (complete) simulation.
    ``packet``: a packet-level point's, whose collectives.csv holds the bytes SimAI_simulator
    moves (the forward bump to 4096 alone, not the analytical model's float32 scaling)."""
    from ..base.status import is_marker
    from ..simulate.collectives import read_exposed

    coll_path, times_path = files.collectives(point), files.times(point)
    if coll_path is None or times_path is None:
        return None
    if not coll_path.exists() or not times_path.exists() or is_marker(coll_path) or is_marker(times_path):
        return None
    times = sim_times.read(times_path)
    if ("exposed_us", "PP") not in times.iteration:
        return None  # SimAI's summary line is missing: the simulation was cut short
    sim = Simulated(sizing=wf.effective_size) if packet else Simulated()
    sim.pipeline = sim_times.ns(times.iteration[("exposed_us", "PP")])
    sim.exposed = sum(sim_times.ns(exposed) for _, exposed in times.collective.values()) + sim.pipeline
    # Thousands of rows repeat a few dozen collectives: parse each distinct one once.
    for key, exposed in read_exposed(coll_path).items():
        try:
            sim.by_collective[key] = sim_times.ns(exposed)
        except ValueError:
            raise InputError(f"expected a time in us, got {exposed!r}", file=coll_path) from None
    return sim


def payload_bytes(files: paths.PointFiles, workload: str) -> int:
    """A workload's payload bytes per iteration, all phases (its volumes.csv)."""
    from . import volumes

    path = files.volumes(workload)
    if path is None:
        raise InputError(f"no volumes file given for workload {workload}")
    return sum(v.payload_bytes for v in volumes.read(path))


# -- one point's causes ----------------------------------------------------------------------


@dataclass
class Part:
    """One finding's share of a cause: a collective in excess (+) or short (-)."""

    cause: str
    phase: str
    collective: str
    group: str
    bytes: int
    exposed_ns: int | None


def _expected_phase(f: Item) -> str:
    # A DP collective sits in SimAI's weight-gradient column; a finding of kind `group`
    # carries the found side's phase only.
    return "wg" if f.expected_group in ("DP", "DP_EP") else f.phase


def _expected_exposed(f: Item, sim: Simulated | None) -> int | None:
    if sim is None:
        return None
    return sim.exposed_of(_expected_phase(f), f.expected_collective, f.expected_group, f.expected_bytes or 0)


def _found_exposed(f: Item, sim: Simulated | None) -> int | None:
    if sim is None or f.phase == "pp":
        return None
    return sim.exposed_of(f.phase, f.found_collective, f.found_group, f.found_bytes or 0)


def _sub(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a - b


def parts(items: list[Item], found_sim: Simulated | None, expected_sim: Simulated | None, pp: int = 1) -> list[Part]:
    """Each finding's signed bytes and exposed time under its cause.

    ``found_sim``: the AICB point's simulation; ``expected_sim``: its Megatron point's
    (None: exposed times unknown). Bytes are what SimAI executes on each side.
    """
    timed = found_sim is not None and expected_sim is not None
    fsim, esim = (found_sim, expected_sim) if timed else (None, None)
    out = []
    for f, cause in zip(items, classify(items, pp)):
        found_bytes = wf.effective_size(f.phase, f.found_bytes or 0) if f.found_collective not in ("", "none") else 0
        expected_bytes = wf.effective_size(_expected_phase(f), f.expected_bytes or 0) if f.expected_collective else 0
        if f.phase == "pp":
            # The header's pipeline sends: not a row; SimAI's exposed PP time.
            pp = _sub(fsim.pipeline, esim.pipeline) if timed else None
            out.append(Part(cause, "pp", "sendrecv", "PP", found_bytes - expected_bytes, pp))
        elif f.kind == "none_with_size":
            out.append(Part(cause, f.phase, "none", "", 0, 0 if timed else None))
        elif f.kind == "missing":
            exposed = _expected_exposed(f, esim)
            out.append(Part(cause, f.phase, f.expected_collective, f.expected_group, -expected_bytes,
                            None if exposed is None else -exposed))
        elif not f.expected_collective:  # extra, size1_group, an unpaired zero_bytes
            out.append(Part(cause, f.phase, f.found_collective, f.found_group, found_bytes, _found_exposed(f, fsim)))
        elif f.kind == "group":
            # Not netted: the collective is missing where Megatron has it, extra where the row has it.
            out.append(Part(cause, f.phase, f.found_collective, f.found_group, found_bytes, _found_exposed(f, fsim)))
            exposed = _expected_exposed(f, esim)
            out.append(Part(cause, _expected_phase(f), f.expected_collective, f.expected_group, -expected_bytes,
                            None if exposed is None else -exposed))
        else:  # size, zero_bytes: the same collective with other bytes
            out.append(Part(cause, f.phase, f.found_collective, f.found_group, found_bytes - expected_bytes,
                            _sub(_found_exposed(f, fsim), _expected_exposed(f, esim))))
    if timed and any(p.exposed_ns is None for p in out):
        # A collective the Megatron simulation does not have: say so rather than guess.
        for p in out:
            if p.exposed_ns is None:
                p.exposed_ns = 0
    return out


@dataclass(frozen=True)
class CauseRow:
    """A row of difference_by_cause.csv (without the point's columns)."""

    cause: str
    phase: str
    collective: str
    group: str
    rows: int
    bytes: int
    exposed_ns: int | None


_PHASES = ("fwd", "ig", "wg", "pp", "")
_ORDER = {slug: i for i, slug in enumerate(CAUSES)}


def aggregate(point_parts: list[Part], total_bytes: int | None = None, total_exposed_ns: int | None = None
              ) -> list[CauseRow]:
    """Parts summed per cause, phase, collective, group and sign (never netting + and -),
    then, when the point's totals are given, the ``unattributed`` rest (if any)."""
    acc: dict[tuple, list] = {}
    for p in point_parts:
        sign = (p.bytes > 0) - (p.bytes < 0)
        if sign == 0 and p.exposed_ns:
            sign = (p.exposed_ns > 0) - (p.exposed_ns < 0)
        key = (p.cause, p.phase, p.collective, p.group, sign)
        entry = acc.setdefault(key, [0, 0, 0 if p.exposed_ns is not None else None])
        entry[0] += 1
        entry[1] += p.bytes
        if entry[2] is not None:
            entry[2] = None if p.exposed_ns is None else entry[2] + p.exposed_ns
    rows = [CauseRow(c, ph, coll, g, n, b, e) for (c, ph, coll, g, _), (n, b, e) in acc.items()]
    rows.sort(key=lambda r: (_ORDER.get(r.cause, len(_ORDER)), _PHASES.index(r.phase) if r.phase in _PHASES
                             else len(_PHASES), r.collective, r.group, -r.bytes))
    if total_bytes is not None:
        rest_bytes = total_bytes - sum(r.bytes for r in rows)
        rest_ns = None
        if total_exposed_ns is not None and all(r.exposed_ns is not None for r in rows):
            rest_ns = total_exposed_ns - sum(r.exposed_ns for r in rows)
        if rest_bytes or rest_ns:
            rows.append(CauseRow("unattributed", "", "", "", 0, rest_bytes, rest_ns))
    return rows


def moe_causes(findings: Iterable[audit.Finding], family: str = "moe") -> dict:
    """Per MoE cause (``MOE_CAUSES``; ``family="deepseek"``: per DeepSeek cause,
    ``DEEPSEEK_CAUSES``) of one point's findings: (findings, summed delta_bytes, summed
    delta_us or None), in ``CAUSES`` order."""
    findings = list(findings)
    wanted = DEEPSEEK_CAUSES if family == "deepseek" else MOE_CAUSES
    slugs = classify([item(r) for r in audit.as_rows(findings)])
    acc: dict[str, list] = {}
    for f, slug in zip(findings, slugs):
        if slug in wanted:
            entry = acc.setdefault(slug, [0, 0, None])
            entry[0] += 1
            entry[1] += f.delta_bytes
            if f.delta_us is not None:
                entry[2] = (entry[2] or 0.0) + f.delta_us
    return {c: tuple(acc[slug]) for slug, c in CAUSES.items() if slug in acc}


def cause_families(findings: Iterable[audit.Finding]) -> dict[str, dict]:
    """The MoE and the DeepSeek causes' totals of one point's findings, by the title
    ``audit.to_table`` lists them under."""
    findings = list(findings)
    return {title: moe_causes(findings, family=family)
            for title, family in (("MoE causes (docs/moe.md):", "moe"), ("DeepSeek causes (docs/deepseek.md):", "deepseek"))}


# -- the sweep -----------------------------------------------------------------------------


def megatron_partners(points: list[PointRow]) -> dict[str, str]:
    """AICB point -> its Megatron point (same setting; same aiob, else the other one)."""
    megatron: dict[tuple, str] = {}
    for p in points:
        if p.schedule == "megatron":
            megatron[(p.setting, p.aiob)] = p.point
    out = {}
    for p in points:
        if p.schedule != "aicb":
            continue
        partner = megatron.get((p.setting, p.aiob)) or megatron.get((p.setting, not p.aiob))
        if partner is not None:
            out[p.point] = partner
    return out


def _us(ns: int | None) -> str:
    if ns is None:
        return ""
    from ..simulate.collectives import ns_text

    return ("-" if ns < 0 else "") + ns_text(abs(ns))


@dataclass
class PointCauses:
    """One AICB point's causes and the totals they add up to (None: unknown)."""

    point: PointRow
    partner: str | None
    rows: list[CauseRow]
    total_bytes: int | None
    total_exposed_ns: int | None


def audit_of(files: paths.PointFiles, point: PointRow) -> Path | None:
    """A point's audit: its own, or for a packet-level point its analytical twin's (the audit
    is of the workload, which the two share; a packet-level point has its own only in a sweep
    without its twin)."""
    own = files.audit(point.point)
    if point.simulation != "packet" or (own is not None and own.exists()):
        return own
    return files.audit(point.point.removesuffix("_packet")) or own


def point_causes(files: paths.PointFiles, point: PointRow, partner: PointRow | None) -> PointCauses | None:
    """An AICB point's causes against its Megatron point (None: the point has no audit)."""
    from ..base.status import is_marker

    audit_path = audit_of(files, point)
    if audit_path is None or not audit_path.exists() or is_marker(audit_path):
        return None
    items = read_items(audit_path)
    # Times need both simulations; without a Megatron point only bytes are known.
    packet = point.simulation == "packet"
    found_sim = read_simulated(files, point.point, packet=packet) if partner else None
    expected_sim = read_simulated(files, partner.point, packet=packet) if partner else None
    total_bytes = total_ns = None
    if partner is not None:
        total_bytes = payload_bytes(files, point.workload) - payload_bytes(files, partner.workload)
        if found_sim is not None and expected_sim is not None:
            total_ns = found_sim.exposed - expected_sim.exposed
    rows = aggregate(parts(items, found_sim, expected_sim, point.pp), total_bytes, total_ns)
    return PointCauses(point, partner.point if partner else None, rows, total_bytes, total_ns)


def sweep_causes(sweep_csv: Path, files: paths.PointFiles) -> list[PointCauses]:
    """Every audited AICB point of a finished sweep whose stages succeeded, in table order,
    simulated analytically (the packet-level ones: ``packet_difference_by_cause``).
    ``files``: each point's files (``paths.PointFiles``)."""
    return points_causes([p for p in read_points(sweep_csv) if p.simulation != "packet"], files)


def points_causes(points: list[PointRow], files: paths.PointFiles) -> list[PointCauses]:
    """``sweep_causes`` of some points (rows of the points table, as strings), in their order.

    A point's Megatron partner is one of the same setting (``megatron_partners``), so any set
    of points that holds every point of its settings gives each point what the whole sweep
    would: a batch of points does (``commsweep.orchestration.batch``: a batch holds whole model shards).
    """
    from ..base.status import failures

    ok = {p.point: p for p in points if not failures(files, p.workload, p.point)}
    partners = megatron_partners(list(ok.values()))
    out = []
    for p in points:
        if p.schedule != "aicb" or p.point not in ok:
            continue
        partner = ok.get(partners.get(p.point, ""))
        found = point_causes(files, p, partner)
        if found is not None:
            out.append(found)
    return out


def to_csv(found: Iterable[PointCauses]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for pc in found:
        p = pc.point
        base = [p.point, p.model, p.cells["tp"], p.cells["sp"], p.cells["aiob"], p.variant]
        for r in pc.rows:
            writer.writerow(base + [r.cause, r.phase, r.collective, r.group, r.rows, r.bytes, _us(r.exposed_ns),
                                    CAUSES[r.cause].explanation])
    return buf.getvalue()


def difference_by_cause(sweep_csv: Path, files: paths.PointFiles) -> str:
    """``results/difference_by_cause.csv`` of a finished sweep."""
    return to_csv(sweep_causes(sweep_csv, files))


def packet_difference_by_cause(sweep_csv: Path, files: paths.PointFiles) -> str:
    """``results/packet_difference_by_cause.csv``: the difference by cause under packet-level
    simulation. Each packet-level AICB point against its packet-level Megatron point (the
    simulation is part of a point's setting, so like pairs with like), with each finding's
    exposed time from the two SimAI_simulator runs; the same columns, writer and reader as
    ``difference_by_cause.csv``. A sweep-wide step rather than the batches' work: each
    packet-level point is a batch of its own, so no batch holds a pair. With no row, the log
    names each packet-level point that failed and why (``packet.without_pairs``)."""
    points = [p for p in read_points(sweep_csv) if p.simulation == "packet"]
    found = points_causes(points, files)
    if not found:
        from .packet import without_pairs

        for line in without_pairs(points, files):
            print(f"commsweep causes: no packet-level row: failed: {line}", file=sys.stderr)
    return to_csv(found)


def assemble(sweep_csv: Path, parts: Iterable[str | Path]) -> str:
    """``difference_by_cause.csv`` from tables of parts of the sweep (``to_csv`` of
    ``points_causes``, one per batch of points): their rows, point by point in the sweep's
    order. A part that is a failed job's marker (``status.MARKER``) is an error naming it."""
    from ..base.status import MARKER

    rows_of: dict[str, list[list[str]]] = {}
    for part in parts:
        text = read_text(part)
        if text.startswith(MARKER):
            raise InputError(text.strip(), file=part, line=1)
        reader = csv.reader(io.StringIO(text))
        if tuple(next(reader, ())) != COLUMNS:
            raise InputError(f"expected the columns {','.join(COLUMNS)}", file=part, line=1)
        for row in reader:
            rows_of.setdefault(row[0], []).append(row)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for point in read_points(sweep_csv):
        writer.writerows(rows_of.get(point.point, ()))
    return buf.getvalue()


# -- reading the table back ----------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """A row of difference_by_cause.csv, typed."""

    point: str
    model: str
    tp: int
    sp: bool
    aiob: bool
    path: str
    cause: str
    phase: str
    collective: str
    group: str
    rows: int
    bytes: int
    exposed_us: float | None
    explanation: str


def read_csv(path: Path) -> list[Row]:
    """difference_by_cause.csv as written by ``to_csv``, naming the line and field of anything else."""
    text = read_text(path)
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise InputError(f"expected the columns {','.join(COLUMNS)}", file=path, line=1)
    out = []
    for n, r in enumerate(reader, start=2):
        try:
            out.append(Row(
                point=r["point"], model=r["model"], tp=int(r["tp"]), sp=boolean(r["sp"]), aiob=boolean(r["aiob"]),
                path=r["path"], cause=r["cause"], phase=r["phase"], collective=r["collective"], group=r["group"],
                rows=int(r["rows"]), bytes=int(r["bytes"]),
                exposed_us=float(r["exposed_us"]) if r["exposed_us"] else None, explanation=r["explanation"],
            ))
        except ValueError as err:
            raise InputError(f"bad value ({err})", file=path, line=n) from None
    return out


# -- per setting: what the figure and the landing page show ----------------------------------

# The axes of a setting as the figure and the landing page show it (the network and the
# TP overlap ratio only change times: those use the sweep's first of each).
PANEL_AXES = ("model", "world_size", "tp", "pp", "ep", "sp", "micro_batch", "global_batch", "seq_length",
              "recompute")
_AXIS_LABELS = {"world_size": "world {}", "pp": "PP {}", "ep": "EP {}", "micro_batch": "micro-batch {}",
                "global_batch": "global batch {}", "seq_length": "sequence {}"}


@dataclass
class Panel:
    """One setting: each AICB path's point on the first network and its cause rows."""

    setting: tuple
    label: str
    network: str
    points: dict[str, str] = field(default_factory=dict)  # path -> point key
    rows: dict[str, list[Row]] = field(default_factory=dict)  # path -> its rows

    def total(self, path: str, what: str = "bytes") -> float:
        """The path's net difference: bytes, or exposed us."""
        return sum((r.bytes if what == "bytes" else (r.exposed_us or 0.0)) for r in self.rows.get(path, []))


def setting_label(point: PointRow, varying: Iterable[str] = ()) -> str:
    """'gpt-7b, TP 2, SP off', plus the other axes that vary across the sweep."""
    parts = [point.model, f"TP {point.tp}", "SP on" if point.sp else "SP off"]
    for axis in varying:
        if axis in _AXIS_LABELS:
            parts.append(_AXIS_LABELS[axis].format(point.cells[axis]))
        elif axis == "recompute":
            parts.append("recompute" if point.recompute else "no recompute")
    return ", ".join(parts)


def panels(rows: list[Row], points: dict[str, PointRow]) -> list[Panel]:
    """The settings of the AICB points in ``rows`` (``points``: the points table by key),
    ordered by model, SP and TP, each with its paths' rows on the first network."""
    aicb = [points[p] for p in dict.fromkeys(r.point for r in rows) if p in points]
    if not aicb:
        return []
    table = list(points.values())
    network = table[0].network
    overlap = table[0].tp_overlap
    varying = [a for a in PANEL_AXES if a not in ("model", "tp", "sp") and len({p.cells[a] for p in aicb}) > 1]
    by_point: dict[str, list[Row]] = {}
    for r in rows:
        by_point.setdefault(r.point, []).append(r)
    out: dict[tuple, Panel] = {}
    for p in aicb:
        if p.network != network or p.tp_overlap != overlap:
            continue
        setting = tuple(p.cells[a] for a in PANEL_AXES)
        panel = out.setdefault(setting, Panel(setting, setting_label(p, varying), network))
        panel.points[p.variant] = p.point
        panel.rows[p.variant] = by_point.get(p.point, [])

    def order(panel: Panel) -> tuple:
        values = dict(zip(PANEL_AXES, panel.setting))
        rest = tuple(int(v) if v.isdigit() else v for a, v in values.items() if a not in ("model", "sp", "tp"))
        return (values["model"], values["sp"], int(values["tp"]), rest)

    return sorted(out.values(), key=order)
