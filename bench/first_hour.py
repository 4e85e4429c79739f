"""The times a new user meets first: a 2-point sweep and the default sweep from scratch, and a
`make run` with nothing to do.

Each repeat runs in a fresh copy of the project (its workflow files, this checkout's package and
venv linked, as tests/sweeps.py's ``project`` makes one), in three steps:

* ``sweep``: ``snakemake --cores 2 --configfile CONFIG``, the README's command, from scratch;
* ``report``: then ``make run CONFIG=CONFIG``: Snakemake has nothing to do, the report is made;
* ``no-op``: then ``make run CONFIG=CONFIG`` again: nothing changed, so it starts no Snakemake
  (``commsweep.orchestration.current``) and makes no report.

It prints each step's median wall time (and CPU time, of every process it started) over the
repeats, ``sweep + report`` (a ``make run`` from scratch), and the 1-minute load average
before and after: on a shared machine the wall times grow with the load, the CPU times much
less. The goals (issue 25): the 2-point sweep under 5 s, the default sweep under 10 s, the
no-op under 1.5 s, on 2 cores.

    .venv/bin/python bench/first_hour.py                    # both sweeps, 3 repeats
    .venv/bin/python bench/first_hour.py --repeats 5 --sweeps two-points
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
BIN = Path(sys.executable).parent
SWEEPS = {
    "two-points": REPO / "tests" / "sweeps" / "two-points.yaml",
    "default": REPO / "config" / "config.yaml",
}
GOALS = {"two-points": ("sweep", 5.0), "default": ("sweep", 10.0)}
NOOP_GOAL = 1.5
# make must never reinstall into the shared venv: the install markers count as up to date.
KEEP = [arg for marker in (".venv/.base-installed", ".venv/.extras-installed", ".venv/bin/python")
        for arg in ("-o", marker)]


def project(dest: Path) -> Path:
    """A folder to run ``make`` in as in a fresh clone (times kept, the venv and sources linked)."""
    dest.mkdir(parents=True)
    for name in ("Snakefile", "Makefile", "pyproject.toml"):
        shutil.copy2(REPO / name, dest / name)
    for name in ("workflow", "profiles", "config"):
        shutil.copytree(REPO / name, dest / name, copy_function=shutil.copy2)
    (dest / ".venv").symlink_to(Path(sys.prefix))
    (dest / "src").symlink_to(REPO / "src")
    return dest


def timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, of the command and everything it waited for)."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"failed ({result.returncode}): {' '.join(cmd)}\n"
                         f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def one_repeat(name: str, tmp: Path) -> dict[str, tuple[float, float]]:
    folder = project(tmp / name)
    shutil.copy2(SWEEPS[name], folder / "sweep.yaml")
    make = ["make", *KEEP, "run", "CONFIG=sweep.yaml"]
    return {
        "sweep": timed([str(BIN / "snakemake"), "--cores", "2", "--configfile", "sweep.yaml"], folder),
        "report": timed(make, folder),
        "no-op": timed(make, folder),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sweeps", nargs="+", choices=sorted(SWEEPS), default=list(SWEEPS))
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    plugins = sorted(p.name.split("-")[0] for p in Path(sys.prefix).glob("lib/python*/site-packages/"
                                                                          "snakemake_executor_plugin_*-*.dist-info"))
    print(f"{os.cpu_count()} CPUs, load {load_before:.1f}; Snakemake executor plugins installed: "
          f"{', '.join(plugins) or 'none'} (each is imported at every Snakemake start)")
    summary = []
    for name in args.sweeps:
        runs = []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory(prefix="commsweep-bench-") as tmp:
                runs.append(one_repeat(name, Path(tmp)))
        print(f"\n{name} ({SWEEPS[name].relative_to(REPO)}), median of {args.repeats}:")
        medians, cpu = {}, {}
        for step in ("sweep", "report", "no-op"):
            walls, cpus = [r[step][0] for r in runs], [r[step][1] for r in runs]
            medians[step], cpu[step] = statistics.median(walls), statistics.median(cpus)
            print(f"  {step:<8} {medians[step]:6.2f} s wall  {statistics.median(cpus):6.2f} s CPU"
                  f"   (each: {', '.join(f'{w:.2f}' for w in walls)})")
        total = statistics.median([r["sweep"][0] + r["report"][0] for r in runs])
        print(f"  make run from scratch (sweep + report): {total:.2f} s")
        step, goal = GOALS[name]
        print(f"  goal: {step} under {goal:.0f} s: {medians[step]:.2f} s ({medians[step] / goal:.2f} of it); "
              f"no-op under {NOOP_GOAL} s: {medians['no-op']:.2f} s ({medians['no-op'] / NOOP_GOAL:.2f} of it)")
        summary.append((f"{name} sweep", medians[step], cpu[step], goal))
        summary.append((f"no-op make run (after {name})", medians["no-op"], cpu["no-op"], NOOP_GOAL))
    print("\nthe goals (wall time; CPU seconds, of every process, for a loaded machine):")
    for what, wall, cpu_s, goal in summary:
        print(f"  {what:<32} {wall:6.2f} s wall ({wall / goal:.2f} of {goal} s)   {cpu_s:6.2f} s CPU "
              f"({cpu_s / goal:.2f} of it)")
    print(f"\nload {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")


if __name__ == "__main__":
    main()
