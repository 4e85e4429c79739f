"""The volumes and audit stages (``base.stage.Stage``): ``commsweep volumes``, a workload's
communication volumes, and ``commsweep audit``, a point's workload against the collectives
Megatron really issues. Each job's fields are its command's flags (``base.jobfields``)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..base.jobfields import add_arguments, block, flag
from ..base.stage import Stage
from ..setup.arguments import as_commanded, setup_from_args, to_commsweep_argv
from ..setup.network import GPUS_FLAG, Network
from ..setup.training import TrainingSetup
from ..simulate.stage import add_point_arguments, network_from_args, ratio_dir
from ..simulate.stage import as_commanded as network_as_commanded
from ..workload.stage import megatron_version


def _add_gpus(parser) -> None:
    from ..simulate.run import add_gpus_argument

    add_gpus_argument(parser, required=False)


@dataclass(frozen=True, kw_only=True)
class VolumesJob:
    """A workload's volumes, as ``commsweep volumes``'s flags: the file, the output format,
    SimAI's -g (None: the header's) and the output (None: stdout)."""

    command: ClassVar[str] = "volumes"

    workload: str = flag(help="a SimAI workload file, or a folder of Chakra traces (rank 0's volumes)")
    format: str = flag("--format", choices=("csv", "json", "table"), default="table", when="always")
    gpus: int | None = flag(GPUS_FLAG, default=None, add=_add_gpus)
    output: str | None = flag("-o", "--output", default=None, help="output file (default: stdout)")


class VolumesStage(Stage[VolumesJob]):
    name = "volumes"
    command = "volumes"
    summary = "a workload's communication volumes per phase, collective and group"
    job_type = VolumesJob
    per = "workload"
    inputs = ("workload",)
    outputs = ("volumes",)
    kinds = ("volumes",)
    upstream = ("generate",)

    def files(self, layout, key: str, config: Mapping) -> tuple[str, ...]:
        return (layout.volumes(key),)

    def status(self, layout, key: str, config: Mapping) -> str:
        return layout.workload_status("volumes", key)

    def job(self, point, config: Mapping, inputs: tuple, outputs: tuple) -> VolumesJob:
        """A workload's volumes (``inputs``: the workload) as the sweep-wide steps read them: CSV."""
        (workload,), (output,) = inputs, outputs
        return VolumesJob(workload=workload, output=output, format="csv")

    def run(self, job: VolumesJob) -> None:
        from ..base.files import emit
        from ..workload import format as wformat
        from . import volumes

        if Path(job.workload).is_dir():  # a folder of Chakra traces: one rank's volumes
            from .chakra_volumes import read_trace_set

            table = read_trace_set(job.workload)
        else:
            table = volumes.tally(wformat.read(job.workload), gpus=job.gpus)
        render = {"csv": volumes.to_csv, "json": volumes.to_json, "table": volumes.to_table}[job.format]
        emit(render(table), job.output)

    def add_parser(self, sub) -> None:
        p = sub.add_parser("volumes", help="communication volumes of a workload per phase, collective and group")
        add_arguments(p, VolumesJob)
        p.set_defaults(func=cmd_volumes)


VOLUMES = VolumesStage()


def cmd_volumes(ns: argparse.Namespace) -> None:
    VOLUMES.run(VOLUMES.from_args(ns))


def _add_point(parser) -> None:
    add_point_arguments(parser, schedule=True, network_title="network, for delta_us (SimAI's flags, all four or "
                                                             "none; without them delta_us is empty)")


@dataclass(frozen=True, kw_only=True)
class AuditJob:
    """A point's audit, as ``commsweep audit``'s flags: its workload and setup, the pipeline
    stage and megatron-core release Megatron's schedule follows, its network for each finding's
    cost (None: no cost), the output's format and file."""

    command: ClassVar[str] = "audit"

    workload: str = flag(help="a SimAI workload file")
    setup: TrainingSetup = block(add=_add_point, write=to_commsweep_argv, read=setup_from_args)
    # The flags below but --format and -o come with the setup's (``add_point_arguments``).
    pp_stage: str | int = flag("--pp-stage", default="first", when="always", added=False)
    megatron_version: str | None = flag("--megatron-version", default=None, added=False)
    gpus: int | None = flag(GPUS_FLAG, default=None, added=False)
    network: Network | None = flag(default=None, added=False, write=Network.server_flags, read=network_from_args)
    ratio_dir: str | None = flag("--ratio-dir", default=None, added=False)
    format: str = flag("--format", choices=("csv", "table"), default="table", when="always")
    output: str | None = flag("-o", "--output", default=None, help="output file (default: stdout)")


