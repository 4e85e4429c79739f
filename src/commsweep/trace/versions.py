"""megatron-core releases side by side: one environment per release, made on first use.

A trace of release V runs the worker processes with the running Python and its
packages (torch 2.13.0, numpy, packaging: all megatron-core asks for at run time) and V's
``megatron`` package in front of them on ``PYTHONPATH``. So V's environment is a folder
holding megatron-core V alone, installed by ``pip install --no-deps --target``: torch is
shared, never downloaded again, and a release takes a few MB. The release installed in
the running environment (``pip install '.[megatron]'``: 0.16.1) needs no folder.

Folders live under ``cache_root()``: ``$COMMSWEEP_MEGATRON_CACHE``, else
``$XDG_CACHE_HOME/commsweep/megatron-core`` (``~/.cache/...``), one per version. A folder
is built beside its final place and renamed into it when complete, under a lock file, so
two jobs making the same release at once neither corrupt it nor install it twice, and a
build killed half-way leaves only a temporary folder that the next build removes.

What a release needs beyond megatron-core itself is found in the installed files, not
listed by version: a release importing ``pkg_resources`` (0.8) gets ``setuptools<70``
(its ``pkg_resources.packaging`` went in 70) when the running environment has none.
Releases from 0.17 declare Python >= 3.12 but run on 3.11: pip is told to install them
anyway (``--ignore-requires-python``), and the trace shows whether they run.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import CommsweepError
from ..workload.megatron_releases import TRACED

CACHE_ENV = "COMMSWEEP_MEGATRON_CACHE"
PACKAGE = "megatron-core"
# TRACED: the releases whose traces docs/megatron-versions.md compares, which the megatron
# schedule knows (workload/megatron_releases.py, their one home; the last is the newest).
# The releases before those, each with why it cannot be traced on a CPU (checked on
# their PyPI files; release candidates and patch releases of a traced minor not tried).
_TE = "its transformer block imports Transformer Engine, a CUDA-only package, unconditionally (optional from 0.8.0)"
UNTRACEABLE: dict[str, str] = {
    "0.1.0": "it has no GPT model (only parallel_state and the tensor-parallel layers)",
    "0.2.0": "it has no GPT model (only parallel_state and the tensor-parallel layers)",
    "0.3.0": _TE,
    "0.4.0": "PyPI has its source only, and pip cannot build it here",
    "0.5.0": _TE,
    "0.6.0": _TE,
    "0.7.0": _TE,
}
_VERSION = re.compile(r"^\d+(\.\d+){1,3}((a|b|rc)\d+)?(\.post\d+)?$")
_COMPLETE = ".commsweep-environment.json"  # written last, before the folder is renamed into place
PIP_TIMEOUT = 900.0


class VersionError(CommsweepError):
    """A megatron-core release cannot be made ready (bad version, pip failed, ...)."""


class PipError(VersionError):
    """pip could not install a release: no package registry reachable, or no such release."""


@dataclass(frozen=True)
class Environment:
    """Where release ``version`` is imported from: ``path`` goes first on ``PYTHONPATH``
    (None: the running environment's own megatron-core)."""

    version: str
    path: Path | None

    @property
    def unmet(self) -> list[str]:
        """Run-time requirements the release declares that the running environment does
        not meet (see ``_unmet_requirements``)."""
        if self.path is None:
            return []
        return json.loads((self.path / _COMPLETE).read_text()).get("unmet", [])

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` (a process environment) with this release in front of the path."""
        env = dict(base)
        if self.path is not None:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.path), base.get("PYTHONPATH", "")) if p)
        return env


def installed_version() -> str | None:
    """The megatron-core of the running environment (None when it has none)."""
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def cache_root() -> Path:
    """The folder holding one folder per release (see the module doc)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "commsweep" / PACKAGE


def check_version(version: str, *, where: str = "--megatron-core") -> str:
    """``version`` if it is a plain release number (it becomes a folder name and a pip
    requirement), else a ``VersionError`` naming ``where``."""
    if not _VERSION.match(version):
        raise VersionError(f"{where}: expected a megatron-core release such as 0.8.0 or 0.16.1, got {version!r}")
    return version


def newest_traced() -> str:
    return TRACED[-1]


def cached(version: str, *, root: Path | None = None) -> Environment | None:
    """Release ``version``'s environment if it is ready without pip, else None."""
    check_version(version)
    if version == installed_version():
        return Environment(version, None)
    path = (root or cache_root()) / version
    try:
        json.loads((path / _COMPLETE).read_text())
    except (OSError, ValueError):
        return None
    return Environment(version, path)


def environment(version: str, *, root: Path | None = None, log=None) -> Environment:
    """Release ``version``'s environment, made with pip on first use (see the module doc).

    ``log`` (a text stream, default stderr) hears what pip is doing on a first use.
    """
    check_version(version)
    if version in UNTRACEABLE:
        raise VersionError(f"megatron-core {version} cannot be traced on the CPU: {UNTRACEABLE[version]}")
    ready = cached(version, root=root)
    if ready:
        return ready
    root = root or cache_root()
    log = log or sys.stderr
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise VersionError(f"cannot make the megatron-core cache {root} ({err}); set {CACHE_ENV} to a writable folder") from None
    with _locked(root / f".{version}.lock"):
        ready = cached(version, root=root)  # made by another job while this one waited
        if ready:
            return ready
        for stale in root.glob(f".{version}.tmp-*"):  # a build killed half-way
            shutil.rmtree(stale, ignore_errors=True)
        if (root / version).exists():  # not made by this module (no valid record): made again
            shutil.rmtree(root / version)
        tmp = Path(tempfile.mkdtemp(prefix=f".{version}.tmp-", dir=root))
        try:
            log.write(f"commsweep: installing megatron-core {version} into {root / version} (first use)\n")
            log.flush()
            _pip_install(tmp, [f"{PACKAGE}=={version}"])
            extras = _extra_requirements(tmp)
            if extras:
                _pip_install(tmp, extras)
            unmet = _unmet_requirements(tmp, version)
            (tmp / _COMPLETE).write_text(json.dumps({"installed": [f"{PACKAGE}=={version}", *extras], "unmet": unmet}) + "\n")
            os.replace(tmp, root / version)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return Environment(version, root / version)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (released when the process dies, however)."""
    import fcntl

    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pip_install(target: Path, requirements: list[str]) -> None:
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
               "--ignore-requires-python", "--target", str(target), *requirements]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise PipError(f"pip install {' '.join(requirements)} took more than {PIP_TIMEOUT:.0f} s") from None
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        tail = "\n".join([line for line in lines if line.startswith("ERROR:")] or lines[-4:])
        raise PipError(f"pip could not install {' '.join(requirements)} (exit {result.returncode}):\n{tail}")


def _imports_pkg_resources(folder: Path) -> bool:
    pattern = re.compile(rb"^\s*(from|import) pkg_resources\b", re.MULTILINE)
    return any(pattern.search(path.read_bytes()) for path in (folder / "megatron").rglob("*.py"))


def _extra_requirements(folder: Path) -> list[str]:
    """What the installed release imports that the running environment lacks."""
    if _imports_pkg_resources(folder) and not _has_pkg_resources_packaging():
        return ["setuptools<70"]
    return []


def _has_pkg_resources_packaging() -> bool:
    """Whether the running environment's setuptools still has ``pkg_resources.packaging``."""
    try:
        major = importlib.metadata.version("setuptools").split(".")[0]
    except importlib.metadata.PackageNotFoundError:
        return False
    return major.isdigit() and int(major) < 70


def _unmet_requirements(folder: Path, version: str) -> list[str]:
    """The run-time requirements the release declares and the running environment does
    not meet (``--no-deps`` installed none of them). Releases 0.10 to 0.12 declare their
    training scripts' packages (wandb, nltk, ...), 0.13 to 0.15 ``numpy<2``: none is
    imported by what a trace runs, so they are kept as a note and the trace decides.
    Torch alone is a must: it is never installed here."""
    from packaging.requirements import Requirement

    dists = list(importlib.metadata.distributions(path=[str(folder)]))
    dist = next((d for d in dists if d.metadata["Name"].lower().replace("_", "-") == PACKAGE), None)
    if dist is None:
        raise VersionError(f"pip reported success but {folder} holds no {PACKAGE}")
    if dist.version != version:
        raise VersionError(f"asked for {PACKAGE} {version}, pip installed {dist.version}")
    unmet = []
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an extra (Transformer Engine, apex, ...): not used on the CPU
        try:
            have = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            have = None
        if have is not None and (not req.specifier or req.specifier.contains(have, prereleases=True)):
            continue
        if req.name == "torch":
            raise VersionError(f"{PACKAGE} {version} needs {req}, the running environment has torch {have}; "
                               "commsweep shares that torch and never installs another")
        unmet.append(f"{req.name}{req.specifier} (have {have or 'none'})")
    return unmet
