"""The Megatron schedule (``workload/megatron.py``) against a trace of real megatron-core.

For each pipeline stage the schedule's ``expected()`` collectives and the records of the
stage's first rank are both reduced to rows keyed by

    (stage, phase, layer, module, collective, group, elements)

and counted; every key present on either side is one row of the comparison.

**Elements, not bytes.** The trace runs in fp32; the schedule writes SimAI's conventions
(bf16 activations, u = 2*b*s*h; fp32 cross-entropy scalars and gradient reductions;
bf16 parameter all-gather). Both are turned into elements of the whole tensor: schedule
bytes divided by the element size its convention uses for that collective
(``schedule_element_bytes``), trace bytes divided by 4 (its records carry the element
count directly). Equal elements mean the schedule's size is right in its own dtype.

**Which release.** The schedule is that of the traced release (``schedule_release``):
older releases issue other MoE rows (``workload/megatron_releases.py``), so a trace of
0.8.0 is checked against 0.8.0's schedule, and one of a release newer than the newest
traced against the newest's, which is what such a trace is for.

**Mapping.** Phases: the schedule's ``fwd`` column is ``forward``, ``ig``/``wg`` of a
micro-batch row ``backward``, and once-per-iteration rows (gradient finalisation, DP
reduce-scatter, parameter all-gather, embedding-gradient all-reduce) ``after_backward``;
pipeline sends are ``forward`` downstream, ``backward`` upstream. Modules: the trace's
module paths are shortened to the schedule's names (``TRACE_MODULES``); transformer layers
carry their global index. Left out of the trace side, with reasons: collectives on a group
of one rank (megatron issues the cross-entropy all-reduces and DP collectives even then;
they move nothing, and the schedule has no such rows) and pipeline receives (each is
the other end of a neighbour's send, which that stage's trace holds).

**DP buckets.** Megatron reduce-scatters (and gathers) its gradient buffer bucket by
bucket, padded (each parameter starts at a multiple of 64 elements, each bucket ends at a
multiple of lcm(DP, 128)); the schedule writes one collective of the stage's parameters.
The trace's DP collectives of one kind are summed into one row, and the buffer's padding
(measured on the rank) is subtracted, so the row compares parameter counts exactly. MoE
expert parameters (ep > 1) have buffers of their own, reduced and gathered over the
expert-data-parallel group (``DP_EP``): the same, with the expert buffers' padding.

**Overlapped buckets.** With ``overlap_grad_reduce`` the setup's buckets are compared one by
one, in megatron's order, at their padded sizes, and where megatron issues them (a trace of
that setup is of its second step: in the first, megatron issues every bucket after the
backward pass). A bucket's reduce-scatter is ``backward``, its ``layer`` the transformer
layer whose backward it follows (empty after the embedding's or the output layer's; known
only where TP collectives mark the layers, TP above 1): on the schedule's side the layer of
the row its bucket row precedes, on the trace's the layer of the stage's last backward
collective before it. With ``overlap_param_gather`` a bucket's all-gather is ``forward``, its
``layer`` where megatron's forward pre-hook dispatches it (empty at the embedding): the
first bucket's gather where its own parameters are first needed, each next one where the
bucket before it is; the trace records the module of the hook.

Columns of the comparison CSV (``COLUMNS``), one row per key:

* ``stage, phase, layer, module, collective, group, group_size, elements``: the key
  (``layer`` empty outside transformer layers; ``elements`` of one collective);
* ``schedule_count, trace_count``: how many such collectives each side has;
* ``schedule_bytes``: bytes of one such collective as the schedule writes it;
* ``trace_bytes``: bytes of one such collective as the trace measured it (fp32);
* ``status``: ``match`` (same count), ``count differs``, ``only in schedule``,
  ``only in trace``;
* ``note``: why a row is special: not expressible in a SimAI workload (the schedule's
  ``unexpressed`` reason), written with an assumption a SimAI row cannot state (balanced
  MoE routing), asynchronous in megatron, several DP buckets, buffer padding.
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from dataclasses import dataclass

from ..base.errors import ConfigError
from ..setup.training import TrainingSetup
from ..workload import megatron, megatron_releases
from .records import PHASES, Trace, TraceRecord

COLUMNS = (
    "stage", "phase", "layer", "module", "collective", "group", "group_size", "elements",
    "schedule_count", "trace_count", "schedule_bytes", "trace_bytes", "status", "note",
)
STATUSES = ("match", "count differs", "only in schedule", "only in trace")

# Trace module (regular expression on the recorded module) -> the schedule's module name.
TRACE_MODULES: tuple[tuple[str, str], ...] = (
    (r"^embedding(\..*)?$", "embedding"),
    (r"^output_layer$", "output_layer"),
    (r"^tensor_parallel\.cross_entropy\.", "loss.vocab_parallel_cross_entropy"),
    (r"\._allreduce_(non_tensor_model_parallel|layernorm)_grads$", "finalize_model_grads.sequence_parallel"),
    (r"\._allreduce_(word_)?embedding_grads?$", "finalize_model_grads.embedding"),
    (r"\.start_grad_sync$", "ddp.grad_reducescatter"),
    (r"\.(start_param_sync|_dispatch_gather_model_params)$", "optimizer.param_allgather"),
)
DP_MODULES = ("ddp.grad_reducescatter", "optimizer.param_allgather")
# The same collectives on the expert buffers (group DP_EP), as the schedule names them.
EXPERT_DP_MODULES = {"ddp.grad_reducescatter": "ddp.expert_grad_reducescatter",
                     "optimizer.param_allgather": "optimizer.expert_param_allgather"}


@dataclass(frozen=True)
class Row:
    stage: int
    phase: str
    layer: int | None
    module: str
    collective: str
    group: str
    group_size: int
    elements: int
    schedule_count: int
    trace_count: int
    schedule_bytes: int
    trace_bytes: int
    status: str
    note: str

    def values(self) -> list:
        return ["" if getattr(self, c) is None else getattr(self, c) for c in COLUMNS]


def schedule_element_bytes(module: str, comm: megatron.Comm | None = None) -> int:
    """The element size the schedule's byte count assumes for a collective.

    Activations and their gradients, pipeline messages and the parameter all-gather are
    bf16 (2 bytes); the cross-entropy scalars and every gradient reduction fp32 (4); a
    collective whose ``Comm`` names its element size (MoE's int64 token counts) that size."""
    if comm is not None and comm.element_bytes:
        return comm.element_bytes
    if module.startswith(("loss.", "finalize_model_grads.", "ddp.")):
        return megatron.FP32
    return megatron.BF16


def trace_module(record: TraceRecord) -> str:
    """The schedule's name for the module that issued a traced collective."""
    module = record.module
    if record.collective in ("send", "recv"):
        return "pipeline.send_forward" if record.phase == "forward" else "pipeline.send_backward"
    if record.layer is not None:
        # Module paths hold the stage-local layer index; the schedule names global layers.
        return re.sub(r"(^|\.)layers\.\d+(\.|$)", rf"\g<1>layers.{record.layer}\g<2>", module, count=1)
    for pattern, name in TRACE_MODULES:
        if re.search(pattern, module):
            return name
    return module


def _group_size(setup: TrainingSetup, group: str) -> int:
    return {"TP": setup.tp, "DP": setup.dp, "PP": setup.pp, "EMB": 2, "EP": setup.ep, "DP_EP": setup.expert_dp,
            "ETP": setup.expert_tp, "TP_EP": setup.expert_tp * setup.ep}.get(group, 0)


def _phase(phase: str, module: str, micro_batch: int | None) -> str:
    """The trace's phase of a schedule collective (see the module docstring)."""
    if phase == "pp":
        return "forward" if module == "pipeline.send_forward" else "backward"
    if phase == "after" or micro_batch is None:
        return "after_backward"
    return "forward" if phase == "fwd" else "backward"


def _elements(module: str, comm: megatron.Comm) -> int:
    width = schedule_element_bytes(module, comm)
    elements = comm.bytes // width
    if elements * width != comm.bytes:
        raise AssertionError(f"{module}: {comm.bytes} bytes is not a whole number of {width}-byte elements")
    return elements


def schedule_release(version: str) -> megatron_releases.Release:
    """The release whose schedule a trace of megatron-core ``version`` is checked against:
    its own, or the newest traced one for a release the schedule does not know (newer,
    or none recorded), so that the check shows what such a release changes."""
    try:
        return megatron_releases.release(version)
    except ConfigError:
        return megatron_releases.release(None)


def _schedule_side(setup: TrainingSetup, stage: int, release: megatron_releases.Release):
    sched = megatron.schedule(setup, stage=stage, megatron_version=release)
    unexpressed = [megatron.as_unexpressed(u) for u in sched.unexpressed]
    why = {(u.module, u.comm): u.why for u in unexpressed if not u.in_rows}
    # Collectives written as rows whose row cannot say all (balanced routing, a DP_EP size).
    caveats: dict[tuple, str] = {}
    for u in unexpressed:
        if u.in_rows:
            key = (stage, _phase(u.phase, u.module, u.micro_batch), u.layer, u.module, u.comm.collective,
                   u.comm.group, _elements(u.module, u.comm))
            caveats[key] = u.why
    counts: dict[tuple, int] = defaultdict(int)
    info: dict[tuple, tuple[int, int, str]] = {}
    places = _bucket_places(sched)
    for e in sched.expected():
        phase, layer = places.get(e.row, (_phase(e.phase, e.module, e.micro_batch), e.layer))
        key = (stage, phase, layer, e.module, e.comm.collective, e.comm.group, _elements(e.module, e.comm))
        counts[key] += 1
        note = caveats.get(key, "")
        if e.row is None:
            note = "not in the workload file: " + why.get((e.module, e.comm), "unexpressed")
        info[key] = (_group_size(setup, e.comm.group), e.comm.bytes, note)
    return counts, info


def _bucket_places(sched) -> dict[int, tuple[str, int | None]]:
    """With overlap_grad_reduce, (phase, layer) of each bucket row as the module docstring's
    **Overlapped buckets** says, by row; empty without."""
    from ..workload.megatron_buckets import overlap_rows

    s = sched.setup
    blocks = sched.blocks
    which = overlap_rows([b.name for b in blocks], s.overlap_grad_reduce, s.overlap_param_gather)
    places: dict[int, tuple[str, int | None]] = {}
    for row in which.reduces:
        after = next((b for b in blocks[row:] if b.micro_batch is not None), None)
        places[row] = ("backward", after.layer if after is not None and s.tp > 1 else None)
    for chain in which.gathers:
        for k, (row, target) in enumerate(chain):
            places[row] = ("forward", blocks[chain[max(k - 1, 0)][1]].layer)
    return places


def _bucket_key(r: TraceRecord, module: str, last_layer: int | None, stage: int, tp: int) -> tuple:
    """A traced bucket collective's key (overlap_grad_reduce; the module docstring)."""
    if r.phase == "backward":
        return (stage, r.phase, last_layer if tp > 1 else None, module, r.collective, r.group, r.elements)
    return (stage, r.phase, r.layer, module, r.collective, r.group, r.elements)


def _trace_side(trace: Trace, stage: int):
    rank = trace.first_rank_of_stage(stage)
    info_of_rank = next((r for r in trace.ranks if r.rank == rank), None)
    paddings = {"DP": info_of_rank.buffer_padding if info_of_rank else 0,
                "DP_EP": info_of_rank.expert_buffer_padding if info_of_rank else 0}
    counts: dict[tuple, int] = defaultdict(int)
    info: dict[tuple, tuple[int, int, str]] = {}
    asynchronous: set[tuple] = set()
    dp_sums: dict[tuple, list[int]] = {}
    bucketed, last_layer = trace.setup.overlap_grad_reduce, None
    for r in trace.rank_records(rank):
        if r.phase == "backward" and r.group not in ("DP", "DP_EP"):
            last_layer = r.layer
        if r.group_size <= 1 or r.collective == "recv":
            continue
        module = trace_module(r)
        if bucketed and r.group in ("DP", "DP_EP") and r.collective == "allgather" and r.phase == "forward":
            module = "optimizer.param_allgather"  # dispatched by a forward pre-hook
        if module in DP_MODULES:
            if r.group == "DP_EP":
                module = EXPERT_DP_MODULES[module]
            if bucketed:  # bucket by bucket, padded, where megatron issues it
                key = _bucket_key(r, module, last_layer, stage, trace.setup.tp)
                counts[key] += 1
                info[key] = (r.group_size, r.bytes, "one bucket, buffer padding included")
                continue
            entry = dp_sums.setdefault((r.phase, module, r.collective, r.group, r.group_size), [0, 0, 0])
            entry[0] += r.elements
            entry[1] += r.bytes
            entry[2] += 1
            continue
        collective = "sendrecv" if r.collective == "send" else r.collective  # the schedule's name
        key = (stage, r.phase, r.layer, module, collective, r.group, r.elements)
        counts[key] += 1
        info[key] = (r.group_size, r.bytes, "")
        if r.async_op:
            asynchronous.add(key)
    for (phase, module, collective, group, size), (elements, nbytes, buckets) in dp_sums.items():
        padding = paddings.get(group, 0)
        key = (stage, phase, None, module, collective, group, elements - padding)
        counts[key] += 1
        notes = []
        if buckets > 1:
            notes.append(f"{buckets} buckets in one coalesced call, summed")
        if padding:
            notes.append(f"buffer padding of {padding} elements left out")
        info[key] = (size, nbytes * (elements - padding) // elements if elements else 0, "; ".join(notes))
    for key in asynchronous:
        size, nbytes, note = info[key]
        info[key] = (size, nbytes, "; ".join(n for n in (note, "asynchronous in megatron") if n))
    return counts, info


def compare(trace: Trace, megatron_version: str | None = None) -> list[Row]:
    """Rows of schedule vs trace for every stage of the traced setup (see the module doc),
    the schedule that of release ``megatron_version`` (default: the traced release's,
    ``schedule_release``)."""
    release = megatron_releases.release(megatron_version) if megatron_version else schedule_release(
        trace.megatron_core)
    rows: list[Row] = []
    for stage in trace.stages:
        s_counts, s_info = _schedule_side(trace.setup, stage, release)
        t_counts, t_info = _trace_side(trace, stage)
        keys = sorted(set(s_counts) | set(t_counts), key=lambda k: (
            k[0], PHASES.index(k[1]), -1 if k[2] is None else k[2], k[3], k[4], k[5], k[6]))
        for key in keys:
            sc, tc = s_counts.get(key, 0), t_counts.get(key, 0)
            size_s, bytes_s, note_s = s_info.get(key, (0, 0, ""))
            size_t, bytes_t, note_t = t_info.get(key, (0, 0, ""))
            if sc and tc:
                status = "match" if sc == tc else "count differs"
            else:
                status = "only in schedule" if sc else "only in trace"
            stage_, phase, layer, module, collective, group, elements = key
            rows.append(Row(
                stage=stage_, phase=phase, layer=layer, module=module, collective=collective, group=group,
                group_size=size_t or size_s, elements=elements, schedule_count=sc, trace_count=tc,
                schedule_bytes=bytes_s, trace_bytes=bytes_t, status=status,
                note="; ".join(n for n in (note_s, note_t) if n),
            ))
    return rows


def differences(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.status != "match"]


def to_csv(rows: list[Row]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in rows:
        writer.writerow(row.values())
    return buf.getvalue()


def summary(rows: list[Row]) -> str:
    """One line per status with its number of rows and collectives, then every difference."""
    lines = []
    for status in STATUSES:
        chosen = [r for r in rows if r.status == status]
        if chosen:
            n = sum(max(r.schedule_count, r.trace_count) for r in chosen)
            lines.append(f"{status}: {len(chosen)} row(s), {n} collective(s)")
    for r in differences(rows):
        where = f"stage {r.stage} {r.phase} {r.module}" + (f" (layer {r.layer})" if r.layer is not None else "")
        lines.append(f"  {r.status}: {where}: {r.collective} {r.group} x{r.elements} elements, "
                     f"schedule {r.schedule_count}, trace {r.trace_count}")
    return "\n".join(lines) + "\n"


CHECK_COLUMNS = ("trace", "rows", "matching", "differing", "verdict")


def check_table(compare_files: dict[str, str]) -> str:
    """The sweep's verdict on the Megatron schedule: one row per trace.

    ``compare_files`` maps a trace key to the text of its comparison CSV (``to_csv``).
    ``differing`` counts rows whose status is not ``match``; the verdict names each of them
    (key and counts), so a disagreement between the schedule and megatron-core is read
    in one table, whatever the size of the sweep.
    """
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CHECK_COLUMNS)
    # Numbers in names sort as numbers: release 0.8.0 before 0.19.2, TP 2 before TP 16.
    for key in sorted(compare_files, key=lambda k: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", k)]):
        rows = list(csv.DictReader(io.StringIO(compare_files[key])))
        bad = [r for r in rows if r["status"] != "match"]
        if bad:
            verdict = "the megatron schedule differs from megatron-core: " + "; ".join(
                f"{r['status']}: stage {r['stage']} {r['phase']} {r['module']}"
                + (f" (layer {r['layer']})" if r["layer"] else "")
                + f" {r['collective']} {r['group']} x{r['elements']} elements, "
                f"schedule {r['schedule_count']}, trace {r['trace_count']}"
                for r in bad
            )
        else:
            verdict = "the megatron schedule issues exactly what megatron-core issues"
        writer.writerow([key, len(rows), len(rows) - len(bad), len(bad), verdict])
    return buf.getvalue()


def rank_differences(trace: Trace) -> list[str]:
    """Ranks of one stage that issued a different sequence of collectives (should be none:
    every TP and DP rank of a stage runs the same program)."""
    out = []
    for stage in trace.stages:
        ranks = sorted(r.rank for r in trace.ranks if r.stage == stage)

        def seq(rank):
            return [(r.op, r.group, r.elements, r.phase, r.module) for r in trace.rank_records(rank)]

        first = seq(ranks[0])
        out += [f"stage {stage}: rank {rank} differs from rank {ranks[0]}" for rank in ranks[1:] if seq(rank) != first]
    return out
