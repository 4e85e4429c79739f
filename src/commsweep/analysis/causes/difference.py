"""The arithmetic of the difference by cause: each finding's signed bytes and exposed time
under its cause (``parts``), summed per cause, phase, collective, group and sign
(``aggregate``), never netted.

Bytes are what SimAI executes on each side (forward messages under 4096 bytes counted as
4096); a finding's time is what its own collectives took in the two simulations, the AICB
row's exposed time (found) and Megatron's for the same collective (expected). Collectives
that match byte for byte take the same time in both and add 0. A difference no finding
accounts for is the cause ``unattributed`` (a defect of commsweep), so the sums always hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...setup.points import PointRow
from ...workload import format as wf
from ...workload import row_names as rn
from ..audit import FSDP_GATHER
from ..audit_csv import AuditRow
from . import catalog
from .simulated import Simulated


@dataclass
class Part:
    """One finding's share of a cause: a collective in excess (+) or short (-)."""

    cause: str
    phase: str
    collective: str
    group: str
    bytes: int
    exposed_ns: int | None


def _expected_phase(f: AuditRow) -> str:
    # A DP collective sits in SimAI's weight-gradient column; a finding of kind `group`
    # carries the found side's phase only. FSDP's per-layer all-gathers are in no column:
    # the simulation prices them in the phase megatron issues them in (forward, backward).
    if f.expected_name == FSDP_GATHER:
        return f.phase
    return "wg" if f.expected_group in ("DP", "DP_EP") else f.phase


def _expected_exposed(f: AuditRow, sim: Simulated | None) -> int | None:
    if sim is None:
        return None
    return sim.exposed_of(_expected_phase(f), f.expected_collective, f.expected_group, f.expected_bytes or 0)


def _found_exposed(f: AuditRow, sim: Simulated | None) -> int | None:
    if sim is None or f.phase == "pp":
        return None
    return sim.exposed_of(f.phase, f.found_collective, f.found_group, f.found_bytes or 0)


