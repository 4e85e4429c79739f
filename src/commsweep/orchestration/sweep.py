"""From a sweep config to sweep points: expansion, naming and validation.

Every combination of the ``sweep:`` axes is one point. Invalid combinations are found
here, before any job runs, each named with the rule it breaks; with ``skip_invalid``
they are dropped and listed instead of failing the sweep. What a point is (its axes and
keys, ``Point``) is ``setup/points.py``; why a schedule cannot make a setup's workload is the
workload stage's (``workload.generate.schedule_problems``).
"""

from __future__ import annotations

import csv
import io
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.errors import ConfigError
from ..setup.configfile import networks_and_models
from ..setup.network import NETWORK_FIELDS  # noqa: F401 (a network's keys, beside the axes, for the sweep's readers)
from ..setup.points import AXES, BUCKET_AXES, CP_KEY_NAMES, FSDP_KEY_NAMES, SIMULATIONS, Invalid, Point, to_csv
from ..setup.training import TrainingSetup
from ..workload.generate import not_interleaved, schedule_problems


def _axis(config: dict, name: str) -> list:
    values = config.get("sweep", {}).get(name)
    if not isinstance(values, list) or not values:
        raise ConfigError("must be a non-empty list", key=f"sweep.{name}")
    seen: list = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def memory_verdict(setup: TrainingSetup, gpu: str) -> tuple[float, bool | None] | None:
    """(GiB per GPU, fits) of a sweep point, as megatron-core trains it (distributed
    optimizer, fp32 gradients, flash attention, dropout); ``fits`` None for a GPU the table
    does not know."""
    from ..aiob import gpus
    from ..setup import memory
    from ..workload.megatron import expert_parameters, local_parameters, stage_layers

    stages = set(range(setup.pp)) if setup.uneven_pipeline else {0, setup.pp - 1}  # the fullest stage among them
    params = {stage: local_parameters(setup, stage) for stage in stages}
    moe = {}
    if setup.model.is_moe:
        moe = dict(expert_parameters={stage: expert_parameters(setup, stage) for stage in stages},
                   moe_layers={stage: sum(map(setup.model.is_moe_layer, stage_layers(setup, stage)))
                               for stage in stages})
    if setup.fsdp != "none":  # the unit FSDP gathers and reduces whole
        from ..workload.megatron_fsdp import unit_parameters

        moe["fsdp_unit"] = unit_parameters(setup)
    mem = memory.estimate(setup, params, flash_attention=True, dropout=True, **moe)
    known = {name.lower(): spec for name, spec in gpus.GPUS.items()}
    spec = known.get(gpu.lower())
    return mem.total_gib, (None if spec is None else mem.fits(spec.memory_gib))


def memory_columns(point: Point) -> dict[str, Any]:
    """The ``MEMORY_COLUMNS`` of a point: GiB per GPU and ``fits`` against the sweep's GPU
    (empty where the model does not say: MoE models, a GPU label the table does not know)."""
    verdict = memory_verdict(point.setup, point.gpu)
    if verdict is None:
        return {"memory_gib": "", "fits": ""}
    gib, fits = verdict
    return {"memory_gib": f"{gib:.1f}", "fits": "" if fits is None else fits}


def memory_problem(setup: TrainingSetup, gpu: str) -> str | None:
    """Why a point does not fit its GPU (None when it fits or the model cannot say)."""
    verdict = memory_verdict(setup, gpu)
    if verdict is None or verdict[1] is not False:
        return None
    from ..aiob import gpus
    from ..setup.memory import RESERVE_GIB

    return (f"needs {verdict[0]:.1f} GiB per GPU; the {gpu} has {gpus.gpu(gpu).memory_gib:g} GiB "
            f"({RESERVE_GIB:g} GiB kept free)")


