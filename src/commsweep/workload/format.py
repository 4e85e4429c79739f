"""The SimAI workload file: a strict reader, a byte-exact writer, and what SimAI executes.

Layout (AICB's SPEC section 1; SimAI ``Workload.cc``)::

    HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: <t> ep: <ep> pp: <pp> vpp: <v> ga: <g> all_gpus: <n> checkpoints: 0 checkpoint_initiates: 0 pp_comm: <x>
    <N>
    <N rows of 12 whitespace-separated fields>

SimAI itself reads the body as one stream of tokens and forgives much; this reader
insists on one row per line and rejects anything SimAI would misread silently, naming
file, line and field. Whitespace and header spelling are remembered, so reading and
writing a file reproduces it byte for byte.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..base.errors import InputError
from ..base.files import read_text, write_text

MODE = "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
PHASES = ("fwd", "ig", "wg")
COLLECTIVES = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "REDUCESCATTER": "reducescatter", "ALLTOALL": "alltoall"}
GROUP_SUFFIXES = {"_DP_EP": "DP_EP", "_EP": "EP"}
COMM_TYPES = frozenset(
    {"NONE"} | {base + suffix for base in COLLECTIVES for suffix in ("", *GROUP_SUFFIXES)}
)
ROW_FIELDS = (
    "name", "dependency",
    "fwd_compute", "fwd_comm", "fwd_size",
    "ig_compute", "ig_comm", "ig_size",
    "wg_compute", "wg_comm", "wg_size",
    "update_time",
)
# SimAI raises forward messages of 1..4095 bytes to 4096 (Workload.cc).
MIN_FWD_SIZE = 4096
_MAX_INT = 2**63 - 1
_UINT = re.compile(r"0|[1-9][0-9]*")
_INT = re.compile(r"0|-?[1-9][0-9]*")  # no "-0": it would not be written back as read
_PP_COMM = re.compile(r"(0|[1-9][0-9]*)(\.[0-9]*)?")
_CANONICAL_SEPS = ("",) + ("\t",) * 11 + ("",)
_NON_SPACE = re.compile(r"\S+")


@dataclass(frozen=True)
class Header:
    """The first line. ``vpp`` holds what AICB writes there: layers per pipeline stage."""

    tp: int
    ep: int
    pp: int
    vpp: int
    ga: int
    all_gpus: int
    pp_comm: int = 0
    checkpoints: tuple[int, ...] = ()
    checkpoint_initiates: tuple[int, ...] = ()
    # The line as read, kept so an unchanged header is written back verbatim.
    text: str | None = field(default=None, compare=False, repr=False)

    def render(self) -> str:
        def listed(values: tuple[int, ...]) -> str:
            return " ".join(str(v) for v in (len(values), *values))

        return (
            f"{MODE} model_parallel_NPU_group: {self.tp} ep: {self.ep} pp: {self.pp} vpp: {self.vpp} "
            f"ga: {self.ga} all_gpus: {self.all_gpus} checkpoints: {listed(self.checkpoints)} "
            f"checkpoint_initiates: {listed(self.checkpoint_initiates)} pp_comm: {self.pp_comm}"
        )


@dataclass(frozen=True)
class Row:
    """One workload item: three phases, each a compute time (ns) and a collective."""

    name: str
    dependency: int
    fwd_compute: int
    fwd_comm: str
    fwd_size: int
    ig_compute: int
    ig_comm: str
    ig_size: int
    wg_compute: int
    wg_comm: str
    wg_size: int
    update_time: int = 100
    # Whitespace around and between the 12 fields as read; None means tab-separated.
    layout: tuple[str, ...] | None = field(default=None, compare=False, repr=False)

    def comm(self, phase: str) -> tuple[str, int]:
        """(comm type, size in bytes) of one phase."""
        return getattr(self, f"{phase}_comm"), getattr(self, f"{phase}_size")

    def compute(self, phase: str) -> int:
        return getattr(self, f"{phase}_compute")

    def render(self) -> str:
        values = [str(getattr(self, name)) for name in ROW_FIELDS]
        seps = self.layout or _CANONICAL_SEPS
        parts = [seps[0]]
        for value, sep in zip(values, seps[1:]):
            parts.append(value)
            parts.append(sep)
        return "".join(parts)


@dataclass(frozen=True)
class Workload:
    header: Header
    rows: tuple[Row, ...]
    # Text after the last row ("\n" normally, "" when the file has no final newline).
    trailer: str = "\n"
    count_text: str | None = field(default=None, compare=False, repr=False)

    def render(self) -> str:
        header = self.header
        head = header.text if header.text is not None and _same_header(header) else header.render()
        count = str(len(self.rows))
        if self.count_text is not None and self.count_text.strip() == count:
            count = self.count_text
        return "\n".join([head, count, *(row.render() for row in self.rows)]) + self.trailer


def _same_header(header: Header) -> bool:
    try:
        return parse_header(header.text or "") == header
    except InputError:
        return False


# -- reading ---------------------------------------------------------------------------


def read(path: str | Path) -> Workload:
    """Read and validate a workload file; raise InputError naming file, line and field."""
    text = read_text(path)
    if _PARSED is None:
        return parse(text, source=path)
    key = (str(path), text)
    if key not in _PARSED:
        _PARSED.clear()
        _PARSED[key] = parse(text, source=path)
    return _PARSED[key]


def read_header(path: str | Path) -> Header:
    """A workload file's header alone (its first line; the rows are not read): what a command
    checks before it runs (InputError naming the file and field)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        first = fh.readline().rstrip("\n")
    return parse_header(first, source=path)


