"""Each AICB point of a sweep against its Megatron point: the difference by cause of a
finished sweep, of a batch's points, or of its packet-level points.

For an AICB point, its *Megatron point* is the point of the same setting (every axis but
the schedule) with schedule megatron and the same ``aiob`` (like with like); when the sweep
has only the other ``aiob`` value, that one stands in exactly, since the two Megatron files
differ only in compute times, and SimAI's exposed time of a collective does not depend on
compute (``trunc(t * (1 - overlap))``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ...base import paths
from ...setup.points import PointRow, read_points
from .. import audit_csv
from .difference import PointCauses, aggregate, parts
from .simulated import payload_bytes, read_simulated
from .table import to_csv


def megatron_partners(points: list[PointRow]) -> dict[str, str]:
    """AICB point -> its Megatron point (same setting; same aiob, else the other one)."""
    megatron: dict[tuple, str] = {}
    for p in points:
        if p.schedule == "megatron":
            megatron[(p.setting, p.aiob)] = p.point
    out = {}
    for p in points:
        if p.schedule != "aicb":
            continue
        partner = megatron.get((p.setting, p.aiob)) or megatron.get((p.setting, not p.aiob))
        if partner is not None:
            out[p.point] = partner
    return out


def audit_of(files: paths.PointFiles, point: PointRow) -> Path | None:
    """A point's audit: its own, or for a packet-level point its analytical twin's (the audit
    is of the workload, which the two share; a packet-level point has its own only in a sweep
    without its twin)."""
    own = files.audit(point.point)
    if point.simulation != "packet" or (own is not None and own.exists()):
        return own
    return files.audit(point.point.removesuffix("_packet")) or own


def point_causes(files: paths.PointFiles, point: PointRow, partner: PointRow | None) -> PointCauses | None:
    """An AICB point's causes against its Megatron point (None: the point has no audit)."""
    from ...base.status import is_marker

    audit_path = audit_of(files, point)
    if audit_path is None or not audit_path.exists() or is_marker(audit_path):
        return None
    items = audit_csv.read(audit_path)
    # Times need both simulations; without a Megatron point only bytes are known.
    packet = point.simulation == "packet"
    found_sim = read_simulated(files, point.point, packet=packet) if partner else None
    expected_sim = read_simulated(files, partner.point, packet=packet) if partner else None
    total_bytes = total_ns = None
    if partner is not None:
        total_bytes = (payload_bytes(files, point.workload) - payload_bytes(files, partner.workload)
                       - unexpressed_bytes(files, partner))
        if found_sim is not None and expected_sim is not None:
            total_ns = found_sim.exposed - expected_sim.exposed
    rows = aggregate(parts(items, found_sim, expected_sim), total_bytes, total_ns)
    return PointCauses(point, partner.point if partner else None, rows, total_bytes, total_ns)


def unexpressed_bytes(files: paths.PointFiles, megatron_point: PointRow) -> int:
    """What Megatron's schedule sends that its own workload cannot hold, in bytes per iteration:
    the attention's context-parallel exchange (no SimAI group is CP) and FSDP's per-layer
    parameter all-gathers (no forward or input-gradient column carries DP), as the Megatron
    point's audit lists them (0 without CP or sharded parameters). A point's difference from
    Megatron counts them, so that the AICB point's causes, which miss them, add up to that difference."""
    if (megatron_point.cp or 1) == 1 and megatron_point.fsdp not in UNEXPRESSED_FSDP:
        return 0
    path = audit_of(files, megatron_point)
    if path is None or not path.exists():
        from ...base.errors import InputError

        raise InputError(f"no audit of the Megatron point {megatron_point.point}: what its file cannot "
                         "hold (CP's exchange, FSDP's gathers) is part of its traffic", file=path)
    return sum(-(f.delta_bytes or 0) for f in audit_csv.read(path) if f.cause in UNEXPRESSED_CAUSES)


# The FSDP settings whose per-layer all-gathers no workload row carries, and the causes the
# Megatron point's own audit names what its file cannot hold by.
UNEXPRESSED_FSDP = ("optim_grads_params", "torch_fsdp2")
UNEXPRESSED_CAUSES = ("cp_attention_exchange_missing", "fsdp_param_gathers_missing")


def sweep_causes(sweep_csv: Path, files: paths.PointFiles) -> list[PointCauses]:
    """Every audited AICB point of a finished sweep whose stages succeeded, in table order,
    simulated analytically (the packet-level ones: ``packet_difference_by_cause``).
    ``files``: each point's files (``paths.PointFiles``)."""
    return points_causes([p for p in read_points(sweep_csv) if p.simulation != "packet"], files)


def points_causes(points: list[PointRow], files: paths.PointFiles) -> list[PointCauses]:
    """``sweep_causes`` of some points (rows of the points table, as strings), in their order.

    A point's Megatron partner is one of the same setting (``megatron_partners``), so any set
    of points that holds every point of its settings gives each point what the whole sweep
    would: a batch of points does (``commsweep.orchestration.batch``: a batch holds whole model shards).
    """
    from ...base.status import failures

    ok = {p.point: p for p in points if not failures(files, p.workload, p.point)}
    partners = megatron_partners(list(ok.values()))
    out = []
    for p in points:
        if p.schedule != "aicb" or p.point not in ok:
            continue
        partner = ok.get(partners.get(p.point, ""))
        found = point_causes(files, p, partner)
        if found is not None:
            out.append(found)
    return out


def difference_by_cause(sweep_csv: Path, files: paths.PointFiles) -> str:
    """``results/difference_by_cause.csv`` of a finished sweep."""
    return to_csv(sweep_causes(sweep_csv, files))


def packet_difference_by_cause(sweep_csv: Path, files: paths.PointFiles) -> str:
    """``results/packet_difference_by_cause.csv``: the difference by cause under packet-level
    simulation. Each packet-level AICB point against its packet-level Megatron point (the
    simulation is part of a point's setting, so like pairs with like), with each finding's
    exposed time from the two SimAI_simulator runs; the same columns, writer and reader as
    ``difference_by_cause.csv``. A sweep-wide step rather than the batches' work: each
    packet-level point is a batch of its own, so no batch holds a pair. With no row, the log
    names each packet-level point that failed and why (``packet.without_pairs``)."""
    points = [p for p in read_points(sweep_csv) if p.simulation == "packet"]
    found = points_causes(points, files)
    if not found:
        from ..packet import without_pairs

        for line in without_pairs(points, files):
            print(f"commsweep causes: no packet-level row: failed: {line}", file=sys.stderr)
    return to_csv(found)
