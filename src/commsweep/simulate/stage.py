"""The simulate stage's contract (``base.stage.Stage``): ``commsweep simulate``, one point's
iteration through SimAI's analytical model (the built-in engine, or a user's SimAI)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..base.stage import Resources, Stage
from ..setup.network import GPUS_FLAG, Network, overlap_flag
from .run import ratio_dir_for

# SimAI's overlap ratios and their defaults as its command line writes them, in its flags' order.
OVERLAPS = (("tp", "0"), ("dp", "0"), ("ep", "0"), ("pp", "1"))


def network_from_args(ns: argparse.Namespace) -> Network | None:
    """The parsed network flags (None without them: ``audit`` and ``timeline`` take all four
    or none, a ConfigError for only some)."""
    values = [ns.gpus_per_server, ns.nics_per_server, ns.nvlink_gbps, ns.nic_gbps]
    if all(v is None for v in values):
        return None
    if any(v is None for v in values):
        from ..base.errors import ConfigError

        raise ConfigError("give all four of -g_p_s, -n_p_s, -nv and -nic, or none", key="network")
    return Network(gpus_per_server=ns.gpus_per_server, nics_per_server=ns.nics_per_server,
                   nvlink_gbps=ns.nvlink_gbps, nic_gbps=ns.nic_gbps)


def as_commanded(net: Network) -> Network:
    """A network as its flags (``server_flags``) stand for it: unnamed, its bandwidths the
    text they are written as (what the command's parser gives, and what a stage run in-process
    hands on, so that it computes what its command computes)."""
    return Network(gpus_per_server=net.gpus_per_server, nics_per_server=net.nics_per_server,
                   nvlink_gbps=str(net.nvlink_gbps), nic_gbps=str(net.nic_gbps))


def ratio_dir(config: Mapping) -> str | None:
    """The ratio tables of the simulation (None: the engine's default)."""
    sim = config["simulator"]
    return ratio_dir_for(sim["ratio_dir"], sim["root"])


@dataclass(frozen=True)
class SimulateJob:
    """One point's simulation: the workload, SimAI's -g, its network, the overlap ratios (as
    (name, text) pairs in command order), the backend and where the three tables go."""

    workload: str
    gpus: int
    prefix: str
    # The point's network (``setup.network.Network``: its servers, NVLink and NICs) and the
    # ratio tables (None: the engine's default).
    network: Network
    ratio_dir: str | None = None
    overlap: tuple[tuple[str, str], ...] = ()
    simai_bugs: str = "fix"
    backend: str = "builtin"
    strict: bool = False
    simai_root: str | None = None
    endtoend: str | None = None
    collectives: str | None = None
    times: str | None = None
    out_dir: str = "results"
    timeout: float | None = None

    def overlaps(self) -> dict[str, str]:
        """Every ratio, SimAI's default where the job gives none."""
        return {**dict(OVERLAPS), **dict(self.overlap)}


def job(point, config: Mapping, inputs: tuple, outputs: tuple) -> SimulateJob:
    """A point's simulation (``inputs``: its workload) as ``simulator:`` in the config asks,
    into its EndToEnd.csv, collectives and times (``outputs``)."""
    (workload,), (endtoend, collectives, times) = inputs, outputs
    sim = config["simulator"]
    # The sweep's tp_overlap axis first, as its flag writes it (``overlap_flag``).
    overlap = tuple((name, overlap_flag(name, point.tp_overlap if name == "tp" and point.tp_overlap is not None
                                         else value)[1]) for name, value in sim["overlap"].items())
    return SimulateJob(
        workload=workload, gpus=point.world_size, prefix=f"{point.point_key}-",
        network=point.net, ratio_dir=ratio_dir(config), overlap=overlap, simai_bugs=sim["simai_bugs"],
        backend=sim["backend"], strict=True, simai_root=sim["root"] or None, endtoend=endtoend,
        collectives=collectives, times=times)


def argv(job: SimulateJob) -> list[str]:
    out = ["simulate", "-w", job.workload, GPUS_FLAG, str(job.gpus), *job.network.server_flags(), "-r", job.prefix]
    for name, value in job.overlap:
        out += overlap_flag(name, value)
    out += ["--simai-bugs", job.simai_bugs, "--backend", job.backend]
    if job.strict:
        out.append("--strict")
    if job.simai_root is not None:
        out += ["--simai-root", job.simai_root]
    if job.ratio_dir is not None:
        out += ["--ratio-dir", job.ratio_dir]
    if job.out_dir != "results":
        out += ["--out-dir", job.out_dir]
    if job.timeout is not None:
        out += ["--timeout", str(job.timeout)]
    for flag, path in (("--endtoend", job.endtoend), ("--collectives", job.collectives), ("--times", job.times)):
        if path is not None:
            out += [flag, path]
    return out


def from_args(ns: argparse.Namespace) -> SimulateJob:
    missing = [flag for flag, dest in (("-g_p_s/--gpus-per-server", "gpus_per_server"),
                                       ("-n_p_s/--nic_per_server", "nics_per_server"),
                                       ("-nv/--nvlink", "nvlink_gbps"), ("-nic/--nic_busbw", "nic_gbps"))
               if getattr(ns, dest) is None]
    if missing:
        # argparse's way (status 2): they are required but with --backend ns3
        print("commsweep simulate: error: the following arguments are required: " + ", ".join(missing),
              file=sys.stderr)
        raise SystemExit(2)
    return SimulateJob(
        workload=ns.workload, gpus=ns.gpus, prefix=ns.prefix, network=network_from_args(ns), ratio_dir=ns.ratio_dir,
        overlap=tuple((name, getattr(ns, f"{name}_overlap")) for name, _ in OVERLAPS), simai_bugs=ns.simai_bugs,
        backend=ns.backend, strict=ns.strict, simai_root=ns.simai_root, endtoend=ns.endtoend,
        collectives=ns.collectives, times=ns.times, out_dir=ns.out_dir, timeout=ns.timeout)


def options(job: SimulateJob, ns3=None):
    """The job as the simulation's ``run.Options`` (``ns3``: the packet-level backend's options)."""
    from .run import Options

    net = as_commanded(job.network)
    return Options(
        workload=job.workload, gpus=job.gpus, gpus_per_server=net.gpus_per_server,
        nics_per_server=net.nics_per_server, nvlink=net.nvlink_gbps, nic=net.nic_gbps, prefix=job.prefix,
        **{f"{name}_overlap": value for name, value in job.overlaps().items()}, ratio_dir=job.ratio_dir,
        out_dir=job.out_dir, endtoend=job.endtoend, collectives=job.collectives, times=job.times,
        simai_bugs=job.simai_bugs, backend=job.backend, simai_root=job.simai_root, timeout=job.timeout,
        strict=job.strict, ns3=ns3)


def run(job: SimulateJob) -> None:
    from . import run as simulation

    simulation.run(options(job))


def cmd_simulate(ns: argparse.Namespace) -> None:
    if ns.backend.startswith("astra"):  # ASTRA-sim: Chakra traces through a user's binary
        from .astra.command import run_args

        run_args(ns)
        return
    if ns.backend == "ns3":  # the packet-level backend: a topology, not the analytical flags
        from .ns3.stage import PACKET

        PACKET.run(PACKET.from_args(ns))
        return
    run(from_args(ns))


def add_point_arguments(p, *, schedule: bool, network_title: str) -> None:
    """A point's arguments for a command that reads its workload (``audit``, ``timeline``):
    AICB's training arguments (and Megatron's schedule options), AIOB's switches, the
    pipeline stage, SimAI's -g and its network flags (all four or none)."""
    from ..setup.arguments import add_aiob_arguments, add_schedule_arguments, add_stage_argument, add_training_arguments
    from .run import add_gpus_argument, add_network_arguments

    add_training_arguments(p)
    if schedule:
        add_schedule_arguments(p)
    add_aiob_arguments(p)
    add_stage_argument(p)
    add_gpus_argument(p, required=False)
    add_network_arguments(p, required=False, title=network_title)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "simulate", allow_abbrev=False,
        help="simulate a workload with SimAI's analytical model (built-in engine or a user's SimAI)",
        description="Simulate one iteration of a SimAI workload. Takes SimAI_analytical's flags; writes "
                    "<out-dir>/<PREFIX>EndToEnd.csv (SimAI's layout) and <out-dir>/<PREFIX>collectives.csv.",
    )
    from .run import add_gpus_argument, add_network_arguments, number_text

    p.add_argument("-w", "--workload", required=True, help="a SimAI workload file")
    add_gpus_argument(p, required=True)
    p.add_argument("-r", "--result", dest="prefix", required=True, help="output name prefix (SimAI's -r)")
    add_network_arguments(p, required=False, title="network (SimAI's flags; required but with --backend ns3)")
    for name, default in OVERLAPS:
        p.add_argument(f"-{name}_o", f"--{name}_overlap", dest=f"{name}_overlap", type=number_text,
                       default=default, help=f"{name.upper()} overlap ratio (default {default})")
    p.add_argument("--out-dir", default="results", help="output directory (default: results)")
    p.add_argument("--endtoend", help="write the EndToEnd.csv here instead")
    p.add_argument("--collectives", help="write the per-collective table here instead")
    p.add_argument("--times", metavar="FILE", help="also write the simulated times summed per phase, collective "
                                                  "and group, and SimAI's summary line, here (what summarize reads)")
    p.add_argument("--simai-bugs", choices=("fix", "reproduce", "error"), default="fix",
                   help="where SimAI prints nonsense: fix it and warn (default), reproduce SimAI's output, or fail")
    p.add_argument("--backend", choices=("builtin", "simai", "ns3", "astra-aware", "astra-unaware"), default="builtin",
                   help="builtin: the closed-form engine; simai: run <simai-root>/bin/SimAI_analytical; "
                        "ns3: run SimAI's packet-level SimAI_simulator (--ns3-root); astra-aware, astra-unaware: "
                        "ASTRA-sim's analytical backends on the workload's Chakra traces (--astra-root)")
    p.add_argument("--simai-root", help="a built SimAI checkout")
    p.add_argument("--timeout", type=float, help="seconds before a SimAI run is stopped (simai and ns3 backends)")
    p.add_argument("--strict", action="store_true",
                   help="fail when -g is not the workload's all_gpus (default: warn; SimAI takes DP from -g)")
    from .ns3.command import add_arguments as add_ns3_arguments

    add_ns3_arguments(p)
    from .astra.command import add_arguments as add_astra_arguments

    add_astra_arguments(p)
    p.set_defaults(func=cmd_simulate)


