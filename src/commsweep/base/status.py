"""Per-point outcomes: one bad point is recorded, never fatal to the others.

Snakemake cannot run the summary when one of its inputs failed, so a sweep of thousands
of points would lose its table to a single bad point. Every per-point task (a batch runs
them in-process, ``commsweep.orchestration.batch``) therefore runs its ``commsweep`` command through
``guard`` (``commsweep guard`` on the command line), which always leaves a *status file*
beside the task's outputs:

* ``ok``: the command succeeded and wrote every declared output;
* ``failed``: the command raised; the status holds the stage (the subcommand) and its
  one-line error, and every other declared output is replaced by a one-line marker
  (``MARKER``) so that Snakemake sees a complete job and goes on with the other points.
  No reader of the project accepts a marker as data (each rejects its first line);
* a guarded rule whose upstream status (``--after``) failed does not run its command: it
  records that it was not run (``NOT_RUN``), naming the task that failed (``upstream``: the
  status of the root failure, however many stages back) and its error, so the root cause
  travels to the summary whatever stage it happened in (``Status.cause``), and nothing
  mistakes the task that never ran for one that failed itself (was killed, say).

The sweep-wide steps (summary, comparison, figures) are guarded the same way. The summary
lists the failed points with their error (``failures``); ``commsweep check`` runs last,
whatever failed, and writes the run's verdict (``check``): all ok, or the failed points
and steps, which fail the run. Each status also records its attempt
number, which the rules pass to the job as a parameter (``next_attempt``): it changes
after a failure, so Snakemake's ``params`` rerun trigger retries exactly the failed jobs
on the next run, and the summary after them.

A job that is killed (out of memory, time limit, node failure) writes no status: it
fails in Snakemake as usual and is rerun, and ``--keep-going`` lets the other points go on.
The status is written last and atomically, so a status file always speaks for outputs
that are complete. It also records what made them (``job_provenance``).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import paths
from .errors import CommsweepError, InputError, PartialResult
from .files import write_text

SUFFIX = ".status"
# The config digest of the run a job belongs to, for its status file (set by the workflow,
# ``pipeline``; read by ``commsweep guard``). Not a parameter of the jobs: a config change
# that leaves a job's own parameters alone must not rerun it.
CONFIG_DIGEST_ENV = "COMMSWEEP_CONFIG_DIGEST"
MARKER = "commsweep: no result:"
# The error of a task not run because a task it reads failed: ``not run: <status> failed: <cause>``.
NOT_RUN = "not run:"


@dataclass(frozen=True)
class Status:
    """The outcome of one per-point task or sweep-wide step."""

    ok: bool
    stage: str
    error: str = ""
    # The status file this failure was copied from (a failed upstream job), if any.
    upstream: str | None = None
    # The job's declared outputs (besides the status file).
    outputs: tuple[str, ...] = field(default=())
    # Which run of the job this was (see next_attempt).
    attempt: int = 1
    # What made the outputs: commsweep's version, the run's config digest, the checksums of
    # the external inputs the job read (see commsweep.orchestration.provenance). Empty: not recorded.
    provenance: dict = field(default_factory=dict, compare=False)
    # The digest of the task that made the outputs (its command, inputs and upstream tasks;
    # ``commsweep.orchestration.batch``): a batch skips a task whose status is ok with the same digest.
    job: str = field(default="", compare=False)

    def render(self) -> str:
        record = {
            "status": "ok" if self.ok else "failed",
            "stage": self.stage,
            "error": self.error,
            "upstream": self.upstream,
            "outputs": list(self.outputs),
            "attempt": self.attempt,
        }
        if self.provenance:
            record["provenance"] = self.provenance
        if self.job:
            record["job"] = self.job
        return json.dumps(record, sort_keys=True) + "\n"

    def reason(self) -> str:
        """``stage: error`` on one line (a marker's text)."""
        lines = [line.strip() for line in self.error.splitlines() if line.strip()]
        return f"{self.stage}: " + "; ".join(lines)

    @property
    def ran(self) -> bool:
        """Whether the task ran (False: not run, because the task ``upstream`` names failed)."""
        return not (self.upstream and self.error.startswith(NOT_RUN))

    def cause(self) -> str:
        """The root failure's ``stage: error``, as the summary shows it: this task's own, or,
        for one not run, that of the task that failed (``upstream``)."""
        prefix = f"{NOT_RUN} {self.upstream} failed: "
        if self.upstream and self.error.startswith(prefix):
            return self.error[len(prefix):]
        return self.reason()


def not_run(stage: str, upstream: str | Path, before: Status, *, outputs: tuple[str, ...] = (),
            attempt: int = 1) -> Status:
    """The status of a task not run because the task it reads (status ``upstream``) failed:
    it names the task where the failure happened (following a not-run upstream back to it)
    and that failure's cause."""
    root = before.upstream if before.upstream and not before.ran else str(upstream)
    return Status(ok=False, stage=stage, error=f"{NOT_RUN} {root} failed: {before.cause()}", upstream=root,
                  outputs=outputs, attempt=attempt)


def write(path: str | Path, status: Status) -> None:
    write_text(path, status.render())


def read(path: str | Path) -> Status:
    """Read a status file; raise InputError naming the file for anything else."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError("not a status file (not UTF-8 text)", file=path, line=1) from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"not a status file ({err.msg})", file=path, line=err.lineno) from None
    if not isinstance(record, dict) or record.get("status") not in ("ok", "failed"):
        raise InputError("not a status file (expected a JSON object with status ok or failed)", file=path, line=1)
    outputs = record.get("outputs") or []
    if not isinstance(outputs, list) or not all(isinstance(o, str) for o in outputs):
        raise InputError("expected a list of paths", file=path, line=1, field="outputs")
    upstream = record.get("upstream")
    attempt = record.get("attempt", 1)
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise InputError(f"expected a positive integer, got {attempt!r}", file=path, line=1, field="attempt")
    provenance = record.get("provenance") or {}
    if not isinstance(provenance, dict):
        raise InputError("expected a mapping", file=path, line=1, field="provenance")
    job = record.get("job") or ""
    if not isinstance(job, str):
        raise InputError("expected a digest", file=path, line=1, field="job")
    return Status(
        ok=record["status"] == "ok",
        stage=str(record.get("stage", "")),
        error=str(record.get("error", "")),
        upstream=upstream if isinstance(upstream, str) else None,
        outputs=tuple(outputs),
        attempt=attempt,
        provenance=provenance,
        job=job,
    )


def job_provenance(words: Iterable[str] = ()) -> dict:
    """What a status records of the job's making: commsweep's version, the run's config digest
    (from the workflow, ``CONFIG_DIGEST_ENV``) and the external inputs' checksums
    (``KEY=CHECKSUM`` words, the job's ``params.provenance``)."""
    import os

    from .. import __version__

    inputs = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep:
            raise CommsweepError(f"--provenance: expected KEY=VALUE, got {word!r}")
        if key != "commsweep":
            inputs[key] = value
    record: dict = {"commsweep": __version__, "config": os.environ.get(CONFIG_DIGEST_ENV)}
    if inputs:
        record["inputs"] = inputs
    return record


def marker_text(status: Status, status_path: str | Path) -> str:
    return f"{MARKER} {status.reason()} (see {status_path})\n"


def is_marker(path: str | Path) -> bool:
    """Whether a file is a failed job's marker rather than a result."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(MARKER)) == MARKER.encode()
    except OSError:
        return False


# -- running a per-point command -------------------------------------------------------


def describe_exception(err: BaseException) -> str:
    """The one-line error of a failed command, as the CLI would print it."""
    if isinstance(err, CommsweepError):
        return str(err)
    if isinstance(err, FileNotFoundError) and err.filename:
        return f"{err.filename}: no such file"
    if isinstance(err, OSError) and err.filename:
        return f"{err.filename}: {err.strerror}"
    return f"internal error: {type(err).__name__}: {err}"


def guard(
    stage: str,
    run: Callable[[], None],
    *,
    status_path: str | Path,
    outputs: Sequence[str | Path] = (),
    after: Iterable[str | Path] = (),
    attempt: int = 1,
    provenance: dict | None = None,
    job: str = "",
) -> Status:
    """Run one per-point command and record its outcome in ``status_path``.

    ``run`` is the command (it raises on failure); ``outputs`` are the job's declared
    outputs (the status file among them is skipped); ``after`` are the status files of
    the jobs this one depends on; ``attempt`` and ``provenance`` (see ``job_provenance``)
    are recorded, and so is ``job``, the task's digest (``commsweep.orchestration.batch``). Returns the status written. Only a failure to write
    the status itself (or an interruption) escapes.
    """
    status_path = Path(status_path)
    outs = tuple(str(o) for o in outputs if Path(o) != status_path)
    kept = False  # a partial result (errors.PartialResult): its outputs stay, their failed rows named
    status = _upstream_failure(stage, after, outs, attempt)
    if status is None:
        status, kept = _run_guarded(stage, run, outs, attempt)
    if provenance:
        status = replace(status, provenance=provenance)
    if job:
        status = replace(status, job=job)
    if not status.ok:
        for out in outs:
            if not (kept and Path(out).exists()):
                write_text(out, marker_text(status, status_path))
    write(status_path, status)
    return status


def _upstream_failure(stage: str, after: Iterable[str | Path], outs: tuple[str, ...], attempt: int) -> Status | None:
    """The status of a job not run because a job it depends on failed (None: all ran well)."""
    for upstream in after:
        try:
            before = read(upstream)
        except (OSError, InputError) as err:  # only by hand: guard writes them atomically
            status = Status(ok=False, stage=stage, error=f"unreadable upstream status: {describe_exception(err)}",
                            outputs=outs, attempt=attempt)
        else:
            if before.ok:
                continue
            status = not_run(stage, upstream, before, outputs=outs, attempt=attempt)
        print(f"commsweep {stage}: {status.error}", file=sys.stderr)
        return status
    return None


def _run_guarded(stage: str, run: Callable[[], None], outs: tuple[str, ...], attempt: int) -> tuple[Status, bool]:
    """Run the command; its status, and whether its outputs stay though it failed (a
    ``PartialResult``: the tables it wrote name their failed rows)."""
    try:
        run()
    except Exception as err:  # noqa: BLE001 - any failure of one point is recorded, not raised
        message = describe_exception(err)
        if message.startswith("internal error"):
            traceback.print_exc(file=sys.stderr)
        print(f"commsweep {stage}: error: {message}", file=sys.stderr)
        return Status(ok=False, stage=stage, error=message, outputs=outs, attempt=attempt), isinstance(err, PartialResult)
    missing = [o for o in outs if not Path(o).exists()]
    if missing:
        message = f"did not write {', '.join(missing)}"
        print(f"commsweep {stage}: error: {message}", file=sys.stderr)
        return Status(ok=False, stage=stage, error=message, outputs=outs, attempt=attempt), False
    return Status(ok=True, stage=stage, outputs=outs, attempt=attempt), False


def parse_quietly(parse: Callable[[], object]) -> object:
    """Run an argparse parse, turning its usage error into a CommsweepError."""
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stderr(buffer):
            return parse()
    except SystemExit as exit_:
        text = buffer.getvalue().strip()
        sys.stderr.write(buffer.getvalue())
        if exit_.code in (0, None):
            raise
        last = text.splitlines()[-1] if text else f"exit status {exit_.code}"
        raise CommsweepError(f"invalid arguments: {last}") from None


# -- what the summary and the check read ------------------------------------------------


def failures(files: paths.PointFiles, workload: str, point: str) -> list[tuple[Path, Status]]:
    """The failed jobs of one point (a failure copied downstream appears once per job)."""
    found = [(path, read(path)) for path in files.statuses(workload, point)]
    return [(path, st) for path, st in found if not st.ok]


def reasons(found: Iterable[tuple[Path, Status]]) -> str:
    """The distinct root causes (``stage: error``) of a point's failed jobs, joined by `` | ``."""
    unique: list[str] = []
    for _, st in found:
        if st.cause() not in unique:
            unique.append(st.cause())
    return " | ".join(unique)


def next_attempt(path: str | Path) -> int:
    """The attempt number a guarded job runs with next.

    The rules pass it as a parameter: after a failure it grows by one, so Snakemake's
    ``params`` rerun trigger reruns exactly the failed jobs on the next run (their outputs
    exist, as markers, so nothing else would); after a success it stays, so a finished
    job is not rerun. No status yet (or an unreadable one) means the first attempt.
    """
    try:
        status = read(path)
    except (OSError, InputError):
        return 1
    return status.attempt if status.ok else status.attempt + 1


FAILED = "failed:"


def check(
    points: Iterable,
    files: paths.PointFiles,
    steps: Iterable[str | Path] = (),
    *,
    run: str | None = None,
    ignored: Iterable[str] = (),
) -> tuple[bool, str]:
    """The verdict of a run: whether every point and sweep-wide step succeeded, and its text.

    ``points`` are the valid rows of the points table (``points.PointRow``), ``files`` their status files,
    ``steps`` the status files of the sweep-wide steps (summary, comparison, figures).
    The text is ``all N point(s) ok`` on success; otherwise its first line starts with
    ``failed:`` and one line per failed point or step follows, with the error. A point with
    no status file at all counts as failed too: its results were never made (or were
    removed by hand). ``run`` names the run (``provenance.Run.id``); ``ignored`` lists
    outputs of points not in this sweep (``provenance.stale_outputs``), which it names.
    """
    points = list(points)
    named = f" (run {run})" if run else ""
    failed: list[str] = []
    for point in points:
        statuses = files.statuses(point.workload, point.point)
        if not statuses:
            failed.append(f"  {point.point}: no status file: its jobs never ran")
            continue
        found = [(path, st) for path, st in ((p, read(p)) for p in statuses) if not st.ok]
        if found:
            failed.append(f"  {point.point}: {reasons(found)}")
    broken = []
    for path in map(Path, steps):
        st = read(path)
        if not st.ok:
            broken.append(f"  {path.name.removesuffix(SUFFIX)}: {st.cause()}")
    ignored = list(ignored)
    notes = []
    if ignored:
        notes.append(f"ignored: {len(ignored)} output(s) of points not in this sweep (left from an earlier "
                      "one; not part of this run's results):")
        notes += [f"  {path}" for path in ignored]
    if not failed and not broken:
        return True, "\n".join([f"all {len(points)} point(s) ok{named}", *notes]) + "\n"
    lines = []
    if failed:
        lines.append(f"{FAILED} {len(failed)} of {len(points)} point(s) failed{named} (results/summary.csv "
                     "lists them; the next run retries them):")
        lines += failed
    if broken:
        lines.append(f"{FAILED} {len(broken)} sweep-wide step(s) failed{named} (the next run retries them):")
        lines += broken
    return False, "\n".join(lines + notes) + "\n"


def verdict_failed(text: str) -> bool:
    """Whether a verdict (``check``'s text, status.txt) records a failure."""
    return text.startswith(FAILED)
