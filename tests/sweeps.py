"""The test sweeps (tests/sweeps/*.yaml), running the real workflow on them in a temporary
folder, and comparing what runs leave behind.

Each sweep file starts with a comment line saying what it covers (``covers``). ``bad-*``
sweeps must fail before any job. ``$REFERENCE`` in a sweep stands for the reference
folder (conftest.REFERENCE); a file backend's AIOB files are placed by ``place_aiob_files``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REFERENCE, REPO

SNAKEMAKE = Path(sys.executable).with_name("snakemake")
SWEEPS = REPO / "tests" / "sweeps"
# Timings and logs differ from run to run; everything else under results/ must not.
VOLATILE = ("logs", "benchmarks")


def names() -> list[str]:
    """Every test sweep, by name (its file name without .yaml)."""
    return sorted(p.stem for p in SWEEPS.glob("*.yaml"))


def path(name: str) -> Path:
    return SWEEPS / f"{name}.yaml"


def text(name: str) -> str:
    """A test sweep's YAML, ``$REFERENCE`` filled in."""
    return path(name).read_text().replace("$REFERENCE", str(REFERENCE))


def covers(name: str) -> str:
    """What a test sweep covers: its first line, a comment."""
    first = path(name).read_text().splitlines()[0]
    assert first.startswith("# "), f"{path(name)}: the first line must be a comment saying what it covers"
    return first[2:]


def needs_reference(name: str) -> bool:
    return "$REFERENCE" in path(name).read_text()


def env() -> dict[str, str]:
    """The environment of a run: the venv's `commsweep` first on PATH."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def command(workdir: Path, *args: str, profile: str = "default") -> list[str]:
    """Snakemake on the project's Snakefile in ``workdir``. The default profile is the one
    Snakemake finds by itself (profiles/default beside the Snakefile), as for a user."""
    chosen = [] if profile == "default" else ["--workflow-profile", str(REPO / "profiles" / profile)]
    return [str(SNAKEMAKE), "-s", str(REPO / "Snakefile"), "--directory", str(workdir), *chosen, *args]


def run(workdir: Path, *args: str, profile: str = "default", check: bool = True, timeout: float = 600):
    """Run Snakemake on the project's Snakefile in ``workdir``; raise with its output on failure."""
    result = subprocess.run(
        command(workdir, *args, profile=profile), capture_output=True, text=True, env=env(), timeout=timeout
    )
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}")
    return result


def planned(result: subprocess.CompletedProcess | str) -> dict[str, int]:
    """What a run (or dry run) says of its sweep when it starts (``pipeline.announce``):
    points, workloads, AIOB profiles and batches. ``result``: the run, or its output."""
    said = result if isinstance(result, str) else result.stdout + result.stderr
    found = re.search(r"commsweep: (\d+) point\(s\), (\d+) workload\(s\), (\d+) AIOB profile\(s\), "
                      r"in (\d+) (?:job\(s\)|batch\(es\))", said)
    assert found, f"no sweep announced:\n{said[-3000:]}"
    return dict(zip(("points", "workloads", "profiles", "batches"), map(int, found.groups())))


def todo(workdir: Path, config: Path) -> dict[str, int]:
    """The per-point tasks a run in ``workdir`` would do now, per stage (profile_<backend>,
    generate, volumes, simulate, audit), as ``commsweep sweep --check CONFIG --todo`` says."""
    result = subprocess.run([str(SNAKEMAKE.with_name("commsweep")), "sweep", "--check", str(config), "--todo"],
                            cwd=workdir, capture_output=True, text=True, env=env(), check=True)
    line = result.stdout.splitlines()[-1]
    assert line.startswith("to do: "), result.stdout
    return {rule: int(n) for n, rule in re.findall(r"(\d+) (profile_\w+|generate|volumes|simulate|audit)\b", line)}


def status_times(workdir: Path) -> dict[str, int]:
    """Every status file under results/ and its modification time (ns): a task that runs
    writes its status anew, one left alone keeps it (see ``rewritten``)."""
    return {str(p.relative_to(workdir / "results")): p.stat().st_mtime_ns
            for p in (workdir / "results").rglob("*.status")}


