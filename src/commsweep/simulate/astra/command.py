"""``commsweep simulate --backend astra-aware|astra-unaware``: one workload through a user's ASTRA-sim.

The workload becomes Chakra traces (``workload.chakra_graph``), the network its ASTRA-sim
file (``inputs``); the run (``runner``) happens in ``<out-dir>/<PREFIX>astra/``, made afresh,
which keeps every input, the exact command and the output. Written beside it:
``<PREFIX>astra.csv``, one line per rank (its finish and exposed communication in ns) with the
binary's build; with ``--times``, the iteration in the times table's rows (``total_us``,
``exposed_us``, ``compute_us``; ``simulate.times``), what the sweep's tables read of every backend.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import sys
from pathlib import Path

from ...base.errors import ConfigError
from ...base.files import write_text
from ...setup.network import Network
from ...workload import chakra, chakra_graph
from ...workload import format as wformat
from .. import times
from . import inputs, runner

ROOT_ENV = "ASTRA_SIM_ROOT"
RECORD_COLUMNS = ("rank", "finished_ns", "exposed_ns", "build", "wall_s")


def _pair(kind):
    def parse(text: str):
        parts = text.split(",")
        if len(parts) != 2:
            raise argparse.ArgumentTypeError(f"expected two values (NVLink,NIC), got {text!r}")
        try:
            return tuple(kind(p) for p in parts)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected two {kind.__name__} values, got {text!r}") from None
    return parse


def system_setting(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def add_arguments(parser) -> None:
    g = parser.add_argument_group("ASTRA-sim (--backend astra-aware or astra-unaware: its analytical backends)")
    g.add_argument("--astra-root", metavar="PATH",
                   help=f"an ASTRA-sim checkout with its analytical backend built, or the binary (default: ${ROOT_ENV})")
    g.add_argument("--astra-latency", type=_pair(float), default=inputs.DEFAULT_LATENCY_NS, metavar="NV,NIC",
                   help="latency per message of the NVLink and NIC dimensions, ns (default: %(default)s)")
    g.add_argument("--astra-topology", type=_pair(str), default=inputs.DEFAULT_TOPOLOGY, metavar="T1,T2",
                   help=f"each dimension's topology: {', '.join(inputs.TOPOLOGIES)} (default: Switch,Switch)")
    g.add_argument("--astra-system", action="append", type=system_setting, default=[], metavar="KEY=VALUE",
                   help="a key of ASTRA-sim's system file over commsweep's defaults (docs/astra-sim.md)")
    g.add_argument("--astra-overlap", default="", metavar="GROUPS",
                   help="groups whose weight-gradient collectives overlap the backward pass (e.g. DP,DP_EP)")
    g.add_argument("--stall-s", type=float, default=None, metavar="SECONDS",
                   help="stop ASTRA-sim when it prints nothing for this long (default: no limit)")


def run_args(ns: argparse.Namespace) -> runner.AstraRun:
    """Run one simulation from ``commsweep simulate``'s parsed arguments."""
    missing = [f for f, v in (("-g_p_s", ns.gpus_per_server), ("-n_p_s", ns.nics_per_server), ("-nv", ns.nvlink_gbps),
                              ("-nic", ns.nic_gbps)) if v is None]
    if missing:
        raise ConfigError(f"the astra backends need the network flags; missing {', '.join(missing)}", key="network")
    net = Network(gpus_per_server=ns.gpus_per_server, nics_per_server=ns.nics_per_server,
                  nvlink_gbps=ns.nvlink_gbps, nic_gbps=ns.nic_gbps)
    root = ns.astra_root or os.environ.get(ROOT_ENV)
    if not root:
        raise ConfigError(f"the astra backends need ASTRA-sim: --astra-root or ${ROOT_ENV}", key="astra_root")
    settings = inputs.Settings(latency_ns=tuple(ns.astra_latency), topology=tuple(ns.astra_topology),
                               system=dict(ns.astra_system))
    overlap = tuple(g for g in ns.astra_overlap.split(",") if g)
    result = simulate(ns.workload, ns.gpus, net, settings, backend=ns.backend, root=root,
                      folder=Path(ns.out_dir) / f"{ns.prefix}astra", overlap=overlap, timeout=ns.timeout,
                      stall=ns.stall_s)
    write_outputs(result, Path(ns.out_dir) / f"{ns.prefix}astra.csv", ns.times)
    print(f"commsweep simulate: {result.total_ns / 1000:.3f} us simulated ({result.exposed_ns / 1000:.3f} us "
          f"exposed communication) in {result.wall_s:.1f} s by {result.build}", file=sys.stderr)
    return result


def simulate(workload: str, gpus: int | None, net: Network, settings: inputs.Settings, *, backend: str,
             root: str | Path, folder: Path, overlap: tuple[str, ...] = (), timeout: float | None = None,
             stall: float | None = None) -> runner.AstraRun:
    """Export, write the inputs into a fresh ``folder``, run and judge."""
    exe = runner.binary(root, backend)
    w = wformat.read(workload)
    ranks = w.header.all_gpus if gpus is None else gpus
    # Collectives that move nothing (zero bytes, one rank) cost nothing in SimAI; ASTRA-sim never
    # finishes a zero-byte all-gather or a collective on one rank.
    nodes, groups = chakra_graph.traces(w, gpus=ranks, overlap=overlap, source=workload, skip_empty=True)
    if folder.exists():
        shutil.rmtree(folder)
    chakra.write(folder / "traces", nodes, groups, source=str(workload), workload=w)
    write_text(folder / "network.yml", inputs.network_yaml(net, ranks, settings))
    write_text(folder / "system.json", inputs.system_json(settings, len(inputs.dimensions(net, ranks))))
    write_text(folder / "memory.json", inputs.memory_json())
    return runner.run(exe.resolve(), folder, ranks, trace_prefix=f"traces/{chakra.DEFAULT_PREFIX}",
                      groups=f"traces/{chakra.GROUPS_FILE}" if groups else None, timeout=timeout, stall=stall)


def record_csv(result: runner.AstraRun) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(RECORD_COLUMNS)
    for r in result.ranks:
        w.writerow([r.rank, r.finished_ns, r.exposed_ns, result.build, f"{result.wall_s:.3f}"])
    return buf.getvalue()


def times_csv(result: runner.AstraRun) -> str:
    """The iteration in the times table's layout: total, exposed communication, compute (us)."""
    total, exposed = result.total_ns, result.exposed_ns
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(times.COLUMNS)
    for quantity, value in (("total_us", total), ("exposed_us", exposed), ("compute_us", total - exposed)):
        w.writerow([quantity, "", "", "", f"{value // 1000}.{value % 1000:03d}"])
    return buf.getvalue()


def write_outputs(result: runner.AstraRun, record: Path, times_path: str | None) -> None:
    if times_path:
        write_text(times_path, times_csv(result))
    write_text(record, record_csv(result))
