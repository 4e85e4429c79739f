"""Launch N gloo processes that trace one or more setups, and gather their records.

Each process costs about 0.4 GB and a few seconds of imports (torch, megatron), far more
than a tiny model's step, so ``run`` traces several setups of the same world size in one
launch: every process runs them one after another, re-initialising megatron's parallel
state in between. Processes are plain subprocesses (``python -m commsweep.trace.runner``)
rendezvousing through a file store; each writes its records as JSON, read back here.

The parent imports neither torch nor megatron.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from ..base.errors import CommsweepError
from ..base.files import write_text
from ..setup.models import ModelSpec
from ..setup.training import TrainingSetup
from .records import RankInfo, Trace, TraceRecord
from .versions import Environment


class TraceError(CommsweepError):
    """A trace process failed; the message carries the end of its output."""


def missing_dependencies(environment: Environment | None = None) -> str | None:
    """Why tracing cannot run here (None when torch and megatron-core are importable;
    with an ``environment`` of its own, megatron-core comes from there)."""
    import importlib.util

    needed = (("torch", "torch==2.13.0"),)
    if environment is None or environment.path is None:
        needed += (("megatron.core", "megatron-core==0.16.1"),)
    for module, extra in needed:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"{module} is not installed (pip install '.[megatron]' installs {extra})"
    return None


def run(setups: Sequence[TrainingSetup], *, timeout: float = 600.0,
        environment: Environment | None = None) -> list[Trace]:
    """Trace each setup: the records of every rank (rank order, then call order).

    Setups are grouped by world size, one launch per group. ``environment`` (from
    ``versions.environment``) is the megatron-core release to run; default the installed one.
    """
    reason = missing_dependencies(environment)
    if reason:
        raise TraceError(f"cannot trace: {reason}")
    results: dict[int, Trace] = {}
    by_world: dict[int, list[int]] = {}
    for i, setup in enumerate(setups):
        problems = setup.problems()
        if problems:
            raise TraceError(f"cannot trace an invalid setup: {'; '.join(problems)}")
        if setup.virtual_pipeline > 1 and setup.pp == 2:
            raise TraceError("cannot trace an interleaved pipeline of 2 stages: each stage is both neighbours of "
                             "the other, so a traced message's direction is unknown; trace pp 3 or more")
        by_world.setdefault(setup.world_size, []).append(i)
    for world, indices in by_world.items():
        per_setup = _launch(world, [setups[i] for i in indices], timeout=timeout, environment=environment)
        for i, trace in zip(indices, per_setup):
            results[i] = trace
    return [results[i] for i in range(len(setups))]


def _launch(world: int, setups: list[TrainingSetup], *, timeout: float,
            environment: Environment | None) -> list[Trace]:
    with tempfile.TemporaryDirectory(prefix="commsweep-trace-") as tmp:
        tmpdir = Path(tmp)
        job = tmpdir / "job.json"
        job.write_text(json.dumps({"world": world, "setups": [setup_to_dict(s) for s in setups]}))
        env = environment.env(dict(os.environ)) if environment else dict(os.environ)
        # One thread per process: N processes share the machine's cores.
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        procs = []
        logs = []
        for rank in range(world):
            log = open(tmpdir / f"rank{rank}.log", "w+b")
            logs.append(log)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "commsweep.trace.runner", "--job", str(job), "--rank", str(rank),
                 "--store", str(tmpdir / "store"), "--out", str(tmpdir / f"rank{rank}.json")],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            ))
        deadline = time.monotonic() + timeout
        try:
            while True:
                codes = [p.poll() for p in procs]  # every process, so that any failure is seen at once
                failed = next(((r, c) for r, c in enumerate(codes) if c not in (None, 0)), None)
                if failed is not None or None not in codes:
                    break
                if time.monotonic() > deadline:
                    failed = (-1, -1)
                    break
                time.sleep(0.05)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            for log in logs:
                log.close()
        if failed is not None:
            rank, code = failed
            if rank < 0:
                raise TraceError(f"trace of {world} process(es) timed out after {timeout:.0f} s")
            said = tmpdir / f"rank{rank}.json.error"  # what the release cannot run, in a line
            if said.exists():
                raise TraceError(said.read_text())
            tail = (tmpdir / f"rank{rank}.log").read_text(errors="replace")[-3000:]
            raise TraceError(f"trace process {rank} of {world} exited with status {code}:\n{tail}")
        per_rank = [json.loads((tmpdir / f"rank{r}.json").read_text()) for r in range(world)]
    ran = {rank[i]["meta"]["megatron_core"] for rank in per_rank for i in range(len(setups))}
    if environment is not None and ran != {environment.version}:
        raise TraceError(f"asked for megatron-core {environment.version}, the trace ran {', '.join(sorted(ran))}")
    return [
        Trace(
            setup=setup,
            records=[TraceRecord.from_dict(d) for rank in per_rank for d in rank[i]["records"]],
            ranks=[RankInfo(**rank[i]["meta"]) for rank in per_rank],
        )
        for i, setup in enumerate(setups)
    ]


# -- the worker process ------------------------------------------------------------------


def setup_to_dict(setup: TrainingSetup) -> dict:
    """A setup as the job file carries it to the workers: every field, the model's too
    (a command line would carry only the fields that have arguments)."""
    return dataclasses.asdict(setup)


def setup_from_dict(values: dict) -> TrainingSetup:
    """The setup ``setup_to_dict`` wrote."""
    return TrainingSetup(**{**values, "model": ModelSpec(**values["model"])})



def _worker(job_path: str, rank: int, store: str, out: str) -> None:
    from . import collectives

    collectives.install(lambda call: None)  # before megatron is imported (see collectives)

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    job = json.loads(Path(job_path).read_text())
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=job["world"])
    try:
        from . import model

        results = []
        for values in job["setups"]:
            setup = setup_from_dict(values)
            try:
                records, meta = model.trace_step(setup)
            except CommsweepError as err:  # e.g. compat.Unsupported: the parent says it as it is
                write_text(out + ".error", str(err))
                raise
            results.append({"records": [r.to_dict() for r in records], "meta": meta})
        write_text(out, json.dumps(results))
    finally:
        dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one process of a commsweep trace (internal)")
    parser.add_argument("--job", required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--out", required=True)
    ns = parser.parse_args(argv)
    _worker(ns.job, ns.rank, ns.store, ns.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
