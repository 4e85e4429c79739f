"""The overlap ratios (``-tp_o -dp_o -pp_o``) that let SimAI's model carry what Megatron overlaps.

SimAI cannot say that one collective runs beside one GEMM. It has one ratio per group: a
share of every TP collective's time is hidden (``-tp_o``), of every DP collective's
(``-dp_o``). Megatron hides some collectives and not others, so the ratio that gives the
same exposed total is the hidden time over the whole time, collective by collective:

* **TP** (``Software.async_tp``): in backward, the all-reduce of a column-parallel layer's
  input gradient runs while the layer's weight-gradient GEMM runs (with SP: the
  reduce-scatter of the input gradient beside the weight-gradient GEMM, and the re-gather
  of the input beside the input-gradient GEMM). Each hides up to that GEMM's time. The
  forward collectives, the all-gathers reversing forward reduce-scatters and those of a
  full recompute wait for their result and stay exposed.
* **DP** (``Software.overlap_grad_reduce``): the gradient reduction runs during the last
  micro-batch's backward pass (hiding up to its compute), the distributed optimizer's
  parameter all-gather during the next forward pass. Without it (Megatron-LM's local
  DDP), the reduction follows the backward pass: nothing hidden.
* **DP by buckets** (a Megatron workload with ``overlap_grad_reduce``, its bucket rows placed
  where they fill: ``workload/megatron_data_parallel.py``): megatron-core issues a bucket's
  reduce once its last gradient is ready in the last micro-batch's backward pass and the
  buckets' reduces run one after another on the communication stream
  (``param_and_grad_buffer.py``, ``register_grad_ready`` / ``start_grad_sync``); the
  optimizer waits for the last (``finish_grad_sync``). So a bucket's reduce hides behind the
  backward compute that remains after it is issued, and what runs past the end of the
  backward pass is exposed: the last buckets'. With ``overlap_param_gather`` the forward
  pre-hook of a bucket's first layer waits for its all-gather and dispatches the next
  bucket's (``finish_param_sync``): the first bucket's gather is exposed, each next one hides
  behind the forward compute of the bucket before it. ``bucket_times`` walks the rows that
  way (compute only: the TP collectives on the compute stream are not counted as cover);
  the DP ratio is the hidden time over all DP time.
* **TP with userbuffers** (``Software.tp_comm_overlap``, Transformer Engine's
  ``--tp-comm-overlap``): every TP collective of a linear layer, forward and backward, is
  split into chunks pipelined with that layer's GEMM of the same pass; each hides up to
  the GEMM's time (the row's forward GEMM in forward, its input-gradient GEMM in
  backward, the weight-gradient GEMM for the asynchronous input-gradient reduction).
* **PP**: SimAI's pipeline term is ``2 * vpp * ga * pp_comm / 2^30 * (1 - pp_o) / pp_o``
  seconds (SimAI @ cef83f9d, ``workload/Layer.cc``: it divides by the overlap ratio and
  multiplies by its complement), i.e. the sends at ``pp_o / (1 - pp_o)`` GB/s in SimAI's bandwidth unit: a
  send and a receive per micro-batch and model chunk. On the 1F1B schedule's critical
  path there are more: the first micro-batch's activations cross the p - 1 stage
  boundaries before the last stage starts, the last one's gradients cross them back, so
  the blocking sends on the path are ``2 (v ga + p - 1)``. ``pp_o = B' / (B' + 1)`` with
  ``B' = B v ga / (v ga + p - 1)`` makes SimAI's term exactly that at the link's
  bandwidth B (the NIC when neighbouring stages are on different servers, else NVLink).
  With the interleaved schedule's overlapped sends (``Software.overlap_p2p``) only the
  fill's and drain's ``2 (p - 1)`` remain exposed: ``B' = B v ga / (p - 1)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..setup.network import Network
from ..setup.training import TrainingSetup
from ..workload.format import Workload, comm_group
from ..workload.megatron import Schedule
from ..workload.megatron_buckets import micro_batch_start, overlap_rows
from .engine import Ratios, comm_time_ns

# The schedule's column-parallel rows (their input-gradient collective is asynchronous).
COLUMN_KINDS = ("attention_qkv", "mlp_fc1", "output_layer")


@dataclass(frozen=True)
class Overlap:
    """SimAI's ratios, and the times they were derived from (ns)."""

    tp: float
    dp: float
    pp: float
    tp_total_ns: int
    tp_hidden_ns: int
    dp_total_ns: int
    dp_hidden_ns: int

    def flags(self) -> dict[str, str]:
        """As ``Network`` fields (text, as on SimAI's command line)."""
        return {"tp_overlap": _text(self.tp), "dp_overlap": _text(self.dp), "pp_overlap": _text(self.pp)}