RATIO_FILES = ("nvlink_ratio.csv", "nic_ratio.csv", "ata_ratio.csv")


def check_external(config: Mapping, points: Sequence) -> dict:
    """``simulator.root`` (the simai backend: a built SimAI_analytical) and the ratio tables
    (``simulator.ratio_dir``, or the SimAI root's), there and checksummed."""
    from ..base.errors import ConfigError
    from ..base.external import External, file_digest, files_digest, missing
    from .simai import BINARY

    out = {}
    sim = config.get("simulator") or {}
    root = sim.get("root")
    if sim.get("backend") == "simai":
        if not root:
            raise ConfigError("the simai backend needs the root of a built SimAI", key="simulator.root")
        if not Path(root).expanduser().is_dir():
            raise missing("simulator.root", root, "SimAI checkout")
        binary = Path(root).expanduser() / BINARY
        if not binary.is_file():
            raise missing("simulator.root", binary, "SimAI_analytical (build SimAI first)")
        out["simulator.root"] = External("simulator.root", str(root), file_digest(binary), str(BINARY))
    ratios = ratio_dir_for(sim.get("ratio_dir"), root)
    if ratios:
        key = "simulator.ratio_dir" if sim.get("ratio_dir") else "simulator.root"
        folder = Path(ratios).expanduser()
        absent = [name for name in RATIO_FILES if not (folder / name).is_file()]
        if absent:
            raise missing(key, folder / absent[0], "ratio table")
        out["simulator.ratio_dir"] = External(key, str(ratios), files_digest(folder, [folder / n for n in RATIO_FILES]),
                                              ", ".join(RATIO_FILES))
    return out


