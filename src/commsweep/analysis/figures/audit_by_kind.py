"""audit_by_kind.png: bytes each workload is off from Megatron per iteration, by finding kind.

One panel per model and SP setting; x: TP size; one bar per generator (the audits of the
first network; bytes do not depend on it). Bytes in excess stack upwards, bytes short of
Megatron downwards, coloured by kind, in GiB per iteration. Reads the comparison's per
point and kind totals (``results/findings_by_kind.csv``, ``compare.BY_KIND_COLUMNS``), a few
rows per point, not the findings themselves.
"""

from __future__ import annotations

from pathlib import Path

from . import canvas as cv
from .tables import frame

KIND_COLOURS = {
    "missing": "#c44e52", "zero_bytes": "#e39b9d", "size": "#dd8452", "extra": "#8c564b",
    "group": "#8172b3", "size1_group": "#bcbd22", "size_in_none_column": "#7f7f7f",
}


def kinds_moving_bytes(df) -> list[str]:
    """The kinds that move bytes, in legend order (size_in_none_column never does: SimAI ignores
    the size of a NONE)."""
    moved = df[(df["extra_bytes"] != 0) | (df["missing_bytes"] != 0)]
    return [k for k in KIND_COLOURS if k in set(moved["kind"])]


def sums(df):
    """Per (model, SP, TP, generator, kind): bytes in excess (``up``, >= 0) and short of
    Megatron (``down``, <= 0)."""
    import pandas as pd

    grouped = df.groupby(["model", "sp", "tp", "variant", "kind"])
    return pd.DataFrame({"up": grouped["extra_bytes"].sum(), "down": -grouped["missing_bytes"].sum()})


def heights(totals, model: str, sp: bool, tps: list, var: str, kind: str) -> tuple[list[float], list[float]]:
    """One kind's bars of one generator in one panel: in excess and short, GiB per TP size."""
    keys = [(model, sp, tp, var, kind) for tp in tps]
    return ([totals["up"].get(key, 0) / cv.GiB for key in keys], [totals["down"].get(key, 0) / cv.GiB for key in keys])


def draw(by_kind_csv: Path, output: Path) -> None:
    """The figure from ``results/findings_by_kind.csv``."""
    from ..compare import read_by_kind

    df = frame(*read_by_kind(by_kind_csv))
    fig_rows = sorted(df["model"].unique()) if len(df) else []
    if not fig_rows:
        cv.message_figure(output, "No findings: every audited workload issues what Megatron issues.")
        return
    df = df[df["network"] == df["network"].iloc[0]]
    df["variant"] = [cv.variant(s, a) for s, a in zip(df["schedule"], df["aiob"])]
    sps, tps = sorted(df["sp"].unique()), sorted(df["tp"].unique())
    variants = [v for v in cv.VARIANT_ORDER if v in set(df["variant"])]
    kinds = kinds_moving_bytes(df)
    totals = sums(df)
    fig, axes = cv.pyplot().subplots(len(fig_rows), len(sps),
                                     figsize=(max(5.4 * len(sps), 9.5), 3.8 * len(fig_rows) + 0.7),
                                     squeeze=False, sharey="row")
    width = 0.8 / max(len(variants), 1)
    for r, model in enumerate(fig_rows):
        for c, sp in enumerate(sps):
            ax = axes[r][c]
            for k, var in enumerate(variants):
                xs = cv.bar_positions(len(tps), k, len(variants), width)
                up, down = [0.0] * len(tps), [0.0] * len(tps)
                for kind in kinds:
                    ups, downs = heights(totals, model, sp, tps, var, kind)
                    style = dict(color=KIND_COLOURS[kind], hatch=cv.VARIANT_HATCHES[var], edgecolor="black",
                                 linewidth=0.4)
                    ax.bar(xs, ups, width * 0.92, bottom=up, **style)
                    ax.bar(xs, downs, width * 0.92, bottom=down, **style)
                    up = [a + b for a, b in zip(up, ups)]
                    down = [a + b for a, b in zip(down, downs)]
            ax.axhline(0, color="black", linewidth=0.8)
            cv.tp_axis(ax, tps)
            ax.set_ylabel("bytes off from Megatron (GiB per iteration)\n\u2193 short    \u2191 in excess", fontsize=8)
            ax.set_title(f"{model}, {cv.sp_label(sp)}")
            ax.grid(axis="y", alpha=0.3)
            # A stacked bar's ends are sticky edges, which margins leave at the frame.
            ax.use_sticky_edges = False
            ax.margins(y=0.08)
    handles = cv.colour_handles(KIND_COLOURS, kinds) + cv.hatch_handles(variants)
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), frameon=False, fontsize=8)
    fig.suptitle("Audit against Megatron: bytes each workload is off, in excess and short, by kind of finding")
    fig.tight_layout(rect=(0, 0.09, 1, 0.96))
    cv.finish(fig, output)
