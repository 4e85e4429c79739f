"""exposed_by_group.png: simulated exposed communication time per iteration, stacked by group.

Like with like: each AICB path beside the Megatron point of the same compute times (the
default path, with no compute times, beside the Megatron schedule without AIOB times; the
AIOB path beside the Megatron schedule with them), never an average of the two Megatron
variants. Panels: one row per model, network and ``aiob`` setting, one column per SP
setting; x: TP size. With a ``tp_overlap`` axis, its first ratio only. Needs the simulate
stage's times in the summary table (``compare.TIME_QUANTITIES``); where no point has them
the figure says so instead of guessing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...setup.points import AICB_DEFAULT, AICB_AIOB, MEGATRON, MEGATRON_AIOB, VARIANTS, variant_of
from . import canvas as cv
from .tables import one_tp_overlap, read_summary

# Megatron with AIOB times cross-hatched, without them dotted: the legend tells the two apart.
HATCHES = {AICB_DEFAULT: "", AICB_AIOB: "//", MEGATRON: "..", MEGATRON_AIOB: "xx"}
LABELS = {**cv.PATH_LABELS, MEGATRON: "Megatron", MEGATRON_AIOB: "Megatron (AIOB times)"}


@dataclass(frozen=True)
class Bars:
    """One generator's bars in one panel: per group, a height per TP size (ms per iteration),
    and per TP size whether SimAI overflowed there (its bar is drawn empty)."""

    heights: dict[str, list[float]]
    overflow: list[bool]


def exposed_columns(columns) -> dict[str, str]:
    """The summary's exposed-time column of each group."""
    from ..compare import time_columns

    return {group: column for column, (quantity, group) in time_columns(columns).items()
            if quantity == "exposed_us" and group}


def shown_groups(points, group_columns: dict[str, str]) -> list[str]:
    """The groups with exposed time at some point SimAI did not overflow (the first group
    when none has any)."""
    valid = points[(points[list(group_columns.values())] <= cv.OVERFLOW_US).all(axis=1)]
    groups = [g for g in cv.GROUP_COLOURS if g in group_columns and (valid[group_columns[g]] > 0).any()]
    return groups or [g for g in cv.GROUP_COLOURS if g in group_columns][:1]


def bars(sub, var: str, tps: list, groups: list[str], group_columns: dict[str, str]) -> Bars:
    """The bars of generator ``var`` among the panel's points ``sub``: each group's exposed
    time averaged over the points at each TP size, 0 where there is none or SimAI overflowed
    (its sentinels, about 9.2e15 us, are not times)."""
    chosen = [sub[(sub["tp"] == tp) & (sub["variant"] == var)] for tp in tps]
    broken = [bool(len(c)) and bool((c[list(group_columns.values())] > cv.OVERFLOW_US).any().any()) for c in chosen]
    heights = {group: [0.0 if bad or not len(c) else float(c[group_columns[group]].mean()) / 1000
                       for c, bad in zip(chosen, broken)] for group in groups}
    return Bars(heights, broken)


def draw(summary_csv: Path, output: Path) -> None:
    """The figure from ``results/summary.csv``."""
    df = read_summary(summary_csv)
    group_columns = exposed_columns(df.columns)
    if not group_columns or df.empty or df[list(group_columns.values())].isna().all(axis=None):
        cv.message_figure(output, cv.NO_TIMES)
        return
    df = one_tp_overlap(df)
    df["variant"] = [variant_of(s, a) for s, a in zip(df["schedule"], df["aiob"])]
    points = df.drop_duplicates("point")
    panel_rows = sorted({(m, n, a) for m, n, a in zip(points["model"], points["network"], points["aiob"])})
    sps, tps = sorted(points["sp"].unique()), sorted(points["tp"].unique())
    pairs = {aiob: (variant_of("aicb", aiob), variant_of("megatron", aiob)) for aiob in (False, True)}
    groups = shown_groups(points, group_columns)
    fig, axes = cv.pyplot().subplots(len(panel_rows), len(sps), figsize=(5.2 * len(sps), 3.6 * len(panel_rows) + 0.6),
                                     squeeze=False, sharey="row")
    width = 0.8 / 2
    for r, (model, net, aiob) in enumerate(panel_rows):
        for c, sp in enumerate(sps):
            ax = axes[r][c]
            sub = points[(points["model"] == model) & (points["network"] == net) & (points["aiob"] == aiob)
                         & (points["sp"] == sp)]
            for k, var in enumerate(pairs[aiob]):
                xs = cv.bar_positions(len(tps), k, 2, width)
                mine = bars(sub, var, tps, groups, group_columns)
                cv.stack(ax, xs, [(mine.heights[group], dict(color=cv.GROUP_COLOURS[group], hatch=HATCHES[var],
                                                             edgecolor="black", linewidth=0.4)) for group in groups],
                         width * 0.92)
                for x, bad in zip(xs, mine.overflow):
                    if bad:
                        ax.text(x, 0, "SimAI\noverflow", rotation=90, ha="center", va="bottom", fontsize=7,
                                color="#c44e52")
            cv.tp_axis(ax, tps)
            ax.set_ylabel("exposed communication (ms per iteration)", fontsize=8)
            ax.set_title(f"{model}, {net}, AIOB {'on' if aiob else 'off'}, {cv.sp_label(sp)}", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
            ax.margins(y=0.08)
    handles = cv.colour_handles(cv.GROUP_COLOURS, groups, lambda g: f"{g} group")
    handles += cv.hatch_handles([v for v in VARIANTS if v in set(points["variant"])], HATCHES, LABELS)
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), frameon=False, fontsize=8)
    fig.suptitle("Simulated exposed communication time per iteration, by group (like with like)")
    fig.tight_layout(rect=(0, 0.7 / fig.get_figheight(), 1, 0.96))
    cv.finish(fig, output)
