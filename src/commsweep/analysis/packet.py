"""Each packet-level point beside its analytical twin: ``results/packet_vs_analytical.csv``.

A sweep with the ``simulation`` axis simulates the same workloads twice: with SimAI's
analytical model and with its packet-level simulator. Where the network is congested, or
each ring step pays a send latency, the packet-level time is the longer; this table puts the
two side by side per point (totals, exposed communication by group), with what only the
packet-level run knows (flow-completion-time spread, PFC pauses) and what its times rest on
(the send latency, the binary's build, the wall time it took).

It reads the summary table (``summary.read``) and each packet-level point's run record
(``simulate.ns3.record``), so it sits with the sweep-wide tables, above the simulators.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ..base import paths
from ..setup.points import PointRow
from ..simulate.ns3 import record
from . import summary

QUANTITIES = (("total_us", "sim_total_us"), ("exposed_us", "sim_exposed_us"), ("dp_us", "sim_dp_us"),
              ("tp_us", "sim_tp_us"), ("ep_us", "sim_ep_us"), ("dp_ep_us", "sim_dp_ep_us"), ("pp_us", "sim_pp_us"))
RECORD_FIELDS = ("flows", "fct_p50_us", "fct_p99_us", "fct_max_us", "slowdown_p99", "pfc_pauses", "send_latency_us",
                 "cc_mode", "topology", "build", "wall_s", "cpu_s", "peak_rss_kb")
COLUMNS = ("point", "analytical_point", "workload", "network",
           *(f"{side}_{name}" for name, _ in QUANTITIES for side in ("analytical", "packet")),
           "packet_over_analytical", *RECORD_FIELDS, "status")


def _ratio(a: str, b: str) -> str:
    try:
        return f"{float(b) / float(a):.4f}" if float(a) else ""
    except ValueError:
        return ""


def _text(value: float | int | None) -> str:
    """A summary number as the summary table writes it (SimAI's whole us: ints; nan, inf)."""
    return "" if value is None else str(value)


def table(summary_rows: list[summary.Row], records: dict[str, dict[str, str]]) -> str:
    """The comparison CSV: one line per packet-level point of the summary, in its order (the
    summary has a line per point and collective; the per-point columns repeat on each)."""
    by_key: dict[str, summary.Row] = {}
    for r in summary_rows:
        by_key.setdefault(r.point.point, r)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in by_key.values():
        if row.point.simulation != "packet":
            continue
        twin_key = row.point.point.removesuffix("_packet")
        twin = by_key.get(twin_key)
        mine, theirs = row.iteration, twin.iteration if twin is not None else {}
        rec = records.get(row.point.point, {})
        values = [row.point.point, twin_key if twin else "", row.point.workload, row.point.network]
        for _, column in QUANTITIES:
            values += [_text(theirs.get(column)), _text(mine.get(column))]
        values.append(_ratio(_text(theirs.get("sim_total_us")), _text(mine.get("sim_total_us"))))
        values += [rec.get(f, "") for f in RECORD_FIELDS]
        values.append(row.status)
        writer.writerow(values)
    return buf.getvalue()


def read_records(paths: list[str | Path]) -> dict[str, dict[str, str]]:
    """Packet-level records by point (the point folder's name). A failed point's record is
    left out, whether missing or its failed job's marker (``status.MARKER``): its line in the
    table has no record columns, and its status (the summary's) names the failure."""
    from ..base.status import is_marker

    out = {}
    for path in paths:
        path = Path(path)
        if path.exists() and not is_marker(path):
            out[path.parent.name] = record.read(path)
    return out


def without_pairs(points: list[PointRow], files: paths.PointFiles) -> list[str]:
    """Why ``packet_difference_by_cause.csv`` has no row: each packet-level point of an AICB
    point and its Megatron partner that failed, ``point: cause`` (empty when none did). The
    table is then its header alone; the landing page says the sweep has no pair and lists
    these, and the step's log says them too."""
    from ..base.status import failures, reasons

    out = []
    for p in points:
        if p.simulation == "packet":
            failed = failures(files, p.workload, p.point)
            if failed:
                out.append(f"{p.point}: {reasons(failed)}")
    return out
