"""Each packet-level point beside its analytical twin: ``results/packet_vs_analytical.csv``.

A sweep with the ``simulation`` axis simulates the same workloads twice: with SimAI's
analytical model and with its packet-level simulator. Where the network is congested, or
each ring step pays a send latency, the packet-level time is the longer; this table puts the
two side by side per point (totals, exposed communication by group), with what only the
packet-level run knows (flow-completion-time spread, PFC pauses) and what its times rest on
(the send latency, the binary's build, the wall time it took).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ...base.errors import InputError
from . import record

QUANTITIES = (("total_us", "sim_total_us"), ("exposed_us", "sim_exposed_us"), ("dp_us", "sim_dp_us"),
              ("tp_us", "sim_tp_us"), ("ep_us", "sim_ep_us"), ("dp_ep_us", "sim_dp_ep_us"), ("pp_us", "sim_pp_us"))
RECORD_FIELDS = ("flows", "fct_p50_us", "fct_p99_us", "fct_max_us", "slowdown_p99", "pfc_pauses", "send_latency_us",
                 "cc_mode", "topology", "build", "wall_s", "peak_rss_kb")
COLUMNS = ("point", "analytical_point", "workload", "network",
           *(f"{side}_{name}" for name, _ in QUANTITIES for side in ("analytical", "packet")),
           "packet_over_analytical", *RECORD_FIELDS, "status")


def _ratio(a: str, b: str) -> str:
    try:
        return f"{float(b) / float(a):.4f}" if float(a) else ""
    except ValueError:
        return ""


def table(summary_rows: list[dict[str, str]], records: dict[str, dict[str, str]]) -> str:
    """The comparison CSV: one line per packet-level point of the summary, in its order (the
    summary has a line per point and collective; the per-point columns repeat on each)."""
    by_key: dict[str, dict[str, str]] = {}
    for r in summary_rows:
        by_key.setdefault(r["point"], r)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in by_key.values():
        if row.get("simulation") != "packet":
            continue
        twin_key = row["point"].removesuffix("_packet")
        twin = by_key.get(twin_key, {})
        rec = records.get(row["point"], {})
        values = [row["point"], twin_key if twin else "", row.get("workload", ""), row.get("network", "")]
        for _, column in QUANTITIES:
            values += [twin.get(column, ""), row.get(column, "")]
        values.append(_ratio(twin.get("sim_total_us", ""), row.get("sim_total_us", "")))
        values += [rec.get(f, "") for f in RECORD_FIELDS]
        values.append(row.get("status", ""))
        writer.writerow(values)
    return buf.getvalue()


def read_records(paths: list[str | Path]) -> dict[str, dict[str, str]]:
    """Packet-level records by point (the point folder's name); a missing one (a failed point) is left out."""
    out = {}
    for path in paths:
        path = Path(path)
        if path.exists():
            out[path.parent.name] = record.read(path)
    return out


def read_summary(path: str | Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if rows and "point" not in rows[0]:
        raise InputError("not a summary (no 'point' column)", file=path, line=1)
    return rows
