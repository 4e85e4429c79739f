"""The packet-level stage (``base.stage.Stage``): one packet-level point through a user's
SimAI_simulator (``commsweep simulate --backend ns3``), each a batch of its own.

``PacketJob``'s fields are the command's flags (``base.jobfields``): those it shares with
the analytical backends (``stage.SimulateJob``) spelled the same, and its own, which
``commsweep simulate`` lists under the packet-level group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ...base.jobfields import flag
from ...base.stage import Resources, Stage
from ...setup.network import GPUS_FLAG
from . import topology as _topology

GROUP = "packet-level simulation (--backend ns3: SimAI_simulator)"


def key_value(text: str) -> tuple[str, str]:
    """A ``KEY=VALUE`` argument as its pair (``--topology-param``, ``--ns3-set``)."""
    import argparse

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _pair(item: tuple[str, str]) -> str:
    return f"{item[0]}={item[1]}"


@dataclass(frozen=True, kw_only=True)
class PacketJob:
    """One packet-level simulation, as ``commsweep simulate --backend ns3``'s flags (in the
    order its command line writes them): the workload, SimAI's -g, SimAI_simulator, the
    topology (a template and its parameters, or a file), SimAI.conf settings, limits and the
    four files it writes. Parameters and settings are (key, text) pairs, as typed."""

    command: ClassVar[str] = "simulate"

    # ``simulate``'s own flags (``SimulateJob``'s), this job's backend first.
    backend: str = flag("--backend", default="ns3", when="always", added=False)
    workload: str = flag("-w", "--workload", added=False)
    gpus: int = flag(GPUS_FLAG, "--gpus", added=False)
    prefix: str = flag("-r", "--result", dest="prefix", added=False)
    strict: bool = flag("--strict", action="store_true", default=False, added=False)
    ns3_root: str | None = flag("--ns3-root", metavar="PATH", default=None, group=GROUP,
                                help="a SimAI checkout built with './scripts/build.sh -c ns3', or its SimAI_simulator")
    topology: str = flag("--topology", default="rail-optimized", choices=tuple(_topology.TEMPLATES), when="always",
                         group=GROUP, help="a template of SimAI's topology generator (default: rail-optimized, its "
                                           "quickstart's --ro)")
    topology_file: str | None = flag("--topology-file", metavar="FILE", default=None, group=GROUP,
                                     help="a topology file to use instead of a template")
    ns3_build: str | None = flag("--ns3-build", metavar="LABEL", default=None, group=GROUP,
                                 help="how the binary was built, stated beside its times (default: its ns-3 profile, "
                                      "from its name)")
    topology_param: tuple[tuple[str, str], ...] = flag(
        "--topology-param", action="append", type=key_value, default=(), metavar="KEY=VALUE", text=_pair, group=GROUP,
        help="a generator parameter (gpu_per_server, gpu_type, bandwidth, nvlink_bw, latency, ...); gpu is -g")
    ns3_set: tuple[tuple[str, str], ...] = flag(
        "--ns3-set", action="append", type=key_value, default=(), metavar="KEY=VALUE", text=_pair, group=GROUP,
        help="a SimAI.conf or AS_* setting: cc_mode, buffer_mb, ecn, dynamic_pfc_threshold, packet_payload, "
             "send_latency_us (us per flow: AS_SEND_LAT), nvls, pxn")
    threads: int = flag("--threads", type=int, default=1, when="always", group=GROUP,
                        help="SimAI_simulator's -t (default 1)")
    stall: float = flag("--stall", type=float, default=600.0, metavar="SECONDS", when="always", group=GROUP,
                        help="stop a run when no flow finishes and nothing is printed for this long (default 600)")
    timeout: float | None = flag("--timeout", default=None, added=False)
    out_dir: str = flag("--out-dir", default=".", when="changed", added=False)
    endtoend: str | None = flag("--endtoend", default=None, added=False)
    collectives: str | None = flag("--collectives", default=None, added=False)
    times: str | None = flag("--times", default=None, added=False)
    record: str | None = flag("--record", metavar="FILE", default=None, group=GROUP,
                              help="the run's record (default: <out-dir>/<PREFIX>ns3.csv)")


class PacketStage(Stage[PacketJob]):
    name = "packet"
    command = "simulate"
    summary = "a packet-level point through a user's SimAI_simulator (ns-3), a batch of its own"
    job_type = PacketJob
    per = "point"
    inputs = ("workload",)
    outputs = ("endtoend", "collectives", "times", "packet_record")
    kinds = ("endtoend", "collectives", "times", None)
    upstream = ("generate",)
    external = ("simulator.ns3.root",)
    own_batch = True

    def applies(self, point, audited: bool) -> bool:
        return point.packet

    def files(self, layout, key: str, config: Mapping) -> tuple[str, ...]:
        return layout.endtoend(key), layout.collectives(key), layout.times(key), layout.packet_record(key)

    def status(self, layout, key: str, config: Mapping) -> str:
        return layout.point_status("simulate", key)

    def job(self, point, config: Mapping, inputs: tuple, outputs: tuple) -> PacketJob:
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
            timeout=ns3.get("timeout_s") or None, strict=True, endtoend=endtoend, collectives=collectives,
            times=times, record=record)

    def run(self, job: PacketJob) -> None:
        """The -g check of every backend, then SimAI_simulator (``command.run``)."""
        from ..run import check_gpus
        from . import command

        check_gpus(job.workload, job.gpus, job.strict)
        command.run(job)

    def check_external(self, config: Mapping, points: Sequence) -> dict:
        """``simulator.ns3.root`` when the sweep has packet-level points: SimAI_simulator, checksummed."""
        from ...base.external import External, file_digest
        from .runner import configured_root, find_binary

        root = configured_root(config)
        if not (root and "packet" in ((config.get("sweep") or {}).get("simulation") or ())):
            return {}
        binary = find_binary(Path(root).expanduser())
        return {"simulator.ns3.root": External("simulator.ns3.root", str(root), file_digest(binary),
                                               str(binary.resolve()))}

    def reads(self, point, config: Mapping) -> tuple[str, ...]:
        return ("simulator.ns3.root",)

    def resources(self, config: Mapping, workload_mb: int) -> Resources:
        """What ``simulator.ns3`` gives a packet-level point: its memory, minutes and threads."""
        ns3 = config["simulator"]["ns3"]
        return Resources(memory_mb=int(ns3["memory_mb"]), runtime=float(ns3["runtime_min"]),
                         threads=int(ns3["threads"]))


PACKET = PacketStage()
