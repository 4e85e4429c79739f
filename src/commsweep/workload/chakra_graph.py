"""A SimAI workload as per-rank execution graphs: what a Chakra execution trace holds, without
the encoding (``chakra.py`` writes and reads the files).

Chakra (MLCommons' format, ``schema/protobuf/et_def.proto`` of mlcommons/chakra) describes one
rank's work as nodes with dependencies; ASTRA-sim runs one trace per rank. SimAI instead runs
one workload file on every rank. This module makes, for each rank, the nodes SimAI's analytical
model executes for that file, in SimAI's order (aliyun/SimAI ``workload/Workload.cc``):

* forward: rows 0..N-1, each its forward compute, then its forward collective;
* backward: rows N-1..0, each its input-gradient compute and collective, then its
  weight-gradient compute and collective.

Every node depends on the one before it: one chain per rank, as SimAI runs the file with its
overlap ratios at 0 (its default for TP, DP and EP). ``overlap`` takes groups whose collectives
run off that chain (the weight-gradient reductions Megatron overlaps with the backward pass):
such a collective starts when the compute before it ends, the next compute does not wait for
it, and the off-chain collectives of a rank stay in file order among themselves, so every
member of a group issues them in the same order.

A Megatron schedule's traces (``megatron_traces``) carry the distributed optimizer's
overlapped buckets as megatron-core runs them (``param_and_grad_buffer.py``): with
``overlap_grad_reduce`` each bucket's reduce, whose row stands where the bucket fills, runs off
the chain from the moment the backward of the row before it ends, the buckets' reduces one
after another, and the optimizer's rows wait for the last (``finish_grad_sync``); with
``overlap_param_gather`` each bucket's parameter all-gather moves from the optimizer's rows to
the forward pass, where the first row that needs the bucket waits for it and dispatches the
next bucket's (``finish_param_sync``, from the forward pre-hook).

A ``NONE`` column is what SimAI makes of it: nothing. A compute time of 0 is no node (ASTRA-sim
would charge 1 ns for it). Times: SimAI's are nanoseconds; Chakra's ``duration_micros`` is whole
microseconds, so each node's duration is the rounded running total minus the rounded total
before it: no node is off by more than 1 us and a rank's compute sums to its nanoseconds
rounded to the nearest microsecond.

Groups follow Megatron-LM's rank order (``megatron/core/parallel_state.py``'s ``RankGenerator``,
order tp-cp-ep-dp-pp): TP ranks are consecutive, then data-parallel, then pipeline stages; an
EP group is ``ep`` ranks at stride ``tp`` inside the data-parallel group, DP_EP the data-parallel
ranks at stride ``tp * ep`` that hold the same experts. Sizes are SimAI's (``format.group_sizes``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..base.errors import InputError
from .format import Workload, collective_name, comm_group, effective_size, group_sizes
from .megatron_buckets import OverlapRows, overlap_rows

GROUP_KINDS = ("TP", "DP", "EP", "DP_EP")
NODE_KINDS = ("comp", "coll", "send", "recv")


@dataclass(frozen=True)
class Node:
    """One node of a rank's graph. ``deps`` are ids of nodes of the same rank. ``size`` is
    SimAI's: a collective's whole tensor (an all-gather's output), in bytes.

    ``phase``, ``row`` and ``group`` say where the node comes from (a workload row's phase, the
    group kind); a trace from elsewhere may not say, and then they are None.
    """

    id: int
    name: str
    kind: str  # comp | coll | send | recv
    deps: tuple[int, ...]
    duration_us: int = 0  # comp only
    collective: str | None = None  # allreduce | allgather | reducescatter | alltoall (coll)
    size: int = 0  # bytes (coll, send, recv)
    pg: int | None = None  # communicator group id (coll); None: every rank
    peer: int | None = None  # the other rank (send: destination, recv: source)
    tag: int | None = None  # send/recv matching tag
    phase: str | None = None  # fwd | ig | wg | pp
    row: int | None = None
    group: str | None = None  # TP | DP | EP | DP_EP | PP
    declared: int | None = None  # the workload's size field when SimAI runs another (1..4095 forward: 4096)
    group_size: int | None = None  # ranks of the collective's group (coll)


@dataclass(frozen=True)
class Layout:
    """A job's ranks in Megatron's order: ``world`` = tp * dp * pp, ``ep`` dividing dp."""

    tp: int
    dp: int
    pp: int
    ep: int = 1

    @property
    def world(self) -> int:
        return self.tp * self.dp * self.pp

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(tp rank, dp rank, pp stage) of a global rank."""
        return rank % self.tp, (rank // self.tp) % self.dp, rank // (self.tp * self.dp)

    def rank(self, tp_rank: int, dp_rank: int, stage: int) -> int:
        return tp_rank + self.tp * (dp_rank + self.dp * stage)

    def members(self, kind: str, rank: int) -> tuple[int, ...]:
        """The ranks of ``rank``'s group of a kind (TP, DP, EP, DP_EP), ascending."""
        t, d, s = self.coords(rank)
        if kind == "TP":
            return tuple(self.rank(i, d, s) for i in range(self.tp))
        if kind == "DP":
            return tuple(self.rank(t, i, s) for i in range(self.dp))
        if kind == "EP":
            base = d - d % self.ep
            return tuple(self.rank(t, base + i, s) for i in range(self.ep))
        if kind == "DP_EP":
            return tuple(self.rank(t, d % self.ep + self.ep * i, s) for i in range(self.dp // self.ep))
        raise ValueError(f"unknown group kind {kind!r}")

    def groups(self, kinds: Iterable[str] = GROUP_KINDS) -> dict[int, tuple[int, ...]]:
        """Every group of the given kinds, numbered from 1 in kind order, then by first rank
        (the communicator-group file; id 0 is ASTRA-sim's "every rank")."""
        out: dict[int, tuple[int, ...]] = {}
        for kind in kinds:
            seen = sorted({self.members(kind, r) for r in range(self.world)})
            for members in seen:
                out[len(out) + 1] = members
        return out


def layout_for(workload: Workload, gpus: int | None = None, *, source: str = "<workload>") -> Layout:
    """The rank layout SimAI's group sizes imply for a workload run on ``gpus`` ranks (its -g;
    default the header's all_gpus); an InputError when the ranks do not divide into it."""
    h = workload.header
    g = h.all_gpus if gpus is None else gpus
    sizes = group_sizes(h, g)
    dp = sizes["DP"]
    if dp < 1 or h.tp * h.pp * dp != g:
        raise InputError(f"{g} ranks are not tp * pp * dp (tp {h.tp}, pp {h.pp}): every rank needs a place",
                         file=source, line=1, field="all_gpus")
    if dp % h.ep:
        raise InputError(f"ep {h.ep} does not divide the data-parallel size {dp}", file=source, line=1, field="ep")
    return Layout(tp=h.tp, dp=dp, pp=h.pp, ep=h.ep)


def group_ids(layout: Layout, kinds: Iterable[str] = GROUP_KINDS) -> dict[tuple[str, tuple[int, ...]], int]:
    """(kind, members) -> communicator group id, consistent with ``Layout.groups``."""
    out: dict[tuple[str, tuple[int, ...]], int] = {}
    for kind in kinds:
        for members in sorted({layout.members(kind, r) for r in range(layout.world)}):
            out[(kind, members)] = len(out) + 1
    return out


class _Chain:
    """Builds one rank's node list: ids from 0, each node after the chain's last one."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.last: int | None = None
        self.off_last: int | None = None  # the last off-chain collective
        self.waits: tuple[int, ...] = ()  # what the next node on the chain waits for besides it
        self.total_ns = 0
        self.total_us = 0

    def _add(self, deps: tuple[int, ...], **fields) -> Node:
        node = Node(id=len(self.nodes), deps=deps, **fields)
        self.nodes.append(node)
        return node

    def compute(self, ns: int, *, name: str, phase: str, row: int) -> None:
        self.total_ns += ns
        us = (self.total_ns + 500) // 1000 - self.total_us
        if us <= 0:
            return
        self.total_us += us
        node = self._add(self._after(), name=name, kind="comp", duration_us=us, phase=phase, row=row)
        self.last = node.id

    def comm(self, *, off_chain: bool = False, **fields) -> None:
        if off_chain:
            deps = tuple(d for d in (self.last, self.off_last) if d is not None)
            self.off_last = self._add(deps, **fields).id
        else:
            self.last = self._add(self._after(), **fields).id

    def side(self, after: int | None, **fields) -> int:
        """A collective off the chain on a stream of its own: after the chain's last node
        and ``after`` (the stream's previous collective); returns its id."""
        return self._add(tuple(d for d in (self.last, after) if d is not None), **fields).id

    def wait(self, *ids: int | None) -> None:
        """The chain's next node also waits for ``ids`` (None: nothing)."""
        self.waits += tuple(i for i in ids if i is not None and i not in self.waits)

    def _after(self) -> tuple[int, ...]:
        deps = (() if self.last is None else (self.last,)) + self.waits
        self.waits = ()
        return deps


def _rank_groups(sizes: Mapping[str, int], rank: int, layout: Layout,
                 ids: dict[tuple[str, tuple[int, ...]], int]) -> dict[str, int]:
    """The communicator group id of each group kind ``rank`` is in; each group's size as the
    workload's header gives it must be the layout's."""
    pg_of = {}
    for kind in GROUP_KINDS:
        members = layout.members(kind, rank)
        if sizes[kind] != len(members):
            raise AssertionError(f"{kind} group of {sizes[kind]} ranks laid out as {layout}")
        pg_of[kind] = ids[(kind, members)]
    return pg_of


def rank_nodes(workload: Workload, rank: int, layout: Layout, *, gpus: int | None = None,
               overlap: Sequence[str] = (), pipeline: Pipeline | None = None,
               ids: dict[tuple[str, tuple[int, ...]], int] | None = None, skip_empty: bool = False,
               inserts: Mapping[tuple[int, str], Sequence[tuple[str, str, str, int]]] | None = None,
               buckets: OverlapRows | None = None) -> list[Node]:
    """One rank's nodes for a SimAI workload file, in SimAI's order (module docstring); with
    ``pipeline``, its sends and receives between the rows of its micro-batches' model chunks;
    with ``skip_empty``, no collective that moves nothing: of zero bytes (SimAI gives one no time;
    ASTRA-sim charges an all-reduce its latencies and never finishes an all-gather) or on a group
    of one rank (ASTRA-sim never finishes one). ``inserts`` maps (row, phase) to collectives
    (name, collective, group kind, bytes) the file cannot carry, issued before that phase's
    compute (FSDP's per-layer all-gathers: ``unexpressed_inserts``); with ``buckets``, the
    distributed optimizer's overlapped bucket rows as megatron runs them (``_bucket_nodes``)."""
    if workload.header.checkpoints:
        raise InputError("checkpointed layers (the header's checkpoints) have no Chakra export yet",
                         field="checkpoints")
    sizes = group_sizes(workload.header, gpus)
    pg_of = _rank_groups(sizes, rank, layout, group_ids(layout) if ids is None else ids)
    chain = _Chain()
    buckets = buckets or OverlapRows()

    def collective(index: int, phase: str) -> dict | None:
        row = workload.rows[index]
        comm_type, size = row.comm(phase)
        kind = comm_group(comm_type, phase)
        if kind is None or (skip_empty and (size == 0 or sizes[kind] == 1)):
            return None
        return dict(name=f"{row.name}.{phase}.{comm_type}", kind="coll", collective=collective_name(comm_type),
                    size=effective_size(phase, size), pg=pg_of[kind], phase=phase, row=index, group=kind,
                    group_size=sizes[kind], declared=None if effective_size(phase, size) == size else size)

    def phase_nodes(index: int, phase: str, *, skip_comm: bool = False) -> None:
        row = workload.rows[index]
        for name, collective_, kind, size in (inserts or {}).get((index, phase), ()):
            if not (skip_empty and (size == 0 or sizes[kind] == 1)):
                chain.comm(name=name, kind="coll", collective=collective_, size=size, pg=pg_of[kind], phase=phase,
                           row=index, group=kind, group_size=sizes[kind])
        chain.compute(row.compute(phase), name=f"{row.name}.{phase}.compute", phase=phase, row=index)
        fields = None if skip_comm else collective(index, phase)
        if fields is not None:
            off = fields["group"] in overlap or (phase == "wg" and index in buckets.reduces)
            chain.comm(off_chain=off, **fields)

    boundary = (lambda *a: None) if pipeline is None else pipeline.boundary(chain, layout.coords(rank)[2], rank, layout)
    gathers = _GatherChains(buckets.gathers, chain, lambda i: collective(i, "wg"))
    moved = {row for chain_rows in buckets.gathers for row, _ in chain_rows}
    for i in range(len(workload.rows)):
        boundary("fwd", i)
        gathers.before(i)
        phase_nodes(i, "fwd")
    boundary("fwd", None)
    for i in reversed(range(len(workload.rows))):
        boundary("bwd", i)
        if i == buckets.join:
            chain.wait(chain.off_last)  # finish_grad_sync: every bucket's reduce, before the optimizer
        phase_nodes(i, "ig")
        phase_nodes(i, "wg", skip_comm=i in moved)
    boundary("bwd", None)
    return chain.nodes


class _GatherChains:
    """overlap_param_gather's all-gathers in the forward pass, as megatron-core dispatches them
    (``param_and_grad_buffer.py``, ``finish_param_sync`` from the forward pre-hook): at the
    first row that needs a bucket, its gather is dispatched if it is not yet, the row waits
    for it, and the next bucket's gather is dispatched, to run beside this bucket's forward
    compute. One chain per buffer (dense, experts), each on its own stream."""

    def __init__(self, chains, chain: _Chain, fields_of) -> None:
        self.chain, self.fields_of = chain, fields_of
        self.steps = {}  # forward row -> [(chain number, position)]
        for c, rows in enumerate(chains):
            for k, (_, target) in enumerate(rows):
                self.steps.setdefault(target, []).append((c, k))
        self.chains = chains
        self.ids: dict[tuple[int, int], int | None] = {}
        self.stream: dict[int, int | None] = {}

    def _dispatch(self, c: int, k: int) -> None:
        if (c, k) in self.ids or k >= len(self.chains[c]):
            return
        fields = self.fields_of(self.chains[c][k][0])
        node = None if fields is None else self.chain.side(self.stream.get(c), **fields)
        self.ids[(c, k)] = node
        self.stream[c] = node if node is not None else self.stream.get(c)

    def before(self, row: int) -> None:
        for c, k in self.steps.get(row, ()):
            self._dispatch(c, k)
            self.chain.wait(self.ids[(c, k)])
            self._dispatch(c, k + 1)


@dataclass(frozen=True)
class Pipeline:
    """Where a pipeline stage's rows send to and receive from the neighbouring stages.

    ``segments[i]`` is row i's (micro-batch, model chunk), or None for a row run once per
    iteration. Megatron's interleaved order (``megatron/core/pipeline_parallel/schedules.py``):
    virtual stage ``chunk * pp + stage`` hands its activation to the next virtual stage (stage + 1,
    or stage 0 of the next chunk after the last stage) and receives its gradient back. The
    passes follow SimAI's order (every micro-batch forward, then every one backward), so each
    boundary is a send on one rank and the matching receive on the other, with one tag per
    micro-batch, receiving virtual stage and direction.
    """

    segments: tuple[tuple[int, int] | None, ...]
    pp: int
    chunks: int
    size: int  # bytes of one send

    def _tag(self, mb: int, virtual: int, backward: bool) -> int:
        return (mb * self.pp * self.chunks + virtual) * 2 + int(backward)

    def boundary(self, chain: _Chain, stage: int, rank: int, layout: Layout):
        """A callback ``(pass, row or None at the pass's end)`` adding the rank's sends and receives."""
        state = {"fwd": None, "bwd": None}
        last_virtual = self.pp * self.chunks - 1

        def other(virtual: int) -> int:
            return rank + (virtual % self.pp - stage) * layout.tp * layout.dp

        def link(kind: str, mb: int, virtual: int, peer_virtual: int, backward: bool) -> None:
            receiver = virtual if kind == "recv" else peer_virtual
            direction = "grad" if backward else "act"
            chain.comm(name=f"pipeline.{kind}_{direction}.mb{mb}.v{virtual}", kind=kind, size=self.size,
                       peer=other(peer_virtual), tag=self._tag(mb, receiver, backward), phase="pp", group="PP")

        def step(pass_: str, row: int | None) -> None:
            seg = None if row is None else self.segments[row]
            if seg == state[pass_]:
                return
            backward = pass_ == "bwd"
            if state[pass_] is not None:  # the segment ends: hand on
                mb, chunk = state[pass_]
                v = chunk * self.pp + stage
                if not backward and v < last_virtual:
                    link("send", mb, v, v + 1, False)
                if backward and v > 0:
                    link("send", mb, v, v - 1, True)
            if seg is not None:  # a segment starts: take over
                mb, chunk = seg
                v = chunk * self.pp + stage
                if not backward and v > 0:
                    link("recv", mb, v, v - 1, False)
                if backward and v < last_virtual:
                    link("recv", mb, v, v + 1, True)
            state[pass_] = seg

        return step


def pipeline_of(schedule) -> Pipeline:
    """The pipeline boundaries of one stage's Megatron schedule (``megatron.Schedule``)."""
    from .megatron import pipeline_bytes

    setup = schedule.setup
    chunk_of = {layer: chunk for chunk in range(setup.virtual_pipeline)
                for layer in setup.chunk_layers(schedule.stage, chunk)}
    last = setup.virtual_pipeline - 1
    segments = []
    for block in schedule.blocks:
        if block.micro_batch is None:
            segments.append(None)
        elif block.layer is not None:
            segments.append((block.micro_batch, chunk_of[block.layer]))
        else:  # the embedding opens the first chunk; the output layer and the loss close the last
            segments.append((block.micro_batch, 0 if block.module == "embedding" else last))
    # A bucket's reduce row among a micro-batch's rows (megatron_data_parallel) runs in the
    # backward pass of the row after it: its segment.
    first = next((i for i, s in enumerate(segments) if s is not None), len(segments))
    for i in reversed(range(first, len(segments) - 1)):
        if segments[i] is None:
            segments[i] = segments[i + 1]
    return Pipeline(segments=tuple(segments), pp=setup.pp, chunks=setup.virtual_pipeline,
                    size=pipeline_bytes(setup, scatter_gather=schedule.pp_scatter_gather))


def megatron_traces(schedules: Sequence, *, overlap: Sequence[str] = (), skip_empty: bool = False
                    ) -> tuple[list[list[Node]], dict[int, tuple[int, ...]]]:
    """Every rank's nodes from Megatron's schedule of each pipeline stage (``schedules[s]`` is
    stage s's), with the pipeline's sends and receives; and the groups they use."""
    setup = schedules[0].setup
    if [s.stage for s in schedules] != list(range(setup.pp)):
        raise ValueError("give one schedule per pipeline stage, in stage order")
    if setup.dp % setup.ep:
        raise InputError(f"ep {setup.ep} does not divide the data-parallel size {setup.dp}", field="ep")
    layout = Layout(tp=setup.tp, dp=setup.dp, pp=setup.pp, ep=setup.ep)
    workloads = [s.workload() for s in schedules]
    pipelines = [pipeline_of(s) for s in schedules] if setup.pp > 1 else [None] * setup.pp
    ids = group_ids(layout)
    inserts = [unexpressed_inserts(s) for s in schedules]
    buckets = [overlap_rows([b.name for b in s.blocks], setup.overlap_grad_reduce, setup.overlap_param_gather)
               for s in schedules]
    by_rank = []
    for rank in range(layout.world):
        stage = layout.coords(rank)[2]
        by_rank.append(rank_nodes(workloads[stage], rank, layout, overlap=overlap, pipeline=pipelines[stage],
                                  ids=ids, skip_empty=skip_empty, inserts=inserts[stage], buckets=buckets[stage]))
    return by_rank, used_groups(by_rank, layout)


def unexpressed_inserts(schedule) -> dict[tuple[int, str], list[tuple[str, str, str, int]]]:
    """The collectives of a Megatron schedule that no row carries but a trace can, by the row
    and phase before whose compute megatron issues them: those anchored to a row
    (``Unexpressed.anchor``) on a group of the layout (FSDP's per-layer all-gathers over DP)."""
    rows = {(b.name, b.micro_batch): i for i, b in enumerate(schedule.blocks)}
    out: dict[tuple[int, str], list[tuple[str, str, str, int]]] = {}
    for u in schedule.unexpressed:
        if u.anchor is None or u.in_rows or u.comm.group not in GROUP_KINDS:
            continue
        index = rows[(u.anchor, u.micro_batch)]
        where = f"layer{u.layer}" if u.layer is not None else u.anchor
        name = f"{u.module}.{where}.mb{u.micro_batch}.{u.phase}.{u.comm.collective}"
        out.setdefault((index, u.phase), []).append((name, u.comm.collective, u.comm.group, u.comm.bytes))
    return out


def used_groups(nodes_by_rank: Sequence[Sequence[Node]], layout: Layout) -> dict[int, tuple[int, ...]]:
    """The communicator-group file's content: every group some collective names."""
    every = layout.groups()
    used = {n.pg for nodes in nodes_by_rank for n in nodes if n.kind == "coll" and n.pg is not None}
    return {gid: every[gid] for gid in sorted(used)}


def traces(workload: Workload, *, gpus: int | None = None, overlap: Sequence[str] = (),
           source: str = "<workload>", skip_empty: bool = False
           ) -> tuple[list[list[Node]], dict[int, tuple[int, ...]]]:
    """Every rank's nodes and the communicator groups they use (``skip_empty``: ``rank_nodes``)."""
    bad = [g for g in overlap if g not in GROUP_KINDS]
    if bad:
        raise InputError(f"unknown overlap group {bad[0]!r}; expected some of {', '.join(GROUP_KINDS)}",
                         field="overlap")
    layout = layout_for(workload, gpus, source=source)
    ids = group_ids(layout)
    by_rank = [rank_nodes(workload, r, layout, gpus=gpus, overlap=overlap, ids=ids, skip_empty=skip_empty)
               for r in range(layout.world)]
    return by_rank, used_groups(by_rank, layout)

