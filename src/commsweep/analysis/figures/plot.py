"""``commsweep plot KIND``: the module that draws each figure made from a sweep-wide table."""

from __future__ import annotations

from pathlib import Path

from . import (audit_by_kind, difference_by_cause, exposed_by_group, exposed_tp_by_overlap, names,
               tp_bytes_by_phase, volume_by_group, volume_by_tp)

# Each figure's drawing, by its name (names.FIGURES; the timeline has a command of its own).
DRAW = {
    names.VOLUME_BY_TP: volume_by_tp.draw,
    names.VOLUME_BY_GROUP: volume_by_group.draw,
    names.TP_BYTES_BY_PHASE: tp_bytes_by_phase.draw,
    names.EXPOSED_BY_GROUP: exposed_by_group.draw,
    names.AUDIT_BY_KIND: audit_by_kind.draw,
    names.DIFFERENCE_BY_CAUSE: difference_by_cause.draw,
    names.EXPOSED_TP_BY_OVERLAP: exposed_tp_by_overlap.draw,
}


def plot(kind: str, table: Path, output: Path, **options) -> None:
    """Draw the figure ``commsweep plot`` calls ``kind`` from its table into ``output`` (PNG)."""
    DRAW[names.by_kind(kind).name](table, output, **options)
