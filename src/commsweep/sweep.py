"""From a sweep config to sweep points: expansion, naming and validation.

Every combination of the ``sweep:`` axes is one point. Invalid combinations are found
here, before any job runs, each named with the rule it breaks; with ``skip_invalid``
they are dropped and listed instead of failing the sweep.

Outputs are shared where the work is: points that differ only in the network share a
workload (``workload_key``), and points with the same model shard and batch share an
AIOB profile (``profile_key``).
"""

from __future__ import annotations

import csv
import io
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .models import ModelSpec, model_from_dict, resolve_model
from .training import TrainingSetup

AXES = (
    "model", "world_size", "tp", "pp", "ep", "sp", "aiob", "schedule",
    "micro_batch", "global_batch", "seq_length", "recompute", "network",
)
# Axes that name points and fill table columns only where a sweep varies them, so a sweep
# that leaves them out keeps its point keys and tables. ``tp_overlap``: SimAI's TP overlap
# ratio (-tp_o); without the axis every point takes ``simulator.overlap.tp``. ``simulation``:
# how a point is simulated, ``analytical`` (``simulator.backend``) or ``packet`` (SimAI's NS-3
# simulator, ``simulator.ns3``); a packet-level point's key ends in ``_packet``, an analytical
# point's key is that of a sweep without the axis.
OPTIONAL_AXES = ("tp_overlap", "simulation")
SIMULATIONS = ("analytical", "packet")
SCHEDULES = ("aicb", "megatron")
NETWORK_FIELDS = ("gpus_per_server", "nics_per_server", "nvlink_gbps", "nic_gbps")
TABLE_COLUMNS = (
    "point", "workload", "profile", *AXES, "dp", "ga", *NETWORK_FIELDS,
)
# The point's peak memory per GPU and whether it fits the sweep's GPU (``memory.py``);
# in sweep.csv and summary.csv after the point's columns.
MEMORY_COLUMNS = ("memory_gib", "fits")


@dataclass(frozen=True)
class Network:
    name: str
    gpus_per_server: int
    nics_per_server: int
    nvlink_gbps: float
    nic_gbps: float


@dataclass(frozen=True)
class Point:
    """One sweep point: a training setup, how its workload is made, and a network."""

    model: str
    world_size: int
    tp: int
    pp: int
    ep: int
    sp: bool
    aiob: bool
    schedule: str
    micro_batch: int
    global_batch: int
    seq_length: int
    recompute: bool
    network: str
    setup: TrainingSetup = field(compare=False, repr=False)
    net: Network = field(compare=False, repr=False)
    gpu: str = field(default="H100-SXM", compare=False, repr=False)
    # SimAI's TP overlap ratio when the sweep has a tp_overlap axis (None: no such axis).
    tp_overlap: float | None = None
    # analytical or packet when the sweep has a simulation axis (None: analytical, no axis).
    simulation: str | None = None

    @property
    def packet(self) -> bool:
        """Whether SimAI's packet-level simulator (NS-3) simulates this point."""
        return self.simulation == "packet"

    @property
    def setup_key(self) -> str:
        key = (
            f"{self.model}_ws{self.world_size}_tp{self.tp}_pp{self.pp}_ep{self.ep}_sp{int(self.sp)}"
            f"_mb{self.micro_batch}_gb{self.global_batch}_seq{self.seq_length}"
        )
        return key + ("_rc" if self.recompute else "")

    @property
    def workload_key(self) -> str:
        return f"{self.setup_key}_{self.schedule}" + ("_aiob" if self.aiob else "")

    @property
    def point_key(self) -> str:
        key = f"{self.workload_key}__{self.network}"
        key = key if self.tp_overlap is None else key + f"_tpo{self.tp_overlap:g}"
        return key + "_packet" if self.packet else key

    @property
    def analytical_key(self) -> str:
        """The key of the same point simulated analytically (its own key when it is)."""
        return self.point_key.removesuffix("_packet") if self.packet else self.point_key

    @property
    def profile_key(self) -> str:
        """The AIOB profile depends on the rank's model shard and batch, not on DP. PP enters
        only through ``param_time`` (AICB sizes it by the stage's layers), so it is in the key
        only when pp > 1."""
        key = f"{self.model}_{self.gpu}_tp{self.tp}_ep{self.ep}_sp{int(self.sp)}_mb{self.micro_batch}_seq{self.seq_length}"
        if self.pp > 1:
            key += f"_pp{self.pp}"
        return key + ("_rc" if self.recompute else "")

    def describe(self) -> str:
        return ", ".join(f"{axis}={getattr(self, axis)}" for axis in AXES)

    def memory(self) -> dict[str, Any]:
        """The ``MEMORY_COLUMNS``: GiB per GPU and ``fits`` against the sweep's GPU (empty
        where the model does not say: MoE models, a GPU label the table does not know)."""
        verdict = memory_verdict(self.setup, self.gpu)
        if verdict is None:
            return {"memory_gib": "", "fits": ""}
        gib, fits = verdict
        return {"memory_gib": f"{gib:.1f}", "fits": "" if fits is None else fits}

    def row(self) -> dict[str, Any]:
        """The point as a flat record for tables (the columns of ``TABLE_COLUMNS``)."""
        record: dict[str, Any] = {
            "point": self.point_key, "workload": self.workload_key,
            "profile": self.profile_key if self.aiob else "",
        }
        record.update({axis: getattr(self, axis) for axis in AXES})
        record.update(dp=self.setup.dp, ga=self.setup.num_microbatches)
        record.update({f: getattr(self.net, f) for f in NETWORK_FIELDS})
        if self.tp_overlap is not None:
            record["tp_overlap"] = self.tp_overlap
        if self.simulation is not None:
            record["simulation"] = self.simulation
        return record


