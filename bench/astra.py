"""commsweep's own cost per ASTRA-sim point against the simulator's run time.

For each workload given (default: one AICB-style and one Megatron workload of GPT-7B on 16
GPUs, made here with ``commsweep generate``), times in-process what commsweep does around a
run (parse the workload, make every rank's Chakra trace, write the traces and ASTRA-sim's
input files) and then ASTRA-sim's run itself (the wall time of its process), and prints both
with their ratio and the simulated iteration.

    ASTRA_SIM_ROOT=/path/to/astra-sim .venv/bin/python bench/astra.py
    ASTRA_SIM_ROOT=/path/to/astra-sim .venv/bin/python bench/astra.py --backend astra-aware w1.txt w2.txt
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from commsweep.setup.network import Network
from commsweep.simulate.astra import inputs, runner
from commsweep.workload import chakra, chakra_graph
from commsweep.workload import format as wformat

BIN = Path(sys.executable).parent
NET = Network(gpus_per_server=8, nics_per_server=8, nvlink_gbps="360", nic_gbps="25")
GENERATE = ["--world_size=16", "--tensor_model_parallel_size=2", "--global_batch=16", "--model", "gpt-7b",
            "--enable_sequence_parallel"]


def made_workloads(folder: Path) -> list[Path]:
    out = []
    for schedule in ("aicb", "megatron"):
        path = folder / f"{schedule}.txt"
        subprocess.run([str(BIN / "commsweep"), "generate", "--schedule", schedule, *GENERATE, "-o", str(path)],
                       check=True, stdout=subprocess.DEVNULL)
        out.append(path)
    return out


def prepare(workload: Path, folder: Path) -> int:
    """What commsweep does before ASTRA-sim runs; the rank count."""
    w = wformat.read(workload)
    ranks = w.header.all_gpus
    nodes, groups = chakra_graph.traces(w, source=str(workload), skip_empty=True)
    chakra.write(folder / "traces", nodes, groups, workload=w)
    (folder / "network.yml").write_text(inputs.network_yaml(NET, ranks))
    (folder / "system.json").write_text(inputs.system_json(dims=len(inputs.dimensions(NET, ranks))))
    (folder / "memory.json").write_text(inputs.memory_json())
    return ranks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workloads", nargs="*", help="SimAI workload files (default: two made here)")
    parser.add_argument("--backend", default="astra-unaware", choices=tuple(runner.BINARIES))
    args = parser.parse_args()
    root = os.environ.get("ASTRA_SIM_ROOT")
    if not root:
        raise SystemExit("set ASTRA_SIM_ROOT to an ASTRA-sim checkout with its analytical backend built")
    exe = runner.binary(root, args.backend).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        workloads = [Path(w) for w in args.workloads] or made_workloads(Path(tmp))
        print(f"{'workload':24} {'ranks':>5} {'nodes/rank':>10} {'commsweep s':>11} {'ASTRA-sim s':>11} "
              f"{'ratio':>6} {'iteration us':>13}")
        for i, workload in enumerate(workloads):
            folder = Path(tmp) / f"run{i}"
            start = time.perf_counter()
            ranks = prepare(workload, folder)
            ours = time.perf_counter() - start
            try:
                result = runner.run(exe, folder, ranks, trace_prefix="traces/trace", groups="traces/comm_groups.json")
            except runner.AstraFailure as failure:
                print(f"{workload.name[:24]:24} {ranks:5d} failed: {failure}")
                continue
            nodes = len(chakra.read_trace(folder / "traces" / "trace.0.et"))
            print(f"{workload.name[:24]:24} {ranks:5d} {nodes:10d} {ours:11.3f} {result.wall_s:11.3f} "
                  f"{ours / result.wall_s:6.2f} {result.total_ns / 1000:13.3f}")
        print(f"ASTRA-sim: {runner.build_label(exe)}")


if __name__ == "__main__":
    main()
