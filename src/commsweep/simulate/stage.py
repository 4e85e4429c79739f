"""The simulate stage (``base.stage.Stage``): ``commsweep simulate``, one point's iteration
through SimAI's analytical model (the built-in engine, or a user's SimAI).

``SimulateJob`` is the command: each field is one of its flags (``base.jobfields``), so the
parser, the command line a task is planned as and the job parsed back all come from it. A
new option is one field here, read where the simulation runs (``simulate.run``).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..base.jobfields import add_arguments, flag, from_namespace
from ..base.stage import Resources, Stage
from ..setup.network import GPUS_FLAG, SERVER_FLAGS, Network
from .run import cp_exchange_text, fsdp_gathers_text, number_text, ratio_dir_for

# SimAI's overlap ratios and their defaults as its command line writes them, in its flags' order.
OVERLAPS = (("tp", "0"), ("dp", "0"), ("ep", "0"), ("pp", "1"))
NETWORK = "network (SimAI's flags; required unless --backend ns3)"
# Where a one-off simulation writes by default: here, not a sweep's results folder (the
# pipeline names every file it writes).
OUT_DIR = "."


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


# What a Megatron workload's buckets overlap (``--bucket-overlap``).
BUCKET_OVERLAPS = ("none", "grads", "grads+params")


def _overlap(name: str, default: str):
    return flag(f"-{name}_o", f"--{name}_overlap", type=number_text, default=default, when="always",
                help=f"{name.upper()} overlap ratio (default {default})")


@dataclass(frozen=True, kw_only=True)
class SimulateJob:
    """One point's simulation, as ``commsweep simulate``'s flags (in the order its command line
    writes them): the workload, SimAI's -g, its network, the overlap ratios, the backend and
    where the three tables go."""

    command: ClassVar[str] = "simulate"

    workload: str = flag("-w", "--workload", help="a SimAI workload file")
    gpus: int = flag(GPUS_FLAG, "--gpus", type=int, help="SimAI's -g: GPUs (sets DP = g / (tp * pp))")
    # The network, as SimAI's four flags write it (its bandwidths the text they are typed as).
    gpus_per_server: int | None = flag(SERVER_FLAGS["gpus_per_server"], "--gpus-per-server", type=int, default=None,
                                       group=NETWORK, help="GPUs per server (per NVLink domain)")
    nics_per_server: int | None = flag(SERVER_FLAGS["nics_per_server"], "--nic_per_server", type=int, default=None,
                                       aliases=("--nics_per_server",), group=NETWORK, help="NICs per server")
    nvlink_gbps: str | None = flag(SERVER_FLAGS["nvlink_gbps"], "--nvlink", type=number_text, default=None,
                                   aliases=("--nvlink_gbps",), group=NETWORK, help="NVLink bandwidth per GPU, GB/s")
    nic_gbps: str | None = flag(SERVER_FLAGS["nic_gbps"], "--nic_busbw", type=number_text, default=None,
                                aliases=("--nic_gbps",), group=NETWORK, help="bandwidth per NIC, GB/s")
    prefix: str = flag("-r", "--result", dest="prefix", help="output name prefix (SimAI's -r)")
    tp_overlap: str = _overlap("tp", "0")
    dp_overlap: str = _overlap("dp", "0")
    ep_overlap: str = _overlap("ep", "0")
    pp_overlap: str = _overlap("pp", "1")
    bucket_overlap: str = flag("--bucket-overlap", choices=BUCKET_OVERLAPS, default="none", when="changed",
                               help="a Megatron workload's overlapped buckets (megatron's --overlap-grad-reduce, "
                                    "and --overlap-param-gather for grads+params): the DP overlap ratio becomes "
                                    "what they hide (docs/simulate.md), in place of --dp_overlap")
    cp_exchange: str | None = flag("--cp-exchange", metavar="SPEC", type=cp_exchange_text, default=None,
                                   help="a Megatron workload's context-parallel exchange (KIND:cp=..,inner=..,"
                                        "outer=..,kv=..,q=..,tp=..[,selective], as a sweep plans it): its exposed "
                                        "part is added to each core attention row's compute and its collectives "
                                        "to the tables, group CP (SimAI's format has no CP group)")
    fsdp_gathers: str | None = flag("--fsdp-gathers", metavar="SPEC", type=fsdp_gathers_text, default=None,
                                    help="a Megatron workload's per-layer FSDP parameter all-gathers "
                                         "(megatron|torch:layer_bytes=N, as a sweep plans it): what megatron's "
                                         "prefetch leaves exposed is added to the rows they precede and the gathers "
                                         "to the tables, group DP (no SimAI column carries them)")
    simai_bugs: str = flag("--simai-bugs", choices=("fix", "reproduce", "error"), default="fix", when="always",
                           help="where SimAI prints nonsense: fix it and warn (default), reproduce SimAI's output, "
                                "or fail")
    backend: str = flag("--backend", choices=("builtin", "simai", "ns3", "astra-aware", "astra-unaware"),
                        default="builtin", when="always",
                        help="builtin: the closed-form engine; simai: run <simai-root>/bin/SimAI_analytical; "
                             "ns3: run SimAI's packet-level SimAI_simulator (--ns3-root); astra-aware, "
                             "astra-unaware: ASTRA-sim's analytical backends on the workload's Chakra traces "
                             "(--astra-root)")
    strict: bool = flag("--strict", action="store_true", default=False,
                        help="fail when -g is not the workload's all_gpus (default: warn; SimAI takes DP from -g)")
    simai_root: str | None = flag("--simai-root", default=None, help="a built SimAI checkout")
    ratio_dir: str | None = flag("--ratio-dir", metavar="DIR", default=None, group=NETWORK,
                                 help="SimAI's ratio tables ({nvlink,nic,ata}_ratio.csv); default: a SimAI root's "
                                      "(simulate --simai-root), else the engine's default (efficiency 1.0)")
    out_dir: str = flag("--out-dir", default=OUT_DIR, when="changed",
                        help="the folder of <PREFIX>EndToEnd.csv and <PREFIX>collectives.csv (default: the current "
                             "directory)")
    timeout: float | None = flag("--timeout", type=float, default=None,
                                 help="seconds before a SimAI run is stopped (simai and ns3 backends)")
    endtoend: str | None = flag("--endtoend", default=None, help="write the EndToEnd.csv here instead")
    collectives: str | None = flag("--collectives", default=None, help="write the per-collective table here instead")
    times: str | None = flag("--times", metavar="FILE", default=None,
                             help="also write the simulated times summed per phase, collective and group, and "
                                  "SimAI's summary line, here (what summarize reads)")

    def overlaps(self) -> dict[str, str]:
        """Every ratio, as its flag writes it."""
        return {name: getattr(self, f"{name}_overlap") for name, _ in OVERLAPS}

    def network(self) -> Network:
        """The simulation's network: its servers, -g and overlap ratios, as the flags give them."""
        return Network(gpus=self.gpus, gpus_per_server=self.gpus_per_server, nics_per_server=self.nics_per_server,
                       nvlink_gbps=self.nvlink_gbps, nic_gbps=self.nic_gbps, tp_overlap=self.tp_overlap,
                       dp_overlap=self.dp_overlap, ep_overlap=self.ep_overlap, pp_overlap=self.pp_overlap)


