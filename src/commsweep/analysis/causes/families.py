"""The MoE and DeepSeek causes of one point's findings, summed: what ``commsweep audit``'s
table lists after its totals per kind."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from . import catalog
from .rules import DEEPSEEK_CAUSES, MOE_CAUSES

TITLES = (("MoE causes (docs/moe.md):", MOE_CAUSES), ("DeepSeek causes (docs/deepseek.md):", DEEPSEEK_CAUSES))


class Named(Protocol):
    """A finding with its cause (the audit's ``Finding``, audit.csv's ``AuditRow``)."""

    cause: str
    delta_bytes: int
    delta_us: float | None


def totals(findings: Iterable, key) -> dict[str, tuple[int, int, float | None]]:
    """Per ``key(finding)`` (a cause, a kind), in first-seen order: (findings, summed
    delta_bytes, summed delta_us or None where no finding has a time)."""
    acc: dict[str, list] = {}
    for f in findings:
        entry = acc.setdefault(key(f), [0, 0, None])
        entry[0] += 1
        entry[1] += f.delta_bytes
        if f.delta_us is not None:
            entry[2] = (entry[2] or 0.0) + f.delta_us
    return {k: tuple(v) for k, v in acc.items()}


def cause_families(findings: Iterable[Named]) -> dict[str, dict[catalog.Cause, tuple[int, int, float | None]]]:
    """Per title (``TITLES``), the family's causes of one point's findings: per cause, in the
    catalog's order, (findings, summed delta_bytes, summed delta_us or None)."""
    acc = totals(findings, lambda f: f.cause)
    causes = catalog.causes()
    return {title: {causes[slug]: acc[slug] for slug in causes if slug in acc and slug in family}
            for title, family in TITLES}
