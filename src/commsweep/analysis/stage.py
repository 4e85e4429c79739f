"""The volumes and audit stages' contracts (``base.stage.Stage``): ``commsweep volumes``, a
workload's communication volumes, and ``commsweep audit``, a point's workload against the
collectives Megatron really issues."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..base.stage import Resources, Stage, nothing
from ..setup.training import TrainingSetup
from ..setup.arguments import as_commanded, to_commsweep_argv
from ..setup.network import Network
from ..simulate.stage import ratio_dir
from ..workload.stage import megatron_version


@dataclass(frozen=True)
class VolumesJob:
    """A workload's volumes: the file, the output format, SimAI's -g (None: the header's)."""

    workload: str
    output: str | None
    format: str = "table"
    gpus: int | None = None


def volumes_job(point, config: Mapping, inputs: tuple, outputs: tuple) -> VolumesJob:
    """A workload's volumes (``inputs``: the workload) as the sweep-wide steps read them: CSV."""
    (workload,), (output,) = inputs, outputs
    return VolumesJob(workload=workload, output=output, format="csv")


def volumes_argv(job: VolumesJob) -> list[str]:
    out = ["volumes", job.workload, "--format", job.format]
    if job.gpus is not None:
        out += ["-g", str(job.gpus)]
    return out + (["-o", job.output] if job.output is not None else [])


def volumes_from_args(ns: argparse.Namespace) -> VolumesJob:
    return VolumesJob(workload=ns.workload, output=ns.output, format=ns.format, gpus=ns.gpus)


def run_volumes(job: VolumesJob) -> None:
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


def cmd_volumes(ns: argparse.Namespace) -> None:
    run_volumes(volumes_from_args(ns))


def add_volumes_parser(sub) -> None:
    from ..simulate.run import add_gpus_argument

    p = sub.add_parser("volumes", help="communication volumes of a workload per phase, collective and group")
    p.add_argument("workload", help="a SimAI workload file, or a folder of Chakra traces (rank 0's volumes)")
    p.add_argument("--format", choices=("csv", "json", "table"), default="table")
    add_gpus_argument(p, required=False)
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.set_defaults(func=cmd_volumes)


VOLUMES = Stage(
    name="volumes", summary="a workload's communication volumes per phase, collective and group",
    per="workload", inputs=("workload",), outputs=("volumes",), kinds=("volumes",), upstream=("generate",),
    external=(), add_parser=add_volumes_parser, from_args=volumes_from_args, job=volumes_job, argv=volumes_argv,
    run=run_volumes, applies=lambda point, audited: True, files=lambda layout, key, config: (layout.volumes(key),),
    status=lambda layout, key, config: layout.workload_status("volumes", key), check_external=nothing,
    reads=nothing, resources=lambda config, workload_mb: Resources(memory_mb=workload_mb), input_files=nothing,
)


@dataclass(frozen=True)
class AuditJob:
    """A point's audit: its workload and setup, the pipeline stage and megatron-core release
    Megatron's schedule follows, its network for each finding's cost (None: no cost)."""

    workload: str
    setup: TrainingSetup
    output: str | None
    pp_stage: str | int = "first"
    megatron_version: str | None = None
    network: Network | None = None
    ratio_dir: str | None = None
    gpus: int | None = None
    format: str = "table"


def audit_job(point, config: Mapping, inputs: tuple, outputs: tuple) -> AuditJob:
    """A point's audit (``inputs``: its workload) against the release the sweep follows, costed
    on its network with the simulation's ratio tables."""
    (workload,), (output,) = inputs, outputs
    return AuditJob(workload=workload, setup=point.setup, output=output,
                    pp_stage=config["generator"]["megatron_pp_stage"], megatron_version=megatron_version(config),
                    network=point.net, ratio_dir=ratio_dir(config), format="csv")


def audit_argv(job: AuditJob) -> list[str]:
    out = ["audit", job.workload, *to_commsweep_argv(job.setup), "--pp-stage", job.pp_stage]
    if job.megatron_version is not None:
        out += ["--megatron-version", job.megatron_version]
    if job.gpus is not None:
        out += ["-g", str(job.gpus)]
    if job.network is not None:
        out += job.network.server_flags()
    if job.ratio_dir is not None:
        out += ["--ratio-dir", job.ratio_dir]
    out += ["--format", job.format]
    return out + (["-o", job.output] if job.output is not None else [])


def audit_from_args(ns: argparse.Namespace) -> AuditJob:
    from ..setup.arguments import setup_from_args
    from ..simulate.stage import network_from_args

    return AuditJob(workload=ns.workload, setup=setup_from_args(ns), output=ns.output, pp_stage=ns.pp_stage,
                    megatron_version=ns.megatron_version, network=network_from_args(ns), ratio_dir=ns.ratio_dir,
                    gpus=ns.gpus,
                    format=ns.format)


def run_audit(job: AuditJob) -> None:
    from ..base.files import emit
    from ..workload import format as wformat
    from ..workload.generate import pipeline_stage
    from . import audit, causes

    setup = as_commanded(job.setup)
    time_us = None
    if job.network is not None:
        from ..simulate.engine import load_ratios
        from ..simulate.stage import as_commanded as network_as_commanded

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
        workload, setup, stage=pipeline_stage(job.pp_stage, setup.pp), gpus=job.gpus,
        time_us=time_us, source=job.workload, megatron_version=job.megatron_version,
    )
    text = audit.to_csv(findings) if job.format == "csv" else audit.to_table(findings, causes.cause_families(findings))
    emit(text, job.output)


def cmd_audit(ns: argparse.Namespace) -> None:
    run_audit(audit_from_args(ns))


def add_audit_parser(sub) -> None:
    from ..simulate.stage import add_point_arguments

    p = sub.add_parser(
        "audit", allow_abbrev=False,
        help="compare every row of a workload with the collectives Megatron really issues",
        description="Align a workload with the Megatron schedule of the same setup (AICB's arguments) and "
                    "list every missing, extra, mis-sized or misplaced collective with its cost.",
    )
    p.add_argument("workload", help="a SimAI workload file")
    add_point_arguments(p, schedule=True, network_title="network, for delta_us (SimAI's flags, all four or none; "
                                                        "without them delta_us is empty)")
    p.add_argument("--format", choices=("csv", "table"), default="table")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.set_defaults(func=cmd_audit)


AUDIT = Stage(
    name="audit", summary="a point's workload against the collectives Megatron really issues, each with its cost",
    per="point", inputs=("workload",), outputs=("audit",), kinds=("audits",), upstream=("generate",),
    external=("simulator.ratio_dir",), add_parser=add_audit_parser, from_args=audit_from_args, job=audit_job,
    argv=audit_argv, run=run_audit, applies=lambda point, audited: audited,
    files=lambda layout, key, config: (layout.audit(key),),
    status=lambda layout, key, config: layout.point_status("audit", key), check_external=nothing,
    reads=lambda point, config: ("simulator.ratio_dir",),
    resources=lambda config, workload_mb: Resources(memory_mb=workload_mb), input_files=nothing,
)
