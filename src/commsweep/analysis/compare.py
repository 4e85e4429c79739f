"""The sweep-wide comparison: AICB's two paths against each other and against Megatron.

A *setting* is a point without its generator: the model, the parallel layout, the batch
and the network. Each setting has up to four *variants*, one per generator:

* ``aicb_default``: AICB's default path (schedule aicb, aiob off);
* ``aicb_aiob``: AICB's AIOB path (schedule aicb, aiob on);
* ``megatron`` and ``megatron_aiob``: the Megatron schedule with placeholder or AIOB
  compute times (the same collectives; only simulated times differ).

Four tables come out of one pass over the sweep, which streams each point's audit once
and never holds more than one point's findings (a 1,000-point sweep has millions):

* ``findings.csv``: every point's audit findings, each row prefixed with the point's key
  only (``point``, then the audit's columns); join with ``results/sweep.csv`` on
  ``point`` for its parameters;
* ``findings_by_kind.csv``: per audited point and kind of finding, with the point's
  columns: ``findings``, ``missing_bytes`` (short of Megatron), ``extra_bytes`` (in
  excess) and the summed ``delta_us``; a few rows per point, what the audit figure reads;
* ``comparison.csv``: per setting, one row per quantity and key, with each variant's value
  and four differences (see ``DIFFERENCES``). Quantities: ``payload_bytes``, ``count`` and
  ``wire_bytes_per_rank`` per phase, collective and group (from the summary table); the
  simulated ``time_us`` and ``exposed_us`` of those collectives; and per point, with empty
  phase and collective, ``total_us``, ``compute_us``, ``bubble_us`` and ``exposed_us`` (all
  groups, group empty, and per group), when the summary table carries the simulate
  stage's times (``SIM_KEY_QUANTITIES``, ``TIME_QUANTITIES``);
* ``verdicts.csv``: per point, its audit totals (bytes short of Megatron, bytes in
  excess, their sum ``misses_bytes``, the summed ``delta_us``), whether it matches
  Megatron, and the setting's verdict in words: which AICB path matches Megatron, and by
  how many bytes each misses.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import IO

from ..base import paths
from ..base.errors import InputError
from ..setup.points import (AICB_AIOB, AICB_DEFAULT, AICB_PATHS, MEGATRON, MEGATRON_AIOB, SETTING_AXES, TABLE_COLUMNS,
                            VARIANTS, PointRow, read_points, table_columns)
from ..simulate.collectives import csv_field
from ..base.files import read_text
from . import audit_csv, summary as summary_table

VARIANT_LABELS = {
    AICB_DEFAULT: "the AICB default path",
    AICB_AIOB: "the AICB AIOB path",
    MEGATRON: "the Megatron schedule",
    MEGATRON_AIOB: "the Megatron schedule (AIOB times)",
}
# (name, minuend, subtrahend). Only COMPUTE_DEPENDENT quantities differ between the two
# Megatron variants; for the others a missing Megatron variant is stood in for by the other.
DIFFERENCES = (
    ("aiob_minus_default", AICB_AIOB, AICB_DEFAULT),
    ("default_minus_megatron", AICB_DEFAULT, MEGATRON),
    ("aiob_minus_megatron", AICB_AIOB, MEGATRON_AIOB),
    ("megatron_aiob_minus_megatron", MEGATRON_AIOB, MEGATRON),
)
KEY_COLUMNS = ("quantity", "phase", "collective", "group")
COMPARISON_COLUMNS = (*SETTING_AXES, *KEY_COLUMNS, *VARIANTS, *(d[0] for d in DIFFERENCES))
VOLUME_QUANTITIES = ("payload_bytes", "count", "wire_bytes_per_rank")
# Simulated times in the summary table (added by the simulate stage, ``summary.SIM_COLUMNS``),
# in us. Per phase, collective and group: the collectives' time before and after overlap.
SIM_KEY_QUANTITIES = ("time_us", "exposed_us")
# The quantities that depend on compute times (the rest are the same for aiob on and off).
COMPUTE_DEPENDENT = ("total_us", "compute_us", "bubble_us")
# Per point, from SimAI's summary line: (quantity, group) -> the columns that may hold it
# (first match wins); group "" means all groups.
TIME_QUANTITIES = {
    ("total_us", ""): ("sim_total_us",),
    ("exposed_us", ""): ("sim_exposed_us",),
    ("exposed_us", "TP"): ("sim_tp_us",),
    ("exposed_us", "DP"): ("sim_dp_us",),
    ("exposed_us", "EP"): ("sim_ep_us",),
    ("exposed_us", "DP_EP"): ("sim_dp_ep_us",),
    ("exposed_us", "PP"): ("sim_pp_us",),
    ("compute_us", ""): ("sim_compute_us",),
    ("bubble_us", ""): ("sim_bubble_us",),
}


def time_columns(header: Iterable[str]) -> dict[str, tuple[str, str]]:
    """The summary's time columns present: column -> (quantity, group)."""
    present = set(header)
    out = {}
    for key, candidates in TIME_QUANTITIES.items():
        column = next((c for c in candidates if c in present), None)
        if column is not None:
            out[column] = key
    return out


