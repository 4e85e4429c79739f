"""The times a new user meets first: `make run` as typed, for a 2-point sweep and the default
sweep, from an existing .venv with the results removed, and a `make run` with nothing to do.

The .venv is a fresh clone's: what `make run` installs into it on first use (the package and
its requirements, no extras), made once before the repeats in a temporary folder (not timed),
or the one given with ``--venv``. (A venv with the extras times more: Snakemake imports every
executor plugin installed, at each start.) Each repeat runs in a fresh copy of the project
(its workflow files, this checkout's package linked, as tests/sweeps.py's ``project`` makes
one). A first `make run` there byte-compiles the package and runs the sweep once (not timed: a
clone's first run); then, timed:

* ``make run``: ``make run CONFIG=CONFIG`` after ``rm -rf results``: what a user meets typing it
  with the venv in place (the config check, Snakemake, every job, the report in the same
  Snakemake run);
* ``no-op``: ``make run CONFIG=CONFIG`` again: nothing changed, so it starts no Snakemake
  (``commsweep.orchestration.current``) and makes no report.

It prints each step's median wall time and CPU time (of every process it started) over the
repeats, and the 1-minute load average before and after each: on a shared machine the wall
times grow with the load, the CPU times much less. The goals: `make run` of the 2-point sweep
under 5 s, of the default sweep under 10 s, the no-op under 1.5 s, on 2 cores.

    python3 bench/first_hour.py                    # both sweeps, 3 repeats, a new base venv
    python3 bench/first_hour.py --repeats 5 --sweeps two-points --venv /tmp/base-venv
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SWEEPS = {
    "two-points": REPO / "tests" / "sweeps" / "two-points.yaml",
    "default": REPO / "config" / "config.yaml",
}
GOALS = {"two-points": 5.0, "default": 10.0}
NOOP_GOAL = 1.5
# make must never reinstall into the shared venv: the install markers count as up to date.
KEEP = [arg for marker in (".venv/.base-installed", ".venv/.extras-installed", ".venv/bin/python")
        for arg in ("-o", marker)]


def base_venv(dest: Path) -> Path:
    """A fresh clone's .venv, as `make run` makes it on first use (Makefile: the package and
    its requirements, editable, no extras); made here if ``dest`` has no Python yet."""
    python = dest / "bin" / "python"
    if not python.exists():
        print(f"making a base venv in {dest} (once, about a minute; not timed)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(dest)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "-e", str(REPO)], check=True)
    return dest


def project(dest: Path, venv: Path) -> Path:
    """A folder to run ``make`` in as in a fresh clone (times kept, the venv and sources linked)."""
    dest.mkdir(parents=True)
    for name in ("Snakefile", "Makefile", "pyproject.toml"):
        shutil.copy2(REPO / name, dest / name)
    for name in ("workflow", "profiles", "config"):
        shutil.copytree(REPO / name, dest / name, copy_function=shutil.copy2)
    (dest / ".venv").symlink_to(venv)
    (dest / "src").symlink_to(REPO / "src")
    return dest


def timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, of the command and everything it waited for)."""
    env = dict(os.environ)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"failed ({result.returncode}): {' '.join(cmd)}\n"
                         f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def one_repeat(name: str, tmp: Path, venv: Path) -> dict[str, tuple[float, float, float]]:
    """One repeat's timed steps: (wall, CPU, load average before) each."""
    folder = project(tmp / name, venv)
    shutil.copy2(SWEEPS[name], folder / "sweep.yaml")
    make = ["make", *KEEP, "run", "CONFIG=sweep.yaml"]
    timed(make, folder)  # the clone's first run: byte-compiles the package
    shutil.rmtree(folder / "results")
    steps = {}
    for step in ("make run", "no-op"):
        load = os.getloadavg()[0]
        steps[step] = (*timed(make, folder), load)
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sweeps", nargs="+", choices=sorted(SWEEPS), default=list(SWEEPS))
    parser.add_argument("--venv", type=Path, help="the .venv to run with (made here as a fresh clone's if it has "
                        "no Python yet); default: a new one in a temporary folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="commsweep-bench-venv-") as made:
        venv = base_venv((args.venv or Path(made) / "venv").absolute())
        measure(args, venv)


def measure(args: argparse.Namespace, venv: Path) -> None:
    """Time each sweep's repeats with ``venv`` and print the medians against the goals."""
    load_before = os.getloadavg()[0]
    plugins = sorted(p.name.split("-")[0] for p in venv.glob("lib/python*/site-packages/"
                                                             "snakemake_executor_plugin_*-*.dist-info"))
    print(f"{os.cpu_count()} CPUs, load {load_before:.1f}; Snakemake executor plugins installed: "
          f"{', '.join(plugins) or 'none'} (each is imported at every Snakemake start)")
    summary = []
    for name in args.sweeps:
        runs = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix="commsweep-bench-") as tmp:
                runs.append(one_repeat(name, Path(tmp), venv))
        print(f"\n{name} ({SWEEPS[name].relative_to(REPO)}), median of {args.repeats}:")
        medians, cpu = {}, {}
        for step in ("make run", "no-op"):
            walls, cpus = [r[step][0] for r in runs], [r[step][1] for r in runs]
            medians[step], cpu[step] = statistics.median(walls), statistics.median(cpus)
            print(f"  {step:<8} {medians[step]:6.2f} s wall  {cpu[step]:6.2f} s CPU   (each: "
                  f"{', '.join(f'{w:.2f} s at load {r[step][2]:.1f}' for w, r in zip(walls, runs))})")
        goal = GOALS[name]
        summary.append((f"make run ({name})", medians["make run"], cpu["make run"], goal))
        summary.append((f"no-op make run (after {name})", medians["no-op"], cpu["no-op"], NOOP_GOAL))
    print("\nthe goals (wall time; CPU seconds, of every process, for a loaded machine):")
    for what, wall, cpu_s, goal in summary:
        print(f"  {what:<32} {wall:6.2f} s wall ({wall / goal:.2f} of {goal} s)   {cpu_s:6.2f} s CPU "
              f"({cpu_s / goal:.2f} of it)")
    print(f"\nload {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")


if __name__ == "__main__":
    main()
