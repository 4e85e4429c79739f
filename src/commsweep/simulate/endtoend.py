"""SimAI's ``<PREFIX>EndToEnd.csv``: the exact writer and a strict parser.

Layout (``workload/Layer.cc`` report, ``CSVWriter.cc``), every line ending in ``\\n``::

    File name, Expose DP comm, Expose DP_EP comm, Expose TP comm, Expose_EP_comm, Expose_PP_comm, bubble time, total comp, total exposed comm, Total time
    <name>, V (P%), V (P%), V (P%), V (P%), V (P%), V (P%), V (P%), V (P%), TOTAL
    layer_name,Analytical_test,fwd compute,wg compute,ig compute,fwd exposed comm,wg exposed comm,ig exposed comm,fwd total comm,algbw,busbw,wg total comm,algbw,busbw,ig total comm,algbw,busbw
    <one line per workload row>

Times are microseconds printed with 0 decimals (round half to even; a non-finite
summary value prints ``NaN or Inf``); percentages and bandwidths (GiB/s) with 2, NaN as
``-nan``. ``<name>`` is the ``-r`` value after its last ``/``. A run that failed inside
SimAI's report leaves the row header and the rows before the failure, or nothing.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..base.cfloat import fixed
from ..base.errors import InputError
from ..base.files import read_text

SUMMARY_HEADER = (
    "File name, Expose DP comm, Expose DP_EP comm, Expose TP comm, Expose_EP_comm, Expose_PP_comm, "
    "bubble time, total comp, total exposed comm, Total time"
)
ROW_HEADER = (
    "layer_name,Analytical_test,fwd compute,wg compute,ig compute,fwd exposed comm,wg exposed comm,"
    "ig exposed comm,fwd total comm,algbw,busbw,wg total comm,algbw,busbw,ig total comm,algbw,busbw"
)
RUN_NAME = "Analytical_test"
# Summary components in file order, with the tidy names used by commsweep's tables.
COMPONENTS = ("exposed_dp", "exposed_dp_ep", "exposed_tp", "exposed_ep", "exposed_pp", "bubble", "compute", "exposed")
ROW_FIELDS = (
    "fwd_compute", "wg_compute", "ig_compute",
    "fwd_exposed", "wg_exposed", "ig_exposed",
    "fwd_comm", "fwd_algbw", "fwd_busbw",
    "wg_comm", "wg_algbw", "wg_busbw",
    "ig_comm", "ig_algbw", "ig_busbw",
)


# -- writing ----------------------------------------------------------------------------


def us(value: float) -> str:
    """A time in us as SimAI's ``format_value`` prints it."""
    return f"{value:.0f}" if math.isfinite(value) else "NaN or Inf"


def file_name(prefix: str) -> str:
    """The summary's ``File name``: the ``-r`` value after its last ``/``."""
    return prefix.rsplit("/", 1)[-1]


def summary_lines(prefix: str, components: tuple[float, ...], total: float) -> str:
    """The two summary lines (with their newlines) from the 8 unrounded components (us)."""
    parts = [file_name(prefix)]
    for value in components:
        pct = value / total * 100 if total else (math.nan if value == 0 or value != value else math.copysign(math.inf, value))
        parts.append(f"{us(value)} ({fixed(pct, 2)}%)")
    parts.append(us(total))
    return SUMMARY_HEADER + "\n" + ", ".join(parts) + "\n"


def render(prefix: str, row_lines: list[str], components: tuple[float, ...] | None, total: float | None) -> str:
    """The whole file: summary (when the run finished), row header, rows."""
    if not row_lines:
        body = ""
    else:
        body = ROW_HEADER + "\n" + "\n".join(row_lines) + "\n"
    if components is None:
        return body
    return summary_lines(prefix, components, total) + body


# -- reading ----------------------------------------------------------------------------


def _number(text: str, *, source, line: int, field: str) -> float:
    text = text.strip()
    if text in ("-nan", "nan", "NaN or Inf"):
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise InputError(f"expected a number, got {text!r}", file=source, line=line, field=field) from None