def megatron_version(config: dict) -> str:
    """``generator.megatron_version``: the megatron-core release the megatron schedule and
    the audit follow (checked: a ``ConfigError`` naming the key for one they do not know)."""
    from ..workload import megatron_releases

    given = (config.get("generator") or {}).get("megatron_version")
    return megatron_releases.release(given, key="generator.megatron_version").version


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
    from ..simulate.ns3.runner import configured_root

    if not configured_root(config):
        raise ConfigError("packet-level points need SimAI_simulator: set simulator.ns3.root (or SIMAI_ROOT) to a "
                          "SimAI checkout built with './scripts/build.sh -c ns3', or to the binary",
                          key="sweep.simulation")
    return unique


def cp_axis(config: dict) -> list[tuple[int, str] | None]:
    """The sweep's context parallelism: ``[None]`` (no axis: keys and tables as without it)
    unless ``sweep.cp`` lists a size above 1; else every (cp, comm type), CP 1 once (with
    p2p: at CP 1 there is no exchange, so the comm type means nothing)."""
    sweep = config.get("sweep") or {}
    sizes, kinds = sweep.get("cp", [1]), sweep.get("cp_comm_type", ["p2p"])
    for key, values in (("sweep.cp", sizes), ("sweep.cp_comm_type", kinds)):
        if not isinstance(values, list) or not values:
            raise ConfigError("must be a non-empty list", key=key)
    for v in sizes:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"values must be positive integers, got {v!r}", key="sweep.cp")
    for v in kinds:
        if v not in CP_KEY_NAMES:
            raise ConfigError(f"values must be one of {', '.join(CP_KEY_NAMES)}, got {v!r} (a2a+p2p needs "
                              "hierarchical sizes, which a sweep does not give)", key="sweep.cp_comm_type")
    sizes, kinds = list(dict.fromkeys(sizes)), list(dict.fromkeys(kinds))
    if sizes == [1]:
        return [None]
    return list(dict.fromkeys((c, k if c > 1 else "p2p") for c in sizes for k in kinds))


def buckets_axis(config: dict) -> list[tuple[bool, bool, int | None] | None]:
    """The sweep's distributed-optimizer buckets: ``[None]`` (no axis: keys and tables as
    without it) unless ``sweep.overlap_grad_reduce`` lists true; else every
    (overlap_grad_reduce, overlap_param_gather, ddp_bucket_size) megatron accepts, the point
    without overlap once (no param-gather overlap nor bucket size without it)."""
    sweep = config.get("sweep") or {}
    grads, params = sweep.get("overlap_grad_reduce", [False]), sweep.get("overlap_param_gather", [False])
    sizes = sweep.get("ddp_bucket_size")
    sizes = [None] if sizes is None else sizes if isinstance(sizes, list) else [sizes]
    for key, values in (("sweep.overlap_grad_reduce", grads), ("sweep.overlap_param_gather", params)):
        if not isinstance(values, list) or not values:
            raise ConfigError("must be a non-empty list", key=key)
        for v in values:
            if not isinstance(v, bool):
                raise ConfigError(f"values must be true or false, got {v!r}", key=key)
    for v in sizes:
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ConfigError(f"values must be positive integers (parameters) or null, got {v!r}",
                              key="sweep.ddp_bucket_size")
    if True not in grads:
        if True in params or sizes != [None]:
            raise ConfigError("needs overlap_grad_reduce: true among its values (without it megatron gathers "
                              "after the optimizer step, in one bucket)",
                              key="sweep.overlap_param_gather" if True in params else "sweep.ddp_bucket_size")
        return [None]
    return list(dict.fromkeys((g, p and g, s if g else None) for g in grads for p in params
                              for s in dict.fromkeys(sizes)))


def vpp_axis(config: dict) -> list[int | None]:
    """The sweep's interleaved schedule: ``[None]`` (no axis: keys and tables as without
    it) unless ``sweep.vpp`` lists a size above 1; else each size (1: not interleaved)."""
    values = (config.get("sweep") or {}).get("vpp") or [1]
    if not isinstance(values, list) or not values:
        raise ConfigError("must be a non-empty list", key="sweep.vpp")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"values must be positive integers, got {v!r}", key="sweep.vpp")
    unique = list(dict.fromkeys(values))
    return [None] if unique == [1] else unique


