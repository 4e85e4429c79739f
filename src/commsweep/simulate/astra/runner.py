"""One run of a user's ASTRA-sim analytical binary in a private folder, watched and judged.

The folder keeps everything the run read and printed: the traces, ``network.yml``,
``system.json``, ``memory.json``, ``command.txt`` (the exact command, runnable from the folder),
``stdout.log`` and ``stderr.log`` (ASTRA-sim also writes ``log/`` there).

What counts as a result (ASTRA-sim often fails with exit status 0): one line
``sys[N] finished, C cycles, exposed communication E cycles.`` for every rank, a cycle being a
nanosecond. A non-zero exit, a time-out, a stall (nothing printed for ``stall`` seconds) or a
rank without its line is a failed run with the reason (``AstraFailure``), never a time.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ...base.errors import CommsweepError, ConfigError
from ...base.files import write_text

BINARIES = {"astra-aware": "AstraSim_Analytical_Congestion_Aware",
            "astra-unaware": "AstraSim_Analytical_Congestion_Unaware"}
# Where build/astra_analytical/build.sh puts them in a checkout.
BUILD_BIN = Path("build/astra_analytical/build/bin")
FINISHED = re.compile(r"sys\[(\d+)\] finished, (\d+) cycles, exposed communication (\d+) cycles\.")
_CRITICAL = re.compile(r"\[critical\].*|\[error\].*|terminate called.*|what\(\):.*|.*Unsupported collective.*|"
                       r".*deadlock.*|.*Assertion.*|.*free\(\).*|malloc.*", re.IGNORECASE)


class AstraFailure(CommsweepError):
    """A run of ASTRA-sim that gave no time, with why."""


@dataclass(frozen=True)
class RankTime:
    rank: int
    finished_ns: int
    exposed_ns: int


@dataclass(frozen=True)
class AstraRun:
    """A finished run: every rank's line, the binary's build, the folder and the wall time."""

    ranks: tuple[RankTime, ...]
    build: str
    folder: Path
    wall_s: float

    @property
    def total_ns(self) -> int:
        """The iteration: the last rank to finish."""
        return max(r.finished_ns for r in self.ranks)

    @property
    def exposed_ns(self) -> int:
        """The exposed communication of the last rank to finish."""
        return max(self.ranks, key=lambda r: (r.finished_ns, -r.rank)).exposed_ns


def binary(root: str | Path, backend: str) -> Path:
    """The backend's binary: ``root`` itself when it is one, else under the checkout's build folder."""
    if backend not in BINARIES:
        raise ConfigError(f"unknown ASTRA-sim backend {backend!r}; expected one of {', '.join(BINARIES)}", key="backend")
    root = Path(root)
    if root.is_file():
        return root
    for path in (root / BUILD_BIN / BINARIES[backend], root / BINARIES[backend]):
        if path.is_file():
            return path
    raise ConfigError(f"{root}: no {BINARIES[backend]} (build ASTRA-sim's analytical backend: "
                      "build/astra_analytical/build.sh)", key="astra_root")


def build_label(path: Path) -> str:
    """The binary's name and the start of its SHA-256, stated beside its times."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return f"{path.name} sha256:{digest}"


def parse(stdout: str, ranks: int) -> tuple[RankTime, ...]:
    """Every rank's ``finished`` line; AstraFailure naming the ranks without one."""
    seen: dict[int, RankTime] = {}
    for m in FINISHED.finditer(stdout):
        rank = int(m.group(1))
        seen[rank] = RankTime(rank, int(m.group(2)), int(m.group(3)))
    missing = [r for r in range(ranks) if r not in seen]
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (" ..." if len(missing) > 8 else "")
        raise AstraFailure(f"{len(missing)} of {ranks} ranks printed no 'finished' line (ranks {shown}): a collective "
                           "or receive that never matched, or a crash")
    return tuple(seen[r] for r in range(ranks))


def _reason(text: str) -> str:
    """The lines that say what went wrong (a critical log line, an uncaught exception and its
    message), else the last line printed."""
    lines = list(dict.fromkeys(m.group(0).strip() for m in _CRITICAL.finditer(text)))
    return "; ".join(lines[:3]) if lines else (text.strip().splitlines() or ["no output"])[-1]


def _status(code: int) -> str:
    """How the process ended, as a shell says it (an abort is status 134, signal 6)."""
    if code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "a signal"
        return f"was killed by signal {-code} ({name}, status {128 - code})"
    return f"exited with status {code}"


def command(exe: Path, ranks_prefix: str, groups: str | None) -> list[str]:
    out = [str(exe), f"--workload-configuration={ranks_prefix}", "--system-configuration=system.json",
           "--remote-memory-configuration=memory.json", "--network-configuration=network.yml"]
    if groups:
        out.append(f"--comm-group-configuration={groups}")
    return out


def run(exe: Path, folder: Path, ranks: int, *, trace_prefix: str, groups: str | None,
        timeout: float | None = None, stall: float | None = None) -> AstraRun:
    """Run in ``folder`` (its input files already there); the judged result or AstraFailure."""
    argv = command(exe, trace_prefix, groups)
    write_text(folder / "command.txt", shlex.join(argv) + "\n")
    out_path, err_path = folder / "stdout.log", folder / "stderr.log"
    start = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(argv, cwd=folder, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        why = _watch(proc, out_path, err_path, timeout, stall, start)
    wall = time.monotonic() - start
    stdout = out_path.read_text(errors="replace")
    stderr = err_path.read_text(errors="replace")
    where = f" (its folder: {folder})"
    if why:
        raise AstraFailure(why + where)
    if proc.returncode != 0:
        reason = _reason(stderr) if stderr.strip() else _reason(stdout)
        finished = len({m.group(1) for m in FINISHED.finditer(stdout)})
        after = f" after all {ranks} ranks printed their 'finished' line" if finished == ranks else ""
        raise AstraFailure(f"ASTRA-sim {_status(proc.returncode)}{after}: {reason}{where}")
    try:
        times = parse(stdout, ranks)
    except AstraFailure as failure:
        raise AstraFailure(f"{failure}; {_reason(stderr + stdout)}{where}") from None
    return AstraRun(ranks=times, build=build_label(exe), folder=folder, wall_s=wall)


def _watch(proc: subprocess.Popen, out_path: Path, err_path: Path, timeout: float | None, stall: float | None,
           start: float) -> str | None:
    """Wait for the process; stop it (and say why) at the time-out or when its output stalls."""
    last_size, last_change = -1, start
    while True:
        try:
            proc.wait(timeout=0.2)
            return None
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        size = out_path.stat().st_size + err_path.stat().st_size
        if size != last_size:
            last_size, last_change = size, now
        if timeout is not None and now - start > timeout:
            proc.kill()
            proc.wait()
            return f"timed out after {timeout:g} s"
        if stall is not None and now - last_change > stall:
            proc.kill()
            proc.wait()
            return f"stalled: nothing printed for {stall:g} s"
