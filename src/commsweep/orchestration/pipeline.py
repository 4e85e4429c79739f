"""What the Snakemake workflow calls into: the rules stay thin, the logic lives here.

* ``load_config``: the sweep config as commsweep reads it (``configfile``);
* ``prepare``: everything checked and recorded before the first job (external inputs,
  the run's name, a stale lock, outputs of earlier sweeps);
* ``on_start``, ``on_success``, ``on_error``: the Snakefile's hooks (the lock's holder, the
  verdict of the run);
* ``run_rule``: a sweep-wide rule's command with its declared files;
* ``Unrecorded`` and ``digest``: a long parameter of a rule, and the short one Snakemake
  records in its place.

``run_rule`` runs a ``commsweep`` command for a sweep-wide rule in the job's own
process (a Snakemake ``script:``), with the rule's declared files: the summary, the
comparison and the check read every point's files, and a sweep of a thousand points
names more of them than one shell command line may hold (Linux caps a single argument,
hence ``bash -c COMMAND``, at 128 KiB).
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Unrecorded:
    """A rule's parameter Snakemake neither records nor compares (it records builtin values
    only): a long text (the run record, the sweep table) or list (the ignored outputs), whose
    change a short parameter beside it stands for (``digest``). Snakemake's reason for a rerun
    ("Params have changed") then shows a changed digest, not the whole config as JSON."""

    value: object


def digest(value) -> str:
    """16 hex digits of ``value`` (text, or anything JSON can write): a rule's rerun trigger."""
    import hashlib
    import json

    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


_PLACEHOLDER = re.compile(r"^<(input|output|params)(?:\.(\w+))?>$")
# <batches.KIND>: the files of that kind the batch manifests of input.batches list.
_BATCH_FILES = re.compile(r"^<batches\.(\w+)>$")


def expand_command(template: Sequence[str], namespaces: Mapping[str, object]) -> list[str]:
    """A command line from a template whose items may be placeholders for the job's files.

    An item ``<input.NAME>``, ``<output.NAME>`` or ``<params.NAME>`` becomes that file, or
    every file of that list, as separate arguments; ``<output>`` (or ``<input>``) becomes
    all of them. ``<batches.KIND>`` becomes every file of that kind (``batch.FILE_KINDS``) the
    batch manifests ``input.batches`` list: the points' files, which Snakemake does not
    track one by one. Other items are kept as they are. (Not Snakemake's ``{input.NAME}``:
    Snakemake would expand those in params itself, as one string.)
    """
    argv: list[str] = []
    for item in template:
        listed = _BATCH_FILES.match(str(item))
        if listed is not None:
            from .batch import manifest_files

            argv.extend(manifest_files(namespaces["input"].batches, listed.group(1)))
            continue
        match = _PLACEHOLDER.match(item)
        if match is None:
            argv.append(str(item))
            continue
        space, name = match.groups()
        value = namespaces[space]
        if name is not None:
            try:
                value = getattr(value, name)
            except AttributeError:
                raise KeyError(f"{item}: the rule has no {space} named {name!r}") from None
        if isinstance(value, Unrecorded):
            value = value.value
        if isinstance(value, (str, int, float)):
            argv.append(str(value))
        else:
            argv.extend(str(v) for v in value)
    return argv


def run_rule(smk) -> None:
    """Run ``smk.params.command`` (see ``expand_command``) as ``commsweep`` in this process,
    or each of ``smk.params.commands`` (rule figures: one job draws every figure, each its own
    guarded step, so matplotlib and pandas are imported once; in the job's threads, forked
    after those imports: ``commands.run_all``).

    ``smk`` is the ``snakemake`` object of a ``script:`` rule. The commands' stdout and
    stderr go to the rule's log; a non-zero exit status of any fails the job (after the
    others ran).
    """
    from . import storage
    from .commands import run_all
    from .exits import quick
    from .interrupts import accepting

    quick()

    said = f"rule {smk.rule}: interrupted (Ctrl-C); the next run does it again"
    with accepting(said, smk.log[0]):
        spaces = {"input": smk.input, "output": smk.output, "params": smk.params}
        templates = smk.params.commands if hasattr(smk.params, "commands") else [smk.params.command]
        argvs = [expand_command(template, spaces) for template in templates]
        # Ctrl-C: Snakemake shows this log, written again as that one line (not the commands' so far).
        with open(smk.log[0], "w", encoding="utf-8") as log, contextlib.redirect_stdout(log), \
                contextlib.redirect_stderr(log):
            # Without a shared filesystem: into the job's root once, every command's paths relative to it.
            words = iter(storage.enter([word for argv in argvs for word in argv]))
            # Several commands (rule figures): side by side in the job's threads (commands.run_all).
            failed = run_all([[next(words) for _ in argv] for argv in argvs], processes=smk.threads)
    if failed:
        raise SystemExit(failed)