def layout_axis(config: dict) -> list[str | None]:
    """The sweep's uneven stages: ``[None]`` (no axis) unless ``sweep.pipeline_layout`` lists a
    layout string; else each layout, ``""`` for the even split (a ``null`` in the list)."""
    from ..setup import pipeline_layout

    values = (config.get("sweep") or {}).get("pipeline_layout")
    values = [None] if values is None else values
    if not isinstance(values, list) or not values:
        raise ConfigError("must be a non-empty list", key="sweep.pipeline_layout")
    for v in values:
        if v is not None and not isinstance(v, str):
            raise ConfigError(f"values must be layout strings or null, got {v!r}", key="sweep.pipeline_layout")
        try:
            if v is not None:
                pipeline_layout.stage_counts(v)
        except ValueError as err:
            raise ConfigError(str(err), key="sweep.pipeline_layout") from None
    unique = list(dict.fromkeys(v or "" for v in values))
    return [None] if unique == [""] else unique


def pipeline_setup(setup: TrainingSetup, vpp: int | None, layout: str | None) -> tuple[TrainingSetup, list[str]]:
    """``setup`` with the point's virtual pipeline and layout, and why megatron would refuse
    the layout on it (stages not pp x vpp, layers not the model's)."""
    from dataclasses import replace

    from ..setup import pipeline_layout

    v = vpp or 1
    if not layout:
        return replace(setup, virtual_pipeline=v), []
    try:
        counts = pipeline_layout.parse(layout, setup.pp, setup.model.num_layers)
    except ValueError as err:
        return replace(setup, virtual_pipeline=v), [f"pipeline_layout: {err}"]
    if vpp is not None and len(counts) != setup.pp * v:
        return replace(setup, virtual_pipeline=v), [
            f"pipeline_layout has {len(counts)} stages, pp*vpp is {setup.pp * v}"]
    return replace(setup, virtual_pipeline=len(counts) // setup.pp, stage_layout=counts), []


def cp_problems(setup: TrainingSetup, schedule: str) -> list[str]:
    """Why an AICB point at CP above 1 cannot run: AICB ignores CP and makes the workload of
    the same GPUs without it (DP takes the CP ranks), which must be a valid setup of its own."""
    if schedule != "aicb" or setup.cp == 1:
        return []
    from dataclasses import replace

    plain = replace(setup, cp=1, cp_comm_type="p2p", hierarchical_cp=None)
    return [f"AICB ignores CP, and without it {reason}" for reason in plain.problems()]


def fsdp_axis(config: dict) -> list[tuple[str, bool] | None]:
    """The sweep's FSDP and FP8 parameter gathers: ``[None]`` (no axis: keys and tables as
    without it) unless ``sweep.fsdp`` lists a setting other than ``none`` or
    ``sweep.fp8_param_gather`` lists true; else every (fsdp, fp8_param_gather)."""
    sweep = config.get("sweep") or {}
    kinds, fp8 = sweep.get("fsdp", ["none"]), sweep.get("fp8_param_gather", [False])
    for key, values in (("sweep.fsdp", kinds), ("sweep.fp8_param_gather", fp8)):
        if not isinstance(values, list) or not values:
            raise ConfigError("must be a non-empty list", key=key)
    for v in kinds:
        if v not in FSDP_KEY_NAMES:
            raise ConfigError(f"values must be one of {', '.join(FSDP_KEY_NAMES)}, got {v!r}", key="sweep.fsdp")
    for v in fp8:
        if not isinstance(v, bool):
            raise ConfigError(f"values must be true or false, got {v!r}", key="sweep.fp8_param_gather")
    kinds, fp8 = list(dict.fromkeys(kinds)), list(dict.fromkeys(fp8))
    if kinds == ["none"] and fp8 == [False]:
        return [None]
    return [(k, f) for k in kinds for f in fp8]


def _check_axis_values(axes: dict[str, list]) -> None:
    """A ``ConfigError`` naming the axis of a value that is not a positive integer or a boolean
    where the axis needs one."""
    for name in ("world_size", "tp", "pp", "ep", "micro_batch", "global_batch", "seq_length"):
        for v in axes[name]:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"values must be positive integers, got {v!r}", key=f"sweep.{name}")
    for name in ("sp", "aiob", "recompute"):
        for v in axes[name]:
            if not isinstance(v, bool):
                raise ConfigError(f"values must be true or false, got {v!r}", key=f"sweep.{name}")


