"""The generate stage's contract (``base.stage.Stage``): ``commsweep generate``, one SimAI
workload per setup, schedule and AIOB choice (a point's ``workload_key``)."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..base.stage import Resources, Stage, nothing
from ..setup.arguments import as_commanded, to_commsweep_argv
from ..setup.training import TrainingSetup

# Files of an AICB checkout that can change what it writes (its Python sources).
AICB_SOURCES = "*.py"


@dataclass(frozen=True)
class GenerateJob:
    """One workload: the setup, its schedule and what that schedule takes, the AIOB profile
    it reads (None: AICB's default compute times) and the file it writes (None: stdout)."""

    setup: TrainingSetup
    schedule: str
    output: str | None
    profile: str | None = None
    pp_stage: str | int = "first"
    megatron_version: str | None = None
    aicb_root: str | None = None
    aicb_python: str | None = None
    # AICB's arguments its asserts read beyond the setup: --dtype, --moe_grouped_gemm, a dense
    # model's --num_experts, and --moe_enable as the command line says it (a DeepSeek model has
    # MoE layers with or without it).
    dtype: str | None = None
    moe_grouped_gemm: bool = False
    num_experts: int | None = None
    moe_enable: bool = False
    # What the command line gave that the schedule ignores, said on stderr.
    notes: tuple[str, ...] = ()


def megatron_version(config: Mapping) -> str:
    """``generator.megatron_version``: the megatron-core release the megatron schedule and
    the audit follow (default the newest traced; a ConfigError naming the key for another)."""
    return _release((config.get("generator") or {}).get("megatron_version"))


@functools.lru_cache(maxsize=None)
def _release(given: str | None) -> str:
    """A sweep plans thousands of tasks on one release: looked up once."""
    from . import megatron_releases

    return megatron_releases.release(given, key="generator.megatron_version").version


def job(point, config: Mapping, inputs: tuple, outputs: tuple) -> GenerateJob:
    """A point's workload: its setup and schedule, ``generator:``'s options, its profile
    (``inputs``: the AIOB file, or None without AIOB) and the file (``outputs``)."""
    (profile,), (output,) = inputs, outputs
    megatron = point.schedule == "megatron"
    aicb_root = config["generator"].get("aicb_root") if point.schedule == "aicb" else None
    m = point.setup.model
    return GenerateJob(
        setup=point.setup, schedule=point.schedule, output=output, profile=profile,
        pp_stage=config["generator"]["megatron_pp_stage"] if megatron else "first",
        megatron_version=megatron_version(config) if megatron else None, aicb_root=aicb_root or None,
        num_experts=m.num_experts if m.is_moe else None, moe_enable=m.is_moe)


def argv(job: GenerateJob) -> list[str]:
    out = ["generate", *to_commsweep_argv(job.setup), "--schedule", job.schedule]
    if job.schedule == "megatron" or job.pp_stage != "first" or job.megatron_version is not None:
        out += ["--pp-stage", job.pp_stage]
        if job.megatron_version is not None:
            out += ["--megatron-version", job.megatron_version]
    if job.aicb_root is not None:
        # The user's AICB writes the file instead of the emulation (aicb_runner.py).
        out += ["--aicb-root", job.aicb_root]
    if job.aicb_python is not None:
        out += ["--aicb-python", job.aicb_python]
    if job.dtype is not None:
        out.append(f"--dtype={job.dtype}")
    if job.moe_grouped_gemm:
        out.append("--moe_grouped_gemm")
    if job.num_experts is not None and not job.setup.model.is_moe:
        out.append(f"--num_experts={job.num_experts}")
    if job.profile is not None:
        out += ["--aiob_enable", f"--comp_filepath={job.profile}"]
    return out + (["-o", job.output] if job.output is not None else [])


def from_args(ns: argparse.Namespace) -> GenerateJob:
    """The job of ``commsweep generate``'s arguments. Arguments AICB accepts but ignores
    (``--comp_filepath`` without ``--aiob_enable``, ``--context-parallel-size``) are ignored
    the same way under the aicb schedule, with a note."""
    from ..base.errors import CommsweepError, ConfigError
    from ..setup.arguments import setup_from_args

    notes: list[str] = []
    aicb = ns.schedule == "aicb"
    if aicb and ns.context_parallel_size != 1:
        notes.append("AICB ignores --context-parallel-size in its Megatron workloads; so does the aicb schedule")
        ns.context_parallel_size = 1
    elif ns.context_parallel_size != 1:
        from .megatron_context_parallel import NOTE

        notes.append(NOTE)
    if aicb and str(ns.pp_stage) != "first":
        notes.append("--pp-stage is for the megatron schedule; AICB writes the same file for every stage")
    if aicb and ns.megatron_version is not None:
        notes.append("--megatron-version is for the megatron schedule; the aicb schedule writes what AICB writes")
    if getattr(ns, "aicb_python", None) and getattr(ns, "aicb_root", None) is None:
        notes.append("--aicb-python is only used with --aicb-root")
    setup = setup_from_args(ns)
    profile = None
    if ns.aiob_enable:
        if ns.comp_filepath is None:
            raise CommsweepError(
                "--aiob_enable needs --comp_filepath: AICB would profile on a GPU here; "
                "make a profile with 'commsweep profile' or pass AICB's output file"
            )
        profile = ns.comp_filepath
    elif ns.comp_filepath is not None:
        notes.append("--comp_filepath is ignored without --aiob_enable (as AICB ignores it)")
    aicb_root = getattr(ns, "aicb_root", None)
    if aicb_root is not None and not aicb:
        raise ConfigError("runs AICB itself, so it needs --schedule aicb", key="--aicb-root")
    return GenerateJob(
        setup=setup, schedule=ns.schedule, output=getattr(ns, "output", None), profile=profile,
        pp_stage=ns.pp_stage, megatron_version=ns.megatron_version, aicb_root=aicb_root,
        aicb_python=getattr(ns, "aicb_python", None), dtype=ns.dtype, moe_grouped_gemm=bool(ns.moe_grouped_gemm),
        num_experts=ns.num_experts, moe_enable=bool(ns.moe_enable) or (ns.model is not None and setup.model.is_moe),
        notes=tuple(notes))


def workload_text(job: GenerateJob) -> str:
    """The workload file of a job: the emulation of its schedule, or the user's AICB."""
    from .generate import build

    setup = as_commanded(job.setup)
    if job.aicb_root is not None:
        from . import aicb_runner

        # The arguments AICB's asserts read beyond the setup travel along.
        extra = [f"--dtype={job.dtype}"] if job.dtype else []
        extra += ["--moe_grouped_gemm"] if job.moe_grouped_gemm else []
        if not setup.model.is_moe and job.num_experts is not None:
            extra.append(f"--num_experts={job.num_experts}")
        omit = ("--moe_enable",) if setup.model.is_mla and not job.moe_enable else ()
        return aicb_runner.run(job.aicb_root, setup, profile_path=job.profile, python=job.aicb_python,
                               extra_argv=extra, omit=omit)
    checks = None
    if job.schedule == "aicb":
        checks = {
            # AICB checks --num_experts against EP even for a dense model (default 1).
            "num_experts": None if setup.model.is_moe else job.num_experts,
            "dtype": job.dtype or "bfloat16",
            "moe_grouped_gemm": job.moe_grouped_gemm,
        }
        if setup.model.is_mla:
            checks["moe_enable"] = job.moe_enable
    workload = build(setup, job.schedule, profile_path=job.profile, pp_stage=job.pp_stage, aicb_checks=checks,
                     megatron_version=job.megatron_version)
    return workload.render()


def from_arguments(ns: argparse.Namespace) -> tuple[str, list[str]]:
    """``commsweep generate``'s parsed arguments: the workload text and the notes."""
    job = from_args(ns)
    return workload_text(job), list(job.notes)


def run(job: GenerateJob) -> None:
    from ..base.files import emit

    text = workload_text(job)
    for note in job.notes:
        print(f"commsweep generate: note: {note}", file=sys.stderr)
    emit(text, job.output)


def cmd_generate(ns: argparse.Namespace) -> None:
    run(from_args(ns))


def add_parser(sub) -> None:
    from ..setup.arguments import add_aiob_arguments, add_schedule_arguments, add_stage_argument, add_training_arguments

    p = sub.add_parser(
        "generate", allow_abbrev=False,
        help="write the SimAI workload of one setup (AICB's arguments)",
        description="Write a SimAI workload file. Takes AICB's own arguments, so an AICB command line works unchanged.",
    )
    add_training_arguments(p)
    add_schedule_arguments(p)
    add_aiob_arguments(p)
    p.add_argument("--schedule", choices=("aicb", "megatron"), default="aicb",
                   help="aicb: what AICB writes (default path, or AIOB path with --aiob_enable); "
                        "megatron: what Megatron-LM really communicates")
    add_stage_argument(p)
    p.add_argument("--aicb-root", metavar="PATH",
                   help="aicb schedule: run the AICB checkout at PATH instead of the emulation")
    p.add_argument("--aicb-python", metavar="PYTHON",
                   help="the Python that runs AICB (needs numpy and pandas; default: this one)")
    p.add_argument("-o", "--output", help="output file (default: stdout)")
    p.set_defaults(func=cmd_generate)


def check_external(config: Mapping, points: Sequence) -> dict:
    """``generator.aicb_root`` when an aicb point runs it: an AICB checkout, its sources checksummed."""
    from ..base.errors import ConfigError
    from ..base.external import External, files_digest, missing, source_files
    from .aicb_runner import _SCRIPT

    generator = config.get("generator") or {}
    if not (generator.get("aicb_root") and any(p.schedule == "aicb" for p in points)):
        return {}
    root = Path(generator["aicb_root"]).expanduser()
    if not root.is_dir():
        raise missing("generator.aicb_root", root, "AICB checkout")
    if not (root / _SCRIPT).is_file():
        raise ConfigError(f"{root} is not an AICB checkout (no {_SCRIPT})", key="generator.aicb_root")
    digest = files_digest(root, source_files(root, AICB_SOURCES))
    return {"generator.aicb_root": External("generator.aicb_root", str(root), digest, f"its {AICB_SOURCES} files")}


GENERATE = Stage(
    name="generate", summary="the SimAI workload of a setup, schedule and AIOB choice",
    per="workload", inputs=("profile",), outputs=("workload",), kinds=("workloads",), upstream=("profile",),
    external=("generator.aicb_root",), add_parser=add_parser, from_args=from_args, job=job, argv=argv, run=run,
    applies=lambda point, audited: True, files=lambda layout, key, config: (layout.workload(key),),
    status=lambda layout, key, config: layout.workload_status("workload", key), check_external=check_external,
    reads=lambda point, config: ("generator.aicb_root",) if point.schedule == "aicb" else (),
    resources=lambda config, workload_mb: Resources(memory_mb=workload_mb), input_files=nothing,
)
