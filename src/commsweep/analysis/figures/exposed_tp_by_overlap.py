"""exposed_tp_by_overlap.png: exposed TP communication per iteration against SimAI's TP overlap
ratio (-tp_o), per path.

Volume is volume, exposure is a separate knob: SimAI exposes ``time x (1 - tp_o)`` of every
TP collective. Only what was simulated is drawn: a marker per generator at each ratio the
sweep simulated (the ``tp_overlap`` axis, or ``default_tp_overlap`` for a sweep without it),
the simulated exposed TP time of its points there, and lines only between simulated ratios
(a sweep of one ratio has markers alone, and the title says how to get lines). One panel per
model, EP, TP > 1 and SP setting on the first network; Megatron's points are the same for
both ``aiob`` settings (exposure does not depend on compute).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...setup.points import AICB_AIOB, AICB_DEFAULT, MEGATRON, MEGATRON_AIOB, variant_of
from . import canvas as cv
from .tables import read_summary

STYLES = {AICB_DEFAULT: ("#c44e52", "-"), AICB_AIOB: ("#dd8452", "-"), MEGATRON: ("#4c72b0", "--"),
          MEGATRON_AIOB: ("#4c72b0", "--")}


def simulated_points(df, default_tp_overlap: float = 0.0):
    """One row per point with TP > 1 on the sweep's first network that SimAI did not
    overflow: its ``variant``, ``tp_overlap`` and simulated exposed TP time (``sim_tp_us``);
    an ``ep`` of 1 where the sweep has no EP axis."""
    df = df[df["network"] == df["network"].iloc[0]].copy()
    if "tp_overlap" not in df.columns:
        df["tp_overlap"] = default_tp_overlap
    df = df[df["tp"] > 1]
    df["variant"] = [variant_of(s, a) for s, a in zip(df["schedule"], df["aiob"])]
    points = df.drop_duplicates("point").set_index("point")
    points = points[points["sim_tp_us"] <= cv.OVERFLOW_US]
    if "ep" not in points.columns:
        points["ep"] = 1
    return points


def panels_of(points) -> list[tuple]:
    """The panels, (model, EP, TP, SP) each: points of other EP sizes are other lines (MoE sweeps)."""
    return sorted({(m, e, t, s) for m, e, t, s in zip(points["model"], points["ep"], points["tp"], points["sp"])})


def lines(sub) -> list[tuple[str, object]]:
    """The panel's points ``sub`` per line drawn: each generator's first variant (both Megatron
    variants have the same TP time), its label and its rows."""
    drawn, out = set(), []
    for var in (AICB_DEFAULT, AICB_AIOB, MEGATRON_AIOB, MEGATRON):
        mine = sub[sub["variant"] == var]
        label = cv.GENERATORS[var]
        if mine.empty or label in drawn:
            continue
        drawn.add(label)
        out.append((var, mine))
    return out


@dataclass(frozen=True)
class Curve:
    """One generator's simulated exposed TP time (ms per iteration, its points averaged) at each
    TP overlap ratio simulated, in increasing ratio."""

    variant: str
    ratios: tuple[float, ...]
    exposed_ms: tuple[float, ...]


def curves(sub) -> list[Curve]:
    """The panel's curves: what its points ``sub`` simulated, nothing in between or beyond."""
    out = []
    for var, mine in lines(sub):
        by_ratio = mine.groupby("tp_overlap")["sim_tp_us"].mean().sort_index()
        out.append(Curve(var, tuple(float(r) for r in by_ratio.index), tuple(float(v) / 1000 for v in by_ratio)))
    return out


def _panel(ax, sub, title: str, first_column: bool) -> list[str]:
    """One panel's markers, and lines between them; the generators drawn."""
    shown = []
    for curve in curves(sub):
        colour, style = STYLES[curve.variant]
        ax.plot(curve.ratios, curve.exposed_ms, color=colour, linestyle=style if len(curve.ratios) > 1 else "",
                linewidth=1.2, marker="o", markersize=4)
        shown.append(cv.GENERATORS[curve.variant])
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("TP overlap ratio (SimAI -tp_o)", fontsize=8)
    if first_column:
        ax.set_ylabel("exposed TP comm (ms per iteration)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    return shown


def draw(summary_csv: Path, output: Path, *, default_tp_overlap: float = 0.0) -> None:
    """The figure from ``results/summary.csv``; ``default_tp_overlap``: the ratio of a sweep's
    points without a ``tp_overlap`` axis (its ``simulator.overlap.tp``)."""
    from matplotlib.lines import Line2D

    df = read_summary(summary_csv)
    if df.empty or df["sim_tp_us"].isna().all():
        cv.message_figure(output, cv.NO_TIMES)
        return
    network = df["network"].iloc[0]
    if not (df[df["network"] == network]["tp"] > 1).any():
        cv.message_figure(output, "No point with TP > 1: nothing is sent on TP.")
        return
    points = simulated_points(df, default_tp_overlap)
    panels = panels_of(points)
    ncols = min(4, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = cv.pyplot().subplots(nrows, ncols, figsize=(3.4 * ncols + 0.4, 2.9 * nrows + 1.0), squeeze=False)
    shown = []
    several_ep = len({e for _, e, _, _ in panels}) > 1
    for i, (model, ep, tp, sp) in enumerate(panels):
        sub = points[(points["model"] == model) & (points["ep"] == ep) & (points["tp"] == tp) & (points["sp"] == sp)]
        title = f"{model}, {f'EP {ep}, ' if several_ep or ep > 1 else ''}TP {tp}, {cv.sp_label(sp)}"
        for label in _panel(axes[i // ncols][i % ncols], sub, title, i % ncols == 0):
            if label not in shown:
                shown.append(label)
    for j in range(len(panels), nrows * ncols):
        axes[j // ncols][j % ncols].axis("off")
    ratios = sorted(set(points["tp_overlap"]))
    handles = [Line2D([], [], color=cv.VARIANT_COLOURS[v], linestyle=("--" if v == "Megatron" else "-")
                      if len(ratios) > 1 else "", marker="o", markersize=4, label=v) for v in shown]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=8)
    title = f"Exposed TP communication against the TP overlap ratio (network {network})"
    if len(ratios) == 1:
        title += (f"\nsimulated at one ratio only ({ratios[0]:g}): list several in sweep.tp_overlap "
                  "to see exposure fall with overlap")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.6 / fig.get_figheight(), 1, 0.96))
    cv.finish(fig, output)
