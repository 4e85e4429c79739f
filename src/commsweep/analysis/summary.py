"""The sweep's summary table: one row per point x phase x collective x group.

Each row carries the point's parameters (the columns of the points table) followed by
the volume columns, so the table can be filtered and pivoted without joins.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from .. import paths
from ..errors import InputError
from ..sweep import TABLE_COLUMNS
from . import volumes

COLUMNS = (*TABLE_COLUMNS, *volumes.COLUMNS)


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
        table = volumes.read_csv(paths.volumes_file(results, point["workload"]).read_text(encoding="utf-8"))
        base = [point[c] for c in TABLE_COLUMNS]
        for v in table:
            writer.writerow(base + [getattr(v, c) for c in volumes.COLUMNS])
    return buf.getvalue()