# The last workload parsed, by path and text (see ``reuse_parsed``); None: no reuse.
_PARSED: dict[tuple[str, str], Workload] | None = None


@contextlib.contextmanager
def reuse_parsed() -> Iterator[None]:
    """Within this block, reading the same file with the same text again returns the
    workload parsed the first time (a ``Workload`` is immutable). A batch of points
    (``commsweep.orchestration.batch``) reads each workload once for its volumes and once per network
    for the simulation and the audit."""
    global _PARSED
    previous, _PARSED = _PARSED, {}
    try:
        yield
    finally:
        _PARSED = previous


def _int(token: str, *, source, line: int, field: str | None) -> int:
    """``int(token)`` for a token the patterns accepted; Python refuses > 4300 digits."""
    try:
        return int(token)
    except ValueError:
        raise InputError(f"a {len(token)}-digit number does not fit in 64 bits", file=source, line=line, field=field) from None


def parse(text: str, *, source: str | Path = "<workload>") -> Workload:
    lines = text.split("\n")
    # A final "\n" leaves one empty string; trailing blank lines are kept verbatim.
    end = len(lines)
    while end > 0 and lines[end - 1].strip() == "":
        end -= 1
    trailer = "\n".join(lines[end:])
    trailer = ("\n" + trailer) if end < len(lines) else ""
    lines = lines[:end]
    if not lines:
        raise InputError("empty file: expected a header line", file=source, line=1)
    header = parse_header(lines[0], source=source)
    if len(lines) < 2:
        raise InputError("missing the row-count line", file=source, line=2)
    count_text = lines[1]
    if not _UINT.fullmatch(count_text.strip()):
        raise InputError(f"expected the number of rows, got {count_text.strip()!r}", file=source, line=2, field="row_count")
    count = _int(count_text.strip(), source=source, line=2, field="row_count")
    body = lines[2:]
    if len(body) != count:
        raise InputError(
            f"the file declares {count} rows but has {len(body)}", file=source, line=2, field="row_count"
        )
    rows = tuple(parse_row(line, source=source, line_no=i + 3) for i, line in enumerate(body))
    return Workload(header=header, rows=rows, trailer=trailer, count_text=count_text)


_HEADER_KEYS = {
    "model_parallel_NPU_group:": "tp",
    "ep:": "ep",
    "pp:": "pp",
    "vpp:": "vpp",
    "ga:": "ga",
    "all_gpus:": "all_gpus",
}
_REQUIRED = tuple(_HEADER_KEYS.values())


