"""How the pipeline scales: sweeps of about 10, 100 and 1,000 points, end to end.

For each size it writes a sweep config, runs the whole workflow from scratch with
``--cores 2`` in a temporary folder, then once more with nothing changed, and prints:
the DAG build time (a dry run), the wall time, the time per point, the peak RSS of any
process of the run, the files written, and the no-op rerun time. Results are appended to
``bench/sweep_scale.md`` (``--record``), which docs/scale.md quotes.

    .venv/bin/python bench/sweep_scale.py                 # all three sizes
    .venv/bin/python bench/sweep_scale.py --sizes 10 100  # some of them
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# Several models, TP 1-8, SP, PP, AIOB, both schedules, two networks: the large sweep has
# 4 models x 4 TP x 2 PP x 2 SP x 2 AIOB x 2 schedules x 2 micro batches x 2 networks
# = 1,024 points (every combination valid).
SWEEPS = {
    10: """\
sweep:
  model: [gpt-7b, gpt-13b, gpt-22b, llama-7b, llama-13b]
  world_size: [16]
  tp: [4]
  sp: [false, true]
  aiob: [true]
  schedule: [aicb]
  global_batch: [16]
  network: [netA]
""",
    100: """\
sweep:
  model: [gpt-7b, gpt-13b, gpt-22b, llama-7b, llama-13b]
  world_size: [32, 64, 128, 256, 512]
  tp: [1, 2, 4, 8]
  sp: [true]
  aiob: [true]
  schedule: [aicb]
  global_batch: [1024]
  network: [netA]
""",
    1000: """\
sweep:
  model: [gpt-7b, gpt-13b, llama-7b, llama-13b]
  world_size: [64]
  tp: [1, 2, 4, 8]
  pp: [1, 2]
  sp: [false, true]
  aiob: [false, true]
  schedule: [aicb, megatron]
  micro_batch: [1, 2]
  global_batch: [128]
  network: [netA, netB]
""",
}
NETWORKS = """\
networks:
  netA: {gpus_per_server: 8, nics_per_server: 8, nvlink_gbps: 360, nic_gbps: 48.5}
  netB: {gpus_per_server: 8, nics_per_server: 4, nvlink_gbps: 200, nic_gbps: 25}
"""


def snakemake(workdir: Path, config: Path, *extra: str) -> float:
    """Run the workflow; return its wall time in seconds."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    cmd = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(config), "--cores", "2", "--quiet", "all", *extra]
    start = time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"snakemake failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return elapsed


def count_files(folder: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(folder))


def measure(size: int) -> dict[str, float | int]:
    with tempfile.TemporaryDirectory(prefix="commsweep-scale-") as tmp:
        workdir = Path(tmp)
        config = workdir / "sweep.yaml"
        config.write_text(SWEEPS[size] + NETWORKS)
        dag = snakemake(workdir, config, "--dry-run")
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        wall = snakemake(workdir, config)
        peak_kib = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
        points = sum(1 for _ in open(workdir / "results" / "sweep.csv")) - 1
        files = count_files(workdir / "results")
        meta = count_files(workdir / ".snakemake")
        rerun = snakemake(workdir, config)
    return {"points": points, "dag_s": dag, "wall_s": wall, "per_point_ms": 1000 * wall / points,
            "peak_rss_mib": peak_kib / 1024, "files": files, "snakemake_files": meta, "rerun_s": rerun}


def main() -> None:
    # As `make run` does: the package's modules byte-compiled once, not in every job.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "src")], check=True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=sorted(SWEEPS), choices=sorted(SWEEPS))
    parser.add_argument("--record", action="store_true", help="append the results to bench/sweep_scale.md")
    args = parser.parse_args()
    head = f"{'points':>6} {'DAG s':>7} {'wall s':>8} {'ms/point':>9} {'peak RSS MiB':>13} {'files':>7} {'rerun s':>8}"
    lines = [head]
    print(head, flush=True)
    for size in args.sizes:
        r = measure(size)
        line = (f"{r['points']:>6} {r['dag_s']:>7.1f} {r['wall_s']:>8.1f} {r['per_point_ms']:>9.0f} "
                f"{r['peak_rss_mib']:>13.0f} {r['files']:>7} {r['rerun_s']:>8.1f}")
        lines.append(line)
        print(line, flush=True)
    if args.record:
        cpu = platform.processor() or platform.machine()
        with open(REPO / "bench" / "sweep_scale.md", "a", encoding="utf-8") as fh:
            fh.write(f"\n## {date.today().isoformat()}, {os.cpu_count()} CPUs ({cpu}), `--cores 2`\n\n```\n")
            fh.write("\n".join(lines) + "\n```\n")


if __name__ == "__main__":
    main()
