"""difference_by_cause.png: per setting, each AICB path's difference from Megatron by cause,
the question's cause first.

Top: the question's cause alone (``missing_bwd_tp_allreduce``, the backward TP all-reduces
the AIOB path writes as NONE) on its own scale, bytes and exposed time per setting without
SP, each bar labelled. Below, every cause, bytes per iteration (GiB) and exposed
communication (ms) on the sweep's first network (and first TP overlap ratio): per setting
one bar per path, causes in excess of Megatron stacked upwards, causes short of it
downwards, never netted (a dropped all-reduce shows below zero even where an extra one
outweighs it), the question's cause nearest the zero line; a black diamond marks the net
difference. The largest causes have a colour each, the others are grey. At most
``MAX_SETTINGS`` settings are drawn (the first of the points table); the CSV has them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...setup.points import AICB_AIOB, AICB_DEFAULT
from . import canvas as cv

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
SHORT_NAMES = {AICB_DEFAULT: "default", AICB_AIOB: "AIOB"}
# A row's value in each unit the figure draws.
VALUE_OF = {"GiB": lambda r: r.bytes / cv.GiB, "ms": lambda r: (r.exposed_us or 0.0) / 1000}


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


def wrap(word: str, width: int) -> str:
    """A word longer than ``width`` characters on several lines, broken after its dashes."""
    lines = [""]
    for piece in word.replace("-", "-\0").split("\0"):
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
    return "\n".join(lines)


def tick_labels(shown, width: int = 99) -> tuple[list[str], str]:
    """Each setting's label without the words every setting shares (a word a line, none longer
    than ``width`` characters), and those words."""
    parts = [panel.label.split(", ") for panel in shown]
    common = [w for w in parts[0] if all(w in p for p in parts)]
    return (["\n".join(wrap(w, width) for w in p if w not in common) or "all" for p in parts],
            ", ".join(common))


def question_settings(shown) -> list[tuple[int, object]]:
    """The settings (index among ``shown``, panel) the question's cause is drawn for: those
    without SP (with SP there is no backward TP all-reduce to drop)."""
    return [(i, panel) for i, panel in enumerate(shown) if not any(r.sp for rs in panel.rows.values() for r in rs)]


def question_heights(question, path: str, unit: str) -> list[float]:
    """The question's cause of ``path`` at each of the ``question`` settings, in ``unit``."""
    return [sum(VALUE_OF[unit](r) for r in panel.rows.get(path, []) if r.cause == QUESTION) for _, panel in question]


@dataclass(frozen=True)
class Segment:
    """One cause's part of a path's bar: in excess of Megatron (>= 0) and short of it (<= 0)."""

    cause: str
    extra: float
    short: float


def segments(rows, order: list[str], unit: str) -> list[Segment]:
    """A path's causes in ``order`` (the question's first), each split into what it adds and
    what it drops, in ``unit``; causes the path does not have are left out."""
    out = []
    for cause in order:
        values = [VALUE_OF[unit](r) for r in rows if r.cause == cause]
        extra = sum(v for v in values if v > 0)
        short = sum(v for v in values if v < 0)
        if extra or short:
            out.append(Segment(cause, extra, short))
    return out


def _x(j: int, k: int, paths: list[str], width: float) -> float:
    return j + (k - (len(paths) - 1) / 2) * width


def _settings_axis(ax, below: float, count: int, labels: list[str]) -> None:
    """The settings' labels on a second x axis under the paths' ticks."""
    settings = ax.secondary_xaxis(below)
    settings.set_xticks(range(count), labels, fontsize=8)
    settings.tick_params(length=0)
    settings.spines["bottom"].set_visible(False)


def _question_panel(ax, question, paths: list[str], unit: str, labels: list[str], network: str) -> None:
    """The question's cause alone, one labelled bar per path and setting without SP."""
    width = 0.8 / len(paths)
    low = 0.0
    for k, path in enumerate(paths):
        heights = question_heights(question, path, unit)
        # The AIOB path solid, the default path hatched: the colour is the cause's, as below.
        solid = path == AICB_AIOB
        bars = ax.bar([_x(j, k, paths, width) for j in range(len(question))], heights, width * 0.9,
                      color=QUESTION_COLOUR if solid else "white", hatch="" if solid else "////",
                      edgecolor=QUESTION_COLOUR if not solid else "black", linewidth=0.6)
        ax.bar_label(bars, labels=[f"{h:.2f}" if h else "0" for h in heights], fontsize=8, padding=2)
        low = min([low, *heights])
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks([_x(j, k, paths, width) for j in range(len(question)) for k in range(len(paths))],
                  [SHORT_NAMES[p] for _ in question for p in paths], fontsize=7)
    _settings_axis(ax, -0.16, len(question), labels)
    ax.set_xlim(-0.6, max(len(question), 1) - 0.4)
    # Room for the labels above zero and below the longest bar.
    ax.set_ylim(low * 1.3 if low else -1, -0.22 * low if low else 1)
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(axis="y", alpha=0.3)
    what = "bytes" if unit == "GiB" else f"exposed TP time, {network}"
    ax.set_title(f"The question's cause alone: {what}", fontsize=9)
    ax.set_ylabel(f"{QUESTION}\n({unit} per iteration)", fontsize=8, color=QUESTION_COLOUR)