class RowTimes:
    """One row line: its name and 15 values (us, GiB/s); NaN where SimAI printed -nan."""

    __slots__ = ("name", "values", "text")

    def __init__(self, name: str, values: tuple[float, ...], text: tuple[str, ...]) -> None:
        self.name = name
        self.values = values
        self.text = text  # the 15 fields as printed

    def __repr__(self) -> str:
        return f"RowTimes({self.name!r}, {self.text!r})"

    def __getattr__(self, item: str) -> float:
        try:
            return self.values[ROW_FIELDS.index(item)]
        except ValueError:
            raise AttributeError(item) from None


class EndToEnd:
    """A parsed EndToEnd.csv. ``complete`` is False when the summary lines are missing."""

    def __init__(self, file_name: str | None, components: dict[str, float], percents: dict[str, float],
                 total: float | None, rows: tuple[RowTimes, ...], *, complete: bool, empty: bool) -> None:
        self.file_name = file_name
        self.components = components  # COMPONENTS -> us (as printed, rounded)
        self.percents = percents
        self.total = total
        self.rows = rows
        self.complete = complete
        self.empty = empty


def parse(text: str, *, source: str | Path = "<EndToEnd.csv>") -> EndToEnd:
    """Parse SimAI's EndToEnd.csv (complete, truncated or empty), naming line and field on errors."""
    if text == "":
        return EndToEnd(None, {}, {}, None, (), complete=False, empty=True)
    if not text.endswith("\n"):
        raise InputError("the last line has no newline: the file is cut short", file=source, line=text.count("\n") + 1)
    lines = text[:-1].split("\n")
    index = 0
    name, components, percents, total = None, {}, {}, None
    complete = lines[0] == SUMMARY_HEADER
    if complete:
        if len(lines) < 2:
            raise InputError("summary header without its values line", file=source, line=2)
        name, components, percents, total = _parse_summary(lines[1], source=source)
        index = 2
    if index >= len(lines):
        if complete:
            return EndToEnd(name, components, percents, total, (), complete=True, empty=False)
        raise InputError("expected the row header", file=source, line=index + 1)
    if lines[index] != ROW_HEADER:
        what = "the summary header or the row header" if index == 0 else "the row header"
        raise InputError(f"expected {what}, got {lines[index][:60]!r}", file=source, line=index + 1)
    rows = []
    for n, line in enumerate(lines[index + 1:], start=index + 2):
        cells = line.split(",")
        if len(cells) < 2 + len(ROW_FIELDS):
            raise InputError(f"expected {2 + len(ROW_FIELDS)} fields, got {len(cells)}", file=source, line=n)
        # A layer name could hold a comma; the 16 fields after it cannot.
        tail = cells[-(1 + len(ROW_FIELDS)):]
        row_name = ",".join(cells[: len(cells) - len(tail)])
        if tail[0] != RUN_NAME:
            raise InputError(f"expected {RUN_NAME!r}, got {tail[0]!r}", file=source, line=n, field="Analytical_test")
        fields = tuple(tail[1:])
        values = tuple(_number(v, source=source, line=n, field=f) for v, f in zip(fields, ROW_FIELDS))
        rows.append(RowTimes(row_name, values, fields))
    return EndToEnd(name, components, percents, total, tuple(rows), complete=complete, empty=False)


def _parse_summary(line: str, *, source) -> tuple[str, dict, dict, float]:
    parts = line.split(", ")
    if len(parts) < 1 + len(COMPONENTS) + 1:
        raise InputError(f"expected {2 + len(COMPONENTS)} summary values, got {len(parts)}", file=source, line=2)
    tail = parts[-(len(COMPONENTS) + 1):]
    name = ", ".join(parts[: len(parts) - len(tail)])
    components, percents = {}, {}
    for key, cell in zip(COMPONENTS, tail[:-1]):
        value, _, pct = cell.partition(" (")
        if not pct.endswith("%)"):
            raise InputError(f"expected 'VALUE (P%)', got {cell!r}", file=source, line=2, field=key)
        components[key] = _number(value, source=source, line=2, field=key)
        percents[key] = _number(pct[:-2], source=source, line=2, field=key)
    total = _number(tail[-1], source=source, line=2, field="total")
    return name, components, percents, total


def read(path: str | Path) -> EndToEnd:
    return parse(read_text(path), source=path)
