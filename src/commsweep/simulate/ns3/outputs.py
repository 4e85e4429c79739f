"""The files a ``SimAI_simulator`` run writes in its working directory: strict readers, and the
checks that its totals add up.

``ncclFlowModel_EndToEnd.csv`` (``workload/Layer.cc`` report in NS-3 mode, SimAI cef83f9d)::

    File name, Expose DP comm, ... , Total time              the analytical file's summary header
    test1, V (P%), ... , TOTAL                                whole us (``std::fixed``, 0 decimals)
    layer_name,test1,fwd compute,...,busbw,workload finished at
    <one line per workload row: 15 values + the time the workload finished>
    SUM,test1,<the 9 time columns summed, NONE for the 6 bandwidths>
    total exposed comm,X,total comp,Y,total time,Z

Every number but the summary's is ``std::to_string`` of a double: 6 decimals, so whole
nanoseconds in us and ``-nan`` for a bandwidth of nothing; bandwidths are GiB/s. Unlike
the analytical file there is a SUM row and a totals row, each row ends with the same
"workload finished at" (the simulated time of the report, us), and the Total time is that
time: ``total time = total comp + total exposed comm``, the exposed part being whatever is
not compute (waits for send latency, queues and bubbles included). A run that never
reaches the report leaves the file empty; one killed during the report leaves it cut.

``<FCT_OUTPUT_FILE>`` (``qp_finish``, ``entry.h``): one line per finished RDMA queue pair
(a flow), ``sip dip sport dport size start_ns fct_ns standalone_fct_ns``, IPs in hex
(``0b00XX01``: node XX). ``<PFC_OUTPUT_FILE>`` (``get_pfc``, ``common.h``):
``time_ns node node_type ifindex type``, type 1 a pause, 0 a resume.
``ncclFlowModel_test1_dimension_utilization_<N>.csv``: ``time (us) ,dim1 util,dim2 util,``
every 10 us, ending in a ``,,`` line.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ...base.errors import InputError
from .. import endtoend as e2e

ENDTOEND = "ncclFlowModel_EndToEnd.csv"
RUN_NAME = "test1"
ROW_HEADER = e2e.ROW_HEADER.replace(e2e.RUN_NAME, RUN_NAME) + ",workload finished at"
TIME_FIELDS = tuple(f for f in e2e.ROW_FIELDS if not f.endswith(("algbw", "busbw")))
# The SUM row's 15 cells after "SUM,test1": the 9 times, NONE for the 6 bandwidths.
SUM_CELLS = tuple(f if f in TIME_FIELDS else None for f in e2e.ROW_FIELDS)
_FINISHED = re.compile(r"^all passes finished at time: (\d+)", re.M)
_TO_STRING = re.compile(r"-?(0|[1-9][0-9]*)\.[0-9]{6}")
# Summed doubles printed to 6 decimals: allow a few units in the last place per row.
_ULP = 1e-6


@dataclass(frozen=True)
class Row:
    """One workload row's line: name, the 15 values (NaN for ``-nan``) as numbers and as printed."""

    name: str
    values: tuple[float, ...]
    text: tuple[str, ...]
    finished_at: float

    def value(self, name: str) -> float:
        return self.values[e2e.ROW_FIELDS.index(name)]

    def us_text(self, name: str) -> str:
        """A time field as exact us with 3 decimals (whole ns): '1601.830000' -> '1601.830'."""
        text = self.text[e2e.ROW_FIELDS.index(name)]
        whole, _, frac = text.partition(".")
        if frac.strip("0")[3:]:
            raise ValueError(f"{name} {text} is not a whole number of ns")
        return f"{whole}.{(frac + '000')[:3]}"


@dataclass
class EndToEnd:
    """A parsed NS-3 EndToEnd.csv. ``complete``: summary, rows, SUM and totals are all there."""

    file_name: str | None = None
    components: dict[str, float] = field(default_factory=dict)  # e2e.COMPONENTS -> whole us
    percents: dict[str, float] = field(default_factory=dict)
    total: float | None = None  # the summary's Total time (whole us)
    rows: tuple[Row, ...] = ()
    sums: dict[str, float] = field(default_factory=dict)  # TIME_FIELDS -> us
    total_exposed: float | None = None
    total_compute: float | None = None
    total_time: float | None = None  # the totals row (us, ns precision)
    total_time_text: str | None = None
    complete: bool = False
    empty: bool = False

    def as_analytical(self) -> e2e.EndToEnd:
        """The same numbers in the analytical parser's shape (what the sweep's tables read)."""
        rows = tuple(e2e.RowTimes(r.name, r.values, r.text) for r in self.rows)
        return e2e.EndToEnd(self.file_name, self.components, self.percents, self.total, rows,
                            complete=self.complete, empty=self.empty)


