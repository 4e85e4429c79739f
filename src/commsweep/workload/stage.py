"""The generate stage (``base.stage.Stage``): ``commsweep generate``, one SimAI workload per
setup, schedule and AIOB choice (a point's ``workload_key``). ``GenerateJob``'s fields are the
command's flags (``base.jobfields``)."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..base.jobfields import add_arguments, block, flag, from_namespace
from ..base.stage import Stage
from ..setup.arguments import (add_aiob_arguments, add_schedule_arguments, add_stage_argument, add_training_arguments,
                               as_commanded, setup_from_args, to_commsweep_argv)
from ..setup.training import TrainingSetup

# Files of an AICB checkout that can change what it writes (its Python sources).
AICB_SOURCES = "*.py"


def _add_setup(parser) -> None:
    """AICB's training arguments, Megatron's schedule options and AIOB's switches."""
    add_training_arguments(parser)
    add_schedule_arguments(parser)
    add_aiob_arguments(parser)


def _pp_stage_written(job) -> bool:
    return job.schedule == "megatron" or job.pp_stage != "first" or job.megatron_version is not None


@dataclass(frozen=True, kw_only=True)
class GenerateJob:
    """One workload, as ``commsweep generate``'s flags (in the order its command line writes
    them): the setup, its schedule and what that schedule takes, the AIOB profile it reads
    (None: AICB's default compute times) and the file it writes (None: stdout)."""

    command: ClassVar[str] = "generate"

    setup: TrainingSetup = block(add=_add_setup, write=to_commsweep_argv, read=setup_from_args)
    schedule: str = flag("--schedule", choices=("aicb", "megatron"), default="aicb", when="always",
                         help="aicb: what AICB writes (default path, or AIOB path with --aiob_enable); "
                              "megatron: what Megatron-LM really communicates")
    pp_stage: str | int = flag("--pp-stage", default="first", add=add_stage_argument, when=_pp_stage_written)
    megatron_version: str | None = flag("--megatron-version", default=None, added=False)
    # The user's AICB writes the file instead of the emulation (aicb_runner.py).
    aicb_root: str | None = flag("--aicb-root", metavar="PATH", default=None,
                                 help="aicb schedule: run the AICB checkout at PATH instead of the emulation")
    aicb_python: str | None = flag("--aicb-python", metavar="PYTHON", default=None,
                                   help="the Python that runs AICB (needs numpy and pandas; default: this one)")
    # AICB's arguments its asserts read beyond the setup: --dtype, --moe_grouped_gemm, a dense
    # model's --num_experts, and --moe_enable as the command line says it (a DeepSeek model has
    # MoE layers with or without it).
    dtype: str | None = flag("--dtype", default=None, equals=True, added=False)
    moe_grouped_gemm: bool = flag("--moe_grouped_gemm", action="store_true", default=False, added=False,
                                  read=lambda ns: bool(ns.moe_grouped_gemm))
    num_experts: int | None = flag("--num_experts", default=None, equals=True, added=False,
                                   when=lambda job: job.num_experts is not None and not job.setup.model.is_moe)
    moe_enable: bool = flag("--moe_enable", default=False, added=False, when=lambda job: False)
    profile: str | None = flag("--comp_filepath", default=None, added=False,
                               write=lambda path: ["--aiob_enable", f"--comp_filepath={path}"])
    output: str | None = flag("-o", "--output", default=None, help="output file (default: stdout)")
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
    job = GENERATE.from_args(ns)
    return workload_text(job), list(job.notes)


def _notes_and_checks(ns: argparse.Namespace) -> list[str]:
    """What ``generate``'s arguments give that the schedule ignores (AICB ignores
    ``--context-parallel-size`` in its Megatron workloads: so does the aicb schedule, which
    sets it to 1), and a ConfigError for ``--aicb-root`` without the aicb schedule."""
    from ..base.errors import ConfigError

    notes: list[str] = []
    aicb = ns.schedule == "aicb"
    if aicb and ns.context_parallel_size != 1:
        notes.append("AICB ignores --context-parallel-size in its Megatron workloads; so does the aicb schedule")
        ns.context_parallel_size = 1
    elif ns.context_parallel_size != 1:
        from .megatron_context_parallel import NOTE

        notes.append(NOTE)
    fsdp_flags = [flag for flag, on in (("--use-megatron-fsdp", getattr(ns, "use_megatron_fsdp", False)),
                                        ("--use-torch-fsdp2", getattr(ns, "use_torch_fsdp2", False)),
                                        ("--fp8-param-gather", getattr(ns, "fp8_param_gather", False))) if on]
    if aicb and fsdp_flags:
        notes.append(f"AICB has no {' or '.join(fsdp_flags)}; the aicb schedule writes the distributed "
                     "optimizer's workload in bf16, as AICB does")
        ns.use_megatron_fsdp = ns.use_torch_fsdp2 = ns.fp8_param_gather = False
    elif getattr(ns, "use_megatron_fsdp", False) or getattr(ns, "use_torch_fsdp2", False):
        from .megatron_fsdp import NOTE as FSDP_NOTE

        if ns.use_torch_fsdp2 or ns.data_parallel_sharding_strategy == "optim_grads_params":
            notes.append(FSDP_NOTE)
    if (getattr(ns, "data_parallel_sharding_strategy", "no_shard") != "no_shard"
            and not getattr(ns, "use_megatron_fsdp", False) and not aicb):
        notes.append("--data-parallel-sharding-strategy is for --use-megatron-fsdp (megatron ignores it without)")
    if aicb and str(ns.pp_stage) != "first":
        notes.append("--pp-stage is for the megatron schedule; AICB writes the same file for every stage")
    if aicb and ns.megatron_version is not None:
        notes.append("--megatron-version is for the megatron schedule; the aicb schedule writes what AICB writes")
    if getattr(ns, "aicb_python", None) and getattr(ns, "aicb_root", None) is None:
        notes.append("--aicb-python is only used with --aicb-root")
    if getattr(ns, "aicb_root", None) is not None and not aicb:
        raise ConfigError("runs AICB itself, so it needs --schedule aicb", key="--aicb-root")
    return notes


