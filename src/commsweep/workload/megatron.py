"""The Megatron schedule: the collectives Megatron-LM (megatron-core) really issues.

One source of truth for the pipeline: ``schedule()`` lists, for one pipeline stage's
view of one training iteration, every collective with its module, layer, phase, group
and bytes (NVIDIA/Megatron-LM's ``megatron/core/tensor_parallel/mappings.py`` and ``layers.py``,
``megatron/core/pipeline_parallel/schedules.py``, ``megatron/core/transformer/moe/token_dispatcher.py``;
Shoeybi et al. 2019, Narayanan et al. 2021, Korthikanti et al. 2022; checked against traces of
real megatron-core by ``commsweep trace``). ``Schedule.workload()`` writes it as a SimAI
workload; what that format cannot carry is kept in ``Schedule.unexpressed``.

Conventions (those of SimAI workload files): a collective's size is the whole tensor,
not a rank's shard; activations are bf16, u = 2*b*s*h bytes; gradients are reduced in
fp32 (4 bytes per parameter) and parameters gathered in bf16 (2 bytes).

Per micro-batch, TP group (t > 1 only: Megatron has no TP communication at t = 1):

* Embedding (first stage): forward all-reduce u; with SP it is followed by a split to
  sequence shards whose backward all-gathers u, and without a learned position embedding
  (RoPE) the forward all-reduce becomes a reduce-scatter.
* Each layer without SP: forward all-reduce u after linear_proj and linear_fc2; backward
  all-reduce u of the input gradients of linear_qkv and linear_fc1.
* Each layer with SP: forward all-gather u before linear_qkv and linear_fc1 and
  reduce-scatter u after linear_proj and linear_fc2; backward all-gather u reversing each
  reduce-scatter, all-gather u re-gathering the qkv/fc1 input for the weight gradient,
  and reduce-scatter u of the qkv/fc1 input gradient.
* Output layer (last stage): without SP a backward all-reduce u; with SP a forward
  all-gather u and backward all-gather u (weight gradient) + reduce-scatter u.
* Cross entropy (last stage): three forward all-reduces of b*s fp32 values.

Per iteration: with SP, one TP all-reduce of the sequence-parallel parameters' gradients
(norms, and the biases of linear_proj and linear_fc2); with DP > 1 and the distributed
optimizer, a reduce-scatter of 4*P gradient bytes and an all-gather of 2*P parameter bytes
over DP (P = this rank's parameters), or with plain DDP one all-reduce of the gradients
(4*P bytes, 2*P when reduced in 16 bits); with p > 1 and tied embeddings, an all-reduce of
the word-embedding gradient between the first and last stage (not expressible in SimAI).
Pipeline sends (u, or u/t with SP, per micro-batch, model chunk and direction) go into the
header's ``pp_comm``; ``vpp`` holds the virtual pipeline size v (Megatron's interleaved
schedule: stage i holds chunks i, i+p, ... of L/(p*v) layers each), so that SimAI's bubble
(pp-1)/(ga*vpp) and PP formulas follow the (interleaved) 1F1B schedule.

Full recompute (``recompute_granularity="full"``) re-runs each layer's forward, collectives
included, at the start of its backward pass: rows after the layer's own (``_recompute_blocks``).

MoE layers (``ModelSpec.is_moe_layer``) replace the dense MLP's rows with those of
megatron-core's all-to-all token dispatcher (``megatron_moe.py``: shared experts, router,
dispatch and combine all-to-alls on EP, expert-TP gathers and scatters, balanced routing);
expert parameters are then reduced and gathered over the expert-data-parallel group
(``DP_EP``) when ep > 1. The MoE rows are those of the megatron-core release asked for
(``megatron_version``; ``megatron_releases.py``: 0.8 to 0.19 traced, the newest by
default); every traced release issues the same dense rows.

Multi-latent attention (``ModelSpec.is_mla``, DeepSeek-V2/V3) replaces linear_qkv's rows
with those of megatron-core's ``MLASelfAttention`` as GPUs build it (``megatron_mla.py``: the
down projections duplicated on every TP rank, so the compressed latents cross TP, not the
hidden state), from megatron-core 0.14; the first ``moe_first_k_dense`` layers of an MoE model
are dense.

Compute times: the kernel model's (``aiob/megatron_kernels.py``) when given, else the AIOB
profile's (see ``_compute_times``), else 0 everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from typing import TYPE_CHECKING

from ..aiob.profile_file import AiobProfile
from ..setup.training import TrainingSetup
from . import megatron_mla, megatron_moe, megatron_releases
from .format import Header, Row, Workload
from .row_names import SP_GRADS_ALLREDUCE, dense, dp_ep, in_layer, recompute_row, wgrad_gather

if TYPE_CHECKING:
    from ..aiob.megatron_kernels import RowTimes

GROUP_OF_PHASE_SUFFIX = {"TP": "", "DP": "", "EP": "_EP", "DP_EP": "_DP_EP"}
# Groups that may stand in each column of a SimAI row.
_COLUMN_GROUPS = {"fwd": ("TP", "EP", "DP_EP"), "ig": ("TP", "EP", "DP_EP"), "wg": ("DP", "EP", "DP_EP")}
FP32 = 4
BF16 = 2


@dataclass(frozen=True)
class Comm:
    """One collective: operation, group and size of the whole tensor in bytes."""

    collective: str  # allreduce | allgather | reducescatter | alltoall | sendrecv
    # TP | DP | EP | DP_EP | PP | EMB (first and last pipeline stage); MoE's ETP (an expert
    # TP other than TP) and TP_EP (expert TP x EP) have no SimAI group.
    group: str
    bytes: int
    # The element size when it is not the schedule's convention for the module (see
    # trace.compare.schedule_element_bytes): 8 for megatron's int64 token counts.
    element_bytes: int | None = None

    def comm_type(self) -> str:
        return self.collective.upper() + GROUP_OF_PHASE_SUFFIX[self.group]


@dataclass(frozen=True)
class Block:
    """One workload row of the schedule, with the Megatron module it stands for."""

    name: str
    module: str
    layer: int | None = None  # global transformer layer index
    micro_batch: int | None = None  # None for once-per-iteration rows
    fwd: Comm | None = None
    ig: Comm | None = None
    wg: Comm | None = None
    fwd_compute: int = 0
    ig_compute: int = 0
    wg_compute: int = 0

    def comm(self, phase: str) -> Comm | None:
        return getattr(self, phase)


@dataclass(frozen=True)
class Expected:
    """One collective Megatron issues in the iteration, for the audit and the trace check."""

    phase: str  # fwd | ig | wg | pp | after (after backward, outside any row)
    comm: Comm
    module: str
    layer: int | None
    micro_batch: int | None
    row: int | None  # index of the workload row that carries it; None if unexpressed


@dataclass(frozen=True)
class Unexpressed:
    """A collective the SimAI format cannot carry, or cannot carry as megatron issues it.

    ``in_rows`` marks a collective that is written as a row all the same, with what the
    row cannot say in ``why`` (the sizes of balanced routing, for one); it is not listed
    again by ``Schedule.expected``. Unpacks as ``(module, phase, comm, why)``.
    """

    module: str
    phase: str  # fwd | ig | wg | pp | after
    comm: Comm
    why: str
    layer: int | None = None
    micro_batch: int | None = None
    in_rows: bool = False

    def __iter__(self):
        return iter((self.module, self.phase, self.comm, self.why))


def as_unexpressed(item) -> Unexpressed:
    """An ``Unexpressed`` from itself or from a plain (module, phase, comm, why) tuple."""
    return item if isinstance(item, Unexpressed) else Unexpressed(*item)


@dataclass(frozen=True)
class Schedule:
    setup: TrainingSetup
    stage: int
    blocks: tuple[Block, ...]
    # What the SimAI format cannot carry (``Unexpressed``, or (module, phase, comm, why)).
    unexpressed: tuple[Unexpressed, ...] = field(default=())

    pp_scatter_gather: bool = False

    @cached_property
    def header(self) -> Header:
        s = self.setup
        return Header(
            tp=s.tp, ep=s.ep, pp=s.pp, vpp=s.virtual_pipeline, ga=s.num_microbatches, all_gpus=s.world_size,
            pp_comm=pipeline_bytes(s, scatter_gather=self.pp_scatter_gather) if s.pp > 1 else 0,
        )

    def workload(self) -> Workload:
        rows = []
        for block in self.blocks:
            cols: dict[str, tuple[str, int]] = {}
            for phase in ("fwd", "ig", "wg"):
                comm = block.comm(phase)
                if comm is None:
                    cols[phase] = ("NONE", 0)
                    continue
                if comm.group not in _COLUMN_GROUPS[phase]:
                    raise AssertionError(f"{block.name}: group {comm.group} cannot stand in the {phase} column")
                cols[phase] = (comm.comm_type(), comm.bytes)
            rows.append(
                Row(
                    name=block.name, dependency=-1,
                    fwd_compute=block.fwd_compute, fwd_comm=cols["fwd"][0], fwd_size=cols["fwd"][1],
                    ig_compute=block.ig_compute, ig_comm=cols["ig"][0], ig_size=cols["ig"][1],
                    wg_compute=block.wg_compute, wg_comm=cols["wg"][0], wg_size=cols["wg"][1],
                    update_time=100,
                )
            )
        return Workload(header=self.header, rows=tuple(rows))

    def expected(self) -> list[Expected]:
        """Every collective of the iteration, expressed or not, in row order."""
        out = [
            Expected(phase=phase, comm=comm, module=b.module, layer=b.layer, micro_batch=b.micro_batch, row=i)
            for i, b in enumerate(self.blocks)
            for phase in ("fwd", "ig", "wg")
            if (comm := b.comm(phase)) is not None
        ]
        out += [
            Expected(phase=u.phase, comm=u.comm, module=u.module, layer=u.layer, micro_batch=u.micro_batch, row=None)
            for u in map(as_unexpressed, self.unexpressed)
            if not u.in_rows
        ]
        return out


def pipeline_bytes(setup: TrainingSetup, *, scatter_gather: bool = False) -> int:
    """Bytes of one pipeline send per rank: u, or u/t with SP (the rank holds a sequence
    shard) or with Megatron-LM's 2021 scatter-gather optimisation (each TP rank sends its
    1/t of the activation and the receiver all-gathers it)."""
    u, t = setup.activation_bytes, setup.tp
    return u // t if ((setup.sp or scatter_gather) and t > 1) else u


def stage_layers(setup: TrainingSetup, stage: int) -> list[int]:
    """The global indices of the transformer layers stage ``stage`` holds, in the order of
    its model chunks: with v virtual stages, chunk c holds layers (c*p + stage)*L/(p*v) on."""
    per_chunk, p = setup.layers_per_chunk, setup.pp
    return [(chunk * p + stage) * per_chunk + i for chunk in range(setup.virtual_pipeline) for i in range(per_chunk)]


def unsupported(setup: TrainingSetup, megatron_version: str | megatron_releases.Release | None = None) -> list[str]:
    """Why the Megatron schedule of megatron-core ``megatron_version`` (default: the newest
    traced release) cannot describe this setup (empty when it can)."""
    out = megatron_mla.problems(setup) if setup.model.is_mla else []
    out += megatron_releases.mla_problems(setup, megatron_releases.release(megatron_version))
    if setup.model.is_moe:
        out += megatron_moe.problems(setup) + megatron_releases.problems(setup, megatron_releases.release(megatron_version))
        if setup.recompute_mode == "full":
            out.append("the megatron schedule does not model full recompute of MoE layers")
    return out


# -- parameter counts ------------------------------------------------------------------


def local_parameters(setup: TrainingSetup, stage: int = 0, release: megatron_releases.Release | None = None) -> int:
    """Parameters one TP rank of pipeline stage ``stage`` holds."""
    return dense_parameters(setup, stage, release) + expert_parameters(setup, stage)


def expert_parameters(setup: TrainingSetup, stage: int = 0) -> int:
    """The routed experts' parameters on one rank of the stage when ep > 1 (reduced over
    DP_EP); 0 with ep = 1, where megatron reduces them over DP with the dense ones."""
    if setup.ep == 1:
        return 0
    moe_layers = sum(setup.model.is_moe_layer(layer) for layer in stage_layers(setup, stage))
    return moe_layers * megatron_moe.expert_parameters(setup)


def dense_parameters(setup: TrainingSetup, stage: int = 0, release: megatron_releases.Release | None = None) -> int:
    """Parameters one TP rank of pipeline stage ``stage`` holds outside ``expert_parameters``
    (what DP reduces)."""
    m, t = setup.model, setup.tp
    h, f = m.hidden_size, m.ffn_hidden_size
    first, last = stage == 0, stage == setup.pp - 1
    kv = m.kv_groups * m.head_dim
    fc1_out = f * (2 if m.swiglu else 1)
    norm = 2 * h if m.normalization == "layernorm" else h
    bias = 1 if m.add_bias_linear else 0
    qkv_bias = 1 if m.add_bias_linear or m.add_qkv_bias else 0
    attention = (
        h * (h + 2 * kv) // t + qkv_bias * (h + 2 * kv) // t  # linear_qkv
        + h * h // t + bias * h  # linear_proj (a row-parallel bias is whole on every rank)
        + 2 * norm  # input and pre-MLP norms
    )
    if m.is_mla:
        attention = megatron_mla.attention_parameters(setup, release) + 2 * norm
    dense_mlp = (
        h * fc1_out // t + bias * fc1_out // t  # linear_fc1
        + f * h // t + bias * h  # linear_fc2
    )
    total = 0
    for layer in stage_layers(setup, stage):
        total += attention
        if not m.is_moe_layer(layer):
            total += dense_mlp
        else:
            total += megatron_moe.router_parameters(setup) + megatron_moe.shared_parameters(setup)
            if setup.ep == 1:
                total += megatron_moe.expert_parameters(setup)
    word = setup.padded_vocab * h // t
    if first:
        total += word
        if m.position_embedding == "learned":
            total += m.max_position_embeddings * h
    if last:
        total += norm  # final norm
        if not m.tie_embeddings or setup.pp > 1:
            total += word  # output layer (or the last stage's copy of the tied embedding)
    return total


def sequence_parallel_parameters(setup: TrainingSetup, stage: int = 0,
                                 release: megatron_releases.Release | None = None) -> int:
    """Parameters whose gradients SP all-reduces over TP: norms, and the biases of
    linear_proj and linear_fc2 (replicated across TP ranks but fed sequence shards)."""
    m, h = setup.model, setup.model.hidden_size
    norm = 2 * h if m.normalization == "layernorm" else h
    total = 0
    for layer in stage_layers(setup, stage):
        total += 2 * norm
        if m.is_mla:
            total += megatron_mla.sequence_parallel_parameters(setup, release)
        if m.is_moe_layer(layer):  # the router's weights and a shared experts' gate (no MLP biases)
            total += megatron_moe.sequence_parallel_parameters(setup) + (h if m.add_bias_linear else 0)
        else:
            total += 2 * h if m.add_bias_linear else 0
    if stage == setup.pp - 1:
        total += norm
    return total


# -- compute times ---------------------------------------------------------------------


def _us_to_ns(*values: float) -> int:
    return round(sum(values) * 1000)


def _compute_times(profile: AiobProfile | None, recompute: bool) -> dict[str, tuple[int, int, int]]:
    """(fwd, ig, wg) ns per row kind from an AIOB profile's average times.

    The profile times forward operators only. Backward is estimated per operator: the
    input-gradient GEMM costs what the forward GEMM costs, the weight-gradient GEMM
    likewise; flash attention's backward costs twice its forward; norms and activations
    cost their forward time again. Selective recompute re-runs flash attention's forward
    in the backward pass.
    """
    if profile is None:
        return {}

    def avg(name: str) -> float:
        times = profile.get(name)
        return float(times.avg) if times else 0.0

    ln, qkv, flash, proj = avg("layernorm"), avg("atten_qkv"), avg("atten_flash"), avg("atten_linear")
    ln2, fc1, act, fc2 = avg("layernorm2"), avg("mlp_linear_1"), avg("mlp_gelu"), avg("mlp_linear_2")
    return {
        "embedding": (_us_to_ns(avg("Emb")), 0, _us_to_ns(avg("Emb"))),
        "attention_qkv": (_us_to_ns(ln, qkv), _us_to_ns(qkv, ln), _us_to_ns(qkv)),
        "attention_proj": (
            _us_to_ns(flash, proj),
            _us_to_ns(proj, 2 * flash, flash if recompute else 0),
            _us_to_ns(proj),
        ),
        "mlp_fc1": (_us_to_ns(ln2, fc1, act), _us_to_ns(fc1, act, ln2), _us_to_ns(fc1)),
        "mlp_fc2": (_us_to_ns(fc2), _us_to_ns(fc2), _us_to_ns(fc2)),
        "output_layer": (_us_to_ns(avg("layernorm_post"), avg("logit_time")), _us_to_ns(avg("logit_time")), _us_to_ns(avg("logit_time"))),
        "optimizer": (0, 0, _us_to_ns(avg("param_time"))),
    }


# -- the schedule ----------------------------------------------------------------------


def _row_times_ns(times: "RowTimes") -> dict[str, tuple[int, int, int]]:
    """(fwd, ig, wg) ns per row kind from the kernel model's microseconds."""
    return {kind: (_us_to_ns(f), _us_to_ns(i), _us_to_ns(w)) for kind, (f, i, w) in times.rows.items()}