# The network's fields: SimAI's four flags and the ratio tables (``add_network_arguments``).
NETWORK_FIELDS = ("gpus_per_server", "nics_per_server", "nvlink_gbps", "nic_gbps", "ratio_dir")
# The flags the analytical backends need, by dest (their spelling in an error).
_NETWORK_FLAGS = (("-g_p_s/--gpus-per-server", "gpus_per_server"), ("-n_p_s/--nic_per_server", "nics_per_server"),
                  ("-nv/--nvlink", "nvlink_gbps"), ("-nic/--nic_busbw", "nic_gbps"))


class _Usage(argparse.HelpFormatter):
    """``simulate``'s usage line: the network flags shown as required (argparse brackets an
    option that is not ``required``, and they are not where ``--backend ns3`` runs), and a
    line saying when."""

    _OPTIONAL = re.compile(r"\[(-g_p_s|-n_p_s|-nv|-nic) ([A-Z_]+)\]")

    def _format_usage(self, usage, actions, groups, prefix) -> str:
        text = super()._format_usage(usage, actions, groups, prefix)
        return self._OPTIONAL.sub(r"\1 \2", text).rstrip("\n") + \
            "\n       (-g_p_s, -n_p_s, -nv and -nic: required unless --backend ns3)\n\n"


class SimulateStage(Stage[SimulateJob]):
    name = "simulate"
    command = "simulate"
    summary = "a point's iteration through SimAI's analytical model (engine or a user's SimAI)"
    job_type = SimulateJob
    per = "point"
    inputs = ("workload",)
    outputs = ("endtoend", "collectives", "times")
    kinds = ("endtoend", "collectives", "times")
    upstream = ("generate",)
    external = ("simulator.root", "simulator.ratio_dir")

    def applies(self, point, audited: bool) -> bool:
        return not point.packet

    def files(self, layout, key: str, config: Mapping) -> tuple[str, ...]:
        return layout.endtoend(key), layout.collectives(key), layout.times(key)

    def status(self, layout, key: str, config: Mapping) -> str:
        return layout.point_status("simulate", key)

    def job(self, point, config: Mapping, inputs: tuple, outputs: tuple) -> SimulateJob:
        """A point's simulation (``inputs``: its workload) as ``simulator:`` in the config asks,
        into its EndToEnd.csv, collectives and times (``outputs``); the sweep's tp_overlap axis
        first; a Megatron point prices what its workload cannot hold: its CP exchange
        (``cp_exchange_of``) and FSDP's per-layer gathers (``fsdp_gathers_of``)."""
        (workload,), (endtoend, collectives, times) = inputs, outputs
        sim = config["simulator"]
        net = point.net
        overlap = {f"{name}_overlap": str(value) for name, value in sim["overlap"].items()}
        if point.tp_overlap is not None:
            overlap["tp_overlap"] = str(point.tp_overlap)
        return SimulateJob(
            workload=workload, gpus=point.world_size, gpus_per_server=net.gpus_per_server,
            nics_per_server=net.nics_per_server, nvlink_gbps=str(net.nvlink_gbps), nic_gbps=str(net.nic_gbps),
            prefix=f"{point.point_key}-", **overlap, bucket_overlap=_bucket_overlap(point),
            cp_exchange=cp_exchange_of(point), fsdp_gathers=fsdp_gathers_of(point, config),
            simai_bugs=sim["simai_bugs"], backend=sim["backend"],
            strict=True, simai_root=sim["root"] or None, ratio_dir=ratio_dir(config), endtoend=endtoend,
            collectives=collectives, times=times)

    def from_args(self, ns: argparse.Namespace) -> SimulateJob:
        missing = [spelled for spelled, dest in _NETWORK_FLAGS if getattr(ns, dest) is None]
        if missing:
            # argparse's way (status 2): they are required unless --backend ns3
            print("commsweep simulate: error: the following arguments are required: " + ", ".join(missing),
                  file=sys.stderr)
            raise SystemExit(2)
        return from_namespace(SimulateJob, ns)

    def run(self, job: SimulateJob) -> None:
        from . import run as simulation

        simulation.run(job)

    def add_parser(self, sub) -> None:
        from .ns3.stage import PacketJob

        p = sub.add_parser(
            "simulate", allow_abbrev=False, formatter_class=_Usage,
            help="simulate a workload with SimAI's analytical model (built-in engine or a user's SimAI)",
            description="Simulate one iteration of a SimAI workload. Takes SimAI_analytical's flags; writes "
                        "<out-dir>/<PREFIX>EndToEnd.csv (SimAI's layout) and <out-dir>/<PREFIX>collectives.csv "
                        "(<out-dir>: the current directory unless --out-dir says another).",
        )
        add_arguments(p, SimulateJob)
        # The packet-level backend's own flags (the flags both take are SimulateJob's).
        add_arguments(p, PacketJob, skip=[f.name for f in SimulateJob.__dataclass_fields__.values()])
        from .astra.command import add_arguments as add_astra_arguments

        add_astra_arguments(p)
        p.set_defaults(func=cmd_simulate)

    def check_external(self, config: Mapping, points: Sequence) -> dict:
        from .astra.sweep import check_external as astra_external

        return {**check_external(config, points), **astra_external(config)}

    def reads(self, point, config: Mapping) -> tuple[str, ...]:
        return ("simulator.root", "simulator.ratio_dir")

    def input_files(self, config: Mapping, point) -> tuple[str, ...]:
        """Files from outside results/ a point's simulation reads: SimAI's ratio tables."""
        from .ratio import table_files

        ratios = ratio_dir(config)
        return tuple(table_files(ratios)) if ratios else ()

    def resources(self, config: Mapping, workload_mb: int) -> Resources:
        """A user's SimAI: 4 GB and ten minutes on a cluster; the engine: what its workload needs."""
        simai = config["simulator"]["backend"] == "simai"
        return Resources(memory_mb=max(4096 if simai else 0, workload_mb), runtime=10 if simai else 0.1)


