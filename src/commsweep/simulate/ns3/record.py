"""A packet-level run's record: one CSV row per run, its writer and its reader.

What a point's packet-level simulation adds to the analytical tables (which it also
writes: EndToEnd.csv, collectives.csv, times.csv): the settings it ran with (the send
latency in SimAI's real unit, the network's knobs, the topology file), the build profile of
the binary, the flow-completion-time spread, PFC pauses, link utilisation, and what the run
cost (wall and CPU seconds, peak memory). ``wall_s`` and ``build`` always travel together: a time
from a debug build is not a time from an optimised one.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from ...base.errors import InputError
from ...base.files import read_text, write_text
from . import conf
from .runner import Ns3Run

COLUMNS = (
    "build", "threads", "send_latency_us", "AS_SEND_LAT", "cc_mode", "buffer_mb", "ecn", "dynamic_pfc_threshold",
    "packet_payload", "nvls", "pxn", "topology", "total_us", "compute_us", "exposed_us", "exposed_dp_us",
    "exposed_dp_ep_us", "exposed_tp_us", "exposed_ep_us", "exposed_pp_us", "flows", "flow_bytes", "fct_p50_us",
    "fct_p99_us", "fct_max_us", "slowdown_p50", "slowdown_p99", "slowdown_max", "pfc_pauses", "pfc_resumes",
    "utilization_pct", "wall_s", "cpu_s", "peak_rss_kb", "warnings", "command",
)
NUMBERS = ("total_us", "compute_us", "exposed_us", "fct_p50_us", "fct_p99_us", "fct_max_us", "slowdown_p50",
           "slowdown_p99", "slowdown_max", "wall_s", "cpu_s")
INTEGERS = ("threads", "send_latency_us", "cc_mode", "buffer_mb", "packet_payload", "flows", "flow_bytes", "pfc_pauses",
            "pfc_resumes")


def _g(value: float, digits: int = 6) -> str:
    return "nan" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}g}"


def row(result: Ns3Run, settings: conf.Settings, *, threads: int, topology: str) -> dict[str, str]:
    """The record of one checked run."""
    e = result.endtoend
    f = result.flows
    comp = e.components
    return {
        "build": result.build, "threads": str(threads), "send_latency_us": str(settings.send_latency_us),
        "AS_SEND_LAT": conf.knobs(settings)["AS_SEND_LAT"], "cc_mode": str(settings.cc_mode),
        "buffer_mb": str(settings.buffer_mb), "ecn": str(int(settings.ecn)),
        "dynamic_pfc_threshold": str(int(settings.dynamic_pfc_threshold)), "packet_payload": str(settings.packet_payload),
        "nvls": str(int(settings.nvls)), "pxn": str(int(settings.pxn)), "topology": topology,
        "total_us": f"{e.total_time:.3f}", "compute_us": f"{e.total_compute:.3f}", "exposed_us": f"{e.total_exposed:.3f}",
        "exposed_dp_us": f"{comp['exposed_dp']:.0f}", "exposed_dp_ep_us": f"{comp['exposed_dp_ep']:.0f}",
        "exposed_tp_us": f"{comp['exposed_tp']:.0f}", "exposed_ep_us": f"{comp['exposed_ep']:.0f}",
        "exposed_pp_us": f"{comp['exposed_pp']:.0f}", "flows": str(f.flows), "flow_bytes": str(f.bytes),
        "fct_p50_us": _g(f.fct_p50_us, 9), "fct_p99_us": _g(f.fct_p99_us, 9), "fct_max_us": _g(f.fct_max_us, 9),
        "slowdown_p50": _g(f.slowdown_p50), "slowdown_p99": _g(f.slowdown_p99), "slowdown_max": _g(f.slowdown_max),
        "pfc_pauses": str(result.pfc_pauses), "pfc_resumes": str(result.pfc_resumes),
        "utilization_pct": ";".join(f"{u:.2f}" for u in result.utilization),
        "wall_s": f"{result.wall_s:.3f}", "cpu_s": "nan" if result.cpu_s is None else f"{result.cpu_s:.3f}",
        "peak_rss_kb": "" if result.peak_rss_kb is None else str(result.peak_rss_kb),
        "warnings": " | ".join(result.warnings), "command": result.command,
    }


def render(values: dict[str, str]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerow([values[c] for c in COLUMNS])
    return buf.getvalue()


def write(path: str | Path, values: dict[str, str]) -> None:
    write_text(path, render(values))


def parse(text: str, *, source: str | Path = "<ns3 record>") -> dict[str, str]:
    """A record this module wrote; numbers checked, naming the field."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or tuple(rows[0]) != COLUMNS:
        raise InputError(f"expected the header {','.join(COLUMNS[:4])},...", file=source, line=1)
    if len(rows) != 2 or len(rows[1]) != len(COLUMNS):
        raise InputError(f"expected one row of {len(COLUMNS)} fields", file=source, line=2)
    values = dict(zip(COLUMNS, rows[1]))
    for name in NUMBERS + INTEGERS:
        try:
            (int if name in INTEGERS else float)(values[name])
        except ValueError:
            raise InputError(f"expected a number, got {values[name]!r}", file=source, line=2, field=name) from None
    return values


def read(path: str | Path) -> dict[str, str]:
    return parse(read_text(path), source=path)
