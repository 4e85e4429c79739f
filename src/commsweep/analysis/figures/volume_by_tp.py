"""volume_by_tp.png: payload bytes per iteration by TP and SP, stacked by phase, one bar per
generator; one row of panels per model."""

from __future__ import annotations

from pathlib import Path

from . import canvas as cv
from .tables import first_network_volumes


def heights(df, model: str, sp: bool, variants: list[str], phases: list[str]) -> tuple[list, dict]:
    """One panel's TP sizes and, per generator and phase, its bars' heights (GiB per
    iteration, one per TP size). Several points may share model, SP, TP and generator
    (other axes): each point's bytes are summed, then the points averaged."""
    sub = df[(df["model"] == model) & (df["sp"] == sp)]
    per_point = sub.groupby(["tp", "variant", "point", "phase"])["payload_bytes"].sum()
    mean = per_point.groupby(["tp", "variant", "phase"]).mean()
    tps = sorted(sub["tp"].unique())
    return tps, {var: {phase: [mean.get((tp, var, phase), 0.0) / cv.GiB for tp in tps] for phase in phases}
                 for var in variants}


def draw(summary_csv: Path, output: Path) -> None:
    """The figure from ``results/summary.csv``. Volumes do not depend on the network: the
    first network's rows are used."""
    df = first_network_volumes(summary_csv)
    if df is None:
        cv.message_figure(output, cv.NO_VOLUMES)
        return
    models = sorted(df["model"].unique())
    sps = sorted(df["sp"].unique())
    variants = [v for v in cv.VARIANT_ORDER if v in set(df["variant"])]
    phases = [p for p in cv.PHASE_LABELS if p in set(df["phase"])]
    fig, axes = cv.pyplot().subplots(
        len(models), len(sps), figsize=(5.2 * len(sps), 3.8 * len(models)), squeeze=False, sharey="row"
    )
    width = 0.8 / max(len(variants), 1)
    for r, model in enumerate(models):
        for c, sp in enumerate(sps):
            ax = axes[r][c]
            tps, bars = heights(df, model, sp, variants, phases)
            for k, var in enumerate(variants):
                cv.stack(ax, cv.bar_positions(len(tps), k, len(variants), width), [
                    (bars[var][phase], dict(color=cv.PHASE_COLOURS[phase], hatch=cv.VARIANT_HATCHES[var],
                                            edgecolor="black", linewidth=0.4)) for phase in phases], width * 0.95)
            cv.tp_axis(ax, tps)
            ax.set_ylabel("payload per iteration (GiB)")
            ax.set_title(f"{model}, {cv.sp_label(sp)}")
            ax.grid(axis="y", alpha=0.3)
    handles = cv.colour_handles(cv.PHASE_COLOURS, phases, cv.PHASE_LABELS.get) + cv.hatch_handles(variants)
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=8)
    fig.suptitle("Communication volume per iteration by TP, SP and phase")
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    cv.finish(fig, output)