def schedule(setup: TrainingSetup, profile: AiobProfile | None = None, *, stage: int = 0,
             times: "RowTimes | None" = None, pp_scatter_gather: bool = False,
             megatron_version: str | megatron_releases.Release | None = None) -> Schedule:
    """The collectives of one iteration as pipeline stage ``stage`` (0-based) sees them,
    as megatron-core ``megatron_version`` issues them (default: the newest traced release;
    older releases differ in MoE layers only, see ``megatron_releases``).

    Compute times come from ``times`` (``aiob.megatron_kernels.row_times``: every kernel of
    Megatron's rows, backward and optimizer included) when given, else from ``profile``
    (an AIOB profile: forward sections, backward estimated), else 0.
    ``pp_scatter_gather``: pipeline sends of u/t also without SP (Megatron-LM 2021-22).
    """
    if not 0 <= stage < setup.pp:
        raise ValueError(f"stage {stage} is outside 0..{setup.pp - 1}")
    if profile is not None and times is not None:
        raise ValueError("give an AIOB profile or the kernel model's times, not both")
    release = megatron_releases.release(megatron_version)
    m, t = setup.model, setup.tp
    sp = setup.sp and t > 1  # Megatron switches SP off at t = 1
    tp = t > 1
    u = setup.activation_bytes
    first, last = stage == 0, stage == setup.pp - 1
    times_ns = _row_times_ns(times) if times is not None else _compute_times(profile, setup.recompute)
    full = setup.recompute_mode == "full"
    if full and times_ns and "recompute_attention" not in times_ns:  # an AIOB profile: the forward again
        fwd = {kind: ts[0] for kind, ts in times_ns.items()}
        times_ns["recompute_attention"] = (0, fwd["attention_qkv"] + fwd["attention_proj"], 0)
        times_ns["recompute_mlp"] = (0, fwd["mlp_fc1"] + fwd["mlp_fc2"], 0)
    grad_bytes = FP32 if setup.grad_reduce_in_fp32 else BF16

    def tp_comm(collective: str, size: int = u) -> Comm | None:
        return Comm(collective, "TP", size) if tp else None

    def timed(kind: str, **kw) -> dict:
        fwd, ig, wg = times_ns.get(kind, (0, 0, 0))
        return {"fwd_compute": fwd, "ig_compute": ig, "wg_compute": wg, **kw}

    blocks: list[Block] = []
    unexpressed: list[Unexpressed] = []

    # Once per iteration; SimAI runs rows backwards in backward, so these come last.
    psi = dense_parameters(setup, stage, release)
    experts = expert_parameters(setup, stage)  # reduced over DP_EP (ep > 1)
    dp = setup.dp > 1
    expert_dp = experts > 0 and setup.expert_dp > 1
    if setup.distributed_optimizer:
        blocks.append(
            Block("dp_param_allgather", "optimizer.param_allgather",
                  wg=Comm("allgather", "DP", BF16 * psi) if dp else None, **timed("optimizer"))
        )
        if expert_dp:
            blocks.append(Block(dp_ep("param_allgather"), "optimizer.expert_param_allgather",
                                wg=Comm("allgather", "DP_EP", BF16 * experts)))
    else:
        blocks.append(Block("optimizer", "optimizer.step", **timed("optimizer")))
    if sp:
        blocks.append(
            Block(SP_GRADS_ALLREDUCE, "finalize_model_grads.sequence_parallel",
                  ig=Comm("allreduce", "TP", FP32 * sequence_parallel_parameters(setup, stage, release)))
        )
    if dp and setup.distributed_optimizer:
        blocks.append(Block("dp_grad_reducescatter", "ddp.grad_reducescatter",
                            wg=Comm("reducescatter", "DP", grad_bytes * psi)))
    elif dp:
        blocks.append(Block("dp_grad_allreduce", "ddp.grad_allreduce", wg=Comm("allreduce", "DP", grad_bytes * psi)))
    if expert_dp:
        if setup.distributed_optimizer:
            expert_comms = [("ddp.expert_grad_reducescatter", Comm("reducescatter", "DP_EP", grad_bytes * experts)),
                            ("optimizer.expert_param_allgather", Comm("allgather", "DP_EP", BF16 * experts))]
        else:
            expert_comms = [("ddp.expert_grad_allreduce", Comm("allreduce", "DP_EP", grad_bytes * experts))]
        blocks.append(Block(dp_ep(f"grad_{expert_comms[0][1].collective}"), expert_comms[0][0], wg=expert_comms[0][1]))
        if setup.expert_tp != setup.tp:
            for module, comm in expert_comms:
                unexpressed.append(Unexpressed(
                    module, "wg", comm,
                    f"megatron's expert-data-parallel group has world/(etp*ep*pp) = {setup.expert_dp} ranks; "
                    f"SimAI sizes DP_EP as dp/ep = {setup.dp // setup.ep}", in_rows=True))
    if setup.pp > 1 and m.tie_embeddings and (first or last):
        unexpressed.append(Unexpressed(
            "finalize_model_grads.embedding", "after",
            Comm("allreduce", "EMB", FP32 * setup.padded_vocab * m.hidden_size // t),
            "the word-embedding gradient all-reduce between the first and last stage has no SimAI group",
        ))

    layer_ids = stage_layers(setup, stage)
    for mb in range(setup.num_microbatches):
        if first:
            if not sp:
                fwd, ig = tp_comm("allreduce"), None
            elif m.position_embedding == "learned":
                fwd, ig = tp_comm("allreduce"), tp_comm("allgather")
            else:
                fwd, ig = tp_comm("reducescatter"), tp_comm("allgather")
            blocks.append(Block("embedding_layer", "embedding", micro_batch=mb, fwd=fwd, ig=ig, **timed("embedding")))
        for layer in layer_ids:
            for part, column, row in (("attention", "qkv", "proj"), ("mlp", "fc1", "fc2")):
                if part == "attention" and m.is_mla:
                    blocks += megatron_mla.layer_blocks(
                        setup, layer, mb, block=Block, comm=lambda c, g, n: Comm(c, g, n), timed=timed)
                    continue
                if part == "mlp" and m.is_moe_layer(layer):
                    blocks += megatron_moe.layer_blocks(
                        setup, layer, mb, release=release, block=Block, comm=lambda c, g, n, w=None: Comm(c, g, n, w),
                        timed=timed, unexpressed=lambda *a, **kw: unexpressed.append(Unexpressed(*a, **kw)),
                    )
                    continue
                col_kind, row_kind = dense(part, column), dense(part, row)
                col_module = f"decoder.layers.{layer}.{'self_attention' if part == 'attention' else 'mlp'}.linear_{column}"
                row_module = f"decoder.layers.{layer}.{'self_attention' if part == 'attention' else 'mlp'}.linear_{row}"
                if sp:
                    blocks.append(Block(in_layer(layer, col_kind), col_module, layer, mb,
                                        fwd=tp_comm("allgather"), ig=tp_comm("reducescatter"), **timed(col_kind)))
                    blocks.append(Block(in_layer(layer, wgrad_gather(col_kind)), col_module, layer, mb,
                                        ig=tp_comm("allgather")))
                    blocks.append(Block(in_layer(layer, row_kind), row_module, layer, mb,
                                        fwd=tp_comm("reducescatter"), ig=tp_comm("allgather"), **timed(row_kind)))
                else:
                    blocks.append(Block(in_layer(layer, col_kind), col_module, layer, mb,
                                        ig=tp_comm("allreduce"), **timed(col_kind)))
                    blocks.append(Block(in_layer(layer, row_kind), row_module, layer, mb,
                                        fwd=tp_comm("allreduce"), **timed(row_kind)))
            if full:
                blocks += _recompute_blocks(layer, mb, sp, tp_comm, timed)
        if last:
            if sp:
                blocks.append(Block("output_layer", "output_layer", micro_batch=mb,
                                    fwd=tp_comm("allgather"), ig=tp_comm("reducescatter"), **timed("output_layer")))
                blocks.append(Block(wgrad_gather("output_layer"), "output_layer", micro_batch=mb, ig=tp_comm("allgather")))
            else:
                blocks.append(Block("output_layer", "output_layer", micro_batch=mb,
                                    ig=tp_comm("allreduce"), **timed("output_layer")))
            ce_bytes = FP32 * setup.micro_batch * setup.seq_length
            for what in ("max", "target", "sum_exp"):
                blocks.append(Block(f"cross_entropy_{what}", "loss.vocab_parallel_cross_entropy", micro_batch=mb,
                                    fwd=tp_comm("allreduce", ce_bytes)))
        if setup.pp > 1:
            pp_bytes = pipeline_bytes(setup, scatter_gather=pp_scatter_gather)
            why = "pipeline sends are carried by the header's pp_comm, not by rows"
            # Each model chunk sends on (and receives back) once per micro-batch; with v > 1
            # the first stage's later chunks receive from the last stage, and the last
            # stage's earlier chunks send to the first.
            for chunk in range(setup.virtual_pipeline):
                if not last or chunk < setup.virtual_pipeline - 1:
                    unexpressed.append(Unexpressed("pipeline.send_forward", "pp", Comm("sendrecv", "PP", pp_bytes), why))
                if not first or chunk > 0:
                    unexpressed.append(Unexpressed("pipeline.send_backward", "pp", Comm("sendrecv", "PP", pp_bytes), why))
    return Schedule(setup=setup, stage=stage, blocks=tuple(blocks), unexpressed=tuple(unexpressed),
                    pp_scatter_gather=pp_scatter_gather)


def _recompute_blocks(layer: int, mb: int, sp: bool, tp_comm, timed) -> list[Block]:
    """Full recompute: the layer's forward again, at the start of its backward pass.

    SimAI runs the rows backwards in the backward pass, one collective per row and
    column, so the recompute is written after the layer's last row, in reverse: the
    attention's forward (compute and its collectives) runs first, then the MLP's. Each
    row carries one of the forward's collectives in its ``ig`` column (all-reduce after
    the projection and after fc2; with SP the all-gather before and the reduce-scatter
    after each), and the compute of that part of the forward.
    """
    module = f"decoder.layers.{layer}.recompute"
    if sp:
        order = (("mlp", "reducescatter"), ("mlp", "allgather"), ("attention", "reducescatter"), ("attention", "allgather"))
        timed_on = "allgather"
    else:
        order = (("mlp", "allreduce"), ("attention", "allreduce"))
        timed_on = "allreduce"
    blocks = []
    for part, collective in order:
        extra = timed(f"recompute_{part}") if collective == timed_on else {}
        blocks.append(Block(in_layer(layer, recompute_row(part, collective)), module, layer, mb,
                            ig=tp_comm(collective), **extra))
    return blocks
