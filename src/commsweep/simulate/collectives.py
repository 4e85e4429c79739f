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
from collections import namedtuple

COLUMNS = ("row", "layer", "phase", "collective", "group", "group_size", "bytes", "time_us", "exposed_us")


# A named tuple: row, layer, phase, collective, group, group_size (int), bytes (int),
# time_us and exposed_us (decimal text, kept exact).
CollectiveTime = namedtuple("CollectiveTime", COLUMNS)


def ns_text(ns: int) -> str:
    """Whole nanoseconds as exact microseconds: 1234567 -> '1234.567'."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def read_exposed(path) -> dict[tuple[str, str, str, int], str]:
    """A point's collectives.csv as ``to_csv`` wrote it, reduced to what each distinct
    collective costs: (phase, collective, group, bytes) -> ``exposed_us`` (exact text).
    Within one point a collective's time depends on only those, so thousands of rows come
    down to a few dozen, each parsed once. An InputError names the file of another header
    or a bad row."""
    from ..base.errors import InputError
    from ..base.files import read_text

    header, _, body = read_text(path).partition("\n")
    if header != ",".join(COLUMNS):
        raise InputError(f"expected the header {','.join(COLUMNS)}", file=path, line=1)
    if '"' in body:  # a row name that needed quoting: the csv module's way
        import csv

        tails = {tuple(cells[2:]) for cells in csv.reader(io.StringIO(body)) if cells}
    else:
        tails = {tuple(line.split(",", 2)[2].split(",")) for line in body.split("\n") if line}
    out: dict[tuple[str, str, str, int], str] = {}
    for cells in tails:
        try:
            phase, collective, group, _, size, _, exposed = cells
            out[(phase, collective, group, int(size))] = exposed
        except ValueError:
            raise InputError(f"expected a row of {','.join(COLUMNS)}, got {','.join(cells)!r}", file=path) from None
    return out


def to_csv(table: list[CollectiveTime]) -> str:
    import csv

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(table)
    return buf.getvalue()


_PLAIN = re.compile(r'[^,"\r\n]*')


def csv_field(text: str) -> str:
    """One CSV field as the csv module writes it (quoted only when it must be)."""
    return text if _PLAIN.fullmatch(text) else '"' + text.replace('"', '""') + '"'
