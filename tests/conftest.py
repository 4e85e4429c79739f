"""Shared fixtures: the reference material beside the checkout, and the repo paths."""

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