def _megatron_notes(setup: TrainingSetup) -> tuple[str, ...]:
    """The notes a megatron point's command prints: what its file cannot hold (CP's exchange,
    FSDP's per-layer gathers), in the order ``_notes_and_checks`` gives them."""
    from .megatron_context_parallel import NOTE
    from .megatron_fsdp import NOTE as FSDP_NOTE

    notes = (NOTE,) if setup.cp > 1 else ()
    return notes + ((FSDP_NOTE,) if setup.fsdp in ("optim_grads_params", "torch_fsdp2") else ())


class GenerateStage(Stage[GenerateJob]):
    name = "generate"
    command = "generate"
    summary = "the SimAI workload of a setup, schedule and AIOB choice"
    job_type = GenerateJob
    per = "workload"
    inputs = ("profile",)
    outputs = ("workload",)
    kinds = ("workloads",)
    upstream = ("profile",)
    external = ("generator.aicb_root",)

    def files(self, layout, key: str, config: Mapping) -> tuple[str, ...]:
        return (layout.workload(key),)

    def status(self, layout, key: str, config: Mapping) -> str:
        return layout.workload_status("workload", key)

    def job(self, point, config: Mapping, inputs: tuple, outputs: tuple) -> GenerateJob:
        """A point's workload: its setup and schedule, ``generator:``'s options, its profile
        (``inputs``: the AIOB file, or None without AIOB) and the file (``outputs``). An aicb
        point's setup is the one AICB sees, without CP (``generate.ignoring_cp``): its command
        line is AICB's, whose ``--context-parallel-size`` AICB would ignore. A megatron point
        with CP gets the note its command prints (what its file cannot hold)."""
        from .generate import ignoring_cp, not_interleaved, sweep_pp_stage

        (profile,), (output,) = inputs, outputs
        megatron = point.schedule == "megatron"
        aicb_root = config["generator"].get("aicb_root") if point.schedule == "aicb" else None
        m = point.setup.model
        return GenerateJob(
            setup=point.setup if megatron else not_interleaved(ignoring_cp(point.setup)), schedule=point.schedule, output=output, profile=profile,
            pp_stage=sweep_pp_stage(config["generator"]["megatron_pp_stage"], point.setup) if megatron else "first",
            megatron_version=megatron_version(config) if megatron else None, aicb_root=aicb_root or None,
            num_experts=m.num_experts if m.is_moe else None, moe_enable=m.is_moe,
            notes=_megatron_notes(point.setup) if megatron else ())

    def from_args(self, ns: argparse.Namespace) -> GenerateJob:
        """The job of ``commsweep generate``'s arguments. Arguments AICB accepts but ignores
        (``--comp_filepath`` without ``--aiob_enable``, ``--context-parallel-size``) are ignored
        the same way under the aicb schedule, with a note."""
        from ..base.errors import CommsweepError

        notes = _notes_and_checks(ns)
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
        return from_namespace(
            GenerateJob, ns, setup=setup, profile=profile, output=getattr(ns, "output", None),
            aicb_root=getattr(ns, "aicb_root", None), aicb_python=getattr(ns, "aicb_python", None),
            moe_enable=bool(ns.moe_enable) or (ns.model is not None and setup.model.is_moe), notes=tuple(notes))

    def run(self, job: GenerateJob) -> None:
        from ..base.files import emit

        text = workload_text(job)
        for note in job.notes:
            print(f"commsweep generate: note: {note}", file=sys.stderr)
        emit(text, job.output)

    def add_parser(self, sub) -> None:
        p = sub.add_parser(
            "generate", allow_abbrev=False,
            help="write the SimAI workload of one setup (AICB's arguments)",
            description="Write a SimAI workload file. Takes AICB's own arguments, so an AICB command line works "
                        "unchanged.",
        )
        add_arguments(p, GenerateJob)
        p.set_defaults(func=cmd_generate)

    def check_external(self, config: Mapping, points: Sequence) -> dict:
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
        return {"generator.aicb_root": External("generator.aicb_root", str(root), digest,
                                                f"its {AICB_SOURCES} files")}

    def reads(self, point, config: Mapping) -> tuple[str, ...]:
        return ("generator.aicb_root",) if point.schedule == "aicb" else ()


GENERATE = GenerateStage()


def cmd_generate(ns: argparse.Namespace) -> None:
    GENERATE.run(GENERATE.from_args(ns))
