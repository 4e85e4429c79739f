"""Figures drawn from ``results/summary.csv`` (matplotlib, PNG, deterministic bytes)."""

from __future__ import annotations

from pathlib import Path

from ..setup.points import AICB_AIOB, AICB_DEFAULT, MEGATRON, MEGATRON_AIOB, VARIANTS, variant_of

PHASE_LABELS = {"fwd": "forward", "ig": "input grad", "wg": "weight grad", "pp": "pipeline"}
PHASE_COLOURS = {"fwd": "#4c72b0", "ig": "#dd8452", "wg": "#55a868", "pp": "#8172b3"}
GiB = 2**30
MiB = 2**20
# The three generators, in legend order; bars tell them apart by colour or by hatching.
VARIANT_ORDER = ("AICB default path", "AICB AIOB path", "Megatron")
VARIANT_COLOURS = {"AICB default path": "#c44e52", "AICB AIOB path": "#dd8452", "Megatron": "#4c72b0"}
VARIANT_HATCHES = {"AICB default path": "", "AICB AIOB path": "//", "Megatron": ".."}
# AICB's two paths by the slug of difference_by_cause.csv's ``path`` column.
PATH_LABELS = {AICB_DEFAULT: "AICB default path", AICB_AIOB: "AICB AIOB path"}
# The generator of each variant (``points.VARIANTS``), as the legends name it.
GENERATORS = {**PATH_LABELS, MEGATRON: "Megatron", MEGATRON_AIOB: "Megatron"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path) -> None:
    """Save a PNG atomically with fixed metadata, so identical data gives identical bytes."""
    from ..base.files import atomic_open

    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110, metadata={"Software": "commsweep"})


def layout_problems(fig) -> list[str]:
    """What makes a drawn figure hard to read, found from matplotlib's extents (pixels): a
    legend over data (a bar, a line or a marker of an axes), tick labels of one axis over
    each other, text outside the figure. Empty for a figure without such problems; the
    tests draw every figure of a sweep and ask (tests/test_figures.py)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    if not hasattr(fig.canvas, "get_renderer"):  # a closed figure: draw it again off screen
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    found = []
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            for artist in [*ax.patches, *ax.lines]:
                if isinstance(artist, Rectangle) and (artist.get_width() == 0 or artist.get_height() == 0):
                    continue
                if isinstance(artist, Line2D) and not len(artist.get_xdata()):
                    continue
                extent = artist.get_window_extent(renderer)
                if extent.width > 0.5 and extent.height > 0.5 and box.overlaps(extent):
                    found.append(f"the legend covers data of the axes titled {ax.get_title()!r}")
                    break
    # Tick labels outside the axis' view are kept but not drawn.
    undrawn = set()
    every_axes = [a for ax in fig.axes for a in (ax, *ax.child_axes)]  # secondary axes are children
    for ax in every_axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks():
                if not low - 1e-9 <= tick.get_loc() <= high + 1e-9:
                    undrawn.update({id(tick.label1), id(tick.label2)})
    for ax in every_axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = [t for t in axis.get_ticklabels() if t.get_visible() and t.get_text() and id(t) not in undrawn]
            extents = [t.get_window_extent(renderer) for t in labels]
            for (a, ea), (b, eb) in zip(zip(labels, extents), zip(labels[1:], extents[1:])):
                if ea.overlaps(eb):
                    found.append(f"tick labels {a.get_text()!r} and {b.get_text()!r} overlap in {ax.get_title()!r}")
    width, height = fig.canvas.get_width_height()
    for text in fig.findobj(lambda a: hasattr(a, "get_text") and hasattr(a, "get_window_extent")):
        if not text.get_visible() or not text.get_text().strip() or id(text) in undrawn:
            continue
        e = text.get_window_extent(renderer)
        if e.x0 < -1 or e.y0 < -1 or e.x1 > width + 1 or e.y1 > height + 1:
            found.append(f"text {text.get_text()!r} runs off the figure")
    return found


def variant(schedule: str, aiob: bool) -> str:
    """How a workload was made, as a legend label."""
    return GENERATORS[variant_of(schedule, aiob)]


def sp_label(sp: bool) -> str:
    return "SP on" if sp else "SP off"


def frame(columns, rows):
    """Typed rows of a table (each type with ``getter(column)``: ``summary.Row``,
    ``compare.KindRow``) as a DataFrame with the table's ``columns``, an empty cell NaN: the
    one place the figures turn a table's reader's rows into pandas."""
    import pandas as pd

    def cells(column: str) -> list:
        if not rows:
            return []
        values = list(map(type(rows[0]).getter(column), rows))
        return [None if v == "" else v for v in values] if isinstance(values[0], str) else values

    return pd.DataFrame({column: pd.Series(cells(column), dtype=None if rows else object) for column in columns})


def bar_positions(count: int, k: int, n_variants: int, width: float) -> list[float]:
    """x of the k-th of ``n_variants`` side-by-side bars at each of ``count`` ticks."""
    return [i + (k - (n_variants - 1) / 2) * width for i in range(count)]


def hatch_handles(variants: list[str]) -> list:
    """Legend entries for the hatching that marks each generator."""
    from matplotlib.patches import Patch

    return [Patch(facecolor="white", edgecolor="black", hatch=VARIANT_HATCHES[v], label=v) for v in variants]


def message_figure(output: Path, text: str) -> None:
    """A small figure that says why there is nothing to draw (the rule still has its PNG)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 2.2))
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=11)
    save(fig, output)
    plt.close(fig)


# The tables read so far, by path and what the file was then (size, mtime): one process
# draws every figure of a sweep (rule figures), and five of them read the summary.
_READ: dict[tuple, object] = {}


