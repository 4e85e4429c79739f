"""The sweep's summary table: one row per point x phase x collective x group.

Each row carries the point's parameters (the columns of the points table), its status
and the volume columns, so the table can be filtered and pivoted without joins. A point
whose stage failed (see ``commsweep.base.status``) has one row, ``status`` saying
``failed: <stage>: <error>`` and the other columns empty; the other points are complete.

Then the simulation (the point's ``times.csv``, see ``simulate.times``): ``time_us`` and
``exposed_us``, the simulated time of the row's collectives before and after overlap
(summed; the ``pp`` row has SimAI's exposed PP time only), and the point's iteration as
SimAI's summary line gives it (whole us): ``sim_total_us``, exposed ``sim_dp_us``, ``sim_dp_ep_us``,
``sim_tp_us``, ``sim_ep_us``, ``sim_pp_us``, ``sim_bubble_us``, ``sim_compute_us`` and
``sim_exposed_us``. They are empty for a point without a (complete) simulation.

Last, ``run``: the run the table belongs to (``provenance.Run.id``; ``results/run.json``
says what made it), so a table passed on still names its sweep.

This module is the table's one writer (``summarize``) and its one reader (``read``, typed
``Row``s): the comparison, the figures and the packet-level comparison all read it here.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from ..base import paths, status
from ..base.errors import InputError
from ..base.files import read_text
from ..setup.points import MEMORY_COLUMNS, OPTIONAL_AXES, TABLE_COLUMNS, PointRow, read_points, table_columns
from ..simulate import times as sim_times
from . import volumes

SIM_COMPONENTS = {
    "sim_dp_us": "exposed_dp", "sim_dp_ep_us": "exposed_dp_ep", "sim_tp_us": "exposed_tp", "sim_ep_us": "exposed_ep",
    "sim_pp_us": "exposed_pp", "sim_bubble_us": "bubble", "sim_compute_us": "compute", "sim_exposed_us": "exposed",
}
SIM_COLUMNS = ("time_us", "exposed_us", "sim_total_us", *SIM_COMPONENTS)
# The summary's per-point columns -> their keys in a point's times file (``simulate.times``).
SIM_KEYS = {"sim_total_us": sim_times.ITERATION["total"],
            **{column: sim_times.ITERATION[component] for column, component in SIM_COMPONENTS.items()}}
COLUMNS = (*TABLE_COLUMNS, *MEMORY_COLUMNS, "status", *volumes.COLUMNS, *SIM_COLUMNS, "run")


def summarize(sweep_csv: Path, files: paths.PointFiles, run: str = "") -> str:
    """The summary table of the sweep's points, read from their ``files`` (see ``paths.PointFiles``),
    every row naming the ``run``."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    points = read_points(sweep_csv)
    # COLUMNS, with the optional axes of the sweep after the points table's columns.
    point_columns = table_columns(points)
    columns = (*point_columns, *COLUMNS[len(TABLE_COLUMNS):])
    writer.writerow(columns)
    for point in points:
        base = [point.cells[c] for c in point_columns] + [point.cells.get(c, "") for c in MEMORY_COLUMNS]
        failed = status.failures(files, point.workload, point.point)
        if failed:
            writer.writerow(base + [f"failed: {status.reasons(failed)}"] + [""] * (len(columns) - len(base) - 2)
                            + [run])
            continue
        path = files.volumes(point.workload)
        if path is None:
            raise InputError(f"no volumes file given for workload {point.workload}", file=sweep_csv)
        table = volumes.read(path)
        times, totals = simulated(files.times(point.point))
        for v in table:
            if v.phase == "pp":
                time, exposed = "", totals.get("sim_pp_us", "")
            else:
                time, exposed = times.get((v.phase, v.collective, v.group), ("", ""))
            sim = [totals.get(c, "") for c in SIM_COLUMNS[2:]]
            writer.writerow(base + ["ok"] + [getattr(v, c) for c in volumes.COLUMNS] + [time, exposed] + sim + [run])
    return buf.getvalue()


def simulated(path: Path | None) -> tuple[dict[tuple[str, str, str], tuple[str, str]], dict[str, str]]:
    """A point's simulated us per (phase, collective, group), and its summary line (us).

    Read from the point's times file (``simulate.times``), never from its EndToEnd.csv or
    collectives.csv, so a sweep of thousands of points is summarized in seconds. Both are
    empty for a point without a simulation (``path`` None or absent).
    """
    if path is None or not path.exists():
        return {}, {}
    parsed = sim_times.read(path)
    totals = {column: parsed.iteration[key] for column, key in SIM_KEYS.items() if key in parsed.iteration}
    return parsed.collective, totals


# -- the reader ------------------------------------------------------------------------------


