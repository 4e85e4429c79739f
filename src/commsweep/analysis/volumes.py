"""Communication volumes of one workload: every collective SimAI executes in one iteration.

Tallied per phase (fwd, ig, wg, and pp for pipeline sends), collective and group:

* ``count``: collectives executed (a row's three phases are three distinct collectives);
* ``payload_bytes``: the sum of their size fields as SimAI reads them (NONE ignored,
  forward sizes of 1..4095 bytes raised to 4096);
* ``wire_bytes_per_rank``: what one rank sends with ring algorithms: all-reduce
  2(n-1)/n * S, all-gather, reduce-scatter and all-to-all (n-1)/n * S, a pipeline send S,
  nothing on a group of one.

Pipeline traffic follows SimAI's PP formula, which counts 2 * vpp * ga messages of the
header's ``pp_comm`` bytes (vpp being what the file's header says).

A workload file cannot hold a context-parallel group, so its volumes never show one; the
Megatron schedule of a setup knows its CP exchange (``context_parallel``), which ``commsweep
audit --format table`` prints after the findings.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

from ..base.errors import InputError
from ..base.files import read_text
from ..workload.format import Workload, collectives, group_sizes

COLUMNS = ("phase", "collective", "group", "group_size", "count", "payload_bytes", "wire_bytes_per_rank")
PHASE_ORDER = ("fwd", "ig", "wg", "pp")
GROUP_ORDER = ("TP", "EP", "DP", "DP_EP", "PP", "CP", "CP_A2A", "CP_P2P")
COLLECTIVE_ORDER = ("allreduce", "allgather", "reducescatter", "alltoall", "sendrecv")


@dataclass(frozen=True)
class Volume:
    phase: str
    collective: str
    group: str
    group_size: int
    count: int
    payload_bytes: int
    wire_bytes_per_rank: int


def wire_fraction(collective: str, group_size: int) -> Fraction:
    """Share of a message's bytes one rank sends with a ring algorithm."""
    n = group_size
    if n <= 1:
        return Fraction(0)
    if collective == "allreduce":
        return Fraction(2 * (n - 1), n)
    if collective == "sendrecv":
        return Fraction(1)
    return Fraction(n - 1, n)


def tally(workload: Workload, gpus: int | None = None) -> list[Volume]:
    """The volumes table of a workload, in a stable order."""
    # Sum sizes per key first: the wire share is the same for every collective of a key,
    # so one exact multiplication per key gives the same bytes as one per collective.
    counts: dict[tuple[str, str, str, int], list[int]] = {}
    for c in collectives(workload, gpus):
        entry = counts.get((c.phase, c.collective, c.group, c.group_size))
        if entry is None:
            counts[(c.phase, c.collective, c.group, c.group_size)] = [1, c.size]
        else:
            entry[0] += 1
            entry[1] += c.size
    header = workload.header
    if header.pp > 1:
        messages = 2 * header.vpp * header.ga
        counts[("pp", "sendrecv", "PP", group_sizes(header, gpus)["PP"])] = [messages, messages * header.pp_comm]
    return sorted(
        (
            Volume(phase, coll, group, size, n, payload, round(payload * wire_fraction(coll, size)))
            for (phase, coll, group, size), (n, payload) in counts.items()
        ),
        key=lambda v: (
            PHASE_ORDER.index(v.phase), GROUP_ORDER.index(v.group), COLLECTIVE_ORDER.index(v.collective), v.group_size,
        ),
    )


