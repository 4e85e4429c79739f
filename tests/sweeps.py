"""Running the real workflow in a temporary folder, and comparing what runs leave behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO

SNAKEMAKE = Path(sys.executable).with_name("snakemake")
# Timings and logs differ from run to run; everything else under results/ must not.
VOLATILE = ("logs", "benchmarks")

SMALL_SWEEP = """\
sweep:
  model: [gpt-7b]
  world_size: [16]
  tp: [2, 4]
  sp: [false, true]
  global_batch: [8]
  network: [netA]
"""


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


def fails_before_any_job(workdir: Path, config: str, message: str, *args: str) -> None:
    """A run of the sweep ``config`` fails, saying ``message``, before making any result."""
    path = workdir / "bad.yaml"
    path.write_text(config)
    result = run(workdir, "--configfile", str(path), *args, check=False)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert not (workdir / "results").exists()


def write_config(workdir: Path, text: str = SMALL_SWEEP) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "sweep.yaml"
    path.write_text(text)
    return path


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
