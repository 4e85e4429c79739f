"""The sweep-wide commands on a finished sweep: wall time and peak RSS of each.

Runs, each in its own process as the rules run them, ``commsweep summarize``,
``commsweep compare`` and the four summary figures against the results folder of a
finished sweep (``bench/sweep_scale.py`` makes one of 10, 100, 1,024 or 10,240 points; pass
``--size`` to make it here first), writing into a temporary folder, and prints per
command the wall time, the peak RSS and the size of what it wrote, then the time and
RSS per point.

    .venv/bin/python bench/aggregate.py --workdir /tmp/sweep1000            # an existing run
    .venv/bin/python bench/aggregate.py --workdir /tmp/sweep1000 --size 1000 # run the sweep first
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(REPO / "bench"))


def timed(argv: list[str]) -> tuple[float, float]:
    """Run a command; (wall s, peak RSS MiB) of its process."""
    # stderr goes to a file, not a pipe: waiting on the process before reading a full pipe
    # would hang once it had written more than the pipe holds.
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv)} failed:\n{err.read().decode(errors='replace')[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="the folder the sweep ran in (holds results/)")
    parser.add_argument("--size", type=int, help="run bench/sweep_scale.py's sweep of this size there first")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    results = workdir / "results"
    if args.size:
        import sweep_scale

        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "sweep.yaml"
        config.write_text(sweep_scale.SWEEPS[args.size] + sweep_scale.NETWORKS)
        print(f"running the {args.size}-point sweep in {workdir} ...", flush=True)
        print(f"  {sweep_scale.snakemake(REPO, workdir, config).wall:.0f} s", flush=True)
    points = sum(1 for _ in open(results / "sweep.csv")) - 1
    commsweep = str(BIN / "commsweep")
    with tempfile.TemporaryDirectory(prefix="commsweep-aggregate-") as tmp:
        out = Path(tmp)
        summary = out / "summary.csv"
        steps = [
            ("summarize", [commsweep, "summarize", "--sweep", str(results / "sweep.csv"), "--results", str(results),
                           "-o", str(summary)], [summary]),
            ("compare", [commsweep, "compare", "--sweep", str(results / "sweep.csv"), "--summary", str(summary),
                         "--results", str(results), "--findings", str(out / "findings.csv"),
                         "--comparison", str(out / "comparison.csv"), "--verdicts", str(out / "verdicts.csv"),
                         "--by-kind", str(out / "findings_by_kind.csv")],
             [out / n for n in ("findings.csv", "findings_by_kind.csv", "comparison.csv", "verdicts.csv")]),
        ]
        for kind in ("volume-by-tp", "tp-bytes-by-phase", "exposed-by-group"):
            steps.append((f"plot {kind}", [commsweep, "plot", kind, str(summary), "-o", str(out / f"{kind}.png")], []))
        steps.append(("plot audit-by-kind", [commsweep, "plot", "audit-by-kind", str(out / "findings_by_kind.csv"),
                                             "-o", str(out / "audit-by-kind.png")], []))
        print(f"{points} points ({results})")
        print(f"{'command':<26} {'wall s':>7} {'peak RSS MiB':>13} {'ms/point':>9}  outputs")
        for name, argv, outputs in steps:
            wall, rss = timed(argv)
            sizes = ", ".join(f"{p.name} {p.stat().st_size / 2**20:.1f} MiB"
                              f" ({sum(1 for _ in open(p)) - 1} rows)" for p in outputs)
            print(f"{name:<26} {wall:>7.2f} {rss:>13.0f} {1000 * wall / points:>9.2f}  {sizes}", flush=True)


if __name__ == "__main__":
    main()