def read_summary(summary_csv: Path):
    """The summary table's complete points as a DataFrame (a failed point has no numbers:
    its one row would count as zero bytes; see commsweep.base.status), read by the table's
    reader (``summary.read``): a column per column of the table, an empty cell NaN. A copy
    of the table read before, if the file has not changed since."""
    from . import summary

    stat = Path(summary_csv).stat()
    key = (str(Path(summary_csv).resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _READ:
        table = summary.read(summary_csv)
        df = frame(table.columns, [r for r in table.rows if r.ok])
        _READ.clear()
        _READ[key] = df
    return _READ[key].copy()


def first_network_volumes(summary_csv: Path):
    """The complete points' rows on the sweep's first network, with a ``variant`` column;
    None when no point has volumes. Volumes do not depend on the network."""
    df = read_summary(summary_csv)
    if df.empty:
        return None
    df = df[df["network"] == df["network"].iloc[0]].copy()
    df["variant"] = [variant(s, a) for s, a in zip(df["schedule"], df["aiob"])]
    return df


def volume_by_tp(summary_csv: Path, output: Path) -> None:
    """Payload bytes per iteration by TP and SP, stacked by phase, one bar per generator.

    One row of panels per model; volumes do not depend on the network, so the first
    network's rows are used.
    """
    plt = _pyplot()
    df = first_network_volumes(summary_csv)
    if df is None:
        message_figure(output, "No point of the sweep has volumes (see the status column of summary.csv).")
        return
    models = sorted(df["model"].unique())
    sps = sorted(df["sp"].unique())
    variants = [v for v in VARIANT_ORDER if v in set(df["variant"])]
    phases = [p for p in PHASE_LABELS if p in set(df["phase"])]
    fig, axes = plt.subplots(
        len(models), len(sps), figsize=(5.2 * len(sps), 3.8 * len(models)), squeeze=False, sharey="row"
    )
    width = 0.8 / max(len(variants), 1)
    for r, model in enumerate(models):
        for c, sp in enumerate(sps):
            ax = axes[r][c]
            sub = df[(df["model"] == model) & (df["sp"] == sp)]
            # Several points may share model, SP, TP and variant (other axes); sum per point, then average.
            per_point = sub.groupby(["tp", "variant", "point", "phase"])["payload_bytes"].sum()
            mean = per_point.groupby(["tp", "variant", "phase"]).mean()
            tps = sorted(sub["tp"].unique())
            for k, var in enumerate(variants):
                bottom = [0.0] * len(tps)
                xs = bar_positions(len(tps), k, len(variants), width)
                for phase in phases:
                    heights = [mean.get((tp, var, phase), 0.0) / GiB for tp in tps]
                    ax.bar(xs, heights, width * 0.95, bottom=bottom, color=PHASE_COLOURS[phase],
                           hatch=VARIANT_HATCHES[var], edgecolor="black", linewidth=0.4)
                    bottom = [b + h for b, h in zip(bottom, heights)]
            ax.set_xticks(range(len(tps)), [str(t) for t in tps])
            ax.set_xlabel("tensor parallel size (TP)")
            ax.set_ylabel("payload per iteration (GiB)")
            ax.set_title(f"{model}, {sp_label(sp)}")
            ax.grid(axis="y", alpha=0.3)
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=PHASE_COLOURS[p], edgecolor="black", label=PHASE_LABELS[p]) for p in phases]
    handles += hatch_handles(variants)
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=8)
    fig.suptitle("Communication volume per iteration by TP, SP and phase")
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    save(fig, output)
    plt.close(fig)


# -- TP bytes per phase, per TP x SP ----------------------------------------------------


def tp_bytes_by_phase(summary_csv: Path, output: Path) -> None:
    """TP payload per iteration in each phase, one bar per generator, one panel per TP x SP.

    Panels: one row per model and SP setting, one column per TP size; bars: AICB's default
    path, AICB's AIOB path and Megatron side by side in each phase. The first network's
    rows are used (volumes do not depend on it); points that share model, SP, TP and
    generator (other axes) are averaged.
    """
    plt = _pyplot()
    df = first_network_volumes(summary_csv)
    if df is None:
        message_figure(output, "No point of the sweep has volumes (see the status column of summary.csv).")
        return
    points = df.drop_duplicates("point")[["point", "model", "sp", "tp", "variant"]]
    tp_rows = df[df["group"] == "TP"]
    per_point = tp_rows.groupby(["point", "phase"])["payload_bytes"].sum()
    models, sps, tps = sorted(points["model"].unique()), sorted(points["sp"].unique()), sorted(points["tp"].unique())
    variants = [v for v in VARIANT_ORDER if v in set(points["variant"])]
    phases = [p for p in ("fwd", "ig", "wg") if p in set(tp_rows["phase"])] or ["fwd", "ig"]
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
                chosen = points[(points["model"] == model) & (points["sp"] == sp) & (points["tp"] == tp)
                                & (points["variant"] == var)]["point"]
                heights = []
                for phase in phases:
                    values = [per_point.get((p, phase), 0) for p in chosen]
                    heights.append(sum(values) / len(values) / GiB if values else float("nan"))
                xs = bar_positions(len(phases), k, len(variants), width)
                bars = ax.bar(xs, heights, width * 0.92, color=VARIANT_COLOURS[var], edgecolor="black",
                              linewidth=0.4, label=var)
                ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=1)
            ax.set_xticks(range(len(phases)), [PHASE_LABELS[p] for p in phases], fontsize=8)
            ax.set_title(f"{model}, TP {tp}, {sp_label(sp)}", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
            ax.margins(y=0.15)
            if c == 0:
                ax.set_ylabel("TP payload per iteration (GiB)", fontsize=8)
            ax.set_xlabel("phase", fontsize=8)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=VARIANT_COLOURS[v], edgecolor="black") for v in variants]
    fig.legend(handles, variants, loc="lower center", ncol=len(variants), frameon=False, fontsize=9)
    fig.suptitle("Tensor-parallel bytes per phase: AICB's two paths against Megatron")
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    save(fig, output)
    plt.close(fig)


