"""Context parallelism in the Megatron schedule: what the attention issues over the CP group.

megatron-core hands context parallelism to TransformerEngine's attention
(NVIDIA/Megatron-LM core_v0.19.0, ``megatron/core/extensions/transformer_engine.py``,
``TEDotProductAttention.__init__``: it passes ``cp_group``, ``cp_global_ranks``, ``cp_stream``
and ``cp_comm_type``, and for ``a2a+p2p`` the two hierarchical CP groups;
``megatron/core/transformer/transformer_config.py``, ``TransformerConfig.cp_comm_type``).
TransformerEngine (NVIDIA/TransformerEngine v2.9,
``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``;
``attention.py`` in older releases) runs one of three autograd functions:

Notation: b micro batch, s sequence, c CP, t TP, n heads, g query groups (KV heads), d head
dim. Each CP rank holds s/c tokens of every sequence (2 chunks of s/(2c), the i-th and the
(2c-1-i)-th, which balances the causal mask's work); its TP rank n/t query heads and g/t KV
heads. KV = 2*b*(s/c)*(g/t)*d*2 bytes: the rank's K and V chunk in bf16; Q = O =
b*(s/c)*(n/t)*d*2 bytes (u/(c*t) with n*d = h). Per layer and micro-batch:

* ``p2p`` (``AttnFuncWithCPAndKVP2P``, ring attention; megatron's default): forward, c-1
  steps each sending the KV chunk to the next CP rank and receiving the previous rank's
  (``flash_attn_p2p_communicate``); backward, c steps: the first sends KV, the c-2 middle
  ones KV and the dKV accumulated so far (2*KV), the last dKV alone: 2*(c-1) KV in all.
* ``all_gather`` (``AttnFuncWithCPAndKVAllGather``, Llama 3's): forward, all-gathers of K and
  of V over CP (``gather_along_first_dim``; each c*KV/2 bytes whole); backward, the same two
  all-gathers again (the gathered KV is not kept) and reduce-scatters of dK and dV.
* ``a2a`` (``AttnFuncWithCPAndQKVOA2A``, DeepSpeed-Ulysses style): forward, all-to-alls of
  Q, K and V before the core attention (heads scattered over CP, the sequence gathered;
  ``flash_attn_a2a_communicate``) and of O after it; backward, of dO before and of dQ, dK,
  dV after. An all-to-all's size is the rank's tensor (as the MoE dispatcher's).
* ``a2a+p2p`` (``AttnFuncWithCPAndKVP2P`` with a list of two groups), with the hierarchical
  sizes (a, r), a*r = c: the all-to-alls of ``a2a`` over the inner group of a ranks
  (forward Q, K, V and O; backward O and dO together, then dQ, dK, dV), and the ring of
  ``p2p`` over the outer group of r ranks, whose KV chunk (s*a/c tokens, g/(t*a) heads) has
  the same KV bytes.

With selective recompute (megatron's ``core_attn``: ``checkpoint_core_attention``), the core
attention's forward runs again in the backward pass, its CP collectives included: they are
listed again in the backward phase.

SimAI's workload format has no CP group (a file's groups are TP, DP, EP, DP_EP and PP), so
every collective here is listed in ``Schedule.unexpressed``, none is written as a row; a
sweep's simulation prices them (``in_rows``: what the attention waits for, added to the core
attention's compute in the simulation, the file unchanged). What
CP does change in the rows: each rank holds s/c tokens, so every TP collective, the
pipeline sends and the cross entropy shrink by c; gradients are reduced over DP x CP
(``megatron/core/distributed/distributed_data_parallel.py``: ``dp_cp_group``), which is
SimAI's DP group when the header's all_gpus counts the CP ranks (world/(t*p)).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from ..setup.training import TrainingSetup
from .format import Workload
from .megatron_blocks import Build, Comm, Unexpressed
from .megatron_releases import Release

NOTE = ("context parallelism's collectives (the attention's KV exchange over the CP group) are not in the "
        "workload: SimAI's format has no CP group; the rows carry the rest of CP (s/cp tokens per rank, "
        "gradients over DP x CP); simulate --cp-exchange prices it")
WHY = "SimAI's workload format has no context-parallel group"


# megatron-core's TransformerConfig.cp_comm_type came in 0.10 (core_r0.10.0); before, the ring only.
COMM_TYPES_FROM = (0, 10)


def problems(s: TrainingSetup, release: Release) -> list[str]:
    """What the CP schedule of ``release`` cannot describe for this setup (empty without CP)."""
    if s.cp == 1:
        return []
    out = []
    if s.cp_comm_type != "p2p" and release.minor < COMM_TYPES_FROM:
        out.append(f"megatron-core {release.version} has no cp_comm_type (from 0.10): its context parallelism "
                   "is the p2p ring")
    if s.model.is_moe:
        out.append("the megatron schedule does not model context parallelism with MoE layers")
    if s.model.is_mla:
        out.append("the megatron schedule does not model context parallelism with multi-latent attention")
    if s.recompute_mode == "full":
        out.append("the megatron schedule does not model full recompute with context parallelism")
    return out


def chunk_bytes(build: Build) -> tuple[int, int]:
    """(KV, Q) bytes of one rank's sequence chunk: 2*b*(s/c)*(g/t)*d*2 and b*(s/c)*(n/t)*d*2."""
    return _chunk_bytes(build.setup)


