"""The contract of a per-point stage: what it reads and writes, and how it runs.

Each stage (an AIOB profile, a workload, its volumes, a point's simulation, packet-level
simulation or audit) is one ``Stage`` object next to its code (``aiob/stage.py``,
``workload/stage.py``, ``simulate/stage.py``, ``simulate/ns3/stage.py``,
``analysis/stage.py``), listed once in the stage table (``orchestration/stages.py``). The
batch planner and runner, provenance and the command line reach a stage only through its
contract, so that adding a stage (another simulator backend, say) is one new contract and
one line in the table.

A stage runs two ways that do the same work: as its command (``commsweep NAME ...``, its
``argv``: the text a task's digest is made of, and what a task killed once runs in a process
of its own) and in-process (``run`` on a typed ``Job``, what a batch does thousands of
times). The command's parser gives the same job back (``from_args``), and ``run`` is the one
function both ways end in; tests/test_stages.py checks that every task a sweep plans parses
back to the job it was planned with.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Resources:
    """What one task of a stage asks for: memory (MB), minutes on a cluster, threads, GPUs."""

    memory_mb: int = 512
    runtime: float = 0.1
    threads: int = 1
    gpu: int = 0


def no_external(config: Mapping, points: Sequence) -> dict:
    """A stage that reads nothing from outside the results folder."""
    return {}


@dataclass(frozen=True)
class Stage:
    """One per-point stage: its command, files, external inputs, resources and runs."""

    # Its command (``commsweep NAME``), and its tasks' rule (``profile_<backend>`` for a profile).
    name: str
    summary: str
    # What one task of it is made for: a "profile", a "workload" or a "point".
    per: str
    # The results files it reads and writes, as the results layout names them (``base.paths.Layout``).
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    # Config keys of the external inputs it can read, checked and checksummed before any job
    # (``check_external``) and named in the provenance of the tasks that read them (``reads``).
    external: tuple[str, ...]
    # Its command's parser (``add_parser(subparsers)``), which sets ``func``; None where its
    # command is another stage's (the packet-level simulation is ``simulate --backend ns3``).
    add_parser: Callable[[Any], None] | None
    # The typed work of one task: the job its command's arguments stand for, the command of
    # a job (argv after ``commsweep``), and the work itself.
    from_args: Callable[[argparse.Namespace], Any]
    # ``job(point, config, *files)``: the job of a point's task, the files it reads and
    # writes given in the order of ``inputs`` then ``outputs`` (the planner's paths).
    job: Callable[..., Any]
    argv: Callable[[Any], list[str]]
    run: Callable[[Any], None]
    # ``check_external(config, points)``: config key -> ``base.external.External`` (or, for
    # a file per profile, profile key -> External); ConfigError naming the key when missing.
    check_external: Callable[[Mapping, Sequence], dict] = no_external
    # ``reads(point, config)``: the keys of ``external`` that a point's task reads.
    reads: Callable[[Any, Mapping], tuple[str, ...]] = field(default=lambda point, config: ())
    # ``resources(config, workload_mb)``: what one task asks for (``workload_mb``: what its
    # workload needs in memory, ``orchestration.limits``).
    resources: Callable[[Mapping, int], Resources] = field(default=lambda config, workload_mb: Resources())
    # ``input_files(config, point)``: files from outside results/ that a point's task reads
    # (inputs of its batch's job, for Snakemake).
    input_files: Callable[[Mapping, Any], tuple[str, ...]] = field(default=lambda config, point: ())
