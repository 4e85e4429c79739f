"""Running a user's SimAI_analytical safely, and reading what it prints.

SimAI's analytical binary reads its ratio tables relative to the working directory,
writes ``./results/<-r>EndToEnd.csv`` there, and reports most failures only by printing
nonsense with exit status 0. :func:`run` therefore gives every job a fresh working
directory (ratio tables linked in at ``astra-sim-alibabacloud/inputs/ratio``,
``results/`` created, so two jobs' ``-r`` never clash), copies SimAI's stdout to the
caller's log, and checks the outcome:

=============================  =================================================================
what SimAI does                what :func:`run` says
=============================  =================================================================
exit 255                       it rejected its command line (an unknown or malformed flag)
killed by SIGFPE               it divided by zero (e.g. a header with pp 0, or no ``-r``)
other signals / exit codes     the signal or status, with the end of its stderr
no EndToEnd.csv                it wrote no result (the results directory or path was wrong)
EMPTY EndToEnd.csv, exit 0     row 0 threw (a message beyond the ratio table): output lost
EndToEnd.csv without summary   it stopped at row N (same exception), rows N.. are missing
busbw -1 or 0 in its stdout    a SimAI bug (zero NICs, group of one GPU): times wrap
a time >= 1e12 us (11.6 days)  implausible: a wrapped uint64, not a time
=============================  =================================================================

The first five always fail (:class:`SimaiRunError`). The last two are SimAI bugs:
``simai_bugs=reproduce`` keeps SimAI's output and warns; ``fix`` and ``error`` fail,
naming the rows (the built-in engine can fix them).

The per-collective lines of its stdout (``Communication Type: allreduceCommunication
Group: 0Group Size: 8Data Size: 16777216Ratio: 1Bottleneck is nvlink: 0``, printed for
every collective that reaches the bandwidth formula, each after a ``cal_busbw`` JSON
line, the rows' blocks ending in ``Layer id: NAME``) are parsed by :func:`parse_log`.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

from ..base.errors import CommsweepError, ConfigError
from ..setup.network import Network
from ..workload import format as wformat
from . import endtoend as e2e
from .collectives import CollectiveTime
from .engine import collective_rows, effective_size, parse_comm_type
from .ratio import RATIO_SUBDIR, table_files

BINARY = Path("bin") / "SimAI_analytical"
GROUP_ENUM = {0: "TP", 1: "DP", 2: "PP", 3: "EP", 4: "DP_EP", 5: "NONE"}
IMPLAUSIBLE_US = 1e12
_TIME_FIELDS = tuple(i for i, f in enumerate(e2e.ROW_FIELDS) if not f.endswith(("algbw", "busbw")))
_COMM_LINE = re.compile(
    r"Communication Type: (?P<coll>.*?)Communication Group: (?P<group>\d+)Group Size: (?P<size>-?\d+)"
    r"Data Size: (?P<bytes>\d+)Ratio: (?P<ratio>\S+?)Bottleneck is nvlink: (?P<nvlink>\d+)"
)
_RETCODE = re.compile(r'"retcode":(\d+)')
_BUSBW = re.compile(r'"theoretical_bus_bw(?:_GBps)?":"?(-?[0-9.]+)')
_NICS = re.compile(r'"nics_pernode":(-?[0-9.]+)')


class SimaiRunError(CommsweepError):
    """SimAI failed, or printed results that cannot be right."""


@dataclass(frozen=True)
class LogCollective:
    """One ``Communication Type`` line of SimAI's stdout, with the ``cal_busbw`` line before it."""

    seq: int
    row: int  # 0-based workload row (the Layer id block it belongs to)
    layer: str
    collective: str
    group: str
    group_size: int
    bytes: int
    ratio: float
    nvlink_bottleneck: bool
    busbw_retcode: int | None
    busbw_gbps: float | None


@dataclass(frozen=True)
class Log:
    collectives: tuple[LogCollective, ...]
    layers: tuple[str, ...]  # the Layer id blocks, in order
    pending_busbw: int  # cal_busbw lines after the last Communication line (a row that threw)