def parse_header(line: str, *, source: str | Path = "<workload>") -> Header:
    tokens = line.split()
    if not tokens or tokens[0] != MODE:
        got = tokens[0] if tokens else ""
        raise InputError(f"expected the mode {MODE}, got {got!r}", file=source, line=1, field="mode")
    values: dict[str, object] = {}
    i = 1

    def take_int(key: str, *, minimum: int) -> int:
        nonlocal i
        if i >= len(tokens):
            raise InputError("missing its value", file=source, line=1, field=key)
        token = tokens[i]
        i += 1
        if not _UINT.fullmatch(token) or _int(token, source=source, line=1, field=key) < minimum:
            raise InputError(f"expected an integer >= {minimum}, got {token!r}", file=source, line=1, field=key)
        return int(token)

    while i < len(tokens):
        key = tokens[i]
        i += 1
        if key in _HEADER_KEYS:
            name = _HEADER_KEYS[key]
            if name in values:
                raise InputError("given twice", file=source, line=1, field=key.rstrip(":"))
            # AICB writes ga 0 (global batch below micro_batch * dp) and vpp 0 (more stages
            # than layers); SimAI reads them, so the reader does too.
            values[name] = take_int(key.rstrip(":"), minimum=0 if name in ("ga", "vpp") else 1)
        elif key in ("checkpoints:", "checkpoint_initiates:"):
            name = key.rstrip(":")
            count = take_int(name, minimum=0)
            values[name] = tuple(take_int(name, minimum=0) for _ in range(count))
        elif key in ("pp_comm:", "pp_comm"):
            # SimAI reads it with stoi, so AICB's "8388608.0" means 8388608.
            if i >= len(tokens) or not _PP_COMM.fullmatch(tokens[i]):
                got = tokens[i] if i < len(tokens) else ""
                raise InputError(f"expected a byte count, got {got!r}", file=source, line=1, field="pp_comm")
            values["pp_comm"] = _int(tokens[i].split(".")[0], source=source, line=1, field="pp_comm")
            i += 1
        else:
            raise InputError(f"unknown header key {key!r}", file=source, line=1, field="header")
    for name in _REQUIRED:
        if name not in values:
            key = next(k for k, v in _HEADER_KEYS.items() if v == name).rstrip(":")
            raise InputError("missing header key", file=source, line=1, field=key)
    return Header(**values, text=line)  # type: ignore[arg-type]


# The canonical layout (single tabs, valid tokens, numbers short enough for 64 bits) in
# one match: most files are written so, and the per-point commands read thousands of
# rows. Anything else takes the field-by-field path below, which names what is wrong.
_U = r"(0|[1-9][0-9]{0,17})"
_C = "(" + "|".join(sorted(COMM_TYPES, key=len, reverse=True)) + ")"
_FAST_ROW = re.compile("\t".join([r"(\S+)", r"(0|-?[1-9][0-9]{0,17})", _U, _C, _U, _U, _C, _U, _U, _C, _U, _U]))


def parse_row(line: str, *, source: str | Path = "<workload>", line_no: int = 0) -> Row:
    m = _FAST_ROW.fullmatch(line)
    if m is not None:
        g = m.groups()
        return Row(g[0], int(g[1]), int(g[2]), g[3], int(g[4]), int(g[5]), g[6], int(g[7]), int(g[8]), g[9],
                   int(g[10]), int(g[11]))
    tokens = line.split()
    if len(tokens) != len(ROW_FIELDS):
        raise InputError(
            f"expected {len(ROW_FIELDS)} fields ({', '.join(ROW_FIELDS)}), got {len(tokens)}",
            file=source, line=line_no,
        )
    values: dict[str, object] = {"name": tokens[0]}
    for name, token in zip(ROW_FIELDS[1:], tokens[1:]):
        if name.endswith("_comm"):
            if token not in COMM_TYPES:
                raise InputError(
                    f"unknown comm type {token!r}; expected one of {', '.join(sorted(COMM_TYPES))}",
                    file=source, line=line_no, field=name,
                )
            values[name] = token
        elif name == "dependency":
            if not _INT.fullmatch(token):
                raise InputError(f"expected an integer, got {token!r}", file=source, line=line_no, field=name)
            values[name] = _int(token, source=source, line=line_no, field=name)
        else:
            if not _UINT.fullmatch(token):
                what = "a negative value" if token.startswith("-") else repr(token)
                raise InputError(
                    f"expected a non-negative integer, got {what}", file=source, line=line_no, field=name
                )
            value = _int(token, source=source, line=line_no, field=name)
            if value > _MAX_INT:
                raise InputError(f"{value} does not fit in 64 bits", file=source, line=line_no, field=name)
            values[name] = value
    seps = tuple(_NON_SPACE.split(line))
    layout = None if seps == _CANONICAL_SEPS else seps
    return Row(**values, layout=layout)  # type: ignore[arg-type]


