"""The tidy per-collective table of a simulation: one line per collective of one iteration.

Columns: ``row`` (0-based workload row), ``layer`` (its name), ``phase`` (fwd, ig, wg),
``collective`` (allreduce, allgather, reducescatter, alltoall), ``group`` (TP, DP, EP,
DP_EP, or NONE for a type suffix SimAI does not know), ``group_size`` (the rank count
SimAI times it with), ``bytes`` (the size SimAI uses: float32-rounded, forward sizes of
1..4095 raised to 4096), ``time_us`` (before overlap) and ``exposed_us`` (after).

The built-in engine writes exact times (whole ns, so three decimals); from a SimAI run
they are the EndToEnd.csv's values, rounded to whole us.
"""

from __future__ import annotations

import io
import re
from dataclasses import astuple, dataclass, fields

from ..errors import InputError

COLUMNS = ("row", "layer", "phase", "collective", "group", "group_size", "bytes", "time_us", "exposed_us")


@dataclass(frozen=True)
class CollectiveTime:
    row: int
    layer: str
    phase: str
    collective: str
    group: str
    group_size: int
    bytes: int
    time_us: str  # decimal text, kept exact
    exposed_us: str


def ns_text(ns: int) -> str:
    """Whole nanoseconds as exact microseconds: 1234567 -> '1234.567'."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def to_csv(table: list[CollectiveTime]) -> str:
    import csv

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(astuple(c) for c in table)
    return buf.getvalue()


_PLAIN = re.compile(r'[^,"\r\n]*')


def csv_field(text: str) -> str:
    """One CSV field as the csv module writes it (quoted only when it must be)."""
    return text if _PLAIN.fullmatch(text) else '"' + text.replace('"', '""') + '"'


def read_csv(text: str, *, source: str = "<collectives.csv>") -> list[CollectiveTime]:
    import csv

    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(header) != COLUMNS:
        raise InputError(f"expected the header {','.join(COLUMNS)}", file=source, line=1)
    out = []
    types = {f.name: f.type for f in fields(CollectiveTime)}
    for n, cells in enumerate(reader, start=2):
        if len(cells) != len(COLUMNS):
            raise InputError(f"expected {len(COLUMNS)} fields, got {len(cells)}", file=source, line=n)
        values = {}
        for name, cell in zip(COLUMNS, cells):
            if types[name] == "int":
                try:
                    values[name] = int(cell)
                except ValueError:
                    raise InputError(f"expected an integer, got {cell!r}", file=source, line=n, field=name) from None
            else:
                values[name] = cell
        out.append(CollectiveTime(**values))
    return out
