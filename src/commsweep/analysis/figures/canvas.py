"""What every figure draws with: matplotlib off screen, colours, bars side by side and stacked,
legends, and the PNG written atomically with fixed metadata (identical data, identical bytes)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...setup.points import AICB_AIOB, AICB_DEFAULT, MEGATRON, MEGATRON_AIOB, variant_of

GiB = 2**30
MiB = 2**20
DPI = 110
PHASE_LABELS = {"fwd": "forward", "ig": "input grad", "wg": "weight grad", "pp": "pipeline"}
PHASE_COLOURS = {"fwd": "#4c72b0", "ig": "#dd8452", "wg": "#55a868", "pp": "#8172b3"}
# The three generators, in legend order; bars tell them apart by colour or by hatching.
VARIANT_ORDER = ("AICB default path", "AICB AIOB path", "Megatron")
VARIANT_COLOURS = {"AICB default path": "#c44e52", "AICB AIOB path": "#dd8452", "Megatron": "#4c72b0"}
VARIANT_HATCHES = {"AICB default path": "", "AICB AIOB path": "//", "Megatron": ".."}
# AICB's two paths by the slug of difference_by_cause.csv's ``path`` column.
PATH_LABELS = {AICB_DEFAULT: "AICB default path", AICB_AIOB: "AICB AIOB path"}
# The generator of each variant (``points.VARIANTS``), as the legends name it.
GENERATORS = {**PATH_LABELS, MEGATRON: "Megatron", MEGATRON_AIOB: "Megatron"}
GROUP_COLOURS = {"TP": "#4c72b0", "DP": "#55a868", "EP": "#8172b3", "DP_EP": "#937860", "PP": "#da8bc3"}
# Exposed times above this (about 11.6 days) are SimAI's overflow sentinels, not times.
OVERFLOW_US = 1e12
NO_VOLUMES = "No point of the sweep has volumes (see the status column of summary.csv)."
NO_TIMES = "No simulated times in the summary table:\nno point of this sweep was simulated."


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path) -> None:
    """Save a PNG atomically with fixed metadata, so identical data gives identical bytes."""
    from ...base.files import atomic_open

    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=DPI, metadata={"Software": "commsweep"})


def finish(fig, output: Path) -> None:
    """Save the figure and let matplotlib forget it."""
    save(fig, output)
    pyplot().close(fig)


def message_figure(output: Path, text: str) -> None:
    """A small figure that says why there is nothing to draw (the rule still has its PNG)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 2.2))
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=11)
    finish(fig, output)


def variant(schedule: str, aiob: bool) -> str:
    """How a workload was made, as a legend label."""
    return GENERATORS[variant_of(schedule, aiob)]


def sp_label(sp: bool) -> str:
    return "SP on" if sp else "SP off"


def bar_positions(count: int, k: int, n_variants: int, width: float) -> list[float]:
    """x of the k-th of ``n_variants`` side-by-side bars at each of ``count`` ticks."""
    return [i + (k - (n_variants - 1) / 2) * width for i in range(count)]


def stack(ax, xs: Sequence[float], layers: Sequence[tuple[Sequence[float], dict]], width: float) -> list[float]:
    """Bars stacked upwards at ``xs``, one layer a call of ``ax.bar`` (its heights and
    keywords: colour, hatch, ...), each on the ones before; the stack's tops."""
    bottom = [0.0] * len(xs)
    for heights, style in layers:
        ax.bar(xs, heights, width, bottom=bottom, **style)
        bottom = [b + h for b, h in zip(bottom, heights)]
    return bottom


def hatch_handles(variants: list[str], hatches: dict[str, str] = VARIANT_HATCHES,
                  labels: dict[str, str] | None = None) -> list:
    """Legend entries for the hatching that marks each generator."""
    from matplotlib.patches import Patch

    return [Patch(facecolor="white", edgecolor="black", hatch=hatches[v], label=(labels or {}).get(v, v))
            for v in variants]


def colour_handles(colours: dict[str, str], names: Sequence[str], label=lambda name: name) -> list:
    """Legend entries for the colour of each of ``names`` (a phase, a group, a kind)."""
    from matplotlib.patches import Patch

    return [Patch(facecolor=colours[n], edgecolor="black", label=label(n)) for n in names]


def tp_axis(ax, tps: Sequence) -> None:
    """An x axis of TP sizes, one tick each."""
    ax.set_xticks(range(len(tps)), [str(t) for t in tps])
    ax.set_xlabel("tensor parallel size (TP)")