def _chunk_bytes(s: TrainingSetup) -> tuple[int, int]:
    m = s.model
    tokens = s.micro_batch * s.seq_per_rank
    kv = 2 * tokens * (m.kv_groups // s.tp) * m.head_dim * 2
    q = tokens * (m.num_attention_heads // s.tp) * m.head_dim * 2
    return kv, q


@dataclass(frozen=True)
class Exchange:
    """One rank's CP exchange, all that pricing it needs: ``cp_comm_type``, the CP size and
    the hierarchical sizes (``inner`` all-to-all ranks, ``outer`` ring ranks; 1 and c, or c
    and 1, for the flat kinds), the KV and Q chunk bytes, TP (which places the CP group on
    servers: ``link_gbps``) and whether selective recompute runs the forward's exchange
    again in backward. Its ``text`` is ``simulate``'s ``--cp-exchange``, made at planning
    from a setup (``exchange``) and read back by ``parse``."""

    kind: str
    cp: int
    inner: int
    outer: int
    kv: int
    q: int
    tp: int
    selective: bool = False

    FIELDS: ClassVar[tuple[str, ...]] = ("cp", "inner", "outer", "kv", "q", "tp")

    def text(self) -> str:
        fields = ",".join(f"{name}={getattr(self, name)}" for name in self.FIELDS)
        return f"{self.kind}:{fields}" + (",selective" if self.selective else "")

    @classmethod
    def parse(cls, text: str) -> Exchange:
        """``text`` as ``Exchange.text`` writes it; a ValueError saying what is wrong."""
        kind, _, rest = text.partition(":")
        if kind not in ("p2p", "all_gather", "a2a", "a2a+p2p"):
            raise ValueError(f"expected p2p, all_gather, a2a or a2a+p2p before ':', got {kind!r}")
        cells = rest.split(",")
        selective = cells[-1] == "selective"
        values = dict(cell.partition("=")[::2] for cell in (cells[:-1] if selective else cells))
        if sorted(values) != sorted(cls.FIELDS):
            raise ValueError(f"expected {'=N,'.join(cls.FIELDS)}=N after '{kind}:', got {rest!r}")
        try:
            ints = {name: int(values[name]) for name in cls.FIELDS}
        except ValueError:
            raise ValueError(f"expected whole numbers in {rest!r}") from None
        if ints["cp"] < 2 or ints["inner"] * ints["outer"] != ints["cp"] or min(ints.values()) < 1:
            raise ValueError(f"expected cp >= 2 = inner x outer and positive sizes, got {rest!r}")
        return cls(kind, selective=selective, **ints)

    def ranks(self, group: str) -> int:
        """The ranks of one of the exchange's groups (CP, or a2a+p2p's CP_A2A and CP_P2P)."""
        return {"CP_A2A": self.inner, "CP_P2P": self.outer}.get(group, self.cp)

    @property
    def ring_steps(self) -> int:
        """The attention kernels the rank's work is cut into on the ring (1 without one)."""
        return self.outer if self.kind in ("p2p", "a2a+p2p") else 1


def exchange(s: TrainingSetup) -> Exchange | None:
    """The CP exchange of a setup (None at c = 1)."""
    if s.cp == 1:
        return None
    kv, q = _chunk_bytes(s)
    inner, outer = {"p2p": (1, s.cp), "a2a+p2p": s.hierarchical_cp or (1, s.cp)}.get(s.cp_comm_type, (s.cp, 1))
    return Exchange(s.cp_comm_type, s.cp, inner, outer, kv, q, s.tp, s.recompute_mode == "selective")


def _ring(group: str, ranks: int, kv: int) -> tuple[list[Comm], list[Comm]]:
    """The ring's send/receive steps: forward and backward."""
    if ranks < 2:
        return [], []
    forward = [Comm("sendrecv", group, kv)] * (ranks - 1)
    backward = [Comm("sendrecv", group, kv)] + [Comm("sendrecv", group, 2 * kv)] * (ranks - 2) + [
        Comm("sendrecv", group, kv)]
    return forward, backward


def collectives(x: Exchange) -> tuple[list[Comm], list[Comm]]:
    """The CP collectives of one layer's core attention and micro-batch: forward, backward
    (without selective recompute's forward again)."""
    c, kind, kv, q = x.cp, x.kind, x.kv, x.q
    k = kv // 2
    if kind == "p2p":
        return _ring("CP", c, kv)
    if kind == "all_gather":
        gathers = [Comm("allgather", "CP", c * k)] * 2
        return gathers, gathers + [Comm("reducescatter", "CP", c * k)] * 2
    if kind == "a2a":
        qkv = [Comm("alltoall", "CP", q), Comm("alltoall", "CP", k), Comm("alltoall", "CP", k)]
        out = Comm("alltoall", "CP", q)
        return qkv + [out], [out] + qkv
    assert kind == "a2a+p2p"
    qkv = [Comm("alltoall", "CP_A2A", q), Comm("alltoall", "CP_A2A", k), Comm("alltoall", "CP_A2A", k)]
    out = Comm("alltoall", "CP_A2A", q)
    forward, backward = _ring("CP_P2P", x.outer, kv)
    return qkv + forward + [out], [out, out] + backward + qkv


def _collectives(build: Build) -> tuple[list[Comm], list[Comm]]:
    """The CP collectives of one layer's core attention and micro-batch: forward, backward."""
    x = exchange(build.setup)
    assert x is not None
    return collectives(x)


def layer_unexpressed(build: Build, layer: int, micro_batch: int) -> list[Unexpressed]:
    """One layer's CP collectives for one micro-batch (none at c = 1), in the order TE issues
    them: the forward's, then the backward's (with selective recompute, the forward's again
    first)."""
    if build.setup.cp == 1:
        return []
    module = f"decoder.layers.{layer}.self_attention.core_attention"
    forward, backward = _collectives(build)
    if build.setup.recompute_mode == "selective":
        backward = forward + backward
    return [Unexpressed(module, phase, comm, WHY, layer=layer, micro_batch=micro_batch)
            for phase, comms in (("fwd", forward), ("ig", backward)) for comm in comms]


# -- time -------------------------------------------------------------------------------


def exposed_us(setup: TrainingSetup, step_us: tuple[float, float], gbps: float) -> tuple[float, float]:
    """(forward, backward) microseconds per layer and micro-batch that the CP exchange adds
    to the attention, on a link of ``gbps`` (10^9 bytes/s); ``step_us``: one attention
    kernel's time forward and backward (``aiob.megatron_kernels.RowTimes.cp_step_us``).
    The sums of ``priced``'s exposed times (without selective recompute's forward again)."""
    x = exchange(setup)
    if x is None:
        return 0.0, 0.0
    fwd, bwd = priced(x, step_us, gbps)
    return sum(p.exposed_us for p in fwd), sum(p.exposed_us for p in bwd)


@dataclass(frozen=True)
class Priced:
    """One CP collective of the exchange: its time on the link and what the attention waits for."""

    comm: Comm
    time_us: float
    exposed_us: float


def priced(x: Exchange, step_us: tuple[float, float], gbps: float) -> tuple[list[Priced], list[Priced]]:
    """Each collective of ``collectives(x)`` (forward, backward) with its time on a link of
    ``gbps`` (10^9 bytes/s) and its exposed part, ``step_us`` being one attention kernel's
    time forward and backward.

    Transformer Engine v2.9, ``context_parallel.py``:

    * ``p2p`` (``AttnFuncWithCPAndKVP2P``): before computing step i the rank waits for the
      KV of step i and posts the send/receive of step i+1 (``flash_attn_p2p_communicate``),
      so each of the c-1 forward exchanges hides behind one step's kernel and shows only
      where it is longer; in backward the c-1 exchanges of KV (and the dKV so far) hide the
      same way behind the backward steps, and the last dKV, sent after the last step, is
      waited for whole.
    * ``all_gather`` (``AttnFuncWithCPAndKVAllGather``): K and V are gathered
      (``gather_along_first_dim``) before any kernel runs, and again in backward, where dK
      and dV are then reduce-scattered (``reduce_scatter_along_first_dim``): all exposed.
    * ``a2a`` (``AttnFuncWithCPAndQKVOA2A``): the all-to-alls of Q, K, V before the kernel
      and of O after it (in backward dO, then dQ, dK, dV) wait on the kernel: exposed.
    * ``a2a+p2p``: the all-to-alls over the inner group, exposed, and the ring over the
      outer one as ``p2p``.

    A ring all-gather or reduce-scatter of X bytes in all, and an all-to-all of a rank's X
    bytes, move (n-1)/n of X through each rank's link; a send/receive, X."""
    us = 1e6 / (gbps * 1e9)
    f_step, b_step = step_us

    def spread(comm: Comm) -> Priced:
        ranks = x.ranks(comm.group)
        t = (ranks - 1) / ranks * comm.bytes * us
        return Priced(comm, t, t)

    def ring(comms: list[Comm], step: float, last_waited: bool) -> list[Priced]:
        out = [Priced(c, c.bytes * us, max(0.0, c.bytes * us - step)) for c in comms]
        if last_waited and out:
            out[-1] = Priced(out[-1].comm, out[-1].time_us, out[-1].time_us)
        return out

    def price(comms: list[Comm], step: float, backward: bool) -> list[Priced]:
        sends = [c for c in comms if c.collective == "sendrecv"]
        timed = iter(ring(sends, step, backward))
        return [next(timed) if c.collective == "sendrecv" else spread(c) for c in comms]

    fwd, bwd = collectives(x)
    return price(fwd, f_step, False), price(bwd, b_step, True)


def link_gbps(setup: TrainingSetup | Exchange, gpus_per_server: int, nics_per_server: int,
              nvlink_gbps: float, nic_gbps: float) -> float:
    """The bandwidth one rank's CP exchange runs at (the caller's unit): NVLink while the
    CP group sits on one server, else the rank's share of the NICs. megatron-core orders
    ranks TP first, then CP (``RankGenerator``, order ``tp-cp-ep-dp-pp``), so a CP group's
    c ranks are t apart and span t*c consecutive GPUs."""
    if setup.tp * setup.cp <= gpus_per_server:
        return nvlink_gbps
    return nic_gbps * min(1.0, nics_per_server / gpus_per_server)


# -- a sweep's simulation: the exchange in a workload's rows ------------------------------


@dataclass(frozen=True)
class RowExchange:
    """The exchange of one core attention (one layer, one micro-batch) as a simulation adds
    it: the workload row that carries it, its phase (``fwd``, or ``ig`` for the backward's),
    the collective, its time and exposed part in whole ns."""

    row: int
    name: str
    phase: str
    comm: Comm
    ranks: int
    time_ns: int
    exposed_ns: int


def in_rows(workload: Workload, x: Exchange, gbps: float) -> tuple[Workload, list[RowExchange]]:
    """``workload`` (a Megatron workload commsweep wrote for a setup whose exchange is ``x``)
    with the exchange's exposed part added to each core attention's row (``attention_proj``:
    forward to its forward compute, backward, and selective recompute's forward again, to
    its input gradient's), as ``analysis/predict.py`` adds it to the kernel model's times; and
    each collective of it, for the simulation's table.

    The step each ring exchange hides behind is one attention kernel: the row's core
    attention (``megatron_times.core_attention_ns``) cut into the ring's steps. Collectives
    of one phase, kind, group and size in a row are given the same exposed time (their
    mean, in whole ns), so that a collective's time is one number per point, as the
    simulation's table has it for every other; the row's compute grows by their sum."""
    from .megatron_times import core_attention_ns
    from .row_names import ATTENTION, dense, kind_of

    proj = dense(ATTENTION, "proj")
    rows = list(workload.rows)
    found: list[RowExchange] = []
    for index, row in enumerate(rows):
        if kind_of(row.name) != proj:
            continue
        attention = core_attention_ns(row)
        step_us = (attention[0] / x.ring_steps / 1000, attention[1] / x.ring_steps / 1000)
        fwd, bwd = priced(x, step_us, gbps)
        phases = (("fwd", fwd), ("ig", fwd + bwd if x.selective else bwd))
        added = {"fwd": 0, "ig": 0}
        for phase, items in phases:
            for p, exposed in zip(items, _uniform_ns(items)):
                found.append(RowExchange(index, row.name, phase, p.comm, x.ranks(p.comm.group),
                                         round(p.time_us * 1000), exposed))
                added[phase] += exposed
        rows[index] = replace(row, fwd_compute=row.fwd_compute + added["fwd"],
                              ig_compute=row.ig_compute + added["ig"])
    return replace(workload, rows=tuple(rows)), found


def _uniform_ns(items: list[Priced]) -> list[int]:
    """Each item's exposed ns, the same for items of one collective, group and size."""
    totals: dict[tuple[str, str, int], list[float]] = {}
    for p in items:
        totals.setdefault((p.comm.collective, p.comm.group, p.comm.bytes), []).append(p.exposed_us)
    mean = {key: round(sum(v) * 1000) // len(v) for key, v in totals.items()}
    return [mean[(p.comm.collective, p.comm.group, p.comm.bytes)] for p in items]