@dataclass(frozen=True)
class Invalid:
    """A combination of axis values that cannot run, and why."""

    values: dict[str, Any]
    reasons: tuple[str, ...]

    def describe(self) -> str:
        point = ", ".join(f"{k}={v}" for k, v in self.values.items())
        return f"[{point}]: " + "; ".join(self.reasons)


def _axis(config: dict, name: str) -> list:
    values = config.get("sweep", {}).get(name)
    if not isinstance(values, list) or not values:
        raise ConfigError("must be a non-empty list", key=f"sweep.{name}")
    seen: list = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def networks_from_config(config: dict) -> dict[str, Network]:
    out = {}
    for name, values in (config.get("networks") or {}).items():
        if not isinstance(name, str):
            raise ConfigError(f"network names must be strings, got {name!r}", key=f"networks.{name}")
        if not isinstance(values, dict):
            raise ConfigError("must be a mapping of " + ", ".join(NETWORK_FIELDS), key=f"networks.{name}")
        for f in NETWORK_FIELDS:
            if f not in values:
                raise ConfigError("missing", key=f"networks.{name}.{f}")
            v = values[f]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise ConfigError(f"must be a positive number, got {v!r}", key=f"networks.{name}.{f}")
        for f in ("gpus_per_server", "nics_per_server"):
            if not isinstance(values[f], int):
                raise ConfigError(f"must be an integer, got {values[f]!r}", key=f"networks.{name}.{f}")
        out[name] = Network(name=name, **{f: values[f] for f in NETWORK_FIELDS})
    return out


def custom_models(config: dict) -> dict[str, ModelSpec]:
    models = config.get("models") or {}
    if not isinstance(models, dict):
        raise ConfigError("must be a mapping from model name to fields", key="models")
    out = {}
    for name, values in models.items():
        if not isinstance(name, str):
            raise ConfigError(f"model names must be strings, got {name!r}", key=f"models.{name}")
        if not isinstance(values, dict):
            raise ConfigError("must be a mapping of model fields", key=f"models.{name}")
        out[name] = model_from_dict(name, values)
    return out


def memory_verdict(setup: TrainingSetup, gpu: str) -> tuple[float, bool | None] | None:
    """(GiB per GPU, fits) of a sweep point, as megatron-core trains it (distributed
    optimizer, fp32 gradients, flash attention, dropout); ``fits`` None for a GPU the table
    does not know."""
    from . import memory
    from .aiob import gpus
    from .workload.megatron import expert_parameters, local_parameters, stage_layers

    stages = {0, setup.pp - 1}
    params = {stage: local_parameters(setup, stage) for stage in stages}
    moe = {}
    if setup.model.is_moe:
        moe = dict(expert_parameters={stage: expert_parameters(setup, stage) for stage in stages},
                   moe_layers={stage: sum(map(setup.model.is_moe_layer, stage_layers(setup, stage)))
                               for stage in stages})
    mem = memory.estimate(setup, params, flash_attention=True, dropout=True, **moe)
    known = {name.lower(): spec for name, spec in gpus.GPUS.items()}
    spec = known.get(gpu.lower())
    return mem.total_gib, (None if spec is None else mem.fits(spec.memory_gib))