def _text(ratio: float) -> str:
    return f"{ratio:.9f}".rstrip("0").rstrip(".") if ratio else "0"


# Every row kind with a GEMM (what userbuffers pipeline a TP collective with).
GEMM_KINDS = ("attention_qkv", "attention_proj", "mlp_fc1", "mlp_fc2", "output_layer")


def _gemm_kind(name: str) -> str | None:
    base = name.removesuffix("_wgrad_gather")
    for kind in GEMM_KINDS:
        if base == kind or base.endswith("_" + kind):
            return kind
    return None


def pipeline_bandwidth(link_gbps: float, *, pp: int, vpp: int, ga: int, overlapped: bool) -> float:
    """The bandwidth B' that makes SimAI's pipeline term (2 vpp ga sends) carry the sends
    on the schedule's critical path at ``link_gbps`` (the module docstring's **PP**)."""
    steps = vpp * max(ga, 1)
    if overlapped and vpp > 1:
        return link_gbps * steps / (pp - 1)
    return link_gbps * steps / (steps + pp - 1)


def _column_kind(name: str) -> tuple[str | None, bool]:
    """The column-parallel kind a row belongs to, and whether it is the wgrad re-gather."""
    gather = name.endswith("_wgrad_gather")
    base = name.removesuffix("_wgrad_gather")
    for kind in COLUMN_KINDS:
        if base == kind or base.endswith("_" + kind):
            return kind, gather
    return None, gather


def pipeline_link_gbps(setup: TrainingSetup, gpus_per_server: int, nics_per_server: int,
                       nvlink_gbps: float, nic_gbps: float) -> float:
    """Bandwidth of one rank's pipeline send (SimAI's GB/s): NVLink when the whole pipeline
    sits on one server, else the NIC. Neighbouring stages are t*d ranks apart (Megatron
    orders ranks TP first, then DP, then PP), so a server holds gpus_per_server / (t*d)
    consecutive stages and, once the pipeline is longer, some stage boundary crosses
    servers; the 1F1B schedule runs every stage in lockstep, so that slowest boundary
    paces every send. Across servers each GPU sends through its share of the NICs. (With
    context parallelism the CP ranks sit between TP and DP: stages are t*c*d apart.)"""
    if setup.tp * setup.cp * setup.dp * setup.pp <= gpus_per_server:
        return nvlink_gbps
    return nic_gbps * min(1.0, nics_per_server / gpus_per_server)


