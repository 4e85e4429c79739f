"""Shared fixtures: the reference material beside the checkout, and the repo paths; and
which tests must share a worker when the suite runs in parallel (``make test``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REFERENCE = Path(os.environ.get("COMMSWEEP_REFERENCE", REPO.parent / "shared" / "reference"))


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


# `make test` runs the suite on several pytest-xdist workers with ``--dist loadgroup``: a test
# goes to whichever worker is free, but the tests of one ``xdist_group`` go to one worker, in
# their order. A module-scoped fixture is made once per worker that runs a test needing it, and
# those fixtures are the suite's most expensive setups (traces, a Slurm cluster, whole sweeps),
# so every test that uses one is grouped with its module: the fixture is made once, as in a
# serial run. Tests that share other state (the pages of tests/test_doc_examples.py) name
# their group themselves. xdist hands out the groups first, largest first, then the other tests
# in the order of the collection: on a worker, the ``slow`` and ``trace`` ones are moved to
# the front of it, so that no minute-long test starts last while the other worker is idle.
SHARED_SCOPES = ("class", "module", "package")
LONG = ("slow", "trace")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its hook of the same name)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        info = getattr(item, "_fixtureinfo", None)
        defs = info.name2fixturedefs.values() if info is not None else ()
        if any(chain[-1].scope in SHARED_SCOPES for chain in defs if chain):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
    if hasattr(config, "workerinput"):  # an xdist worker (a serial run keeps the files' order)
        def long_and_alone(item) -> bool:
            return item.get_closest_marker("xdist_group") is None and any(item.get_closest_marker(m) for m in LONG)

        items.sort(key=lambda item: not long_and_alone(item))  # stable: a group's order is kept