# -- simulated exposed communication time per group ---------------------------------------

# Exposed times above this (about 11.6 days) are SimAI's overflow sentinels, not times.
OVERFLOW_US = 1e12
GROUP_COLOURS = {"TP": "#4c72b0", "DP": "#55a868", "EP": "#8172b3", "DP_EP": "#937860", "PP": "#da8bc3"}


def one_tp_overlap(df):
    """The rows of the sweep's first TP overlap ratio (all rows when it has no such axis):
    figures of other quantities never average points that differ in it."""
    if "tp_overlap" not in df.columns or df.empty:
        return df
    return df[df["tp_overlap"] == sorted(df["tp_overlap"].unique())[0]]


def exposed_by_group(summary_csv: Path, output: Path) -> None:
    """Simulated exposed communication time per iteration, stacked by group.

    Like with like: each AICB path beside the Megatron point of the same compute times
    (the default path, with no compute times, beside the Megatron schedule without AIOB
    times; the AIOB path beside the Megatron schedule with them), never an average of the
    two Megatron variants. Panels: one row per model, network and ``aiob`` setting, one
    column per SP setting; x: TP size. With a ``tp_overlap`` axis, its first ratio only.
    Needs the simulate stage's times in the summary table (``compare.TIME_QUANTITIES``);
    where no point has them the figure says so instead of guessing.
    """
    from .compare import time_columns

    plt = _pyplot()
    df = read_summary(summary_csv)
    group_columns = {group: column for column, (quantity, group) in time_columns(df.columns).items()
                     if quantity == "exposed_us" and group}
    if not group_columns or df.empty or df[list(group_columns.values())].isna().all(axis=None):
        message_figure(output, "No simulated times in the summary table:\nno point of this sweep was simulated.")
        return
    df = one_tp_overlap(df)
    df["variant"] = [variant_of(s, a) for s, a in zip(df["schedule"], df["aiob"])]
    points = df.drop_duplicates("point")
    panel_rows = sorted({(m, n, a) for m, n, a in zip(points["model"], points["network"], points["aiob"])})
    sps, tps = sorted(points["sp"].unique()), sorted(points["tp"].unique())
    pairs = {aiob: (variant_of("aicb", aiob), variant_of("megatron", aiob)) for aiob in (False, True)}
    hatches = {AICB_DEFAULT: "", AICB_AIOB: "//", MEGATRON: "..", MEGATRON_AIOB: ".."}
    valid = points[(points[list(group_columns.values())] <= OVERFLOW_US).all(axis=1)]
    groups = [g for g in GROUP_COLOURS if g in group_columns and (valid[group_columns[g]] > 0).any()]
    groups = groups or [g for g in GROUP_COLOURS if g in group_columns][:1]
    fig, axes = plt.subplots(len(panel_rows), len(sps), figsize=(5.2 * len(sps), 3.6 * len(panel_rows) + 0.6),
                             squeeze=False, sharey="row")
    width = 0.8 / 2
    for r, (model, net, aiob) in enumerate(panel_rows):
        variants = pairs[aiob]
        for c, sp in enumerate(sps):
            ax = axes[r][c]
            sub = points[(points["model"] == model) & (points["network"] == net) & (points["aiob"] == aiob)
                         & (points["sp"] == sp)]
            for k, var in enumerate(variants):
                xs = bar_positions(len(tps), k, len(variants), width)
                chosen = [sub[(sub["tp"] == tp) & (sub["variant"] == var)] for tp in tps]
                # SimAI's overflow sentinels (~9.2e15 us, see the simulate stage) are not times.
                broken = [bool(len(c)) and bool((c[list(group_columns.values())] > OVERFLOW_US).any().any())
                          for c in chosen]
                bottom = [0.0] * len(tps)
                for group in groups:
                    heights = [
                        0.0 if bad or not len(c) else float(c[group_columns[group]].mean()) / 1000
                        for c, bad in zip(chosen, broken)
                    ]
                    ax.bar(xs, heights, width * 0.92, bottom=bottom, color=GROUP_COLOURS[group],
                           hatch=hatches[var], edgecolor="black", linewidth=0.4)
                    bottom = [b + h for b, h in zip(bottom, heights)]
                for x, bad in zip(xs, broken):
                    if bad:
                        ax.text(x, 0, "SimAI\noverflow", rotation=90, ha="center", va="bottom", fontsize=7,
                                color="#c44e52")
            ax.set_xticks(range(len(tps)), [str(t) for t in tps])
            ax.set_xlabel("tensor parallel size (TP)")
            ax.set_ylabel("exposed communication (ms per iteration)", fontsize=8)
            ax.set_title(f"{model}, {net}, AIOB {'on' if aiob else 'off'}, {sp_label(sp)}", fontsize=9)
            ax.grid(axis="y", alpha=0.3)
            ax.margins(y=0.08)
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=GROUP_COLOURS[g], edgecolor="black", label=f"{g} group") for g in groups]
    shown = [v for v in VARIANTS if v in set(points["variant"])]
    labels = {**PATH_LABELS, MEGATRON: "Megatron", MEGATRON_AIOB: "Megatron (AIOB times)"}
    handles += [Patch(facecolor="white", edgecolor="black", hatch=hatches[v], label=labels[v]) for v in shown]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), frameon=False, fontsize=8)
    fig.suptitle("Simulated exposed communication time per iteration, by group (like with like)")
    fig.tight_layout(rect=(0, 0.7 / fig.get_figheight(), 1, 0.96))
    save(fig, output)
    plt.close(fig)