def megatron_overlap(schedule: Schedule, network: Network, ratios: Ratios | None, *,
                     wgrad_gemm_us: dict[str, float], dgrad_gemm_us: dict[str, float],
                     async_tp: bool, overlap_grad_reduce: bool, pp_link_gbps: float,
                     workload: Workload | None = None, fwd_gemm_us: dict[str, float] | None = None,
                     tp_comm_overlap: bool = False, overlap_p2p: bool = False) -> Overlap:
    """The ratios for ``schedule`` on ``network`` (whose own ratios are ignored).

    ``wgrad_gemm_us`` / ``dgrad_gemm_us``: per column-parallel kind, its weight- and
    input-gradient GEMM time per micro-batch (what an asynchronous collective hides behind).
    ``workload``: the schedule's workload, when the caller has it already.
    ``fwd_gemm_us``: per GEMM kind its forward GEMM time (for ``tp_comm_overlap``).
    """
    workload = workload if workload is not None else schedule.workload()
    header = workload.header
    times: dict[tuple[str, str, int], int] = {}

    def comm_ns(comm_type: str, phase: str, size: int) -> int:
        key = (comm_type, phase, size)
        if key not in times:
            times[key] = comm_time_ns(comm_type, phase, size, header, network, ratios)
        return times[key]

    tp_total = tp_hidden = dp_total = 0
    fwd_compute = bwd_compute = 0
    dp: list[tuple[str, int]] = []
    for block, row in zip(schedule.blocks, workload.rows):
        fwd_compute += row.fwd_compute
        bwd_compute += row.ig_compute + row.wg_compute
        for phase in ("fwd", "ig", "wg"):
            comm = block.comm(phase)
            if comm is None:
                continue
            ns = comm_ns(comm.comm_type(), phase, comm.bytes)
            if comm.group == "TP":
                tp_total += ns
                gemm = _tp_hiding_gemm_us(block.name, phase, comm.collective, wgrad_gemm_us, dgrad_gemm_us,
                                          fwd_gemm_us, async_tp, tp_comm_overlap)
                if gemm is not None:
                    tp_hidden += min(ns, round(gemm * 1000))
            elif comm.group == "DP":
                dp_total += ns
                dp.append((comm.collective, ns))
    dp_hidden = _dp_hidden_ns(dp, fwd_compute, bwd_compute, header.ga) if overlap_grad_reduce else 0
    if schedule.setup.overlap_grad_reduce:  # bucket by bucket, where each fills
        buckets = bucket_times(workload, network, ratios, overlap_grad_reduce=True,
                               overlap_param_gather=schedule.setup.overlap_param_gather)
        dp_total, dp_hidden = buckets.total_ns, buckets.total_ns - buckets.exposed_ns
    pp = _pp_ratio(schedule.setup, header.ga, pp_link_gbps, overlap_p2p)
    return Overlap(
        tp=tp_hidden / tp_total if tp_total else 0.0, dp=dp_hidden / dp_total if dp_total else 0.0, pp=pp,
        tp_total_ns=tp_total, tp_hidden_ns=tp_hidden, dp_total_ns=dp_total, dp_hidden_ns=dp_hidden,
    )


def _tp_hiding_gemm_us(name: str, phase: str, collective: str, wgrad_gemm_us: dict[str, float],
                       dgrad_gemm_us: dict[str, float], fwd_gemm_us: dict[str, float] | None,
                       async_tp: bool, tp_comm_overlap: bool) -> float | None:
    """The GEMM time (us) a TP collective of block ``name`` hides behind; None when none.

    With ``tp_comm_overlap`` every GEMM kind overlaps its own collective (the asynchronous
    input-gradient reduction hides behind the weight-gradient GEMM); else only the ig
    collective of a column-parallel kind overlaps, asynchronously.
    """
    kind, regather = _column_kind(name)
    gemm_kind = _gemm_kind(name)
    if tp_comm_overlap and gemm_kind is not None:
        if phase == "fwd":
            return (fwd_gemm_us or {}).get(gemm_kind, 0.0)
        if kind is not None and not regather and collective != "allgather":
            return wgrad_gemm_us[kind]
        return dgrad_gemm_us.get(gemm_kind, 0.0)
    if async_tp and phase == "ig" and kind is not None:
        gemm = dgrad_gemm_us[kind] if regather else wgrad_gemm_us[kind]
        if collective != "allgather" or regather:
            return gemm
    return None


@dataclass(frozen=True)
class BucketTimes:
    """A Megatron workload's DP and expert-DP time (ns, before overlap) and what stays
    exposed when megatron overlaps its buckets (the module docstring's **DP by buckets**):
    the reduces, the parameter gathers, and the rest (never overlapped)."""

    reduce_ns: int
    reduce_exposed_ns: int
    gather_ns: int
    gather_exposed_ns: int
    other_ns: int

    @property
    def total_ns(self) -> int:
        return self.reduce_ns + self.gather_ns + self.other_ns

    @property
    def exposed_ns(self) -> int:
        return self.reduce_exposed_ns + self.gather_exposed_ns + self.other_ns

    @property
    def ratio(self) -> float:
        """SimAI's DP overlap ratio that gives the same exposed total."""
        return (self.total_ns - self.exposed_ns) / self.total_ns if self.total_ns else 0.0


