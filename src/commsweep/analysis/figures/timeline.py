"""timeline.png: a Gantt chart of one simulated iteration, one lane per layer, and the audit beside it.

Left: compute (grey) and exposed communication (coloured by group) of every row, in the
order SimAI runs them, in ms; forward on the left of the dashed line, backward on its right.
Right (with an audit): per lane, the bytes the workload is short of Megatron (red) and in
excess (orange), in MiB per iteration.
"""

from __future__ import annotations

from pathlib import Path

from . import canvas as cv

COLOURS = {"compute": "#bbbbbb", **cv.GROUP_COLOURS}
SHORT_COLOUR, EXTRA_COLOUR = "#c44e52", "#dd8452"


def _gantt(ax, events, lanes: list[str]) -> tuple[float, float]:
    """The iteration's events, a lane per layer; its length and exposed communication (ms)."""
    row_of = {lane: i for i, lane in enumerate(lanes)}
    for what in COLOURS:
        for lane in lanes:
            spans = [(e.start_us / 1000, e.duration_us / 1000) for e in events if e.what == what and e.lane == lane]
            if spans:
                # Communication gets an edge of its own colour, so that collectives of a few
                # microseconds stay visible at the scale of a whole iteration.
                edge = 0 if what == "compute" else 0.8
                ax.broken_barh(spans, (row_of[lane] - 0.4, 0.8), facecolors=COLOURS[what],
                               edgecolors=COLOURS[what], linewidth=edge)
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
    return total, exposed


def _audit_side(side, by_lane: dict, lanes: list[str]) -> list:
    """Per lane, the audit's bytes short of Megatron and in excess; their legend entries."""
    from matplotlib.patches import Patch

    short = [by_lane.get(lane, (0, 0))[0] / cv.MiB for lane in lanes]
    extra = [by_lane.get(lane, (0, 0))[1] / cv.MiB for lane in lanes]
    ys = range(len(lanes))
    side.barh([y - 0.2 for y in ys], short, 0.4, color=SHORT_COLOUR)
    side.barh([y + 0.2 for y in ys], extra, 0.4, color=EXTRA_COLOUR)
    side.set_xscale("symlog", linthresh=1)
    if not any(short) and not any(extra):
        side.set_xlim(0, 10)
        side.text(0.5, 0.5, "no findings:\nthe workload issues\nwhat Megatron issues",
                  ha="center", va="center", fontsize=9, transform=side.transAxes)
    side.set_xlabel("audit: bytes per iteration (MiB)")
    side.set_title("against Megatron", fontsize=9)
    side.grid(axis="x", alpha=0.3)
    return [Patch(facecolor=SHORT_COLOUR, label="short of Megatron (missing)"),
            Patch(facecolor=EXTRA_COLOUR, label="in excess of Megatron (extra)")]


def draw(workload_path: Path, times: list, setup, output: Path, *, stage: int = 0,
         audit_csv: Path | None = None, title: str | None = None) -> None:
    """The chart of the workload at ``workload_path``; ``times`` are its rows' simulated times
    (``timeline.read_endtoend`` of the point's EndToEnd.csv, or ``timeline.simulate``);
    ``audit_csv``: its audit, drawn beside."""
    from matplotlib.patches import Patch

    from ...base.files import read_text
    from ...workload import format as wf
    from .. import audit as audit_mod
    from .. import timeline as tl

    plt = cv.pyplot()
    workload = wf.read(workload_path)
    units = audit_mod.segment(workload, setup.stage_layer_count(stage), stage * setup.layers_per_stage,
                              layer_ids=list(layer for chunk in range(setup.virtual_pipeline)
                                             for layer in setup.chunk_layers(stage, chunk)))
    events = tl.events(workload, times, units)
    by_lane = None
    if audit_csv is not None:
        by_lane = tl.audit_by_lane(audit_mod.read_csv(read_text(audit_csv), source=audit_csv))
    lanes = tl.lanes(units, by_lane or ())
    height = 0.17 * len(lanes) + 1.9
    if by_lane is not None:
        fig, (ax, side) = plt.subplots(1, 2, figsize=(12, height), sharey=True,
                                       gridspec_kw={"width_ratios": [4, 1.3]})
    else:
        fig, ax = plt.subplots(figsize=(10, height))
    total, exposed = _gantt(ax, events, lanes)
    present = [w for w in COLOURS if any(e.what == w for e in events)]
    handles = [Patch(facecolor=COLOURS[w], label="compute" if w == "compute" else f"{w} communication (exposed)")
               for w in present]
    if by_lane is not None:
        handles += _audit_side(side, by_lane, lanes)
    fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False, fontsize=8)
    heading = title or Path(workload_path).parent.name
    fig.suptitle(f"{heading}\niteration {total:,.1f} ms, exposed communication {exposed:,.1f} ms", fontsize=10)
    fig.tight_layout(rect=(0, 0.8 / height, 1, 0.99))
    cv.finish(fig, output)
