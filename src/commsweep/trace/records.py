"""Trace records: one row per collective one rank issued, as plain data (no torch here).

The CSV has the columns of ``CSV_COLUMNS`` and then ``rank``, the global rank that issued
the collective (a trace normally shows the first rank of each pipeline stage). ``summary_table`` tallies a trace per phase, group and
operation for people; ``compare.py`` checks it against the Megatron schedule.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from dataclasses import asdict, dataclass, fields

from ..base.errors import InputError
from ..setup.training import TrainingSetup
from .collectives import WRAPPED

CSV_COLUMNS = ("op", "group", "group_size", "elements", "bytes", "phase", "module", "layer")
PHASES = ("forward", "backward", "after_backward")


@dataclass(frozen=True)
class TraceRecord:
    """One collective as one rank issued it.

    ``op`` is the torch.distributed function called, ``collective`` its kind
    (allreduce, allgather, reducescatter, alltoall, broadcast, send, recv). ``elements``
    counts the whole tensor (gathered output, reduce-scatter input), ``bytes`` what it
    weighs in the dtype that travelled. ``phase`` is ``forward``, ``backward`` (issued
    while autograd runs a backward node) or ``after_backward`` (gradient finalisation and
    the distributed optimizer's parameter gather). ``module`` is the Megatron module
    (path inside the GPT model) that issued it, or the megatron function outside any
    module; ``layer`` the global transformer layer index, None outside the layers.
    """

    op: str
    collective: str
    group: str
    group_size: int
    elements: int
    bytes: int
    phase: str
    module: str
    layer: int | None
    rank: int = 0
    stage: int = 0  # pipeline stage of the rank
    async_op: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "TraceRecord":
        return cls(**{f.name: values[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class RankInfo:
    """Facts about one traced rank: its pipeline stage, its parameter count, the
    padding megatron's gradient buffers add to it (carried by the DP collectives; the
    expert buffers' by the DP_EP ones), the megatron-core version that ran, and the
    workarounds it needed (``trace/compat.py``)."""

    rank: int
    stage: int
    parameters: int
    buffer_padding: int
    expert_buffer_padding: int = 0
    megatron_core: str = ""
    workarounds: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "workarounds", tuple(self.workarounds))  # JSON gives a list


@dataclass(frozen=True)
class Trace:
    """One traced setup: every rank's records, and facts about each rank."""

    setup: TrainingSetup
    records: list[TraceRecord]
    ranks: list[RankInfo]

    def first_rank_of_stage(self, stage: int) -> int:
        """The lowest global rank of a pipeline stage: the rank whose view is compared."""
        return min(r.rank for r in self.ranks if r.stage == stage)

    def rank_records(self, rank: int) -> list[TraceRecord]:
        return [r for r in self.records if r.rank == rank]

    @property
    def megatron_core(self) -> str:
        """The megatron-core release that ran (every rank runs the same)."""
        return self.ranks[0].megatron_core if self.ranks else ""

    @property
    def workarounds(self) -> tuple[str, ...]:
        """The CPU workarounds of ``trace/compat.py`` the release needed (any rank's)."""
        return tuple(sorted({w for r in self.ranks for w in r.workarounds}))

    @property
    def stages(self) -> list[int]:
        return sorted({r.stage for r in self.ranks})


def to_csv(records: list[TraceRecord]) -> str:
    """The tidy CSV of ``records``: ``CSV_COLUMNS``, then the global ``rank`` that issued each."""
    columns = CSV_COLUMNS + ("rank",)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in records:
        values = r.to_dict()
        writer.writerow(["" if values[c] is None else values[c] for c in columns])
    return buf.getvalue()


def read_csv(text: str, *, source: str = "<trace>") -> list[TraceRecord]:
    """Parse a trace CSV written by ``to_csv`` (the inverse, for the audit and compare)."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        raise InputError("empty trace file", file=source)
    header = rows[0]
    missing = [c for c in CSV_COLUMNS if c not in header]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}", file=source, line=1)
    idx = {c: i for i, c in enumerate(header)}
    out = []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise InputError(f"expected {len(header)} fields, got {len(row)}", file=source, line=line)
        values = {c: row[i] for c, i in idx.items()}
        try:
            ints = {c: int(values[c]) for c in ("group_size", "elements", "bytes")}
        except ValueError:
            bad = next(c for c in ("group_size", "elements", "bytes") if not values[c].lstrip("-").isdigit())
            raise InputError(f"expected an integer, got {values[bad]!r}", file=source, line=line, field=bad) from None
        layer = values["layer"]
        if layer and not layer.isdigit():
            raise InputError(f"expected a layer index or nothing, got {layer!r}", file=source, line=line, field="layer")
        if values["phase"] not in PHASES:
            raise InputError(f"expected one of {', '.join(PHASES)}, got {values['phase']!r}",
                             file=source, line=line, field="phase")
        out.append(TraceRecord(
            op=values["op"], collective=collective_of(values["op"]), group=values["group"],
            phase=values["phase"], module=values["module"], layer=int(layer) if layer else None,
            rank=_rank(values.get("rank"), source, line), **ints,
        ))
    return out


def _rank(value: str | None, source: str, line: int) -> int:
    if not value:
        return 0
    if not value.isdigit():
        raise InputError(f"expected a rank, got {value!r}", file=source, line=line, field="rank")
    return int(value)


def collective_of(op: str) -> str:
    """The collective kind of a torch.distributed function name, as the wrappers record it."""
    return WRAPPED[op][0] if op in WRAPPED else op


def summary_table(records: list[TraceRecord]) -> str:
    """Counts and elements per phase, group and operation, as an aligned text table."""
    count: Counter = Counter()
    elements: Counter = Counter()
    for r in records:
        key = (r.phase, r.group, r.group_size, r.op)
        count[key] += 1
        elements[key] += r.elements
    order = {p: i for i, p in enumerate(PHASES)}
    rows = [("phase", "group", "size", "op", "count", "elements")]
    for key in sorted(count, key=lambda k: (order.get(k[0], 9), k[1], k[3])):
        rows.append((key[0], key[1], str(key[2]), key[3], str(count[key]), str(elements[key])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) if i < 4 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths))).rstrip()
             for row in rows]
    return "\n".join(lines) + "\n"