# -- one point's iteration per layer ----------------------------------------------------


def timeline(
    workload_path: Path,
    times: list,
    setup,
    output: Path,
    *,
    stage: int = 0,
    audit_csv: Path | None = None,
    title: str | None = None,
) -> None:
    """A Gantt chart of one simulated iteration, one lane per layer, and the audit beside it.

    ``times`` are the rows' simulated times (``timeline.read_endtoend`` of the point's
    EndToEnd.csv, or ``timeline.simulate``). Left: compute (grey) and exposed communication (coloured by group) of every row, in
    the order SimAI runs them, in ms; forward on the left of the dashed line, backward on
    its right. Right (with an audit): per lane, the bytes the workload is short of
    Megatron (red) and in excess (orange), in MiB per iteration.
    """
    from ..base.files import read_text
    from ..workload import format as wf
    from . import audit as audit_mod
    from . import timeline as tl

    plt = _pyplot()
    workload = wf.read(workload_path)
    units = audit_mod.segment(workload, setup.layers_per_stage, stage * setup.layers_per_stage)
    events = tl.events(workload, times, units)
    by_lane = None
    if audit_csv is not None:
        by_lane = tl.audit_by_lane(audit_mod.read_csv(read_text(audit_csv), source=audit_csv))
    lanes = tl.lanes(units, by_lane or ())
    row_of = {lane: i for i, lane in enumerate(lanes)}
    height = 0.17 * len(lanes) + 1.9
    if by_lane is not None:
        fig, (ax, side) = plt.subplots(1, 2, figsize=(12, height), sharey=True,
                                       gridspec_kw={"width_ratios": [4, 1.3]})
    else:
        fig, ax = plt.subplots(figsize=(10, height))
        side = None
    colours = {"compute": "#bbbbbb", **GROUP_COLOURS}
    for what in colours:
        for lane in lanes:
            spans = [(e.start_us / 1000, e.duration_us / 1000) for e in events if e.what == what and e.lane == lane]
            if spans:
                # Communication gets an edge of its own colour, so that collectives of a few
                # microseconds stay visible at the scale of a whole iteration.
                edge = 0 if what == "compute" else 0.8
                ax.broken_barh(spans, (row_of[lane] - 0.4, 0.8), facecolors=colours[what],
                               edgecolors=colours[what], linewidth=edge)
    forward_end = max((e.start_us + e.duration_us for e in events if not e.backward), default=0) / 1000
    total = max((e.start_us + e.duration_us for e in events), default=0) / 1000
    exposed = sum(e.duration_us for e in events if e.what != "compute") / 1000
    ax.axvline(forward_end, color="black", linestyle="--", linewidth=0.8)
    # Above the frame, at the dashed line (in the lanes it would sit on the bars or the frame).
    above = ax.get_xaxis_transform()
    ax.text(forward_end, 1.01, " backward \u2192", fontsize=8, va="bottom", transform=above)
    ax.text(forward_end, 1.01, "\u2190 forward ", fontsize=8, va="bottom", ha="right", transform=above)
    ax.set_yticks(range(len(lanes)), lanes, fontsize=7)
    ax.set_ylim(len(lanes) - 0.5, -0.7)
    ax.set_xlim(0, max(total, 1e-3) * 1.01)
    ax.set_xlabel("time since the start of the iteration (ms)")
    ax.set_ylabel("layer (workload rows grouped by Megatron module)")
    ax.grid(axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    present = [w for w in colours if any(e.what == w for e in events)]
    handles = [Patch(facecolor=colours[w], label="compute" if w == "compute" else f"{w} communication (exposed)")
               for w in present]
    if side is not None:
        short = [by_lane.get(lane, (0, 0))[0] / MiB for lane in lanes]
        extra = [by_lane.get(lane, (0, 0))[1] / MiB for lane in lanes]
        ys = range(len(lanes))
        side.barh([y - 0.2 for y in ys], short, 0.4, color="#c44e52")
        side.barh([y + 0.2 for y in ys], extra, 0.4, color="#dd8452")
        side.set_xscale("symlog", linthresh=1)
        if not any(short) and not any(extra):
            side.set_xlim(0, 10)
            side.text(0.5, 0.5, "no findings:\nthe workload issues\nwhat Megatron issues",
                      ha="center", va="center", fontsize=9, transform=side.transAxes)
        side.set_xlabel("audit: bytes per iteration (MiB)")
        side.set_title("against Megatron", fontsize=9)
        side.grid(axis="x", alpha=0.3)
        handles += [Patch(facecolor="#c44e52", label="short of Megatron (missing)"),
                    Patch(facecolor="#dd8452", label="in excess of Megatron (extra)")]
    fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False, fontsize=8)
    heading = title or Path(workload_path).parent.name
    fig.suptitle(f"{heading}\niteration {total:,.1f} ms, exposed communication {exposed:,.1f} ms", fontsize=10)
    fig.tight_layout(rect=(0, 0.8 / height, 1, 0.99))
    save(fig, output)
    plt.close(fig)


# -- the audit at a glance ----------------------------------------------------------------

KIND_COLOURS = {
    "missing": "#c44e52", "zero_bytes": "#e39b9d", "size": "#dd8452", "extra": "#8c564b",
    "group": "#8172b3", "size1_group": "#bcbd22", "none_with_size": "#7f7f7f",
}


