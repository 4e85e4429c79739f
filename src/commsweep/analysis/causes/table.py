"""difference_by_cause.csv: its columns, its writer, the assembly of a sweep's parts, and its
typed reader (``Row``), for the landing page and the figure.

Per AICB point and cause (and phase, collective, group and sign, never netted), the rows
add up exactly to the point's difference from its Megatron point: ``bytes``, the payload
SimAI executes, and ``exposed_us``, the simulated exposed communication (its collectives'
exposed times plus the exposed pipeline time); each row carries its cause's explanation
(``catalog.yaml``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ...base.errors import InputError
from ...base.files import read_text
from ...setup.points import boolean, read_points
from . import catalog
from .difference import PointCauses

COLUMNS = (
    "point", "model", "tp", "sp", "aiob", "path", "cause", "phase", "collective", "group",
    "rows", "bytes", "exposed_us", "explanation",
)


def _us(ns: int | None) -> str:
    if ns is None:
        return ""
    from ...simulate.collectives import ns_text

    return ("-" if ns < 0 else "") + ns_text(abs(ns))


def to_csv(found: Iterable[PointCauses]) -> str:
    """difference_by_cause.csv of some points' causes, each row with its cause's explanation."""
    causes = catalog.causes()
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for pc in found:
        p = pc.point
        base = [p.point, p.model, p.cells["tp"], p.cells["sp"], p.cells["aiob"], p.variant]
        for r in pc.rows:
            writer.writerow(base + [r.cause, r.phase, r.collective, r.group, r.rows, r.bytes, _us(r.exposed_ns),
                                    causes[r.cause].explanation])
    return buf.getvalue()


def assemble(sweep_csv: Path, parts: Iterable[str | Path]) -> str:
    """``difference_by_cause.csv`` from tables of parts of the sweep (``to_csv`` of
    ``points_causes``, one per batch of points): their rows, point by point in the sweep's
    order. A part that is a failed job's marker (``status.MARKER``) is an error naming it."""
    from ...base.status import MARKER

    rows_of: dict[str, list[list[str]]] = {}
    for part in parts:
        text = read_text(part)
        if text.startswith(MARKER):
            raise InputError(text.strip(), file=part, line=1)
        reader = csv.reader(io.StringIO(text))
        if tuple(next(reader, ())) != COLUMNS:
            raise InputError(f"expected the columns {','.join(COLUMNS)}", file=part, line=1)
        for row in reader:
            rows_of.setdefault(row[0], []).append(row)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for point in read_points(sweep_csv):
        writer.writerows(rows_of.get(point.point, ()))
    return buf.getvalue()


# -- reading the table back ----------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """A row of difference_by_cause.csv, typed."""

    point: str
    model: str
    tp: int
    sp: bool
    aiob: bool
    path: str
    cause: str
    phase: str
    collective: str
    group: str
    rows: int
    bytes: int
    exposed_us: float | None
    explanation: str


def read_csv(path: Path) -> list[Row]:
    """difference_by_cause.csv as written by ``to_csv``, naming the line and field of anything else."""
    text = read_text(path)
    reader = csv.DictReader(io.StringIO(text))
    if tuple(reader.fieldnames or ()) != COLUMNS:
        raise InputError(f"expected the columns {','.join(COLUMNS)}", file=path, line=1)
    out = []
    for n, r in enumerate(reader, start=2):
        try:
            out.append(Row(
                point=r["point"], model=r["model"], tp=int(r["tp"]), sp=boolean(r["sp"]), aiob=boolean(r["aiob"]),
                path=r["path"], cause=r["cause"], phase=r["phase"], collective=r["collective"], group=r["group"],
                rows=int(r["rows"]), bytes=int(r["bytes"]),
                exposed_us=float(r["exposed_us"]) if r["exposed_us"] else None, explanation=r["explanation"],
            ))
        except ValueError as err:
            raise InputError(f"bad value ({err})", file=path, line=n) from None
    return out
