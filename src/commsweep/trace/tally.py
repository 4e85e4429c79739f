"""Traces of several megatron-core releases side by side: what each issues per layer and phase.

``tally`` reduces one trace to rows keyed by

    (case, stage, phase, scope, module, collective, group, group_size, elements)

with the number of such collectives (``count``) and the torch.distributed function that
issued them (``op``). ``scope`` is ``layer`` for a transformer layer's collectives, counted
per layer (every layer of a stage issues the same: checked, an error otherwise) with
``module`` the path inside the layer (``self_attention.linear_qkv``), and ``model`` for
everything else, with ``module`` the Megatron schedule's name for it (``compare.trace_module``).
Elements are what travelled, unlike the comparison with the schedule: the DP collectives
keep their bucket padding, and groups of one rank are kept (megatron issues the call).
Pipeline receives are left out (each is the other end of a neighbour's send).

``to_csv`` writes several releases' tallies (``COLUMNS``, one row per release and key:
``results/trace_versions.csv``); ``differences`` names every key whose count differs
between releases, ``op_changes`` every change of the torch function behind a collective,
and ``order_changes`` every stage whose collectives, equal in number, come in another
order. ``report`` puts the three in words (``results/trace_versions.txt``).

A trace comes in as its stages' records (``Stages``): from a ``Trace`` (``stages_of``) or
from the CSV ``commsweep trace`` writes, which holds the first rank of each stage in
rank order (``stages_of_records``).
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..base.errors import CommsweepError, InputError
from .compare import trace_module
from .records import PHASES, Trace, TraceRecord

Stages = dict[int, list[TraceRecord]]  # pipeline stage -> the records of its first rank, in call order

COLUMNS = ("megatron_core", "case", "stage", "phase", "scope", "module", "op", "collective", "group",
           "group_size", "elements", "count")
KEY = ("case", "stage", "phase", "scope", "module", "collective", "group", "group_size", "elements")
_IN_LAYER = re.compile(r"(?:^|\.)layers\.\d+\.(.+)$")


@dataclass(frozen=True)
class Row:
    megatron_core: str
    case: str
    stage: int
    phase: str
    scope: str
    module: str
    op: str
    collective: str
    group: str
    group_size: int
    elements: int
    count: int

    @property
    def key(self) -> tuple:
        return tuple(getattr(self, c) for c in KEY)

    def values(self) -> list:
        return [getattr(self, c) for c in COLUMNS]


def version_key(version: str) -> tuple:
    """Sort key of a release number (0.8.0 before 0.10.0)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.+]", version))


def stages_of(trace: Trace) -> Stages:
    return {stage: trace.rank_records(trace.first_rank_of_stage(stage)) for stage in trace.stages}


def stages_of_records(records: list[TraceRecord]) -> Stages:
    """The stages of a trace CSV's records (one rank per stage: megatron numbers the
    pipeline stages' ranks in ascending order)."""
    ranks = sorted({r.rank for r in records})
    return {stage: [r for r in records if r.rank == rank] for stage, rank in enumerate(ranks)}


def tally(release: str, case: str, stages: Stages) -> list[Row]:
    """One trace's rows (see the module doc)."""
    rows: list[Row] = []
    for stage, records in sorted(stages.items()):
        per_layer: dict[int, dict[tuple, int]] = defaultdict(lambda: defaultdict(int))
        model: dict[tuple, int] = defaultdict(int)
        for r in records:
            if r.collective == "recv":
                continue
            match = _IN_LAYER.search(r.module) if r.layer is not None else None
            if match:
                per_layer[r.layer][(r.phase, "layer", match.group(1), r.op, r.collective, r.group,
                                    r.group_size, r.elements)] += 1
            else:
                model[(r.phase, "model", trace_module(r), r.op, r.collective, r.group, r.group_size, r.elements)] += 1
        layers = list(per_layer.values())
        if any(dict(layer) != dict(layers[0]) for layer in layers[1:]):
            raise CommsweepError(f"{release} {case}: the layers of stage {stage} issue different collectives")
        for counts in ([layers[0]] if layers else []) + [model]:
            for (phase, scope, module, op, collective, group, size, elements), n in counts.items():
                rows.append(Row(release, case, stage, phase, scope, module, op, collective, group, size, elements, n))
    return sorted(rows, key=_order)


def _order(row: Row) -> tuple:
    return (version_key(row.megatron_core), row.case, row.stage, PHASES.index(row.phase), row.scope != "layer",
            row.module, row.collective, row.group, row.elements)


