"""Every figure of a sweep, drawn from a real sweep's tables, is readable as drawn: no legend over
data, no tick labels over each other, no text off the figure (plots.layout_problems, from
matplotlib's extents), letters no smaller than 7 points, and the answer's figure about as wide
as the report's front page shows it. tests/test_answer_workflow.py looks at the report itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from commsweep.base import paths
from commsweep.orchestration import batch, cli, sweep
from commsweep.analysis import plots, summary, timeline
from test_causes import default_config, run_sweep

# The report's front page shows the answer's figure at most this wide (workflow/report/workflow.rst:
# 72rem, in a window of about 1400 pixels less the menu); drawn much wider, its letters shrink.
FRONT_PAGE_PX = 1152


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    """The figures of the default sweep at TP 1, 2 and 8 on netA (24 points), each figure
    object kept as plots.save got it."""
    results = tmp_path_factory.mktemp("figures") / "results"
    config = default_config(tp=[1, 2, 8], network=["netA"])
    rows = run_sweep(results, config)
    files = paths.PointFiles.under(results)
    (results / "summary.csv").write_text(summary.summarize(results / "sweep.csv", files))
    tables = {name: results / f"{name}.csv" for name in ("findings", "comparison", "verdicts", "findings_by_kind")}
    assert cli.main(["compare", "--sweep", str(results / "sweep.csv"), "--summary", str(results / "summary.csv"),
                     "--results", str(results), "--findings", str(tables["findings"]),
                     "--comparison", str(tables["comparison"]), "--verdicts", str(tables["verdicts"]),
                     "--by-kind", str(tables["findings_by_kind"])]) == 0
    assert cli.main(["causes", "--sweep", str(results / "sweep.csv"), "--results", str(results),
                     "-o", str(results / "difference_by_cause.csv")]) == 0
    figures: dict[str, object] = {}
    save = plots.save

    def keep(fig, path):
        figures[Path(path).stem] = fig
        save(fig, path)

    plots.save = keep
    try:
        out = results / "plots"
        out.mkdir()
        summary_csv = results / "summary.csv"
        for kind in ("volume-by-tp", "tp-bytes-by-phase", "exposed-by-group", "exposed-tp-by-overlap"):
            plots.PLOTS[kind](summary_csv, out / f"{kind.replace('-', '_')}.png")
        plots.audit_by_kind(tables["findings_by_kind"], out / "audit_by_kind.png")
        plots.difference_by_cause(results / "difference_by_cause.csv", out / "difference_by_cause.png")
        points, _ = sweep.points_from_config(config)
        point = next(p for p in points if p.schedule == "aicb" and p.aiob and p.tp == 2 and not p.sp)
        assert cli.main(["timeline", paths.workload_file(results, point.workload_key).as_posix(),
                         (paths.point_dir(results, point.point_key) / "EndToEnd.csv").as_posix(),
                         *batch.point_argv(point, config), "--title", timeline.title(point),
                         "--audit", paths.audit_file(results, point.point_key).as_posix(),
                         "-o", str(out / "timeline.png")]) == 0
    finally:
        plots.save = save
    assert len(rows) == 24
    return figures


NAMES = ["volume_by_tp", "tp_bytes_by_phase", "exposed_by_group", "exposed_tp_by_overlap", "audit_by_kind",
         "difference_by_cause", "timeline"]


@pytest.mark.parametrize("name", NAMES)
def test_the_figure_has_no_legend_over_data_and_no_text_over_text(drawn, name):
    assert plots.layout_problems(drawn[name]) == []


@pytest.mark.parametrize("name", NAMES)
def test_the_figure_letters_are_large_enough(drawn, name):
    fig = drawn[name]
    sizes = {t.get_fontsize() for t in fig.findobj(lambda a: hasattr(a, "get_fontsize") and hasattr(a, "get_text"))
             if t.get_visible() and t.get_text().strip()}
    assert min(sizes) >= 7


def test_the_answers_figure_is_drawn_at_the_width_the_report_shows(drawn):
    fig = drawn["difference_by_cause"]
    width = fig.get_figwidth() * 110  # plots.save's dpi
    assert 0.8 * FRONT_PAGE_PX <= width <= FRONT_PAGE_PX
    # The question's cause has panels of its own, on its own scale, first.
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[:2] == ["The question's cause alone: bytes", "The question's cause alone: exposed TP time, netA"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[0] == plots.QUESTION and len(legend) <= plots.NAMED_CAUSES + 3
    assert any(t.endswith("smaller causes (difference_by_cause.csv)") for t in legend)


def test_the_timeline_is_titled_in_words(drawn):
    title = drawn["timeline"]._suptitle.get_text()
    assert title.startswith("gpt-7b, 16 GPUs, TP 2, PP 1, SP off, AICB, AIOB times, network netA\n")
    assert "_ws16_" not in title


def test_the_check_finds_a_legend_over_bars_and_labels_over_each_other():
    plt = plots._pyplot()
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar([0, 1, 2], [3, 5, 4], label="bars")
    ax.legend(loc="center")
    ax.set_xticks([0, 0.05, 2], ["a long tick label", "another long one", "c"])
    found = plots.layout_problems(fig)
    plt.close(fig)
    assert "the legend covers data of the axes titled ''" in found
    assert "tick labels 'a long tick label' and 'another long one' overlap in ''" in found
