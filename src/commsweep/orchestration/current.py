"""Whether `make run` has nothing to do, known without starting Snakemake.

Snakemake takes about 1.5 CPU seconds to start and build its DAG before it can say
"Nothing to be done": most of a `make run` with nothing to do. So `make run` starts it
through ``commsweep sweep --check CONFIG --run-unless-current SNAKEMAKE...`` (``run``), which
after a run of that command that exited 0 (every job of `rule all` done, the check ok)
records what the run was made of and what it left (``record``, in ``.snakemake/commsweep``):

* the command and the folder it ran in;
* the run (``provenance.Run.record``): commsweep's version, the config as validated, its
  file, the external inputs' checksums: what the jobs' parameters are made of;
* the workflow's files by content (Snakefile, workflow/, profiles/, Makefile): its rules,
  scripts and settings (Snakemake's code and params triggers);
* the package's files and the installed packages, by their file system entries (below):
  commsweep's code, Snakemake's and its plugins' versions;
* the environment variables the workflow or Snakemake read (``ENV_PREFIXES``);
* by their entries (size, mtime, ctime and inode: an atomic write makes a new inode, and
  nothing sets a ctime back): every file under results/ but the report (made after, by
  make), Snakemake's metadata of them, and the external inputs (Snakemake's mtime trigger).

The next time, the command is skipped only when all of that is equal and Snakemake holds no
lock and marks no output incomplete (``why_not``); anything else, even a change that would
leave Snakemake nothing to do (a log removed, a comment added to a rule), starts Snakemake,
which decides, and the record is written again after it. The facts of before the run (the
config, the inputs, the code) are those the check read before starting it: a file changed
while Snakemake ran is one the next run sees as changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..base.files import write_text
from ..base.paths import Layout
from .locks import LOCK_DIR

RECORD = Path(".snakemake") / "commsweep" / "make-run.json"
INCOMPLETE = Path(".snakemake") / "incomplete"
METADATA = Path(".snakemake") / "metadata"
# The workflow's files, by content, relative to the folder the command runs in.
WORKFLOW = ("Snakefile", "Makefile", "workflow", "profiles")
# Environment variables read by the workflow (COMMSWEEP_CONTAINER, SIMAI_ROOT, ...) or by
# Snakemake (SNAKEMAKE_PROFILE, ...).
ENV_PREFIXES = ("COMMSWEEP_", "SNAKEMAKE", "SIMAI_", "AICB_", "XDG_CACHE_HOME")
_SKIP = {"__pycache__", ".git"}
# commsweep's own files (src/commsweep in a checkout).
PACKAGE = Path(__file__).resolve().parents[1]


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _walk(root: Path):
    """Every file under ``root`` (``root`` itself when a file), sorted, skipping caches."""
    if not root.is_dir():
        if root.exists():
            yield root
        return
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP)
        for name in sorted(names):
            yield Path(folder) / name


def entries(roots: Sequence[Path], skip: Sequence[Path] = ()) -> str:
    """One digest of the file system entries of every file under ``roots`` but ``skip``: its
    path, size, mtime, ctime and inode (a missing root counts as empty)."""
    skipped = {str(p) for p in skip}
    rows = []
    for root in roots:
        for path in _walk(root):
            if str(path) in skipped:
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue
            rows.append((str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return _digest(rows)


def contents(roots: Sequence[Path]) -> str:
    """One digest of the paths and bytes of every file under ``roots``."""
    h = hashlib.sha256()
    for root in roots:
        for path in _walk(root):
            h.update(str(path).encode() + b"\0")
            try:
                h.update(path.read_bytes())
            except OSError:
                h.update(b"\1unreadable")
            h.update(b"\0")
    return h.hexdigest()


def _installed() -> list:
    """The installed packages: the names in site-packages and its mtime (an install or a
    removal changes both)."""
    site = Path(sysconfig.get_paths()["purelib"])
    try:
        return [site.stat().st_mtime_ns, sorted(os.listdir(site))]
    except OSError:
        return []


def _external_paths(run) -> list[Path]:
    """The files and folders of the run's external inputs."""
    paths = []
    for value in run.inputs.values():
        for ext in (value.values() if isinstance(value, Mapping) else [value]):
            paths.append(Path(ext.path).expanduser())
    return paths


def before(command: Sequence[str], run) -> dict[str, str]:
    """What a run of ``command`` for ``run`` (``provenance.Run``) is made of, read before it starts."""
    return {
        "command": _digest([os.getcwd(), list(command)]),
        "run record": _digest(run.record()),
        "workflow": contents([Path(name) for name in WORKFLOW]),
        "package": entries([PACKAGE]),
        "installed": _digest([sys.executable, sys.version, _installed()]),
        "environment": _digest(sorted((k, v) for k, v in os.environ.items() if k.startswith(ENV_PREFIXES))),
        "external inputs": entries(_external_paths(run)),
    }


def after(layout: Layout) -> dict[str, str]:
    """What a run left: results/ (the report aside) and Snakemake's metadata of it."""
    return {"results": entries([Path(layout.root)], skip=[Path(layout.report())]),
            "Snakemake's metadata": entries([METADATA])}


def busy() -> str | None:
    """Why Snakemake must look itself: a lock held, or outputs it marks incomplete."""
    for folder, what in ((LOCK_DIR, "Snakemake holds a lock"), (INCOMPLETE, "an output is marked incomplete")):
        try:
            if any(folder.iterdir()):
                return what
        except OSError:
            pass
    return None


def why_not(facts: dict[str, str], layout: Layout, record: Path = RECORD) -> str | None:
    """Why Snakemake must run (what changed since the last run recorded), or None when
    ``facts`` (``before``) and what is on disk (``after``) are those of the record."""
    try:
        recorded = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "no record of an earlier run"
    now = {**facts, **after(layout)}
    changed = [name for name in now if recorded.get(name) != now[name]]
    if changed:
        return ", ".join(changed) + " changed"
    return busy()


def record(facts: dict[str, str], layout: Layout, path: Path = RECORD) -> bool:
    """After a run of the command that exited 0: write the record (unless Snakemake still
    holds a lock or marks an output incomplete: another run may be going). Whether written."""
    if busy():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps({**facts, **after(layout)}, indent=1, sort_keys=True) + "\n")
    return True


def run(command: Sequence[str], run_, config: str, layout: Layout | None = None) -> int:
    """``command`` (Snakemake, as `make run` starts it) unless nothing changed since it last
    exited 0 here; its exit status (0 when skipped)."""
    layout = layout or Layout()
    facts = before(command, run_)
    reason = why_not(facts, layout)
    if reason is None:
        verdict = _first_line(layout.verdict())
        print(f"commsweep: nothing to do: results/ are as the last run of {config} left them ({verdict}); "
              f"the answer: {layout.answer_page()}", file=sys.stderr, flush=True)
        return 0
    RECORD.unlink(missing_ok=True)
    sys.stdout.flush()
    # Ctrl-C reaches Snakemake itself (the terminal's whole process group): this process waits
    # for it to end, then ends as it did. (A handler, not SIG_IGN, which Snakemake would inherit.)
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        status = subprocess.call(list(command))
    finally:
        signal.signal(signal.SIGINT, previous)
    if status == 0:
        record(facts, layout)
    elif status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status if status >= 0 else 128 - status


def _first_line(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()[0]
    except (OSError, IndexError):
        return f"no {path}"