def parse_log(text: str) -> Log:
    """The per-collective lines of a SimAI_analytical stdout, assigned to their rows."""
    found: list[LogCollective] = []
    layers: list[str] = []
    busbw: tuple[int | None, float | None] | None = None
    pending = 0
    for line in text.splitlines():
        if line.startswith("{") and "retcode" in line:
            m, b = _RETCODE.search(line), _BUSBW.search(line)
            busbw = (int(m.group(1)) if m else None, float(b.group(1)) if b else None)
            pending += 1
        elif line.startswith("Communication Type: "):
            m = _COMM_LINE.match(line)
            if not m:
                raise ValueError(f"unreadable collective line: {line[:120]!r}")
            code, bw = busbw if busbw else (None, None)
            found.append(LogCollective(
                seq=len(found), row=len(layers), layer="", collective=m["coll"],
                group=GROUP_ENUM.get(int(m["group"]), m["group"]), group_size=int(m["size"]),
                bytes=int(m["bytes"]), ratio=float(m["ratio"]), nvlink_bottleneck=m["nvlink"] != "0",
                busbw_retcode=code, busbw_gbps=bw,
            ))
            busbw, pending = None, 0
        elif line.startswith("Layer id: "):
            name = line[len("Layer id: "):]
            for i in range(len(found) - 1, -1, -1):
                if found[i].row != len(layers):
                    break
                found[i] = replace(found[i], layer=name)
            layers.append(name)
    return Log(tuple(found), tuple(layers), pending)


def assign_phases(workload: wformat.Workload, log: Log) -> dict[int, str]:
    """Which phase (fwd, wg, ig: SimAI's order within a row) each log line is, by matching
    collective, group and bytes against the row; {seq: phase}."""
    out: dict[int, str] = {}
    by_row: dict[int, list[LogCollective]] = {}
    for c in log.collectives:
        by_row.setdefault(c.row, []).append(c)
    for index, lines in by_row.items():
        if index >= len(workload.rows):
            break
        row = workload.rows[index]
        queue = list(lines)
        for phase in ("fwd", "wg", "ig"):
            if not queue:
                break
            comm_type, size = row.comm(phase)
            coll, group = parse_comm_type(comm_type, phase)
            head = queue[0]
            if coll == head.collective and group == head.group and effective_size(phase, size) == head.bytes:
                out[head.seq] = phase
                queue.pop(0)
    return out


@dataclass
class SimaiRun:
    """A finished, checked SimAI run."""

    endtoend_text: str
    endtoend: e2e.EndToEnd
    log: Log
    collectives: list[CollectiveTime]
    warnings: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def collectives_csv(self) -> str:
        from .collectives import to_csv

        return to_csv(self.collectives)


def find_binary(root: Path) -> Path:
    binary = root / BINARY
    if not binary.exists():
        raise ConfigError(f"{binary} not found: point simulator.root (--simai-root) at a SimAI checkout "
                          "built with './scripts/build.sh -c analytical'", key="simulator.root")
    if not os.access(binary, os.X_OK):
        raise ConfigError(f"{binary} is not executable", key="simulator.root")
    return binary


def prepare_workdir(ratio_dir: Path, parent: str | Path | None = None) -> Path:
    """A fresh working directory laid out as SimAI expects: ratio tables and results/."""
    for table in table_files(str(ratio_dir)):
        if not os.path.isfile(table):
            raise ConfigError(f"{table} not found (SimAI needs its three ratio tables)", key="simulator.ratio_dir")
    workdir = Path(tempfile.mkdtemp(prefix="simai-", dir=parent))
    (workdir / RATIO_SUBDIR).parent.mkdir(parents=True)
    (workdir / RATIO_SUBDIR).symlink_to(ratio_dir.resolve(), target_is_directory=True)
    (workdir / "results").mkdir()
    return workdir


