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
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ..base import paths, status
from ..base.errors import InputError
from ..setup.points import MEMORY_COLUMNS, TABLE_COLUMNS, read_points, table_columns
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
        table = volumes.read_csv(path.read_text(encoding="utf-8"))
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