def memory_problem(setup: TrainingSetup, gpu: str) -> str | None:
    """Why a point does not fit its GPU (None when it fits or the model cannot say)."""
    verdict = memory_verdict(setup, gpu)
    if verdict is None or verdict[1] is not False:
        return None
    from .aiob import gpus
    from .memory import RESERVE_GIB

    return (f"needs {verdict[0]:.1f} GiB per GPU; the {gpu} has {gpus.gpu(gpu).memory_gib:g} GiB "
            f"({RESERVE_GIB:g} GiB kept free)")


def megatron_version(config: dict) -> str:
    """``generator.megatron_version``: the megatron-core release the megatron schedule and
    the audit follow (checked: a ``ConfigError`` naming the key for one they do not know)."""
    from .workload import megatron_releases

    given = (config.get("generator") or {}).get("megatron_version")
    return megatron_releases.release(given, key="generator.megatron_version").version


def schedule_problems(setup: TrainingSetup, schedule: str, megatron_version: str | None = None, *,
                      aiob: bool = False) -> list[str]:
    """Why a schedule cannot generate this setup's workload (empty when it can); the
    megatron schedule that of megatron-core ``megatron_version`` (default: the newest traced),
    the aicb schedule on AICB's AIOB path when ``aiob`` (its DeepSeek frame's crashes depend on it)."""
    if schedule == "megatron":
        from .workload import megatron

        return megatron.unsupported(setup, megatron_version)
    if schedule == "aicb":
        from .workload.aicb_deepseek import frame_module

        return frame_module(setup).unsupported(setup, aiob=aiob)
    return [f"unknown schedule {schedule!r}; expected one of {', '.join(SCHEDULES)}"]


def tp_overlap_axis(config: dict) -> list[float | None]:
    """The TP overlap ratios of the sweep: ``[None]`` (no axis: ``simulator.overlap.tp``
    applies, keys and tables stay as they are) unless ``sweep.tp_overlap`` lists a value
    other than ``simulator.overlap.tp``."""
    values = (config.get("sweep") or {}).get("tp_overlap")
    if values is None:
        return [None]
    if not isinstance(values, list) or not values:
        raise ConfigError("must be a non-empty list", key="sweep.tp_overlap")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
            raise ConfigError(f"values must be numbers from 0 to 1, got {v!r}", key="sweep.tp_overlap")
    default = ((config.get("simulator") or {}).get("overlap") or {}).get("tp", 0)
    unique = list(dict.fromkeys(float(v) for v in values))
    return [None] if unique == [float(default)] else unique


def simulation_axis(config: dict) -> list[str | None]:
    """How the sweep's points are simulated: ``[None]`` (no axis, or only ``analytical``:
    keys and tables as without it) unless ``sweep.simulation`` lists ``packet``."""
    values = (config.get("sweep") or {}).get("simulation")
    if values is None:
        return [None]
    if not isinstance(values, list) or not values:
        raise ConfigError("must be a non-empty list", key="sweep.simulation")
    for v in values:
        if v not in SIMULATIONS:
            raise ConfigError(f"values must be {' or '.join(SIMULATIONS)}, got {v!r}", key="sweep.simulation")
    unique = list(dict.fromkeys(values))
    if unique == ["analytical"]:
        return [None]
    from .simulate.ns3.runner import configured_root

    if not configured_root(config):
        raise ConfigError("packet-level points need SimAI_simulator: set simulator.ns3.root (or SIMAI_ROOT) to a "
                          "SimAI checkout built with './scripts/build.sh -c ns3', or to the binary",
                          key="sweep.simulation")
    return unique


def table_columns(points: list[dict[str, Any]] | list[Point]) -> tuple[str, ...]:
    """The points table's columns for these points: ``TABLE_COLUMNS``, then the optional
    axes the sweep has (points as ``Point`` or as rows of the table)."""
    rows = [p.row() if isinstance(p, Point) else p for p in points[:1]]
    return (*TABLE_COLUMNS, *(a for a in OPTIONAL_AXES if rows and a in rows[0]))