# -- hooks of the Snakefile ------------------------------------------------------------------


def load_config(workflow, config: dict) -> str:
    """Replace Snakemake's reading of the sweep config with commsweep's (``configfile.load``);
    returns the sweep's results folder (``paths.results_folder``).

    The files are those Snakemake read (``--configfile``, else the Snakefile's default),
    the overrides the raw ``--config KEY=VALUE`` arguments; ``config`` is updated in place.
    """
    from ..base.paths import results_folder
    from ..setup.configfile import load

    files = [str(f) for f in workflow.configfiles]
    loaded = load(files, overrides(workflow))
    config.clear()
    config.update(loaded)
    return results_folder(config)


def overrides(workflow) -> list[str]:
    """The run's raw ``--config KEY=VALUE`` arguments."""
    return list(getattr(workflow.config_settings, "config_args", None) or ())


# What prepare and on_start learnt about this run, for on_success (the hooks run in one process).
_RUN: dict = {"checks": False, "report_command": None}


def will_run(workflow, rule: str) -> bool:
    """Whether a job of ``rule`` is among those this run executes."""
    return any(job.rule.name == rule for job in workflow.dag.needrun_jobs())


def on_start(workflow, layout) -> None:
    """Before the first job (Snakemake holds its lock): note this run as the lock's holder,
    and let no verdict or report of an earlier run outlive this one's start.

    When this run ends in the check, the old ``status.txt`` goes now, so that a run cut
    short (Ctrl-C, kill -9, a crash) leaves no verdict rather than the last run's. When it
    runs any job, the old ``report.html`` goes too: it shows results this run replaces, and
    Snakemake makes a report only when asked (``--report``; ``make run`` asks for it at the
    run's end, ``--report-after-run``; else ``on_success`` names the command).
    """
    from . import interrupts
    from .locks import record_holder

    interrupts.during_run()
    record_holder()
    _RUN["checks"] = will_run(workflow, "check")
    if _RUN["checks"]:
        Path(layout.verdict()).unlink(missing_ok=True)
    if any(True for _ in workflow.dag.needrun_jobs()):
        Path(layout.report()).unlink(missing_ok=True)


def on_error() -> None:
    """A run that did not finish (Ctrl-C, or a job killed outside commsweep's guard):
    Snakemake releases its lock; forget the holder, and say what the next run does."""
    from . import interrupts
    from .locks import release_holder

    interrupts.quiet("commsweep: interrupted; the same command again keeps what is done and does the rest")
    release_holder()
    stop_rescheduling()
    print("commsweep: the run did not finish (above: why); the same command again keeps what is done and "
          "does the rest", file=sys.stderr, flush=True)


def on_success(layout) -> None:
    """After the last job: the run's verdict (ok, and where the answer is; or the failed
    points and steps, and the run ends with an error), and the command that makes the report
    when there is none of these results."""
    from ..base.status import verdict_failed
    from . import interrupts
    from .locks import release_holder

    interrupts.quiet("commsweep: interrupted after the run (its results are complete)"
                     + (f"; the HTML report: {_RUN['report_command']}" if _RUN["report_command"] else ""))
    release_holder()
    stop_rescheduling()
    path = Path(layout.verdict())
    text = ""
    if _RUN["checks"]:  # else (e.g. --until volumes) the verdict on file is an earlier run's
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            pass
    failed = verdict_failed(text)
    if failed:
        sys.stderr.write(f"commsweep: {text}")
    elif text:
        print(f"commsweep: {text.splitlines()[0]}; the answer: {layout.answer_page()}", file=sys.stderr)
    if _RUN["report_command"] and not Path(layout.report()).exists() and not _reports_after_run():
        print(f"commsweep: the HTML report of these results: {_RUN['report_command']}", file=sys.stderr)
    if failed:
        sys.stderr.write(f"commsweep: the run failed ({path}); the next run retries what failed\n")
    sys.stderr.flush()
    if failed:
        raise SystemExit(1)


def stop_rescheduling() -> None:
    """Cancel the timers Snakemake's scheduler left (the run's jobs are over when the hooks run).

    Snakemake's job rate limit (``--max-jobs-per-timespan``, by default 100 a second, and a
    second at the least) wakes its scheduler a timespan after each round, by a timer thread that
    is not a daemon: Snakemake's process waits for the last of them before it ends, a second
    after the run is over (after the report, when it makes one), for nothing."""
    import threading

    for thread in threading.enumerate():
        function = getattr(thread, "function", None)
        if isinstance(thread, threading.Timer) and "_schedule_reevalutation" in getattr(function, "__qualname__", ""):
            thread.cancel()


