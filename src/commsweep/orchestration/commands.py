"""Several ``commsweep`` commands of one job, in order or side by side.

Rule figures draws every figure of a sweep in one job (one import of matplotlib and pandas,
not one per figure). Drawing is most of that job's time (about 1 CPU second a figure in the
default sweep, 7 in all), and the steps before and after it wait for it: with the job's
threads (``smk.threads``) above one, the commands run in that many worker processes forked
after matplotlib and pandas are imported (``PRELOAD``), so each worker starts with them, and
the figures are drawn side by side. Each command is the same guarded step either way (its own
status, outputs and attempt); what each says is written to the log in the commands' order,
so the log reads as in order; the figures' bytes do not depend on which process drew them.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Sequence

# What the drawing commands import, once, before the workers are forked (the figures' own
# modules too: each worker would import them again).
PRELOAD = ("pandas", "matplotlib.pyplot", "commsweep.analysis.figures.plot", "commsweep.analysis.figures.timeline",
           "commsweep.analysis.timeline")


def header(argv: Sequence[str]) -> str:
    """The log's line before a command's output."""
    return "$ commsweep " + " ".join(argv[:40]) + (f" ... ({len(argv)} arguments)" if len(argv) > 40 else "")


def _captured(argv: list[str]) -> tuple[int, str]:
    """One command in a worker: its exit status and what it said (stdout and stderr)."""
    from .cli import main

    said = io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        try:
            status = main(argv)
        except SystemExit as end:  # (--help, a usage error): its status, as in order
            status = end.code if isinstance(end.code, int) else 1
    return status, said.getvalue()


def _preload() -> None:
    import importlib

    import matplotlib

    matplotlib.use("Agg")
    for name in PRELOAD:
        importlib.import_module(name)


def run_all(argvs: Sequence[list[str]], processes: int = 1) -> int:
    """Run each command (``commsweep`` arguments) and write its header and output to stdout;
    the first non-zero exit status, 0 when every command succeeded (all of them run)."""
    from .cli import main

    failed = 0
    if processes <= 1 or len(argvs) <= 1:
        for argv in argvs:
            print(header(argv), flush=True)
            status = main(argv)  # (every command runs, also after one failed)
            failed = failed or status
        return failed
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from .interrupts import held, ignore

    _preload()
    sys.stdout.flush()
    sys.stderr.flush()
    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(min(processes, len(argvs)), mp_context=context, initializer=ignore)
    try:
        # Ctrl-C is this process's to take: the workers, forked with it held back, ignore it
        # (a traceback each otherwise), and are ended below.
        with held():
            futures = [pool.submit(_captured, list(argv)) for argv in argvs]
        for argv, future in zip(argvs, futures):
            print(header(argv))
            try:
                status, said = future.result()
            except BrokenProcessPool:
                # A worker was killed (e.g. out of memory): its command left no status, so the
                # next run does it again.
                status, said = 1, "commsweep: the process that ran this command was killed\n"
            sys.stdout.write(said)
            failed = failed or status
    except KeyboardInterrupt:
        _end_workers(pool)
        raise
    pool.shutdown()
    sys.stdout.flush()
    return failed


def _end_workers(pool) -> None:
    """End the pool's workers now (SIGTERM: no traceback), their commands unfinished: each
    writes its outputs atomically, so none is left half-written, and the next run redoes them."""
    workers = list(getattr(pool, "_processes", {}).values())
    for process in workers:
        process.terminate()
    for process in workers:
        process.join(timeout=30)
    pool.shutdown(wait=False, cancel_futures=True)
