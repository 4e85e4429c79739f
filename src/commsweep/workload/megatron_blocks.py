"""The Megatron schedule's vocabulary: collectives, rows, and what every part builds from.

The schedule is written by parts (``megatron_attention``, ``megatron_mlp``,
``megatron_embedding``, ``megatron_pipeline``, ``megatron_data_parallel``, ...), each a
small module; this module holds what they share, so that each part imports the types it
builds and ``megatron.py`` only puts the parts together:

* ``Comm``: one collective (operation, group, bytes of the whole tensor);
* ``Block``: one workload row, with the megatron module it stands for and up to one
  collective per column (forward, input gradient, weight gradient);
* ``Unexpressed``: a collective the SimAI format cannot carry (or carry as megatron issues it);
* ``Rows``: what a part returns, its rows and its unexpressed collectives, in order;
* ``Timing``: the compute times per row kind, as a row's fields;
* ``Build``: the setup, the megatron-core release and the times, with the sizes every part
  reads (u, SP on or off, a TP collective or none at t = 1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from ..setup.training import TrainingSetup
from .megatron_releases import Release

FP32 = 4
BF16 = 2
INT64 = 8

GROUP_OF_PHASE_SUFFIX = {"TP": "", "DP": "", "EP": "_EP", "DP_EP": "_DP_EP"}
# Groups that may stand in each column of a SimAI row.
COLUMN_GROUPS = {"fwd": ("TP", "EP", "DP_EP"), "ig": ("TP", "EP", "DP_EP"), "wg": ("DP", "EP", "DP_EP")}


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
    # The row (by name, in the same micro-batch) before whose ``phase`` compute megatron issues
    # it, for the exports that can carry it (the Chakra traces); None where none says.
    anchor: str | None = None

    def __iter__(self):
        return iter((self.module, self.phase, self.comm, self.why))


def as_unexpressed(item) -> Unexpressed:
    """An ``Unexpressed`` from itself or from a plain (module, phase, comm, why) tuple."""
    return item if isinstance(item, Unexpressed) else Unexpressed(*item)


@dataclass
class Rows:
    """What a part of the schedule writes: rows, and the collectives they cannot carry, in
    the order megatron issues them (lists, not tuples: a schedule has up to ~10^5 rows)."""

    blocks: list[Block] = field(default_factory=list)
    unexpressed: list[Unexpressed] = field(default_factory=list)

    def __iadd__(self, other: Rows | list[Block]) -> Rows:
        if isinstance(other, Rows):
            self.blocks += other.blocks
            self.unexpressed += other.unexpressed
        else:
            self.blocks += other
        return self


@dataclass(frozen=True)
class Timing:
    """Compute times in ns per row kind: (fwd, ig, wg) for ``embedding``,
    ``attention_qkv``, ``attention_proj``, ``mlp_fc1``, ``mlp_fc2``, ``output_layer``,
    ``optimizer`` and, with full recompute, ``recompute_attention`` and ``recompute_mlp``
    (``megatron_times``); empty when nothing times the rows (every compute 0)."""

    ns: Mapping[str, tuple[int, int, int]] = field(default_factory=dict)

    def fields(self, kind: str | None) -> dict:
        """A row's compute fields for row kind ``kind`` (none for None)."""
        if kind is None:
            return {}
        fwd, ig, wg = self.ns.get(kind, (0, 0, 0))
        return {"fwd_compute": fwd, "ig_compute": ig, "wg_compute": wg}


@dataclass(frozen=True)
class Build:
    """What every part of the schedule builds its rows from."""

    setup: TrainingSetup
    release: Release
    timing: Timing = Timing()

    @cached_property
    def tp(self) -> bool:
        """Whether TP communicates (Megatron has no TP communication at t = 1)."""
        return self.setup.tp > 1

    @cached_property
    def sp(self) -> bool:
        """Sequence parallelism as megatron runs it: switched off at t = 1."""
        return self.setup.sp and self.setup.tp > 1

    @cached_property
    def u(self) -> int:
        """u = 2*b*s*h: one bf16 activation of the micro-batch, the size unit of rows."""
        return self.setup.activation_bytes

    def tp_comm(self, collective: str, size: int | None = None) -> Comm | None:
        """A collective over TP of ``size`` bytes (default u), or None at t = 1."""
        return Comm(collective, "TP", self.u if size is None else size) if self.tp else None

    def timed(self, kind: str | None) -> dict:
        """A row's compute fields for row kind ``kind``."""
        return self.timing.fields(kind)
