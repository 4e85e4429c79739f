"""The AIOB stage: one profile per rank shape, from one of three backends.

* ``roofline`` (default): modelled from FLOPs and bytes on a GPU of ``gpus.GPUS``;
* ``torch``: measured with PyTorch on the device at hand (``torch_bench``);
* ``file``: a user's AIOB file (e.g. from AICB on their GPUs), validated and copied.

Each writes the AIOB file (AICB's ``--comp_filepath`` format) and a tidy CSV of the same
numbers, with the FLOPs and bytes behind each section and the roofline's estimate for the
named GPU beside them (left empty for a GPU the table does not know).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from ..base.errors import ConfigError, InputError
from ..base.files import read_text, write_bytes, write_text
from ..setup.training import TrainingSetup
from . import gpus, roofline
from . import profile_file as pf

BACKENDS = ("roofline", "torch", "file")

_TIME = re.compile(r"\s+(time_gpu_(?:max|min|avg)):\s*(\S+)")

# AICB's profiler without --use_flash_attn times the core attention in three parts instead.
_UNFUSED_ATTENTION = ("atten_core_qk", "atten_core_softmax", "atten_core_contex")


@dataclass(frozen=True)
class Result:
    """A profile made by one backend, ready to be written."""

    profile: pf.AiobProfile
    csv: str
    raw: bytes | None = None  # the file backend's input, copied byte for byte
    note: str = ""  # one line for the user (device used, checks made)


def read_user_file(path: str | Path) -> pf.AiobProfile:
    """A user's AIOB file, checked for what the workload generators need.

    Every standard section must be there, except that AICB's unfused attention
    (``atten_core_qk``, ``atten_core_softmax``, ``atten_core_contex``) may stand in for
    ``atten_flash``; a file with AICB's DeepSeek MLA sections needs those in place of the
    three attention ones. Sections beyond these are kept.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file (aiob.file / --file)", file=path)
    text = read_text(path)
    profile = pf.parse(text, source=path)
    # AICB's reader (utils.extract_averages) takes r"\d+(\.\d+)?" after the key: 1e3 would be 1 to it.
    for number, line in enumerate(text.splitlines(), start=1):
        value = _TIME.match(line)
        if value and not re.fullmatch(r"\d+(\.\d+)?", value.group(2)):
            raise InputError(
                f"AICB reads {value.group(2)!r} as {re.match(r'[0-9.]*', value.group(2)).group(0) or 'nothing'}; "
                "write times as plain decimals",
                file=path, line=number, field=value.group(1),
            )
    present = set(profile.names())
    if set(pf.MLA_SECTIONS) & present:  # AICB's DeepSeek AIOB model's file
        required = list(pf.DEEPSEEK_SECTIONS)
    else:
        required = [s for s in pf.STANDARD_SECTIONS if s != "atten_flash"]
        if "atten_flash" not in present and not set(_UNFUSED_ATTENTION) <= present:
            required.append("atten_flash")
    missing = [s for s in required if s not in present]
    if missing:
        raise InputError(
            f"missing sections: {', '.join(missing)} (an AIOB file from AICB's Megatron profiler has "
            f"{', '.join(pf.STANDARD_SECTIONS)}; from its DeepSeek profiler {', '.join(pf.DEEPSEEK_SECTIONS)})",
            file=path, field=missing[0],
        )
    return profile


def _estimates(setup: TrainingSetup, gpu_name: str, overrides: dict) -> list[roofline.SectionEstimate] | None:
    try:
        spec = gpus.gpu(gpu_name)
    except ConfigError:
        return None
    return roofline.estimate(setup, spec.with_overrides(**overrides))


def make(
    setup: TrainingSetup,
    backend: str,
    gpu: str,
    *,
    file: str | Path | None = None,
    train_iter: int = 10,
    efficiency: dict[str, float | None] | None = None,
    device: str = "auto",
    warmup: int = 3,
    threads: int | None = None,
) -> Result:
    """The profile of ``setup``'s rank from ``backend``, labelled with the GPU name ``gpu``."""
    overrides = dict(efficiency or {})
    roofline.check_shard(setup)
    if backend == "roofline":
        spec = gpus.gpu(gpu).with_overrides(**overrides)
        if train_iter < 1:
            raise ConfigError(f"must be >= 1, got {train_iter}", key="--iters")
        profile, estimates = roofline.profile(setup, spec, train_iter=train_iter)
        return Result(profile, roofline.tidy_csv(profile, backend=backend, gpu=spec.name, estimates=estimates))
    if backend == "torch":
        from . import torch_bench

        if setup.model.is_mla:
            raise ConfigError("the torch backend times Megatron's attention, not multi-latent attention; "
                              "use the roofline or AICB's own DeepSeek AIOB file", key="--backend")

        measured = torch_bench.run(setup, device=device, warmup=warmup, iters=train_iter, threads=threads)
        note = f"measured on {measured.device} with torch {measured.torch_version}"
        if measured.device.startswith("cuda") and gpu.lower().split("-")[0] not in measured.device.lower():
            note += f"; note: the profile is labelled {gpu!r}"
        csv = roofline.tidy_csv(measured.profile, backend=backend, gpu=gpu, estimates=_estimates(setup, gpu, overrides))
        return Result(measured.profile, csv, note=note)
    if backend == "file":
        if file is None:
            raise ConfigError("the file backend needs an AIOB file (--file, or aiob.file in the config)", key="--file")
        profile = read_user_file(file)
        csv = roofline.tidy_csv(profile, backend=backend, gpu=gpu, estimates=_estimates(setup, gpu, overrides))
        return Result(profile, csv, raw=Path(file).read_bytes(), note=f"validated {file}")
    raise ConfigError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}", key="--backend")


def write(result: Result, output: str | Path | None, csv_path: str | Path | None = None) -> None:
    """Write the AIOB file (stdout without ``output``) and the CSV, each atomically."""
    if output is None or str(output) == "-":
        sys.stdout.write(result.raw.decode("utf-8") if result.raw is not None else pf.render(result.profile))
    elif result.raw is not None:
        write_bytes(output, result.raw)
    else:
        pf.write(result.profile, output)
    if csv_path is not None:
        write_text(csv_path, result.csv)


def check_aiob_config(aiob: dict) -> None:
    """The config's ``aiob:`` block, checked before any job runs: the roofline needs a GPU
    of the table (torch and file only use the name as a label); file needs ``aiob.file``."""
    backend = aiob.get("backend", "roofline")
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}", key="aiob.backend")
    if backend == "roofline":
        gpus.gpu(str(aiob.get("gpu", "H100-SXM")), key="aiob.gpu")
    if backend == "file" and not aiob.get("file"):
        raise ConfigError("the file backend needs the path of an AIOB file", key="aiob.file")


def profile_setup(setup: TrainingSetup) -> TrainingSetup:
    """The setup a profile is made for, stripped of what does not change it (DP, the global
    batch, recompute, context parallelism: a profile times the whole sequence, as AICB's does):
    points that share a profile key give the same arguments, so adding a world size to a sweep
    does not remake its profiles."""
    world = setup.tp * setup.pp * setup.ep
    return replace(setup, world_size=world, global_batch=setup.micro_batch * setup.ep, recompute=False,
                   cp=1, cp_comm_type="p2p", hierarchical_cp=None)


def user_file(pattern: str, profile_key: str) -> str:
    """The user's AIOB file of a profile: ``{profile}`` in ``aiob.file`` becomes the key."""
    return pattern.replace("{profile}", profile_key)