def _reports_after_run() -> bool:
    """Whether this Snakemake makes the report itself once the run ends (`make run` asks it to)."""
    return "--report-after-run" in sys.argv


def report_command(run, layout) -> str:
    """The command that makes the HTML report of ``run`` (``provenance.Run``) in ``layout``'s
    folder: `make report` for one config file, with RESULTS when only the folder was given on
    the command line; Snakemake's own command otherwise (``provenance.report_command``)."""
    import shlex

    from ..base.paths import RESULTS_KEY
    from .provenance import report_command as snakemake_report

    files, overrides = list(run.config_files), list(run.overrides)
    folder = [o for o in overrides if o.partition("=")[0] == RESULTS_KEY]
    if len(files) == 1 and overrides == folder:
        return shlex.join(["make", "report", f"CONFIG={files[0]}", *([f"RESULTS={layout.root}"] if folder else [])])
    return snakemake_report(files, overrides, layout.report())


def prepare(workflow, config: dict, points, layout, *, traces=(), root: str = ""):
    """Everything a run needs before its first job; returns ``(run, ignored)``.

    Checks and checksums the external inputs (``provenance.check_external``: a missing one
    stops the run here, naming its key and path), names the run (``provenance.Run``), puts
    this Python's ``commsweep`` first on ``PATH`` for the shell rules (also when the venv is
    not activated, e.g. ``.venv/bin/snakemake``), tells the jobs the run's config digest and
    their root (``root``: ``storage.job_root``, empty with a shared filesystem),
    and, in the main Snakemake process, clears a stale lock (``locks.clear_stale``; a live
    run's is named, never broken) and lists the outputs of points not in this sweep.
    """
    import copy
    import os

    from . import provenance, storage

    inputs = provenance.check_external(config, points)
    run = provenance.Run(
        config=copy.deepcopy(dict(config)), inputs=inputs,
        config_files=tuple(provenance.relative_to_cwd(f) for f in workflow.configfiles), overrides=tuple(overrides(workflow)),
    )
    _RUN["report_command"] = report_command(run, layout)
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    from ..base.status import CONFIG_DIGEST_ENV

    os.environ[CONFIG_DIGEST_ENV] = run.config_digest
    # Without a shared filesystem, the folder of the job's local copies (commsweep.orchestration.storage).
    os.environ[storage.ROOT_ENV] = root
    ignored: list[str] = []
    if workflow.is_main_process:
        from .locks import LockHeld, clear_stale

        # A live (or unknowable) lock is only named here: Snakemake itself then refuses a run,
        # and still allows what needs no lock (a dry run, --unlock when you know better).
        try:
            said = clear_stale()
        except LockHeld as held:
            said = str(held)
        if said:
            print(f"commsweep: {said}", file=sys.stderr)
        ignored = provenance.stale_outputs(layout, points, backend=config["aiob"]["backend"], traces=traces)
        if ignored:
            print(stale_line(ignored, layout), file=sys.stderr)
    return run, ignored


def stale_line(ignored: Sequence[str], layout) -> str:
    """What to say of the outputs an earlier sweep left in this sweep's folder (``ignored``):
    how many, that nothing reads them, and how to be rid of them."""
    return (f"commsweep: {len(ignored)} folder(s) or file(s) in {layout.root}/ are of points not in this sweep "
            f"(left by an earlier sweep; e.g. {ignored[0]}): nothing reads them, and {layout.verdict()} lists "
            f"them; to remove them, `make clean RESULTS={layout.root}` (everything in it, then run again), or give "
            f"each sweep a folder of its own (`results:` in its config)")


def announce(workflow, points, batches) -> None:
    """Say, once per run, how much per-point work the sweep holds and how it is batched
    (``commsweep.orchestration.batch``): a dry run shows batch jobs, not points. ``commsweep sweep --check
    CONFIG --todo`` says which of their tasks a run would do now."""
    if not workflow.is_main_process:
        return
    workloads = {p.workload_key for p in points}
    profiles = {p.profile_key for p in points if p.aiob}
    print(f"commsweep: {len(points)} point(s), {len(workloads)} workload(s), {len(profiles)} AIOB profile(s), "
          f"in {len(batches)} job(s) of about {round(len(points) / max(1, len(batches)))} point(s) each",
          file=sys.stderr)
