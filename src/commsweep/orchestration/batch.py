"""Per-point work in batches: one job runs every stage of many points, in one process.

A point's own work takes milliseconds (an AIOB profile, a workload, its volumes, its
simulation, its audit), but a Snakemake job per stage and point costs a Python process
(start-up and imports, about 60 ms) and Snakemake's bookkeeping per job and per declared
file: a 1,024-point sweep spent nearly all of its five minutes on those. So the pipeline
declares one job per *batch* of points (rule ``batch``), and that job runs each stage of
each of its points in-process: each task is a stage's typed job (its contract in the stage
table, ``stages.STAGES``), run as the stage's command would run it (``commsweep guard --
COMMAND ...``, which parses back to the same job: the same guard, the same bytes).

What the thin per-stage jobs gave is kept here, task by task (a task is one guarded
command: a profile, a workload, its volumes, a point's simulation or audit):

* **Changing one point reruns only that point's work.** Each task has a digest of its
  command line, of the checksums of the external inputs it reads and of its upstream
  tasks' digests (``Task.digest``); its status file records it (``Status.job``). A batch
  job whose plan changed reruns (its ``digest`` parameter), and inside it a task whose
  status is ok, records the same digest and has all its outputs is skipped, unless a task
  it depends on ran. So a batch whose membership changed costs its job's start, not its
  points' work.
* **A killed run resumes with nothing partial taken as complete.** A task's status file is
  removed before the task runs and written last (``status.guard``), its outputs
  atomically; a batch's manifest (``results/batches/<batch>.json``, the job's only
  declared output) is written after all its tasks. A batch cut short has no manifest:
  Snakemake reruns it, and it redoes exactly the tasks without a current status.
* **A failing point never loses the others.** Each task is guarded as before: a failure is
  recorded in its status (markers in place of its outputs), the tasks after it record that
  they were not run because of it (naming it), and the batch goes on. A task that kills the batch's process (out of
  memory, say) is found on the next run (``RUNNING``, the task under way) and runs in a
  process of its own; if that is killed too, it is recorded as failed, and the batch ends.
* **The retry.** The manifest lists the batch's failed tasks; the batch's ``attempt``
  parameter then grows (``attempt``), so the next run reruns the batch, which retries
  them. It grows too when a task's outputs are missing (removed by hand).

Batches group points whose work is shared: a workload's networks and an AIOB profile's
workloads fall in one batch (a *unit*, ``unit_of``). A unit's batch is a hash of its key
into a power-of-two number of batches (``batch_count``), so adding a point moves no other
unit (unless the number of batches doubles, which regroups the batches but reruns no
task). The sweep-wide steps read the points' files listed in the manifests
(``manifest_files``), so Snakemake tracks one file per batch, not ten per point.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.stage import LEVELS, Stage
from .stages import STAGES

# Points per batch, as a target (``batch.points`` in the config), and the fewest batches a
# sweep is cut into: enough for every core of a workstation to have work and for the
# batches to even out (a unit's batch is a hash, so batch sizes vary).
DEFAULT_POINTS = 64
MIN_BATCHES = 8
# The task under way in a batch job (see ``run``): beside Snakemake's own bookkeeping in
# the working directory, not under results/.
RUNNING = Path(".snakemake") / "commsweep" / "batches"
# A failure recorded for a task whose process was killed: it is retried in a process of its own.
KILLED = "killed by signal"
# The kinds of per-point files a manifest lists for the sweep-wide steps (``manifest_files``).
FILE_KINDS = ("status", "volumes", "times", "collectives", "audits", "workloads", "endtoend", "causes")


# -- the stages of a point, through the stage table ----------------------------------------------


def point_argv(point, config: Mapping) -> list[str]:
    """The point's setup as commsweep arguments, and the pipeline stage its workload holds
    (the timeline's command: a sweep-wide step, not a stage)."""
    from ..setup.arguments import to_commsweep_argv
    from ..workload.generate import sweep_pp_stage

    return to_commsweep_argv(point.setup) + ["--pp-stage", sweep_pp_stage(config["generator"]["megatron_pp_stage"],
                                                                          point.setup)]


# -- tasks and batches ------------------------------------------------------------------------


def _digest(value) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class Task:
    """One guarded task of a point's stage: its typed job, which a batch runs in-process
    (``Stage.run``), and the same job as a command line (``Stage.argv``), which its digest is
    made of and which ``commsweep guard -- COMMAND`` runs in a process of its own."""

    rule: str  # its stage's rule: profile_<backend>, generate, volumes, simulate, packet, audit
    key: str  # the profile, workload or point it is made for
    command: tuple[str, ...]
    status: str
    outputs: tuple[str, ...]
    # The status files of the tasks it reads (``commsweep guard --after``).
    after: tuple[str, ...] = ()
    # ``KEY=CHECKSUM`` words: commsweep's version and the external inputs it reads.
    provenance: tuple[str, ...] = ()
    # Of the command, the provenance and the upstream tasks' digests (``make_task``).
    digest: str = ""
    memory_mb: int = 512
    # Minutes on a cluster.
    runtime: float = 0.1
    # Threads its command runs (SimAI_simulator's -t for a packet-level point).
    threads: int = 1
    # Its stage in the stage table (``stages.STAGES``) and its job there (None: run the command).
    stage: str = ""
    job: Any = None
    # GPUs it asks for (a torch profile where torch runs on CUDA).
    gpu: int = 0

    def guard_argv(self, attempt: int) -> list[str]:
        """The same task as a ``commsweep guard`` command line (a process of its own)."""
        return ["guard", "--status", self.status, "--outputs", *self.outputs, "--after", *self.after,
                "--attempt", str(attempt), "--provenance", *self.provenance, "--job", self.digest, "--",
                *self.command]


def make_task(rule: str, key: str, command: Sequence[str], status: str, outputs: Sequence[str], *,
              upstream: Sequence[Task] = (), provenance: Sequence[str] = (), memory_mb: int = 512,
              runtime: float = 0.1, threads: int = 1, stage: str = "", job: Any = None, gpu: int = 0) -> Task:
    digest = _digest({"command": list(command), "provenance": list(provenance),
                      "upstream": [t.digest for t in upstream]})
    return Task(rule, key, tuple(command), status, tuple(outputs), tuple(t.status for t in upstream),
                tuple(provenance), digest, memory_mb, runtime, threads, stage, job, gpu)


def stage_task(stage: Stage, key: str, job, status: str, outputs: Sequence[str], *, config: Mapping, point, run,
               upstream: Sequence[Task] = (), workload_mb: int = 512) -> Task:
    """A task of a stage of the table (``stages.STAGES``): its job, its command (the job's
    argv), the provenance of the external inputs the stage reads for the point, its resources."""
    reads = stage.reads(point, config)
    profile = {"profile": point.profile_key} if "aiob.file" in reads else {}
    res = stage.resources(config, workload_mb)
    return make_task(stage.rule(config), key, stage.argv(job), status, outputs, upstream=upstream,
                     provenance=run.job_provenance(*reads, **profile), memory_mb=res.memory_mb, runtime=res.runtime,
                     threads=res.threads, stage=stage.name, job=job, gpu=res.gpu)


@dataclass(frozen=True)
class Batch:
    """The tasks of a batch of points, in the order they run (each after those it reads)."""

    name: str
    points: tuple[str, ...]
    tasks: tuple[Task, ...]
    # Per kind (``FILE_KINDS``), the files of its points the sweep-wide steps read.
    files: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Files from outside results/ that its tasks read (the user's AIOB files, SimAI's ratio
    # tables): inputs of its job. (Their checksums are in the tasks' digests.)
    inputs: tuple[str, ...] = ()
    # Its points as rows of the points table (strings, ``sweep.Point.row``): for the
    # difference by cause of its AICB points, which the batch works out too (``run``).
    rows: tuple[Mapping[str, str], ...] = ()
    # The batches whose outputs its tasks read (a packet-level point's batch reads the
    # workload its settings' batch generates), and the files of theirs it reads: inputs of its job.
    after: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()

    @property
    def digest(self) -> str:
        """Of its tasks: a changed task, or a changed membership, changes it."""
        return _digest([self.name, [t.digest for t in self.tasks]])

    def outputs(self) -> list[str]:
        """Every file its job writes but the manifest: each task's status and outputs, its
        part of the difference by cause. (Declared one by one only without a shared
        filesystem, where the storage carries exactly the declared files: workflow/rules/batch.smk.)"""
        return [f for t in self.tasks for f in (t.status, *t.outputs)] + list(self.files.get("causes", ()))

    def memory_mb(self) -> int:
        return max([512, *(t.memory_mb for t in self.tasks)])

    def runtime(self) -> int:
        """Minutes on a cluster: 5, plus each task's estimate."""
        return 5 + int(sum(t.runtime for t in self.tasks) + 0.999)

    def threads(self) -> int:
        return max([1, *(t.threads for t in self.tasks)])

    def resources(self, config: Mapping) -> dict[str, int]:
        """What its job asks for: the most memory and threads any task needs, the sum of their
        run times, and a GPU if a task asks for one (a torch AIOB profile where torch runs on
        CUDA; elsewhere it asks for the two threads its ``--threads`` gives torch)."""
        return {"mem_mb": self.memory_mb(), "runtime": self.runtime(),
                "gpu": max([0, *(t.gpu for t in self.tasks)]), "threads": self.threads()}


def unit_of(point) -> str:
    """What a point shares its work with, which keeps it in one batch: its model shard (the
    AIOB profile's key, with aiob on or off). Its workload's other networks share it, the
    profile's other workloads too, and so do the workloads of its setup with the other
    schedule, with and without AIOB, which the audit compares with one reference."""
    return point.profile_key


def batch_count(points: int, per_batch: int) -> int:
    """The number of batches: a power of two, at least ``MIN_BATCHES``, about ``per_batch``
    points each. A power of two changes only when the sweep doubles or halves."""
    count = MIN_BATCHES
    while count * per_batch < points:
        count *= 2
    return count


def bucket(unit: str, count: int) -> int:
    return int.from_bytes(hashlib.sha256(unit.encode()).digest()[:8], "big") % count


def batch_name(index: int, count: int) -> str:
    return f"{index:0{len(str(count - 1))}d}-of-{count}"


def count_of(name: str) -> int:
    """The number of batches the sweep is cut into, from a batch's name (``batch_name``); 0
    for a task's batch of its own (``<stage>-<key>``, e.g. a packet-level simulation's), which
    is not one of them."""
    if "-of-" not in name:
        return 0
    return int(name.rsplit("-of-", 1)[1])


@dataclass(frozen=True, eq=False)
class _Point:
    """A point with what planning asks of it again and again (its keys: strings built from
    its whole setup), worked out once."""

    point: Any
    keys: Mapping[str, str]  # level (``base.stage.LEVELS``) -> key
    audited: bool

    def applies(self, stage: Stage) -> bool:
        return stage.applies(self.point, self.audited)


def plan(points: Sequence, config: Mapping, layout, run, *, audited: Iterable | None = None) -> dict[str, Batch]:
    """Every point's tasks, in batches (name -> Batch; batches without a point are left out).

    The tasks are those of the stage table (``stages.STAGES``), each placed from its stage
    alone: a batch runs its points' profiles first, then each workload's tasks followed by
    those of the points on it (a workload is made once, and read while fresh:
    ``format.reuse_parsed``), each stage in the table's order; a stage whose tasks are
    batches of their own (``Stage.own_batch``) gets one per point, after this batch. The
    manifest lists the workloads' files, then the points' in point order.

    ``layout``: the results layout (``paths.Layout``); ``run``: the run's external inputs
    (``provenance.Run``); ``audited``: the points that get an audit (default: those
    Megatron's schedule describes).
    """
    points = list(points)
    if audited is None:
        from .sweep import audited_points, megatron_version

        audited = audited_points(points, megatron_version(config))
    audited_keys = {p.point_key for p in audited}
    count = batch_count(len(points), int((config.get("batch") or {}).get("points") or DEFAULT_POINTS))
    members: dict[int, list[_Point]] = {}
    for p in points:
        keys = {"profile": p.profile_key, "workload": p.workload_key, "point": p.point_key}
        members.setdefault(bucket(unit_of(p), count), []).append(_Point(p, keys, keys["point"] in audited_keys))
    batches: dict[str, Batch] = {}
    for index in sorted(members):
        group = sorted(members[index], key=lambda q: q.keys["point"])
        planned = _BatchPlan(batch_name(index, count), config, layout, run)
        batches.update(planned.plan(group))
    return batches


class _BatchPlan:
    """One batch being planned (``plan``): the tasks made so far, by stage and key, and what
    its manifest and its job's inputs list."""

    def __init__(self, name: str, config: Mapping, layout, run) -> None:
        self.name, self.config, self.layout, self.run = name, config, layout, run
        self.levels = {level: [s for s in STAGES.values() if s.per == level] for level in LEVELS}
        self.made: dict[tuple[str, str], Task] = {}
        self.tasks: list[Task] = []
        self.inputs: list[str] = []
        self.files: dict[str, list[str]] = {kind: [] for kind in FILE_KINDS}

    def plan(self, group: list[_Point]) -> dict[str, Batch]:
        """The batch of ``group`` (sorted by point key), and those of its tasks that are
        batches of their own, after it."""
        # The points a stage simulates in batches of their own (packet-level points) last:
        # their workloads are made here, and listed here, but not their points.
        away = [q for q in group if any(s.own_batch and q.applies(s) for s in self.levels["point"])]
        own = [q for q in group if q not in away]
        ordered = own + away
        for q in ordered:
            for stage in self.levels["profile"]:
                if q.applies(stage) and (stage.name, q.keys[stage.per]) not in self.made:
                    self.make(stage, q)
        of_point = self.workloads(ordered, group)
        # The points' files in point order, as the steps list them; those of points simulated
        # in batches of their own (audited here, with their workload) after.
        in_order = [q.keys["point"] for q in own]
        here = set(in_order)
        for key in in_order + [k for k in of_point if k not in here]:
            for task in of_point.get(key, ()):
                self.list(task)
        self.files["causes"] = [self.layout.batch_causes(self.name)]
        out = {self.name: Batch(self.name, tuple(in_order), tuple(self.tasks),
                                {kind: tuple(v) for kind, v in self.files.items()}, tuple(self.inputs),
                                tuple(_row(q.point) for q in own))}
        for q in ordered:
            for stage in self.levels["point"]:
                if stage.own_batch and q.applies(stage):
                    reads = tuple(t.outputs[0] for t in self.upstream(stage, q) if t)
                    alone = own_batch(stage.name, self.make(stage, q), q.point, after=self.name, reads=reads)
                    out[alone.name] = alone
        return out

    def workloads(self, ordered: list[_Point], group: list[_Point]) -> dict[str, list[Task]]:
        """Each workload's tasks (listed in the manifest), each followed by the tasks of the
        points on it; returns the points' tasks by point key."""
        from . import limits

        on_workload: dict[str, list[_Point]] = {}
        for q in group:
            on_workload.setdefault(q.keys["workload"], []).append(q)
        of_point: dict[str, list[Task]] = {}
        done: set[str] = set()
        for q in ordered:
            workload = q.keys["workload"]
            if workload in done:
                continue
            done.add(workload)
            memory = max(512, limits.job_memory_mb(limits.workload_rows(q.point.setup)))
            for stage in self.levels["workload"]:
                if q.applies(stage):
                    self.list(self.make(stage, q, memory))
            for r in on_workload[workload]:
                for stage in self.levels["point"]:
                    if not stage.own_batch and r.applies(stage):
                        of_point.setdefault(r.keys["point"], []).append(self.make(stage, r, memory))
        return of_point

    def upstream(self, stage: Stage, q: _Point) -> list[Task | None]:
        """The tasks whose outputs a stage's task for ``q`` reads (None: the point has none)."""
        return [self.made.get((up, q.keys[STAGES[up].per])) if q.applies(STAGES[up]) else None
                for up in stage.upstream]

    def make(self, stage: Stage, q: _Point, memory: int = 512) -> Task:
        """The task of a stage for point ``q``, after the tasks of its upstream stages (kept in
        this batch unless the stage's tasks are batches of their own)."""
        key = q.keys[stage.per]
        upstream = self.upstream(stage, q)
        outputs = stage.files(self.layout, key, self.config)
        job = stage.job(q.point, self.config, tuple(t.outputs[0] if t else None for t in upstream), outputs)
        task = stage_task(stage, key, job, stage.status(self.layout, key, self.config), outputs,
                          upstream=[t for t in upstream if t], config=self.config, point=q.point, run=self.run,
                          workload_mb=memory)
        if not stage.own_batch:
            self.made[(stage.name, key)] = task
            self.tasks.append(task)
            self.inputs.extend(f for f in stage.input_files(self.config, q.point) if f not in self.inputs)
        return task

    def list(self, task: Task) -> None:
        """A task's status and outputs in the manifest, each under its kind."""
        _list(self.files, task)


def _list(files: dict[str, list[str]], task: Task) -> None:
    files["status"].append(task.status)
    for kind, path in zip(STAGES[task.stage].kinds, task.outputs):
        if kind:
            files[kind].append(path)


def _row(point) -> dict[str, str]:
    return {k: str(v) for k, v in point.row().items()}


def own_batch(stage: str, task: Task, point, *, after: str, reads: tuple[str, ...]) -> Batch:
    """A task as a batch of its own (``<stage>-<key>``: one job, with what its task asks for),
    after the batch that makes what it reads, whose files it lists as inputs of its job."""
    files: dict[str, list[str]] = {kind: [] for kind in FILE_KINDS}
    _list(files, task)
    return Batch(f"{stage}-{task.key}", (task.key,), (task,), {kind: tuple(v) for kind, v in files.items()}, (),
                 (_row(point),), after=(after,), reads=reads)


def batch_of_points(batches: Mapping[str, Batch]) -> dict[str, str]:
    """Point key -> the name of its batch."""
    return {point: name for name, b in batches.items() for point in b.points}


# -- the manifest: what a finished batch job leaves, and what the sweep-wide steps read --------


def manifest(batch: Batch, attempt: int, failed: Iterable[Task]) -> str:
    """A finished batch: its points, their files, its failed tasks (the same bytes for the
    same outcome: nothing about time or about which tasks ran)."""
    return json.dumps({
        "batch": batch.name,
        "digest": batch.digest,
        "attempt": attempt,
        "points": list(batch.points),
        "failed": sorted(t.status for t in failed),
        "files": {kind: list(paths) for kind, paths in batch.files.items()},
    }, indent=1, sort_keys=True) + "\n"


def read_manifest(path: str | Path) -> dict:
    """A batch's manifest; InputError naming the file for anything else."""
    from ..base.errors import InputError

    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise InputError("not a batch manifest (not UTF-8 text)", file=path, line=1) from None
    except json.JSONDecodeError as err:
        raise InputError(f"not a batch manifest ({err.msg})", file=path, line=err.lineno) from None
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        raise InputError("not a batch manifest (no files)", file=path, line=1)
    return record


def manifest_files(manifests: Iterable[str | Path], kind: str) -> list[str]:
    """The files of one kind (``FILE_KINDS``) that the manifests list, batch after batch."""
    if kind not in FILE_KINDS:
        raise KeyError(f"{kind!r} is not a kind of file a batch manifest lists ({', '.join(FILE_KINDS)})")
    out: list[str] = []
    for path in manifests:
        out += read_manifest(path)["files"].get(kind, [])
    return out


def attempt(batch: Batch, manifest_path: str | Path, *, outputs_here: bool = True) -> int:
    """The batch job's ``attempt`` parameter: its manifest's, one more when a task failed or
    an output is missing (so Snakemake reruns the batch, which redoes those tasks).

    ``outputs_here=False``: the points' files are not on this filesystem to look at (a run
    without a shared filesystem, where they are declared outputs: Snakemake reruns a batch
    whose file is missing from the storage by itself), so only a failed task counts."""
    try:
        record = json.loads(Path(manifest_path).read_text(encoding="utf-8"))
        last = int(record["attempt"])
        failed = bool(record["failed"])
    except (OSError, ValueError, KeyError, TypeError):
        return 1
    if failed or (outputs_here and any(not _nonempty(f) for f in batch.outputs())):
        return last + 1
    return last


# -- running a batch ---------------------------------------------------------------------------


def is_current(task: Task) -> bool:
    """Whether a task's outputs are those its command makes now: its status ok, made by the
    same command from the same inputs (its digest), and every output there."""
    from ..base import status
    from ..base.errors import InputError

    try:
        st = status.read(task.status)
    except (OSError, InputError):
        return False
    return st.ok and st.job == task.digest and all(_nonempty(o) for o in task.outputs)


def _nonempty(path: str) -> bool:
    """Whether a file is there with something in it (every output of a task has a line at
    least; an empty one is what a machine crash can leave of a file not yet synced)."""
    try:
        return os.stat(path).st_size > 0
    except OSError:
        return False


def pending(batch: Batch) -> list[Task]:
    """The tasks a run of the batch would run now: those not current, and those after a
    task that runs (``run`` decides the same way, task by task, as it goes)."""
    todo: list[Task] = []
    statuses: set[str] = set()
    for task in batch.tasks:
        if any(up in statuses for up in task.after) or not is_current(task):
            todo.append(task)
            statuses.add(task.status)
    return todo


def describe_pending(batches: Mapping[str, Batch]) -> str:
    """One line on the work a run would do now: tasks per stage (in the stage table's order),
    points and batches."""
    counts: dict[str, int] = {}
    order: dict[str, int] = {}
    points: set[str] = set()
    touched = 0
    stages = list(STAGES)
    for b in batches.values():
        todo = pending(b)
        touched += bool(todo)
        for task in todo:
            counts[task.rule] = counts.get(task.rule, 0) + 1
            order.setdefault(task.rule, stages.index(task.stage) if task.stage in STAGES else len(stages))
            if task.stage in STAGES and STAGES[task.stage].per == "point":
                points.add(task.key)
    if not counts:
        return "to do: nothing (every point's outputs are current)"
    tasks = ", ".join(f"{counts[r]} {r}" for r in sorted(counts, key=lambda r: order[r]))
    return f"to do: {tasks} task(s) of {len(points)} point(s), in {touched} of {len(batches)} batch(es)"


@dataclass
class Outcome:
    """What a batch job did: tasks run, skipped (current), failed; per stage (and for the
    difference by cause of its points, ``causes``), the seconds its work took and the CPU
    seconds it used (this process's: the work itself)."""

    ran: list[Task] = field(default_factory=list)
    skipped: int = 0
    failed: list[Task] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)

    def line(self, name: str) -> str:
        spent = ", ".join(f"{rule} {s:.2f} s ({self.cpu.get(rule, 0):.2f} s CPU)"
                          for rule, s in sorted(self.seconds.items()))
        return (f"batch {name}: {len(self.ran)} task(s) ran, {self.skipped} current (skipped), "
                f"{len(self.failed)} failed" + (f"; work: {spent}" if spent else ""))


class _Parsers:
    """One parser per stage command, built once (``stages.build_parser``): for a task without
    a typed job (one made from a command line alone, ``make_task``)."""

    def __init__(self) -> None:
        self._built: dict[str, object] = {}

    def __call__(self, command: str):
        if command not in self._built:
            from .stages import build_parser

            self._built[command] = build_parser(command)
        return self._built[command]


def _run_in_process(task: Task, attempt_: int, parsers: _Parsers):
    """The task in this process: its stage's ``run`` on its typed job (what its command
    would parse back to), or, without a job, its command line parsed."""
    from ..base import status
    if task.job is not None:
        stage = STAGES[task.stage]

        def run() -> None:
            stage.run(task.job)
    else:
        parser = parsers(task.command[0])

        def run() -> None:
            ns = status.parse_quietly(lambda: parser.parse_args(list(task.command)))
            ns.func(ns)

    return status.guard(task.command[0], run, status_path=task.status, outputs=task.outputs, after=task.after,
                        attempt=attempt_, provenance=status.job_provenance(task.provenance), job=task.digest)


def _run_in_subprocess(task: Task, attempt_: int):
    """The task as ``commsweep guard`` in a process of its own: a crash kills that process only."""
    import signal

    from ..base import status
    from ..base.errors import CommsweepError

    sys.stdout.flush()
    sys.stderr.flush()
    done = subprocess.run([sys.executable, "-m", "commsweep", *task.guard_argv(attempt_)])
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name

        def killed() -> None:
            raise CommsweepError(f"{KILLED} {name} (out of memory, or a time limit?); it ran in a process of its "
                                 "own after it had stopped its batch's process")

        return status.guard(task.command[0], killed, status_path=task.status, outputs=task.outputs,
                            attempt=attempt_, provenance=status.job_provenance(task.provenance), job=task.digest)
    if done.returncode != 0:  # guard itself failed: its status is not to be trusted
        raise CommsweepError(f"commsweep guard exited with status {done.returncode} for {task.status}")
    return status.read(task.status)


def run(batch: Batch, attempt_: int, manifest_path: str | Path, *, running_dir: str | Path = RUNNING) -> Outcome:
    """Run a batch's tasks that are not current, then write its manifest.

    ``running_dir`` holds the task under way (``<batch>.running``), so that the next run of a
    batch whose process was killed runs that task in a process of its own.
    """
    from ..base import status
    from ..base.errors import InputError
    from ..base.files import synced_once, write_text
    from ..workload.format import reuse_parsed

    outcome = Outcome()
    parsers = _Parsers()
    ran: set[str] = set()
    running = Path(running_dir) / f"{batch.name}.running"
    running.parent.mkdir(parents=True, exist_ok=True)
    try:
        crashed = running.read_text(encoding="utf-8").strip()
    except OSError:
        crashed = ""
    with open(running, "w", encoding="utf-8") as marker, synced_once(), reuse_parsed(), _interrupt_is_no_crash(running):
        for task in batch.tasks:
            if not any(up in ran for up in task.after) and is_current(task):
                outcome.skipped += 1
                continue
            try:
                before = status.read(task.status)
            except (OSError, InputError):
                before = None
            next_attempt = 1 if before is None else (before.attempt if before.ok else before.attempt + 1)
            # Killed itself (not merely not run after a killed task: ``status.NOT_RUN``).
            isolated = task.status == crashed or (before is not None and not before.ok and before.ran
                                                  and before.error.startswith(KILLED))
            # Gone while it runs: a run cut short leaves no status that speaks for new outputs.
            Path(task.status).unlink(missing_ok=True)
            print(f"== {task.rule} {task.key} (attempt {next_attempt}{', own process' if isolated else ''})",
                  file=sys.stderr, flush=True)
            marker.seek(0)
            marker.write(task.status + "\n")
            marker.truncate()
            marker.flush()
            started, cpu = time.perf_counter(), time.process_time()
            if isolated:
                result = _run_in_subprocess(task, next_attempt)
            else:
                result = _run_in_process(task, next_attempt, parsers)
            outcome.seconds[task.rule] = outcome.seconds.get(task.rule, 0.0) + time.perf_counter() - started
            outcome.cpu[task.rule] = outcome.cpu.get(task.rule, 0.0) + time.process_time() - cpu
            ran.add(task.status)
            outcome.ran.append(task)
            if not result.ok:
                outcome.failed.append(task)
        started, cpu = time.perf_counter(), time.process_time()
        for path in batch.files.get("causes", ()):
            write_text(path, causes_table(batch))
        outcome.seconds["causes"] = time.perf_counter() - started
        outcome.cpu["causes"] = time.process_time() - cpu
    write_text(manifest_path, manifest(batch, attempt_, outcome.failed))
    running.unlink(missing_ok=True)
    return outcome


@contextlib.contextmanager
def _interrupt_is_no_crash(running: Path):
    """On Ctrl-C, forget the task under way: it did not kill the batch's process, so the next
    run need not run it in a process of its own."""
    try:
        yield
    except KeyboardInterrupt:
        running.unlink(missing_ok=True)
        raise


def causes_table(batch: Batch) -> str:
    """The difference by cause of the batch's AICB points (``analysis.causes.points_causes``):
    its part of ``difference_by_cause.csv``, which the sweep-wide step puts together in the
    sweep's order (a batch holds every point of its settings, so each AICB point's Megatron
    partner is in it). Worked out here, batch by batch, rather than for the whole sweep at its
    end. A failure is a marker (``status.MARKER``) that fails that step, naming it."""
    from ..analysis import causes
    from ..base.paths import PointFiles
    from ..base.status import MARKER, describe_exception
    from ..setup.points import PointRow

    files = PointFiles.given(**{kind: batch.files.get(kind, ()) for kind in
                                ("status", "volumes", "times", "collectives", "audits")})
    try:
        return causes.to_csv(causes.points_causes([PointRow.from_cells(r) for r in batch.rows], files))
    except Exception as err:  # noqa: BLE001 - recorded for the sweep-wide step, which fails on it
        print(f"commsweep batch {batch.name}: difference by cause: error: {describe_exception(err)}", file=sys.stderr)
        return f"{MARKER} difference_by_cause: {describe_exception(err)}\n"


def run_rule(smk) -> None:
    """Rule ``batch`` (a Snakemake ``script:``): run the batch of ``smk.params.plan``, its
    output (and that of every command it runs, in-process or not) in the rule's log. Without
    a shared filesystem it runs from the job's root (``storage.enter``), where the plan's
    paths are those of the job's files."""
    from . import storage
    from .exits import quick

    quick()
    batch_ = smk.params.plan
    running_dir = os.path.abspath(RUNNING)
    with open(smk.log[0], "w", encoding="utf-8") as log:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        with contextlib.suppress(AttributeError, ValueError):
            sys.stdout.reconfigure(line_buffering=True)
            sys.stderr.reconfigure(line_buffering=True)
        print(f"batch {batch_.name}: {len(batch_.points)} point(s), {len(batch_.tasks)} task(s), "
              f"attempt {smk.params.attempt}", file=sys.stderr, flush=True)
        [manifest_path] = storage.enter([smk.output.manifest])
        try:
            outcome = run(batch_, int(smk.params.attempt), manifest_path, running_dir=running_dir)
        except KeyboardInterrupt:
            # Ctrl-C: Snakemake shows this log; a line says it all (the task lines, up to
            # one per task, and a traceback would be most of what the terminal shows).
            from ..base.errors import exit_interrupted

            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
                log.seek(0)
                log.truncate()
            exit_interrupted(f"batch {batch_.name}: interrupted (Ctrl-C); the tasks it finished are kept, "
                             "the next run does the others")
        print(outcome.line(batch_.name), file=sys.stderr, flush=True)