class AuditStage(Stage[AuditJob]):
    name = "audit"
    command = "audit"
    summary = "a point's workload against the collectives Megatron really issues, each with its cost"
    job_type = AuditJob
    per = "point"
    inputs = ("workload",)
    outputs = ("audit",)
    kinds = ("audits",)
    upstream = ("generate",)
    external = ("simulator.ratio_dir",)

    def applies(self, point, audited: bool) -> bool:
        return audited

    def files(self, layout, key: str, config: Mapping) -> tuple[str, ...]:
        return (layout.audit(key),)

    def status(self, layout, key: str, config: Mapping) -> str:
        return layout.point_status("audit", key)

    def reads(self, point, config: Mapping) -> tuple[str, ...]:
        return ("simulator.ratio_dir",)

    def job(self, point, config: Mapping, inputs: tuple, outputs: tuple) -> AuditJob:
        """A point's audit (``inputs``: its workload) against the release the sweep follows, costed
        on its network with the simulation's ratio tables (``run`` takes the network as its flags
        give it: ``as_commanded``)."""
        from ..workload.generate import sweep_pp_stage

        (workload,), (output,) = inputs, outputs
        return AuditJob(workload=workload, setup=point.setup, output=output,
                        pp_stage=sweep_pp_stage(config["generator"]["megatron_pp_stage"], point.setup),
                        megatron_version=megatron_version(config),
                        network=point.net, ratio_dir=ratio_dir(config), format="csv")

    def run(self, job: AuditJob) -> None:
        from ..base.files import emit
        from ..workload import format as wformat
        from ..workload.generate import pipeline_stage
        from . import audit, causes

        setup = as_commanded(job.setup)
        time_us = None
        if job.network is not None:
            from ..simulate.engine import load_ratios

            net = network_as_commanded(job.network)
            time_us = audit.collective_time(gpus_per_server=net.gpus_per_server, nics_per_server=net.nics_per_server,
                                            nvlink_gbps=net.nvlink_gbps, nic_gbps=net.nic_gbps, gpus=job.gpus,
                                            ratios=load_ratios(job.ratio_dir))
        if Path(job.workload).is_dir():  # a folder of Chakra traces commsweep exported: its workload told back
            from ..workload.chakra import as_workload

            workload = as_workload(job.workload)
        else:
            workload = wformat.read(job.workload)
        findings = audit.audit(
            workload, setup, stage=pipeline_stage(job.pp_stage, setup), gpus=job.gpus,
            time_us=time_us, source=job.workload, megatron_version=job.megatron_version,
        )
        text = audit.to_csv(findings) if job.format == "csv" else audit.to_table(findings,
                                                                                  causes.cause_families(findings))
        if job.format == "table" and setup.cp > 1:  # what no workload file holds: the CP group's volumes
            from . import volumes

            cp = volumes.context_parallel(setup, pipeline_stage(job.pp_stage, setup), job.megatron_version)
            text += "\nthe context-parallel exchange Megatron sends per iteration (in no workload file):\n"
            text += volumes.to_table(cp)
        if job.format == "table" and setup.fsdp in ("optim_grads_params", "torch_fsdp2"):
            from . import volumes

            gathers = volumes.fsdp_gathers(setup, pipeline_stage(job.pp_stage, setup), job.megatron_version)
            text += "\nFSDP's per-layer parameter all-gathers Megatron issues per iteration (in no workload file):\n"
            text += volumes.to_table(gathers)
        emit(text, job.output)

    def add_parser(self, sub) -> None:
        p = sub.add_parser(
            "audit", allow_abbrev=False,
            help="compare every row of a workload with the collectives Megatron really issues",
            description="Align a workload with the Megatron schedule of the same setup (AICB's arguments) and "
                        "list every missing, extra, mis-sized or misplaced collective with its cost.",
        )
        add_arguments(p, AuditJob)
        p.set_defaults(func=cmd_audit)


AUDIT = AuditStage()


def cmd_audit(ns: argparse.Namespace) -> None:
    AUDIT.run(AUDIT.from_args(ns))
