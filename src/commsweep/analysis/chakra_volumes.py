"""Communication volumes of a Chakra trace set, in the volumes table's rows (``volumes.Volume``).

A trace is one rank's work, so the table is one rank's: its collectives per phase, collective
and group, and its pipeline sends (phase ``pp``, collective ``sendrecv``, group ``PP``; a
receive is the other end of a send, not counted again). commsweep's own traces say each node's
phase and group kind; a trace from elsewhere does not, and then the phase is ``?`` and the
group is named by its communicator group id (``pg3``), or ``world`` for a collective over every
rank: ``unknown`` lists what could not be told.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..workload.chakra_graph import Node
from .volumes import COLLECTIVE_ORDER, GROUP_ORDER, PHASE_ORDER, Volume, wire_fraction

UNKNOWN_PHASE = "?"


@dataclass(frozen=True)
class TraceVolumes:
    """One rank's volumes, and what its trace could not tell."""

    rank: int
    volumes: list[Volume]
    unknown: tuple[str, ...]


def _group(node: Node, groups: dict[int, tuple[int, ...]], world: int) -> tuple[str, int]:
    if node.kind in ("send", "recv"):
        return node.group or "PP", 2
    size = world if node.pg is None else len(groups[node.pg])
    if node.group is not None:
        return node.group, size
    return ("world" if node.pg is None else f"pg{node.pg}"), size


def _order(v: Volume) -> tuple:
    def index(seq: Sequence[str], value: str) -> tuple[int, str]:
        return (seq.index(value), "") if value in seq else (len(seq), value)

    return (index(PHASE_ORDER, v.phase), index(GROUP_ORDER, v.group), index(COLLECTIVE_ORDER, v.collective),
            v.group_size)


def rank_volumes(nodes: Sequence[Node], groups: dict[int, tuple[int, ...]], world: int, rank: int = 0) -> TraceVolumes:
    """One rank's volumes table; ``world``: the ranks of the set (a collective without a group spans them)."""
    sums: dict[tuple[str, str, str, int], list[int]] = {}
    unknown: set[str] = set()
    for node in nodes:
        if node.kind not in ("coll", "send"):
            continue
        group, size = _group(node, groups, world)
        phase = node.phase or ("pp" if node.kind == "send" and node.group == "PP" else UNKNOWN_PHASE)
        if node.phase is None:
            unknown.add("phase (the trace does not say which pass a node belongs to)")
        if node.group is None:
            unknown.add("group kind (the trace names communicator groups by number only)")
        if node.row is None:
            unknown.add("layer (the trace does not say which workload row a node stands for)")
        collective = node.collective or "sendrecv"
        entry = sums.setdefault((phase, collective, group, size), [0, 0])
        entry[0] += 1
        entry[1] += node.size
    table = [Volume(phase, coll, group, size, n, payload, round(payload * wire_fraction(coll, size)))
             for (phase, coll, group, size), (n, payload) in sums.items()]
    return TraceVolumes(rank=rank, volumes=sorted(table, key=_order), unknown=tuple(sorted(unknown)))


def trace_set_volumes(nodes_by_rank: Sequence[Sequence[Node]], groups: dict[int, tuple[int, ...]],
                      rank: int = 0) -> TraceVolumes:
    """The volumes of one rank of a trace set (``rank`` must be one of its ranks)."""
    if not 0 <= rank < len(nodes_by_rank):
        raise ValueError(f"rank {rank} is not one of the set's {len(nodes_by_rank)} ranks")
    return rank_volumes(nodes_by_rank[rank], groups, len(nodes_by_rank), rank)


def read_trace_set(folder: str, rank: int = 0) -> list[Volume]:
    """One rank's volumes of a trace folder; what its traces cannot tell is said on stderr."""
    import sys

    from ..workload import chakra

    result = trace_set_volumes(*chakra.read(folder), rank=rank)
    for what in result.unknown:
        print(f"commsweep volumes: {folder}: unknown {what}", file=sys.stderr)
    return result.volumes
