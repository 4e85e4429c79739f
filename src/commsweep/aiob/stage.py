"""The profile stage's contract (``base.stage.Stage``): ``commsweep profile``, one AIOB
compute-time profile per model shard (a point's ``profile_key``)."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..base.stage import Resources, Stage
from ..setup.arguments import as_commanded, to_commsweep_argv
from ..setup.training import TrainingSetup


@dataclass(frozen=True)
class ProfileJob:
    """One profile: the shard's setup, the backend and its options, the two files it writes."""

    setup: TrainingSetup
    backend: str
    gpu: str
    output: str | None
    table: str | None = None
    file: str | None = None
    threads: int | None = None
    # The file's train_iter and torch's timed runs: a point's command line says --epoch_num=1.
    iters: int = 1
    warmup: int = 3
    device: str = "auto"
    gemm_efficiency: float | None = None
    attention_efficiency: float | None = None
    memory_efficiency: float | None = None
    launch_us: float | None = None


def torch_on_gpu() -> bool:
    """Whether the torch backend runs on CUDA here (then a batch with a torch profile asks for a GPU)."""
    return shutil.which("nvidia-smi") is not None


def job(point, config: Mapping, inputs: tuple, outputs: tuple) -> ProfileJob:
    """The profile of a point's shard, as ``aiob:`` in the config asks (``backends.profile_setup``):
    the AIOB file and its CSV (``outputs``)."""
    from .backends import profile_setup, user_file

    output, table = outputs
    backend = config["aiob"]["backend"]
    return ProfileJob(
        setup=profile_setup(point.setup), backend=backend, gpu=point.gpu, output=output, table=table,
        file=user_file(config["aiob"]["file"], point.profile_key) if backend == "file" else None,
        threads=(1 if torch_on_gpu() else 2) if backend == "torch" else None)


def argv(job: ProfileJob) -> list[str]:
    out = ["profile", "--backend", job.backend]
    if job.threads is not None:
        out += ["--threads", str(job.threads)]
    if job.file is not None:
        out += ["--file", job.file]
    out += to_commsweep_argv(job.setup)
    if job.iters != 1:
        out += ["--iters", str(job.iters)]
    if job.warmup != 3:
        out += ["--warmup", str(job.warmup)]
    if job.device != "auto":
        out += ["--device", job.device]
    for name in ("gemm_efficiency", "attention_efficiency", "memory_efficiency", "launch_us"):
        if getattr(job, name) is not None:
            out.append(f"--{name.replace('_', '-')}={getattr(job, name)!r}")
    out += ["--gpu", job.gpu]
    if job.output is not None:
        out += ["-o", job.output]
    if job.table is not None:
        out += ["--csv", job.table]
    return out


def from_args(ns: argparse.Namespace) -> ProfileJob:
    from ..setup.arguments import setup_from_args

    return ProfileJob(
        setup=setup_from_args(ns), backend=ns.backend, gpu=ns.gpu, output=ns.output, table=ns.csv, file=ns.file,
        threads=ns.threads, iters=ns.iters if ns.iters is not None else int(ns.epoch_num or 10), warmup=ns.warmup,
        device=ns.device, gemm_efficiency=ns.gemm_efficiency, attention_efficiency=ns.attention_efficiency,
        memory_efficiency=ns.memory_efficiency, launch_us=ns.launch_us)


def run(job: ProfileJob) -> None:
    from . import backends

    efficiency = {name: getattr(job, name) for name in
                  ("gemm_efficiency", "attention_efficiency", "memory_efficiency", "launch_us")}
    result = backends.make(
        as_commanded(job.setup), job.backend, job.gpu, file=job.file, train_iter=job.iters, efficiency=efficiency,
        device=job.device, warmup=job.warmup, threads=job.threads,
    )
    backends.write(result, job.output, job.table)
    if result.note:
        print(f"commsweep profile: {result.note}", file=sys.stderr)


def cmd_profile(ns: argparse.Namespace) -> None:
    if ns.list_gpus:
        from ..base.files import emit
        from . import gpus

        emit(gpus.table(), None)
        return
    run(from_args(ns))


