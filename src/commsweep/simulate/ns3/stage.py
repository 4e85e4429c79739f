"""The packet-level simulate stage's contract (``base.stage.Stage``): ``commsweep simulate
--backend ns3``, one packet-level point through a user's SimAI_simulator, a batch of its own."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from ...base.stage import Resources, Stage, nothing


@dataclass(frozen=True)
class PacketJob:
    """One packet-level simulation: the workload, SimAI's -g, SimAI_simulator, the topology
    (a template and its parameters, or a file), SimAI.conf settings, limits and the four files
    it writes. Parameters and settings are (key, text) pairs, as the command line takes them."""

    workload: str
    gpus: int
    prefix: str
    ns3_root: str | None
    topology: str = "rail-optimized"
    topology_param: tuple[tuple[str, str], ...] = ()
    topology_file: str | None = None
    ns3_set: tuple[tuple[str, str], ...] = ()
    ns3_build: str | None = None
    threads: int = 1
    stall: float = 600.0
    timeout: float | None = None
    strict: bool = False
    endtoend: str | None = None
    collectives: str | None = None
    times: str | None = None
    record: str | None = None
    out_dir: str = "results"


def job(point, config: Mapping, inputs: tuple, outputs: tuple) -> PacketJob:
    """A packet-level point (``inputs``: its workload) as ``simulator.ns3`` asks: its binary,
    topology template and parameters (the GPU count is the point's world size), settings and
    limits; into the analytical backend's three files and its run record (``outputs``)."""
    (workload,), (endtoend, collectives, times, record) = inputs, outputs
    from .runner import configured_root

    ns3 = config["simulator"]["ns3"]
    return PacketJob(
        workload=workload, gpus=point.world_size, prefix=f"{point.point_key}-", ns3_root=configured_root(config),
        topology=ns3["topology"]["template"],
        topology_param=tuple((key, str(value)) for key, value in ns3["topology"].items()
                             if key != "template" and value is not None),
        ns3_set=tuple((key, str(int(value) if isinstance(value, bool) else value))
                      for key, value in ns3["settings"].items()),
        ns3_build=ns3.get("build") or None, threads=ns3["threads"], stall=ns3["stall_s"],
        timeout=ns3.get("timeout_s") or None, strict=True, endtoend=endtoend, collectives=collectives, times=times,
        record=record)


def argv(job: PacketJob) -> list[str]:
    out = ["simulate", "--backend", "ns3", "-w", job.workload, "-g", str(job.gpus), "-r", job.prefix]
    if job.strict:
        out.append("--strict")
    if job.ns3_root is not None:
        out += ["--ns3-root", job.ns3_root]
    out += ["--topology", job.topology]
    if job.topology_file is not None:
        out += ["--topology-file", job.topology_file]
    if job.ns3_build is not None:
        out += ["--ns3-build", job.ns3_build]
    for key, value in job.topology_param:
        out += ["--topology-param", f"{key}={value}"]
    for key, value in job.ns3_set:
        out += ["--ns3-set", f"{key}={value}"]
    out += ["--threads", str(job.threads), "--stall", str(job.stall)]
    if job.timeout is not None:
        out += ["--timeout", str(job.timeout)]
    if job.out_dir != "results":
        out += ["--out-dir", job.out_dir]
    for flag, path in (("--endtoend", job.endtoend), ("--collectives", job.collectives), ("--times", job.times),
                       ("--record", job.record)):
        if path is not None:
            out += [flag, path]
    return out


def from_args(ns: argparse.Namespace) -> PacketJob:
    return PacketJob(
        workload=ns.workload, gpus=ns.gpus, prefix=ns.prefix, ns3_root=ns.ns3_root, topology=ns.topology,
        topology_param=tuple(ns.topology_param), topology_file=ns.topology_file, ns3_set=tuple(ns.ns3_set),
        ns3_build=ns.ns3_build, threads=ns.threads, stall=ns.stall, timeout=ns.timeout, strict=ns.strict,
        endtoend=ns.endtoend, collectives=ns.collectives, times=ns.times, record=ns.record, out_dir=ns.out_dir)


def run(job: PacketJob) -> None:
    """Through ``simulate.run`` as ``--backend ns3`` (its -g check, then SimAI_simulator), the
    numbers typed as the command line's parser types them."""
    from ..run import Options, run as simulate

    options = SimpleNamespace(
        ns3_root=job.ns3_root, topology=job.topology, topology_param=list(job.topology_param),
        topology_file=job.topology_file, ns3_set=list(job.ns3_set), ns3_build=job.ns3_build, threads=int(job.threads),
        stall=float(job.stall), record=job.record)
    simulate(Options(
        workload=job.workload, gpus=job.gpus, gpus_per_server=None, nics_per_server=None, nvlink=None, nic=None,
        prefix=job.prefix, out_dir=job.out_dir, endtoend=job.endtoend, collectives=job.collectives, times=job.times,
        backend="ns3", timeout=None if job.timeout is None else float(job.timeout), strict=job.strict, ns3=options))


def check_external(config: Mapping, points: Sequence) -> dict:
    """``simulator.ns3.root`` when the sweep has packet-level points: SimAI_simulator, checksummed."""
    from ...base.external import External, file_digest
    from .runner import configured_root, find_binary

    root = configured_root(config)
    if not (root and "packet" in ((config.get("sweep") or {}).get("simulation") or ())):
        return {}
    binary = find_binary(Path(root).expanduser())
    return {"simulator.ns3.root": External("simulator.ns3.root", str(root), file_digest(binary), str(binary.resolve()))}


def resources(config: Mapping, workload_mb: int) -> Resources:
    """What ``simulator.ns3`` gives a packet-level point: its memory, minutes and threads."""
    ns3 = config["simulator"]["ns3"]
    return Resources(memory_mb=int(ns3["memory_mb"]), runtime=float(ns3["runtime_min"]), threads=int(ns3["threads"]))


PACKET = Stage(
    name="simulate", summary="a packet-level point through a user's SimAI_simulator (ns-3), a batch of its own",
    per="point", inputs=("workload",), outputs=("endtoend", "collectives", "times", "packet_record"),
    kinds=("endtoend", "collectives", "times", None), upstream=("generate",),
    external=("simulator.ns3.root",), add_parser=None, from_args=from_args, job=job, argv=argv, run=run,
    applies=lambda point, audited: point.packet,
    files=lambda layout, key, config: (layout.endtoend(key), layout.collectives(key), layout.times(key),
                                       layout.packet_record(key)),
    status=lambda layout, key, config: layout.point_status("simulate", key), check_external=check_external,
    reads=lambda point, config: ("simulator.ns3.root",), resources=resources, input_files=nothing, own_batch=True,
)