def to_csv(rows: Iterable[Row]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in sorted(rows, key=_order):
        writer.writerow(row.values())
    return buf.getvalue()


def read_csv(text: str, *, source: str = "<trace_versions>") -> list[Row]:
    """Parse ``to_csv``'s output (for the docs and the tests)."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(header) != COLUMNS:
        raise InputError(f"expected the header {','.join(COLUMNS)}", file=source, line=1)
    out = []
    for line, values in enumerate(reader, start=2):
        if len(values) != len(COLUMNS):
            raise InputError(f"expected {len(COLUMNS)} fields, got {len(values)}", file=source, line=line)
        fields = dict(zip(COLUMNS, values))
        for name in ("stage", "group_size", "elements", "count"):
            if not fields[name].isdigit():
                raise InputError(f"expected a whole number, got {fields[name]!r}", file=source, line=line, field=name)
            fields[name] = int(fields[name])
        out.append(Row(**fields))
    return out


@dataclass(frozen=True)
class Difference:
    """A key whose count is not the same in every release: ``counts`` per release (0 when
    a release does not issue it)."""

    key: tuple
    counts: tuple[tuple[str, int], ...]

    def sentence(self) -> str:
        case, stage, phase, scope, module, collective, group, size, elements = self.key
        where = f"per layer, {module}" if scope == "layer" else module
        runs = _runs(self.counts)
        told = "; ".join(f"{_span(vs)}: {n}" for vs, n in runs)
        return (f"{case} stage {stage}, {phase}, {where}: {collective} over {group} ({size} ranks) of "
                f"{elements} elements, how many: {told}")


def _runs(counts: Iterable[tuple[str, int]]) -> list[tuple[list[str], int]]:
    runs: list[tuple[list[str], int]] = []
    for version, n in counts:
        if runs and runs[-1][1] == n:
            runs[-1][0].append(version)
        else:
            runs.append(([version], n))
    return runs


def _span(versions: list[str]) -> str:
    return versions[0] if len(versions) == 1 else f"{versions[0]} to {versions[-1]}"


def _releases(rows: Iterable[Row]) -> list[str]:
    return sorted({r.megatron_core for r in rows}, key=version_key)


def differences(rows: list[Row]) -> list[Difference]:
    """Every key of a case traced by two or more releases whose count differs among them."""
    releases_of_case: dict[str, set[str]] = defaultdict(set)
    counts: dict[tuple, dict[str, int]] = defaultdict(dict)
    for r in rows:
        releases_of_case[r.case].add(r.megatron_core)
        counts[r.key][r.megatron_core] = counts[r.key].get(r.megatron_core, 0) + r.count
    out = []
    for key, by_release in counts.items():
        releases = sorted(releases_of_case[key[0]], key=version_key)
        values = tuple((v, by_release.get(v, 0)) for v in releases)
        if len({n for _, n in values}) > 1:
            out.append(Difference(key, values))
    return sorted(out, key=lambda d: (d.key[0], d.key[1], PHASES.index(d.key[2]), d.key[3:]))


def op_changes(rows: list[Row]) -> list[str]:
    """The torch.distributed functions behind each collective, per run of releases that
    call the same (one line per collective kind whose function changed)."""
    ops: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for r in rows:
        ops[r.collective][r.megatron_core].add(r.op)
    lines = []
    for collective, by_release in sorted(ops.items()):
        runs = _runs((v, ", ".join(sorted(by_release[v]))) for v in sorted(by_release, key=version_key))
        if len(runs) > 1:
            lines.append(f"{collective}: " + "; ".join(f"{_span(vs)}: {op}" for vs, op in runs))
    return lines


def _sequence(records: list[TraceRecord]) -> list[tuple]:
    return [(r.phase, trace_module(r), r.collective, r.group, r.elements) for r in records if r.collective != "recv"]


def order_changes(traces: Mapping[str, Mapping[str, Stages]]) -> list[str]:
    """Each stage whose collectives differ in order only, between consecutive releases
    (``traces``: release -> case -> stages): where, and the two orders of the part that moved."""
    import difflib

    lines = []
    releases = sorted(traces, key=version_key)
    for older, newer in zip(releases, releases[1:]):
        for case in sorted(set(traces[older]) & set(traces[newer])):
            for stage in sorted(set(traces[older][case]) & set(traces[newer][case])):
                a, b = _sequence(traces[older][case][stage]), _sequence(traces[newer][case][stage])
                if a == b or sorted(a) != sorted(b):
                    continue  # the same, or different collectives (``differences`` names those)
                opcodes = [op for op in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes() if op[0] != "equal"]
                first = min(op[1] for op in opcodes), min(op[3] for op in opcodes)
                last = max(op[2] for op in opcodes), max(op[4] for op in opcodes)
                lines.append(f"{case} stage {stage}: {older} issues {_items(a[first[0]:last[0]])}, "
                             f"{newer} {_items(b[first[1]:last[1]])}")
    return lines


def _items(part: list[tuple]) -> str:
    return " then ".join(f"{phase} {module} {collective} {group} x{elements}"
                         for phase, module, collective, group, elements in part)


def read_traces(paths: Iterable[str]) -> tuple[list[Row], dict[str, dict[str, Stages]]]:
    """The rows and stages of trace CSVs laid out as ``.../<release>/<case>.csv`` (where
    the pipeline writes them: ``results/traces/<release>/<key>.csv``)."""
    from pathlib import Path

    from ..base.files import read_text
    from .records import read_csv
    from .versions import VersionError, check_version

    rows: list[Row] = []
    traces: dict[str, dict[str, Stages]] = defaultdict(dict)
    for path in paths:
        p = Path(path)
        try:
            release = check_version(p.parent.name, where=str(p))
        except VersionError:
            raise InputError(f"expected the trace of a release, in a folder named after it (.../0.8.0/{p.name})",
                             file=str(p)) from None
        stages = stages_of_records(read_csv(read_text(p), source=str(p)))
        traces[release][p.name.removesuffix(".csv")] = stages
        rows += tally(release, p.name.removesuffix(".csv"), stages)
    return rows, dict(traces)


def report(rows: list[Row], traces: Mapping[str, Mapping[str, Stages]]) -> str:
    """The differences between releases in words: counts, torch functions and order."""
    releases = _releases(rows)
    cases = sorted({r.case for r in rows})
    lines = [f"releases: {', '.join(releases)}", f"cases: {', '.join(cases)}", ""]
    found = differences(rows)
    lines.append(f"collectives that differ in number, group, size, phase or module: {len(found)}")
    lines += ["  " + d.sentence() for d in found]
    changes = op_changes(rows)
    lines.append(f"torch.distributed functions that changed: {len(changes)}")
    lines += ["  " + line for line in changes]
    orders = order_changes(traces)
    lines.append(f"stages whose collectives come in another order: {len(orders)}")
    lines += ["  " + line for line in orders]
    return "\n".join(lines) + "\n"
