"""A finished sweep's points in two simulators: SimAI's time beside ASTRA-sim's, and the
difference between each AICB variant and its Megatron twin in both.

For every point of the points table (``setup.points``), its workload runs through a user's
ASTRA-sim (``simulate.astra.command.simulate``) on the point's network, each run in
``<runs>/<point>/`` with its command kept; a run that gives no time (``runner.AstraFailure``)
is a failed point with its reason, never a number, and so is a point the sweep did not finish
(not run). A sweep with ``simulator.astra.root`` runs this as its step ``astra_compare``
(``simulate.astra.sweep``), ``--strict``: after both tables are written, a failed point fails the
step (``errors.PartialResult``), which names it and keeps the tables. The table (``COLUMNS``) sets SimAI's iteration
(the point's ``times.csv``: whatever backend the sweep simulated with) beside ASTRA-sim's, with
the binary's build. The pairs table (``PAIR_COLUMNS``) gives, per setting, each AICB variant's
time minus its Megatron twin's in each simulator: the answer, told by both.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import InputError
from ..base.paths import times_file, workload_file
from ..base.status import is_marker
from ..setup.network import Network
from ..setup.points import PointRow, read_points
from ..simulate import times as times_table
from ..simulate.astra import command, inputs, runner

COLUMNS = ("point", "variant", "simai_total_us", "simai_exposed_us", "astra_total_us", "astra_exposed_us",
           "astra_status", "astra_reason", "astra_build")
PAIR_COLUMNS = ("point", "twin", "simai_difference_us", "astra_difference_us")


@dataclass(frozen=True)
class Compared:
    """One point in both simulators (times in whole ns; ASTRA-sim's None when its run failed)."""

    row: PointRow
    simai_total_ns: int | None
    simai_exposed_ns: int | None
    astra: runner.AstraRun | None
    reason: str = ""


def _simai(results: Path, point: str) -> tuple[int | None, int | None]:
    path = times_file(results, point)
    if not path.exists() or is_marker(path):
        return None, None
    it = times_table.read(path).iteration
    total, exposed = it.get(("total_us", "")), it.get(("exposed_us", ""))
    return (None if total is None else times_table.ns(total)), (None if exposed is None else times_table.ns(exposed))


def compare_point(results: Path, row: PointRow, runs: Path, *, backend: str, root: str,
                  settings: inputs.Settings = inputs.Settings(), timeout: float | None = None,
                  stall: float | None = None, overlap: tuple[str, ...] = ()) -> Compared:
    """One point: its SimAI times as the sweep wrote them, and its ASTRA-sim run in
    ``runs/<point>``. A point the sweep did not finish (no SimAI time) is not run: its workload
    may be a failed job's marker."""
    total, exposed = _simai(results, row.point)
    if total is None:
        return Compared(row, None, None, None, "no SimAI time: the point did not finish in the sweep (see its status)")
    net = Network(gpus_per_server=row.gpus_per_server, nics_per_server=row.nics_per_server,
                  nvlink_gbps=row.nvlink_gbps, nic_gbps=row.nic_gbps)
    try:
        run = command.simulate(str(workload_file(results, row.workload)), row.world_size, net, settings,
                               backend=backend, root=root, folder=runs / row.point, overlap=overlap,
                               timeout=timeout, stall=stall)
    except runner.AstraFailure as failure:
        return Compared(row, total, exposed, None, str(failure))
    return Compared(row, total, exposed, run)


def compare(results: str | Path, runs: str | Path, *, backend: str, root: str,
            settings: inputs.Settings = inputs.Settings(), **limits) -> list[Compared]:
    """Every analytical point of a finished sweep (``results``: its results folder), each run in
    ``runs/<point>``; ``limits``: ``compare_point``'s timeout, stall and overlap."""
    results = Path(results)
    rows = [r for r in read_points(Path(results) / "sweep.csv") if r.simulation in (None, "analytical")]
    return [compare_point(results, r, Path(runs), backend=backend, root=root, settings=settings, **limits)
            for r in rows]


def failed_summary(compared: Sequence[Compared]) -> str:
    """The points without an ASTRA-sim time, each with its reason's first clause, on one line."""
    failed = [c for c in compared if c.astra is None]
    shown = "; ".join(f"{c.row.point}: {c.reason.split(' (its folder')[0]}" for c in failed[:5])
    more = f"; and {len(failed) - 5} more" if len(failed) > 5 else ""
    return f"{len(failed)} of {len(compared)} point(s) have no ASTRA-sim time: {shown}{more}"


def _us(ns: int | None) -> str:
    return "" if ns is None else f"{ns // 1000}.{ns % 1000:03d}"


def to_csv(compared: Sequence[Compared]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    for c in compared:
        run = c.astra
        w.writerow([c.row.point, c.row.variant, _us(c.simai_total_ns), _us(c.simai_exposed_ns),
                    _us(run.total_ns if run else None), _us(run.exposed_ns if run else None),
                    "ok" if run else "failed", c.reason, run.build if run else ""])
    return buf.getvalue()


def pairs(compared: Sequence[Compared]) -> list[tuple[str, str, int | None, int | None]]:
    """(point, its Megatron twin, SimAI's difference, ASTRA-sim's difference) for every AICB
    point that has a twin of the same setting and AIOB switch; a difference is None where a time
    is missing."""
    twins = {(c.row.setting, c.row.aiob): c for c in compared if c.row.schedule == "megatron"}
    out = []
    for c in compared:
        twin = twins.get((c.row.setting, c.row.aiob))
        if c.row.schedule == "megatron" or twin is None:
            continue
        simai = None if None in (c.simai_total_ns, twin.simai_total_ns) else c.simai_total_ns - twin.simai_total_ns
        astra = None if not (c.astra and twin.astra) else c.astra.total_ns - twin.astra.total_ns
        out.append((c.row.point, twin.row.point, simai, astra))
    return out


def pairs_csv(compared: Sequence[Compared]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(PAIR_COLUMNS)
    for point, twin, simai, astra in pairs(compared):
        w.writerow([point, twin, _signed_us(simai), _signed_us(astra)])
    return buf.getvalue()


def _signed_us(ns: int | None) -> str:
    if ns is None:
        return ""
    return ("-" if ns < 0 else "") + _us(abs(ns))


# -- the tables' typed readers (the answer page's section reads them) --------------------------


@dataclass(frozen=True)
class Pair:
    """One AICB point against its Megatron twin: both differences in us (None: no time)."""

    point: str
    twin: str
    simai_us: float | None
    astra_us: float | None

    @property
    def gap_us(self) -> float | None:
        """ASTRA-sim's difference minus SimAI's."""
        return None if None in (self.simai_us, self.astra_us) else self.astra_us - self.simai_us

    @property
    def flips(self) -> bool:
        """The two simulators disagree on which is slower (one positive, the other negative)."""
        return self.gap_us is not None and self.simai_us * self.astra_us < 0


def _rows(path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if tuple(reader.fieldnames or ()) != columns:
            raise InputError(f"expected the columns {', '.join(columns)}", file=path, line=1)
        return list(reader)


def _number(text: str, path: Path, line: int, column: str) -> float | None:
    if text == "":
        return None
    try:
        return float(text)
    except ValueError:
        raise InputError(f"expected microseconds, got {text!r}", file=path, line=line, field=column) from None


def read_pairs(path: Path) -> list[Pair]:
    """``astra_difference.csv``, its numbers checked."""
    return [Pair(r["point"], r["twin"], _number(r["simai_difference_us"], path, i, "simai_difference_us"),
                 _number(r["astra_difference_us"], path, i, "astra_difference_us"))
            for i, r in enumerate(_rows(path, PAIR_COLUMNS), start=2)]


def read_failed(path: Path) -> list[tuple[str, str]]:
    """The points of ``astra_vs_simai.csv`` without an ASTRA-sim time, with the reason."""
    return [(r["point"], r["astra_reason"]) for r in _rows(path, COLUMNS) if r["astra_status"] != "ok"]


def cmd_astra_compare(ns) -> None:
    import os
    import sys

    from ..base.errors import ConfigError, PartialResult
    from ..base.files import write_text

    root = ns.astra_root or os.environ.get(command.ROOT_ENV)
    if not root:
        raise ConfigError(f"ASTRA-sim is needed: --astra-root or ${command.ROOT_ENV}", key="astra_root")
    settings = inputs.Settings(latency_ns=tuple(ns.astra_latency), topology=tuple(ns.astra_topology),
                               system=dict(ns.astra_system))
    if not (ns.output or (ns.table and ns.pairs and ns.runs)):
        raise ConfigError("give -o, or all of --table, --pairs and --runs", key="output")
    out = Path(ns.output or ".")
    table, pair_table = Path(ns.table or out / "astra_vs_simai.csv"), Path(ns.pairs or out / "astra_difference.csv")
    overlap = tuple(g for g in ns.astra_overlap.split(",") if g)
    compared = compare(ns.results, ns.runs or out / "runs", backend=ns.backend, root=root, settings=settings,
                       timeout=ns.timeout, stall=ns.stall_s, overlap=overlap)
    write_text(table, to_csv(compared))
    write_text(pair_table, pairs_csv(compared))
    failed = sum(1 for c in compared if c.astra is None)
    print(f"{table}: {len(compared)} point(s) in both simulators, {failed} failed in ASTRA-sim", file=sys.stderr)
    if failed and ns.strict:
        raise PartialResult(failed_summary(compared))


def add_parser(sub) -> None:
    p = sub.add_parser("astra-compare", help="a finished sweep's points through ASTRA-sim, beside SimAI's times",
                       description="Run every analytical point's workload of a finished sweep through a user's "
                                   "ASTRA-sim and write <output>/astra_vs_simai.csv (each point's SimAI and ASTRA-sim "
                                   "times) and <output>/astra_difference.csv (each AICB point minus its Megatron "
                                   "twin, in both).")
    p.add_argument("--results", default="results", help="the sweep's results folder (default: results)")
    p.add_argument("-o", "--output", help="the output folder (the runs go under <output>/runs)")
    p.add_argument("--table", help="the points' table (default: <output>/astra_vs_simai.csv)")
    p.add_argument("--pairs", help="the pairs' table (default: <output>/astra_difference.csv)")
    p.add_argument("--runs", help="the folder of the runs, one per point (default: <output>/runs)")
    p.add_argument("--strict", action="store_true",
                   help="exit with status 2, after writing both tables, when a point has no ASTRA-sim time")
    p.add_argument("--backend", choices=tuple(runner.BINARIES), default="astra-unaware")
    p.add_argument("--timeout", type=float, help="seconds before one ASTRA-sim run is stopped")
    command.add_arguments(p)
    p.set_defaults(func=cmd_astra_compare)
