"""A point's simulated times in brief: the one file the sweep-wide summary reads per point.

A point's EndToEnd.csv and collectives.csv hold one line per workload row and per
collective (thousands per point). The summary needs only their sums, so the simulate
stage writes them beside those files (``results/points/<point>/times.csv``) and
``commsweep summarize`` reads nothing else of the simulation: a 1,000-point sweep is
summarized from 1,000 files of a few dozen lines.

Columns: ``quantity,phase,collective,group,us``. Rows:

* ``time_us`` and ``exposed_us`` per phase, collective and group: the summed time of those
  collectives before and after overlap (exact: three decimals, whole ns), in the order
  they first occur in the iteration;
* then, when SimAI's summary line is there (a complete EndToEnd.csv), the iteration as
  it prints it (whole us), with empty phase and collective: ``total_us``, ``exposed_us``
  per group (``DP``, ``DP_EP``, ``TP``, ``EP``, ``PP``) and for all groups (group
  empty), ``bubble_us`` and ``compute_us``: the keys of ``comparison.csv``'s per-point
  rows.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from pathlib import Path

from ..base.errors import InputError
from ..base.files import read_text

COLUMNS = ("quantity", "phase", "collective", "group", "us")
# SimAI's summary line (``endtoend.COMPONENTS`` and its total) -> (quantity, group).
ITERATION = {
    "total": ("total_us", ""),
    "exposed_dp": ("exposed_us", "DP"),
    "exposed_dp_ep": ("exposed_us", "DP_EP"),
    "exposed_tp": ("exposed_us", "TP"),
    "exposed_ep": ("exposed_us", "EP"),
    "exposed_pp": ("exposed_us", "PP"),
    "bubble": ("bubble_us", ""),
    "compute": ("compute_us", ""),
    "exposed": ("exposed_us", ""),
}
COLLECTIVE_QUANTITIES = ("time_us", "exposed_us")


def ns(text: str) -> int:
    """'1234.567' (us) -> 1234567 ns, exactly (SimAI's whole us too: '12' -> 12000)."""
    whole, _, frac = text.partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3] or 0)


def summary_line(endtoend_text: str, *, source: str | Path = "<EndToEnd.csv>") -> dict[str, str] | None:
    """SimAI's summary line as the tables print it (whole us), or None when the file has none.

    Only the first two lines are parsed: the per-row lines are not needed here.
    """
    from . import endtoend

    head = endtoend_text.split("\n", 2)
    if head[0] != endtoend.SUMMARY_HEADER or len(head) < 2:
        return None
    parsed = endtoend.parse(f"{head[0]}\n{head[1]}\n", source=source)
    out = {"total": f"{parsed.total:.0f}"}
    for key in endtoend.COMPONENTS:
        out[key] = f"{parsed.components[key]:.0f}"
    return out


def table(collectives_csv: str, endtoend_text: str, *, collectives_source: str | Path = "<collectives.csv>",
          endtoend_source: str | Path = "<EndToEnd.csv>") -> str:
    """The times CSV of one simulation, from its collectives.csv and EndToEnd.csv texts."""
    from .collectives import COLUMNS as TIDY, ns_text

    header, _, body = collectives_csv.partition("\n")
    if header != ",".join(TIDY):
        raise InputError(f"expected the header {','.join(TIDY)}", file=collectives_source, line=1)
    # Collectives repeat (every layer issues the same ones): count each distinct line's
    # fields after the row and layer, then parse each distinct one once.
    if '"' not in body and "\r" not in body:
        lines = [line for line in body.split("\n") if line]
        tails = Counter([line.split(",", 2)[-1] for line in lines])
        counted = [(tail.split(","), n) for tail, n in tails.items()]
        fields = [line.count(",") + 1 for line in lines] if any(len(c) != len(TIDY) - 2 for c, _ in counted) else []
    else:  # a layer name that needed quoting: the csv module's way
        rows = list(csv.reader(io.StringIO(body)))
        counted = [(list(tail), n) for tail, n in Counter(tuple(cells[2:]) for cells in rows).items()]
        fields = [len(cells) for cells in rows]
    bad = next((n for n, count in enumerate(fields, start=2) if count != len(TIDY)), None)
    if bad is not None:
        raise InputError(f"expected {len(TIDY)} fields, got {fields[bad - 2]}", file=collectives_source, line=bad)
    sums: dict[tuple[str, str, str], list[int]] = {}
    for cells, n in counted:
        phase, collective, group, _, _, time, exposed = cells
        entry = sums.get((phase, collective, group))
        if entry is None:
            entry = sums[(phase, collective, group)] = [0, 0]
        for i, (name, value) in enumerate((("time_us", time), ("exposed_us", exposed))):
            try:
                entry[i] += n * ns(value)
            except ValueError:
                where = 2 + next(k for k, line in enumerate(body.split("\n")) if line.endswith(",".join(cells)))
                raise InputError(f"expected a time in us, got {value!r}", file=collectives_source, line=where,
                                 field=name) from None
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for (phase, collective, group), (time, exposed) in sums.items():
        writer.writerow(("time_us", phase, collective, group, ns_text(time)))
        writer.writerow(("exposed_us", phase, collective, group, ns_text(exposed)))
    line = summary_line(endtoend_text, source=endtoend_source)
    if line is not None:
        for key, (quantity, group) in ITERATION.items():
            writer.writerow((quantity, "", "", group, line[key]))
    return buf.getvalue()


class Times:
    """A parsed times file: ``collective[(phase, collective, group)] = (time_us, exposed_us)``
    (text, as written) and ``iteration[(quantity, group)]`` (whole us, text; empty without
    SimAI's summary line)."""

    def __init__(self) -> None:
        self.collective: dict[tuple[str, str, str], tuple[str, str]] = {}
        self.iteration: dict[tuple[str, str], str] = {}


def parse(text: str, *, source: str | Path = "<times.csv>") -> Times:
    """Read a times file this module wrote, naming the line and field of anything else."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(header) != COLUMNS:
        raise InputError(f"expected the header {','.join(COLUMNS)}", file=source, line=1)
    out = Times()
    pending: dict[tuple[str, str, str], str] = {}
    iteration_keys = set(ITERATION.values())
    for n, cells in enumerate(reader, start=2):
        if len(cells) != len(COLUMNS):
            raise InputError(f"expected {len(COLUMNS)} fields, got {len(cells)}", file=source, line=n)
        quantity, phase, collective, group, value = cells
        if phase:
            key = (phase, collective, group)
            if quantity == "time_us":
                pending[key] = value
            elif quantity == "exposed_us" and key in pending:
                out.collective[key] = (pending.pop(key), value)
            else:
                raise InputError(f"expected time_us then exposed_us of {phase} {collective} {group}, got {quantity!r}",
                                 file=source, line=n, field="quantity")
        elif (quantity, group) in iteration_keys and not collective:
            out.iteration[(quantity, group)] = value
        else:
            raise InputError(f"not a quantity of the iteration: {quantity!r} (group {group!r})",
                             file=source, line=n, field="quantity")
    if pending:
        phase, collective, group = next(iter(pending))
        raise InputError(f"time_us of {phase} {collective} {group} without its exposed_us", file=source)
    return out


def read(path: str | Path) -> Times:
    return parse(read_text(path), source=path)
