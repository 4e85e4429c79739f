"""Backbone timings: the default sweep end to end, and `commsweep volumes` on the largest
reference workload. Prints seconds; run with `make bench` or `.venv/bin/python bench/backbone.py`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = Path(os.environ.get("COMMSWEEP_REFERENCE", REPO.parent / "shared" / "reference"))
BIN = Path(sys.executable).parent


def timed(cmd: list[str], **kw) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    return time.perf_counter() - start


def main() -> None:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "--directory", tmp, "--cores", "2",
               "--configfile", str(REPO / "config" / "config.yaml"), "--quiet"]
        cold = timed(cmd, env=env)
        warm = timed(cmd, env=env)
        n_points = sum(1 for _ in open(Path(tmp) / "results" / "sweep.csv")) - 1
    print(f"default sweep ({n_points} points), from scratch: {cold:.2f} s")
    print(f"default sweep, rerun with nothing to do:     {warm:.2f} s")

    candidates = sorted((REFERENCE / "simai" / "examples").glob("*.txt")) + sorted((REFERENCE / "aicb" / "workloads").glob("*.txt"))
    if not candidates:
        print(f"reference workloads not found under {REFERENCE}: skipping the volumes timing")
        return
    largest = max(candidates, key=lambda p: p.stat().st_size)
    runs = [timed([sys.executable, "-m", "commsweep", "volumes", str(largest), "--format", "csv"]) for _ in range(5)]
    from commsweep.analysis import volumes
    from commsweep.workload import format as wf

    start = time.perf_counter()
    for _ in range(20):
        volumes.tally(wf.read(largest))
    in_process = (time.perf_counter() - start) / 20
    rows = len(wf.read(largest).rows)
    print(f"commsweep volumes on {largest.name} ({rows} rows): {min(runs):.3f} s per process (best of 5), "
          f"{in_process * 1000:.1f} ms in-process")


if __name__ == "__main__":
    main()
