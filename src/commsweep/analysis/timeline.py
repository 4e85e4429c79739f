"""One simulated iteration laid out in time, per transformer layer, with the audit beside it.

SimAI's analytical model runs a workload's rows one after the other: forward, rows
0..N-1, each its compute then its exposed forward communication; backward, rows N-1..0,
each its input-gradient compute and communication, then its weight-gradient compute and
communication. The per-row times come from the simulation's ``EndToEnd.csv`` (SimAI's
format, in microseconds: both simulator backends write it). Rows are gathered into lanes
by the audit's structural units (``audit.segment``): one lane per transformer layer, one
for the embedding, the output layer, the loss, and one for the once-per-iteration rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import InputError
from ..simulate import endtoend
from ..simulate.endtoend import RowTimes
from ..workload import format as wf
from . import audit
from .audit_csv import AuditRow

ITERATION_LANE = "per iteration"
_TAIL_LANES = {"output_layer": "output layer", "loss": "loss", "embedding_norm": "embedding_norm"}


@dataclass(frozen=True)
class Event:
    lane: str
    start_us: float
    duration_us: float
    what: str  # "compute" or a group name (TP, DP, EP, DP_EP)
    backward: bool


def read_endtoend(path: str | Path) -> tuple[RowTimes, ...]:
    """The per-row times of a SimAI ``EndToEnd.csv`` (either backend's; strictly parsed)."""
    return endtoend.read(path).rows


def simulate(workload: wf.Workload, network, ratios=None) -> tuple[RowTimes, ...]:
    """The rows' times from the built-in simulation engine (SimAI's model, ``fix`` mode),
    as its EndToEnd.csv prints them (whole microseconds, as SimAI's own run would give)."""
    from ..simulate.engine import simulate as run

    return endtoend.parse(run(workload, network, ratios).endtoend, source="<simulation>").rows


def lane_of(unit: audit.Unit) -> str:
    if unit.layer is not None:
        return f"layer {unit.layer}"
    if unit.micro_batch is None:
        return ITERATION_LANE
    if unit.kind == "embedding":
        return "embedding"
    return _TAIL_LANES.get(unit.kind, unit.kind)


def lane_of_label(label: str) -> str:
    """The lane of an audit CSV's ``layer`` label (``mb0/layer3/attention`` -> ``layer 3``)."""
    parts = label.split("/")
    for part in parts:
        if part.startswith("layer") and part[5:].isdigit():
            return f"layer {int(part[5:])}"
    if parts[0] == audit.ITERATION:
        return ITERATION_LANE
    kind = parts[-1]
    return "embedding" if kind == "embedding" else _TAIL_LANES.get(kind, kind)


def lanes(units: list[audit.Unit], extra: Iterable[str] = ()) -> list[str]:
    """Lanes top to bottom: per iteration, embedding, layers in order, output layer, loss, others.

    ``extra`` adds lanes that have no row (a module the workload lacks, from the audit).
    """
    seen = {lane_of(u) for u in units} | set(extra)
    layers = sorted((lane for lane in seen if lane.startswith("layer ")), key=lambda s: int(s.split()[1]))
    head = [lane for lane in (ITERATION_LANE, "embedding") if lane in seen]
    tail = [lane for lane in _TAIL_LANES.values() if lane in seen]
    rest = sorted(seen - set(head) - set(layers) - set(tail))
    return head + layers + tail + rest


def events(workload: wf.Workload, times: tuple[RowTimes, ...], units: list[audit.Unit]) -> list[Event]:
    """The iteration's compute and exposed communication, in the order SimAI runs them."""
    if len(times) != len(workload.rows):
        raise InputError(
            f"the simulation has {len(times)} rows but the workload {len(workload.rows)}: not its simulation"
        )
    out: list[Event] = []
    clock = 0.0

    def add(lane: str, duration: float, what: str, backward: bool) -> None:
        nonlocal clock
        if duration > 0:
            out.append(Event(lane, clock, duration, what, backward))
            clock += duration

    def group(row: wf.Row, phase: str) -> str:
        return wf.comm_group(row.comm(phase)[0], phase) or "TP"

    for row, t, unit in zip(workload.rows, times, units):
        lane = lane_of(unit)
        add(lane, t.fwd_compute, "compute", False)
        add(lane, t.fwd_exposed, group(row, "fwd"), False)
    for row, t, unit in reversed(list(zip(workload.rows, times, units))):
        lane = lane_of(unit)
        add(lane, t.ig_compute, "compute", True)
        add(lane, t.ig_exposed, group(row, "ig"), True)
        add(lane, t.wg_compute, "compute", True)
        add(lane, t.wg_exposed, group(row, "wg"), True)
    return out


def audit_by_lane(findings: list[AuditRow]) -> dict[str, tuple[int, int]]:
    """Per lane: (bytes short of Megatron, bytes in excess) from an audit CSV's rows."""
    out: dict[str, list[int]] = {}
    for f in findings:
        entry = out.setdefault(lane_of_label(f.layer), [0, 0])
        delta = f.delta_bytes
        if delta < 0:
            entry[0] -= delta
        else:
            entry[1] += delta
    return {lane: (short, extra) for lane, (short, extra) in out.items()}


def title(point) -> str:
    """A sweep point (``sweep.Point``) as the timeline's title says it, in words."""
    made = ("Megatron schedule" if point.schedule == "megatron" else "AICB") + (", AIOB times" if point.aiob else "")
    words = [point.model, f"{point.world_size} GPUs", f"TP {point.tp}", f"PP {point.pp}"]
    words += [f"EP {point.ep}"] if point.ep > 1 else []
    words += ["SP on" if point.sp else "SP off", made, f"network {point.network}"]
    if point.tp_overlap is not None:
        words.append(f"TP overlap {point.tp_overlap:g}")
    return ", ".join(words)
