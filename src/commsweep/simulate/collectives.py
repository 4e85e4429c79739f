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