SIMULATE = SimulateStage()


def cmd_simulate(ns: argparse.Namespace) -> None:
    if ns.backend.startswith("astra"):  # ASTRA-sim: Chakra traces through a user's binary
        from .astra.command import run_args

        run_args(ns)
        return
    if ns.backend == "ns3":  # the packet-level backend: a topology, not the analytical flags
        from .ns3.stage import PACKET

        PACKET.run(PACKET.from_args(ns))
        return
    SIMULATE.run(SIMULATE.from_args(ns))


def add_point_arguments(p, *, schedule: bool, network_title: str) -> None:
    """A point's arguments for a command that reads its workload (``audit``, ``timeline``):
    AICB's training arguments (and Megatron's schedule options), AIOB's switches, the
    pipeline stage, SimAI's -g and its network flags (all four or none)."""
    from ..setup.arguments import add_aiob_arguments, add_schedule_arguments, add_stage_argument, add_training_arguments
    from .run import add_gpus_argument

    add_training_arguments(p)
    if schedule:
        add_schedule_arguments(p)
    add_aiob_arguments(p)
    add_stage_argument(p)
    add_gpus_argument(p, required=False)
    add_network_arguments(p, title=network_title)


def add_network_arguments(parser, *, title: str) -> None:
    """SimAI_analytical's four network flags, and the ratio tables, for a command that takes
    them all four or none (``audit``, ``timeline``): ``simulate``'s own flags (``SimulateJob``'s
    fields), one definition for every command.

    Each keeps SimAI's spelling; the names ``audit`` once had (``--nvlink_gbps`` ...) parse
    as aliases. The bandwidths stay text, as typed: SimAI reads them with ``std::stof``, and
    so does the engine.
    """
    add_arguments(parser.add_argument_group(title), SimulateJob, only=NETWORK_FIELDS, grouped=False)


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


