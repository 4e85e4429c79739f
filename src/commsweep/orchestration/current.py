"""Whether `make run` has nothing to do, known without starting Snakemake.

Snakemake takes about 1.5 CPU seconds to start and build its DAG before it can say
"Nothing to be done": most of a `make run` with nothing to do. So `make run` starts it
through ``commsweep sweep --check CONFIG --run-unless-current SNAKEMAKE...`` (``run``), which
after a run of that command that exited 0 (every job of `rule all` done, the check ok)
records what the run was made of and what it left (``record``, in ``.snakemake/commsweep``, one
per results folder: ``record_path``):

* the command and the folder it ran in;
* the run (``provenance.Run.record``): commsweep's version, the config as validated, its
  file, the external inputs' checksums: what the jobs' parameters are made of;
* the workflow's files by content (Snakefile, workflow/, profiles/, Makefile): its rules,
  scripts and settings (Snakemake's code and params triggers);
* the package's files and the installed packages, by their file system entries (below):
  commsweep's code, Snakemake's and its plugins' versions;
* the environment variables the workflow or Snakemake read (``ENV_PREFIXES``);
* by their entries (size, mtime, ctime and inode: an atomic write makes a new inode, and
  nothing sets a ctime back): every file in the sweep's results folder but the report and the
  folders of other sweeps within it, Snakemake's metadata of them, and the external inputs
  (Snakemake's mtime trigger).

The next time, the command is skipped only when all of that is equal and Snakemake holds no
lock and marks no output incomplete (``why_not``); anything else, even a change that would
leave Snakemake nothing to do (a log removed, a comment added to a rule), starts Snakemake,
which decides, and the record is written again after it. The facts of before the run (the
config, the inputs, the code) are those the check read before starting it: a file changed
while Snakemake ran is one the next run sees as changed.
"""

from __future__ import annotations

import contextlib
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
from ..base.paths import RESULTS, Layout
from .locks import LOCK_DIR

RECORD = Path(".snakemake") / "commsweep" / "make-run.json"
# The records of sweeps in other results folders than the default's, one file each.
RECORDS = Path(".snakemake") / "commsweep" / "make-run"
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


def record_path(layout: Layout) -> Path:
    """Where the record of `make run` into ``layout``'s folder is (one per results folder)."""
    from urllib.parse import quote

    if layout.root == RESULTS:
        return RECORD
    return RECORDS / (quote(layout.root, safe="") + ".json")


def _walk(root: Path, nested: bool = True):
    """Every file under ``root`` (``root`` itself when a file), sorted, skipping caches, and
    unless ``nested``, the results folders of other sweeps within it (a folder with a run.json)."""
    if not root.is_dir():
        if root.exists():
            yield root
        return
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP
                         and (nested or not os.path.exists(os.path.join(folder, d, "run.json"))))
        for name in sorted(names):
            yield Path(folder) / name


def _entry(path: Path) -> list[tuple]:
    """A file system entry's row of a digest (path, size, mtime, ctime, inode); none where it
    vanished meanwhile."""
    try:
        st = os.lstat(path)
    except OSError:
        return []
    return [(str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)]


def entries(roots: Sequence[Path], skip: Sequence[Path] = (), nested: bool = True) -> str:
    """One digest of the file system entries of every file under ``roots`` but ``skip``: its
    path, size, mtime, ctime and inode (a missing root counts as empty). ``nested``: see ``_walk``."""
    skipped = {str(p) for p in skip}
    rows = []
    for root in roots:
        for path in _walk(root, nested):
            if str(path) in skipped:
                continue
            rows += _entry(path)
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
    """What a run left: its results folder (the report and the folders of other sweeps within
    it aside) and Snakemake's metadata of it."""
    return {"results": entries([Path(layout.root)], skip=[Path(layout.report())], nested=False),
            "Snakemake's metadata": metadata_entries(layout)}


def _own(path: str, root: str, sweeps: dict[str, bool]) -> bool:
    """Whether ``path`` is a file of the sweep in ``root``: under it, not in a folder of
    another sweep within it (one with a run.json; ``sweeps`` caches the answers)."""
    if not path.startswith(root + "/"):
        return False
    parts = path[len(root) + 1:].split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        folder = "/".join([root, *parts[:depth]])
        if folder not in sweeps:
            sweeps[folder] = os.path.exists(os.path.join(folder, "run.json"))
        if sweeps[folder]:
            return False
    return True


def metadata_entries(layout: Layout) -> str:
    """One digest of the entries of Snakemake's metadata of the files of ``layout``'s sweep
    (a file per output, named by its path in URL-safe base64, cut into folders of ``@``parts),
    so that a run of another sweep, in a folder of its own, leaves this one current."""
    from base64 import urlsafe_b64decode

    rows = []
    sweeps: dict[str, bool] = {}
    for path in _walk(METADATA):
        parts = path.relative_to(METADATA).parts
        try:
            output = urlsafe_b64decode("".join(p.removeprefix("@") for p in parts)).decode()
        except (ValueError, UnicodeDecodeError):
            continue
        if not _own(output, layout.root, sweeps):
            continue
        rows += _entry(path)
    return _digest(rows)


