"""Where each stage's outputs live under the results directory.

One home for the layout, shared by the Snakemake rules and the summary code::

    results/sweep.csv                                   the points (and skipped combinations)
    results/aiob/<backend>/<profile>.txt|.csv           AIOB profiles, shared by points
    results/workloads/<workload>/workload.txt           SimAI workload, shared across networks
    results/workloads/<workload>/volumes.csv            its communication volumes
    results/points/<point>/EndToEnd.csv                 SimAI's summary and per-row times of the point
    results/points/<point>/collectives.csv              its simulated time per collective
    results/points/<point>/times.csv                    their sums and SimAI's summary line (the summary's input)
    results/points/<point>/audit.csv                    its workload's audit against Megatron's schedule
    results/summary.csv, results/plots/*.png            the sweep's tables and figures
"""

from __future__ import annotations

from pathlib import Path


def workload_dir(results: Path, workload: str) -> Path:
    return results / "workloads" / workload


def workload_file(results: Path, workload: str) -> Path:
    return workload_dir(results, workload) / "workload.txt"


def volumes_file(results: Path, workload: str) -> Path:
    return workload_dir(results, workload) / "volumes.csv"


def point_dir(results: Path, point: str) -> Path:
    return results / "points" / point


def endtoend_file(results: Path, point: str) -> Path:
    """The point's simulation in SimAI's EndToEnd.csv layout."""
    return point_dir(results, point) / "EndToEnd.csv"


def collectives_file(results: Path, point: str) -> Path:
    """The point's simulated time per collective (``simulate.collectives`` columns)."""
    return point_dir(results, point) / "collectives.csv"


def times_file(results: Path, point: str) -> Path:
    """The point's simulated times in brief (``simulate.times``): all the summary reads of a simulation."""
    return point_dir(results, point) / "times.csv"


def audit_file(results: Path, point: str) -> Path:
    """The point's audit findings (``analysis.audit`` columns)."""
    return point_dir(results, point) / "audit.csv"
