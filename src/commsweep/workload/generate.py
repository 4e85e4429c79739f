"""Make the workload of one setup with the chosen schedule and write it atomically."""

from __future__ import annotations

from pathlib import Path

from ..aiob import profile_file
from ..errors import ConfigError
from ..training import TrainingSetup
from . import format as wformat


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
        raise ConfigError(f"must be first, last or 0..{pp - 1}, got {value!r}", key="--pp_stage")
    return stage


def build(
    setup: TrainingSetup,
    schedule: str,
    *,
    profile_path: str | Path | None = None,
    pp_stage: str | int = "first",
) -> wformat.Workload:
    """The workload of ``setup`` under ``schedule`` ("aicb" or "megatron").

    ``profile_path`` is an AIOB file: AICB's ``--comp_filepath`` (the aicb schedule then
    follows AICB's AIOB path), or the compute times of the megatron schedule.
    """
    from ..sweep import schedule_problems

    problems = setup.problems() + schedule_problems(setup, schedule)
    if problems:
        raise ConfigError("; ".join(problems), key="arguments")
    profile = profile_file.read(profile_path) if profile_path is not None else None
    if schedule == "megatron":
        from . import megatron

        return megatron.schedule(setup, profile, stage=pipeline_stage(pp_stage, setup.pp)).workload()
    if schedule == "aicb":
        from . import aicb

        return aicb.generate(setup, profile)
    raise ConfigError(f"unknown schedule {schedule!r}", key="--schedule")
