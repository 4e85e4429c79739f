"""One run of a user's ``SimAI_simulator`` in a private directory, watched while it runs, judged after.

SimAI's packet-level binary writes fixed file names into its working directory
(``ncclFlowModel_*``, ``SimAI.log``) and, with its shipped ``SimAI.conf``, more under the
root-only ``/etc/astra-sim/simulation`` (SimAI #47, #255): two runs in one place overwrite
each other. :func:`run` gives each run its own directory holding everything it reads and
writes (the workload, the topology, ``SimAI.conf``, ``command.txt``: the exact command and
environment, for running it again by hand), runs it there with only our ``AS_*``
variables, and then:

* while it runs: stops it past ``timeout`` seconds, and when ``stall`` seconds pass without a
  flow finishing or a line printed (the simulated time has stopped advancing: the hangs of
  SimAI #139, #140, #199, #270);
* after: a signal or non-zero exit, a missing, empty (SimAI #75, #91, #102, #107, #248) or cut
  EndToEnd.csv, a row count other than the workload's, or totals that do not add up
  (``outputs.inconsistencies``) fail the run with the reason (:class:`Ns3RunError`), and the
  directory is kept for a look.

The result carries the binary's build profile (:func:`build_profile`) so every time can be
stated with it: SimAI's build script makes a debug (``-O0``) binary.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ...base.errors import CommsweepError, ConfigError
from ...base.files import read_text, write_text
from ...workload import format as wformat
from ..collectives import CollectiveTime
from ..engine import collective_rows
from . import checks, conf, outputs, topology

BINARY = Path("bin") / "SimAI_simulator"
WORKLOAD_FILE = "workload.txt"
COMMAND_FILE = "command.txt"
_PROFILE = re.compile(r"-(debug|default|release|optimized)$")
_PROFILE_FLAGS = {"debug": "-O0", "default": "-O2", "release": "-O3", "optimized": "-O3 -march=native"}


class Ns3RunError(CommsweepError):
    """SimAI_simulator failed, stalled, or wrote results that cannot be right."""


def configured_root(config) -> str | None:
    """``simulator.ns3.root``, or ``$SIMAI_ROOT`` where it is null (the tests' variable too)."""
    root = ((config.get("simulator") or {}).get("ns3") or {}).get("root")
    return str(root) if root else (os.environ.get("SIMAI_ROOT") or None)


def find_binary(path: str | Path) -> Path:
    """The simulator: ``path`` itself when it is a file, else ``path/bin/SimAI_simulator``."""
    path = Path(path)
    binary = path if path.is_file() else path / BINARY
    if not binary.exists():
        raise ConfigError(f"{binary} not found: point simulator.ns3.root (or $SIMAI_ROOT, or --ns3-root) at a SimAI "
                          "checkout built with './scripts/build.sh -c ns3' (or at the SimAI_simulator binary)",
                          key="simulator.ns3.root")
    if not os.access(binary, os.X_OK):
        raise ConfigError(f"{binary} is not executable", key="simulator.ns3.root")
    return binary


def build_profile(binary: Path, given: str | None = None) -> str:
    """How the binary was built: ``given`` (config ``simulator.ns3.build``), else the ns-3
    profile its name carries (``ns3.36.1-AstraSimNetwork-debug``: SimAI's build script's
    ``./ns3 configure -d debug``, -O0), else ``unknown``."""
    if given:
        return given
    m = _PROFILE.search(binary.resolve().name)
    if m:
        return f"ns-3 {m.group(1)} profile ({_PROFILE_FLAGS[m.group(1)]})"
    return "unknown (say it with simulator.ns3.build)"


@dataclass
class Ns3Run:
    """A finished, checked packet-level run."""

    endtoend_text: str
    endtoend: outputs.EndToEnd
    collectives: list[CollectiveTime]
    flows: outputs.FlowStats
    pfc_pauses: int
    pfc_resumes: int
    utilization: tuple[float, ...]
    warnings: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    # The simulator's CPU seconds (user + system, from os.wait4): what it cost whatever the load.
    cpu_s: float | None = None
    peak_rss_kb: int | None = None
    build: str = ""
    command: str = ""
    workdir: Path | None = None

    def collectives_csv(self) -> str:
        from ..collectives import to_csv

        return to_csv(self.collectives)


def hand_command(binary: Path, settings: conf.Settings, threads: int, topo_name: str) -> str:
    """The shell line that reruns the simulation by hand from its directory."""
    env = " ".join(f"{k}={v}" for k, v in conf.knobs(settings).items())
    return (f"env -u AS_LOG_LEVEL {env} {shlex.quote(str(binary.resolve()))} -t {threads} -w ./{WORKLOAD_FILE} "
            f"-n ./{topo_name} -c ./{conf.CONF_FILE}")


def prepare_dir(workload: wformat.Workload, topo_name: str, topo_text: str, settings: conf.Settings,
                parent: str | Path | None = None) -> Path:
    """A fresh directory with everything the run reads: the workload, the topology, SimAI.conf."""
    workdir = Path(tempfile.mkdtemp(prefix="simai-ns3-", dir=parent))
    write_text(workdir / WORKLOAD_FILE, workload.render())
    write_text(workdir / topo_name, topo_text)
    write_text(workdir / conf.CONF_FILE, conf.render(settings))
    return workdir


def run(binary: str | Path, workload_path: str | Path, topo_name: str, topo_text: str, settings: conf.Settings, *,
        threads: int = 1, timeout: float | None = None, stall: float | None = 600.0, log: IO[str] | None = None,
        parent: str | Path | None = None, build: str | None = None, keep: bool = False,
        poll: float = 0.5) -> Ns3Run:
    """Run SimAI_simulator on one workload and topology, and check what it did (module docstring).

    ``topo_name``/``topo_text``: the topology file (``topology.generate``'s). SimAI's stdout
    is copied to ``log`` when it ends. Raises :class:`checks.RefusedError` before a run,
    :class:`Ns3RunError` after one (the directory is kept then).
    """
    binary = find_binary(binary)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(f"must be a whole number of at least 1, got {threads!r}", key="simulator.ns3.threads")
    workload = wformat.read(workload_path)
    topo = topology.parse(topo_text, source=topo_name)
    prepared = checks.prepare(workload, topo, settings, source=str(workload_path))
    workdir = prepare_dir(prepared.workload, topo_name, topo_text, settings, parent)
    command = hand_command(binary, settings, threads, topo_name)
    write_text(workdir / COMMAND_FILE, f"cd {shlex.quote(str(workdir))} && {command}\n")
    argv = [str(binary.resolve()), "-t", str(threads), "-w", f"./{WORKLOAD_FILE}", "-n", f"./{topo_name}",
            "-c", f"./{conf.CONF_FILE}"]
    returncode, wall, rss, cpu, stopped = _watch(argv, workdir, conf.environment(settings), timeout=timeout, stall=stall,
                                           poll=poll)
    stdout = read_text(workdir / "stdout.log") if (workdir / "stdout.log").exists() else ""
    stderr = (workdir / "stderr.log").read_text(errors="replace") if (workdir / "stderr.log").exists() else ""
    if log is not None:
        log.write(stdout)
        log.flush()
    where = f"; kept {workdir} (rerun: {workdir / COMMAND_FILE})"
    if stopped:
        raise Ns3RunError(stopped + _progress(workdir) + where)
    try:
        result = check(returncode, stdout, stderr, workdir, prepared.workload)
    except Ns3RunError as err:
        raise Ns3RunError(f"{err}{where}") from None
    result.warnings[:0] = prepared.warnings
    result.wall_s, result.peak_rss_kb, result.cpu_s = wall, rss, cpu
    result.build = build_profile(binary, build)
    result.command = command
    if keep:
        result.workdir = workdir
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _watch(argv: list[str], workdir: Path, env: dict[str, str], *, timeout: float | None, stall: float | None,
           poll: float) -> tuple[int, float, int | None, float, str | None]:
    """Run and watch: (exit status or -signal, wall s, peak RSS KB, CPU s, why it was stopped or None).

    A thread waits for the process (``os.wait4``: its exit status, peak memory and CPU time), so its end
    is seen at once; every ``poll`` seconds the watcher checks the time limit and progress.
    """
    start = time.monotonic()
    with open(workdir / "stdout.log", "wb") as out, open(workdir / "stderr.log", "wb") as err:
        try:
            proc = subprocess.Popen(argv, cwd=workdir, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        except OSError as e:
            raise Ns3RunError(f"cannot run {argv[0]}: {e.strerror}") from None
        ended = threading.Event()
        reaped: dict[str, float] = {}

        def reap() -> None:
            _, wait_status, usage = os.wait4(proc.pid, 0)
            reaped.update(status=wait_status, rss=usage.ru_maxrss, cpu=usage.ru_utime + usage.ru_stime,
                          end=time.monotonic())
            ended.set()

        threading.Thread(target=reap, daemon=True).start()
        watched = (workdir / "stdout.log", workdir / conf.FCT_FILE)
        last_sizes, last_change = None, start
        stopped = None
        try:
            while not ended.wait(poll):
                now = time.monotonic()
                sizes = tuple(_size(p) for p in watched)
                if sizes != last_sizes:
                    last_sizes, last_change = sizes, now
                if timeout is not None and now - start > timeout:
                    stopped = (f"SimAI_simulator did not finish within {timeout:g} s (simulator.ns3.timeout_s) "
                               "and was stopped")
                elif stall is not None and now - last_change > stall:
                    stopped = (f"SimAI_simulator made no progress for {stall:g} s (no flow finished, nothing "
                               "printed; simulator.ns3.stall_s) and was stopped: its simulated time stopped "
                               "advancing (a hang, as in SimAI #139 #140 #199 #270)")
                if stopped:
                    _kill(proc)
                    ended.wait()
                    break
        except BaseException:
            _kill(proc)
            raise
        proc.returncode = os.waitstatus_to_exitcode(int(reaped["status"]))
    return proc.returncode, reaped["end"] - start, int(reaped["rss"]), reaped["cpu"], stopped


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _progress(workdir: Path) -> str:
    """Where the simulation had got to: its last finished flow."""
    if not (workdir / conf.FCT_FILE).exists():
        return "; no flow had finished"
    try:
        flows = outputs.parse_fct(read_text(workdir / conf.FCT_FILE))
    except (OSError, CommsweepError):
        return ""
    if not flows:
        return "; no flow had finished"
    stats = outputs.flow_stats(flows)
    return f"; {stats.flows} flow(s) had finished, the last at {stats.last_finish_us:.3f} us of simulated time"


def _stderr_tail(stderr: str, lines: int = 5) -> str:
    tail = [line for line in stderr.strip().splitlines() if line.strip()][-lines:]
    return ("; its stderr ends: " + " | ".join(tail)) if tail else ""


def check(returncode: int, stdout: str, stderr: str, workdir: Path, workload: wformat.Workload) -> Ns3Run:
    """Judge a finished run from its exit status and the files in its directory."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        raise Ns3RunError(f"SimAI_simulator was killed by {name}{_stderr_tail(stderr)}{_progress(workdir)}")
    if returncode != 0:
        raise Ns3RunError(f"SimAI_simulator exited with status {returncode}{_stderr_tail(stderr)}{_progress(workdir)}")
    path = workdir / outputs.ENDTOEND
    if not path.exists():
        raise Ns3RunError(f"SimAI_simulator exited 0 but wrote no {outputs.ENDTOEND}{_stderr_tail(stderr)}")
    text = read_text(path)
    parsed = outputs.parse_endtoend(text, source=path)
    if parsed.empty:
        ep = any(c.group in ("EP", "DP_EP") for c in wformat.collectives(workload))
        raise Ns3RunError(f"SimAI_simulator exited 0 with an EMPTY {outputs.ENDTOEND}: the workload never reached "
                          "its report (SimAI #75 #91 #102 #107 #248"
                          + ("; this workload has EP collectives, which SimAI's NCCL mock often cannot model" if ep
                             else "") + ")" + _progress(workdir))
    if not parsed.complete:
        raise Ns3RunError(f"SimAI_simulator exited 0 with a cut {outputs.ENDTOEND}: {len(parsed.rows)} row line(s), "
                          "no SUM/totals/summary" + _progress(workdir))
    problems = outputs.inconsistencies(parsed, rows=len(workload.rows), stdout=stdout)
    if problems:
        raise Ns3RunError(f"SimAI_simulator's {outputs.ENDTOEND} does not add up: " + "; ".join(problems))
    flows = outputs.parse_fct(read_text(workdir / conf.FCT_FILE), source=workdir / conf.FCT_FILE) \
        if (workdir / conf.FCT_FILE).exists() else []
    pfc = outputs.parse_pfc(read_text(workdir / conf.PFC_FILE), source=workdir / conf.PFC_FILE) \
        if (workdir / conf.PFC_FILE).exists() else []
    util_files = sorted(workdir.glob("ncclFlowModel_*_dimension_utilization_*.csv"))
    util = outputs.busy_share(outputs.parse_utilization(read_text(util_files[0]), source=util_files[0])) \
        if util_files else ()
    result = Ns3Run(text, parsed, tidy(workload, parsed), outputs.flow_stats(flows), sum(e.pause for e in pfc),
                    sum(not e.pause for e in pfc), util)
    big = sum(f.size >= outputs.WRAPPING_FLOW_BYTES for f in flows)
    if big:
        result.warnings.append(f"{big} flow(s) of about 4 GiB or more: SimAI's standalone time for them wraps a "
                               "32-bit byte count, so they are left out of the slowdowns")
    return result


def tidy(workload: wformat.Workload, parsed: outputs.EndToEnd) -> list[CollectiveTime]:
    """The per-collective table (the analytical backend's columns), times in exact us (whole ns)."""
    return collective_rows(workload, wformat.group_sizes(workload.header), parsed.rows,
                           lambda times, name: times.us_text(name), wformat.effective_size)
