"""The audit: every row of a workload against the collectives Megatron really issues.

The reference is the Megatron schedule generator (``workload/megatron.py``), the one
description of Megatron in this project: ``schedule(setup).expected()`` lists every
collective with its module, transformer layer and micro-batch. The audit never looks
at the reference's row names; it aligns by structure.

Alignment, in three steps:

1. **Units.** Both sides are cut into units: one per micro-batch and module kind
   (``embedding``, ``output_layer``, ``loss``, ...), one per micro-batch, transformer
   layer and kind (``attention``, ``mlp``), and once-per-iteration units (``dp`` for the
   data-parallel gradient and parameter sync, ``sp_grads`` for the sequence-parallel
   gradients' all-reduce, ``layernorm_grads`` for the layernorm gradients' all-reduce AICB
   writes with SP off (its ``layernorm`` row: 2P bytes, nothing Megatron issues),
   ``optimizer``, ...). The reference's units come from each
   block's ``module``, ``layer`` and ``micro_batch``. The workload's come from a row's
   kind (``ROW_KINDS``: a name pattern gives the module kind, e.g. AICB's
   ``attention_column`` and the reference's ``layer3_attention_qkv`` are both
   ``attention``) and from its position (``segment``): a micro-batch begins at each
   embedding row, or when a transformer layer would be the stage's (L+1)-th, or when a
   layer follows the output layer or loss; a transformer layer begins when an attention
   row follows a row that is not attention (or an mlp row follows a row that is neither).
   Rows of per-micro-batch kinds found after the last layer (AICB writes its
   ``cross_entropy`` rows once, after the last micro-batch) join the micro-batch before
   them.
2. **Matching inside a unit.** Each collective a row issues (a phase whose type is not
   NONE) is paired with one the reference issues in the same unit, in passes of
   decreasing strictness: equal phase, collective, group and bytes (no finding); equal
   phase, collective and group (``size``, or ``zero_bytes`` if the row's size is 0);
   equal collective only (``group``: it runs on another group or in another phase).
   A pairing across phases or groups is reported as ``group`` even when the row's group
   has size 1.
3. **Leftovers.** A reference collective left unpaired is ``missing``: its row is the
   unit's first row whose phase is free (NONE), else the unit's first row, else empty
   when the workload has no row for the unit at all (the layer column names it). A row's
   collective left unpaired is ``extra``, or ``size1_group`` when its group has one rank
   (Megatron issues nothing on such a group; SimAI gives it no time), or ``zero_bytes``
   when it has 0 bytes. A NONE phase with a non-zero size is ``size_in_none_column`` (SimAI
   ignores the size).

Pipeline sends are not rows: SimAI derives them from the header (2 * vpp * ga messages
of ``pp_comm`` bytes), so the header's PP traffic is compared with the reference
header's as one ``pp`` finding. The tied-embedding all-reduce between pipeline stages,
which no SimAI group can carry (``Schedule.unexpressed``), is not audited. The attention's
context-parallel exchange, which no SimAI group carries either, is: each of its collectives is
expected in its attention unit, and ``missing`` from every workload (``CP_GROUPS``; no time).
A workload made without CP for a CP setup (AICB's: its header's micro-batches are the setup's
without CP, ``audited_setup``) is checked against that setup and held against Megatron's
schedule with CP: its micro-batches of whole sequences pair with Megatron's first ones.

Bytes: ``expected_bytes`` is what Megatron sends (the whole tensor, as SimAI's files
count it), ``found_bytes`` the size field as written, ``delta_bytes`` what SimAI
executes minus what Megatron sends (forward sizes of 1..4095 bytes count as 4096, as
SimAI reads them). ``delta_us`` is the same difference in SimAI's time of one
collective (before overlap), when a network is given.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..base.errors import ConfigError, InputError
from ..setup.training import TrainingSetup
from ..workload import format as wf
from ..workload import megatron
from ..workload import row_names as rn
from . import audit_csv
from .audit_csv import COLUMNS, AuditRow, read_csv  # noqa: F401  (read_csv: audit.csv's reader, for its readers)

KINDS = ("missing", "extra", "size", "group", "zero_bytes", "size_in_none_column", "size1_group")
PHASE_ORDER = ("fwd", "ig", "wg", "pp")
ITERATION = "iteration"

# Module kind of a workload row, by name. AICB's names (aliyun/aicb @ 23eec3c,
# workload_generator/SimAI_training_workload_generator.py) and the Megatron schedule's own
# row names; the first pattern that matches the whole name wins.
ROW_KINDS: tuple[tuple[str, str], ...] = (
    (r"embedding_layer", "embedding"),
    (r"layer\d+_recompute_.*", "recompute"),
    (r"(layer\d+_)?attention(_.*)?", "attention"),
    (r"(layer\d+_)?mlp(_.*)?|layer\d+_moe_.*", "mlp"),
    (r"final_column|output_layer(_.*)?", "output_layer"),
    (r"cross_entropy.*", "loss"),
    (r"embedding_norm", "embedding_norm"),
    (r"embedding_grads", "embedding_grads"),
    (r"dp_ep_.*", "moe_dp"),
    (r"fsdp_.*", "fsdp"),
    (r"grad_norm|grad_gather|grad_param_comm|grad_param_compute|dp_.*", "dp"),
    (re.escape(rn.SP_GRADS_ALLREDUCE), "sp_grads"),
    (re.escape(rn.AICB_LAYERNORM), "layernorm_grads"),
    (r"moe_grad_norm\d*", "moe_dp"),
    (r"optimizer\d*", "optimizer"),
)
_ROW_KIND_RES = tuple((re.compile(pattern), kind) for pattern, kind in ROW_KINDS)
LAYER_KINDS = ("attention", "mlp", "recompute")  # recompute: a full recompute's forward collectives
# Kinds that recur in every micro-batch; the rest occur once per iteration.
PER_MICROBATCH_KINDS = ("embedding", *LAYER_KINDS, "output_layer", "loss", "embedding_norm")
# Kinds that close a micro-batch's layers: a layer row after them begins the next one.
TAIL_KINDS = ("output_layer", "loss", "embedding_norm")
KIND_ORDER = (
    "dp", "sp_grads", "layernorm_grads", "embedding_grads", "moe_dp", "optimizer", "other",
    "embedding", "attention", "mlp", "recompute", "output_layer", "loss", "embedding_norm", "fsdp", "pipeline",
)
# FSDP's per-micro-batch collectives (``workload/megatron_fsdp.py``): a unit of their own per
# micro-batch and FSDP unit (a layer, or the buckets outside the layers).
_FSDP_LAYER = re.compile(r".*_layer(\d+)(_fp8)?")


def row_kind(name: str) -> str:
    """The module kind a workload row stands for, from its name ('other' if unknown)."""
    for pattern, kind in _ROW_KIND_RES:
        if pattern.fullmatch(name):
            return kind
    return "other"


def module_kind(module: str) -> str:
    """The module kind of a reference block, from its megatron-core module path."""
    if module == "embedding":
        return "embedding"
    if ".self_attention." in module or module.endswith(".self_attention"):  # MLA's own gathers too
        return "attention"
    if ".mlp." in module or module.endswith(".mlp"):
        return "mlp"
    if module.startswith("decoder.layers.") and module.endswith(".recompute"):
        return "recompute"
    if module == "output_layer":
        return "output_layer"
    if module.startswith("loss."):
        return "loss"
    if module.startswith(("optimizer.expert_", "ddp.expert_")):
        return "moe_dp"
    if module.startswith(("optimizer.", "ddp.", "fsdp.bucket.")):
        return "dp"
    if module.startswith("fsdp.unit."):
        return "fsdp"
    if module == "finalize_model_grads.sequence_parallel":
        return "sp_grads"
    raise ValueError(f"no audit unit for the Megatron module {module!r}")


@dataclass(frozen=True)
class Unit:
    """Where a collective belongs: micro-batch (None: once per iteration), layer, kind."""

    micro_batch: int | None
    layer: int | None
    kind: str

    def label(self) -> str:
        parts = [ITERATION if self.micro_batch is None else f"mb{self.micro_batch}"]
        if self.layer is not None:
            parts.append(f"layer{self.layer}")
        parts.append(self.kind)
        return "/".join(parts)

    def sort_key(self) -> tuple:
        mb = -1 if self.micro_batch is None else self.micro_batch
        kind = KIND_ORDER.index(self.kind) if self.kind in KIND_ORDER else len(KIND_ORDER)
        # Within a micro-batch: embedding, then the layers in order, then the tail.
        if self.layer is not None:
            position = (1, self.layer, kind)
        elif kind < KIND_ORDER.index("attention"):
            position = (0, 0, kind)
        else:
            position = (2, 0, kind)
        return (mb, *position)


@dataclass(frozen=True)
class Side:
    """A collective on one side of the comparison (found in a row, or expected)."""

    phase: str
    collective: str  # allreduce | allgather | reducescatter | alltoall | sendrecv | none
    group: str  # TP | DP | EP | DP_EP | PP, "" for none
    bytes: int
    comm_type: str = ""  # the SimAI comm type (for timing)
    # The expected side's row in the Megatron schedule (e.g. layer3_moe_dispatch_probs):
    # which of Megatron's collectives it is.
    name: str = field(default="", compare=False)


@dataclass(frozen=True)
class Finding:
    row: int | None  # 0-based index among the workload's rows (file line = row + 3)
    unit: Unit
    phase: str
    kind: str
    expected: Side | None
    found: Side | None
    delta_bytes: int
    delta_us: float | None = None
    row_name: str = field(default="", compare=False)
    # What makes the difference (``causes/catalog.yaml``), as ``causes.rules`` names it.
    cause: str = field(default="", compare=False)

    @property
    def layer(self) -> str:
        return self.unit.label()

    @property
    def ratio(self) -> float | None:
        """found / expected bytes (for ``size`` and ``zero_bytes`` findings)."""
        if self.expected is None or self.found is None or self.expected.bytes == 0:
            return None
        return self.found.bytes / self.expected.bytes


# -- segmenting a workload ---------------------------------------------------------------


def segment(workload: wf.Workload, layers_per_stage: int, first_layer: int = 0,
            layer_ids: list[int] | None = None) -> list[Unit]:
    """The unit of every row, by its kind and position (see the module docstring).

    ``first_layer`` is the global index of the stage's first transformer layer, so that
    layers are numbered as the reference numbers them; ``layer_ids`` the global index of
    each of the stage's layers instead (the interleaved schedule's stages hold layers
    that are not contiguous).
    """
    units: list[Unit] = []
    mb: int | None = None  # current micro-batch; None before the first
    layer = -1  # index of the current layer within the stage
    tail = False  # the current micro-batch has had its output layer or loss
    previous = ""
    seen: Counter[str] = Counter()
    for row in workload.rows:
        kind = row_kind(row.name)
        if kind == "fsdp":  # the n-th row of a name is micro-batch n's; its layer is in the name
            match = _FSDP_LAYER.fullmatch(row.name)
            units.append(Unit(seen[row.name], int(match.group(1)) if match else None, kind))
            seen[row.name] += 1
            continue
        if kind == "embedding":
            mb, layer, tail = (0 if mb is None else mb + 1), -1, False
            units.append(Unit(mb, None, kind))
        elif kind in LAYER_KINDS:
            starts_layer = (kind == "attention" and previous != "attention") or (
                kind == "mlp" and previous not in LAYER_KINDS
            )
            if mb is None:
                mb, layer, tail = 0, -1, False
            elif starts_layer and (tail or layer + 1 >= layers_per_stage):
                mb, layer, tail = mb + 1, -1, False
            if starts_layer:
                layer += 1
            local = max(layer, 0)
            units.append(Unit(mb, layer_ids[local] if layer_ids and local < len(layer_ids) else first_layer + local, kind))
        elif kind in PER_MICROBATCH_KINDS:
            if mb is None:
                mb, layer = 0, -1
            tail = tail or kind in TAIL_KINDS
            units.append(Unit(mb, None, kind))
        else:
            units.append(Unit(None, None, kind))
        previous = kind
    return units


# The context-parallel groups of Megatron's schedule (``workload/megatron_context_parallel.py``):
# no SimAI row can carry them, so every workload misses them and no simulation times them.
CP_GROUPS = ("CP", "CP_A2A", "CP_P2P")


def expected_units(schedule: megatron.Schedule) -> dict[Unit, list[Side]]:
    """The reference's collectives per unit: those a SimAI row can carry, then the attention's
    context-parallel exchange, which none can (after the unit's others, so that these take the
    unit's free slots last)."""
    out: dict[Unit, list[Side]] = {}
    for e in schedule.expected():
        if e.row is None:
            continue  # not expressible as a row (pipeline sends: see the header check)
        block = schedule.blocks[e.row]
        unit = Unit(block.micro_batch, block.layer, module_kind(block.module))
        side = Side(e.phase, e.comm.collective, e.comm.group, e.comm.bytes, e.comm.comm_type(), name=block.name)
        out.setdefault(unit, []).append(side)
    for u in schedule.unexpressed:
        if u.comm.group in CP_GROUPS:
            unit = Unit(u.micro_batch, u.layer, module_kind(u.module))
            out.setdefault(unit, []).append(Side(u.phase, u.comm.collective, u.comm.group, u.comm.bytes,
                                                 name=CP_EXCHANGE))
        elif u.module.startswith("fsdp.unit.") and not u.in_rows:  # FSDP's per-layer all-gathers
            unit = Unit(u.micro_batch, u.layer, "fsdp")
            out.setdefault(unit, []).append(Side(u.phase, u.comm.collective, u.comm.group, u.comm.bytes,
                                                 name=FSDP_GATHER))
    return out


# The name of the attention's CP exchange on the expected side (its module's last part).
CP_EXCHANGE = "core_attention_cp"
# The name of FSDP's per-layer parameter all-gathers on the expected side (no row carries them).
FSDP_GATHER = "fsdp_param_allgather"


def audited_setup(workload: wf.Workload, setup: TrainingSetup) -> TrainingSetup:
    """The setup the workload's rows were made for: ``setup``, or with CP above 1 and a header
    of the micro-batches the setup has without CP, that setup without CP (AICB's workload: AICB
    has no context parallelism, so its DP takes the CP ranks and each micro-batch whole
    sequences). The reference stays Megatron's schedule of ``setup``."""
    from ..workload.generate import ignoring_cp

    plain = ignoring_cp(setup)
    if setup.cp > 1 and workload.header.ga == plain.num_microbatches != setup.num_microbatches:
        return plain
    return setup


# -- the audit -------------------------------------------------------------------------


def check_header(workload: wf.Workload, setup: TrainingSetup, source: str | Path, stage: int = 0) -> None:
    """The workload must describe the setup the audit compares it with: its header, then what
    its rows tell (``check_rows``)."""
    h = workload.header
    for key, got, want, flags in (
        ("model_parallel_NPU_group", h.tp, setup.tp, "--tensor_model_parallel_size"),
        ("ep", h.ep, setup.ep, "--expert_model_parallel_size"),
        ("pp", h.pp, setup.pp, "--pipeline_model_parallel"),
        ("ga", h.ga, setup.num_microbatches,
         "micro-batches: --global_batch over --micro_batch times the data-parallel size"),
        ("all_gpus", h.all_gpus, setup.world_size, "--world_size"),
    ):
        if got != want:
            raise InputError(
                f"the workload has {got} where the audited arguments give {want} ({flags}); "
                "audit a workload with the arguments it was made from",
                file=source, line=1, field=key,
            )
    check_rows(workload, setup, source, stage)


def _attention_tp_forward(workload: wf.Workload) -> list[tuple[int, str, int]]:
    """(row, collective, bytes) of every forward TP collective of the attention rows."""
    out = []
    for index, row in enumerate(workload.rows):
        if row_kind(row.name) != "attention":
            continue
        side = _found_side(row, "fwd")
        if side.group == "TP" and side.collective != "none":
            out.append((index, side.collective, side.bytes))
    return out


def check_rows(workload: wf.Workload, setup: TrainingSetup, source: str | Path, stage: int = 0) -> None:
    """What the rows tell of the setup they were made for, against the audited arguments, so
    that a wrong argument is an error naming it, not hundreds of findings: the activation
    size the attention moves over TP (2 x micro batch x sequence x hidden size; twice that
    with AICB's recompute), whether its forward collectives are sequence-parallel ones, and
    the transformer layers per micro-batch. (A file whose attention moves nothing over TP,
    as the Megatron schedule's at TP 1, tells nothing of the first two.)"""
    attention = _attention_tp_forward(workload)
    u = setup.activation_bytes
    sizes = Counter(n for _, _, n in attention if n)
    if sizes and not {u, 2 * u} & set(sizes):
        size = sizes.most_common(1)[0][0]
        row = next(i for i, _, n in attention if n == size)
        b, s = setup.micro_batch, setup.seq_length
        hidden = f"hidden size {size // (2 * b * s)}" if size % (2 * b * s) == 0 else "no whole hidden size"
        raise InputError(
            f"the attention moves {size}-byte activations over TP ({hidden} at micro batch {b} and sequence {s}) "
            f"where the audited arguments give {u} (hidden size {setup.model.hidden_size}); audit the workload "
            "with the model it was made from (--model, or --hidden_size, --seq_length and --micro_batch)",
            file=source, line=row + 3)
    if setup.tp > 1:
        _check_sequence_parallel(attention, setup, source)
    _check_layers(workload, setup, source, stage)


def _check_sequence_parallel(attention: list[tuple[int, str, int]], setup: TrainingSetup, source: str | Path) -> None:
    """With SP the attention's forward TP collectives are all-gathers and reduce-scatters,
    without it all-reduces."""
    sp_rows = [i for i, c, _ in attention if c in ("allgather", "reducescatter")]
    plain_rows = [i for i, c, _ in attention if c == "allreduce"]
    if setup.sp and plain_rows and not sp_rows:
        raise InputError("the attention all-reduces forward over TP, as without sequence parallelism, where the "
                         "audited arguments have it on; audit the workload without --enable_sequence_parallel",
                         file=source, line=plain_rows[0] + 3)
    if not setup.sp and sp_rows and not plain_rows:
        raise InputError("the attention all-gathers and reduce-scatters forward over TP, as with sequence "
                         "parallelism, where the audited arguments have it off; audit the workload with "
                         "--enable_sequence_parallel", file=source, line=sp_rows[0] + 3)


def _check_layers(workload: wf.Workload, setup: TrainingSetup, source: str | Path, stage: int = 0) -> None:
    """Every micro-batch holds the stage's transformer layers (``segment`` starts a new
    micro-batch after the stage's last layer: a file of more layers has more micro-batches)."""
    want = setup.stage_layer_count(stage)
    layers = {(u.micro_batch, u.layer) for u in segment(workload, want) if u.kind in LAYER_KINDS}
    if not layers:
        return
    found = len(layers) / workload.header.ga
    per_mb = Counter(mb for mb, _ in layers)
    if found != want or set(per_mb.values()) != {want}:
        stage = f" over --pipeline_model_parallel {setup.pp}" if setup.pp > 1 else ""
        raise InputError(
            f"the workload has {found:g} transformer layers per micro-batch where the audited arguments give {want} "
            f"(--num_layers {setup.model.num_layers}{stage}); audit it with the number of layers it was made with",
            file=source)


TimeFn = Callable[[Side, wf.Header], float]


def audit(
    workload: wf.Workload,
    setup: TrainingSetup,
    *,
    stage: int = 0,
    gpus: int | None = None,
    time_us: TimeFn | None = None,
    source: str | Path = "<workload>",
    megatron_version: str | None = None,
) -> list[Finding]:
    """Every difference between ``workload`` and Megatron's schedule for ``setup``.

    ``megatron_version`` is the megatron-core release whose schedule is the reference
    (default: the newest traced); ``stage`` the pipeline stage whose view it takes (0 = first);
    ``gpus`` SimAI's ``-g`` (sets the DP group size); ``time_us(side, header)`` the
    time SimAI gives one collective, for ``delta_us`` (left empty without it).
    """
    findings, reference_header = _untimed(workload, setup, stage, gpus, source, megatron_version)
    if time_us is not None:
        findings = [_with_time(f, workload.header, reference_header, time_us) for f in findings]
    return findings


# The last audit before its times, by its workload (the object itself: a ``Workload`` is
# immutable, and ``format.reuse_parsed`` gives the same object for the same file), setup,
# stage and GPUs. A batch of points (``commsweep.orchestration.batch``) audits each workload once per
# network, and only the times differ.
_LAST: dict[tuple, tuple[wf.Workload, list[Finding], wf.Header]] = {}


# The reference of the last setup audited: Megatron's schedule and its collectives per unit
# (read, never changed, by the audit). A batch audits the workloads of one setup (both
# schedules, with and without AIOB) one after another.
_REFERENCE: dict[tuple, tuple[megatron.Schedule, dict[Unit, list[Side]]]] = {}


def _reference(setup: TrainingSetup, stage: int,
               megatron_version: str | None) -> tuple[megatron.Schedule, dict[Unit, list[Side]]]:
    key = (setup, stage, megatron_version)
    if key not in _REFERENCE:
        reference = megatron.schedule(setup, stage=stage, megatron_version=megatron_version)
        _REFERENCE.clear()
        _REFERENCE[key] = (reference, expected_units(reference))
    return _REFERENCE[key]


def _untimed(workload: wf.Workload, setup: TrainingSetup, stage: int, gpus: int | None,
             source: str | Path, megatron_version: str | None) -> tuple[list[Finding], wf.Header]:
    """The findings of ``audit`` without their times, and the reference's header."""
    key = (id(workload), setup, stage, gpus, str(source), megatron_version)
    last = _LAST.get(key)
    if last is not None and last[0] is workload:
        return last[1], last[2]
    problems = setup.problems() + megatron.unsupported(setup, megatron_version)
    if problems:
        raise ConfigError("; ".join(problems), key="arguments")
    made_for = audited_setup(workload, setup)
    check_header(workload, made_for, source, stage)
    reference, expected = _reference(setup, stage, megatron_version)
    sizes = wf.group_sizes(workload.header, gpus)
    units = segment(workload, setup.stage_layer_count(stage), stage * setup.layers_per_stage,
                    layer_ids=megatron.stage_layers(setup, stage))

    findings: list[Finding] = []
    rows_of: dict[Unit, list[int]] = {}
    for index, unit in enumerate(units):
        rows_of.setdefault(unit, []).append(index)

    for unit in _file_order(set(rows_of) | set(expected), rows_of):
        findings += _audit_unit(workload, unit, rows_of.get(unit, []), expected.get(unit, []), sizes)
    merged = workload.header.ga if made_for is not setup else None
    findings = _named(_audit_pipeline(workload.header, reference.header) + findings, setup.pp, setup.cp, merged)
    _LAST.clear()
    _LAST[key] = (workload, findings, reference.header)
    return findings, reference.header


def _file_order(units: Iterable[Unit], rows_of: dict[Unit, list[int]]) -> list[Unit]:
    """Units in the order of the workload's rows; a unit without rows goes right after
    the unit with rows that precedes it in the reference's order (``Unit.sort_key``)."""
    anchor: dict[Unit, tuple[int, int]] = {}
    previous, extra = -1, 0
    for unit in sorted(units, key=Unit.sort_key):
        if unit in rows_of:
            previous, extra = rows_of[unit][0], 0
            anchor[unit] = (previous, 0)
        else:
            extra += 1
            anchor[unit] = (previous, extra)
    return sorted(anchor, key=anchor.__getitem__)


def _found_side(row: wf.Row, phase: str) -> Side:
    comm_type, size = row.comm(phase)
    return Side(
        phase=phase,
        collective=wf.collective_name(comm_type) or "none",
        group=wf.comm_group(comm_type, phase) or "",
        bytes=size,
        comm_type=comm_type,
    )


def _found_collectives(workload: wf.Workload, unit: Unit, rows: list[int]
                       ) -> tuple[list[tuple[int, Side]], list[tuple[int, str]], list[Finding]]:
    """The collectives the unit's rows issue, in row and phase order; the (row, phase) slots
    with NONE, for placing what is missing; a ``size_in_none_column`` finding per NONE with a size."""
    found: list[tuple[int, Side]] = []
    free: list[tuple[int, str]] = []
    out: list[Finding] = []
    for index in rows:
        row = workload.rows[index]
        for phase in wf.PHASES:
            side = _found_side(row, phase)
            if side.collective == "none":
                free.append((index, phase))
                if side.bytes:
                    out.append(Finding(index, unit, phase, "size_in_none_column", None, side, 0, row_name=row.name))
            else:
                found.append((index, side))
    return found, free, out


def _pair(found: list[tuple[int, Side]], left: list[Side], same: Callable[[Side, Side], bool],
          nearest: bool = False) -> list[tuple[int, Side, Side]]:
    """Pair each found collective with the first expected one ``same`` accepts, or with
    ``nearest`` the one closest in bytes (an MoE layer has several of one kind, e.g. the
    token and probability gathers: a 1 KiB row stands for the small one); the pairs
    (row, expected, found), taken out of ``found`` and ``left``."""
    pairs = []
    for index, side in list(found):
        candidates = [e for e in left if same(e, side)]
        if nearest and len(candidates) > 1:
            candidates.sort(key=lambda e: abs(math.log((e.bytes + 1) / (side.bytes + 1))))
        if not candidates:
            continue
        match = candidates[0]
        found.remove((index, side))
        del left[next(i for i, e in enumerate(left) if e is match)]  # this one: equal sides may differ in name
        pairs.append((index, match, side))
    return pairs


def _where(e: Side) -> tuple[str, str, str]:
    return (e.phase, e.collective, e.group)


# The passes of pairing, strictest first: (sides that pair, the finding's kind; None: no
# finding). Identical; same phase, collective and group, other bytes; then elsewhere, same
# collective and bytes, then same collective with any bytes.
_PASSES: tuple[tuple[Callable[[Side, Side], bool], Callable[[Side, Side], str | None], bool], ...] = (
    (lambda e, f: _where(e) == _where(f) and e.bytes == f.bytes, lambda e, f: None, False),
    (lambda e, f: _where(e) == _where(f), lambda e, f: "zero_bytes" if f.bytes == 0 else "size", True),
    (lambda e, f: e.collective == f.collective and e.bytes == f.bytes, lambda e, f: "group", False),
    (lambda e, f: e.collective == f.collective, lambda e, f: "group", False),
)


def _audit_unit(
    workload: wf.Workload, unit: Unit, rows: list[int], expected: list[Side], sizes: dict[str, int]
) -> list[Finding]:
    found, free, out = _found_collectives(workload, unit, rows)
    left = list(expected)
    for same, kind_of, nearest in _PASSES:
        for index, match, side in _pair(found, left, same, nearest):
            kind = kind_of(match, side)
            if kind is not None:
                delta = wf.effective_size(side.phase, side.bytes) - match.bytes
                out.append(Finding(index, unit, side.phase, kind, match, side, delta,
                                   row_name=workload.rows[index].name))
    for index, side in found:
        if sizes[side.group] == 1:
            kind = "size1_group"
        elif side.bytes == 0:
            kind = "zero_bytes"
        else:
            kind = "extra"
        out.append(Finding(index, unit, side.phase, kind, None, side,
                           wf.effective_size(side.phase, side.bytes), row_name=workload.rows[index].name))
    for e in left:
        slot = next((s for s in free if s[1] == e.phase), None)
        if slot is not None:
            free.remove(slot)
            row: int | None = slot[0]
        else:
            row = rows[0] if rows else None
        out.append(Finding(row, unit, e.phase, "missing", e, None, -e.bytes,
                           row_name=workload.rows[row].name if row is not None else ""))
    return sorted(out, key=lambda f: (f.row if f.row is not None else 1 << 62, PHASE_ORDER.index(f.phase)))


def pipeline_bytes(header: wf.Header) -> int:
    """Payload of the pipeline sends SimAI derives from a header: 2 * vpp * ga * pp_comm."""
    return 2 * header.vpp * header.ga * header.pp_comm if header.pp > 1 else 0


def _audit_pipeline(found: wf.Header, expected: wf.Header) -> list[Finding]:
    got, want = pipeline_bytes(found), pipeline_bytes(expected)
    if got == want:
        return []
    unit = Unit(None, None, "pipeline")
    exp = Side("pp", "sendrecv", "PP", want) if want else None
    fnd = Side("pp", "sendrecv", "PP", got) if got else None
    kind = "missing" if not got else ("extra" if not want else "size")
    return [Finding(None, unit, "pp", kind, exp, fnd, got - want, row_name="header")]


def _with_time(f: Finding, header: wf.Header, reference_header: wf.Header, time_us: TimeFn) -> Finding:
    if f.phase == "pp" or (f.expected is not None and f.expected.group in CP_GROUPS):
        return f  # pipeline time is not a collective's time (see simulate.engine); no SimAI group is CP
    found = time_us(f.found, header) if f.found is not None and f.found.collective != "none" else 0.0
    expected = time_us(f.expected, reference_header) if f.expected is not None else 0.0
    # (Not dataclasses.replace, which costs more than the rest: an audit has thousands of findings.)
    return Finding(f.row, f.unit, f.phase, f.kind, f.expected, f.found, f.delta_bytes, found - expected,
                   row_name=f.row_name, cause=f.cause)


def _named(findings: list[Finding], pp: int, cp: int = 1, merged: int | None = None) -> list[Finding]:
    """The findings, each with its cause (``causes.rules.classify``: ``pp``, the point's
    pipeline size, tells a stage without the embedding or output layer; ``cp`` its CP size and
    ``merged`` the micro-batches of a workload made without CP, ``audited_setup``)."""
    from .causes.rules import classify

    return [Finding(f.row, f.unit, f.phase, f.kind, f.expected, f.found, f.delta_bytes, f.delta_us,
                    row_name=f.row_name, cause=cause)
            for f, cause in zip(findings, classify([record(f) for f in findings], pp, cp=cp, merged=merged))]


# -- output ----------------------------------------------------------------------------


def record(f: Finding) -> AuditRow:
    """A finding as audit.csv holds it (``audit_csv``)."""
    e, g = f.expected, f.found
    if e is None:
        return AuditRow(f.row, f.layer, f.phase, f.kind, "", "", None, g.collective if g else "", g.group if g else "",
                        g.bytes if g else None, f.delta_bytes, f.delta_us, f.row_name if g else "", "", f.cause)
    return AuditRow(f.row, f.layer, f.phase, f.kind, e.collective, e.group, e.bytes, g.collective if g else "",
                    g.group if g else "", g.bytes if g else None, f.delta_bytes, f.delta_us, f.row_name if g else "",
                    e.name, f.cause)


def to_csv(findings: Iterable[Finding]) -> str:
    """audit.csv of the findings."""
    return audit_csv.to_csv(record(f) for f in findings)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.2f}"


