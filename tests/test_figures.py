"""Every figure of a sweep, drawn from a real sweep's tables, is readable as drawn: no legend over
data, no tick labels over each other, no text off the figure (figures.layout, from
matplotlib's extents), letters no smaller than 7 points, and the answer's figure about as wide
as the report's front page shows it. tests/test_answer_workflow.py looks at the report itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from commsweep.base import paths
from commsweep.orchestration import batch, cli, sweep
from commsweep.analysis import summary, timeline
from commsweep.analysis.figures import canvas, difference_by_cause, names, plot
from commsweep.analysis.figures.layout import layout_problems
from test_causes import default_config, run_sweep

# The report's front page shows the answer's figure at most this wide (workflow/report/workflow.rst:
# 72rem, in a window of about 1400 pixels less the menu); drawn much wider, its letters shrink.
FRONT_PAGE_PX = 1152


CONFIG = default_config(tp=[1, 2, 8], network=["netA"])


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """The results folder of the default sweep at TP 1, 2 and 8 on netA (24 points), with the
    tables the figures read."""
    results = tmp_path_factory.mktemp("figures") / "results"
    rows = run_sweep(results, CONFIG)
    assert len(rows) == 24
    files = paths.PointFiles.under(results)
    (results / "summary.csv").write_text(summary.summarize(results / "sweep.csv", files))
    tables = {name: results / f"{name}.csv" for name in ("findings", "comparison", "verdicts", "findings_by_kind")}
    assert cli.main(["compare", "--sweep", str(results / "sweep.csv"), "--summary", str(results / "summary.csv"),
                     "--results", str(results), "--findings", str(tables["findings"]),
                     "--comparison", str(tables["comparison"]), "--verdicts", str(tables["verdicts"]),
                     "--by-kind", str(tables["findings_by_kind"])]) == 0
    assert cli.main(["causes", "--sweep", str(results / "sweep.csv"), "--results", str(results),
                     "-o", str(results / "difference_by_cause.csv")]) == 0
    return results


@pytest.fixture(scope="module")
def drawn(results):
    """The figures of that sweep, each figure object kept as canvas.save got it."""
    config = CONFIG
    tables = {"findings_by_kind": results / "findings_by_kind.csv"}
    figures: dict[str, object] = {}
    save = canvas.save

    def keep(fig, path):
        figures[Path(path).stem] = fig
        save(fig, path)

    canvas.save = keep
    try:
        out = results / "plots"
        out.mkdir()
        summary_csv = results / "summary.csv"
        for name in (names.VOLUME_BY_TP, names.TP_BYTES_BY_PHASE, names.EXPOSED_BY_GROUP, names.EXPOSED_TP_BY_OVERLAP):
            plot.DRAW[name](summary_csv, out / f"{name}.png")
        plot.DRAW[names.AUDIT_BY_KIND](tables["findings_by_kind"], out / "audit_by_kind.png")
        plot.DRAW[names.DIFFERENCE_BY_CAUSE](results / "difference_by_cause.csv", out / "difference_by_cause.png")
        points, _ = sweep.points_from_config(config)
        point = next(p for p in points if p.schedule == "aicb" and p.aiob and p.tp == 2 and not p.sp)
        assert cli.main(["timeline", paths.workload_file(results, point.workload_key).as_posix(),
                         (paths.point_dir(results, point.point_key) / "EndToEnd.csv").as_posix(),
                         *batch.point_argv(point, config), "--title", timeline.title(point),
                         "--audit", paths.audit_file(results, point.point_key).as_posix(),
                         "-o", str(out / "timeline.png")]) == 0
    finally:
        canvas.save = save
    return figures


NAMES = ["volume_by_tp", "tp_bytes_by_phase", "exposed_by_group", "exposed_tp_by_overlap", "audit_by_kind",
         "difference_by_cause", "timeline"]


@pytest.mark.parametrize("name", NAMES)
def test_the_figure_has_no_legend_over_data_and_no_text_over_text(drawn, name):
    assert layout_problems(drawn[name]) == []


@pytest.mark.parametrize("name", NAMES)
def test_the_figure_letters_are_large_enough(drawn, name):
    fig = drawn[name]
    sizes = {t.get_fontsize() for t in fig.findobj(lambda a: hasattr(a, "get_fontsize") and hasattr(a, "get_text"))
             if t.get_visible() and t.get_text().strip()}
    assert min(sizes) >= 7


def test_the_answers_figure_is_drawn_at_the_width_the_report_shows(drawn):
    fig = drawn["difference_by_cause"]
    width = fig.get_figwidth() * canvas.DPI
    assert 0.8 * FRONT_PAGE_PX <= width <= FRONT_PAGE_PX
    # The question's cause has panels of its own, on its own scale, first.
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[:2] == ["The question's cause alone: bytes", "The question's cause alone: exposed TP time, netA"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[0] == difference_by_cause.QUESTION and len(legend) <= difference_by_cause.NAMED_CAUSES + 3
    assert any(t.endswith("smaller causes (difference_by_cause.csv)") for t in legend)


def test_each_generator_of_the_exposed_figure_has_a_hatch_of_its_own(drawn):
    """Megatron with and without AIOB times are different points: the legend tells them apart."""
    legend = drawn[names.EXPOSED_BY_GROUP].legends[0]
    hatches = {t.get_text(): h.get_hatch() for t, h in zip(legend.get_texts(), legend.legend_handles)
               if not t.get_text().endswith(" group")}
    assert set(hatches) == {"AICB default path", "AICB AIOB path", "Megatron", "Megatron (AIOB times)"}
    assert len(set(hatches.values())) == 4


def test_the_timeline_is_titled_in_words(drawn):
    title = drawn["timeline"]._suptitle.get_text()
    assert title.startswith("gpt-7b, 16 GPUs, TP 2, PP 1, SP off, AICB, AIOB times, network netA\n")
    assert "_ws16_" not in title


def test_the_check_finds_a_legend_over_bars_and_labels_over_each_other():
    plt = canvas.pyplot()
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar([0, 1, 2], [3, 5, 4], label="bars")
    ax.legend(loc="center")
    ax.set_xticks([0, 0.05, 2], ["a long tick label", "another long one", "c"])
    found = layout_problems(fig)
    plt.close(fig)
    assert "the legend covers data of the axes titled ''" in found
    assert "tick labels 'a long tick label' and 'another long one' overlap in ''" in found


# -- the data each figure draws, shaped apart from the drawing --------------------------------


def volume_rows(results):
    """The summary's complete rows with volumes, read by the table's own reader."""
    return [r for r in summary.read(results / "summary.csv").rows if r.ok and r.volume is not None]


def generator(row) -> str:
    return canvas.variant(row.point.schedule, row.point.aiob)


def test_volume_by_tp_stacks_each_points_bytes_by_phase_and_averages_the_generators_points(results):
    from commsweep.analysis.figures import tables, volume_by_tp

    df = tables.first_network_volumes(results / "summary.csv")
    per_point: dict[tuple, dict[str, int]] = {}
    for r in volume_rows(results):
        key = (r.point.model, r.point.sp, r.point.tp, generator(r))
        per_point.setdefault(key, {}).setdefault(r.point.point, 0)
        per_point[key][r.point.point] += r.volume.payload_bytes
    for sp in (False, True):
        tps, bars = volume_by_tp.heights(df, "gpt-7b", sp, list(canvas.VARIANT_ORDER), list(canvas.PHASE_LABELS))
        assert tps == [1, 2, 8]
        for var, by_phase in bars.items():
            for i, tp in enumerate(tps):
                points = per_point[("gpt-7b", sp, tp, var)]
                # Megatron's two variants (with and without AIOB times) send the same bytes: averaged.
                assert len(points) == (2 if var == "Megatron" else 1)
                total = sum(points.values()) / len(points) / canvas.GiB
                assert sum(h[i] for h in by_phase.values()) == pytest.approx(total, rel=1e-12)
    # Without TP there are no TP bytes; at TP 8 the AIOB path sends less than the default path.
    _, bars = volume_by_tp.heights(df, "gpt-7b", False, ["AICB default path", "AICB AIOB path"], ["ig"])
    assert bars["AICB AIOB path"]["ig"][2] < bars["AICB default path"]["ig"][2]


def test_tp_bytes_by_phase_is_nan_where_no_point_is_and_sums_tp_rows_per_phase(results):
    from commsweep.analysis.figures import tables, tp_bytes_by_phase

    df = tables.first_network_volumes(results / "summary.csv")
    phases = tp_bytes_by_phase.phases_of(df)
    assert phases == ["fwd", "ig", "wg"] or phases == ["fwd", "ig"]
    bars = tp_bytes_by_phase.heights(df, ["AICB AIOB path", "Megatron"], phases)
    expected: dict[str, int] = {}
    for r in volume_rows(results):
        p = r.point
        if (p.sp, p.tp, p.schedule, p.aiob) == (False, 2, "aicb", True) and r.volume.group == "TP":
            expected[r.volume.phase] = expected.get(r.volume.phase, 0) + r.volume.payload_bytes
    assert bars["gpt-7b", False, 2, "AICB AIOB path"] == pytest.approx(
        [expected.get(ph, 0) / canvas.GiB for ph in phases])
    # The AIOB path's backward all-reduces are NONE: less input-grad TP bytes than the default path's.
    ig = phases.index("ig")
    both = tp_bytes_by_phase.heights(df, ["AICB default path", "AICB AIOB path"], phases)
    assert both["gpt-7b", False, 2, "AICB AIOB path"][ig] < both["gpt-7b", False, 2, "AICB default path"][ig]
    sparse = tp_bytes_by_phase.heights(df[df["variant"] != "Megatron"], ["Megatron"], phases)
    assert all(h != h for bars in sparse.values() for h in bars)  # NaN: no bar, not a zero one


def test_exposed_by_group_takes_each_groups_exposed_time_and_flags_simai_overflow(results):
    from commsweep.analysis.figures import exposed_by_group, tables

    df = tables.read_summary(results / "summary.csv")
    columns = exposed_by_group.exposed_columns(df.columns)
    assert "TP" in columns and "DP" in columns
    df["variant"] = [canvas.variant_of(s, a) for s, a in zip(df["schedule"], df["aiob"])]
    points = df.drop_duplicates("point")
    groups = exposed_by_group.shown_groups(points, columns)
    sub = points[(points["aiob"]) & (~points["sp"])]
    got = exposed_by_group.bars(sub, "aicb_aiob", [1, 2, 8], groups, columns)
    assert got.overflow == [False, False, False]
    assert got.heights["TP"][0] == 0.0  # TP 1
    one = sub[(sub["tp"] == 2) & (sub["variant"] == "aicb_aiob")]
    assert got.heights["TP"][1] == pytest.approx(float(one[columns["TP"]].iloc[0]) / 1000)
    broken = sub.copy()
    broken.loc[broken["tp"] == 8, columns["DP"]] = 9.2e15  # SimAI's overflow sentinel
    flagged = exposed_by_group.bars(broken, "aicb_aiob", [1, 2, 8], groups, columns)
    assert flagged.overflow == [False, False, True] and all(h[2] == 0.0 for h in flagged.heights.values())


def test_audit_by_kind_stacks_excess_up_and_shortfall_down(results):
    from commsweep.analysis.compare import read_by_kind
    from commsweep.analysis.figures import audit_by_kind, tables

    df = tables.frame(*read_by_kind(results / "findings_by_kind.csv"))
    df["variant"] = [canvas.variant(s, a) for s, a in zip(df["schedule"], df["aiob"])]
    totals = audit_by_kind.sums(df)
    assert (totals["up"] >= 0).all() and (totals["down"] <= 0).all()
    kinds = audit_by_kind.kinds_moving_bytes(df)
    assert "missing" in kinds and "none_with_size" not in kinds
    chosen = df[(df["sp"] == False) & (df["tp"] == 8) & (df["variant"] == "AICB AIOB path")]  # noqa: E712
    ups, downs = zip(*(audit_by_kind.heights(totals, "gpt-7b", False, [8], "AICB AIOB path", k) for k in kinds))
    assert sum(d[0] for d in downs) == pytest.approx(-chosen["missing_bytes"].sum() / canvas.GiB)
    assert sum(u[0] for u in ups) == pytest.approx(chosen["extra_bytes"].sum() / canvas.GiB)


def test_difference_by_cause_segments_add_up_to_the_net_difference_the_question_first(results):
    from commsweep.analysis import causes
    from commsweep.setup.points import read_points

    rows = causes.read_csv(results / "difference_by_cause.csv")
    panels = causes.panels(rows, {p.point: p for p in read_points(results / "sweep.csv")})
    colours = difference_by_cause.cause_colours(rows, panels)
    assert colours[difference_by_cause.QUESTION] == difference_by_cause.QUESTION_COLOUR
    order = [difference_by_cause.QUESTION] + [c for c in colours if c != difference_by_cause.QUESTION]
    for panel in panels:
        for path, mine in panel.rows.items():
            segments = difference_by_cause.segments(mine, order, "GiB")
            assert all(s.extra >= 0 >= s.short and (s.extra or s.short) for s in segments)
            net = sum(s.extra + s.short for s in segments)
            assert net == pytest.approx(panel.total(path) / canvas.GiB, abs=1e-9)
    question = difference_by_cause.question_settings(panels)
    assert [panel.label for _, panel in question] == ["gpt-7b, TP 1, SP off", "gpt-7b, TP 2, SP off",
                                                      "gpt-7b, TP 8, SP off"]
    dropped = difference_by_cause.question_heights(question, "aicb_aiob", "GiB")
    assert dropped[0] == 0 and dropped[1] < 0 and dropped[2] < dropped[1]
    assert difference_by_cause.segments(question[1][1].rows["aicb_aiob"], order, "GiB")[0].cause == \
        difference_by_cause.QUESTION
    ticks, common = difference_by_cause.tick_labels(panels)
    assert common == "gpt-7b" and ticks[:2] == ["TP 1\nSP off", "TP 2\nSP off"]
    assert difference_by_cause.wrap("global batch 1024-long-word", 10) == "global batch 1024-\nlong-word"


def test_exposed_tp_by_overlap_keeps_the_simulated_points_with_tp(results):
    from commsweep.analysis.figures import exposed_tp_by_overlap, tables

    df = tables.read_summary(results / "summary.csv")
    points = exposed_tp_by_overlap.simulated_points(df, 0.25)
    assert set(points["tp"]) == {2, 8} and set(points["tp_overlap"]) == {0.25} and set(points["ep"]) == {1}
    assert exposed_tp_by_overlap.panels_of(points) == [("gpt-7b", 1, tp, sp) for tp in (2, 8) for sp in (False, True)]


def test_exposed_tp_by_overlap_draws_only_what_was_simulated(results, drawn):
    """No line through a ratio the sweep never simulated: every point drawn is a simulated one."""
    from commsweep.analysis.figures import exposed_tp_by_overlap, tables

    points = exposed_tp_by_overlap.simulated_points(tables.read_summary(results / "summary.csv"))
    simulated = {(float(r), round(float(t) / 1000, 9)) for r, t in zip(points["tp_overlap"], points["sim_tp_us"])}
    fig = drawn[names.EXPOSED_TP_BY_OVERLAP]
    plotted = [(float(x), round(float(y), 9)) for ax in fig.axes for line in ax.lines
               for x, y in zip(line.get_xdata(), line.get_ydata())]
    assert plotted and set(plotted) <= simulated
    # One ratio simulated: markers alone, no line, and the title says how to get lines.
    assert all(line.get_linestyle() == "None" for ax in fig.axes for line in ax.lines)
    assert "simulated at one ratio only (0): list several in sweep.tp_overlap" in fig._suptitle.get_text()


def test_exposed_tp_by_overlap_joins_the_ratios_simulated_in_order(results):
    from commsweep.analysis.figures import exposed_tp_by_overlap, tables

    import pandas as pd

    points = exposed_tp_by_overlap.simulated_points(tables.read_summary(results / "summary.csv"))
    # The same points simulated again at ratio 0.5, exposing half their TP time, as SimAI does.
    half = points.assign(tp_overlap=0.5, sim_tp_us=points["sim_tp_us"] / 2)
    both = pd.concat([half, points])
    sub = both[(both["tp"] == 8) & (~both["sp"])]
    curves = {c.variant: c for c in exposed_tp_by_overlap.curves(sub)}
    assert set(curves) == {"aicb_default", "aicb_aiob", "megatron_aiob"}  # one Megatron curve: the same exposure
    for variant, curve in curves.items():
        first = sub[(sub["variant"] == variant) & (sub["tp_overlap"] == 0.0)]["sim_tp_us"].mean() / 1000
        assert curve.ratios == (0.0, 0.5) and curve.exposed_ms == pytest.approx((first, first / 2))