def busy() -> str | None:
    """Why Snakemake must look itself: a lock held, or outputs it marks incomplete."""
    for folder, what in ((LOCK_DIR, "Snakemake holds a lock"), (INCOMPLETE, "an output is marked incomplete")):
        try:
            if any(folder.iterdir()):
                return what
        except OSError:
            pass
    return None


def why_not(facts: dict[str, str], layout: Layout, record: Path | None = None) -> str | None:
    """Why Snakemake must run (what changed since the last run recorded), or None when
    ``facts`` (``before``) and what is on disk (``after``) are those of the record."""
    record = record or record_path(layout)
    try:
        recorded = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "no record of an earlier run"
    now = {**facts, **after(layout)}
    changed = [name for name in now if recorded.get(name) != now[name]]
    if changed:
        return ", ".join(changed) + " changed"
    return busy()


def record(facts: dict[str, str], layout: Layout, path: Path | None = None) -> bool:
    """After a run of the command that exited 0: write the record (unless Snakemake still
    holds a lock or marks an output incomplete: another run may be going). Whether written."""
    path = path or record_path(layout)
    if busy():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps({**facts, **after(layout)}, indent=1, sort_keys=True) + "\n")
    return True


# What the HTML report shows besides the results: its front page and captions, the rules it
# draws and lists (a report older than any of them, or than the verdict, is made again).
REPORT_SOURCES = ("Snakefile", "workflow/report", "workflow/rules")


def report_args(layout: Layout) -> list[str]:
    """Snakemake's options that make the report of ``layout``'s results after its run."""
    return ["--report", layout.report(), "--report-after-run"]


def report_stale(layout: Layout) -> bool:
    """Whether the report is missing or older than the verdict or a file of ``REPORT_SOURCES``."""
    try:
        made = os.stat(layout.report()).st_mtime_ns
    except OSError:
        return True
    sources = [Path(layout.verdict()), *(p for name in REPORT_SOURCES for p in _walk(Path(name)))]
    return any(p.exists() and p.stat().st_mtime_ns > made for p in sources)


def run(command: Sequence[str], run_, config: str, layout: Layout | None = None, *, report: bool = False) -> int:
    """``command`` (Snakemake, as `make run` starts it) unless nothing changed since it last
    exited 0 here; its exit status (0 when skipped). Refused (1, Snakemake not started) while
    another Snakemake runs in this folder (``locks.refuse_if_live``).

    ``report``: the HTML report of the results too: by the same Snakemake (``report_args``),
    else, with nothing to do, by Snakemake alone when it is missing or stale (``report_stale``).
    """
    from ..base.errors import CommsweepError
    from .locks import refuse_if_live

    layout = layout or Layout()
    try:
        said = refuse_if_live()
    except CommsweepError as held:
        print(f"commsweep: {held}", file=sys.stderr, flush=True)
        return 1
    if said:
        print(f"commsweep: {said}", file=sys.stderr, flush=True)
    facts = before(command, run_)
    reason = why_not(facts, layout)
    if reason is None:
        verdict = _first_line(layout.verdict())
        print(f"commsweep: nothing to do: {layout.root}/ are as the last run of {config} left them ({verdict}); "
              f"the answer: {layout.answer_page()}", file=sys.stderr, flush=True)
        if report and report_stale(layout):
            return _call([*command, "--report", layout.report()])
        return 0
    record_path(layout).unlink(missing_ok=True)
    status = _call([*command, *(report_args(layout) if report else [])])
    if status == 0:
        record(facts, layout)
    return status


def report(command: Sequence[str], layout: Layout) -> int:
    """``command`` (Snakemake) making the HTML report of ``layout``'s results (`make report`)."""
    return _call([*command, "--report", layout.report()])


def _call(command: Sequence[str]) -> int:
    """Run ``command`` in the foreground; its exit status, or this process ends as it did when
    a signal ended it. Ctrl-C reaches the command itself (the terminal's whole process group):
    this process waits for it to end, then ends as it did (a handler, not SIG_IGN, which the
    command would inherit). Snakemake starts with Ctrl-C held back (``interrupts.held``): this
    workflow takes it once it can say one line (``interrupts.begin``), where Snakemake's own
    start would print a traceback."""
    from .interrupts import held
    from .locks import is_snakemake

    sys.stdout.flush()
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        with held() if is_snakemake(list(command)) else contextlib.nullcontext():
            process = subprocess.Popen(list(command))
        status = process.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status if status >= 0 else 128 - status


def _first_line(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()[0]
    except (OSError, IndexError):
        return f"no {path}"