def to_table(findings: list[Finding], families: dict[str, dict] | None = None) -> str:
    """Findings for a reader: sizes in MiB, the size ratio, each finding's cause, and totals per
    kind; ``families``: per title, the totals per cause of a family (``causes.cause_families``),
    listed after them."""
    head = ("row", "name", "layer", "phase", "kind", "cause", "expected", "found", "ratio", "delta MiB", "delta us")
    rows = []
    for f in findings:
        e, g = f.expected, f.found
        rows.append((
            "" if f.row is None else str(f.row), f.row_name, f.layer, f.phase, f.kind, f.cause,
            f"{e.collective} {e.group} {_mib(e.bytes)} {e.name}".rstrip() if e else "-",
            f"{g.collective} {g.group} {_mib(g.bytes)}".replace("  ", " ") if g else "-",
            f"x{f.ratio:.3g}" if f.ratio is not None and f.kind in ("size", "zero_bytes", "group") else "",
            _mib(f.delta_bytes),
            "" if f.delta_us is None else f"{f.delta_us:,.1f}",
        ))
    widths = [max([len(head[i])] + [len(r[i]) for r in rows]) for i in range(len(head))]
    right = {0, 8, 9, 10}

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    lines = [line(head), line(["-" * w for w in widths]), *(line(r) for r in rows), ""]
    totals = summarize(findings)
    if not findings:
        lines.append("no findings: the workload issues what Megatron issues")
    for kind, (count, delta, us) in totals.items():
        time = "" if us is None else f", {us:,.1f} us"
        lines.append(f"{kind}: {count} finding(s), {_mib(delta)} MiB{time}")
    for title, named in (families or {}).items():
        if named:
            lines += ["", title]
        for cause, (count, delta, us) in named.items():
            time = "" if us is None else f", {us:,.1f} us"
            lines.append(f"  {cause.slug}: {count} finding(s), {_mib(delta)} MiB{time}: {cause.label}")
    return "\n".join(lines) + "\n"