def _sub(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a - b


def parts(items: list[AuditRow], found_sim: Simulated | None, expected_sim: Simulated | None) -> list[Part]:
    """Each finding's signed bytes and exposed time under its cause (the audit's, ``AuditRow.cause``).

    ``found_sim``: the AICB point's simulation; ``expected_sim``: its Megatron point's
    (None: exposed times unknown). Bytes are what SimAI executes on each side.
    """
    timed = found_sim is not None and expected_sim is not None
    fsim, esim = (found_sim, expected_sim) if timed else (None, None)
    items, out = _bucket_parts(items, fsim, esim)
    for f in items:
        cause = f.cause
        found_bytes = wf.effective_size(f.phase, f.found_bytes or 0) if f.found_collective not in ("", "none") else 0
        expected_bytes = wf.effective_size(_expected_phase(f), f.expected_bytes or 0) if f.expected_collective else 0
        if f.phase == "pp":
            # The header's pipeline sends: not a row; SimAI's exposed PP time.
            pp_ns = _sub(fsim.pipeline, esim.pipeline) if timed else None
            out.append(Part(cause, "pp", "sendrecv", "PP", found_bytes - expected_bytes, pp_ns))
        elif f.kind == "size_in_none_column":
            out.append(Part(cause, f.phase, "none", "", 0, 0 if timed else None))
        elif f.kind == "missing":
            exposed = _expected_exposed(f, esim)
            out.append(Part(cause, f.phase, f.expected_collective, f.expected_group, -expected_bytes,
                            None if exposed is None else -exposed))
        elif not f.expected_collective:  # extra, size1_group, an unpaired zero_bytes
            out.append(Part(cause, f.phase, f.found_collective, f.found_group, found_bytes, _found_exposed(f, fsim)))
        elif f.kind == "group":
            # Not netted: the collective is missing where Megatron has it, extra where the row has it.
            out.append(Part(cause, f.phase, f.found_collective, f.found_group, found_bytes, _found_exposed(f, fsim)))
            exposed = _expected_exposed(f, esim)
            out.append(Part(cause, _expected_phase(f), f.expected_collective, f.expected_group, -expected_bytes,
                            None if exposed is None else -exposed))
        else:  # size, zero_bytes: the same collective with other bytes
            out.append(Part(cause, f.phase, f.found_collective, f.found_group, found_bytes - expected_bytes,
                            _sub(_found_exposed(f, fsim), _expected_exposed(f, esim))))
    if timed and any(p.exposed_ns is None for p in out):
        # A collective the Megatron simulation does not have: say so rather than guess.
        for p in out:
            if p.exposed_ns is None:
                p.exposed_ns = 0
    return out


BUCKETS = "dp_buckets"


def _bucket_parts(items: list[AuditRow], fsim: Simulated | None, esim: Simulated | None
                  ) -> tuple[list[AuditRow], list[Part]]:
    """AICB's one DP row against Megatron's buckets of the same collective (the one the row
    is paired with, ``size``, and the others, ``missing``), split in two: the row's own cause
    (its parameter count) takes the bytes, and AICB's exposed time beyond what the row would
    expose at Megatron's bytes (SimAI's DP time is linear in the bytes); ``dp_buckets`` takes
    what that one row exposes beyond Megatron's buckets. The findings left, and the parts."""
    groups: dict[tuple[str, str], list[AuditRow]] = {}
    for f in items:
        if f.unit_kind in ("dp", "moe_dp") and rn.is_bucket_row(f.expected_name) and f.kind in ("size", "missing"):
            groups.setdefault((f.expected_collective, f.expected_group), []).append(f)
    taken: set[int] = set()
    out: list[Part] = []
    for (collective, group), found in groups.items():
        paired = [f for f in found if f.kind == "size"]
        if len(paired) != 1:
            continue
        row = paired[0]
        aicb = wf.effective_size(row.phase, row.found_bytes or 0)
        megatron = sum(f.expected_bytes or 0 for f in found)
        exposed = [_expected_exposed(f, esim) for f in found]
        aicb_ns = _found_exposed(row, fsim)
        if aicb_ns is None or None in exposed:
            at_megatron = aicb_ns = megatron_ns = None
        else:
            at_megatron, megatron_ns = (aicb_ns * megatron // aicb if aicb else 0), sum(exposed)
        out.append(Part(row.cause, "wg", collective, group, aicb - megatron, _sub(aicb_ns, at_megatron)))
        out.append(Part(BUCKETS, "wg", collective, group, 0, _sub(at_megatron, megatron_ns)))
        taken.update(id(f) for f in found)
    return [f for f in items if id(f) not in taken], out


@dataclass(frozen=True)
class CauseRow:
    """A row of difference_by_cause.csv (without the point's columns)."""

    cause: str
    phase: str
    collective: str
    group: str
    rows: int
    bytes: int
    exposed_ns: int | None


_PHASES = ("fwd", "ig", "wg", "pp", "")


def aggregate(point_parts: list[Part], total_bytes: int | None = None, total_exposed_ns: int | None = None
              ) -> list[CauseRow]:
    """Parts summed per cause, phase, collective, group and sign (never netting + and -),
    then, when the point's totals are given, the ``unattributed`` rest (if any)."""
    acc: dict[tuple, list] = {}
    for p in point_parts:
        sign = (p.bytes > 0) - (p.bytes < 0)
        if sign == 0 and p.exposed_ns:
            sign = (p.exposed_ns > 0) - (p.exposed_ns < 0)
        key = (p.cause, p.phase, p.collective, p.group, sign)
        entry = acc.setdefault(key, [0, 0, 0 if p.exposed_ns is not None else None])
        entry[0] += 1
        entry[1] += p.bytes
        if entry[2] is not None:
            entry[2] = None if p.exposed_ns is None else entry[2] + p.exposed_ns
    rows = [CauseRow(c, ph, coll, g, n, b, e) for (c, ph, coll, g, _), (n, b, e) in acc.items()]
    order = catalog.order()
    rows.sort(key=lambda r: (order.get(r.cause, len(order)), _PHASES.index(r.phase) if r.phase in _PHASES
                             else len(_PHASES), r.collective, r.group, -r.bytes))
    if total_bytes is not None:
        rest_bytes = total_bytes - sum(r.bytes for r in rows)
        rest_ns = None
        if total_exposed_ns is not None and all(r.exposed_ns is not None for r in rows):
            rest_ns = total_exposed_ns - sum(r.exposed_ns for r in rows)
        if rest_bytes or rest_ns:
            rows.append(CauseRow("unattributed", "", "", "", 0, rest_bytes, rest_ns))
    return rows


@dataclass
class PointCauses:
    """One AICB point's causes and the totals they add up to (None: unknown)."""

    point: PointRow
    partner: str | None
    rows: list[CauseRow]
    total_bytes: int | None
    total_exposed_ns: int | None
