"""The processes of a run end when their work is done: Snakemake's scheduler leaves no timer
to wait for, and commsweep's processes skip the interpreter's last garbage collection
(commsweep.orchestration.pipeline.stop_rescheduling, commsweep.orchestration.exits)."""

from __future__ import annotations

import subprocess
import sys
import threading
from types import SimpleNamespace

from commsweep.orchestration import pipeline


def test_the_timers_snakemakes_scheduler_leaves_are_cancelled_and_no_others():
    """Snakemake's own re-evaluation timer (of its job rate limit, a thread that is not a
    daemon: the process would wait for it) ends when the hooks stop rescheduling; a timer of
    anyone else's goes on."""
    from snakemake.scheduling.job_scheduler import JobScheduler

    woken = threading.Semaphore(0)
    scheduler = SimpleNamespace(_open_jobs=woken)
    JobScheduler._schedule_reevalutation(scheduler, 600)
    (snakemakes,) = [t for t in threading.enumerate() if isinstance(t, threading.Timer)
                     and "_schedule_reevalutation" in t.function.__qualname__]
    assert not snakemakes.daemon
    other = threading.Timer(600, lambda: None)
    other.start()
    try:
        pipeline.stop_rescheduling()
        snakemakes.join(timeout=30)
        assert not snakemakes.is_alive()
        assert not woken.acquire(blocking=False)  # cancelled, not fired
        assert other.is_alive()
    finally:
        other.cancel()


FROZEN_AT_EXIT = ("import atexit, gc, sys\n"
                  "atexit.register(lambda: print('frozen' if gc.get_freeze_count() else 'collected'))\n"
                  "from commsweep.orchestration.cli import main\n")


def test_the_commsweep_program_ends_without_a_last_collection_and_a_command_run_in_process_leaves_its_caller_alone():
    program = FROZEN_AT_EXIT + "sys.argv = ['commsweep', '--version']\nsys.exit(main())\n"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, f"commsweep {__import__('commsweep').__version__}\nfrozen\n"), \
        done.stderr
    in_process = FROZEN_AT_EXIT + "main(['--version'])\n"
    done = subprocess.run([sys.executable, "-c", in_process], capture_output=True, text=True)
    assert done.stdout.endswith("collected\n"), done.stderr