# -- writing ---------------------------------------------------------------------------


def oversized(workload: Workload) -> str | None:
    """The first size or time SimAI could not hold in 64 bits, described; None if all fit.

    A generator can compute such numbers for an absurd model; the file would then be one
    no reader (SimAI's nor ours) accepts, so generation refuses it instead.
    """
    for i, row in enumerate(workload.rows):
        for name in ROW_FIELDS[2:]:
            value = getattr(row, name)
            if isinstance(value, int) and value > _MAX_INT:
                return f"row {i + 1} ({row.name}): {name} = {value} does not fit in SimAI's 64-bit fields"
    return None


def write(workload: Workload, path: str | Path) -> None:
    """Write atomically; an unchanged read workload comes out byte-identical."""
    write_text(path, workload.render())


def with_rows(workload: Workload, rows: list[Row] | tuple[Row, ...]) -> Workload:
    return dataclasses.replace(workload, rows=tuple(rows), count_text=None)


# -- what SimAI executes ---------------------------------------------------------------


@dataclass(frozen=True)
class Collective:
    """One collective SimAI executes: a row's phase with a comm type other than NONE."""

    row: int  # 0-based index among the rows
    name: str
    phase: str  # fwd | ig | wg
    collective: str  # allreduce | allgather | reducescatter | alltoall
    group: str  # TP | DP | EP | DP_EP
    group_size: int
    size: int  # bytes as SimAI reads them (forward 1..4095 raised to 4096)
    declared_size: int  # the size field as written


def comm_group(comm_type: str, phase: str) -> str | None:
    """The group SimAI runs a comm type on in a phase; None for NONE."""
    if comm_type == "NONE":
        return None
    for suffix, group in GROUP_SUFFIXES.items():
        if comm_type.endswith(suffix):
            return group
    return "DP" if phase == "wg" else "TP"


def collective_name(comm_type: str) -> str | None:
    """allreduce / allgather / reducescatter / alltoall, or None for NONE."""
    for base, name in COLLECTIVES.items():
        if comm_type.startswith(base):
            return name
    return None


def group_sizes(header: Header, gpus: int | None = None) -> dict[str, int]:
    """Group sizes as SimAI derives them.

    DP = floor(gpus / (tp * pp)) where ``gpus`` is SimAI's ``-g`` flag (the header's
    ``all_gpus`` when not given); DP_EP = floor(DP / ep).
    """
    gpus = header.all_gpus if gpus is None else gpus
    dp = gpus // (header.tp * header.pp)
    return {"TP": header.tp, "DP": dp, "EP": header.ep, "DP_EP": dp // header.ep, "PP": header.pp}


def effective_size(phase: str, size: int) -> int:
    """The size SimAI uses: forward messages of 1..4095 bytes become 4096."""
    if phase == "fwd" and 0 < size < MIN_FWD_SIZE:
        return MIN_FWD_SIZE
    return size


def collectives(workload: Workload, gpus: int | None = None) -> Iterator[Collective]:
    """Every collective of one iteration in file order (SimAI's pass runs each once)."""
    sizes = group_sizes(workload.header, gpus)
    for index, row in enumerate(workload.rows):
        for phase in PHASES:
            comm_type, size = row.comm(phase)
            group = comm_group(comm_type, phase)
            if group is None:
                continue
            yield Collective(
                row=index,
                name=row.name,
                phase=phase,
                collective=collective_name(comm_type) or "",
                group=group,
                group_size=sizes[group],
                size=effective_size(phase, size),
                declared_size=size,
            )