def summarize(findings: Iterable[Finding]) -> dict[str, tuple[int, int, float | None]]:
    """Per kind: (count, summed delta_bytes, summed delta_us or None), in KINDS order."""
    from .causes.families import totals

    acc = totals(findings, lambda f: f.kind)
    return {k: acc[k] for k in KINDS if k in acc}


# -- delta_us: SimAI's time of one collective ----------------------------------------------


def network_from_args(ns, header: wf.Header):
    """The simulation engine's Network from the parsed flags (``simulate.stage.network_from_args``:
    all four or none), with SimAI's ``-g`` (default: the header's ``all_gpus``); None without them."""
    from dataclasses import replace

    from ..simulate.stage import network_from_args as flags

    network = flags(ns)
    return None if network is None else replace(network, gpus=ns.gpus or header.all_gpus)


def collective_time(
    *, gpus_per_server: int, nics_per_server: int, nvlink_gbps: float, nic_gbps: float,
    gpus: int | None = None, ratios=None,
) -> TimeFn:
    """``time_us(side, header)``: the simulation engine's time of one collective, in us.

    The time before overlap, as SimAI computes it for a workload row (``comm_time_ns``),
    with the engine's ``fix`` mode: a collective on a group of one GPU costs 0, where
    SimAI itself would print an overflowed time. ``gpus`` is SimAI's ``-g`` (default:
    the header's ``all_gpus``).
    """
    from ..setup.network import Network
    from ..simulate.engine import comm_time_ns

    networks: dict[int, Network] = {}
    # A workload repeats the same few collectives thousands of times: time each once.
    known: dict[tuple, float] = {}

    def time_us(side: Side, header: wf.Header) -> float:
        n = gpus if gpus is not None else header.all_gpus
        comm_type = side.comm_type or megatron.Comm(side.collective, side.group, side.bytes).comm_type()
        key = (comm_type, side.phase, side.bytes, n, header.tp, header.ep, header.pp, header.all_gpus)
        if key not in known:
            if n not in networks:
                networks[n] = Network(gpus=n, gpus_per_server=gpus_per_server, nics_per_server=nics_per_server,
                                      nvlink_gbps=nvlink_gbps, nic_gbps=nic_gbps)
            known[key] = comm_time_ns(comm_type, side.phase, side.bytes, header, networks[n], ratios,
                                      simai_bugs="fix") / 1000
        return known[key]

    return time_us