def input_files(config: Mapping, point) -> tuple[str, ...]:
    """Files from outside results/ a point's simulation reads: SimAI's ratio tables."""
    from .ratio import table_files

    ratios = ratio_dir(config)
    return tuple(table_files(ratios)) if ratios else ()


def resources(config: Mapping, workload_mb: int) -> Resources:
    """A user's SimAI: 4 GB and ten minutes on a cluster; the engine: what its workload needs."""
    simai = config["simulator"]["backend"] == "simai"
    return Resources(memory_mb=max(4096 if simai else 0, workload_mb), runtime=10 if simai else 0.1)


SIMULATE = Stage(
    name="simulate", summary="a point's iteration through SimAI's analytical model (engine or a user's SimAI)",
    per="point", inputs=("workload",), outputs=("endtoend", "collectives", "times"),
    kinds=("endtoend", "collectives", "times"), upstream=("generate",),
    external=("simulator.root", "simulator.ratio_dir"), add_parser=add_parser, from_args=from_args, job=job,
    argv=argv, run=run, applies=lambda point, audited: not point.packet,
    files=lambda layout, key, config: (layout.endtoend(key), layout.collectives(key), layout.times(key)),
    status=lambda layout, key, config: layout.point_status("simulate", key), check_external=check_external,
    reads=lambda point, config: ("simulator.root", "simulator.ratio_dir"), resources=resources,
    input_files=input_files,
)
