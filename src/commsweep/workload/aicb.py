"""AICB's two workload generators, emulated: its default path and its AIOB path.

Reference: aliyun/aicb at 23eec3c48ca2d2d93dd888a4c7b22ab4421e782f,
``workload_generator/SimAI_training_workload_generator.py``.
"""

from __future__ import annotations

from ..training import TrainingSetup


def unsupported(setup: TrainingSetup) -> list[str]:
    """Configurations AICB itself refuses, with its reason."""
    if setup.model.is_moe and not setup.sp:
        return ["AICB refuses MoE without sequence parallelism (moe must be enabled with sequence parallel)"]
    return []