def run(root: Path, workload_path: Path, network: Network, *, prefix: str, ratio_dir: Path | None = None,
        simai_bugs: str = "fix", timeout: float | None = None, log: IO[str] | None = None,
        parent: str | Path | None = None) -> SimaiRun:
    """Run ``<root>/bin/SimAI_analytical`` on one workload and check what it did.

    SimAI's stdout is copied to ``log``. Raises :class:`SimaiRunError` saying what went
    wrong (see the module docstring); the working directory is kept then, for a look.
    """
    root = Path(root)
    binary = find_binary(root)
    workload = wformat.read(workload_path)
    ratio_dir = Path(ratio_dir) if ratio_dir else root / RATIO_SUBDIR
    workdir = prepare_workdir(ratio_dir, parent)
    if "/" in prefix:
        (workdir / "results" / prefix).parent.mkdir(parents=True, exist_ok=True)
    argv = [str(binary.resolve()), "-w", str(Path(workload_path).resolve()), *network.flags(), "-r", prefix]
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, errors="replace", timeout=timeout)
    except OSError as err:
        raise SimaiRunError(f"cannot run {binary}: {err.strerror}; kept {workdir}") from None
    except subprocess.TimeoutExpired as err:
        if log is not None and err.stdout:
            log.write(err.stdout if isinstance(err.stdout, str) else err.stdout.decode(errors="replace"))
        raise SimaiRunError(f"SimAI did not finish within {timeout:g} s and was stopped (its clock advances one ns "
                            f"at a time; compute entries above 2^31 ns are known to hang it); kept {workdir}") from None
    wall = time.perf_counter() - start
    if log is not None:
        log.write(proc.stdout)
        log.flush()
    try:
        result = check(proc.returncode, proc.stdout, proc.stderr, workdir / "results" / f"{prefix}EndToEnd.csv",
                       workload, network, simai_bugs=simai_bugs, command=argv)
    except SimaiRunError as err:
        raise SimaiRunError(f"{err}\n  command: cd {workdir} && {' '.join(argv)}") from None
    result.wall_s = wall
    shutil.rmtree(workdir, ignore_errors=True)
    return result


def _stderr_tail(stderr: str, lines: int = 5) -> str:
    tail = [line for line in stderr.strip().splitlines() if line.strip()][-lines:]
    return ("; SimAI's stderr ends: " + " | ".join(tail)) if tail else ""


def check(returncode: int, stdout: str, stderr: str, csv_path: Path, workload: wformat.Workload,
          network: Network, *, simai_bugs: str = "fix", command: list[str] | None = None) -> SimaiRun:
    """Judge a finished SimAI run from its exit status, output file and stdout."""
    if returncode < 0:
        sig = -returncode
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        why = {
            signal.SIGFPE: "it divided by zero (SIGFPE): a header with pp or ep 0, or a run without -r on a "
                           "workload not named the AICB way",
            signal.SIGABRT: "it aborted (an uncaught exception, e.g. a header value std::stoi cannot read)",
            signal.SIGSEGV: "it crashed (SIGSEGV), e.g. a checkpoint layer missing before its initiator",
        }.get(sig, f"it was killed by {name}")
        raise SimaiRunError(f"SimAI failed: {why}{_stderr_tail(stderr)}")
    if returncode == 255:
        raise SimaiRunError(f"SimAI rejected its command line (exit 255: an unknown or malformed flag){_stderr_tail(stderr)}")
    if returncode != 0:
        raise SimaiRunError(f"SimAI exited with status {returncode}{_stderr_tail(stderr)}")
    if not csv_path.exists():
        raise SimaiRunError(f"SimAI exited 0 but wrote no {csv_path.name}{_stderr_tail(stderr)}")
    text = csv_path.read_text(encoding="utf-8", errors="replace")
    log = parse_log(stdout)
    parsed = e2e.parse(text, source=csv_path)
    n_rows = len(workload.rows)
    if not parsed.complete:
        row = len(parsed.rows)
        what = "an EMPTY EndToEnd.csv" if parsed.empty else f"an EndToEnd.csv without its summary, cut after {row} row(s)"
        cause = ""
        if "removed before call" in stderr or log.pending_busbw:
            name = workload.rows[row].name if row < n_rows else "?"
            cause = (f": row {row} ({name}) threw inside SimAI's report (a message beyond the ratio table's last "
                     "row, 'Data size out of range'), and SimAI swallowed the exception")
        message = f"SimAI exited 0 but wrote {what}{cause}"
        if simai_bugs != "reproduce":
            raise SimaiRunError(message + "; the built-in engine (--simai-bugs fix) clamps the ratio instead")
        warnings = [message + "; kept as SimAI wrote it (--simai-bugs reproduce)"]
        return SimaiRun(text, parsed, log, tidy(workload, network, parsed, log), warnings)
    if len(parsed.rows) != n_rows:
        raise SimaiRunError(f"SimAI's EndToEnd.csv has {len(parsed.rows)} rows, the workload {n_rows}")
    phases = assign_phases(workload, log)
    problems = bug_report(parsed, log, phases)
    table = tidy(workload, network, parsed, log)
    warnings = disagreements(table, log, phases)
    if problems:
        message = "SimAI printed nonsense: " + "; ".join(problems)
        if simai_bugs != "reproduce":
            raise SimaiRunError(message + ". The built-in engine fixes these (--backend builtin --simai-bugs fix)")
        warnings.append(message + "; kept as SimAI wrote it (--simai-bugs reproduce)")
    return SimaiRun(text, parsed, log, table, warnings)