class Row(NamedTuple):
    """A row of the summary table, typed (a tuple: a sweep's table has tens of thousands).

    A complete point (``status`` ok) has one row per volume row (``volume``), with its
    collectives' simulated ``time_us`` and ``exposed_us`` (None where there are none: the
    ``pp`` row's time, a point not simulated); a failed point has one row, ``volume`` None.
    ``iteration``: the point's ``SIM_COLUMNS[2:]`` that have a value (the same on each of
    its rows). Numbers are as written: an int when the text is one (SimAI's whole us), else
    a float, so the tables made from them print what they printed from the text.
    """

    point: PointRow
    status: str = "ok"
    volume: volumes.Volume | None = None
    time_us: float | int | None = None
    exposed_us: float | int | None = None
    iteration: Mapping[str, float | int] = MappingProxyType({})
    run: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def value(self, column: str):
        """The row's value in ``column`` of the table (None where the cell is empty)."""
        if self.volume is None and column in volumes.COLUMNS:
            return None
        return self.getter(column)(self)

    @staticmethod
    def getter(column: str) -> Callable[[Row], Any]:
        """What ``value(column)`` reads, as one function, to read a column of a complete
        point's rows (a failed point's row has no volume to read)."""
        if column in _POINT_FIELDS:
            return attrgetter(f"point.{column}")
        if column in volumes.COLUMNS:
            return attrgetter(f"volume.{column}")
        if column in SIM_COLUMNS[2:]:
            return lambda row: row.iteration.get(column)
        if column in ("time_us", "exposed_us", "status", "run"):
            return attrgetter(column)
        raise KeyError(column)


_POINT_FIELDS = frozenset((*TABLE_COLUMNS, *OPTIONAL_AXES, *MEMORY_COLUMNS))


def number(text: str) -> float | int | None:
    """A number cell as written: None when empty, an int when the text is one, else a float
    (ValueError for anything else)."""
    if text == "":
        return None
    value = float(text)
    return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value


@dataclass(frozen=True)
class Summary:
    """The summary table: its ``columns`` (the header) and its ``rows``."""

    columns: tuple[str, ...]
    rows: list[Row]


def read(path: str | Path) -> Summary:
    """A summary table written by ``summarize``; an ``InputError`` naming the file, line and
    field of anything else."""
    reader = csv.reader(io.StringIO(read_text(path)))
    header = tuple(next(reader, ()))
    optional = header[len(TABLE_COLUMNS):len(header) - len(COLUMNS) + len(TABLE_COLUMNS)]
    after = header[len(TABLE_COLUMNS) + len(optional):]
    if (header[:len(TABLE_COLUMNS)] != TABLE_COLUMNS or after != COLUMNS[len(TABLE_COLUMNS):]
            or tuple(a for a in OPTIONAL_AXES if a in optional) != optional):
        raise InputError(f"not a summary table: expected the columns {','.join(COLUMNS)} "
                         f"(with the sweep's optional axes {', '.join(OPTIONAL_AXES)} after {TABLE_COLUMNS[-1]})",
                         file=path, line=1)
    point_end = len(TABLE_COLUMNS) + len(optional) + len(MEMORY_COLUMNS)
    point_columns = header[:point_end]
    status_at = point_end
    volume_at = status_at + 1
    times_at = volume_at + len(volumes.COLUMNS)
    iteration_columns = SIM_COLUMNS[2:]
    points: dict[tuple[str, ...], PointRow] = {}
    # A point's iteration repeats on each of its rows: parsed once per distinct text.
    iterations: dict[tuple[str, ...], dict[str, float | int]] = {}
    rows = []
    for line, cells in enumerate(reader, start=2):
        if len(cells) != len(header):
            raise InputError(f"expected {len(header)} fields, got {len(cells)}", file=path, line=line)
        key = tuple(cells[:point_end])
        point = points.get(key)
        if point is None:
            point = points[key] = PointRow.from_cells(dict(zip(point_columns, key)), file=path, line=line)
        status_text = cells[status_at]
        column = ""
        try:
            volume = None
            if status_text == "ok":
                ints = []
                for i, column in enumerate(volumes.COLUMNS[3:], start=volume_at + 3):
                    ints.append(int(cells[i]))
                volume = volumes.Volume(cells[volume_at], cells[volume_at + 1], cells[volume_at + 2], *ints)
            column = "time_us"
            time_us = number(cells[times_at])
            column = "exposed_us"
            exposed_us = number(cells[times_at + 1])
            text = tuple(cells[times_at + 2:times_at + 2 + len(iteration_columns)])
            iteration = iterations.get(text)
            if iteration is None:
                iteration = {}
                for column, cell in zip(iteration_columns, text):
                    value = number(cell)
                    if value is not None:
                        iteration[column] = value
                iterations[text] = iteration
        except ValueError as err:
            raise InputError(f"expected a number ({err})", file=path, line=line, field=column) from None
        rows.append(Row(point, status_text, volume, time_us, exposed_us, iteration, cells[-1]))
    return Summary(header, rows)