def rewritten(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """The status files written between two ``status_times`` (new ones included)."""
    return sorted(path for path, t in after.items() if before.get(path) != t)


def fails_before_any_job(workdir: Path, name: str, message: str, *args: str) -> None:
    """A run of the test sweep ``name`` fails, saying ``message``, before making any result."""
    config = write_config(workdir, name)
    result = run(workdir, "--configfile", str(config), *args, check=False)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert not (workdir / "results").exists()


def write_config(workdir: Path, name: str = "small", *, as_name: str = "sweep.yaml") -> Path:
    """The test sweep ``name`` as ``workdir/sweep.yaml`` (the folder made if needed)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / as_name
    config.write_text(text(name))
    return config


CORRUPT_PROFILE = "train_iter:10\nEmb:\n    time_gpu_max: 5\n    time_gpu_min: 7\n    time_gpu_avg: 6\n"


def place_aiob_files(workdir: Path, config: Path, corrupt: str | None = None) -> list[Path]:
    """The user's AIOB files (``aiob.file``) of a sweep's points with aiob on, under
    ``workdir``: valid ones, but the ``corrupt`` profile's (min > max). Returns them."""
    from commsweep.aiob import backends
    from commsweep.aiob import profile_file as pf
    from commsweep.orchestration import sweep

    good = pf.AiobProfile(sections=tuple((n, pf.OpTime(max=12, min=10, avg=11)) for n in pf.STANDARD_SECTIONS))
    loaded = sweep.load_config(config)
    points, _ = sweep.points_from_config(loaded)
    placed = []
    for key in sorted({p.profile_key for p in points if p.aiob}):
        target = workdir / backends.user_file(loaded["aiob"]["file"], key)
        target.parent.mkdir(parents=True, exist_ok=True)
        if key == corrupt:
            target.write_text(CORRUPT_PROFILE)
        else:
            pf.write(good, target)
        placed.append(target)
    return placed


def result_files(workdir: Path) -> dict[str, bytes]:
    """Every file under results/ but logs and benchmarks, by relative path."""
    results = workdir / "results"
    out = {}
    for path in sorted(results.rglob("*")):
        rel = path.relative_to(results)
        if path.is_file() and rel.parts[0] not in VOLATILE:
            out[str(rel)] = path.read_bytes()
    return out


def differences(a: dict[str, bytes], b: dict[str, bytes]) -> list[str]:
    """Paths present in one only, or with different bytes (empty when identical)."""
    out = [f"only in first: {p}" for p in sorted(a.keys() - b.keys())]
    out += [f"only in second: {p}" for p in sorted(b.keys() - a.keys())]
    out += [f"differs: {p}" for p in sorted(a.keys() & b.keys()) if a[p] != b[p]]
    return out


def project(dest: Path) -> Path:
    """A folder to run ``make`` in as a user would in a fresh clone: the workflow's files
    copied (times kept, so make sees the venv as up to date), this venv and the package's
    sources linked."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "Makefile", "pyproject.toml"):
        shutil.copy2(REPO / name, dest / name)
    for name in ("workflow", "profiles", "config"):
        shutil.copytree(REPO / name, dest / name, copy_function=shutil.copy2)
    (dest / ".venv").symlink_to(Path(sys.prefix))
    (dest / "src").symlink_to(REPO / "src")
    return dest


def make(folder: Path, *args: str, check: bool = True, timeout: float = 600, umask: int = 0o022
         ) -> subprocess.CompletedProcess:
    """``make ARGS`` in a ``project`` folder, under ``umask``; raise with its output on failure.

    The venv is this one, shared: make must never reinstall into it (``-o``: take the
    install markers as up to date), whatever the times of pyproject.toml and the markers.
    """
    keep = [arg for marker in (".venv/.base-installed", ".venv/.extras-installed", ".venv/bin/python")
            for arg in ("-o", marker)]
    result = subprocess.run(["make", "-C", str(folder), *keep, *args], capture_output=True, text=True, env=env(),
                            timeout=timeout, preexec_fn=lambda: os.umask(umask))
    if check and result.returncode != 0:
        raise AssertionError(f"make failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}")
    return result
