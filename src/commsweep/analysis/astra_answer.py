"""The answer page's section on ASTRA-sim: the answer told by two simulators.

From the sweep's ``astra_difference.csv`` (each AICB point minus its Megatron twin, in SimAI's
time and in ASTRA-sim's) and ``astra_vs_simai.csv`` (each point's run, failed ones with their
reason), per AICB path: each setting's difference in both, and where they disagree, by how much
(ASTRA-sim's difference minus SimAI's) and whether the sign flips. Every number is a cell of those
tables or the difference of two. What is not given is said: the tables hold totals per pair, not
ASTRA-sim's time per collective, so the difference by cause is SimAI's alone.
"""

from __future__ import annotations

from pathlib import Path

from ..base.status import is_marker
from ..setup.points import AICB_AIOB, AICB_DEFAULT, PointRow
from .astra_compare import Pair, read_failed, read_pairs
from .causes import setting_label


def _ms(us: float | None) -> str:
    if us is None:
        return "no time"
    sign = "+" if us > 0 else "\u2212" if us < 0 else ""
    return f"{sign}{abs(us) / 1000:,.2f} ms"


def _item(pair: Pair, points: dict[str, PointRow]) -> str:
    row = points.get(pair.point)
    label = f"{setting_label(row)} ({row.network})" if row else pair.point
    text = f"{label}: SimAI {_ms(pair.simai_us)}, ASTRA-sim {_ms(pair.astra_us)}"
    if pair.gap_us is None:
        return text + " (one of the runs gave no time)"
    if pair.flips:
        return text + f": **opposite signs**, {abs(pair.gap_us) / 1000:,.2f} ms apart"
    side = "above" if pair.gap_us > 0 else "below"
    return text + f": ASTRA-sim's is {abs(pair.gap_us) / 1000:,.2f} ms {side} SimAI's"


def lines(pairs_csv: Path, points_csv: Path, points: dict[str, PointRow]) -> list[tuple[str, object]]:
    """The section as (kind, content): ``h2``/``p`` with text, ``ul`` with its items' texts."""
    out: list[tuple[str, object]] = [("h2", "In two simulators: SimAI and ASTRA-sim")]
    for path in (pairs_csv, points_csv):
        if is_marker(path):
            return out + [("p", f"**ASTRA-sim's step failed:** `{path.name}` holds its error "
                                "(`results/steps/astra_compare.status`); SimAI's answer above stands alone.")]
    pairs, failed = read_pairs(pairs_csv), read_failed(points_csv)
    compared = [p for p in pairs if p.gap_us is not None]
    same = sum(1 for p in compared if not p.flips)
    out.append(("p", (
        "Each AICB point's iteration minus its Megatron twin's, as SimAI's analytical model times it and as "
        "upstream ASTRA-sim's analytical backend times the same workloads on the same network "
        f"(`astra_difference.csv`). The two agree on the sign in {same} of {len(compared)} pair(s)"
        + (f"; the largest gap between them is {max(abs(p.gap_us) for p in compared) / 1000:,.2f} ms." if compared
           else ".")
        + " ASTRA-sim charges a latency per message that SimAI's model does not, and runs its own collective "
          "algorithms, so its differences are its own measurement, not a check of SimAI's.")))
    for variant, name in ((AICB_DEFAULT, "AICB default path"), (AICB_AIOB, "AICB AIOB path")):
        mine = [p for p in pairs if p.point in points and points[p.point].variant == variant]
        if mine:
            out.append(("p", f"**{name}**, difference from Megatron:"))
            out.append(("ul", [_item(p, points) for p in mine]))
    if failed:
        out.append(("p", f"**{len(failed)} point(s) have no ASTRA-sim time** (`astra_vs_simai.csv`): "
                         + "; ".join(f"`{point}`: {reason}" for point, reason in failed[:5])
                         + ("; ..." if len(failed) > 5 else "")))
    out.append(("p", (
        "Only totals are given per pair: ASTRA-sim reports each rank's finish and exposed communication, not "
        "each collective's time, so the difference by cause above is SimAI's alone; ASTRA-sim's difference "
        "is not split by cause.")))
    return out