def _unexpressed(setup, stage: int, megatron_version: str | None, size_of) -> list[Volume]:
    """The volumes of the collectives of Megatron's schedule of ``setup`` that no workload file
    holds, those ``size_of`` (an ``Unexpressed`` -> its group's size, or None) gives a size,
    per phase, collective and group."""
    from ..workload import megatron

    counts: dict[tuple[str, str, str, int], list[int]] = {}
    for u in megatron.schedule(setup, stage=stage, megatron_version=megatron_version).unexpressed:
        size = size_of(u)
        if size is not None:
            entry = counts.setdefault((u.phase, u.comm.collective, u.comm.group, size), [0, 0])
            entry[0] += 1
            entry[1] += u.comm.bytes
    return sorted(
        (Volume(phase, coll, group, size, n, payload, round(payload * wire_fraction(coll, size)))
         for (phase, coll, group, size), (n, payload) in counts.items()),
        key=lambda v: (PHASE_ORDER.index(v.phase), GROUP_ORDER.index(v.group), COLLECTIVE_ORDER.index(v.collective)))


def context_parallel(setup, stage: int = 0, megatron_version: str | None = None) -> list[Volume]:
    """The volumes of the attention's context-parallel exchange in Megatron's schedule of
    ``setup`` (a ``TrainingSetup``; empty at CP 1): what no workload file holds, per phase,
    collective and CP group, with the group's size (the a2a+p2p groups: its hierarchical sizes)."""
    if setup.cp == 1:
        return []
    sizes = {"CP": setup.cp}
    if setup.hierarchical_cp is not None:
        sizes.update(CP_A2A=setup.hierarchical_cp[0], CP_P2P=setup.hierarchical_cp[1])
    return _unexpressed(setup, stage, megatron_version, lambda u: sizes.get(u.comm.group))


def fsdp_gathers(setup, stage: int = 0, megatron_version: str | None = None) -> list[Volume]:
    """The volumes of FSDP's per-layer parameter all-gathers (forward and backward) in
    Megatron's schedule of ``setup``: what no workload file holds (SimAI's forward and
    input-gradient columns have no DP group), per phase over DP x CP; empty without them."""
    if setup.fsdp not in ("optim_grads_params", "torch_fsdp2"):
        return []
    return _unexpressed(setup, stage, megatron_version,
                        lambda u: setup.dp_cp if u.module.startswith("fsdp.") else None)


def to_csv(volumes: Iterable[Volume]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for v in volumes:
        writer.writerow([getattr(v, c) for c in COLUMNS])
    return buf.getvalue()


def to_json(volumes: Iterable[Volume]) -> str:
    return json.dumps([asdict(v) for v in volumes], indent=2) + "\n"


def to_table(volumes: Iterable[Volume]) -> str:
    """A human-readable table with byte counts in MiB."""
    rows = [
        (v.phase, v.collective, v.group, str(v.group_size), str(v.count),
         f"{v.payload_bytes / 2**20:,.2f}", f"{v.wire_bytes_per_rank / 2**20:,.2f}")
        for v in volumes
    ]
    head = ("phase", "collective", "group", "size", "count", "payload MiB", "wire MiB/rank")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells):
        return "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(head), line(["-" * w for w in widths]), *(line(r) for r in rows)]) + "\n"


def read_csv(text: str, *, source: str | Path = "<volumes.csv>") -> list[Volume]:
    """Parse a volumes CSV this module wrote (``to_csv``); an ``InputError`` naming the line and
    field of anything else."""
    reader = csv.reader(io.StringIO(text))
    if tuple(next(reader, ())) != COLUMNS:
        raise InputError(f"expected the columns {','.join(COLUMNS)}", file=source, line=1)
    out = []
    for line, cells in enumerate(reader, start=2):
        if len(cells) != len(COLUMNS):
            raise InputError(f"expected {len(COLUMNS)} fields, got {len(cells)}", file=source, line=line)
        numbers = []
        for name, text in zip(COLUMNS[3:], cells[3:]):
            try:
                numbers.append(int(text))
            except ValueError:
                raise InputError(f"expected an integer, got {text!r}", file=source, line=line, field=name) from None
        out.append(Volume(*cells[:3], *numbers))
    return out


def read(path: str | Path) -> list[Volume]:
    """A workload's volumes file (checked UTF-8; errors name the file)."""
    return read_csv(read_text(path), source=path)