def disagreements(table: list[CollectiveTime], log: Log, phases: dict[int, str]) -> list[str]:
    """Collective lines of SimAI's stdout that the workload (read by SimAI's rules) does not
    explain: a sign that this SimAI reads workloads differently from commsweep's model.
    ``phases`` from :func:`assign_phases`."""
    by_key = {(c.row, c.phase): c for c in table}
    odd = []
    for c in log.collectives:
        mine = by_key.get((c.row, phases.get(c.seq)))
        if mine is None or (mine.group, mine.group_size, mine.bytes) != (c.group, c.group_size, c.bytes):
            odd.append(f"row {c.row} ({c.layer}): {c.collective} on {c.group} {c.group_size}, {c.bytes} bytes")
    if not odd:
        return []
    return [f"{len(odd)} collective line(s) of SimAI's stdout do not match the workload as commsweep reads it: "
            + "; ".join(odd[:10]) + (" ..." if len(odd) > 10 else "")]


def bug_report(parsed: e2e.EndToEnd, log: Log, phases: dict[int, str]) -> list[str]:
    """SimAI's silent failures visible in its stdout and CSV, one sentence per kind."""
    out = []
    broken = [c for c in log.collectives if c.busbw_retcode == 1 or (c.busbw_gbps is not None and c.busbw_gbps < 0)]
    if broken:
        where = ", ".join(f"row {c.row} ({c.layer} {phases.get(c.seq, '?')}, {c.group} {c.group_size})" for c in broken)
        out.append(f"{len(broken)} collective(s) got no valid bandwidth from SimAI's cal_busbw (busbw -1 or 0: "
                   f"a group of one GPU, or a NIC share that floors to 0): {where}")
    huge = [(i, r.name) for i, r in enumerate(parsed.rows)
            if any(r.values[k] >= IMPLAUSIBLE_US for k in _TIME_FIELDS)]
    if huge:
        rows = ", ".join(f"row {i} ({name})" for i, name in huge[:20]) + (" ..." if len(huge) > 20 else "")
        out.append(f"{len(huge)} row(s) with a time of 1e12 us or more (a wrapped 64-bit value): {rows}")
    elif parsed.total is not None and not parsed.total < IMPLAUSIBLE_US:
        out.append(f"a Total time of {parsed.total:.0f} us")
    return out


def tidy(workload: wformat.Workload, network: Network, parsed: e2e.EndToEnd, log: Log) -> list[CollectiveTime]:
    """The per-collective table of a SimAI run: workload collectives with SimAI's times (whole us)."""
    return collective_rows(workload, wformat.group_sizes(workload.header, network.gpus), parsed.rows,
                           lambda times, name: times.text[e2e.ROW_FIELDS.index(name)])
