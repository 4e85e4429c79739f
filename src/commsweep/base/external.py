"""External inputs: files from outside the results folder that a stage reads, checksummed.

A stage's contract (``base.stage.Stage``) checks the external inputs it reads and returns
them as ``External``; provenance puts their checksums into the run's name and into the
digests of exactly the tasks that read them. The checksum functions live here, below every
stage, so that each stage can checksum its own inputs.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError

_SKIP_DIRS = {".git", "__pycache__", "results", ".venv"}


@dataclass(frozen=True)
class External:
    """One external input of the sweep: its config key, where it is, and its checksum."""

    key: str
    path: str
    digest: str
    # What it stands for, when the path is not the file itself (a folder, a build).
    what: str = ""

    def record(self) -> dict:
        out = {"path": self.path, "sha256": self.digest.removeprefix("sha256:")}
        if self.what:
            out["of"] = self.what
        return out


def file_digest(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def files_digest(root: Path, files: Iterable[Path]) -> str:
    """One digest of several files: their paths relative to ``root`` and their contents."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(str(path.relative_to(root)).encode() + b"\0" + file_digest(path).encode() + b"\n")
    return "sha256:" + h.hexdigest()


def source_files(root: Path, pattern: str) -> list[Path]:
    """The files under ``root`` matching ``pattern``, skipping VCS, cache and results folders."""
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        found += [Path(folder) / n for n in names if Path(n).match(pattern)]
    return found


def missing(key: str, path: str | Path, what: str) -> ConfigError:
    """The error of an external input that is not there, naming its config key and path."""
    return ConfigError(f"{path}: {what} not found (set {key} to where it is, or remove the key)", key=key)
