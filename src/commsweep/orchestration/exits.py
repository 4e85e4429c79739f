"""A quick end for the processes of a run: no garbage collection over every object at exit.

When a Python process ends, the interpreter collects garbage over every object its modules
made before it frees them. After importing Snakemake (its main process, every job's preamble),
pandas or matplotlib that walk takes a few tenths of a second (measured: 0.6 s of wall time
for Snakemake's main process on a shared 2-core machine), on every job and on the run's end,
for memory the operating system takes back anyway. ``quick`` freezes the collector's objects
when the process ends (``gc.freeze``, an ``atexit`` hook), so that the interpreter's own end
skips them. Nothing is lost: the standard streams are
flushed after the hooks as always, every output is written and closed atomically before
(``base.files``), and no file commsweep writes is left open to an object's ``__del__``.
"""

from __future__ import annotations

import atexit
import gc

_STATE = {"registered": False}


def quick() -> None:
    """End this process without the interpreter's last garbage collection (once per process)."""
    if _STATE["registered"]:
        return
    _STATE["registered"] = True
    atexit.register(gc.freeze)
