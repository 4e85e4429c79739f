"""What each AICB path gets wrong, by cause: every AICB point against its Megatron point.

The audit (``analysis/audit.py``) lists every difference between a workload and Megatron's
schedule, row by row. This package names the *cause* of each difference and adds up, per
point and cause, what it does to the bytes SimAI moves and to the exposed communication
time SimAI simulates, signed (+ in excess of Megatron, - short of it) and never netted: a
dropped all-reduce stays a negative row even where an extra one outweighs it.

* ``catalog.yaml``, ``catalog.py``: the causes, as data (slug, label, explanation);
* ``rules.py``: the rule that names each finding's cause (``classify``);
* ``simulated.py``: what a point's simulations and volumes say;
* ``difference.py``: each finding's bytes and time under its cause, summed per cause;
* ``sweep.py``: each AICB point against its Megatron point, for a sweep or a batch;
* ``table.py``: difference_by_cause.csv, its writer and its typed reader;
* ``families.py``: the MoE and DeepSeek causes' totals, for the audit's table;
* ``panels.py``: per setting, what the figure and the landing page show.

To name a new cause (e.g. for MoE), add its entry to ``catalog.yaml`` and its rule to
``rules.RULES``. The names below are the package's face for the layers above and the tests.
"""

from __future__ import annotations

from typing import Any

from .catalog import Cause
from .difference import CauseRow, Part, PointCauses, aggregate, parts
from .families import cause_families
from .panels import PANEL_AXES, Panel, panels, setting_label
from .rules import CP_CAUSES, DEEPSEEK_CAUSES, FALLBACK, MOE_CAUSES, RULES, Context, classify
from .simulated import Simulated, payload_bytes, read_simulated
from .sweep import (audit_of, difference_by_cause, megatron_partners, packet_difference_by_cause, point_causes,
                    points_causes, sweep_causes)
from .table import COLUMNS, Row, assemble, read_csv, to_csv

__all__ = [
    "CAUSES", "COLUMNS", "CP_CAUSES", "DEEPSEEK_CAUSES", "FALLBACK", "MOE_CAUSES", "PANEL_AXES", "RULES", "Cause", "CauseRow",
    "Context", "Panel", "Part", "PointCauses", "Row", "Simulated", "aggregate", "assemble", "audit_of",
    "cause_families", "classify", "difference_by_cause", "megatron_partners", "packet_difference_by_cause", "panels",
    "parts", "payload_bytes", "point_causes", "points_causes", "read_csv", "read_simulated", "setting_label",
    "sweep_causes", "to_csv",
]


def __getattr__(name: str) -> Any:
    # ``causes.CAUSES``: the catalog, read on first use (``catalog.causes``).
    if name == "CAUSES":
        from .catalog import causes

        return causes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
