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
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Resources:
    """What one task of a stage asks for: memory (MB), minutes on a cluster, threads, GPUs."""

    memory_mb: int = 512
    runtime: float = 0.1
    threads: int = 1
    gpu: int = 0


@dataclass(frozen=True)
class Stage:
    """One per-point stage: its command, files, external inputs, resources and runs, and
    where its tasks go in a batch (``orchestration.batch.plan`` places them from these alone)."""

    # Its command (``commsweep NAME``).
    name: str
    summary: str
    # What one task of it is made for: a "profile", a "workload" or a "point" (the point's
    # ``profile_key``, ``workload_key`` or ``point_key``). A batch runs a point's profiles
    # first, then each workload's tasks, each followed by those of its points.
    per: str
    # The results files it reads and writes, as the results layout names them
    # (``base.paths.Layout``), and the kind under which a batch's manifest lists each output
    # for the sweep-wide steps (None: not listed).
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    kinds: tuple[str | None, ...]
    # The stages whose first output it reads, in the order its job takes them (a task of
    # theirs for the point, or None where the point has none: a profile without AIOB).
    upstream: tuple[str, ...]
    # Config keys of the external inputs it can read.
    external: tuple[str, ...]
    # Its command's parser (``add_parser(subparsers)``), which sets ``func``; None where its
    # command is another stage's (the packet-level simulation is ``simulate --backend ns3``).
    add_parser: Callable[[Any], None] | None
    # The typed work of one task: the job its command's arguments stand for, the job of a
    # point's task (``job(point, config, inputs, outputs)``: its upstream files and its
    # outputs), the command of a job (argv after ``commsweep``), and the work itself.
    from_args: Callable[[argparse.Namespace], Any]
    job: Callable[[Any, Mapping, tuple, tuple], Any]
    argv: Callable[[Any], list[str]]
    run: Callable[[Any], None]
    # ``applies(point, audited)``: whether the point has a task of it (``audited``: whether
    # the sweep audits the point, ``sweep.audited_points``).
    applies: Callable[[Any, bool], bool]
    # ``files(layout, key, config)``: a task's outputs; ``status(layout, key, config)``: its status file.
    files: Callable[[Any, str, Mapping], tuple[str, ...]]
    status: Callable[[Any, str, Mapping], str]
    # ``check_external(config, points)``: config key -> ``base.external.External`` (or, for
    # a file per profile, profile key -> External); ConfigError naming the key when missing.
    check_external: Callable[[Mapping, Sequence], dict]
    # ``reads(point, config)``: the keys of ``external`` that a point's task reads (named,
    # with their checksums, in its provenance and digest).
    reads: Callable[[Any, Mapping], tuple[str, ...]]
    # ``resources(config, workload_mb)``: what one task asks for (``workload_mb``: what its
    # workload needs in memory, ``orchestration.limits``).
    resources: Callable[[Mapping, int], Resources]
    # ``input_files(config, point)``: files from outside results/ that a point's task reads
    # (inputs of its batch's job, for Snakemake).
    input_files: Callable[[Mapping, Any], tuple[str, ...]]
    # Its tasks' rule (``profile_<backend>`` for a profile); default its name.
    rule: Callable[[Mapping], str] | None = None
    # Whether each task is a batch (a job) of its own, after the batch that makes what it
    # reads (a packet-level simulation, with the memory, time and threads it asks for).
    own_batch: bool = False

    def rule_of(self, config: Mapping) -> str:
        return self.rule(config) if self.rule is not None else self.name

    def key_of(self, point) -> str:
        return {"profile": point.profile_key, "workload": point.workload_key, "point": point.point_key}[self.per]


def nothing(*args) -> tuple:
    """No external input or file (for ``check_external``, ``reads``, ``input_files``)."""
    return ()
