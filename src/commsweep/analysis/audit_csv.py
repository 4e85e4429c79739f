"""audit.csv: its columns, its writer and its one typed reader (``AuditRow``).

A point's audit (``analysis/audit.py``) is written once per point and read by every
sweep-wide step after it: the comparison's findings table (``compare.py``), the difference
by cause (``causes/``), the timeline figure. All of them read it here, as ``AuditRow``s,
and ``commsweep audit --format csv`` writes it here, from the same rows.

A sweep's audits hold millions of rows, so the reader splits plain lines itself and leaves
the csv module to the rare file with a quoted field.
"""

from __future__ import annotations

import csv
import gc
import io
from collections.abc import Iterable
from itertools import repeat
from pathlib import Path
from typing import NamedTuple

from ..base.errors import InputError
from ..workload.row_names import kind_of

COLUMNS = (
    "row", "layer", "phase", "kind",
    "expected_collective", "expected_group", "expected_bytes",
    "found_collective", "found_group", "found_bytes",
    "delta_bytes", "delta_us", "found_name", "expected_name", "cause",
)
HEADER = ",".join(COLUMNS) + "\n"


class _Kinds(dict):
    """What ``kind`` gives for each key asked for, worked out once (a sweep's millions of rows
    repeat a few thousand labels and names)."""

    def __init__(self, kind) -> None:
        super().__init__()
        self.kind = kind

    def __missing__(self, key: str) -> str:
        value = self[key] = self.kind(key)
        return value


_UNIT_KINDS = _Kinds(lambda label: label.rsplit("/", 1)[-1])
_EXPECTED_KINDS = _Kinds(kind_of)


class AuditRow(NamedTuple):
    """One finding as audit.csv holds it.

    ``row``: the workload row (0-based; file line = row + 3), None for a finding of no row;
    ``layer``: its unit's label (``mb0/layer3/attention``, ``iteration/dp``); the expected side
    (Megatron's collective, empty where Megatron has none) and the found side (the workload's,
    empty where it has none); ``delta_bytes`` and ``delta_us`` (None: no network given) what
    SimAI executes or takes beyond Megatron; the two rows' names; the finding's cause. A named tuple: the reader
    makes millions, and a tuple is the cheapest to make."""

    row: int | None
    layer: str
    phase: str
    kind: str
    expected_collective: str = ""
    expected_group: str = ""
    expected_bytes: int | None = None
    found_collective: str = ""
    found_group: str = ""
    found_bytes: int | None = None
    delta_bytes: int = 0
    delta_us: float | None = None
    found_name: str = ""  # the workload's row (AICB's mlp_moelayer, ...), where the row has the collective
    expected_name: str = ""  # the Megatron schedule's row (layer3_moe_dispatch_probs, ...)
    cause: str = ""  # what makes the difference (``causes/catalog.yaml``)

    @property
    def unit_kind(self) -> str:
        """The unit's module kind: attention, mlp, embedding, output_layer, loss, dp, ..."""
        return _UNIT_KINDS[self.layer]

    @property
    def expected_kind(self) -> str:
        """The Megatron row's kind, without its layer: ``moe_dispatch_probs``, ``mlp_fc1``
        (``workload.row_names.kind_of``)."""
        return _EXPECTED_KINDS[self.expected_name]

    def cells(self) -> list[str]:
        """The row's cells as the file writes them."""
        return [
            "" if self.row is None else str(self.row), self.layer, self.phase, self.kind,
            self.expected_collective, self.expected_group, _text(self.expected_bytes),
            self.found_collective, self.found_group, _text(self.found_bytes),
            str(self.delta_bytes), "" if self.delta_us is None else f"{self.delta_us:.3f}",
            self.found_name, self.expected_name, self.cause,
        ]


def _text(n: int | None) -> str:
    return "" if n is None else str(n)


def to_csv(rows: Iterable[AuditRow]) -> str:
    """audit.csv: the header, then each row."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for r in rows:
        writer.writerow(r.cells())
    return buf.getvalue()


# -- reading ---------------------------------------------------------------------------------

_INTEGERS = ("row", "expected_bytes", "found_bytes", "delta_bytes")
_OPTIONAL = ("row", "expected_bytes", "found_bytes", "delta_us")


def body(text: str, *, source: str | Path = "<audit>") -> str:
    """The text of the rows of an audit.csv (after its header; an InputError naming the file
    for another header): what the findings table copies, row for row."""
    if not text.startswith(HEADER):
        raise InputError(f"expected the columns {','.join(COLUMNS)}", file=source, line=1)
    return text[len(HEADER):]


def read_csv(text: str, *, source: str | Path = "<audit>") -> list[AuditRow]:
    """The rows of an audit.csv's text, typed; an InputError naming the line and field of
    anything ``to_csv`` would not write.

    Fast, for a sweep's millions of rows: plain lines are split by hand (the csv module only
    reads a file with a quoted field), each row is made in one comprehension, without a call,
    and the cyclic garbage collector waits until the rows are made (it would otherwise walk
    the growing list again and again: it doubled the time)."""
    rows_text = body(text, source=source)
    cells: Iterable[list[str]]
    if '"' not in rows_text and "\r" not in rows_text:
        lines = rows_text.split("\n")
        if lines[-1] == "":
            lines.pop()
        if rows_text.count(",") != (len(COLUMNS) - 1) * len(lines):
            _locate(rows_text, source)  # a row of too many or too few fields
        cells = map(str.split, lines, repeat(","))
    else:
        cells = list(csv.reader(io.StringIO(rows_text)))
        if any(len(c) != len(COLUMNS) for c in cells):
            _locate(rows_text, source)
    new = tuple.__new__  # what ``AuditRow._make`` does, without its call
    collecting = gc.isenabled()
    gc.disable()
    try:
        return [new(AuditRow, (int(c[0]) if c[0] else None, c[1], c[2], c[3], c[4], c[5],
                               int(c[6]) if c[6] else None, c[7], c[8], int(c[9]) if c[9] else None, int(c[10]),
                               float(c[11]) if c[11] else None, c[12], c[13], c[14])) for c in cells]
    except (ValueError, IndexError):
        _locate(rows_text, source)
        raise  # pragma: no cover (``_locate`` raises)
    finally:
        if collecting:
            gc.enable()


def read(path: str | Path) -> list[AuditRow]:
    """A point's audit.csv, typed (``read_csv``)."""
    from ..base.files import read_text

    return read_csv(read_text(path), source=path)


def _locate(rows_text: str, source: str | Path) -> None:
    """An InputError naming the line and field of the first row of ``rows_text`` that does
    not read (the slow path of ``read_csv``, for a damaged file only)."""
    reader = csv.reader(io.StringIO(rows_text))
    for cells in reader:
        line = reader.line_num + 1  # the header is line 1
        if len(cells) != len(COLUMNS):
            raise InputError(f"expected {len(COLUMNS)} fields, got {len(cells)}", file=source, line=line)
        for name in (*_INTEGERS, "delta_us"):
            text = cells[COLUMNS.index(name)]
            if text == "" and name in _OPTIONAL:
                continue
            try:
                int(text) if name in _INTEGERS else float(text)
            except ValueError:
                what = "an integer" if name in _INTEGERS else "a number"
                raise InputError(f"expected {what}, got {text!r}", file=source, line=line, field=name) from None
