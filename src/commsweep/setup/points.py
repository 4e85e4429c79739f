"""What a sweep point is: its axes, its keys and its row in the points table (``sweep.csv``).

A ``Point`` is plain data: the sweep's expansion (``orchestration/sweep.py``) makes them from a
config, and the stages and the sweep-wide tables read their axes and keys from here.
Outputs are shared where the work is: points that differ only in the network share a
workload (``workload_key``), and points with the same model shard and batch share an
AIOB profile (``profile_key``).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .network import NETWORK_FIELDS, Network
from .pipeline_layout import key as layout_key
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
# point's key is that of a sweep without the axis. ``cp``, ``cp_comm_type``: context
# parallelism (megatron's --context-parallel-size, --cp-comm-type) when the sweep lists a CP
# above 1; a point's key gains ``_cp<c>`` (and the comm type but p2p's) only where c > 1.
# ``fsdp``, ``fp8_param_gather``: data parallelism's sharding (megatron's --use-megatron-fsdp
# with --data-parallel-sharding-strategy, --use-torch-fsdp2) and --fp8-param-gather, when the
# sweep lists a value but the default; a point's key gains ``_fsdp<short name>`` or ``_fp8g``
# only where they are on.
# ``overlap_grad_reduce``, ``overlap_param_gather``, ``ddp_bucket_size``: the distributed
# optimizer's buckets and their overlap (megatron's --overlap-grad-reduce, ...) when the sweep
# turns overlap on; a point's key gains ``_ogr``, ``_opg``, ``_bkt<size>`` only where set.
BUCKET_AXES = ("overlap_grad_reduce", "overlap_param_gather", "ddp_bucket_size")
# ``vpp``: the interleaved schedule's model chunks per pipeline rank (megatron's
# --virtual-pipeline-model-parallel-size) when the sweep lists one above 1; a point's key gains
# ``_vpp<v>`` only where v > 1. ``pipeline_layout``: uneven stages (megatron's
# --pipeline-model-parallel-layout) when the sweep lists a layout; a point's key gains
# ``_pl<counts>`` (its virtual stages' layers, hyphenated) only where it has one.
OPTIONAL_AXES = ("tp_overlap", "simulation", "cp", "cp_comm_type", "fsdp", "fp8_param_gather",
                 "overlap_grad_reduce", "overlap_param_gather", "ddp_bucket_size", "vpp", "pipeline_layout")
# The CP comm types a sweep may list (a2a+p2p needs hierarchical sizes, which no axis gives),
# and their short names in point keys (p2p, the default, has none).
CP_KEY_NAMES = {"p2p": "", "all_gather": "ag", "a2a": "a2a"}
# The FSDP settings a sweep may list, and their short names in point keys (none: no FSDP).
FSDP_KEY_NAMES = {"none": "", "no_shard": "ns", "optim": "o", "optim_grads": "og", "optim_grads_params": "ogp",
                  "torch_fsdp2": "torch2"}
SIMULATIONS = ("analytical", "packet")
TABLE_COLUMNS = (
    "point", "workload", "profile", *AXES, "dp", "ga", *NETWORK_FIELDS,
)
# The point's peak memory per GPU and whether it fits the sweep's GPU (``memory.py``);
# in sweep.csv and summary.csv after the point's columns.
MEMORY_COLUMNS = ("memory_gib", "fits")


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
    # The CP size and comm type when the sweep has a CP axis (None: no axis, CP 1).
    cp: int | None = None
    cp_comm_type: str | None = None
    # The FSDP setting and FP8 parameter gathers when the sweep has those axes (None: no axis).
    fsdp: str | None = None
    fp8_param_gather: bool | None = None
    # The buckets' overlap (overlap_grad_reduce, overlap_param_gather, ddp_bucket_size) when
    # the sweep has those axes (None: no axis, megatron's defaults, overlap off).
    buckets: tuple[bool, bool, int | None] | None = None
    # The interleaved schedule's chunks and the uneven stages' layout string when the sweep has
    # those axes (None: no axis; vpp 1, the even split).
    vpp: int | None = None
    pipeline_layout: str | None = None

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
        key += ("_rc" if self.recompute else "")
        if self.cp is not None and self.cp > 1:
            key += f"_cp{self.cp}{CP_KEY_NAMES[self.cp_comm_type or 'p2p']}"
        if self.fsdp not in (None, "none"):
            key += f"_fsdp{FSDP_KEY_NAMES[self.fsdp]}"
        key += ("_fp8g" if self.fp8_param_gather else "")
        if self.buckets is not None:
            grads, params, size = self.buckets
            key += ("_ogr" if grads else "") + ("_opg" if params else "") + ("" if size is None else f"_bkt{size}")
        if self.vpp is not None and self.vpp > 1:
            key += f"_vpp{self.vpp}"
        if self.pipeline_layout:
            key += f"_pl{layout_key(self.setup.layer_counts)}"
        return key

    @property
    def ignores_cp(self) -> bool:
        """An AICB point with CP above 1: AICB has no context parallelism, so its workload is
        that of the same GPUs without it (every CP rank a DP rank holding whole sequences)."""
        return self.schedule == "aicb" and (self.cp or 1) > 1

    @property
    def ignores_fsdp(self) -> bool:
        """An AICB point with FSDP or FP8 parameter gathers: AICB has neither, so its workload is
        the distributed optimizer's in bf16."""
        return self.schedule == "aicb" and (self.fsdp not in (None, "none") or bool(self.fp8_param_gather))

    @property
    def ignores_vpp(self) -> bool:
        """An AICB point of an interleaved setup: AICB has no interleaved schedule, so its
        workload is that of the plain 1F1B schedule on the same stages."""
        return self.schedule == "aicb" and (self.vpp or 1) > 1

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
        text = ", ".join(f"{axis}={getattr(self, axis)}" for axis in AXES)
        if self.cp is not None:
            text += f", cp={self.cp}, cp_comm_type={self.cp_comm_type}"
        if self.fsdp is not None:
            text += f", fsdp={self.fsdp}"
        if self.fp8_param_gather is not None:
            text += f", fp8_param_gather={self.fp8_param_gather}"
        if self.buckets is not None:
            text += ", " + ", ".join(f"{a}={v}" for a, v in zip(BUCKET_AXES, self.buckets))
        text += "" if self.vpp is None else f", vpp={self.vpp}"
        text += f", pipeline_layout={self.pipeline_layout}" if self.pipeline_layout else ""
        text += " (AICB ignores CP)" if self.ignores_cp else ""
        text += " (AICB has no FSDP or FP8 gathers)" if self.ignores_fsdp else ""
        return text + (" (AICB's plain 1F1B schedule)" if self.ignores_vpp else "")

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
        if self.cp is not None:
            record.update(cp=self.cp, cp_comm_type=self.cp_comm_type)
        if self.fsdp is not None:
            record["fsdp"] = self.fsdp
        if self.fp8_param_gather is not None:
            record["fp8_param_gather"] = self.fp8_param_gather
        if self.buckets is not None:
            record.update(zip(BUCKET_AXES, (*self.buckets[:2], "" if self.buckets[2] is None else self.buckets[2])))
        if self.vpp is not None:
            record["vpp"] = self.vpp
        if self.pipeline_layout is not None:
            record["pipeline_layout"] = self.pipeline_layout
        return record