def _num(text: str, *, source, line: int, field: str, strict: bool = True) -> float:
    if text in ("-nan", "nan"):
        return math.nan
    if text in ("inf", "-inf"):
        return math.inf if text == "inf" else -math.inf
    if strict and not _TO_STRING.fullmatch(text):
        raise InputError(f"expected a number with 6 decimals (std::to_string), got {text!r}", file=source,
                         line=line, field=field)
    try:
        return float(text)
    except ValueError:
        raise InputError(f"expected a number, got {text!r}", file=source, line=line, field=field) from None


def parse_endtoend(text: str, *, source: str | Path = ENDTOEND) -> EndToEnd:
    """Parse an NS-3 EndToEnd.csv, complete, cut or empty; anything else is an InputError
    naming the line and field."""
    if text == "":
        return EndToEnd(empty=True)
    if not text.endswith("\n"):
        raise InputError("the last line has no newline: the file is cut short", file=source,
                         line=text.count("\n") + 1)
    lines = text[:-1].split("\n")
    out = EndToEnd()
    index = 0
    if lines[0] == e2e.SUMMARY_HEADER:
        if len(lines) < 2:
            raise InputError("summary header without its values line", file=source, line=2)
        parsed = e2e.parse(f"{lines[0]}\n{lines[1]}\n", source=source)
        out.file_name, out.components, out.percents, out.total = (parsed.file_name, parsed.components,
                                                                 parsed.percents, parsed.total)
        index = 2
    if index >= len(lines) or lines[index] != ROW_HEADER:
        got = lines[index][:60] if index < len(lines) else "the end of the file"
        raise InputError(f"expected the NS-3 row header ({ROW_HEADER[:40]}...), got {got!r}", file=source,
                         line=index + 1)
    rows = []
    n = index + 2
    body = lines[index + 1:]
    for offset, line in enumerate(body):
        n = index + 2 + offset
        if line.startswith("SUM,"):
            out.sums = _sum_row(line, source=source, line=n)
            rest = body[offset + 1:]
            if not rest:
                break
            if len(rest) > 1:
                raise InputError("lines after the totals row", file=source, line=n + 2)
            out.total_exposed, out.total_compute, out.total_time, out.total_time_text = _totals(rest[0], source=source,
                                                                                                line=n + 1)
            break
        rows.append(_row(line, source=source, line=n))
    out.rows = tuple(rows)
    out.complete = out.total is not None and bool(out.sums) and out.total_time is not None
    return out


def _row(text: str, *, source, line: int) -> Row:
    n = line
    cells = text.split(",")
    width = 2 + len(e2e.ROW_FIELDS) + 1
    if len(cells) < width:
        raise InputError(f"expected {width} fields, got {len(cells)}", file=source, line=n)
    tail = cells[-(width - 1):]
    name = ",".join(cells[: len(cells) - len(tail)])
    if tail[0] != RUN_NAME:
        raise InputError(f"expected {RUN_NAME!r}, got {tail[0]!r}", file=source, line=n, field="test1")
    texts = tuple(tail[1:-1])
    values = tuple(_num(v, source=source, line=n, field=f) for v, f in zip(texts, e2e.ROW_FIELDS))
    finished = _num(tail[-1], source=source, line=n, field="workload finished at")
    return Row(name, values, texts, finished)


def _sum_row(text: str, *, source, line: int) -> dict[str, float]:
    cells = text.split(",")
    if len(cells) != 2 + len(SUM_CELLS) or cells[1] != RUN_NAME:
        raise InputError(f"expected SUM,{RUN_NAME} and {len(SUM_CELLS)} cells, got {len(cells)} fields", file=source,
                         line=line)
    sums = {}
    for cell, name in zip(cells[2:], SUM_CELLS):
        if name is None:
            if cell != "NONE":
                raise InputError(f"expected NONE, got {cell!r}", file=source, line=line, field="SUM")
        else:
            sums[name] = _num(cell, source=source, line=line, field=name)
    return sums