def add_parser(sub) -> None:
    from ..base.flags import add_flag
    from ..setup.arguments import add_training_arguments

    p = sub.add_parser(
        "profile", allow_abbrev=False,
        help="write the AIOB compute-time profile of one setup (AICB's format)",
        description="Write the AIOB compute-time file (AICB's --comp_filepath format) of one rank's shard: "
                    "modelled (roofline), measured with PyTorch (torch) or a user's file, validated (file). "
                    "Takes AICB's model arguments.",
    )
    add_training_arguments(p)
    p.add_argument("--backend", choices=("roofline", "torch", "file"), default="roofline")
    p.add_argument("--gpu", default="H100-SXM",
                   help="GPU type: the roofline's peaks (see --list-gpus); a label for torch and file")
    p.add_argument("--file", help="file backend: the AIOB file (e.g. from AICB) to validate and copy")
    p.add_argument("--iters", type=int, default=None,
                   help="timed iterations (torch) and the file's train_iter (default: --epoch_num, else 10)")
    p.add_argument("--warmup", type=int, default=3, help="torch: untimed runs of each operator first")
    p.add_argument("--device", default="auto", help="torch: auto (CUDA when present), cpu, cuda or cuda:N")
    p.add_argument("--threads", type=int, default=None, help="torch: CPU threads")
    for name in ("gemm-efficiency", "attention-efficiency", "memory-efficiency"):
        add_flag(p, f"--{name}", type=float, default=None, help=f"roofline: override the GPU's {name.replace('-', ' ')}")
    add_flag(p, "--launch-us", type=float, default=None, help="roofline: override the per-kernel launch overhead")
    add_flag(p, "--list-gpus", action="store_true", help="print the GPU table with its sources and exit")
    p.add_argument("-o", "--output", help="the AIOB file (default: stdout)")
    p.add_argument("--csv", help="also write the tidy CSV of the same numbers here")
    p.set_defaults(func=cmd_profile)


def check_external(config: Mapping, points: Sequence) -> dict:
    """``aiob.file`` with the file backend: every profile's file, there and checksummed
    (profile key -> External), or one ConfigError listing the missing ones."""
    from ..base.errors import ConfigError
    from ..base.external import External, file_digest
    from .backends import user_file

    aiob = config.get("aiob") or {}
    profiles = sorted({p.profile_key for p in points if p.aiob})
    if not (profiles and aiob.get("backend") == "file" and aiob.get("file")):
        return {}
    files = {key: user_file(aiob["file"], key) for key in profiles}
    missing = [path for path in files.values() if not Path(path).is_file()]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ConfigError(f"{len(missing)} of {len(files)} AIOB file(s) not found: {shown} "
                          f"({{profile}} in {aiob['file']!r} stands for the profile key of "
                          "results/sweep.csv)", key="aiob.file")
    return {"aiob.file": {key: External("aiob.file", path, file_digest(path)) for key, path in files.items()}}


def resources(config: Mapping, workload_mb: int) -> Resources:
    """A torch profile: 16 GB, half an hour, and a GPU where torch runs on CUDA, else two threads."""
    if config["aiob"]["backend"] != "torch":
        return Resources()
    gpu = torch_on_gpu()
    return Resources(memory_mb=16384, runtime=30, threads=1 if gpu else 2, gpu=1 if gpu else 0)


def input_files(config: Mapping, point) -> tuple[str, ...]:
    """Files from outside results/ a point's profile reads: the user's AIOB file (file backend)."""
    from .backends import user_file

    return (user_file(config["aiob"]["file"], point.profile_key),) if config["aiob"]["backend"] == "file" else ()


PROFILE = Stage(
    name="profile", summary="the AIOB compute-time profile of a model shard (AICB's --comp_filepath format)",
    per="profile", inputs=(), outputs=("profile", "profile_table"), kinds=(None, None), upstream=(),
    external=("aiob.file",), add_parser=add_parser, from_args=from_args, job=job, argv=argv, run=run,
    applies=lambda point, audited: point.aiob,
    files=lambda layout, key, config: (layout.profile(config["aiob"]["backend"], key),
                                       layout.profile_table(config["aiob"]["backend"], key)),
    status=lambda layout, key, config: layout.profile_status(config["aiob"]["backend"], key),
    check_external=check_external,
    reads=lambda point, config: ("aiob.file",) if config["aiob"]["backend"] == "file" else (),
    resources=resources, input_files=input_files, rule=lambda config: f"profile_{config['aiob']['backend']}",
)