@dataclass(frozen=True)
class Invalid:
    """A combination of axis values that cannot run, and why."""

    values: dict[str, Any]
    reasons: tuple[str, ...]

    def describe(self) -> str:
        point = ", ".join(f"{k}={v}" for k, v in self.values.items())
        return f"[{point}]: " + "; ".join(self.reasons)


def table_columns(points: Sequence[Point] | Sequence[PointRow]) -> tuple[str, ...]:
    """The points table's columns for these points: ``TABLE_COLUMNS``, then the optional
    axes the sweep has (points as ``Point`` or as rows of the table, ``PointRow``)."""
    rows = [p.row() if isinstance(p, Point) else p.cells for p in points[:1]]
    return (*TABLE_COLUMNS, *(a for a in OPTIONAL_AXES if rows and a in rows[0]))


# -- the points table, sweep.csv: its writer and its reader --------------------------------

# How a point's workload was made: one name per schedule and AIOB setting (the "variants"
# of a setting that the comparison and the figures set side by side). Spelled here only:
# the tables and figures name them by these constants.
AICB_DEFAULT, AICB_AIOB, MEGATRON, MEGATRON_AIOB = "aicb_default", "aicb_aiob", "megatron", "megatron_aiob"
VARIANTS = (AICB_DEFAULT, AICB_AIOB, MEGATRON, MEGATRON_AIOB)
# AICB's two paths (the variants difference_by_cause.csv explains against Megatron's).
AICB_PATHS = (AICB_DEFAULT, AICB_AIOB)
# The axes a point shares with its other variants: all but the schedule and aiob.
SETTING_AXES = tuple(a for a in AXES if a not in ("schedule", "aiob"))


def variant_of(schedule: str, aiob: bool) -> str:
    """The variant (``VARIANTS``) of a point made by ``schedule`` with AIOB on or off."""
    if schedule == "megatron":
        return MEGATRON_AIOB if aiob else MEGATRON
    return AICB_AIOB if aiob else AICB_DEFAULT


