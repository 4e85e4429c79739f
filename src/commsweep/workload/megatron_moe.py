"""Megatron's MoE layer: what megatron-core's all-to-all token dispatcher issues.

The Megatron schedule (``megatron.py``) calls ``layer_blocks`` for every MoE layer
(``ModelSpec.is_moe_layer``) in place of the dense MLP's rows. The facts come from
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
``release`` argument of ``layer_blocks``) issue less or otherwise: 0.8 to 0.11 keep the
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

from collections.abc import Callable

from ..setup.training import TrainingSetup
from .megatron_releases import Release
from .row_names import (MOE_COMBINE, MOE_DISPATCH, MOE_DISPATCH_METADATA, MOE_DISPATCH_PROBS, MOE_EXPERT_FC1,
                        MOE_EXPERT_FC2, MOE_EXPERT_PROBS_GATHER, MOE_ROUTER, MOE_SHARED_FC1, MOE_SHARED_FC1_WGRAD,
                        MOE_SHARED_FC2, MOE_TP_COMBINE, MOE_TP_DISPATCH, in_layer)

INT64 = 8
BF16 = 2

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


def layer_blocks(
    setup: TrainingSetup,
    layer: int,
    micro_batch: int,
    *,
    release: Release,
    block: Callable[..., object],
    comm: Callable[[str, str, int], object],
    timed: Callable[[str], dict],
    unexpressed: Callable[..., None],
) -> list:
    """The rows of one MoE layer and micro-batch, in ``release``'s forward order.

    ``block(name, module, **fields)`` makes a row; ``comm(collective, group, bytes,
    element_bytes=None)`` a collective; ``timed(kind)`` a row's compute times;
    ``unexpressed(module, phase, comm, why, in_rows=False)`` records what a row cannot
    carry. The module names are megatron's (``decoder.layers.<l>.mlp`` for the dispatcher,
    which is not a module of its own).
    """
    m = setup.model
    assert m.num_experts is not None
    t, ep, etp, k, E = setup.tp, setup.ep, setup.expert_tp, m.moe_topk, m.num_experts
    sp = setup.sp and t > 1
    u = setup.activation_bytes
    T = tokens_per_rank(setup)
    h = m.hidden_size
    mlp = f"decoder.layers.{layer}.mlp"
    rows: list = []

    def maybe(collective: str, group: str, nbytes: int, size: int, element_bytes: int | None = None):
        """A collective on a group of ``size`` ranks, or None where megatron skips it (one rank)."""
        return comm(collective, group, nbytes, element_bytes) if size > 1 else None

    def add(row_name: str, module: str, fwd=None, ig=None, *, kind: str | None = None, routed: bool = False,
            always: bool = False) -> None:
        """Append a row; a collective on a group SimAI lacks goes to ``unexpressed`` instead."""
        cells = {}
        for phase, c in (("fwd", fwd), ("ig", ig)):
            if c is None:
                continue
            if c.group in ("ETP", "TP_EP"):
                unexpressed(module, phase, c, f"the {c.group} group (expert TP x EP ranks, or an expert TP other "
                            "than TP) has no SimAI group", layer=layer, micro_batch=micro_batch)
                continue
            cells[phase] = c
            if routed:
                unexpressed(module, phase, c, ROUTING, layer=layer, micro_batch=micro_batch, in_rows=True)
        if cells or always:
            rows.append(block(row_name, module, layer, micro_batch, **cells, **(timed(kind) if kind else {})))

    # 1. Shared experts: a dense MLP on TP with SP, computed before the router.
    if m.moe_shared_expert_intermediate_size is not None and sp:
        shared = f"{mlp}.shared_experts"
        add(in_layer(layer, MOE_SHARED_FC1), f"{shared}.linear_fc1", comm("allgather", "TP", u), comm("reducescatter", "TP", u))
        add(in_layer(layer, MOE_SHARED_FC1_WGRAD), f"{shared}.linear_fc1", ig=comm("allgather", "TP", u))
        add(in_layer(layer, MOE_SHARED_FC2), f"{shared}.linear_fc2", comm("reducescatter", "TP", u), comm("allgather", "TP", u))
    tp_routing = release.tp_routing and sp  # 0.8: every TP rank routes the whole sequence
    # 2. The router. 0.8 with TP gathers the sequence-parallel logits (bf16, b*s*E values)
    # and reduces the load-balancing counts over one rank; else, with a load-balancing loss
    # (0.9 and 0.10: even without), the token counts per expert are summed over TP.
    if tp_routing:
        logits = BF16 * T * t * E
        add(in_layer(layer, MOE_ROUTER), f"{mlp}.router", comm("allgather", "TP", logits), comm("reducescatter", "TP", logits))
    elif m.moe_aux_loss_coeff > 0 or release.counts_without_loss:
        add(in_layer(layer, MOE_ROUTER), f"{mlp}.router", maybe("allreduce", "TP", INT64 * E, t, INT64))
    # 3. The dispatcher's metadata: every rank's token counts per expert (0.8: over EP alone).
    if tp_routing:
        add(in_layer(layer, MOE_DISPATCH_METADATA), mlp, maybe("allgather", "EP", INT64 * ep * E, ep, INT64))
    else:
        add(in_layer(layer, MOE_DISPATCH_METADATA), mlp,
            maybe("allgather", tp_ep_group(setup), INT64 * etp * ep * E, etp * ep, INT64))
    # 0.8: the rank's sequence shard becomes a hidden shard of the whole sequence (u/t each way).
    if tp_routing:
        add(in_layer(layer, MOE_TP_DISPATCH), mlp, comm("alltoall", "TP", u // t), comm("alltoall", "TP", u // t))
    # 4. Dispatch over EP: the permuted tokens and (from 0.12) their probabilities.
    routed_bytes = u * k // t
    add(in_layer(layer, MOE_DISPATCH), mlp, maybe("alltoall", "EP", routed_bytes, ep), maybe("alltoall", "EP", routed_bytes, ep),
        routed=True)
    if release.probs_travel:
        add(in_layer(layer, MOE_DISPATCH_PROBS), mlp, maybe("alltoall", "EP", BF16 * T * k, ep),
            maybe("alltoall", "EP", BF16 * T * k, ep), routed=True)
    # 5-6. The expert-TP gathers, then the experts' GEMMs (the row carries the MLP's times).
    etp_group = expert_tp_group(setup)
    gathered = routed_bytes * etp
    add(in_layer(layer, MOE_EXPERT_FC1), mlp, maybe("allgather", etp_group, gathered, etp),
        maybe("reducescatter", etp_group, gathered, etp), kind="mlp_fc1", routed=True, always=True)
    if release.probs_travel:
        add(in_layer(layer, MOE_EXPERT_PROBS_GATHER), mlp, maybe("allgather", etp_group, BF16 * T * k * etp, etp),
            maybe("reducescatter", etp_group, BF16 * T * k * etp, etp), routed=True)
    # 7. Combine: the expert-TP reduce-scatter, then the all-to-all back over EP.
    add(in_layer(layer, MOE_EXPERT_FC2), mlp, maybe("reducescatter", etp_group, gathered, etp),
        maybe("allgather", etp_group, gathered, etp), kind="mlp_fc2", routed=True, always=True)
    add(in_layer(layer, MOE_COMBINE), mlp, maybe("alltoall", "EP", routed_bytes, ep), maybe("alltoall", "EP", routed_bytes, ep),
        routed=True)
    # 0.8: back from the hidden shard of the whole sequence to the rank's sequence shard.
    if tp_routing:
        add(in_layer(layer, MOE_TP_COMBINE), mlp, comm("alltoall", "TP", u // t), comm("alltoall", "TP", u // t))
    return rows