def audit_by_kind(by_kind_csv: Path, output: Path) -> None:
    """Bytes each workload is off from Megatron per iteration, by finding kind.

    One panel per model and SP setting; x: TP size; one bar per generator (the audits of
    the first network; bytes do not depend on it). Bytes in excess stack upwards, bytes
    short of Megatron downwards, coloured by kind, in GiB per iteration. Reads the
    comparison's per point and kind totals (``results/findings_by_kind.csv``,
    ``compare.BY_KIND_COLUMNS``), a few rows per point, not the findings themselves.
    """
    import pandas as pd

    from .compare import read_by_kind

    plt = _pyplot()
    df = frame(*read_by_kind(by_kind_csv))
    fig_rows = sorted(df["model"].unique()) if len(df) else []
    if not fig_rows:
        message_figure(output, "No findings: every audited workload issues what Megatron issues.")
        return
    df = df[df["network"] == df["network"].iloc[0]]
    df["variant"] = [variant(s, a) for s, a in zip(df["schedule"], df["aiob"])]
    sps, tps = sorted(df["sp"].unique()), sorted(df["tp"].unique())
    variants = [v for v in VARIANT_ORDER if v in set(df["variant"])]
    # Kinds that move bytes (none_with_size never does: SimAI ignores the size of a NONE).
    moved = df[(df["extra_bytes"] != 0) | (df["missing_bytes"] != 0)]
    kinds = [k for k in KIND_COLOURS if k in set(moved["kind"])]
    grouped = df.groupby(["model", "sp", "tp", "variant", "kind"])
    sums = pd.DataFrame({"up": grouped["extra_bytes"].sum(), "down": -grouped["missing_bytes"].sum()})
    fig, axes = plt.subplots(len(fig_rows), len(sps), figsize=(max(5.4 * len(sps), 9.5), 3.8 * len(fig_rows) + 0.7),
                             squeeze=False, sharey="row")
    width = 0.8 / max(len(variants), 1)
    for r, model in enumerate(fig_rows):
        for c, sp in enumerate(sps):
            ax = axes[r][c]
            for k, var in enumerate(variants):
                xs = bar_positions(len(tps), k, len(variants), width)
                up, down = [0.0] * len(tps), [0.0] * len(tps)
                for kind in kinds:
                    ups, downs = [], []
                    for tp in tps:
                        key = (model, sp, tp, var, kind)
                        ups.append(sums["up"].get(key, 0) / GiB)
                        downs.append(sums["down"].get(key, 0) / GiB)
                    ax.bar(xs, ups, width * 0.92, bottom=up, color=KIND_COLOURS[kind], hatch=VARIANT_HATCHES[var],
                           edgecolor="black", linewidth=0.4)
                    ax.bar(xs, downs, width * 0.92, bottom=down, color=KIND_COLOURS[kind],
                           hatch=VARIANT_HATCHES[var],
                           edgecolor="black", linewidth=0.4)
                    up = [a + b for a, b in zip(up, ups)]
                    down = [a + b for a, b in zip(down, downs)]
            ax.axhline(0, color="black", linewidth=0.8)
            ax.set_xticks(range(len(tps)), [str(t) for t in tps])
            ax.set_xlabel("tensor parallel size (TP)")
            ax.set_ylabel("bytes off from Megatron (GiB per iteration)\n\u2193 short    \u2191 in excess", fontsize=8)
            ax.set_title(f"{model}, {sp_label(sp)}")
            ax.grid(axis="y", alpha=0.3)
            # A stacked bar's ends are sticky edges, which margins leave at the frame.
            ax.use_sticky_edges = False
            ax.margins(y=0.08)
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=KIND_COLOURS[k], edgecolor="black", label=k) for k in kinds]
    handles += hatch_handles(variants)
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), frameon=False, fontsize=8)
    fig.suptitle("Audit against Megatron: bytes each workload misses, by kind of finding")
    fig.tight_layout(rect=(0, 0.09, 1, 0.96))
    save(fig, output)
    plt.close(fig)


# -- payload per group, per model x EP (MoE sweeps) ----------------------------------------


def volume_by_group(summary_csv: Path, output: Path) -> None:
    """Payload bytes per iteration stacked by communication group (TP, DP, EP, DP_EP, PP),
    one bar per generator, x axis TP; one panel per model (rows) and EP size (columns).

    The MoE view: where the tokens' all-to-alls (EP) and the experts' gradients (DP_EP) go
    beside TP and DP. The first network's rows are used (volumes do not depend on it);
    points that share model, EP, TP and generator (other axes, e.g. SP) are averaged.
    """
    plt = _pyplot()
    df = first_network_volumes(summary_csv)
    if df is None:
        message_figure(output, "No point of the sweep has volumes (see the status column of summary.csv).")
        return
    models, eps = sorted(df["model"].unique()), sorted(df["ep"].unique())
    variants = [v for v in VARIANT_ORDER if v in set(df["variant"])]
    groups = [g for g in GROUP_COLOURS if g in set(df["group"])]
    per_point = df.groupby(["model", "ep", "tp", "variant", "point", "group"])["payload_bytes"].sum()
    mean = per_point.groupby(["model", "ep", "tp", "variant", "group"]).mean()
    fig, axes = plt.subplots(len(models), len(eps), figsize=(4.6 * len(eps) + 0.6, 3.6 * len(models) + 0.8),
                             squeeze=False, sharey="row")
    width = 0.8 / max(len(variants), 1)
    for r, model in enumerate(models):
        for c, ep in enumerate(eps):
            ax = axes[r][c]
            tps = sorted(df[(df["model"] == model) & (df["ep"] == ep)]["tp"].unique())
            for k, var in enumerate(variants):
                bottom = [0.0] * len(tps)
                xs = bar_positions(len(tps), k, len(variants), width)
                for group in groups:
                    heights = [mean.get((model, ep, tp, var, group), 0.0) / GiB for tp in tps]
                    ax.bar(xs, heights, width * 0.95, bottom=bottom, color=GROUP_COLOURS[group],
                           hatch=VARIANT_HATCHES[var], edgecolor="black", linewidth=0.4)
                    bottom = [b + h for b, h in zip(bottom, heights)]
            ax.set_xticks(range(len(tps)), [str(t) for t in tps])
            ax.set_xlabel("tensor parallel size (TP)")
            if c == 0:
                ax.set_ylabel("payload per iteration (GiB)")
            ax.set_title(f"{model}, EP {ep}")
            ax.grid(axis="y", alpha=0.3)
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=GROUP_COLOURS[g], edgecolor="black", label=f"{g} group") for g in groups]
    handles += hatch_handles(variants)
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=8)
    fig.suptitle("Communication volume per iteration by group: EP and DP_EP beside TP and DP")
    fig.tight_layout(rect=(0, 0.07, 1, 0.96))
    save(fig, output)
    plt.close(fig)