def _point_setup(values: dict[str, Any], model, cp, fsdp, buckets, vpp, layout) -> tuple[TrainingSetup, list[str]]:
    """One combination's setup from the axes' ``values`` and the optional axes' settings (each
    None where the sweep has no such axis), with why megatron would refuse its pipeline layout;
    ``values`` gains the optional axes the sweep has, as the tables write them."""
    setup = TrainingSetup(
        model=model,
        world_size=values["world_size"], tp=values["tp"], pp=values["pp"], ep=values["ep"],
        sp=values["sp"], micro_batch=values["micro_batch"], global_batch=values["global_batch"],
        seq_length=values["seq_length"], recompute=values["recompute"],
        **({} if cp is None else dict(cp=cp[0], cp_comm_type=cp[1])),
        **({} if fsdp is None else dict(fsdp=fsdp[0], fp8_param_gather=fsdp[1])),
        **({} if buckets is None else dict(zip(BUCKET_AXES, buckets))),
    )
    if cp is not None:
        values.update(cp=cp[0], cp_comm_type=cp[1])
    if fsdp is not None:
        values.update(fsdp=fsdp[0], fp8_param_gather=fsdp[1])
    if buckets is not None:
        values.update(zip(BUCKET_AXES, (*buckets[:2], "" if buckets[2] is None else buckets[2])))
    values.update({k: v for k, v in (("vpp", vpp), ("pipeline_layout", layout)) if v is not None})
    return pipeline_setup(setup, vpp, layout)


def expand(config: dict) -> tuple[list[Point], list[Invalid]]:
    """All points of the sweep, valid first, then the invalid combinations with reasons."""
    axes = {name: _axis(config, name) for name in AXES}
    nets, resolved = networks_and_models(config)
    aiob = config.get("aiob") or {}
    gpu = str(aiob.get("gpu", "H100-SXM"))
    # With skip_invalid (or skip_unfit), a point that does not fit its GPU's memory is dropped
    # like an invalid one; without, it stays, marked fits=False in sweep.csv.
    unfit = config.get("skip_unfit")
    skip_unfit = bool(config.get("skip_invalid", False) if unfit is None else unfit)
    if True in axes["aiob"]:
        from ..aiob.backends import check_aiob_config

        check_aiob_config(aiob)
    _check_axis_values(axes)
    overlaps = tp_overlap_axis(config)
    simulations = simulation_axis(config)
    if "packet" in simulations and overlaps != [None]:
        raise ConfigError("SimAI's packet-level simulator has no overlap ratios: a sweep with packet-level points "
                          "cannot have a tp_overlap axis", key="sweep.simulation")
    version = megatron_version(config)
    points: list[Point] = []
    invalid: list[Invalid] = []
    combos = itertools.product(itertools.product(*(axes[a] for a in AXES)), cp_axis(config), fsdp_axis(config),
                               buckets_axis(config), vpp_axis(config), layout_axis(config))
    for combo, cp, fsdp, buckets, vpp, layout in combos:
        values: dict[str, Any] = dict(zip(AXES, combo))
        setup, refused = _point_setup(values, resolved[values["model"]], cp, fsdp, buckets, vpp, layout)
        reasons = refused or _problems(setup, values["schedule"], values["aiob"], version, gpu if skip_unfit else None)
        if reasons:
            invalid.append(Invalid(values=values, reasons=tuple(reasons)))
            continue
        for sim in simulations:
            refused = packet_refusals(setup) if sim == "packet" else []
            if refused:  # its analytical twin stays: only SimAI_simulator cannot run it
                invalid.append(Invalid(values={**values, "simulation": sim}, reasons=tuple(refused)))
                continue
            fields = {k: v for k, v in values.items() if k not in BUCKET_AXES}
            points += [Point(**fields, setup=setup, net=nets[values["network"]], gpu=gpu, tp_overlap=tpo,
                             simulation=sim, buckets=buckets) for tpo in overlaps]
    return points, invalid