FINDINGS_COLUMNS = ("point", *audit_csv.COLUMNS)
VERDICT_COLUMNS = (
    *TABLE_COLUMNS, "variant", "audited", "findings", "missing_bytes", "extra_bytes", "misses_bytes",
    "delta_us", "matches_megatron", "verdict",
)
BY_KIND_COLUMNS = (*TABLE_COLUMNS, "variant", "kind", "findings", "missing_bytes", "extra_bytes", "delta_us")


# -- reading the sweep's outputs ---------------------------------------------------------


@dataclass
class KindTotals:
    """The findings of one kind in one point's audit, summed."""

    findings: int = 0
    missing_bytes: int = 0
    extra_bytes: int = 0
    delta_us: float | None = None


@dataclass
class Totals(KindTotals):
    """A point's audit, summed (``misses_bytes`` = bytes short + bytes in excess), and per kind."""

    group_findings: int = 0
    kinds: dict[str, KindTotals] = field(default_factory=dict)

    @property
    def misses_bytes(self) -> int:
        return self.missing_bytes + self.extra_bytes

    @property
    def matches(self) -> bool:
        """No finding changes what SimAI executes: no bytes off, nothing on a wrong group."""
        return self.misses_bytes == 0 and self.group_findings == 0 and not self.delta_us

    @classmethod
    def of(cls, rows: Iterable[audit_csv.AuditRow]) -> Totals:
        """A point's audit rows, summed per kind (in the order kinds first occur) and in all;
        in the rows' order, so that the ``delta_us`` sums are order-exact. (One loop over
        plain lists: a sweep's audits hold millions of rows.)"""
        per_kind: dict[str, list] = {}  # kind -> [findings, missing_bytes, extra_bytes, delta_us]
        delta_us = None
        for r in rows:
            k = per_kind.get(r[3])  # kind, delta_bytes, delta_us: by place
            if k is None:
                k = per_kind[r[3]] = [0, 0, 0, None]
            k[0] += 1
            if r[10] < 0:
                k[1] -= r[10]
            else:
                k[2] += r[10]
            if r[11] is not None:
                k[3] = (k[3] or 0.0) + r[11]
                delta_us = (delta_us or 0.0) + r[11]
        kinds = {kind: KindTotals(*k) for kind, k in per_kind.items()}
        return cls(findings=sum(k.findings for k in kinds.values()),
                   missing_bytes=sum(k.missing_bytes for k in kinds.values()),
                   extra_bytes=sum(k.extra_bytes for k in kinds.values()), delta_us=delta_us,
                   group_findings=kinds["group"].findings if "group" in kinds else 0, kinds=kinds)


