"""Ctrl-C during a run: every process says one line, none a traceback, whenever it lands.

The terminal sends SIGINT to every process of the run at once: make, `make run`'s check,
Snakemake and each job. Python turns it into KeyboardInterrupt wherever the process is; the
commands catch it and say one line (``errors.exit_interrupted``), but only once their code
runs: a job's first second is Python starting, Snakemake's preamble unpickling the job (a line
tens of kilobytes long, which a traceback prints whole, underlined) and imports. So a run holds
SIGINT back from its jobs until they can take it:

* Snakemake's main thread blocks SIGINT (``begin``, when the workflow is read), and so does
  every thread it starts later, among them those that start the jobs: a job starts with SIGINT
  blocked, and a Ctrl-C meanwhile stays pending, not lost;
* each job takes it where its code can say one line (``accepting``, at the top of every
  command and job script): unblocked there, a pending Ctrl-C raises KeyboardInterrupt at once;
* a thread of Snakemake's waits for SIGINT (``sigwait``) and passes it to the main thread as
  ``FORWARD``, whose handler is Snakemake's Ctrl-C during the run (the main thread's SIGINT
  handler of the moment: KeyboardInterrupt, or an asyncio runner's, which cancels its coroutine
  first; Snakemake stops scheduling and waits for its jobs) and one line before and after it
  (``quiet``: reading the workflow, making the report);
* `make run` starts Snakemake with SIGINT blocked (``held``), so that Snakemake's own start,
  before the workflow is read, is covered too.

A process that a job starts after taking SIGINT gets it as usual (SimAI, a traced
megatron-core). Workers forked for the figures ignore it: their parent ends them
(``commands.run_all``).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

# The signal the waiting thread passes a Ctrl-C to Snakemake's main thread as.
FORWARD = signal.SIGUSR1
_STATE = {"forwarding": False}


@contextlib.contextmanager
def held():
    """SIGINT blocked in this thread meanwhile (a process started meanwhile starts so, and a
    Ctrl-C waits); on leaving, one pending is delivered (KeyboardInterrupt, here or later)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if signal.SIGINT not in previous:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def accept() -> None:
    """Take SIGINT in this thread from now on: a Ctrl-C held back since the process started
    raises KeyboardInterrupt now, in the caller's handler."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextlib.contextmanager
def accepting(said: str, log: str | None = None):
    """Run the body taking Ctrl-C (``accept``); one that reaches here ends the process with
    ``said`` on one line (``errors.exit_interrupted``), in the job's ``log`` when it has one
    (the log Snakemake shows of a job that failed). A job script's body."""
    from ..base.errors import exit_interrupted

    try:
        accept()
        yield
    except KeyboardInterrupt:
        if log is None:
            exit_interrupted(said)
        with open(log, "w", encoding="utf-8") as out, contextlib.redirect_stderr(out):
            exit_interrupted(said)


def ignore() -> None:
    """Ignore SIGINT in this process (a worker whose parent ends it), then take it: one held
    back is dropped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    accept()


def quiet(said: str) -> None:
    """From now on a Ctrl-C forwarded to this process (``FORWARD``) or reaching it ends it with
    ``said`` on one line."""
    def end(signum, frame):
        _end(said)

    signal.signal(FORWARD, end)
    signal.signal(signal.SIGINT, end)


def _end(said: str) -> None:
    """End this process (in its main thread) as Ctrl-C ends a program, ``said`` on one line:
    killed by SIGINT, sent to this thread, for the waiting thread (``_forward``) would take a
    SIGINT sent to the process."""
    import os

    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
    print(said, file=sys.stderr, flush=True)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.pthread_kill(threading.get_ident(), signal.SIGINT)
    os._exit(128 + signal.SIGINT)  # only if the signal could not end the process


def during_run() -> None:
    """A forwarded Ctrl-C is Snakemake's own from now on: what a SIGINT would do in the main
    thread (``_as_sigint``), which stops the run (the hooks' ``on_start``)."""
    signal.signal(FORWARD, _as_sigint)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _as_sigint(signum, frame) -> None:
    """A forwarded Ctrl-C, handled as the main thread's SIGINT handler of the moment would
    handle it: KeyboardInterrupt, or, while Snakemake's scheduler runs a coroutine on an asyncio
    runner (which sets its own handler meanwhile), that handler, which cancels the coroutine and
    raises KeyboardInterrupt once the loop has stopped. A KeyboardInterrupt raised inside the
    running loop instead can leave it marked running, and Snakemake's teardown then ends with a
    traceback ("Cannot close a running event loop")."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def _forward(main: int) -> None:
    while True:
        signal.sigwait({signal.SIGINT})
        signal.pthread_kill(main, FORWARD)


def begin(said: str) -> None:
    """In Snakemake's main process, when it reads the workflow: hold SIGINT back from the jobs
    it will start (its main thread blocks it, and so the threads it starts), pass it to the main
    thread by a thread that waits for it, and end with ``said`` until the run starts (``quiet``).
    Once per process."""
    if threading.current_thread() is not threading.main_thread() or _STATE["forwarding"]:
        return
    quiet(said)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    threading.Thread(target=_forward, args=(threading.main_thread().ident,), name="commsweep-ctrl-c",
                     daemon=True).start()
    _STATE["forwarding"] = True
    sys.stderr.flush()