def _causes_panel(ax, shown, paths: list[str], unit: str, order: list[str], colours: dict[str, str],
                  ticks: list[str]) -> None:
    """Every cause, per setting and path: extra stacked up, short stacked down, the net a diamond."""
    width = 0.8 / len(paths)
    for k, path in enumerate(paths):
        for j, panel in enumerate(shown):
            x = _x(j, k, paths, width)
            mine = panel.rows.get(path, [])
            up = down = 0.0
            for s in segments(mine, order, unit):
                if s.extra:
                    ax.bar(x, s.extra, width * 0.9, bottom=up, color=colours[s.cause], edgecolor="black",
                           linewidth=0.3)
                    up += s.extra
                if s.short:
                    ax.bar(x, s.short, width * 0.9, bottom=down, color=colours[s.cause], edgecolor="black",
                           linewidth=0.3)
                    down += s.short
            if mine:
                ax.plot([x], [up + down], marker="D", color="black", markersize=4, linestyle="")
    ax.axhline(0, color="black", linewidth=0.8)
    many = len(shown) > 8
    ax.set_xticks([_x(j, k, paths, width) for j in range(len(shown)) for k in range(len(paths))],
                  [(SHORT_NAMES[p][0] if many else SHORT_NAMES[p]) for _ in shown for p in paths], fontsize=7)
    _settings_axis(ax, -0.13, len(shown), ticks)
    ax.set_xlim(-0.6, len(shown) - 0.4)
    ax.use_sticky_edges = False  # the stacked bars' ends: margins leave them at the frame
    ax.margins(y=0.08)
    ax.tick_params(axis="y", labelsize=8)
    ax.grid(axis="y", alpha=0.3)
    what = "bytes" if unit == "GiB" else f"exposed communication, network {shown[0].network}"
    ax.set_title(f"Every cause: {what}", fontsize=9)
    ax.set_ylabel(f"vs Megatron ({unit} per iteration)\n\u2193 short    \u2191 extra", fontsize=8)


def _legend(fig, rows, order: list[str], colours: dict[str, str]) -> int:
    """The causes' legend under the panels; its number of handles."""
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
    return len(handles)


def draw(causes_csv: Path, output: Path, *, sweep_csv: Path | None = None) -> None:
    """The figure from ``results/difference_by_cause.csv``; ``sweep_csv``: the points table
    (default: ``sweep.csv`` beside the CSV)."""
    from ...setup.points import read_points
    from .. import causes as cz

    plt = cv.pyplot()
    rows = cz.read_csv(causes_csv)
    points = {p.point: p for p in read_points(sweep_csv or Path(causes_csv).with_name("sweep.csv"))}
    if not rows:
        cv.message_figure(output, "No AICB point with an audit in this sweep:\nnothing to compare with Megatron.")
        return
    panels = cz.panels(rows, points)
    shown = panels[:MAX_SETTINGS]
    colours = cause_colours(rows, shown)
    order = [QUESTION] + [c for c in colours if c != QUESTION]
    paths = [p for p in cv.PATH_LABELS if any(r.path == p for r in rows)]
    # About as many characters as fit in a setting's slot of the figure's width at 8 points.
    ticks, common = tick_labels(shown, width=max(6, int(10 * cv.DPI * 0.88 / len(shown) / 8)))
    question = question_settings(shown)
    top = 1 if question else 0
    fig = plt.figure(figsize=(10, 10.4 if question else 8))
    grid = fig.add_gridspec(2 + top, 2, height_ratios=(2.4, 3, 3)[1 - top:], hspace=0.62, wspace=0.25)
    for col, unit in enumerate(("GiB", "ms") if question else ()):
        _question_panel(fig.add_subplot(grid[0, col]), question, paths, unit, [ticks[i] for i, _ in question],
                        shown[0].network)
    for row, unit in ((top, "GiB"), (top + 1, "ms")):
        _causes_panel(fig.add_subplot(grid[row, :]), shown, paths, unit, order, colours, ticks)
    legend_rows = -(-_legend(fig, rows, order, colours) // 3)
    title = "What each AICB path gets wrong against Megatron, by cause"
    if common:
        title += f" ({common})"
    if len(panels) > len(shown):
        title += f"\nfirst {len(shown)} of {len(panels)} settings"
    fig.suptitle(title, fontsize=11)
    lines = max(t.count("\n") for t in ticks) + 1  # the settings' labels under the lowest panel
    fig.subplots_adjust(left=0.09, right=0.98, top=1 - 0.75 / fig.get_figheight(),
                        bottom=(0.25 * legend_rows + 0.5 + 0.16 * lines) / fig.get_figheight())
    cv.finish(fig, output)
