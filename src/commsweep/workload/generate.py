"""Make the workload of one setup with the chosen schedule and write it atomically."""

from __future__ import annotations

from pathlib import Path

from ..aiob import profile_file
from ..base.errors import ConfigError
from ..setup.training import TrainingSetup
from . import format as wformat

SCHEDULES = ("aicb", "megatron")


def pipeline_stage(value: str | int, pp: int) -> int:
    """A stage index from ``first``, ``last`` or a number."""
    named = {"first": 0, "last": pp - 1}
    if isinstance(value, str) and value in named:
        return named[value]
    try:
        stage = int(value)
    except (TypeError, ValueError):
        stage = -1
    if not 0 <= stage < pp:
        raise ConfigError(f"must be first, last or 0..{pp - 1}, got {value!r}", key="--pp-stage")
    return stage


def schedule_problems(setup: TrainingSetup, schedule: str, megatron_version: str | None = None, *,
                      aiob: bool = False) -> list[str]:
    """Why a schedule cannot generate this setup's workload (empty when it can); the
    megatron schedule that of megatron-core ``megatron_version`` (default: the newest traced),
    the aicb schedule on AICB's AIOB path when ``aiob`` (its DeepSeek frame's crashes depend on it)."""
    if schedule == "megatron":
        from . import megatron

        return megatron.unsupported(setup, megatron_version)
    if schedule == "aicb":
        from .aicb_deepseek import frame_module

        return frame_module(setup).unsupported(setup, aiob=aiob)
    return [f"unknown schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}"]


def build(
    setup: TrainingSetup,
    schedule: str,
    *,
    profile_path: str | Path | None = None,
    pp_stage: str | int = "first",
    aicb_checks: dict | None = None,
    megatron_version: str | None = None,
) -> wformat.Workload:
    """The workload of ``setup`` under ``schedule`` ("aicb" or "megatron").

    ``megatron_version``: the megatron-core release the megatron schedule follows (default:
    the newest traced; ``megatron_releases``).

    ``profile_path`` is an AIOB file: AICB's ``--comp_filepath`` (the aicb schedule then
    follows AICB's AIOB path), or the compute times of the megatron schedule.

    The aicb schedule accepts what AICB accepts (its own asserts, its floor divisions of the
    batch and the layers), not Megatron's stricter rules; ``aicb_checks`` carries the AICB
    arguments those asserts read beyond the setup (see ``aicb.problems``). Sweeps stay
    strict: ``sweep.expand`` applies Megatron's rules to every point first.
    """
    aiob = profile_path is not None
    if schedule == "aicb":
        from . import aicb
        from .aicb_deepseek import frame_module

        frame = frame_module(setup)
        problems = frame.problems(setup, aiob=aiob, **(aicb_checks or {})) + aicb.megatron_only(setup)
    else:
        problems = setup.problems() + schedule_problems(setup, schedule, megatron_version)
    if problems:
        raise ConfigError("; ".join(problems), key="arguments")
    profile = profile_file.read(profile_path) if profile_path is not None else None
    if schedule == "megatron":
        from . import megatron

        workload = megatron.schedule(setup, profile, stage=pipeline_stage(pp_stage, setup.pp),
                                     megatron_version=megatron_version).workload()
    elif schedule == "aicb":
        from .aicb_deepseek import frame_module

        workload = frame_module(setup).generate(setup, profile, **(aicb_checks or {}))
    else:
        raise ConfigError(f"unknown schedule {schedule!r}", key="--schedule")
    too_large = wformat.oversized(workload)
    if too_large:
        raise ConfigError(f"the model is too large for a SimAI workload: {too_large}", key="arguments")
    return workload


def _deepseek_moe_enable(ns, setup: TrainingSetup) -> bool:
    """AICB's ``--moe_enable`` of a DeepSeek command line. AICB's DeepSeek model has MoE layers
    with or without it (the flag decides only its asserts and crashes); a preset stands for
    its AICB command line (``to_aicb_argv``: ``--moe_enable`` for an MoE model)."""
    return bool(ns.moe_enable) or (ns.model is not None and setup.model.is_moe)


def from_arguments(ns) -> tuple[str, list[str]]:
    """``commsweep generate``: the workload text of parsed AICB-style arguments, and notes.

    With ``--aicb-root`` the aicb schedule runs the user's AICB instead of the emulation.
    Arguments AICB accepts but ignores (``--comp_filepath`` without ``--aiob_enable``,
    ``--context-parallel-size``) are ignored the same way under the aicb schedule, with a note.
    """
    from ..base.errors import CommsweepError
    from ..setup.arguments import setup_from_args

    notes: list[str] = []
    aicb = ns.schedule == "aicb"
    if aicb and ns.context_parallel_size != 1:
        notes.append("AICB ignores --context-parallel-size in its Megatron workloads; so does the aicb schedule")
        ns.context_parallel_size = 1
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
    if aicb_root is not None:
        if not aicb:
            raise ConfigError("runs AICB itself, so it needs --schedule aicb", key="--aicb-root")
        from . import aicb_runner

        # The arguments AICB's asserts read beyond the setup travel along.
        extra = [f"--dtype={ns.dtype}"] if ns.dtype else []
        extra += ["--moe_grouped_gemm"] if ns.moe_grouped_gemm else []
        if not setup.model.is_moe and ns.num_experts is not None:
            extra.append(f"--num_experts={ns.num_experts}")
        omit = ("--moe_enable",) if setup.model.is_mla and not _deepseek_moe_enable(ns, setup) else ()
        text = aicb_runner.run(
            aicb_root, setup, profile_path=profile, python=getattr(ns, "aicb_python", None), extra_argv=extra,
            omit=omit,
        )
        return text, notes
    checks = None
    if aicb:
        checks = {
            # AICB checks --num_experts against EP even for a dense model (default 1).
            "num_experts": None if setup.model.is_moe else ns.num_experts,
            "dtype": ns.dtype or "bfloat16",
            "moe_grouped_gemm": bool(ns.moe_grouped_gemm),
        }
        if setup.model.is_mla:
            checks["moe_enable"] = _deepseek_moe_enable(ns, setup)
    workload = build(setup, ns.schedule, profile_path=profile, pp_stage=ns.pp_stage, aicb_checks=checks,
                     megatron_version=ns.megatron_version)
    return workload.render(), notes
