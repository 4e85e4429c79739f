"""tp_bytes_by_phase.png: TP payload per iteration in each phase, one bar per generator, one
panel per TP x SP (one row of panels per model and SP setting, one column per TP size)."""

from __future__ import annotations

from pathlib import Path

from . import canvas as cv
from .tables import first_network_volumes


def phases_of(df) -> list[str]:
    """The phases with TP bytes (forward and input grad when there are none)."""
    tp_rows = df[df["group"] == "TP"]
    return [p for p in ("fwd", "ig", "wg") if p in set(tp_rows["phase"])] or ["fwd", "ig"]


def heights(df, variants: list[str], phases: list[str]) -> dict[tuple, list[float]]:
    """Per (model, SP, TP, generator), the TP payload of each phase in GiB per iteration,
    averaged over the points that share them (other axes); NaN where there is no such point."""
    points = df.drop_duplicates("point")[["point", "model", "sp", "tp", "variant"]]
    per_point = df[df["group"] == "TP"].groupby(["point", "phase"])["payload_bytes"].sum()
    out = {}
    for model in sorted(points["model"].unique()):
        for sp in sorted(points["sp"].unique()):
            for tp in sorted(points["tp"].unique()):
                for var in variants:
                    chosen = points[(points["model"] == model) & (points["sp"] == sp) & (points["tp"] == tp)
                                    & (points["variant"] == var)]["point"]
                    bars = []
                    for phase in phases:
                        values = [per_point.get((p, phase), 0) for p in chosen]
                        bars.append(sum(values) / len(values) / cv.GiB if values else float("nan"))
                    out[model, sp, tp, var] = bars
    return out


def draw(summary_csv: Path, output: Path) -> None:
    """The figure from ``results/summary.csv``, on the first network (volumes do not depend on it)."""
    plt = cv.pyplot()
    df = first_network_volumes(summary_csv)
    if df is None:
        cv.message_figure(output, cv.NO_VOLUMES)
        return
    models, sps, tps = sorted(df["model"].unique()), sorted(df["sp"].unique()), sorted(df["tp"].unique())
    variants = [v for v in cv.VARIANT_ORDER if v in set(df["variant"])]
    phases = phases_of(df)
    bars = heights(df, variants, phases)
    panel_rows = [(m, sp) for m in models for sp in sps]
    fig, axes = plt.subplots(
        len(panel_rows), len(tps), figsize=(2.9 * len(tps) + 0.8, 2.7 * len(panel_rows) + 0.9),
        squeeze=False, sharey="row",
    )
    width = 0.8 / max(len(variants), 1)
    for r, (model, sp) in enumerate(panel_rows):
        for c, tp in enumerate(tps):
            ax = axes[r][c]
            for k, var in enumerate(variants):
                drawn = ax.bar(cv.bar_positions(len(phases), k, len(variants), width), bars[model, sp, tp, var],
                               width * 0.92, color=cv.VARIANT_COLOURS[var], edgecolor="black", linewidth=0.4,
                               label=var)
                ax.bar_label(drawn, fmt="%.2f", fontsize=7, padding=1)
            ax.set_xticks(range(len(phases)), [cv.PHASE_LABELS[p] for p in phases], fontsize=8)
            ax.set_title(f"{model}, TP {tp}, {cv.sp_label(sp)}", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
            ax.margins(y=0.15)
            if c == 0:
                ax.set_ylabel("TP payload per iteration (GiB)", fontsize=8)
            ax.set_xlabel("phase", fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=cv.VARIANT_COLOURS[v], edgecolor="black") for v in variants]
    fig.legend(handles, variants, loc="lower center", ncol=len(variants), frameon=False, fontsize=9)
    fig.suptitle("Tensor-parallel bytes per phase: AICB's two paths against Megatron")
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    cv.finish(fig, output)