def bucket_times(workload: Workload, network: Network, ratios: Ratios | None = None, *,
                 overlap_grad_reduce: bool, overlap_param_gather: bool = False) -> BucketTimes:
    """The DP time of ``workload`` (a Megatron schedule's) and what megatron's overlapped
    buckets leave exposed of it, on ``network`` (whose own ratios are ignored)."""
    rows = workload.rows
    which = overlap_rows([r.name for r in rows], overlap_grad_reduce, overlap_param_gather)
    first = micro_batch_start([r.name for r in rows])
    ns = {}
    for i, row in enumerate(rows):
        comm_type, size = row.comm("wg")
        if comm_group(comm_type, "wg") in ("DP", "DP_EP"):
            ns[i] = comm_time_ns(comm_type, "wg", size, workload.header, network, ratios)
    reduce_ns, reduce_exposed = _reduce_exposed(rows, first, {i: ns[i] for i in which.reduces if i in ns})
    gathers = tuple(tuple((r, target) for r, target in chain if r in ns) for chain in which.gathers)
    gather_ns, gather_exposed = _gather_exposed(rows, first, gathers, ns)
    return BucketTimes(reduce_ns, reduce_exposed, gather_ns, gather_exposed, sum(ns.values()) - reduce_ns - gather_ns)


def _reduce_exposed(rows, first: int, reduces: dict[int, int]) -> tuple[int, int]:
    """The reduces' time and what runs past the backward pass: SimAI's backward order (rows
    last to first), each reduce issued at its row, one after another."""
    clock = free = 0
    for i in reversed(range(len(rows))):
        if i >= first:
            clock += rows[i].ig_compute + rows[i].wg_compute
        if i in reduces:
            free = max(clock, free) + reduces[i]
    return sum(reduces.values()), max(0, free - clock)


def _gather_exposed(rows, first: int, chains, ns: dict[int, int]) -> tuple[int, int]:
    """The gathers' time and how long the forward pass waits for them: at the first row
    that needs a bucket, its gather is dispatched if it is not yet and waited for, and the
    next bucket's is dispatched (one stream per chain)."""
    steps: dict[int, list[tuple[int, int]]] = {}
    for c, chain in enumerate(chains):
        for k, (_, target) in enumerate(chain):
            steps.setdefault(target, []).append((c, k))
    ends: dict[tuple[int, int], int] = {}
    stream = [0] * len(chains)
    clock = waited = 0

    def dispatch(c: int, k: int) -> None:
        if k < len(chains[c]) and (c, k) not in ends:
            stream[c] = ends[(c, k)] = max(clock, stream[c]) + ns[chains[c][k][0]]

    for i in range(len(rows)):
        for c, k in steps.get(i, ()):
            dispatch(c, k)
            waited += max(0, ends[(c, k)] - clock)
            clock = max(clock, ends[(c, k)])
            dispatch(c, k + 1)
        if i >= first:
            clock += rows[i].fwd_compute
    return sum(ns[r] for chain in chains for r, _ in chain), waited


def _dp_hidden_ns(dp: list[tuple[str, int]], fwd_compute: int, bwd_compute: int, ga: int) -> int:
    """DP time hidden when the gradients reduce beside one micro-batch's backward pass and
    the distributed optimizer's parameters gather beside one forward pass."""
    per_micro = max(ga, 1)
    hidden = 0
    for collective, ns in dp:
        hidden += min(ns, (fwd_compute if collective == "allgather" else bwd_compute) // per_micro)
    return hidden


def _pp_ratio(setup: TrainingSetup, ga: int, pp_link_gbps: float, overlap_p2p: bool) -> float:
    """SimAI's PP overlap ratio for the pipeline's bandwidth; 1.0 without a pipeline."""
    if setup.pp <= 1:
        return 1.0
    b = pipeline_bandwidth(pp_link_gbps, pp=setup.pp, vpp=setup.virtual_pipeline, ga=ga, overlapped=overlap_p2p)
    return b / (b + 1.0)