def _bucket_overlap(point) -> str:
    """What a sweep point's simulation hides of its buckets: a Megatron point's, as its setup
    overlaps them (AICB writes one DP row per iteration, simulated as SimAI's -dp_o says)."""
    s = point.setup
    if point.schedule != "megatron" or not s.overlap_grad_reduce:
        return "none"
    return "grads+params" if s.overlap_param_gather else "grads"


def cp_exchange_of(point) -> str | None:
    """A Megatron point's CP exchange as ``--cp-exchange`` writes it (None without CP, and for
    an AICB point, whose workload has none): the simulation prices what its workload cannot
    hold (``workload.megatron_context_parallel.in_rows``)."""
    if point.schedule != "megatron":
        return None
    from ..workload.megatron_context_parallel import exchange

    x = exchange(point.setup)
    return None if x is None else x.text()


def fsdp_gathers_of(point, config: Mapping) -> str | None:
    """A Megatron point's per-layer FSDP gathers as ``--fsdp-gathers`` writes it (None without
    sharded parameters), for the pipeline stage its workload is (``generator.megatron_pp_stage``)."""
    if point.schedule != "megatron" or point.setup.fsdp not in ("optim_grads_params", "torch_fsdp2"):
        return None
    from ..workload.generate import pipeline_stage
    from ..workload.megatron_fsdp import gathers

    g = gathers(point.setup, pipeline_stage(config["generator"]["megatron_pp_stage"], point.setup))
    return None if g is None else g.text()
