"""Two sweeps' answers side by side: each point's difference by cause and totals, from two
results folders (``commsweep compare-sweeps A B``, ``make compare-sweeps A=... B=...``).

A sweep's answer is its ``difference_by_cause.csv`` (each AICB point's difference from its
Megatron point, by cause) and its ``summary.csv`` (each point's simulated totals). Two sweeps
of different settings (another network, another megatron-core release, another simulator
option) in two folders (the config's ``results``) answer the same question twice; this table
sets the answers beside each other, one row per point and measure, with B's value less A's:

* ``bytes`` and ``exposed_us`` of each cause (summed over the cause's rows of the point);
* ``sim_total_us`` and ``sim_exposed_us`` of each point (SimAI's iteration time and its exposed
  communication), and its ``payload_bytes`` (every collective's payload, summed).

A point in one sweep only has that sweep's value alone (``difference`` empty), so nothing is
dropped silently. The files are read as the pipeline writes them; a missing file or column, or
a value that is not a number, is an error naming the file, line and column.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import InputError
from ..base.paths import Layout

COLUMNS = ("point", "measure", "cause", "a", "b", "difference")
CAUSE_MEASURES = ("bytes", "exposed_us")
# Per point, the same on every row of the point in summary.csv (SimAI's summary line).
POINT_TOTALS = ("sim_total_us", "sim_exposed_us")
# Per point, summed over its rows.
POINT_SUMS = ("payload_bytes",)

Key = tuple[str, str, str]  # point, measure, cause ("" for a point's totals)


@dataclass(frozen=True)
class Answer:
    """One sweep's values by (point, measure, cause), in the order its files list them, and
    its points (a failed one too, which has no values)."""

    folder: str
    values: dict[Key, float]
    points: frozenset[str]


def _rows(path: Path, needed: tuple[str, ...]):
    """The rows of a results CSV with their line numbers; an error names a missing file or column."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file: is this a sweep's results folder, and did the sweep finish?",
                         file=path) from None
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in needed if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(f"no column {', '.join(missing)} (not written by commsweep?)", file=path, line=1)
    for row in reader:
        yield reader.line_num, row


def _number(path: Path, line: int, row: dict, column: str) -> float:
    try:
        return float(row[column])
    except (TypeError, ValueError):
        raise InputError(f"column {column}: not a number: {row[column]!r}", file=path, line=line) from None


def read_answer(folder: str | Path) -> Answer:
    """A sweep's answer from its results folder (its difference_by_cause.csv and summary.csv)."""
    layout = Layout(folder)
    values: dict[Key, float] = {}
    points: set[str] = set()
    causes = Path(layout.difference_by_cause())
    for line, row in _rows(causes, ("point", "cause", *CAUSE_MEASURES)):
        for measure in CAUSE_MEASURES:
            key = (row["point"], measure, row["cause"])
            values[key] = values.get(key, 0.0) + _number(causes, line, row, measure)
    summary = Path(layout.summary())
    for line, row in _rows(summary, ("point", "status", *POINT_TOTALS, *POINT_SUMS)):
        points.add(row["point"])
        if row["status"] != "ok":  # a failed point has no totals; the check names why
            continue
        for measure in POINT_TOTALS:
            values[(row["point"], measure, "")] = _number(summary, line, row, measure)
        for measure in POINT_SUMS:
            key = (row["point"], measure, "")
            values[key] = values.get(key, 0.0) + _number(summary, line, row, measure)
    return Answer(str(folder), values, frozenset(points | {key[0] for key in values}))


def _cell(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


def compare(a: Answer, b: Answer) -> str:
    """The table (CSV, ``COLUMNS``): every (point, measure, cause) of either sweep, A's order
    first, then those of B alone; ``difference`` is B less A where both have it."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    keys = list(a.values) + [k for k in b.values if k not in a.values]
    for key in keys:
        va, vb = a.values.get(key), b.values.get(key)
        difference = vb - va if va is not None and vb is not None else None
        writer.writerow([*key, _cell(va), _cell(vb), _cell(difference)])
    return out.getvalue()


def describe(a: Answer, b: Answer) -> str:
    """One line: how many points each sweep has, how many both, and how many differ."""
    points_a, points_b = a.points, b.points
    both = points_a & points_b
    differ = {k[0] for k in set(a.values) | set(b.values)
              if k[0] in both and a.values.get(k) != b.values.get(k)}
    return (f"{len(both)} point(s) in both sweeps ({len(differ)} differ), {len(points_a - points_b)} only in "
            f"{a.folder}, {len(points_b - points_a)} only in {b.folder}")
