"""Shared fixtures: the reference material beside the checkout, and the repo paths; and
the order in which the test files go to the workers when the suite runs in parallel."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCE = Path(os.environ.get("COMMSWEEP_REFERENCE", REPO.parent / "shared" / "reference"))

# A suite started in the background (`cmd &` in a script, nohup, some CI runners) inherits
# SIGINT ignored, and so would every process a test starts: Ctrl-C's tests would see nothing
# happen. The tests start their processes as from a terminal, where Ctrl-C reaches them.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def reference_path(*parts: str) -> Path:
    """A file of ../shared/reference, or skip the test with the reason when it is absent."""
    path = REFERENCE.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"reference material not found at {path} (set COMMSWEEP_REFERENCE to its folder)")
    return path


def reference_files(folder: str, pattern: str) -> list:
    """Reference files for parametrising; one skipped case, with the reason, without them."""
    base = REFERENCE / folder
    files = sorted(base.glob(pattern)) if base.is_dir() else []
    if not files:
        reason = f"reference material not found at {base} (set COMMSWEEP_REFERENCE to its folder)"
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="no-reference")]
    return [pytest.param(f, id=f.name) for f in files]


@pytest.fixture
def reference():
    return reference_path


# `make test` runs the suite on several pytest-xdist workers with ``--dist loadfile``: each test
# file goes to one worker, which runs its tests in their order, so a module-scoped fixture (a
# trace, a Slurm cluster, a finished sweep) is made once, as in a serial run, and the examples
# of a docs page (tests/test_doc_examples.py) run in order in one scratch copy. (pytest-xdist's
# ``loadgroup`` would split files finer, but with pytest 9 its groups are silently ignored:
# xdist 3.8 renames ``item._nodeid``, which pytest 9 no longer reads.) Files are handed out in
# the order of the collection: on a worker, the files with the most ``slow`` and ``trace``
# tests are put first, so that no minutes-long file starts last while the other worker idles.
LONG = ("slow", "trace")


def pytest_collection_modifyitems(config, items):
    if not hasattr(config, "workerinput"):  # not an xdist worker: a serial run keeps the order
        return
    long_tests: dict[str, int] = {}
    for item in items:
        file = item.nodeid.split("::")[0]
        long_tests[file] = long_tests.get(file, 0) + any(item.get_closest_marker(m) for m in LONG)
    items.sort(key=lambda item: -long_tests[item.nodeid.split("::")[0]])  # stable: a file keeps its order


# A stand-in for a user's AICB checkout (``generator.aicb_root``): its generator writes the
# workload with commsweep's emulation of AICB, except for the setup of global batch KILLER,
# where it kills the process that runs it (SIGKILL, as the kernel's out-of-memory killer
# would): the batch's process, or the task's own. Deterministic, whatever the machine's speed.
KILLER = 32
STAND_IN_AICB = f"""
import os, signal, sys
if "--global_batch={KILLER}" in sys.argv:
    os.kill(os.getppid(), signal.SIGKILL)
    sys.exit(1)
from commsweep.orchestration.cli import main
os.makedirs("results/workload")
sys.exit(main(["generate", *sys.argv[1:], "--schedule", "aicb", "-o", "results/workload/stand-in.txt"]))
"""
