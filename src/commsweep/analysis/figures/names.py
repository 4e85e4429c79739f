"""The figures of a sweep, by name: the one spelling that the steps (``orchestration/steps.py``),
the command line (``commsweep plot``), the landing page and the figure modules read.

A figure's ``name`` is its file (``results/plots/<name>.png``), its step (``plot_<name>``)
and its module (``analysis/figures/<name>.py``); ``commsweep plot`` takes it with dashes
(``kind``). Nothing here imports matplotlib or pandas: the Snakefile reads this table.
"""

from __future__ import annotations

from dataclasses import dataclass

VOLUME_BY_TP = "volume_by_tp"
TP_BYTES_BY_PHASE = "tp_bytes_by_phase"
EXPOSED_BY_GROUP = "exposed_by_group"
AUDIT_BY_KIND = "audit_by_kind"
TIMELINE = "timeline"
DIFFERENCE_BY_CAUSE = "difference_by_cause"
EXPOSED_TP_BY_OVERLAP = "exposed_tp_by_overlap"
VOLUME_BY_GROUP = "volume_by_group"


@dataclass(frozen=True)
class Figure:
    """One figure: its name and the table ``commsweep plot`` draws it from (None: a command
    of its own draws it, ``commsweep timeline``)."""

    name: str
    reads: str | None  # summary (summary.csv), by_kind (findings_by_kind.csv), causes (difference_by_cause.csv)

    @property
    def kind(self) -> str:
        """Its word on the command line: ``commsweep plot volume-by-tp``."""
        return self.name.replace("_", "-")

    @property
    def png(self) -> str:
        """Its file, relative to the results folder."""
        return f"plots/{self.name}.png"


FIGURES = {f.name: f for f in (
    Figure(VOLUME_BY_TP, "summary"),
    Figure(VOLUME_BY_GROUP, "summary"),
    Figure(TP_BYTES_BY_PHASE, "summary"),
    Figure(EXPOSED_BY_GROUP, "summary"),
    Figure(AUDIT_BY_KIND, "by_kind"),
    Figure(TIMELINE, None),
    Figure(DIFFERENCE_BY_CAUSE, "causes"),
    Figure(EXPOSED_TP_BY_OVERLAP, "summary"),
)}
# The figures on the landing page (answer.md), the answer's first: the page's rule waits for them.
ON_THE_ANSWER_PAGE = (DIFFERENCE_BY_CAUSE, EXPOSED_TP_BY_OVERLAP)
# The words ``commsweep plot`` takes, in the table's order.
KINDS = tuple(f.kind for f in FIGURES.values() if f.reads)


def by_kind(kind: str) -> Figure:
    """The figure ``commsweep plot KIND`` draws."""
    return next(f for f in FIGURES.values() if f.kind == kind and f.reads)
