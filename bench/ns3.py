"""commsweep's own cost per packet-level point, against the simulator's run time.

A packet-level point runs ``commsweep simulate --backend ns3``: Python's start and imports,
the checks, the topology and SimAI.conf written, SimAI_simulator run and watched, its files
parsed and checked, four files written. Everything but the simulator's own run is commsweep's
overhead. For each workload this prints, the minimum and median of ``--repeat`` runs:

* wall time: the whole process's, the simulator's (the child process, as the run record's
  ``wall_s`` measures it), the difference and its share of the simulator's time;
* CPU time, which the machine's load does not change: commsweep's own (the process tree's
  CPU seconds minus the simulator's, the record's ``cpu_s``), of it the fixed cost (the
  interpreter's start and the imports, measured alone), and its share of the simulator's CPU
  time; and the simulator time at which that CPU cost is 1% (the target: under 1%).

    SIMAI_ROOT=/path/to/SimAI .venv/bin/python bench/ns3.py          # the real SimAI_simulator
    .venv/bin/python bench/ns3.py --replay                            # no SimAI: a stand-in

With ``--replay`` (no SimAI build) a stand-in replays the recorded runs of the reference
(``simai/ns3/runs``), so the overhead is measured for real, and it is set against the
simulator times the reference recorded (its INDEX.csv ``wall_s`` and each run's ``time.txt``
CPU seconds: SimAI's -O0 build on the machine that recorded them).
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REFERENCE = Path(os.environ.get("COMMSWEEP_REFERENCE", REPO.parent / "shared" / "reference")) / "simai" / "ns3"
BIN = Path(sys.executable).parent
# (reference run, workload file, GPUs)
CASES = {
    "microAllReduce_8g_sendlat6": ("microAllReduce.txt", 8),
    "gpt7b_L2_tp8_16g_sendlat6": ("gpt7b_L2_ws16_tp8_pp1_seq2048_mbs1_ga1_sp0_default.txt", 16),
    "gpt7b_L2_tp4_16g_sendlat6": ("gpt7b_L2_ws16_tp4_pp1_seq2048_mbs1_ga1_sp0_default.txt", 16),
}
STAND_IN = """#!{python}
import os, shutil, sys
src = {run!r}
for name in ("ncclFlowModel_EndToEnd.csv", "llama_hpn7_fct.txt", "llama_hpn7_pfc.txt",
             "ncclFlowModel_test1_dimension_utilization_0.csv"):
    shutil.copy(os.path.join(src, name), name)
sys.stdout.write(open(os.path.join(src, "stdout.log")).read())
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one(binary: Path, run: str, out: Path) -> tuple[float, float, float, float]:
    """(process wall s, simulator wall s, process tree CPU s, simulator CPU s) of one
    ``commsweep simulate --backend ns3``."""
    workload, gpus = CASES[run]
    argv = [str(BIN / "commsweep"), "simulate", "--backend", "ns3", "-w", str(REFERENCE / "inputs" / "workloads" / workload),
            "-g", str(gpus), "-r", "b-", "--ns3-root", str(binary), "--ns3-build", "bench",
            "--topology-param", "gpu_type=H20", "--topology-param", "bandwidth=200Gbps",
            "--topology-param", "nvlink_bw=2400Gbps", "--ns3-set", "send_latency_us=6", "--out-dir", str(out)]
    cpu = _children_cpu()
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    cpu = _children_cpu() - cpu
    with open(out / "b-ns3.csv", newline="") as fh:
        record = next(csv.DictReader(fh))
    return wall, float(record["wall_s"]), cpu, float(record["cpu_s"])


def fixed_cpu() -> float:
    """CPU seconds of the interpreter's start and the imports a packet-level point's command makes."""
    cpu = _children_cpu()
    subprocess.run([sys.executable, "-c", "import commsweep.orchestration.cli, commsweep.orchestration.stages, "
                    "commsweep.simulate.ns3.command"], check=True)
    return _children_cpu() - cpu


def recorded_cpu(run: str) -> float:
    """The simulator's CPU seconds in a recorded run (its /usr/bin/time -v output)."""
    text = (REFERENCE / "runs" / run / "time.txt").read_text()
    return sum(float(m) for m in re.findall(r"(?:User|System) time \(seconds\): ([0-9.]+)", text))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replay", action="store_true", help="a stand-in replaying the reference runs (no SimAI)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="", help="the reference runs whose name holds this text")
    ns = parser.parse_args()
    if not (REFERENCE / "INDEX.csv").is_file():
        print(f"bench/ns3.py: the reference runs are not at {REFERENCE} (set COMMSWEEP_REFERENCE)", file=sys.stderr)
        return 2
    with open(REFERENCE / "INDEX.csv", newline="") as fh:
        recorded = {r["run"]: float(r["wall_s"]) for r in csv.DictReader(fh)}
    root = os.environ.get("SIMAI_ROOT")
    if not ns.replay and not root:
        print("bench/ns3.py: set SIMAI_ROOT to a SimAI checkout built with './scripts/build.sh -c ns3', "
              "or use --replay", file=sys.stderr)
        return 2
    fixed = min(fixed_cpu() for _ in range(ns.repeat))
    print(f"fixed cost (interpreter start and imports): {fixed:.3f} CPU s")
    print(f"{'run':32} {'process s':>10} {'simulator s':>12} {'overhead s':>11} {'share':>8} {'own CPU s':>10} "
          f"{'sim CPU s':>10} {'CPU share':>10} {'1% at sim s':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for run in (r for r in CASES if ns.only in r):
            if ns.replay:
                binary = Path(tmp) / f"{run}.sh"
                binary.write_text(STAND_IN.format(python=sys.executable, run=str(REFERENCE / "runs" / run)))
                binary.chmod(0o755)
            else:
                binary = Path(root)
            results = [one(binary, run, Path(tmp)) for _ in range(ns.repeat)]
            overhead = [w - s for w, s, _, _ in results]
            own_cpu = [c - sc for _, _, c, sc in results]
            sim = [s for _, s, _, _ in results] if not ns.replay else [recorded[run]]
            sim_cpu = [sc for _, _, _, sc in results] if not ns.replay else [recorded_cpu(run)]
            base, base_cpu = statistics.median(sim), statistics.median(sim_cpu)
            label = " (recorded -O0)" if ns.replay else ""
            print(f"{run:32} {min(w for w, _, _, _ in results):10.3f} {base:12.3f} {min(overhead):11.3f} "
                  f"{min(overhead) / base:8.2%} {min(own_cpu):10.3f} {base_cpu:10.3f} {min(own_cpu) / base_cpu:10.2%} "
                  f"{min(own_cpu) * 100:12.1f}{label}   median overhead {statistics.median(overhead):.3f} s, "
                  f"{statistics.median(own_cpu):.3f} CPU s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