def _totals(text: str, *, source, line: int) -> tuple[float, float, float, str]:
    cells = text.split(",")
    labels = ("total exposed comm", "total comp", "total time")
    if len(cells) != 6 or tuple(cells[0::2]) != labels:
        raise InputError("expected 'total exposed comm,X,total comp,Y,total time,Z'", file=source, line=line)
    exposed, comp, total = (_num(v, source=source, line=line, field=k) for v, k in zip(cells[1::2], labels))
    return exposed, comp, total, cells[5]


def finished_at_ns(stdout: str) -> int | None:
    """The simulated time SimAI prints when the workload ends (``all passes finished at time: NS``)."""
    m = _FINISHED.search(stdout)
    return int(m.group(1)) if m else None


def inconsistencies(parsed: EndToEnd, *, rows: int | None = None, stdout: str | None = None) -> list[str]:
    """What does not add up in a complete file (each a sentence; empty when it all does).

    The SUM row is the sum of the rows; the totals row's compute is the SUM row's compute,
    its time its compute plus exposed and every row's "workload finished at"; the summary
    is the totals rounded; the workload has as many rows as the file; SimAI's stdout says
    the same end time.
    """
    out = []
    n = len(parsed.rows)
    if rows is not None and n != rows:
        out.append(f"{n} row line(s) for a workload of {rows} row(s)")
    tol = _ULP * (n + 2) + 1e-9
    for name in TIME_FIELDS:
        summed = sum(r.value(name) for r in parsed.rows)
        if abs(summed - parsed.sums.get(name, math.nan)) > tol or math.isnan(parsed.sums.get(name, math.nan)):
            out.append(f"SUM {name} is {parsed.sums.get(name)}, the rows add up to {summed:.6f}")
    compute = sum(parsed.sums.get(k, 0.0) for k in ("fwd_compute", "wg_compute", "ig_compute"))
    if parsed.total_compute is None or abs(compute - parsed.total_compute) > tol:
        out.append(f"total comp is {parsed.total_compute}, the SUM row's compute {compute:.6f}")
    if parsed.total_time is not None and parsed.total_exposed is not None and parsed.total_compute is not None:
        if abs(parsed.total_compute + parsed.total_exposed - parsed.total_time) > 3 * _ULP:
            out.append(f"total time {parsed.total_time} is not total comp {parsed.total_compute} + exposed "
                       f"{parsed.total_exposed}")
        off = [r.name for r in parsed.rows if abs(r.finished_at - parsed.total_time) > _ULP]
        if off:
            out.append(f"{len(off)} row(s) say the workload finished at another time than the total "
                       f"({parsed.total_time}): {', '.join(off[:5])}")
        for key, value in (("total", parsed.total_time), ("compute", parsed.total_compute),
                           ("exposed", parsed.total_exposed)):
            shown = parsed.total if key == "total" else parsed.components.get(key)
            if shown is None or abs(shown - value) > 0.5 + 1e-6:
                out.append(f"the summary's {key} {shown} is not the totals row's {value} rounded")
    if stdout is not None and parsed.total_time is not None:
        end = finished_at_ns(stdout)
        if end is None:
            out.append("SimAI's stdout has no 'all passes finished at time' line")
        elif abs(end / 1000 - parsed.total_time) > 0.0015:
            out.append(f"SimAI's stdout says the workload finished at {end} ns, the file {parsed.total_time} us")
    return out


# -- flows, PFC, utilisation -------------------------------------------------------------


class Flow(NamedTuple):
    """One finished RDMA queue pair (a named tuple: a run has tens of thousands)."""

    src: int  # node ids (from 11.0.XX.1)
    dst: int
    sport: int
    dport: int
    size: int
    start_ns: int
    fct_ns: int
    standalone_fct_ns: int

    @property
    def slowdown(self) -> float:
        """The flow's completion time over its time alone on an idle network (1 = no contention)."""
        return self.fct_ns / self.standalone_fct_ns if self.standalone_fct_ns else math.inf


_FCT_LINE = re.compile(r"([0-9a-f]{8}) ([0-9a-f]{8}) ([0-9]+) ([0-9]+) ([0-9]+) ([0-9]+) ([0-9]+) ([0-9]+)")