def expand(config: dict) -> tuple[list[Point], list[Invalid]]:
    """All points of the sweep, valid first, then the invalid combinations with reasons."""
    axes = {name: _axis(config, name) for name in AXES}
    nets = networks_from_config(config)
    models = custom_models(config)
    aiob = config.get("aiob") or {}
    gpu = str(aiob.get("gpu", "H100-SXM"))
    # With skip_invalid (or skip_unfit), a point that does not fit its GPU's memory is dropped
    # like an invalid one; without, it stays, marked fits=False in sweep.csv.
    unfit = config.get("skip_unfit")
    skip_unfit = bool(config.get("skip_invalid", False) if unfit is None else unfit)
    for name in axes["network"]:
        if name not in nets:
            raise ConfigError(f"unknown network {name!r}; defined: {', '.join(nets) or 'none'}", key="sweep.network")
    resolved = {name: resolve_model(name, models) for name in axes["model"]}
    if True in axes["aiob"]:
        from .aiob.backends import check_aiob_config

        check_aiob_config(aiob)
    for name in ("world_size", "tp", "pp", "ep", "micro_batch", "global_batch", "seq_length"):
        for v in axes[name]:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"values must be positive integers, got {v!r}", key=f"sweep.{name}")
    for name in ("sp", "aiob", "recompute"):
        for v in axes[name]:
            if not isinstance(v, bool):
                raise ConfigError(f"values must be true or false, got {v!r}", key=f"sweep.{name}")

    overlaps = tp_overlap_axis(config)
    simulations = simulation_axis(config)
    if "packet" in simulations and overlaps != [None]:
        raise ConfigError("SimAI's packet-level simulator has no overlap ratios: a sweep with packet-level points "
                          "cannot have a tp_overlap axis", key="sweep.simulation")
    version = megatron_version(config)
    points: list[Point] = []
    invalid: list[Invalid] = []
    for combo in itertools.product(*(axes[a] for a in AXES)):
        values = dict(zip(AXES, combo))
        setup = TrainingSetup(
            model=resolved[values["model"]],
            world_size=values["world_size"], tp=values["tp"], pp=values["pp"], ep=values["ep"],
            sp=values["sp"], micro_batch=values["micro_batch"], global_batch=values["global_batch"],
            seq_length=values["seq_length"], recompute=values["recompute"],
        )
        reasons = setup.problems()
        if not reasons:
            reasons += schedule_problems(setup, values["schedule"], version, aiob=values["aiob"])
        if not reasons and skip_unfit:
            reasons += [r for r in (memory_problem(setup, gpu),) if r]
        if reasons:
            invalid.append(Invalid(values=values, reasons=tuple(reasons)))
        else:
            points += [Point(**values, setup=setup, net=nets[values["network"]], gpu=gpu, tp_overlap=tpo,
                             simulation=sim) for tpo in overlaps for sim in simulations]
    return points, invalid


def points_from_config(config: dict) -> tuple[list[Point], list[Invalid]]:
    """Expand and enforce validity: invalid points fail the sweep unless ``skip_invalid``,
    and a point over the limits (``limits.check``: workload rows, memory, GPUs) fails it."""
    points, invalid = expand(config)
    if invalid and not config.get("skip_invalid", False):
        listed = "\n".join(f"  - {bad.describe()}" for bad in invalid)
        raise ConfigError(
            f"{len(invalid)} invalid sweep point(s); fix the axes or set skip_invalid: true\n{listed}",
            key="sweep",
        )
    if not points:  # skip_invalid (or skip_unfit) dropped every combination
        raise ConfigError(f"no valid sweep point: all {len(invalid)} combination(s) dropped (skip_invalid, skip_unfit), e.g. "
                          f"{invalid[0].describe()}", key="sweep")
    from . import limits

    limits.check(points, config.get("limits"))
    return points, invalid


def table_csv(points: list[Point], invalid: list[Invalid] = ()) -> str:
    """The sweep as CSV: one row per point, plus skipped combinations with ``status``."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[*table_columns(points), *MEMORY_COLUMNS, "status"], lineterminator="\n")
    writer.writeheader()
    for p in points:
        writer.writerow({**p.row(), **p.memory(), "status": "ok"})
    for bad in invalid:
        writer.writerow({**bad.values, "status": "skipped: " + "; ".join(bad.reasons)})
    return buf.getvalue()


def load_config(path: str | Path) -> dict:
    """Read a sweep config YAML, validate it against the schema and fill its defaults."""
    from .configfile import load

    return load([path])
