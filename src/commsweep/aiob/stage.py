"""The profile stage (``base.stage.Stage``): ``commsweep profile``, one AIOB compute-time
profile per model shard (a point's ``profile_key``). ``ProfileJob``'s fields are the
command's flags (``base.jobfields``)."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..base.jobfields import add_arguments, block, flag
from ..base.stage import Resources, Stage
from ..setup.arguments import add_training_arguments, as_commanded, setup_from_args, to_commsweep_argv
from ..setup.training import TrainingSetup

EFFICIENCIES = ("gemm_efficiency", "attention_efficiency", "memory_efficiency", "launch_us")


def _iters(ns: argparse.Namespace) -> int:
    """--iters, else AICB's --epoch_num, else 10."""
    return ns.iters if ns.iters is not None else int(ns.epoch_num or 10)


def _efficiency(name: str):
    help = ("roofline: override the per-kernel launch overhead" if name == "launch_us" else
            f"roofline: override the GPU's {name.replace('_', ' ')}")
    return flag(f"--{name.replace('_', '-')}", type=float, default=None, equals=True, text=repr, help=help)


@dataclass(frozen=True, kw_only=True)
class ProfileJob:
    """One profile, as ``commsweep profile``'s flags (in the order its command line writes
    them): the backend and its options, the shard's setup, the GPU and the two files it writes."""

    command: ClassVar[str] = "profile"

    backend: str = flag("--backend", choices=("roofline", "torch", "file"), default="roofline", when="always")
    threads: int | None = flag("--threads", type=int, default=None, help="torch: CPU threads")
    file: str | None = flag("--file", default=None, help="file backend: the AIOB file (e.g. from AICB) to validate "
                                                         "and copy")
    setup: TrainingSetup = block(add=add_training_arguments, write=to_commsweep_argv, read=setup_from_args)
    # The file's train_iter and torch's timed runs: a point's command line says --epoch_num=1.
    iters: int = flag("--iters", type=int, default=1, parse_default=None, when="changed", read=_iters,
                      help="timed iterations (torch) and the file's train_iter (default: --epoch_num, else 10)")
    warmup: int = flag("--warmup", type=int, default=3, when="changed", help="torch: untimed runs of each operator first")
    device: str = flag("--device", default="auto", when="changed",
                       help="torch: auto (CUDA when present), cpu, cuda or cuda:N")
    gemm_efficiency: float | None = _efficiency("gemm_efficiency")
    attention_efficiency: float | None = _efficiency("attention_efficiency")
    memory_efficiency: float | None = _efficiency("memory_efficiency")
    launch_us: float | None = _efficiency("launch_us")
    gpu: str = flag("--gpu", default="H100-SXM", when="always",
                    help="GPU type: the roofline's peaks (see --list-gpus); a label for torch and file")
    output: str | None = flag("-o", "--output", default=None, help="the AIOB file (default: stdout)")
    table: str | None = flag("--csv", dest="table", metavar="CSV", default=None, help="also write the tidy CSV of the same numbers "
                                                                       "here")


def torch_on_gpu() -> bool:
    """Whether the torch backend runs on CUDA here (then a batch with a torch profile asks for a GPU)."""
    return shutil.which("nvidia-smi") is not None


def cmd_profile(ns: argparse.Namespace) -> None:
    if ns.list_gpus:
        from ..base.files import emit
        from . import gpus

        emit(gpus.table(), None)
        return
    PROFILE.run(PROFILE.from_args(ns))


class ProfileStage(Stage[ProfileJob]):
    name = "profile"
    command = "profile"
    summary = "the AIOB compute-time profile of a model shard (AICB's --comp_filepath format)"
    job_type = ProfileJob
    per = "profile"
    outputs = ("profile", "profile_table")
    kinds = (None, None)
    external = ("aiob.file",)

    def applies(self, point, audited: bool) -> bool:
        return point.aiob

    def rule(self, config: Mapping) -> str:
        return f"profile_{config['aiob']['backend']}"

    def files(self, layout, key: str, config: Mapping) -> tuple[str, ...]:
        backend = config["aiob"]["backend"]
        return layout.profile(backend, key), layout.profile_table(backend, key)

    def status(self, layout, key: str, config: Mapping) -> str:
        return layout.profile_status(config["aiob"]["backend"], key)

    def job(self, point, config: Mapping, inputs: tuple, outputs: tuple) -> ProfileJob:
        """The profile of a point's shard, as ``aiob:`` in the config asks (``backends.profile_setup``):
        the AIOB file and its CSV (``outputs``)."""
        from .backends import profile_setup, user_file

        output, table = outputs
        backend = config["aiob"]["backend"]
        return ProfileJob(
            setup=profile_setup(point.setup), backend=backend, gpu=point.gpu, output=output, table=table,
            file=user_file(config["aiob"]["file"], point.profile_key) if backend == "file" else None,
            threads=(1 if torch_on_gpu() else 2) if backend == "torch" else None)

    def run(self, job: ProfileJob) -> None:
        from . import backends

        result = backends.make(
            as_commanded(job.setup), job.backend, job.gpu, file=job.file, train_iter=job.iters,
            efficiency={name: getattr(job, name) for name in EFFICIENCIES}, device=job.device, warmup=job.warmup,
            threads=job.threads,
        )
        backends.write(result, job.output, job.table)
        if result.note:
            print(f"commsweep profile: {result.note}", file=sys.stderr)

    def add_parser(self, sub) -> None:
        from ..base.flags import add_flag

        p = sub.add_parser(
            "profile", allow_abbrev=False,
            help="write the AIOB compute-time profile of one setup (AICB's format)",
            description="Write the AIOB compute-time file (AICB's --comp_filepath format) of one rank's shard: "
                        "modelled (roofline), measured with PyTorch (torch) or a user's file, validated (file). "
                        "Takes AICB's model arguments.",
        )
        add_arguments(p, ProfileJob)
        add_flag(p, "--list-gpus", action="store_true", help="print the GPU table with its sources and exit")
        p.set_defaults(func=cmd_profile)

    def check_external(self, config: Mapping, points: Sequence) -> dict:
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
            key_note = (f" ({{profile}} in {aiob['file']!r} stands for the profile key of results/sweep.csv)"
                        if "{profile}" in aiob["file"] else "")
            raise ConfigError(f"{len(missing)} of {len(files)} AIOB file(s) not found: {shown}{key_note}",
                              key="aiob.file")
        return {"aiob.file": {key: External("aiob.file", path, file_digest(path)) for key, path in files.items()}}

    def reads(self, point, config: Mapping) -> tuple[str, ...]:
        return ("aiob.file",) if config["aiob"]["backend"] == "file" else ()

    def resources(self, config: Mapping, workload_mb: int) -> Resources:
        """A torch profile: 16 GB, half an hour, and a GPU where torch runs on CUDA, else two threads."""
        if config["aiob"]["backend"] != "torch":
            return Resources()
        gpu = torch_on_gpu()
        return Resources(memory_mb=16384, runtime=30, threads=1 if gpu else 2, gpu=1 if gpu else 0)

    def input_files(self, config: Mapping, point) -> tuple[str, ...]:
        """Files from outside results/ a point's profile reads: the user's AIOB file (file backend)."""
        from .backends import user_file

        return (user_file(config["aiob"]["file"], point.profile_key),) if config["aiob"]["backend"] == "file" else ()


PROFILE = ProfileStage()