def _problems(setup: TrainingSetup, schedule: str, aiob: bool, version: str, unfit_on: str | None) -> list[str]:
    """Why a point cannot run, the first rules it breaks: Megatron's, AICB's without CP, the
    schedule's (the megatron schedule's CP rules among them), then, when ``unfit_on`` names the
    sweep's GPU (``skip_unfit``), its memory."""
    reasons = setup.problems()
    if not reasons:
        reasons += cp_problems(setup, schedule)
    if not reasons:  # (AICB's point of an interleaved setup: AICB's plain 1F1B workload of it)
        reasons += schedule_problems(not_interleaved(setup) if schedule == "aicb" else setup, schedule, version,
                                     aiob=aiob)
    if not reasons and unfit_on is not None:
        reasons += [r for r in (memory_problem(setup, unfit_on),) if r]
    return reasons


def packet_refusals(setup: TrainingSetup) -> list[str]:
    """Why SimAI's packet-level simulator cannot run a point of ``setup``, known before its
    workload is made (``simulate.ns3.checks``): refused with the sweep's other invalid points,
    not when its job runs."""
    from ..simulate.ns3.checks import setup_refusals

    return [f"packet-level simulation: {reason}" for reason in setup_refusals(setup.pp)]


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
    """The sweep as CSV (``points.to_csv``): one row per point with its memory columns, plus
    skipped combinations with ``status``."""
    return to_csv(points, invalid, memory_columns)


def load_config(path: str | Path) -> dict:
    """Read a sweep config YAML, validate it against the schema and fill its defaults."""
    from ..setup.configfile import load

    return load([path])


def audited_points(points: list[Point], megatron_version: str | None = None) -> list[Point]:
    """The points that get an audit: those the Megatron schedule (of megatron-core
    ``megatron_version``) can describe. The audit is of the workload, not of its simulation:
    a packet-level point's workload is audited with its analytical twin, and a packet-level
    point gets an audit of its own only where the sweep has no such twin (``simulation:
    [packet]``)."""
    from ..workload import megatron

    analytical = {p.point_key for p in points if not p.packet}
    return [p for p in points if not (p.packet and p.analytical_key in analytical)
            and not megatron.unsupported(p.setup, megatron_version)]


def timeline_point(points: list[Point], audited: list[Point], config: dict, table: str = "results/sweep.csv") -> Point:
    """The point the timeline draws: ``analysis.timeline_point``, else an AICB point (AIOB
    path first) with TP > 1, which shows the audit beside a realistic iteration; a
    ``ConfigError`` for a key that is no point of the sweep (``table``: where its keys are)
    or one without an audit."""
    key = (config.get("analysis") or {}).get("timeline_point")
    if key is not None:
        by_key = {p.point_key: p for p in points}
        if key not in by_key:
            raise ConfigError(f"{key!r} is not a point of this sweep (see the point column of {table})",
                              key="analysis.timeline_point")
        if by_key[key] not in audited:
            raise ConfigError(f"{key!r} has no audit (the Megatron schedule covers dense models only)",
                              key="analysis.timeline_point")
        return by_key[key]
    for wanted in (lambda p: p.schedule == "aicb" and p.aiob and p.tp > 1, lambda p: p.schedule == "aicb" and p.tp > 1,
                   lambda p: p.tp > 1, lambda p: True):
        chosen = [p for p in audited if wanted(p)]
        if chosen:
            return chosen[0]
    raise ConfigError("no point of this sweep has an audit", key="analysis.timeline_point")
