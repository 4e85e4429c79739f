"""The contract of a per-point stage: what it reads and writes, and how it runs.

Each stage (an AIOB profile, a workload, its volumes, a point's simulation, packet-level
simulation or audit) is one ``Stage`` subclass next to its code (``aiob/stage.py``,
``workload/stage.py``, ``simulate/stage.py``, ``simulate/ns3/stage.py``,
``analysis/stage.py``), listed once in the stage table (``orchestration/stages.py``). The
batch planner and runner, provenance and the command line reach a stage only through its
methods, so that adding a stage (another simulator backend, say) is one new class and one
line in the table.

A stage's work is a typed job (a dataclass whose fields are its command's flags,
``base.jobfields``), and it runs two ways that do the same work: as its command
(``commsweep COMMAND ...``, the job's ``to_argv``: the text a task's digest is made of, and
what a task killed once runs in a process of its own) and in-process (``run`` on the job,
what a batch does thousands of times). The command's parser, the command line and the job
parsed back all come from the job's fields, and ``run`` is the one function both ways end in.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from .jobfields import from_namespace, to_argv

Job = TypeVar("Job")


@dataclass(frozen=True)
class Resources:
    """What one task of a stage asks for: memory (MB), minutes on a cluster, threads, GPUs."""

    memory_mb: int = 512
    runtime: float = 0.1
    threads: int = 1
    gpu: int = 0


# What a task is made for: a point's profile, workload or the point itself, and the key of
# each (``Point.profile_key`` ...). A batch runs a point's profiles first, then each
# workload's tasks, each followed by those of its points.
LEVELS = ("profile", "workload", "point")


class Stage(Generic[Job]):
    """One per-point stage over its job type: its files, upstream stages, resources, external
    inputs, which points have a task of it, the job of a point's task and the work itself.

    A subclass sets the class attributes and the methods without a default (``job``,
    ``files``, ``status``, ``run``); the others say "nothing" (no external input, no file
    from outside results/, the usual resources).
    """

    # Its key in the stage table and the rule of its tasks (``rule`` for one that depends
    # on the config), its command (``commsweep COMMAND``) and a line on what it makes.
    name: ClassVar[str]
    command: ClassVar[str]
    summary: ClassVar[str]
    job_type: ClassVar[type]
    per: ClassVar[str]  # one of LEVELS
    # The results files it reads and writes, as the results layout names them
    # (``base.paths.Layout``), and the kind under which a batch's manifest lists each output
    # for the sweep-wide steps (None: not listed).
    inputs: ClassVar[tuple[str, ...]] = ()
    outputs: ClassVar[tuple[str, ...]]
    kinds: ClassVar[tuple[str | None, ...]]
    # The stages whose first output it reads, in the order its job takes them (a task of
    # theirs for the point, or None where the point has none: a profile without AIOB).
    upstream: ClassVar[tuple[str, ...]] = ()
    # Config keys of the external inputs it can read.
    external: ClassVar[tuple[str, ...]] = ()
    # Whether each task is a batch (a job) of its own, after the batch that makes what it
    # reads (a packet-level simulation, with the memory, time and threads it asks for).
    own_batch: ClassVar[bool] = False

    # -- where its tasks go ------------------------------------------------------------------

    def applies(self, point, audited: bool) -> bool:
        """Whether the point has a task of it (``audited``: whether the sweep audits it)."""
        return True

    def key_of(self, point) -> str:
        return {"profile": point.profile_key, "workload": point.workload_key, "point": point.point_key}[self.per]

    def rule(self, config: Mapping) -> str:
        """The rule its tasks are counted under (``profile_<backend>`` for a profile)."""
        return self.name

    def files(self, layout, key: str, config: Mapping) -> tuple[str, ...]:
        """A task's outputs (``outputs``, as the results layout places them for ``key``)."""
        raise NotImplementedError

    def status(self, layout, key: str, config: Mapping) -> str:
        """A task's status file."""
        raise NotImplementedError

    # -- what it reads from outside results/ and asks for --------------------------------------

    def check_external(self, config: Mapping, points: Sequence) -> dict:
        """Config key -> ``base.external.External`` (or, for a file per profile, profile key ->
        External): its external inputs, there and checksummed; ConfigError naming the key."""
        return {}

    def reads(self, point, config: Mapping) -> tuple[str, ...]:
        """The keys of ``external`` that a point's task reads (named, with their checksums, in
        its provenance and digest)."""
        return ()

    def input_files(self, config: Mapping, point) -> tuple[str, ...]:
        """Files from outside results/ that a point's task reads (inputs of its batch's job)."""
        return ()

    def resources(self, config: Mapping, workload_mb: int) -> Resources:
        """What one task asks for (``workload_mb``: what its workload needs in memory)."""
        return Resources(memory_mb=workload_mb)

    # -- its work ----------------------------------------------------------------------------

    def job(self, point, config: Mapping, inputs: tuple, outputs: tuple) -> Job:
        """The job of a point's task: ``inputs``, its upstream stages' files (None where the
        point has none); ``outputs``, its own (``files``)."""
        raise NotImplementedError

    def argv(self, job: Job) -> list[str]:
        """The job as its command line (after ``commsweep``): from its fields."""
        return to_argv(job)

    def from_args(self, ns: argparse.Namespace) -> Job:
        """The job of its command's parsed arguments: from its fields."""
        return from_namespace(self.job_type, ns)

    def run(self, job: Job) -> None:
        """The work of one task: what its command does, and what a batch runs in-process."""
        raise NotImplementedError

    def add_parser(self, sub) -> Any:
        """Its command's parser (``sub``: the subparsers), which sets ``func``; None where its
        command is another stage's (the packet-level simulation is ``simulate --backend ns3``)."""
        return None