def stream_audit(path: Path | None, point: str, out: IO[str] | None) -> Totals | None:
    """Sum one point's audit, copying its rows to ``out`` after the point's key.

    None when the point has no audit (MoE, or not run). Reads the file once, through its
    reader (``audit_csv``); holds one point's rows at most. A file not written by
    ``audit_csv.to_csv`` is an InputError naming its line and field.
    """
    if path is None or not path.exists():
        return None
    text = read_text(path)
    rows = audit_csv.read_csv(text, source=path)
    t = Totals.of(rows)
    if out is not None and rows:
        body = audit_csv.body(text, source=path)
        key = csv_field(point)
        if '"' not in body and "\r" not in body and body.endswith("\n"):
            # No quoted field: each line is one row, copied as it is (the common case, fast).
            out.write(key + "," + body[:-1].replace("\n", "\n" + key + ",") + "\n")
        else:
            writer = csv.writer(out, lineterminator="\n")
            writer.writerows((point, *r.cells()) for r in rows)
    return t


# -- the tables ------------------------------------------------------------------------


def _write(columns: Iterable[str], rows: Iterable[Iterable]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    return buf.getvalue()


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def comparison_csv(points: list[PointRow], summary: list[summary_table.Row]) -> str:
    """Each setting's quantities per variant, with the differences between variants
    (``summary``: the complete points' rows of the summary table)."""
    point_of = {p.point: p for p in points}
    # setting -> variant -> key -> value; and which variants each setting has.
    values: dict[tuple, dict[str, dict[tuple, float]]] = {}
    columns = time_columns(summary_table.SIM_COLUMNS)
    seen_time: set[str] = set()
    for r in summary:
        p = point_of.get(r.point.point)
        if p is None or r.volume is None:
            continue
        setting, var = p.setting, p.variant
        table = values.setdefault(setting, {}).setdefault(var, {})
        v = r.volume
        for q in VOLUME_QUANTITIES:
            key = (q, v.phase, v.collective, v.group)
            table[key] = table.get(key, 0) + getattr(v, q)
        for q in SIM_KEY_QUANTITIES:
            value = getattr(r, q)
            if value is not None:
                key = (q, v.phase, v.collective, v.group)
                table[key] = table.get(key, 0) + value
        if r.point.point not in seen_time:
            seen_time.add(r.point.point)
            for column, (quantity, group) in columns.items():
                value = r.iteration.get(column)
                if value is not None:
                    table[(quantity, "", "", group)] = value
    # Points without any volume row (nothing communicated) still exist as a variant.
    for p in points:
        values.setdefault(p.setting, {}).setdefault(p.variant, {})

    rows = []
    for setting in sorted(values):
        by_variant = values[setting]
        keys = sorted({k for table in by_variant.values() for k in table}, key=_key_order)
        for key in keys:
            row: dict[str, float | int | None] = {}
            for var in VARIANTS:
                if var in by_variant:
                    default = 0 if key[0] in VOLUME_QUANTITIES else None
                    row[var] = by_variant[var].get(key, default)
                else:
                    row[var] = None
            # Only the iteration's total, compute and bubble depend on compute times: for every
            # other quantity one Megatron variant stands in for the other.
            stand_in = key[0] not in COMPUTE_DEPENDENT
            diffs = []
            for name, a, b in DIFFERENCES:
                use = stand_in and name != "megatron_aiob_minus_megatron"
                left, right = _value(row, a, use), _value(row, b, use)
                diffs.append(None if left is None or right is None else left - right)
            rows.append([*setting, *key, *(_fmt(row[v]) for v in VARIANTS), *(_fmt(d) for d in diffs)])
    optional = table_columns(points)[len(TABLE_COLUMNS):]
    columns = (*SETTING_AXES, *optional, *COMPARISON_COLUMNS[len(SETTING_AXES):])
    return _write(columns, rows)


_MEGATRON_PAIR = {MEGATRON: MEGATRON_AIOB, MEGATRON_AIOB: MEGATRON}


def _value(row: dict, variant: str, stand_in: bool):
    value = row[variant]
    if value is None and stand_in and variant in _MEGATRON_PAIR:
        value = row[_MEGATRON_PAIR[variant]]
    return value


_QUANTITY_ORDER = (*VOLUME_QUANTITIES, *SIM_KEY_QUANTITIES, "total_us", "compute_us", "bubble_us")
_PHASES = ("", "fwd", "ig", "wg", "pp")
_GROUPS = ("", "TP", "EP", "DP", "DP_EP", "PP")


def _key_order(key: tuple) -> tuple:
    quantity, phase, collective, group = key

    def index(seq, value):
        return seq.index(value) if value in seq else len(seq)

    return (index(_QUANTITY_ORDER, quantity), index(_PHASES, phase), collective, index(_GROUPS, group))


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB"


def _misses(label: str, t: Totals) -> str:
    if t.matches:
        return f"{label} matches Megatron"
    text = f"{label} misses {_gib(t.misses_bytes)} ({_gib(t.missing_bytes)} short, {_gib(t.extra_bytes)} extra"
    if t.group_findings:
        text += f", {t.group_findings} on a wrong group or phase"
    return text + ")"


def setting_verdict(variants: dict[str, Totals | None]) -> str:
    """Which AICB path matches Megatron for one setting, and by how many bytes each misses."""
    aicb = {v: t for v, t in variants.items() if v in AICB_PATHS}
    parts = []
    audited = {v: t for v, t in aicb.items() if t is not None}
    if not aicb:
        parts.append("no AICB path in this sweep")
    elif not audited:
        parts.append("not audited (the Megatron schedule does not cover this setting)")
    else:
        matching = [v for v, t in audited.items() if t.matches]
        if len(matching) == len(audited):
            parts.append("; ".join(_misses(VARIANT_LABELS[v], audited[v]) for v in audited))
        else:
            closest = min(audited, key=lambda v: (not audited[v].matches, audited[v].misses_bytes))
            head = (f"{VARIANT_LABELS[matching[0]]} matches Megatron" if matching
                    else f"no AICB path matches Megatron; closest: {VARIANT_LABELS[closest]}")
            others = "; ".join(_misses(VARIANT_LABELS[v], t) for v, t in audited.items() if not t.matches)
            parts.append(f"{head}; {others}")
    for v in (MEGATRON, MEGATRON_AIOB):
        t = variants.get(v)
        if t is not None and not t.matches:
            parts.append(f"{VARIANT_LABELS[v]} has {t.findings} finding(s): a defect of the schedule or the audit")
    return "; ".join(parts)


def verdicts_csv(points: list[PointRow], point_totals: dict[str, Totals | None]) -> str:
    """Per point, its audit totals and its setting's verdict (``point_totals``: None = no audit)."""
    by_setting: dict[tuple, dict[str, Totals | None]] = {}
    for p in points:
        by_setting.setdefault(p.setting, {})[p.variant] = point_totals.get(p.point)
    rows = []
    for p in points:
        t = point_totals.get(p.point)
        verdict = setting_verdict(by_setting[p.setting])
        base = [p.cells[c] for c in table_columns(points)] + [p.variant]
        if t is None:
            rows.append(base + ["no", "", "", "", "", "", "", verdict])
        else:
            rows.append(base + [
                "yes", t.findings, t.missing_bytes, t.extra_bytes, t.misses_bytes, _fmt(t.delta_us),
                "yes" if t.matches else "no", verdict,
            ])
    return _write((*table_columns(points), *VERDICT_COLUMNS[len(TABLE_COLUMNS):]), rows)


def by_kind_csv(points: list[PointRow], point_totals: dict[str, Totals | None]) -> str:
    """Per audited point and kind of finding (in order of first occurrence), the kind's totals."""
    rows = []
    for p in points:
        t = point_totals.get(p.point)
        if t is None:
            continue
        base = [p.cells[c] for c in table_columns(points)] + [p.variant]
        for kind, k in t.kinds.items():
            rows.append(base + [kind, k.findings, k.missing_bytes, k.extra_bytes, _fmt(k.delta_us)])
    return _write((*table_columns(points), *BY_KIND_COLUMNS[len(TABLE_COLUMNS):]), rows)


@dataclass(frozen=True)
class KindRow:
    """A row of findings_by_kind.csv (``by_kind_csv``), typed: the point as the points table
    gives it back, its variant, and one kind's totals (``delta_us`` None where no finding of
    the kind has a time)."""

    point: PointRow
    variant: str
    kind: str
    findings: int
    missing_bytes: int
    extra_bytes: int
    delta_us: float | None

    def value(self, column: str):
        """The row's value in ``column`` of the table."""
        return self.getter(column)(self)

    @staticmethod
    def getter(column: str):
        """What ``value(column)`` reads, as one function (to read a column of many rows)."""
        return attrgetter(column if column in _KIND_FIELDS else f"point.{column}")


_KIND_FIELDS = BY_KIND_COLUMNS[len(TABLE_COLUMNS):]


def read_by_kind(path: str | Path) -> tuple[tuple[str, ...], list[KindRow]]:
    """findings_by_kind.csv as ``by_kind_csv`` wrote it: its columns and its rows; an
    ``InputError`` naming the file, line and field of anything else."""
    from ..setup.points import OPTIONAL_AXES

    reader = csv.reader(io.StringIO(read_text(path)))
    header = tuple(next(reader, ()))
    point_columns = header[:len(header) - len(_KIND_FIELDS)]
    optional = point_columns[len(TABLE_COLUMNS):]
    if (point_columns[:len(TABLE_COLUMNS)] != TABLE_COLUMNS or header[len(point_columns):] != _KIND_FIELDS
            or tuple(a for a in OPTIONAL_AXES if a in optional) != optional):
        raise InputError(f"expected the columns {','.join(BY_KIND_COLUMNS)} (with the sweep's optional axes "
                         f"after {TABLE_COLUMNS[-1]})", file=path, line=1)
    rows = []
    for line, cells in enumerate(reader, start=2):
        if len(cells) != len(header):
            raise InputError(f"expected {len(header)} fields, got {len(cells)}", file=path, line=line)
        point = PointRow.from_cells(dict(zip(point_columns, cells)), file=path, line=line)
        variant, kind, *numbers = cells[len(point_columns):]
        column = ""
        try:
            counts = []
            for column, text in zip(("findings", "missing_bytes", "extra_bytes"), numbers):
                counts.append(int(text))
            column = "delta_us"
            delta_us = float(numbers[3]) if numbers[3] else None
        except ValueError as err:
            raise InputError(f"expected a number ({err})", file=path, line=line, field=column) from None
        rows.append(KindRow(point, variant, kind, *counts, delta_us))
    return header, rows


@dataclass
class Tables:
    """The comparison's small tables (findings.csv is streamed, see ``compare``)."""

    comparison: str
    verdicts: str
    by_kind: str


def compare(sweep_csv: Path, summary_csv: Path, files: paths.PointFiles, findings: IO[str] | None = None) -> Tables:
    """The comparison of a finished sweep; every point's findings are written to ``findings``
    (findings.csv: header and rows) as its audit is read, one point at a time. ``files``
    gives each point's audit (``paths.PointFiles``); a point without one is not audited."""
    points = read_points(sweep_csv)
    summary = summary_table.read(summary_csv).rows
    # A point whose stage failed has no numbers (its summary row says why): leave it out.
    failed = {r.point.point for r in summary if not r.ok}
    points = [p for p in points if p.point not in failed]
    summary = [r for r in summary if r.point.point not in failed]
    if findings is not None:
        findings.write(",".join(FINDINGS_COLUMNS) + "\n")
    point_totals = {p.point: stream_audit(files.audit(p.point), p.point, findings) for p in points}
    return Tables(comparison_csv(points, summary), verdicts_csv(points, point_totals),
                  by_kind_csv(points, point_totals))