# -- the difference from Megatron by cause ------------------------------------------------

MAX_SETTINGS = 24
# The cause the question is about (AICB's AIOB path writes NONE for Megatron's backward TP
# all-reduces): its own panels, drawn nearest the zero line, in its own colour.
QUESTION = "missing_bwd_tp_allreduce"
QUESTION_COLOUR = "#d62728"
# The largest other causes get a colour and a legend entry each; the rest are one grey "other".
NAMED_CAUSES = 7
# Distinct at a glance and for colour-blind readers (Okabe and Ito's palette), no red among them.
CAUSE_PALETTE = ("#0072b2", "#e69f00", "#009e73", "#56b4e9", "#cc79a7", "#f0e442", "#8c564b")
OTHER_COLOUR = "#bdbdbd"


def cause_colours(rows, shown) -> dict[str, str]:
    """The colour of each cause drawn: the question's red, the ``NAMED_CAUSES`` largest others
    (bytes, then exposed time, over the ``shown`` settings) a colour each, the rest grey."""
    size: dict[str, list[float]] = {}
    points = {p for panel in shown for p in panel.points.values()}
    for r in rows:
        if r.point in points and r.cause != QUESTION:
            entry = size.setdefault(r.cause, [0.0, 0.0])
            entry[0] += abs(r.bytes)
            entry[1] += abs(r.exposed_us or 0.0)
    ranked = sorted((c for c, (b, t) in size.items() if b or t), key=lambda c: (-size[c][0], -size[c][1], c))
    colours = {QUESTION: QUESTION_COLOUR}
    colours.update({c: CAUSE_PALETTE[i] for i, c in enumerate(ranked[:NAMED_CAUSES])})
    colours.update({c: OTHER_COLOUR for c in ranked[NAMED_CAUSES:]})
    return colours


def _wrap(word: str, width: int) -> str:
    """A word longer than ``width`` characters on several lines, broken after its dashes."""
    lines = [""]
    for piece in word.replace("-", "-\0").split("\0"):
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
    return "\n".join(lines)


def _tick_labels(shown, width: int = 99) -> tuple[list[str], str]:
    """Each setting's label without the words every setting shares (a word a line, none longer
    than ``width`` characters), and those words."""
    parts = [panel.label.split(", ") for panel in shown]
    common = [w for w in parts[0] if all(w in p for p in parts)]
    return (["\n".join(_wrap(w, width) for w in p if w not in common) or "all" for p in parts],
            ", ".join(common))


