"""Limits checked before any job runs: what one point may cost, and what SimAI can address.

A valid point can still be one no machine should run: ``global_batch: [1073741824]``
gives a workload of billions of rows (a job that fills the memory and writes nothing),
``world_size: [2**40]`` more GPUs than SimAI can count. Each point's cost is estimated
from its setup alone, in microseconds, and a sweep with a point over a limit stops before
any job, naming the point, the estimate and the ``limits:`` key that raises it:

* ``workload_rows``: rows of its workload file, at most ``ROWS_PER_LAYER`` per layer of
  the stage and micro-batch (both schedules stay under 7 on every preset; the audit and
  the simulation hold every row);
* ``job_memory_mb``: the peak memory of its heaviest job (the audit), ``BASE_MB`` plus
  ``BYTES_PER_ROW`` per row (measured: 187 MB at 103,000 rows, 38 MB at 13,000);
* ``gpus``: GPUs SimAI can address: it reads ``-g`` and the header's ``all_gpus`` as a
  C ``int``.

The estimates are upper bounds: the rules ask a cluster for the memory estimate
(``job_memory_mb``), so a big point gets a big enough job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..base.errors import ConfigError

ROWS_PER_LAYER = 8
BYTES_PER_ROW = 2048
BASE_MB = 64
DEFAULTS = {"workload_rows": 2_000_000, "job_memory_mb": 8192, "gpus": 2**31 - 1}


def workload_rows(setup) -> int:
    """An upper bound on the rows of the setup's workload file (either schedule)."""
    return ROWS_PER_LAYER * setup.num_microbatches * (setup.max_stage_layers + 2)


def job_memory_mb(rows: int) -> int:
    """The estimated peak memory of a per-point task on a workload of ``rows`` rows, in MB."""
    return BASE_MB + -(-rows * BYTES_PER_ROW // 2**20)


def problems(setup, limits: Mapping[str, int]) -> list[str]:
    """Why a point's setup is over ``limits`` (empty when it is not), each with its estimate."""
    out = []
    rows = workload_rows(setup)
    if rows > limits["workload_rows"]:
        out.append(f"about {rows:,} workload rows ({ROWS_PER_LAYER} per layer x {setup.max_stage_layers + 2} layers "
                   f"x {setup.num_microbatches:,} micro-batches) > limits.workload_rows = {limits['workload_rows']:,}")
    memory = job_memory_mb(rows)
    if memory > limits["job_memory_mb"]:
        out.append(f"about {memory:,} MB of memory for one job > limits.job_memory_mb = {limits['job_memory_mb']:,}")
    if setup.world_size > limits["gpus"]:
        out.append(f"world_size {setup.world_size:,} > limits.gpus = {limits['gpus']:,} (SimAI reads the GPU "
                   "count as a C int)")
    return out


def check(points: Iterable, config_limits: Mapping[str, int] | None = None) -> None:
    """Raise ConfigError listing the points over the limits (the config's ``limits:`` over
    ``DEFAULTS``), with their estimates."""
    limits = {**DEFAULTS, **(config_limits or {})}
    over = []
    for point in points:
        found = problems(point.setup, limits)
        if found:
            over.append(f"  - {point.point_key}: " + "; ".join(found))
    if over:
        shown = over[:10] + ([f"  ... and {len(over) - 10} more"] if len(over) > 10 else [])
        raise ConfigError(f"{len(over)} point(s) over the limits, checked before any job; shrink them, or raise "
                          "the limit deliberately under limits: in the config\n" + "\n".join(shown), key="limits")