def parse_fct(text: str, *, source: str | Path = "fct.txt") -> list[Flow]:
    """The flow-completion file, strictly (8 fields a line: two hex IPs, six whole numbers)."""
    flows = []
    match = _FCT_LINE.fullmatch
    for n, line in enumerate(text.splitlines(), start=1):
        m = match(line)
        if m is None:
            raise InputError("expected 'sip dip sport dport size start_ns fct_ns standalone_fct_ns' (IPs as 8 hex "
                             f"digits, then whole numbers), got {line[:80]!r}", file=source, line=n)
        sip, dip, *rest = m.groups()
        flows.append(Flow((int(sip, 16) >> 8) & 0xFFFF, (int(dip, 16) >> 8) & 0xFFFF, *map(int, rest)))
    return flows


@dataclass(frozen=True)
class FlowStats:
    """Flow-completion-time spread of a run."""

    flows: int
    bytes: int
    fct_p50_us: float
    fct_p99_us: float
    fct_max_us: float
    slowdown_p50: float
    slowdown_p99: float
    slowdown_max: float
    last_finish_us: float

    FIELDS = ("flows", "bytes", "fct_p50_us", "fct_p99_us", "fct_max_us", "slowdown_p50", "slowdown_p99",
              "slowdown_max", "last_finish_us")


def _quantile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank quantile (a value that occurred), NaN for none."""
    if not sorted_values:
        return math.nan
    k = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[k]


# ``qp_finish`` (entry.h) sums a flow's bytes and packet headers in a uint32_t for its
# standalone time: from about 4 GiB (headers add under 1% at 9000-byte packets) it wraps, and
# that flow's slowdown means nothing. Such flows are left out of the slowdown quantiles.
WRAPPING_FLOW_BYTES = int(2**32 * 0.99)


def flow_stats(flows: list[Flow]) -> FlowStats:
    """The spread of flow completion times; slowdowns only of flows whose standalone time SimAI
    could compute (below ``WRAPPING_FLOW_BYTES``)."""
    fct = sorted(f.fct_ns / 1000 for f in flows)
    slow = sorted(f.slowdown for f in flows if f.size < WRAPPING_FLOW_BYTES)
    last = max(((f.start_ns + f.fct_ns) / 1000 for f in flows), default=math.nan)
    return FlowStats(len(flows), sum(f.size for f in flows), _quantile(fct, 0.5), _quantile(fct, 0.99),
                     fct[-1] if fct else math.nan, _quantile(slow, 0.5), _quantile(slow, 0.99),
                     slow[-1] if slow else math.nan, last)


@dataclass(frozen=True)
class PfcEvent:
    time_ns: int
    node: int
    node_type: int  # 0 host, 1 switch, 2 NVSwitch
    ifindex: int
    pause: bool


def parse_pfc(text: str, *, source: str | Path = "pfc.txt") -> list[PfcEvent]:
    events = []
    for n, line in enumerate(text.splitlines(), start=1):
        cells = line.split()
        if len(cells) != 5:
            raise InputError(f"expected 5 fields (time node node_type ifindex type), got {len(cells)}", file=source, line=n)
        try:
            t, node, kind, ifindex, what = (int(c) for c in cells)
        except ValueError:
            raise InputError("expected whole numbers", file=source, line=n) from None
        if what not in (0, 1):
            raise InputError(f"expected type 0 (resume) or 1 (pause), got {what}", file=source, line=n, field="type")
        events.append(PfcEvent(t, node, kind, ifindex, what == 1))
    return events


def parse_utilization(text: str, *, source: str | Path = "dimension_utilization.csv") -> list[tuple[float, ...]]:
    """``(time_us, dim1, dim2, ...)`` per sample; the closing ``,,`` line is required."""
    lines = text.splitlines()
    if not lines:
        return []
    if not lines[0].startswith(" time (us) ,"):
        raise InputError(f"expected the header ' time (us) ,dim1 util,...', got {lines[0][:40]!r}", file=source, line=1)
    width = lines[0].count(",")
    if lines[-1] != "," * (width - 1):
        raise InputError("the file does not end in its closing line: cut short", file=source, line=len(lines))
    out = []
    for n, line in enumerate(lines[1:-1], start=2):
        cells = line.split(",")
        if len(cells) != width + 1 or cells[-1] != "":
            raise InputError(f"expected {width} values and a trailing comma", file=source, line=n)
        out.append(tuple(_num(c, source=source, line=n, field="util") for c in cells[:-1]))
    return out


def busy_share(samples: list[tuple[float, ...]]) -> tuple[float, ...]:
    """Mean utilisation (%) per dimension over the samples."""
    if not samples:
        return ()
    return tuple(statistics.fmean(s[i] for s in samples) for i in range(1, len(samples[0])))
