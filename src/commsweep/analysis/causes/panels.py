"""Per setting, what the difference-by-cause figure and the landing page show: each AICB
path's point on the sweep's first network and its rows of difference_by_cause.csv.

Pure data shaping, no drawing: the figure (``plots``) and the landing page (``answer``)
call ``panels`` on the rows ``table.read_csv`` gives.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ...setup.points import PointRow
from .table import Row


# The axes of a setting as the figure and the landing page show it (the network and the
# TP overlap ratio only change times: those use the sweep's first of each).
PANEL_AXES = ("model", "world_size", "tp", "pp", "ep", "sp", "micro_batch", "global_batch", "seq_length",
              "recompute")
# With a CP axis (``points.OPTIONAL_AXES``), CP and its comm type are part of a setting too.
CP_AXES = ("cp", "cp_comm_type")
# So are FSDP and FP8 parameter gathers with their axes.
FSDP_AXES = ("fsdp", "fp8_param_gather")
# With the buckets' axes, their overlap and size are part of a setting too.
BUCKET_AXES = ("overlap_grad_reduce", "overlap_param_gather", "ddp_bucket_size")
_AXIS_LABELS = {"world_size": "world {}", "pp": "PP {}", "ep": "EP {}", "micro_batch": "micro-batch {}",
                "global_batch": "global batch {}", "seq_length": "sequence {}"}


@dataclass
class Panel:
    """One setting: each AICB path's point on the first network and its cause rows."""

    setting: tuple
    label: str
    network: str
    points: dict[str, str] = field(default_factory=dict)  # path -> point key
    rows: dict[str, list[Row]] = field(default_factory=dict)  # path -> its rows

    def total(self, path: str, what: str = "bytes") -> float:
        """The path's net difference: bytes, or exposed us."""
        return sum((r.bytes if what == "bytes" else (r.exposed_us or 0.0)) for r in self.rows.get(path, []))


def setting_label(point: PointRow, varying: Iterable[str] = ()) -> str:
    """'gpt-7b, TP 2, SP off', plus the other axes that vary across the sweep."""
    parts = [point.model, f"TP {point.tp}", "SP on" if point.sp else "SP off"]
    for axis in varying:
        if axis in _AXIS_LABELS:
            parts.append(_AXIS_LABELS[axis].format(point.cells[axis]))
        elif axis == "recompute":
            parts.append("recompute" if point.recompute else "no recompute")
    if point.cp is not None:
        parts.append("no CP" if point.cp == 1 else f"CP {point.cp} ({point.cp_comm_type})")
    if point.fsdp is not None:
        parts.append("no FSDP" if point.fsdp == "none" else f"FSDP {point.fsdp}")
    if point.fp8_param_gather:
        parts.append("FP8 gathers")
    if point.overlap_grad_reduce is not None:
        overlapped = " and param-gather" if point.overlap_param_gather else ""
        size = "" if point.ddp_bucket_size is None else f", buckets of {point.ddp_bucket_size:,}"
        parts.append(f"grad-reduce{overlapped} overlap{size}" if point.overlap_grad_reduce else "no DP overlap")
    return ", ".join(parts)


def _setting(p: PointRow) -> tuple:
    """A point's setting as the panels tell settings apart: ``PANEL_AXES``, then CP's, FSDP's and
    the buckets'."""
    return tuple(p.cells[a] for a in PANEL_AXES) + tuple(p.cells.get(a, "") for a in
                                                         (*CP_AXES, *FSDP_AXES, *BUCKET_AXES))


def panels(rows: list[Row], points: dict[str, PointRow]) -> list[Panel]:
    """The settings of the AICB points in ``rows`` (``points``: the points table by key),
    ordered by model, SP and TP, each with its paths' rows on the first network."""
    aicb = [points[p] for p in dict.fromkeys(r.point for r in rows) if p in points]
    if not aicb:
        return []
    table = list(points.values())
    network = table[0].network
    overlap = table[0].tp_overlap
    varying = [a for a in PANEL_AXES if a not in ("model", "tp", "sp") and len({p.cells[a] for p in aicb}) > 1]
    by_point: dict[str, list[Row]] = {}
    for r in rows:
        by_point.setdefault(r.point, []).append(r)
    out: dict[tuple, Panel] = {}
    for p in aicb:
        if p.network != network or p.tp_overlap != overlap:
            continue
        setting = _setting(p)
        panel = out.setdefault(setting, Panel(setting, setting_label(p, varying), network))
        panel.points[p.variant] = p.point
        panel.rows[p.variant] = by_point.get(p.point, [])

    def order(panel: Panel) -> tuple:
        values = dict(zip((*PANEL_AXES, *CP_AXES, *FSDP_AXES, *BUCKET_AXES), panel.setting))
        rest = tuple(int(v) if v.isdigit() else v for a, v in values.items() if a not in ("model", "sp", "tp"))
        return (values["model"], values["sp"], int(values["tp"]), rest)

    return sorted(out.values(), key=order)
