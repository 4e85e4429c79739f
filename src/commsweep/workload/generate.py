"""Make the workload of one setup with the chosen schedule and write it atomically."""

from __future__ import annotations

from pathlib import Path

from ..aiob import profile_file
from ..base.errors import ConfigError
from ..setup.training import TrainingSetup
from . import format as wformat

SCHEDULES = ("aicb", "megatron")


def pipeline_stage(value: str | int, setup: TrainingSetup) -> int:
    """A stage index from ``first``, ``last``, ``fullest`` (the first stage holding the most
    layers: the one that paces an uneven pipeline) or a number."""
    pp = setup.pp
    if value == "fullest":
        counts = [setup.stage_layer_count(stage) for stage in range(pp)]
        return counts.index(max(counts))
    named = {"first": 0, "last": pp - 1}
    if isinstance(value, str) and value in named:
        return named[value]
    try:
        stage = int(value)
    except (TypeError, ValueError):
        stage = -1
    if not 0 <= stage < pp:
        raise ConfigError(f"must be first, last, fullest or 0..{pp - 1}, got {value!r}", key="--pp-stage")
    return stage


def sweep_pp_stage(configured: str, setup: TrainingSetup) -> str:
    """The stage a sweep's point holds, from the sweep's ``generator.megatron_pp_stage``: as
    configured, except that a point with uneven stages (a pipeline layout) holds its fullest
    stage under ``first``, the default: SimAI scales the simulated stage's own time by the
    bubble, so a lighter first stage reads up to a third short of Megatron's schedule (even
    stages hold the same layers, and keep the first stage, embedding and all)."""
    if configured == "first" and setup.stage_layout is not None:
        return "fullest"
    return configured


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


def not_interleaved(setup: TrainingSetup) -> TrainingSetup:
    """The setup as AICB runs it in a sweep: AICB has no interleaved schedule (nor a flag for
    one), so its workload of an interleaved job is that of the plain 1F1B schedule."""
    if setup.virtual_pipeline == 1 or setup.stage_layout is not None:
        return setup
    from dataclasses import replace

    return replace(setup, virtual_pipeline=1)


def ignoring_cp(setup: TrainingSetup) -> TrainingSetup:
    """The setup as AICB sees it: AICB has no context parallelism, so its workload is that of
    the same GPUs without it (as ``commsweep generate --schedule aicb`` drops the flag); nor
    FSDP or FP8 parameter gathers, so its workload is the distributed optimizer's in bf16."""
    from dataclasses import replace

    if setup.fsdp != "none" or setup.fp8_param_gather:
        setup = replace(setup, fsdp="none", fp8_param_gather=False)
    if setup.cp == 1:
        return setup
    return replace(setup, cp=1, cp_comm_type="p2p", hierarchical_cp=None)


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

        setup = ignoring_cp(setup)
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

        workload = megatron.schedule(setup, profile, stage=pipeline_stage(pp_stage, setup),
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
