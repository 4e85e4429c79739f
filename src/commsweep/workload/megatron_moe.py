"""Megatron's MoE layer: what megatron-core's all-to-all token dispatcher issues.

The MLP part of the Megatron schedule (``megatron_mlp.py``) calls ``layer_rows`` for every
MoE layer (``ModelSpec.is_moe_layer``) in place of the dense MLP's rows. The facts come from
megatron-core's own source (``transformer/moe/moe_layer.py``, ``token_dispatcher.py``
``MoEAlltoAllTokenDispatcher``, ``router.py``, ``shared_experts.py``,
``tensor_parallel/layers.py``) and are checked row for row against traces of real
megatron-core (``commsweep trace``, ``tests/test_trace_moe.py``).

Notation: b micro batch, s sequence, h hidden, t TP, e = etp expert TP (default t), ep EP,
E experts, k top-k, T = b*s/t tokens on a rank at the MoE layer (SP shards the sequence;
megatron refuses MoE with t > 1 without SP). One MoE layer, one micro-batch, forward, in
megatron's order:

1. shared experts (if any), before the router: a dense MLP over TP with SP: all-gather u
   before linear_fc1, reduce-scatter u after linear_fc2;
2. the router: with a load-balancing loss (``moe_aux_loss_coeff`` > 0), an all-reduce over
   TP of the E int64 token counts per expert (``get_tokens_per_expert_and_token_count``);
3. the dispatcher's metadata: an all-gather of the E int64 token counts over the expert-TP
   x EP group (when ep > 1 or e > 1): 8*e*ep*E bytes;
4. dispatch: two all-to-alls over EP, the permuted tokens (T*k rows of h: u*k/t bytes) and
   their routing probabilities (T*k bf16 values);
5. with e > 1, all-gathers over the expert-TP group of both (e*T*k rows: u*k*e/t bytes, and
   the probabilities);
6. the experts' GEMMs: no collective (megatron's expert linears skip TP communication,
   ``explicit_expert_comm``);
7. combine: a reduce-scatter over expert TP (e > 1) of the experts' output, and the
   all-to-all over EP back (u*k/t).

That is the layer of 0.12 and later. Older releases (``megatron_releases``: the
release the schedule is built for) issue less or otherwise: 0.8 to 0.11 keep the
probabilities on the token's rank (no rows 4's second all-to-all and 5's second gather);
0.9 and 0.10 issue step 2 also without a load-balancing loss; 0.8 with t > 1 routes the whole sequence on every TP rank: step 2 is an all-gather over TP
of the router's bf16 logits (b*s*E values; reduce-scatter backward) and no all-reduce,
step 3 gathers 8*ep*E bytes over EP alone, and the tokens cross TP by all-to-all (u/t
bytes: the rank's sequence shard for a hidden shard of the whole sequence) before step 4
and back after step 7.

Backward reverses each differentiable collective: all-to-all for all-to-all, reduce-scatter
for all-gather and all-gather for reduce-scatter; the int64 metadata and token counts have
no gradient. The shared experts' backward is a dense MLP's (all-gather u reversing the
reduce-scatter, all-gather u re-gathering linear_fc1's input for its weight gradient,
reduce-scatter u of its input gradient).

**Balanced routing.** A rank sends its T*k routed tokens whatever the router decides
(megatron's dropless all-to-all sends every token's k copies), but what it receives, and
so the combine all-to-all, the expert-TP gathers and every backward all-to-all, depends
on how many tokens the router sends to its experts. The schedule assumes balanced routing,
every rank receiving as many tokens as it sends; a SimAI row has one size per collective
and cannot describe uneven all-to-alls. The rows that rest on this are listed in
``Schedule.unexpressed`` with ``in_rows`` set (their collective is written, with the size of
balanced routing).

Gradients: expert parameters are reduced over the expert-data-parallel group (``DP_EP``,
world / (e*ep*p) ranks) when ep > 1; with ep = 1 megatron treats them as dense parameters
(reduced over DP). The router's weights (and a shared expert's gate) are replicated on the
TP ranks and fed sequence shards, so with SP their gradients join the TP all-reduce of the
sequence-parallel parameters after the backward pass.

What SimAI cannot express beyond uneven routing: an expert-TP group other than TP (1 < e < t)
and the expert-TP x EP group of the metadata all-gather when both are above 1 (SimAI has no
such groups: listed in ``unexpressed``), and, with e != t, the size of megatron's
expert-data-parallel group (SimAI sizes DP_EP as dp/ep).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..setup.training import TrainingSetup
from .megatron_blocks import BF16, INT64, Block, Build, Comm, Rows, Unexpressed
from .row_names import (MOE_COMBINE, MOE_DISPATCH, MOE_DISPATCH_METADATA, MOE_DISPATCH_PROBS, MOE_EXPERT_FC1,
                        MOE_EXPERT_FC2, MOE_EXPERT_PROBS_GATHER, MOE_ROUTER, MOE_SHARED_FC1, MOE_SHARED_FC1_WGRAD,
                        MOE_SHARED_FC2, MOE_TP_COMBINE, MOE_TP_DISPATCH, in_layer)

ROUTING = (
    "sized for balanced routing: megatron's dispatcher moves as many tokens as the router sends each rank "
    "(all-to-all-v, uneven expert-TP gathers); a SimAI row has one size per collective"
)


def problems(setup: TrainingSetup) -> list[str]:
    """What the MoE schedule cannot describe for this setup (megatron's refusals first)."""
    m = setup.model
    out = []
    if setup.tp > 1 and not setup.sp:
        out.append("megatron-core refuses MoE with tensor parallelism but without sequence parallelism")
    if m.add_bias_linear:
        out.append("the megatron schedule does not model MoE layers with linear biases (megatron allows them "
                   "only with expert TP 1)")
    if setup.expert_tp >= 1 and setup.tp % setup.expert_tp:
        out.append(f"the megatron schedule covers expert TP sizes that divide TP (etp={setup.expert_tp}, tp={setup.tp})")
    return out


def expert_tp_group(setup: TrainingSetup) -> str:
    """The expert-TP group's name: TP when it is TP (megatron's default), else ETP."""
    return "TP" if setup.expert_tp == setup.tp else "ETP"


def tp_ep_group(setup: TrainingSetup) -> str:
    """The expert-TP x EP group's name: EP without expert TP, the expert-TP group without
    EP, else TP_EP (no SimAI group)."""
    if setup.expert_tp == 1:
        return "EP"
    if setup.ep == 1:
        return expert_tp_group(setup)
    return "TP_EP"


def tokens_per_rank(setup: TrainingSetup) -> int:
    """T: the tokens of one micro-batch a rank holds at the MoE layer (s/t with SP)."""
    sp = setup.sp and setup.tp > 1
    return setup.micro_batch * setup.seq_length // (setup.tp if sp else 1)


# -- parameters ------------------------------------------------------------------------


def router_parameters(setup: TrainingSetup) -> int:
    m = setup.model
    assert m.num_experts is not None
    return m.num_experts * m.hidden_size


def expert_parameters(setup: TrainingSetup) -> int:
    """One MoE layer's routed-expert parameters on one rank: E/ep experts of width f_e/etp."""
    m = setup.model
    assert m.num_experts is not None
    f = m.expert_ffn_hidden_size
    fc1_out = f * (2 if m.swiglu else 1)
    return (m.num_experts // setup.ep) * (m.hidden_size * fc1_out + f * m.hidden_size) // setup.expert_tp


def shared_parameters(setup: TrainingSetup) -> int:
    """One MoE layer's shared-expert parameters on one TP rank (and its gate, replicated)."""
    m = setup.model
    f = m.moe_shared_expert_intermediate_size
    if f is None:
        return 0
    fc1_out = f * (2 if m.swiglu else 1)
    return (m.hidden_size * fc1_out + f * m.hidden_size) // setup.tp + (m.hidden_size if m.moe_shared_expert_gate else 0)


def sequence_parallel_parameters(setup: TrainingSetup) -> int:
    """One MoE layer's MLP parameters in the SP gradient all-reduce: the router's weights
    and the shared experts' gate."""
    m = setup.model
    return router_parameters(setup) + (m.hidden_size if m.moe_shared_expert_gate and shared_parameters(setup) else 0)


# -- one MoE layer ---------------------------------------------------------------------


def layer_rows(build: Build, layer: int, micro_batch: int) -> Rows:
    """The rows of one MoE layer and micro-batch, in the release's forward order, and the
    collectives they cannot carry. The module names are megatron's
    (``decoder.layers.<l>.mlp`` for the dispatcher, which is not a module of its own)."""
    assert build.setup.model.num_experts is not None
    layer_rows = _LayerRows(build, layer, micro_batch)
    for step in (_shared_experts, _router, _dispatch, _experts, _combine):
        step(layer_rows)
    return layer_rows.out


@dataclass
class _LayerRows:
    """One MoE layer's rows as they are written, in order."""

    build: Build
    layer: int
    micro_batch: int
    out: Rows = field(default_factory=Rows)

    @property
    def mlp(self) -> str:
        """The dispatcher's module: megatron's MLP of the layer."""
        return f"decoder.layers.{self.layer}.mlp"

    def row_name(self, step: str) -> str:
        """The row of ``step`` (``row_names.MOE_DISPATCH``, ...): ``layer<l>_moe_<step>``."""
        return in_layer(self.layer, step)

    def add(self, step: str, module: str, fwd: Comm | None = None, ig: Comm | None = None, *,
            kind: str | None = None, routed: bool = False, always: bool = False) -> None:
        """Append ``step``'s row (if it carries a collective, or ``always``); a collective on a
        group SimAI lacks goes to ``unexpressed`` instead, and one sized for balanced routing
        (``routed``) is written and listed there too."""
        where = {"layer": self.layer, "micro_batch": self.micro_batch}
        cells = {}
        for phase, c in (("fwd", fwd), ("ig", ig)):
            if c is None:
                continue
            if c.group in ("ETP", "TP_EP"):
                self.out.unexpressed.append(Unexpressed(
                    module, phase, c, f"the {c.group} group (expert TP x EP ranks, or an expert TP other "
                    "than TP) has no SimAI group", **where))
                continue
            cells[phase] = c
            if routed:
                self.out.unexpressed.append(Unexpressed(module, phase, c, ROUTING, **where, in_rows=True))
        if cells or always:
            self.out.blocks.append(Block(self.row_name(step), module, self.layer, self.micro_batch, **cells,
                                         **self.build.timed(kind)))


def _maybe(collective: str, group: str, nbytes: int, size: int, element_bytes: int | None = None) -> Comm | None:
    """A collective on a group of ``size`` ranks, or None where megatron skips it (one rank)."""
    return Comm(collective, group, nbytes, element_bytes) if size > 1 else None


def _tp_routing(build: Build) -> bool:
    """0.8 with SP: every TP rank routes the whole sequence."""
    return build.release.tp_routing and build.sp


def _routed_bytes(setup: TrainingSetup) -> int:
    """The T*k routed tokens of a rank, h values each: u*k/t bytes."""
    return setup.activation_bytes * setup.model.moe_topk // setup.tp


def _shared_experts(rows: _LayerRows) -> None:
    """1. Shared experts: a dense MLP on TP with SP, computed before the router."""
    m, u = rows.build.setup.model, rows.build.u
    if m.moe_shared_expert_intermediate_size is None or not rows.build.sp:
        return
    shared = f"{rows.mlp}.shared_experts"
    rows.add(MOE_SHARED_FC1, f"{shared}.linear_fc1", Comm("allgather", "TP", u), Comm("reducescatter", "TP", u))
    rows.add(MOE_SHARED_FC1_WGRAD, f"{shared}.linear_fc1", ig=Comm("allgather", "TP", u))
    rows.add(MOE_SHARED_FC2, f"{shared}.linear_fc2", Comm("reducescatter", "TP", u), Comm("allgather", "TP", u))


def _router(rows: _LayerRows) -> None:
    """2. The router, 3. the dispatcher's metadata, and (0.8) the tokens across TP.

    0.8 with TP gathers the sequence-parallel logits (bf16, b*s*E values) and reduces the
    load-balancing counts over one rank; else, with a load-balancing loss (0.9 and 0.10: even
    without), the token counts per expert are summed over TP. The metadata: every rank's
    token counts per expert (0.8: over EP alone)."""
    setup, release, mlp = rows.build.setup, rows.build.release, rows.mlp
    m, t, ep, etp = setup.model, setup.tp, setup.ep, setup.expert_tp
    E = m.num_experts
    assert E is not None
    if _tp_routing(rows.build):
        logits = BF16 * tokens_per_rank(setup) * t * E
        rows.add(MOE_ROUTER, f"{mlp}.router", Comm("allgather", "TP", logits), Comm("reducescatter", "TP", logits))
    elif m.moe_aux_loss_coeff > 0 or release.counts_without_loss:
        rows.add(MOE_ROUTER, f"{mlp}.router", _maybe("allreduce", "TP", INT64 * E, t, INT64))
    if _tp_routing(rows.build):
        rows.add(MOE_DISPATCH_METADATA, mlp, _maybe("allgather", "EP", INT64 * ep * E, ep, INT64))
    else:
        metadata = INT64 * etp * ep * E
        rows.add(MOE_DISPATCH_METADATA, mlp, _maybe("allgather", tp_ep_group(setup), metadata, etp * ep, INT64))
    # 0.8: the rank's sequence shard becomes a hidden shard of the whole sequence (u/t each way).
    if _tp_routing(rows.build):
        shard = Comm("alltoall", "TP", rows.build.u // t)
        rows.add(MOE_TP_DISPATCH, mlp, shard, shard)


def _dispatch(rows: _LayerRows) -> None:
    """4. Dispatch over EP: the permuted tokens and (from 0.12) their probabilities."""
    setup = rows.build.setup
    ep, routed = setup.ep, _routed_bytes(setup)
    rows.add(MOE_DISPATCH, rows.mlp, _maybe("alltoall", "EP", routed, ep), _maybe("alltoall", "EP", routed, ep),
             routed=True)
    if rows.build.release.probs_travel:
        probs = BF16 * tokens_per_rank(setup) * setup.model.moe_topk
        rows.add(MOE_DISPATCH_PROBS, rows.mlp, _maybe("alltoall", "EP", probs, ep), _maybe("alltoall", "EP", probs, ep),
                 routed=True)


def _experts(rows: _LayerRows) -> None:
    """5-6. The expert-TP gathers, then the experts' GEMMs (the rows carry the MLP's times),
    and the first half of 7: the expert-TP reduce-scatter of the experts' output."""
    setup = rows.build.setup
    etp, group = setup.expert_tp, expert_tp_group(setup)
    gathered = _routed_bytes(setup) * etp
    rows.add(MOE_EXPERT_FC1, rows.mlp, _maybe("allgather", group, gathered, etp),
             _maybe("reducescatter", group, gathered, etp), kind="mlp_fc1", routed=True, always=True)
    if rows.build.release.probs_travel:
        probs = BF16 * tokens_per_rank(setup) * setup.model.moe_topk * etp
        rows.add(MOE_EXPERT_PROBS_GATHER, rows.mlp, _maybe("allgather", group, probs, etp),
                 _maybe("reducescatter", group, probs, etp), routed=True)
    rows.add(MOE_EXPERT_FC2, rows.mlp, _maybe("reducescatter", group, gathered, etp),
             _maybe("allgather", group, gathered, etp), kind="mlp_fc2", routed=True, always=True)


def _combine(rows: _LayerRows) -> None:
    """7. Combine: the all-to-all back over EP; 0.8: then back from the hidden shard of the
    whole sequence to the rank's sequence shard."""
    setup = rows.build.setup
    ep, routed, t = setup.ep, _routed_bytes(setup), setup.tp
    rows.add(MOE_COMBINE, rows.mlp, _maybe("alltoall", "EP", routed, ep), _maybe("alltoall", "EP", routed, ep),
             routed=True)
    if _tp_routing(rows.build):
        shard = Comm("alltoall", "TP", rows.build.u // t)
        rows.add(MOE_TP_COMBINE, rows.mlp, shard, shard)
