"""volume_by_group.png, the MoE view: payload bytes per iteration stacked by communication
group (TP, DP, EP, DP_EP, PP), one bar per generator, x axis TP; one panel per model (rows)
and EP size (columns): where the tokens' all-to-alls (EP) and the experts' gradients
(DP_EP) go beside TP and DP."""

from __future__ import annotations

from pathlib import Path

from . import canvas as cv
from .tables import first_network_volumes


def means(df):
    """Per (model, EP, TP, generator, group), the payload bytes per iteration of the points
    that share them (other axes, e.g. SP), averaged."""
    per_point = df.groupby(["model", "ep", "tp", "variant", "point", "group"])["payload_bytes"].sum()
    return per_point.groupby(["model", "ep", "tp", "variant", "group"]).mean()


def draw(summary_csv: Path, output: Path) -> None:
    """The figure from ``results/summary.csv``, on the first network (volumes do not depend on it)."""
    df = first_network_volumes(summary_csv)
    if df is None:
        cv.message_figure(output, cv.NO_VOLUMES)
        return
    models, eps = sorted(df["model"].unique()), sorted(df["ep"].unique())
    variants = [v for v in cv.VARIANT_ORDER if v in set(df["variant"])]
    groups = [g for g in cv.GROUP_COLOURS if g in set(df["group"])]
    mean = means(df)
    fig, axes = cv.pyplot().subplots(len(models), len(eps), figsize=(4.6 * len(eps) + 0.6, 3.6 * len(models) + 0.8),
                                     squeeze=False, sharey="row")
    width = 0.8 / max(len(variants), 1)
    for r, model in enumerate(models):
        for c, ep in enumerate(eps):
            ax = axes[r][c]
            tps = sorted(df[(df["model"] == model) & (df["ep"] == ep)]["tp"].unique())
            for k, var in enumerate(variants):
                cv.stack(ax, cv.bar_positions(len(tps), k, len(variants), width), [
                    ([mean.get((model, ep, tp, var, group), 0.0) / cv.GiB for tp in tps],
                     dict(color=cv.GROUP_COLOURS[group], hatch=cv.VARIANT_HATCHES[var], edgecolor="black",
                          linewidth=0.4)) for group in groups], width * 0.95)
            cv.tp_axis(ax, tps)
            if c == 0:
                ax.set_ylabel("payload per iteration (GiB)")
            ax.set_title(f"{model}, EP {ep}")
            ax.grid(axis="y", alpha=0.3)
    handles = cv.colour_handles(cv.GROUP_COLOURS, groups, lambda g: f"{g} group") + cv.hatch_handles(variants)
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=8)
    fig.suptitle("Communication volume per iteration by group: EP and DP_EP beside TP and DP")
    fig.tight_layout(rect=(0, 0.07, 1, 0.96))
    cv.finish(fig, output)
