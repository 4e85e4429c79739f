"""The sweep's summary table: one row per point x phase x collective x group.

Each row carries the point's parameters (the columns of the points table), its status
and the volume columns, so the table can be filtered and pivoted without joins. A point
whose stage failed (see ``commsweep.status``) has one row, ``status`` saying
``failed: <stage>: <error>`` and the volume columns empty; the other points are complete.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from .. import paths, status
from ..errors import InputError
from ..sweep import TABLE_COLUMNS
from . import volumes

COLUMNS = (*TABLE_COLUMNS, "status", *volumes.COLUMNS)


def read_points(sweep_csv: Path) -> list[dict[str, str]]:
    """The valid points of a points table written by ``sweep.table_csv``."""
    with open(sweep_csv, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if rows and "point" not in rows[0]:
        raise InputError("not a points table (no 'point' column)", file=sweep_csv, line=1)
    return [r for r in rows if r.get("status", "ok") == "ok"]


def summarize(sweep_csv: Path, results: Path) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for point in read_points(sweep_csv):
        base = [point[c] for c in TABLE_COLUMNS]
        failed = status.failures(results, point["workload"], point["point"])
        if failed:
            writer.writerow(base + [f"failed: {status.reasons(failed)}"] + [""] * len(volumes.COLUMNS))
            continue
        table = volumes.read_csv(paths.volumes_file(results, point["workload"]).read_text(encoding="utf-8"))
        for v in table:
            writer.writerow(base + ["ok"] + [getattr(v, c) for c in volumes.COLUMNS])
    return buf.getvalue()
