"""Snakemake's lock on a working directory: cleared when stale, never broken while its run lives.

Snakemake locks the files a run reads and writes (``.snakemake/locks/``) and removes the
lock when the run ends, also after Ctrl-C; but not when Snakemake itself is killed
(kill -9, a crash, a closed login session). The next run then refuses to start until
someone runs ``snakemake --unlock``, which breaks any lock, also that of a run still going.

The workflow calls ``clear_stale`` while Snakemake reads the Snakefile, before it checks
its lock. A lock is stale when no Snakemake runs in this directory: none among this
machine's processes, and the run that took it (``holder.json``, written when a run starts)
ran on this machine. Then the lock files are removed, as ``--unlock`` would. Otherwise
``LockHeld`` names the live run (its PID, host, start and command) and nothing is touched:
a lock taken on another machine, or by another user, is never broken. (The workflow prints
it and leaves the refusal to Snakemake, which alone knows whether this run needs the lock:
a dry run or ``--unlock`` does not.)
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import CommsweepError

LOCK_DIR = Path(".snakemake") / "locks"
HOLDER = Path(".snakemake") / "commsweep" / "holder.json"


class LockHeld(CommsweepError):
    """Another Snakemake runs in this directory (or may: its machine cannot be checked)."""


@dataclass(frozen=True)
class Process:
    """A running Snakemake: its PID and command line."""

    pid: int
    command: str


def is_snakemake(cmdline: list[str]) -> bool:
    """Whether a command line runs Snakemake (``snakemake ...``, ``python -m snakemake ...``)."""
    head = cmdline[:3]
    return any(os.path.basename(arg) == "snakemake" for arg in head) or (
        "-m" in head and "snakemake" in cmdline[: head.index("-m") + 2]
    )


def live_snakemakes(workdir: str | Path = ".") -> list[Process]:
    """The Snakemake processes of this machine working in ``workdir`` (this process aside)."""
    import psutil  # a dependency of Snakemake

    here = os.path.realpath(workdir)
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.pid == os.getpid() or not is_snakemake(proc.info["cmdline"] or []):
                continue
            if os.path.realpath(proc.cwd()) != here:
                continue
            found.append(Process(proc.pid, " ".join(proc.info["cmdline"])))
        except (psutil.Error, OSError):  # gone, a zombie, or not ours to inspect
            continue
    return found


def record_holder(workdir: str | Path = ".") -> None:
    """Note which run holds the lock (this process, this machine), for a later run to check."""
    from ..base.files import write_text

    record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
              "command": " ".join(sys.argv)}
    write_text(Path(workdir) / HOLDER, json.dumps(record, sort_keys=True) + "\n")


def release_holder(workdir: str | Path = ".") -> None:
    (Path(workdir) / HOLDER).unlink(missing_ok=True)


def read_holder(workdir: str | Path = ".") -> dict | None:
    try:
        record = json.loads((Path(workdir) / HOLDER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _describe(holder: dict) -> str:
    return (f"Snakemake PID {holder.get('pid')} on {holder.get('host')}, started {holder.get('started')}"
            f" (`{holder.get('command')}`)")


def clear_stale(workdir: str | Path = ".") -> str | None:
    """Remove Snakemake's lock of ``workdir`` if no Snakemake holds it any more.

    Returns a line saying what was cleared (None: there was no lock); raises LockHeld,
    touching nothing, when a live run holds it or it cannot be told that none does.
    """
    workdir = Path(workdir)
    locks = sorted((workdir / LOCK_DIR).glob("*.lock")) if (workdir / LOCK_DIR).is_dir() else []
    if not locks:
        return None
    live = live_snakemakes(workdir)
    if live:
        raise LockHeld(_running(workdir, live))
    holder = read_holder(workdir)
    if holder is not None and holder.get("host") != socket.gethostname():
        raise LockHeld(f"{workdir.resolve()} is locked by {_describe(holder)}, on another machine, which cannot "
                       "be checked from here; if that run is over, run `snakemake --unlock` once")
    others = {lock.stat().st_uid for lock in locks} - {os.getuid()}
    if others:
        raise LockHeld(f"{workdir.resolve()} is locked by another user (uid {', '.join(map(str, sorted(others)))}); "
                       "if their run is over, they (or you, with `snakemake --unlock`) can clear it")
    for lock in locks:
        lock.unlink(missing_ok=True)
    release_holder(workdir)
    by = f" left by {_describe(holder)}," if holder else ""
    return f"cleared a stale lock{by} no Snakemake runs in {workdir.resolve()} any more"


def _running(workdir: Path, live: list[Process]) -> str:
    shown = "; ".join(f"PID {p.pid}: {p.command}" for p in live)
    return (f"another Snakemake is running in {workdir.resolve()} ({shown}); wait for it to finish, "
            f"or stop it first (kill {' '.join(str(p.pid) for p in live)}); its lock is never broken")


def refuse_if_live(workdir: str | Path = ".") -> str | None:
    """Before `make run` starts Snakemake: raise LockHeld, naming it, while another Snakemake
    runs in ``workdir``, with its lock or not yet (one takes it only after reading the
    workflow), so that the second run stops after that line instead of starting a Snakemake
    that refuses in turn; else ``clear_stale``."""
    workdir = Path(workdir)
    live = live_snakemakes(workdir)
    if live:
        raise LockHeld(_running(workdir, live))
    return clear_stale(workdir)