def difference_by_cause(causes_csv: Path, output: Path, *, sweep_csv: Path | None = None) -> None:
    """Per setting, each AICB path's difference from Megatron by cause, the question's cause first.

    Top: the question's cause alone (``missing_bwd_tp_allreduce``, the backward TP
    all-reduces the AIOB path writes as NONE) on its own scale, bytes and exposed time per
    setting without SP, each bar labelled. Below, every cause, bytes per iteration (GiB)
    and exposed communication (ms) on the sweep's first network (and first TP overlap
    ratio): per setting one bar per path, causes in excess of Megatron stacked upwards,
    causes short of it downwards, never netted (a dropped all-reduce shows below zero even
    where an extra one outweighs it), the question's cause nearest the zero line; a black
    diamond marks the net difference. The largest causes have a colour each, the others
    are grey. At most ``MAX_SETTINGS`` settings are drawn (the first of the points table);
    the CSV has them all. ``sweep_csv``: the points table (default: ``sweep.csv`` beside the CSV).
    """
    from ..setup.points import read_points
    from . import causes as cz

    plt = _pyplot()
    rows = cz.read_csv(causes_csv)
    points = {p.point: p for p in read_points(sweep_csv or Path(causes_csv).with_name("sweep.csv"))}
    if not rows:
        message_figure(output, "No AICB point with an audit in this sweep:\nnothing to compare with Megatron.")
        return
    panels = cz.panels(rows, points)
    shown = panels[:MAX_SETTINGS]
    colours = cause_colours(rows, shown)
    order = [QUESTION] + [c for c in colours if c != QUESTION]
    paths = [p for p in PATH_LABELS if any(r.path == p for r in rows)]
    # About as many characters as fit in a setting's slot of the figure's width at 8 points.
    ticks, common = _tick_labels(shown, width=max(6, int(10 * 110 * 0.88 / len(shown) / 8)))
    width = 0.8 / len(paths)
    short_names = {AICB_DEFAULT: "default", AICB_AIOB: "AIOB"}
    value_of = {"GiB": lambda r: r.bytes / GiB, "ms": lambda r: (r.exposed_us or 0.0) / 1000}
    # The question's cause, on its own scale: the settings without SP (with SP there is no
    # backward TP all-reduce to drop; a sweep without such settings has no such panels).
    question = [(i, panel) for i, panel in enumerate(shown) if not any(r.sp for rs in panel.rows.values() for r in rs)]
    top = 1 if question else 0
    fig = plt.figure(figsize=(10, 10.4 if question else 8))
    grid = fig.add_gridspec(2 + top, 2, height_ratios=(2.4, 3, 3)[1 - top:], hspace=0.62, wspace=0.25)
    for col, unit in enumerate(("GiB", "ms") if question else ()):
        ax = fig.add_subplot(grid[0, col])
        low = 0.0
        for k, path in enumerate(paths):
            xs = [j + (k - (len(paths) - 1) / 2) * width for j in range(len(question))]
            heights = [sum(value_of[unit](r) for r in panel.rows.get(path, []) if r.cause == QUESTION)
                       for _, panel in question]
            # The AIOB path solid, the default path hatched: the colour is the cause's, as below.
            solid = path == AICB_AIOB
            bars = ax.bar(xs, heights, width * 0.9, color=QUESTION_COLOUR if solid else "white",
                          hatch="" if solid else "////", edgecolor=QUESTION_COLOUR if not solid else "black",
                          linewidth=0.6)
            ax.bar_label(bars, labels=[f"{h:.2f}" if h else "0" for h in heights], fontsize=8, padding=2)
            low = min([low, *heights])
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks([j + (k - (len(paths) - 1) / 2) * width for j in range(len(question)) for k in range(len(paths))],
                      [short_names[p] for _ in question for p in paths], fontsize=7)
        settings = ax.secondary_xaxis(-0.16)
        settings.set_xticks(range(len(question)), [ticks[i] for i, _ in question], fontsize=8)
        settings.tick_params(length=0)
        settings.spines["bottom"].set_visible(False)
        ax.set_xlim(-0.6, max(len(question), 1) - 0.4)
        # Room for the labels above zero and below the longest bar.
        ax.set_ylim(low * 1.3 if low else -1, -0.22 * low if low else 1)
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="y", alpha=0.3)
        what = "bytes" if unit == "GiB" else f"exposed TP time, {shown[0].network}"
        ax.set_title(f"The question's cause alone: {what}", fontsize=9)
        ax.set_ylabel(f"{QUESTION}\n({unit} per iteration)", fontsize=8, color=QUESTION_COLOUR)

    # Every cause, per setting and path.
    for row, unit in ((top, "GiB"), (top + 1, "ms")):
        ax = fig.add_subplot(grid[row, :])
        for k, path in enumerate(paths):
            for j, panel in enumerate(shown):
                x = j + (k - (len(paths) - 1) / 2) * width
                mine = panel.rows.get(path, [])
                up = down = 0.0
                for cause in order:
                    extra = sum(value_of[unit](r) for r in mine if r.cause == cause and value_of[unit](r) > 0)
                    short = sum(value_of[unit](r) for r in mine if r.cause == cause and value_of[unit](r) < 0)
                    if extra:
                        ax.bar(x, extra, width * 0.9, bottom=up, color=colours[cause], edgecolor="black", linewidth=0.3)
                        up += extra
                    if short:
                        ax.bar(x, short, width * 0.9, bottom=down, color=colours[cause], edgecolor="black",
                               linewidth=0.3)
                        down += short
                if mine:
                    ax.plot([x], [up + down], marker="D", color="black", markersize=4, linestyle="")
        ax.axhline(0, color="black", linewidth=0.8)
        bar_x = [j + (k - (len(paths) - 1) / 2) * width for j in range(len(shown)) for k in range(len(paths))]
        many = len(shown) > 8
        ax.set_xticks(bar_x, [(short_names[p][0] if many else short_names[p]) for _ in shown for p in paths],
                      fontsize=7)
        settings = ax.secondary_xaxis(-0.13)
        settings.set_xticks(range(len(shown)), ticks, fontsize=8)
        settings.tick_params(length=0)
        settings.spines["bottom"].set_visible(False)
        ax.set_xlim(-0.6, len(shown) - 0.4)
        ax.use_sticky_edges = False  # the stacked bars' ends: margins leave them at the frame
        ax.margins(y=0.08)
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="y", alpha=0.3)
        what = "bytes" if unit == "GiB" else f"exposed communication, network {shown[0].network}"
        ax.set_title(f"Every cause: {what}", fontsize=9)
        ax.set_ylabel(f"vs Megatron ({unit} per iteration)\n\u2193 short    \u2191 extra", fontsize=8)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    named = [c for c in order if colours.get(c) != OTHER_COLOUR and any(r.cause == c for r in rows)]
    others = [c for c in order if colours.get(c) == OTHER_COLOUR]
    handles = [Patch(facecolor=colours[c], edgecolor="black", label=c) for c in named]
    if others:
        handles.append(Patch(facecolor=OTHER_COLOUR, edgecolor="black",
                             label=f"{len(others)} smaller causes (difference_by_cause.csv)"))
    handles.append(Line2D([], [], marker="D", color="black", linestyle="", label="net difference"))
    fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False, fontsize=8.5)
    title = "What each AICB path gets wrong against Megatron, by cause"
    if common:
        title += f" ({common})"
    if len(panels) > len(shown):
        title += f"\nfirst {len(shown)} of {len(panels)} settings"
    fig.suptitle(title, fontsize=11)
    legend_rows = -(-len(handles) // 3)
    lines = max(t.count("\n") for t in ticks) + 1  # the settings' labels under the lowest panel
    fig.subplots_adjust(left=0.09, right=0.98, top=1 - 0.75 / fig.get_figheight(),
                        bottom=(0.25 * legend_rows + 0.5 + 0.16 * lines) / fig.get_figheight())
    save(fig, output)
    plt.close(fig)


def exposed_tp_by_overlap(summary_csv: Path, output: Path, *, default_tp_overlap: float = 0.0) -> None:
    """Exposed TP communication per iteration against SimAI's TP overlap ratio (-tp_o), per path.

    Volume is volume, exposure is a separate knob: SimAI exposes ``time x (1 - tp_o)`` of
    every TP collective, so each path's line runs from its TP time before overlap (at 0)
    down to 0 (at 1). Lines: that formula from the points' TP time before overlap (the
    summary's ``time_us`` on TP); markers: the simulated exposed TP time of each point at
    its ratio (the ``tp_overlap`` axis, or ``default_tp_overlap`` for a sweep without it).
    One panel per model, TP > 1 and SP setting on the first network; the Megatron line is
    the same for both ``aiob`` settings (exposure does not depend on compute).
    """
    plt = _pyplot()
    df = read_summary(summary_csv)
    if df.empty or df["sim_tp_us"].isna().all():
        message_figure(output, "No simulated times in the summary table:\nno point of this sweep was simulated.")
        return
    df = df[df["network"] == df["network"].iloc[0]].copy()
    if "tp_overlap" not in df.columns:
        df["tp_overlap"] = default_tp_overlap
    df = df[df["tp"] > 1]
    if df.empty:
        message_figure(output, "No point with TP > 1: nothing is sent on TP.")
        return
    df["variant"] = [variant_of(s, a) for s, a in zip(df["schedule"], df["aiob"])]
    tp_time = df[df["group"] == "TP"].groupby("point")["time_us"].sum()
    points = df.drop_duplicates("point").set_index("point")
    points["tp_time_us"] = tp_time.reindex(points.index).fillna(0.0)
    points = points[points["sim_tp_us"] <= OVERFLOW_US]
    # One panel per model, EP, TP and SP: points of other EP sizes are other lines (MoE sweeps).
    if "ep" not in points.columns:
        points["ep"] = 1
    panels = sorted({(m, e, t, s) for m, e, t, s in zip(points["model"], points["ep"], points["tp"], points["sp"])})
    ncols = min(4, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.4 * ncols + 0.4, 2.9 * nrows + 1.0), squeeze=False)
    styles = {AICB_DEFAULT: ("#c44e52", "-"), AICB_AIOB: ("#dd8452", "-"), MEGATRON: ("#4c72b0", "--"),
              MEGATRON_AIOB: ("#4c72b0", "--")}
    shown = []
    several_ep = len({e for _, e, _, _ in panels}) > 1
    for i, (model, ep, tp, sp) in enumerate(panels):
        ax = axes[i // ncols][i % ncols]
        sub = points[(points["model"] == model) & (points["ep"] == ep) & (points["tp"] == tp) & (points["sp"] == sp)]
        drawn = set()
        for var in (AICB_DEFAULT, AICB_AIOB, MEGATRON_AIOB, MEGATRON):
            mine = sub[sub["variant"] == var]
            label = GENERATORS[var]
            if mine.empty or label in drawn:
                continue
            drawn.add(label)
            colour, style = styles[var]
            before = float(mine["tp_time_us"].mean()) / 1000
            ax.plot([0, 1], [before, 0], color=colour, linestyle=style, linewidth=1.2)
            ax.plot(mine["tp_overlap"], mine["sim_tp_us"] / 1000, marker="o", color=colour, linestyle="",
                    markersize=4)
            if label not in shown:
                shown.append(label)
        ax.set_xlim(-0.03, 1.03)
        ax.set_ylim(bottom=0)
        ax.set_title(f"{model}, {f'EP {ep}, ' if several_ep or ep > 1 else ''}TP {tp}, {sp_label(sp)}", fontsize=9)
        ax.set_xlabel("TP overlap ratio (SimAI -tp_o)", fontsize=8)
        if i % ncols == 0:
            ax.set_ylabel("exposed TP comm (ms per iteration)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for j in range(len(panels), nrows * ncols):
        axes[j // ncols][j % ncols].axis("off")
    from matplotlib.lines import Line2D

    colour_of = {"AICB default path": "#c44e52", "AICB AIOB path": "#dd8452", "Megatron": "#4c72b0"}
    handles = [Line2D([], [], color=colour_of[v], linestyle="--" if v == "Megatron" else "-", label=v) for v in shown]
    handles.append(Line2D([], [], marker="o", color="grey", linestyle="", label="simulated point"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=8)
    fig.suptitle(f"Exposed TP communication against the TP overlap ratio (network {df['network'].iloc[0]})",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.6 / fig.get_figheight(), 1, 0.96))
    save(fig, output)
    plt.close(fig)


# The figures of the summary tables, by the name ``commsweep plot`` takes.
PLOTS = {
    "volume-by-tp": volume_by_tp,
    "volume-by-group": volume_by_group,
    "tp-bytes-by-phase": tp_bytes_by_phase,
    "exposed-by-group": exposed_by_group,
    "audit-by-kind": audit_by_kind,
    "difference-by-cause": difference_by_cause,  # reads results/difference_by_cause.csv
    "exposed-tp-by-overlap": exposed_tp_by_overlap,
}
