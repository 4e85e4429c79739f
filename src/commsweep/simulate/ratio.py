"""SimAI's collective-efficiency tables (``{nvlink,nic,ata}_ratio.csv``) and their lookup.

SimAI scales the theoretical bus bandwidth of three kinds of collective by a measured
efficiency that depends on the message size and the number of nodes (``calbusbw.cc``):
TP all-gather / reduce-scatter (the ``nic`` table, or ``nvlink`` when NVLink is the
bottleneck), and TP or EP all-to-all (the ``ata`` table). Everything else runs at ratio 1.

The tables live in a SimAI checkout (``astra-sim-alibabacloud/inputs/ratio``); users point
the engine at such a directory. Without one the engine uses its own default, documented
here: **every efficiency is 1.0** (the theoretical bandwidth, no table), which matches
SimAI exactly for all-reduce and all DP traffic and is optimistic for the three cases
above. :attr:`Ratios.source` says which was used, and the CLI prints it.

Reading follows SimAI's ``readCSV``: the first line is a header; cells are split on
commas (a trailing comma adds no cell), trimmed of spaces, and an empty cell reads as 1.
Lookup follows ``getValue``: size 0 gives 1; below the first row, the first row's value;
otherwise linear interpolation between the first bracketing pair of rows; the result is
divided by the same column's last row and stored as float32. A size beyond the last row
has no value (SimAI throws; see ``engine`` for what each ``--simai-bugs`` mode does).
"""

from __future__ import annotations

import re
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..base.cfloat import div, f32
from ..base.errors import InputError
from ..base.files import read_text

TABLES = ("nvlink", "nic", "ata")


def table_files(directory: str) -> list[str]:
    """The paths of SimAI's three tables in a ratio directory, in ``TABLES`` order."""
    return [os.path.join(directory, f"{name}_ratio.csv") for name in TABLES]

RATIO_SUBDIR = Path("astra-sim-alibabacloud") / "inputs" / "ratio"  # in a SimAI checkout
DEFAULT_SOURCE = "built-in default (efficiency 1.0 for every size; no ratio tables)"
# Data column (counted after "Size") by node count; any other count reads column 5.
_COLUMN_BY_NODES = {1: 1, 2: 2, 4: 3, 8: 4, 16: 5, 32: 6, 64: 7, 128: 8, 9: 9}
# SimAI passes 9 for "multi-node EP when TP fills a server": the "Multi 16" column.
MULTI_COLUMN_NODES = 9
# std::stod reads the longest numeric prefix and ignores the rest of the cell.
_NUMBER_PREFIX = re.compile(
    r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE
)


class RatioOutOfRange(Exception):
    """A size beyond the table's last row: SimAI throws ``Data size out of range``."""

    def __init__(self, table: str, size: int, largest: float) -> None:
        self.table, self.size, self.largest = table, size, largest
        super().__init__(f"{size} bytes is beyond the {table} ratio table's last row ({largest:.0f} bytes)")


class RatioTable:
    """One table: its Size column and data columns, in file order."""

    __slots__ = ("name", "path", "sizes", "rows")

    def __init__(self, name: str, path: str, sizes: tuple[float, ...], rows: tuple[tuple[float, ...], ...]) -> None:
        self.name = name
        self.path = path
        self.sizes = sizes
        self.rows = rows

    def __repr__(self) -> str:
        return f"RatioTable({self.name!r}, {self.path!r}, {len(self.rows)} rows)"

    def value(self, size: int, nodes: int) -> float:
        """SimAI's ``getValue``: the efficiency of ``size`` bytes on ``nodes`` nodes, float32."""
        col = _COLUMN_BY_NODES.get(nodes, 5)
        if size == 0:
            return 1.0
        rows, sizes = self.rows, self.sizes
        last = self._cell(len(rows) - 1, col)
        x = float(size)
        if x < sizes[0]:
            return f32(div(self._cell(0, col), last))
        for i in range(len(sizes) - 1):
            s1, s2 = sizes[i], sizes[i + 1]
            if s1 <= x <= s2:
                v1, v2 = self._cell(i, col), self._cell(i + 1, col)
                return f32(div(v1 + div((v2 - v1) * (x - s1), s2 - s1), last))
        raise RatioOutOfRange(self.name, size, max(sizes))

    def clamped_value(self, size: int, nodes: int) -> float:
        """Like :meth:`value`, but a size beyond the last row takes the last row's value."""
        try:
            return self.value(size, nodes)
        except RatioOutOfRange:
            col = _COLUMN_BY_NODES.get(nodes, 5)
            last = self._cell(len(self.rows) - 1, col)
            return f32(div(last, last))

    def _cell(self, row: int, col: int) -> float:
        value = self.rows[row][col - 1] if col - 1 < len(self.rows[row]) else None
        if value is None:
            raise InputError(
                f"row has no column {col} (needed for this node count); SimAI would read past the row",
                file=self.path, line=row + 2,
            )
        return value


@dataclass(frozen=True)
class Ratios:
    """The three efficiency tables, or none (the engine's default: efficiency 1.0)."""

    nvlink: RatioTable | None = None
    nic: RatioTable | None = None
    ata: RatioTable | None = None
    source: str = field(default=DEFAULT_SOURCE)

    @property
    def is_default(self) -> bool:
        return self.nvlink is None and self.nic is None and self.ata is None

    def table(self, name: str) -> RatioTable | None:
        return getattr(self, name)


def _stod(cell: str, *, path: Path, line: int, column: int) -> float:
    m = _NUMBER_PREFIX.match(cell)
    if not m:
        raise InputError(f"cell {column + 1} is not a number: {cell!r}", file=path, line=line)
    return float(m.group(0))


def read_table(path: str | Path, name: str) -> RatioTable:
    """Read one ratio CSV the way SimAI's ``readCSV`` and ``std::stod`` do."""
    path = Path(path)
    try:
        text = read_text(path)
    except FileNotFoundError:
        raise InputError("ratio table not found (SimAI needs nvlink_ratio.csv, nic_ratio.csv, ata_ratio.csv)",
                         file=path) from None
    sizes: list[float] = []
    rows: list[tuple[float, ...]] = []
    for line_no, line in enumerate(text.split("\n")[1:], start=2):
        if line == "":
            continue
        cells = line.split(",")
        if line.endswith(","):
            cells.pop()  # std::getline(stream, cell, ',') yields no trailing empty cell
        values = []
        for col, cell in enumerate(cells):
            cell = cell.strip(" ")
            values.append(_stod(cell, path=path, line=line_no, column=col) if cell else 1.0)
        sizes.append(values[0])
        rows.append(tuple(values[1:]))
    if len(rows) < 1:
        raise InputError("no data rows after the header line", file=path)
    return RatioTable(name=name, path=str(path), sizes=tuple(sizes), rows=tuple(rows))


def load_ratios(directory: str | Path | None) -> Ratios:
    """SimAI's three tables from ``directory``, or the engine's default when it is None."""
    if directory is None:
        return Ratios()
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError("ratio directory not found (expected nvlink_ratio.csv, nic_ratio.csv, ata_ratio.csv)",
                         file=directory)
    tables = {name: read_table(path, name) for name, path in zip(TABLES, table_files(str(directory)))}
    return Ratios(**tables, source=str(directory))
