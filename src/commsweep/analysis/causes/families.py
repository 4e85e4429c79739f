"""The MoE and DeepSeek causes of one point's findings, summed: what ``commsweep audit``'s
table lists after its totals per kind."""

from __future__ import annotations

from collections.abc import Iterable

from .. import audit
from . import catalog
from .rules import DEEPSEEK_CAUSES, MOE_CAUSES, classify, totals

TITLES = (("MoE causes (docs/moe.md):", MOE_CAUSES), ("DeepSeek causes (docs/deepseek.md):", DEEPSEEK_CAUSES))


def cause_families(findings: Iterable[audit.Finding]) -> dict[str, dict[catalog.Cause, tuple[int, int, float | None]]]:
    """Per title (``TITLES``), the family's causes of one point's findings: per cause, in the
    catalog's order, (findings, summed delta_bytes, summed delta_us or None)."""
    rows = [audit.record(f) for f in findings]
    named = classify(rows)
    causes = catalog.causes()
    out = {}
    for title, family in TITLES:
        found = totals(rows, named, family)
        out[title] = {cause: found[slug] for slug, cause in causes.items() if slug in found}
    return out