def to_csv(points: Sequence[Point], invalid: Sequence[Invalid] = (),
           memory: Callable[[Point], Mapping[str, Any]] | None = None) -> str:
    """The points table: one row per point (with its ``memory`` columns, when given), then
    the skipped combinations with their reasons in ``status``."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[*table_columns(points), *MEMORY_COLUMNS, "status"], lineterminator="\n")
    writer.writeheader()
    for p in points:
        writer.writerow({**p.row(), **(memory(p) if memory else {}), "status": "ok"})
    for bad in invalid:
        writer.writerow({**bad.values, "status": "skipped: " + "; ".join(bad.reasons)})
    return buf.getvalue()


def boolean(text: str) -> bool:
    """A yes/no cell as the tables write it (``True``, ``False``); ValueError for anything else."""
    if text not in ("True", "False"):
        raise ValueError(f"expected True or False, got {text!r}")
    return text == "True"


_INTS = ("world_size", "tp", "pp", "ep", "micro_batch", "global_batch", "seq_length", "dp", "ga",
         "gpus_per_server", "nics_per_server", "cp", "ddp_bucket_size", "vpp")
_BOOLS = ("sp", "aiob", "recompute", "fp8_param_gather", "overlap_grad_reduce", "overlap_param_gather")
_TEXTS = ("point", "workload", "profile", "model", "schedule", "network", "simulation", "cp_comm_type", "fsdp",
          "pipeline_layout")


@dataclass(frozen=True)
class PointRow:
    """A point as the points table gives it back, with real types.

    ``cells`` is the row as written: the tables that repeat a point's columns (summary,
    verdicts, difference by cause) copy those cells, so their text stays the table's."""

    cells: Mapping[str, str] = field(repr=False)
    point: str
    workload: str
    profile: str
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
    dp: int
    ga: int
    gpus_per_server: int
    nics_per_server: int
    nvlink_gbps: float
    nic_gbps: float
    tp_overlap: float | None = None
    simulation: str | None = None
    cp: int | None = None
    cp_comm_type: str | None = None
    fsdp: str | None = None
    fp8_param_gather: bool | None = None
    overlap_grad_reduce: bool | None = None
    overlap_param_gather: bool | None = None
    ddp_bucket_size: int | None = None
    vpp: int | None = None
    pipeline_layout: str | None = None
    memory_gib: float | None = None
    fits: bool | None = None

    @property
    def variant(self) -> str:
        return variant_of(self.schedule, self.aiob)

    @property
    def setting(self) -> tuple[str, ...]:
        """What the point shares with its other variants: its ``SETTING_AXES`` (and the
        optional axes the sweep has), as the table writes them."""
        return (tuple(self.cells[a] for a in SETTING_AXES)
                + tuple(self.cells[a] for a in OPTIONAL_AXES if a in self.cells))

    @classmethod
    def from_cells(cls, cells: Mapping[str, str], *, file: str | Path | None = None, line: int | None = None) -> PointRow:
        """A row of the points table (``cells``: column -> text); an ``InputError`` naming
        the file, line and field of a value that is not what the writer writes."""
        from ..base.errors import InputError

        values: dict[str, Any] = {}
        for name in (*_TEXTS, *_INTS, *_BOOLS, "nvlink_gbps", "nic_gbps", "tp_overlap", *MEMORY_COLUMNS):
            text = cells.get(name)
            if text is None:
                if name in OPTIONAL_AXES or name in MEMORY_COLUMNS:
                    continue  # a sweep without the axis; a batch's rows, without memory
                raise InputError(f"missing column {name!r}", file=file, line=line)
            try:
                if name in _TEXTS:
                    values[name] = text
                elif name in _INTS:
                    values[name] = None if text == "" and name == "ddp_bucket_size" else int(text)
                elif name in _BOOLS or name == "fits":
                    values[name] = None if name == "fits" and text == "" else boolean(text)
                else:
                    values[name] = None if text == "" and name in (*OPTIONAL_AXES, *MEMORY_COLUMNS) else float(text)
            except ValueError as err:
                raise InputError(f"field {name}: {err}", file=file, line=line) from None
        return cls(cells=dict(cells), **values)

    @classmethod
    def of(cls, point: Point) -> PointRow:
        """A point as its row of the table reads back (without the memory columns)."""
        return cls.from_cells({k: str(v) for k, v in point.row().items()})


def read_points(path: str | Path) -> list[PointRow]:
    """The valid points (``status`` ok) of a points table written by ``to_csv``."""
    from ..base.errors import InputError
    from ..base.files import read_text

    reader = csv.DictReader(io.StringIO(read_text(path)))
    if "point" not in (reader.fieldnames or ()):
        raise InputError("not a points table (no 'point' column)", file=path, line=1)
    rows, seen = [], {}
    for n, r in enumerate(reader, start=2):
        if r.get("status", "ok") != "ok":
            continue
        if r["point"] in seen:  # a table of several rows per point: the summary, say
            raise InputError(f"point {r['point']} again (first at line {seen[r['point']]}): a points table has one "
                             "row per point (the sweep's sweep.csv)", file=path, line=n, field="point")
        seen[r["point"]] = n
        rows.append(PointRow.from_cells(r, file=path, line=n))
    return rows


def read_skipped(path: str | Path) -> list[Invalid]:
    """The skipped combinations of a points table written by ``to_csv``, each with its axes'
    cells (text, as written) and the reasons it cannot run: what a sweep asked for but lacks."""
    from ..base.files import read_text

    prefix = "skipped: "
    return [Invalid({a: r[a] for a in AXES if a in r}, tuple(r["status"].removeprefix(prefix).split("; ")))
            for r in csv.DictReader(io.StringIO(read_text(path))) if r.get("status", "").startswith(prefix)]
